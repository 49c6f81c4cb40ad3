/* test_matmul.c — activation preparation and the matmul kernels: the scalar
 * reference against a float64 dot product, every SIMD kernel against the
 * reference, and the properties speculative decoding leans on (a token's
 * result does not depend on its batch or on how rows are split). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "matmul.h"
#include "matmul_kernels.h"
#include "quant.h"

typedef void rows_fn(uint32_t, const void *, const struct matmul_input *,
                     float *, int64_t, int64_t, int64_t);

static const uint32_t all_types[] = {KK_F32, KK_F16, KK_BF16, KK_Q8_0,
                                     KK_Q4_0, KK_Q5_0, KK_Q4_K, KK_Q6_K};
static const int token_counts[] = {1, 2, 3, 4, 5, 8, 16, 17, 33};

enum { N_ROWS = 13 };

static uint32_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}

static float random_float(uint64_t *s)
{
    return (float)(next_random(s) & 0xffff) / 32768.0f - 1.0f;
}

/* Columns per type: not a multiple of 16/32 for the float types (tails),
 * an odd number of 32-blocks for the Q8_0 family, three 256-blocks for the
 * K-quants. */
static int64_t cols_for(uint32_t type)
{
    switch (act_family_of(type)) {
    case ACT_Q8_0: return 32 * 27; /* a full 16-block tile and a partial one */
    case ACT_Q8_K: return 256 * 3;
    default: return 200;
    }
}

static void put_fp16(uint8_t *p, float f)
{
    uint16_t h = f32_to_fp16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random weights: quantised from floats where quant.c can, random bytes
 * with sane f16 scales for the others. */
static uint8_t *make_weights(uint32_t type, int64_t n_cols, uint64_t seed)
{
    size_t rb = dtype_row_bytes(type, (uint64_t)n_cols);
    uint8_t *w = malloc(rb * N_ROWS);
    assert_non_null(w);
    float *row = malloc((size_t)n_cols * sizeof(float));
    assert_non_null(row);
    for (int r = 0; r < N_ROWS; r++) {
        uint8_t *wr = w + rb * (size_t)r;
        for (int64_t i = 0; i < n_cols; i++)
            row[i] = random_float(&seed);
        if (quantize_row(type, row, wr, n_cols) == 0)
            continue;
        for (size_t i = 0; i < rb; i++)
            wr[i] = (uint8_t)next_random(&seed);
        size_t bb = dtype_info(type)->block_bytes;
        for (size_t b = 0; b < rb / bb; b++) {
            uint8_t *blk = wr + b * bb;
            if (type == KK_Q5_0) {
                put_fp16(blk, random_float(&seed) * 0.1f);
            } else if (type == KK_Q4_K) {
                put_fp16(blk, random_float(&seed) * 0.01f);
                put_fp16(blk + 2, random_float(&seed) * 0.01f);
            } else { /* Q6_K */
                put_fp16(blk + 208, random_float(&seed) * 0.01f);
            }
        }
    }
    free(row);
    return w;
}

static float *make_activations(int64_t n_cols, int n_tokens, uint64_t seed)
{
    float *x = malloc((size_t)n_cols * (size_t)n_tokens * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n_cols * n_tokens; i++)
        x[i] = random_float(&seed) * (i % 5 == 0 ? 4.0f : 1.0f);
    return x;
}

/* The prepared activations of token t as floats. */
static void dequantize_prepared(const struct matmul_input *in, int t, float *out)
{
    int64_t n = in->n_cols;
    switch (in->act_type) {
    case KK_Q8_0:
        for (int64_t i = 0; i < n; i++)
            out[i] = q8_scales(in, t)[i / 32 * 8] * act_quants(in, t)[i];
        break;
    case KK_Q8_K:
        for (int64_t i = 0; i < n; i++)
            out[i] = q8k_scales(in, t)[i / 256] * act_quants(in, t)[i];
        break;
    default:
        memcpy(out, act_token(in, t), (size_t)n * sizeof(float));
    }
}

struct case_data {
    uint32_t type;
    int64_t n_cols;
    int n_tokens;
    uint8_t *w;
    float *x;
    void *prep;
    struct matmul_input in;
};

static void case_open(struct case_data *c, uint32_t type, int n_tokens)
{
    c->type = type;
    c->n_cols = cols_for(type);
    c->n_tokens = n_tokens;
    c->w = make_weights(type, c->n_cols, 1234 + type);
    c->x = make_activations(c->n_cols, n_tokens, 99 + (uint64_t)n_tokens);
    c->prep = malloc(matmul_prepared_bytes(type, c->n_cols, n_tokens));
    assert_non_null(c->prep);
    matmul_prepare(type, c->x, c->n_cols, n_tokens, c->prep, &c->in);
}

static void case_close(struct case_data *c)
{
    free(c->w);
    free(c->x);
    free(c->prep);
}

/* sum |w_i * a_i| in float64: the scale for summation-order tolerances. */
static void abs_sums(const struct case_data *c, double *sum, double *exact)
{
    size_t rb = dtype_row_bytes(c->type, (uint64_t)c->n_cols);
    float *wf = malloc((size_t)c->n_cols * sizeof(float));
    float *af = malloc((size_t)c->n_cols * sizeof(float));
    assert_true(wf && af);
    for (int r = 0; r < N_ROWS; r++) {
        dequantize_row(c->type, c->w + rb * (size_t)r, wf, c->n_cols);
        for (int t = 0; t < c->n_tokens; t++) {
            dequantize_prepared(&c->in, t, af);
            double s = 0, e = 0;
            for (int64_t i = 0; i < c->n_cols; i++) {
                s += fabs((double)wf[i] * af[i]);
                e += (double)wf[i] * af[i];
            }
            sum[t * N_ROWS + r] = s;
            exact[t * N_ROWS + r] = e;
        }
    }
    free(wf);
    free(af);
}

static void run_rows(rows_fn *fn, const struct case_data *c, float *y,
                     int64_t ldy, const int64_t *cuts, int n_cuts)
{
    for (int i = 0; i + 1 < n_cuts; i++)
        fn(c->type, c->w, &c->in, y, ldy, cuts[i], cuts[i + 1]);
}

static void test_reference_matches_float64_dot_of_dequantized_operands(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        struct case_data c;
        case_open(&c, all_types[ti], 5);
        double sum[5 * N_ROWS], exact[5 * N_ROWS];
        abs_sums(&c, sum, exact);
        float y[5 * N_ROWS];
        matmul_rows_reference(c.type, c.w, &c.in, y, N_ROWS, 0, N_ROWS);
        for (int i = 0; i < 5 * N_ROWS; i++)
            if (!(fabs(y[i] - exact[i]) <= 1e-4 * sum[i] + 1e-30))
                fail_msg("%s [%d]: %g vs float64 %g (sum |.| %g)",
                         dtype_info(c.type)->name, i, (double)y[i], exact[i],
                         sum[i]);
        case_close(&c);
    }
}

/* Every kernel family against the reference, for every type and token
 * count, called on uneven row ranges with ldy > n_rows. */
static void check_kernel_matches_reference(rows_fn *fn, const char *name)
{
    enum { LDY = N_ROWS + 3 };
    const int64_t cuts[] = {0, 5, 6, 13};
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        for (size_t ni = 0; ni < sizeof token_counts / sizeof(int); ni++) {
            struct case_data c;
            case_open(&c, all_types[ti], token_counts[ni]);
            int n = c.n_tokens;
            double *sum = malloc(sizeof(double) * (size_t)n * N_ROWS);
            double *exact = malloc(sizeof(double) * (size_t)n * N_ROWS);
            float *ref = malloc(sizeof(float) * (size_t)n * LDY);
            float *got = malloc(sizeof(float) * (size_t)n * LDY);
            assert_true(sum && exact && ref && got);
            abs_sums(&c, sum, exact);
            for (int i = 0; i < n * LDY; i++)
                ref[i] = got[i] = -12345.0f; /* sentinel in the ldy gaps */
            matmul_rows_reference(c.type, c.w, &c.in, ref, LDY, 0, N_ROWS);
            run_rows(fn, &c, got, LDY, cuts, 4);
            for (int t = 0; t < n; t++) {
                for (int r = 0; r < LDY; r++) {
                    float a = ref[t * LDY + r], b = got[t * LDY + r];
                    if (r >= N_ROWS) {
                        if (b != -12345.0f)
                            fail_msg("%s %s: wrote past row end", name,
                                     dtype_info(c.type)->name);
                        continue;
                    }
                    if (!(fabs((double)a - b) <= 1e-5 * sum[t * N_ROWS + r]))
                        fail_msg("%s %s n_tokens %d token %d row %d: %.9g vs "
                                 "reference %.9g", name,
                                 dtype_info(c.type)->name, n, t, r,
                                 (double)b, (double)a);
                }
            }
            free(sum);
            free(exact);
            free(ref);
            free(got);
            case_close(&c);
        }
    }
}

static void test_avx2_kernels_match_reference(void **state)
{
    (void)state;
    check_kernel_matches_reference(matmul_rows_avx2, "avx2");
}

static void test_avx512_kernels_match_reference(void **state)
{
    (void)state;
    if (!matmul_has_avx512()) {
        fprintf(stderr, "*** SKIP: this CPU has no AVX-512 VNNI ***\n");
        skip();
    }
    check_kernel_matches_reference(matmul_rows_avx512, "avx512");
}

static void test_dispatched_kernel_matches_reference(void **state)
{
    (void)state;
    check_kernel_matches_reference(matmul_rows, "dispatched");
}

/* A token's result must be bit-identical whether it is computed alone or in
 * a batch, and whatever the row split: verify and decode must agree. */
static void check_batch_and_split_independence(rows_fn *fn, const char *name)
{
    const int64_t split_a[] = {0, N_ROWS};
    const int64_t split_b[] = {0, 1, 2, 7, 11, 13};
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        struct case_data c;
        case_open(&c, all_types[ti], 17);
        float batch[17 * N_ROWS], split[17 * N_ROWS];
        run_rows(fn, &c, batch, N_ROWS, split_a, 2);
        run_rows(fn, &c, split, N_ROWS, split_b, 6);
        assert_memory_equal(batch, split, sizeof batch);
        for (int t = 0; t < c.n_tokens; t++) {
            struct case_data one = c;
            struct matmul_input in1 = c.in;
            in1.n_tokens = 1;
            in1.data = act_token(&c.in, t);
            one.in = in1;
            float y1[N_ROWS];
            run_rows(fn, &one, y1, N_ROWS, split_a, 2);
            if (memcmp(y1, batch + t * N_ROWS, sizeof y1) != 0)
                fail_msg("%s %s: token %d alone differs from its batch", name,
                         dtype_info(c.type)->name, t);
        }
        case_close(&c);
    }
}

static void test_avx2_result_of_a_token_does_not_depend_on_batch_or_split(void **state)
{
    (void)state;
    check_batch_and_split_independence(matmul_rows_avx2, "avx2");
}

static void test_avx512_result_of_a_token_does_not_depend_on_batch_or_split(void **state)
{
    (void)state;
    if (!matmul_has_avx512())
        skip();
    check_batch_and_split_independence(matmul_rows_avx512, "avx512");
}

/* ---- AMX ---- */

/* The AMX kernel on packed Q8_0 weights gives the AVX-512 kernel's result
 * to the bit, for every batch size and row split (the engine picks either
 * per batch, so verify and decode must still agree). Shapes: a partial
 * tile of blocks (6, 12), whole tiles (32), a tile and a half (27); rows
 * not a multiple of the 16-row group. */
static void test_amx_equals_avx512_to_the_bit(void **state)
{
    (void)state;
    if (!matmul_has_amx())
        skip();
    const int64_t cols[] = {32 * 6, 32 * 12, 32 * 27, 32 * 32};
    const int64_t rows = 45;
    const int counts[] = {1, 2, 5, 16, 17, 31, 32, 33, 70};
    for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
        const int64_t n = cols[ci];
        size_t rb = dtype_row_bytes(KK_Q8_0, (uint64_t)n);
        uint8_t *w = malloc(rb * (size_t)rows);
        float *row = malloc((size_t)n * sizeof(float));
        void *packed = aligned_alloc(64, matmul_amx_packed_bytes(rows, n));
        assert_true(w && row && packed);
        uint64_t seed = 77 + (uint64_t)n;
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < n; i++)
                row[i] = random_float(&seed) * (float)(1 + r % 5);
            quantize_row(KK_Q8_0, row, w + rb * (size_t)r, n);
        }
        matmul_amx_pack(w, rows, n, packed);
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            const int nt = counts[k];
            float *x = make_activations(n, nt, 5 + (uint64_t)nt);
            void *prep = malloc(matmul_prepared_bytes(KK_Q8_0, n, nt));
            float *want = malloc(sizeof(float) * (size_t)(rows * nt));
            float *got = malloc(sizeof(float) * (size_t)(rows * nt));
            assert_true(prep && want && got);
            struct matmul_input in;
            matmul_prepare(KK_Q8_0, x, n, nt, prep, &in);
            matmul_rows_avx512(KK_Q8_0, w, &in, want, rows, 0, rows);
            /* prepared for AMX alone: without the AVX-512 tiled copy */
            memset(prep, 0x5a, matmul_prepared_bytes(KK_Q8_0, n, nt));
            matmul_prepare_for(KK_Q8_0, x, n, nt, true, prep, &in);
            memset(got, 0xff, sizeof(float) * (size_t)(rows * nt));
            const int64_t cuts[] = {0, 8, 16, 21, 45};
            for (int c = 0; c + 1 < 5; c++)
                matmul_rows_amx(packed, &in, got, rows, rows, cuts[c],
                                cuts[c + 1]);
            if (memcmp(want, got, sizeof(float) * (size_t)(rows * nt)))
                fail_msg("amx differs from avx512: %lld columns, %d tokens",
                         (long long)n, nt);
            free(x);
            free(prep);
            free(want);
            free(got);
        }
        free(w);
        free(row);
        free(packed);
    }
}

/* ---- preparation ---- */

static void test_prepare_q8_0_rounds_half_to_even_with_f16_scale(void **state)
{
    (void)state;
    float x[64] = {0};
    x[0] = 127;       /* amax 127: quants are x itself, rounded */
    x[1] = 2.5f;      /* tie: even -> 2 (llama.cpp's x86 path) */
    x[2] = 3.5f;      /* tie: even -> 4 */
    x[3] = -2.5f;
    x[4] = 0.49f;
    x[32] = 0.3f;     /* second block: amax 0.3, d = fp16(0.3/127) */
    x[33] = -0.15f;
    uint8_t buf[1024];
    assert_true(matmul_prepared_bytes(KK_Q4_0, 64, 1) <= sizeof buf);
    struct matmul_input in;
    matmul_prepare(KK_Q4_0, x, 64, 1, buf, &in);
    assert_int_equal(in.act_type, KK_Q8_0);
    const int8_t *q = act_quants(&in, 0);
    const float *d = q8_scales(&in, 0);
    assert_int_equal(q[0], 127);
    assert_int_equal(q[1], 2);
    assert_int_equal(q[2], 4);
    assert_int_equal(q[3], -2);
    assert_int_equal(q[4], 0);
    assert_true(d[0] == 1.0f && d[7] == 1.0f);
    assert_int_equal(q[32], 127);
    assert_int_equal(q[33], -64); /* -63.5 -> -64 (even) */
    assert_true(d[8] == fp16_to_f32(f32_to_fp16(0.3f / 127)));
    assert_true(d[15] == d[8]);
}

static void test_prepare_q8_k_maps_largest_magnitude_to_minus_127(void **state)
{
    (void)state;
    float x[512] = {0};
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i % 17) - 8;
    x[5] = -10;                       /* the largest magnitude, negative */
    /* the second block stays all zero */
    uint8_t buf[4096];
    assert_true(matmul_prepared_bytes(KK_Q6_K, 512, 1) <= sizeof buf);
    memset(buf, 0x55, sizeof buf);
    struct matmul_input in;
    matmul_prepare(KK_Q6_K, x, 512, 1, buf, &in);
    assert_int_equal(in.act_type, KK_Q8_K);
    const int8_t *q = act_quants(&in, 0);
    const float *d = q8k_scales(&in, 0);
    const int16_t *bs = q8k_bsums(&in, 0);
    assert_int_equal(q[5], -127);     /* iscale = -127 / -10 = 12.7 */
    assert_true(d[0] == 1 / (-127.0f / -10.0f));
    assert_int_equal(q[0], -102);     /* -8 * 12.7 = -101.6 */
    assert_int_equal(q[8], 0);
    assert_int_equal(q[16], 102);     /* 8 * 12.7 */
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++)
            s += q[16 * g + j];
        assert_int_equal(bs[g], s);
    }
    assert_true(d[1] == 0);
    for (int i = 256; i < 512; i++)
        assert_int_equal(q[i], 0);
    for (int g = 16; g < 32; g++)
        assert_int_equal(bs[g], 0);
}

static void test_prepare_f16_and_bf16_round_activations_to_weight_precision(void **state)
{
    (void)state;
    float x[2] = {1.0f + 0x1p-12f + 0x1p-20f, 1.0f + 0x1p-9f + 0x1p-14f};
    float buf[64];
    assert_true(matmul_prepared_bytes(KK_F32, 2, 1) <= sizeof buf);
    struct matmul_input in;
    matmul_prepare(KK_F16, x, 2, 1, buf, &in);
    const float *p = act_token(&in, 0);
    assert_true(p[0] == 1.0f && p[1] == 1.0f + 0x1p-9f);
    matmul_prepare(KK_BF16, x, 2, 1, buf, &in);
    p = act_token(&in, 0);
    assert_true(p[0] == 1.0f && p[1] == 1.0f);
    matmul_prepare(KK_F32, x, 2, 1, buf, &in);
    p = act_token(&in, 0);
    assert_true(p[0] == x[0] && p[1] == x[1]);
}

static void test_prepared_vectors_start_on_a_cache_line(void **state)
{
    (void)state;
    uint8_t *buf = malloc(matmul_prepared_bytes(KK_Q8_0, 64, 2) + 1);
    assert_non_null(buf);
    float x[128] = {1};
    struct matmul_input in;
    matmul_prepare(KK_Q8_0, x, 64, 2, buf + 1, &in);
    assert_int_equal((uintptr_t)in.data % 64, 0);
    assert_true((const uint8_t *)in.data >= buf + 1);
    assert_true((const uint8_t *)act_token(&in, 2) <=
                buf + 1 + matmul_prepared_bytes(KK_Q8_0, 64, 2));
    free(buf);
}

static void test_kernel_name_names_the_dispatched_family(void **state)
{
    (void)state;
    const char *want = matmul_has_avx512() ? "avx512-vnni" : "avx2";
    assert_string_equal(matmul_kernel_name(), want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_q8_0_rounds_half_to_even_with_f16_scale),
        cmocka_unit_test(test_prepare_q8_k_maps_largest_magnitude_to_minus_127),
        cmocka_unit_test(test_prepare_f16_and_bf16_round_activations_to_weight_precision),
        cmocka_unit_test(test_reference_matches_float64_dot_of_dequantized_operands),
        cmocka_unit_test(test_avx2_kernels_match_reference),
        cmocka_unit_test(test_avx512_kernels_match_reference),
        cmocka_unit_test(test_dispatched_kernel_matches_reference),
        cmocka_unit_test(test_avx2_result_of_a_token_does_not_depend_on_batch_or_split),
        cmocka_unit_test(test_avx512_result_of_a_token_does_not_depend_on_batch_or_split),
        cmocka_unit_test(test_amx_equals_avx512_to_the_bit),
        cmocka_unit_test(test_prepared_vectors_start_on_a_cache_line),
        cmocka_unit_test(test_kernel_name_names_the_dispatched_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
