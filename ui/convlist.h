/* convlist.h — the conversation list pane: titles, newest first, the
 * current one highlighted. Plain data in, drawing out; the controller
 * fills the items from the store. */
#ifndef KK_CONVLIST_H
#define KK_CONVLIST_H

#include <stdbool.h>
#include <stdint.h>

struct convlist_item {
    int64_t id;
    char title[80];
    int64_t n_messages;
};

/* Draws items into a curses WINDOW (void *), scrolled so that current is
 * in view. current == 0: a new conversation not yet saved (shown first). */
void convlist_draw(void *window, const struct convlist_item *items, int n,
                   int64_t current, bool color);

/* The index of id in items, or -1. */
int convlist_find(const struct convlist_item *items, int n, int64_t id);

#endif
