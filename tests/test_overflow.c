/* test_overflow.c — the context-overflow plan: which turns "drop" leaves
 * out of the model's context, and when nothing but sink+window can help.
 * A fake token counter (a fixed cost per message plus its length) makes
 * the arithmetic exact; one test renders through a real golden model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kakeya.h"
#include "overflow.h"
#include "testutil.h"

/* A rendering costs 1 (BOS) + 3 (generation prompt) + per message 4 +
 * its length. calls counts invocations; fail_at makes one fail. */
struct fake {
    int calls, fail_at;
};

static int fake_count(void *ud, const char *const *roles,
                      const char *const *contents, size_t n,
                      struct kk_error *err)
{
    struct fake *f = ud;
    if (++f->calls == f->fail_at) {
        snprintf(err->msg, sizeof err->msg, "fake failure");
        return -1;
    }
    int t = 4;
    for (size_t i = 0; i < n; i++)
        t += 4 + (int)strlen(contents[i]);
    return t;
}

/* system, then 5 turns of user (10 chars) + assistant (30 chars), then the
 * current question (20 chars): 12 messages. */
static const char *roles12[] = {
    "system", "user", "assistant", "user", "assistant", "user", "assistant",
    "user", "assistant", "user", "assistant", "user"};
static const char *contents12[] = {
    "be brief",
    "0123456789", "012345678901234567890123456789",
    "0123456789", "012345678901234567890123456789",
    "0123456789", "012345678901234567890123456789",
    "0123456789", "012345678901234567890123456789",
    "0123456789", "012345678901234567890123456789",
    "01234567890123456789"};

static int tokens_without(int first, int kept_from)
{
    struct fake f = {0};
    const char *r[12], *c[12];
    size_t k = 0;
    for (int i = 0; i < 12; i++) {
        if (i >= first && i < kept_from)
            continue;
        r[k] = roles12[i], c[k++] = contents12[i];
    }
    return fake_count(&f, r, c, k, NULL);
}

static void test_a_conversation_that_fits_drops_nothing(void **state)
{
    (void)state;
    struct fake f = {0};
    struct overflow_plan p;
    struct kk_error err = {{0}};
    int all = tokens_without(0, 0);
    assert_int_equal(overflow_plan(roles12, contents12, 12, all + 50, 50,
                                   fake_count, &f, &p, &err), 0);
    assert_true(p.fits);
    assert_true(p.can_drop);
    assert_int_equal(p.n_tokens, all);
    assert_int_equal(p.n_dropped_turns, 0);
    assert_int_equal(p.n_dropped_messages, 0);
    assert_int_equal(f.calls, 1);   /* one rendering when it fits */
}

static void test_drop_leaves_out_the_fewest_oldest_turns_that_fit(void **state)
{
    (void)state;
    /* Every context size from the minimum up: the plan must drop exactly
     * the smallest number of whole oldest turns that fits. */
    int minimal = tokens_without(1, 11), all = tokens_without(0, 0);
    int reserve = 20;
    for (int ctx = minimal + reserve; ctx < all + reserve; ctx++) {
        struct fake f = {0};
        struct overflow_plan p;
        struct kk_error err = {{0}};
        assert_int_equal(overflow_plan(roles12, contents12, 12, ctx, reserve,
                                       fake_count, &f, &p, &err), 0);
        assert_false(p.fits);
        assert_true(p.can_drop);
        int k = p.n_dropped_turns;
        assert_in_range(k, 1, 5);
        assert_int_equal(p.first_dropped, 1);
        assert_int_equal(p.first_kept, 1 + 2 * k);
        assert_int_equal(p.n_dropped_messages, 2 * k);
        assert_int_equal(p.n_tokens_kept, tokens_without(1, 1 + 2 * k));
        assert_true(p.n_tokens_kept + reserve <= ctx);
        /* one turn fewer would not have fitted */
        assert_true(tokens_without(1, 1 + 2 * (k - 1)) + reserve > ctx);
    }
}

static void test_drop_never_removes_the_system_prompt_or_the_question(
    void **state)
{
    (void)state;
    int minimal = tokens_without(1, 11);
    struct fake f = {0};
    struct overflow_plan p;
    struct kk_error err = {{0}};
    assert_int_equal(overflow_plan(roles12, contents12, 12, minimal + 17, 17,
                                   fake_count, &f, &p, &err), 0);
    assert_true(p.can_drop);
    assert_int_equal(p.n_dropped_turns, 5);
    const char *r[12], *c[12];
    size_t k = overflow_apply(&p, roles12, contents12, 12, r, c);
    assert_int_equal(k, 2);
    assert_string_equal(r[0], "system");
    assert_string_equal(c[0], "be brief");
    assert_string_equal(r[1], "user");
    assert_string_equal(c[1], contents12[11]);
}

static void test_reports_when_even_the_question_alone_does_not_fit(
    void **state)
{
    (void)state;
    int minimal = tokens_without(1, 11);
    struct fake f = {0};
    struct overflow_plan p;
    struct kk_error err = {{0}};
    assert_int_equal(overflow_plan(roles12, contents12, 12, minimal + 16, 17,
                                   fake_count, &f, &p, &err), 0);
    assert_false(p.fits);
    assert_false(p.can_drop);
    assert_int_equal(p.n_tokens_minimal, minimal);
    assert_int_equal(p.n_dropped_turns, 0);
    char msg[512];
    overflow_describe(&p, msg, sizeof msg);
    assert_non_null(strstr(msg, "dropping turns cannot help"));
}

static void test_a_turn_ends_at_the_next_user_message(void **state)
{
    (void)state;
    /* No system prompt; a turn with two answers goes as one; a leading
     * assistant message (a greeting) goes first, on its own. */
    const char *roles[] = {"assistant", "user", "assistant", "user",
                           "assistant", "assistant", "user"};
    const char *contents[] = {"hello!", "aaaa", "bbbb", "cccc", "dddd",
                              "eeee", "question"};
    struct fake f = {0};
    int all = fake_count(&f, roles, contents, 7, NULL);
    struct overflow_plan p;
    struct kk_error err = {{0}};
    assert_int_equal(overflow_plan(roles, contents, 7, all - 1, 0,
                                   fake_count, &f, &p, &err), 0);
    assert_true(p.can_drop);
    assert_int_equal(p.first_dropped, 0);
    assert_int_equal(p.first_kept, 1);   /* the greeting alone */
    assert_int_equal(p.n_dropped_turns, 1);
    assert_int_equal(overflow_plan(roles, contents, 7, all - 11, 0,
                                   fake_count, &f, &p, &err), 0);
    assert_int_equal(p.first_kept, 3);   /* then user + its answer */
    assert_int_equal(p.n_dropped_turns, 2);
    assert_int_equal(overflow_plan(roles, contents, 7, all - 27, 0,
                                   fake_count, &f, &p, &err), 0);
    assert_int_equal(p.first_kept, 6);   /* then both answers together */
    assert_int_equal(p.n_dropped_turns, 3);
}

static void test_a_failing_count_is_an_error(void **state)
{
    (void)state;
    for (int at = 1; at <= 3; at++) {
        struct fake f = {.fail_at = at};
        struct overflow_plan p;
        struct kk_error err = {{0}};
        assert_int_equal(overflow_plan(roles12, contents12, 12, 60, 17,
                                       fake_count, &f, &p, &err), -1);
        assert_string_equal(err.msg, "fake failure");
    }
}

static void test_reserve_leaves_room_for_an_answer_and_a_draft_block(
    void **state)
{
    (void)state;
    assert_int_equal(overflow_reserve(4096, 1024), 256 + 17);
    assert_int_equal(overflow_reserve(4096, 100), 100 + 17);
    assert_int_equal(overflow_reserve(256, 1024), 32 + 17);
    assert_true(overflow_reserve(64, 0) >= 17);
}

static void test_policy_names_round_trip(void **state)
{
    (void)state;
    const char *names[] = {"ask", "refuse", "drop", "sink"};
    for (int i = 0; i < 4; i++) {
        enum overflow_policy p;
        assert_int_equal(overflow_parse(names[i], &p), 0);
        assert_string_equal(overflow_name(p), names[i]);
    }
    enum overflow_policy p;
    assert_int_equal(overflow_parse("window", &p), -1);
    assert_int_equal(overflow_parse(NULL, &p), -1);
}

/* On a real model the dropped conversation is an ordinary chat rendering
 * of the kept messages, and it shares the full rendering's prefix up to
 * the end of the system prompt (which is what the KV cache keeps) and its
 * suffix from the question on. */
static void test_dropped_rendering_is_a_prefix_compatible_chat_rendering(
    void **state)
{
    (void)state;
    struct kk_model *m = testutil_open_golden("llama-smollm2-f32");
    if (!m)
        skip();
    struct overflow_model om = {m, true};
    struct kk_error err = {{0}};
    int32_t *full = NULL, *kept = NULL, *sys = NULL, *direct = NULL;
    int n_full = overflow_tokenize(m, roles12, contents12, 12, true, &full,
                                   &err);
    assert_true(n_full > 0);
    struct overflow_plan p;
    assert_int_equal(overflow_plan(roles12, contents12, 12, n_full - 5, 0,
                                   overflow_count_model, &om, &p, &err), 0);
    assert_false(p.fits);
    assert_true(p.can_drop);
    assert_int_equal(p.n_dropped_turns, 1);
    const char *r[12], *c[12];
    size_t k = overflow_apply(&p, roles12, contents12, 12, r, c);
    assert_int_equal(k, 10);
    int n_kept = overflow_tokenize(m, r, c, k, true, &kept, &err);
    assert_int_equal(n_kept, p.n_tokens_kept);
    assert_true(n_kept < n_full);
    /* the system prompt's own rendering is a prefix of both */
    int n_sys = overflow_tokenize(m, roles12, contents12, 1, false, &sys,
                                  &err);
    assert_true(n_sys > 0 && n_sys < n_kept);
    assert_memory_equal(full, sys, sizeof *sys * (size_t)n_sys);
    assert_memory_equal(kept, sys, sizeof *sys * (size_t)n_sys);
    /* and the tail from the second turn on is the same tokens */
    int n_tail = n_kept - n_sys;
    assert_memory_equal(kept + n_sys, full + n_full - n_tail,
                        sizeof *kept * (size_t)n_tail);
    /* rendering the kept messages directly gives the same ids */
    int n_direct = overflow_tokenize(m, r, c, k, true, &direct, &err);
    assert_int_equal(n_direct, n_kept);
    assert_memory_equal(direct, kept, sizeof *kept * (size_t)n_kept);
    free(full);
    free(kept);
    free(sys);
    free(direct);
    kk_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_conversation_that_fits_drops_nothing),
        cmocka_unit_test(test_drop_leaves_out_the_fewest_oldest_turns_that_fit),
        cmocka_unit_test(
            test_drop_never_removes_the_system_prompt_or_the_question),
        cmocka_unit_test(test_reports_when_even_the_question_alone_does_not_fit),
        cmocka_unit_test(test_a_turn_ends_at_the_next_user_message),
        cmocka_unit_test(test_a_failing_count_is_an_error),
        cmocka_unit_test(
            test_reserve_leaves_room_for_an_answer_and_a_draft_block),
        cmocka_unit_test(test_policy_names_round_trip),
        cmocka_unit_test(
            test_dropped_rendering_is_a_prefix_compatible_chat_rendering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
