/* tokenizer.c — loading a tokenizer from GGUF metadata the way llama.cpp's
 * llama_vocab::load does (types, special ids, the tokens it promotes to
 * control and end-of-generation by their text), token pieces, and the
 * streaming detokenizer. The encoders live in tok_spm.c and tok_bpe.c. */
#include "tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gguf.h"
#include "tok_internal.h"
#include "unicode.h"

/* ---- loading ---- */

/* Texts that make a token end generation; llama.cpp gives them CONTROL
 * even when the vocabulary says otherwise (e.g. Qwen's "</s>"). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", NULL,
};

/* Texts of end-of-turn tokens, when tokenizer.ggml.eot_token_id is absent. */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>", NULL,
};

/* Fill-in-the-middle tokens, also promoted to control; pad, repo and file
 * separator ones end generation. */
static const char *const fim_pre_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>",
    "<|code_prefix|>", "<|prefix|>", NULL,
};
static const char *const fim_suf_texts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>",
    "<|code_suffix|>", "<|suffix|>", NULL,
};
static const char *const fim_mid_texts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>",
    "<|code_middle|>", "<|middle|>", NULL,
};
static const char *const fim_pad_texts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL,
};
static const char *const fim_rep_texts[] = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    NULL,
};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};

/* gpt-oss tokens llama.cpp always renders (it makes them user-defined). */
static const char *const always_rendered_texts[] = {
    "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL,
};

struct load_ids {
    int32_t fim_pad, fim_rep, fim_sep; /* the EOG ones among FIM tokens */
};

static bool text_equals(const struct tokenizer *t, int32_t id, const char *s)
{
    size_t n = strlen(s);
    return t->text_len[id] == n && memcmp(t->text[id], s, n) == 0;
}

static uint8_t attr_from_type(int64_t type)
{
    switch (type) {
    case 1: return TOK_ATTR_NORMAL;
    case 2: return TOK_ATTR_UNKNOWN;
    case 3: return TOK_ATTR_CONTROL;
    case 4: return TOK_ATTR_USER_DEFINED;
    case 5: return TOK_ATTR_UNUSED;
    case 6: return TOK_ATTR_BYTE;
    default: return TOK_ATTR_UNDEFINED;
    }
}

static bool is_numeric_type(enum gguf_type ty)
{
    return ty != GGUF_STRING && ty != GGUF_ARRAY && ty != GGUF_BOOL;
}

/* Copies the token texts (an empty one becomes "[EMPTY_<id>]", as in
 * llama.cpp) and the merges into one arena. */
static int copy_texts(struct tokenizer *t, const struct gguf_value *tokens,
                      const struct gguf_value *merges, struct kk_error *err)
{
    size_t bytes = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint64_t n = tokens->v.arr.items[i].v.str.len;
        bytes += (n ? n : 32) + 1;
    }
    for (uint32_t i = 0; i < t->n_merges; i++)
        bytes += merges->v.arr.items[i].v.str.len + 1;
    t->arena = malloc(bytes ? bytes : 1);
    t->text = malloc((size_t)t->n_vocab * sizeof *t->text);
    t->text_len = malloc((size_t)t->n_vocab * sizeof *t->text_len);
    t->merges = calloc(t->n_merges ? t->n_merges : 1, sizeof *t->merges);
    if (!t->arena || !t->text || !t->text_len || !t->merges)
        return kk_fail(err, "out of memory loading the vocabulary");
    char *p = t->arena;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        struct gguf_str s = tokens->v.arr.items[i].v.str;
        int n = s.len ? (int)s.len : snprintf(p, 32, "[EMPTY_%d]", (int)i);
        if (s.len)
            memcpy(p, s.ptr, s.len);
        p[n] = '\0';
        t->text[i] = p;
        t->text_len[i] = (uint32_t)n;
        p += n + 1;
    }
    for (uint32_t i = 0; i < t->n_merges; i++) {
        struct gguf_str s = merges->v.arr.items[i].v.str;
        memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
        /* "left right", split at the first space after the first byte; a
         * rule without one pairs two empty strings and never applies. */
        const char *space = s.len > 1 ? memchr(p + 1, ' ', s.len - 1) : NULL;
        struct tok_merge *m = &t->merges[i];
        if (space) {
            m->left = p;
            m->left_len = (uint32_t)(space - p);
            m->right = space + 1;
            m->right_len = (uint32_t)(s.len - m->left_len - 1);
        } else {
            m->left = m->right = p + s.len;
        }
        p += s.len + 1;
    }
    return 0;
}

static int read_family(const struct gguf *g, struct tokenizer *t,
                       struct kk_error *err)
{
    struct gguf_str model, pre = {"", 0};
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model))
        return kk_fail(err, "no tokenizer in the model file "
                            "(tokenizer.ggml.model is missing)");
    if (gguf_str_eq(model, "llama")) {
        t->family = TOK_SPM;
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->family = TOK_BPE;
        t->bos = 11, t->eos = 11, t->unk = -1;
        gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        if (pre.len > 64 || !pretok_kind_from_name(pre.ptr, pre.len, &t->pre,
                                                   &t->ignore_merges))
            return kk_fail(err, "unsupported pre-tokenizer '%.*s' "
                                "(tokenizer.ggml.pre); supported: default, "
                                "gpt-2, llama3/llama-bpe, qwen2, smollm",
                           (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
        t->add_bos = t->pre == PRETOK_LLAMA3;
    } else {
        return kk_fail(err, "unsupported tokenizer '%.*s' "
                            "(tokenizer.ggml.model); supported: llama, gpt2",
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }
    gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    return 0;
}

static int read_vocab(const struct gguf *g, struct tokenizer *t,
                      struct kk_error *err)
{
    const struct gguf_value *tokens, *scores = NULL, *types = NULL,
                            *merges = NULL;
    if (!gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens) ||
        tokens->v.arr.elem_type != GGUF_STRING)
        return kk_fail(err, "tokenizer.ggml.tokens is missing or is not an "
                            "array of strings");
    if (tokens->v.arr.n == 0 || tokens->v.arr.n > INT32_MAX / 2)
        return kk_fail(err, "tokenizer.ggml.tokens has %llu entries",
                       (unsigned long long)tokens->v.arr.n);
    t->n_vocab = (int32_t)tokens->v.arr.n;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &scores) &&
        (!is_numeric_type(scores->v.arr.elem_type) ||
         scores->v.arr.n < tokens->v.arr.n))
        return kk_fail(err, "tokenizer.ggml.scores has %llu numbers for %d "
                            "tokens", (unsigned long long)scores->v.arr.n,
                       (int)t->n_vocab);
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &types) &&
        (!is_numeric_type(types->v.arr.elem_type) ||
         types->v.arr.n < tokens->v.arr.n))
        return kk_fail(err, "tokenizer.ggml.token_type has %llu numbers for "
                            "%d tokens", (unsigned long long)types->v.arr.n,
                       (int)t->n_vocab);
    if (t->family == TOK_BPE) {
        if (!gguf_get_arr(g, "tokenizer.ggml.merges", &merges) ||
            merges->v.arr.elem_type != GGUF_STRING)
            return kk_fail(err, "tokenizer.ggml.merges is missing or is not "
                                "an array of strings (a gpt2 tokenizer "
                                "needs it)");
        if (merges->v.arr.n > INT32_MAX / 2)
            return kk_fail(err, "tokenizer.ggml.merges has too many entries");
        t->n_merges = (uint32_t)merges->v.arr.n;
    }
    if (copy_texts(t, tokens, merges, err) != 0)
        return -1;
    t->score = malloc((size_t)t->n_vocab * sizeof *t->score);
    t->attr = malloc((size_t)t->n_vocab);
    if (!t->score || !t->attr)
        return kk_fail(err, "out of memory loading the vocabulary");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->score[i] = scores ? (float)gguf_arr_f64(scores, (uint64_t)i) : 0.0f;
        t->attr[i] = types ? attr_from_type(gguf_arr_i64(types, (uint64_t)i))
                           : TOK_ATTR_NORMAL;
    }
    if (tok_index_build_vocab(t) != 0 || tok_index_build_merges(t) != 0)
        return kk_fail(err, "out of memory indexing the vocabulary");
    return 0;
}

/* An id key, ignored (as llama.cpp does) when out of range. */
static void read_id(const struct gguf *g, const struct tokenizer *t,
                    const char *key, int32_t *id)
{
    uint32_t v;
    if (gguf_get_u32(g, key, &v) && v < (uint32_t)t->n_vocab)
        *id = (int32_t)v;
}

/* The token of the first text in list that the vocabulary has, made
 * control; keeps *id if already set. (llama.cpp walks a hash map here, in
 * no defined order; which one wins only matters for vocabularies with
 * several such tokens, and then only for the id reported, not for EOG.) */
static void detect_by_text(struct tokenizer *t, const char *const *list,
                           int32_t *id)
{
    if (*id >= 0)
        return;
    for (; *list; list++) {
        int32_t i = tok_find(t, *list);
        if (i >= 0) {
            *id = i;
            t->attr[i] |= TOK_ATTR_CONTROL;
            return;
        }
    }
}

static int eog_add(struct tokenizer *t, int32_t id)
{
    if (id < 0)
        return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    int32_t *v = realloc(t->eog, (size_t)(t->n_eog + 1) * sizeof *v);
    if (!v)
        return -1;
    t->eog = v;
    t->eog[t->n_eog++] = id;
    return 0;
}

static void eog_remove(struct tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            t->eog[i] = t->eog[--t->n_eog];
}

static int32_t eog_with_text(const struct tokenizer *t, const char *s)
{
    for (int i = 0; i < t->n_eog; i++)
        if (text_equals(t, t->eog[i], s))
            return t->eog[i];
    return -1;
}

/* llama.cpp's exceptions: harmony/solar-open "<|end|>" and gemma4 "</s>"
 * are not end-of-generation after all. */
static void eog_apply_exceptions(struct tokenizer *t)
{
    int32_t end = eog_with_text(t, "<|end|>");
    bool has_call = eog_with_text(t, "<|call|>") >= 0 ||
                    eog_with_text(t, "<|calls|>") >= 0;
    if (end >= 0 && has_call && (eog_with_text(t, "<|return|>") >= 0 ||
                                 eog_with_text(t, "<|flush|>") >= 0)) {
        eog_remove(t, end);
        t->attr[end] = TOK_ATTR_USER_DEFINED;
    }
    int32_t s = eog_with_text(t, "</s>");
    if (s >= 0 && eog_with_text(t, "<|tool_response>") >= 0) {
        eog_remove(t, s);
        t->attr[s] = TOK_ATTR_NORMAL;
    }
}

static int read_special(const struct gguf *g, struct tokenizer *t)
{
    struct load_ids fim = {-1, -1, -1};
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1;
    t->eot = t->eom = -1;
    read_id(g, t, "tokenizer.ggml.bos_token_id", &t->bos);
    read_id(g, t, "tokenizer.ggml.eos_token_id", &t->eos);
    read_id(g, t, "tokenizer.ggml.eot_token_id", &t->eot);
    read_id(g, t, "tokenizer.ggml.eom_token_id", &t->eom);
    read_id(g, t, "tokenizer.ggml.unknown_token_id", &t->unk);
    read_id(g, t, "tokenizer.ggml.fim_pad_token_id", &fim.fim_pad);
    read_id(g, t, "tokenizer.ggml.fim_rep_token_id", &fim.fim_rep);
    read_id(g, t, "tokenizer.ggml.fim_sep_token_id", &fim.fim_sep);
    if (t->bos >= t->n_vocab)
        t->bos = -1;
    if (t->eos >= t->n_vocab)
        t->eos = -1;
    if (t->unk >= t->n_vocab)
        t->unk = -1;

    static const char *const eom_texts[] = {"<|eom_id|>", NULL};
    detect_by_text(t, eot_texts, &t->eot);
    detect_by_text(t, eom_texts, &t->eom);
    detect_by_text(t, fim_pre_texts, &fim_pre);
    detect_by_text(t, fim_suf_texts, &fim_suf);
    detect_by_text(t, fim_mid_texts, &fim_mid);
    detect_by_text(t, fim_pad_texts, &fim.fim_pad);
    detect_by_text(t, fim_rep_texts, &fim.fim_rep);
    detect_by_text(t, fim_sep_texts, &fim.fim_sep);

    if (eog_add(t, fim.fim_pad) || eog_add(t, fim.fim_rep) ||
        eog_add(t, fim.fim_sep))
        return -1;
    for (const char *const *e = eog_texts; *e; e++) {
        int32_t i = tok_find(t, *e);
        if (i >= 0) {
            if (eog_add(t, i) != 0)
                return -1;
            t->attr[i] |= TOK_ATTR_CONTROL;
        }
    }
    for (const char *const *e = always_rendered_texts; *e; e++) {
        int32_t i = tok_find(t, *e);
        if (i >= 0)
            t->attr[i] = TOK_ATTR_USER_DEFINED;
    }
    if (eog_add(t, t->eos) || eog_add(t, t->eot) || eog_add(t, t->eom))
        return -1;
    eog_apply_exceptions(t);

    for (int b = 0; b < 256; b++) {
        char hex[8], raw[2] = {(char)b, 0};
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_token[b] = tok_vocab_find(t, hex, 6);
        if (t->byte_token[b] < 0)
            t->byte_token[b] = tok_vocab_find(t, raw, 1);
    }
    return 0;
}

static void init_byte_alphabet(struct tokenizer *t)
{
    for (size_t c = 0; c < sizeof t->cpt_byte / sizeof t->cpt_byte[0]; c++)
        t->cpt_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cpt = uni_byte_to_cpt((unsigned char)b);
        char utf8[4];
        t->byte_text_len[b] = (uint8_t)uni_encode(cpt, utf8);
        memcpy(t->byte_text[b], utf8, t->byte_text_len[b]);
        t->cpt_byte[cpt] = (int16_t)b;
    }
}

int tok_load(const struct gguf *g, struct tokenizer **out,
             struct kk_error *err)
{
    *out = NULL;
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return kk_fail(err, "out of memory loading the tokenizer");
    init_byte_alphabet(t);
    if (read_family(g, t, err) != 0 || read_vocab(g, t, err) != 0)
        goto fail;
    if (read_special(g, t) != 0 || tok_special_build(t) != 0) {
        kk_fail(err, "out of memory loading the tokenizer");
        goto fail;
    }
    *out = t;
    return 0;
fail:
    tok_free(t);
    return -1;
}

void tok_free(struct tokenizer *t)
{
    if (!t)
        return;
    tok_special_free(t);
    tok_index_free(&t->vocab_index);
    tok_index_free(&t->merge_index);
    free(t->arena);
    free(t->text);
    free(t->text_len);
    free(t->score);
    free(t->attr);
    free(t->merges);
    free(t->eog);
    free(t);
}

/* ---- encoding ---- */

int tok_encode(const struct tokenizer *t, const char *text, size_t len,
               bool add_bos, bool parse_special, int32_t *ids, int cap,
               struct kk_error *err)
{
    struct tok_ids out = {0};
    int rc = 0;
    if (add_bos && t->bos >= 0)
        rc = tok_ids_push(&out, t->bos);
    if (rc == 0)
        rc = tok_encode_fragments(t, text, len, parse_special, &out);
    if (rc != 0) {
        free(out.v);
        return kk_fail(err, "out of memory tokenizing %zu bytes of text", len);
    }
    if (out.n > INT_MAX) {
        free(out.v);
        return kk_fail(err, "text of %zu bytes gives more than %d tokens",
                       len, INT_MAX);
    }
    size_t n_copy = cap > 0 ? ((size_t)cap < out.n ? (size_t)cap : out.n) : 0;
    if (n_copy)
        memcpy(ids, out.v, n_copy * sizeof *ids);
    int n = (int)out.n;
    free(out.v);
    return n;
}

/* ---- pieces ---- */

/* Appends len bytes to buf as far as cap allows, counting them all. */
static void put(char *buf, int cap, int *n, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++, (*n)++)
        if (*n < cap)
            buf[*n] = s[i];
}

/* SPM normal token: U+2581 back to spaces. */
static void put_unescaped(char *buf, int cap, int *n, const char *s,
                          size_t len)
{
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            put(buf, cap, n, " ", 1);
            i += 3;
        } else {
            put(buf, cap, n, s + i, 1);
            i++;
        }
    }
}

/* BPE normal token: byte-alphabet characters back to bytes. A character
 * outside the alphabet is written as llama.cpp writes it:
 * "[UNK_BYTE_0x<its utf-8 in hex><the whole token text>]". */
static void put_bytes_decoded(const struct tokenizer *t, char *buf, int cap,
                              int *n, const char *s, size_t len)
{
    for (size_t pos = 0; pos < len;) {
        uint32_t cpt = uni_decode_next(s, len, &pos);
        if (cpt < sizeof t->cpt_byte / sizeof t->cpt_byte[0] &&
            t->cpt_byte[cpt] >= 0) {
            char b = (char)t->cpt_byte[cpt];
            put(buf, cap, n, &b, 1);
            continue;
        }
        char utf8[4], hex[3];
        int k = uni_encode(cpt, utf8);
        put(buf, cap, n, "[UNK_BYTE_0x", 12);
        for (int j = 0; j < k; j++) {
            snprintf(hex, sizeof hex, "%02x", (unsigned char)utf8[j]);
            put(buf, cap, n, hex, 2);
        }
        put(buf, cap, n, s, len);
        put(buf, cap, n, "]", 1);
    }
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte of an SPM byte token "<0xNN>". */
static char byte_of_token(const char *s, size_t len)
{
    int v = 0;
    for (size_t i = 3; i < len && hex_value(s[i]) >= 0; i++)
        v = v * 16 + hex_value(s[i]);
    return (char)v;
}

int tok_piece(const struct tokenizer *t, int32_t id, bool special, char *buf,
              int cap)
{
    if (id < 0 || id >= t->n_vocab)
        return -1;
    uint8_t attr = t->attr[id];
    const char *s = t->text[id];
    size_t len = t->text_len[id];
    int n = 0;
    if (attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL) && !special)
        return 0;
    if (attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
        put(buf, cap, &n, s, len);
    } else if (attr & TOK_ATTR_NORMAL) {
        if (t->family == TOK_SPM)
            put_unescaped(buf, cap, &n, s, len);
        else
            put_bytes_decoded(t, buf, cap, &n, s, len);
    } else if (attr & TOK_ATTR_BYTE && t->family == TOK_SPM) {
        char b = byte_of_token(s, len);
        put(buf, cap, &n, &b, 1);
    }
    /* Unused and undefined tokens render as nothing. */
    return n;
}

/* ---- queries ---- */

int32_t tok_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const struct tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct tokenizer *t) { return t->eos; }
bool tok_add_bos(const struct tokenizer *t) { return t->add_bos; }

bool tok_is_eog(const struct tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

bool tok_is_control(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->attr[id] & TOK_ATTR_CONTROL);
}

int32_t tok_find(const struct tokenizer *t, const char *s)
{
    return tok_vocab_find(t, s, strlen(s));
}

const char *tok_text(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->text[id] : NULL;
}
