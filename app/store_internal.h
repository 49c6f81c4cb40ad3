/* store_internal.h — what the store_*.c files share and nobody else sees:
 * the connection struct and small helpers that check every SQLite return
 * code and turn failures into messages for the user. */
#ifndef KK_STORE_INTERNAL_H
#define KK_STORE_INTERNAL_H

#include <sqlite3.h>

#include "store.h"

struct store {
    sqlite3 *db;
    char *path;
    int busy_timeout_ms;
};

/* The embedded data/schema.sql (app/store_schema.c). */
extern const char store_schema_sql[];

/* Brings the schema to STORE_SCHEMA_VERSION (store_migrate.c). */
int store_migrate(struct store *s, struct kk_error *err);

/* Fills err with "<path>: <what>: <why>" for SQLite result code rc and
 * returns -1. Knows the codes a user can act on (busy, read-only, full,
 * corrupt). */
int sql_fail(struct store *s, int rc, const char *what, struct kk_error *err);

/* Runs SQL without results (may hold several statements). */
int sql_exec(struct store *s, const char *sql, const char *what,
             struct kk_error *err);

/* Prepares one statement and binds its parameters, described by types:
 *   't' const char * (NULL binds NULL)   'i' int64_t   'd' double
 *   'b' const void *, size_t (a blob)    'n' NULL
 * On failure nothing is left to finalize. */
int sql_prepare(struct store *s, sqlite3_stmt **st, const char *what,
                struct kk_error *err, const char *sql, const char *types, ...);

/* Steps a statement that returns no rows, then finalizes it. */
int sql_run(struct store *s, sqlite3_stmt *st, const char *what,
            struct kk_error *err);
/* prepare + run in one call. */
int sql_do(struct store *s, const char *what, struct kk_error *err,
           const char *sql, const char *types, ...);

/* Steps a query: 1 when a row is ready, 0 when done, -1 on failure (err
 * filled). Does not finalize. */
int sql_step(struct store *s, sqlite3_stmt *st, const char *what,
             struct kk_error *err);

/* Steps a query to the end, reading each row into a growing array of
 * elem_size elements with read_row (which returns -1 when out of memory,
 * leaving nothing to free). Finalizes st. On failure frees the rows read
 * with free_row and the array. */
int sql_collect(struct store *s, sqlite3_stmt *st, const char *what,
                size_t elem_size, int (*read_row)(sqlite3_stmt *, void *),
                void (*free_row)(void *), void **out, size_t *n,
                struct kk_error *err);

/* The column as a malloc'd string ("" for NULL); NULL when out of memory. */
char *sql_column_strdup(sqlite3_stmt *st, int col);

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. store_rollback is for failure paths:
 * it keeps err's first message. */
int store_begin(struct store *s, struct kk_error *err);
int store_commit(struct store *s, struct kk_error *err);
void store_rollback(struct store *s);

/* Unix time in milliseconds. */
int64_t store_now_ms(void);

/* Statistics <-> JSON text (store_messages.c). */
char *store_stats_to_json(const struct store_stats *st);
bool store_stats_from_json(const char *json, struct store_stats *st);

/* Fails with "no conversation N" unless it exists. */
int store_require_conversation(struct store *s, int64_t id, const char *what,
                               struct kk_error *err);

#endif
