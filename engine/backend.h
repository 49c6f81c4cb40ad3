/* backend.h — the op set the forward pass is written against.
 *
 * Every op works on a batch of n token rows laid out contiguously (row t of
 * an activation with width d starts at t * d). The CPU implementation
 * (engine/cpu/backend_cpu.c) runs the heavy ops — matmul and attention — on
 * its thread pool; the rest are cheap and run on the calling thread.
 *
 * backend_reserve() sizes every scratch buffer up front, so a forward pass
 * allocates nothing per token. A backend belongs to one engine thread. */
#ifndef KK_BACKEND_H
#define KK_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "kakeya_error.h"
#include "model.h"

struct kv_cache;
struct backend;

int backend_new(int n_threads, struct backend **out, struct kk_error *err);
void backend_free(struct backend *be);
int backend_threads(const struct backend *be);

/* Makes room for passes of up to max_tokens rows over matrices of up to
 * max_cols columns, attending over up to n_ctx positions with heads of
 * head_dim, `group` query heads sharing each key/value head. May be called
 * again with larger numbers. */
int backend_reserve(struct backend *be, int max_tokens, int64_t max_cols,
                    int n_ctx, int head_dim, int group, struct kk_error *err);

/* y[t][r] = W[r] · x[t] for n rows of x (width w->n_cols); y has width
 * w->n_rows. Reads each weight row once for the whole batch. */
void be_matmul(struct backend *be, const struct weight *w, const float *x,
               int n, float *y);

/* be_matmul for `count` matrices that multiply the same x (q, k and v;
 * ffn gate and up) in one pass over the threads: y[i] = w[i] · x. The
 * results are those of separate be_matmul calls. */
void be_matmul_multi(struct backend *be, int count,
                     const struct weight *const *w, const float *x, int n,
                     float *const *y);

/* Embedding rows of `tokens`, times scale, into x (width w->n_cols). */
void be_embed(const struct weight *w, const int32_t *tokens, int n,
              float scale, float *x);

/* y = x / rms(x) * weight over each group of `dim` values; n_groups groups.
 * In place when y == x. */
void be_rmsnorm(float *y, const float *x, const float *weight, int n_groups,
                int dim, float eps);

/* Rotates the first n_rot dimensions of each of n_heads heads of width
 * head_dim in each of n rows; row t has position pos[t]. */
void be_rope(float *x, int n, int n_heads, int head_dim, int n_rot,
             const int32_t *pos, float base, enum rope_style style);

/* out = act(gate) * up elementwise over n*dim values; act is SiLU, or GELU
 * (tanh approximation, as ggml's fp16 table computes it) when use_gelu. */
void be_gated_act(float *out, const float *gate, const float *up,
                  int64_t count, bool use_gelu);

/* x += y over count values. */
void be_add(float *x, const float *y, int64_t count);

/* Attention of n query rows q (width n_head*head_dim) at positions
 * pos0..pos0+n-1 over layer il of the cache, whose slots 0..pos0+n-1 hold
 * the keys and values. window > 0 limits each query at p to keys k with
 * p - k < window. scale multiplies q·k. out has q's shape. */
void be_attention(struct backend *be, float *out, const float *q,
                  const struct kv_cache *kv, int il, int n, int pos0,
                  int n_head, int n_head_kv, int head_dim, int window,
                  float scale);

#endif
