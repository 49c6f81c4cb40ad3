/* unicode.c — see unicode.h. */
#include "unicode.h"

unsigned uni_flags(uint32_t cpt)
{
    int lo = 0, hi = uni_n_ranges - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (cpt < uni_ranges[mid].first)
            hi = mid - 1;
        else if (cpt > uni_ranges[mid].last)
            lo = mid + 1;
        else
            return uni_ranges[mid].flags;
    }
    return UNI_UNDEFINED;
}

size_t uni_len_from_lead(unsigned char lead)
{
    static const unsigned char by_high_nibble[16] = {
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4,
    };
    return by_high_nibble[lead >> 4];
}

static int is_continuation(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

/* One code point at s[*pos]; -1 when the bytes there start no sequence
 * llama.cpp accepts (it then skips a single byte). */
static int64_t decode_one(const unsigned char *s, size_t len, size_t *pos)
{
    size_t i = *pos;
    unsigned char c = s[i];
    if (c < 0x80) {
        *pos = i + 1;
        return c;
    }
    if (!(c & 0x40))
        return -1;
    int n = !(c & 0x20) ? 2 : !(c & 0x10) ? 3 : !(c & 0x08) ? 4 : 0;
    if (n == 0 || i + (size_t)n > len)
        return -1;
    uint32_t cpt = c & (0x7F >> n);
    for (int k = 1; k < n; k++) {
        if (!is_continuation(s[i + k]))
            return -1;
        cpt = (cpt << 6) | (s[i + k] & 0x3F);
    }
    *pos = i + n;
    return cpt;
}

uint32_t uni_decode_next(const char *s, size_t len, size_t *pos)
{
    int64_t cpt = decode_one((const unsigned char *)s, len, pos);
    if (cpt < 0) {
        (*pos)++;
        return 0xFFFD;
    }
    return (uint32_t)cpt;
}

size_t uni_decode(const char *s, size_t len, uint32_t *out)
{
    size_t n = 0, pos = 0;
    while (pos < len)
        out[n++] = uni_decode_next(s, len, &pos);
    return n;
}

int uni_encode(uint32_t cpt, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cpt > 0x10FFFF)
        cpt = 0xFFFD;
    if (cpt < 0x80) {
        o[0] = (unsigned char)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        o[0] = 0xC0 | (cpt >> 6);
        o[1] = 0x80 | (cpt & 0x3F);
        return 2;
    }
    if (cpt < 0x10000) {
        o[0] = 0xE0 | (cpt >> 12);
        o[1] = 0x80 | ((cpt >> 6) & 0x3F);
        o[2] = 0x80 | (cpt & 0x3F);
        return 3;
    }
    o[0] = 0xF0 | (cpt >> 18);
    o[1] = 0x80 | ((cpt >> 12) & 0x3F);
    o[2] = 0x80 | ((cpt >> 6) & 0x3F);
    o[3] = 0x80 | (cpt & 0x3F);
    return 4;
}

/* GPT-2 keeps the printable Latin-1 bytes as themselves and numbers the
 * rest (controls, space, DEL, NBSP, soft hyphen) from U+0100 upward in byte
 * order. */
static int byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
}

uint32_t uni_byte_to_cpt(unsigned char b)
{
    if (byte_is_printable(b))
        return b;
    uint32_t n = 0;
    for (unsigned k = 0; k < b; k++)
        n += !byte_is_printable(k);
    return 256 + n;
}

int uni_valid_prefix(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    int n;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k < n; k++) {
        if ((size_t)k >= avail)
            return 0;
        unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
        if (s[k] < lo_k || s[k] > hi_k)
            return -1;
    }
    return n;
}
