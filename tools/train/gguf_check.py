#!/usr/bin/env python3
"""gguf_check.py — independent numpy forward pass of a kakeya gemma3 GGUF.

Reads the file with gguf_writer.read_gguf, runs the gemma3 semantics of
DESIGN/issue 3 in float64 from the GGUF metadata alone, and prints the logits
of the last position / greedy tokens. With --compare-torch it also loads the
same tensors into model.Model (PyTorch, float32) and reports max |diff|.

  python3 tools/train/gguf_check.py data/models/kakeya-chat.gguf [--tokens 300]
"""
import argparse, math, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer as gw  # noqa: E402


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_neox(x, pos, base):
    # x [T, H, D]
    D = x.shape[-1]
    inv = base ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(kv, t, ids):
    a = kv["general.architecture"]
    assert a == "gemma3"
    L = kv[f"{a}.block_count"]
    dim = kv[f"{a}.embedding_length"]
    H = kv[f"{a}.attention.head_count"]
    KV = kv[f"{a}.attention.head_count_kv"]
    hd = kv[f"{a}.attention.key_length"]
    eps = kv[f"{a}.attention.layer_norm_rms_epsilon"]
    win = kv[f"{a}.attention.sliding_window"]
    bg, bl = kv[f"{a}.rope.freq_base"], kv[f"{a}.rope.freq_base_swa"]
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    E = t["token_embd.weight"].astype(np.float64)
    x = E[ids] * math.sqrt(dim)
    pq, kk = np.arange(T)[:, None], np.arange(T)[None, :]
    for i in range(L):
        g = lambda n: t[f"blk.{i}.{n}.weight"].astype(np.float64)  # noqa: E731
        is_global = (i % 6) == 5
        h = rms(x, g("attn_norm"), eps)
        q = (h @ g("attn_q").T).reshape(T, H, hd)
        k = (h @ g("attn_k").T).reshape(T, KV, hd)
        v = (h @ g("attn_v").T).reshape(T, KV, hd)
        q = rms(q, g("attn_q_norm"), eps)
        k = rms(k, g("attn_k_norm"), eps)
        base = bg if is_global else bl
        q, k = rope_neox(q, pos, base), rope_neox(k, pos, base)
        allowed = kk <= pq
        if not is_global:
            allowed &= (pq - kk) < win
        o = np.zeros((T, H, hd))
        for hh in range(H):
            kvh = hh // (H // KV)
            s = q[:, hh] @ k[:, kvh].T / math.sqrt(hd)
            s = np.where(allowed, s, -np.inf)
            s -= s.max(-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(-1, keepdims=True)
            o[:, hh] = p @ v[:, kvh]
        x = x + rms(o.reshape(T, H * hd) @ g("attn_output").T, g("post_attention_norm"), eps)
        h = rms(x, g("ffn_norm"), eps)
        f = (gelu_tanh(h @ g("ffn_gate").T) * (h @ g("ffn_up").T)) @ g("ffn_down").T
        x = x + rms(f, g("post_ffw_norm"), eps)
    x = rms(x, t["output_norm.weight"].astype(np.float64), eps)
    return x @ E.T


def torch_logits(kv, t, ids):
    import torch
    from model import Config, Model, load_from_gguf_tensors
    a = "gemma3"
    c = Config(vocab=t["token_embd.weight"].shape[0], dim=kv[f"{a}.embedding_length"], n_layers=kv[f"{a}.block_count"],
               n_heads=kv[f"{a}.attention.head_count"], n_kv_heads=kv[f"{a}.attention.head_count_kv"],
               head_dim=kv[f"{a}.attention.key_length"], ffn=kv[f"{a}.feed_forward_length"],
               ctx=kv[f"{a}.context_length"], window=kv[f"{a}.attention.sliding_window"],
               rope_global=kv[f"{a}.rope.freq_base"], rope_local=kv[f"{a}.rope.freq_base_swa"],
               eps=kv[f"{a}.attention.layer_norm_rms_epsilon"])
    m = load_from_gguf_tensors(Model(c), t).eval()
    with torch.no_grad():
        return m(torch.tensor([ids])).double().numpy()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--compare-torch", action="store_true")
    a = ap.parse_args()
    kv, t = gw.read_gguf(a.gguf)
    types = kv.pop("__tensor_types")
    n_vocab = len(kv["tokenizer.ggml.tokens"])
    print(f"{a.gguf}: {len(t)} tensors, vocab {n_vocab}, types {sorted(set(types.values()))}, "
          f"window {kv['gemma3.attention.sliding_window']}, layers {kv['gemma3.block_count']}")
    rng = np.random.default_rng(0)
    ids = rng.integers(3, n_vocab, a.tokens).tolist()
    ref = forward(kv, t, ids)
    print("numpy greedy next tokens (first 10 positions):", ref.argmax(-1)[:10].tolist())
    if a.compare_torch:
        tl = torch_logits(kv, t, ids)
        d = np.abs(tl - ref).max()
        agree = (tl.argmax(-1) == ref.argmax(-1)).mean()
        print(f"torch vs numpy: max|dlogit| = {d:.3e} (logit scale {np.abs(ref).max():.1f}), argmax agreement {agree:.4f}")
        if d > 1e-2:
            print("MISMATCH")
            sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
