/* transcript.c — wrapped message lines (see transcript.h).
 *
 * Every message owns a growing byte buffer; all screen lines live in one
 * array in display order, so the last message's lines are always at its
 * end. Greedy wrapping only ever revisits a line's break when text is
 * added to that very line, which is why appending re-wraps just the last
 * line of the last message. */
#include "transcript.h"

#include <curses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "screen.h"

struct message {
    enum transcript_role role;
    char *text;
    size_t len, cap;
};

struct transcript {
    struct message *msgs;
    int n_msgs, cap_msgs;
    struct transcript_line *lines;
    int n_lines, cap_lines;
    int width;
    int scroll;                /* lines above the bottom */
    uint64_t lines_wrapped;
};

enum { TAB_WIDTH = 4, CODE_INDENT = 2 };

/* ---- characters ---- */

/* Decodes one UTF-8 character at s[i] (i < len); returns its byte length
 * (at least 1). Invalid bytes come out as U+FFFD, one byte each. */
static int utf8_next(const char *s, size_t len, size_t i, wchar_t *wc)
{
    const unsigned char *p = (const unsigned char *)s + i;
    size_t left = len - i;
    int n = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2
          : (p[0] & 0xf0) == 0xe0 ? 3 : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (size_t)n > left) {
        *wc = 0xfffd;
        return 1;
    }
    uint32_t c = n == 1 ? p[0] : p[0] & (0x7f >> n);
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            *wc = 0xfffd;
            return 1;
        }
        c = c << 6 | (p[k] & 0x3f);
    }
    *wc = (wchar_t)c;
    return n;
}

/* Columns a character takes; control characters show as one cell. */
static int char_width(wchar_t wc)
{
    if (wc == '\t')
        return TAB_WIDTH;
    int w = wcwidth(wc);
    return w < 0 ? 1 : w;
}

/* ---- line list ---- */

static int lines_push(struct transcript *t, struct transcript_line line)
{
    if (t->n_lines == t->cap_lines) {
        int cap = t->cap_lines ? t->cap_lines * 2 : 256;
        void *p = realloc(t->lines, sizeof *t->lines * (size_t)cap);
        if (!p)
            return -1;
        t->lines = p;
        t->cap_lines = cap;
    }
    t->lines[t->n_lines++] = line;
    t->lines_wrapped++;
    return 0;
}

static int emit(struct transcript *t, int msg, size_t start, size_t end,
                int width, enum transcript_line_kind kind, bool in_code,
                bool *starts_segment)
{
    struct transcript_line l = {
        .msg = (uint32_t)msg, .start = (uint32_t)start,
        .len = (uint32_t)(end - start),
        .width = (uint16_t)(width > 0xffff ? 0xffff : width),
        .kind = (uint8_t)kind, .in_code = in_code,
        .starts_segment = *starts_segment};
    *starts_segment = false;
    return lines_push(t, l);
}

/* ---- wrapping ---- */

static bool is_fence(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && i < 3 && s[i] == ' ')
        i++;
    return len - i >= 3 && !memcmp(s + i, "```", 3);
}

/* Splits [pos, end) by columns only (code and over-long words). */
static int wrap_hard(struct transcript *t, int msg, size_t pos, size_t end,
                     int width, bool *seg)
{
    const struct message *m = &t->msgs[msg];
    size_t start = pos;
    int col = 0;
    while (pos < end) {
        wchar_t wc;
        int n = utf8_next(m->text, end, pos, &wc);
        int w = char_width(wc);
        if (col + w > width && col > 0) {
            if (emit(t, msg, start, pos, col, TRANSCRIPT_LINE_CODE, true, seg))
                return -1;
            start = pos;
            col = 0;
        }
        col += w;
        pos += (size_t)n;
    }
    return emit(t, msg, start, end, col, TRANSCRIPT_LINE_CODE, true, seg);
}

/* Greedy word wrap of [pos, end): breaks after the last space that fits,
 * splits a word wider than the line. Spaces at a break hang off the end. */
static int wrap_words(struct transcript *t, int msg, size_t pos, size_t end,
                      int width, bool *seg)
{
    const struct message *m = &t->msgs[msg];
    size_t start = pos, brk = 0;
    int col = 0, brk_col = 0, brk_visible = 0, visible = 0;
    while (pos < end) {
        wchar_t wc;
        int n = utf8_next(m->text, end, pos, &wc);
        int w = char_width(wc);
        if (wc == ' ') {
            col += w;
            pos += (size_t)n;
            brk = pos;
            brk_col = col;
            brk_visible = visible;
            continue;
        }
        if (col + w > width && col > 0) {
            if (brk > start) {
                if (emit(t, msg, start, brk, brk_visible, TRANSCRIPT_LINE_TEXT,
                         false, seg))
                    return -1;
                start = brk;
                col -= brk_col;
                visible = col;
            }
            if (col + w > width && col > 0) {
                if (emit(t, msg, start, pos, col, TRANSCRIPT_LINE_TEXT, false,
                         seg))
                    return -1;
                start = pos;
                col = visible = 0;
            }
            brk = 0;
        }
        col += w;
        visible = col;
        pos += (size_t)n;
    }
    return emit(t, msg, start, end, visible, TRANSCRIPT_LINE_TEXT, false, seg);
}

/* Wraps message msg from byte pos, where the code-block state is in_code
 * and seg says whether pos starts a segment (follows a '\n'). */
static int wrap_from(struct transcript *t, int msg, size_t pos, bool in_code,
                     bool seg)
{
    const struct message *m = &t->msgs[msg];
    int width = t->width < 4 ? 4 : t->width;
    for (;;) {
        const char *nl = memchr(m->text + pos, '\n', m->len - pos);
        size_t end = nl ? (size_t)(nl - m->text) : m->len;
        int rc;
        if (seg && is_fence(m->text + pos, end - pos)) {
            rc = emit(t, msg, pos, end, 0, TRANSCRIPT_LINE_FENCE, in_code,
                      &seg);
            in_code = !in_code;
        } else if (in_code) {
            rc = wrap_hard(t, msg, pos, end, width - CODE_INDENT, &seg);
        } else {
            rc = wrap_words(t, msg, pos, end, width, &seg);
        }
        if (rc)
            return -1;
        if (!nl)
            return 0;
        pos = end + 1;
        seg = true;
    }
}

static int wrap_message(struct transcript *t, int msg)
{
    bool no = false;
    if (msg > 0 && emit(t, msg, 0, 0, 0, TRANSCRIPT_LINE_BLANK, false, &no))
        return -1;
    if (emit(t, msg, 0, 0, 0, TRANSCRIPT_LINE_HEADER, false, &no))
        return -1;
    if (t->msgs[msg].len == 0)
        return 0;
    return wrap_from(t, msg, 0, false, true);
}

/* ---- messages ---- */

struct transcript *transcript_new(int width)
{
    struct transcript *t = calloc(1, sizeof *t);
    if (t)
        t->width = width;
    return t;
}

void transcript_clear(struct transcript *t)
{
    for (int i = 0; i < t->n_msgs; i++)
        free(t->msgs[i].text);
    t->n_msgs = 0;
    t->n_lines = 0;
    t->scroll = 0;
}

void transcript_free(struct transcript *t)
{
    if (!t)
        return;
    transcript_clear(t);
    free(t->msgs);
    free(t->lines);
    free(t);
}

static int text_reserve(struct message *m, size_t extra)
{
    if (m->len + extra + 1 <= m->cap)
        return 0;
    size_t cap = m->cap ? m->cap : 64;
    while (cap < m->len + extra + 1)
        cap *= 2;
    char *p = realloc(m->text, cap);
    if (!p)
        return -1;
    m->text = p;
    m->cap = cap;
    return 0;
}

int transcript_add(struct transcript *t, enum transcript_role role,
                   const char *text)
{
    if (t->n_msgs == t->cap_msgs) {
        int cap = t->cap_msgs ? t->cap_msgs * 2 : 64;
        void *p = realloc(t->msgs, sizeof *t->msgs * (size_t)cap);
        if (!p)
            return -1;
        t->msgs = p;
        t->cap_msgs = cap;
    }
    struct message *m = &t->msgs[t->n_msgs];
    *m = (struct message){.role = role};
    size_t len = text ? strlen(text) : 0;
    if (text_reserve(m, len))
        return -1;
    if (len)
        memcpy(m->text, text, len);
    m->len = len;
    m->text[len] = 0;
    t->n_msgs++;
    int before = t->n_lines;
    if (wrap_message(t, t->n_msgs - 1))
        return -1;
    if (t->scroll > 0)
        t->scroll += t->n_lines - before;
    return t->n_msgs - 1;
}

/* Drops the last message's final text line and wraps again from there. */
static int rewrap_tail(struct transcript *t)
{
    int msg = t->n_msgs - 1;
    int before = t->n_lines;
    struct transcript_line *last = &t->lines[t->n_lines - 1];
    size_t pos = 0;
    bool in_code = false, seg = true;
    if (last->kind != TRANSCRIPT_LINE_HEADER &&
        last->kind != TRANSCRIPT_LINE_BLANK) {
        pos = last->start;
        in_code = last->in_code;
        seg = last->starts_segment;
        t->n_lines--;
        before--;
    }
    if (wrap_from(t, msg, pos, in_code, seg))
        return -1;
    if (t->scroll > 0)
        t->scroll += t->n_lines - before;
    return 0;
}

int transcript_append(struct transcript *t, const char *text, size_t len)
{
    if (t->n_msgs == 0 || len == 0)
        return 0;
    struct message *m = &t->msgs[t->n_msgs - 1];
    if (text_reserve(m, len))
        return -1;
    memcpy(m->text + m->len, text, len);
    m->len += len;
    m->text[m->len] = 0;
    return rewrap_tail(t);
}

int transcript_set_last(struct transcript *t, const char *text)
{
    if (t->n_msgs == 0)
        return 0;
    enum transcript_role role = t->msgs[t->n_msgs - 1].role;
    transcript_truncate(t, t->n_msgs - 1);
    return transcript_add(t, role, text) < 0 ? -1 : 0;
}

void transcript_truncate(struct transcript *t, int i)
{
    if (i < 0)
        i = 0;
    if (i >= t->n_msgs)
        return;
    for (int k = i; k < t->n_msgs; k++)
        free(t->msgs[k].text);
    t->n_msgs = i;
    while (t->n_lines > 0 && (int)t->lines[t->n_lines - 1].msg >= i)
        t->n_lines--;
    if (t->scroll > t->n_lines)
        t->scroll = t->n_lines;
}

int transcript_set_width(struct transcript *t, int width)
{
    if (width == t->width && t->n_lines)
        return 0;
    t->width = width;
    t->n_lines = 0;
    t->scroll = 0;
    for (int i = 0; i < t->n_msgs; i++)
        if (wrap_message(t, i))
            return -1;
    return 0;
}

int transcript_n_messages(const struct transcript *t) { return t->n_msgs; }
int transcript_n_lines(const struct transcript *t) { return t->n_lines; }

const struct transcript_line *transcript_line_at(const struct transcript *t,
                                                 int i)
{
    return i >= 0 && i < t->n_lines ? &t->lines[i] : NULL;
}

const char *transcript_text(const struct transcript *t, int i)
{
    return i >= 0 && i < t->n_msgs ? t->msgs[i].text : "";
}

enum transcript_role transcript_role_of(const struct transcript *t, int i)
{
    return i >= 0 && i < t->n_msgs ? t->msgs[i].role : TRANSCRIPT_NOTICE;
}

uint64_t transcript_lines_wrapped(const struct transcript *t)
{
    return t->lines_wrapped;
}

/* ---- scrolling ---- */

static int max_scroll(const struct transcript *t, int rows)
{
    return t->n_lines > rows ? t->n_lines - rows : 0;
}

void transcript_scroll(struct transcript *t, int delta, int rows)
{
    int s = t->scroll + delta, hi = max_scroll(t, rows);
    t->scroll = s < 0 ? 0 : s > hi ? hi : s;
}

void transcript_scroll_to(struct transcript *t, bool top, int rows)
{
    t->scroll = top ? max_scroll(t, rows) : 0;
}

int transcript_scroll_offset(const struct transcript *t) { return t->scroll; }

int transcript_first_visible(const struct transcript *t, int rows)
{
    int s = t->scroll > max_scroll(t, rows) ? max_scroll(t, rows) : t->scroll;
    int first = t->n_lines - rows - s;
    return first < 0 ? 0 : first;
}

/* ---- drawing ---- */

static const char *role_label(enum transcript_role r)
{
    switch (r) {
    case TRANSCRIPT_USER: return "you";
    case TRANSCRIPT_ASSISTANT: return "kakeya";
    case TRANSCRIPT_SYSTEM: return "system";
    default: return "note";
    }
}

static int role_pair(enum transcript_role r)
{
    switch (r) {
    case TRANSCRIPT_USER: return PAIR_USER;
    case TRANSCRIPT_ASSISTANT: return PAIR_ASSISTANT;
    case TRANSCRIPT_SYSTEM: return PAIR_DIM;
    default: return PAIR_NOTICE;
    }
}

void transcript_line_text(const struct transcript *t, int i, char *buf,
                          size_t size)
{
    const struct transcript_line *l = transcript_line_at(t, i);
    if (!l || size == 0) {
        if (size)
            buf[0] = 0;
        return;
    }
    const struct message *m = &t->msgs[l->msg];
    if (l->kind == TRANSCRIPT_LINE_HEADER) {
        snprintf(buf, size, "%s", role_label(m->role));
        return;
    }
    snprintf(buf, size, "%s%.*s", l->kind == TRANSCRIPT_LINE_CODE ? "  " : "",
             (int)l->len, m->text + l->start);
}

/* Adds bytes as wide characters, at most cols columns. */
static void draw_bytes(WINDOW *w, const char *s, size_t len, int cols)
{
    wchar_t buf[512];
    int n = 0, col = 0;
    for (size_t i = 0; i < len && n < 500;) {
        wchar_t wc;
        i += (size_t)utf8_next(s, len, i, &wc);
        int cw = char_width(wc);
        if (col + cw > cols)
            break;
        if (wc == '\t') {
            for (int k = 0; k < TAB_WIDTH; k++)
                buf[n++] = ' ';
        } else {
            buf[n++] = wcwidth(wc) < 0 ? 0xfffd : wc;
        }
        col += cw;
    }
    if (n)
        waddnwstr(w, buf, n);
}

static void draw_line(const struct transcript *t, WINDOW *w, int i, int cols,
                      bool color)
{
    const struct transcript_line *l = &t->lines[i];
    const struct message *m = &t->msgs[l->msg];
    attr_t attr = A_NORMAL;
    switch ((enum transcript_line_kind)l->kind) {
    case TRANSCRIPT_LINE_BLANK:
        return;
    case TRANSCRIPT_LINE_HEADER:
        attr = A_BOLD | (color ? COLOR_PAIR(role_pair(m->role)) : 0);
        wattrset(w, attr);
        waddstr(w, role_label(m->role));
        wattrset(w, A_NORMAL);
        return;
    case TRANSCRIPT_LINE_FENCE:
        attr = A_DIM | (color ? COLOR_PAIR(PAIR_CODE) : 0);
        break;
    case TRANSCRIPT_LINE_CODE:
        attr = color ? COLOR_PAIR(PAIR_CODE) : A_DIM;
        waddstr(w, "  ");
        cols -= CODE_INDENT;
        break;
    case TRANSCRIPT_LINE_TEXT:
        if (m->role == TRANSCRIPT_NOTICE)
            attr = color ? COLOR_PAIR(PAIR_NOTICE) : A_DIM;
        else if (m->role == TRANSCRIPT_SYSTEM)
            attr = A_DIM;
        break;
    }
    wattrset(w, attr);
    draw_bytes(w, m->text + l->start, l->len, cols);
    wattrset(w, A_NORMAL);
}

void transcript_draw(const struct transcript *t, void *window, bool color)
{
    WINDOW *w = window;
    int rows, cols;
    getmaxyx(w, rows, cols);
    int first = transcript_first_visible(t, rows);
    for (int r = 0; r < rows; r++) {
        wmove(w, r, 0);
        wclrtoeol(w);
        if (first + r < t->n_lines)
            draw_line(t, w, first + r, cols, color);
    }
}
