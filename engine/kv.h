/* kv.h — the KV cache of one model.
 *
 * Holds the keys (after RoPE) and values of every committed token, per layer,
 * under that layer's policy:
 *   KV_FULL         every position (global layers): exact;
 *   KV_RING         a ring of window + KV_SLACK slots for a sliding-window
 *                   layer, which never attends further back than its window:
 *                   exact. The slack (more than the largest draft block)
 *                   keeps the trim of rejected draft tokens sound after the
 *                   ring has wrapped: a verify step only overwrites positions
 *                   older than anything a query after the trim can see;
 *   KV_SINK_WINDOW  opt-in for models without sliding layers: the first
 *                   n_sink positions plus a ring of the most recent window
 *                   (StreamingLLM-style). LOSSY: attention no longer sees the
 *                   middle of a long context.
 * Storage types: f32, f16 (default), q8_0 (int8 with an f16 scale per block
 * of 32 values, or per head when a head is narrower). Attention reads every
 * type in place.
 *
 * A batch is written in two steps per layer: kv_stage() converts its keys
 * and values to the storage type in a staging area, where attention reads
 * them (so a prompt batch of any size never overwrites ring rows its own
 * queries still need, and batched and token-by-token evaluation see the
 * same rounded values); kv_commit() then moves them into the layer's slots.
 *
 * kv_trim() drops a tail of tokens — how the speculative loop forgets
 * rejected drafts. kv_serialize()/kv_restore() move the state to bytes and
 * back (with the token ids and a model fingerprint), for checkpoints.
 * Not thread-safe: one engine thread owns a cache (the forward pass's
 * workers read and write disjoint rows under its direction). */
#ifndef KK_KV_H
#define KK_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya_error.h"

enum kv_type { KV_F32, KV_F16, KV_Q8_0 };

/* Ring slack: one verify step appends at most 1 + 16 tokens. */
enum { KV_SLACK = 17 };
enum kv_policy { KV_FULL, KV_RING, KV_SINK_WINDOW };

struct kv_layer {
    enum kv_policy policy;
    int capacity;     /* slots */
    int window;       /* RING, SINK_WINDOW: positions a query sees back */
    int n_sink;       /* SINK_WINDOW: leading positions kept for good */
    int high;         /* highest position ever written, plus one: a ring
                         slot still holds position q iff q >= high - capacity */
    uint8_t *k, *v;   /* capacity rows of row_bytes */
};

struct kv_config {
    int n_layer;
    int n_ctx;            /* positions a sequence may reach */
    int n_head_kv;
    int head_dim;
    enum kv_type type;
    int max_batch;        /* the largest batch ever appended at once */
    /* Per layer: the model's sliding window, 0 for a global layer. May be
     * NULL (all global). Sliding layers get a ring unless use_full_sliding
     * is set (then every position is kept and the mask does the work). */
    const int *sliding_window;
    bool use_full_sliding;
    /* Opt-in lossy policy for global layers: sinks + window (0: off). */
    int sink_window;
    int n_sink;
};

struct kv_cache {
    int n_layer;
    int n_ctx;
    int kv_dim;           /* n_head_kv * head_dim */
    int head_dim;
    int block;            /* q8_0 block length */
    enum kv_type type;
    size_t row_bytes;     /* one token's keys (or values) in one layer */
    struct kv_layer *layers;
    int n_tokens;         /* committed tokens */
    /* The batch being evaluated, for one layer at a time. */
    int max_batch;
    uint8_t *stage_k, *stage_v;  /* max_batch rows each */
    int stage_layer, stage_pos0, stage_n;
};

int kv_new(const struct kv_config *cfg, struct kv_cache **out,
           struct kk_error *err);
void kv_free(struct kv_cache *kv);

const char *kv_type_name(enum kv_type t);
const char *kv_policy_name(enum kv_policy p);
bool kv_is_lossy(const struct kv_cache *kv);

/* Keeps the first n tokens. Returns n when the cache can continue from
 * there exactly; a smaller number (0) when ring layers have already
 * overwritten positions that tokens after n would need: the caller then
 * re-evaluates its tokens from that position on. */
int kv_trim(struct kv_cache *kv, int n);
void kv_clear(struct kv_cache *kv);

/* Copies the first n tokens of src into dst (same configuration), e.g. to
 * fork a conversation. Fails when src cannot be trimmed to n exactly. */
int kv_copy_prefix(struct kv_cache *dst, const struct kv_cache *src, int n,
                   struct kk_error *err);

/* Stages n tokens' keys and values (f32, kv_dim each, contiguous) for
 * positions pos0.. of layer il; attention then finds them through
 * kv_key_row/kv_value_row. n <= max_batch. */
void kv_stage(struct kv_cache *kv, int il, int pos0, int n, const float *k,
              const float *v);
/* Moves the staged rows into the layer's slots. */
void kv_commit(struct kv_cache *kv);

/* The same two steps for a cache whose rows live on a device: the device
 * backend converts and copies the rows itself and keeps the bookkeeping
 * here. kv_stage_mark records what is staged (kv_stage without the rows);
 * kv_commit_plan lists the copies kv_commit makes, as runs of consecutive
 * staged rows going to consecutive slots (at most KV_MAX_RUNS: the sinks,
 * and a ring that wraps once); kv_commit_done records them as made. */
enum { KV_MAX_RUNS = 4 };
struct kv_run {
    int stage_row, slot, count;
};
void kv_stage_mark(struct kv_cache *kv, int il, int pos0, int n);
int kv_commit_plan(const struct kv_cache *kv, struct kv_run *runs, int max);
void kv_commit_done(struct kv_cache *kv);

/* The slot that holds position pos in layer L. */
static inline int kv_slot(const struct kv_layer *L, int pos)
{
    switch (L->policy) {
    case KV_RING:
        return pos % L->capacity;
    case KV_SINK_WINDOW:
        return pos < L->n_sink
                   ? pos
                   : L->n_sink + (pos - L->n_sink) % (L->capacity - L->n_sink);
    default:
        return pos;
    }
}

/* Positions a query at p sees in layer L, given the model's own sliding
 * window for the layer (0 = none): [0, *sink_end) and [*lo, p]. */
void kv_visible(const struct kv_layer *L, int model_window, int p,
                int *sink_end, int *lo);

/* The head_dim values of one head (at value offset off) of a stored row,
 * as f32: attention converts each key and value once and shares it among
 * the query heads of its group. */
void kv_load_head(const struct kv_cache *kv, const uint8_t *row, int off,
                  float *out);

/* kv_load_head for the keys (or values) of positions [p0, p1) of layer il,
 * into out, out_stride floats apart: what attention converts per chunk,
 * without a call and a slot lookup per row. */
void kv_load_heads(const struct kv_cache *kv, int il, bool values, int p0,
                   int p1, int off, float *out, size_t out_stride);

static inline bool kv_is_staged(const struct kv_cache *kv, int il, int pos)
{
    return il == kv->stage_layer && pos >= kv->stage_pos0 &&
           pos < kv->stage_pos0 + kv->stage_n;
}
static inline const uint8_t *kv_key_row(const struct kv_cache *kv, int il,
                                        int pos)
{
    const struct kv_layer *L = &kv->layers[il];
    return kv_is_staged(kv, il, pos)
               ? kv->stage_k + (size_t)(pos - kv->stage_pos0) * kv->row_bytes
               : L->k + (size_t)kv_slot(L, pos) * kv->row_bytes;
}
static inline const uint8_t *kv_value_row(const struct kv_cache *kv, int il,
                                          int pos)
{
    const struct kv_layer *L = &kv->layers[il];
    return kv_is_staged(kv, il, pos)
               ? kv->stage_v + (size_t)(pos - kv->stage_pos0) * kv->row_bytes
               : L->v + (size_t)kv_slot(L, pos) * kv->row_bytes;
}

/* Bytes held for the committed tokens, and what every layer keeping every
 * committed position in f16 would take (the "full" of the KV-saved pane). */
uint64_t kv_resident_bytes(const struct kv_cache *kv);
uint64_t kv_full_f16_bytes(const struct kv_cache *kv);

/* ---- checkpoints ---- */

/* Serialises the state: configuration, the fingerprint of the model files,
 * the token history (n_history >= kv->n_tokens ids: the session's history
 * may end with tokens not yet evaluated) and the rows each layer still
 * needs. Returns a malloc'd buffer (*size bytes) or NULL when out of
 * memory. */
void *kv_serialize(const struct kv_cache *kv, const int32_t *tokens,
                   int n_history, const char *fingerprint, size_t *size);

/* Restores a serialised state into kv (which must have the same
 * configuration) and copies the history into tokens (capacity kv->n_ctx).
 * Refuses, with a message, a blob for another model (fingerprint), another
 * configuration, or a damaged one; kv is then cleared. Returns the length
 * of the history restored, or -1. */
int kv_restore(struct kv_cache *kv, const void *blob, size_t size,
               const char *fingerprint, int32_t *tokens,
               struct kk_error *err);

#endif
