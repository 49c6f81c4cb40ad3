/* test_sample.c — choosing tokens: greedy ties, temperature, top-p, seeds. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kakeya.h"
#include "sample.h"

static void test_greedy_picks_argmax_and_lowest_id_on_ties(void **state)
{
    float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    float scratch[12];
    uint64_t rng = kk_rng_seed(1);
    struct kk_sampling greedy = {.temperature = 0.0f, .top_p = 1.0f};
    assert_int_equal(kk_sample(&greedy, &rng, logits, 6, scratch), 1);
}

/* Greedy over a whole vocabulary (the vectorised scan): the first of equal
 * maxima wherever it falls (vector body or tail), -0 and +0 as equal, and
 * a NaN never chosen over a number after it. */
static void test_greedy_over_a_vocabulary_keeps_scan_semantics(void **state)
{
    enum { N = 1003 };
    static float logits[N];
    float *scratch = malloc(2 * N * sizeof(float));
    struct kk_sampling greedy = {.temperature = 0.0f, .top_p = 1.0f};
    uint64_t rng = kk_rng_seed(1);
    const int spots[][2] = {{5, 700}, {999, 1001}, {0, 31}, {40, 41}};
    for (size_t k = 0; k < sizeof spots / sizeof spots[0]; k++) {
        for (int i = 0; i < N; i++)
            logits[i] = sinf((float)i) - 2.0f;
        logits[spots[k][0]] = logits[spots[k][1]] = 3.0f;
        assert_int_equal(kk_sample(&greedy, &rng, logits, N, scratch),
                         spots[k][0]);
    }
    for (int i = 0; i < N; i++)
        logits[i] = -1.0f;
    logits[10] = -0.0f;
    logits[900] = 0.0f;
    assert_int_equal(kk_sample(&greedy, &rng, logits, N, scratch), 10);
    logits[3] = NAN;
    assert_int_equal(kk_sample(&greedy, &rng, logits, N, scratch), 10);
    logits[0] = NAN;
    assert_int_equal(kk_sample(&greedy, &rng, logits, N, scratch), 0);
    free(scratch);
}

static void test_same_seed_same_tokens(void **state)
{
    float logits[50];
    for (int i = 0; i < 50; i++)
        logits[i] = sinf((float)i);
    float scratch[100];
    struct kk_sampling p = {.temperature = 1.0f, .top_p = 1.0f};
    uint64_t a = kk_rng_seed(7), b = kk_rng_seed(7), c = kk_rng_seed(8);
    int differs = 0;
    for (int i = 0; i < 100; i++) {
        int32_t x = kk_sample(&p, &a, logits, 50, scratch);
        int32_t y = kk_sample(&p, &b, logits, 50, scratch);
        int32_t z = kk_sample(&p, &c, logits, 50, scratch);
        assert_int_equal(x, y);
        differs += x != z;
    }
    assert_true(differs > 10);
}

/* With temperature 1 the frequencies follow softmax(logits). */
static void test_sampling_follows_softmax(void **state)
{
    float logits[4] = {0.0f, 1.0f, 2.0f, -1.0f};
    float scratch[8];
    double z = 0;
    for (int i = 0; i < 4; i++)
        z += exp(logits[i]);
    struct kk_sampling p = {.temperature = 1.0f, .top_p = 1.0f};
    uint64_t rng = kk_rng_seed(3);
    int counts[4] = {0};
    const int n = 200000;
    for (int i = 0; i < n; i++)
        counts[kk_sample(&p, &rng, logits, 4, scratch)]++;
    for (int i = 0; i < 4; i++) {
        double want = exp(logits[i]) / z;
        assert_true(fabs((double)counts[i] / n - want) < 0.005);
    }
}

/* top_p keeps the smallest set of likely tokens reaching the mass. */
static void test_top_p_excludes_the_tail(void **state)
{
    /* probabilities ~ 0.64, 0.24, 0.09, 0.03 */
    float logits[4] = {3.0f, 2.0f, 1.0f, -0.1f};
    float scratch[8];
    struct kk_sampling p = {.temperature = 1.0f, .top_p = 0.8f};
    uint64_t rng = kk_rng_seed(5);
    int counts[4] = {0};
    for (int i = 0; i < 20000; i++)
        counts[kk_sample(&p, &rng, logits, 4, scratch)]++;
    assert_int_equal(counts[2], 0);
    assert_int_equal(counts[3], 0);
    assert_true(counts[0] > counts[1] && counts[1] > 0);
}

/* ---- the nucleus against a sort of the whole vocabulary ---- */

static int more_likely_first(const void *a, const void *b, void *probs)
{
    const float *p = probs;
    const int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    if (p[ia] != p[ib])
        return p[ia] > p[ib] ? -1 : 1;
    return ia - ib;
}

/* The nucleus by definition: the softmax's weights at the temperature
 * (sample_weights, checked against expf below), the whole
 * vocabulary sorted (most likely first, ties by id), the first k tokens
 * whose running share reaches top_p (at least one) kept and renormalised. */
static void reference_probs(const struct kk_sampling *p, const float *logits,
                            int32_t n, float *probs)
{
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
    const double sum = sample_weights(logits, n, p->temperature, probs);
    for (int32_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, more_likely_first, probs);
    double mass = 0.0, keep = 0.0;
    int32_t k = 0;
    while (k < n && (k == 0 || mass < p->top_p)) {
        mass += probs[order[k]] / sum;
        keep += probs[order[k++]];
    }
    for (int32_t i = k; i < n; i++)
        probs[order[i]] = 0.0f;
    for (int32_t i = 0; i < n; i++)
        probs[i] *= (float)(1.0 / keep);
    free(order);
}

/* Logits of one of several shapes: spread over `spread` (flat to peaked),
 * on a grid of quarters (ties), with some -inf (masked tokens). */
static void make_logits(float *logits, int32_t n, int shape, double spread,
                        uint64_t *rng)
{
    for (int32_t i = 0; i < n; i++) {
        double u = sample_uniform(rng);
        double v = shape == 0   ? u * spread
                   : shape == 1 ? floor(u * spread * 4.0) / 4.0
                   : shape == 2 ? spread * pow(u, 8.0)   /* few high */
                                : (u < 0.3 ? -INFINITY : u * spread);
        logits[i] = (float)v;
    }
    if (shape == 3)
        logits[n / 2] = 1.0f;   /* at least one finite */
}

/* Every kept token and every probability, to the bit, as the whole sort
 * gives them: over vocabularies of 1 to 128k, flat to peaked, with ties
 * and masked tokens, from a nucleus of one token to nearly all. */
static void test_nucleus_is_the_sorted_vocabularys_prefix(void **state)
{
    static const int32_t sizes[] = {1, 2, 7, 1000, 8192, 32003, 128256};
    static const float temps[] = {0.3f, 0.8f, 1.5f};
    static const float tops[] = {0.0f, 0.01f, 0.5f, 0.9f, 0.95f, 0.999f,
                                 0.99999994f};
    static const double spreads[] = {0.05, 3.0, 12.0, 60.0};
    uint64_t rng = kk_rng_seed(11);
    int cases = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        const int32_t n = sizes[z];
        float *logits = malloc(sizeof(float) * (size_t)n);
        float *want = malloc(sizeof(float) * (size_t)n);
        float *got = malloc(sizeof(float) * (size_t)n);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
        for (int shape = 0; shape < 4; shape++) {
            for (size_t w = 0; w < sizeof spreads / sizeof spreads[0]; w++) {
                make_logits(logits, n, shape, spreads[w], &rng);
                /* the largest vocabulary at one setting in three: enough
                 * to cross the buckets, and the test stays quick */
                for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
                    for (size_t q = 0; q < sizeof tops / sizeof tops[0]; q++) {
                        if (n > 100000 && (t + q + w) % 3)
                            continue;
                        struct kk_sampling p = {.temperature = temps[t],
                                                .top_p = tops[q]};
                        reference_probs(&p, logits, n, want);
                        sample_probs(&p, logits, n, got, order);
                        assert_memory_equal(got, want,
                                            sizeof(float) * (size_t)n);
                        cases++;
                    }
                }
            }
        }
        free(logits);
        free(want);
        free(got);
        free(order);
    }
    assert_true(cases > 500);
}

/* The softmax's weights are e^((logit - max) / temperature) within a few
 * ulp of libm's expf, exactly 1 at the maximum and 0 for -inf and below
 * e^-87.3, where expf leaves the normal floats; the same bits for a logit
 * wherever it falls (the vector body or the last few); the sum is theirs. */
static void test_weights_are_the_exponentials(void **state)
{
    enum { N = 1003 };
    static float logits[N], w[N], shifted[N];
    for (int32_t i = 0; i < N; i++)
        logits[i] = -95.0f * (float)i / (N - 1) + 0.37f * sinf((float)i);
    logits[10] = 1.0f;   /* the maximum */
    logits[500] = -INFINITY;
    for (int t = 0; t < 3; t++) {
        const float temp = t == 0 ? 1.0f : t == 1 ? 0.7f : 2.5f;
        const double sum = sample_weights(logits, N, temp, w);
        double want_sum = 0.0;
        for (int32_t i = 0; i < N; i++) {
            const float x = (logits[i] - 1.0f) / temp;
            const float e = expf(x);
            if (x < -87.3f)
                assert_true(w[i] == 0.0f);
            else
                assert_true(fabsf(w[i] - e) <= 4.0f * 0x1p-24f * e);
            want_sum += w[i];
        }
        assert_true(w[10] == 1.0f);
        assert_true(w[500] == 0.0f);
        assert_true(fabs(sum - want_sum) <= 1e-12 * want_sum);
        /* the same logits three places on: the tail becomes the body */
        sample_weights(logits + 3, N - 3, temp, shifted);
        assert_memory_equal(shifted, w + 3, sizeof(float) * (N - 3));
    }
    for (int32_t i = 0; i < N; i++)
        logits[i] = -200.0f;
    logits[N - 1] = 0.0f;   /* far below FLT_MIN: 0, not a subnormal */
    sample_weights(logits, N, 1.0f, w);
    assert_true(w[0] == 0.0f && w[N - 1] == 1.0f);
}

/* top_p 0 leaves the most likely token alone (it used to leave nothing,
 * and every draw fell on the last id). */
static void test_top_p_zero_is_the_most_likely_token(void **state)
{
    float logits[5] = {0.1f, 2.5f, 2.4f, -3.0f, 1.0f};
    float scratch[10];
    struct kk_sampling p = {.temperature = 1.0f, .top_p = 0.0f};
    uint64_t rng = kk_rng_seed(2);
    for (int i = 0; i < 100; i++)
        assert_int_equal(kk_sample(&p, &rng, logits, 5, scratch), 1);
}

/* A NaN among the logits (a broken model) still gives a token of the
 * vocabulary, and touches nothing outside the buffers (ASan). */
static void test_nan_logits_still_give_a_token(void **state)
{
    enum { N = 3000 };
    float *logits = malloc(N * sizeof(float));
    float *scratch = malloc(2 * N * sizeof(float));
    uint64_t rng = kk_rng_seed(4);
    for (int i = 0; i < N; i++)
        logits[i] = (float)sample_uniform(&rng) * 5.0f;
    logits[17] = NAN;
    logits[2500] = NAN;
    struct kk_sampling p = {.temperature = 0.7f, .top_p = 0.9f};
    for (int i = 0; i < 20; i++) {
        int32_t id = kk_sample(&p, &rng, logits, N, scratch);
        assert_true(id >= 0 && id < N);
    }
    free(logits);
    free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_picks_argmax_and_lowest_id_on_ties),
        cmocka_unit_test(test_greedy_over_a_vocabulary_keeps_scan_semantics),
        cmocka_unit_test(test_same_seed_same_tokens),
        cmocka_unit_test(test_sampling_follows_softmax),
        cmocka_unit_test(test_top_p_excludes_the_tail),
        cmocka_unit_test(test_weights_are_the_exponentials),
        cmocka_unit_test(test_nucleus_is_the_sorted_vocabularys_prefix),
        cmocka_unit_test(test_top_p_zero_is_the_most_likely_token),
        cmocka_unit_test(test_nan_logits_still_give_a_token),
    };
    return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
