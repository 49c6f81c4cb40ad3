/* kv.h — the KV cache of one model.
 *
 * Holds the keys (after RoPE) and values of every committed token, per layer,
 * in f32 or f16. Token i of the sequence lives in slot i. kv_trim() drops a
 * tail of tokens — how the speculative loop forgets rejected drafts — and is
 * O(1): slots past n_tokens are simply overwritten by the next append.
 * Not thread-safe: one engine thread owns a cache (the forward pass's worker
 * threads read and write disjoint slots under its direction). */
#ifndef KK_KV_H
#define KK_KV_H

#include <stddef.h>
#include <stdint.h>

#include "kakeya_error.h"

enum kv_type { KV_F32, KV_F16 };

struct kv_cache {
    int n_layer;
    int n_ctx;       /* slots per layer */
    int kv_dim;      /* n_head_kv * head_dim */
    enum kv_type type;
    size_t elem_bytes;
    void **k, **v;   /* per layer: n_ctx * kv_dim elements */
    int n_tokens;    /* committed tokens */
};

int kv_new(int n_layer, int n_ctx, int kv_dim, enum kv_type type,
           struct kv_cache **out, struct kk_error *err);
void kv_free(struct kv_cache *kv);

/* Keeps the first n tokens (n <= n_tokens). */
void kv_trim(struct kv_cache *kv, int n);
void kv_clear(struct kv_cache *kv);

/* Stores kv_dim f32 values as the key/value of `slot` in layer il. */
void kv_store(struct kv_cache *kv, int il, int slot, const float *k,
              const float *v);

/* Pointer to the key/value row of slot in layer il (elem type kv->type). */
static inline const void *kv_key(const struct kv_cache *kv, int il, int slot)
{
    return (const char *)kv->k[il] + (size_t)slot * kv->kv_dim * kv->elem_bytes;
}
static inline const void *kv_value(const struct kv_cache *kv, int il, int slot)
{
    return (const char *)kv->v[il] + (size_t)slot * kv->kv_dim * kv->elem_bytes;
}

/* Bytes held for the committed tokens, and what every layer keeping every
 * committed position in f16 would take (the "full" of the KV-saved pane). */
uint64_t kv_resident_bytes(const struct kv_cache *kv);
uint64_t kv_full_f16_bytes(const struct kv_cache *kv);

#endif
