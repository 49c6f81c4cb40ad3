/* panes.c — the live panes and the status line (see panes.h). */
#include "panes.h"

#include <curses.h>
#include <stdio.h>
#include <string.h>

#include "screen.h"

void panes_model_init(struct panes_model *p)
{
    memset(p, 0, sizeof *p);
    p->progress = -1.0;
    p->proposer = "ngram";
}

void panes_model_update(struct panes_model *p, const struct kk_stats *st)
{
    p->stats = *st;
    p->has_stats = true;
    if (st->n_ctx)
        p->n_ctx = st->n_ctx;
    p->n_tokens = st->n_tokens;
    if (st->n_generated > 0 && st->decode_tok_per_s > 0) {
        if (p->n_speed == PANES_HISTORY) {
            memmove(p->speed_history, p->speed_history + 1,
                    sizeof p->speed_history[0] * (PANES_HISTORY - 1));
            p->n_speed--;
        }
        p->speed_history[p->n_speed++] = st->decode_tok_per_s;
    }
}

void panes_sparkline(const double *v, int n, double max, int width,
                     char *buf, unsigned size)
{
    static const char *const bars[] = {"\u2581", "\u2582", "\u2583",
                                       "\u2584", "\u2585", "\u2586",
                                       "\u2587", "\u2588"};
    if (n > width)
        v += n - width, n = width;
    if (max <= 0)
        for (int i = 0; i < n; i++)
            max = v[i] > max ? v[i] : max;
    unsigned len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len + 4 < size; i++) {
        int level = max > 0 ? (int)(v[i] / max * 7.0 + 0.5) : 0;
        level = level < 0 ? 0 : level > 7 ? 7 : level;
        memcpy(buf + len, bars[level], 3);
        len += 3;
        buf[len] = 0;
    }
}

void panes_bytes(unsigned long long bytes, char *buf, unsigned size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4)
        v /= 1024.0, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void box_title(WINDOW *w, const char *title, bool color)
{
    werase(w);
    box(w, 0, 0);
    wattron(w, A_BOLD | (color ? COLOR_PAIR(PAIR_ACCENT) : 0));
    mvwprintw(w, 0, 2, " %s ", title);
    wattroff(w, A_BOLD | (color ? COLOR_PAIR(PAIR_ACCENT) : 0));
}

void panes_draw_acceptance(void *window, const struct panes_model *p,
                           bool color)
{
    WINDOW *w = window;
    int cols = getmaxx(w);
    box_title(w, "acceptance length", color);
    const struct kk_stats *st = &p->stats;
    if (!p->has_stats || st->n_steps == 0) {
        mvwaddstr(w, 1, 2, "tau -");
        return;
    }
    /* recent[] holds the newest n_recent steps at its end, oldest first. */
    int n = st->n_recent < KK_STATS_RECENT ? st->n_recent : KK_STATS_RECENT;
    int now = n ? st->recent[KK_STATS_RECENT - 1] : 0;
    mvwprintw(w, 1, 2, "tau %d now  %.2f turn", now, st->tau);
    double v[KK_STATS_RECENT];
    for (int i = 0; i < n; i++)
        v[i] = st->recent[KK_STATS_RECENT - n + i];
    char spark[KK_STATS_RECENT * 3 + 1];
    panes_sparkline(v, n, 0, cols - 4, spark, sizeof spark);
    mvwaddstr(w, 2, 2, spark);
    mvwprintw(w, 3, 2, "accept %.0f%% (%d/%d)", 100.0 * st->acceptance_rate,
              st->n_accepted, st->n_proposed);
}

void panes_draw_kv(void *window, const struct panes_model *p, bool color)
{
    WINDOW *w = window;
    box_title(w, "KV saved", color);
    const struct kk_stats *st = &p->stats;
    if (!p->has_stats || st->kv_full_bytes == 0) {
        mvwaddstr(w, 1, 2, "-");
        return;
    }
    char res[32], full[32];
    panes_bytes(st->kv_resident_bytes, res, sizeof res);
    panes_bytes(st->kv_full_bytes, full, sizeof full);
    mvwprintw(w, 1, 2, "%.1f%% saved%s", 100.0 * st->kv_saved,
              p->kv_lossy ? " LOSSY" : "");
    mvwprintw(w, 2, 2, "resident %s", res);
    mvwprintw(w, 3, 2, "full f16 %s", full);
}

void panes_draw_speed(void *window, const struct panes_model *p, bool color)
{
    WINDOW *w = window;
    int cols = getmaxx(w);
    box_title(w, "speed", color);
    const struct kk_stats *st = &p->stats;
    if (!p->has_stats) {
        mvwaddstr(w, 1, 2, "- tok/s");
        return;
    }
    char spark[PANES_HISTORY * 3 + 1];
    panes_sparkline(p->speed_history, p->n_speed, 0, cols - 4, spark,
                    sizeof spark);
    mvwprintw(w, 1, 2, "decode %.1f tok/s", st->decode_tok_per_s);
    mvwaddstr(w, 2, 2, spark);
    if (p->baseline_tok_per_s > 0)
        mvwprintw(w, 3, 2, "prefill %.0f  plain %.1f", st->prefill_tok_per_s,
                  p->baseline_tok_per_s);
    else
        mvwprintw(w, 3, 2, "prefill %.0f tok/s", st->prefill_tok_per_s);
}

void panes_draw_status(void *window, const struct panes_model *p,
                       bool folded, bool color)
{
    WINDOW *w = window;
    int cols = getmaxx(w);
    char line[512];
    /* Context first: on a narrow screen it is what must stay visible. */
    int len = snprintf(line, sizeof line, " ctx %d/%d%s | %s%s%s | %s L=%d",
                       p->n_tokens, p->n_ctx,
                       p->kv_lossy ? " sink+window LOSSY" : "",
                       p->target[0] ? p->target : "(no model)",
                       p->draft[0] ? " + " : "", p->draft,
                       p->proposer ? p->proposer : "-", p->stats.block);
    if (folded && p->has_stats && len > 0 && len < (int)sizeof line)
        len += snprintf(line + len, sizeof line - (size_t)len,
                        " | tau %.2f | KV %.0f%% | %.1f tok/s",
                        p->stats.tau, 100.0 * p->stats.kv_saved,
                        p->stats.decode_tok_per_s);
    if (p->progress >= 0 && len > 0 && len < (int)sizeof line) {
        char bar[21];
        int fill = (int)(p->progress * 20 + 0.5);
        for (int i = 0; i < 20; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[20] = 0;
        len += snprintf(line + len, sizeof line - (size_t)len,
                        " | [%s] %.0f%%", bar, 100.0 * p->progress);
    }
    if (p->note[0] && len > 0 && len < (int)sizeof line)
        snprintf(line + len, sizeof line - (size_t)len, " | %s", p->note);
    werase(w);
    wbkgdset(w, ' ' | (color ? COLOR_PAIR(PAIR_BAR) : A_REVERSE));
    wattrset(w, color ? COLOR_PAIR(PAIR_BAR) : A_REVERSE);
    for (int i = 0; i < cols; i++)
        mvwaddch(w, 0, i, ' ');
    mvwaddnstr(w, 0, 0, line, cols);
    wattrset(w, A_NORMAL);
    wbkgdset(w, ' ');
}
