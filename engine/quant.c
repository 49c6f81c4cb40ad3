/* quant.c — see quant.h. Written from the ggml block layouts:
 *
 *   Q4_0  { f16 d; u8 qs[16]; }            x[j] = d * (nibble - 8); low
 *                                           nibbles are x[0..15], high x[16..31]
 *   Q5_0  { f16 d; u8 qh[4]; u8 qs[16]; }  as Q4_0 with a fifth bit from qh
 *                                           (bit j of the u32) and offset 16
 *   Q8_0  { f16 d; i8 qs[32]; }            x[j] = d * qs[j]
 *   Q4_K  { f16 d, dmin; u8 scales[12]; u8 qs[128]; }   8 sub-blocks of 32
 *         with 6-bit scale and min each: x = d*sc * q - dmin*m
 *   Q6_K  { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }   16 sub-blocks
 *         of 16: x = d*sc * (q6 - 32)
 *
 * The float expressions keep ggml's order of operations (e.g. (d*sc)*q), so
 * the results are bit-identical, not merely close. */
#include "quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- scalar conversions ---- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24 is exact in f32. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* inf, or NaN made quiet as F16C does */
        return bits_f32(sign | 0x7f800000u | mant << 13 |
                        (mant ? 0x400000u : 0));
    return bits_f32(sign | (exp + 112) << 23 | mant << 13);
}

/* Rounds m >> shift to nearest, ties to even (shift >= 1). */
static uint32_t shift_round_even(uint32_t m, unsigned shift)
{
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

uint16_t f32_to_fp16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep the top payload bits, make it quiet */
        return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff);
    if (a >= 0x477ff000u) /* rounds to 65536 or more, or is inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) { /* below 2^-14: half subnormal (or zero) */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffff) | (e ? 0x800000u : 0);
        unsigned shift = 126 - (e ? e : 1);   /* value in units of 2^-24 */
        if (shift > 24)
            return sign;
        return sign | (uint16_t)shift_round_even(m, shift);
    }
    /* Normal: rebias the exponent (127 -> 15); a mantissa carry rolls into
     * the exponent, which is what rounding up to the next binade means. */
    return sign | (uint16_t)shift_round_even(a - (112u << 23), 13);
}

float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* ---- dequantisation ---- */

static float load_fp16(const uint8_t *p)
{
    return fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void dequant_f16(const uint8_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    /* F16C is part of the x86-64-v3 baseline; same values as the scalar
     * path (both exact), just faster for prefill's dequantised tiles. */
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      (const __m128i *)(src + 2 * i))));
    for (; i < n; i++)
        dst[i] = load_fp16(src + 2 * i);
}

static void dequant_bf16(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
}

static void dequant_q4_0(const uint8_t *b, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32, b += 18, dst += 32) {
        float d = load_fp16(b);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b[2 + j] & 0xf) - 8) * d;
            dst[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q5_0(const uint8_t *b, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32, b += 22, dst += 32) {
        float d = load_fp16(b);
        uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 |
                      (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void dequant_q8_0(const uint8_t *b, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32, b += 34, dst += 32) {
        float d = load_fp16(b);
        for (int j = 0; j < 32; j++)
            dst[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K block: the first
 * four pairs sit in the low 6 bits of bytes 0..7; the last four take their
 * low 4 bits from bytes 8..11 and their top 2 bits from the spare top bits
 * of bytes 0..7. */
static void q4_k_scale_min(const uint8_t *scales, int j, uint8_t *sc,
                           uint8_t *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xf) | (scales[j - 4] >> 6) << 4);
        *m = (uint8_t)((scales[j + 4] >> 4) | (scales[j] >> 6) << 4);
    }
}

static void dequant_q4_k(const uint8_t *b, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 256, b += 144) {
        float d = load_fp16(b);
        float dmin = load_fp16(b + 2);
        const uint8_t *qs = b + 16;
        for (int c = 0; c < 4; c++, qs += 32) {
            uint8_t sc0, m0, sc1, m1;
            q4_k_scale_min(b + 4, 2 * c, &sc0, &m0);
            q4_k_scale_min(b + 4, 2 * c + 1, &sc1, &m1);
            float d0 = d * sc0, min0 = dmin * m0;
            float d1 = d * sc1, min1 = dmin * m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d0 * (qs[l] & 0xf) - min0;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (qs[l] >> 4) - min1;
        }
    }
}

static void dequant_q6_k(const uint8_t *b, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i += 256, b += 210) {
        float d = load_fp16(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
            const int8_t *s = sc + 8 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                dst[l] = d * s[is] * q1;
                dst[l + 32] = d * s[is + 2] * q2;
                dst[l + 64] = d * s[is + 4] * q3;
                dst[l + 96] = d * s[is + 6] * q4;
            }
            dst += 128;
        }
    }
}

void dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    const uint8_t *s = src;
    switch (type) {
    case KK_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case KK_F16: dequant_f16(s, dst, n); break;
    case KK_BF16: dequant_bf16(s, dst, n); break;
    case KK_Q4_0: dequant_q4_0(s, dst, n); break;
    case KK_Q5_0: dequant_q5_0(s, dst, n); break;
    case KK_Q8_0: dequant_q8_0(s, dst, n); break;
    case KK_Q4_K: dequant_q4_k(s, dst, n); break;
    case KK_Q6_K: dequant_q6_k(s, dst, n); break;
    default: break; /* callers check dtype_info()->is_supported first */
    }
}

/* ---- quantisation (weights, for the GGUF writer) ---- */

static void store_fp16(uint8_t *p, float f)
{
    uint16_t h = f32_to_fp16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Q8_0 as ggml's reference: d = amax/127, q = round-half-away(x / d). */
static void quant_q8_0(const float *x, uint8_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32, x += 32, b += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127;
        float id = d != 0 ? 1.0f / d : 0;
        store_fp16(b, d);
        for (int j = 0; j < 32; j++)
            b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* Q4_0 as ggml's reference: the value of largest magnitude maps to -8
 * exactly (d = max / -8), the rest round to nearest and clamp to 15. */
static void quant_q4_0(const float *x, uint8_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32, x += 32, b += 18) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8;
        float id = d != 0 ? 1.0f / d : 0;
        store_fp16(b, d);
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)(x[j] * id + 8.5f);
            int hi = (int8_t)(x[j + 16] * id + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            b[2 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

int quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    uint8_t *d = dst;
    switch (type) {
    case KK_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case KK_F16:
        for (int64_t i = 0; i < n; i++)
            store_fp16(d + 2 * i, src[i]);
        return 0;
    case KK_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            d[2 * i] = (uint8_t)h;
            d[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return 0;
    case KK_Q8_0: quant_q8_0(src, d, n); return 0;
    case KK_Q4_0: quant_q4_0(src, d, n); return 0;
    default: return -1;
    }
}
