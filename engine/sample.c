/* sample.c — choosing the next token from logits (see sample.h, kk_sample).
 *
 * Greedy is argmax with ties to the lowest id, as llama.cpp's greedy
 * sampler. Otherwise: softmax at the temperature, keep the smallest set of
 * most likely tokens whose mass reaches top_p, draw from it. The generator
 * is xorshift64* seeded through splitmix64, so a seed reproduces a run. */
#include "sample.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

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

static int cmp_prob_desc(const void *a, const void *b, void *probs)
{
    const float *p = probs;
    float pa = p[*(const int32_t *)a], pb = p[*(const int32_t *)b];
    if (pa != pb)
        return pa > pb ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
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
    if (p->top_p < 1.0f) {
        for (int32_t i = 0; i < n; i++)
            order[i] = i;
        qsort_r(order, (size_t)n, sizeof *order, cmp_prob_desc, probs);
        double mass = 0.0, keep = 0.0;
        int32_t k = 0;
        while (k < n && mass < p->top_p) {
            mass += probs[order[k]] / sum;
            keep += probs[order[k++]];
        }
        for (int32_t i = k; i < n; i++)
            probs[order[i]] = 0.0f;
        sum = keep;
    }
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
