/* store_migrate.c — schema versions. A new database gets data/schema.sql
 * whole; an older one runs the migrations from its PRAGMA user_version up
 * to STORE_SCHEMA_VERSION, all in one transaction, so a failure leaves it
 * as it was. A newer database is refused rather than damaged.
 *
 * Version history:
 *   1  conversations, messages (no statistics), messages_fts
 *   2  messages.stats_json; documents; checkpoints */
#include <stdio.h>

#include "store_internal.h"

/* Each migration brings version `from` to `from + 1`. The tables it
 * creates are written exactly as in data/schema.sql; a test checks that a
 * migrated database has the same schema as a new one. */
static const char migrate_1_to_2[] =
    "ALTER TABLE messages ADD COLUMN stats_json TEXT;\n"
    "CREATE TABLE documents (\n"
    "    id              INTEGER PRIMARY KEY,\n"
    "    conversation_id INTEGER NOT NULL\n"
    "                    REFERENCES conversations(id) ON DELETE CASCADE,\n"
    "    content         TEXT NOT NULL,\n"
    "    content_hash    TEXT NOT NULL,\n"
    "    source_path     TEXT NOT NULL DEFAULT '',\n"
    "    n_tokens        INTEGER NOT NULL DEFAULT 0,\n"
    "    created_at      INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX documents_by_conversation ON documents(conversation_id, "
    "id);\n"
    "CREATE TABLE checkpoints (\n"
    "    id                INTEGER PRIMARY KEY,\n"
    "    conversation_id   INTEGER NOT NULL\n"
    "                      REFERENCES conversations(id) ON DELETE CASCADE,\n"
    "    model_fingerprint TEXT NOT NULL,\n"
    "    token_ids         BLOB NOT NULL,\n"
    "    n_tokens          INTEGER NOT NULL,\n"
    "    kv_blob           BLOB NOT NULL,\n"
    "    bytes             INTEGER NOT NULL,\n"
    "    checksum          INTEGER NOT NULL,\n"
    "    created_at        INTEGER NOT NULL,\n"
    "    last_used_at      INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX checkpoints_by_conversation\n"
    "    ON checkpoints(conversation_id, model_fingerprint, created_at);\n"
    "CREATE INDEX checkpoints_by_use ON checkpoints(last_used_at);\n";

static const char *const migrations[STORE_SCHEMA_VERSION] = {
    [1] = migrate_1_to_2,
};

static int read_int(struct store *s, const char *sql, int64_t *value,
                    struct kk_error *err)
{
    sqlite3_stmt *st;
    const char *what = "reading the schema version";
    if (sql_prepare(s, &st, what, err, sql, NULL))
        return -1;
    int row = sql_step(s, st, what, err);
    *value = row == 1 ? sqlite3_column_int64(st, 0) : 0;
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    return row < 0 ? -1 : 0;
}

static int check_version(struct store *s, int64_t version,
                         struct kk_error *err)
{
    if (version > STORE_SCHEMA_VERSION)
        return kk_fail(err, "%s: the database has schema version %lld, "
                       "newer than this kakeya understands (%d); use a newer "
                       "kakeya", s->path, (long long)version,
                       STORE_SCHEMA_VERSION);
    if (version < 0)
        return kk_fail(err, "%s: the database has schema version %lld; it "
                       "is not a kakeya database", s->path,
                       (long long)version);
    return 0;
}

/* Inside the write transaction: version 0 is a new file, unless it holds
 * someone else's tables. */
static int upgrade(struct store *s, int64_t version, struct kk_error *err)
{
    if (version == 0) {
        int64_t n_objects;
        if (read_int(s, "SELECT count(*) FROM sqlite_master", &n_objects,
                     err))
            return -1;
        if (n_objects > 0)
            return kk_fail(err, "%s: the file is an SQLite database but not "
                           "a kakeya one (it has tables and no kakeya schema "
                           "version); kakeya left it as it is", s->path);
        return sql_exec(s, store_schema_sql, "creating the tables", err);
    }
    for (int64_t v = version; v < STORE_SCHEMA_VERSION; v++) {
        char what[96];
        snprintf(what, sizeof what, "migrating schema version %lld to %lld",
                 (long long)v, (long long)v + 1);
        if (!migrations[v])
            return kk_fail(err, "%s: %s: no migration known", s->path, what);
        if (sql_exec(s, migrations[v], what, err))
            return -1;
    }
    return 0;
}

int store_migrate(struct store *s, struct kk_error *err)
{
    int64_t version;
    if (read_int(s, "PRAGMA user_version", &version, err) ||
        check_version(s, version, err))
        return -1;
    if (version == STORE_SCHEMA_VERSION)
        return 0;
    if (store_begin(s, err))
        return -1;
    /* Another process may have migrated while we waited for the lock. */
    if (read_int(s, "PRAGMA user_version", &version, err) ||
        check_version(s, version, err))
        goto fail;
    if (version < STORE_SCHEMA_VERSION) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d",
                 STORE_SCHEMA_VERSION);
        if (upgrade(s, version, err) ||
            sql_exec(s, sql, "setting the schema version", err))
            goto fail;
    }
    return store_commit(s, err);
fail:
    store_rollback(s);
    return -1;
}
