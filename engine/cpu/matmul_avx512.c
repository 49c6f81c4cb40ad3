/* matmul_avx512.c — AVX-512 (F/BW/VL/DQ) + VNNI kernels. Compiled with
 * those extensions; matmul.c calls in only after matmul_has_avx512().
 *
 * Same shape as matmul_avx2.c (row by row, tokens in groups, each weight
 * block decoded once per group), on 64-byte vectors:
 *   Q8_0 family  two 32-blocks per vector; vpdpbusd on |w| and a carrying
 *                w's sign (AVX-512 has no vpsignb: a masked negate instead)
 *   Q4_K, Q6_K   vpmaddubsw for u8 x i8 pairs, then vpdpwssd folds in the
 *                sub-block scale and accumulates in one instruction
 * Every token's arithmetic is the same sequence whatever the group size. */
#include <immintrin.h>
#include <string.h>

#include "matmul_kernels.h"

#define GROUP 8
#define Q8T_GROUP 16
#define INLINE static inline __attribute__((always_inline))

INLINE float fp16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INLINE __m256i load256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

INLINE __m512i load512(const void *p)
{
    return _mm512_loadu_si512(p);
}

INLINE __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* ---- Q4_0, Q5_0, Q8_0 against Q8_0 activations ---- */

/* Signed quants of the 32-block at b, unsigned nibbles first (no offset),
 * in a 256-bit vector; Q8_0 needs no work. */
INLINE __m256i q8f_nibbles256(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                            _mm256_set1_epi8(0x0f));
}

INLINE uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

INLINE __m256i q8f_decode256(uint32_t type, const uint8_t *b)
{
    if (type == KK_Q8_0)
        return load256(b + 2);
    if (type == KK_Q4_0)
        return _mm256_sub_epi8(q8f_nibbles256(b + 2), _mm256_set1_epi8(8));
    __m256i v = _mm256_mask_add_epi8(q8f_nibbles256(b + 6), load_u32(b + 2),
                                     q8f_nibbles256(b + 6),
                                     _mm256_set1_epi8(0x10));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(16));
}

/* The 64 signed quants of blocks b0 and b1 = b0 + bb, in element order. */
INLINE __m512i q8f_decode512(uint32_t type, const uint8_t *b0, size_t bb)
{
    const uint8_t *b1 = b0 + bb;
    if (type == KK_Q8_0)
        return join256(load256(b0 + 2), load256(b1 + 2));
    size_t off = type == KK_Q5_0 ? 6 : 2;
    __m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(b1 + off)),
                                 _mm_loadu_si128((const __m128i *)(b0 + off)));
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m512i z = join256(_mm256_and_si256(q, low4),
                        _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
    /* lanes are [b0 lo, b1 lo, b0 hi, b1 hi]; put them in element order */
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    if (type == KK_Q4_0)
        return _mm512_sub_epi8(z, _mm512_set1_epi8(8));
    __mmask64 hb = (__mmask64)load_u32(b0 + 2) |
                   (__mmask64)load_u32(b1 + 2) << 32;
    z = _mm512_mask_add_epi8(z, hb, z, _mm512_set1_epi8(0x10));
    return _mm512_sub_epi8(z, _mm512_set1_epi8(16));
}

INLINE float hsum16(__m512 v)
{
    return _mm512_reduce_add_ps(v);
}

/* hsum16 of a[0..7] at once, element k of the result being hsum16(a[k])
 * to the bit: the same pairings (lane j with j+8, then j+4, then j+2, then
 * j+1) as _mm512_reduce_add_ps, with one instruction serving 2-8 sums. */
INLINE __m256 hsum16x8(const __m512 a[8])
{
    __m512 t[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) /* lanes j and j+8 */
        t[k] = _mm512_add_ps(
            _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
            _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 u[2];
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) /* j and j+4: quarter q holds a[4k + q] */
        u[k] = _mm512_add_ps(
            _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
            _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* j and j+2: quarter q holds a[q] in elements 0-1, a[q + 4] in 2-3 */
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* j and j+1 */
    z = _mm512_add_ps(z, _mm512_permute_ps(z, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0,
                                            0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, z));
}

INLINE void q8f_row_group(uint32_t type, const uint8_t *row, int64_t nb,
                          const struct matmul_input *in, int t0, int nt,
                          float *y, int64_t ldy, int64_t r)
{
    const size_t bb = type == KK_Q8_0 ? 34 : type == KK_Q5_0 ? 22 : 18;
    const int8_t *a[GROUP];
    const float *d8[GROUP];
    __m512 acc[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        a[t] = act_quants(in, t0 + t);
        d8[t] = q8_scales(in, t0 + t);
        acc[t] = _mm512_setzero_ps();
    }
    /* lanes 0-7 take block b's scale, lanes 8-15 block b+1's */
    const __m512i dw_index = join256(_mm256_setzero_si256(),
                                     _mm256_set1_epi32(1));
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *blk = row + (size_t)b * bb;
        _mm_prefetch((const char *)blk + 768, _MM_HINT_T0);
        __m512i w = q8f_decode512(type, blk, bb);
        __m512i aw = _mm512_abs_epi8(w);
        __mmask64 neg = _mm512_movepi8_mask(w);
        uint16_t h0, h1;
        memcpy(&h0, blk, 2);
        memcpy(&h1, blk + bb, 2);
        __m512 dw = _mm512_permutexvar_ps(
            dw_index, _mm512_castps128_ps512(_mm_cvtph_ps(
                          _mm_cvtsi32_si128((int)(h0 | (uint32_t)h1 << 16)))));
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            __m512i x = load512(a[t] + 32 * b);
            x = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, x);
            __m512 scale = _mm512_mul_ps(dw, _mm512_loadu_ps(d8[t] + 8 * b));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[t]);
        }
    }
    if (b < nb) { /* an odd last block, on 256-bit vectors */
        const uint8_t *blk = row + (size_t)b * bb;
        __m256i w = q8f_decode256(type, blk);
        __m256i aw = _mm256_sign_epi8(w, w);
        __m256 dw = _mm256_set1_ps(fp16_at(blk));
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            __m256i x = _mm256_sign_epi8(load256(a[t] + 32 * b), w);
            __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, x);
            __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(d8[t] + 8 * b));
            __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(p), scale);
            acc[t] = _mm512_add_ps(acc[t], _mm512_insertf32x8(
                                               _mm512_setzero_ps(), v, 0));
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        y[(int64_t)(t0 + t) * ldy + r] = hsum16(acc[t]);
}

/* ---- Q4_0 and Q8_0 on the tiled activations (struct q8_tile) ----
 *
 * A tile of 16 weight blocks is regrouped once per row and token group into
 * 8 vectors whose lane L holds 4 quants of block q8_tile_block(L): 16-byte
 * pieces of four blocks fill a vector's four 128-bit lanes, then a 4x4
 * dword transpose within the lanes across four such vectors puts a
 * different block in each dword lane. Quants are taken unsigned (Q8_0 xor
 * 0x80 = w + 128, Q4_0 nibbles = w + 8) for vpdpbusd, and each token's
 * accumulator starts at the tile's correction (-offset * block sum), so
 * one token costs 8 vpdpbusd and 3 float operations per 16 blocks. */

INLINE void transpose4x4_epi32(__m512i v[4], __m512i out[4])
{
    __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]);
    __m512i t1 = _mm512_unpackhi_epi32(v[0], v[1]);
    __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]);
    __m512i t3 = _mm512_unpackhi_epi32(v[2], v[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* 16 bytes at p0..p3 in the four 128-bit lanes. */
INLINE __m512i load4x128(const uint8_t *p0, const uint8_t *p1,
                         const uint8_t *p2, const uint8_t *p3)
{
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p1), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p3), 3);
}

/* Regroups weight tile g of a row (blocks 16g.., clamped to the last block
 * nb-1 in a partial tile, whose padding lanes meet zero activations) into
 * w[8] and the blocks' scales into *dw, lane-matched to struct q8_tile. */
INLINE void q8t_weights(uint32_t type, const uint8_t *row, int64_t nb,
                        int64_t g, __m512i w[8], __m512 *dw)
{
    const size_t bb = type == KK_Q8_0 ? 34 : 18;
    const int64_t b0 = g * Q8_TILE_BLOCKS;
    const uint8_t *base = row + (size_t)b0 * bb;
    const uint8_t *p[16];
    __m512i lanes = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1,
                                     12, 8, 4, 0);
    if (b0 + Q8_TILE_BLOCKS <= nb) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            p[j] = base + (size_t)j * bb + 2;
    } else {
        int64_t last = nb - 1 - b0;
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            p[j] = base + (size_t)(j < last ? j : last) * bb + 2;
        lanes = _mm512_min_epi32(lanes, _mm512_set1_epi32((int)last));
    }
    __m512i v[4];
    if (type == KK_Q8_0) {
        const __m512i bias = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                v[k] = load4x128(p[4 * k] + 16 * c, p[4 * k + 1] + 16 * c,
                                 p[4 * k + 2] + 16 * c, p[4 * k + 3] + 16 * c);
            transpose4x4_epi32(v, w + 4 * c);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                w[4 * c + k] = _mm512_xor_si512(w[4 * c + k], bias);
        }
    } else {
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        __m512i hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m512i q = load4x128(p[4 * k], p[4 * k + 1], p[4 * k + 2],
                                  p[4 * k + 3]);
            v[k] = _mm512_and_si512(q, low4);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        }
        transpose4x4_epi32(v, w);
        transpose4x4_epi32(hi, w + 4);
    }
    __m512i idx = _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int)bb));
    __m512i h = _mm512_i32gather_epi32(idx, (const void *)base, 1);
    *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
}

/* Tiles [g0, g1) of row `row` for tokens t0 .. t0+nt-1, accumulating into
 * acc[t] (kept in memory between calls, so a row can be done in pieces;
 * the first piece starts from zero instead). */
INLINE void q8t_row_tiles(uint32_t type, const uint8_t *row, int64_t nb,
                          const struct matmul_input *in, int t0, int nt,
                          int64_t g0, int64_t g1, __m512 *acc_mem)
{
    const struct q8_tile *tiles[Q8T_GROUP];
    __m512 acc[Q8T_GROUP];
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        tiles[t] = q8_tiles(in, t0 + t);
        acc[t] = g0 == 0 ? _mm512_setzero_ps() : acc_mem[t];
    }
    const size_t bb = type == KK_Q8_0 ? 34 : 18;
    for (int64_t g = g0; g < g1; g++) {
        const char *next = (const char *)row + (size_t)(g + 2) * 16 * bb;
#pragma GCC unroll 9
        for (size_t off = 0; off < 16 * bb; off += 64)
            _mm_prefetch(next + off, _MM_HINT_T0);
        __m512i w[8];
        __m512 dw;
        q8t_weights(type, row, nb, g, w, &dw);
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            const struct q8_tile *a = &tiles[t][g];
            __m512i s = _mm512_loadu_si512(a->corr);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                s = _mm512_dpbusd_epi32(s, w[k], load512(a->q[k]));
            __m512 scale = _mm512_mul_ps(dw, _mm512_loadu_ps(a->d));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++)
        acc_mem[t] = acc[t];
}

/* Rows go in blocks of Q8T_ROWS and the row in chunks of tiles small enough
 * that a chunk of the token group's activations stays in L1 while every
 * row of the block passes over it: otherwise a large batch re-reads its
 * activations from L2 for every row. How a row is cut into chunks does not
 * change any token's arithmetic (the accumulators are stored exactly). */
enum { Q8T_ROWS = 8, Q8T_L1_BYTES = 24 * 1024 };

INLINE void q8t_rows_group(uint32_t type, const uint8_t *w, size_t rb,
                           int64_t nb, const struct matmul_input *in, int t0,
                           int nt, float *y, int64_t ldy, int64_t r0,
                           int64_t r1)
{
    __m512 acc[Q8T_ROWS][Q8T_GROUP];
    const int64_t ng = (nb + Q8_TILE_BLOCKS - 1) / Q8_TILE_BLOCKS;
    int64_t chunk = Q8T_L1_BYTES / ((int64_t)nt * (int64_t)sizeof(struct q8_tile));
    chunk = chunk < 1 ? 1 : chunk;
    for (int64_t rr = r0; rr < r1; rr += Q8T_ROWS) {
        int nr = r1 - rr < Q8T_ROWS ? (int)(r1 - rr) : Q8T_ROWS;
        for (int64_t g = 0; g < ng; g += chunk) {
            int64_t g1 = g + chunk < ng ? g + chunk : ng;
            for (int i = 0; i < nr; i++)
                q8t_row_tiles(type, w + (size_t)(rr + i) * rb, nb, in, t0, nt,
                              g, g1, acc[i]);
        }
        const __mmask8 rows = (__mmask8)((1u << nr) - 1);
        for (int t = 0; t < nt; t++) {
            __m512 a[Q8T_ROWS];
            for (int i = 0; i < Q8T_ROWS; i++)
                a[i] = i < nr ? acc[i][t] : _mm512_setzero_ps();
            _mm256_mask_storeu_ps(y + (int64_t)(t0 + t) * ldy + rr, rows,
                                  hsum16x8(a));
        }
    }
}

#define Q8T_CASE(type, k)                                                    \
    case k: q8t_rows_group(type, w, rb, nb, in, t, k, y, ldy, r0, r1); break;

#define DEFINE_ROWS_Q8T(name, type)                                          \
    static void name(const uint8_t *w, size_t rb,                            \
                     const struct matmul_input *in, float *y, int64_t ldy,   \
                     int64_t r0, int64_t r1)                                 \
    {                                                                        \
        const int64_t nb = in->n_cols / 32;                                  \
        int t = 0;                                                           \
        for (; t + Q8T_GROUP <= in->n_tokens; t += Q8T_GROUP)                \
            q8t_rows_group(type, w, rb, nb, in, t, Q8T_GROUP, y, ldy, r0, r1); \
        switch (in->n_tokens - t) {                                          \
            Q8T_CASE(type, 1) Q8T_CASE(type, 2) Q8T_CASE(type, 3)            \
            Q8T_CASE(type, 4) Q8T_CASE(type, 5) Q8T_CASE(type, 6)            \
            Q8T_CASE(type, 7) Q8T_CASE(type, 8) Q8T_CASE(type, 9)            \
            Q8T_CASE(type, 10) Q8T_CASE(type, 11) Q8T_CASE(type, 12)         \
            Q8T_CASE(type, 13) Q8T_CASE(type, 14) Q8T_CASE(type, 15)         \
        default: break;                                                      \
        }                                                                    \
    }

DEFINE_ROWS_Q8T(rows_q4_0, KK_Q4_0)
DEFINE_ROWS_Q8T(rows_q8_0, KK_Q8_0)

/* ---- Q4_K against Q8_K ---- */

INLINE void q4k_row_group(const uint8_t *row, int64_t nsb,
                          const struct matmul_input *in, int t0, int nt,
                          float *y, int64_t ldy, int64_t r)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m512 acc[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = row + (size_t)sb * 144;
        _mm_prefetch((const char *)blk + 576, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 640, _MM_HINT_T0);
        uint64_t sc64, m64;
        q4k_scales_mins(blk + 4, &sc64, &m64);
        __m128i sc8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc64));
        __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m64));
        __m256i m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8),
                                       _mm_unpacklo_epi16(m8, m8));
        __m512i scz = _mm512_castsi128_si512(sc8);
        __m512i isum[GROUP];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i q = load256(blk + 16 + 32 * c);
            __m512i z = join256(_mm256_and_si256(q, low4),
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
            __m512i s = _mm512_permutexvar_epi16(
                join256(_mm256_set1_epi16((short)(2 * c)),
                        _mm256_set1_epi16((short)(2 * c + 1))), scz);
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const int8_t *a = act_quants(in, t0 + t) + 256 * sb + 64 * c;
                __m512i p = _mm512_maddubs_epi16(z, load512(a));
                isum[t] = _mm512_dpwssd_epi32(isum[t], p, s);
            }
        }
        float d = fp16_at(blk), dmin = fp16_at(blk + 2);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            float da = q8k_scales(in, t0 + t)[sb];
            __m256i bs = load256(q8k_bsums(in, t0 + t) + 16 * sb);
            __m512 mins = _mm512_cvtepi32_ps(
                _mm512_zextsi256_si512(_mm256_madd_epi16(bs, m16)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                                     _mm512_set1_ps(d * da), acc[t]);
            acc[t] = _mm512_fnmadd_ps(mins, _mm512_set1_ps(dmin * da), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        y[(int64_t)(t0 + t) * ldy + r] = hsum16(acc[t]);
}

/* ---- Q6_K against Q8_K ---- */

/* Unsigned 6-bit quants 64*j .. 64*j+63 of a Q6_K block (j = 0..3). */
INLINE __m512i q6k_decode(const uint8_t *blk, int j)
{
    int h = j / 2;
    __m512i ql = load512(blk + 64 * h);
    __m512i qh = _mm512_broadcast_i64x4(load256(blk + 128 + 32 * h));
    __m512i lo, hb;
    if (j % 2 == 0) { /* low nibbles; qh bits 0-1 and 2-3 */
        lo = ql;
        hb = _mm512_sllv_epi16(qh, join256(_mm256_set1_epi16(4),
                                           _mm256_set1_epi16(2)));
    } else {          /* high nibbles; qh bits 4-5 and 6-7 */
        lo = _mm512_srli_epi16(ql, 4);
        hb = _mm512_srlv_epi16(qh, join256(_mm256_set1_epi16(0),
                                           _mm256_set1_epi16(2)));
    }
    lo = _mm512_and_si512(lo, _mm512_set1_epi8(0x0f));
    hb = _mm512_and_si512(hb, _mm512_set1_epi8(0x30));
    return _mm512_or_si512(lo, hb);
}

INLINE void q6k_row_group(const uint8_t *row, int64_t nsb,
                          const struct matmul_input *in, int t0, int nt,
                          float *y, int64_t ldy, int64_t r)
{
    __m512 acc[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = row + (size_t)sb * 210;
        _mm_prefetch((const char *)blk + 630, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 694, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 758, _MM_HINT_T0);
        __m256i sc16 = _mm256_cvtepi8_epi16(
            _mm_loadu_si128((const __m128i *)(blk + 192)));
        __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i isum[GROUP];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            __m512i q = q6k_decode(blk, j);
            /* i16 lane l of the maddubs result belongs to sub-block
             * 4j + l/8: spread those four scales over 8 lanes each. */
            __m512i idx = _mm512_add_epi16(
                _mm512_set1_epi16((short)(4 * j)),
                _mm512_srli_epi16(_mm512_set_epi16(
                    31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
                    17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                    1, 0), 3));
            __m512i s = _mm512_permutexvar_epi16(idx, sc512);
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const int8_t *a = act_quants(in, t0 + t) + 256 * sb + 64 * j;
                __m512i p = _mm512_maddubs_epi16(q, load512(a));
                isum[t] = _mm512_dpwssd_epi32(isum[t], p, s);
            }
        }
        float d = fp16_at(blk + 208);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            /* The quants were taken unsigned: remove 32 * sc * bsum. */
            __m256i bs = load256(q8k_bsums(in, t0 + t) + 16 * sb);
            __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            __m512i v = _mm512_sub_epi32(isum[t], _mm512_zextsi256_si512(corr));
            float da = q8k_scales(in, t0 + t)[sb];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v),
                                     _mm512_set1_ps(d * da), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        y[(int64_t)(t0 + t) * ldy + r] = hsum16(acc[t]);
}

/* ---- F32, F16, BF16 against f32 activations ---- */

INLINE __m512 float_decode(uint32_t type, const uint8_t *row, int64_t i)
{
    if (type == KK_F32)
        return _mm512_loadu_ps((const float *)row + i);
    __m256i h = load256(row + 2 * i);
    if (type == KK_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE float float_at(uint32_t type, const uint8_t *row, int64_t i)
{
    if (type == KK_F32) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    if (type == KK_F16)
        return _cvtsh_ss(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

INLINE void float_row_group(uint32_t type, const uint8_t *row, int64_t n,
                            const struct matmul_input *in, int t0, int nt,
                            float *y, int64_t ldy, int64_t r)
{
    const int elem = type == KK_F32 ? 4 : 2;
    const float *x[GROUP];
    __m512 acc0[GROUP], acc1[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        x[t] = act_token(in, t0 + t);
        acc0[t] = acc1[t] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)row + elem * i + 1024, _MM_HINT_T0);
        __m512 w0 = float_decode(type, row, i);
        __m512 w1 = float_decode(type, row, i + 16);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16),
                                      acc1[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        float s = hsum16(_mm512_add_ps(acc0[t], acc1[t]));
        for (int64_t j = i; j < n; j++)
            s += float_at(type, row, j) * x[t][j];
        y[(int64_t)(t0 + t) * ldy + r] = s;
    }
}

/* ---- dispatch ---- */

INLINE void row_group(uint32_t type, const uint8_t *row, int64_t n,
                      const struct matmul_input *in, int t0, int nt,
                      float *y, int64_t ldy, int64_t r)
{
    switch (type) {
    case KK_Q4_0: case KK_Q5_0: case KK_Q8_0:
        q8f_row_group(type, row, n / 32, in, t0, nt, y, ldy, r);
        break;
    case KK_Q4_K: q4k_row_group(row, n / 256, in, t0, nt, y, ldy, r); break;
    case KK_Q6_K: q6k_row_group(row, n / 256, in, t0, nt, y, ldy, r); break;
    default: float_row_group(type, row, n, in, t0, nt, y, ldy, r); break;
    }
}

#define GROUP_CASE(type, k)                                                  \
    case k: row_group(type, row, in->n_cols, in, t, k, y, ldy, r); break;

#define DEFINE_ROWS(name, type)                                              \
    static void name(const uint8_t *w, size_t rb,                            \
                     const struct matmul_input *in, float *y, int64_t ldy,   \
                     int64_t r0, int64_t r1)                                 \
    {                                                                        \
        for (int64_t r = r0; r < r1; r++) {                                  \
            const uint8_t *row = w + (size_t)r * rb;                         \
            int t = 0;                                                       \
            for (; t + GROUP <= in->n_tokens; t += GROUP)                    \
                row_group(type, row, in->n_cols, in, t, GROUP, y, ldy, r);   \
            switch (in->n_tokens - t) {                                      \
                GROUP_CASE(type, 1) GROUP_CASE(type, 2) GROUP_CASE(type, 3)  \
                GROUP_CASE(type, 4) GROUP_CASE(type, 5) GROUP_CASE(type, 6)  \
                GROUP_CASE(type, 7)                                          \
            default: break;                                                  \
            }                                                                \
        }                                                                    \
    }

DEFINE_ROWS(rows_q5_0, KK_Q5_0)
DEFINE_ROWS(rows_q4_k, KK_Q4_K)
DEFINE_ROWS(rows_q6_k, KK_Q6_K)
DEFINE_ROWS(rows_f32, KK_F32)
DEFINE_ROWS(rows_f16, KK_F16)
DEFINE_ROWS(rows_bf16, KK_BF16)

void matmul_rows_avx512(uint32_t weight_type, const void *w,
                        const struct matmul_input *in, float *y, int64_t ldy,
                        int64_t row_begin, int64_t row_end)
{
    size_t rb = dtype_row_bytes(weight_type, (uint64_t)in->n_cols);
    switch (weight_type) {
    case KK_Q4_0: rows_q4_0(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_Q5_0: rows_q5_0(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_Q8_0: rows_q8_0(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_Q4_K: rows_q4_k(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_Q6_K: rows_q6_k(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_F32: rows_f32(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_F16: rows_f16(w, rb, in, y, ldy, row_begin, row_end); break;
    case KK_BF16: rows_bf16(w, rb, in, y, ldy, row_begin, row_end); break;
    default: break;
    }
}
