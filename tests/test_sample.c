/* test_sample.c — choosing tokens: greedy ties, temperature, top-p, seeds. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kakeya.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_picks_argmax_and_lowest_id_on_ties),
        cmocka_unit_test(test_greedy_over_a_vocabulary_keeps_scan_semantics),
        cmocka_unit_test(test_same_seed_same_tokens),
        cmocka_unit_test(test_sampling_follows_softmax),
        cmocka_unit_test(test_top_p_excludes_the_tail),
    };
    return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
