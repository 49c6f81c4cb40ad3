/* test_chat_template.c — detection of template families and their native
 * rendering. The golden conversations come from llama.cpp's Jinja path
 * (../shared/golden/chat-*.json); the hand-written expectations below were
 * derived from the Jinja sources in tests/data/templates/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat_template.h"
#include "testutil.h"

#define TEMPLATES "tests/data/templates/"
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static char *read_template(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, TEMPLATES "%s.jinja", name);
    char *src = testutil_read_file(path, NULL);
    if (!src)
        fail_msg("cannot read fixture %s (run from the repository root)",
                 path);
    return src;
}

/* Renders and compares, printing both texts on a mismatch. */
static void assert_renders(enum chat_format f, const struct chat_message *msgs,
                           size_t n, bool add_generation_prompt,
                           const char *expected)
{
    char *got = chat_render(f, msgs, n, add_generation_prompt);
    assert_non_null(got);
    if (strcmp(got, expected) != 0) {
        fprintf(stderr, "%s rendering differs\n--- expected:\n%s\n--- got:\n"
                "%s\n---\n", chat_format_name(f), expected, got);
        free(got);
        fail();
    }
    free(got);
}

/* ---- Golden: llama.cpp's Jinja renderings ------------------------------ */

static void check_golden_file(const char *model, const char *fixture)
{
    char rel[128];
    snprintf(rel, sizeof rel, "golden/chat-%s-f32.json", model);
    const char *path = testutil_shared_path(rel);
    if (!path)
        skip();
    cJSON *doc = testutil_read_json(path);
    assert_non_null(doc);

    char *src = read_template(fixture);
    bool is_fallback = true;
    enum chat_format f = chat_template_detect(src, &is_fallback);
    assert_false(is_fallback);
    free(src);

    cJSON *items = cJSON_GetObjectItem(doc, "items");
    assert_true(cJSON_GetArraySize(items) > 0);
    cJSON *item;
    cJSON_ArrayForEach(item, items) {
        cJSON *jmsgs = cJSON_GetObjectItem(item, "messages");
        size_t n = (size_t)cJSON_GetArraySize(jmsgs);
        struct chat_message msgs[16];
        assert_true(n <= COUNT(msgs));
        for (size_t i = 0; i < n; i++) {
            cJSON *m = cJSON_GetArrayItem(jmsgs, (int)i);
            msgs[i].role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
            msgs[i].content =
                cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
        }
        bool gen = cJSON_IsTrue(cJSON_GetObjectItem(item, "add_generation_prompt"));
        const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(item, "jinja"));
        assert_non_null(want);
        assert_renders(f, msgs, n, gen, want);
    }
    cJSON_Delete(doc);
}

static void test_gemma3_golden_conversations_render_byte_exactly(void **state)
{
    (void)state;
    check_golden_file("gemma3", "gemma3");
}

static void test_smollm2_golden_conversations_render_byte_exactly(void **state)
{
    (void)state;
    check_golden_file("llama-smollm2", "smollm2");
}

static void test_qwen25_golden_conversations_render_byte_exactly(void **state)
{
    (void)state;
    check_golden_file("qwen2", "qwen25");
}

static void test_qwen3_golden_conversations_render_byte_exactly(void **state)
{
    (void)state;
    check_golden_file("qwen3", "qwen3");
}

/* ---- Detection --------------------------------------------------------- */

static void test_every_fixture_template_is_recognised(void **state)
{
    (void)state;
    static const struct {
        const char *fixture, *name;
        enum chat_format format;
    } cases[] = {
        {"chatml", "chatml", CHAT_CHATML},
        {"smollm2", "smollm2", CHAT_SMOLLM2},
        {"qwen25", "qwen2.5", CHAT_QWEN25},
        {"qwen3", "qwen3", CHAT_QWEN3},
        {"llama2", "llama2", CHAT_LLAMA2},
        {"llama3", "llama3", CHAT_LLAMA3},
        {"gemma3", "gemma", CHAT_GEMMA},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        char *src = read_template(cases[i].fixture);
        bool is_fallback = true;
        enum chat_format f = chat_template_detect(src, &is_fallback);
        free(src);
        if (f != cases[i].format || is_fallback)
            fail_msg("%s.jinja detected as %s%s", cases[i].fixture,
                     chat_format_name(f), is_fallback ? " (fallback)" : "");
        assert_string_equal(chat_format_name(f), cases[i].name);
    }
}

static void test_unknown_or_absent_template_falls_back_to_chatml(void **state)
{
    (void)state;
    char *src = read_template("unknown");
    const char *sources[] = {src, NULL, ""};
    for (size_t i = 0; i < COUNT(sources); i++) {
        bool is_fallback = false;
        assert_int_equal(chat_template_detect(sources[i], &is_fallback),
                         CHAT_CHATML);
        assert_true(is_fallback);
    }
    free(src);
}

/* ---- Per-family renderings of the same conversations -------------------- */

static const struct chat_message multi_turn[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello."},
    {"user", "Bye?"},
};
static const struct chat_message system_only[] = {{"system", "Be brief."}};
static const struct chat_message empty_turns[] = {
    {"user", ""},
    {"assistant", NULL},
};

#define IM_SYS "<|im_start|>system\nBe brief.<|im_end|>\n"
#define IM_MULTI IM_SYS "<|im_start|>user\nHi<|im_end|>\n" \
    "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye?<|im_end|>\n" \
    "<|im_start|>assistant\n"
#define IM_EMPTY "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
#define L3(role, text) "<|start_header_id|>" role "<|end_header_id|>\n\n" text

/* multi_turn and system_only with a generation prompt; empty_turns without. */
static const struct {
    enum chat_format format;
    const char *multi_turn, *system_only, *empty_turns;
} family_cases[] = {
    {CHAT_CHATML, IM_MULTI, IM_SYS "<|im_start|>assistant\n", IM_EMPTY},
    {CHAT_SMOLLM2, IM_MULTI, IM_SYS "<|im_start|>assistant\n",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
     "trained by Hugging Face<|im_end|>\n" IM_EMPTY},
    {CHAT_QWEN25, IM_MULTI, IM_SYS "<|im_start|>assistant\n",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
     "helpful assistant.<|im_end|>\n" IM_EMPTY},
    {CHAT_QWEN3, IM_MULTI, IM_SYS "<|im_start|>assistant\n",
     "<|im_start|>user\n<|im_end|>\n"
     "<|im_start|>assistant\n<think>\n\n</think>\n\n<|im_end|>\n"},
    {CHAT_LLAMA2,
     "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s>"
     "<s>[INST] Bye? [/INST]",
     "", /* the system text only ever rides on a user turn */
     "[INST]  [/INST]  </s>"},
    {CHAT_LLAMA3,
     L3("system", "Be brief.<|eot_id|>") L3("user", "Hi<|eot_id|>")
     L3("assistant", "Hello.<|eot_id|>") L3("user", "Bye?<|eot_id|>")
     L3("assistant", ""),
     L3("system", "Be brief.<|eot_id|>") L3("assistant", ""),
     L3("user", "<|eot_id|>") L3("assistant", "<|eot_id|>")},
    {CHAT_GEMMA,
     "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
     "<start_of_turn>model\nHello.<end_of_turn>\n"
     "<start_of_turn>user\nBye?<end_of_turn>\n<start_of_turn>model\n",
     "<start_of_turn>model\n",
     "<start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n"},
};

static void test_multi_turn_with_assistant_history_renders_per_family(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(family_cases); i++)
        assert_renders(family_cases[i].format, multi_turn, COUNT(multi_turn),
                       true, family_cases[i].multi_turn);
}

static void test_system_only_conversation_renders_per_family(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(family_cases); i++)
        assert_renders(family_cases[i].format, system_only, COUNT(system_only),
                       true, family_cases[i].system_only);
}

static void test_empty_content_without_generation_prompt_renders_per_family(
    void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(family_cases); i++)
        assert_renders(family_cases[i].format, empty_turns, COUNT(empty_turns),
                       false, family_cases[i].empty_turns);
}

/* ---- Family-specific rules --------------------------------------------- */

static void test_llama3_and_gemma_trim_content_but_chatml_keeps_it(void **state)
{
    (void)state;
    const struct chat_message padded[] = {{"user", " \n x \t"}};
    assert_renders(CHAT_LLAMA3, padded, 1, false, L3("user", "x<|eot_id|>"));
    assert_renders(CHAT_GEMMA, padded, 1, false,
                   "<start_of_turn>user\nx<end_of_turn>\n");
    assert_renders(CHAT_CHATML, padded, 1, false,
                   "<|im_start|>user\n \n x \t<|im_end|>\n");
}

static void test_qwen3_drops_reasoning_before_the_last_query(void **state)
{
    (void)state;
    const struct chat_message msgs[] = {
        {"user", "Q1"},
        {"assistant", "<think>\nr1\n</think>\n\nA1"},
        {"user", "Q2"},
        {"assistant", "<think>r2</think>A2"},
    };
    assert_renders(CHAT_QWEN3, msgs, COUNT(msgs), false,
                   "<|im_start|>user\nQ1<|im_end|>\n"
                   "<|im_start|>assistant\nA1<|im_end|>\n"
                   "<|im_start|>user\nQ2<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
}

static void test_qwen3_tool_response_is_not_a_query(void **state)
{
    (void)state;
    /* The last query is "Q", so both answers come after it: the first keeps
     * its (non-empty) reasoning, the last gets an empty think block. */
    const struct chat_message msgs[] = {
        {"user", "Q"},
        {"assistant", "<think>r</think>\ncalling"},
        {"user", "<tool_response>42</tool_response>"},
        {"assistant", "done"},
    };
    assert_renders(CHAT_QWEN3, msgs, COUNT(msgs), true,
                   "<|im_start|>user\nQ<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\nr\n</think>\n\ncalling<|im_end|>\n"
                   "<|im_start|>user\n<tool_response>42</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n"
                   "<|im_start|>assistant\n");
}

static void test_qwen_tool_messages_share_one_user_turn(void **state)
{
    (void)state;
    const struct chat_message msgs[] = {
        {"system", "S"}, {"tool", "a"}, {"tool", "b"}, {"user", "U"},
    };
    static const char want[] =
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\na\n</tool_response>"
        "\n<tool_response>\nb\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nU<|im_end|>\n";
    assert_renders(CHAT_QWEN25, msgs, COUNT(msgs), false, want);
    assert_renders(CHAT_QWEN3, msgs, COUNT(msgs), false, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3_golden_conversations_render_byte_exactly),
        cmocka_unit_test(test_smollm2_golden_conversations_render_byte_exactly),
        cmocka_unit_test(test_qwen25_golden_conversations_render_byte_exactly),
        cmocka_unit_test(test_qwen3_golden_conversations_render_byte_exactly),
        cmocka_unit_test(test_every_fixture_template_is_recognised),
        cmocka_unit_test(test_unknown_or_absent_template_falls_back_to_chatml),
        cmocka_unit_test(test_multi_turn_with_assistant_history_renders_per_family),
        cmocka_unit_test(test_system_only_conversation_renders_per_family),
        cmocka_unit_test(test_empty_content_without_generation_prompt_renders_per_family),
        cmocka_unit_test(test_llama3_and_gemma_trim_content_but_chatml_keeps_it),
        cmocka_unit_test(test_qwen3_drops_reasoning_before_the_last_query),
        cmocka_unit_test(test_qwen3_tool_response_is_not_a_query),
        cmocka_unit_test(test_qwen_tool_messages_share_one_user_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
