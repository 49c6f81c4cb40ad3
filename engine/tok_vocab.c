/* tok_vocab.c — hash lookups of a vocabulary: token text -> id, and BPE
 * merge pair -> rank. Open addressing with linear probing, sized to at most
 * half full, built once at load. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

uint64_t tok_hash(const void *p, size_t len, uint64_t h)
{
    /* FNV-1a, then a final mix so the low bits (the slot) are good. */
    const unsigned char *s = p;
    for (size_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

#define HASH_SEED 0xcbf29ce484222325ull

static int index_alloc(struct tok_index *ix, size_t n_entries)
{
    size_t n = 16;
    while (n < 2 * n_entries)
        n *= 2;
    ix->slots = calloc(n, sizeof *ix->slots);
    ix->mask = n - 1;
    return ix->slots ? 0 : -1;
}

void tok_index_free(struct tok_index *ix)
{
    free(ix->slots);
    ix->slots = NULL;
}

static bool text_is(const struct tokenizer *t, int32_t id, const char *s,
                    size_t len)
{
    return t->text_len[id] == len && memcmp(t->text[id], s, len) == 0;
}

int tok_index_build_vocab(struct tokenizer *t)
{
    if (index_alloc(&t->vocab_index, (size_t)t->n_vocab) != 0)
        return -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t len = t->text_len[id];
        size_t slot = tok_hash(t->text[id], len, HASH_SEED) & t->vocab_index.mask;
        uint32_t *slots = t->vocab_index.slots;
        /* A repeated text maps to its last id, as in llama.cpp. */
        while (slots[slot] && !text_is(t, (int32_t)slots[slot] - 1,
                                       t->text[id], len))
            slot = (slot + 1) & t->vocab_index.mask;
        slots[slot] = (uint32_t)id + 1;
    }
    return 0;
}

int32_t tok_vocab_find(const struct tokenizer *t, const char *s, size_t len)
{
    size_t slot = tok_hash(s, len, HASH_SEED) & t->vocab_index.mask;
    for (;;) {
        uint32_t e = t->vocab_index.slots[slot];
        if (!e)
            return -1;
        if (text_is(t, (int32_t)e - 1, s, len))
            return (int32_t)e - 1;
        slot = (slot + 1) & t->vocab_index.mask;
    }
}

static uint64_t pair_hash(const char *a, size_t alen, const char *b,
                          size_t blen)
{
    uint64_t h = tok_hash(a, alen, HASH_SEED);
    return tok_hash(b, blen, h ^ 0x9e3779b97f4a7c15ull);
}

static bool merge_is(const struct tok_merge *m, const char *a, size_t alen,
                     const char *b, size_t blen)
{
    return m->left_len == alen && m->right_len == blen &&
           memcmp(m->left, a, alen) == 0 && memcmp(m->right, b, blen) == 0;
}

int tok_index_build_merges(struct tokenizer *t)
{
    if (index_alloc(&t->merge_index, t->n_merges) != 0)
        return -1;
    for (uint32_t r = 0; r < t->n_merges; r++) {
        const struct tok_merge *m = &t->merges[r];
        size_t slot = pair_hash(m->left, m->left_len, m->right, m->right_len) &
                      t->merge_index.mask;
        uint32_t *slots = t->merge_index.slots;
        bool seen = false;
        while (slots[slot]) {
            if (merge_is(&t->merges[slots[slot] - 1], m->left, m->left_len,
                         m->right, m->right_len)) {
                seen = true; /* a repeated rule keeps its first rank */
                break;
            }
            slot = (slot + 1) & t->merge_index.mask;
        }
        if (!seen)
            slots[slot] = r + 1;
    }
    return 0;
}

int32_t tok_merge_rank(const struct tokenizer *t, const char *a, size_t alen,
                       const char *b, size_t blen)
{
    if (!t->merge_index.slots)
        return -1;
    size_t slot = pair_hash(a, alen, b, blen) & t->merge_index.mask;
    for (;;) {
        uint32_t e = t->merge_index.slots[slot];
        if (!e)
            return -1;
        if (merge_is(&t->merges[e - 1], a, alen, b, blen))
            return (int32_t)e - 1;
        slot = (slot + 1) & t->merge_index.mask;
    }
}

int tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return -1;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}
