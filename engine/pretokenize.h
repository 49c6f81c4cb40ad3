/* pretokenize.h — the pre-tokenizer splits of byte-level BPE vocabularies.
 *
 * Before BPE merges, llama.cpp cuts text into words with a regex chosen by
 * tokenizer.ggml.pre. Here each regex is a hand-written scanner over code
 * points (one function per family, like a lexer), reproducing what
 * llama.cpp's own splitter yields, including its quirks: the text between
 * matches becomes a word of its own, and each regex of a chain only sees
 * one word of the previous split at a time (its end is the end of input).
 * Internal to the tokenizer. */
#ifndef KK_PRETOKENIZE_H
#define KK_PRETOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pretok_kind {
    PRETOK_DEFAULT, /* llama.cpp "default": punctuation runs, gpt2, digits */
    PRETOK_GPT2,    /* "gpt-2" */
    PRETOK_LLAMA3,  /* "llama3", "llama-bpe": numbers in groups of 3 */
    PRETOK_QWEN2,   /* "qwen2": like llama3 with single-digit numbers */
    PRETOK_SMOLLM,  /* "smollm": each digit alone, then gpt2 */
};

/* The family for a tokenizer.ggml.pre value; false when unknown. An empty
 * name is "default", as in llama.cpp. *ignore_merges is set for families
 * whose whole-word vocabulary hits skip merging (llama3). */
bool pretok_kind_from_name(const char *name, size_t len,
                           enum pretok_kind *kind, bool *ignore_merges);

/* Splits n code points (their uni_flags() in flags) into words. Writes the
 * word lengths (in code points, never 0, summing to n) to lens and returns
 * how many. lens and scratch must each hold n entries. */
size_t pretok_split(enum pretok_kind kind, const uint32_t *cpts,
                    const uint16_t *flags, size_t n, size_t *lens,
                    size_t *scratch);

#endif
