/* chat.c — the chat's main loop: options, the screen's windows, and one
 * poll() over the keyboard, the engine's event fd and a SIGWINCH pipe,
 * with a timeout for the once-a-second store flush. */
#include "chat.h"

#include <curses.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "args.h"
#include "controller.h"
#include "input.h"
#include "keys.h"
#include "screen.h"

struct view {
    struct layout layout;
    WINDOW *convlist, *transcript, *acceptance, *kv, *speed, *status, *input;
    int input_rows;
    bool color;
};

/* ---- model paths ---- */

static bool is_file(const char *p)
{
    return access(p, R_OK) == 0;
}

int chat_find_model(const char *given, const char *env_name,
                    const char *name, char *buf, size_t size)
{
    if (given) {
        snprintf(buf, size, "%s", given);
        return 0;
    }
    const char *env = env_name ? getenv(env_name) : NULL;
    if (env && env[0]) {
        snprintf(buf, size, "%s", env);
        return 0;
    }
    char exe[PATH_MAX], near[PATH_MAX + 64], prefix[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(near, sizeof near, "%s/../data/models/%s", exe, name);
    snprintf(prefix, sizeof prefix, "%s/share/kakeya/models/%s",
             KAKEYA_PREFIX, name);
    if (is_file(near)) {
        snprintf(buf, size, "%s", near);
        return 0;
    }
    if (is_file(prefix)) {
        snprintf(buf, size, "%s", prefix);
        return 0;
    }
    snprintf(buf, size, "%s%s%s, %s", env_name ? "$" : "",
             env_name ? env_name : "", env_name ? " (unset)" : "", near);
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, ", %s", prefix);
    return -1;
}

/* ---- windows ---- */

static void free_windows(struct view *v)
{
    WINDOW **all[] = {&v->convlist, &v->transcript, &v->acceptance, &v->kv,
                      &v->speed, &v->status, &v->input};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (*all[i])
            delwin(*all[i]);
        *all[i] = NULL;
    }
}

static WINDOW *window_for(const struct rect *r)
{
    return r->h > 0 && r->w > 0 ? newwin(r->h, r->w, r->y, r->x) : NULL;
}

static void build_windows(struct view *v, struct controller *c)
{
    free_windows(v);
    layout_compute(LINES, COLS, v->input_rows, &v->layout);
    const struct layout *l = &v->layout;
    if (!l->too_small) {
        v->convlist = window_for(&l->convlist);
        v->transcript = window_for(&l->transcript);
        v->acceptance = window_for(&l->acceptance);
        v->kv = window_for(&l->kv);
        v->speed = window_for(&l->speed);
        v->status = window_for(&l->status);
        v->input = window_for(&l->input);
        if (l->transcript.w > 0)
            transcript_set_width(c->transcript, l->transcript.w - 1);
    } else {
        /* keys must still be read while too small */
        v->input = newwin(1, COLS > 0 ? COLS : 1, LINES > 0 ? LINES - 1 : 0, 0);
    }
    input_set_window(v->input);
    clearok(curscr, TRUE);
    c->dirty = true;
}

static void draw_help(const struct view *v)
{
    char *text = keys_overlay_text(slash_help());
    if (!text)
        return;
    int lines = 1, width = 0, cur = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '\n') {
            lines++;
            width = cur > width ? cur : width;
            cur = 0;
        } else {
            cur++;
        }
    }
    int h = lines + 2 < LINES ? lines + 2 : LINES;
    int w = width + 4 < COLS ? width + 4 : COLS;
    WINDOW *win = newwin(h, w, (LINES - h) / 2, (COLS - w) / 2);
    if (win) {
        werase(win);
        box(win, 0, 0);
        mvwaddstr(win, 0, 2, " help (F1 or Esc closes) ");
        int row = 1;
        for (char *line = strtok(text, "\n"); line && row < h - 1;
             line = strtok(NULL, "\n"))
            mvwaddnstr(win, row++, 2, line, w - 4);
        wnoutrefresh(win);
        delwin(win);
    }
    free(text);
}

static void draw(struct view *v, struct controller *c)
{
    const struct layout *l = &v->layout;
    if (l->too_small) {
        werase(stdscr);
        mvaddnstr(0, 0, "terminal too small", COLS);
        mvprintw(1 < LINES ? 1 : 0, 0, "%.*s", COLS > 0 ? COLS : 0,
                 "need 40x12");
        wnoutrefresh(stdscr);
        doupdate();
        return;
    }
    if (v->convlist) {
        convlist_draw(v->convlist, c->convs, c->n_convs, c->conv_id,
                      v->color);
        wnoutrefresh(v->convlist);
    }
    if (v->transcript) {
        transcript_draw(c->transcript, v->transcript, v->color);
        wnoutrefresh(v->transcript);
    }
    if (v->acceptance) {
        panes_draw_acceptance(v->acceptance, &c->panes, v->color);
        panes_draw_kv(v->kv, &c->panes, v->color);
        panes_draw_speed(v->speed, &c->panes, v->color);
        wnoutrefresh(v->acceptance);
        wnoutrefresh(v->kv);
        wnoutrefresh(v->speed);
    }
    if (v->status) {
        panes_draw_status(v->status, &c->panes, l->panes_folded, v->color);
        wnoutrefresh(v->status);
    }
    if (c->help_visible)
        draw_help(v);
    input_draw();   /* last: the cursor stays in the input line */
    doupdate();
}

/* ---- keys ---- */

static int transcript_rows(const struct view *v)
{
    return v->layout.transcript.h > 0 ? v->layout.transcript.h : 1;
}

static void on_mouse(struct view *v, struct controller *c)
{
    MEVENT me;
    if (getmouse(&me) != OK)
        return;
    if (me.bstate & BUTTON4_PRESSED)
        transcript_scroll(c->transcript, 3, transcript_rows(v));
    else if (me.bstate & BUTTON5_PRESSED)
        transcript_scroll(c->transcript, -3, transcript_rows(v));
}

static void on_action(struct view *v, struct controller *c,
                      enum key_action a)
{
    int page = transcript_rows(v) - 1;
    switch (a) {
    case KEY_ACTION_STOP:
        if (c->streaming)
            controller_stop(c);
        else
            input_set_text("");   /* Ctrl-C when idle clears the line */
        break;
    case KEY_ACTION_SCROLL_UP: transcript_scroll(c->transcript, page, page + 1); break;
    case KEY_ACTION_SCROLL_DOWN: transcript_scroll(c->transcript, -page, page + 1); break;
    case KEY_ACTION_SCROLL_TOP: transcript_scroll_to(c->transcript, true, page + 1); break;
    case KEY_ACTION_SCROLL_BOTTOM: transcript_scroll_to(c->transcript, false, page + 1); break;
    case KEY_ACTION_HELP: c->help_visible = !c->help_visible; break;
    case KEY_ACTION_NEW: controller_new(c); break;
    case KEY_ACTION_PREV_CONV: controller_step(c, -1); break;
    case KEY_ACTION_NEXT_CONV: controller_step(c, 1); break;
    case KEY_ACTION_REGEN: controller_regenerate(c); break;
    case KEY_ACTION_EDIT: controller_edit_last(c); break;
    case KEY_ACTION_DOC: input_set_text("/doc "); break;
    case KEY_ACTION_STATS: controller_show_stats(c); break;
    case KEY_ACTION_COPY: controller_copy_last(c, NULL); break;
    case KEY_ACTION_REDRAW: clearok(curscr, TRUE); break;
    case KEY_ACTION_QUIT: c->quit = true; break;
    case KEY_ACTION_OVERFLOW_DROP: controller_overflow_choose(c, OVERFLOW_DROP); break;
    case KEY_ACTION_OVERFLOW_SINK: controller_overflow_choose(c, OVERFLOW_SINK); break;
    case KEY_ACTION_OVERFLOW_REFUSE: controller_overflow_choose(c, OVERFLOW_REFUSE); break;
    default: break;
    }
    c->dirty = true;
}

static void on_key(struct view *v, struct controller *c, int key)
{
    if (key == KEY_RESIZE) {
        build_windows(v, c);
        return;
    }
    if (key == KEY_MOUSE) {
        on_mouse(v, c);
        c->dirty = true;
        return;
    }
    if (c->help_visible && (key == 27 || key == KEY_F(1))) {
        c->help_visible = false;
        c->dirty = true;
        return;
    }
    int state = (c->streaming ? KEYS_STREAMING : 0) |
                (c->choice.open && input_is_empty() ? KEYS_CHOOSING : 0);
    const struct key_binding *k = keys_lookup(key, state);
    if (k) {
        on_action(v, c, k->action);
        return;
    }
    if (v->layout.too_small)
        return;
    input_feed(key);
    c->dirty = true;
}

static void on_line(void *ud, char *line)
{
    controller_submit(ud, line);
}

/* ---- SIGWINCH through a pipe ---- */

static int winch_pipe[2] = {-1, -1};   /* written by the signal handler */

static void on_winch(int sig)
{
    (void)sig;
    int saved = errno;
    ssize_t w = write(winch_pipe[1], "w", 1);
    (void)w;
    errno = saved;
}

static int watch_winch(void)
{
    if (pipe2(winch_pipe, O_NONBLOCK | O_CLOEXEC))
        return -1;
    struct sigaction sa = {.sa_handler = on_winch};
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGWINCH, &sa, NULL);
}

static void on_resize(struct view *v, struct controller *c)
{
    char buf[64];
    while (read(winch_pipe[0], buf, sizeof buf) > 0)
        ;
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
        resizeterm(ws.ws_row, ws.ws_col);
    build_windows(v, c);
}

/* ---- options and the loop ---- */

struct chat_options {
    const char *model, *draft, *db, *doc;
    int n_threads, n_ctx, n_predict;
    enum kk_backend backend;
    int device;
    int checkpoint_budget_mib;   /* 0: the store's default */
    enum overflow_policy overflow;
};

static int parse_chat(int argc, char **argv, struct chat_options *o)
{
    struct args a;
    args_init(&a, "kakeya", argc, argv);
    *o = (struct chat_options){.n_predict = 1024};
    while (args_next(&a)) {
        if (args_is(&a, "-m", "--model"))
            o->model = args_value(&a);
        else if (args_is(&a, "-d", "--draft"))
            o->draft = args_value(&a);
        else if (args_is(&a, NULL, "--db"))
            o->db = args_value(&a);
        else if (args_is(&a, NULL, "--doc"))
            o->doc = args_value(&a);
        else if (args_is(&a, "-t", "--threads"))
            o->n_threads = args_int(&a, 1, 256);
        else if (args_is(&a, "-c", "--ctx"))
            o->n_ctx = args_int(&a, 64, 1 << 20);
        else if (args_is(&a, "-n", "--n-predict"))
            o->n_predict = args_int(&a, 1, 1 << 20);
        else if (args_is(&a, NULL, "--checkpoint-budget"))
            o->checkpoint_budget_mib = args_int(&a, 1, 1 << 30);
        else if (args_is(&a, NULL, "--overflow"))
            args_overflow(&a, &o->overflow);
        else if (!args_backend_option(&a, &o->backend, &o->device))
            args_unknown(&a);
    }
    return a.failed ? 2 : 0;
}

static void loop(struct view *v, struct controller *c)
{
    struct pollfd fds[3] = {
        {.fd = STDIN_FILENO, .events = POLLIN},
        {.fd = engine_thread_fd(c->engine), .events = POLLIN},
        {.fd = winch_pipe[0], .events = POLLIN},
    };
    while (!c->quit) {
        if (c->pending_input) {
            input_set_text(c->pending_input);
            free(c->pending_input);
            c->pending_input = NULL;
        }
        int rows = v->layout.input.w ? input_rows_needed(v->layout.input.w)
                                     : 1;
        if (rows != v->input_rows && !v->layout.too_small) {
            v->input_rows = rows;
            build_windows(v, c);
        }
        if (c->dirty) {
            draw(v, c);
            c->dirty = false;
        }
        int n = poll(fds, 3, 250);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (fds[2].revents & POLLIN))
            on_resize(v, c);
        if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP))) {
            int key;
            while (!c->quit && v->input && (key = wgetch(v->input)) != ERR)
                on_key(v, c, key);
            if (fds[0].revents & POLLHUP)
                c->quit = true;
        }
        if (n > 0 && (fds[1].revents & POLLIN))
            controller_drain(c);
        controller_tick(c, controller_now());
    }
}

int chat_resolve_paths(const char *cmd, const char *model, const char *draft,
                       const char *db, struct chat_paths *out)
{
    memset(out, 0, sizeof *out);
    if (chat_find_model(model, "KAKEYA_MODEL", "kakeya-chat.gguf", out->model,
                        sizeof out->model)) {
        fprintf(stderr, "%s: no model found; looked at %s.\n"
                        "Pass one with --model FILE.gguf or set "
                        "KAKEYA_MODEL.\n", cmd, out->model);
        return -1;
    }
    if (draft)
        snprintf(out->draft, sizeof out->draft, "%s", draft);
    out->has_draft = draft ||
        (!model && !getenv("KAKEYA_MODEL") &&
         chat_find_model(NULL, NULL, "kakeya-draft.gguf", out->draft,
                         sizeof out->draft) == 0);
    struct kk_error err = {{0}};
    if (db) {
        snprintf(out->db, sizeof out->db, "%s", db);
    } else if (store_default_path(out->db, sizeof out->db, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return -1;
    }
    return 0;
}

int chat_main(int argc, char **argv)
{
    struct chat_options o;
    int rc = parse_chat(argc, argv, &o);
    if (rc)
        return rc;
    struct chat_paths paths;
    if (chat_resolve_paths("kakeya", o.model, o.draft, o.db, &paths))
        return 1;
    const char *model = paths.model, *draft = paths.draft, *db = paths.db;
    bool have_draft = paths.has_draft;
    struct kk_error err = {{0}};
    setlocale(LC_ALL, "");
    if (!strstr(setlocale(LC_CTYPE, NULL), "UTF-8") &&
        !strstr(setlocale(LC_CTYPE, NULL), "utf8"))
        setlocale(LC_CTYPE, "C.UTF-8");
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "kakeya: the chat needs a terminal; for scripts use "
                        "`kakeya run`\n");
        return 2;
    }
    struct controller c;
    struct controller_options co = {.model_path = model,
                                    .draft_path = have_draft ? draft : NULL,
                                    .db_path = db, .n_ctx = o.n_ctx,
                                    .n_threads = o.n_threads,
                                    .backend = o.backend,
                                    .device = o.device,
                                    .n_predict = o.n_predict,
                                    .overflow = o.overflow,
                                    .checkpoint_budget =
                                        (uint64_t)o.checkpoint_budget_mib << 20};
    if (watch_winch() || controller_open(&c, &co, 80, &err)) {
        controller_close(&c);
        fprintf(stderr, "kakeya: %s\n", err.msg[0] ? err.msg
                                                   : "cannot watch resizes");
        return 1;
    }
    if (screen_open() || input_open(on_line, &c)) {
        screen_close();
        controller_close(&c);
        fprintf(stderr, "kakeya: cannot use this terminal (TERM=%s)\n",
                getenv("TERM") ? getenv("TERM") : "");
        return 1;
    }
    struct view v = {.input_rows = 1, .color = screen_has_color()};
    build_windows(&v, &c);
    if (o.doc)
        controller_load_document(&c, o.doc);
    loop(&v, &c);
    input_close();
    free_windows(&v);
    screen_close();
    controller_close(&c);
    close(winch_pipe[0]);
    close(winch_pipe[1]);
    return 0;
}
