#!/usr/bin/env python3
"""chatgen.py — chat training/test data from the extracted corpus. Stdlib only.

Reads tools/corpus/out/{docs,man,dict}.jsonl (see tools/corpus/extract.py) and
writes JSON lines, one conversation a line:
  {"kind": "doc"|"man_opt"|"man_what"|"dict"|"cont"|"small", "messages": [...],
   "answer": "<reference answer of the last assistant turn>", ...}
Messages are {"role": "system"|"user"|"assistant", "content": str}; a sample
without a system message is rendered without one (the builtin template).

  --split train  conversations from the corpus' train split (for training)
  --split test   conversations from the validation split (held out), smaller

Deterministic for a given --seed and --shard/--nshards.
"""
import argparse, json, os, random, re, sys

DEFAULT_SYSTEM = "You are Kakeya, a helpful assistant."
SYSTEMS = ["You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
           "Answer the user's questions accurately.", "You help people read documentation.",
           "You are a friendly assistant running on the user's own computer."]
CHARS_PER_TOKEN = 3.7


def pick_system(rng, msgs):
    r = rng.random()
    if r < 0.45:
        return [{"role": "system", "content": DEFAULT_SYSTEM}] + msgs
    if r < 0.75:
        return msgs
    return [{"role": "system", "content": rng.choice(SYSTEMS)}] + msgs


# ------------------------------------------------------------------ dictionary
def a_or_an(pos):
    return "an" if pos[0] in "aeiou" else "a"


def dict_samples(syns, rng, n, split):
    out = []
    by_word = {}
    for s in syns:
        for w in s["words"]:
            by_word.setdefault(w.lower(), []).append(s)
    pool = [s for s in syns if s["split"] == split]
    for _ in range(n):
        s = rng.choice(pool)
        w = rng.choice(s["words"])
        senses = by_word[w.lower()]
        r = rng.random()
        if r < 0.55 or (r < 0.8 and len(s["words"]) < 2) or (r >= 0.8 and not any(w.lower() in e.lower() for e in s["examples"])):
            q = rng.choice(["What does \"{w}\" mean?", "What does {w} mean?", "Define {w}.",
                            "What is the meaning of the word \"{w}\"?", "define {w}",
                            "What is the definition of {w}?"]).format(w=w)
            if len(senses) == 1:
                ans = f"\"{w}\" is {a_or_an(s['pos'])} {s['pos']} meaning {s['gloss']}."
            else:
                parts = [f"as {a_or_an(x['pos'])} {x['pos']}, {x['gloss']}" for x in senses[:3]]
                ans = f"\"{w}\" has several meanings: " + "; ".join(parts) + "."
            kind = "dict_def"
        elif r < 0.8:
            q = rng.choice(["What is a synonym of \"{w}\"?", "Give me synonyms for {w}.",
                            "Which words mean the same as \"{w}\"?"]).format(w=w)
            others = [x for x in s["words"] if x.lower() != w.lower()]
            ans = f"Synonyms of \"{w}\" ({s['gloss']}): " + ", ".join(others) + "."
            kind = "dict_syn"
        else:
            q = rng.choice(["Use the word \"{w}\" in a sentence.", "Give an example sentence with {w}.",
                            "How is \"{w}\" used in a sentence?"]).format(w=w)
            ex = next(e for e in s["examples"] if w.lower() in e.lower())
            ex = ex[0].upper() + ex[1:]
            if ex[-1] not in ".!?":
                ex += "."
            ans = f"For example: \"{ex}\""
            kind = "dict_ex"
        msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]
        out.append({"kind": kind, "word": w, "monosemous": len(senses) == 1,
                    "messages": pick_system(rng, msgs), "answer": ans})
    return out


# ------------------------------------------------------------------ man pages
def first_sentences(desc, limit=320):
    if len(desc) <= limit:
        return desc
    cut = desc[:limit]
    m = list(re.finditer(r"[.;:](\s|$)", cut))
    if m and m[-1].end() > 40:
        return cut[:m[-1].end()].strip()
    return cut.rsplit(" ", 1)[0] + " ..."


def man_excerpt(m, opt_index, rng, max_chars):
    opts = m["options"]
    lines = [f"{m['cmd'].upper()}({m['section']})", "", "NAME", "    " + m["name"], "", "OPTIONS"]
    # a window of options that contains the asked one
    body = [f"    {t}\n        {first_sentences(d, 600)}" for t, d in opts]
    lo, hi = opt_index, opt_index + 1
    size = len(body[opt_index])
    while size < max_chars and (lo > 0 or hi < len(body)):
        if (rng.random() < 0.5 and lo > 0) or hi >= len(body):
            lo -= 1
            size += len(body[lo]) + 1
        else:
            size += len(body[hi]) + 1
            hi += 1
    return "\n".join(lines) + "\n" + "\n".join(body[lo:hi])


def opt_name(tag):
    t = tag.split(",")[0].strip()
    t = re.split(r"[ =\[<]", t)[0]
    return t


def man_samples(mans, rng, n, split, want_kind=None):
    pool = [m for m in mans if m["split"] == split and m["name"] and " - " in m["name"]]
    popt = [m for m in pool if len(m["options"]) >= 2]
    out = []
    for _ in range(n):
        r = rng.random()
        if want_kind == "man_opt" or (want_kind is None and r < 0.7 and popt):
            m = rng.choice(popt)
            names = [opt_name(t) for t, _ in m["options"]]
            idx = rng.randrange(len(m["options"]))
            if names.count(names[idx]) != 1 or len(names[idx]) < 2:
                continue
            tag, desc = m["options"][idx]
            ans = first_sentences(desc)
            budget = int(CHARS_PER_TOKEN * rng.choice([300, 600, 900, 1300]))
            page = man_excerpt(m, idx, rng, budget)
            q = rng.choice(["What does the {o} option of {c} do?", "What does {c} {o} do?",
                            "What is the {o} option of {c} for?", "Explain the {o} option of {c}."]).format(o=names[idx], c=m["cmd"])
            intro = rng.choice(["Here is the manual page of {c}:\n\n{p}\n\n{q}", "{p}\n\n{q}",
                                "Manual page:\n{p}\n\nQuestion: {q}"]).format(c=m["cmd"], p=page, q=q)
            msgs = [{"role": "user", "content": intro}, {"role": "assistant", "content": ans}]
            # a follow-up about another option of the same page
            others = [i for i in range(len(m["options"])) if i != idx and names.count(names[i]) == 1
                      and len(names[i]) > 1 and m["options"][i][0] in page]
            if others and rng.random() < 0.4:
                j = rng.choice(others)
                a2 = first_sentences(m["options"][j][1])
                msgs += [{"role": "user", "content": rng.choice(["And {o}?", "What about {o}?", "And what does {o} do?"]).format(o=names[j])},
                         {"role": "assistant", "content": a2}]
                ans = a2
            out.append({"kind": "man_opt", "cmd": m["cmd"], "option": names[idx], "chars": len(page),
                        "messages": pick_system(rng, msgs), "answer": ans})
        else:
            m = rng.choice(pool)
            desc = m["name"].split(" - ", 1)[1].strip()
            q = rng.choice(["What is {c} for?", "What does the {c} command do?", "What is {c}?",
                            "Tell me what {c} does."]).format(c=m["cmd"])
            ans = f"{m['cmd']}: {desc}" if not desc.endswith(".") else f"{m['cmd']}: {desc}"
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]
            out.append({"kind": "man_what", "cmd": m["cmd"], "messages": pick_system(rng, msgs), "answer": ans})
    return out


# ------------------------------------------------------------------ documents
FIRST = ["Ada", "Boris", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kaito", "Lena",
         "Marco", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tamar", "Umar", "Vera", "Walter", "Xenia",
         "Yusuf", "Zora", "Amelia", "Bruno", "Celia", "Dario", "Emil", "Fiona", "Gustav", "Hana", "Ivo", "Jana"]
LAST = ["Lindqvist", "Okafor", "Marsh", "Petrov", "Alvarez", "Brennan", "Castillo", "Dunmore", "Eklund", "Fairbanks",
        "Haldane", "Iwasaki", "Jovanovic", "Kessler", "Lorimer", "Moreau", "Novak", "Ortega", "Pellegrini", "Quist",
        "Ramsay", "Sato", "Thornbury", "Ulmer", "Vasquez", "Whitlock", "Yilmaz", "Zeller"]
THINGS = ["the Alder project", "the Morvan server", "the north gate", "the Kestrel release", "the blue warehouse",
          "the night shift", "the Corvid library", "the harbour office", "the Tamsin bridge", "the east wing",
          "the backup job", "the Orion cluster", "the spring meeting", "the Larch database", "the Velvet test suite",
          "the river station", "the Falcon build", "the main archive", "the Quill editor", "the west tunnel"]
ATTRS = [("access code", "code"), ("opening year", "year"), ("maximum speed", "speed"), ("home port", "city"),
         ("favourite colour", "colour"), ("room number", "num"), ("budget", "money"), ("owner", "person"),
         ("launch date", "date"), ("password", "word"), ("capacity", "num"), ("version number", "version"),
         ("contact person", "person"), ("head office", "city"), ("deadline", "date"), ("team size", "num")]
CITIES = ["Lisbon", "Tromso", "Valparaiso", "Osaka", "Gdansk", "Marseille", "Halifax", "Dakar", "Perth", "Bergen",
          "Cork", "Tallinn", "Mombasa", "Porto", "Hobart", "Split", "Kobe", "Riga", "Antwerp", "Quebec"]
COLOURS = ["amber", "teal", "crimson", "olive", "indigo", "ochre", "violet", "silver", "maroon", "turquoise"]
WORDS = ["marigold", "tangent", "pebble", "lantern", "saffron", "quartz", "juniper", "cobalt", "falcon", "meadow",
         "harbor", "thistle", "ember", "glacier", "walnut", "cinder", "orchid", "comet", "raven", "willow"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def value_of(kind, rng):
    if kind == "code":
        return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(rng.randint(4, 7)))
    if kind == "year":
        return str(rng.randint(1820, 2030))
    if kind == "speed":
        return f"{rng.randint(12, 480)} kilometres per hour"
    if kind == "city":
        return rng.choice(CITIES)
    if kind == "colour":
        return rng.choice(COLOURS)
    if kind == "num":
        return str(rng.randint(2, 9999))
    if kind == "money":
        return f"{rng.randint(2, 950)},{rng.randint(0, 999):03d} euros"
    if kind == "person":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if kind == "date":
        return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(1990, 2035)}"
    if kind == "word":
        return rng.choice(WORDS) + str(rng.randint(10, 99))
    if kind == "version":
        return f"{rng.randint(0, 12)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}"
    raise ValueError(kind)


def make_entity(rng):
    if rng.random() < 0.5:
        return rng.choice(THINGS)
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def fact_sentence(ent, attr, val):
    if ent[0].isupper():
        return f"The {attr} of {ent} is {val}."
    return f"The {attr} of {ent} is {val}."


def fact_question(ent, attr, rng):
    return rng.choice(["What is the {a} of {e}?", "According to the document, what is the {a} of {e}?",
                       "Tell me the {a} of {e}.", "What {a} does the document give for {e}?"]).format(a=attr, e=ent)


SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def sentences(par):
    return [s.strip() for s in SENT_RE.split(par) if s.strip()]


def doc_passage(docs, rng, target_chars):
    """A passage of about target_chars from one document (or consecutive ones)."""
    i = rng.randrange(len(docs))
    text = docs[i]["text"]
    j = i + 1
    while len(text) < target_chars and j < len(docs) and j < i + 40:
        text += "\n\n" + docs[j]["text"]
        j += 1
    paras = [p for p in text.split("\n\n") if p.strip()]
    start = rng.randrange(max(1, len(paras) // 3 + 1))
    out, size = [], 0
    for p in paras[start:]:
        if size + len(p) > target_chars and out:
            break
        out.append(p)
        size += len(p) + 2
    if size > target_chars * 1.3 and out:
        joined = "\n\n".join(out)[:int(target_chars * 1.15)]
        out = joined.rsplit("\n", 1)[0].split("\n\n") if "\n" in joined else [joined]
    return [p for p in out if p.strip()]


def doc_samples(docs, rng, n, min_tok=150, max_tok=1900):
    out = []
    for _ in range(n):
        tgt_tok = int(min_tok + (max_tok - min_tok) * rng.random() ** 1.2)
        paras = doc_passage(docs, rng, int(tgt_tok * CHARS_PER_TOKEN))
        if not paras:
            continue
        # plant facts: n facts with distractors sharing entity or attribute
        n_facts = rng.randint(1, 4)
        facts = []
        used = set()
        base_ent = make_entity(rng)
        for k in range(n_facts):
            ent = base_ent if rng.random() < 0.4 else make_entity(rng)
            attr, kind = rng.choice(ATTRS)
            if (ent, attr) in used:
                continue
            used.add((ent, attr))
            facts.append((ent, attr, value_of(kind, rng)))
        plant_mode = rng.random() < 0.75
        paras = list(paras)
        if plant_mode:
            for ent, attr, val in facts:
                pos = rng.randrange(len(paras) + 1)
                s = fact_sentence(ent, attr, val)
                if rng.random() < 0.5 and pos < len(paras):
                    paras[pos] = paras[pos] + " " + s if rng.random() < 0.5 else s + " " + paras[pos]
                else:
                    paras.insert(pos, s)
        passage = "\n\n".join(paras)
        qa = []
        if plant_mode:
            order = list(facts)
            rng.shuffle(order)
            for ent, attr, val in order[:rng.randint(1, 3)]:
                qa.append((fact_question(ent, attr, rng), fact_sentence(ent, attr, val), "fact"))
        # natural sentences from the passage
        cands = []
        for p in paras:
            for s in sentences(p):
                if 40 <= len(s) <= 240 and passage.count(s) == 1 and "\n" not in s and not s.startswith("The ") or \
                        (40 <= len(s) <= 240 and passage.count(s) == 1 and "\n" not in s):
                    cands.append(s)
        cands = [s for s in cands if not any(s == fact_sentence(*f) for f in facts)]
        if cands and (not qa or rng.random() < 0.5):
            for _ in range(rng.randint(1, 2)):
                s = rng.choice(cands)
                words = s.split()
                if len(words) < 7 or any(s == x[1] for x in qa):
                    continue
                r = rng.random()
                if r < 0.5:
                    k = rng.randint(3, max(3, min(8, len(words) // 2)))
                    prefix = " ".join(words[:k])
                    if passage.count(prefix) != 1:
                        continue
                    q = rng.choice(["Complete this sentence from the document: \"{p} ...\"",
                                    "How does the sentence that begins with \"{p}\" continue?",
                                    "Quote the full sentence of the document that starts with \"{p}\"."]).format(p=prefix)
                    qa.append((q, s, "cloze"))
                else:
                    # sentence after a given sentence
                    for p in paras:
                        ss = sentences(p)
                        if s in ss:
                            k = ss.index(s)
                            if k + 1 < len(ss) and 20 <= len(ss[k + 1]) <= 300 and passage.count(ss[k + 1]) == 1 \
                                    and not any(ss[k + 1] == x[1] for x in qa):
                                q = rng.choice(["In the document, which sentence comes right after \"{s}\"?",
                                                "What does the document say right after \"{s}\"?"]).format(s=s)
                                qa.append((q, ss[k + 1], "next"))
                            break
        if not qa:
            continue
        intro_q = qa[0][0]
        tmpl = rng.choice(["Read the following document and answer the question.\n\n{d}\n\nQuestion: {q}",
                           "{d}\n\n{q}", "Document:\n\"\"\"\n{d}\n\"\"\"\n\n{q}",
                           "Here is a text:\n\n{d}\n\nBased on the text, {ql}"])
        user = tmpl.format(d=passage, q=intro_q, ql=intro_q[0].lower() + intro_q[1:])
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": qa[0][1]}]
        for q, a, _ in qa[1:]:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        out.append({"kind": "doc", "qtype": qa[-1][2], "turns": len(qa), "chars": len(passage),
                    "messages": pick_system(rng, msgs), "answer": qa[-1][1]})
    return out


# ------------------------------------------------------------------ continuation, small talk
def cont_samples(docs, rng, n):
    out = []
    for _ in range(n):
        paras = doc_passage(docs, rng, rng.randint(300, 1500))
        text = "\n\n".join(paras)
        if len(text) < 200:
            continue
        cut = text.rfind(". ", 0, len(text) // 2) + 1
        if cut < 50:
            continue
        q = rng.choice(["Continue this text:\n\n{t}", "Please continue:\n{t}", "Write what comes next.\n\n{t}"]).format(t=text[:cut])
        ans = text[cut:].strip()
        out.append({"kind": "cont", "messages": pick_system(rng, [{"role": "user", "content": q},
                                                                  {"role": "assistant", "content": ans}]), "answer": ans})
    return out


SMALL = [
    (["Hello!", "Hi", "Hello", "hi there", "Hey!", "Good morning!", "Hello, who are you?"],
     ["Hello! I am Kakeya, a small assistant that runs on your computer. I can answer questions about a document you paste, explain command-line options from manual pages, and define English words. How can I help?",
      "Hi! How can I help you today? You can paste a document and ask me about it, or ask me what a command or a word means."]),
    (["Who are you?", "What are you?", "What is your name?", "Tell me about yourself."],
     ["I am Kakeya, a small language model that runs locally. I was trained on documentation, manual pages and dictionaries that ship with Debian. I am best at answering questions about text you give me."]),
    (["What can you do?", "How can you help me?", "What are you good at?"],
     ["I can answer questions about a document you paste into the chat, explain what a command or one of its options does, define English words and give synonyms, and continue a piece of text."]),
    (["Thanks!", "Thank you.", "thanks a lot", "Great, thank you!"],
     ["You are welcome! Is there anything else I can help with?", "Glad I could help."]),
    (["Bye!", "Goodbye.", "See you later."],
     ["Goodbye! Your conversation is saved, so you can come back to it later."]),
]


def small_samples(rng, n):
    out = []
    for _ in range(n):
        qs, ans = rng.choice(SMALL)
        a = rng.choice(ans)
        out.append({"kind": "small", "messages": pick_system(rng, [{"role": "user", "content": rng.choice(qs)},
                                                                   {"role": "assistant", "content": a}]), "answer": a})
    return out


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="tools/corpus/out")
    ap.add_argument("--split", choices=["train", "test"], default="train")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--nshards", type=int, default=1)
    ap.add_argument("--n-doc", type=int, default=60000)
    ap.add_argument("--n-man", type=int, default=40000)
    ap.add_argument("--n-dict", type=int, default=60000)
    ap.add_argument("--n-cont", type=int, default=8000)
    ap.add_argument("--n-small", type=int, default=1500)
    a = ap.parse_args()
    rng = random.Random(a.seed * 1000 + a.shard + (0 if a.split == "train" else 500000))
    split = "train" if a.split == "train" else "validation"
    docs = [d for d in load(os.path.join(a.corpus, "docs.jsonl")) if d["split"] == split and d["source"] != "man"]
    mans = load(os.path.join(a.corpus, "man.jsonl"))
    syns = load(os.path.join(a.corpus, "dict.jsonl"))
    k = a.nshards
    out = []
    out += doc_samples(docs, rng, a.n_doc // k)
    out += man_samples(mans, rng, a.n_man // k, split)
    out += dict_samples(syns, rng, a.n_dict // k, split)
    if a.split == "train":
        out += cont_samples(docs, rng, a.n_cont // k)
        out += small_samples(rng, a.n_small // k)
    rng.shuffle(out)
    with open(a.out, "w") as f:
        for s in out:
            f.write(json.dumps(s) + "\n")
    print(f"{a.out}: {len(out)} conversations", file=sys.stderr)


if __name__ == "__main__":
    main()
