/* matmul_avx2.c — the x86-64-v3 kernels (AVX2, FMA, F16C).
 *
 * Shape: for each weight row, tokens go in groups of up to GROUP; within a
 * group the row is walked block by block, each block is decoded once into
 * registers and dotted with every token of the group. The row is streamed
 * from memory by the first group and re-read from L1/L2 by later ones, so
 * DRAM traffic is one pass over the weights whatever n_tokens is.
 *
 * Every token's arithmetic is the same sequence of operations whatever the
 * group size, so a token's result does not depend on the batch it came in.
 *
 * 8-bit dot products use the sign trick: |w| (unsigned) times a carrying
 * w's sign, through maddubs (u8 x i8 -> i16 pairs, no saturation because
 * |w| <= 128 and |a| <= 127) and madd (-> i32). */
#include <immintrin.h>
#include <string.h>

#include "matmul_kernels.h"

#define GROUP 4
#define INLINE static inline __attribute__((always_inline))

INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
                          _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

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

/* ---- Q4_0, Q5_0, Q8_0 against Q8_0 activations ---- */

/* The 32 signed quants of one block, in element order. */
INLINE __m256i q8f_decode(uint32_t type, const uint8_t *b)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    if (type == KK_Q8_0)
        return load256(b + 2);
    const uint8_t *qs = b + (type == KK_Q5_0 ? 6 : 2);
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i nib = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
    if (type == KK_Q4_0)
        return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
    /* Q5_0: bit j of qh is the fifth bit of element j. Spread the 32 bits
     * over 32 bytes: byte j gets qh byte j/8, then tests bit j%8. */
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const __m256i pick = _mm256_set_epi64x(
        0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), pick);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    nib = _mm256_or_si256(nib, _mm256_and_si256(v, _mm256_set1_epi8(0x10)));
    return _mm256_sub_epi8(nib, _mm256_set1_epi8(16));
}

INLINE void q8f_row_group(uint32_t type, const uint8_t *row, int64_t nb,
                          const struct matmul_input *in, int t0, int nt,
                          float *y, int64_t ldy, int64_t r)
{
    const size_t bb = type == KK_Q8_0 ? 34 : type == KK_Q5_0 ? 22 : 18;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *a[GROUP];
    const float *d8[GROUP];
    __m256 acc[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        a[t] = act_quants(in, t0 + t);
        d8[t] = q8_scales(in, t0 + t);
        acc[t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bb;
        _mm_prefetch((const char *)blk + 640, _MM_HINT_T0);
        __m256i w = q8f_decode(type, blk);
        __m256i aw = _mm256_sign_epi8(w, w);
        __m256 dw = _mm256_set1_ps(fp16_at(blk));
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            __m256i s = _mm256_sign_epi8(load256(a[t] + 32 * b), w);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, s), ones);
            __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(d8[t] + 8 * b));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        y[(int64_t)(t0 + t) * ldy + r] = hsum8(acc[t]);
}

/* ---- Q4_K against Q8_K ---- */

INLINE void q4k_row_group(const uint8_t *row, int64_t nsb,
                          const struct matmul_input *in, int t0, int nt,
                          float *y, int64_t ldy, int64_t r)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = row + (size_t)sb * 144;
        _mm_prefetch((const char *)blk + 576, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 640, _MM_HINT_T0);
        uint64_t sc64, m64;
        q4k_scales_mins(blk + 4, &sc64, &m64);
        __m128i sc8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc64));
        __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m64));
        /* m16[k] = m[k/2]: one min per pair of 16-quant bsums. */
        __m256i m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8),
                                       _mm_unpacklo_epi16(m8, m8));
        __m256i scd = _mm256_broadcastsi128_si256(sc8);
        __m256i isum[GROUP];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i q = load256(blk + 16 + 32 * c);
            __m256i lo = _mm256_and_si256(q, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            /* broadcast 16-bit lane 2c (and 2c+1) of the scales */
            __m256i slo = _mm256_shuffle_epi8(
                scd, _mm256_set1_epi16((short)(0x0100 + 0x0202 * 2 * c)));
            __m256i shi = _mm256_shuffle_epi8(
                scd, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1))));
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const int8_t *a = act_quants(in, t0 + t) + 256 * sb + 64 * c;
                __m256i p0 = _mm256_maddubs_epi16(lo, load256(a));
                __m256i p1 = _mm256_maddubs_epi16(hi, load256(a + 32));
                p0 = _mm256_madd_epi16(p0, slo);
                p1 = _mm256_madd_epi16(p1, shi);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
            }
        }
        float d = fp16_at(blk), dmin = fp16_at(blk + 2);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            float da = q8k_scales(in, t0 + t)[sb];
            __m256i bs = load256(q8k_bsums(in, t0 + t) + 16 * sb);
            __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, m16));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                                     _mm256_set1_ps(d * da), acc[t]);
            acc[t] = _mm256_fnmadd_ps(mins, _mm256_set1_ps(dmin * da), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        y[(int64_t)(t0 + t) * ldy + r] = hsum8(acc[t]);
}

/* ---- Q6_K against Q8_K ---- */

/* Unsigned 6-bit quants 32*k .. 32*k+31 of a Q6_K block (k = 0..7). */
INLINE __m256i q6k_decode(const uint8_t *blk, int k)
{
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    int h = k / 4, kk = k % 4;
    __m256i ql = load256(blk + 64 * h + 32 * (kk & 1));
    __m256i qh = load256(blk + 128 + 32 * h);
    __m256i lo = kk >> 1 ? _mm256_srli_epi16(ql, 4) : ql;
    lo = _mm256_and_si256(lo, low4);
    /* bits 2kk, 2kk+1 of qh move to bits 4, 5 */
    __m256i hb;
    switch (kk) {
    case 0: hb = _mm256_slli_epi16(qh, 4); break;
    case 1: hb = _mm256_slli_epi16(qh, 2); break;
    case 2: hb = qh; break;
    default: hb = _mm256_srli_epi16(qh, 2); break;
    }
    hb = _mm256_and_si256(hb, _mm256_set1_epi8(0x30));
    return _mm256_or_si256(lo, hb);
}

INLINE void q6k_row_group(const uint8_t *row, int64_t nsb,
                          const struct matmul_input *in, int t0, int nt,
                          float *y, int64_t ldy, int64_t r)
{
    __m256 acc[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = row + (size_t)sb * 210;
        _mm_prefetch((const char *)blk + 630, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 694, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + 758, _MM_HINT_T0);
        const int8_t *sc = (const int8_t *)(blk + 192);
        __m256i sc16 = _mm256_cvtepi8_epi16(
            _mm_loadu_si128((const __m128i *)sc));
        __m256i isum[GROUP];
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++)
            isum[t] = _mm256_setzero_si256();
        for (int k = 0; k < 8; k++) {
            __m256i q = q6k_decode(blk, k);
            __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]),
                                         _mm_set1_epi16(sc[2 * k]));
#pragma GCC unroll 8
            for (int t = 0; t < nt; t++) {
                const int8_t *a = act_quants(in, t0 + t) + 256 * sb + 32 * k;
                __m256i p = _mm256_maddubs_epi16(q, load256(a));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, s));
            }
        }
        float d = fp16_at(blk + 208);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            /* The quants were taken unsigned: remove 32 * sc * bsum. */
            __m256i bs = load256(q8k_bsums(in, t0 + t) + 16 * sb);
            __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            __m256i v = _mm256_sub_epi32(isum[t], corr);
            float da = q8k_scales(in, t0 + t)[sb];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v),
                                     _mm256_set1_ps(d * da), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        y[(int64_t)(t0 + t) * ldy + r] = hsum8(acc[t]);
}

/* ---- F32, F16, BF16 against f32 activations ---- */

INLINE __m256 float_decode(uint32_t type, const uint8_t *row, int64_t i)
{
    if (type == KK_F32)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * i));
    if (type == KK_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
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
    __m256 acc0[GROUP], acc1[GROUP];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        x[t] = act_token(in, t0 + t);
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)row + elem * i + 768, _MM_HINT_T0);
        __m256 w0 = float_decode(type, row, i);
        __m256 w1 = float_decode(type, row, i + 8);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8),
                                      acc1[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        float s = hsum8(_mm256_add_ps(acc0[t], acc1[t]));
        for (int64_t j = i; j < n; j++)
            s += float_at(type, row, j) * x[t][j];
        y[(int64_t)(t0 + t) * ldy + r] = s;
    }
}

/* ---- dispatch: a group-size constant per call, so the token loops
 * unroll and the accumulators live in registers ---- */

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
            case 1: row_group(type, row, in->n_cols, in, t, 1, y, ldy, r);   \
                break;                                                       \
            case 2: row_group(type, row, in->n_cols, in, t, 2, y, ldy, r);   \
                break;                                                       \
            case 3: row_group(type, row, in->n_cols, in, t, 3, y, ldy, r);   \
                break;                                                       \
            default: break;                                                  \
            }                                                                \
        }                                                                    \
    }

DEFINE_ROWS(rows_q4_0, KK_Q4_0)
DEFINE_ROWS(rows_q5_0, KK_Q5_0)
DEFINE_ROWS(rows_q8_0, KK_Q8_0)
DEFINE_ROWS(rows_q4_k, KK_Q4_K)
DEFINE_ROWS(rows_q6_k, KK_Q6_K)
DEFINE_ROWS(rows_f32, KK_F32)
DEFINE_ROWS(rows_f16, KK_F16)
DEFINE_ROWS(rows_bf16, KK_BF16)

void matmul_rows_avx2(uint32_t weight_type, const void *w,
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
