/* pretokenize.c — see pretokenize.h.
 *
 * Every scanner works on one word [start, end) of the previous split and
 * appends the lengths of the words it cuts it into. Reading past `end`
 * yields NONE with no flags, which is how "end of input" appears to the
 * regexes' look-aheads. */
#include "pretokenize.h"

#include <string.h>

#include "unicode.h"

#define NONE 0xFFFFFFFFu

struct span {
    const uint32_t *cpt;
    const uint16_t *flags;
    size_t start, end;
};

static uint32_t cpt_at(const struct span *s, size_t pos)
{
    return pos >= s->start && pos < s->end ? s->cpt[pos] : NONE;
}

static unsigned flags_at(const struct span *s, size_t pos)
{
    return pos >= s->start && pos < s->end ? s->flags[pos] : 0;
}

static bool is_letter(unsigned f) { return f & UNI_LETTER; }
static bool is_number(unsigned f) { return f & UNI_NUMBER; }
static bool is_space(unsigned f) { return f & UNI_WHITESPACE; }

/* [^\s\p{L}\p{N}] — and inside the text (flags 0 means past the end). */
static bool is_other(unsigned f)
{
    return f != 0 && !(f & (UNI_WHITESPACE | UNI_LETTER | UNI_NUMBER));
}

static bool is_cr_or_lf(uint32_t c) { return c == '\r' || c == '\n'; }

/* Appends words to out[*n]; a cursor `prev` remembers where the last word
 * ended so each call only names the new end. */
struct cutter {
    size_t *out;
    size_t n;
    size_t prev;
};

static void cut_at(struct cutter *c, size_t end)
{
    if (end > c->prev)
        c->out[c->n++] = end - c->prev;
    c->prev = end;
}

/* 's 't 're 've 'm 'll 'd at pos: the length matched (0 if none). The
 * llama3 family matches them case-insensitively. */
static size_t match_contraction(const struct span *s, size_t pos,
                                bool any_case)
{
    if (cpt_at(s, pos) != '\'')
        return 0;
    uint32_t a = cpt_at(s, pos + 1), b = cpt_at(s, pos + 2);
    if (any_case) {
        if (a < 128 && a >= 'A' && a <= 'Z')
            a += 'a' - 'A';
        if (b < 128 && b >= 'A' && b <= 'Z')
            b += 'a' - 'A';
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
        (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* Whitespace run at pos: its length, and the end of its last \r or \n
 * (0 if none). */
static size_t whitespace_run(const struct span *s, size_t pos,
                             size_t *last_cr_lf_end)
{
    size_t n = 0;
    *last_cr_lf_end = 0;
    while (is_space(flags_at(s, pos + n))) {
        if (is_cr_or_lf(cpt_at(s, pos + n)))
            *last_cr_lf_end = pos + n + 1;
        n++;
    }
    return n;
}

/* \s+(?!\S) then \s+: a run followed by more text keeps its last
 * whitespace for the next word (unless it is the only one). */
static size_t trailing_space_end(const struct span *s, size_t pos, size_t n)
{
    if (n > 1 && cpt_at(s, pos + n) != NONE)
        return pos + n - 1;
    return pos + n;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static void split_gpt2(const struct span *s, struct cutter *c)
{
    size_t pos = s->start;
    while (pos < s->end) {
        uint32_t cpt = cpt_at(s, pos);
        size_t k = match_contraction(s, pos, false);
        if (k) {
            cut_at(c, pos += k);
            continue;
        }
        size_t after_space = pos + (cpt == ' ');
        unsigned f = flags_at(s, after_space);
        if (is_letter(f) || is_number(f) || is_other(f)) {
            bool (*same)(unsigned) = is_letter(f)   ? is_letter
                                     : is_number(f) ? is_number
                                                    : is_other;
            pos = after_space;
            while (same(flags_at(s, pos)))
                pos++;
            cut_at(c, pos);
            continue;
        }
        size_t last_cr_lf_end;
        size_t n = whitespace_run(s, pos, &last_cr_lf_end);
        if (n > 0) {
            cut_at(c, pos = trailing_space_end(s, pos, n));
            continue;
        }
        cut_at(c, ++pos); /* nothing matches: the character stands alone */
    }
}

/* Llama 3 (max_digits 3) and Qwen2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(const struct span *s, struct cutter *c,
                         size_t max_digits)
{
    size_t pos = s->start;
    while (pos < s->end) {
        uint32_t cpt = cpt_at(s, pos);
        unsigned f = flags_at(s, pos);
        size_t k = match_contraction(s, pos, true);
        if (k) {
            cut_at(c, pos += k);
            continue;
        }
        if (!is_cr_or_lf(cpt) && !is_number(f) &&
            (is_letter(f) || is_letter(flags_at(s, pos + 1)))) {
            pos++;
            while (is_letter(flags_at(s, pos)))
                pos++;
            cut_at(c, pos);
            continue;
        }
        if (is_number(f)) {
            size_t group = 0;
            while (is_number(flags_at(s, pos))) {
                pos++;
                if (++group == max_digits) {
                    cut_at(c, pos);
                    group = 0;
                }
            }
            cut_at(c, pos);
            continue;
        }
        size_t after_space = pos + (cpt == ' ');
        if (is_other(flags_at(s, after_space))) {
            pos = after_space;
            while (is_other(flags_at(s, pos)))
                pos++;
            while (is_cr_or_lf(cpt_at(s, pos)))
                pos++;
            cut_at(c, pos);
            continue;
        }
        size_t last_cr_lf_end;
        size_t n = whitespace_run(s, pos, &last_cr_lf_end);
        if (last_cr_lf_end > 0) {
            cut_at(c, pos = last_cr_lf_end);
            continue;
        }
        if (n > 0) {
            cut_at(c, pos = trailing_space_end(s, pos, n));
            continue;
        }
        cut_at(c, ++pos);
    }
}

/* Regexes that only pick matches out of the text, the rest between them
 * becoming words too: a matcher says how long a match at pos is (0: none). */
typedef size_t (*matcher)(const struct span *s, size_t pos);

static void split_matches(const struct span *s, struct cutter *c,
                          matcher match)
{
    size_t pos = s->start;
    while (pos < s->end) {
        size_t k = match(s, pos);
        if (k == 0) {
            pos++;
            continue;
        }
        cut_at(c, pos); /* the gap before the match, if any */
        cut_at(c, pos += k);
    }
    cut_at(c, s->end);
}

/* \p{N}: one number character. */
static size_t match_one_number(const struct span *s, size_t pos)
{
    return is_number(flags_at(s, pos)) ? 1 : 0;
}

/* \p{N}+ */
static size_t match_number_run(const struct span *s, size_t pos)
{
    size_t k = 0;
    while (is_number(flags_at(s, pos + k)))
        k++;
    return k;
}

/* [\p{P}\$\+<=>\^~\|]+ */
static bool is_punct_or_math(const struct span *s, size_t pos)
{
    uint32_t c = cpt_at(s, pos);
    return (flags_at(s, pos) & UNI_PUNCTUATION) ||
           (c < 128 && c != 0 && strchr("$+<=>^~|", (int)c));
}

static size_t match_punct_run(const struct span *s, size_t pos)
{
    size_t k = 0;
    while (is_punct_or_math(s, pos + k))
        k++;
    return k;
}

/* [0-9][0-9][0-9] */
static size_t match_three_digits(const struct span *s, size_t pos)
{
    for (size_t k = 0; k < 3; k++) {
        uint32_t c = cpt_at(s, pos + k);
        if (c < '0' || c > '9')
            return 0;
    }
    return 3;
}

enum step {
    STEP_GPT2,
    STEP_LLAMA3,
    STEP_QWEN2,
    STEP_EACH_NUMBER,
    STEP_NUMBER_RUNS,
    STEP_PUNCT_RUNS,
    STEP_THREE_DIGITS,
};

/* Applies one regex to every word of in[0..n_in), writing the new words. */
static size_t apply_step(enum step step, const uint32_t *cpts,
                         const uint16_t *flags, const size_t *in,
                         size_t n_in, size_t *out)
{
    struct cutter c = {.out = out, .n = 0, .prev = 0};
    size_t start = 0;
    for (size_t w = 0; w < n_in; w++) {
        struct span s = {cpts, flags, start, start + in[w]};
        c.prev = start;
        switch (step) {
        case STEP_GPT2: split_gpt2(&s, &c); break;
        case STEP_LLAMA3: split_llama3(&s, &c, 3); break;
        case STEP_QWEN2: split_llama3(&s, &c, 1); break;
        case STEP_EACH_NUMBER: split_matches(&s, &c, match_one_number); break;
        case STEP_NUMBER_RUNS: split_matches(&s, &c, match_number_run); break;
        case STEP_PUNCT_RUNS: split_matches(&s, &c, match_punct_run); break;
        case STEP_THREE_DIGITS:
            split_matches(&s, &c, match_three_digits);
            break;
        }
        start = s.end;
    }
    return c.n;
}

bool pretok_kind_from_name(const char *name, size_t len,
                           enum pretok_kind *kind, bool *ignore_merges)
{
    static const struct {
        const char *name;
        enum pretok_kind kind;
        bool ignore_merges;
    } names[] = {
        {"", PRETOK_DEFAULT, false},
        {"default", PRETOK_DEFAULT, false},
        {"gpt-2", PRETOK_GPT2, false},
        {"gpt2", PRETOK_GPT2, false},
        {"phi-2", PRETOK_GPT2, false},
        {"llama3", PRETOK_LLAMA3, true},
        {"llama-v3", PRETOK_LLAMA3, true},
        {"llama-bpe", PRETOK_LLAMA3, true},
        {"falcon3", PRETOK_LLAMA3, true},
        {"qwen2", PRETOK_QWEN2, false},
        {"deepseek-r1-qwen", PRETOK_QWEN2, false},
        {"smollm", PRETOK_SMOLLM, false},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i].name) == len &&
            memcmp(names[i].name, name, len) == 0) {
            *kind = names[i].kind;
            *ignore_merges = names[i].ignore_merges;
            return true;
        }
    }
    return false;
}

size_t pretok_split(enum pretok_kind kind, const uint32_t *cpts,
                    const uint16_t *flags, size_t n, size_t *lens,
                    size_t *scratch)
{
    static const enum step chains[][4] = {
        [PRETOK_DEFAULT] = {STEP_PUNCT_RUNS, STEP_GPT2, STEP_NUMBER_RUNS,
                            STEP_THREE_DIGITS},
        [PRETOK_GPT2] = {STEP_GPT2},
        [PRETOK_LLAMA3] = {STEP_LLAMA3},
        [PRETOK_QWEN2] = {STEP_QWEN2},
        [PRETOK_SMOLLM] = {STEP_EACH_NUMBER, STEP_GPT2},
    };
    static const int chain_len[] = {
        [PRETOK_DEFAULT] = 4, [PRETOK_GPT2] = 1, [PRETOK_LLAMA3] = 1,
        [PRETOK_QWEN2] = 1, [PRETOK_SMOLLM] = 2,
    };
    if (n == 0)
        return 0;
    /* Ping-pong between the two buffers so the result ends in lens. */
    int steps = chain_len[kind];
    size_t *bufs[2] = {lens, scratch};
    int cur = steps % 2; /* where the whole text starts as one word */
    bufs[cur][0] = n;
    size_t count = 1;
    for (int i = 0; i < steps; i++) {
        count = apply_step(chains[kind][i], cpts, flags, bufs[cur], count,
                           bufs[!cur]);
        cur = !cur;
    }
    return count;
}
