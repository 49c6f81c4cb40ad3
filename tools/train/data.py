"""data.py — tokenizer training and packing of the corpus/chat data into rows.

Runs on the GPU machine (needs HF `tokenizers` and numpy).
Special tokens: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>.
A row is ROW_LEN = 2049 token ids (2048 inputs + 1 shifted target) with a loss
mask: 1 on assistant tokens (content + <|im_end|>) of chat samples, 1 on all
tokens of plain text, 0 on padding.
"""
import json, os, random, subprocess, sys, time

import numpy as np

EOT, IM_START, IM_END = 0, 1, 2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ROW_LEN = 2049


def train_tokenizer(texts, vocab_size, path):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.save(path)
    return tok


def load_tokenizer(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


def chat_strings(sample):
    """The strings to encode for one conversation, in order (see chat_ids)."""
    out = []
    for m in sample["messages"]:
        if m["role"] == "assistant":
            out += ["assistant\n", m["content"]]
        else:
            out += [m["role"] + "\n" + m["content"]]
    return out


def chat_ids(sample, encoded, nl_id, train_last_only=False):
    """encoded: list of id lists for chat_strings(sample). Returns ids, mask."""
    ids, mask = [], []
    it = iter(encoded)
    msgs = sample["messages"]
    for k, m in enumerate(msgs):
        ids.append(IM_START)
        mask.append(0)
        if m["role"] == "assistant":
            hdr, body = next(it), next(it)
            ids += hdr
            mask += [0] * len(hdr)
            ids += body + [IM_END]
            mask += [1] * (len(body) + 1)
        else:
            t = next(it)
            ids += t + [IM_END]
            mask += [0] * (len(t) + 1)
        ids.append(nl_id)
        mask.append(0)
    return ids, mask


def prompt_ids(tok, messages):
    """Token ids of the prompt for the next assistant turn (generation prompt added)."""
    strs = []
    for m in messages:
        strs.append((m["role"] + "\n" + m["content"]))
    enc = tok.encode_batch(strs + ["assistant\n", "\n"], add_special_tokens=False)
    nl = enc[-1].ids
    ids = []
    for e in enc[:len(messages)]:
        ids += [IM_START] + e.ids + [IM_END] + nl
    ids += [IM_START] + enc[len(messages)].ids
    return ids


def pack(samples, row_len, rng):
    """samples: list of (ids, mask) -> arrays [rows, row_len] int16/uint8 (first fit, in shuffled order)."""
    order = list(range(len(samples)))
    rng.shuffle(order)
    rows_i, rows_m = [], []
    cur_i, cur_m = [], []
    for j in order:
        ids, m = samples[j]
        if len(ids) > row_len:
            continue
        if len(cur_i) + len(ids) > row_len:
            pad = row_len - len(cur_i)
            rows_i.append(cur_i + [EOT] * pad)
            rows_m.append(cur_m + [0] * pad)
            cur_i, cur_m = [], []
        cur_i.extend(ids)
        cur_m.extend(m)
    if cur_i:
        pad = row_len - len(cur_i)
        rows_i.append(cur_i + [EOT] * pad)
        rows_m.append(cur_m + [0] * pad)
    return np.array(rows_i, dtype=np.int16), np.array(rows_m, dtype=np.uint8)


def plain_samples(tok, texts, row_len):
    out = []
    encs = tok.encode_batch(texts, add_special_tokens=False)
    for e in encs:
        ids = e.ids + [EOT]
        for s in range(0, len(ids), row_len):
            piece = ids[s:s + row_len]
            if len(piece) >= 64:
                out.append((piece, [1] * len(piece)))
    return out


def chat_samples(tok, convs):
    nl = tok.encode("\n", add_special_tokens=False).ids
    assert len(nl) == 1
    strs, spans = [], []
    for c in convs:
        s = chat_strings(c)
        spans.append((len(strs), len(s)))
        strs += s
    encs = tok.encode_batch(strs, add_special_tokens=False)
    out = []
    for c, (a, n) in zip(convs, spans):
        out.append(chat_ids(c, [e.ids for e in encs[a:a + n]], nl[0]))
    return out


def gen_chat(corpus, split, out_dir, nshards, extra_args=()):
    """Run chatgen.py in nshards parallel processes; returns the list of conversations."""
    here = os.path.dirname(os.path.abspath(__file__))
    procs, paths = [], []
    for s in range(nshards):
        p = os.path.join(out_dir, f"chat_{split}_{s}.jsonl")
        paths.append(p)
        procs.append(subprocess.Popen([sys.executable, os.path.join(here, "chatgen.py"), "--corpus", corpus,
                                       "--split", split, "--out", p, "--shard", str(s), "--nshards", str(nshards),
                                       *extra_args]))
    for pr in procs:
        assert pr.wait() == 0
    convs = []
    for p in paths:
        with open(p) as f:
            convs += [json.loads(x) for x in f]
    return convs


def load_docs(corpus, split):
    with open(os.path.join(corpus, "docs.jsonl")) as f:
        docs = [json.loads(x) for x in f]
    return [d for d in docs if d["split"] == split]
