/* merge_queue.c — see merge_queue.h. */
#include "merge_queue.h"

#include <stdbool.h>
#include <stdlib.h>

static bool comes_first(const struct merge *a, const struct merge *b)
{
    return a->priority < b->priority ||
           (a->priority == b->priority && a->left < b->left);
}

int merge_queue_push(struct merge_queue *q, struct merge m)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        struct merge *v = realloc(q->v, cap * sizeof *v);
        if (!v)
            return -1;
        q->v = v;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0 && comes_first(&m, &q->v[(i - 1) / 2])) {
        q->v[i] = q->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->v[i] = m;
    return 0;
}

struct merge merge_queue_pop(struct merge_queue *q)
{
    struct merge top = q->v[0], last = q->v[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && comes_first(&q->v[c + 1], &q->v[c]))
            c++;
        if (!comes_first(&q->v[c], &last))
            break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n)
        q->v[i] = last;
    return top;
}

void merge_queue_free(struct merge_queue *q)
{
    free(q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}
