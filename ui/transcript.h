/* transcript.h — the conversation as wrapped, scrollable lines.
 *
 * Holds a copy of every message's text and the list of screen lines it
 * wraps to at the current width: word-boundary wrapping that measures
 * characters with wcwidth (CJK is 2 columns, combining marks 0), splits
 * words longer than a line, and sets fenced ``` code blocks apart (not
 * word-wrapped, indented, drawn in their own colour). Each message opens
 * with a role header line.
 *
 * Appending to the last message re-wraps only from its last screen line,
 * so a streamed token costs the same however long the conversation is;
 * transcript_draw() paints only the rows in view. The counter
 * lines_wrapped lets tests check that cost.
 *
 * Needs a UTF-8 LC_CTYPE (setlocale) for widths. Not thread-safe: the UI
 * thread owns it. */
#ifndef KK_TRANSCRIPT_H
#define KK_TRANSCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum transcript_role {
    TRANSCRIPT_USER,
    TRANSCRIPT_ASSISTANT,
    TRANSCRIPT_SYSTEM,
    TRANSCRIPT_NOTICE,     /* the app's own notes: errors, /stats, help */
};

enum transcript_line_kind {
    TRANSCRIPT_LINE_BLANK,
    TRANSCRIPT_LINE_HEADER,
    TRANSCRIPT_LINE_TEXT,
    TRANSCRIPT_LINE_CODE,
    TRANSCRIPT_LINE_FENCE,
};

/* One screen line: bytes [start, start+len) of message msg. */
struct transcript_line {
    uint32_t msg;
    uint32_t start, len;
    uint16_t width;            /* display columns */
    uint8_t kind;              /* enum transcript_line_kind */
    bool in_code;              /* inside a code block at its start */
    bool starts_segment;       /* first line after a '\n' (or the text start) */
};

struct transcript;

struct transcript *transcript_new(int width);
void transcript_free(struct transcript *t);

/* Adds a message; returns its index or -1 when out of memory. */
int transcript_add(struct transcript *t, enum transcript_role role,
                   const char *text);
/* Appends text to the last message (the streaming answer). */
int transcript_append(struct transcript *t, const char *text, size_t len);
/* Replaces the last message's text (e.g. a notice that changes). */
int transcript_set_last(struct transcript *t, const char *text);
/* Removes every message from index i on. */
void transcript_truncate(struct transcript *t, int i);
void transcript_clear(struct transcript *t);

/* Re-wraps everything for a new width (a resize). */
int transcript_set_width(struct transcript *t, int width);

int transcript_n_messages(const struct transcript *t);
int transcript_n_lines(const struct transcript *t);
const struct transcript_line *transcript_line_at(const struct transcript *t,
                                                 int i);
/* Message i's text (owned by the transcript) and role. */
const char *transcript_text(const struct transcript *t, int i);
enum transcript_role transcript_role_of(const struct transcript *t, int i);

/* Screen lines wrapped since creation: the cost counter. */
uint64_t transcript_lines_wrapped(const struct transcript *t);

/* Scrolling: lines above the bottom (0 = follow the end). Clamped. */
void transcript_scroll(struct transcript *t, int delta, int rows);
void transcript_scroll_to(struct transcript *t, bool top, int rows);
int transcript_scroll_offset(const struct transcript *t);

/* The index of the first line in view for a window of rows rows. */
int transcript_first_visible(const struct transcript *t, int rows);

/* Paints the rows in view into a curses WINDOW (passed as void * so this
 * header needs no curses); color says whether to use colour pairs from
 * screen.h. */
void transcript_draw(const struct transcript *t, void *window, bool color);

/* The text of line i as it is shown (header label, code indent), written
 * into buf; for tests and the screenshot-free checks. */
void transcript_line_text(const struct transcript *t, int i, char *buf,
                          size_t size);

#endif
