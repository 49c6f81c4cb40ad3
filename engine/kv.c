/* kv.c — see kv.h. */
#include "kv.h"

#include <assert.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "quant.h"

const char *kv_type_name(enum kv_type t)
{
    return t == KV_F32 ? "f32" : t == KV_F16 ? "f16" : "q8_0";
}

const char *kv_policy_name(enum kv_policy p)
{
    return p == KV_FULL ? "full" : p == KV_RING ? "ring" : "sink+window";
}

bool kv_is_lossy(const struct kv_cache *kv)
{
    for (int il = 0; il < kv->n_layer; il++)
        if (kv->layers[il].policy == KV_SINK_WINDOW)
            return true;
    return false;
}

static size_t row_bytes_for(enum kv_type type, int kv_dim, int block)
{
    switch (type) {
    case KV_F32:
        return (size_t)kv_dim * 4;
    case KV_F16:
        return (size_t)kv_dim * 2;
    default:
        return (size_t)(kv_dim / block) * (2 + (size_t)block);
    }
}

/* The policy of layer il. A ring or sink+window that would be as large as
 * the context itself is no saving: such a layer keeps every position (and
 * a sliding layer is then masked by the model's window in attention). */
static void plan_layer(const struct kv_config *c, int il, struct kv_layer *L)
{
    int w = c->sliding_window ? c->sliding_window[il] : 0;
    *L = (struct kv_layer){.policy = KV_FULL, .capacity = c->n_ctx};
    if (w > 0 && !c->use_full_sliding && w + KV_SLACK < c->n_ctx) {
        L->policy = KV_RING;
        L->window = w;
        L->capacity = w + KV_SLACK;
    } else if (w == 0 && c->sink_window > 0 &&
               c->n_sink + c->sink_window + KV_SLACK < c->n_ctx) {
        L->policy = KV_SINK_WINDOW;
        L->window = c->sink_window;
        L->n_sink = c->n_sink;
        L->capacity = c->n_sink + c->sink_window + KV_SLACK;
    }
}

int kv_new(const struct kv_config *c, struct kv_cache **out,
           struct kk_error *err)
{
    *out = NULL;
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return kk_fail(err, "out of memory");
    kv->n_layer = c->n_layer;
    kv->n_ctx = c->n_ctx;
    kv->head_dim = c->head_dim;
    kv->kv_dim = c->n_head_kv * c->head_dim;
    kv->type = c->type;
    kv->block = c->head_dim % 32 == 0 ? 32 : c->head_dim;
    kv->row_bytes = row_bytes_for(c->type, kv->kv_dim, kv->block);
    kv->layers = calloc((size_t)c->n_layer, sizeof(struct kv_layer));
    kv->max_batch = c->max_batch;
    kv->stage_layer = -1;
    kv->stage_k = malloc((size_t)c->max_batch * kv->row_bytes + 1);
    kv->stage_v = malloc((size_t)c->max_batch * kv->row_bytes + 1);
    if (!kv->layers || !kv->stage_k || !kv->stage_v)
        goto oom;
    uint64_t total = 0;
    for (int il = 0; il < c->n_layer; il++) {
        struct kv_layer *L = &kv->layers[il];
        plan_layer(c, il, L);
        size_t bytes = (size_t)L->capacity * kv->row_bytes;
        L->k = malloc(bytes ? bytes : 1);
        L->v = malloc(bytes ? bytes : 1);
        total += 2 * (uint64_t)bytes;
        if (!L->k || !L->v)
            goto oom;
    }
    *out = kv;
    return 0;
oom:
    kv_free(kv);
    return kk_fail(err, "out of memory allocating a KV cache for %d tokens; "
                        "use a smaller context (--ctx) or --kv q8_0",
                   c->n_ctx);
}

void kv_free(struct kv_cache *kv)
{
    if (!kv)
        return;
    for (int il = 0; kv->layers && il < kv->n_layer; il++) {
        free(kv->layers[il].k);
        free(kv->layers[il].v);
    }
    free(kv->layers);
    free(kv->stage_k);
    free(kv->stage_v);
    free(kv);
}

/* Whether layer L still holds every position a query at or after n sees. */
static bool layer_can_resume_at(const struct kv_cache *kv, int il, int n)
{
    const struct kv_layer *L = &kv->layers[il];
    if (L->policy == KV_FULL)
        return true;
    int oldest_needed = n - L->window + 1;
    if (L->policy == KV_SINK_WINDOW && oldest_needed < L->n_sink)
        oldest_needed = L->n_sink;
    if (oldest_needed < 0)
        oldest_needed = 0;
    return oldest_needed >= kv->layers[il].high - L->capacity ||
           oldest_needed >= n;
}

int kv_trim(struct kv_cache *kv, int n)
{
    if (n >= kv->n_tokens)
        return kv->n_tokens;
    if (n < 0)
        n = 0;
    for (int il = 0; il < kv->n_layer; il++) {
        if (!layer_can_resume_at(kv, il, n)) {
            kv_clear(kv);
            return 0;
        }
    }
    kv->n_tokens = n;
    return n;
}

void kv_clear(struct kv_cache *kv)
{
    kv->n_tokens = 0;
    for (int il = 0; il < kv->n_layer; il++)
        kv->layers[il].high = 0;
}

/* ---- storing and reading rows ---- */

static void store_row(const struct kv_cache *kv, uint8_t *dst, const float *x)
{
    switch (kv->type) {
    case KV_F32:
        memcpy(dst, x, (size_t)kv->kv_dim * sizeof(float));
        return;
    case KV_F16: {
        /* F16C rounds to nearest even, as f32_to_fp16 does */
        uint16_t *h = (uint16_t *)dst;
        int i = 0;
        for (; i + 8 <= kv->kv_dim; i += 8)
            _mm_storeu_si128((__m128i *)(h + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                             _MM_FROUND_TO_NEAREST_INT |
                                                 _MM_FROUND_NO_EXC));
        for (; i < kv->kv_dim; i++)
            h[i] = f32_to_fp16(x[i]);
        return;
    }
    default:
        for (int b = 0; b < kv->kv_dim / kv->block; b++) {
            const float *xb = x + b * kv->block;
            uint8_t *blk = dst + (size_t)b * (2 + kv->block);
            float amax = 0.0f;
            for (int i = 0; i < kv->block; i++)
                amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
            float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            uint16_t dh = f32_to_fp16(d);
            memcpy(blk, &dh, 2);
            for (int i = 0; i < kv->block; i++)
                blk[2 + i] = (uint8_t)(int8_t)lrintf(xb[i] * id);
        }
    }
}

void kv_stage(struct kv_cache *kv, int il, int pos0, int n, const float *k,
              const float *v)
{
    for (int t = 0; t < n; t++) {
        store_row(kv, kv->stage_k + (size_t)t * kv->row_bytes,
                  k + (size_t)t * kv->kv_dim);
        store_row(kv, kv->stage_v + (size_t)t * kv->row_bytes,
                  v + (size_t)t * kv->kv_dim);
    }
    kv_stage_mark(kv, il, pos0, n);
}

void kv_stage_mark(struct kv_cache *kv, int il, int pos0, int n)
{
    kv->stage_layer = il;
    kv->stage_pos0 = pos0;
    kv->stage_n = n;
}

int kv_commit_plan(const struct kv_cache *kv, struct kv_run *runs, int max)
{
    if (kv->stage_layer < 0)
        return 0;
    const struct kv_layer *L = &kv->layers[kv->stage_layer];
    const int end = kv->stage_pos0 + kv->stage_n;
    /* A ring keeps only the newest `capacity` positions of a long batch
     * (sinks aside); older ones would be overwritten within it anyway. */
    int first = kv->stage_pos0, ring = L->capacity - L->n_sink;
    if (L->policy != KV_FULL && end - ring > first)
        first = end - ring;
    int n_runs = 0;
    for (int pos = kv->stage_pos0; pos < end; pos++) {
        if (pos >= L->n_sink && pos < first)
            continue;
        int slot = kv_slot(L, pos), row = pos - kv->stage_pos0;
        struct kv_run *r = n_runs ? &runs[n_runs - 1] : NULL;
        if (r && r->slot + r->count == slot && r->stage_row + r->count == row) {
            r->count++;
            continue;
        }
        assert(n_runs < max);
        runs[n_runs++] = (struct kv_run){.stage_row = row, .slot = slot,
                                         .count = 1};
    }
    return n_runs;
}

void kv_commit_done(struct kv_cache *kv)
{
    if (kv->stage_layer < 0)
        return;
    struct kv_layer *L = &kv->layers[kv->stage_layer];
    const int end = kv->stage_pos0 + kv->stage_n;
    if (end > L->high)
        L->high = end;
    kv->stage_layer = -1;
    kv->stage_n = 0;
}

void kv_commit(struct kv_cache *kv)
{
    struct kv_run runs[KV_MAX_RUNS];
    int n_runs = kv_commit_plan(kv, runs, KV_MAX_RUNS);
    struct kv_layer *L = n_runs ? &kv->layers[kv->stage_layer] : NULL;
    for (int i = 0; i < n_runs; i++) {
        size_t off = (size_t)runs[i].slot * kv->row_bytes;
        size_t st = (size_t)runs[i].stage_row * kv->row_bytes;
        size_t bytes = (size_t)runs[i].count * kv->row_bytes;
        memcpy(L->k + off, kv->stage_k + st, bytes);
        memcpy(L->v + off, kv->stage_v + st, bytes);
    }
    kv_commit_done(kv);
}

void kv_visible(const struct kv_layer *L, int model_window, int p,
                int *sink_end, int *lo)
{
    int w = L->policy == KV_SINK_WINDOW ? L->window : model_window;
    *sink_end = 0;
    if (L->policy == KV_SINK_WINDOW)
        *sink_end = L->n_sink < p + 1 ? L->n_sink : p + 1;
    *lo = w > 0 && p - w + 1 > *sink_end ? p - w + 1 : *sink_end;
}

static void load_head_f16(const uint16_t *h, int d, float *out)
{
    int i = 0;
    for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(
                                      _mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < d; i++)
        out[i] = fp16_to_f32(h[i]);
}

void kv_load_head(const struct kv_cache *kv, const uint8_t *row, int off,
                  float *out)
{
    const int d = kv->head_dim;
    if (kv->type == KV_F32) {
        memcpy(out, (const float *)row + off, (size_t)d * sizeof(float));
    } else if (kv->type == KV_F16) {
        load_head_f16((const uint16_t *)row + off, d, out);
    } else {
        const int B = kv->block;
        for (int b = off / B; b < (off + d) / B; b++, out += B) {
            const uint8_t *blk = row + (size_t)b * (2 + B);
            uint16_t dh;
            memcpy(&dh, blk, 2);
            const float scale = fp16_to_f32(dh);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < B; j++)
                out[j] = scale * (float)q[j];
        }
    }
}

/* Rows ahead that kv_load_heads asks the cache for: one head's slice of
 * consecutive rows is a few hundred bytes apart. */
enum { LOAD_PREFETCH = 8 };

/* The end of the run of positions from p (before p1) whose rows lie one
 * after another in memory: a ring wraps, and the staged batch lives apart. */
static int contiguous_end(const struct kv_cache *kv, int il, int p, int p1)
{
    const struct kv_layer *L = &kv->layers[il];
    if (kv_is_staged(kv, il, p))
        return p1 < kv->stage_pos0 + kv->stage_n ? p1 : kv->stage_pos0 + kv->stage_n;
    int end = p1;
    if (il == kv->stage_layer && kv->stage_pos0 > p && kv->stage_pos0 < end)
        end = kv->stage_pos0;
    int slot_end = L->capacity;
    if (L->policy == KV_SINK_WINDOW && p < L->n_sink)
        slot_end = L->n_sink;
    if (L->policy != KV_FULL) {
        int left = slot_end - kv_slot(L, p);
        end = p + left < end ? p + left : end;
    }
    return end;
}

void kv_load_heads(const struct kv_cache *kv, int il, bool values, int p0,
                   int p1, int off, float *out, size_t out_stride)
{
    const size_t rb = kv->row_bytes;
    const size_t head_bytes = (size_t)kv->head_dim *
                              (kv->type == KV_F32 ? 4 : kv->type == KV_F16 ? 2 : 1);
    const size_t head_at = (size_t)off * head_bytes / (size_t)kv->head_dim;
    for (int p = p0; p < p1;) {
        int end = contiguous_end(kv, il, p, p1);
        const uint8_t *row = values ? kv_value_row(kv, il, p)
                                    : kv_key_row(kv, il, p);
        for (; p < end; p++, row += rb, out += out_stride) {
            if (p + LOAD_PREFETCH < end)
                for (size_t b = 0; b < head_bytes; b += 64)
                    _mm_prefetch((const char *)row + LOAD_PREFETCH * rb +
                                     head_at + b, _MM_HINT_T0);
            kv_load_head(kv, row, off, out);
        }
    }
}

/* ---- accounting ---- */

uint64_t kv_resident_bytes(const struct kv_cache *kv)
{
    uint64_t sum = 0;
    for (int il = 0; il < kv->n_layer; il++) {
        int rows = kv->n_tokens < kv->layers[il].capacity
                       ? kv->n_tokens : kv->layers[il].capacity;
        sum += 2ull * (uint64_t)rows * kv->row_bytes;
    }
    return sum;
}

uint64_t kv_full_f16_bytes(const struct kv_cache *kv)
{
    return 2ull * (uint64_t)kv->n_layer * (uint64_t)kv->n_tokens *
           (uint64_t)kv->kv_dim * 2;
}

/* ---- copying and checkpoints ---- */

/* The positions of layer il that must be kept for continuing at n:
 * [0, sink_end) and [lo, n). */
static void kept_range(const struct kv_cache *kv, int il, int n, int *sink_end,
                       int *lo)
{
    const struct kv_layer *L = &kv->layers[il];
    *sink_end = 0;
    *lo = 0;
    if (L->policy == KV_FULL)
        return;
    *sink_end = L->policy == KV_SINK_WINDOW ? (L->n_sink < n ? L->n_sink : n)
                                            : 0;
    *lo = n - L->window + 1 > *sink_end ? n - L->window + 1 : *sink_end;
}

static bool same_config(const struct kv_cache *a, const struct kv_cache *b)
{
    if (a->n_layer != b->n_layer || a->kv_dim != b->kv_dim ||
        a->head_dim != b->head_dim || a->type != b->type ||
        a->n_ctx != b->n_ctx)
        return false;
    for (int il = 0; il < a->n_layer; il++) {
        const struct kv_layer *x = &a->layers[il], *y = &b->layers[il];
        if (x->policy != y->policy || x->capacity != y->capacity ||
            x->window != y->window || x->n_sink != y->n_sink)
            return false;
    }
    return true;
}

static void copy_position(struct kv_cache *dst, const struct kv_cache *src,
                          int il, int pos)
{
    memcpy(dst->layers[il].k + (size_t)kv_slot(&dst->layers[il], pos) *
                                   dst->row_bytes,
           kv_key_row(src, il, pos), src->row_bytes);
    memcpy(dst->layers[il].v + (size_t)kv_slot(&dst->layers[il], pos) *
                                   dst->row_bytes,
           kv_value_row(src, il, pos), src->row_bytes);
}

int kv_copy_prefix(struct kv_cache *dst, const struct kv_cache *src, int n,
                   struct kk_error *err)
{
    if (!same_config(dst, src))
        return kk_fail(err, "internal: copying between KV caches of "
                            "different shapes");
    if (n > src->n_tokens)
        n = src->n_tokens;
    for (int il = 0; il < src->n_layer; il++)
        if (!layer_can_resume_at(src, il, n))
            return kk_fail(err, "the first %d tokens are no longer all in "
                                "the cache; they must be recomputed", n);
    kv_clear(dst);
    for (int il = 0; il < src->n_layer; il++) {
        int sink_end, lo;
        kept_range(src, il, n, &sink_end, &lo);
        for (int p = 0; p < sink_end; p++)
            copy_position(dst, src, il, p);
        for (int p = lo; p < n; p++)
            copy_position(dst, src, il, p);
        dst->layers[il].high = n;
    }
    dst->n_tokens = n;
    return 0;
}

enum { KV_MAGIC = 0x564b4b4b /* "KKKV" */, KV_VERSION = 1, FP_LEN = 64 };

struct kv_header {
    uint32_t magic, version;
    uint32_t n_layer, n_ctx, kv_dim, head_dim, type, n_tokens, n_history;
    char fingerprint[FP_LEN];
    uint64_t payload_bytes;
    uint64_t checksum;     /* FNV-1a 64 of the payload */
};

struct kv_layer_header {
    uint32_t policy, capacity, window, n_sink;
};

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static size_t layer_rows(const struct kv_cache *kv, int il, int n)
{
    int sink_end, lo;
    kept_range(kv, il, n, &sink_end, &lo);
    return (size_t)sink_end + (size_t)(n - lo);
}

void *kv_serialize(const struct kv_cache *kv, const int32_t *tokens,
                   int n_history, const char *fingerprint, size_t *size)
{
    const int n = kv->n_tokens;
    size_t payload = (size_t)kv->n_layer * sizeof(struct kv_layer_header) +
                     (size_t)n_history * sizeof(int32_t);
    for (int il = 0; il < kv->n_layer; il++)
        payload += 2 * layer_rows(kv, il, n) * kv->row_bytes;
    uint8_t *buf = malloc(sizeof(struct kv_header) + payload);
    if (!buf)
        return NULL;
    struct kv_header h = {KV_MAGIC, KV_VERSION, (uint32_t)kv->n_layer,
                          (uint32_t)kv->n_ctx, (uint32_t)kv->kv_dim,
                          (uint32_t)kv->head_dim, (uint32_t)kv->type,
                          (uint32_t)n, (uint32_t)n_history, {0}, payload, 0};
    strncpy(h.fingerprint, fingerprint ? fingerprint : "", FP_LEN - 1);
    uint8_t *p = buf + sizeof h;
    for (int il = 0; il < kv->n_layer; il++) {
        const struct kv_layer *L = &kv->layers[il];
        struct kv_layer_header lh = {(uint32_t)L->policy, (uint32_t)L->capacity,
                                     (uint32_t)L->window, (uint32_t)L->n_sink};
        memcpy(p, &lh, sizeof lh);
        p += sizeof lh;
    }
    memcpy(p, tokens, (size_t)n_history * sizeof(int32_t));
    p += (size_t)n_history * sizeof(int32_t);
    for (int il = 0; il < kv->n_layer; il++) {
        int sink_end, lo;
        kept_range(kv, il, n, &sink_end, &lo);
        for (int pass = 0; pass < 2; pass++) {
            for (int q = 0; q < n; q++) {
                if (q >= sink_end && q < lo)
                    continue;
                const uint8_t *row = pass ? kv_value_row(kv, il, q)
                                          : kv_key_row(kv, il, q);
                memcpy(p, row, kv->row_bytes);
                p += kv->row_bytes;
            }
        }
    }
    h.checksum = fnv1a(buf + sizeof h, payload);
    memcpy(buf, &h, sizeof h);
    *size = sizeof h + payload;
    return buf;
}

static int check_header(const struct kv_cache *kv, const struct kv_header *h,
                        size_t size, const char *fingerprint,
                        struct kk_error *err)
{
    if (h->magic != KV_MAGIC || h->version != KV_VERSION)
        return kk_fail(err, "the saved context is not a kakeya KV checkpoint "
                            "of this version");
    if (size - sizeof *h != h->payload_bytes)
        return kk_fail(err, "the saved context is truncated (%zu of %llu "
                            "bytes)", size - sizeof *h,
                       (unsigned long long)h->payload_bytes);
    if (strncmp(h->fingerprint, fingerprint ? fingerprint : "", FP_LEN - 1))
        return kk_fail(err, "the saved context belongs to other model files; "
                            "it will be recomputed");
    if (h->n_layer != (uint32_t)kv->n_layer || h->kv_dim != (uint32_t)kv->kv_dim ||
        h->head_dim != (uint32_t)kv->head_dim || h->type != (uint32_t)kv->type ||
        h->n_ctx != (uint32_t)kv->n_ctx)
        return kk_fail(err, "the saved context was made with another cache "
                            "configuration (type %s, context %u); it will be "
                            "recomputed",
                       h->type <= KV_Q8_0 ? kv_type_name((enum kv_type)h->type)
                                          : "?", h->n_ctx);
    if (h->n_history > (uint32_t)kv->n_ctx || h->n_tokens > h->n_history)
        return kk_fail(err, "the saved context holds more tokens than fit");
    return 0;
}

int kv_restore(struct kv_cache *kv, const void *blob, size_t size,
               const char *fingerprint, int32_t *tokens,
               struct kk_error *err)
{
    kv_clear(kv);
    struct kv_header h;
    if (size < sizeof h)
        return kk_fail(err, "the saved context is truncated");
    memcpy(&h, blob, sizeof h);
    if (check_header(kv, &h, size, fingerprint, err))
        return -1;
    const uint8_t *p = (const uint8_t *)blob + sizeof h;
    if (fnv1a(p, h.payload_bytes) != h.checksum)
        return kk_fail(err, "the saved context is damaged (checksum "
                            "mismatch); it will be recomputed");
    for (int il = 0; il < kv->n_layer; il++, p += sizeof(struct kv_layer_header)) {
        struct kv_layer_header lh;
        memcpy(&lh, p, sizeof lh);
        const struct kv_layer *L = &kv->layers[il];
        if (lh.policy != (uint32_t)L->policy || lh.capacity != (uint32_t)L->capacity ||
            lh.window != (uint32_t)L->window || lh.n_sink != (uint32_t)L->n_sink)
            return kk_fail(err, "the saved context used another policy for "
                                "layer %d; it will be recomputed", il);
    }
    const int n = (int)h.n_tokens, n_history = (int)h.n_history;
    size_t need = (size_t)kv->n_layer * sizeof(struct kv_layer_header) +
                  (size_t)n_history * sizeof(int32_t);
    for (int il = 0; il < kv->n_layer; il++)
        need += 2 * layer_rows(kv, il, n) * kv->row_bytes;
    if (need != h.payload_bytes)
        return kk_fail(err, "the saved context is inconsistent with its own "
                            "header");
    memcpy(tokens, p, (size_t)n_history * sizeof(int32_t));
    p += (size_t)n_history * sizeof(int32_t);
    for (int il = 0; il < kv->n_layer; il++) {
        struct kv_layer *L = &kv->layers[il];
        int sink_end, lo;
        kept_range(kv, il, n, &sink_end, &lo);
        for (int pass = 0; pass < 2; pass++) {
            for (int q = 0; q < n; q++) {
                if (q >= sink_end && q < lo)
                    continue;
                uint8_t *base = pass ? L->v : L->k;
                memcpy(base + (size_t)kv_slot(L, q) * kv->row_bytes, p,
                       kv->row_bytes);
                p += kv->row_bytes;
            }
        }
        kv->layers[il].high = n;
    }
    kv->n_tokens = n;
    return n_history;
}
