/* forward.h — one transformer pass over a batch of tokens.
 *
 * forward_run() appends n tokens to the KV cache at positions
 * kv->n_tokens .. kv->n_tokens + n - 1 and computes logits for the batch rows
 * [logits_from, n). The pass itself (forward.c) reads top to bottom, from
 * embedding to logits, one backend op per line.
 *
 * A struct forward holds the activation buffers for batches of up to
 * max_batch tokens (larger inputs are split by the caller, see
 * forward_run_chunked); it is allocated once per context and reused, so a
 * pass allocates nothing. It belongs to one engine thread. */
#ifndef KK_FORWARD_H
#define KK_FORWARD_H

#include <stdint.h>

#include "kakeya_error.h"

struct model;
struct kv_cache;
struct backend;
struct forward;

int forward_new(const struct model *m, struct backend *be, int max_batch,
                int n_ctx, struct forward **out, struct kk_error *err);
void forward_free(struct forward *f);
int forward_max_batch(const struct forward *f);

/* What a pass gives back of the rows asked for: their logits, or only each
 * row's token — its greedy choice (FORWARD_ARGMAX) or a draw from it
 * (FORWARD_SAMPLE), which a GPU makes itself, so that one int a row comes
 * back instead of n_vocab floats. */
enum forward_out { FORWARD_LOGITS, FORWARD_ARGMAX, FORWARD_SAMPLE };

struct be_draw;

/* Runs n (1..max_batch) tokens. On success row logits_from + i has its
 * logits at forward_logits(f) + i * n_vocab (FORWARD_LOGITS) or its token
 * at forward_tokens(f)[i]: its greedy choice (FORWARD_ARGMAX) or its draw
 * as `draw` asks, one uniform a row (FORWARD_SAMPLE; draw is read only
 * then). Fails (with the cache unchanged) when the context is full or a
 * token id is out of range. */
int forward_run(struct forward *f, struct kv_cache *kv, const int32_t *tokens,
                int n, int logits_from, enum forward_out out,
                const struct be_draw *draw, struct kk_error *err);

/* What the last forward_run gave back (owned by f, valid until the next):
 * its logits, NULL unless it was a FORWARD_LOGITS pass; its rows' tokens
 * (sample_argmax's choices, or draws), NULL after a FORWARD_LOGITS pass. */
const float *forward_logits(const struct forward *f);
const int32_t *forward_tokens(const struct forward *f);

#endif
