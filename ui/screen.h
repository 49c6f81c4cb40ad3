/* screen.h — the terminal: curses setup and teardown, colours, and the
 * layout of the chat screen computed from its size.
 *
 *   +-----------+---------------------------------------+
 *   | convlist  | transcript                            |
 *   |           +------------+-----------+--------------+
 *   |           | acceptance | KV saved  | speed        |   panes
 *   +-----------+------------+-----------+--------------+
 *   | status line                                       |
 *   | > input line (grows with multi-line input)        |
 *   +---------------------------------------------------+
 *
 * The list hides on narrow terminals, the panes fold into the status line
 * on short ones, and below SCREEN_MIN_COLS x SCREEN_MIN_ROWS only a
 * "terminal too small" note is drawn. layout_compute is pure (tested
 * without a terminal). NO_COLOR and terminals without colours get
 * attributes only. */
#ifndef KK_SCREEN_H
#define KK_SCREEN_H

#include <stdbool.h>

enum { SCREEN_MIN_COLS = 40, SCREEN_MIN_ROWS = 12 };
enum { LAYOUT_CONVLIST_MIN_COLS = 100, LAYOUT_CONVLIST_WIDTH = 24,
       LAYOUT_PANES_MIN_ROWS = 24, LAYOUT_PANES_MIN_COLS = 60,
       LAYOUT_PANES_HEIGHT = 5, LAYOUT_INPUT_MAX_ROWS = 5 };

/* Colour pairs (used only when screen has colour). */
enum { PAIR_USER = 1, PAIR_ASSISTANT, PAIR_CODE, PAIR_NOTICE, PAIR_DIM,
       PAIR_BAR, PAIR_ACCENT, PAIR_SELECTED };

struct rect {
    int y, x, h, w;     /* h == 0: not shown */
};

struct layout {
    bool too_small;
    bool panes_folded;  /* the panes' numbers go into the status line */
    struct rect convlist, transcript, acceptance, kv, speed, status, input;
};

/* input_rows: lines the input currently needs (clamped to 1..max). */
void layout_compute(int rows, int cols, int input_rows, struct layout *out);

/* Starts curses on the terminal (raw mode, keypad, mouse wheel, bracketed
 * paste). Returns 0 or -1 when the terminal cannot be used. */
int screen_open(void);
/* Restores the terminal; safe to call twice. */
void screen_close(void);
bool screen_has_color(void);

#endif
