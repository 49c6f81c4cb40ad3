/* bench_util.h — what the benchmarks share: a monotonic clock and the
 * median of repeated timings (robust to a noisy machine). */
#ifndef KK_BENCH_UTIL_H
#define KK_BENCH_UTIL_H

/* Seconds on a monotonic clock. */
double bench_now(void);

/* The median of n values; sorts v in place. */
double bench_median(double *v, int n);

#endif
