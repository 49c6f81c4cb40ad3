/* tok_special.c — cutting special tokens out of text, as llama.cpp's
 * tokenizer_st_partition does: special tokens are taken longest first, and
 * each one splits every remaining run of plain text at all its
 * (non-overlapping, leftmost-first) occurrences before the next, shorter,
 * one is tried. A trie first finds which special texts occur at all, so the
 * thousands of special tokens of a Gemma vocabulary cost nothing when they
 * are absent. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- trie ---- */

static int trie_alloc(struct tok_trie *tr, size_t max_edges)
{
    size_t n = 16;
    while (n < 2 * max_edges)
        n *= 2;
    tr->edge_keys = calloc(n, sizeof *tr->edge_keys);
    tr->edge_child = malloc(n * sizeof *tr->edge_child);
    tr->edge_mask = n - 1;
    tr->n_nodes = 1; /* the root */
    return tr->edge_keys && tr->edge_child ? 0 : -1;
}

static size_t edge_slot(const struct tok_trie *tr, uint64_t key)
{
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29)) & tr->edge_mask;
}

/* Child of node by byte, or 0 (the root is never a child). */
static uint32_t trie_child(const struct tok_trie *tr, uint32_t node,
                           unsigned char byte)
{
    uint64_t key = ((uint64_t)node << 8 | byte) + 1;
    for (size_t s = edge_slot(tr, key);; s = (s + 1) & tr->edge_mask) {
        if (tr->edge_keys[s] == key)
            return tr->edge_child[s];
        if (tr->edge_keys[s] == 0)
            return 0;
    }
}

static uint32_t trie_insert(struct tok_trie *tr, const char *text, size_t len)
{
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint64_t key = ((uint64_t)node << 8 | (unsigned char)text[i]) + 1;
        size_t s = edge_slot(tr, key);
        while (tr->edge_keys[s] && tr->edge_keys[s] != key)
            s = (s + 1) & tr->edge_mask;
        if (!tr->edge_keys[s]) {
            tr->edge_keys[s] = key;
            tr->edge_child[s] = tr->n_nodes++;
        }
        node = tr->edge_child[s];
    }
    return node;
}

/* ---- special token list ---- */

static int by_length_then_id(const void *pa, const void *pb, void *ctx)
{
    const struct tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = t->text_len[a], lb = t->text_len[b];
    if (la != lb)
        return la > lb ? -1 : 1;
    return (a > b) - (a < b);
}

int tok_special_build(struct tokenizer *t)
{
    const unsigned special = TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED |
                             TOK_ATTR_UNKNOWN;
    size_t n = 0, bytes = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->attr[id] & special) {
            n++;
            bytes += t->text_len[id];
        }
    }
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    t->special_node = malloc((n ? n : 1) * sizeof *t->special_node);
    if (!t->special || !t->special_node || trie_alloc(&t->trie, bytes) != 0)
        return -1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->attr[id] & special)
            t->special[t->n_special++] = id;
    /* Sorting ids of equal length by id makes the order deterministic;
     * llama.cpp's std::sort leaves it unspecified. */
    qsort_r(t->special, n, sizeof *t->special, by_length_then_id, t);
    for (int32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        t->special_node[i] = trie_insert(&t->trie, t->text[id], t->text_len[id]);
    }
    return 0;
}

void tok_special_free(struct tokenizer *t)
{
    free(t->special);
    free(t->special_node);
    free(t->trie.edge_keys);
    free(t->trie.edge_child);
}

/* ---- partition ---- */

struct fragment {
    int32_t token; /* -1: plain text [off, off + len) */
    size_t off, len;
};

struct fragments {
    struct fragment *v;
    size_t n, cap;
};

static int fragments_push(struct fragments *f, struct fragment x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct fragment *v = realloc(f->v, cap * sizeof *v);
        if (!v)
            return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return 0;
}

/* Marks every trie node reached from any position of text: a special
 * token occurs in the text iff its end node is marked. */
static void mark_occurring(const struct tok_trie *tr, const char *text,
                           size_t len, bool *seen)
{
    for (size_t i = 0; i < len; i++) {
        uint32_t node = 0;
        for (size_t j = i; j < len; j++) {
            node = trie_child(tr, node, (unsigned char)text[j]);
            if (!node)
                break;
            seen[node] = true;
        }
    }
}

/* Splits every plain fragment of in at each occurrence of token id. */
static int split_on_token(const struct tokenizer *t, int32_t id,
                          const char *text, const struct fragments *in,
                          struct fragments *out)
{
    const char *needle = t->text[id];
    size_t nlen = t->text_len[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct fragment f = in->v[i];
        if (f.token >= 0) {
            if (fragments_push(out, f) != 0)
                return -1;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        while (pos < end) {
            const char *hit = memmem(text + pos, end - pos, needle, nlen);
            if (!hit)
                break;
            size_t at = (size_t)(hit - text);
            if (at > pos &&
                fragments_push(out, (struct fragment){-1, pos, at - pos}) != 0)
                return -1;
            if (fragments_push(out, (struct fragment){id, at, nlen}) != 0)
                return -1;
            pos = at + nlen;
        }
        if (pos < end &&
            fragments_push(out, (struct fragment){-1, pos, end - pos}) != 0)
            return -1;
    }
    return 0;
}

static int partition(const struct tokenizer *t, const char *text, size_t len,
                     bool parse_special, struct fragments *frags)
{
    struct fragments other = {0};
    bool *seen = calloc(t->trie.n_nodes, sizeof *seen);
    int rc = -1;
    if (!seen)
        goto done;
    mark_occurring(&t->trie, text, len, seen);
    if (fragments_push(frags, (struct fragment){-1, 0, len}) != 0)
        goto done;
    for (int32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        /* Without parse_special, user-defined tokens are still matched;
         * control and unknown ones are plain text. */
        if (!parse_special &&
            (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))
            continue;
        if (!seen[t->special_node[i]] || t->text_len[id] == 0)
            continue;
        if (split_on_token(t, id, text, frags, &other) != 0)
            goto done;
        struct fragments tmp = *frags;
        *frags = other;
        other = tmp;
    }
    rc = 0;
done:
    free(other.v);
    free(seen);
    return rc;
}

int tok_encode_fragments(const struct tokenizer *t, const char *text,
                         size_t len, bool parse_special, struct tok_ids *out)
{
    if (len == 0)
        return 0;
    struct fragments frags = {0};
    int rc = partition(t, text, len, parse_special, &frags);
    bool prev_special = true; /* SPM: the text's start counts as one */
    for (size_t i = 0; rc == 0 && i < frags.n; i++) {
        const struct fragment *f = &frags.v[i];
        if (f->token >= 0) {
            rc = tok_ids_push(out, f->token);
            prev_special = true;
        } else if (t->family == TOK_SPM) {
            rc = tok_spm_encode(t, text + f->off, f->len,
                                t->add_space_prefix && prev_special, out);
            prev_special = false;
        } else {
            rc = tok_bpe_encode(t, text + f->off, f->len, out);
        }
    }
    free(frags.v);
    return rc;
}
