"""export.py — write a trained model.Model to a gemma3 GGUF (kakeya/llama.cpp conventions).

Matrices Q8_0 (or F16), norms F32 (stored as the plain multiplier), tied
output (no output.weight). Tokenizer: gpt2 BPE, pre "smollm", ChatML template.
Also usable from the command line to re-export a GGUF's tensors with new
metadata: python3 export.py --from in.gguf --tokenizer tok.json --out out.gguf
"""
import json

import numpy as np

import gguf_writer as gw

CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are Kakeya, a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def tokenizer_kv(w, tok_json_path):
    tj = json.load(open(tok_json_path))
    vocab = tj["model"]["vocab"]
    n = len(vocab)
    tokens = [None] * n
    for s, i in vocab.items():
        tokens[i] = s
    for a in tj["added_tokens"]:
        if a["id"] < n:
            tokens[a["id"]] = a["content"]
    assert all(t is not None for t in tokens)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    types = [3 if i < 3 else 1 for i in range(n)]
    w.add_kv("tokenizer.ggml.model", "gpt2", gw.T_STRING)
    w.add_kv("tokenizer.ggml.pre", "smollm", gw.T_STRING)
    w.add_kv("tokenizer.ggml.tokens", tokens, gw.T_ARRAY, gw.T_STRING)
    w.add_kv("tokenizer.ggml.token_type", types, gw.T_ARRAY, gw.T_INT32)
    w.add_kv("tokenizer.ggml.merges", merges, gw.T_ARRAY, gw.T_STRING)
    w.add_kv("tokenizer.ggml.bos_token_id", 1, gw.T_UINT32)
    w.add_kv("tokenizer.ggml.eos_token_id", 2, gw.T_UINT32)
    w.add_kv("tokenizer.ggml.unknown_token_id", 0, gw.T_UINT32)
    w.add_kv("tokenizer.ggml.padding_token_id", 0, gw.T_UINT32)
    w.add_kv("tokenizer.ggml.add_bos_token", False, gw.T_BOOL)
    w.add_kv("tokenizer.ggml.add_eos_token", False, gw.T_BOOL)
    w.add_kv("tokenizer.ggml.add_space_prefix", False, gw.T_BOOL)
    w.add_kv("tokenizer.chat_template", CHAT_TEMPLATE, gw.T_STRING)
    return n


def export(cfg, tensors, tok_json_path, out_path, name, mat_type=gw.Q8_0):
    """cfg: model.Config; tensors: iterable of (gguf_name, float32 array [pytorch layout], is_matrix)."""
    w = gw.GGUFWriter(out_path)
    a = "gemma3"
    w.add_kv("general.architecture", a, gw.T_STRING)
    w.add_kv("general.name", name, gw.T_STRING)
    w.add_kv("general.alignment", 32, gw.T_UINT32)
    w.add_kv("general.license", "GPL-2.0-or-later (trained on Debian documentation; see MODEL_CARD.md)", gw.T_STRING)
    w.add_kv(f"{a}.context_length", cfg.ctx, gw.T_UINT32)
    w.add_kv(f"{a}.embedding_length", cfg.dim, gw.T_UINT32)
    w.add_kv(f"{a}.block_count", cfg.n_layers, gw.T_UINT32)
    w.add_kv(f"{a}.feed_forward_length", cfg.ffn, gw.T_UINT32)
    w.add_kv(f"{a}.attention.head_count", cfg.n_heads, gw.T_UINT32)
    w.add_kv(f"{a}.attention.head_count_kv", cfg.n_kv_heads, gw.T_UINT32)
    w.add_kv(f"{a}.rope.freq_base", float(cfg.rope_global), gw.T_FLOAT32)
    w.add_kv(f"{a}.rope.freq_base_swa", float(cfg.rope_local), gw.T_FLOAT32)
    w.add_kv(f"{a}.attention.layer_norm_rms_epsilon", float(cfg.eps), gw.T_FLOAT32)
    w.add_kv(f"{a}.attention.key_length", cfg.head_dim, gw.T_UINT32)
    w.add_kv(f"{a}.attention.value_length", cfg.head_dim, gw.T_UINT32)
    w.add_kv(f"{a}.attention.sliding_window", cfg.window, gw.T_UINT32)
    w.add_kv("general.file_type", 7 if mat_type == gw.Q8_0 else 1, gw.T_UINT32)
    w.add_kv("general.quantization_version", 2, gw.T_UINT32)
    n_vocab = tokenizer_kv(w, tok_json_path)
    assert n_vocab == cfg.vocab, (n_vocab, cfg.vocab)
    for gname, arr, is_mat in tensors:
        w.add_tensor(gname, arr, mat_type if is_mat else gw.F32)
    w.write()


def quantize_model_inplace(model, mat_type=gw.Q8_0):
    """Replace each matrix of a model.Model by its Q8_0 (or F16) round trip, so that the
    PyTorch model is exactly the exported one."""
    import torch
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2:
                a = p.detach().float().cpu().numpy()
                if mat_type == gw.Q8_0:
                    _, deq = gw.quantize_q8_0(a)
                else:
                    deq = a.astype(np.float16).astype(np.float32)
                p.copy_(torch.from_numpy(deq).to(p.device, p.dtype))
