/* uibench.c — `kakeya uibench` (hidden): the per-token cost of the chat
 * screen. Builds a 10,000-message conversation, then streams tokens into
 * it the way the chat does (append, draw the transcript and the panes,
 * doupdate) on a curses screen writing to /dev/null, and prints JSON. */
#include <curses.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "controller.h"
#include "panes.h"
#include "screen.h"
#include "transcript.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int chat_uibench(int argc, char **argv)
{
    int n_messages = argc > 0 ? atoi(argv[0]) : 10000;
    int n_tokens = 2000;
    if (n_messages <= 0)
        n_messages = 10000;
    setlocale(LC_CTYPE, "C.UTF-8");
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *scr = out && in ? newterm("xterm-256color", out, in) : NULL;
    if (!scr) {
        fprintf(stderr, "kakeya uibench: cannot start curses\n");
        return 1;
    }
    resizeterm(50, 160);
    struct layout l;
    layout_compute(50, 160, 1, &l);
    WINDOW *tw = newwin(l.transcript.h, l.transcript.w, 0, l.transcript.x);
    WINDOW *pw[3] = {newwin(5, l.acceptance.w, l.acceptance.y, l.acceptance.x),
                     newwin(5, l.kv.w, l.kv.y, l.kv.x),
                     newwin(5, l.speed.w, l.speed.y, l.speed.x)};
    WINDOW *sw = newwin(1, 160, l.status.y, 0);
    struct transcript *t = transcript_new(l.transcript.w - 1);
    static const char msg[] =
        "The quick brown fox jumps over the lazy dog; speculative decoding "
        "verifies a block of drafted tokens in one batched forward pass. "
        "```c\nint main(void) { return 0; }\n``` and 漢字 too.";
    for (int i = 0; i < n_messages; i++)
        transcript_add(t, i % 2 ? TRANSCRIPT_ASSISTANT : TRANSCRIPT_USER, msg);
    transcript_add(t, TRANSCRIPT_ASSISTANT, "");
    struct panes_model pm;
    panes_model_init(&pm);
    struct kk_stats st = {.n_ctx = 4096, .tau = 2.5, .n_steps = 1,
                          .kv_full_bytes = 1 << 20, .kv_resident_bytes = 1 << 19,
                          .decode_tok_per_s = 50};
    double *times = malloc(sizeof *times * (size_t)n_tokens);
    uint64_t wrapped0 = transcript_lines_wrapped(t);
    static const char *const words[] = {"token ", "streams ", "in, ",
                                        "one ", "at ", "a ", "time.\n"};
    for (int i = 0; i < n_tokens && times; i++) {
        double t0 = controller_now();
        const char *w = words[i % 7];
        transcript_append(t, w, strlen(w));
        st.n_generated = i + 1;
        st.recent[i % KK_STATS_RECENT] = (uint8_t)(1 + i % 4);
        st.n_recent = i + 1;
        panes_model_update(&pm, &st);
        transcript_draw(t, tw, true);
        panes_draw_acceptance(pw[0], &pm, true);
        panes_draw_kv(pw[1], &pm, true);
        panes_draw_speed(pw[2], &pm, true);
        panes_draw_status(sw, &pm, false, true);
        wnoutrefresh(tw);
        for (int k = 0; k < 3; k++)
            wnoutrefresh(pw[k]);
        wnoutrefresh(sw);
        doupdate();
        times[i] = (controller_now() - t0) * 1e6;
    }
    double wrapped_per_token =
        (double)(transcript_lines_wrapped(t) - wrapped0) / n_tokens;
    double sum = 0;
    for (int i = 0; times && i < n_tokens; i++)
        sum += times[i];
    if (times)
        qsort(times, (size_t)n_tokens, sizeof *times, cmp_double);
    double mean = sum / n_tokens;
    printf("{\"messages\": %d, \"transcript_lines\": %d, \"tokens\": %d, "
           "\"mean_us\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
           "\"max_us\": %.1f, \"lines_wrapped_per_token\": %.2f, "
           "\"under_1ms\": %s}\n",
           n_messages, transcript_n_lines(t), n_tokens, mean,
           times ? times[n_tokens / 2] : 0, times ? times[n_tokens * 99 / 100] : 0,
           times ? times[n_tokens - 1] : 0, wrapped_per_token,
           mean < 1000 ? "true" : "false");
    free(times);
    transcript_free(t);
    delwin(tw);
    for (int k = 0; k < 3; k++)
        delwin(pw[k]);
    delwin(sw);
    endwin();
    delscreen(scr);
    fclose(out);
    fclose(in);
    return mean < 1000 ? 0 : 1;
}
