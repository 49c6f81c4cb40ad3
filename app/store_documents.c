/* store_documents.c — documents loaded into a conversation, kept whole
 * with a content hash so the same file loaded again can be recognised. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

int store_add_document(struct store *s, int64_t conversation_id,
                       const char *content, const char *source_path,
                       int n_tokens, int64_t *id, struct kk_error *err)
{
    const char *what = "saving a document";
    content = content ? content : "";
    char hash[32];
    snprintf(hash, sizeof hash, "fnv1a64:%016" PRIx64,
             store_fnv1a64(STORE_FNV_SEED, content, strlen(content)));
    if (store_begin(s, err))
        return -1;
    if (store_require_conversation(s, conversation_id, what, err) ||
        sql_do(s, what, err,
               "INSERT INTO documents (conversation_id, content, "
               "content_hash, source_path, n_tokens, created_at) "
               "VALUES (?, ?, ?, ?, ?, ?)", "itttii", conversation_id,
               content, hash, source_path ? source_path : "",
               (int64_t)n_tokens, store_now_ms()))
        goto fail;
    int64_t new_id = sqlite3_last_insert_rowid(s->db);
    if (sql_do(s, what, err,
               "UPDATE conversations SET updated_at = ? WHERE id = ?", "ii",
               store_now_ms(), conversation_id) ||
        store_commit(s, err))
        goto fail;
    if (id)
        *id = new_id;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

static void free_document(void *p)
{
    struct store_document *d = p;
    free(d->content);
    free(d->content_hash);
    free(d->source_path);
}

static int read_document(sqlite3_stmt *st, void *out)
{
    struct store_document *d = out;
    memset(d, 0, sizeof *d);
    d->id = sqlite3_column_int64(st, 0);
    d->conversation_id = sqlite3_column_int64(st, 1);
    d->content = sql_column_strdup(st, 2);
    d->content_hash = sql_column_strdup(st, 3);
    d->source_path = sql_column_strdup(st, 4);
    d->n_tokens = sqlite3_column_int(st, 5);
    d->created_at = sqlite3_column_int64(st, 6);
    if (!d->content || !d->content_hash || !d->source_path) {
        free_document(d);
        return -1;
    }
    return 0;
}

int store_list_documents(struct store *s, int64_t conversation_id,
                         struct store_document **out, size_t *n,
                         struct kk_error *err)
{
    *out = NULL;
    *n = 0;
    const char *what = "reading documents";
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err,
                    "SELECT id, conversation_id, content, content_hash, "
                    "source_path, n_tokens, created_at FROM documents "
                    "WHERE conversation_id = ? ORDER BY id", "i",
                    conversation_id))
        return -1;
    return sql_collect(s, st, what, sizeof **out, read_document,
                       free_document, (void **)out, n, err);
}

void store_documents_free(struct store_document *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        free_document(&list[i]);
    free(list);
}
