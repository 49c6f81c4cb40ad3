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
#include "sample.h"

struct forward {
    const struct model *m;
    struct backend *be;
    int max_batch;
    /* Activations, each max_batch rows, where the backend computes. */
    struct be_tensor *x;      /* residual stream, n_embd */
    struct be_tensor *h;      /* normed input of a block, n_embd */
    struct be_tensor *q;      /* n_head * head_dim */
    struct be_tensor *k, *v;  /* n_head_kv * head_dim */
    struct be_tensor *att;    /* attention output, n_head * head_dim */
    struct be_tensor *o;      /* block output, n_embd */
    struct be_tensor *gate, *up; /* n_ff */
    struct be_tensor *logits; /* n_vocab; grown to the rows asked for */
    int32_t *pos;
    /* What the last pass gave back, owned by be: its logits or its rows'
     * tokens (the other NULL). */
    const float *logits_host;
    const int32_t *tokens_host;
    /* Draws made here, where the backend makes none (be_draws_samples):
     * the rows' tokens, a row's probabilities and sample_probs' order
     * (max_batch, n_vocab, n_vocab). */
    int32_t *drawn;
    float *probs;
    int32_t *order;
};

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
    struct be_tensor **acts[] = {&f->x, &f->h, &f->o, &f->q, &f->att, &f->k,
                                 &f->v, &f->gate, &f->up};
    const int64_t widths[] = {hp->n_embd, hp->n_embd, hp->n_embd, q_dim,
                              q_dim, kv_dim, kv_dim, hp->n_ff, hp->n_ff};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        *acts[i] = be_tensor_new(be, max_batch, widths[i], err);
        if (!*acts[i]) {
            forward_free(f);
            return -1;
        }
    }
    f->pos = malloc((size_t)max_batch * sizeof(int32_t));
    const bool host_draws = !be_draws_samples(be, hp->n_vocab);
    if (host_draws) {
        f->drawn = malloc((size_t)max_batch * sizeof(int32_t));
        f->probs = malloc((size_t)hp->n_vocab * sizeof(float));
        f->order = malloc((size_t)hp->n_vocab * sizeof(int32_t));
    }
    if (!f->pos || (host_draws && (!f->drawn || !f->probs || !f->order))) {
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
    struct be_tensor *acts[] = {f->x, f->h, f->q, f->k, f->v, f->att, f->o,
                                f->gate, f->up, f->logits};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        be_tensor_free(f->be, acts[i]);
    free(f->pos);
    free(f->drawn);
    free(f->probs);
    free(f->order);
    free(f);
}

int forward_max_batch(const struct forward *f)
{
    return f->max_batch;
}

const float *forward_logits(const struct forward *f)
{
    return f->logits_host;
}

const int32_t *forward_tokens(const struct forward *f)
{
    return f->tokens_host;
}

/* x += the block's output W · in, normed first when the layer has a
 * post-norm (gemma3); o is scratch. */
static void block_output(struct forward *f, const struct weight *w,
                         const struct be_tensor *in, const float *post_norm,
                         int n)
{
    const struct model_hparams *hp = &f->m->hp;
    if (!post_norm) {
        be_matmul_add(f->be, w, in, n, f->o, f->x);
        return;
    }
    be_matmul(f->be, w, in, NULL, n, f->o);
    be_norm_add(f->be, f->x, f->o, post_norm, n, hp->n_embd, hp->rms_eps);
}

/* Attention block of layer il: x += attention(norm(x)), storing this
 * batch's keys and values. */
static void attention_block(struct forward *f, struct kv_cache *kv, int il,
                            int n, int pos0)
{
    const struct model_hparams *hp = &f->m->hp;
    const struct layer *L = &f->m->layers[il];
    const int hd = hp->head_dim, kv_dim = hp->n_head_kv * hd;
    struct backend *be = f->be;

    const struct weight *qkv[] = {&L->wq, &L->wk, &L->wv};
    const struct be_norm norm = {L->attn_norm, hp->rms_eps, f->h};
    be_matmul_multi(be, 3, qkv, f->x, &norm, n,
                    (struct be_tensor *const[]){f->q, f->k, f->v});
    if (L->bq)
        be_add_row(be, f->q, L->bq, n, hp->n_head * hd);
    if (L->bk)
        be_add_row(be, f->k, L->bk, n, kv_dim);
    if (L->bv)
        be_add_row(be, f->v, L->bv, n, kv_dim);
    const struct be_rope rope = {.n_rot = hp->n_rot, .pos = f->pos,
                                 .base = L->rope_base, .style = hp->rope,
                                 .q_norm = L->q_norm, .k_norm = L->k_norm,
                                 .norm_eps = hp->rms_eps};
    be_rope_attention(be, kv, il, pos0, n, f->q, hp->n_head, f->k, f->v,
                      hp->n_head_kv, hd, &rope, f->att,
                      L->is_sliding ? hp->sliding_window : 0, hp->attn_scale);
    be_kv_commit(be, kv);
    block_output(f, &L->wo, f->att, L->post_attn_norm, n);
}

/* Feed-forward block of layer il: x += ffn(norm(x)). */
static void ffn_block(struct forward *f, int il, int n)
{
    const struct layer *L = &f->m->layers[il];
    const struct be_norm norm = {L->ffn_norm, f->m->hp.rms_eps, f->h};
    be_gated_matmul(f->be, &L->ffn_gate, &L->ffn_up, f->x, &norm, n, f->gate,
                    f->up, f->m->hp.uses_gelu);
    block_output(f, &L->ffn_down, f->gate, L->post_ffn_norm, n);
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

/* Rows of logits grow to what is asked, at least a verify step's 1 + 16
 * and then by doubling: on a GPU each new size is a new device buffer and
 * readback buffer, far dearer than a pass, so sizes must not creep up one
 * row per step. */
static int reserve_logits(struct forward *f, int rows, struct kk_error *err)
{
    if (f->logits && rows <= f->logits->rows)
        return 0;
    int want = f->logits ? 2 * f->logits->rows : 1 + 16;
    want = want < rows ? rows : want;
    want = want > f->max_batch ? f->max_batch : want;
    be_tensor_free(f->be, f->logits);
    f->logits = be_tensor_new(f->be, want, f->m->hp.n_vocab, err);
    return f->logits ? 0 : -1;
}

/* What the pass reads back of its n_out rows of logits (see forward_out):
 * the rows themselves, their greedy choices, or draws from them made by
 * the backend where it makes them — else the rows, for draw_on_host. */
static void read_rows(struct forward *f, int n_out, enum forward_out out,
                      const struct be_draw *draw)
{
    f->logits_host = NULL;
    f->tokens_host = NULL;
    if (out == FORWARD_ARGMAX)
        f->tokens_host = be_read_argmax(f->be, f->logits, n_out);
    else if (out == FORWARD_SAMPLE &&
             be_draws_samples(f->be, f->m->hp.n_vocab))
        f->tokens_host = be_read_sample(f->be, f->logits, n_out, draw);
    else
        f->logits_host = be_read(f->be, f->logits, n_out);
}

/* A FORWARD_SAMPLE pass's draws where the backend made none: the host's
 * (sample_probs, sample_pick) from the rows that came back. */
static void draw_on_host(struct forward *f, int n_out,
                         const struct be_draw *draw)
{
    const struct kk_sampling sp = {.temperature = draw->temperature,
                                   .top_p = draw->top_p};
    const int32_t n_vocab = f->m->hp.n_vocab;
    for (int r = 0; r < n_out; r++) {
        sample_probs(&sp, f->logits_host + (size_t)r * (size_t)n_vocab,
                     n_vocab, f->probs, f->order);
        f->drawn[r] = sample_pick(f->probs, n_vocab, draw->u53[r]);
    }
    f->logits_host = NULL;
    f->tokens_host = f->drawn;
}

int forward_run(struct forward *f, struct kv_cache *kv, const int32_t *tokens,
                int n, int logits_from, enum forward_out out,
                const struct be_draw *draw, struct kk_error *err)
{
    const struct model *m = f->m;
    const struct model_hparams *hp = &m->hp;
    struct backend *be = f->be;
    const int pos0 = kv->n_tokens, n_out = n - logits_from;
    if (check_input(f, kv, tokens, n, logits_from, err) ||
        reserve_logits(f, n_out > 0 ? n_out : 1, err))
        return -1;
    for (int t = 0; t < n; t++)
        f->pos[t] = pos0 + t;

    be_begin(be);
    be_embed(be, &m->tok_embd, tokens, n, hp->embd_scale, f->x);
    for (int il = 0; il < hp->n_layer; il++) {
        attention_block(f, kv, il, n, pos0);
        ffn_block(f, il, n);
    }
    if (n_out > 0) {
        /* the rows asked for, moved to the front unless they are there */
        const struct be_tensor *rows = f->x;
        if (logits_from > 0) {
            be_copy_rows(be, f->h, f->x, logits_from, n_out);
            rows = f->h;
        }
        const struct be_norm norm = {m->output_norm, hp->rms_eps, f->h};
        be_matmul(be, &m->output, rows, &norm, n_out, f->logits);
        read_rows(f, n_out, out, draw);
    }
    if (be_end(be, err)) {
        /* A device error leaves the cache's rows unknown: start it over
         * (the session re-evaluates its history from the first token). */
        kv_clear(kv);
        return -1;
    }
    kv->n_tokens = pos0 + n;
    if (n_out > 0 && out == FORWARD_SAMPLE && f->logits_host)
        draw_on_host(f, n_out, draw);
    return 0;
}
