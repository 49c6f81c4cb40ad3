/* tok_internal.h — the insides of struct tokenizer, shared by the files
 * that implement tokenizer.h (tokenizer.c: loading and pieces; tok_vocab.c:
 * lookup tables; tok_special.c: cutting special tokens out of text;
 * tok_spm.c and tok_bpe.c: the two encoders; tok_stream.c: streaming
 * detokenizer). Not for other modules. */
#ifndef KK_TOK_INTERNAL_H
#define KK_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pretokenize.h"
#include "tokenizer.h"

/* Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type
 * (a bit set: auto-detected end tokens gain CONTROL on top of their type). */
enum {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
};

enum tok_family { TOK_SPM, TOK_BPE };

/* Open-addressing hash index over entries stored elsewhere: slot holds
 * entry index + 1, 0 when empty. */
struct tok_index {
    uint32_t *slots;
    size_t mask;
};

/* A merge rule "left right" of a BPE vocabulary; its rank is its index. */
struct tok_merge {
    const char *left, *right;
    uint32_t left_len, right_len;
};

/* A byte trie of the special tokens' texts, to find cheaply which of them
 * occur in a text at all (edges kept in a hash keyed by node and byte). */
struct tok_trie {
    uint64_t *edge_keys; /* (node << 8 | byte) + 1, 0 when empty */
    uint32_t *edge_child;
    size_t edge_mask;
    uint32_t n_nodes;
};

struct tokenizer {
    enum tok_family family;
    enum pretok_kind pre;
    bool ignore_merges;    /* llama3: a word that is a token skips merging */
    bool add_space_prefix; /* SPM: " " before text that starts a run */
    bool add_bos;

    int32_t n_vocab;
    char *arena;           /* every token text and merge, NUL-terminated */
    const char **text;     /* per id, into arena */
    uint32_t *text_len;
    float *score;
    uint8_t *attr;
    struct tok_index vocab_index; /* text -> id (the last id wins) */

    struct tok_merge *merges;
    uint32_t n_merges;
    struct tok_index merge_index; /* (left, right) -> rank (first wins) */

    int32_t byte_token[256]; /* SPM byte fallback: <0xNN>, -1 if none */
    /* GPT-2 byte-level text: each byte's code point as UTF-8, and back. */
    char byte_text[256][2];
    uint8_t byte_text_len[256];
    int16_t cpt_byte[324]; /* -1: the code point stands for no byte */

    /* Control, user-defined and unknown ids, longest text first (ties by
     * id), with the trie node each one's text ends at. */
    int32_t *special;
    uint32_t *special_node;
    int32_t n_special;
    struct tok_trie trie;

    int32_t bos, eos, eot, eom, unk;
    int32_t *eog;
    int n_eog;
};

/* A growable list of ids. */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};

int tok_ids_push(struct tok_ids *ids, int32_t id);

/* tok_vocab.c */
int tok_index_build_vocab(struct tokenizer *t);
int tok_index_build_merges(struct tokenizer *t);
int32_t tok_vocab_find(const struct tokenizer *t, const char *s, size_t len);
int32_t tok_merge_rank(const struct tokenizer *t, const char *a, size_t alen,
                       const char *b, size_t blen);
uint64_t tok_hash(const void *p, size_t len, uint64_t h);
void tok_index_free(struct tok_index *ix);

/* tok_special.c */
int tok_special_build(struct tokenizer *t);
void tok_special_free(struct tokenizer *t);
/* Encodes text: special tokens cut out first (control and unknown ones only
 * when parse_special), each run of plain text handed to the family's
 * encoder. */
int tok_encode_fragments(const struct tokenizer *t, const char *text,
                         size_t len, bool parse_special, struct tok_ids *out);

/* tok_spm.c / tok_bpe.c: one run of plain text. space_prefix: SPM puts a
 * space before it (add_space_prefix, after a special token or at the
 * start). */
int tok_spm_encode(const struct tokenizer *t, const char *text, size_t len,
                   bool space_prefix, struct tok_ids *out);
int tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len,
                   struct tok_ids *out);

#endif
