/* matmul.c — see matmul.h: activation preparation, the scalar reference
 * kernels, and the runtime choice of SIMD kernel. The prepared layout is
 * described in matmul_kernels.h. */
#include "matmul.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "matmul_kernels.h"
#include "quant.h"

/* ---- preparation ---- */

static size_t prepared_row_bytes(uint32_t weight_type, int64_t n_cols)
{
    size_t n = (size_t)n_cols;
    switch (act_family_of(weight_type)) {
    case ACT_Q8_0:
        return round_up64(n) + round_up64(n / 32 * 8 * sizeof(float)) +
               (size_t)q8_tile_count(n_cols) * sizeof(struct q8_tile);
    case ACT_Q8_K:
        return round_up64(n) + round_up64(n / 256 * sizeof(float)) +
               round_up64(n / 256 * 16 * sizeof(int16_t));
    default:
        return round_up64(n * sizeof(float));
    }
}

size_t matmul_prepared_bytes(uint32_t weight_type, int64_t n_cols, int n_tokens)
{
    /* + 64: room to align the vectors to cache lines (see matmul_prepare) */
    return prepared_row_bytes(weight_type, n_cols) * (size_t)n_tokens + 64;
}

/* Q8_0 as llama.cpp quantises activations on x86: the scale is rounded to
 * f16 for the dot product, while the quants use 127/amax unrounded and
 * round half to even (cvtps rounds to nearest even, like nearbyintf, in
 * the default rounding mode). */
static void prepare_q8_0(const float *x, int64_t n, int8_t *q, float *d8)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / 32; b++, x += 32, q += 32, d8 += 8) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(m, _mm256_and_ps(v[k], abs_mask));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m),
                               _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float id = amax != 0 ? 127.0f / amax : 0;
        float d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
        __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], vid));
        /* packs work within 128-bit lanes: undo the interleave after */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1),
                                       _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6,
                                                             3, 7));
        _mm256_storeu_si256((__m256i *)q, p);
        _mm256_storeu_ps(d8, _mm256_set1_ps(d));
    }
}

/* The tiled copy of prepared Q8_0 quants q (n values) and scales d8: see
 * struct q8_tile. */
static void prepare_q8_tiles(uint32_t weight_type, const int8_t *q,
                             const float *d8, int64_t n, struct q8_tile *tiles)
{
    int64_t nb = n / 32;
    int32_t k = weight_type == KK_Q8_0 ? -128 : weight_type == KK_Q4_0 ? -8 : 0;
    for (int64_t g = 0; g < q8_tile_count(n); g++) {
        struct q8_tile *tile = &tiles[g];
        memset(tile, 0, sizeof *tile);
        for (int lane = 0; lane < 16; lane++) {
            int64_t b = g * Q8_TILE_BLOCKS + q8_tile_block(lane);
            if (b >= nb)
                continue;
            const int8_t *qb = q + 32 * b;
            /* quants 16*(v/4) + 4*(v%4) .. +3 are simply dword v */
            for (int v = 0; v < 8; v++)
                memcpy(&tile->q[v][4 * lane], qb + 4 * v, 4);
            int32_t sum = 0;
            for (int j = 0; j < 32; j++)
                sum += qb[j];
            tile->d[lane] = d8[8 * b];
            tile->corr[lane] = k * sum;
        }
    }
}

static void prepare_q8_k(const float *x, int64_t n, int8_t *q, float *d,
                         int16_t *bsums)
{
    for (int64_t b = 0; b < n / 256; b++, x += 256, q += 256, bsums += 16) {
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0) {
            d[b] = 0;
            memset(q, 0, 256);
            memset(bsums, 0, 16 * sizeof *bsums);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < 256; j++) {
            float v = nearbyintf(iscale * x[j]);
            q[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += q[16 * g + j];
            bsums[g] = (int16_t)sum;
        }
        d[b] = 1 / iscale;
    }
}

static void prepare_float(uint32_t weight_type, const float *x, int64_t n,
                          float *out)
{
    for (int64_t i = 0; i < n; i++) {
        if (weight_type == KK_F16)
            out[i] = fp16_to_f32(f32_to_fp16(x[i]));
        else if (weight_type == KK_BF16)
            out[i] = bf16_to_f32(f32_to_bf16(x[i]));
        else
            out[i] = x[i];
    }
}

void matmul_prepare(uint32_t weight_type, const float *x, int64_t n_cols,
                    int n_tokens, void *buf, struct matmul_input *out)
{
    matmul_prepare_for(weight_type, x, n_cols, n_tokens, false, buf, out);
}

void matmul_prepare_for(uint32_t weight_type, const float *x, int64_t n_cols,
                        int n_tokens, bool is_amx, void *buf,
                        struct matmul_input *out)
{
    enum act_family fam = act_family_of(weight_type);
    /* Kernels load whole 64-byte vectors of the prepared data, once per
     * weight row: one that straddles two cache lines costs two loads. */
    buf = (char *)buf + (-(uintptr_t)buf & 63);
    *out = (struct matmul_input){
        .act_type = fam == ACT_Q8_0   ? KK_Q8_0
                    : fam == ACT_Q8_K ? KK_Q8_K
                    : weight_type == KK_F16 || weight_type == KK_BF16
                        ? weight_type
                        : KK_F32,
        .n_cols = n_cols,
        .n_tokens = n_tokens,
        .row_bytes = prepared_row_bytes(weight_type, n_cols),
        .data = buf,
    };
    for (int t = 0; t < n_tokens; t++) {
        const float *xt = x + (size_t)t * (size_t)n_cols;
        int8_t *q = (int8_t *)buf + (size_t)t * out->row_bytes;
        switch (fam) {
        case ACT_Q8_0:
            prepare_q8_0(xt, n_cols, q, (float *)q8_scales(out, t));
            if (!is_amx)
                prepare_q8_tiles(weight_type, q, q8_scales(out, t), n_cols,
                                 (struct q8_tile *)q8_tiles(out, t));
            break;
        case ACT_Q8_K:
            prepare_q8_k(xt, n_cols, q, (float *)q8k_scales(out, t),
                         (int16_t *)q8k_bsums(out, t));
            break;
        default:
            prepare_float(weight_type, xt, n_cols, (float *)q);
        }
    }
}

/* ---- scalar reference: one dot product per (row, token) ----
 * Integer sums per block, scaled in f32 per block, as ggml's generic code. */

static float load_fp16(const uint8_t *p)
{
    return fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Signed 8-bit quants of one 32-block of a Q8_0-family weight row. */
static void q8f_block(uint32_t type, const uint8_t *b, int8_t *w)
{
    if (type == KK_Q8_0) {
        memcpy(w, b + 2, 32);
    } else if (type == KK_Q4_0) {
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)((b[2 + j] & 0xf) - 8);
            w[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
        }
    } else { /* Q5_0 */
        uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 |
                      (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)(((b[6 + j] & 0xf) | ((qh >> j) & 1) << 4) - 16);
            w[j + 16] = (int8_t)(((b[6 + j] >> 4) |
                                  ((qh >> (j + 16)) & 1) << 4) - 16);
        }
    }
}

static float dot_q8f(uint32_t type, const uint8_t *row, int64_t n,
                     const int8_t *a, const float *d8)
{
    size_t bb = dtype_info(type)->block_bytes;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t w[32];
        q8f_block(type, row + (size_t)b * bb, w);
        int isum = 0;
        for (int j = 0; j < 32; j++)
            isum += w[j] * a[32 * b + j];
        sum += load_fp16(row + (size_t)b * bb) * d8[8 * b] * (float)isum;
    }
    return sum;
}

static float dot_q4_k(const uint8_t *row, int64_t n, const int8_t *a,
                      const float *da, const int16_t *bsums)
{
    float sum = 0;
    for (int64_t b = 0; b < n / 256; b++, row += 144, a += 256, bsums += 16) {
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            q4k_scale_min(row + 4, j, &sc, &m);
            const uint8_t *qs = row + 16 + 32 * (j / 2);
            int shift = (j & 1) * 4, s = 0;
            for (int l = 0; l < 32; l++)
                s += ((qs[l] >> shift) & 0xf) * a[32 * j + l];
            isum += sc * s;
            msum += m * (bsums[2 * j] + bsums[2 * j + 1]);
        }
        float d = load_fp16(row) * da[b], dmin = load_fp16(row + 2) * da[b];
        sum += d * (float)isum - dmin * (float)msum;
    }
    return sum;
}

/* The 6-bit quant at index i (0..255) of a Q6_K block, still offset by 32. */
static int q6k_quant(const uint8_t *b, int i)
{
    int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const uint8_t *ql = b + 64 * h + 32 * (k & 1);
    const uint8_t *qh = b + 128 + 32 * h;
    int lo = (k >> 1) ? ql[l] >> 4 : ql[l] & 0xf;
    return lo | ((qh[l] >> (2 * k)) & 3) << 4;
}

static float dot_q6_k(const uint8_t *row, int64_t n, const int8_t *a,
                      const float *da)
{
    float sum = 0;
    for (int64_t b = 0; b < n / 256; b++, row += 210, a += 256) {
        const int8_t *sc = (const int8_t *)(row + 192);
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += (q6k_quant(row, 16 * g + l) - 32) * a[16 * g + l];
            isum += sc[g] * s;
        }
        sum += load_fp16(row + 208) * da[b] * (float)isum;
    }
    return sum;
}

static float dot_float(uint32_t type, const uint8_t *row, int64_t n,
                       const float *x)
{
    float sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float w;
        if (type == KK_F32)
            memcpy(&w, row + 4 * i, 4);
        else if (type == KK_F16)
            w = load_fp16(row + 2 * i);
        else
            w = bf16_to_f32((uint16_t)(row[2 * i] | row[2 * i + 1] << 8));
        sum += w * x[i];
    }
    return sum;
}

void matmul_rows_reference(uint32_t weight_type, const void *w,
                           const struct matmul_input *in, float *y,
                           int64_t ldy, int64_t row_begin, int64_t row_end)
{
    int64_t n = in->n_cols;
    size_t rb = dtype_row_bytes(weight_type, (uint64_t)n);
    for (int64_t r = row_begin; r < row_end; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;
        for (int t = 0; t < in->n_tokens; t++) {
            float v;
            switch (weight_type) {
            case KK_Q4_0: case KK_Q5_0: case KK_Q8_0:
                v = dot_q8f(weight_type, row, n, act_quants(in, t),
                            q8_scales(in, t));
                break;
            case KK_Q4_K:
                v = dot_q4_k(row, n, act_quants(in, t), q8k_scales(in, t),
                             q8k_bsums(in, t));
                break;
            case KK_Q6_K:
                v = dot_q6_k(row, n, act_quants(in, t), q8k_scales(in, t));
                break;
            default:
                v = dot_float(weight_type, row, n, act_token(in, t));
            }
            y[(int64_t)t * ldy + r] = v;
        }
    }
}

/* ---- dispatch ---- */

bool matmul_has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

/* AMX: CPUID says AMX-TILE and AMX-INT8 (with the AVX-512 the kernel's
 * float part uses), and Linux lets this process use the tile data state,
 * which it must be asked for once (ARCH_REQ_XCOMP_PERM). */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static bool amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_detect(void)
{
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    bool has_tiles = (d >> 24 & 1) && (d >> 25 & 1);
    amx_ok = has_tiles && matmul_has_avx512() &&
             syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM,
                     XFEATURE_XTILEDATA) == 0;
}

bool matmul_has_amx(void)
{
    pthread_once(&amx_once, amx_detect);
    return amx_ok;
}

void matmul_rows(uint32_t weight_type, const void *w,
                 const struct matmul_input *in, float *y, int64_t ldy,
                 int64_t row_begin, int64_t row_end)
{
    if (matmul_has_avx512())
        matmul_rows_avx512(weight_type, w, in, y, ldy, row_begin, row_end);
    else
        matmul_rows_avx2(weight_type, w, in, y, ldy, row_begin, row_end);
}

const char *matmul_kernel_name(void)
{
    return matmul_has_avx512() ? "avx512-vnni" : "avx2";
}
