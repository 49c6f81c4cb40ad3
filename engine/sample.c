/* sample.c — choosing the next token from logits (see sample.h, kk_sample).
 *
 * Greedy is argmax with ties to the lowest id, as llama.cpp's greedy
 * sampler. Otherwise: softmax at the temperature, keep the smallest set of
 * most likely tokens whose mass reaches top_p, draw from it. The generator
 * is xorshift64* seeded through splitmix64, so a seed reproduces a run. */
#include "sample.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

uint64_t kk_rng_seed(uint64_t seed)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z ? z : 1;
}

double sample_uniform(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return (double)((x * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

/* The first index of the largest value, as a scan that keeps the first of
 * equal values. NaNs never compare greater, so an array with one is
 * scanned one by one; otherwise the maximum comes from 8-lane vectors and
 * then its first position (greedy decoding calls this once per committed
 * token and once per draft token: over a whole vocabulary the scalar scan
 * cost as much as a draft model's attention). */
static int32_t argmax_scan(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int32_t sample_argmax(const float *logits, int32_t n)
{
    __m256 m[4], bad = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++)
        m[k] = _mm256_set1_ps(-INFINITY);
    int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {
            __m256 x = _mm256_loadu_ps(logits + i + 8 * k);
            m[k] = _mm256_max_ps(m[k], x);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        }
    }
    if (_mm256_movemask_ps(bad))
        return argmax_scan(logits, n);
    __m256 v = _mm256_max_ps(_mm256_max_ps(m[0], m[1]),
                             _mm256_max_ps(m[2], m[3]));
    float lanes[8], max = -INFINITY;
    _mm256_storeu_ps(lanes, v);
    for (int k = 0; k < 8; k++)
        max = lanes[k] > max ? lanes[k] : max;
    for (int32_t t = i; t < n; t++) {
        if (logits[t] != logits[t])
            return argmax_scan(logits, n);
        max = logits[t] > max ? logits[t] : max;
    }
    const __m256 mv = _mm256_set1_ps(max);
    for (int32_t j = 0; j + 8 <= n; j += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + j),
                                                   mv, _CMP_EQ_OQ));
        if (hit)
            return j + __builtin_ctz((unsigned)hit);
    }
    for (int32_t t = n / 8 * 8; t < n; t++)
        if (logits[t] == max)
            return t;
    return 0;
}

/* ---- the top-p nucleus, without sorting the vocabulary ----
 *
 * The nucleus is a prefix of the vocabulary sorted by probability (ties
 * by id): the first k tokens whose mass, added in that order, reaches
 * top_p. Sorting all of it cost 15 ms a token for a 128k vocabulary (0.7
 * for the default model's 8k), many GPU decode steps. Instead every
 * token goes into a bucket of probability (one counting pass), buckets in
 * order of falling probability, and the walk sorts a bucket only when it
 * gets there: it sees the tokens in the full sort's order and adds the
 * same numbers in the same order, so it stops at the same k, to the bit. */

/* Bucket 0 holds probabilities of 1 and more (the most likely token's;
 * NaN's bits land here too), then 128 buckets an octave down to 2^-32
 * (a nucleus rarely reaches past a few octaves, and 128 an octave keep a
 * flat distribution's buckets small); the last holds everything smaller,
 * zero among it. A larger non-negative float has larger bits, so a larger
 * probability is never in a later bucket. */
enum { NUCLEUS_BUCKETS = 4096, BUCKET_SHIFT = 16 };

static int prob_bucket(float p)
{
    const uint32_t one = 0x3f800000u;
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    if (bits >= one)
        return 0;
    const uint32_t b = (one - bits) >> BUCKET_SHIFT;
    return b < NUCLEUS_BUCKETS ? (int)b : NUCLEUS_BUCKETS - 1;
}

/* order = every id, bucket by bucket, by id within a bucket; bucket b
 * takes order[start[b] .. start[b + 1]). */
static void order_by_bucket(const float *probs, int32_t n, int32_t *order,
                            int32_t start[NUCLEUS_BUCKETS + 1])
{
    int32_t next[NUCLEUS_BUCKETS];
    memset(start, 0, (NUCLEUS_BUCKETS + 1) * sizeof *start);
    for (int32_t i = 0; i < n; i++)
        start[prob_bucket(probs[i]) + 1]++;
    for (int b = 0; b < NUCLEUS_BUCKETS; b++)
        start[b + 1] += start[b];
    memcpy(next, start, sizeof next);
    for (int32_t i = 0; i < n; i++)
        order[next[prob_bucket(probs[i])]++] = i;
}

/* Whether token a comes before token b in the nucleus' order: more
 * likely, or as likely and a lower id. */
static bool goes_before(const float *probs, int32_t a, int32_t b)
{
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
}

/* Shell sort gaps: Ciura's, then x2.25. */
static const int32_t shell_gaps[] = {
    1, 4, 10, 23, 57, 132, 301, 701, 1577, 3548, 7983, 17961, 40412, 90927,
    204585, 460316, 1035711, 2330349, 5243285, 11797391, 26544129, 59724290,
    134379652, 302354217, 680296988};
enum { SHELL_GAPS = sizeof shell_gaps / sizeof shell_gaps[0] };

/* A bucket of up to SMALL_BUCKET ids is sorted as keys on the stack, each
 * probability loaded once: ~(probability bits) above the id, so ascending
 * keys are the nucleus' order (the bits of non-negative floats order as
 * their values). Up to INSERTION_MAX keys, the shell sort's last pass
 * alone (an insertion sort) mispredicts less: a 128k vocabulary's nucleus
 * of 23k tokens, ~70 a bucket, took 1.0 ms against 1.3. */
enum { SMALL_BUCKET = 1024, INSERTION_MAX = 128 };

static void sort_keys(uint64_t *keys, int32_t n)
{
    for (int g = n <= INSERTION_MAX ? 0 : SHELL_GAPS - 1; g >= 0; g--) {
        const int32_t gap = shell_gaps[g];
        for (int32_t i = gap; i < n; i++) {
            const uint64_t v = keys[i];
            int32_t j = i;
            for (; j >= gap && v < keys[j - gap]; j -= gap)
                keys[j] = keys[j - gap];
            keys[j] = v;
        }
    }
}

/* A larger bucket (many tokens within 1% of one probability: a flat
 * distribution) is sorted in place by comparing through probs. */
static void sort_ids(int32_t *ids, int32_t n, const float *probs)
{
    for (int g = SHELL_GAPS - 1; g >= 0; g--) {
        const int32_t gap = shell_gaps[g];
        for (int32_t i = gap; i < n; i++) {
            const int32_t v = ids[i];
            int32_t j = i;
            for (; j >= gap && goes_before(probs, v, ids[j - gap]); j -= gap)
                ids[j] = ids[j - gap];
            ids[j] = v;
        }
    }
}

/* Sorts a bucket's n ids into the nucleus' order. */
static void sort_bucket(int32_t *ids, int32_t n, const float *probs)
{
    if (n > SMALL_BUCKET) {
        sort_ids(ids, n, probs);
        return;
    }
    uint64_t keys[SMALL_BUCKET];
    for (int32_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &probs[ids[i]], sizeof bits);
        keys[i] = (uint64_t)~bits << 32 | (uint32_t)ids[i];
    }
    sort_keys(keys, n);
    for (int32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(uint32_t)keys[i];
}

/* Keeps the smallest set of most likely tokens whose share of sum reaches
 * top_p — at least one, so that top_p 0 means the most likely token — and
 * zeroes the rest of probs; returns the kept mass. order: scratch for n. */
static double nucleus_keep(float top_p, float *probs, int32_t n, double sum,
                           int32_t *order)
{
    int32_t start[NUCLEUS_BUCKETS + 1];
    order_by_bucket(probs, n, order, start);
    double mass = 0.0, keep = 0.0;
    int32_t k = 0, sorted = 0;
    int b = 0;
    while (k < n && (k == 0 || mass < top_p)) {
        while (k == sorted) {   /* the walk reached the next bucket */
            sorted = start[++b];
            sort_bucket(order + k, sorted - k, probs);
        }
        mass += probs[order[k]] / sum;
        keep += probs[order[k++]];
    }
    for (int32_t i = k; i < n; i++)
        probs[order[i]] = 0.0f;
    return keep;
}

void sample_probs(const struct kk_sampling *p, const float *logits, int32_t n,
                  float *probs, int32_t *order)
{
    float max = logits[sample_argmax(logits, n)];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        probs[i] = expf((logits[i] - max) / p->temperature);
        sum += probs[i];
    }
    if (p->top_p < 1.0f)
        sum = nucleus_keep(p->top_p, probs, n, sum, order);
    float inv = (float)(1.0 / sum);
    for (int32_t i = 0; i < n; i++)
        probs[i] *= inv;
}

int32_t sample_from(const float *probs, int32_t n, uint64_t *rng)
{
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += probs[i];
    double r = sample_uniform(rng) * total;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (probs[i] <= 0.0f)
            continue;
        last = i;
        r -= probs[i];
        if (r < 0.0)
            return i;
    }
    return last; /* rounding left a sliver: the last possible token */
}

/* scratch holds 2 * n_vocab floats: probabilities, then an order array. */
int32_t kk_sample(const struct kk_sampling *p, uint64_t *rng,
                  const float *logits, int32_t n_vocab, float *scratch)
{
    if (p->temperature <= 0.0f)
        return sample_argmax(logits, n_vocab);
    sample_probs(p, logits, n_vocab, scratch, (int32_t *)(scratch + n_vocab));
    return sample_from(scratch, n_vocab, rng);
}
