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
 * A row is cut into parts of SAMPLE_PART values, a workgroup each, and
 * the draw takes six dispatches (pc.phase), each reading what the one
 * before wrote (one workgroup a whole row, five sweeps in one dispatch,
 * took 204 us a row of 128k on the H200, one multiprocessor of 132 at
 * work). Every workgroup of a row that needs a choice made from the
 * row's bins scans them itself: the same integers, the same choice.
 *   0. each part's largest logit; the row's bins cleared;
 *   1. the row's largest logit, from its parts'; each weight into W, so
 *      that later sweeps see the same bits, and its mass added to the
 *      first level's 1024 bins of a weight's rank (how far its bits are
 *      below 1.0's: a larger weight has a smaller rank; 30 bits);
 *   2, 3. the bin of the level before that the nucleus ends in, and the
 *      part's mass inside it split into 1024 finer bins: the second and
 *      third levels;
 *   4. from the third level, the exact rank r* of the last token kept and
 *      how many of the tokens of that rank are kept (the lowest ids
 *      first); each part's kept mass and its tokens of rank r*;
 *   5. a workgroup a row: the part the draw lands in, by a scan over the
 *      parts' sums; in it, chunks of consecutive ids, a scan over their
 *      kept mass, and the one the draw lands in walked in id order. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require

#define SAMPLE_WG 256u         /* vk_shaders.h's VK_SAMPLE_WORKGROUP */
#define LOADS 8u               /* values an invocation takes of a part */
#define SAMPLE_PART (SAMPLE_WG * LOADS)   /* VK_SAMPLE_PART */
#define MAX_PARTS 128u         /* VK_SAMPLE_MAX_WIDTH / SAMPLE_PART */
#define BINS 1024u             /* bins a level: rank >> 20, then 10 bits
                                  and 10 bits more */
#define BINS_EACH (BINS / SAMPLE_WG)   /* an invocation's bins in a scan */
#define ONE_BITS 0x3f800000u
#define ALL_RANKS 0x40000000u  /* above every rank: top-p off */
#define NONE 0xffffffffu

/* A row's words of S (VK_SAMPLE_ROW_WORDS of them): three levels of bins,
 * each bin's mass in three limbs (limb k of bin b at level + k BINS + b,
 * as bin_add splits it); what the phases found (C_*, at AT_CONST); each
 * part's largest logit; each part's kept mass (two words) and ties. */
#define LEVEL_WORDS (3u * BINS)
#define AT_CONST (3u * LEVEL_WORDS)
#define C_TOTAL 0u     /* 64 bits: the mass of every weight */
#define C_TARGET 2u    /* 64 bits: the nucleus' mass, total times top_p */
#define C_NARROW 4u    /* 1: top-p leaves tokens out (levels 2, 3 used) */
#define C_B1 5u        /* the first level's bin the nucleus ends in */
#define C_ABOVE1 6u    /* 64 bits: the mass of the bins before it */
#define C_B2 8u        /* the same two levels down: rank >> 10 */
#define C_ABOVE2 9u
#define C_RLAST 11u    /* r*: the rank of the last token kept */
#define C_TIES 12u     /* 64 bits: the tokens of rank r* kept (at most 2^18) */
#define C_KEPT 14u     /* 64 bits: the kept mass */
#define C_VLAST 16u    /* 64 bits: the mass of a token of rank r* */
#define AT_MAX (AT_CONST + 32u)
#define AT_PARTS (AT_MAX + MAX_PARTS)
#define ROW_WORDS (AT_PARTS + 4u * MAX_PARTS)

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) buffer WBuf { float w[]; };
/* each row's uniform as 53 bits (lo word, hi word): the host's
 * sample_uniform before the scaling by 2^-53 */
layout(std430, binding = 2) readonly buffer UBuf { uint u[]; };
layout(std430, binding = 3) writeonly buffer TokBuf { uint token[]; };
layout(std430, binding = 4) buffer SBuf { uint S[]; };

layout(push_constant) uniform Push {
    uint width, n_rows;
    float temperature;
    uint top_p32;   /* top_p 2^32, floored; keep_all: top-p off */
    uint keep_all;
    uint phase;     /* 0 .. 5 */
} pc;

/* a part's bins of the level it sweeps, limb by limb (bin_add) */
shared uint bins0[BINS], bins1[BINS], bins2[BINS];
shared uint64_t part[SAMPLE_WG];
shared float sg_max[SAMPLE_WG];   /* one a subgroup, however narrow */
shared uint chosen;
shared uint chosen_ties;
shared uint64_t chosen_above, chosen_cum;

uint64_t load64(uint at)
{
    return uint64_t(S[at]) | uint64_t(S[at + 1u]) << 32u;
}

void store64(uint at, uint64_t v)
{
    S[at] = uint(v);
    S[at + 1u] = uint(v >> 32u);
}

/* Values i0, i0 + SAMPLE_WG, ... (LOADS of them), all loaded before any
 * is used (a loop of one load at a time waits for each). Past the row's
 * end: -inf logits, weights 0. */
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

/* The largest of m over the workgroup (no NaNs: the callers keep them
 * out). */
float workgroup_max(float m)
{
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
 * VK_SAMPLE_MAX_WIDTH = 2^18 limbs of 2^14 - 1 without wrapping — in a
 * part, and in the row's sums of its parts. (64-bit atomic adds in
 * shared memory cost the H200 184 of the one-workgroup form's 244 us a
 * row of 128k: emulated, it seems; 32-bit ones are the hardware's, and
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

/* Adds the part's bins into the row's level at `level` (the bins the
 * part left empty cost nothing). */
void flush_bins(uint level, uint lane)
{
    barrier();   /* every bin_add of the part is done */
    for (uint b = lane; b < BINS; b += SAMPLE_WG) {
        if (bins0[b] != 0u)
            atomicAdd(S[level + b], bins0[b]);
        if (bins1[b] != 0u)
            atomicAdd(S[level + BINS + b], bins1[b]);
        if (bins2[b] != 0u)
            atomicAdd(S[level + 2u * BINS + b], bins2[b]);
    }
}

uint64_t level_mass(uint level, uint b)
{
    return uint64_t(S[level + b]) + (uint64_t(S[level + BINS + b]) << 14u) +
           (uint64_t(S[level + 2u * BINS + b]) << 28u);
}

/* The row's level at `level`: invocation `lane` takes bins
 * BINS_EACH lane .. + BINS_EACH, their masses into m; part[] becomes the
 * inclusive sums of the invocations' shares. Returns the level's total. */
uint64_t scan_level(uint level, uint lane, out uint64_t m[BINS_EACH])
{
    uint64_t own = 0ul;
    [[unroll]] for (uint k = 0u; k < BINS_EACH; k++) {
        m[k] = level_mass(level, BINS_EACH * lane + k);
        own += m[k];
    }
    part[lane] = own;
    if (lane == 0u)
        chosen = NONE;
    scan_parts(lane);
    return part[SAMPLE_WG - 1u];
}

/* After scan_level: the first bin (after `above` of mass before the
 * level) where the mass so far reaches target, among bins that hold any;
 * *bin_above gets the mass before it. */
uint choose_bin(uint lane, uint64_t m[BINS_EACH], uint64_t above,
                uint64_t target, out uint64_t bin_above)
{
    uint64_t own = 0ul;
    [[unroll]] for (uint k = 0u; k < BINS_EACH; k++)
        own += m[k];
    uint64_t before = above + part[lane] - own, mine_above = 0ul;
    uint mine = NONE;
    [[unroll]] for (uint k = 0u; k < BINS_EACH; k++) {
        if (mine == NONE && m[k] > 0ul && before + m[k] >= target) {
            mine = BINS_EACH * lane + k;
            mine_above = before;
        }
        before += m[k];
    }
    if (mine != NONE)
        atomicMin(chosen, mine);
    barrier();
    const uint b = chosen;
    if (b != NONE && mine == b)
        chosen_above = mine_above;
    barrier();
    bin_above = chosen_above;
    barrier();   /* all have read it before part or chosen change again */
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

/* Weights v's mass below rank r_last into *mass, and how many have rank
 * r_last into *n_ties (weights of no mass count in neither). */
void share_of(float v[LOADS], uint r_last, out uint64_t mass, out uint n_ties)
{
    mass = 0ul;
    n_ties = 0u;
    [[unroll]] for (uint k = 0u; k < LOADS; k++) {
        const uint r = rank_of(v[k]);
        const uint64_t f = fixed_of(v[k]);
        if (f > 0ul && r < r_last)
            mass += f;
        n_ties += f > 0ul && r == r_last ? 1u : 0u;
    }
}

/* 0: the part's largest logit; the part's share of the row's bins
 * cleared. */
void phase_max(uint row_at, uint base, uint g, uint lane)
{
    float v[LOADS];
    logits_at(base, g * SAMPLE_PART + lane, v);
    float m = uintBitsToFloat(0xff800000u);   /* -inf */
    [[unroll]] for (uint k = 0u; k < LOADS; k++)
        if (v[k] > m)   /* never a NaN */
            m = v[k];
    m = workgroup_max(m);
    if (lane == 0u)
        S[AT_MAX + row_at + g] = floatBitsToUint(m);
    for (uint i = g * SAMPLE_WG + lane; i < AT_CONST;
         i += gl_NumWorkGroups.x * SAMPLE_WG)
        S[row_at + i] = 0u;
}

/* 1: the part's weights, and the first level's bins. */
void phase_weights(uint row_at, uint base, uint g, uint lane)
{
    float m = uintBitsToFloat(0xff800000u);
    for (uint p = lane; p < gl_NumWorkGroups.x; p += SAMPLE_WG) {
        const float pm = uintBitsToFloat(S[row_at + AT_MAX + p]);
        if (pm > m)
            m = pm;
    }
    m = workgroup_max(m);
    clear_bins(lane);
    const bool any = m > uintBitsToFloat(0xff800000u) &&
                     m < uintBitsToFloat(0x7f800000u);
    const uint i0 = g * SAMPLE_PART + lane;
    float l[LOADS];
    logits_at(base, i0, l);
    [[unroll]] for (uint k = 0u; k < LOADS; k++) {
        const uint i = i0 + k * SAMPLE_WG;
        const float z = (l[k] - m) / pc.temperature;
        const float v = any && z >= -87.3 ? min(exp(z), 1.0) : 0.0;
        if (i < pc.width)
            w[base + i] = v;
        bin_add(rank_of(v) >> 20u, v);
    }
    flush_bins(row_at, lane);
}

/* The part's weights whose rank >> shift is `prefix`, into the bins of
 * the next level (their ranks' next 10 bits). */
void bin_inside(uint level, uint base, uint g, uint lane, uint prefix,
                uint shift)
{
    clear_bins(lane);
    float v[LOADS];
    weights_at(base, g * SAMPLE_PART + lane, v);
    [[unroll]] for (uint k = 0u; k < LOADS; k++) {
        const uint r = rank_of(v[k]);
        if ((r >> shift) == prefix)
            bin_add((r >> (shift - 10u)) & 1023u, v[k]);
    }
    flush_bins(level, lane);
}

/* 2: the first level's bin the nucleus ends in, and the part's weights
 * in it binned finer. Without top-p (or without mass) only the total. */
void phase_level2(uint row_at, uint base, uint g, uint lane)
{
    uint64_t m[BINS_EACH];
    const uint64_t total = scan_level(row_at, lane, m);
    const bool narrow = pc.keep_all == 0u && total > 0ul;
    const uint64_t target =
        narrow ? mul_high(total, uint64_t(pc.top_p32), 32u) : 0ul;
    uint64_t above = 0ul;
    const uint b1 = narrow ? choose_bin(lane, m, 0ul, target, above) : 0u;
    if (g == 0u && lane == 0u) {
        store64(row_at + AT_CONST + C_TOTAL, total);
        store64(row_at + AT_CONST + C_TARGET, target);
        S[row_at + AT_CONST + C_NARROW] = narrow ? 1u : 0u;
        S[row_at + AT_CONST + C_B1] = b1;
        store64(row_at + AT_CONST + C_ABOVE1, above);
    }
    if (narrow)
        bin_inside(row_at + LEVEL_WORDS, base, g, lane, b1, 20u);
}

/* 3: the same a level down. */
void phase_level3(uint row_at, uint base, uint g, uint lane)
{
    const uint c = row_at + AT_CONST;
    if (S[c + C_NARROW] == 0u)
        return;
    uint64_t m[BINS_EACH], above;
    scan_level(row_at + LEVEL_WORDS, lane, m);
    const uint b2 = S[c + C_B1] << 10u |
                    choose_bin(lane, m, load64(c + C_ABOVE1),
                               load64(c + C_TARGET), above);
    if (g == 0u && lane == 0u) {
        S[c + C_B2] = b2;
        store64(c + C_ABOVE2, above);
    }
    bin_inside(row_at + 2u * LEVEL_WORDS, base, g, lane, b2, 10u);
}

/* 4: the nucleus' last rank and kept mass; the part's kept mass and its
 * tokens of the last rank. */
void phase_parts(uint row_at, uint base, uint g, uint lane)
{
    const uint c = row_at + AT_CONST;
    uint r_last = ALL_RANKS;
    uint64_t kept = load64(c + C_TOTAL), ties = 0ul, v_last = 0ul;
    if (S[c + C_NARROW] != 0u) {
        uint64_t m[BINS_EACH], above;
        scan_level(row_at + 2u * LEVEL_WORDS, lane, m);
        const uint64_t target = load64(c + C_TARGET);
        r_last = S[c + C_B2] << 10u |
                 choose_bin(lane, m, load64(c + C_ABOVE2), target, above);
        v_last = fixed_of(uintBitsToFloat(ONE_BITS - r_last));
        ties = target > above ? (target - above + v_last - 1ul) / v_last : 1ul;
        kept = above + ties * v_last;
    }
    if (g == 0u && lane == 0u) {
        S[c + C_RLAST] = r_last;
        store64(c + C_TIES, ties);
        store64(c + C_KEPT, kept);
        store64(c + C_VLAST, v_last);
    }
    float v[LOADS];
    weights_at(base, g * SAMPLE_PART + lane, v);
    uint64_t mass;
    uint n_ties;
    share_of(v, r_last, mass, n_ties);
    /* both in one sum: the part's mass is at most 2^40 SAMPLE_PART = 2^51,
     * its ties at most 2^11, so ties from bit 52 up never meet a carry */
    part[lane] = mass | uint64_t(n_ties) << 52u;
    scan_parts(lane);
    if (lane == 0u) {
        const uint64_t sum = part[SAMPLE_WG - 1u];
        const uint at = row_at + AT_PARTS + 4u * g;
        store64(at, sum & 0x000ffffffffffffful);
        S[at + 2u] = uint(sum >> 52u);
    }
}

/* A share of the row — a part's (phase 5's first step) or a chunk's of a
 * part (its second) — with `mass` below r*, `n_ties` tokens of rank r*,
 * among shares in id order, one an invocation, of which `ties` tokens of
 * rank r* are kept: returns its kept mass, with the ties kept of it, and
 * sets *ties_before to the ties in the shares before it and *cum to the
 * kept mass before it (after cum0). Counts of tokens are 32-bit (at most
 * VK_SAMPLE_MAX_WIDTH): in 64 bits, with `ties` a select of its own
 * (the second step's), the H200 added every tie of each chunk that had
 * ties before it in the part when no tie was left to keep — as though
 * ties > ties_before were ties - ties_before != 0 — and drew past the
 * nucleus' last tie hundreds of tokens early; lavapipe did not. */
uint64_t kept_share(uint lane, uint64_t mass, uint n_ties, uint ties,
                    uint64_t v_last, uint64_t cum0, out uint ties_before,
                    out uint64_t cum)
{
    part[lane] = uint64_t(n_ties);
    scan_parts(lane);
    ties_before = uint(part[lane]) - n_ties;
    const uint ties_here =
        ties > ties_before ? min(ties - ties_before, n_ties) : 0u;
    mass += uint64_t(ties_here) * v_last;
    barrier();
    part[lane] = mass;
    scan_parts(lane);
    cum = cum0 + part[lane] - mass;
    barrier();   /* all have read part before it is written again */
    return mass;
}

/* 5: the draw. The part it lands in, then the chunk of LOADS ids in it,
 * then the id. */
void phase_draw(uint row, uint row_at, uint base, uint lane)
{
    const uint c = row_at + AT_CONST;
    const uint r_last = S[c + C_RLAST];
    const uint ties = S[c + C_TIES];   /* its low word: at most 2^18 */
    const uint64_t kept = load64(c + C_KEPT);
    const uint64_t v_last = load64(c + C_VLAST);
    const uint parts = (pc.width + SAMPLE_PART - 1u) / SAMPLE_PART;
    const uint64_t u53 = uint64_t(u[2u * row]) | uint64_t(u[2u * row + 1u]) << 32u;
    const uint64_t at = mul_high(kept, u53, 53u);   /* < kept */

    uint ties_before;
    uint64_t cum;
    const uint64_t pmass = kept_share(
        lane, lane < parts ? load64(row_at + AT_PARTS + 4u * lane) : 0ul,
        lane < parts ? S[row_at + AT_PARTS + 4u * lane + 2u] : 0u, ties,
        v_last, 0ul, ties_before, cum);
    if (lane == 0u)
        chosen = NONE;
    barrier();
    if (pmass > 0ul && cum <= at && at < cum + pmass) {
        chosen = lane;
        chosen_ties = ties_before;
        chosen_cum = cum;
    }
    barrier();
    const uint p = chosen;
    if (p == NONE) {   /* no mass: no finite logit */
        if (lane == 0u)
            token[row] = 0u;
        return;
    }
    const uint part_ties = chosen_ties;
    const uint64_t part_cum = chosen_cum;

    const uint i0 = min(p * SAMPLE_PART + lane * LOADS, pc.width);
    const uint i1 = min(i0 + LOADS, pc.width);
    float v[LOADS];
    chunk_at(base, i0, i1, v);
    uint64_t mass;
    uint n_ties;
    share_of(v, r_last, mass, n_ties);
    mass = kept_share(lane, mass, n_ties,
                      ties > part_ties ? ties - part_ties : 0u, v_last,
                      part_cum, ties_before, cum);
    if (lane == 0u)
        chosen = NONE;
    barrier();
    if (mass > 0ul && cum <= at && at < cum + mass) {
        uint tie = part_ties + ties_before;
        uint found = NONE;
        [[unroll]] for (uint k = 0u; k < LOADS; k++) {
            const uint r = rank_of(v[k]);
            const uint64_t f = fixed_of(v[k]);
            const bool is_kept = f > 0ul &&
                (r < r_last || (r == r_last && tie++ < ties));
            if (found == NONE && is_kept) {
                cum += f;
                if (cum > at)
                    found = i0 + k;
            }
        }
        chosen = found;
    }
    barrier();
    if (lane == 0u)
        token[row] = chosen == NONE ? 0u : chosen;
}

void main()
{
    const uint g = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
    const uint lane = gl_LocalInvocationIndex;
    const uint base = row * pc.width, row_at = row * ROW_WORDS;
    if (pc.phase == 0u)
        phase_max(row_at, base, g, lane);
    else if (pc.phase == 1u)
        phase_weights(row_at, base, g, lane);
    else if (pc.phase == 2u)
        phase_level2(row_at, base, g, lane);
    else if (pc.phase == 3u)
        phase_level3(row_at, base, g, lane);
    else if (pc.phase == 4u)
        phase_parts(row_at, base, g, lane);
    else
        phase_draw(row, row_at, base, lane);
}
