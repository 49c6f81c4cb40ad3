/* input.c — readline in callback mode behind a curses window (see
 * input.h). */
#include "input.h"

#include <curses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <readline/history.h>
#include <readline/readline.h>

enum { PROMPT_COLS = 2, QUEUE = 64 };

/* Readline's callbacks take no user data, so its state is global; this is
 * the module's one instance of it. */
static struct {
    WINDOW *win;
    input_line_fn on_line;
    void *ud;
    unsigned char queue[QUEUE];
    int head, n;
    char *done_line;
    bool has_done_line;
    FILE *devnull;
} in;

static void push(const char *bytes)
{
    for (; *bytes && in.n < QUEUE; bytes++)
        in.queue[(in.head + in.n++) % QUEUE] = (unsigned char)*bytes;
}

/* readline asks for the next byte: the queued key, or, inside a
 * bracketed paste, the next byte from the terminal. */
static int input_getc(FILE *f)
{
    (void)f;
    if (in.n) {
        int c = in.queue[in.head];
        in.head = (in.head + 1) % QUEUE;
        in.n--;
        return c;
    }
    if (!in.win)
        return EOF;
    nodelay(in.win, FALSE);
    wtimeout(in.win, 500);
    int c = wgetch(in.win);
    nodelay(in.win, TRUE);
    return c == ERR || c > 255 ? EOF : c;
}

static int input_available(void) { return in.n > 0; }

static void term_noop(int meta) { (void)meta; }
static void deprep_noop(void) {}

static void handle_line(char *line)
{
    if (line && *line)
        add_history(line);
    free(in.done_line);
    in.done_line = line;
    in.has_done_line = true;
}

static int insert_newline(int count, int key)
{
    (void)key;
    for (int i = 0; i < (count > 0 ? count : 1); i++)
        rl_insert_text("\n");
    return 0;
}

/* Where byte upto of the text lands: row and column, the prompt taking
 * the first PROMPT_COLS columns of every row. */
static void place(const char *text, int upto, int cols, int *row, int *col)
{
    mbstate_t st;
    memset(&st, 0, sizeof st);
    int r = 0, c = PROMPT_COLS, len = (int)strlen(text);
    for (int i = 0; i < upto && i < len;) {
        wchar_t wc;
        size_t n = mbrtowc(&wc, text + i, (size_t)(len - i), &st);
        if (n == (size_t)-1 || n == (size_t)-2 || n == 0) {
            memset(&st, 0, sizeof st);
            wc = '?';
            n = 1;
        }
        i += (int)n;
        if (wc == '\n') {
            r++;
            c = PROMPT_COLS;
            continue;
        }
        int w = wcwidth(wc);
        w = w < 0 ? 1 : w;
        if (c + w > cols) {
            r++;
            c = PROMPT_COLS;
        }
        c += w;
    }
    *row = r;
    *col = c;
}

int input_rows_needed(int cols)
{
    int r, c;
    place(rl_line_buffer ? rl_line_buffer : "", rl_end, cols, &r, &c);
    return r + 1;
}

void input_draw(void)
{
    if (!in.win)
        return;
    int rows, cols;
    getmaxyx(in.win, rows, cols);
    const char *text = rl_line_buffer ? rl_line_buffer : "";
    int total_r, total_c, cur_r, cur_c;
    place(text, rl_end, cols, &total_r, &total_c);
    place(text, rl_point, cols, &cur_r, &cur_c);
    int top = total_r - rows + 1;
    if (top > cur_r)
        top = cur_r;
    if (top < 0)
        top = 0;
    werase(in.win);
    mvwaddstr(in.win, 0, 0, top ? "\u2026 " : "> ");
    for (int r = 1; r < rows; r++)
        mvwaddstr(in.win, r, 0, ": ");
    /* Draw character by character at the places place() gives. */
    mbstate_t st;
    memset(&st, 0, sizeof st);
    int r = 0, c = PROMPT_COLS, len = rl_end;
    for (int i = 0; i < len;) {
        wchar_t wc;
        size_t n = mbrtowc(&wc, text + i, (size_t)(len - i), &st);
        if (n == (size_t)-1 || n == (size_t)-2 || n == 0) {
            memset(&st, 0, sizeof st);
            wc = '?';
            n = 1;
        }
        i += (int)n;
        if (wc == '\n') {
            r++;
            c = PROMPT_COLS;
            continue;
        }
        int w = wcwidth(wc);
        if (w < 0) {
            wc = '?';
            w = 1;
        }
        if (c + w > cols) {
            r++;
            c = PROMPT_COLS;
        }
        if (r >= top && r - top < rows)
            mvwaddnwstr(in.win, r - top, c, &wc, 1);
        c += w;
    }
    int y = cur_r - top, x = cur_c < cols ? cur_c : cols - 1;
    wmove(in.win, y < rows ? y : rows - 1, x);
    wnoutrefresh(in.win);
}

static void redisplay(void) { input_draw(); }

int input_open(input_line_fn on_line, void *ud)
{
    in.on_line = on_line;
    in.ud = ud;
    in.devnull = fopen("/dev/null", "w");
    rl_readline_name = "kakeya";
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_change_environment = 0;
    rl_prep_term_function = term_noop;
    rl_deprep_term_function = deprep_noop;
    rl_getc_function = input_getc;
    rl_input_available_hook = input_available;
    rl_redisplay_function = redisplay;
    rl_outstream = in.devnull;
    rl_instream = stdin;
    if (rl_initialize())
        return -1;
    rl_add_defun("kakeya-insert-newline", insert_newline, -1);
    rl_bind_keyseq("\\e\\r", insert_newline);
    rl_bind_keyseq("\\e\\n", insert_newline);
    rl_bind_key('\t', rl_insert);   /* no file-name completion listing */
    using_history();
    rl_callback_handler_install("", handle_line);
    return 0;
}

void input_close(void)
{
    rl_callback_handler_remove();
    free(in.done_line);
    in.done_line = NULL;
    clear_history();
    if (in.devnull)
        fclose(in.devnull);
    in.devnull = NULL;
    in.win = NULL;
}

void input_set_window(void *window)
{
    in.win = window;
    if (in.win) {
        keypad(in.win, TRUE);
        nodelay(in.win, TRUE);
    }
}

void input_feed(int key)
{
    switch (key) {
    case KEY_LEFT: push("\033[D"); break;
    case KEY_RIGHT: push("\033[C"); break;
    case KEY_UP: push("\033[A"); break;
    case KEY_DOWN: push("\033[B"); break;
    case KEY_HOME: push("\001"); break;
    case KEY_END: push("\005"); break;
    case KEY_BACKSPACE: push("\177"); break;
    case KEY_DC:
        if (rl_point < rl_end)
            push("\004");
        break;
    case KEY_ENTER: push("\r"); break;
    default:
        if (key >= 0 && key < 256) {
            char b[2] = {(char)key, 0};
            if (key == 0)
                return;
            push(b);
        }
        break;
    }
    while (in.n)
        rl_callback_read_char();
    if (in.has_done_line) {
        char *line = in.done_line;
        in.done_line = NULL;
        in.has_done_line = false;
        in.on_line(in.ud, line);
    }
}

void input_set_text(const char *text)
{
    rl_replace_line(text, 0);
    rl_point = rl_end;
    input_draw();
}

int input_is_empty(void)
{
    return rl_end == 0;
}
