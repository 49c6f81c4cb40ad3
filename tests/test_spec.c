/* test_spec.c — speculative decoding is lossless and its statistics honest.
 *
 * Greedy: for every proposer and every block length 1..16 the output is the
 * plain greedy output, token for token, on several golden models. A draft
 * that is the target itself gets every token accepted; a random draft gets
 * almost none accepted and changes nothing. Sampling: the acceptance rule
 * keeps the target's distribution (chi-square on real models' rows, with
 * drafts close to and far from the target). Greedy decoding's rows come
 * back as their argmax, the logits' own. After generation the KV cache
 * holds exactly the committed tokens. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kakeya.h"
#include "kv.h"
#include "sample.h"
#include "session.h"
#include "spec.h"
#include "testutil.h"

enum { N_GEN = 32 };

struct run {
    int32_t ids[256];
    int n;
    int stop_after;          /* request a stop after this many (0: never) */
    _Atomic(bool) *stop;
};

static bool collect(void *ud, int32_t id, const char *text,
                    const struct kk_stats *st)
{
    struct run *r = ud;
    if (id >= 0 && r->n < 256)
        r->ids[r->n++] = id;
    if (r->stop_after && r->n == r->stop_after)
        atomic_store(r->stop, true);
    return true;
}


/* Small batches keep every forward on the same kernels, so a draft that is
 * the target reproduces the target bit for bit. */
static struct kk_session *new_session(struct kk_model *m)
{
    struct kk_session_params sp = {.n_ctx = 512, .n_threads = 2,
                                   .max_batch = 24};
    struct kk_session *s;
    struct kk_error err;
    if (kk_session_new(m, &sp, &s, &err))
        fail_msg("%s", err.msg);
    return s;
}

/* Greedy generation of N_GEN tokens, or sampled as `sampling` says. */
static void generate_with(struct kk_model *m, struct kk_session *draft,
                          const int32_t *prompt, int n_prompt,
                          enum kk_spec_mode mode, int block,
                          const struct kk_sampling *sampling,
                          struct run *out, struct kk_stats *st)
{
    struct kk_session *s = new_session(m);
    struct kk_generate_params gp = {.n_predict = N_GEN, .spec = mode,
                                    .draft = draft, .block = block};
    if (sampling)
        gp.sampling = *sampling;
    struct kk_error err;
    out->n = 0;
    if (kk_generate(s, prompt, n_prompt, &gp, collect, out, st, &err))
        fail_msg("%s", err.msg);
    kk_session_free(s);
}

static void generate(struct kk_model *m, struct kk_session *draft,
                     const int32_t *prompt, int n_prompt,
                     enum kk_spec_mode mode, int block, struct run *out,
                     struct kk_stats *st)
{
    generate_with(m, draft, prompt, n_prompt, mode, block, NULL, out, st);
}

static const char *const prompts[] = {
    "The capital of France is",
    "one two three four one two three four one two three four one two",
};

/* Block lengths to try: every one (0 = adaptive) on the small-vocabulary
 * model; a spread on the others, whose 50k-260k-row output matrices make
 * each step cost far more. */
static const int all_blocks[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                 13, 14, 15, 16};
static const int some_blocks[] = {0, 1, 3, 8, 16};

static void check_lossless(const char *model, const int *blocks, int n_blocks)
{
    struct kk_model *m = testutil_open_golden(model);
    if (!m)
        skip();
    for (size_t pi = 0; pi < sizeof prompts / sizeof prompts[0]; pi++) {
        int32_t prompt[256];
        int n_prompt = testutil_prompt(m, prompts[pi], prompt);
        struct run plain, spec;
        struct kk_stats st;
        generate(m, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &plain, &st);
        assert_int_equal(plain.n, N_GEN);
        assert_true(fabs(st.tau - 1.0) < 1e-9);
        for (int mode = KK_SPEC_NGRAM; mode <= KK_SPEC_AUTO; mode++) {
            for (int bi = 0; bi < n_blocks; bi++) {
                int L = blocks[bi];
                struct kk_session *draft = mode == KK_SPEC_NGRAM
                                               ? NULL : new_session(m);
                generate(m, draft, prompt, n_prompt, (enum kk_spec_mode)mode,
                         L, &spec, &st);
                assert_int_equal(spec.n, plain.n);
                assert_memory_equal(spec.ids, plain.ids,
                                    sizeof(int32_t) * (size_t)plain.n);
                /* The draft is the target: nothing it proposes is wrong. */
                if (mode != KK_SPEC_NGRAM)
                    assert_int_equal(st.accepted_by[KK_PROPOSER_DRAFT] +
                                         st.accepted_by[KK_PROPOSER_NGRAM],
                                     st.n_accepted);
                if (mode == KK_SPEC_DRAFT) {
                    assert_int_equal(st.n_accepted, st.n_proposed);
                    assert_true(st.tau > 1.5);
                }
                kk_session_free(draft);
            }
        }
    }
    kk_model_close(m);
}

/* Sampled generation with the n-gram's drafts commits plain sampled
 * generation's tokens, one seed, token for token: a row's draw takes the
 * uniform plain decoding takes at its position, and a draft is accepted
 * when the draw is the draft (generate.c). At a low temperature and a
 * repetitive prompt drafts are accepted too, which the test asserts. */
static void check_sampled_ngram_lossless(const char *model, const int *blocks,
                                         int n_blocks)
{
    struct kk_model *m = testutil_open_golden(model);
    if (!m)
        skip();
    const struct kk_sampling temps[] = {
        {.temperature = 0.8f, .top_p = 0.9f, .seed = 5},
        {.temperature = 0.2f, .top_p = 1.0f, .seed = 6},
    };
    int proposed = 0, accepted = 0;
    for (size_t pi = 0; pi < sizeof prompts / sizeof prompts[0]; pi++) {
        int32_t prompt[256];
        int n_prompt = testutil_prompt(m, prompts[pi], prompt);
        for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
            struct run plain, spec;
            struct kk_stats st;
            generate_with(m, NULL, prompt, n_prompt, KK_SPEC_OFF, 0,
                          &temps[ti], &plain, &st);
            assert_int_equal(plain.n, N_GEN);
            for (int bi = 0; bi < n_blocks; bi++) {
                generate_with(m, NULL, prompt, n_prompt, KK_SPEC_NGRAM,
                              blocks[bi], &temps[ti], &spec, &st);
                assert_int_equal(spec.n, plain.n);
                for (int i = 0; i < plain.n; i++)
                    if (spec.ids[i] != plain.ids[i])
                        fail_msg("%s, T %g, block %d: token %d is %d, plain "
                                 "sampling's %d", model,
                                 temps[ti].temperature, blocks[bi], i,
                                 spec.ids[i], plain.ids[i]);
                proposed += st.n_proposed;
                accepted += st.n_accepted;
            }
        }
    }
    printf("  %s: %d drafts proposed, %d accepted\n", model, proposed,
           accepted);
    assert_true(accepted > 0);
    assert_true(accepted < proposed);
    kk_model_close(m);
}

static void test_sampled_ngram_spec_equals_plain_llama256(void **state)
{
    check_sampled_ngram_lossless("llama256-f32", all_blocks,
                                 (int)(sizeof all_blocks / sizeof(int)));
}

static void test_sampled_ngram_spec_equals_plain_smollm2(void **state)
{
    check_sampled_ngram_lossless("llama-smollm2-f32", some_blocks,
                                 (int)(sizeof some_blocks / sizeof(int)));
}

static void test_greedy_spec_equals_plain_llama256(void **state)
{
    check_lossless("llama256-f32", all_blocks,
                   (int)(sizeof all_blocks / sizeof(int)));
}

static void test_greedy_spec_equals_plain_smollm2(void **state)
{
    check_lossless("llama-smollm2-f32", some_blocks,
                   (int)(sizeof some_blocks / sizeof(int)));
}

static void test_greedy_spec_equals_plain_qwen3(void **state)
{
    check_lossless("qwen3-f32", some_blocks,
                   (int)(sizeof some_blocks / sizeof(int)));
}

static void test_greedy_spec_equals_plain_gemma3(void **state)
{
    check_lossless("gemma3-f32", some_blocks,
                   (int)(sizeof some_blocks / sizeof(int)));
}

/* A random model with the target's vocabulary, as a deliberately bad draft. */
static struct kk_model *make_bad_draft(const char *vocab_model, char *path)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/models/%s.gguf", vocab_model);
    const char *vocab = testutil_shared_path(rel);
    if (!vocab)
        return NULL;
    char vocab_path[4096];
    snprintf(vocab_path, sizeof vocab_path, "%s", vocab);
    snprintf(path, 4096, "%s", testutil_tmp_path("bad-draft.gguf"));
    struct kk_error err;
    if (kk_make_model("tiny-llama", "F32", vocab_path, path, 99, &err))
        fail_msg("%s", err.msg);
    struct kk_model *d;
    if (kk_model_open(path, &d, &err))
        fail_msg("%s", err.msg);
    return d;
}

static void test_bad_draft_is_rejected_and_changes_nothing(void **state)
{
    char path[4096];
    struct kk_model *m = testutil_open_golden("llama256-f32");
    if (!m)
        skip();
    struct kk_model *bad = make_bad_draft("llama256-f32", path);
    struct kk_error err;
    assert_int_equal(kk_check_draft(m, bad, &err), 0);
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompts[0], prompt);
    struct run plain, spec;
    struct kk_stats st;
    generate(m, NULL, prompt, n_prompt, KK_SPEC_OFF, 0, &plain, &st);
    for (int L = 1; L <= 16; L += 5) {
        struct kk_session *ds = new_session(bad);
        generate(m, ds, prompt, n_prompt, KK_SPEC_DRAFT, L, &spec, &st);
        assert_memory_equal(spec.ids, plain.ids, sizeof(int32_t) * N_GEN);
        printf("  bad draft, L=%d: acceptance %.3f, tau %.2f\n", L,
               st.acceptance_rate, st.tau);
        assert_true(st.acceptance_rate < 0.25);
        kk_session_free(ds);
    }
    kk_model_close(bad);
    kk_model_close(m);
    unlink(path);
}

static void test_draft_with_other_vocabulary_is_refused(void **state)
{
    char path[4096];
    struct kk_model *m = testutil_open_golden("llama256-f32");
    struct kk_model *other = testutil_open_golden("llama-smollm2-f32");
    if (!m || !other)
        skip();
    struct kk_error err;
    assert_int_equal(kk_check_draft(m, other, &err), -1);
    assert_non_null(strstr(err.msg, "vocabulary"));
    /* Same size, different tokens: synthetic vocabulary of 512. */
    snprintf(path, sizeof path, "%s", testutil_tmp_path("synthetic.gguf"));
    assert_int_equal(kk_make_model("tiny-llama", "F32", NULL, path, 1, &err), 0);
    struct kk_model *syn;
    assert_int_equal(kk_model_open(path, &syn, &err), 0);
    assert_int_equal(kk_check_draft(m, syn, &err), -1);
    assert_non_null(strstr(err.msg, "token"));
    kk_model_close(syn);
    kk_model_close(other);
    kk_model_close(m);
    unlink(path);
}

/* ---- sampling keeps the target's distribution ---- */

/* The next-token distribution of model m after text, at temperature 1. */
static float *next_token_probs(struct kk_model *m, const char *text, int *n)
{
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, text, prompt);
    struct kk_session *s = new_session(m);
    struct kk_error err;
    assert_int_equal(kk_session_eval(s, prompt, n_prompt, false, NULL, NULL,
                                     &err), 0);
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    *n = info.n_vocab;
    float *p = malloc(sizeof(float) * (size_t)*n);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)*n);
    struct kk_sampling sp = {.temperature = 1.0f, .top_p = 1.0f};
    sample_probs(&sp, kk_session_logits(s, 0), *n, p, order);
    free(order);
    kk_session_free(s);
    return p;
}

/* Chi-square statistic of counts against probabilities p (bins with an
 * expected count under 5 pooled), and its degrees of freedom. */
static double chi_square(const int *counts, const float *p, int n, int total,
                         int *df)
{
    double chi = 0.0, pool_obs = 0.0, pool_exp = 0.0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = (double)p[i] * total;
        if (e < 5.0) {
            pool_obs += counts[i];
            pool_exp += e;
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_exp > 0.0) {
        chi += (pool_obs - pool_exp) * (pool_obs - pool_exp) / pool_exp;
        bins++;
    }
    *df = bins - 1;
    return chi;
}

/* Critical value at significance 0.001 (Wilson-Hilferty). */
static double chi_critical(int df)
{
    double k = df, z = 3.09;
    double t = 1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k));
    return k * t * t * t;
}

static void check_sampling(const float *p, const float *q, int n)
{
    enum { TRIALS = 200000 };
    int *counts = calloc((size_t)n, sizeof(int));
    float *resid = malloc(sizeof(float) * (size_t)n);
    uint64_t rng = kk_rng_seed(2024);
    for (int t = 0; t < TRIALS; t++) {
        int32_t d = sample_from(q, n, &rng), out;
        spec_accept(p, q, d, n, &rng, resid, &out);
        counts[out]++;
    }
    int df;
    double chi = chi_square(counts, p, n, TRIALS, &df);
    printf("  chi-square %.1f with %d degrees of freedom (critical %.1f)\n",
           chi, df, chi_critical(df));
    assert_true(chi < chi_critical(df));
    free(resid);
    free(counts);
}

static void test_rejection_sampling_keeps_target_distribution(void **state)
{
    char path[4096];
    struct kk_model *target = testutil_open_golden("llama256-f32");
    struct kk_model *close = testutil_open_golden("llama256-Q4_0");
    if (!target || !close)
        skip();
    struct kk_model *far = make_bad_draft("llama256-f32", path);
    const char *text = "The capital of France is";
    int n;
    float *p = next_token_probs(target, text, &n);
    float *qc = next_token_probs(close, text, &n);
    float *qf = next_token_probs(far, text, &n);

    check_sampling(p, qc, n);   /* a close draft */
    check_sampling(p, qf, n);   /* a far draft */

    /* The test has teeth: the far draft's own samples fail it. */
    enum { TRIALS = 200000 };
    int *counts = calloc((size_t)n, sizeof(int));
    uint64_t rng = kk_rng_seed(7);
    for (int t = 0; t < TRIALS; t++)
        counts[sample_from(qf, n, &rng)]++;
    int df;
    assert_true(chi_square(counts, p, n, TRIALS, &df) > chi_critical(df));
    free(counts);
    free(p);
    free(qc);
    free(qf);
    kk_model_close(far);
    kk_model_close(close);
    kk_model_close(target);
    unlink(path);
}

/* ---- greedy decoding reads only each row's argmax ---- */

/* What greedy decoding asks of a pass (kk_session_eval_greedy), each row's
 * argmax, is what the host would choose from its logits. */
static void test_greedy_choices_are_the_logits_argmax(void **state)
{
    (void)state;
    struct kk_model *m = testutil_open_golden("llama-smollm2-f32");
    if (!m)
        skip();
    testutil_check_greedy_rows(m, KK_BACKEND_CPU, prompts[0]);
    kk_model_close(m);
}

/* Sampled decoding on the CPU draws the tokens kk_sample draws from each
 * step's logits, one seed, whether the draw is asked of the pass
 * (kk_session_eval_sample) or made by kk_generate. */
static void test_sampled_draws_are_kk_sample_draws(void **state)
{
    (void)state;
    struct kk_model *m = testutil_open_default_model();
    testutil_check_sampled_draws(m, KK_BACKEND_CPU, prompts[0]);
    kk_model_close(m);
}

/* ---- the cache holds exactly the committed tokens ---- */

static void check_cache_matches_fresh(struct kk_model *m,
                                      struct kk_session *s)
{
    struct kk_session *fresh = new_session(m);
    struct kk_error err;
    int n = s->kv->n_tokens;
    assert_true(n == s->n_tokens || n == s->n_tokens - 1);
    assert_int_equal(kk_session_eval(fresh, s->tokens, n, false, NULL, NULL,
                                     &err), 0);
    const struct kv_cache *a = s->kv, *b = fresh->kv;
    for (int il = 0; il < a->n_layer; il++)
        for (int pos = 0; pos < n; pos++) {
            assert_memory_equal(kv_key_row(a, il, pos), kv_key_row(b, il, pos),
                                a->row_bytes);
            assert_memory_equal(kv_value_row(a, il, pos),
                                kv_value_row(b, il, pos), a->row_bytes);
        }
    kk_session_free(fresh);
}

static void test_cache_holds_exactly_committed_tokens(void **state)
{
    struct kk_model *m = testutil_open_golden("llama256-f32");
    if (!m)
        skip();
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompts[1], prompt);
    for (int mode = KK_SPEC_OFF; mode <= KK_SPEC_DRAFT; mode++) {
        for (int L = 1; L <= 16; L += 3) {
            for (int n_predict = 1; n_predict <= 33; n_predict += 8) {
                struct kk_session *s = new_session(m);
                struct kk_session *d = new_session(m);
                struct kk_generate_params gp = {
                    .n_predict = n_predict, .spec = (enum kk_spec_mode)mode,
                    .draft = d, .block = L};
                struct run r = {.n = 0};
                struct kk_error err;
                assert_int_equal(kk_generate(s, prompt, n_prompt, &gp,
                                             collect, &r, NULL, &err), 0);
                assert_int_equal(r.n, n_predict);
                assert_int_equal(s->n_tokens, n_prompt + n_predict);
                assert_memory_equal(s->tokens + n_prompt, r.ids,
                                    sizeof(int32_t) * (size_t)r.n);
                check_cache_matches_fresh(m, s);
                kk_session_free(d);
                kk_session_free(s);
            }
        }
    }
    kk_model_close(m);
}

static void test_stop_request_ends_at_a_step_boundary(void **state)
{
    struct kk_model *m = testutil_open_golden("llama256-f32");
    if (!m)
        skip();
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompts[1], prompt);
    _Atomic(bool) stop = false;
    struct kk_session *s = new_session(m), *d = new_session(m);
    struct kk_generate_params gp = {.n_predict = 100, .spec = KK_SPEC_DRAFT,
                                    .draft = d, .block = 4, .stop = &stop};
    struct run r = {.n = 0, .stop_after = 5, .stop = &stop};
    struct kk_stats st;
    struct kk_error err;
    assert_int_equal(kk_generate(s, prompt, n_prompt, &gp, collect, &r, &st,
                                 &err), 0);
    assert_true(st.stopped_by_request);
    assert_true(r.n >= 5 && r.n < 5 + 5); /* at most one more block */
    assert_int_equal(s->n_tokens, n_prompt + r.n);
    check_cache_matches_fresh(m, s);
    kk_session_free(d);
    kk_session_free(s);
    kk_model_close(m);
}

/* Generation that fills the context stops there and says so, with every
 * committed token in the history. */
static void test_full_context_stops_and_says_so(void **state)
{
    struct kk_model *m = testutil_open_golden("llama256-f32");
    if (!m)
        skip();
    struct kk_session_params sp = {.n_ctx = 48, .n_threads = 2};
    struct kk_session *s, *d;
    struct kk_error err;
    assert_int_equal(kk_session_new(m, &sp, &s, &err), 0);
    assert_int_equal(kk_session_new(m, &sp, &d, &err), 0);
    int32_t prompt[256];
    int n_prompt = testutil_prompt(m, prompts[1], prompt);
    struct kk_generate_params gp = {.n_predict = 200, .spec = KK_SPEC_DRAFT,
                                    .draft = d, .block = 8};
    struct run r = {.n = 0};
    struct kk_stats st;
    assert_int_equal(kk_generate(s, prompt, n_prompt, &gp, collect, &r, &st,
                                 &err), 0);
    assert_true(st.stopped_at_context_limit);
    assert_int_equal(kk_session_n_tokens(s), 48);
    assert_int_equal(r.n, 48 - n_prompt);
    kk_session_free(d);
    kk_session_free(s);
    kk_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_spec_equals_plain_llama256),
        cmocka_unit_test(test_sampled_ngram_spec_equals_plain_llama256),
        cmocka_unit_test(test_sampled_ngram_spec_equals_plain_smollm2),
        cmocka_unit_test(test_greedy_spec_equals_plain_smollm2),
        cmocka_unit_test(test_greedy_spec_equals_plain_qwen3),
        cmocka_unit_test(test_greedy_spec_equals_plain_gemma3),
        cmocka_unit_test(test_bad_draft_is_rejected_and_changes_nothing),
        cmocka_unit_test(test_draft_with_other_vocabulary_is_refused),
        cmocka_unit_test(test_rejection_sampling_keeps_target_distribution),
        cmocka_unit_test(test_greedy_choices_are_the_logits_argmax),
        cmocka_unit_test(test_sampled_draws_are_kk_sample_draws),
        cmocka_unit_test(test_cache_holds_exactly_committed_tokens),
        cmocka_unit_test(test_stop_request_ends_at_a_step_boundary),
        cmocka_unit_test(test_full_context_stops_and_says_so),
    };
    return cmocka_run_group_tests_name("spec", tests, NULL, NULL);
}
