"""model.py — the PyTorch side of kakeya's own models (gemma3 semantics).

Exactly what llama.cpp's gemma3 graph (and kakeya's engine) computes:
  x = embed[ids] * sqrt(dim)
  per layer i (global iff i % 6 == 5, else sliding window `window`):
    h = attn_norm(x); q,k,v = Wq h, Wk h, Wv h
    q,k RMS-normed per head (weights q_norm, k_norm), then RoPE NEOX
    (base rope_global on global layers, rope_local on sliding ones)
    attention scale 1/sqrt(head_dim); sliding: query p sees keys k, p-k < window
    x += post_attention_norm(Wo attn)
    x += post_ffw_norm(down(gelu_tanh(gate(h2)) * up(h2))), h2 = ffn_norm(x)
  logits = embed . output_norm(x)   (tied)
Norm weights are stored as the plain multiplier (GGUF's "1+w"), eps 1e-6.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 8192
    dim: int = 384
    n_layers: int = 12
    n_heads: int = 6
    n_kv_heads: int = 2
    head_dim: int = 64
    ffn: int = 1024
    ctx: int = 2048
    window: int = 128
    rope_global: float = 1e6
    rope_local: float = 1e4
    eps: float = 1e-6
    swa_period: int = 6

    def is_global(self, i):
        return i % self.swa_period == self.swa_period - 1

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        if hasattr(F, "rms_norm"):  # fused where available; same arithmetic
            return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_tables(T, head_dim, base, device):
    inv = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    t = torch.arange(T, device=device, dtype=torch.float64)
    ang = torch.outer(t, inv)  # [T, hd/2]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    # x [B, H, T, D]; NEOX pairs (i, i + D/2)
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2].float(), x[..., d2:].float()
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    return torch.cat([o1, o2], -1).to(x.dtype)


_mask_cache = {}


def local_attention(q, k, v, W):
    """Causal attention where query p sees keys k with p - k < W. q,k,v [B,H,T,D]."""
    B, H, T, D = q.shape
    if T <= W:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    pad = (-T) % W
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    n = (T + pad) // W
    qc = q.view(B, H, n, W, D)
    kc = k.view(B, H, n, W, D)
    vc = v.view(B, H, n, W, D)
    kk = torch.cat([torch.cat([torch.zeros_like(kc[:, :, :1]), kc[:, :, :-1]], 2), kc], 3)
    vv = torch.cat([torch.cat([torch.zeros_like(vc[:, :, :1]), vc[:, :, :-1]], 2), vc], 3)
    key = (n, W, q.device)
    if key not in _mask_cache:
        i = torch.arange(W, device=q.device)[:, None]
        j = torch.arange(2 * W, device=q.device)[None, :]
        m = ((j > i) & (j <= i + W)).expand(n, W, 2 * W).clone()
        m[0, :, :W] = False
        _mask_cache[key] = m[:, None]  # [n,1,W,2W]
    mask = _mask_cache[key]
    qf = qc.permute(0, 2, 1, 3, 4).reshape(B * n, H, W, D)
    kf = kk.permute(0, 2, 1, 3, 4).reshape(B * n, H, 2 * W, D)
    vf = vv.permute(0, 2, 1, 3, 4).reshape(B * n, H, 2 * W, D)
    m = mask.repeat(B, 1, 1, 1)
    o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=m)
    o = o.view(B, n, H, W, D).permute(0, 2, 1, 3, 4).reshape(B, H, n * W, D)
    return o[:, :, :T]


class Block(nn.Module):
    def __init__(self, c: Config, i):
        super().__init__()
        self.c, self.is_global = c, c.is_global(i)
        self.attn_norm = RMSNorm(c.dim, c.eps)
        self.wq = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.eps)
        self.k_norm = RMSNorm(c.head_dim, c.eps)
        self.post_attn_norm = RMSNorm(c.dim, c.eps)
        self.ffn_norm = RMSNorm(c.dim, c.eps)
        self.gate = nn.Linear(c.dim, c.ffn, bias=False)
        self.up = nn.Linear(c.dim, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.dim, bias=False)
        self.post_ffn_norm = RMSNorm(c.dim, c.eps)

    def forward(self, x, rope):
        c = self.c
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, c.n_heads, c.head_dim)
        k = self.wk(h).view(B, T, c.n_kv_heads, c.head_dim)
        v = self.wv(h).view(B, T, c.n_kv_heads, c.head_dim)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(k).transpose(1, 2)
        v = v.transpose(1, 2)
        cos, sin = rope[self.is_global]
        q = apply_rope(q, cos[:T], sin[:T])
        k = apply_rope(k, cos[:T], sin[:T])
        rep = c.n_heads // c.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, 1)
            v = v.repeat_interleave(rep, 1)
        if self.is_global or c.window >= T:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = local_attention(q, k, v, c.window)
        o = o.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim)
        x = x + self.post_attn_norm(self.wo(o))
        h = self.ffn_norm(x)
        f = self.down(F.gelu(self.gate(h), approximate="tanh") * self.up(h))
        return x + self.post_ffn_norm(f)


class Model(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.blocks = nn.ModuleList(Block(c, i) for i in range(c.n_layers))
        self.out_norm = RMSNorm(c.dim, c.eps)
        self._rope = {}
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std
                if n.endswith("wo.weight") or n.endswith("down.weight"):
                    s = std / math.sqrt(2 * self.c.n_layers)
                nn.init.normal_(p, 0.0, s)

    def rope(self, T, device):
        key = (T, device)
        if key not in self._rope:
            self._rope = {key: {True: rope_tables(max(T, 1), self.c.head_dim, self.c.rope_global, device),
                                False: rope_tables(max(T, 1), self.c.head_dim, self.c.rope_local, device)}}
        return self._rope[key]

    def hidden(self, ids):
        B, T = ids.shape
        x = self.embed(ids).float() * math.sqrt(self.c.dim)  # residual stream stays float32
        rope = self.rope(T, ids.device)
        for b in self.blocks:
            x = b(x, rope)
        return self.out_norm(x)

    def forward(self, ids):
        h = self.hidden(ids)
        return F.linear(h, self.embed.weight)

    def n_params(self, with_embed=True):
        n = sum(p.numel() for p in self.parameters())
        return n if with_embed else n - self.embed.weight.numel()


# mapping to GGUF tensor names
def gguf_tensors(model: Model):
    """Yield (gguf_name, float32 numpy array in PyTorch layout, is_matrix)."""
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    yield "token_embd.weight", sd["embed.weight"], True
    for i in range(model.c.n_layers):
        p = f"blocks.{i}."
        names = [("attn_norm", "attn_norm.weight"), ("attn_q", "wq.weight"), ("attn_k", "wk.weight"),
                 ("attn_v", "wv.weight"), ("attn_output", "wo.weight"), ("attn_q_norm", "q_norm.weight"),
                 ("attn_k_norm", "k_norm.weight"), ("post_attention_norm", "post_attn_norm.weight"),
                 ("ffn_norm", "ffn_norm.weight"), ("ffn_gate", "gate.weight"), ("ffn_up", "up.weight"),
                 ("ffn_down", "down.weight"), ("post_ffw_norm", "post_ffn_norm.weight")]
        for g, t in names:
            a = sd[p + t]
            yield f"blk.{i}.{g}.weight", a, a.ndim == 2
    yield "output_norm.weight", sd["out_norm.weight"], False


def load_from_gguf_tensors(model: Model, tensors):
    """Inverse of gguf_tensors: tensors maps gguf name -> numpy array (PyTorch layout)."""
    sd = model.state_dict()
    m = {"token_embd.weight": "embed.weight", "output_norm.weight": "out_norm.weight"}
    names = {"attn_norm": "attn_norm.weight", "attn_q": "wq.weight", "attn_k": "wk.weight", "attn_v": "wv.weight",
             "attn_output": "wo.weight", "attn_q_norm": "q_norm.weight", "attn_k_norm": "k_norm.weight",
             "post_attention_norm": "post_attn_norm.weight", "ffn_norm": "ffn_norm.weight", "ffn_gate": "gate.weight",
             "ffn_up": "up.weight", "ffn_down": "down.weight", "post_ffw_norm": "post_ffn_norm.weight"}
    for i in range(model.c.n_layers):
        for g, t in names.items():
            m[f"blk.{i}.{g}.weight"] = f"blocks.{i}.{t}"
    new = {}
    for g, t in m.items():
        a = torch.from_numpy(tensors[g].astype("float32"))
        assert a.shape == sd[t].shape, (g, a.shape, sd[t].shape)
        new[t] = a
    model.load_state_dict(new)
    return model
