#!/usr/bin/env python3
"""kakeya_eval.py — exact match and tau of the default models through kakeya's own engine.

Runs `build/kakeya ask --model T --draft D` (greedy, the engine's speculative
loop) on the single-turn items of data/eval/*.jsonl and reads the answer
(stdout) and the "[N tokens, ... tau T; ...]" line (stderr).
  python3 tools/train/kakeya_eval.py [--per-set 20] [--out tools/train/runs/eval-kakeya.json]
"""
import argparse, json, os, re, subprocess, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--kakeya", default="build/kakeya")
ap.add_argument("--model", default="data/models/kakeya-chat.gguf")
ap.add_argument("--draft", default="data/models/kakeya-draft.gguf")
ap.add_argument("--eval-dir", default="data/eval")
ap.add_argument("--per-set", type=int, default=20)
ap.add_argument("--out", default="tools/train/runs/eval-kakeya.json")
a = ap.parse_args()
res, rows = {}, []
for name in ("doc", "man_opt", "dict", "man_what"):
    items = [json.loads(x) for x in open(os.path.join(a.eval_dir, name + ".jsonl"))]
    items = [it for it in items if [m["role"] for m in it["messages"] if m["role"] != "system"] == ["user", "assistant"]]
    items = items[:a.per_set]
    tok = steps = ok = n = 0
    t0 = time.time()
    for it in items:
        q = [m for m in it["messages"] if m["role"] == "user"][0]["content"]
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([a.kakeya, "ask", "--model", a.model, "--draft", a.draft, "--db",
                                os.path.join(d, "k.db"), q], capture_output=True, text=True, timeout=300)
        m = re.search(r"\[(\d+) tokens, [^,]*, tau ([0-9.]+)", r.stderr)
        if r.returncode != 0 or not m:
            print("failed:", r.returncode, r.stderr[-300:])
            continue
        ntok, tau = int(m.group(1)), float(m.group(2))
        good = r.stdout.strip() == it["answer"].strip()
        n += 1
        ok += good
        tok += ntok
        steps += ntok / tau
        rows.append({"set": name, "ok": good, "tokens": ntok, "tau": tau, "output": r.stdout.strip(),
                     "answer": it["answer"]})
    res[name] = {"n": n, "exact_match": ok / max(n, 1), "tau": tok / max(steps, 1e-9), "tokens": tok}
    print(f"{name}: n={n} EM={ok / max(n, 1):.3f} tau={res[name]['tau']:.3f} ({time.time() - t0:.0f}s)", flush=True)
tt = sum(v["tokens"] for v in res.values())
ts = sum(v["tokens"] / v["tau"] for v in res.values() if v["tau"] > 0)
res["all"] = {"tau": tt / ts}
print(f"all: tau={tt / ts:.3f}")
json.dump({"results": res, "rows": rows}, open(a.out, "w"), indent=1)
