/* attention_avx512.c — see attention_avx512.h. Compiled with AVX-512.
 *
 * Why the results are the AVX2 loops' own (attention.c):
 *   scores   the AVX2 loop keeps, per key, 8 lane sums over the head (lane
 *            j adds dims j, j+8, ... in order), then folds them with hadds.
 *            Here a 16-lane vector holds two keys' 8 lane sums side by side
 *            (the query repeated in both halves), so every lane sees the
 *            same products in the same order; the halves then go through
 *            the same hadd fold.
 *   values   each output dim is a sum over keys in key order; 16 dims per
 *            vector instead of 8 changes no dim's sum. */
#include "attention_avx512.h"

#include <immintrin.h>
#include <stddef.h>

#define INLINE static inline __attribute__((always_inline))

/* Key rows kb and kb + d, dims i..i+7 of each, side by side. */
INLINE __m512 key_pair(const float *kb, int d, int i)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(kb + i)),
                              _mm256_loadu_ps(kb + d + i), 1);
}

/* The AVX2 fold of 8 keys' lane sums; pair p holds keys 2p and 2p+1. */
INLINE __m256 fold8(const __m512 acc[4])
{
    __m256 a[8];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        a[2 * p] = _mm512_castps512_ps256(acc[p]);
        a[2 * p + 1] = _mm512_extractf32x8_ps(acc[p], 1);
    }
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]),
                               _mm256_hadd_ps(a[2], a[3]));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]),
                               _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

INLINE void dots_n(const float *const *q, const int n, const float *kbuf,
                   int d, int b0, int b1, float *const *dots)
{
    for (int k = b0; k < b1; k += 8) {
        const float *kb = kbuf + (size_t)k * d;
        __m512 acc[ATTN512_HEADS][4];
#pragma GCC unroll 4
        for (int h = 0; h < n; h++)
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                acc[h][p] = _mm512_setzero_ps();
        for (int i = 0; i < d; i += 8) {
            __m512 qv[ATTN512_HEADS];
#pragma GCC unroll 4
            for (int h = 0; h < n; h++)
                qv[h] = _mm512_broadcast_f32x8(_mm256_loadu_ps(q[h] + i));
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m512 kv = key_pair(kb + (size_t)(2 * p) * d, d, i);
#pragma GCC unroll 4
                for (int h = 0; h < n; h++)
                    acc[h][p] = _mm512_fmadd_ps(qv[h], kv, acc[h][p]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < n; h++)
            _mm256_storeu_ps(dots[h] + k, fold8(acc[h]));
    }
}

void attn512_dots(const float *const *q, int n, const float *kbuf, int d,
                  int b0, int b1, float *const *dots)
{
    switch (n) {
    case 1: dots_n(q, 1, kbuf, d, b0, b1, dots); break;
    case 2: dots_n(q, 2, kbuf, d, b0, b1, dots); break;
    case 3: dots_n(q, 3, kbuf, d, b0, b1, dots); break;
    default: dots_n(q, 4, kbuf, d, b0, b1, dots); break;
    }
}

/* Dims [i, i + 16 * m) of every head, keys k0..k1-1. */
INLINE void sums_n(float *const *o, const float *const *w, const int n,
                   const float *vb, int k0, int k1, int d, int i, const int m)
{
    __m512 a[ATTN512_HEADS][4];
#pragma GCC unroll 4
    for (int h = 0; h < n; h++)
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            a[h][j] = _mm512_loadu_ps(o[h] + i + 16 * j);
    for (int k = k0; k < k1; k++) {
        const float *v = vb + (size_t)k * d + i;
        __m512 vv[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            vv[j] = _mm512_loadu_ps(v + 16 * j);
#pragma GCC unroll 4
        for (int h = 0; h < n; h++) {
            __m512 wk = _mm512_set1_ps(w[h][k]);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++)
                a[h][j] = _mm512_fmadd_ps(wk, vv[j], a[h][j]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < n; h++)
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            _mm512_storeu_ps(o[h] + i + 16 * j, a[h][j]);
}

INLINE void sums_heads(float *const *o, const float *const *w, const int n,
                       const float *vb, int k0, int k1, int d)
{
    int i = 0;
    for (; i + 64 <= d; i += 64)
        sums_n(o, w, n, vb, k0, k1, d, i, 4);
    for (; i < d; i += 16)
        sums_n(o, w, n, vb, k0, k1, d, i, 1);
}

void attn512_weighted_sums(float *const *o, const float *const *w, int n,
                           const float *vb, int k0, int k1, int d)
{
    if (k1 <= k0)
        return;
    switch (n) {
    case 1: sums_heads(o, w, 1, vb, k0, k1, d); break;
    case 2: sums_heads(o, w, 2, vb, k0, k1, d); break;
    case 3: sums_heads(o, w, 3, vb, k0, k1, d); break;
    default: sums_heads(o, w, 4, vb, k0, k1, d); break;
    }
}
