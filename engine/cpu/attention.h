/* attention.h — attention of a batch of queries over one layer of the KV
 * cache, on the CPU backend's thread pool (be_attention in backend.h).
 *
 * Keys are taken in chunks of ATTN_CHUNK positions, aligned to absolute
 * positions. For each query, head and chunk a partial result is computed —
 * the chunk's largest score m, l = sum of e^(s - m), o = sum of e^(s - m) v
 * — and the partials are folded in chunk order (flash-decoding). A decode
 * step, which has few queries, computes the chunks of each head in parallel
 * and folds them after; a batch with many queries computes a tile's chunks
 * one after another in one task. Chunk boundaries depend only on positions
 * and the arithmetic of a chunk and of the fold is the same either way, so
 * a query's result does not depend on how its batch was cut or scheduled:
 * batched and token-by-token evaluation agree to the bit, as do ring and
 * full caches.
 *
 * The caller owns the scratch (attention_scratch_floats per thread, and the
 * optional partials buffer); nothing is allocated per call. */
#ifndef KK_CPU_ATTENTION_H
#define KK_CPU_ATTENTION_H

#include <stddef.h>

struct kv_cache;
struct pool;

struct attention_scratch {
    float *per_thread;          /* n_threads blocks of thread_floats */
    size_t thread_floats;
    float *partials;            /* chunk partials of a parallel step */
    size_t partial_floats;      /* capacity; 0: always one task per tile */
};

/* Floats of per-thread scratch for heads of head_dim with `group` query
 * heads per key/value head. */
size_t attention_scratch_floats(int head_dim, int group);

/* Floats of partials a step of n queries of n_head heads over positions up
 * to n_ctx may use; attention_run falls back to one task per tile when the
 * buffer is smaller. */
size_t attention_partial_floats(int n, int n_head, int head_dim, int n_ctx);

struct attention_args {
    float *out;                 /* n rows of n_head * head_dim */
    const float *q;             /* same shape */
    const struct kv_cache *kv;
    int il, n, pos0;
    int n_head, n_head_kv, head_dim;
    int window;                 /* the layer's sliding window, 0: none */
    float scale;
};

void attention_run(struct pool *pool, const struct attention_scratch *sc,
                   const struct attention_args *a);

#endif
