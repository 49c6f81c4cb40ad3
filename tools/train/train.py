#!/usr/bin/env python3
"""train.py — kakeya's model recipe on the GPU machine.

  train.py target --corpus DIR --work DIR --out DIR --minutes M
      tokenizer (if missing) -> chat data -> pack -> train the gemma3 target ->
      Q8_0 GGUF (+ numpy check) -> OUT/kakeya-chat.gguf.part*, OUT/tokenizer.json
  train.py draft --corpus DIR --work DIR --out DIR --target GGUF --tokenizer JSON --minutes M
      distil the draft from the target GGUF -> evaluation -> OUT/kakeya-draft.gguf,
      OUT/eval.json, OUT/samples.json

Seeds are fixed; the number of steps is set from the measured step time so
that a run fits its --minutes (logged).
"""
import argparse, json, math, os, random, sys, time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import export  # noqa: E402
import gguf_writer as gw  # noqa: E402
from model import Config, Model, gguf_tensors, load_from_gguf_tensors  # noqa: E402

TARGET = Config(vocab=8192, dim=384, n_layers=12, n_heads=6, n_kv_heads=2, head_dim=64, ffn=1024,
                ctx=2048, window=128)
DRAFT = Config(vocab=8192, dim=192, n_layers=2, n_heads=3, n_kv_heads=1, head_dim=64, ffn=768,
               ctx=2048, window=2048)
T0 = time.time()
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def seed_all(s):
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def prepare(a, tok_path):
    """Tokenizer + packed rows (plain train, chat train, plain validation)."""
    os.makedirs(a.work, exist_ok=True)
    log("loading corpus")
    train_docs = data.load_docs(a.corpus, "train")
    val_docs = data.load_docs(a.corpus, "validation")
    log(f"docs train {len(train_docs)} ({sum(len(d['text']) for d in train_docs) / 1e6:.1f} MB), "
        f"validation {len(val_docs)}")
    # chat generation in the background while the tokenizer trains
    import threading
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("convs", data.gen_chat(
        a.corpus, "train", a.work, a.shards, ["--n-doc", str(a.n_doc), "--n-man", str(a.n_man), "--seed", str(a.chat_seed)])))
    th.start()
    if not os.path.exists(tok_path):
        rng = random.Random(1)
        sample = [d["text"] for d in train_docs]
        rng.shuffle(sample)
        budget, texts = 60_000_000, []
        for t in sample:
            texts.append(t)
            budget -= len(t)
            if budget < 0:
                break
        log(f"training tokenizer on {sum(map(len, texts)) / 1e6:.1f} MB")
        data.train_tokenizer(texts, 8192, tok_path)
    tok = data.load_tokenizer(tok_path)
    log("tokenizer vocab", tok.get_vocab_size())
    rng = random.Random(2)
    plain = data.plain_samples(tok, [d["text"] for d in train_docs], data.ROW_LEN)
    n_plain_tok = sum(len(s[0]) for s in plain)
    log(f"plain train tokens {n_plain_tok / 1e6:.1f}M, chars/token "
        f"{sum(len(d['text']) for d in train_docs) / n_plain_tok:.2f}")
    pi, pm = data.pack(plain, data.ROW_LEN, rng)
    vplain = data.plain_samples(tok, [d["text"] for d in val_docs], data.ROW_LEN)
    vi, vm = data.pack(vplain, data.ROW_LEN, rng)
    th.join()
    convs = box["convs"]
    kinds = {}
    for c in convs:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    log(f"chat conversations {len(convs)} {kinds}")
    chat = data.chat_samples(tok, convs)
    log(f"chat tokens {sum(len(s[0]) for s in chat) / 1e6:.1f}M, "
        f"assistant tokens {sum(sum(s[1]) for s in chat) / 1e6:.1f}M")
    ci, cm = data.pack(chat, data.ROW_LEN, rng)
    log(f"rows: plain {len(pi)}, chat {len(ci)}, validation {len(vi)}")
    return tok, (pi, pm), (ci, cm), (vi, vm)


class Batches:
    def __init__(self, plain, chat, p_chat, bs, device, seed):
        self.p = [torch.from_numpy(x).to(device) for x in plain]
        self.c = [torch.from_numpy(x).to(device) for x in chat]
        self.p_chat, self.bs = p_chat, bs
        self.g = torch.Generator(device="cpu").manual_seed(seed)

    def next(self):
        nc = int(round(self.bs * self.p_chat))
        ic = torch.randint(0, len(self.c[0]), (nc,), generator=self.g)
        ip = torch.randint(0, len(self.p[0]), (self.bs - nc,), generator=self.g)
        ids = torch.cat([self.c[0][ic.to(self.c[0].device)], self.p[0][ip.to(self.p[0].device)]]).long()
        m = torch.cat([self.c[1][ic.to(self.c[0].device)], self.p[1][ip.to(self.p[0].device)]]).float()
        return ids, m


def masked_ce(logits, ids, m):
    tgt = ids[:, 1:]
    mm = m[:, 1:]
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    return (ce * mm.reshape(-1)).sum() / mm.sum().clamp(min=1)


def make_opt(model, lr, wd=0.1):
    dec = [p for n, p in model.named_parameters() if p.dim() == 2]
    nodec = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": dec, "weight_decay": wd}, {"params": nodec, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def lr_at(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    t = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def val_loss(model, vi, vm, device, n_rows=64, bs=16):
    model.eval()
    tot, cnt = 0.0, 0.0
    for s in range(0, min(n_rows, len(vi)), bs):
        ids = torch.from_numpy(vi[s:s + bs]).to(device).long()
        m = torch.from_numpy(vm[s:s + bs]).to(device).float()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(ids[:, :-1])
        ce = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        tot += (ce * m[:, 1:].reshape(-1)).sum().item()
        cnt += m[:, 1:].sum().item()
    model.train()
    return tot / max(cnt, 1)


def train_loop(model, step_fn, batches, minutes, peak_lr, warm, label, eval_fn=None, deadline=None):
    opt = make_opt(model, peak_lr)
    budget = minutes * 60
    if deadline is not None:
        budget = min(budget, deadline - time.time())
    log(f"{label}: training budget {budget:.0f} s")
    start = time.time()
    total = 10 ** 9
    step = 0
    t_meas = None
    while step < total:
        if step == 10:
            torch.cuda.synchronize()
            t_meas = time.time()
        if step == 30:
            torch.cuda.synchronize()
            dt = (time.time() - t_meas) / 20
            total = int((budget - (time.time() - start)) / dt) + 30
            log(f"{label}: {dt * 1000:.1f} ms/step -> {total} steps")
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step, total if total < 10 ** 9 else 10000, peak_lr, warm)
        ids, m = batches.next()
        loss = step_fn(ids, m)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 200 == 0 or step == total - 1:
            extra = f" val {eval_fn():.4f}" if (eval_fn and step % 1000 == 0) else ""
            log(f"{label} step {step}/{total} loss {loss.item():.4f} gnorm {gn.item():.2f} "
                f"lr {opt.param_groups[0]['lr']:.2e}{extra}")
        step += 1
    return step


def cmd_target(a):
    seed_all(1234)
    dev = "cuda"
    os.makedirs(a.out, exist_ok=True)
    tok_path = os.path.join(a.work, "tokenizer.json")
    os.makedirs(a.work, exist_ok=True)
    if a.tokenizer:
        import shutil
        shutil.copy(a.tokenizer, tok_path)
    tok, plain, chat, val = prepare(a, tok_path)
    TARGET.vocab = DRAFT.vocab = tok.get_vocab_size()
    model = Model(TARGET)
    if a.init:  # continue training from an exported GGUF (weights as shipped, Q8_0-dequantized)
        kv, t = gw.read_gguf(a.init)
        load_from_gguf_tensors(model, t)
        log("initialised from", a.init, f"validation loss {val_loss(model.to(dev), *val, dev, n_rows=256):.4f}")
    model = model.to(dev)
    log(f"target params {model.n_params() / 1e6:.2f}M (non-embedding {model.n_params(False) / 1e6:.2f}M)")
    # fail fast: export the untrained model and check the GGUF semantics before spending the budget
    sp = os.path.join(a.work, "smoke.gguf")
    sm = Model(TARGET)
    with torch.no_grad():
        for n_, p_ in sm.named_parameters():
            if p_.dim() == 1:
                p_.add_(torch.randn_like(p_) * 0.1)
            else:
                p_.normal_(0, 1 / math.sqrt(p_.shape[1]))
    export.export(TARGET, gguf_tensors(sm), tok_path, sp, "smoke")
    if not check(sp, TARGET):
        sys.exit(2)
    batches = Batches(plain, chat, a.p_chat, a.bs, dev, 1)

    def step_fn(ids, m):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(ids[:, :-1])
        return masked_ce(lg, ids, m)
    train_loop(model, step_fn, batches, a.minutes, a.lr, a.warm, "target",
               lambda: val_loss(model, *val, dev), deadline=T0 + a.total_minutes * 60 - a.reserve_s)
    vl = val_loss(model, *val, dev, n_rows=256)
    log(f"target final validation loss {vl:.4f} ppl {math.exp(vl):.2f} (float)")
    torch.save(model.state_dict(), os.path.join(a.work, "target.pt"))
    export.quantize_model_inplace(model)
    vlq = val_loss(model, *val, dev, n_rows=256)
    log(f"target validation loss after Q8_0 {vlq:.4f} ppl {math.exp(vlq):.2f}")
    gpath = os.path.join(a.work, "kakeya-chat.gguf")
    export.export(TARGET, gguf_tensors(model), tok_path, gpath, "kakeya-chat")
    log(f"wrote {gpath} {os.path.getsize(gpath)} bytes")
    check(gpath, TARGET)
    import shutil
    shutil.copy(tok_path, os.path.join(a.out, "tokenizer.json"))
    raw = open(gpath, "rb").read()
    half = (len(raw) + 1) // 2
    open(os.path.join(a.out, "kakeya-chat.gguf.part0"), "wb").write(raw[:half])
    open(os.path.join(a.out, "kakeya-chat.gguf.part1"), "wb").write(raw[half:])
    json.dump({"val_loss": vl, "val_loss_q8": vlq}, open(os.path.join(a.out, "target_stats.json"), "w"))


def check(gpath, cfg, n=300):
    """Semantics check: numpy float64 forward (gguf_check) vs this PyTorch model, same GGUF weights."""
    import gguf_check
    kv, t = gw.read_gguf(gpath)
    kv.pop("__tensor_types")
    ids = np.random.default_rng(0).integers(3, cfg.vocab, n).tolist()
    ref = gguf_check.forward(kv, t, ids)
    m32 = load_from_gguf_tensors(Model(cfg), t).eval()
    with torch.no_grad():
        tl = m32(torch.tensor([ids])).double().numpy()[0]
    d = np.abs(tl - ref).max()
    scale = np.abs(ref).max()
    agree = (tl.argmax(-1) == ref.argmax(-1)).mean()
    log(f"gguf_check {os.path.basename(gpath)}: numpy(float64, from GGUF) vs torch(float32) over {n} tokens: "
        f"max|dlogit| {d:.2e} (max|logit| {scale:.2f}), argmax agreement {agree:.4f}")
    if d > 1e-3 * max(scale, 1.0):
        log("GGUF CHECK FAILED")
        return False
    return True


# ---------------------------------------------------------------- generation / evaluation
@torch.no_grad()
def greedy(model, ids, max_new, stop=data.IM_END, ctx=2048):
    out = []
    x = list(ids)
    for _ in range(max_new):
        t = torch.tensor([x[-ctx:]], device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            nxt = int(model(t)[0, -1].float().argmax())
        out.append(nxt)
        x.append(nxt)
        if nxt == stop:
            break
    return out


@torch.no_grad()
def greedy_cached_agreement(target_gen, draft, prompt, block=8):
    """Simulated speculative decoding with greedy draft/target: returns (steps, committed)."""
    pos, steps = 0, 0
    n = len(target_gen)
    while pos < n:
        prefix = prompt + target_gen[:pos]
        prop = greedy(draft, prefix, min(block, n - pos), stop=-1)
        k = 0
        while k < len(prop) and pos + k < n and prop[k] == target_gen[pos + k]:
            k += 1
        pos += k + 1  # accepted + bonus token from the target
        steps += 1
    return steps, n


@torch.no_grad()
def greedy_batch(model, prompts, max_new, stop=data.IM_END, bs=24):
    """Greedy continuations of many prompts, batched with right padding (exact for a causal model:
    padding after a sequence never influences its positions)."""
    outs = [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for s in range(0, len(order), bs):
        grp = order[s:s + bs]
        seqs = [list(prompts[i]) for i in grp]
        gen = [[] for _ in grp]
        done = [False] * len(grp)
        for _ in range(max_new):
            act = [j for j in range(len(grp)) if not done[j]]
            if not act:
                break
            L = max(len(seqs[j]) for j in act)
            L = min(L, 2048)
            x = torch.zeros(len(act), L, dtype=torch.long)
            last = []
            for r, j in enumerate(act):
                sq = seqs[j][-L:]
                x[r, :len(sq)] = torch.tensor(sq)
                last.append(len(sq) - 1)
            x = x.cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = model.hidden(x)
                h = h[torch.arange(len(act), device="cuda"), torch.tensor(last, device="cuda")]
                nxt = F.linear(h, model.embed.weight).float().argmax(-1).tolist()
            for r, j in enumerate(act):
                seqs[j].append(nxt[r])
                gen[j].append(nxt[r])
                if nxt[r] == stop:
                    done[j] = True
        for j, i in enumerate(grp):
            outs[i] = gen[j]
    return outs


@torch.no_grad()
def tau_batch(items, draft, block=8):
    """items: list of (prompt, target_gen). Simulated greedy speculative decoding with the draft
    proposing `block` tokens and the target (whose greedy text is target_gen) verifying.
    Returns (total committed tokens, total verify steps)."""
    pos = [0] * len(items)
    steps = [0] * len(items)
    while True:
        act = [i for i in range(len(items)) if pos[i] < len(items[i][1])]
        if not act:
            break
        prefixes = [items[i][0] + items[i][1][:pos[i]] for i in act]
        props = greedy_batch(draft, prefixes, block, stop=-1, bs=64)
        for i, prop in zip(act, props):
            gen = items[i][1]
            k = 0
            while k < len(prop) and pos[i] + k < len(gen) and prop[k] == gen[pos[i] + k]:
                k += 1
            pos[i] += k + 1
            steps[i] += 1
    return sum(len(it[1]) for it in items), sum(steps)


def decode(tok, ids):
    return tok.decode([i for i in ids if i > 2], skip_special_tokens=True)


def eval_all(a, tok, target, draft, val, dev, save=None):
    res = {}
    for name, m in (("target", target), ("draft", draft)):
        vl = val_loss(m, *val, dev, n_rows=256)
        res[f"{name}_val_loss"] = vl
        res[f"{name}_val_ppl"] = math.exp(vl)
        log(f"{name} validation ppl {math.exp(vl):.2f}")
    per, gens = {}, []
    for name in ("man_opt", "doc", "dict", "man_what"):
        fn = os.path.join(a.eval_dir, name + ".jsonl")
        if not os.path.exists(fn):
            continue
        items = [json.loads(x) for x in open(fn)][:a.eval_n]
        prompts, keep = [], []
        for it in items:
            p = data.prompt_ids(tok, it["messages"][:-1])
            if len(p) <= 2048 - 130:
                prompts.append(p)
                keep.append(it)
        t0 = time.time()
        outs = greedy_batch(target, prompts, 128)
        for it, p, g in zip(keep, prompts, outs):
            text = decode(tok, g)
            ok = text.strip() == it["answer"].strip()
            L = len(p)
            bucket = ("<=500" if L <= 500 else "501-1000" if L <= 1000 else "1001-2000") if name == "doc" else "all"
            st = per.setdefault(f"{name}|{bucket}", [0, 0])
            st[0] += ok
            st[1] += 1
            gens.append({"set": name, "prompt_tokens": L, "ok": ok, "output": text, "answer": it["answer"],
                         "gen": g, "prompt": p})
        log(f"eval {name}: {len(keep)} items in {time.time() - t0:.1f}s")
        res["exact_match"] = {k: {"correct": v[0], "n": v[1], "acc": v[0] / v[1]} for k, v in sorted(per.items())}
        if save:
            save(res, gens)
    for k, v in res["exact_match"].items():
        log(f"EM {k}: {v['correct']}/{v['n']} = {v['acc']:.3f}")
    # draft acceptance (block 8): per set, on the held-out prompts, against the target's greedy answers
    rng = random.Random(5)
    res["tau_by_set"] = {}
    tot_c = tot_s = 0
    for name in ("man_opt", "doc", "dict", "man_what"):
        sel = [g for g in gens if g["set"] == name and len(g["gen"]) >= 2]
        rng.shuffle(sel)
        sel = sel[:a.tau_n]
        if not sel:
            continue
        t0 = time.time()
        c, st = tau_batch([(g["prompt"], g["gen"]) for g in sel], draft, 8)
        res["tau_by_set"][name] = {"tau": c / st, "prompts": len(sel), "tokens": c, "steps": st}
        tot_c += c
        tot_s += st
        res["tau_block8"] = tot_c / tot_s
        log(f"tau {name}: {c / st:.3f} over {len(sel)} prompts ({time.time() - t0:.1f}s)")
        if save:
            save(res, gens)
    log(f"tau (block 8, all sets) = {res.get('tau_block8', 0):.3f}")
    return res, gens


SAMPLE_PROMPTS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "user", "content": "What can you do?"}],
    [{"role": "user", "content": "What does \"ephemeral\" mean?"}],
    [{"role": "user", "content": "What is grep for?"}],
    [{"role": "user", "content": "Continue this text:\n\nThe shell reads commands from the terminal and"}],
]


def cmd_draft(a):
    seed_all(4321)
    dev = "cuda"
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    kv, t = gw.read_gguf(a.target)
    kv.pop("__tensor_types")
    TARGET.vocab = DRAFT.vocab = len(kv["tokenizer.ggml.tokens"])
    target = load_from_gguf_tensors(Model(TARGET), t).to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    log("target loaded from", a.target)
    tok, plain, chat, val = prepare(a, a.tokenizer)
    draft = Model(DRAFT)
    if a.init:
        _, td = gw.read_gguf(a.init)
        load_from_gguf_tensors(draft, td)
        log("draft initialised from", a.init)
    draft = draft.to(dev)
    cost_t = TARGET.vocab * TARGET.dim + target.n_params(False)
    cost_d = DRAFT.vocab * DRAFT.dim + draft.n_params(False)
    log(f"draft params {draft.n_params() / 1e6:.2f}M; per-token matmul params target {cost_t / 1e6:.2f}M "
        f"draft {cost_d / 1e6:.2f}M -> {cost_t / cost_d:.1f}x cheaper")
    batches = Batches(plain, chat, a.p_chat, a.bs, dev, 2)

    def step_fn(ids, m):
        x = ids[:, :-1]
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            tl = target(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            dl = draft(x)
        w = (ids[:, 1:] != 0).float() + m[:, 1:]  # all real tokens, assistant tokens twice
        tp = F.log_softmax(tl.float(), -1)
        dp = F.log_softmax(dl.float(), -1)
        kl = (tp.exp() * (tp - dp)).sum(-1)
        ce = F.cross_entropy(dl.float().reshape(-1, dl.shape[-1]), tl.argmax(-1).reshape(-1), reduction="none")
        per = kl + 0.5 * ce.view_as(kl)
        return (per * w).sum() / w.sum()
    train_loop(draft, step_fn, batches, a.minutes, a.lr, a.warm, "draft",
               deadline=T0 + a.total_minutes * 60 - a.reserve_s)
    export.quantize_model_inplace(draft)
    gpath = os.path.join(a.out, "kakeya-draft.gguf")
    export.export(DRAFT, gguf_tensors(draft), a.tokenizer, gpath, "kakeya-draft")
    log(f"wrote {gpath} {os.path.getsize(gpath)} bytes")
    check(gpath, DRAFT)
    draft.eval()
    samples = []
    info = {"cost_ratio": cost_t / cost_d}

    def save(res, gens):
        r = dict(res, **info)
        json.dump(r, open(os.path.join(a.out, "eval.json"), "w"), indent=1)
        slim = [{k: v for k, v in g.items() if k not in ("prompt", "gen")} for g in gens]
        json.dump({"samples": samples, "generations": slim}, open(os.path.join(a.out, "samples.json"), "w"),
                  indent=1)
    try:
        outs = greedy_batch(target, [data.prompt_ids(tok, m) for m in SAMPLE_PROMPTS], 120)
        for msgs, g in zip(SAMPLE_PROMPTS, outs):
            samples.append({"messages": msgs, "reply": decode(tok, g)})
    except Exception as e:  # keep going: the evaluation matters more
        log("samples failed:", repr(e))
    res, gens = eval_all(a, tok, target, draft, val, dev, save)
    save(res, gens)
    log("done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", choices=["target", "draft"])
    ap.add_argument("--corpus", default="tools/corpus/out")
    ap.add_argument("--work", default="/tmp/kakeya-work")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=7.0)
    ap.add_argument("--total-minutes", type=float, default=9.0, help="whole-call deadline for training")
    ap.add_argument("--reserve-s", type=float, default=45, help="seconds kept after training (export, eval)")
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--p-chat", type=float, default=0.65)
    ap.add_argument("--shards", type=int, default=14)
    ap.add_argument("--n-doc", type=int, default=80000)
    ap.add_argument("--n-man", type=int, default=40000)
    ap.add_argument("--target")
    ap.add_argument("--init", help="target: start from this GGUF instead of a random init")
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--chat-seed", type=int, default=7)
    ap.add_argument("--tokenizer")
    ap.add_argument("--eval-dir", default="data/eval")
    ap.add_argument("--eval-n", type=int, default=150)
    ap.add_argument("--eval-minutes", type=float, default=2.5)
    ap.add_argument("--tau-n", type=int, default=80)
    a = ap.parse_args()
    {"target": cmd_target, "draft": cmd_draft}[a.stage](a)


if __name__ == "__main__":
    main()
