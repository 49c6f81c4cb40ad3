/* matmul_kernels.h — inside matmul: the prepared-activation layout and the
 * kernel entry points shared by matmul.c, matmul_avx2.c and matmul_avx512.c
 * (and the tests, which compare every kernel with the reference).
 *
 * Prepared activations, one vector per token, in_row_bytes apart (a multiple
 * of 64). The layout is planar so SIMD loads are contiguous:
 *
 *   F32/F16/BF16 weights  float x[n_cols], rounded to the weight's precision
 *                         for F16/BF16 (llama.cpp converts activations to the
 *                         weight type before its dot product)
 *   Q8_0 family           int8 q[n_cols], then at q8_scales(): float
 *   (Q4_0, Q5_0, Q8_0)    d[n_cols/32][8], each block's scale repeated 8
 *                         times so a SIMD load is already a broadcast.
 *                         Quantised as llama.cpp's x86 path does: d =
 *                         fp16(amax/127), q = round-half-even(x * 127/amax)
 *                         then at q8_tiles(): the same quants again,
 *                         regrouped for the AVX-512 Q4_0/Q8_0 kernels
 *                         (struct q8_tile below)
 *   Q8_K family           int8 q[n_cols], then float d[n_cols/256], then
 *   (Q4_K, Q6_K)          int16 bsums[n_cols/256][16] (sums of 16 quants)
 */
#ifndef KK_CPU_MATMUL_KERNELS_H
#define KK_CPU_MATMUL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "matmul.h"

enum act_family { ACT_FLOAT, ACT_Q8_0, ACT_Q8_K };

static inline enum act_family act_family_of(uint32_t weight_type)
{
    switch (weight_type) {
    case KK_Q4_0: case KK_Q5_0: case KK_Q8_0: return ACT_Q8_0;
    case KK_Q4_K: case KK_Q6_K: return ACT_Q8_K;
    default: return ACT_FLOAT;
    }
}

static inline size_t round_up64(size_t n)
{
    return (n + 63) / 64 * 64;
}

static inline const void *act_token(const struct matmul_input *in, int t)
{
    return (const char *)in->data + (size_t)t * in->row_bytes;
}

static inline const int8_t *act_quants(const struct matmul_input *in, int t)
{
    return act_token(in, t);
}

/* Q8_0 family: 8 copies of each block's scale. */
static inline const float *q8_scales(const struct matmul_input *in, int t)
{
    return (const float *)((const char *)act_token(in, t) +
                           round_up64((size_t)in->n_cols));
}

/* Q8_0 family, tiled: 16 blocks of 32 per tile (the last tile padded with
 * zero blocks). Lane L (0..15) of every 64-byte vector belongs to block
 * q8_tile_block(L) of the tile, so one int32 accumulator lane collects a
 * whole block's dot product across the tile's 8 vectors and the float
 * scaling happens once per 16 blocks instead of once per block. Vector v
 * holds, in lane L, quants 16*(v/4) + 4*(v%4) .. +3 of that lane's block:
 * the order in which a 4x4 dword transpose within 128-bit lanes leaves
 * weight blocks loaded 16 bytes at a time (see matmul_avx512.c).
 * corr is the correction for weights taken unsigned: -128 * (sum of the
 * block's quants) for Q8_0 (w + 128), -8 * sum for Q4_0 (nibble = w + 8),
 * 0 for other types. */
enum { Q8_TILE_BLOCKS = 16 };

struct q8_tile {
    int8_t q[8][64];
    float d[16];
    int32_t corr[16];
};

static inline int q8_tile_block(int lane)
{
    return 4 * (lane % 4) + lane / 4;
}

static inline int64_t q8_tile_count(int64_t n_cols)
{
    return (n_cols / 32 + Q8_TILE_BLOCKS - 1) / Q8_TILE_BLOCKS;
}

static inline const struct q8_tile *q8_tiles(const struct matmul_input *in,
                                             int t)
{
    return (const struct q8_tile *)((const char *)act_token(in, t) +
                                    round_up64((size_t)in->n_cols) +
                                    round_up64((size_t)in->n_cols / 32 * 8 *
                                               sizeof(float)));
}

/* Q8_K family: one scale per 256 block, then 16 bsums per block. */
static inline const float *q8k_scales(const struct matmul_input *in, int t)
{
    return (const float *)((const char *)act_token(in, t) +
                           round_up64((size_t)in->n_cols));
}

static inline const int16_t *q8k_bsums(const struct matmul_input *in, int t)
{
    size_t nsb = (size_t)in->n_cols / 256;
    return (const int16_t *)((const char *)q8k_scales(in, t) +
                             round_up64(nsb * sizeof(float)));
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K block's 12 scale
 * bytes: pairs 0..3 sit in the low 6 bits of bytes 0..7; pairs 4..7 take
 * their low 4 bits from bytes 8..11 and their top 2 bits from the spare top
 * bits of bytes 0..7. */
static inline void q4k_scale_min(const uint8_t *s, int j, uint8_t *sc,
                                 uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
        *m = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

/* All eight 6-bit scales (sc) and mins (m) of a Q4_K block at once, one
 * per byte, with 32-bit word operations instead of eight calls above. */
static inline void q4k_scales_mins(const uint8_t *s, uint64_t *sc, uint64_t *m)
{
    uint32_t u0, u1, u2;
    __builtin_memcpy(&u0, s, 4);
    __builtin_memcpy(&u1, s + 4, 4);
    __builtin_memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    /* (byte >> 6) << 4 is (byte >> 2) & 0x30 */
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *m = m_lo | (uint64_t)m_hi << 32;
}

/* Kernel families. Each has the signature of matmul_rows(). */
void matmul_rows_avx2(uint32_t weight_type, const void *w,
                      const struct matmul_input *in, float *y, int64_t ldy,
                      int64_t row_begin, int64_t row_end);
void matmul_rows_avx512(uint32_t weight_type, const void *w,
                        const struct matmul_input *in, float *y, int64_t ldy,
                        int64_t row_begin, int64_t row_end);

/* Whether this CPU runs matmul_rows_avx512 (AVX-512 F/BW/VL/DQ + VNNI). */
bool matmul_has_avx512(void);

#endif
