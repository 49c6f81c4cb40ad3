#!/bin/sh
# gpu_draft.sh — GPU stage 2 (repo root, $OUT set): distil the draft from the
# target GGUF, evaluate both in PyTorch, export the draft GGUF.
# Needs tools/corpus/out/pack/*.xz and tools/train/out/{kakeya-chat.gguf.part*,tokenizer.json} (carried).
set -eu
mkdir -p /tmp/corpus /tmp/kw
for f in tools/corpus/out/pack/*.xz; do xz -dc "$f" > "/tmp/corpus/$(basename "$f" .xz)"; done
cat tools/train/out/kakeya-chat.gguf.part* > /tmp/kw/kakeya-chat.gguf
PYTHONUNBUFFERED=1 python3 tools/train/train.py draft --corpus /tmp/corpus --work /tmp/kw \
    --out "$OUT" --target /tmp/kw/kakeya-chat.gguf --tokenizer tools/train/out/tokenizer.json \
    --minutes "${MINUTES:-5}" --total-minutes "${TOTAL_MINUTES:-9.2}" --reserve-s 230 \
    --lr 3e-3 --n-doc 40000 --n-man 20000 2>&1 | tee "$OUT/draft.log"
