/* tok_bpe.c — byte-level BPE encoding ("gpt2" vocabularies), the way
 * llama.cpp's BPE tokenizer does it: the pre-tokenizer cuts the text into
 * words; each word's UTF-8 bytes are spelled in GPT-2's byte alphabet and
 * cut into characters; then the adjacent pair with the lowest merge rank is
 * merged (ties: the leftmost) until no pair has a rule. A final piece that
 * is not a token falls back to its single bytes, those that are tokens. */
#include <stdlib.h>
#include <string.h>

#include "pretokenize.h"
#include "merge_queue.h"
#include "tok_internal.h"
#include "unicode.h"

struct symbol {
    int prev, next;
    size_t off, n; /* n == 0 once merged away */
};

/* Scratch shared by the words of one call. */
struct bpe_run {
    const struct tokenizer *t;
    char *word;          /* the current word in byte-level spelling */
    struct symbol *sym;
    struct merge_queue queue;
};

static int try_pair(struct bpe_run *r, int left, int right)
{
    if (left < 0 || right < 0)
        return 0;
    const struct symbol *a = &r->sym[left], *b = &r->sym[right];
    int32_t rank = tok_merge_rank(r->t, r->word + a->off, a->n,
                                  r->word + b->off, b->n);
    if (rank < 0)
        return 0;
    /* Ranks stay far below 2^24, so the float priority is exact. */
    struct merge m = {(float)rank, left, right, a->n + b->n};
    return merge_queue_push(&r->queue, m);
}

static int emit_symbol(const struct bpe_run *r, const struct symbol *s,
                       struct tok_ids *out)
{
    const char *p = r->word + s->off;
    int32_t id = tok_vocab_find(r->t, p, s->n);
    if (id >= 0)
        return tok_ids_push(out, id);
    for (size_t i = 0; i < s->n; i++) {
        id = tok_vocab_find(r->t, p + i, 1);
        if (id >= 0 && tok_ids_push(out, id) != 0)
            return -1;
    }
    return 0;
}

/* Merges the word's characters and emits its tokens. */
static int encode_word(struct bpe_run *r, size_t len, struct tok_ids *out)
{
    if (r->t->ignore_merges) {
        int32_t id = tok_vocab_find(r->t, r->word, len);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    int n_sym = 0;
    for (size_t off = 0; off < len; n_sym++) {
        size_t n = uni_len_from_lead((unsigned char)r->word[off]);
        if (n > len - off)
            n = len - off;
        r->sym[n_sym] = (struct symbol){n_sym - 1,
                                        off + n == len ? -1 : n_sym + 1, off, n};
        off += n;
    }
    r->queue.n = 0;
    for (int i = 1; i < n_sym; i++)
        if (try_pair(r, i - 1, i) != 0)
            return -1;
    while (r->queue.n) {
        struct merge b = merge_queue_pop(&r->queue);
        struct symbol *left = &r->sym[b.left], *right = &r->sym[b.right];
        if (left->n == 0 || right->n == 0 || left->n + right->n != b.size)
            continue; /* stale: a side changed since it was queued */
        left->n += right->n;
        right->n = 0;
        left->next = right->next;
        if (right->next >= 0)
            r->sym[right->next].prev = b.left;
        if (try_pair(r, left->prev, b.left) != 0 ||
            try_pair(r, b.left, left->next) != 0)
            return -1;
    }
    for (int i = n_sym ? 0 : -1; i != -1; i = r->sym[i].next)
        if (emit_symbol(r, &r->sym[i], out) != 0)
            return -1;
    return 0;
}

/* Spells code points cpts[0..n) in the byte alphabet into r->word. */
static size_t spell_bytes(const struct tokenizer *t, const uint32_t *cpts,
                          size_t n, char *word)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char utf8[4];
        int k = uni_encode(cpts[i], utf8);
        for (int j = 0; j < k; j++) {
            unsigned char b = (unsigned char)utf8[j];
            memcpy(word + len, t->byte_text[b], t->byte_text_len[b]);
            len += t->byte_text_len[b];
        }
    }
    return len;
}

int tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len,
                   struct tok_ids *out)
{
    struct bpe_run r = {.t = t};
    uint32_t *cpts = malloc((len + 1) * sizeof *cpts);
    uint16_t *flags = malloc((len + 1) * sizeof *flags);
    size_t *lens = malloc((len + 1) * sizeof *lens);
    size_t *scratch = malloc((len + 1) * sizeof *scratch);
    int rc = -1;
    if (!cpts || !flags || !lens || !scratch)
        goto done;
    size_t n = uni_decode(text, len, cpts);
    for (size_t i = 0; i < n; i++)
        flags[i] = (uint16_t)uni_flags(cpts[i]);
    size_t n_words = pretok_split(t->pre, cpts, flags, n, lens, scratch);
    size_t longest = 0;
    for (size_t w = 0; w < n_words; w++)
        longest = lens[w] > longest ? lens[w] : longest;
    /* A code point is at most 4 bytes, each at most 2 in the alphabet. */
    r.word = malloc(8 * longest + 1);
    r.sym = malloc((8 * longest + 1) * sizeof *r.sym);
    if (!r.word || !r.sym)
        goto done;
    size_t start = 0;
    for (size_t w = 0; w < n_words; w++) {
        size_t wlen = spell_bytes(t, cpts + start, lens[w], r.word);
        if (encode_word(&r, wlen, out) != 0)
            goto done;
        start += lens[w];
    }
    rc = 0;
done:
    merge_queue_free(&r.queue);
    free(r.word);
    free(r.sym);
    free(cpts);
    free(flags);
    free(lens);
    free(scratch);
    return rc;
}
