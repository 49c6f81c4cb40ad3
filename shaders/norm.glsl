/* norm.glsl — the RMS scale of a row of x, as rmsnorm.comp computes it and
 * as matmul.comp computes it when it folds the norm into its input
 * (-DMM_NORM): one code, so both give the same bits, and a token normed by
 * either is the same token to the matmuls after it — what keeps verifying
 * a block (separate norm) equal to decoding it (folded norm) to the bit.
 *
 * NORM_LANES lanes split the row into runs of 4 values: lane i takes runs
 * i, i + NORM_LANES, ... in order and sums their squares, each as one fma
 * (`precise`: no compiler may fuse or reorder it differently in the two
 * shaders). The lanes' sums meet by subgroupAdd, then the subgroups' sums
 * are added in order: scale = 1 / sqrt(sum / dim + eps). The loads are
 * what costs (x comes from L2): a lane issues all of a step's loads before
 * its first fma, so a 2048-wide row is one round trip, not 32.
 *
 * The includer declares the float array x, its vec4 view x4 (a row of a
 * width that is a multiple of 4 starts on a vec4), and enables
 * GL_KHR_shader_subgroup_arithmetic; lanes are NORM_LANES consecutive
 * invocations, whole subgroups of at most NORM_LANES. A shader that norms
 * rows of more than one buffer defines NORM_X4(i) and NORM_X(i), the loads,
 * instead of x4 and x. */
#ifndef KK_NORM_GLSL
#define KK_NORM_GLSL

#ifndef NORM_X4
#define NORM_X4(i) x4[i]
#define NORM_X(i) x[i]
#endif

#define NORM_LANES 64u
#define NORM_STEP 8u    /* runs a lane loads before it adds */

/* Lane `lane`'s sum of squares of x[base .. base + dim). */
float norm_lane_sum(uint base, uint dim, uint lane)
{
    precise float s = 0.0;
    const uint runs = (dim + 3u) / 4u;
    uint c = lane;
    if ((dim & 3u) == 0u) {
        const uint b4 = base >> 2u;
        for (; c + (NORM_STEP - 1u) * NORM_LANES < runs;
             c += NORM_STEP * NORM_LANES) {
            vec4 v[NORM_STEP];
            [[unroll]] for (uint r = 0u; r < NORM_STEP; r++)
                v[r] = NORM_X4(b4 + c + r * NORM_LANES);
            [[unroll]] for (uint r = 0u; r < NORM_STEP; r++) {
                s = fma(v[r].x, v[r].x, s);
                s = fma(v[r].y, v[r].y, s);
                s = fma(v[r].z, v[r].z, s);
                s = fma(v[r].w, v[r].w, s);
            }
        }
        for (; c < runs; c += NORM_LANES) {
            const vec4 v = NORM_X4(b4 + c);
            s = fma(v.x, v.x, s);
            s = fma(v.y, v.y, s);
            s = fma(v.z, v.z, s);
            s = fma(v.w, v.w, s);
        }
        return s;
    }
    /* a width not a multiple of 4: the same runs, value by value */
    for (; c < runs; c += NORM_LANES)
        for (uint r = 0u; r < 4u && 4u * c + r < dim; r++) {
            const float a = NORM_X(base + 4u * c + r);
            s = fma(a, a, s);
        }
    return s;
}

/* rmsnorm's output for value x of a row of scale sc, with weight w: its
 * two products kept apart (`precise`), as rmsnorm.comp rounds them. */
float norm_value(float x, float sc, float w)
{
    precise float v = x * sc;
    precise float r = v * w;
    return r;
}

/* Subgroups per NORM_LANES lanes. */
uint norm_subgroups() { return NORM_LANES / gl_SubgroupSize; }

/* Puts the lane's sum s into part[at + its subgroup's index among the
 * lanes' subgroups]; every invocation of the subgroup must call it. */
#define NORM_PUT(part, at, lane, s)                                          \
    {                                                                        \
        const float t_ = subgroupAdd(s);                                     \
        if (subgroupElect())                                                 \
            part[(at) + (lane) / gl_SubgroupSize] = t_;                      \
    }

/* The scale from the subgroups' sums part[at .. at + norm_subgroups()). */
#define NORM_SCALE(part, at, dim, eps, scale)                                \
    {                                                                        \
        precise float s_ = part[at];                                         \
        for (uint g_ = 1u; g_ < norm_subgroups(); g_++)                      \
            s_ += part[(at) + g_];                                           \
        precise float v_ = s_ / float(dim) + (eps);                          \
        scale = 1.0 / sqrt(v_);                                              \
    }

#endif
