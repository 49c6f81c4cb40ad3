/* test_quant.c — f16/bf16 conversions, dequantisation bit-exact against
 * ggml's (../shared/golden/dequant), and weight quantisation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "quant.h"
#include "testutil.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* xorshift: deterministic test data without global state */
static uint32_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}

/* ---- f16 ---- */

static void test_fp16_to_f32_matches_f16c_for_every_half(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float want = _cvtsh_ss((unsigned short)h);
        float got = fp16_to_f32((uint16_t)h);
        if (bits(want) != bits(got))
            fail_msg("half 0x%04x: got 0x%08x want 0x%08x", h, bits(got),
                     bits(want));
    }
}

static void test_fp16_round_trips_every_non_nan_half(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN: checked separately */
        assert_int_equal(f32_to_fp16(fp16_to_f32((uint16_t)h)), h);
    }
}

static void test_f32_to_fp16_rounds_ties_to_even_and_handles_edges(void **state)
{
    (void)state;
    struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00},
        {1.0f + 0x1p-11f, 0x3c00},          /* tie, even stays down */
        {1.0f + 3 * 0x1p-11f, 0x3c02},      /* tie, odd goes up */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},
        {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},
        {65520.0f, 0x7c00},                 /* tie above max half: inf */
        {-INFINITY, 0xfc00},
        {0x1p-24f, 0x0001},                 /* smallest subnormal */
        {0x1p-25f, 0x0000},                 /* tie to even: zero */
        {3 * 0x1p-25f, 0x0002},             /* tie to even: 2 */
        {0x1p-25f + 0x1p-40f, 0x0001},
        {0x1p-14f - 0x1p-25f, 0x0400},      /* rounds up to min normal */
        {-0.0f, 0x8000},
        {1e-30f, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = f32_to_fp16(cases[i].f);
        if (got != cases[i].h)
            fail_msg("%a: got 0x%04x want 0x%04x", (double)cases[i].f, got,
                     cases[i].h);
    }
    uint16_t nan = f32_to_fp16(NAN);
    assert_int_equal(nan & 0x7c00, 0x7c00);
    assert_true((nan & 0x3ff) != 0);
    /* a signalling NaN whose payload sits only in low bits stays a NaN */
    uint16_t snan = f32_to_fp16(from_bits(0x7f800001));
    assert_int_equal(snan & 0x7c00, 0x7c00);
    assert_true((snan & 0x3ff) != 0);
}

static void test_f32_to_fp16_matches_f16c_on_random_floats(void **state)
{
    (void)state;
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = next_random(&s) << 16 ^ next_random(&s);
        /* half the samples near the f16 range so rounding is exercised */
        if (i & 1)
            u = (u & 0x807fffffu) | ((100 + (u >> 23) % 50) << 23);
        float f = from_bits(u);
        uint16_t want = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
        uint16_t got = f32_to_fp16(f);
        if (want != got)
            fail_msg("0x%08x: got 0x%04x want 0x%04x", u, got, want);
    }
}

/* ---- bf16 ---- */

static void test_bf16_rounds_ties_to_even_and_keeps_nan(void **state)
{
    (void)state;
    struct { uint32_t f; uint16_t h; } cases[] = {
        {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, /* tie, even */
        {0x3f818000, 0x3f82},                       /* tie, odd up */
        {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80},
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80},
        {0x7f7fffff, 0x7f80},                       /* max float -> inf */
        {0x00018000, 0x0002},                       /* subnormal tie */
        {0x80000000, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(f32_to_bf16(from_bits(cases[i].f)), cases[i].h);
    uint16_t n = f32_to_bf16(from_bits(0x7f800001)); /* low-payload NaN */
    assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
    assert_int_equal(bits(bf16_to_f32(0xc049)), 0xc0490000);
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
            continue;
        assert_int_equal(f32_to_bf16(bf16_to_f32((uint16_t)h)), h);
    }
}

/* ---- dequantisation against ggml ---- */

static uint32_t type_from_name(const char *name)
{
    static const struct { const char *name; uint32_t type; } map[] = {
        {"f16", KK_F16}, {"bf16", KK_BF16}, {"q8_0", KK_Q8_0},
        {"q4_0", KK_Q4_0}, {"q5_0", KK_Q5_0}, {"q4_K", KK_Q4_K},
        {"q6_K", KK_Q6_K}, {"f32", KK_F32},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].name, name) == 0)
            return map[i].type;
    fail_msg("unknown type name '%s' in index.json", name);
    return 0;
}

/* Checks one dumped tensor; returns its type. */
static uint32_t check_dequant_tensor(const char *model, const cJSON *t)
{
    const char *tensor = cJSON_GetObjectItem(t, "tensor")->valuestring;
    uint32_t type = type_from_name(cJSON_GetObjectItem(t, "type")->valuestring);
    int64_t ne0 = (int64_t)cJSON_GetObjectItem(t, "ne0")->valuedouble;
    int rows = cJSON_GetObjectItem(t, "rows_dumped")->valueint;
    size_t rb = (size_t)cJSON_GetObjectItem(t, "row_bytes")->valuedouble;
    long off = (long)cJSON_GetObjectItem(t, "data_offset_in_file")->valuedouble;
    assert_int_equal(dtype_row_bytes(type, (uint64_t)ne0), rb);

    char rel[512];
    snprintf(rel, sizeof rel, "golden/models/%s.gguf", model);
    FILE *f = fopen(testutil_shared_path(rel), "rb");
    assert_non_null(f);
    uint8_t *raw = malloc(rb * (size_t)rows);
    assert_non_null(raw);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fread(raw, 1, rb * (size_t)rows, f), rb * (size_t)rows);
    fclose(f);

    snprintf(rel, sizeof rel, "golden/dequant/%s/%s", model,
             cJSON_GetObjectItem(t, "file")->valuestring);
    size_t len;
    char *want = testutil_read_file(testutil_shared_path(rel), &len);
    assert_non_null(want);
    assert_int_equal(len, (size_t)rows * (size_t)ne0 * sizeof(float));

    float *got = malloc((size_t)ne0 * sizeof(float));
    assert_non_null(got);
    for (int r = 0; r < rows; r++) {
        dequantize_row(type, raw + (size_t)r * rb, got, ne0);
        const float *w = (const float *)want + (size_t)r * (size_t)ne0;
        for (int64_t i = 0; i < ne0; i++)
            if (bits(got[i]) != bits(w[i]))
                fail_msg("%s %s row %d col %lld: got %a want %a", model,
                         tensor, r, (long long)i, (double)got[i],
                         (double)w[i]);
    }
    free(got);
    free(want);
    free(raw);
    return type;
}

static void test_dequantize_is_bit_exact_with_ggml_for_every_golden_type(void **state)
{
    (void)state;
    const char *path = testutil_shared_path("golden/dequant/index.json");
    if (!path)
        skip();
    cJSON *index = testutil_read_json(path);
    assert_non_null(index);
    bool seen[KK_DTYPE_LIMIT] = {0};
    int tensors = 0;
    const cJSON *model;
    cJSON_ArrayForEach(model, index) {
        const cJSON *t;
        cJSON_ArrayForEach(t, model) {
            seen[check_dequant_tensor(model->string, t)] = true;
            tensors++;
        }
    }
    cJSON_Delete(index);
    assert_true(tensors >= 40);
    const uint32_t expected[] = {KK_F16, KK_BF16, KK_Q8_0, KK_Q4_0,
                                 KK_Q5_0, KK_Q4_K, KK_Q6_K};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        if (!seen[expected[i]])
            fail_msg("no golden tensor of type %s",
                     dtype_info(expected[i])->name);
}

/* ---- quantisation ---- */

static void random_floats(float *x, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        x[i] = ((float)(next_random(&seed) & 0xffff) / 65536.0f - 0.5f) *
               (i % 7 == 0 ? 40.0f : 2.0f);
}

static void test_f16_and_bf16_rows_round_trip_within_half_an_ulp(void **state)
{
    (void)state;
    enum { N = 1000 };
    float x[N], y[N];
    uint16_t q[N];
    random_floats(x, N, 7);
    assert_int_equal(quantize_row(KK_F16, x, q, N), 0);
    dequantize_row(KK_F16, q, y, N);
    for (int i = 0; i < N; i++)
        if (!(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f))
            fail_msg("%d: %a -> %a", i, (double)x[i], (double)y[i]);
    assert_int_equal(quantize_row(KK_BF16, x, q, N), 0);
    dequantize_row(KK_BF16, q, y, N);
    for (int i = 0; i < N; i++)
        assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f);
}

static void test_q8_0_round_trip_error_is_at_most_half_a_step(void **state)
{
    (void)state;
    enum { N = 32 * 20 };
    float x[N], y[N];
    uint8_t q[34 * 20];
    random_floats(x, N, 11);
    for (int i = 0; i < 32; i++)
        x[64 + i] = 0; /* an all-zero block has d = 0 and decodes to 0 */
    assert_int_equal(quantize_row(KK_Q8_0, x, q, N), 0);
    dequantize_row(KK_Q8_0, q, y, N);
    for (int b = 0; b < N / 32; b++) {
        float d = fp16_to_f32((uint16_t)(q[34 * b] | q[34 * b + 1] << 8));
        for (int j = 0; j < 32; j++) {
            float e = fabsf(y[32 * b + j] - x[32 * b + j]);
            /* half a step, plus the f16 rounding of d over 127 steps */
            assert_true(e <= d * 0.5f + 127 * d * 0x1p-11f + 1e-30f);
        }
    }
    for (int i = 0; i < 32; i++)
        assert_true(y[64 + i] == 0);
}

static void test_q8_0_known_values_round_half_away_from_zero(void **state)
{
    (void)state;
    float x[32] = {127, -127, 0.5f, 1.5f, 2.5f, -2.5f, 0.49f, -0.5f};
    uint8_t q[34];
    assert_int_equal(quantize_row(KK_Q8_0, x, q, 32), 0);
    assert_int_equal(q[0] | q[1] << 8, 0x3c00); /* d = 1 */
    const int8_t want[8] = {127, -127, 1, 2, 3, -3, 0, -1};
    for (int j = 0; j < 8; j++)
        assert_int_equal((int8_t)q[2 + j], want[j]);
}

static void test_q4_0_known_values_map_largest_magnitude_to_minus_8(void **state)
{
    (void)state;
    float x[32], y[32];
    uint8_t q[18];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16); /* max magnitude -16: d = 2 */
    assert_int_equal(quantize_row(KK_Q4_0, x, q, 32), 0);
    assert_int_equal(q[0] | q[1] << 8, 0x4000);
    dequantize_row(KK_Q4_0, q, y, 32);
    for (int j = 0; j < 32; j++) {
        float want = j == 31 ? 14 : (float)(j - 16 + (j & 1));
        assert_true(y[j] == want);
    }
}

static void test_q4_0_round_trip_error_is_at_most_one_step(void **state)
{
    (void)state;
    enum { N = 32 * 16 };
    float x[N], y[N];
    uint8_t q[18 * 16];
    random_floats(x, N, 5);
    assert_int_equal(quantize_row(KK_Q4_0, x, q, N), 0);
    dequantize_row(KK_Q4_0, q, y, N);
    for (int b = 0; b < N / 32; b++) {
        float d = fabsf(fp16_to_f32((uint16_t)(q[18 * b] | q[18 * b + 1] << 8)));
        for (int j = 0; j < 32; j++)
            if (!(fabsf(y[32 * b + j] - x[32 * b + j]) <=
                  d * (1 + 8 * 0x1p-10f)))
                fail_msg("%d %d: %a -> %a d %a", b, j, (double)x[32 * b + j],
                         (double)y[32 * b + j], (double)d);
    }
}

static void test_quantize_row_refuses_k_quants(void **state)
{
    (void)state;
    float x[256] = {0};
    uint8_t q[256];
    assert_int_equal(quantize_row(KK_Q4_K, x, q, 256), -1);
    assert_int_equal(quantize_row(KK_Q6_K, x, q, 256), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_to_f32_matches_f16c_for_every_half),
        cmocka_unit_test(test_fp16_round_trips_every_non_nan_half),
        cmocka_unit_test(test_f32_to_fp16_rounds_ties_to_even_and_handles_edges),
        cmocka_unit_test(test_f32_to_fp16_matches_f16c_on_random_floats),
        cmocka_unit_test(test_bf16_rounds_ties_to_even_and_keeps_nan),
        cmocka_unit_test(test_dequantize_is_bit_exact_with_ggml_for_every_golden_type),
        cmocka_unit_test(test_f16_and_bf16_rows_round_trip_within_half_an_ulp),
        cmocka_unit_test(test_q8_0_round_trip_error_is_at_most_half_a_step),
        cmocka_unit_test(test_q8_0_known_values_round_half_away_from_zero),
        cmocka_unit_test(test_q4_0_known_values_map_largest_magnitude_to_minus_8),
        cmocka_unit_test(test_q4_0_round_trip_error_is_at_most_one_step),
        cmocka_unit_test(test_quantize_row_refuses_k_quants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
