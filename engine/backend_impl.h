/* backend_impl.h — what a backend implementation provides (internal to the
 * backends and engine/backend.c, which dispatches backend.h's calls).
 *
 * An implementation embeds struct backend as the first member of its own
 * struct and fills a static table of ops; every op has the meaning and the
 * arguments of its be_ / backend_ counterpart in backend.h. The fused ops
 * (matmul_add, gated_matmul, rope_kv_store, norm_add, rope_attention) may
 * be NULL:
 * backend.c then runs the ops they stand for, one after another.
 * gated_matmul is only given gate and up matrices of one type and shape (a
 * mixed-type file's pair goes the separate way). matmul, matmul_multi and gated_matmul are
 * given a norm only by a backend whose table sets folds_norm; for the
 * others backend.c runs rmsnorm first and passes NULL. */
#ifndef KK_BACKEND_IMPL_H
#define KK_BACKEND_IMPL_H

#include "backend.h"

struct backend_ops {
    void (*free)(struct backend *be);
    const char *(*name)(const struct backend *be);
    int (*threads)(const struct backend *be);
    /* NULL where a backend has no threads to share */
    void (*share_threads)(struct backend *be, struct backend *lender);
    int (*reserve)(struct backend *be, int max_tokens, int64_t max_cols,
                   int n_ctx, int head_dim, int group, struct kk_error *err);
    int (*bind_kv)(struct backend *be, struct kv_cache *kv,
                   struct kk_error *err);
    int (*kv_pull)(struct backend *be, struct kv_cache *kv,
                   struct kk_error *err);
    int (*kv_push)(struct backend *be, struct kv_cache *kv,
                   struct kk_error *err);
    struct be_tensor *(*tensor_new)(struct backend *be, int rows,
                                    int64_t width, struct kk_error *err);
    void (*tensor_free)(struct backend *be, struct be_tensor *t);

    void (*begin)(struct backend *be);
    int (*end)(struct backend *be, struct kk_error *err);
    const float *(*read)(struct backend *be, const struct be_tensor *t,
                         int rows);
    const int32_t *(*read_argmax)(struct backend *be,
                                  const struct be_tensor *t, int rows);
    /* NULL where the backend draws no samples (the host does) */
    bool (*draws_samples)(const struct backend *be, int64_t width);
    const int32_t *(*read_sample)(struct backend *be,
                                  const struct be_tensor *t, int rows,
                                  const struct be_draw *draw);
    void (*embed)(struct backend *be, const struct weight *w,
                  const int32_t *tokens, int n, float scale,
                  struct be_tensor *x);
    bool folds_norm;
    void (*matmul)(struct backend *be, const struct weight *w,
                   const struct be_tensor *x, const struct be_norm *norm,
                   int n, struct be_tensor *y);
    void (*matmul_multi)(struct backend *be, int count,
                         const struct weight *const *w,
                         const struct be_tensor *x,
                         const struct be_norm *norm, int n,
                         struct be_tensor *const *y);
    void (*matmul_add)(struct backend *be, const struct weight *w,
                       const struct be_tensor *x, int n,
                       struct be_tensor *tmp, struct be_tensor *acc);
    void (*gated_matmul)(struct backend *be, const struct weight *w_gate,
                         const struct weight *w_up,
                         const struct be_tensor *x,
                         const struct be_norm *norm, int n,
                         struct be_tensor *gate, struct be_tensor *up,
                         bool use_gelu);
    void (*rope_kv_store)(struct backend *be, struct kv_cache *kv, int il,
                          int pos0, int n, struct be_tensor *q, int n_head,
                          struct be_tensor *k, const struct be_tensor *v,
                          int n_head_kv, int head_dim,
                          const struct be_rope *rope);
    void (*copy_rows)(struct backend *be, struct be_tensor *dst,
                      const struct be_tensor *src, int row0, int n);
    void (*rmsnorm)(struct backend *be, struct be_tensor *y,
                    const struct be_tensor *x, const float *weight,
                    int n_groups, int dim, float eps);
    void (*norm_add)(struct backend *be, struct be_tensor *x,
                     struct be_tensor *y, const float *weight, int n,
                     int dim, float eps);
    void (*rope)(struct backend *be, struct be_tensor *x, int n, int n_heads,
                 int head_dim, int n_rot, const int32_t *pos, float base,
                 enum rope_style style);
    void (*gated_act)(struct backend *be, struct be_tensor *gate,
                      const struct be_tensor *up, int64_t count,
                      bool use_gelu);
    void (*add)(struct backend *be, struct be_tensor *x,
                const struct be_tensor *y, int64_t count);
    void (*add_row)(struct backend *be, struct be_tensor *x, const float *row,
                    int n, int width);
    void (*kv_store)(struct backend *be, struct kv_cache *kv, int il,
                     int pos0, int n, const struct be_tensor *k,
                     const struct be_tensor *v);
    void (*kv_commit)(struct backend *be, struct kv_cache *kv);
    void (*attention)(struct backend *be, struct be_tensor *out,
                      const struct be_tensor *q, const struct kv_cache *kv,
                      int il, int n, int pos0, int n_head, int n_head_kv,
                      int head_dim, int window, float scale);
    void (*rope_attention)(struct backend *be, struct kv_cache *kv, int il,
                           int pos0, int n, struct be_tensor *q, int n_head,
                           struct be_tensor *k, const struct be_tensor *v,
                           int n_head_kv, int head_dim,
                           const struct be_rope *rope, struct be_tensor *out,
                           int window, float scale);
};

struct backend {
    const struct backend_ops *ops;
};

int backend_cpu_new(int n_threads, const struct model *m,
                    struct backend **out, struct kk_error *err);
int backend_vulkan_new(int device, const struct model *m,
                       struct backend **out, struct kk_error *err);

/* The RoPE angles of one row, as the CPU computes them (theta advanced by
 * repeated multiplication in float, like llama.cpp): cs[2i] = cos,
 * cs[2i + 1] = sin for i < n_rot / 2. Shared so that every backend rotates
 * by the same angles to the bit. */
void rope_angles(int32_t pos, int n_rot, float base, float *cs);

/* rope's per-head norms, where it has them, of q (n rows of n_head heads)
 * and k (n_head_kv heads) in place, by be's rmsnorm op: be_rope_kv_store's
 * first step, for a rope_kv_store op that cannot fold them in. */
void norm_heads(struct backend *be, const struct be_rope *rope,
                struct be_tensor *q, int n_head, struct be_tensor *k,
                int n_head_kv, int n, int head_dim);

/* The embedding rows of `tokens` as f32, times scale, into x (n rows of
 * w->n_cols): gathered on the host by every backend. */
void embed_rows(const struct weight *w, const int32_t *tokens, int n,
                float scale, float *x);

#endif
