/* checkpoint.c — restored-context checkpoints between session and store
 * (see checkpoint.h). */
#include "checkpoint.h"

#include <stdio.h>
#include <string.h>

int checkpoint_store(struct store *s, int64_t conversation_id,
                     const char *fingerprint, const int32_t *ids, size_t n,
                     const void *blob, size_t bytes, uint64_t budget_bytes,
                     struct kk_error *err)
{
    if (!budget_bytes)
        budget_bytes = STORE_DEFAULT_CHECKPOINT_BUDGET;
    return store_put_checkpoint(s, conversation_id, fingerprint, ids, n, blob,
                                bytes, NULL, err) ||
                   store_drop_superseded_checkpoints(s, conversation_id,
                                                     fingerprint, err) ||
                   store_prune_checkpoints(s, budget_bytes, NULL, err)
               ? -1
               : 0;
}

int checkpoint_fetch(struct store *s, int64_t conversation_id,
                     const char *fingerprint, struct store_checkpoint *out,
                     char *note, size_t note_size, struct kk_error *err)
{
    enum store_checkpoint_status status;
    note[0] = 0;
    if (store_get_checkpoint(s, conversation_id, fingerprint, out, &status,
                             err))
        return -1;
    switch (status) {
    case STORE_CHECKPOINT_FOUND:
        return 1;
    case STORE_CHECKPOINT_OTHER_MODEL:
        snprintf(note, note_size, "saved context is for other model files "
                                  "— recomputing");
        return 0;
    case STORE_CHECKPOINT_CORRUPT:
        snprintf(note, note_size, "saved context is damaged — recomputing");
        return 0;
    case STORE_CHECKPOINT_NONE:
        break;
    }
    return 0;
}

static int common_prefix(const int32_t *a, size_t na, const int32_t *b,
                         int nb)
{
    int n = 0;
    while ((size_t)n < na && n < nb && a[n] == b[n])
        n++;
    return n;
}

void checkpoint_resume(struct kk_session *s, const void *blob, size_t bytes,
                       const int32_t *ckpt_ids, size_t n_ckpt,
                       const int32_t *ids, int n,
                       struct checkpoint_resume *out)
{
    memset(out, 0, sizeof *out);
    int have;
    const int32_t *held = kk_session_tokens(s, &have);
    int common = common_prefix(held, (size_t)have, ids, n);
    /* Restoring replaces the whole cache: only worth it when the
     * checkpoint covers more of this prompt than the session already does
     * (switching back to the conversation the engine just served, it does
     * not). */
    if (blob && common_prefix(ckpt_ids, n_ckpt, ids, n) > common) {
        struct kk_error err = {{0}};
        if (kk_session_restore(s, blob, bytes, &err)) {
            out->refused = true;
            snprintf(out->note, sizeof out->note,
                     "saved context not restored (%.250s) — recomputing",
                     err.msg);
        } else {
            out->restored = kk_session_n_tokens(s);
        }
        held = kk_session_tokens(s, &have);
        common = common_prefix(held, (size_t)have, ids, n);
    }
    if (common >= n)
        common = n - 1;
    if (common < 0)
        common = 0;
    kk_session_trim(s, common);
    out->kept = common;
}
