#!/usr/bin/env python3
"""np_engine.py — a small numpy reference of what kakeya's engine does, for CPU evaluation.

- BpeTokenizer: byte-level BPE from a HF tokenizer.json with the "smollm"
  pre-tokenizer (digits split one by one, then the GPT-2 regex), special
  tokens parsed in the text.
- NpModel: the gemma3 forward of gguf_check.py in float32 with a KV cache
  (feed a batch of tokens, trim the tail) — as kakeya's engine does it.
- speculative(): greedy draft/verify loop with block L; returns the target's
  greedy tokens (lossless) and the number of verify steps, so
  tau = committed tokens / verify steps.

  python3 tools/train/np_engine.py --eval-dir data/eval --per-set 25
prints exact match (float32 CPU) and tau per held-out set, and writes JSON.
"""
import argparse, json, math, os, sys, time, unicodedata

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer as gw  # noqa: E402

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _cls(c):
    cat = unicodedata.category(c)
    if cat[0] == "L":
        return "L"
    if cat[0] == "N":
        return "N"
    if c.isspace():
        return "S"
    return "O"


def gpt2_split(text):
    out, i, n = [], 0, len(text)
    while i < n:
        for con in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
            if text.startswith(con, i):
                out.append(con)
                i += len(con)
                break
        else:
            c = text[i]
            k = _cls(c)
            start = i
            if c == " " and i + 1 < n and _cls(text[i + 1]) != "S":
                k = _cls(text[i + 1])
                i += 1
            if k in ("L", "N", "O"):
                j = i
                while j < n and _cls(text[j]) == k:
                    j += 1
                out.append(text[start:j])
                i = j
            else:  # whitespace run
                j = i
                while j < n and text[j].isspace():
                    j += 1
                if j == n or j - i == 1:
                    out.append(text[i:j])
                    i = j
                else:
                    out.append(text[i:j - 1])
                    i = j - 1
    return out


class BpeTokenizer:
    def __init__(self, path):
        tj = json.load(open(path))
        self.vocab = tj["model"]["vocab"]
        self.inv = {i: s for s, i in self.vocab.items()}
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tj["model"]["merges"]]
        self.rank = {m: r for r, m in enumerate(merges)}
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.cache = {}

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode_text(self, text):
        ids = []
        # digits one by one, then the GPT-2 regex on the pieces between them
        piece = ""
        pieces = []
        for c in text:
            if unicodedata.category(c)[0] == "N":
                if piece:
                    pieces.append(piece)
                pieces.append(c)
                piece = ""
            else:
                piece += c
        if piece:
            pieces.append(piece)
        for p in pieces:
            for w in gpt2_split(p):
                ids += self._bpe("".join(self.b2u[b] for b in w.encode("utf-8")))
        return ids

    def encode(self, text):
        ids, i = [], 0
        while i < len(text):
            nxt = [(text.find(s, i), s) for s in SPECIAL]
            nxt = [(p, s) for p, s in nxt if p >= 0]
            if not nxt:
                ids += self.encode_text(text[i:])
                break
            p, s = min(nxt)
            ids += self.encode_text(text[i:p])
            ids.append(SPECIAL.index(s))
            i = p + len(s)
        return ids

    def decode(self, ids):
        s = "".join(self.inv[i] for i in ids if i > 2)
        return bytes(self.u2b[c] for c in s).decode("utf-8", "replace")


def render(messages, add_generation_prompt=True):
    s = ""
    for m in messages:
        s += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    if add_generation_prompt:
        s += "<|im_start|>assistant\n"
    return s


class NpModel:
    def __init__(self, path, max_ctx=2048):
        kv, t = gw.read_gguf(path)
        kv.pop("__tensor_types")
        a = "gemma3"
        self.L = kv[f"{a}.block_count"]
        self.dim = kv[f"{a}.embedding_length"]
        self.H = kv[f"{a}.attention.head_count"]
        self.KV = kv[f"{a}.attention.head_count_kv"]
        self.hd = kv[f"{a}.attention.key_length"]
        self.eps = kv[f"{a}.attention.layer_norm_rms_epsilon"]
        self.win = kv[f"{a}.attention.sliding_window"]
        self.bases = (kv[f"{a}.rope.freq_base_swa"], kv[f"{a}.rope.freq_base"])
        self.t = {k: v.astype(np.float32) for k, v in t.items()}
        self.wT = {k: np.ascontiguousarray(v.T) for k, v in self.t.items() if v.ndim == 2}
        self.Kc = np.zeros((self.L, max_ctx, self.KV, self.hd), np.float32)
        self.Vc = np.zeros((self.L, max_ctx, self.KV, self.hd), np.float32)
        self.n = 0
        inv = {}
        for b in set(self.bases):
            inv[b] = b ** (-np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self.inv = inv

    def reset(self):
        self.n = 0

    def trim(self, n):
        assert n <= self.n
        self.n = n

    def _rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos, base):
        ang = pos[:, None] * self.inv[base][None, :]
        c = np.cos(ang).astype(np.float32)[:, None, :]
        s = np.sin(ang).astype(np.float32)[:, None, :]
        d = self.hd // 2
        x1, x2 = x[..., :d], x[..., d:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    def feed(self, ids):
        """Process ids at positions n..n+m-1; returns logits [m, vocab] (float32)."""
        m = len(ids)
        p0 = self.n
        pos = np.arange(p0, p0 + m, dtype=np.float64)
        E = self.t["token_embd.weight"]
        x = E[ids] * np.float32(math.sqrt(self.dim))
        qp = np.arange(p0, p0 + m)[:, None]
        kp = np.arange(0, p0 + m)[None, :]
        rep = self.H // self.KV
        for i in range(self.L):
            g = lambda n: self.t[f"blk.{i}.{n}.weight"]  # noqa: E731
            w = lambda n: self.wT[f"blk.{i}.{n}.weight"]  # noqa: E731
            is_global = (i % 6) == 5
            h = self._rms(x, g("attn_norm"))
            q = (h @ w("attn_q")).reshape(m, self.H, self.hd)
            k = (h @ w("attn_k")).reshape(m, self.KV, self.hd)
            v = (h @ w("attn_v")).reshape(m, self.KV, self.hd)
            q = self._rms(q, g("attn_q_norm"))
            k = self._rms(k, g("attn_k_norm"))
            base = self.bases[1] if is_global else self.bases[0]
            q, k = self._rope(q, pos, base), self._rope(k, pos, base)
            self.Kc[i, p0:p0 + m] = k
            self.Vc[i, p0:p0 + m] = v
            allowed = kp <= qp
            if not is_global:
                allowed &= (qp - kp) < self.win
            lo = 0 if is_global else max(0, p0 - self.win + 1)
            K = self.Kc[i, lo:p0 + m]
            V = self.Vc[i, lo:p0 + m]
            al = allowed[:, lo:]
            o = np.empty((m, self.H, self.hd), np.float32)
            for kh in range(self.KV):
                qs = q[:, kh * rep:(kh + 1) * rep]  # [m, rep, hd]
                s = np.einsum("mrd,kd->rmk", qs, K[:, kh]) / np.float32(math.sqrt(self.hd))
                s = np.where(al[None], s, -np.inf)
                s -= s.max(-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(-1, keepdims=True)
                o[:, kh * rep:(kh + 1) * rep] = np.einsum("rmk,kd->mrd", p, V[:, kh])
            x = x + self._rms(o.reshape(m, -1) @ w("attn_output"), g("post_attention_norm"))
            h = self._rms(x, g("ffn_norm"))
            a = h @ w("ffn_gate")
            a = 0.5 * a * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (a + np.float32(0.044715) * a ** 3)))
            f = (a * (h @ w("ffn_up"))) @ w("ffn_down")
            x = x + self._rms(f, g("post_ffw_norm"))
        self.n = p0 + m
        x = self._rms(x, self.t["output_norm.weight"])
        return x @ self.wT["token_embd.weight"]


def speculative(target, draft, prompt, max_new=64, block=8, eos=2):
    """Greedy speculative decoding. Returns (target greedy tokens, verify steps)."""
    target.reset()
    draft.reset()
    x = int(target.feed(prompt)[-1].argmax())  # first token from the prefill
    draft.feed(prompt)
    out = [x]
    steps = 0
    while x != eos and len(out) < max_new:
        base = target.n  # both caches hold everything before x
        props = []
        d = x
        for j in range(block):
            d = int(draft.feed([d])[-1].argmax())
            props.append(d)
        lg = target.feed([x] + props)
        g = lg.argmax(-1)
        k = 0
        while k < block and props[k] == g[k]:
            k += 1
        new = props[:k] + [int(g[k])]
        target.trim(base + 1 + k)
        if k == block:
            draft.feed([props[-1]])  # the draft never saw its own last proposal
        else:
            draft.trim(base + 1 + k)
        steps += 1
        for tkn in new:
            out.append(tkn)
            if tkn == eos or len(out) >= max_new:
                break
        x = out[-1]
    return out, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="data/models/kakeya-chat.gguf")
    ap.add_argument("--draft", default="data/models/kakeya-draft.gguf")
    ap.add_argument("--tokenizer", default="data/models/kakeya-tokenizer.json")
    ap.add_argument("--eval-dir", default="data/eval")
    ap.add_argument("--per-set", type=int, default=25)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--out", default="tools/train/runs/eval-cpu.json")
    a = ap.parse_args()
    tok = BpeTokenizer(a.tokenizer)
    target, draft = NpModel(a.target), NpModel(a.draft)
    res, rows = {}, []
    for name in ("doc", "man_opt", "dict", "man_what"):
        items = [json.loads(x) for x in open(os.path.join(a.eval_dir, name + ".jsonl"))]
        # an even spread over the file (the files are in random order)
        items = items[:a.per_set]
        c = s = ok = 0
        t0 = time.time()
        for it in items:
            prompt = tok.encode(render(it["messages"][:-1]))
            if len(prompt) + a.max_new > 2048:
                continue
            out, st = speculative(target, draft, prompt, a.max_new, a.block)
            text = tok.decode(out)
            good = text.strip() == it["answer"].strip()
            # tau counts the tokens committed by verify steps (the prefill's first token excluded)
            c += len(out) - 1
            s += st
            ok += good
            rows.append({"set": name, "prompt_tokens": len(prompt), "ok": good, "tau": (len(out) - 1) / max(st, 1),
                         "output": text, "answer": it["answer"]})
        n = sum(1 for r in rows if r["set"] == name)
        res[name] = {"n": n, "exact_match": ok / max(n, 1), "tau": c / max(s, 1), "tokens": c, "steps": s}
        print(f"{name}: n={n} EM={ok / max(n, 1):.3f} tau={c / max(s, 1):.3f} ({time.time() - t0:.0f}s)", flush=True)
    tc = sum(v["tokens"] for v in res.values())
    ts = sum(v["steps"] for v in res.values())
    res["all"] = {"tau": tc / max(ts, 1), "tokens": tc, "steps": ts}
    print(f"all: tau={tc / max(ts, 1):.3f}")
    json.dump({"block": a.block, "results": res, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
