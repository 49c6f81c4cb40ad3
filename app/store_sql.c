/* store_sql.c — checked SQLite calls for the store: every result code is
 * looked at, and failures become messages that say what to do. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_internal.h"

static const char *explain(struct store *s, int rc, const char *detail,
                           char *buf, size_t size)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        snprintf(buf, size, "the database is locked by another process "
                 "(waited %d ms); close the other kakeya or try again",
                 s ? s->busy_timeout_ms : 0);
        break;
    case SQLITE_READONLY:
    case SQLITE_PERM:
        snprintf(buf, size, "the database is read-only (%s); check that you "
                 "may write the file and its folder", detail);
        break;
    case SQLITE_FULL:
        snprintf(buf, size, "the disk is full (%s); nothing stored before "
                 "was lost - free some space and try again", detail);
        break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        snprintf(buf, size, "the file is damaged or is not a kakeya database "
                 "(%s); kakeya left it as it is - move it aside to start a "
                 "new one", detail);
        break;
    case SQLITE_CANTOPEN:
        snprintf(buf, size, "cannot open the file (%s); check that its folder "
                 "exists and that you may write there", detail);
        break;
    case SQLITE_IOERR:
        snprintf(buf, size, "input/output error (%s)", detail);
        break;
    case SQLITE_NOMEM:
        snprintf(buf, size, "out of memory");
        break;
    case SQLITE_TOOBIG:
        snprintf(buf, size, "the value is too large to store (%s)", detail);
        break;
    default:
        snprintf(buf, size, "%s", detail);
        break;
    }
    return buf;
}

int sql_fail(struct store *s, int rc, const char *what, struct kk_error *err)
{
    const char *detail = s && s->db ? sqlite3_errmsg(s->db)
                                    : sqlite3_errstr(rc);
    char why[400];
    explain(s, rc, detail, why, sizeof why);
    return kk_fail(err, "%s: %s: %s", s && s->path ? s->path : "database",
                   what, why);
}

int sql_exec(struct store *s, const char *sql, const char *what,
             struct kk_error *err)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : sql_fail(s, rc, what, err);
}

static int bind_all(sqlite3_stmt *st, const char *types, va_list ap)
{
    int rc = SQLITE_OK;
    for (int i = 0; types[i] && rc == SQLITE_OK; i++) {
        int col = i + 1;
        switch (types[i]) {
        case 't': {
            const char *v = va_arg(ap, const char *);
            rc = v ? sqlite3_bind_text(st, col, v, -1, SQLITE_STATIC)
                   : sqlite3_bind_null(st, col);
            break;
        }
        case 'i':
            rc = sqlite3_bind_int64(st, col, va_arg(ap, int64_t));
            break;
        case 'd':
            rc = sqlite3_bind_double(st, col, va_arg(ap, double));
            break;
        case 'b': {
            const void *p = va_arg(ap, const void *);
            size_t n = va_arg(ap, size_t);
            /* A NULL pointer would bind SQL NULL, not an empty blob. */
            rc = n == 0 ? sqlite3_bind_zeroblob(st, col, 0)
                        : sqlite3_bind_blob64(st, col, p, n, SQLITE_STATIC);
            break;
        }
        case 'n':
            rc = sqlite3_bind_null(st, col);
            break;
        default:
            rc = SQLITE_MISUSE;
            break;
        }
    }
    return rc;
}

static int prepare_v(struct store *s, sqlite3_stmt **st, const char *what,
                     struct kk_error *err, const char *sql, const char *types,
                     va_list ap)
{
    *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, what, err);
    rc = bind_all(*st, types ? types : "", ap);
    if (rc != SQLITE_OK) {
        sql_fail(s, rc, what, err);
        /* The bind error is the one reported; finalize has nothing to add. */
        (void)sqlite3_finalize(*st);
        *st = NULL;
        return -1;
    }
    return 0;
}

int sql_prepare(struct store *s, sqlite3_stmt **st, const char *what,
                struct kk_error *err, const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = prepare_v(s, st, what, err, sql, types, ap);
    va_end(ap);
    return rc;
}

int sql_step(struct store *s, sqlite3_stmt *st, const char *what,
             struct kk_error *err)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return sql_fail(s, rc, what, err);
}

int sql_run(struct store *s, sqlite3_stmt *st, const char *what,
            struct kk_error *err)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_ROW)
            rc = SQLITE_MISUSE;   /* a query where a command was expected */
        sql_fail(s, rc, what, err);
        (void)sqlite3_finalize(st);   /* repeats the step's error */
        return -1;
    }
    rc = sqlite3_finalize(st);
    return rc == SQLITE_OK ? 0 : sql_fail(s, rc, what, err);
}

int sql_do(struct store *s, const char *what, struct kk_error *err,
           const char *sql, const char *types, ...)
{
    sqlite3_stmt *st;
    va_list ap;
    va_start(ap, types);
    int rc = prepare_v(s, &st, what, err, sql, types, ap);
    va_end(ap);
    return rc ? rc : sql_run(s, st, what, err);
}

char *sql_column_strdup(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return strdup(t ? (const char *)t : "");
}

int store_begin(struct store *s, struct kk_error *err)
{
    return sql_exec(s, "BEGIN IMMEDIATE", "starting a transaction", err);
}

int store_commit(struct store *s, struct kk_error *err)
{
    if (sql_exec(s, "COMMIT", "committing", err)) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

void store_rollback(struct store *s)
{
    /* SQLite may already have rolled back (after SQLITE_FULL, say); then
     * there is nothing to do. A failing ROLLBACK leaves the transaction to
     * be rolled back when the connection closes; the caller already
     * reports the error that got us here. */
    if (!sqlite3_get_autocommit(s->db))
        (void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int64_t store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int store_require_conversation(struct store *s, int64_t id, const char *what,
                               struct kk_error *err)
{
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err,
                    "SELECT 1 FROM conversations WHERE id = ?", "i", id))
        return -1;
    int row = sql_step(s, st, what, err);
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    if (row < 0)
        return -1;
    if (row == 0)
        return kk_fail(err, "%s: %s: no conversation %lld (see kakeya list)",
                       s->path, what, (long long)id);
    return 0;
}

uint64_t store_fnv1a64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int sql_collect(struct store *s, sqlite3_stmt *st, const char *what,
                size_t elem_size, int (*read_row)(sqlite3_stmt *, void *),
                void (*free_row)(void *), void **out, size_t *n,
                struct kk_error *err)
{
    *out = NULL;
    *n = 0;
    char *list = NULL;
    size_t count = 0, cap = 0;
    int row, rc = 0;
    while ((row = sql_step(s, st, what, err)) == 1) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char *p = realloc(list, ncap * elem_size);
            if (!p) {
                rc = -1;
                break;
            }
            list = p;
            cap = ncap;
        }
        if (read_row(st, list + count * elem_size)) {
            rc = -1;
            break;
        }
        count++;
    }
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    if (rc)
        kk_fail(err, "%s: %s: out of memory", s->path, what);
    if (rc || row < 0) {
        for (size_t i = 0; i < count; i++)
            free_row(list + i * elem_size);
        free(list);
        return -1;
    }
    *out = list;
    *n = count;
    return 0;
}
