/* threadpool.h — a small pool of worker threads for the forward pass.
 *
 * pool_run() runs `n_tasks` independent tasks on the calling thread and
 * the workers and returns when all are done. A forward pass calls it a few
 * hundred times per token, so dispatch must cost microseconds: workers spin
 * for a short while after each job and only then sleep on a condition
 * variable. Tasks are claimed one at a time by whichever thread is free, so
 * a worker that is slow to wake never holds the caller up: the caller simply
 * does more of the tasks itself.
 *
 * One thread (the engine thread) owns a pool and calls pool_run(); it is not
 * reentrant. pool_free() joins the workers. */
#ifndef KK_THREADPOOL_H
#define KK_THREADPOOL_H

#include "kakeya_error.h"

struct pool;

/* task(ctx, i) for every i in [0, n_tasks); `thread` is 0..n_threads-1, for
 * per-thread scratch. */
typedef void (*pool_task_fn)(void *ctx, int i, int thread);

/* n_threads <= 0 means every online core. */
int pool_new(int n_threads, struct pool **out, struct kk_error *err);
void pool_free(struct pool *p);
int pool_threads(const struct pool *p);

void pool_run(struct pool *p, int n_tasks, pool_task_fn task, void *ctx);

#endif
