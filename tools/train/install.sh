#!/bin/sh
# install.sh — stage 5: put the GPU stages' outputs (in tools/train/out/) in place.
set -eu
cd "$(dirname "$0")/../.."
o=tools/train/out
cat $o/kakeya-chat.gguf.part0 $o/kakeya-chat.gguf.part1 > data/models/kakeya-chat.gguf
cp $o/kakeya-draft.gguf data/models/kakeya-draft.gguf
cp $o/tokenizer.json data/models/kakeya-tokenizer.json
cp $o/target*.log tools/train/runs/ 2>/dev/null || true
cp $o/draft*.log tools/train/runs/ 2>/dev/null || true
cp $o/eval.json tools/train/runs/eval.json
ls -l data/models
