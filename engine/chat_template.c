/* chat_template.c — the template families, rendered natively.
 *
 * Each renderer below follows the Jinja source of its family step by step
 * (the sources are in tests/data/templates/): where the template trims,
 * we trim; where it adds a default system prompt, so do we. Where a template
 * would raise an exception (roles that do not alternate) we render anyway:
 * the caller controls the message list, and a prompt is more useful than a
 * refusal. BOS text that a template puts first is left out, as llama.cpp
 * strips it: the tokenizer adds BOS. */
#include "chat_template.h"

#include <stdlib.h>
#include <string.h>

/* A growing output string. Once an allocation fails, `failed` is set and
 * every later append is a no-op, so renderers need not check each call. */
struct text {
    char *data;
    size_t len, cap;
    bool failed;
};

static void text_append_n(struct text *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *data = realloc(t->data, cap);
        if (!data) {
            t->failed = true;
            return;
        }
        t->data = data;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static void text_append(struct text *t, const char *s)
{
    text_append_n(t, s, strlen(s));
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

/* Jinja's `trim` / Python's strip() on what was appended since `mark`. */
static void text_trim_since(struct text *t, size_t mark)
{
    if (t->failed)
        return;
    size_t start = mark, end = t->len;
    while (start < end && is_space(t->data[start]))
        start++;
    while (end > start && is_space(t->data[end - 1]))
        end--;
    memmove(t->data + mark, t->data + start, end - start);
    t->len = mark + (end - start);
    t->data[t->len] = '\0';
}

static void text_append_trimmed(struct text *t, const char *s)
{
    size_t mark = t->len;
    text_append(t, s);
    text_trim_since(t, mark);
}

/* Appends s with leading (lead) and/or trailing (trail) newlines removed:
 * Python's lstrip('\n'), rstrip('\n') and strip('\n'). */
static void text_append_strip_newlines(struct text *t, const char *s,
                                       size_t n, bool lead, bool trail)
{
    while (lead && n > 0 && *s == '\n') {
        s++;
        n--;
    }
    while (trail && n > 0 && s[n - 1] == '\n')
        n--;
    text_append_n(t, s, n);
}

static const char *content_of(const struct chat_message *m)
{
    return m->content ? m->content : "";
}

static const char *role_of(const struct chat_message *m)
{
    return m->role ? m->role : "";
}

static bool has_role(const struct chat_message *m, const char *role)
{
    return m->role && strcmp(m->role, role) == 0;
}

static bool starts_with_system(const struct chat_message *msgs, size_t n)
{
    return n > 0 && has_role(&msgs[0], "system");
}

/* ---- ChatML and its descendants ---------------------------------------- */

static void chatml_append_turn(struct text *t, const char *role,
                               const char *content)
{
    text_append(t, "<|im_start|>");
    text_append(t, role);
    text_append(t, "\n");
    text_append(t, content);
    text_append(t, "<|im_end|>\n");
}

/* Plain ChatML, and SmolLM2's template, which adds a default system turn
 * inside its loop (so an empty conversation gets none). */
static void render_chatml(struct text *t, const struct chat_message *msgs,
                          size_t n, bool add_generation_prompt,
                          const char *default_system)
{
    if (default_system && n > 0 && !starts_with_system(msgs, n))
        chatml_append_turn(t, "system", default_system);
    for (size_t i = 0; i < n; i++)
        chatml_append_turn(t, role_of(&msgs[i]), content_of(&msgs[i]));
    if (add_generation_prompt)
        text_append(t, "<|im_start|>assistant\n");
}

/* Qwen's tool results: consecutive "tool" messages share one user turn. */
static void qwen_append_tool(struct text *t, const struct chat_message *msgs,
                             size_t n, size_t i)
{
    if (i == 0 || !has_role(&msgs[i - 1], "tool"))
        text_append(t, "<|im_start|>user");
    text_append(t, "\n<tool_response>\n");
    text_append(t, content_of(&msgs[i]));
    text_append(t, "\n</tool_response>");
    if (i + 1 == n || !has_role(&msgs[i + 1], "tool"))
        text_append(t, "<|im_end|>\n");
}

static const char qwen25_default_system[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static void render_qwen25(struct text *t, const struct chat_message *msgs,
                          size_t n, bool add_generation_prompt)
{
    bool has_system = starts_with_system(msgs, n);
    chatml_append_turn(t, "system", has_system ? content_of(&msgs[0])
                                               : qwen25_default_system);
    for (size_t i = has_system ? 1 : 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (has_role(m, "user") || has_role(m, "system") ||
            has_role(m, "assistant"))
            chatml_append_turn(t, m->role, content_of(m));
        else if (has_role(m, "tool"))
            qwen_append_tool(t, msgs, n, i);
        /* other roles: the template renders nothing */
    }
    if (add_generation_prompt)
        text_append(t, "<|im_start|>assistant\n");
}

/* Qwen3 calls the last user message that is not a wrapped tool response
 * "the last query"; with none, the last message stands in. */
static size_t qwen3_last_query(const struct chat_message *msgs, size_t n)
{
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    for (size_t i = n; i-- > 0;) {
        if (!has_role(&msgs[i], "user"))
            continue;
        const char *c = content_of(&msgs[i]);
        size_t len = strlen(c);
        bool is_tool_response =
            strncmp(c, open, strlen(open)) == 0 && len >= strlen(close) &&
            strcmp(c + len - strlen(close), close) == 0;
        if (!is_tool_response)
            return i;
    }
    return n > 0 ? n - 1 : 0;
}

/* An assistant turn of Qwen3. A "<think>…</think>" part in the content is
 * split off as reasoning; the reasoning is shown again only for turns after
 * the last query, and there only for the last message or when non-empty. */
static void qwen3_append_assistant(struct text *t, const char *content,
                                   bool after_last_query, bool is_last)
{
    const char *answer = content, *reasoning = "";
    size_t reasoning_len = 0;
    const char *first_close = strstr(content, "</think>");
    if (first_close) {
        const char *last_close = first_close, *p;
        while ((p = strstr(last_close + 1, "</think>")) != NULL)
            last_close = p;
        answer = last_close + strlen("</think>");
        while (*answer == '\n')
            answer++;
        /* before the first </think>, without trailing newlines, after the
         * last <think>, without leading newlines */
        size_t end = (size_t)(first_close - content);
        while (end > 0 && content[end - 1] == '\n')
            end--;
        size_t start = 0;
        for (size_t i = 0; i + 7 <= end; i++)
            if (memcmp(content + i, "<think>", 7) == 0)
                start = i + 7;
        while (start < end && content[start] == '\n')
            start++;
        reasoning = content + start;
        reasoning_len = end - start;
    }
    text_append(t, "<|im_start|>assistant\n");
    if (after_last_query && (is_last || reasoning_len > 0)) {
        text_append(t, "<think>\n");
        text_append_strip_newlines(t, reasoning, reasoning_len, true, true);
        text_append(t, "\n</think>\n\n");
        text_append_strip_newlines(t, answer, strlen(answer), true, false);
    } else {
        text_append(t, answer);
    }
    text_append(t, "<|im_end|>\n");
}

static void render_qwen3(struct text *t, const struct chat_message *msgs,
                         size_t n, bool add_generation_prompt)
{
    bool has_system = starts_with_system(msgs, n);
    if (has_system)
        chatml_append_turn(t, "system", content_of(&msgs[0]));
    size_t last_query = qwen3_last_query(msgs, n);
    for (size_t i = has_system ? 1 : 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (has_role(m, "user") || has_role(m, "system"))
            chatml_append_turn(t, m->role, content_of(m));
        else if (has_role(m, "assistant"))
            qwen3_append_assistant(t, content_of(m), i > last_query,
                                   i + 1 == n);
        else if (has_role(m, "tool"))
            qwen_append_tool(t, msgs, n, i);
    }
    if (add_generation_prompt)
        text_append(t, "<|im_start|>assistant\n");
}

/* ---- Llama ------------------------------------------------------------- */

/* Meta's Llama 2 template: the system prompt goes inside the first turn's
 * [INST]; every user turn but the first opens with BOS text, every answer
 * closes with EOS text. There is no generation prompt: "[/INST]" is it. */
static void render_llama2(struct text *t, const struct chat_message *msgs,
                          size_t n)
{
    bool has_system = starts_with_system(msgs, n);
    size_t first = has_system ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        bool is_user = has_role(m, "user");
        if (!is_user && !has_role(m, "assistant"))
            continue;
        if (is_user)
            text_append(t, t->len > 0 ? "<s>[INST] " : "[INST] ");
        else
            text_append(t, " ");
        size_t mark = t->len;
        if (i == first && has_system) {
            text_append(t, "<<SYS>>\n");
            text_append(t, content_of(&msgs[0]));
            text_append(t, "\n<</SYS>>\n\n");
        }
        text_append(t, content_of(m));
        text_trim_since(t, mark);
        text_append(t, is_user ? " [/INST]" : " </s>");
    }
}

static void render_llama3(struct text *t, const struct chat_message *msgs,
                          size_t n, bool add_generation_prompt)
{
    for (size_t i = 0; i < n; i++) {
        text_append(t, "<|start_header_id|>");
        text_append(t, role_of(&msgs[i]));
        text_append(t, "<|end_header_id|>\n\n");
        text_append_trimmed(t, content_of(&msgs[i]));
        text_append(t, "<|eot_id|>");
    }
    if (add_generation_prompt)
        text_append(t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* ---- Gemma ------------------------------------------------------------- */

/* Gemma has no system turn: the system text opens the first turn, followed
 * by a blank line. The assistant is called "model". */
static void render_gemma(struct text *t, const struct chat_message *msgs,
                         size_t n, bool add_generation_prompt)
{
    bool has_system = starts_with_system(msgs, n);
    size_t first = has_system ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        text_append(t, "<start_of_turn>");
        text_append(t, has_role(m, "assistant") ? "model" : role_of(m));
        text_append(t, "\n");
        if (i == first && has_system) {
            text_append(t, content_of(&msgs[0]));
            text_append(t, "\n\n");
        }
        text_append_trimmed(t, content_of(m));
        text_append(t, "<end_of_turn>\n");
    }
    if (add_generation_prompt)
        text_append(t, "<start_of_turn>model\n");
}

/* ---- Public ------------------------------------------------------------ */

/* The first row whose strings all occur in the template wins, so the more
 * specific ChatML descendants come before plain ChatML. Llama 3.1 and later
 * templates also match llama3; they render without the "Cutting Knowledge
 * Date" system header those templates add. */
static const struct {
    const char *needle, *also; /* also may be NULL */
    enum chat_format format;
} signatures[] = {
    {"<|im_start|>", "<think>", CHAT_QWEN3},
    {"<|im_start|>", "You are Qwen, created by Alibaba Cloud", CHAT_QWEN25},
    {"<|im_start|>", "named SmolLM", CHAT_SMOLLM2},
    {"<|im_start|>", NULL, CHAT_CHATML},
    {"<|start_header_id|>", "<|eot_id|>", CHAT_LLAMA3},
    {"<start_of_turn>", NULL, CHAT_GEMMA},
    {"[INST]", "<<SYS>>", CHAT_LLAMA2},
};

enum chat_format chat_template_detect(const char *jinja_source,
                                      bool *is_fallback)
{
    if (jinja_source) {
        for (size_t i = 0; i < sizeof signatures / sizeof signatures[0]; i++) {
            if (strstr(jinja_source, signatures[i].needle) &&
                (!signatures[i].also ||
                 strstr(jinja_source, signatures[i].also))) {
                *is_fallback = false;
                return signatures[i].format;
            }
        }
    }
    *is_fallback = true;
    return CHAT_CHATML;
}

const char *chat_format_name(enum chat_format f)
{
    switch (f) {
    case CHAT_CHATML: return "chatml";
    case CHAT_SMOLLM2: return "smollm2";
    case CHAT_QWEN25: return "qwen2.5";
    case CHAT_QWEN3: return "qwen3";
    case CHAT_LLAMA2: return "llama2";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_GEMMA: return "gemma";
    }
    return "unknown";
}

char *chat_render(enum chat_format f, const struct chat_message *msgs,
                  size_t n_msgs, bool add_generation_prompt)
{
    struct text t = {0};
    text_append(&t, ""); /* an empty rendering is still a string */
    switch (f) {
    case CHAT_CHATML:
        render_chatml(&t, msgs, n_msgs, add_generation_prompt, NULL);
        break;
    case CHAT_SMOLLM2:
        render_chatml(&t, msgs, n_msgs, add_generation_prompt,
                      "You are a helpful AI assistant named SmolLM, "
                      "trained by Hugging Face");
        break;
    case CHAT_QWEN25:
        render_qwen25(&t, msgs, n_msgs, add_generation_prompt);
        break;
    case CHAT_QWEN3:
        render_qwen3(&t, msgs, n_msgs, add_generation_prompt);
        break;
    case CHAT_LLAMA2:
        render_llama2(&t, msgs, n_msgs);
        break;
    case CHAT_LLAMA3:
        render_llama3(&t, msgs, n_msgs, add_generation_prompt);
        break;
    case CHAT_GEMMA:
        render_gemma(&t, msgs, n_msgs, add_generation_prompt);
        break;
    }
    if (t.failed) {
        free(t.data);
        return NULL;
    }
    return t.data;
}
