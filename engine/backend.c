/* backend.c — backend.h's calls, dispatched to the implementation that a
 * backend was opened with (see backend_impl.h). */
#include "backend_impl.h"

#include <math.h>

#include "error.h"
#include "quant.h"

int backend_new(const struct backend_params *p, const struct model *m,
                struct backend **out, struct kk_error *err)
{
    *out = NULL;
    switch (p->kind) {
    case KK_BACKEND_VULKAN:
        return backend_vulkan_new(p->device, m, out, err);
    case KK_BACKEND_AUTO: {
        /* The first GPU when there is one; the CPU otherwise, which is what
         * the user asked for with "auto". */
        struct kk_error ignored;
        if (!backend_vulkan_new(-1, m, out, &ignored))
            return 0;
        return backend_cpu_new(p->n_threads, m, out, err);
    }
    default:
        return backend_cpu_new(p->n_threads, m, out, err);
    }
}

const char *kk_backend_name(enum kk_backend b)
{
    static const char *const names[KK_BACKEND_COUNT] = {"cpu", "vulkan",
                                                        "auto"};
    return (unsigned)b < KK_BACKEND_COUNT ? names[b] : NULL;
}

void backend_free(struct backend *be)
{
    if (be)
        be->ops->free(be);
}

const char *backend_name(const struct backend *be)
{
    return be->ops->name(be);
}

int backend_threads(const struct backend *be)
{
    return be->ops->threads(be);
}

void backend_share_threads(struct backend *be, struct backend *lender)
{
    if (be->ops->share_threads && (!lender || lender->ops == be->ops))
        be->ops->share_threads(be, lender);
}

int backend_reserve(struct backend *be, int max_tokens, int64_t max_cols,
                    int n_ctx, int head_dim, int group, struct kk_error *err)
{
    return be->ops->reserve(be, max_tokens, max_cols, n_ctx, head_dim, group,
                            err);
}

int backend_bind_kv(struct backend *be, struct kv_cache *kv,
                    struct kk_error *err)
{
    return be->ops->bind_kv(be, kv, err);
}

int backend_kv_pull(struct backend *be, struct kv_cache *kv,
                    struct kk_error *err)
{
    return be->ops->kv_pull(be, kv, err);
}

int backend_kv_push(struct backend *be, struct kv_cache *kv,
                    struct kk_error *err)
{
    return be->ops->kv_push(be, kv, err);
}

struct be_tensor *be_tensor_new(struct backend *be, int rows, int64_t width,
                                struct kk_error *err)
{
    return be->ops->tensor_new(be, rows, width, err);
}

void be_tensor_free(struct backend *be, struct be_tensor *t)
{
    if (t)
        be->ops->tensor_free(be, t);
}

void be_begin(struct backend *be)
{
    be->ops->begin(be);
}

int be_end(struct backend *be, struct kk_error *err)
{
    return be->ops->end(be, err);
}

const float *be_read(struct backend *be, const struct be_tensor *t, int rows)
{
    return be->ops->read(be, t, rows);
}

const int32_t *be_read_argmax(struct backend *be, const struct be_tensor *t,
                              int rows)
{
    return be->ops->read_argmax(be, t, rows);
}

bool be_draws_samples(const struct backend *be, int64_t width)
{
    return be->ops->read_sample && be->ops->draws_samples(be, width);
}

const int32_t *be_read_sample(struct backend *be, const struct be_tensor *t,
                              int rows, const struct be_draw *draw)
{
    return be->ops->read_sample(be, t, rows, draw);
}

void be_embed(struct backend *be, const struct weight *w,
              const int32_t *tokens, int n, float scale, struct be_tensor *x)
{
    be->ops->embed(be, w, tokens, n, scale, x);
}

/* What a matmul op multiplies: x with the norm for the op to fold (the
 * backend folds norms), or norm's rows of x made first (it does not; then
 * *fold is NULL). */
static const struct be_tensor *matmul_input(struct backend *be,
                                            const struct be_tensor *x,
                                            const struct be_norm *norm, int n,
                                            const struct be_norm **fold)
{
    *fold = be->ops->folds_norm ? norm : NULL;
    if (!norm || be->ops->folds_norm)
        return x;
    be->ops->rmsnorm(be, norm->out, x, norm->weight, n, (int)x->width,
                     norm->eps);
    return norm->out;
}

void be_matmul(struct backend *be, const struct weight *w,
               const struct be_tensor *x, const struct be_norm *norm, int n,
               struct be_tensor *y)
{
    const struct be_norm *fold;
    x = matmul_input(be, x, norm, n, &fold);
    be->ops->matmul(be, w, x, fold, n, y);
}

void be_matmul_multi(struct backend *be, int count,
                     const struct weight *const *w, const struct be_tensor *x,
                     const struct be_norm *norm, int n,
                     struct be_tensor *const *y)
{
    const struct be_norm *fold;
    x = matmul_input(be, x, norm, n, &fold);
    be->ops->matmul_multi(be, count, w, x, fold, n, y);
}

void be_matmul_add(struct backend *be, const struct weight *w,
                   const struct be_tensor *x, int n, struct be_tensor *tmp,
                   struct be_tensor *acc)
{
    if (be->ops->matmul_add) {
        be->ops->matmul_add(be, w, x, n, tmp, acc);
        return;
    }
    be->ops->matmul(be, w, x, NULL, n, tmp);
    be->ops->add(be, acc, tmp, (int64_t)n * w->n_rows);
}

void be_gated_matmul(struct backend *be, const struct weight *w_gate,
                     const struct weight *w_up, const struct be_tensor *x,
                     const struct be_norm *norm, int n, struct be_tensor *gate,
                     struct be_tensor *up, bool use_gelu)
{
    const struct be_norm *fold;
    x = matmul_input(be, x, norm, n, &fold);
    if (be->ops->gated_matmul && w_gate->type == w_up->type &&
        w_gate->n_cols == w_up->n_cols && w_gate->n_rows == w_up->n_rows) {
        be->ops->gated_matmul(be, w_gate, w_up, x, fold, n, gate, up,
                              use_gelu);
        return;
    }
    const struct weight *w[] = {w_gate, w_up};
    be->ops->matmul_multi(be, 2, w, x, fold, n,
                          (struct be_tensor *const[]){gate, up});
    be->ops->gated_act(be, gate, up, (int64_t)n * w_gate->n_rows, use_gelu);
}

void be_copy_rows(struct backend *be, struct be_tensor *dst,
                  const struct be_tensor *src, int row0, int n)
{
    be->ops->copy_rows(be, dst, src, row0, n);
}

void be_rmsnorm(struct backend *be, struct be_tensor *y,
                const struct be_tensor *x, const float *weight, int n_groups,
                int dim, float eps)
{
    be->ops->rmsnorm(be, y, x, weight, n_groups, dim, eps);
}

void be_norm_add(struct backend *be, struct be_tensor *x, struct be_tensor *y,
                 const float *weight, int n, int dim, float eps)
{
    if (be->ops->norm_add) {
        be->ops->norm_add(be, x, y, weight, n, dim, eps);
        return;
    }
    be->ops->rmsnorm(be, y, y, weight, n, dim, eps);
    be->ops->add(be, x, y, (int64_t)n * dim);
}

void be_rope(struct backend *be, struct be_tensor *x, int n, int n_heads,
             int head_dim, int n_rot, const int32_t *pos, float base,
             enum rope_style style)
{
    be->ops->rope(be, x, n, n_heads, head_dim, n_rot, pos, base, style);
}

void be_gated_act(struct backend *be, struct be_tensor *gate,
                  const struct be_tensor *up, int64_t count, bool use_gelu)
{
    be->ops->gated_act(be, gate, up, count, use_gelu);
}

void be_add(struct backend *be, struct be_tensor *x, const struct be_tensor *y,
            int64_t count)
{
    be->ops->add(be, x, y, count);
}

void be_add_row(struct backend *be, struct be_tensor *x, const float *row,
                int n, int width)
{
    be->ops->add_row(be, x, row, n, width);
}

void be_kv_store(struct backend *be, struct kv_cache *kv, int il, int pos0,
                 int n, const struct be_tensor *k, const struct be_tensor *v)
{
    be->ops->kv_store(be, kv, il, pos0, n, k, v);
}

void be_kv_commit(struct backend *be, struct kv_cache *kv)
{
    be->ops->kv_commit(be, kv);
}

void norm_heads(struct backend *be, const struct be_rope *rope,
                struct be_tensor *q, int n_head, struct be_tensor *k,
                int n_head_kv, int n, int head_dim)
{
    if (!rope->q_norm)
        return;
    be->ops->rmsnorm(be, q, q, rope->q_norm, n * n_head, head_dim,
                     rope->norm_eps);
    be->ops->rmsnorm(be, k, k, rope->k_norm, n * n_head_kv, head_dim,
                     rope->norm_eps);
}

void be_rope_kv_store(struct backend *be, struct kv_cache *kv, int il,
                      int pos0, int n, struct be_tensor *q, int n_head,
                      struct be_tensor *k, const struct be_tensor *v,
                      int n_head_kv, int head_dim, const struct be_rope *rope)
{
    if (be->ops->rope_kv_store) {
        be->ops->rope_kv_store(be, kv, il, pos0, n, q, n_head, k, v,
                               n_head_kv, head_dim, rope);
        return;
    }
    norm_heads(be, rope, q, n_head, k, n_head_kv, n, head_dim);
    be->ops->rope(be, q, n, n_head, head_dim, rope->n_rot, rope->pos,
                  rope->base, rope->style);
    be->ops->rope(be, k, n, n_head_kv, head_dim, rope->n_rot, rope->pos,
                  rope->base, rope->style);
    be->ops->kv_store(be, kv, il, pos0, n, k, v);
}

void be_attention(struct backend *be, struct be_tensor *out,
                  const struct be_tensor *q, const struct kv_cache *kv,
                  int il, int n, int pos0, int n_head, int n_head_kv,
                  int head_dim, int window, float scale)
{
    be->ops->attention(be, out, q, kv, il, n, pos0, n_head, n_head_kv,
                       head_dim, window, scale);
}

void be_rope_attention(struct backend *be, struct kv_cache *kv, int il,
                       int pos0, int n, struct be_tensor *q, int n_head,
                       struct be_tensor *k, const struct be_tensor *v,
                       int n_head_kv, int head_dim, const struct be_rope *rope,
                       struct be_tensor *out, int window, float scale)
{
    if (be->ops->rope_attention) {
        be->ops->rope_attention(be, kv, il, pos0, n, q, n_head, k, v,
                                n_head_kv, head_dim, rope, out, window, scale);
        return;
    }
    be_rope_kv_store(be, kv, il, pos0, n, q, n_head, k, v, n_head_kv,
                     head_dim, rope);
    be_attention(be, out, q, kv, il, n, pos0, n_head, n_head_kv, head_dim,
                 window, scale);
}

void rope_angles(int32_t pos, int n_rot, float base, float *cs)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
        theta *= theta_scale;
    }
}

void embed_rows(const struct weight *w, const int32_t *tokens, int n,
                float scale, float *x)
{
    for (int t = 0; t < n; t++) {
        float *row = x + (int64_t)t * w->n_cols;
        dequantize_row(w->type, (const char *)w->data +
                                    (int64_t)tokens[t] * w->row_bytes,
                       row, w->n_cols);
        if (scale != 1.0f)
            for (int64_t i = 0; i < w->n_cols; i++)
                row[i] *= scale;
    }
}
