/* spec.c — see spec.h. */
#include "spec.h"

#include "sample.h"

bool spec_accept(const float *p, const float *q, int32_t d, int32_t n,
                 uint64_t *rng, float *resid, int32_t *out)
{
    const double qd = q[d];
    if (qd > 0.0 && sample_uniform(rng) * qd < p[d]) {
        *out = d;
        return true;
    }
    double total = 0.0;
    for (int32_t v = 0; v < n; v++) {
        double r = (double)p[v] - q[v];
        resid[v] = r > 0.0 ? (float)r : 0.0f;
        total += resid[v];
    }
    /* total is 0 only if p == q, where rejection cannot happen; rounding
     * aside, fall back to p itself. */
    *out = sample_from(total > 0.0 ? resid : p, n, rng);
    return false;
}
