/* convlist.c — the conversation list pane (see convlist.h). */
#include "convlist.h"

#include <curses.h>

#include "screen.h"

int convlist_find(const struct convlist_item *items, int n, int64_t id)
{
    for (int i = 0; i < n; i++)
        if (items[i].id == id)
            return i;
    return -1;
}

void convlist_draw(void *window, const struct convlist_item *items, int n,
                   int64_t current, bool color)
{
    WINDOW *w = window;
    int rows, cols;
    getmaxyx(w, rows, cols);
    werase(w);
    wattron(w, A_BOLD);
    mvwaddnstr(w, 0, 1, "conversations", cols - 2);
    wattroff(w, A_BOLD);
    int row = 1;
    if (current == 0 && row < rows) {
        wattron(w, color ? COLOR_PAIR(PAIR_SELECTED) : A_REVERSE);
        mvwaddnstr(w, row++, 1, "(new)", cols - 2);
        wattroff(w, color ? COLOR_PAIR(PAIR_SELECTED) : A_REVERSE);
    }
    int sel = convlist_find(items, n, current);
    int first = sel >= rows - row ? sel - (rows - row) + 1 : 0;
    for (int i = first; i < n && row < rows; i++, row++) {
        attr_t a = items[i].id == current
                       ? (color ? COLOR_PAIR(PAIR_SELECTED) : A_REVERSE)
                       : A_NORMAL;
        wattron(w, a);
        mvwaddnstr(w, row, 1, items[i].title[0] ? items[i].title
                                                : "(untitled)", cols - 2);
        wattroff(w, a);
    }
    mvwvline(w, 0, cols - 1, ACS_VLINE, rows);
}
