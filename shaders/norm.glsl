/* norm.glsl — the RMS scale of a row of x, as rmsnorm.comp computes it and
 * as matmul.comp computes it when it folds the norm into its input
 * (-DMM_NORM): one code, so both give the same bits, and a token normed by
 * either is the same token to the matmuls after it — what keeps verifying
 * a block (separate norm) equal to decoding it (folded norm) to the bit.
 *
 * NORM_LANES lanes split the row: lane i sums the squares of values i,
 * i + NORM_LANES, ... in order, each as one fma; the lanes' sums are
 * added in lane order; scale = 1 / sqrt(sum / dim + eps). `precise`
 * keeps the compiler from fusing or reordering any of it differently in
 * the two shaders. The includer declares the float array x. */
#ifndef KK_NORM_GLSL
#define KK_NORM_GLSL

#define NORM_LANES 64u

/* Lane `lane`'s sum of squares of x[base .. base + dim), four loads in
 * flight at a time, added in the order of the plain loop. */
float norm_lane_sum(uint base, uint dim, uint lane)
{
    precise float s = 0.0;
    uint i = lane;
    for (; i + 3u * NORM_LANES < dim; i += 4u * NORM_LANES) {
        const float a = x[base + i], b = x[base + i + NORM_LANES];
        const float c = x[base + i + 2u * NORM_LANES];
        const float d = x[base + i + 3u * NORM_LANES];
        s = fma(a, a, s);
        s = fma(b, b, s);
        s = fma(c, c, s);
        s = fma(d, d, s);
    }
    for (; i < dim; i += NORM_LANES) {
        const float a = x[base + i];
        s = fma(a, a, s);
    }
    return s;
}

/* The scale from the lanes' sums part[at .. at + NORM_LANES). */
#define NORM_SCALE(part, at, dim, eps, scale)                                \
    {                                                                        \
        precise float s_ = part[at];                                         \
        for (uint l_ = 1u; l_ < NORM_LANES; l_++)                            \
            s_ += part[(at) + l_];                                           \
        precise float v_ = s_ / float(dim) + (eps);                          \
        scale = 1.0 / sqrt(v_);                                              \
    }

#endif
