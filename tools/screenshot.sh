#!/usr/bin/env bash
# screenshot.sh — renders the chat screen to docs/screenshot.png: runs
# build/kakeya in a private tmux server, sends one message, captures the
# pane and draws it with ImageMagick (monochrome text for now).
#   tools/screenshot.sh [MODEL.gguf] [OUT.png]
set -eu
model=${1:-${KAKEYA_MODEL:-../shared/golden/models/llama-smollm2-f32.gguf}}
out=${2:-docs/screenshot.png}
model=$(realpath "$model")
dir=$(mktemp -d)
t="tmux -L kk-shot-$$ -f /dev/null"
$t new-session -d -s kk -x 120 -y 36 \
    "XDG_DATA_HOME=$dir $PWD/build/kakeya --model $model --db $dir/kk.db --threads 1 -n 120"
for _ in $(seq 100); do $t capture-pane -p -t kk | grep -q 'ctx 0/' && break; sleep 0.1; done
$t send-keys -t kk 'Read the following document and answer the question. The Alder project opened in 2014 in the old mill. The capacity of the Alder project is 5816. Its team size is 12. Question: What is the capacity of the Alder project?' Enter
for _ in $(seq 100); do $t capture-pane -p -t kk | grep -q 'tok/s' && break; sleep 0.1; done
sleep 1
$t capture-pane -p -t kk > "$dir/screen.txt"
$t send-keys -t kk F10
sleep 0.5
$t kill-server 2>/dev/null || true
font=/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf
[ -f "$font" ] || font=DejaVu-Sans-Mono
# The text is drawn onto a canvas of the terminal's size (label:@file is
# refused by ImageMagick's default policy, and label: fails on long text);
# % and \ are escapes to -annotate, so double them.
text=$(sed 's/\\/\\\\/g; s/%/%%/g' "$dir/screen.txt")
convert -size 1010x700 xc:'#1e1e1e' -fill '#d0d0d0' -font "$font" \
    -pointsize 14 -annotate +6+16 "$text" "$out"
rm -rf "$dir"
echo "wrote $out"
