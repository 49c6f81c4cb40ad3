/* unicode.h — the Unicode facts the tokenizers need, decided the way
 * llama.cpp decides them.
 *
 * UTF-8 decoding follows llama.cpp's lenient reader: a lead byte fixes the
 * length, continuation bytes are checked, overlong forms and surrogates are
 * accepted, and each byte that starts no valid sequence becomes U+FFFD. The
 * class flags come from generated range tables (unicode_tables.c, made by
 * tools/gen_unicode_tables.py from the Unicode Character Database). The
 * byte-level mapping is GPT-2's: every byte value gets a printable code
 * point, so byte strings can live in a vocabulary of text. Pure functions,
 * no state. */
#ifndef KK_UNICODE_H
#define KK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Classes, one general-category group each (plus WHITESPACE, which is the
 * White_Space property and comes on top of the category). */
enum {
    UNI_UNDEFINED = 0x0001,   /* unassigned, or not a code point */
    UNI_NUMBER = 0x0002,      /* \p{N} */
    UNI_LETTER = 0x0004,      /* \p{L} */
    UNI_SEPARATOR = 0x0008,   /* \p{Z} */
    UNI_ACCENT_MARK = 0x0010, /* \p{M} */
    UNI_PUNCTUATION = 0x0020, /* \p{P} */
    UNI_SYMBOL = 0x0040,      /* \p{S} */
    UNI_CONTROL = 0x0080,     /* \p{C} */
    UNI_WHITESPACE = 0x0100,  /* \s */
};

struct uni_range {
    uint32_t first, last;
    uint16_t flags;
};

extern const struct uni_range uni_ranges[];
extern const int uni_n_ranges;

/* The flags of cpt; UNI_UNDEFINED past U+10FFFF. Never 0. */
unsigned uni_flags(uint32_t cpt);

/* Length llama.cpp assumes from a lead byte: 1 for ASCII and stray
 * continuation bytes, 2/3/4 from the high bits. */
size_t uni_len_from_lead(unsigned char lead);

/* Decodes len bytes into code points (out must hold len entries); returns
 * the count. Invalid bytes become U+FFFD one byte at a time. */
size_t uni_decode(const char *s, size_t len, uint32_t *out);

/* The code point at s[*pos] (pos < len), advancing *pos past it; an
 * invalid byte gives U+FFFD and advances by one. Same rules as uni_decode. */
uint32_t uni_decode_next(const char *s, size_t len, size_t *pos);

/* Encodes cpt as UTF-8 into out (4 bytes room); returns the length. Values
 * past U+10FFFF are written as U+FFFD. */
int uni_encode(uint32_t cpt, char *out);

/* GPT-2 byte-level mapping: the code point standing for byte b (callers
 * build the reverse table from it). */
uint32_t uni_byte_to_cpt(unsigned char b);

/* Length of the valid UTF-8 sequence at s (1..4), 0 when s[0..avail) is a
 * valid but incomplete prefix, -1 when it cannot start a valid character.
 * Strict (no overlongs, no surrogates): this is for text we emit. */
int uni_valid_prefix(const unsigned char *s, size_t avail);

#endif
