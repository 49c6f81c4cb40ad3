/* proposer.h — who guesses the next tokens for the target to verify.
 *
 * A proposer looks at the committed history and offers up to `max` tokens
 * that it expects the target to produce next. For rejection sampling it
 * also reports the distribution it drew each token from (q, n_vocab floats
 * per token); for a deterministic proposer (n-gram) the verifier treats q as
 * certainty in the proposed token.
 *
 * Proposers keep their own state (the draft model's KV cache) and bring it
 * up to date with the history at the start of each proposal, so rejected
 * guesses are forgotten and accepted ones are never recomputed. */
#ifndef KK_PROPOSER_H
#define KK_PROPOSER_H

#include <stdbool.h>
#include <stdint.h>

#include "kakeya.h"

struct proposal {
    int32_t *ids;      /* capacity: max_block */
    float *q;          /* max_block * n_vocab: the draft's distributions
                          when sampling (unused for n-gram proposals) */
    int n;
    enum kk_proposer by;
};

/* n-gram lookup: the continuation of the longest earlier match (at least
 * min_match tokens) of the history's tail. Returns the match length (0 when
 * none) and fills out->ids with up to max tokens. */
int ngram_propose(const int32_t *history, int n_history, int min_match,
                  int max, struct proposal *out);

/* Draft model: brings the draft session's cache to the target's history
 * (keeping the common prefix), then extends it by up to max tokens, greedy
 * or sampled with the given parameters (q filled when sampling). */
int draft_propose(struct kk_session *draft, const int32_t *history,
                  int n_history, int max, const struct kk_sampling *sampling,
                  uint64_t *rng, float *scratch, struct proposal *out,
                  struct kk_error *err);

/* Brings the draft session up to the target's history now (all but the
 * last token, whose logits the next proposal computes): called after the
 * prompt's prefill, so a long prompt's draft pass counts as prefill. */
int draft_catch_up(struct kk_session *draft, const int32_t *history,
                   int n_history, struct kk_error *err);

#endif
