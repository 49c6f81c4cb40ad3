/* chat_template.h — rendering a conversation into a model's prompt text.
 *
 * kakeya does not run Jinja. It recognises the template families people
 * meet in GGUF files by their tokenizer.chat_template text and renders them
 * natively, producing exactly the text llama.cpp's Jinja path produces for
 * them (the tests hold it to ../shared/golden/chat-*.json). An unrecognised
 * or absent template falls back to ChatML, and chat_template_detect() says
 * so, so the caller can show a warning. Pure functions. */
#ifndef KK_CHAT_TEMPLATE_H
#define KK_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

enum chat_format {
    CHAT_CHATML,      /* <|im_start|>role\n...<|im_end|>\n, nothing added */
    CHAT_SMOLLM2,     /* ChatML + SmolLM2's default system prompt */
    CHAT_QWEN25,      /* ChatML + Qwen2.5's default system prompt */
    CHAT_QWEN3,       /* ChatML + Qwen3 conventions (<think> handling) */
    CHAT_LLAMA2,      /* [INST] ... [/INST] with <<SYS>> */
    CHAT_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_GEMMA,       /* <start_of_turn>user\n...<end_of_turn>\n */
};

struct chat_message {
    const char *role;    /* "system", "user" or "assistant" ("tool" for Qwen) */
    const char *content; /* NULL reads as "" */
};

/* Recognises the family of a Jinja template source (may be NULL).
 * *is_fallback is set when nothing matched and ChatML was chosen. */
enum chat_format chat_template_detect(const char *jinja_source,
                                      bool *is_fallback);

const char *chat_format_name(enum chat_format f);

/* Renders messages; with add_generation_prompt the text ends where the
 * assistant's answer begins. Returns a malloc'd NUL-terminated string the
 * caller frees, or NULL when out of memory. BOS is not included: the
 * tokenizer adds it per the model's flags. */
char *chat_render(enum chat_format f, const struct chat_message *msgs,
                  size_t n_msgs, bool add_generation_prompt);

#endif
