#!/usr/bin/env python3
"""make_eval.py — held-out test sets under data/eval/ (from the corpus' validation split).

  python3 tools/train/make_eval.py [--corpus tools/corpus/out] [--out data/eval]
Writes doc.jsonl, man_opt.jsonl, man_what.jsonl, dict.jsonl: one conversation a
line; the last message is the reference assistant answer ("answer" repeats it).
Scoring: greedy decode of the prompt (all messages but the last, plus
"<|im_start|>assistant\\n") until <|im_end|>; exact match after strip().
"""
import argparse, json, os, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--corpus", default="tools/corpus/out")
ap.add_argument("--out", default="data/eval")
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
tmp = os.path.join(a.out, ".all.tmp")
subprocess.run([sys.executable, os.path.join(here, "chatgen.py"), "--corpus", a.corpus, "--split", "test",
                "--out", tmp, "--seed", "99", "--n-doc", "500", "--n-man", "700", "--n-dict", "300"], check=True)
sets = {"doc": [], "man_opt": [], "man_what": [], "dict": []}
for line in open(tmp):
    s = json.loads(line)
    k = "dict" if s["kind"].startswith("dict") else s["kind"]
    if k == "doc" and s["turns"] > 1 and len([x for x in sets["doc"] if x["turns"] > 1]) > 150:
        continue
    if k in sets:
        sets[k].append(s)
os.remove(tmp)
for k, v in sets.items():
    with open(os.path.join(a.out, k + ".jsonl"), "w") as f:
        for s in v[:400]:
            f.write(json.dumps(s) + "\n")
    print(k, min(len(v), 400))
