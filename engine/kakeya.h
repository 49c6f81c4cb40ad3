/* kakeya.h — the engine's public API: models, sessions, generation.
 *
 * A kk_model is a GGUF file opened read-only (weights stay mapped); it can
 * serve several sessions. A kk_session is one conversation's state: a KV
 * cache, activation buffers and a thread pool; it belongs to the thread that
 * calls it (the engine thread), and nothing in it is shared.
 *
 *   kk_model_open -> kk_session_new -> kk_tokenize -> kk_generate
 *                                                  -> kk_session_free
 *                                                  -> kk_model_close
 *
 * Every function that can fail returns 0 (or a count) on success and -1 on
 * failure, filling struct kk_error with a message for the user. Everything
 * that is opened or created has a matching close/free that accepts NULL. */
#ifndef KAKEYA_H
#define KAKEYA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya_error.h"

struct kk_model;
struct kk_session;

/* ---- models ---- */

struct kk_model_info {
    const char *name;
    const char *arch;          /* "llama", "qwen2", "qwen3", "gemma3" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_ctx_train;
    int32_t sliding_window;    /* 0: no sliding layers */
    int32_t n_sliding_layers;
    uint64_t file_bytes;
    uint64_t weight_bytes;
    uint64_t bytes_per_token;  /* weight bytes one decoded token reads */
    uint64_t n_params;
    const char *chat_template; /* the Jinja source, or NULL */
    const char *chat_format;   /* the family kakeya renders, e.g. "chatml" */
    bool chat_format_is_fallback;
    int32_t bos, eos;          /* -1 when absent */
    bool add_bos;
};

int kk_model_open(const char *path, struct kk_model **out,
                  struct kk_error *err);
void kk_model_close(struct kk_model *m);
void kk_model_get_info(const struct kk_model *m, struct kk_model_info *out);

/* Counts of tensors per type name, for `kakeya info`: calls fn for each
 * tensor in file order. */
void kk_model_each_tensor(const struct kk_model *m,
                          void (*fn)(void *ud, const char *name, size_t name_len,
                                     const char *type, const uint64_t ne[4],
                                     uint32_t n_dims, uint64_t bytes),
                          void *ud);

/* ---- tokens ---- */

/* See engine/tokenizer.h: returns the id count (may exceed cap) or -1. */
int kk_tokenize(const struct kk_model *m, const char *text, size_t len,
                bool add_bos, bool parse_special, int32_t *ids, int cap,
                struct kk_error *err);
/* Bytes of one token; special=true renders control tokens as text. */
int kk_token_piece(const struct kk_model *m, int32_t id, bool special,
                   char *buf, int cap);
bool kk_token_is_eog(const struct kk_model *m, int32_t id);

/* Renders a conversation with the model's chat template (a malloc'd string
 * the caller frees, or NULL when out of memory). roles[i] is "system",
 * "user" or "assistant". */
char *kk_chat_render(const struct kk_model *m, const char *const *roles,
                     const char *const *contents, size_t n,
                     bool add_generation_prompt);

/* ---- sessions ---- */

enum kk_kv_type { KK_KV_F16, KK_KV_F32, KK_KV_Q8_0 };

/* Where a session computes. CPU is the default. VULKAN runs the forward pass
 * as compute shaders on Vulkan device `device` (weights and KV cache live in
 * device memory) and fails with a message when there is no loader or no such
 * device. AUTO takes the first Vulkan GPU (discrete, integrated or virtual;
 * never a software renderer such as lavapipe) and the CPU when there is
 * none. */
enum kk_backend { KK_BACKEND_CPU = 0, KK_BACKEND_VULKAN, KK_BACKEND_AUTO };
enum { KK_BACKEND_COUNT = 3 };
/* "cpu", "vulkan", "auto": what --backend takes; NULL past the last. */
const char *kk_backend_name(enum kk_backend b);

struct kk_session_params {
    int n_ctx;        /* 0: min(model's training context, 4096) */
    int n_threads;    /* 0: all cores */
    int max_batch;    /* 0: 256 (at least 17); prompts are split into
                         batches this big */
    enum kk_kv_type kv_type;   /* default f16 */
    /* Sliding-window layers keep a ring of window + max_batch positions
     * (exact); set this to keep every position instead. */
    bool kv_full_sliding;
    /* Opt-in, LOSSY, for models without sliding layers: global layers keep
     * only the first kv_sinks positions and the last kv_window (0: off). */
    int kv_window;
    int kv_sinks;
    enum kk_backend backend;   /* default CPU */
    int device;                /* KK_BACKEND_VULKAN: index into
                                  kk_vulkan_devices() (0: the first) */
};

int kk_session_new(struct kk_model *m, const struct kk_session_params *p,
                   struct kk_session **out, struct kk_error *err);
/* A session for a draft model beside a target session made with p. Where
 * the target computes on a GPU, a small draft (weights under
 * KK_DRAFT_CPU_BYTES) computes on the CPU: a GPU pass has a fixed cost near
 * a millisecond that a few-million-parameter model cannot amortise, and
 * the draft runs one pass per proposed token, while the CPU runs such a
 * model in a fraction of that. Otherwise the draft computes where the
 * target does. */
enum { KK_DRAFT_CPU_BYTES = 64 << 20 };
enum kk_backend kk_draft_backend(const struct kk_model *draft,
                                 enum kk_backend target);
int kk_draft_session_new(struct kk_model *draft,
                         const struct kk_session_params *p,
                         struct kk_session **out, struct kk_error *err);
void kk_session_free(struct kk_session *s);
/* What the session computes on: "cpu", or "vulkan: <device name>". */
const char *kk_session_backend(const struct kk_session *s);
int kk_session_n_ctx(const struct kk_session *s);
int kk_session_n_tokens(const struct kk_session *s);
/* Forgets every token after the first n. (If ring layers no longer hold
 * what continuing from n needs, the kept tokens are recomputed lazily by the
 * next evaluation.) */
void kk_session_trim(struct kk_session *s, int n);

/* KV-cache accounting: bytes held, what an f16 cache keeping every position
 * of every layer would hold, and whether a lossy policy is on. */
struct kk_kv_info {
    uint64_t resident_bytes, full_f16_bytes;
    double saved;            /* 1 - resident / full */
    bool is_lossy;
    const char *type;        /* "f16", "f32", "q8_0" */
    int n_ring_layers, n_sink_layers, n_full_layers;
};
void kk_session_kv_info(const struct kk_session *s, struct kk_kv_info *out);

/* Checkpoints: the session's state (tokens and KV cache) as bytes, and
 * back. The blob carries a fingerprint of the model file, so restoring into
 * a session of other model files (or another cache configuration) is
 * refused with a message. kk_session_save returns a malloc'd buffer, or
 * NULL when memory (or, on a GPU, reading the cache back) fails. */
void *kk_session_save(const struct kk_session *s, size_t *size);
int kk_session_restore(struct kk_session *s, const void *blob, size_t size,
                       struct kk_error *err);
/* The model file's fingerprint (64 hex digits), as checkpoints store it. */
const char *kk_model_fingerprint(const struct kk_model *m);

/* Appends n tokens and computes logits: for the last token only, or, with
 * all_logits, for every one of them (then n must be at most max_batch).
 * progress(ud, done, total) is called between batches of a long input (may
 * be NULL). */
int kk_session_eval(struct kk_session *s, const int32_t *ids, int n,
                    bool all_logits,
                    void (*progress)(void *ud, int done, int total), void *ud,
                    struct kk_error *err);
/* Logits row i of the last eval (0 = the only row unless all_logits);
 * NULL after kk_session_eval_greedy or kk_session_eval_sample. */
const float *kk_session_logits(const struct kk_session *s, int row);
/* kk_session_eval for greedy decoding: what comes back of each row is only
 * its argmax (kk_session_token), the token kk_sample picks at temperature
 * 0. On a GPU that is made where the logits are, and 4 bytes a row cross
 * back instead of n_vocab floats. */
int kk_session_eval_greedy(struct kk_session *s, const int32_t *ids, int n,
                           bool all_rows,
                           void (*progress)(void *ud, int done, int total),
                           void *ud, struct kk_error *err);
struct kk_sampling;
/* kk_session_eval for sampled decoding (p->temperature > 0): what comes
 * back is only a draw from the last row (kk_session_token(s, 0)), the
 * token kk_sample draws from its logits with the same *rng, which it
 * advances as kk_sample does. A GPU can make the draw where the logits
 * are, and 4 bytes cross back instead of n_vocab floats (the default;
 * KAKEYA_VK_SAMPLE=0 turns it off); in fixed point, so it can differ from
 * kk_sample's where the uniform falls within rounding of a boundary
 * between two tokens' shares. */
int kk_session_eval_sample(struct kk_session *s, const int32_t *ids, int n,
                           const struct kk_sampling *p, uint64_t *rng,
                           void (*progress)(void *ud, int done, int total),
                           void *ud, struct kk_error *err);
/* Row i's token after kk_session_eval_greedy (its argmax) or
 * kk_session_eval_sample (the draw); -1 after kk_session_eval or for a row
 * it did not compute. */
int32_t kk_session_token(const struct kk_session *s, int row);

/* ---- sampling and generation ---- */

struct kk_sampling {
    float temperature;  /* <= 0: greedy (argmax, ties to the lowest id) */
    float top_p;        /* the nucleus' mass; 1: off, 0: the most likely
                           token alone */
    uint64_t seed;
};

/* Draws a token from logits (n_vocab values); *rng is the generator state,
 * advanced in place (seed it with kk_rng_seed). */
uint64_t kk_rng_seed(uint64_t seed);
int32_t kk_sample(const struct kk_sampling *p, uint64_t *rng,
                  const float *logits, int32_t n_vocab, float *scratch);

/* Who proposes draft tokens for the target to verify in one batch. */
enum kk_spec_mode {
    KK_SPEC_OFF,    /* plain decoding: one target forward per token */
    KK_SPEC_NGRAM,  /* continue the longest recent match inside the context */
    KK_SPEC_DRAFT,  /* a small draft model with the same vocabulary */
    KK_SPEC_AUTO,   /* n-gram when it has a confident match, else draft */
};

enum kk_proposer { KK_PROPOSER_TARGET, KK_PROPOSER_NGRAM, KK_PROPOSER_DRAFT };

struct kk_generate_params {
    int n_predict;          /* maximum new tokens */
    struct kk_sampling sampling;
    bool stop_at_eog;       /* stop after an end-of-generation token */
    bool render_special;    /* control tokens appear as text in `text` */
    enum kk_spec_mode spec;
    struct kk_session *draft; /* the draft model's session (DRAFT, AUTO) */
    int block;              /* draft block length L; 0: adaptive */
    int max_block;          /* upper bound for adaptive L; 0: 16 */
    /* Set from any thread to stop at the next step boundary; may be NULL. */
    const _Atomic(bool) *stop;
};

enum { KK_STATS_RECENT = 64 };

/* A snapshot of one generation's statistics, copied out to the UI. */
struct kk_stats {
    int n_prompt;
    int n_generated;        /* committed tokens */
    int n_steps;            /* target forwards in the decode phase */
    int n_proposed;         /* draft tokens offered for verification */
    int n_accepted;         /* of those, accepted */
    int accepted_by[3];     /* committed tokens by enum kk_proposer (the
                               target's own tokens: bonus and corrections) */
    double tau;             /* committed tokens per target step */
    double acceptance_rate; /* n_accepted / n_proposed */
    double prefill_seconds, decode_seconds;
    double draft_seconds, verify_seconds;
    double prefill_tok_per_s, decode_tok_per_s;
    int block;              /* the last block length L */
    /* Tokens committed by each of the last n_recent steps (at most
     * KK_STATS_RECENT), oldest first, ending at recent[KK_STATS_RECENT-1]. */
    uint8_t recent[KK_STATS_RECENT];
    int n_recent;
    int n_ctx, n_tokens;    /* context size and tokens in it */
    uint64_t kv_resident_bytes, kv_full_bytes;
    double kv_saved;        /* 1 - resident / full */
    bool stopped_by_request;
    bool stopped_at_eog;
    bool stopped_at_context_limit; /* the context filled up: say so */
};

/* Called for each committed token with its id, the text it completes (may
 * be "" while a UTF-8 character is incomplete) and the statistics after the
 * step that committed it. Return false to stop. id is -1 for a final flush
 * of held bytes. */
typedef bool (*kk_token_fn)(void *ud, int32_t id, const char *text,
                            const struct kk_stats *stats);

/* Evaluates the prompt (appended to what the session holds) and generates
 * up to n_predict tokens, speculatively when p->spec says so. With greedy
 * sampling the output is token for token the plain greedy output; with
 * temperature, rejection sampling of a draft model's tokens keeps the
 * target's distribution, and with the n-gram's drafts the output is token
 * for token the plain sampled output of the same seed. When it
 * returns, the session's cache holds exactly the committed tokens (the
 * prompt and everything generated, the last token included). */
int kk_generate(struct kk_session *s, const int32_t *prompt, int n_prompt,
                const struct kk_generate_params *p, kk_token_fn on_token,
                void *ud, struct kk_stats *stats, struct kk_error *err);

/* The token ids the session's cache holds (owned by the session). */
const int32_t *kk_session_tokens(const struct kk_session *s, int *n);

/* Checks that a draft model can serve a target: same vocabulary, token by
 * token. */
int kk_check_draft(const struct kk_model *target, const struct kk_model *draft,
                   struct kk_error *err);

/* ---- synthetic models (benchmarks, tests) ---- */

/* Writes a random-weight GGUF with the exact shape of a real model
 * ("smollm2-135m", "qwen2.5-0.5b", ...; see kk_model_shape_name) in type
 * "F32", "F16", "Q8_0" or "Q4_0". The vocabulary is synthetic, or copied
 * from the GGUF at vocab_from (may be NULL). */
int kk_make_model(const char *shape, const char *type, const char *vocab_from,
                  const char *path, uint64_t seed, struct kk_error *err);
/* Name of shape i, or NULL past the last. */
const char *kk_model_shape_name(int i);

/* Which matmul kernels this CPU runs ("avx512-vnni", "avx2", ...). */
const char *kk_cpu_kernels(void);

/* ---- Vulkan devices ---- */

enum kk_vk_device_type {
    KK_VK_OTHER, KK_VK_INTEGRATED, KK_VK_DISCRETE, KK_VK_VIRTUAL, KK_VK_CPU
};

struct kk_vk_device_info {
    char name[256];
    enum kk_vk_device_type type;
    const char *type_name;     /* "discrete", "integrated", "virtual", "cpu",
                                  "other" */
    uint64_t memory_bytes;     /* the largest device-local memory heap */
    uint64_t binds_bytes;      /* the largest buffer a shader binds at once
                                  (maxStorageBufferRange): no tensor, nor a
                                  layer's KV rows, may be larger */
    uint32_t api_version;      /* VK_MAKE_API_VERSION packing */
    char driver[128];          /* driver name and version, when reported */
    /* Whether kakeya can compute on it; when not, why_not says what is
     * missing. */
    bool is_usable;
    char why_not[160];
};

/* Lists the Vulkan devices in the order the loader reports them (the order
 * `device` indexes). Fills at most max entries and returns how many devices
 * there are (0: a loader but no device), or -1 when no Vulkan loader can be
 * opened or the instance cannot be created (err says which). */
int kk_vulkan_devices(struct kk_vk_device_info *out, int max,
                      struct kk_error *err);

#endif
