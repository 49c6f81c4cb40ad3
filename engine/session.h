/* session.h — what a kk_session is made of (internal to the engine).
 *
 * A session is one conversation's state on one model: the token history,
 * the KV cache, the forward pass's buffers and a backend (thread pool).
 * The history holds every committed token; the cache holds all of them but
 * possibly the newest, whose logits nobody has asked for yet (the token a
 * generation step just chose is fed in by the next step, together with the
 * draft tokens it verifies). session_sync() feeds such pending tokens. */
#ifndef KK_SESSION_H
#define KK_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "forward.h"
#include "kakeya.h"

struct backend;
struct forward;
struct kv_cache;
struct model;

struct kk_model {
    struct model *m;
    int chat;                 /* enum chat_format */
    bool chat_is_fallback;
    char fingerprint[65];     /* of the model file, for checkpoints */
};

struct kk_session {
    struct kk_model *model;
    struct backend *be;
    struct forward *fwd;
    struct kv_cache *kv;
    int32_t *tokens;          /* history, n_ctx capacity */
    int n_tokens;
    int n_ctx;
    int max_batch;
    int logits_rows;          /* rows the last evaluation produced */
};

/* Appends ids to the history and evaluates everything not yet in the
 * cache, in batches; for the last `n_logits` rows of the evaluated span
 * (at most max_batch, at least 1) their logits or, with FORWARD_ARGMAX,
 * their greedy choices, with FORWARD_SAMPLE draws as `draw` asks
 * (session_logits / session_token; forward_run). */
int session_append_eval(struct kk_session *s, const int32_t *ids, int n,
                        int n_logits, enum forward_out out,
                        const struct be_draw *draw,
                        void (*progress)(void *ud, int done, int total),
                        void *ud, struct kk_error *err);

/* Appends ids to the history without evaluating them. */
int session_push(struct kk_session *s, const int32_t *ids, int n,
                 struct kk_error *err);

/* Logits row i of the last evaluation (NULL unless a FORWARD_LOGITS one). */
const float *session_logits(const struct kk_session *s, int row);
/* Row i's token after a FORWARD_ARGMAX evaluation (its greedy choice) or a
 * FORWARD_SAMPLE one (its draw), else -1. */
int32_t session_token(const struct kk_session *s, int row);

#endif
