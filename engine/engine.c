/* engine.c — kakeya.h's models, sessions and the plain generation loop,
 * built from model, tokenizer, forward pass, KV cache and sampler. */
#include "kakeya.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "chat_template.h"
#include "dtype.h"
#include "error.h"
#include "fingerprint.h"
#include "forward.h"
#include "gguf.h"
#include "kv.h"
#include "matmul.h"
#include "model.h"
#include "sample.h"
#include "session.h"
#include "tokenizer.h"


/* ---- models ---- */

int kk_model_open(const char *path, struct kk_model **out,
                  struct kk_error *err)
{
    *out = NULL;
    struct kk_model *km = calloc(1, sizeof *km);
    if (!km)
        return kk_fail(err, "out of memory");
    if (model_load(path, &km->m, err)) {
        free(km);
        return -1;
    }
    km->chat = (int)chat_template_detect(km->m->chat_template,
                                         &km->chat_is_fallback);
    if (gguf_fingerprint(km->m->file, km->fingerprint)) {
        kk_model_close(km);
        return kk_fail(err, "out of memory");
    }
    *out = km;
    return 0;
}

void kk_model_close(struct kk_model *km)
{
    if (!km)
        return;
    model_free(km->m);
    free(km);
}

static uint64_t count_params(const struct model *m)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->file, i);
        n += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    return n;
}

void kk_model_get_info(const struct kk_model *km, struct kk_model_info *out)
{
    const struct model *m = km->m;
    const struct model_hparams *hp = &m->hp;
    memset(out, 0, sizeof *out);
    out->name = m->name;
    out->arch = model_arch_name(hp->arch);
    out->n_vocab = hp->n_vocab;
    out->n_embd = hp->n_embd;
    out->n_layer = hp->n_layer;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->head_dim = hp->head_dim;
    out->n_ff = hp->n_ff;
    out->n_ctx_train = hp->n_ctx_train;
    out->sliding_window = hp->sliding_window;
    for (int il = 0; il < hp->n_layer; il++)
        out->n_sliding_layers += m->layers[il].is_sliding;
    out->file_bytes = gguf_file_size(m->file);
    out->weight_bytes = model_weight_bytes(m);
    out->bytes_per_token = model_bytes_per_token(m);
    out->n_params = count_params(m);
    out->chat_template = m->chat_template;
    out->chat_format = chat_format_name((enum chat_format)km->chat);
    out->chat_format_is_fallback = km->chat_is_fallback;
    out->bos = tok_bos(m->tok);
    out->eos = tok_eos(m->tok);
    out->add_bos = tok_add_bos(m->tok);
}

void kk_model_each_tensor(const struct kk_model *km,
                          void (*fn)(void *ud, const char *name, size_t name_len,
                                     const char *type, const uint64_t ne[4],
                                     uint32_t n_dims, uint64_t bytes),
                          void *ud)
{
    const struct gguf *g = km->m->file;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const struct kk_dtype_info *info = dtype_info(t->type);
        fn(ud, t->name.ptr, t->name.len, info ? info->name : "?", t->ne,
           t->n_dims, t->size);
    }
}

/* ---- tokens ---- */

int kk_tokenize(const struct kk_model *km, const char *text, size_t len,
                bool add_bos, bool parse_special, int32_t *ids, int cap,
                struct kk_error *err)
{
    return tok_encode(km->m->tok, text, len, add_bos, parse_special, ids, cap,
                      err);
}

int kk_token_piece(const struct kk_model *km, int32_t id, bool special,
                   char *buf, int cap)
{
    return tok_piece(km->m->tok, id, special, buf, cap);
}

bool kk_token_is_eog(const struct kk_model *km, int32_t id)
{
    return tok_is_eog(km->m->tok, id);
}

char *kk_chat_render(const struct kk_model *km, const char *const *roles,
                     const char *const *contents, size_t n,
                     bool add_generation_prompt)
{
    struct chat_message *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        msgs[i].role = roles[i];
        msgs[i].content = contents[i];
    }
    char *text = chat_render((enum chat_format)km->chat, msgs, n, add_generation_prompt);
    free(msgs);
    return text;
}

/* ---- sessions ---- */

static int new_kv(const struct model *m, const struct kk_session_params *p,
                  int n_ctx, int max_batch, struct kv_cache **out,
                  struct kk_error *err)
{
    const struct model_hparams *hp = &m->hp;
    int *windows = calloc((size_t)hp->n_layer, sizeof(int));
    if (!windows)
        return kk_fail(err, "out of memory");
    for (int il = 0; il < hp->n_layer; il++)
        windows[il] = m->layers[il].is_sliding ? hp->sliding_window : 0;
    static const enum kv_type types[] = {KV_F16, KV_F32, KV_Q8_0};
    struct kv_config c = {
        .n_layer = hp->n_layer, .n_ctx = n_ctx, .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .type = p && p->kv_type <= KK_KV_Q8_0 ? types[p->kv_type] : KV_F16,
        .max_batch = max_batch, .sliding_window = windows,
        .use_full_sliding = p && p->kv_full_sliding,
        .sink_window = p ? p->kv_window : 0, .n_sink = p ? p->kv_sinks : 0,
    };
    int rc = kv_new(&c, out, err);
    free(windows);
    return rc;
}

int kk_session_new(struct kk_model *km, const struct kk_session_params *p,
                   struct kk_session **out, struct kk_error *err)
{
    *out = NULL;
    const struct model_hparams *hp = &km->m->hp;
    struct kk_session *s = calloc(1, sizeof *s);
    if (!s)
        return kk_fail(err, "out of memory");
    s->model = km;
    s->n_ctx = p && p->n_ctx > 0 ? p->n_ctx
               : hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    /* A verify step needs 1 + 16 rows of logits in one batch. */
    s->max_batch = p && p->max_batch > 0 ? p->max_batch : 256;
    s->max_batch = s->max_batch < 17 ? 17 : s->max_batch;
    if (s->max_batch > s->n_ctx)
        s->max_batch = s->n_ctx;
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->n_ctx);
    struct backend_params bp = {.kind = p ? p->backend : KK_BACKEND_CPU,
                                .n_threads = p ? p->n_threads : 0,
                                .device = p ? p->device : 0};
    if (!s->tokens || backend_new(&bp, km->m, &s->be, err) ||
        new_kv(km->m, p, s->n_ctx, s->max_batch, &s->kv, err) ||
        backend_bind_kv(s->be, s->kv, err) ||
        forward_new(km->m, s->be, s->max_batch, s->n_ctx, &s->fwd, err)) {
        if (!s->tokens)
            kk_fail(err, "out of memory");
        kk_session_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

enum kk_backend kk_draft_backend(const struct kk_model *draft,
                                 enum kk_backend target)
{
    struct kk_model_info info;
    kk_model_get_info(draft, &info);
    return info.weight_bytes < KK_DRAFT_CPU_BYTES ? KK_BACKEND_CPU : target;
}

int kk_draft_session_new(struct kk_model *draft,
                         const struct kk_session_params *p,
                         struct kk_session **out, struct kk_error *err)
{
    struct kk_session_params dp = p ? *p : (struct kk_session_params){0};
    dp.backend = kk_draft_backend(draft, dp.backend);
    return kk_session_new(draft, &dp, out, err);
}

void kk_session_free(struct kk_session *s)
{
    if (!s)
        return;
    forward_free(s->fwd);
    kv_free(s->kv);
    backend_free(s->be);
    free(s->tokens);
    free(s);
}

const char *kk_session_backend(const struct kk_session *s)
{
    return backend_name(s->be);
}

int kk_session_n_ctx(const struct kk_session *s)
{
    return s->n_ctx;
}

int kk_session_n_tokens(const struct kk_session *s)
{
    return s->n_tokens;
}

const int32_t *kk_session_tokens(const struct kk_session *s, int *n)
{
    *n = s->n_tokens;
    return s->tokens;
}

void kk_session_trim(struct kk_session *s, int n)
{
    if (n < 0)
        n = 0;
    if (n < s->n_tokens)
        s->n_tokens = n;
    /* When ring layers cannot resume at n, kv_trim keeps less and the next
     * evaluation recomputes the rest from the history. */
    kv_trim(s->kv, n);
    s->logits_rows = 0;
}

int session_push(struct kk_session *s, const int32_t *ids, int n,
                 struct kk_error *err)
{
    if (n > s->n_ctx - s->n_tokens)
        return kk_fail(err, "the input needs %d tokens but only %d of the "
                            "context's %d are free; shorten it or raise --ctx",
                       n, s->n_ctx - s->n_tokens, s->n_ctx);
    const int32_t n_vocab = s->model->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return kk_fail(err, "token id %d is outside the vocabulary "
                                "(0..%d)", ids[i], n_vocab - 1);
    if (n > 0)
        memcpy(s->tokens + s->n_tokens, ids, sizeof(int32_t) * (size_t)n);
    s->n_tokens += n;
    return 0;
}

int session_append_eval(struct kk_session *s, const int32_t *ids, int n,
                        int n_logits, enum forward_out out,
                        const struct be_draw *draw,
                        void (*progress)(void *ud, int done, int total),
                        void *ud, struct kk_error *err)
{
    int n_before = s->n_tokens;
    if (session_push(s, ids, n, err))
        return -1;
    int start = s->kv->n_tokens, total = s->n_tokens - start;
    if (total <= 0 || n_logits < 1 || n_logits > total ||
        n_logits > s->max_batch) {
        s->n_tokens = n_before;
        return kk_fail(err, total <= 0 ? "nothing to evaluate"
                            : "internal: %d logits rows asked of %d tokens",
                       n_logits, total);
    }
    for (int done = 0; done < total;) {
        int left = total - done;
        /* The last batch must hold every row whose logits are wanted. */
        int b = left < s->max_batch ? left : s->max_batch;
        if (left > b && left - b < n_logits)
            b = left - n_logits;
        int from = left == b ? b - n_logits : b;
        if (forward_run(s->fwd, s->kv, s->tokens + start + done, b, from,
                        out, draw, err)) {
            kv_trim(s->kv, start);
            s->n_tokens = n_before;
            return -1;
        }
        done += b;
        if (progress && total > s->max_batch)
            progress(ud, done, total);
        s->logits_rows = b - from;
    }
    return 0;
}

const float *session_logits(const struct kk_session *s, int row)
{
    const float *logits = forward_logits(s->fwd);
    if (row < 0 || row >= s->logits_rows || !logits)
        return NULL;
    return logits + (size_t)row * s->model->m->hp.n_vocab;
}

int32_t session_token(const struct kk_session *s, int row)
{
    const int32_t *ids = forward_tokens(s->fwd);
    if (row < 0 || row >= s->logits_rows || !ids)
        return -1;
    return ids[row];
}

int kk_session_eval(struct kk_session *s, const int32_t *ids, int n,
                    bool all_logits,
                    void (*progress)(void *ud, int done, int total), void *ud,
                    struct kk_error *err)
{
    if (n <= 0)
        return kk_fail(err, "nothing to evaluate");
    if (all_logits && n > s->max_batch)
        return kk_fail(err, "all logits of %d tokens requested; at most %d "
                            "fit in one batch", n, s->max_batch);
    return session_append_eval(s, ids, n, all_logits ? n : 1,
                               FORWARD_LOGITS, NULL, progress, ud, err);
}

const float *kk_session_logits(const struct kk_session *s, int row)
{
    return session_logits(s, row);
}

int kk_session_eval_greedy(struct kk_session *s, const int32_t *ids, int n,
                           bool all_rows,
                           void (*progress)(void *ud, int done, int total),
                           void *ud, struct kk_error *err)
{
    if (n <= 0)
        return kk_fail(err, "nothing to evaluate");
    if (all_rows && n > s->max_batch)
        return kk_fail(err, "greedy choices for all of %d tokens requested; "
                            "at most %d fit in one batch", n, s->max_batch);
    return session_append_eval(s, ids, n, all_rows ? n : 1, FORWARD_ARGMAX,
                               NULL, progress, ud, err);
}

int kk_session_eval_sample(struct kk_session *s, const int32_t *ids, int n,
                           const struct kk_sampling *p, uint64_t *rng,
                           void (*progress)(void *ud, int done, int total),
                           void *ud, struct kk_error *err)
{
    if (n <= 0)
        return kk_fail(err, "nothing to evaluate");
    if (!(p->temperature > 0.0f))
        return kk_fail(err, "a draw needs a temperature above 0 (at 0, "
                            "kk_session_eval_greedy)");
    const uint64_t u53 = sample_bits53(rng);
    const struct be_draw draw = {p->temperature, p->top_p, &u53};
    return session_append_eval(s, ids, n, 1, FORWARD_SAMPLE, &draw, progress,
                               ud, err);
}

int32_t kk_session_token(const struct kk_session *s, int row)
{
    return session_token(s, row);
}

void kk_session_kv_info(const struct kk_session *s, struct kk_kv_info *out)
{
    const struct kv_cache *kv = s->kv;
    memset(out, 0, sizeof *out);
    out->resident_bytes = kv_resident_bytes(kv);
    out->full_f16_bytes = kv_full_f16_bytes(kv);
    out->saved = out->full_f16_bytes
                     ? 1.0 - (double)out->resident_bytes /
                                 (double)out->full_f16_bytes
                     : 0.0;
    out->is_lossy = kv_is_lossy(kv);
    out->type = kv_type_name(kv->type);
    for (int il = 0; il < kv->n_layer; il++) {
        enum kv_policy pol = kv->layers[il].policy;
        out->n_ring_layers += pol == KV_RING;
        out->n_sink_layers += pol == KV_SINK_WINDOW;
        out->n_full_layers += pol == KV_FULL;
    }
}

const char *kk_model_fingerprint(const struct kk_model *m)
{
    return m->fingerprint;
}

/* Checkpoints hold the whole history and the cache; a pending last token
 * (committed, not yet evaluated) is evaluated by the next step as usual. */
void *kk_session_save(const struct kk_session *s, size_t *size)
{
    /* A device backend keeps the rows in device memory: bring them over. */
    if (backend_kv_pull(s->be, s->kv, NULL)) {
        *size = 0;
        return NULL;
    }
    return kv_serialize(s->kv, s->tokens, s->n_tokens, s->model->fingerprint,
                        size);
}

int kk_session_restore(struct kk_session *s, const void *blob, size_t size,
                       struct kk_error *err)
{
    s->n_tokens = 0;
    s->logits_rows = 0;
    int n = kv_restore(s->kv, blob, size, s->model->fingerprint, s->tokens,
                       err);
    if (n < 0)
        return -1;
    if (backend_kv_push(s->be, s->kv, err)) {
        kv_clear(s->kv);
        return -1;
    }
    s->n_tokens = n;
    return 0;
}

int kk_check_draft(const struct kk_model *target, const struct kk_model *draft,
                   struct kk_error *err)
{
    const struct tokenizer *a = target->m->tok, *b = draft->m->tok;
    if (tok_n_vocab(a) != tok_n_vocab(b))
        return kk_fail(err, "the draft model's vocabulary has %d tokens and "
                            "the target's %d: a draft must share the target's "
                            "tokenizer", tok_n_vocab(b), tok_n_vocab(a));
    for (int32_t id = 0; id < tok_n_vocab(a); id++)
        if (strcmp(tok_text(a, id), tok_text(b, id)))
            return kk_fail(err, "the draft model's token %d is '%.40s' but "
                                "the target's is '%.40s': a draft must share "
                                "the target's tokenizer", id, tok_text(b, id),
                           tok_text(a, id));
    if (tok_bos(a) != tok_bos(b) || tok_eos(a) != tok_eos(b))
        return kk_fail(err, "the draft and target models use different "
                            "BOS/EOS tokens");
    return 0;
}

const char *kk_cpu_kernels(void)
{
    return matmul_kernel_name();
}
