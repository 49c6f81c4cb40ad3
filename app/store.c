/* store.c — opening and closing the store: where the file lives, creating
 * its folder, the connection settings (WAL, foreign keys, busy timeout)
 * and the checks that refuse a file we must not write. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_internal.h"

int store_default_path(char *buf, size_t size, struct kk_error *err)
{
    const char *xdg = getenv("XDG_DATA_HOME");
    int n;
    /* The XDG spec says a relative XDG_DATA_HOME is to be ignored. */
    if (xdg && xdg[0] == '/') {
        n = snprintf(buf, size, "%s/kakeya/kakeya.db", xdg);
    } else {
        const char *home = getenv("HOME");
        if (!home || home[0] != '/') {
            struct passwd *pw = getpwuid(getuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home)
            return kk_fail(err, "cannot find a folder for the database: "
                           "neither XDG_DATA_HOME nor HOME is set; pass "
                           "--db FILE");
        n = snprintf(buf, size, "%s/.local/share/kakeya/kakeya.db", home);
    }
    if (n < 0 || (size_t)n >= size)
        return kk_fail(err, "the database path is too long; pass --db FILE");
    return 0;
}

/* mkdir -p of the folders above path. Private (0700): conversations are
 * nobody else's business. */
static int make_parents(const char *path, struct kk_error *err)
{
    char *dir = strdup(path);
    if (!dir)
        return kk_fail(err, "%s: out of memory", path);
    int rc = 0;
    for (char *p = dir + 1; *p && rc == 0; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        struct stat sb;
        if (stat(dir, &sb) != 0 && mkdir(dir, 0700) != 0 && errno != EEXIST)
            rc = kk_fail(err, "%s: cannot create the folder %s: %s", path,
                         dir, strerror(errno));
        *p = '/';
    }
    free(dir);
    return rc;
}

/* A single-value query such as "PRAGMA user_version" into *value. */
static int query_int(struct store *s, const char *sql, const char *what,
                     int64_t *value, struct kk_error *err)
{
    sqlite3_stmt *st;
    if (sql_prepare(s, &st, what, err, sql, NULL))
        return -1;
    int row = sql_step(s, st, what, err);
    *value = row == 1 ? sqlite3_column_int64(st, 0) : 0;
    (void)sqlite3_finalize(st);   /* read-only query: step said it all */
    return row < 0 ? -1 : 0;
}

/* Reads the schema before anything writes, so a damaged or foreign file
 * is refused while still untouched. */
static int check_readable(struct store *s, struct kk_error *err)
{
    int64_t n;
    return query_int(s, "SELECT count(*) FROM sqlite_master",
                     "reading the database", &n, err);
}

static int use_wal(struct store *s, struct kk_error *err)
{
    sqlite3_stmt *st;
    const char *what = "switching to WAL mode";
    if (sql_prepare(s, &st, what, err, "PRAGMA journal_mode = WAL", NULL))
        return -1;
    int row = sql_step(s, st, what, err);
    const unsigned char *mode = row == 1 ? sqlite3_column_text(st, 0) : NULL;
    int rc = row < 0 ? -1 : 0;
    if (row >= 0 && (!mode || strcmp((const char *)mode, "wal") != 0))
        rc = kk_fail(err, "%s: %s: the database stayed in '%s' mode (a "
                     "file system without shared memory?)", s->path, what,
                     mode ? (const char *)mode : "?");
    (void)sqlite3_finalize(st);   /* step's result already handled */
    return rc;
}

static int configure(struct store *s, struct kk_error *err)
{
    int rc = sqlite3_busy_timeout(s->db, s->busy_timeout_ms);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "setting the busy timeout", err);
    rc = sqlite3_extended_result_codes(s->db, 1);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "enabling extended result codes", err);
    if (check_readable(s, err))
        return -1;
    if (sqlite3_db_readonly(s->db, "main") == 1)
        return kk_fail(err, "%s: the database is read-only; kakeya needs to "
                       "write it - check the permissions of the file and its "
                       "folder", s->path);
    /* WAL lets a second process read while one writes; synchronous=FULL
     * makes every commit durable even across a power cut (NORMAL would be
     * enough for a killed process, and a commit a second costs little). */
    if (use_wal(s, err) ||
        sql_exec(s, "PRAGMA foreign_keys = ON", "enabling foreign keys", err)
        || sql_exec(s, "PRAGMA synchronous = FULL", "setting synchronous",
                    err)
        /* A checkpoint blob can grow the WAL by hundreds of MiB; give the
         * space back once it has been copied into the database. */
        || sql_exec(s, "PRAGMA journal_size_limit = 67108864",
                    "limiting the journal size", err))
        return -1;
    return 0;
}

int store_open(const char *path, const struct store_options *opts,
               struct store **out, struct kk_error *err)
{
    *out = NULL;
    if (!path || !*path)
        return kk_fail(err, "no database path given");
    if (make_parents(path, err))
        return -1;
    struct store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return kk_fail(err, "%s: out of memory", path);
    }
    s->busy_timeout_ms = opts && opts->busy_timeout_ms > 0
                             ? opts->busy_timeout_ms
                             : STORE_DEFAULT_BUSY_TIMEOUT_MS;
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        sql_fail(s, rc, "opening the database", err);
        store_close(s);
        return -1;
    }
    if (configure(s, err) || store_migrate(s, err)) {
        store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    /* sqlite3_close_v2 cannot fail with every statement finalized (the
     * store never keeps one past a call); a busy result would only mean a
     * leaked statement, which ASan's tests would show. */
    if (s->db)
        (void)sqlite3_close_v2(s->db);
    free(s->path);
    free(s);
}

const char *store_path(const struct store *s)
{
    return s->path;
}
