/* draft.c — proposing with a small draft model (draft_propose).
 *
 * The draft session mirrors the target's history. Each proposal first
 * drops whatever the draft guessed that the target did not commit (the
 * common prefix of the two histories stays, so accepted guesses are never
 * recomputed), feeds the newly committed tokens in one batch, then extends
 * one token at a time. The last guess is pushed but not evaluated: if the
 * target accepts it, the next proposal evaluates it as part of catching up. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"
#include "proposer.h"
#include "sample.h"
#include "session.h"

static int common_prefix(const struct kk_session *d, const int32_t *history,
                         int n_history)
{
    int n = 0;
    while (n < d->n_tokens && n < n_history && d->tokens[n] == history[n])
        n++;
    return n;
}

int draft_catch_up(struct kk_session *d, const int32_t *history,
                   int n_history, struct kk_error *err)
{
    int keep = common_prefix(d, history, n_history);
    if (n_history - 1 <= keep)
        return 0;
    kk_session_trim(d, keep);
    /* (the rows' results are not used: the cheapest kind) */
    return session_append_eval(d, history + keep, n_history - 1 - keep, 1,
                               FORWARD_ARGMAX, NULL, NULL, NULL, err);
}

int draft_propose(struct kk_session *d, const int32_t *history,
                  int n_history, int max, const struct kk_sampling *sampling,
                  uint64_t *rng, float *scratch, struct proposal *out,
                  struct kk_error *err)
{
    out->n = 0;
    out->by = KK_PROPOSER_DRAFT;
    if (max <= 0 || n_history <= 0)
        return 0;
    /* Keep the last history token out of the cache so its logits are
     * computed now: they predict the first guess. */
    int keep = common_prefix(d, history, n_history);
    if (keep > n_history - 1)
        keep = n_history - 1;
    kk_session_trim(d, keep);
    if (max > d->n_ctx - n_history)
        max = d->n_ctx - n_history;
    if (max <= 0)
        return 0;
    const int32_t n_vocab = d->model->m->hp.n_vocab;
    const bool greedy = sampling->temperature <= 0.0f;
    /* greedy guesses need only each row's argmax (made on a GPU draft's
     * device), sampled ones the draft's distribution q */
    const enum forward_out rows = greedy ? FORWARD_ARGMAX : FORWARD_LOGITS;
    if (session_append_eval(d, history + keep, n_history - keep, 1, rows,
                            NULL, NULL, NULL, err))
        return -1;
    for (int i = 0; i < max; i++) {
        int32_t id;
        if (greedy) {
            id = session_token(d, 0);
        } else {
            float *q = out->q + (size_t)i * (size_t)n_vocab;
            sample_probs(sampling, session_logits(d, 0), n_vocab, q,
                         (int32_t *)scratch);
            id = sample_from(q, n_vocab, rng);
        }
        out->ids[out->n++] = id;
        int rc = i + 1 < max ? session_append_eval(d, &id, 1, 1, rows, NULL,
                                                   NULL, NULL, err)
                             : session_push(d, &id, 1, err);
        if (rc)
            return -1;
    }
    return 0;
}
