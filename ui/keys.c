/* keys.c — the keybinding table (see keys.h). */
#include "keys.h"

#include <curses.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTRL(c) ((c) & 0x1f)

static const struct key_binding table[] = {
    {"Enter", '\r', '\n', "send", "Send the message, or run the slash command",
     "", KEY_ACTION_SEND, 0},
    {"Alt-Enter", 0, 0, "newline", "Insert a newline into the message", "",
     KEY_ACTION_NEWLINE, 0},
    {"Ctrl-C", CTRL('c'), 0, "stop",
     "Stop the answer being generated (the partial answer is kept)", "/stop",
     KEY_ACTION_STOP, 0},
    {"Esc", 27, 0, "stop", "While an answer streams: stop it", "/stop",
     KEY_ACTION_STOP, KEYS_STREAMING},
    {"PageUp", KEY_PPAGE, 0, "scroll up", "Scroll the transcript up a page",
     "", KEY_ACTION_SCROLL_UP, 0},
    {"PageDown", KEY_NPAGE, 0, "scroll down",
     "Scroll the transcript down a page", "", KEY_ACTION_SCROLL_DOWN, 0},
    {"Ctrl-Home", 0, 0, "top", "Scroll to the start of the conversation", "",
     KEY_ACTION_SCROLL_TOP, 0},
    {"Ctrl-End", 0, 0, "bottom", "Scroll to the end and follow the answer",
     "", KEY_ACTION_SCROLL_BOTTOM, 0},
    {"Mouse wheel", 0, 0, "scroll", "Scroll the transcript three lines", "",
     KEY_ACTION_WHEEL, 0},
    {"F1", KEY_F(1), 0, "help", "Show or hide this help", "/help",
     KEY_ACTION_HELP, 0},
    {"F2", KEY_F(2), 0, "new", "Start a new conversation", "/new",
     KEY_ACTION_NEW, 0},
    {"F3", KEY_F(3), 0, "previous", "Switch to the conversation above in the list",
     "/switch", KEY_ACTION_PREV_CONV, 0},
    {"F4", KEY_F(4), 0, "next", "Switch to the conversation below in the list",
     "/switch", KEY_ACTION_NEXT_CONV, 0},
    {"F5", KEY_F(5), 0, "regenerate", "Generate the last answer again", "/regen",
     KEY_ACTION_REGEN, 0},
    {"F6", KEY_F(6), 0, "edit", "Edit and resend the last message", "/edit",
     KEY_ACTION_EDIT, 0},
    {"F7", KEY_F(7), 0, "document", "Load a text file into the conversation",
     "/doc", KEY_ACTION_DOC, 0},
    {"F8", KEY_F(8), 0, "stats", "Show the statistics of the last answer",
     "/stats", KEY_ACTION_STATS, 0},
    {"F9", KEY_F(9), 0, "copy",
     "Copy the last answer to the clipboard (OSC 52)", "/copy",
     KEY_ACTION_COPY, 0},
    {"Ctrl-L", CTRL('l'), 0, "redraw", "Redraw the screen", "",
     KEY_ACTION_REDRAW, 0},
    {"F10", KEY_F(10), 0, "quit", "Quit (the conversation is saved)", "/quit",
     KEY_ACTION_QUIT, 0},
    {"Ctrl-Q", CTRL('q'), 0, "quit", "Quit (the conversation is saved)",
     "/quit", KEY_ACTION_QUIT, 0},
    {"d", 'd', 'D', "drop turns",
     "Context full: leave the oldest turns out of the model's context",
     "/overflow drop", KEY_ACTION_OVERFLOW_DROP, KEYS_CHOOSING},
    {"s", 's', 'S', "sink+window",
     "Context full: go on with the LOSSY sink+window cache",
     "/overflow sink", KEY_ACTION_OVERFLOW_SINK, KEYS_CHOOSING},
    {"r", 'r', 'R', "refuse",
     "Context full: send nothing (the message stays saved)",
     "/overflow refuse", KEY_ACTION_OVERFLOW_REFUSE, KEYS_CHOOSING},
};

const struct key_binding *keys_table(size_t *n)
{
    *n = sizeof table / sizeof table[0];
    return table;
}

const struct key_binding *keys_lookup(int code, int state)
{
    if (code == 0)
        return NULL;
    /* Ctrl-Home/Ctrl-End have no fixed code: ncurses makes them up from the
     * terminfo extended names. */
    const char *kn = code >= KEY_MIN ? keyname(code) : NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct key_binding *k = &table[i];
        if (k->action == KEY_ACTION_SEND)
            continue;   /* Enter belongs to readline */
        bool by_name = kn && ((k->action == KEY_ACTION_SCROLL_TOP &&
                               !strcmp(kn, "kHOM5")) ||
                              (k->action == KEY_ACTION_SCROLL_BOTTOM &&
                               !strcmp(kn, "kEND5")));
        if (!by_name && k->code != code && k->code2 != code)
            continue;
        if ((k->only_when & state) != k->only_when)
            continue;   /* Esc: readline's then (vi mode, Meta keys) */
        return k;
    }
    return NULL;
}

char *keys_overlay_text(const char *commands_help)
{
    size_t cap = 4096 + (commands_help ? strlen(commands_help) : 0);
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t len = (size_t)snprintf(out, cap, "Keys\n");
    for (size_t i = 0; i < sizeof table / sizeof table[0] && len < cap; i++) {
        const struct key_binding *k = &table[i];
        len += (size_t)snprintf(out + len, cap - len, "  %-12s %s%s%s%s\n",
                                k->key, k->description,
                                k->command[0] ? " (" : "", k->command,
                                k->command[0] ? ")" : "");
    }
    if (commands_help && len < cap)
        snprintf(out + len, cap - len, "\nCommands\n%s", commands_help);
    return out;
}
