/* store_testutil.h — what the store's tests share: a fresh temporary
 * folder per test (the cmocka fixture), and raw SQLite access to look at
 * or tamper with the database behind the store's back. Header-only, so
 * the test Makefile rule needs nothing new; include after cmocka.h. */
#ifndef KK_STORE_TESTUTIL_H
#define KK_STORE_TESTUTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store.h"
#include "testutil.h"

struct fixture {
    char dir[512];
    char db[600];   /* dir/kakeya.db, not yet created */
};

static inline int fixture_setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/kakeya-store-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->db, sizeof fx->db, "%s/kakeya.db", fx->dir);
    *state = fx;
    return 0;
}

static inline int fixture_remove_one(const char *path, const struct stat *sb,
                                     int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline int fixture_teardown(void **state)
{
    struct fixture *fx = *state;
    /* A test may have left the folder read-only. */
    chmod(fx->dir, 0700);
    nftw(fx->dir, fixture_remove_one, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

#define FIXTURE_TEST(fn) \
    cmocka_unit_test_setup_teardown(fn, fixture_setup, fixture_teardown)

/* Opens the store or fails the test with the store's message. */
static inline struct store *open_ok(const char *path)
{
    struct store *s = NULL;
    struct kk_error err = {{0}};
    if (store_open(path, NULL, &s, &err))
        fail_msg("store_open(%s): %s", path, err.msg);
    return s;
}

static inline sqlite3 *raw_db(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        fail_msg("sqlite3_open(%s): %s", path, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_busy_timeout(db, 2000), SQLITE_OK);
    return db;
}

static inline void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = raw_db(path);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg);
    sqlite3_close(db);
}

/* The first column of the first row as text (malloc'd), NULL for none. */
static inline char *raw_text(const char *path, const char *sql)
{
    sqlite3 *db = raw_db(path);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    char *out = NULL;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        out = strdup((const char *)sqlite3_column_text(st, 0));
    else if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

static inline int64_t raw_int(const char *path, const char *sql)
{
    char *text = raw_text(path, sql);
    int64_t v = text ? strtoll(text, NULL, 10) : 0;
    free(text);
    return v;
}

static inline void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static inline void assert_file_equals(const char *path, const void *data,
                                      size_t len)
{
    size_t now_len;
    char *now = testutil_read_file(path, &now_len);
    assert_non_null(now);
    assert_int_equal(now_len, len);
    assert_memory_equal(now, data, len);
    free(now);
}

#endif
