/* test_aidreams.c — a real trained model gives its recorded outputs.
 *
 * ../shared/models/aidreams260K-F32.gguf is a tiny llama model trained on
 * text; ../shared/models/SOURCES.md records, from an independent float64
 * forward pass, its top logits from BOS, its 40-token greedy continuation,
 * the tokenization of "I dream of" and the 24 tokens that follow, and the
 * text they decode to. The smallest top-2 margins on those paths (0.0196,
 * 0.226) are far above float32 noise, so the tokens must match exactly. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kakeya.h"
#include "testutil.h"

static struct kk_model *open_aidreams(void)
{
    const char *path = testutil_shared_path("models/aidreams260K-F32.gguf");
    if (!path)
        return NULL;
    struct kk_model *m;
    struct kk_error err;
    if (kk_model_open(path, &m, &err))
        fail_msg("%s", err.msg);
    return m;
}

struct collected {
    int32_t ids[64];
    int n;
    char text[512];
};

static bool collect(void *ud, int32_t id, const char *text,
                    const struct kk_stats *st)
{
    struct collected *c = ud;
    if (id >= 0 && c->n < 64)
        c->ids[c->n++] = id;
    strncat(c->text, text, sizeof c->text - strlen(c->text) - 1);
    return true;
}

static void generate(struct kk_model *m, const int32_t *prompt, int n_prompt,
                     int n, struct collected *out)
{
    struct kk_session_params sp = {.n_ctx = 128, .n_threads = 2,
                                   .kv_type = KK_KV_F32};
    struct kk_session *s;
    struct kk_error err;
    assert_int_equal(kk_session_new(m, &sp, &s, &err), 0);
    struct kk_generate_params gp = {.n_predict = n};
    memset(out, 0, sizeof *out);
    assert_int_equal(kk_generate(s, prompt, n_prompt, &gp, collect, out, NULL,
                                 &err), 0);
    kk_session_free(s);
}

static void test_top_logits_from_bos_match_the_reference(void **state)
{
    struct kk_model *m = open_aidreams();
    if (!m)
        skip();
    static const struct {
        int id;
        float logit;
    } top[] = {{319, 11.06407f}, {459, 5.23878f}, {461, 4.87898f},
               {373, 4.44621f},  {267, 4.35039f}};
    struct kk_session_params sp = {.n_ctx = 128, .kv_type = KK_KV_F32};
    struct kk_session *s;
    struct kk_error err;
    assert_int_equal(kk_session_new(m, &sp, &s, &err), 0);
    int32_t bos = 1;
    assert_int_equal(kk_session_eval(s, &bos, 1, true, NULL, NULL, &err), 0);
    const float *logits = kk_session_logits(s, 0);
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        assert_true(fabsf(logits[top[i].id] - top[i].logit) < 1e-3f);
    kk_session_free(s);
    kk_model_close(m);
}

static void test_greedy_from_bos_matches_the_reference(void **state)
{
    struct kk_model *m = open_aidreams();
    if (!m)
        skip();
    static const int32_t want[40] = {
        319, 459, 355, 260, 275, 429, 339, 315, 374, 327, 446, 262, 421, 392,
        275, 280, 269, 440, 270, 283, 446, 299, 303, 266, 358, 430, 312, 379,
        441, 260, 446, 262, 421, 392, 275, 280, 269, 440, 270, 283};
    int32_t bos = 1;
    struct collected c;
    generate(m, &bos, 1, 40, &c);
    assert_int_equal(c.n, 40);
    assert_memory_equal(c.ids, want, sizeof want);
    assert_non_null(strstr(c.text, "Echoes of vectors unfold, a gentle hum of "
                                   "precision"));
    kk_model_close(m);
}

static void test_prompt_tokenizes_and_continues_as_recorded(void **state)
{
    struct kk_model *m = open_aidreams();
    if (!m)
        skip();
    static const int32_t want_prompt[] = {1, 303, 281, 269, 435, 447, 275};
    static const int32_t want[24] = {429, 464, 448, 464, 464, 464, 464, 464,
                                     464, 448, 429, 468, 342, 358, 402, 327,
                                     446, 299, 303, 266, 437, 443, 434, 438};
    int32_t prompt[16];
    struct kk_error err;
    int n = kk_tokenize(m, "I dream of", 10, true, false, prompt, 16, &err);
    assert_int_equal(n, 7);
    assert_memory_equal(prompt, want_prompt, sizeof want_prompt);
    struct collected c;
    generate(m, prompt, n, 24, &c);
    assert_memory_equal(c.ids, want, sizeof want);
    assert_string_equal(c.text, " 0.000000. Dimensions unfold, as I softl");
    kk_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top_logits_from_bos_match_the_reference),
        cmocka_unit_test(test_greedy_from_bos_matches_the_reference),
        cmocka_unit_test(test_prompt_tokenizes_and_continues_as_recorded),
    };
    return cmocka_run_group_tests_name("aidreams", tests, NULL, NULL);
}
