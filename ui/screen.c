/* screen.c — curses setup and the layout (see screen.h). */
#include "screen.h"

#include <curses.h>
#include <stdio.h>
#include <stdlib.h>

/* curses itself is one global screen; these mirror it. */
static SCREEN *term_screen;
static bool has_color_now;

static void clamp_rect(struct rect *r)
{
    if (r->h < 0)
        r->h = 0;
    if (r->w < 0)
        r->w = 0;
}

void layout_compute(int rows, int cols, int input_rows, struct layout *out)
{
    *out = (struct layout){0};
    if (rows < SCREEN_MIN_ROWS || cols < SCREEN_MIN_COLS) {
        out->too_small = true;
        return;
    }
    if (input_rows < 1)
        input_rows = 1;
    if (input_rows > LAYOUT_INPUT_MAX_ROWS)
        input_rows = LAYOUT_INPUT_MAX_ROWS;
    if (input_rows > rows / 4)
        input_rows = rows / 4 > 0 ? rows / 4 : 1;
    int list_w = cols >= LAYOUT_CONVLIST_MIN_COLS ? LAYOUT_CONVLIST_WIDTH : 0;
    out->panes_folded = rows < LAYOUT_PANES_MIN_ROWS ||
                        cols - list_w < LAYOUT_PANES_MIN_COLS;
    int panes_h = out->panes_folded ? 0 : LAYOUT_PANES_HEIGHT;
    int body_h = rows - 1 - input_rows;
    out->input = (struct rect){rows - input_rows, 0, input_rows, cols};
    out->status = (struct rect){rows - input_rows - 1, 0, 1, cols};
    if (list_w)
        out->convlist = (struct rect){0, 0, body_h, list_w};
    int x = list_w, w = cols - list_w;
    out->transcript = (struct rect){0, x, body_h - panes_h, w};
    if (panes_h) {
        int third = w / 3;
        int y = body_h - panes_h;
        out->acceptance = (struct rect){y, x, panes_h, third};
        out->kv = (struct rect){y, x + third, panes_h, third};
        out->speed = (struct rect){y, x + 2 * third, panes_h, w - 2 * third};
    }
    clamp_rect(&out->transcript);
}

int screen_open(void)
{
    term_screen = newterm(NULL, stdout, stdin);
    if (!term_screen)
        return -1;
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    has_color_now = false;
    if (!getenv("NO_COLOR") && has_colors() && start_color() == OK) {
        use_default_colors();
        has_color_now = true;
        init_pair(PAIR_USER, COLOR_CYAN, -1);
        init_pair(PAIR_ASSISTANT, COLOR_GREEN, -1);
        init_pair(PAIR_CODE, COLOR_YELLOW, -1);
        init_pair(PAIR_NOTICE, COLOR_MAGENTA, -1);
        init_pair(PAIR_DIM, COLOR_BLUE, -1);
        init_pair(PAIR_BAR, COLOR_BLACK, COLOR_CYAN);
        init_pair(PAIR_ACCENT, COLOR_YELLOW, -1);
        init_pair(PAIR_SELECTED, COLOR_BLACK, COLOR_GREEN);
    }
    mousemask(BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
    mouseinterval(0);
    /* Bracketed paste: a pasted text arrives wrapped in ESC[200~ ESC[201~,
     * which readline turns into one insertion, newlines included. */
    fputs("\033[?2004h", stdout);
    fflush(stdout);
    return 0;
}

void screen_close(void)
{
    if (!term_screen)
        return;
    fputs("\033[?2004l", stdout);
    fflush(stdout);
    endwin();
    delscreen(term_screen);
    term_screen = NULL;
}

bool screen_has_color(void) { return has_color_now; }
