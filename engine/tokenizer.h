/* tokenizer.h — text <-> token ids, built from a GGUF file's metadata.
 *
 * Two families, as llama.cpp reads them from tokenizer.ggml.model:
 *   "llama": SentencePiece-style BPE over scores, with byte fallback
 *            (<0xNN> tokens) and the leading-space rule
 *            (tokenizer.ggml.add_space_prefix, default true);
 *   "gpt2":  byte-level BPE over tokenizer.ggml.merges, after the
 *            pre-tokenizer split named by tokenizer.ggml.pre (gpt-2/default,
 *            llama3/llama-bpe, qwen2, smollm, ...).
 * Special (control / user-defined) tokens are matched in the text only when
 * the caller asks (parse_special), except user-defined tokens that
 * llama.cpp always matches. Output equals llama.cpp's llama_tokenize() —
 * the tests hold it to ../shared/golden.
 *
 * Ownership: tok_load() copies what it needs out of the GGUF, so the
 * tokenizer outlives the file. Read-only after load: safe to share between
 * threads. A struct tok_stream is per-consumer. */
#ifndef KK_TOKENIZER_H
#define KK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya_error.h"

struct gguf;
struct tokenizer;

int tok_load(const struct gguf *g, struct tokenizer **out,
             struct kk_error *err);
void tok_free(struct tokenizer *t);

/* Encodes len bytes of text (any bytes; invalid UTF-8 is tokenized the way
 * llama.cpp does it). add_bos prepends BOS (callers pass tok_add_bos() for
 * the model's default). Writes at most cap ids and returns the total count
 * (which may exceed cap: call again with a larger buffer), or -1 with err
 * set on failure (e.g. out of memory). */
int tok_encode(const struct tokenizer *t, const char *text, size_t len,
               bool add_bos, bool parse_special, int32_t *ids, int cap,
               struct kk_error *err);

/* The bytes of one token as llama_token_to_piece() gives them: byte tokens
 * as their byte, "▁" as a space (SPM), byte-level unicode mapped back to
 * bytes (gpt2). Control tokens render as their text when `special` is true
 * and as nothing otherwise. Returns the number of bytes (which may exceed
 * cap; nothing past cap is written) or -1 for an id out of range. */
int tok_piece(const struct tokenizer *t, int32_t id, bool special, char *buf,
              int cap);

int32_t tok_n_vocab(const struct tokenizer *t);
int32_t tok_bos(const struct tokenizer *t);  /* -1 if none */
int32_t tok_eos(const struct tokenizer *t);  /* -1 if none */
bool tok_add_bos(const struct tokenizer *t); /* the model's default */
/* End-of-generation: EOS, EOT and the tokens llama.cpp auto-detects as EOG
 * (<|im_end|>, <end_of_turn>, </s>, <|endoftext|>, <|eot_id|> ...). */
bool tok_is_eog(const struct tokenizer *t, int32_t id);
bool tok_is_control(const struct tokenizer *t, int32_t id);
/* Id of a token whose text is exactly s, or -1. */
int32_t tok_find(const struct tokenizer *t, const char *s);
/* The raw vocabulary text of id (as stored in the GGUF, NUL-terminated;
 * points into the tokenizer), or NULL out of range. Used to compare the
 * vocabularies of a draft and a target token by token. */
const char *tok_text(const struct tokenizer *t, int32_t id);

/* Streaming detokenizer: feed ids as they are generated, get text that
 * never ends in the middle of a UTF-8 character (incomplete bytes are held
 * until the next token completes them, and flushed by tok_stream_finish). */
struct tok_stream {
    unsigned char pending[8];
    int n_pending;
};

void tok_stream_init(struct tok_stream *s);
/* Appends the text of id to out (at most cap bytes, NUL-terminated);
 * returns the number of bytes written. cap must be at least 256 + 1. */
int tok_stream_push(const struct tokenizer *t, struct tok_stream *s,
                    int32_t id, bool special, char *out, int cap);
/* Flushes held bytes (as U+FFFD if they never completed). */
int tok_stream_finish(struct tok_stream *s, char *out, int cap);

#endif
