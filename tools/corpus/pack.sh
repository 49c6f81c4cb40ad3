#!/bin/sh
# pack.sh — compress the extracted corpus for the GPU machine (carried as
# tools/corpus/out/pack, which git ignores).
set -eu
cd "$(dirname "$0")/out"
mkdir -p pack
for f in docs man dict; do xz -T0 -6 -c "$f.jsonl" > "pack/$f.jsonl.xz"; done
ls -l pack
