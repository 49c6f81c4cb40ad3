/* sample.h — distributions to sample from (internal; kk_sample in
 * kakeya.h is the public entry point).
 *
 * Speculative sampling needs the distributions themselves, not only a draw:
 * the verifier compares the target's p with the proposer's q token by token.
 * Both are made here the same way: softmax at the temperature, then the
 * top-p nucleus, renormalised. */
#ifndef KK_SAMPLE_H
#define KK_SAMPLE_H

#include <stdint.h>

#include "kakeya.h"

/* probs[i] = the probability of token i under p (0 outside the nucleus).
 * order is scratch for n ints. Needs p->temperature > 0. */
void sample_probs(const struct kk_sampling *p, const float *logits, int32_t n,
                  float *probs, int32_t *order);

/* weights[i] = e^((logits[i] - max) / temperature), max the largest of
 * the logits (so the largest weight is 1), through one vectorised e^x
 * (within a few ulp of expf; 0 below e^-87.3, about FLT_MIN); returns
 * their sum. */
double sample_weights(const float *logits, int32_t n, float temperature,
                      float *weights);

/* Draws from probs (non-negative, any positive total):
 * sample_pick(probs, n, sample_bits53(rng)). */
int32_t sample_from(const float *probs, int32_t n, uint64_t *rng);

/* The draw with the uniform u53 2^-53 given: the first id, in id order,
 * at which the probabilities so far pass that share of their total. */
int32_t sample_pick(const float *probs, int32_t n, uint64_t u53);

/* The generator's next 53 bits (below 2^53): a uniform draw in [0, 1) is
 * them times 2^-53, which is sample_uniform. A GPU that draws a token
 * where the logits are (be_read_sample) is handed these bits. */
uint64_t sample_bits53(uint64_t *rng);

/* Uniform in [0, 1). */
double sample_uniform(uint64_t *rng);

int32_t sample_argmax(const float *logits, int32_t n);

#endif
