/* checkpoint.h — restored-context checkpoints: the glue between an engine
 * session and the store.
 *
 * After a turn, the session's state (kk_session_save: token ids, KV cache,
 * the model files' fingerprint) is stored for (conversation, fingerprint).
 * Reopening the conversation with the same model files restores it, and
 * only the tokens after the checkpoint's history are computed. A checkpoint
 * for other model files, a damaged one, or one the engine refuses (another
 * cache configuration) is skipped with a note for the user and the context
 * is recomputed: never an error, never a wrong answer.
 *
 * Used by the chat (controller: store side, engine thread: session side),
 * `kakeya ask` and `kakeya bench --resume`. Nothing here keeps state; the
 * caller owns the store and the session. */
#ifndef KK_CHECKPOINT_H
#define KK_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya.h"
#include "store.h"

/* A prefill shorter than this is cheaper to redo than to store. */
enum { CHECKPOINT_MIN_NEW_TOKENS = 64 };

/* Stores a checkpoint, drops the older ones it supersedes (same
 * conversation and model files) and prunes the store to budget_bytes
 * (0: STORE_DEFAULT_CHECKPOINT_BUDGET), least recently used first. */
int checkpoint_store(struct store *s, int64_t conversation_id,
                     const char *fingerprint, const int32_t *ids, size_t n,
                     const void *blob, size_t bytes, uint64_t budget_bytes,
                     struct kk_error *err);

/* The newest checkpoint of the conversation for these model files: 1 with
 * out filled (free it with store_checkpoint_free); 0 when there is none to
 * use, with a note for the user in note when one was skipped ("saved
 * context is for other model files — recomputing"), "" when there simply
 * is none; -1 when the database fails (err filled). */
int checkpoint_fetch(struct store *s, int64_t conversation_id,
                     const char *fingerprint, struct store_checkpoint *out,
                     char *note, size_t note_size, struct kk_error *err);

struct checkpoint_resume {
    int kept;        /* prompt tokens the session already holds */
    int restored;    /* tokens restored from the checkpoint (0: not used) */
    bool refused;    /* the engine refused it; note says why */
    char note[320];  /* for the user; "" when there is nothing to say */
};

/* Makes session s ready to evaluate the prompt ids[0..n): restores the
 * checkpoint (blob may be NULL; ckpt_ids are the tokens it holds) when it
 * shares a longer prefix with ids than what the session holds, then
 * forgets what follows the common prefix. out->kept is at most n - 1, so
 * the last prompt token is always evaluated and gives fresh logits. A
 * refused restore leaves the session empty: everything is recomputed. */
void checkpoint_resume(struct kk_session *s, const void *blob, size_t bytes,
                       const int32_t *ckpt_ids, size_t n_ckpt,
                       const int32_t *ids, int n,
                       struct checkpoint_resume *out);

#endif
