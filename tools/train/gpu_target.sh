#!/bin/sh
# gpu_target.sh — GPU stage 1 (run from the repo root on the GPU machine, $OUT set):
# tokenizer + chat data + target training + Q8_0 GGUF export and check.
# Needs tools/corpus/out/pack/*.xz (made by tools/corpus/pack.sh, carried).
set -eu
mkdir -p /tmp/corpus
for f in tools/corpus/out/pack/*.xz; do xz -dc "$f" > "/tmp/corpus/$(basename "$f" .xz)"; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
PYTHONUNBUFFERED=1 python3 tools/train/train.py target --corpus /tmp/corpus --work /tmp/kw \
    --out "$OUT" --minutes "${MINUTES:-7}" --total-minutes "${TOTAL_MINUTES:-9.1}" --reserve-s 40 \
    2>&1 | tee "$OUT/target.log"
