/* merge_queue.h — the pairs waiting to be merged, best first.
 *
 * Both tokenizers merge adjacent symbols greedily: BPE by the lowest merge
 * rank, SentencePiece by the highest score, ties to the leftmost pair. They
 * share this binary heap; each states its order as a priority where lower
 * comes first (BPE: the rank, SPM: minus the score). A queued pair records
 * the byte length of its two symbols, so the tokenizer can tell a stale
 * entry (a side was merged since) when it pops it. */
#ifndef KK_MERGE_QUEUE_H
#define KK_MERGE_QUEUE_H

#include <stddef.h>

struct merge {
    float priority;   /* lower is merged first */
    int left, right;  /* symbol indices */
    size_t size;      /* bytes of both symbols when queued */
};

struct merge_queue {
    struct merge *v;
    size_t n, cap;
};

/* 0, or -1 when out of memory. */
int merge_queue_push(struct merge_queue *q, struct merge m);
/* The best pair; q->n must be > 0. */
struct merge merge_queue_pop(struct merge_queue *q);
void merge_queue_free(struct merge_queue *q);

#endif
