/* model.h — a transformer model loaded from a GGUF file.
 *
 * model_load() reads the hyper-parameters of the file's architecture (llama,
 * qwen2, qwen3, gemma3), binds every weight tensor by its llama.cpp name and
 * checks its shape and type, and builds the tokenizer. Matrices stay in the
 * mapped file in their stored type; norm vectors and biases (small) are
 * converted to f32 copies owned by the model. An unknown architecture or a
 * missing or misshapen tensor fails with a message naming it.
 *
 * Read-only after load: one model may serve several contexts (the target and
 * a draft each have their own KV cache, never their own model copy). */
#ifndef KK_MODEL_H
#define KK_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya_error.h"

struct gguf;
struct tokenizer;

enum model_arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA3 };

/* How RoPE pairs the dimensions of a head: NORM rotates (x[2i], x[2i+1]),
 * NEOX rotates (x[i], x[i + n_rot/2]). */
enum rope_style { ROPE_NORM, ROPE_NEOX };

/* A matrix of n_rows rows of n_cols values in the file's own type; row r
 * starts at data + r * row_bytes. y = W x maps n_cols inputs to n_rows. */
struct weight {
    uint32_t type;      /* enum kk_dtype */
    int64_t n_cols;
    int64_t n_rows;
    size_t row_bytes;
    const void *data;   /* inside the mapped file */
};

struct layer {
    struct weight wq, wk, wv, wo;
    struct weight ffn_gate, ffn_up, ffn_down;
    /* Vectors converted to f32 (NULL when the architecture has none). */
    float *attn_norm, *ffn_norm;
    float *post_attn_norm, *post_ffn_norm; /* gemma3 */
    float *q_norm, *k_norm;                /* qwen3, gemma3: per head */
    float *bq, *bk, *bv;                   /* qwen2 */
    bool is_sliding;     /* attends to the last `sliding_window` positions */
    float rope_base;
};

struct model_hparams {
    enum model_arch arch;
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;       /* per head, for q/k/v */
    int32_t n_ff;
    int32_t n_rot;          /* dimensions of a head that RoPE rotates */
    int32_t n_ctx_train;
    int32_t sliding_window; /* 0 when no layer slides */
    float rms_eps;
    float rope_base;
    float rope_base_swa;
    float attn_scale;       /* applied to q·k */
    float embd_scale;       /* 1, or sqrt(n_embd) for gemma3 */
    enum rope_style rope;
    bool has_post_norms;    /* gemma3 */
    bool uses_gelu;         /* gated GELU (gemma3) instead of SwiGLU */
};

struct model {
    struct gguf *file;
    struct tokenizer *tok;
    struct model_hparams hp;
    struct weight tok_embd;
    struct weight output;   /* == tok_embd when the output is tied */
    bool is_output_tied;
    float *output_norm;
    struct layer *layers;
    char *name;             /* general.name or the file's base name */
    char *chat_template;    /* tokenizer.chat_template, or NULL */
};

int model_load(const char *path, struct model **out, struct kk_error *err);
void model_free(struct model *m);

const char *model_arch_name(enum model_arch a);

/* Bytes of weights one decoded token reads (every matrix once, plus one
 * embedding row): the numerator of the memory-bandwidth roofline. */
uint64_t model_bytes_per_token(const struct model *m);

/* Total bytes of all tensors in the file. */
uint64_t model_weight_bytes(const struct model *m);

#endif
