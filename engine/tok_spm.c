/* tok_spm.c — SentencePiece-style encoding ("llama" vocabularies), the way
 * llama.cpp's SPM tokenizer does it: spaces become U+2581, the text is cut
 * into UTF-8 characters, and the adjacent pair whose concatenation is the
 * highest-scoring token is merged, again and again (ties: the leftmost).
 * Pieces that end up as no token are written as their bytes (<0xNN>). */
#include <stdlib.h>
#include <string.h>

#include "merge_queue.h"
#include "tok_internal.h"
#include "unicode.h"

struct symbol {
    int prev, next; /* neighbours still alive, -1 at the ends */
    size_t off, n;  /* bytes of the text; n == 0 once merged away */
};

struct spm_run {
    const struct tokenizer *t;
    const char *text;
    struct symbol *sym;
    struct merge_queue queue;
};

/* Queues the pair (left, right) if together they spell a token. */
static int try_pair(struct spm_run *r, int left, int right)
{
    if (left < 0 || right < 0)
        return 0;
    size_t size = r->sym[left].n + r->sym[right].n;
    int32_t id = tok_vocab_find(r->t, r->text + r->sym[left].off, size);
    if (id < 0)
        return 0;
    /* The highest score merges first: its negation is the priority. */
    struct merge m = {-r->t->score[id], left, right, size};
    return merge_queue_push(&r->queue, m);
}

/* Escapes spaces as U+2581 after the optional leading space. */
static char *escape_spaces(const char *text, size_t len, bool space_prefix,
                           size_t *out_len)
{
    static const char lower_block[] = "\xe2\x96\x81";
    char *buf = malloc(3 * (len + 1) + 1);
    if (!buf)
        return NULL;
    size_t n = 0;
    if (space_prefix) {
        memcpy(buf, lower_block, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, lower_block, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    *out_len = n;
    return buf;
}

static int emit_symbol(const struct spm_run *r, const struct symbol *s,
                       struct tok_ids *out)
{
    int32_t id = tok_vocab_find(r->t, r->text + s->off, s->n);
    if (id >= 0)
        return tok_ids_push(out, id);
    for (size_t i = 0; i < s->n; i++) {
        int32_t b = r->t->byte_token[(unsigned char)r->text[s->off + i]];
        /* A vocabulary without the byte token has nothing to say for it
         * (llama.cpp would throw here); the unknown token stands in. */
        if (b < 0)
            b = r->t->unk;
        if (b >= 0 && tok_ids_push(out, b) != 0)
            return -1;
    }
    return 0;
}

int tok_spm_encode(const struct tokenizer *t, const char *text, size_t len,
                   bool space_prefix, struct tok_ids *out)
{
    size_t n_text;
    char *buf = escape_spaces(text, len, space_prefix, &n_text);
    struct spm_run r = {.t = t, .text = buf};
    int rc = -1;
    if (!buf)
        return -1;
    r.sym = malloc((n_text ? n_text : 1) * sizeof *r.sym);
    if (!r.sym)
        goto done;
    int n_sym = 0;
    for (size_t off = 0; off < n_text; n_sym++) {
        size_t n = uni_len_from_lead((unsigned char)buf[off]);
        if (n > n_text - off)
            n = n_text - off;
        r.sym[n_sym] = (struct symbol){n_sym - 1, off + n == n_text ? -1 : n_sym + 1,
                                       off, n};
        off += n;
    }
    for (int i = 1; i < n_sym; i++)
        if (try_pair(&r, i - 1, i) != 0)
            goto done;
    while (r.queue.n) {
        struct merge b = merge_queue_pop(&r.queue);
        struct symbol *left = &r.sym[b.left], *right = &r.sym[b.right];
        if (left->n == 0 || right->n == 0 || left->n + right->n != b.size)
            continue; /* one side was merged since this pair was queued */
        left->n += right->n;
        right->n = 0;
        left->next = right->next;
        if (right->next >= 0)
            r.sym[right->next].prev = b.left;
        if (try_pair(&r, left->prev, b.left) != 0 ||
            try_pair(&r, b.left, left->next) != 0)
            goto done;
    }
    for (int i = n_sym ? 0 : -1; i != -1; i = r.sym[i].next)
        if (emit_symbol(&r, &r.sym[i], out) != 0)
            goto done;
    rc = 0;
done:
    merge_queue_free(&r.queue);
    free(r.sym);
    free(buf);
    return rc;
}
