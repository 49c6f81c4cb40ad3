/* attention_avx512.h — attention's two inner loops on 512-bit vectors
 * (AVX-512F/DQ), for attention.c to call after attn512_available().
 *
 * Attention is bound by multiply-adds: 8 per key and query head for the
 * scores and 8 more for the weighted values, on 8-lane vectors. These do
 * the same sums on 16 lanes, for up to ATTN512_HEADS query heads at once
 * (independent sums to hide the multiply-add latency), and give the AVX2
 * loops' results bit for bit: every sum keeps its order (see the .c
 * file), so a query's result never depends on which CPU computed it. */
#ifndef KK_CPU_ATTENTION_AVX512_H
#define KK_CPU_ATTENTION_AVX512_H

enum { ATTN512_HEADS = 4 };

/* dots[h][k] = q[h] . kbuf[k] for the slots k in [b0, b1) (multiples of
 * 8), for n (1..ATTN512_HEADS) query heads. d: a multiple of 16. */
void attn512_dots(const float *const *q, int n, const float *kbuf, int d,
                  int b0, int b1, float *const *dots);

/* o[h][0..d) += sum over k in [k0, k1) of w[h][k] * vb[k][0..d), in key
 * order, for n (1..ATTN512_HEADS) heads. d: a multiple of 16. */
void attn512_weighted_sums(float *const *o, const float *const *w, int n,
                           const float *vb, int k0, int k1, int d);

#endif
