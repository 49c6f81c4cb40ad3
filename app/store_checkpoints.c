/* store_checkpoints.c — restored-context checkpoints: the engine's KV
 * state after a list of tokens, for one set of model files.
 *
 * A checksum (FNV-1a 64 over the little-endian token ids, then the KV
 * blob) is stored with each, so a damaged blob is reported instead of
 * restored. last_used_at is a logical clock: wall milliseconds, but always
 * past every other checkpoint's, so LRU order is strict even within one
 * millisecond. */
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

/* The next last_used_at value, as an SQL expression on parameter ?1. */
#define NEXT_USE "max(?1, coalesce((SELECT max(last_used_at) " \
                 "FROM checkpoints), 0) + 1)"

static void ids_to_le(const int32_t *ids, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        out[4 * i + 0] = (unsigned char)v;
        out[4 * i + 1] = (unsigned char)(v >> 8);
        out[4 * i + 2] = (unsigned char)(v >> 16);
        out[4 * i + 3] = (unsigned char)(v >> 24);
    }
}

static void ids_from_le(const unsigned char *in, size_t n, int32_t *ids)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)((uint32_t)in[4 * i] |
                           (uint32_t)in[4 * i + 1] << 8 |
                           (uint32_t)in[4 * i + 2] << 16 |
                           (uint32_t)in[4 * i + 3] << 24);
}

static uint64_t checksum(const void *ids_le, size_t ids_bytes, const void *kv,
                         size_t kv_bytes)
{
    return store_fnv1a64(store_fnv1a64(STORE_FNV_SEED, ids_le, ids_bytes), kv,
                         kv_bytes);
}

int store_put_checkpoint(struct store *s, int64_t conversation_id,
                         const char *model_fingerprint,
                         const int32_t *token_ids, size_t n_tokens,
                         const void *kv, size_t kv_bytes, int64_t *id,
                         struct kk_error *err)
{
    const char *what = "saving a checkpoint";
    if (n_tokens > SIZE_MAX / 4)
        return kk_fail(err, "%s: %s: too many tokens", s->path, what);
    size_t ids_bytes = n_tokens * 4;
    unsigned char *ids_le = malloc(ids_bytes ? ids_bytes : 1);
    if (!ids_le)
        return kk_fail(err, "%s: %s: out of memory", s->path, what);
    ids_to_le(token_ids, n_tokens, ids_le);
    uint64_t sum = checksum(ids_le, ids_bytes, kv, kv_bytes);
    int64_t now = store_now_ms();
    int rc = -1;
    if (store_begin(s, err))
        goto out;
    if (store_require_conversation(s, conversation_id, what, err) ||
        sql_do(s, what, err,
               "INSERT INTO checkpoints (conversation_id, model_fingerprint, "
               "token_ids, n_tokens, kv_blob, bytes, checksum, created_at, "
               "last_used_at) VALUES (?2, ?3, ?4, ?5, ?6, ?7, ?8, ?1, "
               NEXT_USE ")", "iitbibii", now, conversation_id,
               model_fingerprint ? model_fingerprint : "", ids_le, ids_bytes,
               (int64_t)n_tokens, kv, kv_bytes,
               (int64_t)(ids_bytes + kv_bytes), (int64_t)sum)) {
        store_rollback(s);
        goto out;
    }
    int64_t new_id = sqlite3_last_insert_rowid(s->db);
    if (store_commit(s, err))
        goto out;
    if (id)
        *id = new_id;
    rc = 0;
out:
    free(ids_le);
    return rc;
}

/* Copies a checkpoint row out after checking its sizes and checksum;
 * false when the row is damaged (nothing allocated). */
static bool read_checked(sqlite3_stmt *st, struct store_checkpoint *out,
                         bool *out_of_memory)
{
    const void *ids_le = sqlite3_column_blob(st, 1);
    size_t ids_bytes = (size_t)sqlite3_column_bytes(st, 1);
    int64_t n_tokens = sqlite3_column_int64(st, 2);
    const void *kv = sqlite3_column_blob(st, 3);
    size_t kv_bytes = (size_t)sqlite3_column_bytes(st, 3);
    int64_t bytes = sqlite3_column_int64(st, 4);
    uint64_t sum = (uint64_t)sqlite3_column_int64(st, 5);
    if (n_tokens < 0 || (uint64_t)n_tokens * 4 != ids_bytes ||
        (uint64_t)bytes != ids_bytes + kv_bytes ||
        checksum(ids_le, ids_bytes, kv, kv_bytes) != sum)
        return false;
    out->id = sqlite3_column_int64(st, 0);
    out->created_at = sqlite3_column_int64(st, 6);
    out->n_tokens = (size_t)n_tokens;
    out->kv_bytes = kv_bytes;
    out->token_ids = malloc(ids_bytes ? ids_bytes : 1);
    out->kv = malloc(kv_bytes ? kv_bytes : 1);
    if (!out->token_ids || !out->kv) {
        store_checkpoint_free(out);
        *out_of_memory = true;
        return true;
    }
    ids_from_le(ids_le, out->n_tokens, out->token_ids);
    if (kv_bytes)
        memcpy(out->kv, kv, kv_bytes);
    return true;
}

/* NONE or OTHER_MODEL, for a conversation without a matching checkpoint. */
static int status_without_match(struct store *s, int64_t conversation_id,
                                enum store_checkpoint_status *status,
                                const char *what, struct kk_error *err)
{
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err,
                    "SELECT 1 FROM checkpoints WHERE conversation_id = ? "
                    "LIMIT 1", "i", conversation_id))
        return -1;
    int row = sql_step(s, st, what, err);
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    if (row < 0)
        return -1;
    *status = row ? STORE_CHECKPOINT_OTHER_MODEL : STORE_CHECKPOINT_NONE;
    return 0;
}

int store_get_checkpoint(struct store *s, int64_t conversation_id,
                         const char *model_fingerprint,
                         struct store_checkpoint *out,
                         enum store_checkpoint_status *status,
                         struct kk_error *err)
{
    const char *what = "reading a checkpoint";
    memset(out, 0, sizeof *out);
    *status = STORE_CHECKPOINT_NONE;
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err,
                    "SELECT id, token_ids, n_tokens, kv_blob, bytes, "
                    "checksum, created_at FROM checkpoints "
                    "WHERE conversation_id = ? AND model_fingerprint = ? "
                    "ORDER BY created_at DESC, id DESC LIMIT 1", "it",
                    conversation_id,
                    model_fingerprint ? model_fingerprint : ""))
        return -1;
    int row = sql_step(s, st, what, err);
    bool is_intact = false, out_of_memory = false;
    if (row == 1)
        is_intact = read_checked(st, out, &out_of_memory);
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    if (row < 0)
        return -1;
    if (row == 0)
        return status_without_match(s, conversation_id, status, what, err);
    if (out_of_memory)
        return kk_fail(err, "%s: %s: out of memory", s->path, what);
    if (!is_intact) {
        *status = STORE_CHECKPOINT_CORRUPT;
        return 0;
    }
    if (sql_do(s, what, err,
               "UPDATE checkpoints SET last_used_at = " NEXT_USE
               " WHERE id = ?2", "ii", store_now_ms(), out->id)) {
        store_checkpoint_free(out);
        return -1;
    }
    *status = STORE_CHECKPOINT_FOUND;
    return 0;
}

void store_checkpoint_free(struct store_checkpoint *c)
{
    if (!c)
        return;
    free(c->token_ids);
    free(c->kv);
    memset(c, 0, sizeof *c);
}

int store_drop_superseded_checkpoints(struct store *s, int64_t conversation_id,
                                      const char *model_fingerprint,
                                      struct kk_error *err)
{
    /* "Newest" as store_get_checkpoint orders them. */
    return sql_do(s, "dropping superseded checkpoints", err,
                  "DELETE FROM checkpoints WHERE conversation_id = ?1 AND "
                  "model_fingerprint = ?2 AND id NOT IN (SELECT id FROM "
                  "checkpoints WHERE conversation_id = ?1 AND "
                  "model_fingerprint = ?2 ORDER BY created_at DESC, id DESC "
                  "LIMIT 1)", "it", conversation_id,
                  model_fingerprint ? model_fingerprint : "");
}

int store_prune_checkpoints(struct store *s, uint64_t budget_bytes,
                            int *n_deleted, struct kk_error *err)
{
    if (n_deleted)
        *n_deleted = 0;
    int64_t budget = budget_bytes > INT64_MAX ? INT64_MAX
                                              : (int64_t)budget_bytes;
    /* Keeps the most recently used checkpoints whose running total fits;
     * everything from the first one that does not fit on is deleted. */
    if (sql_do(s, "pruning checkpoints", err,
               "DELETE FROM checkpoints WHERE id IN (SELECT id FROM ("
               "SELECT id, sum(bytes) OVER (ORDER BY last_used_at DESC, "
               "id DESC) AS running FROM checkpoints) WHERE running > ?)",
               "i", budget))
        return -1;
    if (n_deleted)
        *n_deleted = sqlite3_changes(s->db);
    return 0;
}
