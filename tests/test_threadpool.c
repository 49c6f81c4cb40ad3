/* test_threadpool.c — every task runs exactly once, on a valid thread,
 * across many back-to-back jobs (the forward pass's pattern). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "threadpool.h"

struct job {
    atomic_int hits[1000];
    int n_threads;
    atomic_int bad_thread;
};

static void count_task(void *ctx, int i, int thread)
{
    struct job *j = ctx;
    atomic_fetch_add(&j->hits[i], 1);
    if (thread < 0 || thread >= j->n_threads)
        atomic_store(&j->bad_thread, 1);
}

static void test_every_task_runs_once_for_many_jobs(void **state)
{
    for (int threads = 1; threads <= 4; threads++) {
        struct pool *p;
        struct kk_error err;
        assert_int_equal(pool_new(threads, &p, &err), 0);
        assert_int_equal(pool_threads(p), threads);
        static struct job j;
        for (int round = 0; round < 500; round++) {
            int n = 1 + (round * 37) % 1000;
            memset(&j, 0, sizeof j);
            j.n_threads = threads;
            pool_run(p, n, count_task, &j);
            for (int i = 0; i < 1000; i++)
                assert_int_equal(atomic_load(&j.hits[i]), i < n ? 1 : 0);
            assert_int_equal(atomic_load(&j.bad_thread), 0);
        }
        pool_free(p);
    }
}

static void test_zero_tasks_is_a_no_op(void **state)
{
    struct pool *p;
    assert_int_equal(pool_new(2, &p, NULL), 0);
    pool_run(p, 0, count_task, NULL);
    pool_free(p);
    pool_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_runs_once_for_many_jobs),
        cmocka_unit_test(test_zero_tasks_is_a_no_op),
    };
    return cmocka_run_group_tests_name("threadpool", tests, NULL, NULL);
}
