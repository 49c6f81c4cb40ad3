/* bench_spec.h — the speculative-decoding part of `kakeya bench`: each
 * proposer against plain decoding of the same target on the same prompts,
 * in one run, as JSON. */
#ifndef KK_BENCH_SPEC_H
#define KK_BENCH_SPEC_H

#include <cJSON.h>

#include "kakeya.h"

struct spec_bench_options {
    const char *model;      /* target */
    const char *draft;      /* may be NULL: plain and n-gram only */
    const char *eval_dir;   /* data/eval: held-out conversations (JSONL) */
    int n_prompts;          /* per prompt set */
    int n_predict;
    int n_threads;
    enum kk_backend backend;
    int device;
    int block;              /* 0: adaptive */
};

/* Adds "sets": [{prompts, n_prompts, modes: [{mode, tau, ...}]}] to out. */
int bench_speculative(const struct spec_bench_options *o, cJSON *out,
                      struct kk_error *err);

#endif
