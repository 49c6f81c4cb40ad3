/* panes.h — the three live panes and the status line.
 *
 * Acceptance length (tau now, the turn's mean, a sparkline of the tokens
 * each recent step committed, the acceptance rate), KV saved (percent,
 * resident vs full bytes), speed (decode tok/s with a sparkline, prefill
 * tok/s, the plain-decoding baseline when known), and a status line
 * (models, proposer, block length, context used / limit, a note or a
 * progress bar). When the layout folds the panes, the status line carries
 * their key numbers.
 *
 * struct panes_model is plain data the controller fills from engine
 * snapshots; drawing reads only it. Windows are curses WINDOW * passed as
 * void * so this header needs no curses. */
#ifndef KK_PANES_H
#define KK_PANES_H

#include <stdbool.h>

#include "kakeya.h"

enum { PANES_HISTORY = 48 };

struct panes_model {
    struct kk_stats stats;     /* the latest snapshot */
    bool has_stats;
    double speed_history[PANES_HISTORY];   /* decode tok/s, oldest first */
    int n_speed;
    double baseline_tok_per_s; /* plain decoding, 0 when unknown */
    char target[96], draft[96];
    const char *proposer;      /* "draft+ngram", "ngram", ... */
    int n_ctx, n_tokens;
    char note[160];            /* status note, "" for none */
    double progress;           /* 0..1 of a prefill; < 0 when none */
    bool streaming;
    bool kv_lossy;             /* the cache is sink+window: LOSSY */
};

void panes_model_init(struct panes_model *p);
/* Takes a snapshot; records decode speed for its sparkline. */
void panes_model_update(struct panes_model *p, const struct kk_stats *st);

/* A sparkline of n values scaled to max (<= 0: their own max) as UTF-8
 * block characters, at most width cells, into buf. */
void panes_sparkline(const double *v, int n, double max, int width,
                     char *buf, unsigned size);
/* "1.5 MiB" style. */
void panes_bytes(unsigned long long bytes, char *buf, unsigned size);

void panes_draw_acceptance(void *window, const struct panes_model *p,
                           bool color);
void panes_draw_kv(void *window, const struct panes_model *p, bool color);
void panes_draw_speed(void *window, const struct panes_model *p, bool color);
void panes_draw_status(void *window, const struct panes_model *p,
                       bool folded, bool color);

#endif
