/* test_store.c — the conversation store on real database files in a fresh
 * temporary folder per test: schema and migrations, messages and the
 * streaming-answer discipline, checkpoints, export/import, search, and
 * files the store must refuse (read-only, damaged, foreign, newer). The
 * crash and multi-process tests are in test_store_crash.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store.h"
#include "store_internal.h"
#include "store_testutil.h"
#include "testutil.h"

/* ---- schema ----------------------------------------------------------- */

static void test_embedded_schema_equals_data_schema_sql(void **state)
{
    (void)state;
    size_t len;
    char *file = testutil_read_file("data/schema.sql", &len);
    assert_non_null(file);
    assert_string_equal(store_schema_sql, file);
    free(file);
}

static void test_default_path_follows_xdg_data_home_then_home(void **state)
{
    (void)state;
    char *old_xdg = getenv("XDG_DATA_HOME") ? strdup(getenv("XDG_DATA_HOME"))
                                            : NULL;
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char buf[512];
    setenv("XDG_DATA_HOME", "/data/x", 1);
    assert_int_equal(store_default_path(buf, sizeof buf, NULL), 0);
    assert_string_equal(buf, "/data/x/kakeya/kakeya.db");
    setenv("XDG_DATA_HOME", "relative/ignored", 1);
    setenv("HOME", "/home/someone", 1);
    assert_int_equal(store_default_path(buf, sizeof buf, NULL), 0);
    assert_string_equal(buf, "/home/someone/.local/share/kakeya/kakeya.db");
    unsetenv("XDG_DATA_HOME");
    assert_int_equal(store_default_path(buf, sizeof buf, NULL), 0);
    assert_string_equal(buf, "/home/someone/.local/share/kakeya/kakeya.db");
    struct kk_error err = {{0}};
    assert_int_equal(store_default_path(buf, 8, &err), -1);
    assert_non_null(strstr(err.msg, "too long"));
    if (old_xdg)
        setenv("XDG_DATA_HOME", old_xdg, 1);
    if (old_home)
        setenv("HOME", old_home, 1);
    free(old_xdg);
    free(old_home);
}

static void test_open_creates_folders_and_a_wal_database_at_version_2(
    void **state)
{
    struct fixture *fx = *state;
    char path[600];
    snprintf(path, sizeof path, "%s/a/b/kakeya.db", fx->dir);
    struct store *s = open_ok(path);
    assert_string_equal(store_path(s), path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(raw_int(path, "PRAGMA user_version"), 2);
    char *mode = raw_text(path, "PRAGMA journal_mode");
    assert_string_equal(mode, "wal");
    free(mode);
    /* A message for a missing conversation is refused by name. */
    struct kk_error err = {{0}};
    assert_int_equal(store_add_message(s, 42, STORE_ROLE_USER, "hi", 1, NULL,
                                       NULL, &err), -1);
    assert_non_null(strstr(err.msg, "no conversation 42"));
    store_close(s);
}

static void test_open_of_an_empty_file_creates_the_schema(void **state)
{
    struct fixture *fx = *state;
    FILE *f = fopen(fx->db, "w");
    assert_non_null(f);
    fclose(f);
    struct store *s = open_ok(fx->db);
    int64_t conv;
    assert_int_equal(store_create_conversation(s, "t", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    store_close(s);
    assert_int_equal(raw_int(fx->db, "PRAGMA user_version"), 2);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM sqlite_master "
                             "WHERE name = 'checkpoints'"), 1);
}

static void test_reopening_keeps_data_and_runs_no_migration(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv;
    assert_int_equal(store_create_conversation(s, "kept", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    store_close(s);
    s = open_ok(fx->db);
    struct store_conversation c;
    assert_int_equal(store_get_conversation(s, conv, &c, NULL), 0);
    assert_string_equal(c.title, "kept");
    store_conversation_free(&c);
    store_close(s);
}

/* Version 1 of the schema, as kakeya wrote it: no statistics column, no
 * documents, no checkpoints. */
static const char schema_v1[] =
    "CREATE TABLE conversations (\n"
    "    id            INTEGER PRIMARY KEY,\n"
    "    title         TEXT NOT NULL DEFAULT '',\n"
    "    system_prompt TEXT NOT NULL DEFAULT '',\n"
    "    target_model  TEXT NOT NULL DEFAULT '',\n"
    "    draft_model   TEXT NOT NULL DEFAULT '',\n"
    "    created_at    INTEGER NOT NULL,\n"
    "    updated_at    INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE messages (\n"
    "    id              INTEGER PRIMARY KEY,\n"
    "    conversation_id INTEGER NOT NULL\n"
    "                    REFERENCES conversations(id) ON DELETE CASCADE,\n"
    "    role            TEXT NOT NULL\n"
    "                    CHECK (role IN ('system', 'user', 'assistant')),\n"
    "    content         TEXT NOT NULL,\n"
    "    n_tokens        INTEGER NOT NULL DEFAULT 0,\n"
    "    is_partial      INTEGER NOT NULL DEFAULT 0 CHECK (is_partial IN "
    "(0, 1)),\n"
    "    created_at      INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX messages_by_conversation ON messages(conversation_id, id);\n"
    "CREATE VIRTUAL TABLE messages_fts USING fts5(\n"
    "    content, content='messages', content_rowid='id'\n"
    ");\n"
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN\n"
    "    INSERT INTO messages_fts(rowid, content) VALUES (new.id, "
    "new.content);\n"
    "END;\n"
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN\n"
    "    INSERT INTO messages_fts(messages_fts, rowid, content)\n"
    "        VALUES ('delete', old.id, old.content);\n"
    "END;\n"
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages "
    "BEGIN\n"
    "    INSERT INTO messages_fts(messages_fts, rowid, content)\n"
    "        VALUES ('delete', old.id, old.content);\n"
    "    INSERT INTO messages_fts(rowid, content) VALUES (new.id, "
    "new.content);\n"
    "END;\n"
    "PRAGMA user_version = 1;\n"
    "INSERT INTO conversations VALUES (7, 'old chat', 'be brief', "
    "'smollm2.gguf', '', 1000, 2000);\n"
    "INSERT INTO messages VALUES (1, 7, 'user', 'what is a kakeya set', 6, "
    "0, 1000);\n"
    "INSERT INTO messages VALUES (2, 7, 'assistant', 'a set containing a "
    "unit segment in every direction', 9, 0, 1500);\n";

static void test_v1_database_migrates_keeping_its_messages(void **state)
{
    struct fixture *fx = *state;
    raw_exec(fx->db, schema_v1);
    struct store *s = open_ok(fx->db);
    assert_int_equal(raw_int(fx->db, "PRAGMA user_version"), 2);
    struct store_conversation c;
    assert_int_equal(store_get_conversation(s, 7, &c, NULL), 0);
    assert_string_equal(c.title, "old chat");
    assert_string_equal(c.system_prompt, "be brief");
    assert_int_equal(c.n_messages, 2);
    store_conversation_free(&c);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s, 7, &m, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].content, "what is a kakeya set");
    assert_int_equal(m[1].role, STORE_ROLE_ASSISTANT);
    assert_int_equal(m[1].n_tokens, 9);
    assert_false(m[1].has_stats);
    store_messages_free(m, n);
    /* The new tables work, and the old messages are still searchable. */
    struct store_stats st = {.tau = 2.5, .proposer = "draft"};
    assert_int_equal(store_add_message(s, 7, STORE_ROLE_ASSISTANT, "more", 1,
                                       &st, NULL, NULL), 0);
    assert_int_equal(store_add_document(s, 7, "doc", "/tmp/d.txt", 1, NULL,
                                        NULL), 0);
    int32_t ids[] = {1, 2};
    assert_int_equal(store_put_checkpoint(s, 7, "fp", ids, 2, "kv", 2, NULL,
                                          NULL), 0);
    struct store_hit *hits;
    assert_int_equal(store_search(s, "segment", "[", "]", 10, &hits, &n,
                                  NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(hits[0].message_id, 2);
    store_hits_free(hits, n);
    store_close(s);
}

/* The schema as a comparable text: every table's columns and foreign keys,
 * every other object's SQL. */
static char *schema_fingerprint(const char *path)
{
    sqlite3 *db = raw_db(path);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
        "SELECT type, name, sql FROM sqlite_master ORDER BY type, name", -1,
        &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const char *sql = (const char *)sqlite3_column_text(st, 2);
        fprintf(f, "%s %s\n", type, name);
        bool is_plain_table = !strcmp(type, "table") && sql &&
                              !strstr(sql, "VIRTUAL");
        if (!is_plain_table) {
            fprintf(f, "  %s\n", sql ? sql : "");
            continue;
        }
        const char *pragmas[] = {"table_xinfo", "foreign_key_list"};
        for (int p = 0; p < 2; p++) {
            char q[256];
            snprintf(q, sizeof q, "PRAGMA %s(\"%s\")", pragmas[p], name);
            sqlite3_stmt *c;
            assert_int_equal(sqlite3_prepare_v2(db, q, -1, &c, NULL),
                             SQLITE_OK);
            while (sqlite3_step(c) == SQLITE_ROW) {
                fputs("  ", f);
                for (int i = 0; i < sqlite3_column_count(c); i++) {
                    const unsigned char *v = sqlite3_column_text(c, i);
                    fprintf(f, "%s|", v ? (const char *)v : "NULL");
                }
                fputc('\n', f);
            }
            sqlite3_finalize(c);
        }
    }
    sqlite3_finalize(st);
    fclose(f);
    sqlite3_close(db);
    return out;
}

static void test_migrated_v1_schema_matches_a_new_database(void **state)
{
    struct fixture *fx = *state;
    raw_exec(fx->db, schema_v1);
    store_close(open_ok(fx->db));
    char fresh[600];
    snprintf(fresh, sizeof fresh, "%s/fresh.db", fx->dir);
    store_close(open_ok(fresh));
    char *a = schema_fingerprint(fx->db), *b = schema_fingerprint(fresh);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "stats_json"));
    free(a);
    free(b);
}

static void test_newer_schema_version_is_refused_untouched(void **state)
{
    struct fixture *fx = *state;
    store_close(open_ok(fx->db));
    raw_exec(fx->db, "PRAGMA user_version = 9");
    size_t before_len;
    char *before = testutil_read_file(fx->db, &before_len);
    struct store *s = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(store_open(fx->db, NULL, &s, &err), -1);
    assert_null(s);
    assert_non_null(strstr(err.msg, "schema version 9"));
    assert_non_null(strstr(err.msg, "newer kakeya"));
    assert_file_equals(fx->db, before, before_len);
    free(before);
}

static void test_foreign_sqlite_database_is_refused(void **state)
{
    struct fixture *fx = *state;
    raw_exec(fx->db, "CREATE TABLE accounts (id INTEGER, money REAL);"
                     "INSERT INTO accounts VALUES (1, 100.0);");
    struct store *s = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(store_open(fx->db, NULL, &s, &err), -1);
    assert_non_null(strstr(err.msg, "not a kakeya one"));
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM accounts"), 1);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM sqlite_master"),
                     1);
}

/* ---- conversations and messages --------------------------------------- */

static void test_messages_keep_role_content_tokens_and_stats(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv, id;
    assert_int_equal(store_create_conversation(s, "t", "sys", "target.gguf",
                                               "draft.gguf", &conv, NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER, "hello", 2,
                                       NULL, &id, NULL), 0);
    struct store_stats st = {.tau = 3.25, .acceptance_rate = 0.75,
                             .tok_per_s = 41.5, .kv_saved = 0.375,
                             .proposer = "ngram"};
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_ASSISTANT,
                                       "héllo — ünïcode", 5, &st, NULL, NULL),
                     0);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_int_equal(m[0].id, id);
    assert_int_equal(m[0].role, STORE_ROLE_USER);
    assert_false(m[0].has_stats);
    assert_string_equal(m[1].content, "héllo — ünïcode");
    assert_int_equal(m[1].n_tokens, 5);
    assert_true(m[1].has_stats);
    assert_true(m[1].stats.tau == 3.25 && m[1].stats.acceptance_rate == 0.75);
    assert_true(m[1].stats.tok_per_s == 41.5 && m[1].stats.kv_saved == 0.375);
    assert_string_equal(m[1].stats.proposer, "ngram");
    assert_false(m[1].is_partial);
    store_messages_free(m, n);
    /* The stats column holds JSON another tool can read. */
    char *json = raw_text(fx->db, "SELECT json_extract(stats_json, "
                          "'$.proposer') FROM messages WHERE role = "
                          "'assistant'");
    assert_string_equal(json, "ngram");
    free(json);
    store_close(s);
}

static void test_answer_stays_partial_until_finished(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv, answer;
    assert_int_equal(store_create_conversation(s, "t", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER, "q", 1, NULL,
                                       NULL, NULL), 0);
    assert_int_equal(store_begin_answer(s, conv, &answer, NULL), 0);
    assert_int_equal(store_update_answer(s, answer, "The ans", 2, NULL, NULL),
                     0);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_true(m[1].is_partial);
    assert_string_equal(m[1].content, "The ans");
    store_messages_free(m, n);
    struct store_stats st = {.tau = 1.0, .proposer = "none"};
    assert_int_equal(store_finish_answer(s, answer, "The answer.", 3, &st,
                                         NULL), 0);
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_false(m[1].is_partial);
    assert_string_equal(m[1].content, "The answer.");
    assert_int_equal(m[1].n_tokens, 3);
    assert_true(m[1].has_stats);
    store_messages_free(m, n);
    /* A finished answer (or a user message) is not rewritten. */
    struct kk_error err = {{0}};
    assert_int_equal(store_update_answer(s, answer, "late", 1, NULL, &err),
                     -1);
    assert_non_null(strstr(err.msg, "not an unfinished answer"));
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_string_equal(m[1].content, "The answer.");
    store_messages_free(m, n);
    store_close(s);
}

static void test_list_orders_by_last_update_and_counts_messages(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t a, b;
    assert_int_equal(store_create_conversation(s, "first", NULL, NULL, NULL,
                                               &a, NULL), 0);
    assert_int_equal(store_create_conversation(s, "second", NULL, NULL, NULL,
                                               &b, NULL), 0);
    usleep(2000);   /* updated_at has millisecond resolution */
    assert_int_equal(store_add_message(s, a, STORE_ROLE_USER, "x", 1, NULL,
                                       NULL, NULL), 0);
    assert_int_equal(store_set_title(s, b, "renamed", NULL), 0);
    struct store_conversation *list;
    size_t n;
    assert_int_equal(store_list_conversations(s, &list, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, a);
    assert_int_equal(list[0].n_messages, 1);
    assert_string_equal(list[1].title, "renamed");
    assert_int_equal(list[1].n_messages, 0);
    store_conversations_free(list, n);
    store_close(s);
}

static void test_delete_removes_messages_documents_checkpoints_and_index(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv, keep;
    assert_int_equal(store_create_conversation(s, "gone", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    assert_int_equal(store_create_conversation(s, "kept", NULL, NULL, NULL,
                                               &keep, NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER,
                                       "zebra crossing", 2, NULL, NULL, NULL),
                     0);
    assert_int_equal(store_add_message(s, keep, STORE_ROLE_USER,
                                       "zebra stripes", 2, NULL, NULL, NULL),
                     0);
    assert_int_equal(store_add_document(s, conv, "d", "", 1, NULL, NULL), 0);
    int32_t ids[] = {5};
    assert_int_equal(store_put_checkpoint(s, conv, "fp", ids, 1, "k", 1,
                                          NULL, NULL), 0);
    assert_int_equal(store_delete_conversation(s, conv, NULL), 0);
    struct kk_error err = {{0}};
    assert_int_equal(store_delete_conversation(s, conv, &err), -1);
    assert_non_null(strstr(err.msg, "no conversation"));
    assert_int_equal(raw_int(fx->db, "SELECT (SELECT count(*) FROM messages)"
                             " + (SELECT count(*) FROM documents) + (SELECT "
                             "count(*) FROM checkpoints)"), 1);
    struct store_hit *hits;
    size_t n;
    assert_int_equal(store_search(s, "zebra", "", "", 10, &hits, &n, NULL),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(hits[0].conversation_id, keep);
    store_hits_free(hits, n);
    assert_int_equal(raw_int(fx->db, "PRAGMA foreign_key_check"), 0);
    store_close(s);
}

static void test_documents_keep_content_path_and_hash(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv;
    assert_int_equal(store_create_conversation(s, "t", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    assert_int_equal(store_add_document(s, conv, "a", "/x/a.txt", 1, NULL,
                                        NULL), 0);
    assert_int_equal(store_add_document(s, conv, "b", NULL, 1, NULL, NULL),
                     0);
    struct store_document *d;
    size_t n;
    assert_int_equal(store_list_documents(s, conv, &d, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].source_path, "/x/a.txt");
    assert_string_equal(d[1].source_path, "");
    /* FNV-1a 64 of "a" is af63dc4c8601ec8c (the published test vector). */
    assert_string_equal(d[0].content_hash, "fnv1a64:af63dc4c8601ec8c");
    assert_string_not_equal(d[0].content_hash, d[1].content_hash);
    store_documents_free(d, n);
    store_close(s);
}

/* ---- checkpoints ------------------------------------------------------ */

static int64_t new_conversation(struct store *s)
{
    int64_t conv;
    assert_int_equal(store_create_conversation(s, "c", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    return conv;
}

static void test_checkpoint_round_trips_ids_and_kv(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = new_conversation(s);
    int32_t ids[] = {1, -2, 0x7fffffff, 151643};
    unsigned char kv[1000];
    for (size_t i = 0; i < sizeof kv; i++)
        kv[i] = (unsigned char)(i * 7);
    assert_int_equal(store_put_checkpoint(s, conv, "fp-a", ids, 4, kv,
                                          sizeof kv, NULL, NULL), 0);
    struct store_checkpoint c;
    enum store_checkpoint_status status;
    assert_int_equal(store_get_checkpoint(s, conv, "fp-a", &c, &status,
                                          NULL), 0);
    assert_int_equal(status, STORE_CHECKPOINT_FOUND);
    assert_int_equal(c.n_tokens, 4);
    assert_memory_equal(c.token_ids, ids, sizeof ids);
    assert_int_equal(c.kv_bytes, sizeof kv);
    assert_memory_equal(c.kv, kv, sizeof kv);
    store_checkpoint_free(&c);
    /* Token ids are stored little-endian whatever the host. */
    char *hex = raw_text(fx->db, "SELECT hex(token_ids) FROM checkpoints");
    assert_string_equal(hex, "01000000FEFFFFFFFFFFFF7F5B500200");
    free(hex);
    store_close(s);
}

static void test_checkpoint_newest_match_wins_and_others_are_reported(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = new_conversation(s), empty = new_conversation(s);
    int32_t ids[] = {1, 2, 3};
    assert_int_equal(store_put_checkpoint(s, conv, "fp-a", ids, 1, "old", 3,
                                          NULL, NULL), 0);
    assert_int_equal(store_put_checkpoint(s, conv, "fp-a", ids, 3, "new", 3,
                                          NULL, NULL), 0);
    assert_int_equal(store_put_checkpoint(s, conv, "fp-b", ids, 2, "b", 1,
                                          NULL, NULL), 0);
    struct store_checkpoint c;
    enum store_checkpoint_status status;
    assert_int_equal(store_get_checkpoint(s, conv, "fp-a", &c, &status,
                                          NULL), 0);
    assert_int_equal(status, STORE_CHECKPOINT_FOUND);
    assert_int_equal(c.n_tokens, 3);
    assert_memory_equal(c.kv, "new", 3);
    store_checkpoint_free(&c);
    assert_int_equal(store_get_checkpoint(s, conv, "fp-other", &c, &status,
                                          NULL), 0);
    assert_int_equal(status, STORE_CHECKPOINT_OTHER_MODEL);
    assert_null(c.kv);
    assert_int_equal(store_get_checkpoint(s, empty, "fp-a", &c, &status,
                                          NULL), 0);
    assert_int_equal(status, STORE_CHECKPOINT_NONE);
    store_close(s);
}

static void test_checkpoint_with_damaged_blob_is_reported_corrupt(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = new_conversation(s);
    int32_t ids[] = {9, 8};
    unsigned char kv[256] = {0};
    assert_int_equal(store_put_checkpoint(s, conv, "fp", ids, 2, kv,
                                          sizeof kv, NULL, NULL), 0);
    /* One flipped byte in the KV blob, as a bad disk would leave it. */
    raw_exec(fx->db, "UPDATE checkpoints SET kv_blob = "
                     "substr(kv_blob, 1, 100) || x'01' || "
                     "substr(kv_blob, 102)");
    struct store_checkpoint c;
    enum store_checkpoint_status status;
    assert_int_equal(store_get_checkpoint(s, conv, "fp", &c, &status, NULL),
                     0);
    assert_int_equal(status, STORE_CHECKPOINT_CORRUPT);
    assert_null(c.kv);
    /* A truncated blob too. */
    raw_exec(fx->db, "UPDATE checkpoints SET kv_blob = x'00'");
    assert_int_equal(store_get_checkpoint(s, conv, "fp", &c, &status, NULL),
                     0);
    assert_int_equal(status, STORE_CHECKPOINT_CORRUPT);
    /* And a damaged token list. */
    assert_int_equal(store_put_checkpoint(s, conv, "fp", ids, 2, kv,
                                          sizeof kv, NULL, NULL), 0);
    raw_exec(fx->db, "UPDATE checkpoints SET token_ids = x'0900000009000000'"
                     " WHERE id = (SELECT max(id) FROM checkpoints)");
    assert_int_equal(store_get_checkpoint(s, conv, "fp", &c, &status, NULL),
                     0);
    assert_int_equal(status, STORE_CHECKPOINT_CORRUPT);
    store_close(s);
}

static void test_prune_deletes_least_recently_used_first(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = new_conversation(s);
    char kv[96] = {0};
    int32_t id0 = 0;
    int64_t ck[4];
    /* Four checkpoints of 100 bytes each (4 id bytes + 96 KV bytes). */
    const char *fps[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(store_put_checkpoint(s, conv, fps[i], &id0, 1, kv,
                                              sizeof kv, &ck[i], NULL), 0);
    /* Using "a" makes "b" the least recently used. */
    struct store_checkpoint c;
    enum store_checkpoint_status status;
    assert_int_equal(store_get_checkpoint(s, conv, "a", &c, &status, NULL),
                     0);
    assert_int_equal(status, STORE_CHECKPOINT_FOUND);
    store_checkpoint_free(&c);
    int deleted;
    assert_int_equal(store_prune_checkpoints(s, 400, &deleted, NULL), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(store_prune_checkpoints(s, 399, &deleted, NULL), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM checkpoints "
                             "WHERE model_fingerprint = 'b'"), 0);
    assert_int_equal(store_prune_checkpoints(s, 250, &deleted, NULL), 0);
    assert_int_equal(deleted, 1);
    char *left = raw_text(fx->db, "SELECT group_concat(model_fingerprint, "
                          "'') FROM (SELECT model_fingerprint FROM "
                          "checkpoints ORDER BY model_fingerprint)");
    assert_string_equal(left, "ad");
    free(left);
    assert_int_equal(store_prune_checkpoints(s, 0, &deleted, NULL), 0);
    assert_int_equal(deleted, 2);
    store_close(s);
}

/* ---- export and import ------------------------------------------------ */

static int64_t make_rich_conversation(struct store *s)
{
    int64_t conv, answer;
    assert_int_equal(store_create_conversation(s, "Kakeya \"sets\"",
                                               "You are terse.",
                                               "target.gguf", "draft.gguf",
                                               &conv, NULL), 0);
    assert_int_equal(store_add_document(s, conv, "A ```fenced``` doc\nline 2",
                                        "/docs/k.txt", 7, NULL, NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_SYSTEM, "sys", 1,
                                       NULL, NULL, NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER,
                                       "What is it?\nTabs\there, ünï", 8,
                                       NULL, NULL, NULL), 0);
    struct store_stats st = {.tau = 2.3125, .acceptance_rate = 0.6,
                             .tok_per_s = 38.7, .kv_saved = 0.41,
                             .proposer = "draft"};
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_ASSISTANT,
                                       "A set with a segment in every "
                                       "direction.", 12, &st, NULL, NULL), 0);
    assert_int_equal(store_begin_answer(s, conv, &answer, NULL), 0);
    assert_int_equal(store_update_answer(s, answer, "Half an ans", 3, &st,
                                         NULL), 0);
    return conv;
}

static void test_export_import_round_trip_is_exact(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = make_rich_conversation(s);
    char *first, *second;
    assert_int_equal(store_export_json(s, conv, &first, NULL), 0);
    int64_t copy;
    assert_int_equal(store_import_json(s, first, strlen(first), &copy, NULL),
                     0);
    assert_int_not_equal(copy, conv);
    assert_int_equal(store_export_json(s, copy, &second, NULL), 0);
    assert_string_equal(first, second);
    free(second);
    /* Into a second database too: nothing depends on row ids. */
    char other[600];
    snprintf(other, sizeof other, "%s/other.db", fx->dir);
    struct store *s2 = open_ok(other);
    assert_int_equal(store_import_json(s2, first, strlen(first), &copy, NULL),
                     0);
    assert_int_equal(store_export_json(s2, copy, &second, NULL), 0);
    assert_string_equal(first, second);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s2, copy, &m, &n, NULL), 0);
    assert_int_equal(n, 4);
    assert_true(m[3].is_partial);
    assert_true(m[2].has_stats && m[2].stats.tau == 2.3125);
    store_messages_free(m, n);
    free(second);
    free(first);
    store_close(s2);
    store_close(s);
}

static void test_markdown_export_shows_messages_stats_and_document(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = make_rich_conversation(s);
    char *md;
    assert_int_equal(store_export_markdown(s, conv, &md, NULL), 0);
    assert_non_null(strstr(md, "# Kakeya \"sets\"\n"));
    assert_non_null(strstr(md, "## System prompt\n\nYou are terse."));
    assert_non_null(strstr(md, "## User\n\nWhat is it?"));
    assert_non_null(strstr(md, "tau 2.31 · acceptance 60% · 38.7 tok/s · "
                               "KV saved 41% · proposer draft · 12 tokens"));
    assert_non_null(strstr(md, "*(unfinished answer)*"));
    /* The document holds ``` so its fence is longer. */
    assert_non_null(strstr(md, "````\nA ```fenced``` doc\nline 2\n````\n"));
    free(md);
    struct kk_error err = {{0}};
    assert_int_equal(store_export_markdown(s, 999, &md, &err), -1);
    assert_non_null(strstr(err.msg, "no conversation 999"));
    store_close(s);
}

static void expect_import_error(struct store *s, const char *json, size_t len,
                                const char *expected)
{
    struct kk_error err = {{0}};
    int64_t id = -1;
    int rc = store_import_json(s, json, len, &id, &err);
    if (rc != -1 || !strstr(err.msg, expected))
        fail_msg("import of %.*s: rc %d, message '%s', expected '%s'",
                 (int)(len > 200 ? 200 : len), json, rc, err.msg, expected);
    assert_int_equal(id, -1);
}

static void test_import_rejects_malformed_files_with_clear_messages(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
#define BAD(json, expected) \
    expect_import_error(s, json, strlen(json), expected)
    BAD("", "empty");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\"",
        "ends too early");
    BAD("{\"format\": \"kakeya-conversation\",\n \"version\": 1, } ",
        "syntax error at line 2");
    BAD("[1, 2]", "expected a JSON object");
    BAD("{\"messages\": []}", "lacks \"format\"");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 2, "
        "\"messages\": []}", "version 2");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1}",
        "messages: expected an array");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\": "
        "[{\"role\": \"robot\", \"content\": \"x\"}]}",
        "messages[0].role: expected \"system\", \"user\" or \"assistant\"");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\": "
        "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"user\"}]}",
        "messages[1].content: expected a string");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\": "
        "[{\"role\": \"user\", \"content\": \"x\", \"n_tokens\": -3}]}",
        "messages[0].n_tokens: expected a whole number");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\": "
        "[{\"role\": \"user\", \"content\": \"x\", \"stats\": {\"tau\": "
        "\"fast\"}}]}", "messages[0].stats.tau: expected a number");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"title\": 5,"
        " \"messages\": []}", "title: expected a string");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\": "
        "[], \"documents\": [{\"content\": \"abc\", \"content_hash\": "
        "\"fnv1a64:0000000000000000\"}]}", "does not match the content");
    BAD("{\"format\": \"kakeya-conversation\", \"version\": 1, \"messages\": "
        "[]} trailing", "unexpected text after the end");
    /* cJSON reads a NUL byte as white space; the file is still refused. */
    expect_import_error(s, "{\"format\"\0: 1}", 14, "kakeya export");
#undef BAD
    /* Every truncation of a real export fails cleanly. */
    int64_t conv = make_rich_conversation(s);
    char *json;
    assert_int_equal(store_export_json(s, conv, &json, NULL), 0);
    size_t len = strlen(json);
    int64_t before = raw_int(fx->db, "SELECT count(*) FROM conversations");
    for (size_t cut = 0; cut + 2 < len; cut += 1 + cut / 16) {
        struct kk_error err = {{0}};
        assert_int_equal(store_import_json(s, json, cut, NULL, &err), -1);
        assert_true(err.msg[0] != '\0');
    }
    /* And garbage bytes sprinkled over it never crash (some may still be
     * valid JSON strings: those imports may succeed). */
    unsigned seed = 12345;
    for (int round = 0; round < 200; round++) {
        char *copy = strdup(json);
        for (int k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            copy[(seed >> 8) % len] = (char)(seed >> 24);
        }
        struct kk_error err = {{0}};
        int64_t id;
        if (store_import_json(s, copy, len, &id, &err) == 0)
            assert_int_equal(store_delete_conversation(s, id, NULL), 0);
        else
            assert_true(err.msg[0] != '\0');
        free(copy);
    }
    assert_int_equal(raw_int(fx->db, "SELECT count(*) FROM conversations"),
                     before);
    free(json);
    store_close(s);
}

/* ---- search ----------------------------------------------------------- */

static void test_search_finds_words_with_a_marked_snippet(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = new_conversation(s), answer;
    assert_int_equal(store_set_title(s, conv, "geometry", NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER,
                                       "Tell me about Besicovitch sets in "
                                       "the plane", 8, NULL, NULL, NULL), 0);
    assert_int_equal(store_begin_answer(s, conv, &answer, NULL), 0);
    assert_int_equal(store_update_answer(s, answer, "They have measure zero",
                                         4, NULL, NULL), 0);
    struct store_hit *hits;
    size_t n;
    assert_int_equal(store_search(s, "besicovitch PLANE", "<", ">", 10,
                                  &hits, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(hits[0].conversation_id, conv);
    assert_int_equal(hits[0].role, STORE_ROLE_USER);
    assert_string_equal(hits[0].conversation_title, "geometry");
    assert_non_null(strstr(hits[0].snippet, "<Besicovitch>"));
    assert_non_null(strstr(hits[0].snippet, "<plane>"));
    store_hits_free(hits, n);
    /* A partial answer is searchable as it is updated. */
    assert_int_equal(store_search(s, "measure", "", "", 10, &hits, &n, NULL),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(hits[0].message_id, answer);
    store_hits_free(hits, n);
    assert_int_equal(store_update_answer(s, answer, "Lebesgue null", 2, NULL,
                                         NULL), 0);
    assert_int_equal(store_search(s, "measure", "", "", 10, &hits, &n, NULL),
                     0);
    assert_int_equal(n, 0);
    store_hits_free(hits, n);
    /* All words must occur. */
    assert_int_equal(store_search(s, "plane zebra", "", "", 10, &hits, &n,
                                  NULL), 0);
    assert_int_equal(n, 0);
    store_hits_free(hits, n);
    store_close(s);
}

static void test_search_treats_fts_syntax_as_plain_text(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = new_conversation(s);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER,
                                       "say \"hello\" AND goodbye OR NOT "
                                       "near(x) col:umn", 8, NULL, NULL,
                                       NULL), 0);
    static const char *const queries[] = {
        "\"hello", "hello\"", "\"\"\"", "AND", "OR NOT", "NEAR(", "near(x)",
        "hel*", "*", "^hello", "content:hello", "col:umn", "(", ")", "-",
        "+", "'", "\\", "a\"b\"c", "{content}: x", "hello AND", ":", "\x01",
    };
    for (size_t q = 0; q < sizeof queries / sizeof queries[0]; q++) {
        struct store_hit *hits;
        size_t n;
        struct kk_error err = {{0}};
        if (store_search(s, queries[q], "[", "]", 10, &hits, &n, &err))
            fail_msg("query '%s' failed: %s", queries[q], err.msg);
        store_hits_free(hits, n);
    }
    /* Operators are words to find, not operators. */
    struct store_hit *hits;
    size_t n;
    assert_int_equal(store_search(s, "AND goodbye", "", "", 10, &hits, &n,
                                  NULL), 0);
    assert_int_equal(n, 1);
    store_hits_free(hits, n);
    assert_int_equal(store_search(s, "\"hello\"", "", "", 10, &hits, &n,
                                  NULL), 0);
    assert_int_equal(n, 1);
    store_hits_free(hits, n);
    assert_int_equal(store_search(s, "NOT zebra", "", "", 10, &hits, &n,
                                  NULL), 0);
    assert_int_equal(n, 0);   /* "zebra" must occur: NOT is just a word */
    store_hits_free(hits, n);
    assert_int_equal(store_search(s, "  \t ", "", "", 10, &hits, &n, NULL),
                     0);
    assert_int_equal(n, 0);
    assert_null(hits);
    store_close(s);
}

/* ---- files the store must refuse -------------------------------------- */

static void test_garbage_file_is_refused_and_left_untouched(void **state)
{
    struct fixture *fx = *state;
    char garbage[8192];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (char)(i * 131 + 7);
    write_file(fx->db, garbage, sizeof garbage);
    struct store *s = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(store_open(fx->db, NULL, &s, &err), -1);
    assert_null(s);
    assert_non_null(strstr(err.msg, fx->db));
    assert_non_null(strstr(err.msg, "damaged or is not a kakeya database"));
    assert_file_equals(fx->db, garbage, sizeof garbage);
}

static void test_damaged_database_gives_messages_not_crashes(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv = make_rich_conversation(s);
    store_close(s);
    size_t len;
    char *file = testutil_read_file(fx->db, &len);
    assert_true(len > 8192);
    /* Page 1 keeps its header; every later page is overwritten. */
    for (size_t i = 4096; i < len; i++)
        file[i] = (char)0xA5;
    write_file(fx->db, file, len);
    struct kk_error err = {{0}};
    if (store_open(fx->db, NULL, &s, &err) == 0) {
        struct store_message *m;
        size_t n;
        assert_int_equal(store_list_messages(s, conv, &m, &n, &err), -1);
        store_close(s);
    }
    assert_non_null(strstr(err.msg, "damaged"));
    assert_file_equals(fx->db, file, len);
    /* Page 1 damaged past its header: the schema cannot be read. */
    memset(file + 100, 0x5A, 4096 - 100);
    write_file(fx->db, file, len);
    assert_int_equal(store_open(fx->db, NULL, &s, &err), -1);
    assert_non_null(strstr(err.msg, "damaged"));
    assert_file_equals(fx->db, file, len);
    free(file);
}

/* Runs fn(arg) in a child that cannot write what root made read-only: as
 * root the child drops to nobody, since root ignores permissions. Returns
 * the child's exit status. */
static int run_unprivileged(int (*fn)(const char *), const char *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(90);
        _exit(fn(arg));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Exit status 0 when opening path fails with a message containing
 * "read-only" or "cannot open"; prints the message for the log. */
static int open_expecting_refusal(const char *path)
{
    struct store *s = NULL;
    struct kk_error err = {{0}};
    if (store_open(path, NULL, &s, &err) == 0) {
        store_close(s);
        fprintf(stderr, "opened %s although it is read-only\n", path);
        return 1;
    }
    fprintf(stderr, "  (expected) %s\n", err.msg);
    return strstr(err.msg, "read-only") || strstr(err.msg, "cannot open")
               ? 0 : 2;
}

static void test_read_only_file_and_folder_are_refused_clearly(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    make_rich_conversation(s);
    store_close(s);
    size_t len;
    char *before = testutil_read_file(fx->db, &len);
    /* A read-only file in a read-only folder. */
    assert_int_equal(chmod(fx->db, 0444), 0);
    assert_int_equal(chmod(fx->dir, 0555), 0);
    assert_int_equal(run_unprivileged(open_expecting_refusal, fx->db), 0);
    /* A new database in a read-only folder. */
    char fresh[600];
    snprintf(fresh, sizeof fresh, "%s/new.db", fx->dir);
    assert_int_equal(run_unprivileged(open_expecting_refusal, fresh), 0);
    assert_int_equal(chmod(fx->dir, 0700), 0);
    assert_int_equal(chmod(fx->db, 0644), 0);
    assert_file_equals(fx->db, before, len);
    free(before);
    s = open_ok(fx->db);
    struct store_conversation *list;
    size_t n;
    assert_int_equal(store_list_conversations(s, &list, &n, NULL), 0);
    assert_int_equal(n, 1);
    store_conversations_free(list, n);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_schema_equals_data_schema_sql),
        cmocka_unit_test(
            test_default_path_follows_xdg_data_home_then_home),
        FIXTURE_TEST(
            test_open_creates_folders_and_a_wal_database_at_version_2),
        FIXTURE_TEST(test_open_of_an_empty_file_creates_the_schema),
        FIXTURE_TEST(test_reopening_keeps_data_and_runs_no_migration),
        FIXTURE_TEST(test_v1_database_migrates_keeping_its_messages),
        FIXTURE_TEST(test_migrated_v1_schema_matches_a_new_database),
        FIXTURE_TEST(test_newer_schema_version_is_refused_untouched),
        FIXTURE_TEST(test_foreign_sqlite_database_is_refused),
        FIXTURE_TEST(test_messages_keep_role_content_tokens_and_stats),
        FIXTURE_TEST(test_answer_stays_partial_until_finished),
        FIXTURE_TEST(test_list_orders_by_last_update_and_counts_messages),
        FIXTURE_TEST(
            test_delete_removes_messages_documents_checkpoints_and_index),
        FIXTURE_TEST(test_documents_keep_content_path_and_hash),
        FIXTURE_TEST(test_checkpoint_round_trips_ids_and_kv),
        FIXTURE_TEST(
            test_checkpoint_newest_match_wins_and_others_are_reported),
        FIXTURE_TEST(test_checkpoint_with_damaged_blob_is_reported_corrupt),
        FIXTURE_TEST(test_prune_deletes_least_recently_used_first),
        FIXTURE_TEST(test_export_import_round_trip_is_exact),
        FIXTURE_TEST(test_markdown_export_shows_messages_stats_and_document),
        FIXTURE_TEST(test_import_rejects_malformed_files_with_clear_messages),
        FIXTURE_TEST(test_search_finds_words_with_a_marked_snippet),
        FIXTURE_TEST(test_search_treats_fts_syntax_as_plain_text),
        FIXTURE_TEST(test_garbage_file_is_refused_and_left_untouched),
        FIXTURE_TEST(test_damaged_database_gives_messages_not_crashes),
        FIXTURE_TEST(test_read_only_file_and_folder_are_refused_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
