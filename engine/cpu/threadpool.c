/* threadpool.c — see threadpool.h.
 *
 * The current job is one slot (task, ctx, n_tasks) plus a 64-bit word
 * `claim` = generation << 32 | next task index. A thread claims task i of
 * generation g by a compare-and-swap from (g, i) to (g, i + 1); only then
 * does it read the slot. That is safe because the caller publishes the next
 * job only after every task of the current one has completed, and a claim
 * can only succeed while its generation is current. Before rewriting the
 * slot the caller also closes the finished job (index CLOSED): a worker
 * still holding an old claim word would otherwise compare its index with
 * the new job's task count and could win a claim meant for the new job. */
#include "threadpool.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "error.h"

/* How long a worker spins for the next job before sleeping (pause
 * instructions, ~40 ns each): the forward pass issues jobs microseconds
 * apart; between tokens the gap can be long. */
enum { SPIN_ROUNDS = 4096 };

struct worker {
    struct pool *pool;
    pthread_t thread;
    int index;
};

struct pool {
    int n_threads;
    struct worker *workers;      /* index 0 is the caller */
    pool_task_fn task;           /* the current job */
    void *ctx;
    int n_tasks;
    _Atomic uint64_t claim;      /* generation << 32 | next task */
    atomic_int completed;        /* tasks of the current job done */
    atomic_int sleepers;
    atomic_bool is_stopping;
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

static uint32_t generation_of(uint64_t claim)
{
    return (uint32_t)(claim >> 32);
}

/* The task index of a finished job: no claim can follow it. */
#define CLOSED UINT32_MAX

/* Claims and runs tasks of generation gen until none is left. */
static void run_tasks(struct pool *p, uint32_t gen, int thread)
{
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    while (generation_of(c) == gen) {
        uint32_t i = (uint32_t)c;
        if (i == CLOSED || i >= (uint32_t)p->n_tasks)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1,
                                                   memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        p->task(p->ctx, (int)i, thread);
        atomic_fetch_add_explicit(&p->completed, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

/* Waits until the generation differs from seen (or the pool stops). */
static uint32_t wait_for_job(struct pool *p, uint32_t seen)
{
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        uint32_t g = generation_of(atomic_load_explicit(&p->claim,
                                                        memory_order_acquire));
        if (g != seen || atomic_load(&p->is_stopping))
            return g;
        _mm_pause();
    }
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->sleepers, 1);
    uint32_t g;
    while ((g = generation_of(atomic_load(&p->claim))) == seen &&
           !atomic_load(&p->is_stopping))
        pthread_cond_wait(&p->wake, &p->lock);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->lock);
    return g;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->is_stopping))
            return NULL;
        run_tasks(p, seen, w->index);
    }
}

int pool_new(int n_threads, struct pool **out, struct kk_error *err)
{
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 256)
        return kk_fail(err, "%d threads requested; at most 256 are supported",
                       n_threads);
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return kk_fail(err, "out of memory");
    p->n_threads = 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        pool_free(p);
        return kk_fail(err, "out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main,
                           &p->workers[i])) {
            pool_free(p);
            return kk_fail(err, "could not start worker thread %d of %d", i,
                           n_threads);
        }
        p->n_threads = i + 1; /* pool_free joins only those started */
    }
    *out = p;
    return 0;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->is_stopping, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n_threads && p->workers; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p);
}

int pool_threads(const struct pool *p)
{
    return p->n_threads;
}

void pool_run(struct pool *p, int n_tasks, pool_task_fn task, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++)
            task(ctx, i, 0);
        return;
    }
    uint32_t gen = generation_of(atomic_load(&p->claim));
    atomic_store(&p->claim, (uint64_t)gen << 32 | CLOSED);
    gen++;
    p->task = task;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->completed, 0, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint64_t)gen << 32,
                          memory_order_release);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    run_tasks(p, gen, 0);
    while (atomic_load_explicit(&p->completed, memory_order_acquire) < n_tasks)
        _mm_pause();
}
