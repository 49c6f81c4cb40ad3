/* test_store_crash.c — the store with more than one process: a writer
 * killed with SIGKILL in the middle of streaming an answer, two processes
 * writing one database, and a database locked by someone else.
 *
 * Children talk to the parent through pipes and leave with _exit (no
 * cmocka, no atexit handlers in the child). No SQLite connection crosses a
 * fork: each process opens its own. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store.h"
#include "store_testutil.h"
#include "testutil.h"

/* What the streaming child reports after each commit. */
struct progress {
    int64_t conversation, user_message, answer;
    int64_t n_words;   /* words of the answer committed so far */
};

static bool write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads exactly len bytes; false at end of file. */
static bool read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* The child of the crash test: the controller's write discipline, with an
 * update per word instead of per second so the kill lands mid-stream. */
static int stream_forever(const char *path, int fd)
{
    struct store *s;
    struct kk_error err = {{0}};
    struct progress p = {0};
    if (store_open(path, NULL, &s, &err) ||
        store_create_conversation(s, "streaming", NULL, "t.gguf", NULL,
                                  &p.conversation, &err) ||
        store_add_message(s, p.conversation, STORE_ROLE_USER,
                          "tell me a long story", 5, NULL, &p.user_message,
                          &err) ||
        store_begin_answer(s, p.conversation, &p.answer, &err)) {
        fprintf(stderr, "child: %s\n", err.msg);
        return 1;
    }
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    if (!text)
        return 1;
    text[0] = '\0';
    struct store_stats st = {.tau = 1.0, .proposer = "none"};
    for (;;) {
        if (len + 32 >= cap)
            len = 0;   /* never reached in the test's time; stays bounded */
        len += (size_t)snprintf(text + len, cap - len, "w%lld ",
                                (long long)p.n_words);
        st.tok_per_s = (double)p.n_words;
        if (store_update_answer(s, p.answer, text, (int)p.n_words + 1, &st,
                                &err)) {
            fprintf(stderr, "child: %s\n", err.msg);
            return 1;
        }
        p.n_words++;
        if (!write_all(fd, &p, sizeof p))
            return 1;
    }
}

static void test_kill_9_mid_stream_keeps_every_committed_message(
    void **state)
{
    struct fixture *fx = *state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        _exit(stream_forever(fx->db, fds[1]));
    }
    close(fds[1]);
    struct progress p = {0}, last = {0};
    while (read_all(fds[0], &p, sizeof p)) {
        last = p;
        if (p.n_words >= 40)
            break;
    }
    assert_int_equal(kill(pid, SIGKILL), 0);
    /* Reports written before the kill landed are still in the pipe. */
    while (read_all(fds[0], &p, sizeof p))
        last = p;
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_true(last.n_words >= 40);

    char *check = raw_text(fx->db, "PRAGMA integrity_check");
    assert_string_equal(check, "ok");
    free(check);
    struct store *s = open_ok(fx->db);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s, last.conversation, &m, &n, NULL),
                     0);
    assert_int_equal(n, 2);
    assert_int_equal(m[0].id, last.user_message);
    assert_string_equal(m[0].content, "tell me a long story");
    assert_int_equal(m[1].id, last.answer);
    assert_true(m[1].is_partial);
    /* At least every word the child saw committed, and whole words only
     * (one more update may have committed before the report was sent). */
    char expected[64];
    snprintf(expected, sizeof expected, "w%lld ",
             (long long)last.n_words - 1);
    assert_non_null(strstr(m[1].content, expected));
    size_t words = 0;
    for (const char *c = m[1].content; *c; c++)
        words += *c == ' ';
    assert_true(words == (size_t)last.n_words ||
                words == (size_t)last.n_words + 1);
    assert_true(m[1].has_stats);
    store_messages_free(m, n);
    /* The interrupted answer can still be finished. */
    assert_int_equal(store_finish_answer(s, last.answer, "the end", 2, NULL,
                                         NULL), 0);
    store_close(s);
}

/* Adds n user messages "<tag> i" to conversation conv. */
static int add_messages(const char *path, int64_t conv, const char *tag,
                        int n)
{
    struct store *s;
    struct kk_error err = {{0}};
    if (store_open(path, NULL, &s, &err)) {
        fprintf(stderr, "%s: %s\n", tag, err.msg);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char text[64];
        snprintf(text, sizeof text, "%s %d", tag, i);
        if (store_add_message(s, conv, STORE_ROLE_USER, text, 2, NULL, NULL,
                              &err)) {
            fprintf(stderr, "%s: %s\n", tag, err.msg);
            store_close(s);
            return 1;
        }
    }
    store_close(s);
    return 0;
}

static void test_two_processes_write_one_database(void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv;
    assert_int_equal(store_create_conversation(s, "shared", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    store_close(s);   /* no connection crosses the fork */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(add_messages(fx->db, conv, "child", 40));
    assert_int_equal(add_messages(fx->db, conv, "parent", 40), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s = open_ok(fx->db);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_int_equal(n, 80);
    int from_child = 0;
    for (size_t i = 0; i < n; i++)
        from_child += strncmp(m[i].content, "child ", 6) == 0;
    assert_int_equal(from_child, 40);
    store_messages_free(m, n);
    store_close(s);
}

/* The locking child: opens path with plain SQLite, takes the lock that
 * `how` describes, says so on `ready`, and holds it until `release`
 * closes. */
static int hold_lock(const char *path, const char *how, int ready,
                     int release)
{
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db, how, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "locker: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    char c = 1;
    if (!write_all(ready, &c, 1))
        return 1;
    while (read(release, &c, 1) > 0)
        ;
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return 0;
}

struct locker {
    pid_t pid;
    int release;   /* close to let the child go */
};

static struct locker start_locker(const char *path, const char *how)
{
    int ready[2], release[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(release[1]);
        _exit(hold_lock(path, how, ready[1], release[0]));
    }
    close(ready[1]);
    close(release[0]);
    char c;
    assert_true(read_all(ready[0], &c, 1));
    close(ready[0]);
    return (struct locker){pid, release[1]};
}

static void stop_locker(struct locker l)
{
    close(l.release);
    int status;
    assert_int_equal(waitpid(l.pid, &status, 0), l.pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_write_while_another_process_writes_fails_after_timeout(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    int64_t conv;
    assert_int_equal(store_create_conversation(s, "c", NULL, NULL, NULL,
                                               &conv, NULL), 0);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER, "before", 1,
                                       NULL, NULL, NULL), 0);
    store_close(s);
    struct locker l = start_locker(
        fx->db, "BEGIN IMMEDIATE; INSERT INTO conversations (title, "
                "created_at, updated_at) VALUES ('other', 0, 0);");
    /* WAL: reading goes on while the other process holds the write lock. */
    struct store_options opts = {.busy_timeout_ms = 150};
    struct kk_error err = {{0}};
    assert_int_equal(store_open(fx->db, &opts, &s, &err), 0);
    struct store_message *m;
    size_t n;
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_int_equal(n, 1);
    store_messages_free(m, n);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER, "during", 1,
                                       NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "locked by another process"));
    assert_non_null(strstr(err.msg, "150 ms"));
    stop_locker(l);
    assert_int_equal(store_add_message(s, conv, STORE_ROLE_USER, "after", 1,
                                       NULL, NULL, NULL), 0);
    assert_int_equal(store_list_messages(s, conv, &m, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].content, "before");
    assert_string_equal(m[1].content, "after");
    store_messages_free(m, n);
    store_close(s);
}

static void test_open_fails_clearly_while_another_process_locks_all(
    void **state)
{
    struct fixture *fx = *state;
    struct store *s = open_ok(fx->db);
    store_close(s);
    struct locker l = start_locker(
        fx->db, "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; "
                "INSERT INTO conversations (title, created_at, updated_at) "
                "VALUES ('other', 0, 0);");
    struct store_options opts = {.busy_timeout_ms = 100};
    struct kk_error err = {{0}};
    s = NULL;
    assert_int_equal(store_open(fx->db, &opts, &s, &err), -1);
    assert_null(s);
    assert_non_null(strstr(err.msg, "locked by another process"));
    stop_locker(l);
    s = open_ok(fx->db);
    store_close(s);
    char *check = raw_text(fx->db, "PRAGMA integrity_check");
    assert_string_equal(check, "ok");
    free(check);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        FIXTURE_TEST(test_kill_9_mid_stream_keeps_every_committed_message),
        FIXTURE_TEST(test_two_processes_write_one_database),
        FIXTURE_TEST(
            test_write_while_another_process_writes_fails_after_timeout),
        FIXTURE_TEST(test_open_fails_clearly_while_another_process_locks_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
