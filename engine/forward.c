/* forward.c — see forward.h.
 *
 * The four architectures share one pass; what differs is data in the model
 * (biases, q/k norms, post-norms, activation, RoPE style and bases, the
 * sliding window), so the pass branches only on "does this layer have it". */
#include "forward.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "kv.h"
#include "model.h"

struct forward {
    const struct model *m;
    struct backend *be;
    int max_batch;
    /* Activations, each max_batch rows. */
    float *x;      /* residual stream, n_embd */
    float *h;      /* normed input of a block, n_embd */
    float *q;      /* n_head * head_dim */
    float *k, *v;  /* n_head_kv * head_dim */
    float *att;    /* attention output, n_head * head_dim */
    float *o;      /* block output, n_embd */
    float *gate, *up; /* n_ff */
    int32_t *pos;
    float *logits;
    int logits_rows; /* capacity of logits, in rows */
};

static void *alloc_rows(int rows, int64_t width)
{
    return malloc((size_t)rows * (size_t)width * sizeof(float));
}

int forward_new(const struct model *m, struct backend *be, int max_batch,
                int n_ctx, struct forward **out, struct kk_error *err)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    struct forward *f = calloc(1, sizeof *f);
    if (!f)
        return kk_fail(err, "out of memory");
    f->m = m;
    f->be = be;
    f->max_batch = max_batch;
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    f->x = alloc_rows(max_batch, hp->n_embd);
    f->h = alloc_rows(max_batch, hp->n_embd);
    f->o = alloc_rows(max_batch, hp->n_embd);
    f->q = alloc_rows(max_batch, q_dim);
    f->att = alloc_rows(max_batch, q_dim);
    f->k = alloc_rows(max_batch, kv_dim);
    f->v = alloc_rows(max_batch, kv_dim);
    f->gate = alloc_rows(max_batch, hp->n_ff);
    f->up = alloc_rows(max_batch, hp->n_ff);
    f->pos = malloc((size_t)max_batch * sizeof(int32_t));
    if (!f->x || !f->h || !f->o || !f->q || !f->att || !f->k || !f->v ||
        !f->gate || !f->up || !f->pos) {
        forward_free(f);
        return kk_fail(err, "out of memory allocating activations for "
                            "batches of %d tokens", max_batch);
    }
    int64_t max_cols = hp->n_embd;
    max_cols = q_dim > max_cols ? q_dim : max_cols;
    max_cols = hp->n_ff > max_cols ? hp->n_ff : max_cols;
    if (backend_reserve(be, max_batch, max_cols, n_ctx, hp->head_dim,
                        hp->n_head / hp->n_head_kv, err)) {
        forward_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

void forward_free(struct forward *f)
{
    if (!f)
        return;
    float *bufs[] = {f->x, f->h, f->q, f->k, f->v, f->att, f->o,
                     f->gate, f->up, f->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(f->pos);
    free(f);
}

int forward_max_batch(const struct forward *f)
{
    return f->max_batch;
}

const float *forward_logits(const struct forward *f)
{
    return f->logits;
}

static void add_bias(float *x, const float *bias, int n, int width)
{
    if (!bias)
        return;
    for (int t = 0; t < n; t++)
        be_add(x + (int64_t)t * width, bias, width);
}

/* Attention block of layer il: h -> o, storing this batch's keys/values. */
static void attention_block(struct forward *f, struct kv_cache *kv, int il,
                            int n, int pos0)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct layer *L = &f->m->layers[il];
    const int hd = hp->head_dim, kv_dim = hp->n_head_kv * hd;

    const struct weight *qkv[] = {&L->wq, &L->wk, &L->wv};
    be_matmul_multi(f->be, 3, qkv, f->h, n, (float *[]){f->q, f->k, f->v});
    add_bias(f->q, L->bq, n, hp->n_head * hd);
    add_bias(f->k, L->bk, n, kv_dim);
    add_bias(f->v, L->bv, n, kv_dim);
    if (L->q_norm) {
        be_rmsnorm(f->q, f->q, L->q_norm, n * hp->n_head, hd, hp->rms_eps);
        be_rmsnorm(f->k, f->k, L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
    }
    be_rope(f->q, n, hp->n_head, hd, hp->n_rot, f->pos, L->rope_base, hp->rope);
    be_rope(f->k, n, hp->n_head_kv, hd, hp->n_rot, f->pos, L->rope_base,
            hp->rope);
    kv_stage(kv, il, pos0, n, f->k, f->v);
    be_attention(f->be, f->att, f->q, kv, il, n, pos0, hp->n_head,
                 hp->n_head_kv, hd, L->is_sliding ? hp->sliding_window : 0,
                 hp->attn_scale);
    kv_commit(kv);
    be_matmul(f->be, &L->wo, f->att, n, f->o);
    if (L->post_attn_norm)
        be_rmsnorm(f->o, f->o, L->post_attn_norm, n, hp->n_embd, hp->rms_eps);
}

/* Feed-forward block of layer il: h -> o. */
static void ffn_block(struct forward *f, int il, int n)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct layer *L = &f->m->layers[il];
    const struct weight *gate_up[] = {&L->ffn_gate, &L->ffn_up};
    be_matmul_multi(f->be, 2, gate_up, f->h, n, (float *[]){f->gate, f->up});
    be_gated_act(f->gate, f->gate, f->up, (int64_t)n * hp->n_ff, hp->uses_gelu);
    be_matmul(f->be, &L->ffn_down, f->gate, n, f->o);
    if (L->post_ffn_norm)
        be_rmsnorm(f->o, f->o, L->post_ffn_norm, n, hp->n_embd, hp->rms_eps);
}

static int check_input(const struct forward *f, const struct kv_cache *kv,
                       const int32_t *tokens, int n, int logits_from,
                       struct kk_error *err)
{
    if (n < 1 || n > f->max_batch || logits_from < 0 || logits_from > n)
        return kk_fail(err, "internal: batch of %d tokens (logits from %d) "
                            "outside 1..%d", n, logits_from, f->max_batch);
    if (kv->n_tokens + n > kv->n_ctx)
        return kk_fail(err, "the context is full: %d tokens are in it and "
                            "%d more do not fit in %d; start a new "
                            "conversation or raise --ctx",
                       kv->n_tokens, n, kv->n_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= f->m->hp.n_vocab)
            return kk_fail(err, "token id %d is outside the vocabulary "
                                "(0..%d)", tokens[t], f->m->hp.n_vocab - 1);
    return 0;
}

static int reserve_logits(struct forward *f, int rows, struct kk_error *err)
{
    if (rows <= f->logits_rows)
        return 0;
    float *nl = realloc(f->logits, (size_t)rows * (size_t)f->m->hp.n_vocab *
                                       sizeof(float));
    if (!nl)
        return kk_fail(err, "out of memory for %d rows of logits", rows);
    f->logits = nl;
    f->logits_rows = rows;
    return 0;
}

int forward_run(struct forward *f, struct kv_cache *kv, const int32_t *tokens,
                int n, int logits_from, struct kk_error *err)
{
    const struct model *m = f->m;
    const struct model_hparams *hp = &m->hp;
    const int pos0 = kv->n_tokens, n_out = n - logits_from;
    if (check_input(f, kv, tokens, n, logits_from, err) ||
        reserve_logits(f, n_out, err))
        return -1;
    for (int t = 0; t < n; t++)
        f->pos[t] = pos0 + t;

    be_embed(&m->tok_embd, tokens, n, hp->embd_scale, f->x);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct layer *L = &m->layers[il];
        be_rmsnorm(f->h, f->x, L->attn_norm, n, hp->n_embd, hp->rms_eps);
        attention_block(f, kv, il, n, pos0);
        be_add(f->x, f->o, (int64_t)n * hp->n_embd);
        be_rmsnorm(f->h, f->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps);
        ffn_block(f, il, n);
        be_add(f->x, f->o, (int64_t)n * hp->n_embd);
    }
    kv->n_tokens = pos0 + n;
    if (n_out == 0)
        return 0;
    float *last = f->x + (int64_t)logits_from * hp->n_embd;
    be_rmsnorm(f->h, last, m->output_norm, n_out, hp->n_embd, hp->rms_eps);
    be_matmul(f->be, &m->output, f->h, n_out, f->logits);
    return 0;
}
