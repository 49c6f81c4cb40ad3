/* sample.c — choosing the next token from logits (see sample.h, kk_sample).
 *
 * Greedy is argmax with ties to the lowest id, as llama.cpp's greedy
 * sampler. Otherwise: softmax at the temperature, keep the smallest set of
 * most likely tokens whose mass reaches top_p, draw from it. The generator
 * is xorshift64* seeded through splitmix64, so a seed reproduces a run. */
#include "sample.h"

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

int32_t sample_argmax(const float *logits, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
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
