/* sample.comp — a draw from each row's top-p nucleus at a temperature,
 * made where the logits are, so that sampled decoding on a GPU reads back
 * one token a row instead of a vocabulary of floats (contract in
 * engine/vulkan/vk_shaders.h). The distribution is engine/sample.c's:
 * weights e^((x - max) / T), 0 below e^-87.3; the smallest set of the
 * most likely tokens (ties to the lower id) whose mass reaches top_p, at
 * least one; a draw from it by the inverse of its distribution in id
 * order, with the host's uniform.
 *
 * Masses are fixed-point integers (units of 2^-40 of the largest weight,
 * which is 1), so every sum is exact and the same in any order: a token's
 * weight w counts as floor(w 2^40), and one below 2^-40 (a chance under
 * 10^-12 of the top token's) is never drawn. The host's sums are
 * floating-point, so a draw can differ from the host's only where the
 * uniform falls within rounding of a boundary between two tokens.
 *
 * One workgroup a row, five sweeps over it:
 *   1. the largest logit;
 *   2. each weight into W, so that later sweeps see the same bits, and
 *      the mass in each of 1024 bins of a weight's rank (how far its bits
 *      are below 1.0's: a larger weight has a smaller rank; 30 bits);
 *   3, 4. the mass of the bin that the nucleus ends in, split into 1024
 *      finer bins, then again, which gives the exact rank r* of the last
 *      token kept and how many of the tokens of that rank are kept (the
 *      lowest ids first);
 *   5. per invocation, a chunk of consecutive ids: its kept mass, then a
 *      scan over the chunks finds the one the draw lands in, and its
 *      invocation walks it. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require

#define SAMPLE_WG 1024u        /* vk_shaders.h's VK_SAMPLE_WORKGROUP */
#define BINS 1024u             /* bins a level, one an invocation: rank
                                  >> 20, then 10 bits and 10 bits more */
#define ONE_BITS 0x3f800000u
#define ALL_RANKS 0x40000000u  /* above every rank: top-p off */
#define NONE 0xffffffffu
#define LOADS 8u

layout(local_size_x = 1024) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
/* coherent: the last sweep reads weights other invocations wrote */
layout(std430, binding = 1) coherent buffer WBuf { float w[]; };
/* each row's uniform as 53 bits (lo word, hi word): the host's
 * sample_uniform before the scaling by 2^-53 */
layout(std430, binding = 2) readonly buffer UBuf { uint u[]; };
layout(std430, binding = 3) writeonly buffer TokBuf { uint token[]; };

layout(push_constant) uniform Push {
    uint width, n_rows;
    float temperature;
    uint top_p32;   /* top_p 2^32, floored; keep_all: top-p off */
    uint keep_all;
} pc;

/* a bin's mass in three limbs of 14 bits (bin_add) */
shared uint bins0[BINS], bins1[BINS], bins2[BINS];
shared uint64_t part[SAMPLE_WG];
shared float sg_max[SAMPLE_WG];   /* one a subgroup, however narrow */
shared uint chosen;
shared uint64_t chosen_above;

/* LOADS values an invocation, SAMPLE_WG apart from i0, all loaded before
 * any is used (a loop of one load at a time waits for each: the argmax's
 * first form, one workgroup a row, took ~50 us on the H200). Past the
 * row's end: -inf logits, weights 0. */
void logits_at(uint base, uint i0, out float v[LOADS])
{
    [[unroll]] for (uint k = 0u; k < LOADS; k++) {
        const uint i = i0 + k * SAMPLE_WG;
        v[k] = i < pc.width ? x[base + i] : uintBitsToFloat(0xff800000u);
    }
}

void weights_at(uint base, uint i0, out float v[LOADS])
{
    [[unroll]] for (uint k = 0u; k < LOADS; k++) {
        const uint i = i0 + k * SAMPLE_WG;
        v[k] = i < pc.width ? w[base + i] : 0.0;
    }
}

/* Weights i .. i + LOADS - 1 (0 from i1 on). */
void chunk_at(uint base, uint i, uint i1, out float v[LOADS])
{
    [[unroll]] for (uint k = 0u; k < LOADS; k++)
        v[k] = i + k < i1 ? w[base + i + k] : 0.0;
}

/* How far w (in (0, 1]) is below 1, in units of its float's last bit. */
uint rank_of(float v)
{
    return ONE_BITS - min(floatBitsToUint(v), ONE_BITS);
}

/* v (in [0, 1]) in units of 2^-40, floor(v 2^40), as two 32-bit
 * pieces, floor(v 2^12) and the floor of its fraction times 2^28: both
 * exact. (Not a float's conversion to 64 bits cut to 32: the H200's
 * compiler turned such a cut of a conversion into a 32-bit conversion,
 * which saturates at 2^32 - 1 — for weights from 2^-8 up — and bins
 * summed that way came out half as large again as they are.) */
void fixed_parts(float v, out uint high, out uint low)
{
    const float scaled = v * 4096.0;   /* 2^12 */
    high = uint(scaled);
    low = uint(fract(scaled) * 268435456.0);   /* 2^28 */
}

uint64_t fixed_of(float v)
{
    uint high, low;
    fixed_parts(v, high, low);
    return uint64_t(high) << 28u | uint64_t(low);
}

float row_max(uint base, uint lane)
{
    float m = uintBitsToFloat(0xff800000u);   /* -inf */
    for (uint i0 = lane; i0 < pc.width; i0 += SAMPLE_WG * LOADS) {
        float v[LOADS];
        logits_at(base, i0, v);
        [[unroll]] for (uint k = 0u; k < LOADS; k++)
            if (v[k] > m)   /* never a NaN */
                m = v[k];
    }
    m = subgroupMax(m);
    if (subgroupElect())
        sg_max[gl_SubgroupID] = m;
    barrier();
    for (uint s = 0u; s < gl_NumSubgroups; s++)
        m = max(m, sg_max[s]);
    return m;
}

/* part[] becomes its inclusive prefix sums (all invocations take part). */
void scan_parts(uint lane)
{
    barrier();
    for (uint off = 1u; off < SAMPLE_WG; off <<= 1u) {
        uint64_t v = part[lane];
        if (lane >= off)
            v += part[lane - off];
        barrier();
        part[lane] = v;
        barrier();
    }
}

void clear_bins(uint lane)
{
    for (uint b = lane; b < BINS; b += SAMPLE_WG) {
        bins0[b] = 0u;
        bins1[b] = 0u;
        bins2[b] = 0u;
    }
    barrier();
}

/* Adds weight v's mass, fixed_of(v), to bin b exactly, in any order (a
 * weight of no mass, below 2^-40, adds nothing and costs no atomic):
 * each 14-bit limb into its own 32-bit sum, which holds
 * VK_SAMPLE_MAX_WIDTH = 2^18 limbs of 2^14 - 1 without wrapping. (64-bit
 * atomic adds in shared memory cost the H200 184 of this shader's 244 us
 * a row of 128k: emulated, it seems; 32-bit ones are the hardware's, and
 * with their results unused, fire and forget.) */
void bin_add(uint b, float v)
{
    uint high, low;
    fixed_parts(v, high, low);
    if (high == 0u && low == 0u)
        return;
    atomicAdd(bins0[b], low & 0x3fffu);
    if (low >= 0x4000u)
        atomicAdd(bins1[b], low >> 14u);
    if (high > 0u)
        atomicAdd(bins2[b], high);
}

uint64_t bin_mass(uint b)
{
    return uint64_t(bins0[b]) + (uint64_t(bins1[b]) << 14u) +
           (uint64_t(bins2[b]) << 28u);
}

/* part[] becomes the bins' inclusive sums, a bin an invocation (BINS is
 * SAMPLE_WG); returns their total. */
uint64_t scan_bins(uint lane)
{
    part[lane] = bin_mass(lane);
    if (lane == 0u)
        chosen = NONE;
    scan_parts(lane);
    const uint64_t total = part[SAMPLE_WG - 1u];
    barrier();   /* all have read it before anyone writes part again */
    return total;
}

/* After scan_bins: the first bin (after `above` of mass before them) where
 * the mass so far reaches target, among bins that hold any; chosen_above
 * gets the mass before it. */
uint choose_bin(uint lane, uint64_t above, uint64_t target)
{
    const uint64_t m = bin_mass(lane), before = above + part[lane] - m;
    if (m > 0ul && before + m >= target)
        atomicMin(chosen, lane);
    barrier();
    const uint b = chosen;
    if (lane == b)
        chosen_above = before;
    barrier();
    return b;
}

/* floor(a b / 2^shift) for a < 2^58, b < 2^53, shift 53; or b < 2^32,
 * shift 32: the product's high bits without 128-bit integers. */
uint64_t mul_high(uint64_t a, uint64_t b, uint shift)
{
    const uint64_t ah = a >> 32u, al = a & 0xfffffffful;
    const uint64_t bh = b >> 32u, bl = b & 0xfffffffful;
    const uint64_t lo = al * bl;
    const uint64_t mid = ah * bl + al * bh + (lo >> 32u);
    return ((ah * bh) << (64u - shift)) + (mid >> (shift - 32u));
}

void main()
{
    const uint row = gl_WorkGroupID.x, lane = gl_LocalInvocationIndex;
    const uint n = pc.width, base = row * n;

    /* 1, 2: the weights and the first bins */
    const float m = row_max(base, lane);
    clear_bins(lane);
    const bool any = m > uintBitsToFloat(0xff800000u) &&
                     m < uintBitsToFloat(0x7f800000u);
    for (uint i0 = lane; i0 < n; i0 += SAMPLE_WG * LOADS) {
        float l[LOADS];
        logits_at(base, i0, l);
        [[unroll]] for (uint k = 0u; k < LOADS; k++) {
            const uint i = i0 + k * SAMPLE_WG;
            const float z = (l[k] - m) / pc.temperature;
            const float v = any && z >= -87.3 ? min(exp(z), 1.0) : 0.0;
            if (i < n)
                w[base + i] = v;
            bin_add(rank_of(v) >> 20u, v);
        }
    }
    memoryBarrierBuffer();
    memoryBarrierShared();
    barrier();

    /* 3, 4: the nucleus' last rank, from three levels of bins */
    uint64_t target = 0ul, above = 0ul, kept = 0ul, v_last = 0ul, ties = 0ul;
    uint r_last = ALL_RANKS;
    const uint64_t total = scan_bins(lane);
    if (pc.keep_all == 0u && total > 0ul) {
        target = mul_high(total, uint64_t(pc.top_p32), 32u);
        const uint b1 = choose_bin(lane, 0ul, target);
        above = chosen_above;
        clear_bins(lane);
        for (uint i0 = lane; i0 < n; i0 += SAMPLE_WG * LOADS) {
            float v[LOADS];
            weights_at(base, i0, v);
            [[unroll]] for (uint k = 0u; k < LOADS; k++) {
                const uint r = rank_of(v[k]);
                if ((r >> 20u) == b1)
                    bin_add((r >> 10u) & 1023u, v[k]);
            }
        }
        memoryBarrierShared();
        barrier();
        scan_bins(lane);
        const uint b2 = b1 << 10u | choose_bin(lane, above, target);
        above = chosen_above;
        clear_bins(lane);
        for (uint i0 = lane; i0 < n; i0 += SAMPLE_WG * LOADS) {
            float v[LOADS];
            weights_at(base, i0, v);
            [[unroll]] for (uint k = 0u; k < LOADS; k++) {
                const uint r = rank_of(v[k]);
                if ((r >> 10u) == b2)
                    bin_add(r & 1023u, v[k]);
            }
        }
        memoryBarrierShared();
        barrier();
        scan_bins(lane);
        r_last = b2 << 10u | choose_bin(lane, above, target);
        above = chosen_above;
        v_last = fixed_of(uintBitsToFloat(ONE_BITS - r_last));
        ties = target > above ? (target - above + v_last - 1ul) / v_last : 1ul;
        kept = above + ties * v_last;
    } else {
        kept = total;
    }

    /* 5: the draw, chunk by chunk in id order */
    const uint chunk = (n + SAMPLE_WG - 1u) / SAMPLE_WG;
    const uint i0 = min(lane * chunk, n), i1 = min(i0 + chunk, n);
    uint64_t mass = 0ul;
    uint n_ties = 0u;
    for (uint i = i0; i < i1; i += LOADS) {
        float v[LOADS];
        chunk_at(base, i, i1, v);
        [[unroll]] for (uint k = 0u; k < LOADS; k++) {
            const uint r = rank_of(v[k]);
            const uint64_t f = fixed_of(v[k]);
            if (f > 0ul && r < r_last)
                mass += f;
            n_ties += f > 0ul && r == r_last ? 1u : 0u;
        }
    }
    part[lane] = uint64_t(n_ties);
    scan_parts(lane);
    const uint64_t ties_before = part[lane] - uint64_t(n_ties);
    const uint64_t ties_here =
        ties > ties_before ? min(ties - ties_before, uint64_t(n_ties)) : 0ul;
    mass += ties_here * v_last;
    barrier();
    part[lane] = mass;
    if (lane == 0u)
        chosen = NONE;
    scan_parts(lane);
    const uint64_t u53 = uint64_t(u[2u * row]) | uint64_t(u[2u * row + 1u]) << 32u;
    const uint64_t at = mul_high(kept, u53, 53u);   /* < kept */
    uint64_t cum = part[lane] - mass;
    if (mass > 0ul && cum <= at && at < cum + mass) {
        /* LOADS weights at a time, loaded before any is used: one at a
         * time, the walk would wait for each */
        uint64_t tie = ties_before;
        uint found = NONE;
        for (uint i = i0; i < i1 && found == NONE; i += LOADS) {
            float v[LOADS];
            chunk_at(base, i, i1, v);
            [[unroll]] for (uint k = 0u; k < LOADS; k++) {
                const uint r = rank_of(v[k]);
                const uint64_t f = fixed_of(v[k]);
                const bool is_kept = f > 0ul &&
                    (r < r_last || (r == r_last && tie++ < ties));
                if (found == NONE && is_kept) {
                    cum += f;
                    if (cum > at)
                        found = i + k;
                }
            }
        }
        chosen = found;
    }
    barrier();
    if (lane == 0u)
        token[row] = chosen == NONE ? 0u : chosen;
}
