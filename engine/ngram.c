/* ngram.c — proposing from the context itself (ngram_propose).
 *
 * Answers about a document quote it; code repeats names. If the last k
 * tokens occurred before, what followed them then is a good guess now. The
 * scan walks back from the most recent earlier position and keeps the
 * longest match (ties: the most recent), capped at MAX_MATCH tokens so a
 * long repetition cannot make the scan quadratic. */
#include "proposer.h"

enum { MAX_MATCH = 8 };

/* Length of the common suffix of history[0..a] and history[0..b], a < b. */
static int suffix_match(const int32_t *h, int a, int b)
{
    int k = 0;
    while (k < MAX_MATCH && a - k >= 0 && h[a - k] == h[b - k])
        k++;
    return k;
}

int ngram_propose(const int32_t *history, int n_history, int min_match,
                  int max, struct proposal *out)
{
    out->n = 0;
    out->by = KK_PROPOSER_NGRAM;
    if (n_history < 2 || max <= 0)
        return 0;
    const int last = n_history - 1;
    int best_len = 0, best_end = -1;
    for (int a = last - 1; a >= 0; a--) {
        if (history[a] != history[last])
            continue;
        int len = suffix_match(history, a, last);
        if (len > best_len) {
            best_len = len;
            best_end = a;
            if (len == MAX_MATCH)
                break;
        }
    }
    if (best_len < min_match)
        return 0;
    for (int i = best_end + 1; i < n_history && out->n < max; i++)
        out->ids[out->n++] = history[i];
    return best_len;
}
