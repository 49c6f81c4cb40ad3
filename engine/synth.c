/* synth.c — random-weight models with the exact shapes of real ones
 * (kk_make_model in kakeya.h, `kakeya mkmodel`).
 *
 * Benchmarks need models of real sizes and no downloads. The weights are
 * Gaussian with std 1/sqrt(fan_in) (norms 1 + N(0, 0.1)), like the golden
 * models, so activations stay in a realistic range. The vocabulary is a
 * synthetic byte-level BPE of the real size (256 byte tokens, ChatML
 * specials, then merges that grow letter strings breadth-first), or a real
 * tokenizer copied from another GGUF file with vocab_from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "gguf.h"
#include "gguf_write.h"
#include "kakeya.h"
#include "quant.h"

struct shape {
    const char *name;
    const char *arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base, rope_base_swa;
    int sliding_window;
    bool is_tied;
};

/* Hyper-parameters as published in each model's config.json. */
static const struct shape shapes[] = {
    {"smollm2-135m", "llama", 576, 30, 9, 3, 64, 1536, 49152, 8192, 1e5f, 0, 0, true},
    {"smollm2-360m", "llama", 960, 32, 15, 5, 64, 2560, 49152, 8192, 1e5f, 0, 0, true},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768, 1e6f, 0, 0, true},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1e6f, 0, 0, true},
    {"gemma3-270m", "gemma3", 640, 18, 4, 1, 256, 2048, 262144, 32768, 1e6f, 1e4f, 512, true},
    {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 64, 5632, 32000, 2048, 1e4f, 0, 0, false},
    /* Not a real model: small enough for tests (drafts, fixtures). */
    {"tiny-llama", "llama", 64, 2, 4, 2, 16, 128, 512, 2048, 1e4f, 0, 0, true},
    {"tiny-gemma3", "gemma3", 64, 6, 4, 1, 16, 128, 512, 2048, 1e6f, 1e4f, 8, true},
    {"llama3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 5e5f, 0, 0, true},
};

const char *kk_model_shape_name(int i)
{
    return i >= 0 && i < (int)(sizeof shapes / sizeof shapes[0])
               ? shapes[i].name : NULL;
}

/* xorshift64* with Box-Muller: a reproducible Gaussian stream. */
struct gauss {
    uint64_t s;
    bool has_spare;
    float spare;
};

static float gauss_next(struct gauss *g)
{
    if (g->has_spare) {
        g->has_spare = false;
        return g->spare;
    }
    double u[2];
    for (int i = 0; i < 2; i++) {
        g->s ^= g->s >> 12;
        g->s ^= g->s << 25;
        g->s ^= g->s >> 27;
        u[i] = ((double)((g->s * 0x2545f4914f6cdd1dull) >> 11) + 0.5) *
               0x1.0p-53;
    }
    double r = sqrt(-2.0 * log(u[0])), t = 6.283185307179586 * u[1];
    g->spare = (float)(r * sin(t));
    g->has_spare = true;
    return (float)(r * cos(t));
}

/* ---- tokenizer ---- */

/* GPT-2's byte -> printable code point map, UTF-8 encoded into out. */
static void byte_token(int b, char out[4])
{
    int cp = b;
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                     (b >= 0xAE && b <= 0xFF);
    if (!printable) {
        int n = 0;
        for (int c = 0; c < b; c++)
            n += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) ||
                   (c >= 0xAE && c <= 0xFF));
        cp = 256 + n;
    }
    memset(out, 0, 4);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
    }
}

struct vocab {
    char **tokens;
    int32_t *types;
    char **merges;
    int n_tokens, n_merges;
};

static void vocab_free(struct vocab *v)
{
    for (int i = 0; i < v->n_tokens; i++)
        free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
}

static char *concat(const char *a, const char *sep, const char *b)
{
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *s = malloc(la + ls + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, sep, ls);
        memcpy(s + la + ls, b, lb + 1);
    }
    return s;
}

/* 3 specials, 256 byte tokens, then merges: strings grow breadth-first,
 * each an earlier token (" ", a letter, or a grown string) plus a letter,
 * so every merge joins two existing tokens and every string is new. */
static int vocab_synthesize(struct vocab *v, int n_vocab)
{
    static const char *specials[] = {"<|endoftext|>", "<|im_start|>",
                                     "<|im_end|>"};
    v->tokens = calloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->merges = calloc((size_t)n_vocab, sizeof *v->merges);
    int *queue = calloc((size_t)n_vocab + 27, sizeof *queue);
    if (!v->tokens || !v->types || !v->merges || !queue) {
        free(queue);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        v->tokens[v->n_tokens] = strdup(specials[i]);
        v->types[v->n_tokens++] = 3; /* control */
    }
    for (int b = 0; b < 256; b++) {
        char t[4];
        byte_token(b, t);
        v->tokens[v->n_tokens] = strdup(t);
        v->types[v->n_tokens++] = 1;
    }
    int head = 0, tail = 0;
    queue[tail++] = 3 + ' ';
    for (int c = 0; c < 26; c++)
        queue[tail++] = 3 + 'a' + c;
    while (v->n_tokens < n_vocab && head < tail) {
        const char *prefix = v->tokens[queue[head++]];
        for (int c = 0; c < 26 && v->n_tokens < n_vocab; c++) {
            const char *letter = v->tokens[3 + 'a' + c];
            char *tok = concat(prefix, "", letter);
            char *merge = concat(prefix, " ", letter);
            if (!tok || !merge) {
                free(tok);
                free(merge);
                break;
            }
            queue[tail++] = v->n_tokens;
            v->tokens[v->n_tokens] = tok;
            v->types[v->n_tokens++] = 1;
            v->merges[v->n_merges++] = merge;
        }
    }
    free(queue);
    for (int i = 0; i < n_vocab; i++)
        if (i >= v->n_tokens || !v->tokens[i])
            return -1;
    return 0;
}

static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' "
    "+ message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int write_synthetic_vocab(struct gguf_writer *w, int n_vocab,
                                 const char *pre)
{
    struct vocab v = {0};
    int rc = vocab_synthesize(&v, n_vocab);
    if (!rc)
        rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") ||
             gguf_writer_set_str(w, "tokenizer.ggml.pre", pre) ||
             gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens",
                                     (const char *const *)v.tokens,
                                     (uint64_t)v.n_tokens) ||
             gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32,
                                 v.types, (uint64_t)v.n_tokens) ||
             gguf_writer_set_str_arr(w, "tokenizer.ggml.merges",
                                     (const char *const *)v.merges,
                                     (uint64_t)v.n_merges) ||
             gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1) ||
             gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2) ||
             gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false) ||
             gguf_writer_set_str(w, "tokenizer.chat_template", chatml_template);
    vocab_free(&v);
    return rc ? -1 : 0;
}

static int copy_vocab(struct gguf_writer *w, const char *path, int *n_vocab,
                      struct kk_error *err)
{
    struct gguf *g;
    if (gguf_open(path, &g, err))
        return -1;
    const struct gguf_value *tokens;
    int rc = 0;
    if (!gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens)) {
        rc = kk_fail(err, "%s has no tokenizer to copy", path);
    } else {
        *n_vocab = (int)tokens->v.arr.n;
        for (uint64_t i = 0; !rc && i < gguf_n_kv(g); i++) {
            const struct gguf_kv *kv = gguf_kv_at(g, i);
            if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10))
                continue;
            char *key = strndup(kv->key.ptr, kv->key.len);
            rc = !key || gguf_writer_set_value(w, key, &kv->value)
                     ? kk_fail(err, "out of memory copying the tokenizer")
                     : 0;
            free(key);
        }
    }
    gguf_close(g);
    return rc;
}

/* ---- weights ---- */

/* A tensor whose random values are produced when the file is written, so
 * a 1B-parameter model never sits in memory as a whole. Each tensor has its
 * own generator, seeded from the model seed and its index. */
struct random_tensor {
    uint32_t type;
    int64_t n_cols, n_rows;
    float mean, std;
    uint64_t seed;
};

struct synth {
    struct gguf_writer *w;
    struct random_tensor *tensors; /* live until the file is saved */
    int n_tensors, cap_tensors;
    uint64_t seed;
};

static int fill_random(void *ctx, void *buf, size_t size)
{
    const struct random_tensor *t = ctx;
    size_t row_bytes = dtype_row_bytes(t->type, (uint64_t)t->n_cols);
    float *row = malloc(sizeof(float) * (size_t)t->n_cols);
    if (!row || row_bytes * (size_t)t->n_rows != size) {
        free(row);
        return -1;
    }
    struct gauss g = {.s = kk_rng_seed(t->seed)};
    int rc = 0;
    for (int64_t r = 0; r < t->n_rows && !rc; r++) {
        for (int64_t c = 0; c < t->n_cols; c++)
            row[c] = t->mean + t->std * gauss_next(&g);
        rc = quantize_row(t->type, row, (uint8_t *)buf + (size_t)r * row_bytes,
                          t->n_cols);
    }
    free(row);
    return rc;
}

static int add_random(struct synth *sy, const char *name, uint32_t type,
                      int64_t n_cols, int64_t n_rows, float mean, float std,
                      struct kk_error *err)
{
    if (!dtype_row_bytes(type, (uint64_t)n_cols))
        return kk_fail(err, "tensor '%s': rows of %lld values cannot be "
                            "stored as %s (blocks of %u)", name,
                       (long long)n_cols, dtype_info(type)->name,
                       dtype_info(type)->block_elems);
    if (sy->n_tensors == sy->cap_tensors)
        return kk_fail(err, "internal: too many tensors");
    struct random_tensor *t = &sy->tensors[sy->n_tensors];
    *t = (struct random_tensor){type, n_cols, n_rows, mean, std,
                                sy->seed * 1000003u + (uint64_t)sy->n_tensors};
    sy->n_tensors++;
    uint64_t ne[2] = {(uint64_t)n_cols, (uint64_t)n_rows};
    if (gguf_writer_add_tensor_fn(sy->w, name, type, n_rows > 1 ? 2 : 1, ne,
                                  fill_random, t))
        return kk_fail(err, "could not add tensor '%s'", name);
    return 0;
}

static int add_layer(struct synth *sy, const struct shape *s, int il,
                     uint32_t type, struct kk_error *err)
{
    const int64_t e = s->n_embd, q = (int64_t)s->n_head * s->head_dim,
                  kv = (int64_t)s->n_head_kv * s->head_dim, ff = s->n_ff;
    const bool qwen2 = !strcmp(s->arch, "qwen2"),
               qk_norm = !strcmp(s->arch, "qwen3") || !strcmp(s->arch, "gemma3"),
               post = !strcmp(s->arch, "gemma3");
    char n[96];
#define T(suffix, cols, rows) \
    (snprintf(n, sizeof n, "blk.%d." suffix, il), \
     add_random(sy, n, type, cols, rows, 0.0f, 1.0f / sqrtf((float)(cols)), err))
#define V(suffix, len, mean, std) \
    (snprintf(n, sizeof n, "blk.%d." suffix, il), \
     add_random(sy, n, KK_F32, len, 1, mean, std, err))
    if (V("attn_norm.weight", e, 1, 0.1f) || T("attn_q.weight", e, q) ||
        T("attn_k.weight", e, kv) || T("attn_v.weight", e, kv) ||
        T("attn_output.weight", q, e) || V("ffn_norm.weight", e, 1, 0.1f) ||
        T("ffn_gate.weight", e, ff) || T("ffn_up.weight", e, ff) ||
        T("ffn_down.weight", ff, e))
        return -1;
    if (qwen2 && (V("attn_q.bias", q, 0, 0.1f) || V("attn_k.bias", kv, 0, 0.1f) ||
                  V("attn_v.bias", kv, 0, 0.1f)))
        return -1;
    if (qk_norm && (V("attn_q_norm.weight", s->head_dim, 1, 0.1f) ||
                    V("attn_k_norm.weight", s->head_dim, 1, 0.1f)))
        return -1;
    if (post && (V("post_attention_norm.weight", e, 1, 0.1f) ||
                 V("post_ffw_norm.weight", e, 1, 0.1f)))
        return -1;
#undef T
#undef V
    return 0;
}

static int set_hparams(struct gguf_writer *w, const struct shape *s)
{
    char k[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, s->arch), k)
    int rc = gguf_writer_set_str(w, "general.architecture", s->arch) ||
             gguf_writer_set_str(w, "general.name", s->name) ||
             gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->n_ctx) ||
             gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd) ||
             gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s->n_layer) ||
             gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff) ||
             gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head) ||
             gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv) ||
             gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim) ||
             gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim) ||
             gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base) ||
             gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"),
                                 !strcmp(s->arch, "llama") ? 1e-5f : 1e-6f);
    if (!rc && s->sliding_window)
        rc = gguf_writer_set_u32(w, KEY("attention.sliding_window"),
                                 (uint32_t)s->sliding_window) ||
             gguf_writer_set_f32(w, KEY("rope.freq_base_swa"), s->rope_base_swa);
#undef KEY
    return rc ? -1 : 0;
}

static const char *pre_tokenizer_for(const char *arch)
{
    return !strcmp(arch, "llama") ? "smollm"
           : strncmp(arch, "qwen", 4) == 0 ? "qwen2" : "default";
}

int kk_make_model(const char *shape_name, const char *type_name,
                  const char *vocab_from, const char *path, uint64_t seed,
                  struct kk_error *err)
{
    const struct shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, shape_name))
            s = &shapes[i];
    if (!s)
        return kk_fail(err, "unknown shape '%s' (kakeya mkmodel --list shows "
                            "the shapes)", shape_name);
    uint32_t type = !strcmp(type_name, "F16")    ? KK_F16
                    : !strcmp(type_name, "F32")  ? KK_F32
                    : !strcmp(type_name, "Q8_0") ? KK_Q8_0
                    : !strcmp(type_name, "Q4_0") ? KK_Q4_0
                                                 : UINT32_MAX;
    if (type == UINT32_MAX)
        return kk_fail(err, "type '%s' is not one mkmodel writes (F32, F16, "
                            "Q8_0, Q4_0)", type_name);
    struct gguf_writer *w = gguf_writer_new();
    /* token_embd, output_norm, output, and at most 16 per layer */
    int cap = 3 + 16 * s->n_layer;
    struct synth sy = {.w = w, .cap_tensors = cap, .seed = seed,
                       .tensors = calloc((size_t)cap, sizeof *sy.tensors)};
    if (!w || !sy.tensors) {
        gguf_writer_free(w);
        free(sy.tensors);
        return kk_fail(err, "out of memory");
    }
    int n_vocab = s->n_vocab;
    int rc = set_hparams(w, s) ||
             gguf_writer_set_u32(w, "general.file_type",
                                 type == KK_F32 ? 0 : type == KK_F16 ? 1
                                 : type == KK_Q8_0 ? 7 : 2);
    if (rc)
        rc = kk_fail(err, "out of memory");
    else if (vocab_from)
        rc = copy_vocab(w, vocab_from, &n_vocab, err);
    else if (write_synthetic_vocab(w, n_vocab, pre_tokenizer_for(s->arch)))
        rc = kk_fail(err, "out of memory building the vocabulary");
    if (!rc)
        rc = add_random(&sy, "token_embd.weight", type, s->n_embd, n_vocab,
                        0.0f, 1.0f / sqrtf((float)s->n_embd), err);
    for (int il = 0; !rc && il < s->n_layer; il++)
        rc = add_layer(&sy, s, il, type, err);
    if (!rc)
        rc = add_random(&sy, "output_norm.weight", KK_F32, s->n_embd, 1,
                        1.0f, 0.1f, err);
    if (!rc && !s->is_tied)
        rc = add_random(&sy, "output.weight", type, s->n_embd, n_vocab,
                        0.0f, 1.0f / sqrtf((float)s->n_embd), err);
    if (!rc)
        rc = gguf_writer_save(w, path, err);
    gguf_writer_free(w);
    free(sy.tensors);
    return rc;
}
