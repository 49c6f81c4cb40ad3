/* backend.h — the op set the forward pass is written against.
 *
 * Two implementations sit behind it: the CPU (engine/cpu/backend_cpu.c: a
 * thread pool and quantized dot-product kernels over the mapped weights)
 * and Vulkan (engine/vulkan/backend_vulkan.c: compute shaders; weights, KV
 * cache and activations in device memory). forward.c calls the ops below
 * and never knows which one runs them.
 *
 * Activations are struct be_tensor: rows of `width` floats that live where
 * the backend computes (host memory on the CPU, a device buffer on a GPU).
 * A pass is bracketed by be_begin() and be_end(): the CPU runs each op as
 * it is called; Vulkan records them, submitting the recording in chunks as
 * it grows, and be_end() submits the rest and waits, so nothing comes back
 * to the host inside a pass.
 * Results for the host are asked for with be_read(), whose pointer is valid
 * once be_end() has returned 0.
 *
 * Weights and the model's norm and bias vectors are passed as they are in
 * struct model (host pointers into the mapped file or the model's f32
 * copies); a device backend uploads them all once in backend_new() and
 * finds its copy by that pointer, so only the model given there may be
 * used with a backend.
 *
 * Every op works on a batch of n token rows laid out contiguously. A
 * backend belongs to one engine thread. backend_reserve() and
 * be_tensor_new() size everything up front: a pass allocates nothing. */
#ifndef KK_BACKEND_H
#define KK_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "kakeya.h"
#include "kakeya_error.h"
#include "model.h"

struct kv_cache;
struct backend;

struct backend_params {
    enum kk_backend kind;  /* CPU, VULKAN, or AUTO (the first GPU, else CPU) */
    int n_threads;         /* CPU threads; 0: all cores */
    int device;            /* VULKAN: index into kk_vulkan_devices() */
};

/* Rows of floats where the backend computes. `data` is the host copy on the
 * CPU (NULL on a device backend, whose handle is `device`). */
struct be_tensor {
    int rows;
    int64_t width;
    float *data;
    void *device;
};

/* Opens a backend for model m (a device backend uploads its weights here,
 * with a progress line on stderr for large models). */
int backend_new(const struct backend_params *p, const struct model *m,
                struct backend **out, struct kk_error *err);
void backend_free(struct backend *be);
/* "cpu", or "vulkan: <device name>" (owned by the backend). */
const char *backend_name(const struct backend *be);
int backend_threads(const struct backend *be);

/* Lets be run its passes on lender's worker threads, until called again
 * with lender NULL. A draft and its target take turns on one engine
 * thread; with a pool each, the idle pool's workers would still be
 * spinning for work while the other pool's run, and fight them for the
 * cores. Only between CPU backends of the same thread count (otherwise
 * nothing changes); the lender must outlive the sharing. */
void backend_share_threads(struct backend *be, struct backend *lender);

/* Makes room for passes of up to max_tokens rows over matrices of up to
 * max_cols columns, attending over up to n_ctx positions with heads of
 * head_dim, `group` query heads sharing each key/value head. May be called
 * again with larger numbers. */
int backend_reserve(struct backend *be, int max_tokens, int64_t max_cols,
                    int n_ctx, int head_dim, int group, struct kk_error *err);

/* Gives the backend the cache its passes store keys and values in (a
 * device backend allocates the cache's rows in device memory; the host
 * rows of kv then only serve checkpoints, see below). Once per cache. */
int backend_bind_kv(struct backend *be, struct kv_cache *kv,
                    struct kk_error *err);
/* Copies the rows of the bound cache from the device to kv's host rows
 * (before kv_serialize) and back (after kv_restore). No-ops on the CPU. */
int backend_kv_pull(struct backend *be, struct kv_cache *kv,
                    struct kk_error *err);
int backend_kv_push(struct backend *be, struct kv_cache *kv,
                    struct kk_error *err);

/* A tensor of rows x width floats; freed with be_tensor_free (NULL-safe). */
struct be_tensor *be_tensor_new(struct backend *be, int rows, int64_t width,
                                struct kk_error *err);
void be_tensor_free(struct backend *be, struct be_tensor *t);

/* ---- one pass ---- */

void be_begin(struct backend *be);
/* Ends the pass: runs what was recorded. Fails only on a device error. */
int be_end(struct backend *be, struct kk_error *err);

/* The first `rows` rows of t as host floats, valid from the be_end() of this
 * pass until the next be_begin(); owned by the backend. */
const float *be_read(struct backend *be, const struct be_tensor *t, int rows);
/* Instead of the rows themselves, the index of each one's largest value,
 * as sample_argmax (engine/sample.h) picks it, valid and owned as be_read's
 * rows: what greedy decoding needs of a row of logits, made where they
 * are (on a GPU, so that the rows never cross to the host). A pass reads
 * once, one way or the other. */
const int32_t *be_read_argmax(struct backend *be, const struct be_tensor *t,
                              int rows);

/* What a sampled draw from each row of logits asks (engine/sample.h):
 * the softmax at `temperature` (> 0), the top_p nucleus, and each row's
 * uniform as the generator's 53 bits (sample_bits53). */
struct be_draw {
    float temperature, top_p;
    const uint64_t *u53;   /* one a row */
};
/* Whether the backend draws from rows of `width` where they are
 * (be_read_sample). Where it does not (the CPU, whose rows are host memory
 * already), the caller reads the rows and draws on the host. */
bool be_draws_samples(const struct backend *be, int64_t width);
/* Instead of the rows, a draw from each, valid and owned as
 * be_read_argmax's choices: the token that sample_probs and sample_pick
 * give with the same uniform, except where it falls within rounding of a
 * boundary between two tokens (the device sums in fixed point; see
 * shaders/sample.comp). Only where be_draws_samples. */
const int32_t *be_read_sample(struct backend *be, const struct be_tensor *t,
                              int rows, const struct be_draw *draw);

/* Embedding rows of `tokens`, times scale, into x (width w->n_cols). */
void be_embed(struct backend *be, const struct weight *w,
              const int32_t *tokens, int n, float scale, struct be_tensor *x);

/* A norm for a matmul to apply to its input first: each row of x
 * RMS-normed by weight (x->width values), as be_rmsnorm computes it. A
 * backend that folds the norm into the matmul reads x alone (a GPU saves
 * a dispatch); one that does not writes the normed rows to `out` first
 * (out may be x) and multiplies those. Either way out holds nothing the
 * caller may read afterwards. */
struct be_norm {
    const float *weight;
    float eps;
    struct be_tensor *out;
};

/* y[t][r] = W[r] · x[t] for n rows of x (width w->n_cols), each normed
 * first when norm is not NULL; y has width w->n_rows. Reads each weight
 * row once for the whole batch. */
void be_matmul(struct backend *be, const struct weight *w,
               const struct be_tensor *x, const struct be_norm *norm, int n,
               struct be_tensor *y);

/* be_matmul for `count` (at most 4) matrices that multiply the same x (q,
 * k and v; ffn gate and up): y[i] = w[i] · x, the results of separate
 * be_matmul calls, in one pass over the threads. */
void be_matmul_multi(struct backend *be, int count,
                     const struct weight *const *w, const struct be_tensor *x,
                     const struct be_norm *norm, int n,
                     struct be_tensor *const *y);

/* acc += W · x for n rows of x: be_matmul into tmp (width w->n_rows), then
 * be_add into acc, which a device backend does as one op. tmp's contents
 * are unspecified afterwards. */
void be_matmul_add(struct backend *be, const struct weight *w,
                   const struct be_tensor *x, int n, struct be_tensor *tmp,
                   struct be_tensor *acc);
/* gate = act(w_gate · x) * (w_up · x) for n rows of x (normed first when
 * norm is not NULL), act as in be_gated_act: be_matmul_multi then
 * be_gated_act, one op on a device backend. up's contents are unspecified
 * afterwards. */
void be_gated_matmul(struct backend *be, const struct weight *w_gate,
                     const struct weight *w_up, const struct be_tensor *x,
                     const struct be_norm *norm, int n, struct be_tensor *gate,
                     struct be_tensor *up, bool use_gelu);
/* Copies rows row0 .. row0+n-1 of src to rows 0 .. n-1 of dst. */
void be_copy_rows(struct backend *be, struct be_tensor *dst,
                  const struct be_tensor *src, int row0, int n);

/* y = x / rms(x) * weight over each group of `dim` values; n_groups groups.
 * In place when y == x. */
void be_rmsnorm(struct backend *be, struct be_tensor *y,
                const struct be_tensor *x, const float *weight, int n_groups,
                int dim, float eps);
/* x += y / rms(y) * weight over each of n rows of `dim` values: a
 * post-norm's block output joining the residual stream (gemma3). be_rmsnorm
 * of y in place, then be_add, which a device backend does as one op; y's
 * contents are unspecified afterwards. */
void be_norm_add(struct backend *be, struct be_tensor *x, struct be_tensor *y,
                 const float *weight, int n, int dim, float eps);

/* Rotates the first n_rot dimensions of each of n_heads heads of width
 * head_dim in each of n rows; row t has position pos[t]. */
void be_rope(struct backend *be, struct be_tensor *x, int n, int n_heads,
             int head_dim, int n_rot, const int32_t *pos, float base,
             enum rope_style style);

/* gate = act(gate) * up elementwise over count values; act is SiLU, or
 * GELU (tanh approximation, as ggml's fp16 table computes it) when
 * use_gelu. */
void be_gated_act(struct backend *be, struct be_tensor *gate,
                  const struct be_tensor *up, int64_t count, bool use_gelu);

/* x += y over count values. */
void be_add(struct backend *be, struct be_tensor *x, const struct be_tensor *y,
            int64_t count);
/* Adds the vector `row` (width values) to each of n rows of x: a bias. */
void be_add_row(struct backend *be, struct be_tensor *x, const float *row,
                int n, int width);

/* Stores n rows of keys and values (kv_dim each) for positions pos0.. of
 * layer il in the cache's staging area, converted to its storage type;
 * be_attention then sees them, be_kv_commit moves them into the layer's
 * slots. */
void be_kv_store(struct backend *be, struct kv_cache *kv, int il, int pos0,
                 int n, const struct be_tensor *k, const struct be_tensor *v);
void be_kv_commit(struct backend *be, struct kv_cache *kv);
/* How a layer rotates its queries and keys (be_rope's arguments), and
 * norms them first where it has per-head norms. */
struct be_rope {
    int n_rot;
    const int32_t *pos;   /* position of each row of the batch */
    float base;
    enum rope_style style;
    /* Both or neither (qwen3, gemma3): be_rmsnorm of each head of q and of
     * k, head_dim values a group, before the rotation. */
    const float *q_norm, *k_norm;
    float norm_eps;
};
/* The heads' norms when rope has them, be_rope of q (n_head heads) and k
 * (n_head_kv heads), then be_kv_store of k and v: one op on a device
 * backend, which rotates the keys on their way into the cache; k's contents
 * are unspecified afterwards. */
void be_rope_kv_store(struct backend *be, struct kv_cache *kv, int il,
                      int pos0, int n, struct be_tensor *q, int n_head,
                      struct be_tensor *k, const struct be_tensor *v,
                      int n_head_kv, int head_dim, const struct be_rope *rope);

/* Attention of n query rows q (width n_head*head_dim) at positions
 * pos0..pos0+n-1 over layer il of the cache, whose slots hold positions
 * before pos0 and whose staging area holds this batch. window > 0 limits
 * each query at p to keys k with p - k < window. scale multiplies q·k.
 * out has q's shape. */
void be_attention(struct backend *be, struct be_tensor *out,
                  const struct be_tensor *q, const struct kv_cache *kv,
                  int il, int n, int pos0, int n_head, int n_head_kv,
                  int head_dim, int window, float scale);

/* be_rope_kv_store of the batch, then be_attention of its queries into
 * out: one op where the backend has one (on a GPU, a short batch's keys
 * are rotated and stored inside the attention dispatch, one wait fewer a
 * layer), the same results either way. q's and k's contents are
 * unspecified afterwards. */
void be_rope_attention(struct backend *be, struct kv_cache *kv, int il,
                       int pos0, int n, struct be_tensor *q, int n_head,
                       struct be_tensor *k, const struct be_tensor *v,
                       int n_head_kv, int head_dim, const struct be_rope *rope,
                       struct be_tensor *out, int window, float scale);

#endif
