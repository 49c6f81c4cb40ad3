/* spec.h — the acceptance rule of speculative sampling.
 *
 * Given the target's distribution p and the proposer's q at one position,
 * and the token d that was drawn from q, spec_accept() keeps d with
 * probability min(1, p(d) / q(d)); otherwise it draws the replacement from
 * max(0, p - q) renormalised. The token that comes out is distributed
 * exactly as p, whatever q is (Leviathan et al. 2023; Chen et al. 2023) —
 * tests/test_spec.c checks this with a chi-square test on real models.
 * A deterministic proposer's token (q is 1 at d) needs no rule of its own:
 * the target's own draw decides it (generate.c). */
#ifndef KK_SPEC_H
#define KK_SPEC_H

#include <stdbool.h>
#include <stdint.h>

/* resid is scratch for n floats. Returns true when d is accepted; else
 * *out holds the replacement. */
bool spec_accept(const float *p, const float *q, int32_t d, int32_t n,
                 uint64_t *rng, float *resid, int32_t *out);

#endif
