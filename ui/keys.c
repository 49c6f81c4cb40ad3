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
     "", KEY_ACTION_SEND},
    {"Alt-Enter", 0, 0, "newline", "Insert a newline into the message", "",
     KEY_ACTION_NEWLINE},
    {"Ctrl-C", CTRL('c'), 0, "stop",
     "Stop the answer being generated (the partial answer is kept)", "/stop",
     KEY_ACTION_STOP},
    {"Esc", 27, 0, "stop", "While an answer streams: stop it", "/stop",
     KEY_ACTION_STOP},
    {"PageUp", KEY_PPAGE, 0, "scroll up", "Scroll the transcript up a page",
     "", KEY_ACTION_SCROLL_UP},
    {"PageDown", KEY_NPAGE, 0, "scroll down",
     "Scroll the transcript down a page", "", KEY_ACTION_SCROLL_DOWN},
    {"Ctrl-Home", 0, 0, "top", "Scroll to the start of the conversation", "",
     KEY_ACTION_SCROLL_TOP},
    {"Ctrl-End", 0, 0, "bottom", "Scroll to the end and follow the answer",
     "", KEY_ACTION_SCROLL_BOTTOM},
    {"Mouse wheel", 0, 0, "scroll", "Scroll the transcript three lines", "",
     KEY_ACTION_WHEEL},
    {"F1", KEY_F(1), 0, "help", "Show or hide this help", "/help",
     KEY_ACTION_HELP},
    {"F2", KEY_F(2), 0, "new", "Start a new conversation", "/new",
     KEY_ACTION_NEW},
    {"F3", KEY_F(3), 0, "previous", "Switch to the conversation above in the list",
     "/switch", KEY_ACTION_PREV_CONV},
    {"F4", KEY_F(4), 0, "next", "Switch to the conversation below in the list",
     "/switch", KEY_ACTION_NEXT_CONV},
    {"F5", KEY_F(5), 0, "regenerate", "Generate the last answer again", "/regen",
     KEY_ACTION_REGEN},
    {"F6", KEY_F(6), 0, "edit", "Edit and resend the last message", "/edit",
     KEY_ACTION_EDIT},
    {"F7", KEY_F(7), 0, "document", "Load a text file into the conversation",
     "/doc", KEY_ACTION_DOC},
    {"F8", KEY_F(8), 0, "stats", "Show the statistics of the last answer",
     "/stats", KEY_ACTION_STATS},
    {"F9", KEY_F(9), 0, "copy",
     "Copy the last answer to the clipboard (OSC 52)", "/copy",
     KEY_ACTION_COPY},
    {"Ctrl-L", CTRL('l'), 0, "redraw", "Redraw the screen", "",
     KEY_ACTION_REDRAW},
    {"F10", KEY_F(10), 0, "quit", "Quit (the conversation is saved)", "/quit",
     KEY_ACTION_QUIT},
    {"Ctrl-Q", CTRL('q'), 0, "quit", "Quit (the conversation is saved)",
     "/quit", KEY_ACTION_QUIT},
};

const struct key_binding *keys_table(size_t *n)
{
    *n = sizeof table / sizeof table[0];
    return table;
}

const struct key_binding *keys_lookup(int code, int streaming)
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
        if (code == 27 && !streaming)
            return NULL;   /* Esc: readline's (vi mode, Meta keys) */
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
