/* keys.h — THE table of keybindings of the chat screen.
 *
 * One row per key: what the user presses (as the help overlay and the man
 * page spell it), a short name, what it does, and the slash command that
 * does the same. The chat loop dispatches on key_action; the help overlay
 * is rendered from this table (keys_overlay_text), and tests/test_keys.c
 * checks that every key also appears in man/kakeya.1, so the three never
 * disagree. Keys not in the table go to the readline input line. */
#ifndef KK_KEYS_H
#define KK_KEYS_H

#include <stddef.h>

enum key_action {
    KEY_ACTION_NONE,
    KEY_ACTION_SEND,        /* handled by readline (accept-line) */
    KEY_ACTION_NEWLINE,     /* handled by readline (bound at setup) */
    KEY_ACTION_STOP,
    KEY_ACTION_SCROLL_UP,
    KEY_ACTION_SCROLL_DOWN,
    KEY_ACTION_SCROLL_TOP,
    KEY_ACTION_SCROLL_BOTTOM,
    KEY_ACTION_WHEEL,       /* mouse wheel: handled as KEY_MOUSE */
    KEY_ACTION_HELP,
    KEY_ACTION_NEW,
    KEY_ACTION_PREV_CONV,
    KEY_ACTION_NEXT_CONV,
    KEY_ACTION_REGEN,
    KEY_ACTION_EDIT,
    KEY_ACTION_DOC,
    KEY_ACTION_STATS,
    KEY_ACTION_COPY,
    KEY_ACTION_REDRAW,
    KEY_ACTION_QUIT,
    KEY_ACTION_OVERFLOW_DROP,    /* the context-overflow prompt's choices */
    KEY_ACTION_OVERFLOW_SINK,
    KEY_ACTION_OVERFLOW_REFUSE,
};

/* What the screen is doing, for keys_lookup: bits. */
enum {
    KEYS_STREAMING = 1,  /* an answer streams: Esc stops it */
    KEYS_CHOOSING = 2,   /* the context-overflow prompt is open and the
                            input line empty: d, s, r choose */
};

struct key_binding {
    const char *key;          /* "F2", "Ctrl-C", "PageUp" as documented */
    int code;                 /* ncurses key code or byte; 0: not a key code */
    int code2;                /* a second code for the same row, or 0 */
    const char *name;         /* short name, e.g. "stop" */
    const char *description;
    const char *command;      /* the equivalent slash command, or "" */
    enum key_action action;
    int only_when;            /* KEYS_* bits that must all be set, or 0 */
};

/* The table and its length (static, never freed). */
const struct key_binding *keys_table(size_t *n);

/* The row whose code matches (a wgetch result), or NULL. state holds
 * KEYS_* bits: a row with only_when matches only in that state (Esc stops
 * an answer only while one streams, and goes to readline otherwise; d, s
 * and r are ordinary letters unless the overflow prompt is open). */
const struct key_binding *keys_lookup(int code, int state);

/* The help overlay's text: one line per key, then commands_help (the slash
 * commands' own lines, may be NULL), as a malloc'd string (NULL when out of
 * memory). */
char *keys_overlay_text(const char *commands_help);

#endif
