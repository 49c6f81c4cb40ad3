/* kv.c — see kv.h. */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "quant.h"

int kv_new(int n_layer, int n_ctx, int kv_dim, enum kv_type type,
           struct kv_cache **out, struct kk_error *err)
{
    *out = NULL;
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return kk_fail(err, "out of memory");
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->elem_bytes = type == KV_F32 ? 4 : 2;
    kv->k = calloc((size_t)n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)n_layer, sizeof *kv->v);
    size_t bytes = (size_t)n_ctx * (size_t)kv_dim * kv->elem_bytes;
    if (!kv->k || !kv->v)
        goto oom;
    for (int il = 0; il < n_layer; il++) {
        kv->k[il] = malloc(bytes);
        kv->v[il] = malloc(bytes);
        if (!kv->k[il] || !kv->v[il])
            goto oom;
    }
    *out = kv;
    return 0;
oom:
    kv_free(kv);
    return kk_fail(err, "out of memory allocating a KV cache of %d tokens "
                        "(%zu MiB); use a smaller context (--ctx)",
                   n_ctx, bytes * 2 * (size_t)n_layer >> 20);
}

void kv_free(struct kv_cache *kv)
{
    if (!kv)
        return;
    for (int il = 0; il < kv->n_layer; il++) {
        if (kv->k)
            free(kv->k[il]);
        if (kv->v)
            free(kv->v[il]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

void kv_trim(struct kv_cache *kv, int n)
{
    if (n < kv->n_tokens)
        kv->n_tokens = n < 0 ? 0 : n;
}

void kv_clear(struct kv_cache *kv)
{
    kv->n_tokens = 0;
}

static void store_row(enum kv_type type, void *dst, const float *src, int n)
{
    if (type == KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    for (int i = 0; i < n; i++)
        h[i] = f32_to_fp16(src[i]);
}

void kv_store(struct kv_cache *kv, int il, int slot, const float *k,
              const float *v)
{
    store_row(kv->type, (void *)kv_key(kv, il, slot), k, kv->kv_dim);
    store_row(kv->type, (void *)kv_value(kv, il, slot), v, kv->kv_dim);
}

uint64_t kv_resident_bytes(const struct kv_cache *kv)
{
    return 2ull * (uint64_t)kv->n_layer * (uint64_t)kv->n_tokens *
           (uint64_t)kv->kv_dim * kv->elem_bytes;
}

uint64_t kv_full_f16_bytes(const struct kv_cache *kv)
{
    return 2ull * (uint64_t)kv->n_layer * (uint64_t)kv->n_tokens *
           (uint64_t)kv->kv_dim * 2;
}
