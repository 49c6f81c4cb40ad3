#!/bin/sh
# gpu_draft.sh — GPU stage 4 (repo root, $OUT set): distil the draft from the
# target GGUF, evaluate both in PyTorch, export the draft GGUF.
# Needs tools/corpus/out/pack/*.xz and tools/train/out/{kakeya-chat.gguf.part*,tokenizer.json} (carried).
# With CONTINUE=1 it continues distilling tools/train/out/kakeya-draft.gguf.
set -eu
mkdir -p /tmp/corpus /tmp/kw
for f in tools/corpus/out/pack/*.xz; do xz -dc "$f" > "/tmp/corpus/$(basename "$f" .xz)"; done
cat tools/train/out/kakeya-chat.gguf.part* > /tmp/kw/kakeya-chat.gguf
extra="--lr 3e-3 --warm 100"
log=draft.log
if [ "${CONTINUE:-0}" = 1 ]; then
    cp tools/train/out/kakeya-draft.gguf /tmp/kw/init-draft.gguf
    extra="--init /tmp/kw/init-draft.gguf --lr 1e-3 --warm 50 --chat-seed 9"
    log=draft-continue.log
fi
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 python3 tools/train/train.py draft --corpus /tmp/corpus --work /tmp/kw \
    --out "$OUT" --target /tmp/kw/kakeya-chat.gguf --tokenizer tools/train/out/tokenizer.json \
    --minutes "${MINUTES:-5}" --total-minutes "${TOTAL_MINUTES:-9.0}" --reserve-s "${RESERVE_S:-200}" \
    --eval-n "${EVAL_N:-250}" --tau-n 100 --n-doc 40000 --n-man 20000 $extra 2>&1 | tee "$OUT/$log"
