/* store_conversations.c — creating, listing, renaming and deleting
 * conversations. */
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

int store_create_conversation(struct store *s, const char *title,
                              const char *system_prompt,
                              const char *target_model,
                              const char *draft_model, int64_t *id,
                              struct kk_error *err)
{
    int64_t now = store_now_ms();
    if (sql_do(s, "creating a conversation", err,
               "INSERT INTO conversations (title, system_prompt, "
               "target_model, draft_model, created_at, updated_at) "
               "VALUES (?, ?, ?, ?, ?, ?)", "ttttii", or_empty(title),
               or_empty(system_prompt), or_empty(target_model),
               or_empty(draft_model), now, now))
        return -1;
    if (id)
        *id = sqlite3_last_insert_rowid(s->db);
    return 0;
}

#define CONVERSATION_COLUMNS                                                 \
    "SELECT c.id, c.title, c.system_prompt, c.target_model, c.draft_model, " \
    "c.created_at, c.updated_at, "                                           \
    "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) "      \
    "FROM conversations c "

static int read_conversation(sqlite3_stmt *st, struct store_conversation *c)
{
    memset(c, 0, sizeof *c);
    c->id = sqlite3_column_int64(st, 0);
    c->title = sql_column_strdup(st, 1);
    c->system_prompt = sql_column_strdup(st, 2);
    c->target_model = sql_column_strdup(st, 3);
    c->draft_model = sql_column_strdup(st, 4);
    c->created_at = sqlite3_column_int64(st, 5);
    c->updated_at = sqlite3_column_int64(st, 6);
    c->n_messages = sqlite3_column_int64(st, 7);
    if (!c->title || !c->system_prompt || !c->target_model ||
        !c->draft_model) {
        store_conversation_free(c);
        return -1;
    }
    return 0;
}

int store_get_conversation(struct store *s, int64_t id,
                           struct store_conversation *out,
                           struct kk_error *err)
{
    memset(out, 0, sizeof *out);
    const char *what = "reading a conversation";
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err, CONVERSATION_COLUMNS "WHERE c.id = ?",
                    "i", id))
        return -1;
    int row = sql_step(s, st, what, err);
    int rc = row < 0 ? -1 : 0;
    if (row == 0)
        rc = kk_fail(err, "%s: no conversation %lld (see kakeya list)",
                     s->path, (long long)id);
    else if (row == 1 && read_conversation(st, out))
        rc = kk_fail(err, "%s: %s: out of memory", s->path, what);
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    return rc;
}

void store_conversation_free(struct store_conversation *c)
{
    if (!c)
        return;
    free(c->title);
    free(c->system_prompt);
    free(c->target_model);
    free(c->draft_model);
    memset(c, 0, sizeof *c);
}

static int read_conversation_row(sqlite3_stmt *st, void *out)
{
    return read_conversation(st, out);
}

static void free_conversation_row(void *c)
{
    store_conversation_free(c);
}

int store_list_conversations(struct store *s,
                             struct store_conversation **out, size_t *n,
                             struct kk_error *err)
{
    *out = NULL;
    *n = 0;
    const char *what = "listing conversations";
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err, CONVERSATION_COLUMNS
                    "ORDER BY c.updated_at DESC, c.id DESC", NULL))
        return -1;
    return sql_collect(s, st, what, sizeof **out, read_conversation_row,
                       free_conversation_row, (void **)out, n, err);
}

void store_conversations_free(struct store_conversation *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        store_conversation_free(&list[i]);
    free(list);
}

int store_set_title(struct store *s, int64_t id, const char *title,
                    struct kk_error *err)
{
    const char *what = "renaming a conversation";
    if (store_require_conversation(s, id, what, err))
        return -1;
    return sql_do(s, what, err,
                  "UPDATE conversations SET title = ? WHERE id = ?", "ti",
                  or_empty(title), id);
}

int store_delete_conversation(struct store *s, int64_t id,
                              struct kk_error *err)
{
    const char *what = "deleting a conversation";
    if (store_require_conversation(s, id, what, err))
        return -1;
    /* Messages, documents and checkpoints go with it (ON DELETE CASCADE);
     * one statement is one transaction. */
    return sql_do(s, what, err, "DELETE FROM conversations WHERE id = ?",
                  "i", id);
}
