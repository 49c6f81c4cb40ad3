/* bench_resume.h — `kakeya bench --resume`: reopening a conversation over
 * a long document from its checkpoint against recomputing it.
 *
 * A first turn over a document of about doc_tokens tokens is answered and
 * its session stored as a checkpoint in a real temporary SQLite database.
 * Then the second question's time to first answer token is measured twice,
 * each in a fresh session: (a) recomputing the whole prompt, (b) reading
 * the checkpoint from the store, restoring it and computing only the
 * tokens after it. Both must give the same first token. */
#ifndef KK_BENCH_RESUME_H
#define KK_BENCH_RESUME_H

#include <cJSON.h>

#include "kakeya.h"

struct resume_bench_options {
    const char *model;
    const char *needles;    /* data/recall/needles.jsonl: document text */
    const char *tmp_dir;    /* for the database; NULL: $TMPDIR or /tmp */
    int doc_tokens;         /* the document's length in tokens */
    int n_threads;
    int reps;               /* medians over this many runs of each */
};

/* Fills out with the figures: recompute and resume time to first token
 * (ms), tokens computed by each, checkpoint bytes, store read and restore
 * times, their ratio and whether the first tokens agree. */
int bench_resume(const struct resume_bench_options *o, cJSON *out,
                 struct kk_error *err);

#endif
