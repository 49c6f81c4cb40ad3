/* input.h — the input line: GNU readline in callback mode, drawn into a
 * curses window.
 *
 * Readline keeps the buffer, history, Emacs/vi editing and ~/.inputrc;
 * this module feeds it keys one at a time (rl_callback_read_char) and
 * draws rl_line_buffer itself (rl_redisplay_function), so readline never
 * writes to the terminal. Alt-Enter inserts a newline; a bracketed paste
 * keeps its newlines. A completed line is handed to the callback after
 * readline has returned, so the callback may set new text.
 *
 * Readline is one global state per process; so is this module. */
#ifndef KK_INPUT_H
#define KK_INPUT_H

/* line: the completed line (malloc'd, the callee frees), or NULL at EOF
 * (Ctrl-D on an empty line). */
typedef void (*input_line_fn)(void *ud, char *line);

int input_open(input_line_fn on_line, void *ud);
void input_close(void);

/* The curses window to draw into and read keys from (after each resize). */
void input_set_window(void *window);

/* Feeds one wgetch() result: a byte, or an ncurses KEY_ code for the
 * editing keys (arrows, Home, End, Delete, Backspace). */
void input_feed(int key);

/* Replaces the text being edited (cursor at its end). */
void input_set_text(const char *text);

/* Whether the line being edited is empty. */
int input_is_empty(void);

/* Draws the line into the window (wnoutrefresh, no doupdate). */
void input_draw(void);

/* Rows the current text needs at this width. */
int input_rows_needed(int cols);

#endif
