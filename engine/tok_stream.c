/* tok_stream.c — streaming detokenizer: token pieces in, valid UTF-8 out.
 *
 * Bytes that begin a character but do not finish it are held in the
 * stream until later pieces complete it. Bytes that cannot be part of a
 * valid character are written as U+FFFD, so everything written is valid
 * UTF-8 and a terminal never sees half a character. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

static const char replacement[] = "\xef\xbf\xbd";

/* Writes whole characters only, keeping room for the NUL; a character that
 * does not fit is dropped (cap >= 257 leaves room for any normal piece). */
struct sink {
    char *out;
    int cap, n;
};

static void sink_put(struct sink *k, const void *s, int len)
{
    if (k->n + len > k->cap - 1)
        return;
    memcpy(k->out + k->n, s, (size_t)len);
    k->n += len;
}

/* Feeds one byte through the pending buffer. */
static void feed(struct tok_stream *s, struct sink *k, unsigned char byte)
{
    s->pending[s->n_pending++] = byte;
    while (s->n_pending > 0) {
        int r = uni_valid_prefix(s->pending, (size_t)s->n_pending);
        if (r == 0)
            return; /* a valid start: wait for the rest */
        if (r > 0) {
            sink_put(k, s->pending, r);
        } else {
            sink_put(k, replacement, 3);
            r = 1; /* drop the bad byte, look again at what followed it */
        }
        memmove(s->pending, s->pending + r, (size_t)(s->n_pending - r));
        s->n_pending -= r;
    }
}

void tok_stream_init(struct tok_stream *s)
{
    s->n_pending = 0;
}

int tok_stream_push(const struct tokenizer *t, struct tok_stream *s,
                    int32_t id, bool special, char *out, int cap)
{
    char small[512];
    char *piece = small;
    int n = tok_piece(t, id, special, small, (int)sizeof small);
    struct sink k = {out, cap, 0};
    if (cap <= 0)
        return 0;
    if (n > (int)sizeof small) {
        piece = malloc((size_t)n);
        if (!piece) /* a very long piece with no memory left: drop it */
            n = 0;
        else
            tok_piece(t, id, special, piece, n);
    }
    for (int i = 0; i < n; i++)
        feed(s, &k, (unsigned char)piece[i]);
    if (piece != small)
        free(piece);
    out[k.n] = '\0';
    return k.n;
}

int tok_stream_finish(struct tok_stream *s, char *out, int cap)
{
    struct sink k = {out, cap, 0};
    if (cap <= 0)
        return 0;
    if (s->n_pending > 0)
        sink_put(&k, replacement, 3);
    s->n_pending = 0;
    out[k.n] = '\0';
    return k.n;
}
