/* test_vulkan.c — the engine on a Vulkan device computes what it computes
 * on the CPU, and what llama.cpp computes.
 *
 * On the first Vulkan device (Mesa's lavapipe in CI, a GPU elsewhere):
 *   - every golden model reproduces llama.cpp (tests/lib/golden_check.h:
 *     tokens, teacher-forced logits within the type's tolerance, greedy
 *     continuations, full-vocabulary rows);
 *   - speculative greedy output is the plain greedy output, token for token,
 *     for the n-gram and draft proposers and several block lengths, also
 *     past 512 positions, where attention splits a row; and sampled output
 *     with the n-gram's drafts is plain sampled output, one seed, drawn
 *     on the device and on the host;
 *   - a sliding-window ring cache gives the logits of a full cache over a
 *     context many times the window, with speculative trims in between;
 *   - a checkpoint saved from the device and restored into a new session
 *     continues exactly as an uninterrupted run;
 *   - an f16 and a q8_0 cache on the device give the CPU's greedy tokens;
 *   - a row's greedy choice made on the device (argmax.comp) is the
 *     argmax of its logits, and a draw made there (sample.comp) the
 *     host's draw from them;
 *   - a context longer than the device binds in one layer's keys is
 *     refused as the session opens, with the --ctx that fits.
 * Without a Vulkan loader or device every test prints a loud SKIP line. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "golden_check.h"
#include "kakeya.h"
#include "testutil.h"

enum { N_GEN = 24 };

static bool have_device(void)
{
    struct kk_vk_device_info d[4];
    struct kk_error err = {{0}};
    int n = kk_vulkan_devices(d, 4, &err);
    if (n <= 0 || !d[0].is_usable) {
        fprintf(stderr, "SKIP (no Vulkan device): %s\n",
                n < 0 ? err.msg : n == 0 ? "the loader reports no device"
                                         : d[0].why_not);
        return false;
    }
    return true;
}

/* Golden model `name`, or a skip (a loud line says why) when there is no
 * Vulkan device or no such model. */
static struct kk_model *golden_on_device(const char *name)
{
    if (!have_device())
        skip();
    struct kk_model *m = testutil_open_golden(name);
    if (!m)
        skip();
    return m;
}

static void test_golden_model_on_vulkan(void **state)
{
    if (!have_device())
        skip();
    golden_check_model(*state, KK_BACKEND_VULKAN);
}

static struct kk_session *new_session_ctx(struct kk_model *m,
                                          enum kk_backend b,
                                          enum kk_kv_type kv,
                                          bool full_sliding, int n_ctx)
{
    struct kk_session_params sp = {.n_ctx = n_ctx, .n_threads = 2,
                                   .max_batch = 24, .backend = b,
                                   .kv_type = kv,
                                   .kv_full_sliding = full_sliding};
    struct kk_session *s;
    struct kk_error err = {{0}};
    if (kk_session_new(m, &sp, &s, &err))
        fail_msg("%s", err.msg);
    return s;
}

static struct kk_session *new_session(struct kk_model *m, enum kk_backend b,
                                      enum kk_kv_type kv, bool full_sliding)
{
    return new_session_ctx(m, b, kv, full_sliding, 512);
}

struct run {
    int32_t ids[256];
    int n;
};

static bool collect(void *ud, int32_t id, const char *text,
                    const struct kk_stats *st)
{
    (void)text, (void)st;
    struct run *r = ud;
    if (id >= 0 && r->n < 256)
        r->ids[r->n++] = id;
    return true;
}

/* Greedy generation of N_GEN tokens, or sampled as `sampling` says (then
 * *st gets the run's figures). */
static void generate_with(struct kk_session *s, struct kk_session *draft,
                          const int32_t *prompt, int n_prompt,
                          enum kk_spec_mode mode, int block,
                          const struct kk_sampling *sampling,
                          struct run *out, struct kk_stats *st)
{
    struct kk_generate_params gp = {.n_predict = N_GEN, .spec = mode,
                                    .draft = draft, .block = block};
    if (sampling)
        gp.sampling = *sampling;
    struct kk_error err = {{0}};
    out->n = 0;
    if (kk_generate(s, prompt, n_prompt, &gp, collect, out, st, &err))
        fail_msg("%s", err.msg);
}

static void generate(struct kk_session *s, struct kk_session *draft,
                     const int32_t *prompt, int n_prompt,
                     enum kk_spec_mode mode, int block, struct run *out)
{
    generate_with(s, draft, prompt, n_prompt, mode, block, NULL, out, NULL);
}

static const char *const prompt_text =
    "one two three four one two three four one two three four one two";

/* m's greedy output after prompt on the Vulkan backend (sessions of n_ctx)
 * with n-gram and draft speculation, in blocks of 0 (adaptive), 1, 4 and
 * 16, equals its plain greedy output. */
static void check_speculative_equals_plain_after(struct kk_model *m,
                                                 const int32_t *prompt,
                                                 int n_prompt, int n_ctx)
{
    struct run plain, spec;
    struct kk_session *s =
        new_session_ctx(m, KK_BACKEND_VULKAN, KK_KV_F16, false, n_ctx);
    generate(s, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &plain);
    kk_session_free(s);
    assert_int_equal(plain.n, N_GEN);
    static const int blocks[] = {0, 1, 4, 16};
    for (int mode = KK_SPEC_NGRAM; mode <= KK_SPEC_DRAFT; mode++) {
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            s = new_session_ctx(m, KK_BACKEND_VULKAN, KK_KV_F16, false,
                                n_ctx);
            struct kk_session *draft =
                mode == KK_SPEC_NGRAM
                    ? NULL : new_session_ctx(m, KK_BACKEND_VULKAN, KK_KV_F16,
                                             false, n_ctx);
            generate(s, draft, prompt, n_prompt, (enum kk_spec_mode)mode,
                     blocks[bi], &spec);
            assert_int_equal(spec.n, plain.n);
            assert_memory_equal(spec.ids, plain.ids,
                                sizeof(int32_t) * (size_t)plain.n);
            kk_session_free(draft);
            kk_session_free(s);
        }
    }
}

static void check_speculative_equals_plain(struct kk_model *m)
{
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompt_text, prompt);
    check_speculative_equals_plain_after(m, prompt, n_prompt, 512);
}

/* Speculative greedy output equals plain greedy output on the Vulkan
 * backend: with the forms the device picks, and with the integer forms
 * taking the Q8_0 products of normed x in decoding and verifying and the
 * float forms the rest, as on a GPU (KAKEYA_VK_QX=1: the golden model's
 * rows are narrower than the width they take by themselves, and lavapipe
 * runs them only when asked). */
static void test_speculative_greedy_equals_plain_on_vulkan(void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("llama256-Q8_0");
    check_speculative_equals_plain(m);
    setenv("KAKEYA_VK_QX", "1", 1);
    check_speculative_equals_plain(m);
    unsetenv("KAKEYA_VK_QX");
    kk_model_close(m);
}

/* The same past 512 positions, where attention_rope cuts a row into
 * splits whose partials its last workgroup adds (vk_shaders.h): a prompt of
 * 500 tokens (the short prompt's, over and over), so that decoding
 * crosses 512 and verify blocks hold rows on both sides of it. */
static void test_speculative_greedy_equals_plain_past_attention_splits(
    void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("llama256-Q8_0");
    int32_t unit[256], prompt[500];
    const int n_unit = testutil_prompt(m, prompt_text, unit);
    assert_true(n_unit > 1);
    prompt[0] = unit[0];
    for (int i = 1; i < 500; i++)
        prompt[i] = unit[1 + (i - 1) % (n_unit - 1)];
    check_speculative_equals_plain_after(m, prompt, 500, 1024);
    kk_model_close(m);
}

/* Sampled generation with the n-gram's drafts gives plain sampled
 * generation's tokens on the Vulkan backend, one seed: every row of a
 * verify block drawn on the device (sample.comp, several rows a pass),
 * and with KAKEYA_VK_SAMPLE=0 from the logits on the host. Drafts are
 * accepted at the low temperature, which the test asserts. */
static void check_sampled_ngram_equals_plain(struct kk_model *m,
                                             const int32_t *prompt,
                                             int n_prompt)
{
    const struct kk_sampling temps[] = {
        {.temperature = 0.8f, .top_p = 0.9f, .seed = 5},
        {.temperature = 0.2f, .top_p = 1.0f, .seed = 6},
    };
    static const int blocks[] = {0, 1, 4, 16};
    int accepted = 0;
    for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
        struct run plain, spec;
        struct kk_stats st;
        struct kk_session *s =
            new_session_ctx(m, KK_BACKEND_VULKAN, KK_KV_F16, false, 512);
        generate_with(s, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &temps[ti],
                      &plain, &st);
        kk_session_free(s);
        assert_int_equal(plain.n, N_GEN);
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            s = new_session_ctx(m, KK_BACKEND_VULKAN, KK_KV_F16, false, 512);
            generate_with(s, NULL, prompt, n_prompt, KK_SPEC_NGRAM,
                          blocks[bi], &temps[ti], &spec, &st);
            kk_session_free(s);
            assert_int_equal(spec.n, plain.n);
            for (int i = 0; i < plain.n; i++)
                if (spec.ids[i] != plain.ids[i])
                    fail_msg("T %g, block %d: token %d is %d, plain "
                             "sampling's %d", temps[ti].temperature,
                             blocks[bi], i, spec.ids[i], plain.ids[i]);
            accepted += st.n_accepted;
        }
    }
    assert_true(accepted > 0);
}

static void test_sampled_ngram_speculation_equals_plain_on_vulkan(
    void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("llama256-Q8_0");
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompt_text, prompt);
    check_sampled_ngram_equals_plain(m, prompt, n_prompt);
    setenv("KAKEYA_VK_SAMPLE", "0", 1);
    check_sampled_ngram_equals_plain(m, prompt, n_prompt);
    unsetenv("KAKEYA_VK_SAMPLE");
    kk_model_close(m);
}

/* The largest difference between two logits rows. */
static float max_diff(const float *a, const float *b, int n)
{
    float worst = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

/* gemma3's golden model slides a window of 8 on 5 of its 6 layers: feed
 * 200 tokens in verify-sized blocks, trimming a rejected tail after each,
 * and compare every block's logits between a ring and a full cache. */
static void test_ring_cache_matches_full_cache_on_vulkan(void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("gemma3-f32");
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_session *ring = new_session(m, KK_BACKEND_VULKAN, KK_KV_F32,
                                          false);
    struct kk_session *full = new_session(m, KK_BACKEND_VULKAN, KK_KV_F32,
                                          true);
    struct kk_error err = {{0}};
    int32_t block[17];
    uint32_t seed = 12345;
    float worst = 0.0f;
    for (int step = 0; kk_session_n_tokens(ring) < 200; step++) {
        int L = 1 + step % 17;
        for (int i = 0; i < L; i++) {
            seed = seed * 1664525u + 1013904223u;
            block[i] = (int32_t)(seed >> 8) % info.n_vocab;
        }
        assert_int_equal(kk_session_eval(ring, block, L, true, NULL, NULL,
                                         &err), 0);
        assert_int_equal(kk_session_eval(full, block, L, true, NULL, NULL,
                                         &err), 0);
        for (int i = 0; i < L; i++) {
            float d = max_diff(kk_session_logits(ring, i),
                               kk_session_logits(full, i), info.n_vocab);
            worst = d > worst ? d : worst;
        }
        /* Reject the last half of the block, as a verify step would. */
        int keep = kk_session_n_tokens(ring) - L / 2;
        kk_session_trim(ring, keep);
        kk_session_trim(full, keep);
    }
    printf("  ring vs full cache on vulkan: max |diff| %.2e\n", worst);
    assert_true(worst <= 1e-5f);
    kk_session_free(ring);
    kk_session_free(full);
    kk_model_close(m);
}

static void test_checkpoint_restores_on_vulkan_and_continues_exactly(
    void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("llama256-Q4_K_M");
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompt_text, prompt);
    struct run whole, first, rest;
    struct kk_session *s = new_session(m, KK_BACKEND_VULKAN, KK_KV_Q8_0,
                                       false);
    generate(s, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &whole);
    kk_session_free(s);

    /* Half the answer, a checkpoint, then a new session from it. */
    s = new_session(m, KK_BACKEND_VULKAN, KK_KV_Q8_0, false);
    struct kk_generate_params gp = {.n_predict = N_GEN / 2};
    struct kk_error err = {{0}};
    first.n = 0;
    assert_int_equal(kk_generate(s, prompt, n_prompt, &gp, collect, &first,
                                 NULL, &err), 0);
    size_t size = 0;
    void *blob = kk_session_save(s, &size);
    assert_non_null(blob);
    kk_session_free(s);
    s = new_session(m, KK_BACKEND_VULKAN, KK_KV_Q8_0, false);
    assert_int_equal(kk_session_restore(s, blob, size, &err), 0);
    free(blob);
    gp.n_predict = N_GEN - first.n;
    rest.n = 0;
    assert_int_equal(kk_generate(s, NULL, 0, &gp, collect, &rest, NULL, &err),
                     0);
    kk_session_free(s);
    assert_int_equal(first.n + rest.n, whole.n);
    assert_memory_equal(first.ids, whole.ids, sizeof(int32_t) * first.n);
    assert_memory_equal(rest.ids, whole.ids + first.n,
                        sizeof(int32_t) * rest.n);
    kk_model_close(m);
}

/* The device's cache types store what the CPU's store (kv_store is kv.c's
 * store_row to the bit), so greedy tokens agree with the CPU's. */
static void test_cache_types_give_the_cpu_tokens_on_vulkan(void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("qwen3-f32");
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompt_text, prompt);
    static const enum kk_kv_type types[] = {KK_KV_F16, KK_KV_Q8_0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct run cpu, gpu;
        struct kk_session *s = new_session(m, KK_BACKEND_CPU, types[i], false);
        generate(s, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &cpu);
        kk_session_free(s);
        s = new_session(m, KK_BACKEND_VULKAN, types[i], false);
        generate(s, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &gpu);
        kk_session_free(s);
        assert_int_equal(gpu.n, cpu.n);
        assert_memory_equal(gpu.ids, cpu.ids, sizeof(int32_t) * cpu.n);
    }
    kk_model_close(m);
}

/* What greedy decoding reads back from the device, one int a row, is what
 * the host would choose from the row's logits. */
static void test_greedy_choices_are_the_logits_argmax_on_vulkan(void **state)
{
    (void)state;
    struct kk_model *m = golden_on_device("llama-smollm2-f32");
    testutil_check_greedy_rows(m, KK_BACKEND_VULKAN, prompt_text);
    kk_model_close(m);
}

/* What sampled decoding reads back from the device, the token drawn where
 * the logits are, is what the host draws from them with the same seed
 * (the default model: a trained one, whose nucleus is a few tokens, not a
 * random model's half of the vocabulary). */
static void test_sampled_draws_are_the_hosts_on_vulkan(void **state)
{
    (void)state;
    if (!have_device())
        skip();
    struct kk_model *m = testutil_open_default_model();
    testutil_check_sampled_draws(m, KK_BACKEND_VULKAN, prompt_text);
    kk_model_close(m);
}

/* A context whose one layer's keys are more than the device binds at once
 * is refused when the session opens, with the largest --ctx that fits
 * (and that one opens and decodes), not at the first pass with a message
 * blaming kakeya. The default model's two full-attention layers hold every
 * position; its f16 rows are n_head_kv x head_dim x 2 bytes. */
static void test_a_context_past_the_device_range_is_refused_with_the_ctx_that_fits(
    void **state)
{
    (void)state;
    if (!have_device())
        skip();
    struct kk_vk_device_info d[1];
    struct kk_error err = {{0}};
    assert_true(kk_vulkan_devices(d, 1, &err) >= 1);
    if (d[0].binds_bytes > (1ull << 30)) {
        fprintf(stderr, "SKIP: %s binds %.1f GiB at once; a context past it "
                        "takes more host memory than this test should\n",
                d[0].name, (double)d[0].binds_bytes / 1073741824.0);
        skip();
    }
    struct kk_model *m = testutil_open_default_model();
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    const uint64_t row = (uint64_t)info.n_head_kv * info.head_dim * 2;
    struct kk_session_params sp = {.n_ctx = (int)(d[0].binds_bytes / row + 1),
                                   .n_threads = 2,
                                   .backend = KK_BACKEND_VULKAN};
    struct kk_session *s = NULL;
    assert_int_equal(kk_session_new(m, &sp, &s, &err), -1);
    assert_null(s);
    fprintf(stderr, "    %s\n", err.msg);
    assert_non_null(strstr(err.msg, "maxStorageBufferRange"));
    assert_non_null(strstr(err.msg, "--kv q8_0"));
    assert_non_null(strstr(err.msg, "--backend cpu"));
    const char *ctx = strstr(err.msg, "use --ctx ");
    assert_non_null(ctx);
    const int fits = atoi(ctx + strlen("use --ctx "));
    assert_true(fits > 0 && fits < sp.n_ctx);

    sp.n_ctx = fits + 1;
    assert_int_equal(kk_session_new(m, &sp, &s, &err), -1);
    sp.n_ctx = fits;
    if (kk_session_new(m, &sp, &s, &err))
        fail_msg("--ctx %d, which the message offered: %s", fits, err.msg);
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompt_text, prompt);
    struct run out;
    generate(s, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &out);
    assert_true(out.n > 0);
    kk_session_free(s);
    kk_model_close(m);
}

int main(void)
{
    struct CMUnitTest tests[64];
    int n = 0;
    for (int i = 0; i < golden_n_cases && n < 60; i++) {
        struct CMUnitTest t = cmocka_unit_test_prestate(
            test_golden_model_on_vulkan, (void *)&golden_cases[i]);
        t.name = golden_cases[i].model;
        tests[n++] = t;
    }
    const struct CMUnitTest more[] = {
        cmocka_unit_test(test_speculative_greedy_equals_plain_on_vulkan),
        cmocka_unit_test(
            test_speculative_greedy_equals_plain_past_attention_splits),
        cmocka_unit_test(test_ring_cache_matches_full_cache_on_vulkan),
        cmocka_unit_test(
            test_checkpoint_restores_on_vulkan_and_continues_exactly),
        cmocka_unit_test(test_cache_types_give_the_cpu_tokens_on_vulkan),
        cmocka_unit_test(test_greedy_choices_are_the_logits_argmax_on_vulkan),
        cmocka_unit_test(test_sampled_draws_are_the_hosts_on_vulkan),
        cmocka_unit_test(
            test_sampled_ngram_speculation_equals_plain_on_vulkan),
        cmocka_unit_test(
            test_a_context_past_the_device_range_is_refused_with_the_ctx_that_fits),
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        tests[n++] = more[i];
    testutil_filter_from_env();
    return _cmocka_run_group_tests("vulkan", tests, (size_t)n, NULL, NULL);
}
