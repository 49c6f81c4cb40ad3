/* store_messages.c — messages and the streaming-answer write discipline:
 * every write is its own transaction that also touches the conversation's
 * updated_at, so a kill at any moment leaves whole messages behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "store_internal.h"

static const char *const role_names[] = {
    [STORE_ROLE_SYSTEM] = "system",
    [STORE_ROLE_USER] = "user",
    [STORE_ROLE_ASSISTANT] = "assistant",
};

const char *store_role_name(enum store_role role)
{
    return (unsigned)role < 3 ? role_names[role] : "?";
}

int store_role_parse(const char *name, enum store_role *role)
{
    for (int r = 0; r < 3; r++) {
        if (name && strcmp(name, role_names[r]) == 0) {
            *role = (enum store_role)r;
            return 0;
        }
    }
    return -1;
}

char *store_stats_to_json(const struct store_stats *st)
{
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o && cJSON_AddNumberToObject(o, "tau", st->tau) &&
        cJSON_AddNumberToObject(o, "acceptance_rate", st->acceptance_rate) &&
        cJSON_AddNumberToObject(o, "tok_per_s", st->tok_per_s) &&
        cJSON_AddNumberToObject(o, "kv_saved", st->kv_saved) &&
        cJSON_AddStringToObject(o, "proposer", st->proposer))
        text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static double number_or_zero(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

bool store_stats_from_json(const char *json, struct store_stats *st)
{
    memset(st, 0, sizeof *st);
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return false;
    }
    st->tau = number_or_zero(o, "tau");
    st->acceptance_rate = number_or_zero(o, "acceptance_rate");
    st->tok_per_s = number_or_zero(o, "tok_per_s");
    st->kv_saved = number_or_zero(o, "kv_saved");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "proposer");
    if (cJSON_IsString(p))
        snprintf(st->proposer, sizeof st->proposer, "%s", p->valuestring);
    cJSON_Delete(o);
    return true;
}

/* stats as JSON text in *json (NULL when stats is NULL). */
static int stats_json(struct store *s, const struct store_stats *stats,
                      char **json, const char *what, struct kk_error *err)
{
    *json = NULL;
    if (stats && !(*json = store_stats_to_json(stats)))
        return kk_fail(err, "%s: %s: out of memory", s->path, what);
    return 0;
}

static int touch_conversation(struct store *s, int64_t conversation_id,
                              const char *what, struct kk_error *err)
{
    return sql_do(s, what, err,
                  "UPDATE conversations SET updated_at = ? WHERE id = ?",
                  "ii", store_now_ms(), conversation_id);
}

static int insert_message(struct store *s, int64_t conversation_id,
                          enum store_role role, const char *content,
                          int n_tokens, const char *stats, bool is_partial,
                          int64_t *id, const char *what, struct kk_error *err)
{
    if ((unsigned)role > STORE_ROLE_ASSISTANT)
        return kk_fail(err, "%s: %s: invalid role %d", s->path, what,
                       (int)role);
    if (store_begin(s, err))
        return -1;
    if (store_require_conversation(s, conversation_id, what, err) ||
        sql_do(s, what, err,
               "INSERT INTO messages (conversation_id, role, content, "
               "n_tokens, is_partial, created_at, stats_json) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)", "ittiiit", conversation_id,
               store_role_name(role), content ? content : "",
               (int64_t)n_tokens, (int64_t)is_partial, store_now_ms(), stats))
        goto fail;
    int64_t new_id = sqlite3_last_insert_rowid(s->db);
    if (touch_conversation(s, conversation_id, what, err) ||
        store_commit(s, err))
        goto fail;
    if (id)
        *id = new_id;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

int store_add_message(struct store *s, int64_t conversation_id,
                      enum store_role role, const char *content, int n_tokens,
                      const struct store_stats *stats, int64_t *id,
                      struct kk_error *err)
{
    const char *what = "saving a message";
    char *json;
    if (stats_json(s, stats, &json, what, err))
        return -1;
    int rc = insert_message(s, conversation_id, role, content, n_tokens, json,
                            false, id, what, err);
    cJSON_free(json);
    return rc;
}

int store_begin_answer(struct store *s, int64_t conversation_id,
                       int64_t *id, struct kk_error *err)
{
    return insert_message(s, conversation_id, STORE_ROLE_ASSISTANT, "", 0,
                          NULL, true, id, "starting an answer", err);
}

/* Rewrites a partial answer; is_final clears its partial flag. */
static int write_answer(struct store *s, int64_t message_id, const char *text,
                        int n_tokens, const struct store_stats *stats,
                        bool is_final, const char *what, struct kk_error *err)
{
    char *json;
    if (stats_json(s, stats, &json, what, err))
        return -1;
    if (store_begin(s, err)) {
        cJSON_free(json);
        return -1;
    }
    sqlite3_stmt *st;
    int64_t conversation_id = 0;
    int row = -1;
    if (sql_prepare(s, &st, what, err,
                    "UPDATE messages SET content = ?, n_tokens = ?, "
                    "stats_json = coalesce(?, stats_json), is_partial = ? "
                    "WHERE id = ? AND role = 'assistant' AND is_partial = 1 "
                    "RETURNING conversation_id", "titii",
                    text ? text : "", (int64_t)n_tokens, json,
                    (int64_t)!is_final, message_id) == 0) {
        row = sql_step(s, st, what, err);
        if (row == 1)
            conversation_id = sqlite3_column_int64(st, 0);
        /* RETURNING: the change is made by the first step; finishing the
         * statement is still needed before COMMIT. */
        if (row == 1 && sql_step(s, st, what, err) < 0)
            row = -1;
        (void)sqlite3_finalize(st);   /* steps already checked */
    }
    cJSON_free(json);
    if (row == 0)
        kk_fail(err, "%s: %s: message %lld is not an unfinished answer",
                s->path, what, (long long)message_id);
    if (row != 1 || touch_conversation(s, conversation_id, what, err) ||
        store_commit(s, err)) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

int store_update_answer(struct store *s, int64_t message_id, const char *text,
                        int n_tokens, const struct store_stats *stats,
                        struct kk_error *err)
{
    return write_answer(s, message_id, text, n_tokens, stats, false,
                        "saving the answer so far", err);
}

int store_finish_answer(struct store *s, int64_t message_id, const char *text,
                        int n_tokens, const struct store_stats *stats,
                        struct kk_error *err)
{
    return write_answer(s, message_id, text, n_tokens, stats, true,
                        "saving the answer", err);
}

static int read_message(sqlite3_stmt *st, void *out)
{
    struct store_message *m = out;
    memset(m, 0, sizeof *m);
    m->id = sqlite3_column_int64(st, 0);
    m->conversation_id = sqlite3_column_int64(st, 1);
    const unsigned char *role = sqlite3_column_text(st, 2);
    if (store_role_parse((const char *)role, &m->role))
        m->role = STORE_ROLE_USER;   /* the CHECK constraint forbids this */
    m->content = sql_column_strdup(st, 3);
    m->n_tokens = sqlite3_column_int(st, 4);
    m->is_partial = sqlite3_column_int(st, 5) != 0;
    m->created_at = sqlite3_column_int64(st, 6);
    m->has_stats = store_stats_from_json(
        (const char *)sqlite3_column_text(st, 7), &m->stats);
    return m->content ? 0 : -1;
}

static void free_message(void *m)
{
    free(((struct store_message *)m)->content);
}

int store_list_messages(struct store *s, int64_t conversation_id,
                        struct store_message **out, size_t *n,
                        struct kk_error *err)
{
    *out = NULL;
    *n = 0;
    const char *what = "reading messages";
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err,
                    "SELECT id, conversation_id, role, content, n_tokens, "
                    "is_partial, created_at, stats_json FROM messages "
                    "WHERE conversation_id = ? ORDER BY id", "i",
                    conversation_id))
        return -1;
    return sql_collect(s, st, what, sizeof **out, read_message, free_message,
                       (void **)out, n, err);
}

void store_messages_free(struct store_message *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        free_message(&list[i]);
    free(list);
}
