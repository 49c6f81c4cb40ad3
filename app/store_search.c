/* store_search.c — full-text search over messages (FTS5). User text is
 * never passed to FTS5 as a query: each word becomes a quoted phrase, so
 * quotes, operators (AND, NEAR, *, ^, column:) and stray punctuation are
 * searched for as text instead of failing as syntax errors. */
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

/* The FTS5 query for text: words as quoted strings, separated by spaces
 * (all must match). NULL when out of memory; "" when text is blank. */
static char *quote_words(const char *text)
{
    size_t len = strlen(text);
    /* Worst case: every byte a quote (doubled) plus 3 bytes per word. */
    char *q = malloc(len * 4 + 1);
    if (!q)
        return NULL;
    size_t n = 0;
    const char *p = text;
    while (*p) {
        while (*p && strchr(" \t\r\n\f\v", *p))
            p++;
        if (!*p)
            break;
        if (n)
            q[n++] = ' ';
        q[n++] = '"';
        for (; *p && !strchr(" \t\r\n\f\v", *p); p++) {
            if (*p == '"')
                q[n++] = '"';
            q[n++] = *p;
        }
        q[n++] = '"';
    }
    q[n] = '\0';
    return q;
}

static int read_hit(sqlite3_stmt *st, void *out)
{
    struct store_hit *h = out;
    memset(h, 0, sizeof *h);
    h->conversation_id = sqlite3_column_int64(st, 0);
    h->message_id = sqlite3_column_int64(st, 1);
    h->conversation_title = sql_column_strdup(st, 2);
    if (store_role_parse((const char *)sqlite3_column_text(st, 3), &h->role))
        h->role = STORE_ROLE_USER;   /* the CHECK constraint forbids this */
    h->snippet = sql_column_strdup(st, 4);
    if (!h->conversation_title || !h->snippet) {
        free(h->conversation_title);
        free(h->snippet);
        return -1;
    }
    return 0;
}

static void free_hit(void *p)
{
    struct store_hit *h = p;
    free(h->conversation_title);
    free(h->snippet);
}

int store_search(struct store *s, const char *text, const char *mark_open,
                 const char *mark_close, size_t limit,
                 struct store_hit **out, size_t *n, struct kk_error *err)
{
    *out = NULL;
    *n = 0;
    const char *what = "searching";
    char *query = quote_words(text ? text : "");
    if (!query)
        return kk_fail(err, "%s: %s: out of memory", s->path, what);
    if (!query[0] || limit == 0) {
        free(query);
        return 0;
    }
    sqlite3_stmt *st;
    int rc = sql_prepare(
        s, &st, what, err,
        "SELECT m.conversation_id, m.id, c.title, m.role, "
        "snippet(messages_fts, 0, ?1, ?2, '...', 12) "
        "FROM messages_fts "
        "JOIN messages m ON m.id = messages_fts.rowid "
        "JOIN conversations c ON c.id = m.conversation_id "
        "WHERE messages_fts MATCH ?3 ORDER BY rank LIMIT ?4",
        "ttti", mark_open ? mark_open : "", mark_close ? mark_close : "",
        query, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
    if (rc == 0)
        rc = sql_collect(s, st, what, sizeof **out, read_hit, free_hit,
                         (void **)out, n, err);
    free(query);
    return rc;
}

void store_hits_free(struct store_hit *hits, size_t n)
{
    for (size_t i = 0; hits && i < n; i++)
        free_hit(&hits[i]);
    free(hits);
}
