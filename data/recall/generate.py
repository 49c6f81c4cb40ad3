#!/usr/bin/env python3
"""Needle-in-a-haystack documents for `make eval-recall` (fixed seeds).

The haystack is real documentation text: the man-page excerpts of the
held-out set data/eval/man_opt.jsonl, stacked until a document reaches its
target length. One needle, a planted fact "The <attribute> of <entity> is
<value>.", goes in at a chosen depth; the question asks for it. The output,
data/recall/needles.jsonl, is committed, so every run scores the very same
documents: re-running this script reproduces it byte for byte.

    python3 data/recall/generate.py > data/recall/needles.jsonl
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261122
LENGTHS = [600, 1500, 3000, 4500, 6000]      # characters (~4 per token)
DEPTHS = [0.1, 0.5, 0.9]
PER_CELL = 2

ENTITIES = ["the Alder project", "the Birch archive", "the Cedar lab",
            "the Delta office", "the Elm committee", "the Fir station",
            "the Garnet team", "the Hazel library", "the Iris workshop",
            "the Juniper fleet"]
ATTRIBUTES = ["capacity", "budget", "team size", "opening year",
              "room number", "code"]


def haystack_paragraphs():
    path = os.path.join(HERE, "..", "eval", "man_opt.jsonl")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            text = item["messages"][1]["content"]
            # drop the question that ends each item
            body = text.rsplit("\n\n", 1)[0].strip()
            if body:
                out.append(body)
    return out


def make_doc(rng, paragraphs, length, depth, needle):
    parts, size = [], 0
    while size < length:
        p = rng.choice(paragraphs)
        parts.append(p)
        size += len(p) + 2
    at = min(len(parts), max(0, round(depth * len(parts))))
    parts.insert(at, needle)
    return "\n\n".join(parts)


def main():
    rng = random.Random(SEED)
    paragraphs = haystack_paragraphs()
    for length in LENGTHS:
        for depth in DEPTHS:
            for _ in range(PER_CELL):
                entity = rng.choice(ENTITIES)
                attribute = rng.choice(ATTRIBUTES)
                value = str(rng.randint(1000, 9999))
                needle = f"The {attribute} of {entity} is {value}."
                doc = make_doc(rng, paragraphs, length, depth, needle)
                question = f"What is the {attribute} of {entity}?"
                user = ("Read the following document and answer the "
                        f"question.\n\n{doc}\n\nQuestion: {question}")
                print(json.dumps({
                    "length_chars": length, "depth": depth,
                    "answer": value,
                    "messages": [
                        {"role": "system",
                         "content": "You are Kakeya, a helpful assistant."},
                        {"role": "user", "content": user}],
                }, ensure_ascii=False))


if __name__ == "__main__":
    main()
