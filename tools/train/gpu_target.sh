#!/bin/sh
# gpu_target.sh — GPU stage 3 (run from the repo root on the GPU machine, $OUT set):
# tokenizer + chat data + target training + Q8_0 GGUF export and check.
# Needs tools/corpus/out/pack/*.xz (made by tools/corpus/pack.sh, carried).
# With CONTINUE=1 it continues training the target in tools/train/out/
# (kakeya-chat.gguf.part*, tokenizer.json; carried) on fresh chat data.
set -eu
mkdir -p /tmp/corpus /tmp/kw
for f in tools/corpus/out/pack/*.xz; do xz -dc "$f" > "/tmp/corpus/$(basename "$f" .xz)"; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
extra="--lr 2e-3 --warm 200 --chat-seed 7"
log=target.log
if [ "${CONTINUE:-0}" = 1 ]; then
    cat tools/train/out/kakeya-chat.gguf.part* > /tmp/kw/init.gguf
    extra="--init /tmp/kw/init.gguf --tokenizer tools/train/out/tokenizer.json --lr 1e-3 --warm 100 --chat-seed 8"
    log=target-continue.log
fi
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 python3 tools/train/train.py target --corpus /tmp/corpus --work /tmp/kw \
    --out "$OUT" --minutes "${MINUTES:-8}" --total-minutes "${TOTAL_MINUTES:-9.1}" --reserve-s 40 \
    $extra 2>&1 | tee "$OUT/$log"
