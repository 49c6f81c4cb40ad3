/* sample.c — choosing the next token from logits (see sample.h, kk_sample).
 *
 * Greedy is argmax with ties to the lowest id, as llama.cpp's greedy
 * sampler. Otherwise: softmax at the temperature, keep the smallest set of
 * most likely tokens whose mass reaches top_p, draw from it. The generator
 * is xorshift64* seeded through splitmix64, so a seed reproduces a run. */
#include "sample.h"
#include "simd_math.h"

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

uint64_t sample_bits53(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return (x * 0x2545f4914f6cdd1dull) >> 11;
}

double sample_uniform(uint64_t *s)
{
    return (double)sample_bits53(s) * 0x1.0p-53;
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
 * token goes into a bucket of probability (a counting sort), buckets in
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

/* How far p is below 1, in units of its float's last bit: larger for a
 * smaller probability; 0 for 1 and more (and for NaN). */
static uint32_t prob_rank(float p)
{
    const uint32_t one = 0x3f800000u;
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    return bits >= one ? 0 : one - bits;
}

static int prob_bucket(float p)
{
    const uint32_t b = prob_rank(p) >> BUCKET_SHIFT;
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

/* Up to INSERTION_MAX ids are sorted by insertion alone (the common case:
 * a peaked distribution's nucleus is a few tokens a bucket). */
enum { INSERTION_MAX = 64 };

/* Sorts ids into that order by comparing through probs: a shell sort (in
 * place; Ciura's gaps, then x2.25) — the way for the first and the last
 * bucket, whose values are not spread over one bucket's low bits, and for
 * any bucket when memory for a radix pass is short. */
static void sort_ids(int32_t *ids, int32_t n, const float *probs)
{
    static const int32_t gaps[] = {
        1, 4, 10, 23, 57, 132, 301, 701, 1577, 3548, 7983, 17961, 40412,
        90927, 204585, 460316, 1035711, 2330349, 5243285, 11797391,
        26544129, 59724290, 134379652, 302354217, 680296988};
    int g = n <= INSERTION_MAX ? 0 : (int)(sizeof gaps / sizeof gaps[0]) - 1;
    for (; g >= 0; g--) {
        const int32_t gap = gaps[g];
        for (int32_t i = gap; i < n; i++) {
            const int32_t v = ids[i];
            int32_t j = i;
            for (; j >= gap && goes_before(probs, v, ids[j - gap]); j -= gap)
                ids[j] = ids[j - gap];
            ids[j] = v;
        }
    }
}

/* A middle bucket's probabilities differ only in the low BUCKET_SHIFT bits
 * of their rank; its ids arrive in id order. Two stable counting passes
 * over those bits, low byte then high, therefore leave the ids in the
 * nucleus' order. Each id travels with its bits (rank above id, in
 * `spare`, 2 n words), so the vocabulary's probabilities are read once a
 * token, not once a pass. (A random-weight 1B model's logits are flat: at
 * temperature 0.8, 65k of its 128k tokens in the nucleus, ~200 a bucket
 * near the middle. A draw took 15.4 ms with the whole vocabulary sorted,
 * 3.3 with a shell sort of each bucket, 1.2 with these passes. On the
 * H200's host: 24, 5.7, and 2.8 reading the probabilities on each pass,
 * 1.8 with the bits carried.) */
static void sort_by_low_bits(int32_t *ids, int32_t n, const float *probs,
                             uint64_t *spare)
{
    uint64_t *from = spare, *to = spare + n;
    const uint32_t low = (1u << BUCKET_SHIFT) - 1;
    for (int32_t i = 0; i < n; i++)
        from[i] = (uint64_t)(prob_rank(probs[ids[i]]) & low) << 32 |
                  (uint32_t)ids[i];
    for (int shift = 32; shift < 32 + BUCKET_SHIFT; shift += 8) {
        int32_t at[257] = {0};
        for (int32_t i = 0; i < n; i++)
            at[(from[i] >> shift & 0xff) + 1]++;
        for (int d = 0; d < 256; d++)
            at[d + 1] += at[d];
        for (int32_t i = 0; i < n; i++)
            to[at[from[i] >> shift & 0xff]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    for (int32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(uint32_t)from[i];
}

/* Keeps the smallest set of most likely tokens whose share of sum reaches
 * top_p — at least one, so that top_p 0 means the most likely token — and
 * zeroes the rest of probs; returns the kept mass. order: scratch for n. */
static double nucleus_keep(float top_p, float *probs, int32_t n, double sum,
                           int32_t *order)
{
    int32_t start[NUCLEUS_BUCKETS + 1];
    order_by_bucket(probs, n, order, start);
    uint64_t *spare = NULL;   /* for sort_by_low_bits, made when needed */
    double mass = 0.0, keep = 0.0;
    int32_t k = 0, sorted = 0;
    int b = 0;
    while (k < n && (k == 0 || mass < top_p)) {
        while (k == sorted) {   /* the walk reached the next bucket */
            const int32_t m = start[b + 1] - k;
            const bool middle = b > 0 && b < NUCLEUS_BUCKETS - 1;
            if (middle && m > INSERTION_MAX && !spare)
                spare = malloc(2 * sizeof *spare * (size_t)n);
            if (middle && m > INSERTION_MAX && spare)
                sort_by_low_bits(order + k, m, probs, spare);
            else
                sort_ids(order + k, m, probs);
            sorted = start[++b];
        }
        mass += probs[order[k]] / sum;
        keep += probs[order[k++]];
    }
    free(spare);
    for (int32_t i = k; i < n; i++)
        probs[order[i]] = 0.0f;
    return keep;
}

/* ---- the softmax's weights ---- */

/* e^x, eight at a time, for the x <= 0 of a softmax whose maximum is
 * taken off: exp256 (within 1.3 ulp of e^x over [-87.3, 0]; expf: 0.5),
 * and 0 below -87.3, where e^x leaves the normal floats, as for -inf —
 * a masked token has no chance at all. One instruction sequence on every
 * AVX2 machine, eight lanes a step: with libm's expf, one value at a
 * time, a draw at top-p 1 from a 128k vocabulary (the exponentials and
 * little else) took 0.42 ms here and 0.6-0.8 on the H200's host; with
 * this, 0.12 here. */
static __m256 exp_neg8(__m256 x)
{
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    return _mm256_andnot_ps(under, exp256(x));
}

/* Eight logits' weights into w, their sum added into s (two halves). */
static void weights8(const float *logits, __m256 max, __m256 temperature,
                     float *w, __m256d s[2])
{
    const __m256 x = _mm256_div_ps(
        _mm256_sub_ps(_mm256_loadu_ps(logits), max), temperature);
    const __m256 e = exp_neg8(x);
    _mm256_storeu_ps(w, e);
    s[0] = _mm256_add_pd(s[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s[1] = _mm256_add_pd(s[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

double sample_weights(const float *logits, int32_t n, float temperature,
                      float *weights)
{
    const __m256 max = _mm256_set1_ps(logits[sample_argmax(logits, n)]);
    const __m256 t = _mm256_set1_ps(temperature);
    __m256d s[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        weights8(logits + i, max, t, weights + i, s);
    if (i < n) {
        /* the last few through the same instructions (so a token's weight
         * does not depend on where it falls), padded with weights of 0 */
        float in[8], out[8];
        for (int j = 0; j < 8; j++)
            in[j] = i + j < n ? logits[i + j] : -INFINITY;
        weights8(in, max, t, out, s);
        memcpy(weights + i, out, sizeof(float) * (size_t)(n - i));
    }
    double lanes[8];
    _mm256_storeu_pd(lanes, s[0]);
    _mm256_storeu_pd(lanes + 4, s[1]);
    double sum = 0.0;
    for (int j = 0; j < 8; j++)
        sum += lanes[j];
    return sum;
}

void sample_probs(const struct kk_sampling *p, const float *logits, int32_t n,
                  float *probs, int32_t *order)
{
    double sum = sample_weights(logits, n, p->temperature, probs);
    if (p->top_p < 1.0f)
        sum = nucleus_keep(p->top_p, probs, n, sum, order);
    float inv = (float)(1.0 / sum);
    for (int32_t i = 0; i < n; i++)
        probs[i] *= inv;
}

int32_t sample_from(const float *probs, int32_t n, uint64_t *rng)
{
    return sample_pick(probs, n, sample_bits53(rng));
}

int32_t sample_pick(const float *probs, int32_t n, uint64_t u53)
{
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += probs[i];
    double r = (double)u53 * 0x1.0p-53 * total;
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
