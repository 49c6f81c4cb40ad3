/* model.c — see model.h. Tensor names and metadata keys are llama.cpp's. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "gguf.h"
#include "quant.h"
#include "tokenizer.h"

static const struct {
    const char *name;
    enum model_arch arch;
} archs[] = {
    {"llama", ARCH_LLAMA},
    {"qwen2", ARCH_QWEN2},
    {"qwen3", ARCH_QWEN3},
    {"gemma3", ARCH_GEMMA3},
};

const char *model_arch_name(enum model_arch a)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (archs[i].arch == a)
            return archs[i].name;
    return "?";
}

/* Reads "<arch>.<suffix>" into *out; false when absent. */
static bool arch_u32(const struct gguf *g, const char *arch, const char *suffix,
                     uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_u32(g, key, out);
}

static bool arch_f32(const struct gguf *g, const char *arch, const char *suffix,
                     float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(g, key, out);
}

static int need_u32(const struct gguf *g, const char *arch, const char *suffix,
                    uint32_t lo, uint32_t hi, int32_t *out,
                    struct kk_error *err)
{
    uint32_t v;
    if (!arch_u32(g, arch, suffix, &v))
        return kk_fail(err, "metadata key '%s.%s' is missing or not an "
                            "integer — the file is not a complete %s model",
                       arch, suffix, arch);
    if (v < lo || v > hi)
        return kk_fail(err, "metadata key '%s.%s' is %u, outside the "
                            "plausible range %u..%u",
                       arch, suffix, v, lo, hi);
    *out = (int32_t)v;
    return 0;
}

static int read_arch(const struct gguf *g, enum model_arch *arch,
                     const char **name, struct kk_error *err)
{
    struct gguf_str s;
    if (!gguf_get_str(g, "general.architecture", &s))
        return kk_fail(err, "metadata key 'general.architecture' is missing "
                            "— this does not look like a model file");
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        if (gguf_str_eq(s, archs[i].name)) {
            *arch = archs[i].arch;
            *name = archs[i].name;
            return 0;
        }
    }
    return kk_fail(err, "architecture '%.*s' is not supported (kakeya runs "
                        "llama, qwen2, qwen3 and gemma3 models)",
                   (int)(s.len > 64 ? 64 : s.len), s.ptr);
}

static int read_hparams(const struct gguf *g, struct model_hparams *hp,
                        struct kk_error *err)
{
    const char *a = NULL;
    if (read_arch(g, &hp->arch, &a, err))
        return -1;
    if (need_u32(g, a, "embedding_length", 1, 1 << 16, &hp->n_embd, err) ||
        need_u32(g, a, "block_count", 1, 1024, &hp->n_layer, err) ||
        need_u32(g, a, "attention.head_count", 1, 1024, &hp->n_head, err) ||
        need_u32(g, a, "feed_forward_length", 1, 1 << 20, &hp->n_ff, err))
        return -1;
    uint32_t v;
    hp->n_head_kv = arch_u32(g, a, "attention.head_count_kv", &v) ? (int32_t)v
                                                                   : hp->n_head;
    if (hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv ||
        hp->n_head / hp->n_head_kv > 64)
        return kk_fail(err, "%d attention heads cannot share %d key/value "
                            "heads (evenly, at most 64 to one)", hp->n_head,
                       hp->n_head_kv);
    hp->head_dim = arch_u32(g, a, "attention.key_length", &v)
                       ? (int32_t)v : hp->n_embd / hp->n_head;
    uint32_t vlen;
    if (arch_u32(g, a, "attention.value_length", &vlen) &&
        (int32_t)vlen != hp->head_dim)
        return kk_fail(err, "key length %d differs from value length %u, "
                            "which kakeya does not support",
                       hp->head_dim, vlen);
    if (hp->head_dim < 2 || hp->head_dim > 1024 || hp->head_dim % 2)
        return kk_fail(err, "head dimension %d is not supported", hp->head_dim);
    hp->n_rot = arch_u32(g, a, "rope.dimension_count", &v) ? (int32_t)v
                                                            : hp->head_dim;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return kk_fail(err, "rope.dimension_count %d does not fit the head "
                            "dimension %d", hp->n_rot, hp->head_dim);
    hp->n_ctx_train = arch_u32(g, a, "context_length", &v) ? (int32_t)v : 2048;
    if (!arch_f32(g, a, "attention.layer_norm_rms_epsilon", &hp->rms_eps))
        hp->rms_eps = 1e-5f;
    if (!arch_f32(g, a, "rope.freq_base", &hp->rope_base))
        hp->rope_base = 10000.0f;
    if (!arch_f32(g, a, "rope.freq_base_swa", &hp->rope_base_swa))
        hp->rope_base_swa = 10000.0f;
    hp->sliding_window = 0;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    hp->rope = hp->arch == ARCH_LLAMA ? ROPE_NORM : ROPE_NEOX;
    if (hp->arch == ARCH_GEMMA3) {
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->has_post_norms = true;
        hp->uses_gelu = true;
        if (arch_u32(g, a, "attention.sliding_window", &v))
            hp->sliding_window = (int32_t)v;
    }
    return 0;
}

/* Binds a 2-D weight [n_cols x n_rows] named `name`. */
static int bind_matrix(const struct gguf *g, const char *name, int64_t n_cols,
                       int64_t n_rows, struct weight *w, struct kk_error *err)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t)
        return kk_fail(err, "tensor '%s' is missing", name);
    if (t->ne[0] != (uint64_t)n_cols || t->ne[1] != (uint64_t)n_rows ||
        t->ne[2] != 1 || t->ne[3] != 1)
        return kk_fail(err, "tensor '%s' has shape [%llu, %llu, %llu, %llu] "
                            "but this model needs [%lld, %lld]",
                       name, (unsigned long long)t->ne[0],
                       (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2],
                       (unsigned long long)t->ne[3], (long long)n_cols,
                       (long long)n_rows);
    const struct kk_dtype_info *info = dtype_info(t->type);
    if (!info || !info->is_supported)
        return kk_fail(err, "tensor '%s' has type %s, which kakeya does not "
                            "support (supported: F32, F16, BF16, Q8_0, Q5_0, "
                            "Q4_0, Q4_K, Q6_K)",
                       name, info ? info->name : "unknown");
    w->type = t->type;
    w->n_cols = n_cols;
    w->n_rows = n_rows;
    w->row_bytes = dtype_row_bytes(t->type, (uint64_t)n_cols);
    w->data = t->data;
    return 0;
}

/* Loads a 1-D tensor of n values as an owned f32 copy. With optional set,
 * a missing tensor leaves *out NULL instead of failing. */
static int load_vector(const struct gguf *g, const char *name, int64_t n,
                       bool optional, float **out, struct kk_error *err)
{
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t)
        return optional ? 0 : kk_fail(err, "tensor '%s' is missing", name);
    if (t->ne[0] != (uint64_t)n || t->ne[1] != 1 || t->ne[2] != 1 ||
        t->ne[3] != 1)
        return kk_fail(err, "tensor '%s' has %llu x %llu values but this "
                            "model needs a vector of %lld",
                       name, (unsigned long long)t->ne[0],
                       (unsigned long long)t->ne[1], (long long)n);
    const struct kk_dtype_info *info = dtype_info(t->type);
    if (!info || !info->is_supported)
        return kk_fail(err, "tensor '%s' has type %s, which kakeya does not "
                            "support", name, info ? info->name : "unknown");
    *out = malloc((size_t)n * sizeof(float));
    if (!*out)
        return kk_fail(err, "out of memory loading tensor '%s'", name);
    dequantize_row(t->type, t->data, *out, n);
    return 0;
}

static int bind_layer(const struct gguf *g, const struct model_hparams *hp,
                      int il, struct layer *L, struct kk_error *err)
{
    char n[96];
    const int64_t e = hp->n_embd, hd = hp->head_dim;
    const int64_t q_dim = hd * hp->n_head, kv_dim = hd * hp->n_head_kv;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if (bind_matrix(g, NAME("attn_q.weight"), e, q_dim, &L->wq, err) ||
        bind_matrix(g, NAME("attn_k.weight"), e, kv_dim, &L->wk, err) ||
        bind_matrix(g, NAME("attn_v.weight"), e, kv_dim, &L->wv, err) ||
        bind_matrix(g, NAME("attn_output.weight"), q_dim, e, &L->wo, err) ||
        bind_matrix(g, NAME("ffn_gate.weight"), e, hp->n_ff, &L->ffn_gate, err) ||
        bind_matrix(g, NAME("ffn_up.weight"), e, hp->n_ff, &L->ffn_up, err) ||
        bind_matrix(g, NAME("ffn_down.weight"), hp->n_ff, e, &L->ffn_down, err) ||
        load_vector(g, NAME("attn_norm.weight"), e, false, &L->attn_norm, err) ||
        load_vector(g, NAME("ffn_norm.weight"), e, false, &L->ffn_norm, err))
        return -1;
    bool has_qk_norm = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_GEMMA3;
    bool has_bias = hp->arch == ARCH_QWEN2;
    if ((has_qk_norm &&
         (load_vector(g, NAME("attn_q_norm.weight"), hd, false, &L->q_norm, err) ||
          load_vector(g, NAME("attn_k_norm.weight"), hd, false, &L->k_norm, err))) ||
        (has_bias &&
         (load_vector(g, NAME("attn_q.bias"), q_dim, false, &L->bq, err) ||
          load_vector(g, NAME("attn_k.bias"), kv_dim, false, &L->bk, err) ||
          load_vector(g, NAME("attn_v.bias"), kv_dim, false, &L->bv, err))) ||
        (hp->has_post_norms &&
         (load_vector(g, NAME("post_attention_norm.weight"), e, false,
                      &L->post_attn_norm, err) ||
          load_vector(g, NAME("post_ffw_norm.weight"), e, false,
                      &L->post_ffn_norm, err))))
        return -1;
#undef NAME
    return 0;
}

/* gemma3 interleaves sliding-window layers with global ones: with period
 * P (metadata, llama.cpp's default 6) layer i is global when i % P == P-1. */
static void assign_sliding(const struct gguf *g, struct model *m)
{
    struct model_hparams *hp = &m->hp;
    uint32_t period = 6;
    arch_u32(g, model_arch_name(hp->arch), "attention.sliding_window_pattern",
             &period);
    for (int il = 0; il < hp->n_layer; il++) {
        struct layer *L = &m->layers[il];
        L->is_sliding = hp->sliding_window > 0 && period > 0 &&
                        (uint32_t)il % period != period - 1;
        L->rope_base = L->is_sliding ? hp->rope_base_swa : hp->rope_base;
    }
}

static int bind_model(struct model *m, struct kk_error *err)
{
    const struct gguf *g = m->file;
    struct model_hparams *hp = &m->hp;
    const struct gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te)
        return kk_fail(err, "tensor 'token_embd.weight' is missing");
    hp->n_vocab = (int32_t)te->ne[1];
    if (te->ne[1] > INT32_MAX || hp->n_vocab != tok_n_vocab(m->tok))
        return kk_fail(err, "the embedding has %llu rows but the vocabulary "
                            "has %d tokens", (unsigned long long)te->ne[1],
                       tok_n_vocab(m->tok));
    if (bind_matrix(g, "token_embd.weight", hp->n_embd, hp->n_vocab,
                    &m->tok_embd, err) ||
        load_vector(g, "output_norm.weight", hp->n_embd, false,
                    &m->output_norm, err))
        return -1;
    m->is_output_tied = !gguf_find_tensor(g, "output.weight");
    if (m->is_output_tied)
        m->output = m->tok_embd;
    else if (bind_matrix(g, "output.weight", hp->n_embd, hp->n_vocab,
                         &m->output, err))
        return -1;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return kk_fail(err, "out of memory");
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(g, hp, il, &m->layers[il], err))
            return -1;
    assign_sliding(g, m);
    return 0;
}

static char *dup_str(struct gguf_str s)
{
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = 0;
    }
    return c;
}

static int load_names(struct model *m, const char *path, struct kk_error *err)
{
    struct gguf_str s;
    if (gguf_get_str(m->file, "general.name", &s) && s.len > 0) {
        m->name = dup_str(s);
    } else {
        const char *base = strrchr(path, '/');
        m->name = strdup(base ? base + 1 : path);
    }
    if (gguf_get_str(m->file, "tokenizer.chat_template", &s)) {
        m->chat_template = dup_str(s);
        if (!m->chat_template)
            return kk_fail(err, "out of memory");
    }
    return m->name ? 0 : kk_fail(err, "out of memory");
}

int model_load(const char *path, struct model **out, struct kk_error *err)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return kk_fail(err, "out of memory");
    if (gguf_open(path, &m->file, err)) {
        free(m);
        return -1;
    }
    if (read_hparams(m->file, &m->hp, err) ||
        tok_load(m->file, &m->tok, err) || bind_model(m, err) ||
        load_names(m, path, err)) {
        kk_error_prefix(err, path);
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

static void free_layer(struct layer *L)
{
    float *vecs[] = {L->attn_norm, L->ffn_norm, L->post_attn_norm,
                     L->post_ffn_norm, L->q_norm, L->k_norm,
                     L->bq, L->bk, L->bv};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        free(vecs[i]);
}

void model_free(struct model *m)
{
    if (!m)
        return;
    if (m->layers)
        for (int il = 0; il < m->hp.n_layer; il++)
            free_layer(&m->layers[il]);
    free(m->layers);
    free(m->output_norm);
    free(m->name);
    free(m->chat_template);
    tok_free(m->tok);
    gguf_close(m->file);
    free(m);
}

static uint64_t weight_bytes(const struct weight *w)
{
    return (uint64_t)w->row_bytes * (uint64_t)w->n_rows;
}

uint64_t model_bytes_per_token(const struct model *m)
{
    uint64_t sum = m->tok_embd.row_bytes + weight_bytes(&m->output);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct layer *L = &m->layers[il];
        const struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                     &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            sum += weight_bytes(ws[i]);
    }
    return sum;
}

uint64_t model_weight_bytes(const struct model *m)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++)
        sum += gguf_tensor_at(m->file, i)->size;
    return sum;
}
