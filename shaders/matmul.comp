/* matmul.comp — y[t][r] = sum_c W[r][c] x[t][c] for one weight type
 * (compiled once per -DWTYPE_<T>; contract in engine/vulkan/vk_shaders.h),
 * for up to three matrices of one type and width in one dispatch, with
 * what follows the product folded in (pc.mode):
 *   MM_STORE  y_m = W_m x                 (q, k and v together)
 *   MM_ADD    y_0 += W_0 x                (the residual stream's update)
 *   MM_GATED  y_0 = act(W_0 x) * (W_1 x)  (ffn gate and up, then act)
 *
 * A workgroup of the GPU form owns MM_SLOTS weight rows (MM_GATED: half as
 * many rows of both matrices) and up to MM_TOKENS tokens. Each row is cut
 * into groups of 8 values (16 for Q8_0 and Q6_K), given as runs of 4
 * consecutive columns; thread i takes groups i, i + WG, ..., so
 * neighbouring threads read neighbouring bytes, every weight byte is read
 * once per workgroup, and each x vec4 serves all of the workgroup's rows.
 * A thread keeps MM_SLOTS x MM_TOKENS f32 partial sums; subgroupAdd and
 * then the subgroups' sums in order give each output.
 *
 * The GPU form is compiled once per batch size it serves (MM_NT tokens):
 * matmul_one_<t> (1: decode), matmul_t4_<t> and matmul_t8_<t> (up to 4
 * and 8: verify blocks) and matmul_<t> (16: longer blocks and prefill, in
 * y-groups of 16). A thread keeps MM_NT partial sums per slot, and the
 * fewer it keeps, the more loads it can have in flight (MM_PAIR: two
 * groups' loads issued together, where registers allow) and the more
 * threads fit on a multiprocessor: the 16-token form decoding one token
 * ran at a sixth of the one-token form's speed. What a token's sum is made
 * of, and in which order, is the same code in every form (only the token
 * count differs), so all give a token the same bits (test_vk_ops).
 *
 * Teams (-DMM_TEAMS, with -DMM_XT: the t4 and t8 forms): a workgroup of
 * MM_TEAMS x WG threads, each team of WG doing what a workgroup of the
 * plain form does on MM_SLOTS rows of its own, while the teams share x:
 * per WG groups of a row, the workgroup stages MM_XT tokens' x into
 * shared memory once (coalesced), and every team's threads read it from
 * there. Each thread still takes the same groups in the same order with
 * the same values, and each team reduces over its own subgroups, so a
 * token's bits do not change; what changes is that an x value loaded once
 * serves MM_TEAMS x MM_SLOTS rows. Measured on the H200 (1B shape, Q8_0):
 * verifying 8 tokens 3.59 ms against 4.02 with 4 teams and tiles of 4
 * tokens; tiles of 8 tokens (32 KiB, fewer workgroups per multiprocessor)
 * were slower than none, 2 teams slower still. A team's rows (-DMM_NS) are
 * 4, or 2 in matmul_t8s2_<t> (batches of 5..8): half the partial sums,
 * so that a matrix of few rows gets twice the workgroups (vk_shaders.c's
 * vk_matmul_forms says what it measured); a row's sums do not change.
 *
 * No branch may separate a thread's weight loads from each other: a GPU
 * waits for the loads before a branch before it takes it, which made each
 * slot's row a round trip of its own. So the one per-dispatch choice that
 * touches loads (how Q8_0 rows are aligned) is made once, in main(), and
 * the loop body is compiled once per case (row_form()).
 *
 * One summation order for every batch size: a token's sum is built the
 * same way (the same groups per thread, in the same order, each group's
 * products as one fma chain, `precise`) whether it is alone or one of 16,
 * so verifying a block reproduces decoding it token by token to the bit —
 * what keeps greedy speculative output equal to plain decoding.
 *
 * Block layouts are ggml's (Q8_0 rearranged at upload, see below), decoded
 * as engine/quant.c's dequantize_row does (same scale products). Rows may
 * start anywhere in a word (odd block counts, f16 rows of an odd width):
 * weights are read through common.glsl's byte helpers. F32/F16/BF16 rows
 * of a width that is not a multiple of 8 end in a partial group, read value
 * by value; with a width that is not a multiple of 4, x is read value by
 * value too. Quantized rows are whole blocks.
 *
 * With -DMM_NORM (matmul_one_norm_<t>, matmul_rows_norm_<t>) x is the
 * residual stream and the RMSNorm before the matmul is folded in: the
 * workgroup first finds its tokens' norm scales (norm.glsl, the code
 * rmsnorm.comp runs, over x from L2), then reads x as (x * scale) * w,
 * rmsnorm's expression — the bits the plain form gives rmsnorm's output
 * (test_vk_ops), for one dispatch fewer. The decode form folds, in two
 * teams sharing x tiles (fewer, larger workgroups, each reading x once
 * more for the scales). Measured on the H200 (1B shape, Q8_0, with chunked
 * submission): decode 582-593 tok/s against 556-565 with the norm as a
 * dispatch of its own; four teams 552-560; four teams for the plain
 * one-token form too 536-538. The fold is not free: a folded matmul takes
 * ~10 us longer than a plain one, nearly the 8.4 us dispatch it replaces.
 * The 4-token form folds too (matmul_t4_norm_<t>: verifying 4 tokens
 * 2.12 ms against 2.30); the 8-token form does not: folded, verifying 8
 * tokens took 4.28 ms against 3.14 with the norm a dispatch of its own.
 *
 * With -DMM_DECODE (matmul_dec_<t>, matmul_dec_norm_<t>: one token, on
 * devices whose subgroups are 32 wide) a subgroup plays a whole team of 64:
 * invocation i takes the groups of lanes i and i + 32, in two sums, and
 * the team's total is the two subgroupAdds in order, so a token gets the
 * bits every other form gives it. Its subgroups work alone (no shared
 * memory, no barrier after the norm's scales), each on row sets of its own
 * in turn over a grid the host caps, so that the norm's scales are found
 * once per workgroup rather than once per 8 rows, and each subgroup has 16
 * groups' loads in flight (Q8_0: loaded as bytes, all before any is
 * decoded). Measured on the H200 (1B shape, Q8_0): the output matrix
 * (128,256 rows) 125 us against 229 in matmul_one_norm; but the layers'
 * matrices were slower than in the one-token forms (ffn down, 8,192 wide
 * and 512 row sets, 15.6 us against 11.2), so the host gives this form
 * only matrices of many rows (VK_DECODE_MIN_ROWS).
 *
 * With -DMM_ROWWISE (matmul_rows_<t>) each invocation computes one whole
 * row (MM_GATED: a row of both) instead, for CPU-backed devices, whose
 * invocations are SIMD lanes: there, 64 cooperating threads on a few rows
 * spend their time in barriers and idle lanes. Row groups past the device's
 * grid limit spill into z in both forms. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#ifdef MM_QX
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_spirv_intrinsics : require
#endif
#ifdef MM_MMA
#extension GL_KHR_shader_subgroup_clustered : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_shader_8bit_storage : require
#endif

#include "common.glsl"
#include "act.glsl"

/* The GPU form's slots and tokens per workgroup (the Makefile's -D for
 * each form); MM_PAIR: two groups' loads per step. */
#ifndef MM_NS
#define MM_NS 4
#endif
#ifndef MM_NT
#define MM_NT 16
#endif
#ifndef MM_TEAMS
#define MM_TEAMS 1
#endif
#define MM_SLOTS uint(MM_NS)
#define TEAMS uint(MM_TEAMS)
#define MM_TOKENS uint(MM_NT)
#define MM_ROWWISE_ROWS 64u
#define WG 64u
#define MM_STORE 0u
#define MM_ADD 1u
#define MM_GATED 2u

layout(local_size_x = 64 * MM_TEAMS) in;

/* Up to three matrices, picked by a workgroup-uniform index; Q8_0 reads
 * aligned rows as uvec4s through the second view. */
layout(std430, binding = 0) readonly buffer WBuf { uint w[]; } W[3];
layout(std430, binding = 0) readonly buffer WBuf4 { uvec4 w4[]; } W4[3];
#define WM W[m].w
/* X twice: as floats, and as vec4s for rows whose width is a multiple
 * of 4 (all quantized ones). */
layout(std430, binding = 1) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) readonly buffer XBuf4 { vec4 x4[]; };
layout(std430, binding = 2) buffer YBuf { float y[]; } Y[3];
/* With MM_NORM: the norm's weights, one per column (as floats and vec4s);
 * bound but unread otherwise. */
layout(std430, binding = 3) readonly buffer NBuf { float nw[]; };
layout(std430, binding = 3) readonly buffer NBuf4 { vec4 nw4[]; };

layout(push_constant) uniform Push {
    uint n_cols, row_bytes, n_tokens, mode;
    uint n_rows[3];
    uint start[3];   /* first row group of matrix m; ~0u: no matrix m */
    uint use_gelu;
    float eps;       /* MM_NORM: the norm's epsilon */
    uint lanes;      /* MM_QX: lanes per row */
} pc;

/* ---- per weight type ----
 *   RUNS                      runs of 4 columns in a group
 *   n_groups()                groups in a row
 *   run_col(gi, r)            first column of run r of group gi
 *   group_values(m, off, gi, v)  the group's values in the row at byte
 *                             off of matrix m */

#if defined(WTYPE_F32) || defined(WTYPE_F16) || defined(WTYPE_BF16)

#define RUNS 2u
#define HAS_TAIL 1
uint n_groups() { return (pc.n_cols + 7u) / 8u; }
uint run_col(uint gi, uint r) { return 8u * gi + 4u * r; }

#if defined(WTYPE_F32)
/* Rows of f32 are always word aligned (row_bytes = 4 n_cols). */
void group_values(uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uint w0 = (off >> 2u) + 8u * gi;
    [[unroll]] for (uint r = 0u; r < RUNS; r++)
        v[r] = uintBitsToFloat(uvec4(WM[w0 + 4u * r], WM[w0 + 4u * r + 1u],
                                     WM[w0 + 4u * r + 2u],
                                     WM[w0 + 4u * r + 3u]));
}
float elem(uint m, uint off, uint c) { return uintBitsToFloat(WM[(off >> 2u) + c]); }

#else /* F16, BF16: 16 bytes per group, possibly half-word aligned */
void group_values(uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uint raw[4];
    uint b = off + 16u * gi;
    KK_LOAD_WORDS(WM, b, raw, 4u);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
#if defined(WTYPE_F16)
        v[r] = vec4(unpackHalf2x16(raw[2u * r]),
                    unpackHalf2x16(raw[2u * r + 1u]));
#else
        v[r] = uintBitsToFloat(uvec4(raw[2u * r] << 16u,
                                     raw[2u * r] & 0xffff0000u,
                                     raw[2u * r + 1u] << 16u,
                                     raw[2u * r + 1u] & 0xffff0000u));
#endif
    }
}
float elem(uint m, uint off, uint c)
{
    uint b = off + 2u * c;
#if defined(WTYPE_F16)
    return kk_f16_to_f32(KK_U16(WM, b));
#else
    return kk_bf16_to_f32(KK_U16(WM, b));
#endif
}
#endif

#elif defined(WTYPE_Q8_0)

/* Q8_0 as vk_model uploads it (vk_model_repack_rows): each row's blocks
 * { f16 d; i8 q[32]; } split into the row's quants, n_cols bytes, then its
 * scales, 2 bytes a block, in the same row_bytes. Group gi is quants
 * 16 gi .. 16 gi + 16 of block gi / 2: one aligned 16-byte load when rows
 * are 16-byte aligned (a memory-bound decode wants as many bytes in flight
 * per thread as it can get), four words when 4-byte aligned, else bytes.
 * Which of the three is row_form(), a constant inside the loop. */
#define RUNS 4u
#define HAS_FORMS 1
uint n_groups() { return pc.n_cols / 16u; }
uint run_col(uint gi, uint r) { return 16u * gi + 4u * r; }
uint row_form()
{
    return (pc.row_bytes & 15u) == 0u ? 0u : (pc.row_bytes & 3u) == 0u ? 1u
                                                                       : 2u;
}
/* The group's bytes as loaded (quants q, the scale's f16 bits d), and its
 * values from them: two steps, so that a form can load many groups before
 * it decodes any (MM_DECODE). */
#define HAS_RAW 1
void raw_group(uint form, uint m, uint off, uint gi, out uvec4 q, out uint d)
{
    uint bd = off + pc.n_cols + 2u * (gi >> 1u);
    d = KK_U16(WM, bd);
    if (form == 0u) {
        q = W4[m].w4[(off >> 4u) + gi];
    } else if (form == 1u) {
        const uint w0 = (off >> 2u) + 4u * gi;
        q = uvec4(WM[w0], WM[w0 + 1u], WM[w0 + 2u], WM[w0 + 3u]);
    } else {
        uint bq = off + 16u * gi, words[4];
        KK_LOAD_WORDS(WM, bq, words, 4u);
        q = uvec4(words[0], words[1], words[2], words[3]);
    }
}
void raw_values(uvec4 q, uint dbits, out vec4 v[RUNS])
{
    float d = kk_f16_to_f32(dbits);
    [[unroll]] for (uint r = 0u; r < RUNS; r++)
        v[r] = vec4(kk_sbyte(q[r], 0u), kk_sbyte(q[r], 1u),
                    kk_sbyte(q[r], 2u), kk_sbyte(q[r], 3u)) * d;
}
void group_values(uint form, uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uvec4 q;
    uint d;
    raw_group(form, m, off, gi, q, d);
    raw_values(q, d, v);
}

#elif defined(WTYPE_Q4_0)

/* { f16 d; u8 qs[16]; } = 18 bytes: x[j] = (lo nibble of qs[j] - 8) d,
 * x[j + 16] = (hi nibble - 8) d. Group k (0..3): qs[4k .. 4k+4), whose
 * low nibbles are columns 4k.. and high nibbles 16 + 4k.. */
#define RUNS 2u
uint n_groups() { return pc.n_cols / 8u; }
uint run_col(uint gi, uint r) { return 32u * (gi >> 2u) + 16u * r + 4u * (gi & 3u); }
void group_values(uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uint b = off + (gi >> 2u) * 18u;
    float d = kk_f16_to_f32(KK_U16(WM, b));
    uint bq = b + 2u + 4u * (gi & 3u);
    uint q = KK_U32(WM, bq);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        ivec4 n = ivec4((uvec4(q) >> (uvec4(0u, 8u, 16u, 24u) + 4u * r)) & 0xfu);
        v[r] = vec4(n - 8) * d;
    }
}

#elif defined(WTYPE_Q5_0)

/* { f16 d; u32 qh; u8 qs[16]; } = 22 bytes: as Q4_0 with bit j of qh as
 * the fifth bit of value j, offset 16. */
#define RUNS 2u
uint n_groups() { return pc.n_cols / 8u; }
uint run_col(uint gi, uint r) { return 32u * (gi >> 2u) + 16u * r + 4u * (gi & 3u); }
void group_values(uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uint b = off + (gi >> 2u) * 22u;
    float d = kk_f16_to_f32(KK_U16(WM, b));
    uint bh = b + 2u;
    uint qh = KK_U32(WM, bh);
    uint k = gi & 3u;
    uint bq = b + 6u + 4u * k;
    uint q = KK_U32(WM, bq);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        uvec4 lo = (uvec4(q) >> (uvec4(0u, 8u, 16u, 24u) + 4u * r)) & 0xfu;
        uvec4 hi = (uvec4(qh) >> (uvec4(0u, 1u, 2u, 3u) + 16u * r + 4u * k)) & 1u;
        v[r] = vec4(ivec4(lo | (hi << 4u)) - 16) * d;
    }
}

#elif defined(WTYPE_Q4_K)

/* { f16 d, dmin; u8 scales[12]; u8 qs[128]; } = 144 bytes per 256 values.
 * qs[32c .. 32c+32) holds sub-block 2c in its low nibbles and 2c+1 in its
 * high ones: x = d sc q - dmin m (one fma). Group (c, k): qs[32c + 4k ..]
 * (4 bytes), 32 groups per super-block. */
#define RUNS 2u
uint n_groups() { return pc.n_cols / 8u; }
uint run_col(uint gi, uint r)
{
    return 256u * (gi >> 5u) + 64u * ((gi >> 3u) & 3u) + 32u * r + 4u * (gi & 7u);
}

/* Byte k (0..11) of the 12 scale bytes held in words s0, s1, s2
 * (selects, not an indexed array: that would go to local memory). */
uint scale_byte(uint s0, uint s1, uint s2, uint k)
{
    uint word = k < 4u ? s0 : k < 8u ? s1 : s2;
    return kk_byte(word, k & 3u);
}

/* quant.c's q4_k_scale_min: 6-bit scale and min of sub-block j. */
void scale_min(uint s0, uint s1, uint s2, uint j, out uint sc, out uint m)
{
    if (j < 4u) {
        sc = scale_byte(s0, s1, s2, j) & 63u;
        m = scale_byte(s0, s1, s2, j + 4u) & 63u;
    } else {
        sc = (scale_byte(s0, s1, s2, j + 4u) & 0xfu) |
             ((scale_byte(s0, s1, s2, j - 4u) >> 6u) << 4u);
        m = (scale_byte(s0, s1, s2, j + 4u) >> 4u) |
            ((scale_byte(s0, s1, s2, j) >> 6u) << 4u);
    }
}

void group_values(uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uint c = (gi >> 3u) & 3u;
    uint b = off + (gi >> 5u) * 144u;
    float d = kk_f16_to_f32(KK_U16(WM, b));
    uint bm = b + 2u;
    float dmin = kk_f16_to_f32(KK_U16(WM, bm));
    uint s[3];
    uint bs = b + 4u;
    KK_LOAD_WORDS(WM, bs, s, 3u);
    uint bq = b + 16u + 32u * c + 4u * (gi & 7u);
    uint q = KK_U32(WM, bq);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        uint sc, m;
        scale_min(s[0], s[1], s[2], 2u * c + r, sc, m);
        uvec4 n = (uvec4(q) >> (uvec4(0u, 8u, 16u, 24u) + 4u * r)) & 0xfu;
        /* one explicit fma: a product left next to a sum may be fused by
         * one compilation and not another (and the unrolled copies lose
         * `precise`), and every form must give a row the same bits */
        v[r] = fma(vec4(d * float(sc)), vec4(n), vec4(-(dmin * float(m))));
    }
}

#elif defined(WTYPE_Q6_K)

/* { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } = 210 bytes per 256.
 * Half h (0, 1) covers values 128h..128h+127; its l = 0..31 give the four
 * values l, l+32, l+64, l+96 from ql[64h + l], ql[64h + l + 32] and
 * qh[32h + l], with scales s[8h + l/16 + 2r]. Group (h, k): l = 4k..4k+3,
 * 16 values in four runs; 16 groups per super-block. */
#define RUNS 4u
uint n_groups() { return pc.n_cols / 16u; }
uint run_col(uint gi, uint r)
{
    return 256u * (gi >> 4u) + 128u * ((gi >> 3u) & 1u) + 32u * r + 4u * (gi & 7u);
}
void group_values(uint m, uint off, uint gi, out vec4 v[RUNS])
{
    uint h = (gi >> 3u) & 1u, k = gi & 7u;
    uint b = off + (gi >> 4u) * 210u;
    uint bd = b + 208u;
    float d = kk_f16_to_f32(KK_U16(WM, bd));
    uint b0 = b + 64u * h + 4u * k, b1 = b0 + 32u;
    uint bh = b + 128u + 32u * h + 4u * k;
    uint l0 = KK_U32(WM, b0), l1 = KK_U32(WM, b1), qh = KK_U32(WM, bh);
    const uvec4 sh = uvec4(0u, 8u, 16u, 24u);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        uint bs = b + 192u + 8u * h + (k >> 2u) + 2u * r;
        int sc = bitfieldExtract(int(KK_U8(WM, bs)), 0, 8);
        uint lw = (r & 1u) != 0u ? l1 : l0;
        uvec4 lo = (uvec4(lw) >> (sh + ((r & 2u) != 0u ? 4u : 0u))) & 0xfu;
        uvec4 hi = (uvec4(qh) >> (sh + 2u * r)) & 3u;
        v[r] = (d * float(sc)) * vec4(ivec4(lo | (hi << 4u)) - 32);
    }
}

#else
#error "matmul.comp: define one WTYPE_<T>"
#endif

/* ---- the input: x, or x normed ---- */

#ifdef MM_NORM
#include "norm.glsl"

/* The workgroup's tokens' RMS scales (token t0 + t at t), and the lanes'
 * sums of squares of NORM_BATCH tokens at a time on the way there. */
#define NORM_BATCH 4u
shared float norm_part[NORM_LANES * NORM_BATCH];
shared float norm_scale[MM_TOKENS];

/* norm_scale for tokens t0 .. t0 + nt, as rmsnorm.comp computes them:
 * every thread of the workgroup takes part (barriers), before any weight
 * is read. */
void norm_scales(uint t0, uint nt)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint threads = gl_WorkGroupSize.x;
    for (uint c = 0u; c < nt; c += NORM_BATCH) {
        /* entry e: lane e % NORM_LANES of token c + e / NORM_LANES; a
         * subgroup's entries are one token's (threads is a multiple of
         * NORM_LANES) */
        for (uint e = tid; e < NORM_LANES * NORM_BATCH; e += threads) {
            const uint t = c + e / NORM_LANES;
            const float s = t < nt ? norm_lane_sum((t0 + t) * pc.n_cols,
                                                   pc.n_cols, e % NORM_LANES)
                                   : 0.0;
            NORM_PUT(norm_part, (e / NORM_LANES) * NORM_LANES, e % NORM_LANES,
                     s)
        }
        barrier();
        if (tid < NORM_BATCH && c + tid < nt) {
            precise float scale;
            NORM_SCALE(norm_part, tid * NORM_LANES, pc.n_cols, pc.eps, scale)
            norm_scale[c + tid] = scale;
        }
        barrier();
    }
}

/* Value(s) at col of token t's row, normed: (x * scale) * w, rmsnorm's
 * order. */
float normed(uint t, uint col, float v)
{
    precise float h = v * norm_scale[t % MM_TOKENS];
    return h * nw[col];
}
vec4 normed4(uint t, uint col, vec4 v)
{
    precise vec4 h = v * norm_scale[t % MM_TOKENS];
    return h * nw4[col >> 2u];
}
#else
void norm_scales(uint t0, uint nt) {}
float normed(uint t, uint col, float v) { return v; }
vec4 normed4(uint t, uint col, vec4 v) { return v; }
#endif

/* ---- the product ---- */

/* x[t][col .. col+4), normed with MM_NORM */
vec4 load_x4(uint t, uint col)
{
#ifdef HAS_TAIL
    if (col >= pc.n_cols)
        return vec4(0.0);
    if ((pc.n_cols & 3u) != 0u) {
        /* rows of x not 16-byte aligned: value by value, within the row */
        vec4 v = vec4(0.0);
        [[unroll]] for (uint i = 0u; i < 4u; i++)
            if (col + i < pc.n_cols)
                v[i] = normed(t, col + i, x[t * pc.n_cols + col + i]);
        return v;
    }
#endif
    return normed4(t, col, x4[(t * pc.n_cols + col) >> 2u]);
}

/* The values of group gi of the row at byte off of matrix m, read in
 * form `form` (row_form(): pass it as a constant). The partial last group
 * of an f32/f16/bf16 row: its values one by one, zeros after. */
#ifndef HAS_FORMS
uint row_form() { return 0u; }
#endif
void values(uint form, uint m, uint off, uint gi, out vec4 v[RUNS])
{
#ifdef HAS_TAIL
    const uint n = min(8u, pc.n_cols - 8u * gi);
    if (n < 8u) {
        [[unroll]] for (uint r = 0u; r < RUNS; r++) {
            v[r] = vec4(0.0);
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                if (4u * r + i < n)
                    v[r][i] = elem(m, off, run_col(gi, r) + i);
        }
        return;
    }
#endif
#ifdef HAS_FORMS
    group_values(form, m, off, gi, v);
#else
    group_values(m, off, gi, v);
#endif
}

/* One group's products for one token: a single fma chain, so that its
 * value does not depend on how the compiler schedules a batch. */
float group_dot(vec4 v[RUNS], vec4 xv[RUNS])
{
    precise float s = v[0].x * xv[0].x;
    s = fma(v[0].y, xv[0].y, s);
    s = fma(v[0].z, xv[0].z, s);
    s = fma(v[0].w, xv[0].w, s);
    [[unroll]] for (uint r = 1u; r < RUNS; r++) {
        s = fma(v[r].x, xv[r].x, s);
        s = fma(v[r].y, xv[r].y, s);
        s = fma(v[r].z, xv[r].z, s);
        s = fma(v[r].w, xv[r].w, s);
    }
    return s;
}

/* The matrix of row group g: groups are numbered through the matrices in
 * order (pc.start). */
uint matrix_of(uint g)
{
    return g >= pc.start[2] ? 2u : g >= pc.start[1] ? 1u : 0u;
}

/* The output sum for token t of the product's row r of matrix m (for
 * MM_GATED, gate and up sums of row r): stored as the mode says. */
void store_sum(uint m, uint r, uint t, float sum)
{
    const uint i = t * pc.n_rows[m] + r;
    if (pc.mode == MM_ADD)
        Y[m].y[i] = Y[m].y[i] + sum;
    else
        Y[m].y[i] = sum;
}

void store_gated(uint r, uint t, float gate, float up)
{
    Y[0].y[t * pc.n_rows[0] + r] = kk_gated(gate, up, pc.use_gelu != 0u);
}

/* Where a workgroup's (or team's) MM_SLOTS slots read: matrix and byte
 * offset of the row. */
struct slots {
    uint mat[MM_SLOTS], off[MM_SLOTS];
};

/* The slots of the rows from r0 of matrix m (rows rows; MM_GATED: rows
 * r0 .. of both matrices, gate and up in turn). Slots past the last row
 * read the last row again (never past it). */
slots slots_of(uint m, uint r0, uint rows, bool gated)
{
    slots sl;
    [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++) {
        const uint r = gated ? r0 + s / 2u : r0 + s;
        sl.mat[s] = gated ? s % 2u : m;
        sl.off[s] = min(r, rows - 1u) * pc.row_bytes;
    }
    return sl;
}

/* F(t) for each of the MM_TOKENS (16) tokens. */
#define TOKENS_16(F)                                                         \
    F(0u) F(1u) F(2u) F(3u) F(4u) F(5u) F(6u) F(7u)                          \
    F(8u) F(9u) F(10u) F(11u) F(12u) F(13u) F(14u) F(15u)


/* ---- x as Q8_0 blocks (the int8 forms) ----
 * Each block of 32 values of x is quantized as the CPU's Q8_0 x is: amax,
 * q = round-to-even(v * 127 / amax), scale amax / 127. */

/* 1 / a (a > 0) from steps whose results IEEE fixes (a guess from a's
 * bits, then Newton steps as fmas): the same bits in every shader and
 * form, whatever a compiler makes of a division. */
float q8_recip(float a)
{
    precise float y = uintBitsToFloat(0x7ef311c3u - floatBitsToUint(a));
    [[unroll]] for (uint i = 0u; i < 3u; i++) {
        precise float e = fma(-a, y, 1.0);
        y = fma(y, e, y);
    }
    return y;
}

/* 127 / amax, the factor that quantizes a block whose largest magnitude
 * is amax (0 for a block of zeros). */
float q8_factor(float amax)
{
    precise float id = amax > 0.0 ? 127.0 * q8_recip(amax) : 0.0;
    return id;
}

/* v * id rounded to even, as a byte. */
uint q8_quant(float v, float id)
{
    precise float p = v * id;
    return uint(int(roundEven(p))) & 0xffu;
}

/* Four values quantized, as one word of packed bytes (first value in the
 * low byte). */
uint q8_pack4(vec4 v, float id)
{
    return q8_quant(v.x, id) | q8_quant(v.y, id) << 8u |
           q8_quant(v.z, id) << 16u | q8_quant(v.w, id) << 24u;
}

#if defined(MM_DECODE)

#if MM_NS != 4 || MM_NT != 1
#error "matmul.comp: MM_DECODE is one token in 4 slots"
#endif
#define DEC_SG 32u     /* the subgroup width this form is for */
#define DEC_CHUNK 4u   /* groups per slot whose loads go together */

/* Row sets (of `per` rows) in the dispatch: through the last matrix. */
uint n_sets(uint per)
{
    uint total = 0u;
    [[unroll]] for (uint m = 0u; m < 3u; m++)
        if (pc.start[m] != ~0u)
            total = pc.start[m] + (pc.n_rows[m] + per - 1u) / per;
    return total;
}

/* One row set's sums: lane `lane`'s groups and lane + 32's, each in order
 * (group gi = lane + 32 k: even k is lane's, odd k lane + 32's), DEC_CHUNK
 * values of k at a time; a group past the row's end loads the last one
 * again and is not summed (a select after the loads). */
void set_sums(const uint form, slots sl, uint lane, out float a[MM_SLOTS],
              out float b[MM_SLOTS])
{
    const uint ng = n_groups();
    [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++) {
        a[s] = 0.0;
        b[s] = 0.0;
    }
    for (uint k0 = 0u; DEC_SG * k0 < ng; k0 += DEC_CHUNK) {
#ifdef HAS_RAW
        /* every load of the chunk first, as loaded, then the sums: the
         * compiler otherwise waits for each step's loads in turn */
        uvec4 q[DEC_CHUNK * MM_SLOTS];
        uint d[DEC_CHUNK * MM_SLOTS];
        [[unroll]] for (uint i = 0u; i < DEC_CHUNK; i++) {
            const uint gi = min(lane + DEC_SG * (k0 + i), ng - 1u);
            [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++)
                raw_group(form, sl.mat[s], sl.off[s], gi, q[i * MM_SLOTS + s],
                          d[i * MM_SLOTS + s]);
        }
#endif
        [[unroll]] for (uint i = 0u; i < DEC_CHUNK; i++) {
            const uint g = lane + DEC_SG * (k0 + i);
            const bool has = g < ng;
            const uint gi = min(g, ng - 1u);
            vec4 v[MM_SLOTS][RUNS];
            [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++)
#ifdef HAS_RAW
                raw_values(q[i * MM_SLOTS + s], d[i * MM_SLOTS + s], v[s]);
#else
                values(form, sl.mat[s], sl.off[s], gi, v[s]);
#endif
            vec4 xv[RUNS];
            [[unroll]] for (uint r = 0u; r < RUNS; r++)
                xv[r] = load_x4(0u, run_col(gi, r));
            [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++) {
                const float p = group_dot(v[s], xv);
                if ((i & 1u) == 0u)
                    a[s] = has ? a[s] + p : a[s];
                else
                    b[s] = has ? b[s] + p : b[s];
            }
        }
    }
}

/* Each subgroup: its row sets in turn, then each slot's total and its
 * store by one lane. No barrier after norm_scales: subgroups part ways. */
void main()
{
    const uint lane = gl_SubgroupInvocationID;
    const bool gated = pc.mode == MM_GATED;
    const uint per = gated ? MM_SLOTS / 2u : MM_SLOTS;
    const uint total = n_sets(per);
    norm_scales(0u, 1u);   /* the whole workgroup, before any leaves */
    const uint stride = gl_NumWorkGroups.x * gl_NumSubgroups;
    for (uint set = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
         set < total; set += stride) {
        const uint m = matrix_of(set);
        const uint r0 = (set - pc.start[m]) * per, rows = pc.n_rows[m];
        const slots sl = slots_of(m, r0, rows, gated);
        float a[MM_SLOTS], b[MM_SLOTS], sum[MM_SLOTS];
        const uint form = row_form();
        if (form == 0u)
            set_sums(0u, sl, lane, a, b);
        else if (form == 1u)
            set_sums(1u, sl, lane, a, b);
        else
            set_sums(2u, sl, lane, a, b);
        [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++)
            sum[s] = subgroupAdd(a[s]) + subgroupAdd(b[s]);
        [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++) {
            if (lane != s)
                continue;
            if (!gated) {
                if (r0 + s < rows)
                    store_sum(m, r0 + s, 0u, sum[s]);
            } else if (s % 2u == 0u && r0 + s / 2u < rows) {
                store_gated(r0 + s / 2u, 0u, sum[s], sum[s + 1u]);
            }
        }
    }
}

#elif defined(MM_QX)

/* The integer forms (matmul_qx1_q8_0, matmul_qx4_q8_0, matmul_qx8_q8_0,
 * matmul_qx8r2_q8_0 and their _norm_ forms: batches of 1, up to 4 and up
 * to 8 tokens, y-groups of 8 past that, -DQX_ROWS rows a unit;
 * vk_shaders.h says when they run). A product they take in decoding goes
 * through one of them in every verify batch too, so that a token gets the
 * same bits in each: x is quantized per block of 32 as the CPU's Q8_0
 * x is (q8_pack4), each block's product of weight and x quants is an exact
 * int32 sum (packed int8 dot products: whatever order the hardware adds
 * in, the sum is the same), and only the float steps after it need a fixed
 * order:
 *   lane j of a row's pc.lanes lanes takes the row's blocks j, j + lanes,
 *   ... in order, adding each block's sum times (weight scale * x scale)
 *   into its partial with one fma; the partials meet in a butterfly over
 *   the lanes (qx_sum: the same tree in every form). The host picks the
 *   lanes by the matrices' shape alone (vk_qx_lanes), so a matrix gets
 *   the same ones in every batch.
 * With MM_NORM, x is normed as rmsnorm does (norm.glsl) before it is
 * quantized.
 *
 * A workgroup first quantizes its tokens' x into shared memory, once, and
 * then streams rows: qx_units() x QX_R rows at a time (pc.lanes lanes on
 * QX_R rows each; a row's arithmetic is the same whatever QX_R is), row
 * sets of one matrix numbered as the other forms' groups, in turn over a
 * grid the host caps. Rows wider than a chunk of shared memory are taken a chunk of
 * x at a time. Against the float forms this moves a weight byte into the
 * product with a quarter of the instructions, and the x a token needs
 * comes from shared memory as a quarter of the bytes. */

#if !defined(WTYPE_Q8_0) || MM_TEAMS != 4
#error "matmul.comp: MM_QX is Q8_0 in workgroups of 4 teams"
#endif
#ifndef QX_ROWS
#define QX_ROWS 1
#endif
#define QX_R uint(QX_ROWS)                 /* rows a unit takes at once */
#define QX_QLANES 8u                       /* lanes per block quantized */
#define QX_INVOCATIONS (WG * TEAMS)
/* blocks of a row whose loads go together (QX_R rows' at once); for one
 * token 8 (one step a row of 2,048 values on 8 lanes) measured the same
 * as 4 on the H200: the output matrix 99.6 us against 100.1 */
#define QX_STEP (MM_NT == 1 ? 4u : 2u / QX_R)
#define QX_SLOTS (2u * QX_R)   /* a lane's rows; gated: gate's, then up's */
#if QX_ROWS != 1 && QX_ROWS != 2
#error "matmul.comp: QX_ROWS is 1 or 2"
#endif
#define QX_WORDS 4096u                     /* shared words of x quants */
#define QX_CB (QX_WORDS / (8u * MM_TOKENS))   /* blocks of x in a chunk */

/* OpSDotKHR (VK_KHR_shader_integer_dot_product; the backend runs these
 * forms only where the device has it) on two words of four int8 each.
 * glslang before 14 has no GL_EXT_integer_dot_product, so the instruction
 * is declared by number: 4450 OpSDotKHR, capabilities 6019 DotProductKHR
 * and 6018 DotProductInput4x8BitPackedKHR; format 0 is
 * PackedVectorFormat4x8Bit. */
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"],
                  capabilities = [6019, 6018], id = 4450)
int qx_sdot(uint a, uint b, spirv_literal int packed_vector_format);

/* The chunk's x quants and scales: words 4 h .. 4 h + 4 of block b of
 * token t at qx_q4[qx_at(t, h, b)], so that a lane reads a block's x as
 * two 16-byte loads (a quarter as many as word by word, though on the
 * H200 that changed nothing) and the lanes of a row, on blocks in a row,
 * read 16-byte words in a row (no bank conflicts). */
shared uvec4 qx_q4[QX_WORDS / 4u];
shared float qx_d[MM_TOKENS * QX_CB];
uint qx_at(uint t, uint h, uint b)
{
    return (2u * t + h) * QX_CB + b;
}

/* Units of pc.lanes lanes in a workgroup, each on QX_R rows at a time. */
uint qx_units() { return QX_INVOCATIONS / pc.lanes; }

/* The sum of v over a row's pc.lanes lanes, and the largest of v over a
 * block's QX_QLANES, as butterflies of subgroup shuffles (aligned runs of
 * lanes within a subgroup): every lane gets the same bits, since a + b is
 * b + a. */
float qx_sum(float v)
{
    precise float s = v;
    for (uint k = 1u; k < pc.lanes; k <<= 1u)
        s = s + subgroupShuffleXor(s, k);
    return s;
}
float qx_max(float v)
{
    float s = v;
    [[unroll]] for (uint k = 1u; k < QX_QLANES; k <<= 1u)
        s = max(s, subgroupShuffleXor(s, k));
    return s;
}

/* Quantizes blocks cb0 .. cb0 + nblk of tokens t0 .. t0 + nt (normed with
 * MM_NORM) into the chunk: a block per QX_QLANES lanes at a time, lane j
 * taking values 4 j .. 4 j + 4. Every invocation takes part. */
void qx_quantize(uint cb0, uint nblk, uint t0, uint nt)
{
    const uint j = gl_LocalInvocationID.x % QX_QLANES;
    for (uint i = gl_LocalInvocationID.x / QX_QLANES; i < nt * nblk;
         i += QX_INVOCATIONS / QX_QLANES) {
        const uint t = i / nblk, b = i % nblk;
        const vec4 v = load_x4(t0 + t, 32u * (cb0 + b) + 4u * j);
        const vec4 a = abs(v);
        const float amax = qx_max(max(max(a.x, a.y), max(a.z, a.w)));
        qx_q4[qx_at(t, j >> 2u, b)][j & 3u] = q8_pack4(v, q8_factor(amax));
        if (j == 0u) {
            precise float d = amax * (1.0 / 127.0);
            qx_d[t * QX_CB + b] = d;
        }
    }
}

/* Block b's quants of the row at byte off of matrix m (as raw_group's
 * two groups) and the f16 bits of its scale. */
void qx_block(uint form, uint m, uint off, uint b, out uvec4 lo, out uvec4 hi,
              out uint d)
{
    uint unused;
    raw_group(form, m, off, 2u * b, lo, d);
    raw_group(form, m, off, 2u * b + 1u, hi, unused);
}

/* Block b of the chunk times x's block b for each token, for the first
 * `slots` of the lane's rows (their blocks in lo, hi and d), added into p:
 * the exact int32 sum, then one fma. Each x word loaded serves every
 * slot (gate's rows and up's alike): with QX_R = 2, half as many reads of
 * shared memory per weight. */
void qx_add(uvec4 lo[QX_SLOTS], uvec4 hi[QX_SLOTS], uint dbits[QX_SLOTS],
            const uint slots, uint b, inout float p[QX_SLOTS][MM_NT])
{
    float dw[QX_SLOTS];
    [[unroll]] for (uint k = 0u; k < slots; k++)
        dw[k] = kk_f16_to_f32(dbits[k]);
    [[unroll]] for (uint t = 0u; t < MM_TOKENS; t++) {
        const uvec4 xl = qx_q4[qx_at(t, 0u, b)], xh = qx_q4[qx_at(t, 1u, b)];
        const float dx = qx_d[t * QX_CB + b];
        [[unroll]] for (uint k = 0u; k < slots; k++) {
            const int s = qx_sdot(lo[k].x, xl.x, 0) + qx_sdot(lo[k].y, xl.y, 0) +
                          qx_sdot(lo[k].z, xl.z, 0) + qx_sdot(lo[k].w, xl.w, 0) +
                          qx_sdot(hi[k].x, xh.x, 0) + qx_sdot(hi[k].y, xh.y, 0) +
                          qx_sdot(hi[k].z, xh.z, 0) + qx_sdot(hi[k].w, xh.w, 0);
            precise float sc = dw[k] * dx;
            precise float r = fma(float(s), sc, p[k][t]);
            p[k][t] = r;
        }
    }
}

/* Lane j's partials over the chunk's blocks j, j + lanes, ... (blocks cb0
 * .. cb0 + nblk of the rows): of the rows at bytes off[k] of matrix ma into
 * p[k] and, gated, of matrix mb into p[QX_R + k]. QX_STEP blocks' loads go
 * together; a block past the chunk loads its last one again and is not
 * added. The row form and `gated` are constants where this is called. */
void qx_sums(const uint form, uint ma, uint mb, const bool gated,
             uint off[QX_R], uint cb0, uint nblk, inout float p[QX_SLOTS][MM_NT])
{
    const uint lanes = pc.lanes, j = gl_LocalInvocationID.x % lanes;
    const uint slots = gated ? 2u * QX_R : QX_R;
    for (uint b0 = j; b0 < nblk; b0 += lanes * QX_STEP) {
        uvec4 lo[QX_STEP][QX_SLOTS], hi[QX_STEP][QX_SLOTS];
        uint d[QX_STEP][QX_SLOTS];
        [[unroll]] for (uint i = 0u; i < QX_STEP; i++) {
            const uint b = cb0 + min(b0 + lanes * i, nblk - 1u);
            [[unroll]] for (uint k = 0u; k < QX_R; k++) {
                qx_block(form, ma, off[k], b, lo[i][k], hi[i][k], d[i][k]);
                if (gated)
                    qx_block(form, mb, off[k], b, lo[i][QX_R + k],
                             hi[i][QX_R + k], d[i][QX_R + k]);
            }
        }
        [[unroll]] for (uint i = 0u; i < QX_STEP; i++) {
            if (b0 + lanes * i >= nblk)
                break;
            qx_add(lo[i], hi[i], d[i], slots, b0 + lanes * i, p);
        }
    }
}

/* qx_sums in the row form of this dispatch (a constant in each call). */
void qx_sums_any(uint ma, uint mb, const bool gated, uint off[QX_R], uint cb0,
                 uint nblk, inout float p[QX_SLOTS][MM_NT])
{
    const uint form = row_form();
    if (gated && form == 0u)
        qx_sums(0u, ma, mb, true, off, cb0, nblk, p);
    else if (gated && form == 1u)
        qx_sums(1u, ma, mb, true, off, cb0, nblk, p);
    else if (gated)
        qx_sums(2u, ma, mb, true, off, cb0, nblk, p);
    else if (form == 0u)
        qx_sums(0u, ma, mb, false, off, cb0, nblk, p);
    else if (form == 1u)
        qx_sums(1u, ma, mb, false, off, cb0, nblk, p);
    else
        qx_sums(2u, ma, mb, false, off, cb0, nblk, p);
}

/* Row sets of qx_units() x QX_R rows in the dispatch: through the last
 * matrix. */
uint qx_sets()
{
    const uint per = qx_units() * QX_R;
    uint total = 0u;
    [[unroll]] for (uint m = 0u; m < 3u; m++)
        if (pc.start[m] != ~0u)
            total = pc.start[m] + (pc.n_rows[m] + per - 1u) / per;
    return total;
}

void main()
{
    const uint unit = gl_LocalInvocationID.x / pc.lanes;
    const uint j = gl_LocalInvocationID.x % pc.lanes;
    const bool gated = pc.mode == MM_GATED;
    const uint t0 = gl_WorkGroupID.y * MM_TOKENS;
    const uint nt = min(MM_TOKENS, pc.n_tokens - t0);
    const uint nb = pc.n_cols / 32u;
    const uint chunks = (nb + QX_CB - 1u) / QX_CB;
    const uint total = qx_sets();
    /* a workgroup's turns: as many as its sets where no barrier is in the
     * loop, else the same number in every workgroup */
    const uint mine = gl_WorkGroupID.x < total % gl_NumWorkGroups.x ? 1u : 0u;
    const uint turns = chunks == 1u ? total / gl_NumWorkGroups.x + mine
                                    : (total + gl_NumWorkGroups.x - 1u) /
                                          gl_NumWorkGroups.x;
    /* The first turn's weights could be loaded before this prologue, which
     * they do not need; measured on the H200 (1B shape) with the loop in
     * one function per row form and `gated`: 128 registers instead of 88
     * (some spilled), the output matrix 90 us a decode step against 100,
     * but q/k/v and gate/up 11.4 and 18.5 against 10.7 and 17.2, decoding
     * 1.116-1.127 ms against 1.088-1.103 and verifying 16 tokens 4.4
     * against 3.4 (matmul_qx8r2_norm: 171 registers). */
    norm_scales(t0, nt);   /* barriers: every invocation */
    if (chunks == 1u) {
        qx_quantize(0u, nb, t0, nt);
        barrier();
    }
    for (uint k = 0u; k < turns; k++) {
        /* one row set per turn: a matrix's (workgroup-uniform); unit u
         * takes its rows u, u + units, ... */
        const uint set = min(gl_WorkGroupID.x + k * gl_NumWorkGroups.x,
                             total - 1u);
        const uint m = matrix_of(set);
        const uint r0 = (set - pc.start[m]) * qx_units() * QX_R + unit;
        const bool turn = gl_WorkGroupID.x + k * gl_NumWorkGroups.x < total;
        uint off[QX_R];
        [[unroll]] for (uint i = 0u; i < QX_R; i++)
            off[i] = min(r0 + i * qx_units(), pc.n_rows[m] - 1u) *
                     pc.row_bytes;
        float p[QX_SLOTS][MM_NT];
        [[unroll]] for (uint i = 0u; i < QX_SLOTS; i++)
            [[unroll]] for (uint t = 0u; t < MM_TOKENS; t++)
                p[i][t] = 0.0;
        for (uint c = 0u; c < chunks; c++) {
            const uint cb0 = c * QX_CB, nblk = min(QX_CB, nb - cb0);
            if (chunks > 1u) {
                barrier();   /* every row is done with the last chunk */
                qx_quantize(cb0, nblk, t0, nt);
                barrier();
            }
            qx_sums_any(gated ? 0u : m, 1u, gated, off, cb0, nblk, p);
        }
        [[unroll]] for (uint i = 0u; i < QX_R; i++) {
            const uint r = r0 + i * qx_units();
            [[unroll]] for (uint t = 0u; t < MM_TOKENS; t++) {
                const float sa = qx_sum(p[i][t]);
                const float sb = gated ? qx_sum(p[QX_R + i][t]) : 0.0;
                if (!turn || r >= pc.n_rows[m] || j != t || t >= nt)
                    continue;
                if (gated)
                    store_gated(r, t0 + t, sa, sb);
                else
                    store_sum(m, r, t0 + t, sa);
            }
        }
    }
}

#elif defined(MM_MMA)

/* The int8 tile forms (matmul_mma<rows>_q8_0: prefill's products on
 * devices with NVIDIA's int8 cooperative matrices of 16 x 8 x 32 on
 * 32-wide subgroups; vk_shaders.h says when each runs): a workgroup owns
 * 16 x MMA_BANDS rows (64, 32 or 16; MM_GATED: those rows of both
 * matrices) and 64 tokens, and walks the rows' blocks in order. Per block
 * its 256 invocations stage the rows' quants and scales and the 64 tokens'
 * x, quantized as the CPU's Q8_0 x is (amax, q = round-to-even(v * 127 /
 * amax), scale amax / 127), into shared memory; then each of the 8
 * subgroups (MMA_BANDS bands of 16 rows by 8 / MMA_BANDS sides of tokens)
 * multiplies its 16 rows by its tokens, int8 products of 16 x 8 x 32
 * (exact int32 sums), and adds each sum times its two scales into its
 * float partials, one fma a block. The forms differ in which workgroup
 * makes a sum, never in how. A token's bits depend only on its own x (its
 * quants, its exact integer sums, its blocks' steps in order), so a prompt
 * gets the same bits however it is cut into batches (test_vk_ops).
 *
 * Each weight byte is read once per 64 tokens. The blocks are staged
 * MMA_BLOCKS at a time in two alternating stages (one barrier a stage),
 * the next stage's loads issued before this one's products. The token
 * tiles of a row tile are neighbours in the grid (x), so they read its
 * weights while they are in L2. Which sum of a product tile a lane holds
 * is the driver's choice: the workgroup finds out once, by loading a tile
 * of the elements' own indices. On the H200 the 1B shape prefilled 256
 * tokens at 17,956-18,129 tok/s with 2 blocks a stage, 17,328-17,647 with
 * 1, 17,171-17,268 with 4 in a single stage (two barriers a stage), and
 * 9,094-9,158 in the form this replaced: 16 rows by 8 tokens a
 * workgroup, each quantizing its 8 tokens' x again. */

#if !defined(WTYPE_Q8_0) || MM_NT != 64 || MM_TEAMS != 4
#error "matmul.comp: MM_MMA is Q8_0 in tiles of 64 tokens, 4 teams"
#endif
#ifndef MMA_BANDS
#define MMA_BANDS 4      /* bands of 16 rows a workgroup (vk_mma_rows) */
#endif
#define MMA_M 16u
#define MMA_N 8u
#define MMA_SG 32u       /* the subgroup width this form is for */
#define MMA_ROWS (16u * MMA_BANDS)   /* a workgroup's rows */
#define MMA_TOKENS 64u   /* and tokens (VK_MMA_TOKENS) */
#define MMA_SIDES (8u / MMA_BANDS)   /* the 8 subgroups: bands x sides */
#define MMA_SIDE (MMA_TOKENS / MMA_SIDES)   /* a subgroup's tokens */
#define MMA_J (MMA_SIDE / MMA_N)     /* its product tiles per matrix */
#define MMA_LEN 4u       /* sums of a product tile per lane: 16 x 8 / 32 */
#define MMA_WORDS 8u     /* a block's 32 quants, in words */
#ifndef MMA_BLOCKS
#define MMA_BLOCKS 2     /* blocks staged at once */
#endif
#if MMA_BLOCKS != 1 && MMA_BLOCKS != 2
#error "matmul.comp: two stages of 3+ blocks pass 48 KiB of shared memory"
#endif
#define MMA_G uint(MMA_BLOCKS)
/* A row's (or token's) MMA_G blocks in shared memory: with two, padded by
 * 8 words so that neighbouring rows of a tile start 8 banks apart. */
#define MMA_STRIDE (MMA_G * MMA_WORDS + (MMA_G > 1u ? 8u : 0u))
/* Two stages of MMA_G blocks: the next one is put while this one is
 * multiplied, one barrier between. */
#define MMA_STAGES 2u
#define WTILE icoopmatNV<8, gl_ScopeSubgroup, 16, 32>
#define XTILE icoopmatNV<8, gl_ScopeSubgroup, 32, 8>
#define CTILE icoopmatNV<32, gl_ScopeSubgroup, 16, 8>

/* Stage s's MMA_G blocks: block g's quants of row r of matrix k at words
 * ((s * 2 + k) * MMA_ROWS + r) * MMA_STRIDE + 8 g .., its scale at
 * ((s * 2 + k) * MMA_G + g) * MMA_ROWS + r; token t's x quants at (s * 64
 * + t) * MMA_STRIDE + 8 g .., its scale at (s * MMA_G + g) * 64 + t. */
shared uint mma_wq[MMA_STAGES * 2u * MMA_ROWS * MMA_STRIDE];
shared float mma_dw[MMA_STAGES * 2u * MMA_G * MMA_ROWS];
shared uint mma_xq[MMA_STAGES * MMA_TOKENS * MMA_STRIDE];
shared float mma_xd[MMA_STAGES * MMA_G * MMA_TOKENS];
shared int mma_index[MMA_M * MMA_N];

/* What an invocation stages of one block: 8 quants (two words) of its row
 * of each matrix and the row's scale bits, 8 values of its token's x. */
struct mma_stage {
    uint qa0, qa1, qg0, qg1, da, dg;
    vec4 x0, x1;
};

/* Loads block b's share of invocation (token i, row i % MMA_ROWS, quarter
 * h): rows past the last read the last again, tokens past nt the last
 * token. (With fewer than 64 rows, several invocations load a row; one
 * puts it.) */
void mma_load(uint ma, uint mb, const bool gated, uint r0, uint rows, uint t0,
              uint nt, uint b, uint i, uint h, out mma_stage st)
{
    const uint off = min(r0 + i % MMA_ROWS, rows - 1u) * pc.row_bytes;
    const uint bq = off + 32u * b + 8u * h, bd = off + pc.n_cols + 2u * b;
    uint q[2];
    KK_LOAD_WORDS(W[ma].w, bq, q, 2u);
    st.qa0 = q[0];
    st.qa1 = q[1];
    st.da = KK_U16(W[ma].w, bd);
    if (gated) {
        KK_LOAD_WORDS(W[mb].w, bq, q, 2u);
        st.qg0 = q[0];
        st.qg1 = q[1];
        st.dg = KK_U16(W[mb].w, bd);
    } else {
        st.qg0 = st.qg1 = st.dg = 0u;
    }
    const uint tok = t0 + min(i, nt - 1u), c = 32u * b + 8u * h;
    st.x0 = load_x4(tok, c);
    st.x1 = load_x4(tok, c + 4u);
}

/* Puts a loaded share as block g of stage s, x quantized: the four
 * invocations of a token (neighbouring lanes) find its amax together. */
void mma_put(mma_stage st, const bool gated, uint s, uint g, uint i, uint h)
{
    const vec4 a = max(abs(st.x0), abs(st.x1));
    const float amax = subgroupClusteredMax(max(max(a.x, a.y), max(a.z, a.w)),
                                            4u);
    const float id = q8_factor(amax);
    const uint xw = (s * MMA_TOKENS + i) * MMA_STRIDE + g * MMA_WORDS + 2u * h;
    mma_xq[xw] = q8_pack4(st.x0, id);
    mma_xq[xw + 1u] = q8_pack4(st.x1, id);
    if (h == 0u) {
        precise float d = amax * (1.0 / 127.0);
        mma_xd[(s * MMA_G + g) * MMA_TOKENS + i] = d;
    }
    if (i >= MMA_ROWS)
        return;
    const uint wa =
        (s * 2u * MMA_ROWS + i) * MMA_STRIDE + g * MMA_WORDS + 2u * h;
    mma_wq[wa] = st.qa0;
    mma_wq[wa + 1u] = st.qa1;
    if (gated) {
        mma_wq[wa + MMA_ROWS * MMA_STRIDE] = st.qg0;
        mma_wq[wa + MMA_ROWS * MMA_STRIDE + 1u] = st.qg1;
    }
    if (h == 0u) {
        const uint dw = (s * 2u * MMA_G + g) * MMA_ROWS + i;
        mma_dw[dw] = kk_f16_to_f32(st.da);
        if (gated)
            mma_dw[dw + MMA_G * MMA_ROWS] = kk_f16_to_f32(st.dg);
    }
}

/* acc[i] += sum i of tile c (element index e[i]: row e / 8, token e % 8)
 * times its row's weight scale (at dw0 + row) and its token's x scale (at
 * xd0 + token), one fma each. */
void mma_add(inout float acc[MMA_J * MMA_LEN], uint j, CTILE c, CTILE e,
             uint dw0, uint xd0)
{
    [[unroll]] for (uint i = 0u; i < MMA_LEN; i++) {
        const uint el = uint(e[i]);
        precise float s = mma_dw[dw0 + (el >> 3u)] * mma_xd[xd0 + (el & 7u)];
        acc[j * MMA_LEN + i] = fma(float(c[i]), s, acc[j * MMA_LEN + i]);
    }
}

/* Block g of stage s: its products for this subgroup, rows 16 band .. + 16
 * of matrix 0 (a) and, for MM_GATED, matrix 1 (u), tokens MMA_SIDE side
 * .. + MMA_SIDE. */
void mma_products(const bool gated, uint s, uint g, uint band, uint side,
                  CTILE e, inout float a[MMA_J * MMA_LEN],
                  inout float u[MMA_J * MMA_LEN])
{
    WTILE ta, tg;
    const uint wa = (s * 2u * MMA_ROWS + MMA_M * band) * MMA_STRIDE +
                    g * MMA_WORDS;
    coopMatLoadNV(ta, mma_wq, wa, MMA_STRIDE, false);
    if (gated)
        coopMatLoadNV(tg, mma_wq, wa + MMA_ROWS * MMA_STRIDE, MMA_STRIDE,
                      false);
    const uint da = (s * 2u * MMA_G + g) * MMA_ROWS + MMA_M * band;
    [[unroll]] for (uint j = 0u; j < MMA_J; j++) {
        const uint t = MMA_SIDE * side + MMA_N * j;
        XTILE xb;
        coopMatLoadNV(xb, mma_xq,
                      (s * MMA_TOKENS + t) * MMA_STRIDE + g * MMA_WORDS,
                      MMA_STRIDE, true);
        const uint xd = (s * MMA_G + g) * MMA_TOKENS + t;
        mma_add(a, j, coopMatMulAddNV(ta, xb, CTILE(0)), e, da, xd);
        if (gated)
            mma_add(u, j, coopMatMulAddNV(tg, xb, CTILE(0)), e,
                    da + MMA_G * MMA_ROWS, xd);
    }
}

/* The workgroup's walk over the blocks, MMA_G at a time in alternate
 * stages: the next MMA_G's loads are in flight during this one's products,
 * and a stage is put again only after a barrier that every product of it
 * came before (gated is a constant where this is called, so each case is
 * compiled with no branch between its loads). Blocks past the row's end
 * load and stage its last block again and are not multiplied. */
void mma_sums(uint ma, uint mb, const bool gated, uint r0, uint rows, uint t0,
              uint nt, CTILE e, out float a[MMA_J * MMA_LEN],
              out float u[MMA_J * MMA_LEN])
{
    const uint i = gl_LocalInvocationID.x >> 2u;
    const uint h = gl_LocalInvocationID.x & 3u;
    const uint band = gl_SubgroupID % MMA_BANDS;
    const uint side = gl_SubgroupID / MMA_BANDS;
    const uint nb = pc.n_cols / 32u;
    [[unroll]] for (uint k = 0u; k < MMA_J * MMA_LEN; k++) {
        a[k] = 0.0;
        u[k] = 0.0;
    }
    mma_stage st[MMA_G];
    [[unroll]] for (uint g = 0u; g < uint(MMA_G); g++)
        mma_load(ma, mb, gated, r0, rows, t0, nt, min(g, nb - 1u), i, h,
                 st[g]);
    uint s = 0u;
    for (uint b0 = 0u; b0 < nb; b0 += MMA_G) {
        [[unroll]] for (uint g = 0u; g < uint(MMA_G); g++)
            mma_put(st[g], gated, s, g, i, h);
        barrier();
        [[unroll]] for (uint g = 0u; g < uint(MMA_G); g++)
            mma_load(ma, mb, gated, r0, rows, t0, nt,
                     min(b0 + MMA_G + g, nb - 1u), i, h, st[g]);
        [[unroll]] for (uint g = 0u; g < uint(MMA_G); g++)
            if (b0 + g < nb)
                mma_products(gated, s, g, band, side, e, a, u);
        s ^= 1u;
    }
}

void main()
{
    const uint group = gl_WorkGroupID.y;
    const bool gated = pc.mode == MM_GATED;
    const uint m = matrix_of(group);
    const uint r0 = (group - pc.start[m]) * MMA_ROWS, rows = pc.n_rows[m];
    const uint t0 = gl_WorkGroupID.x * MMA_TOKENS;
    if (r0 >= rows || t0 >= pc.n_tokens)
        return;
    const uint nt = min(MMA_TOKENS, pc.n_tokens - t0);
    const uint tid = gl_LocalInvocationID.x;
    if (tid < MMA_M * MMA_N)
        mma_index[tid] = int(tid);
    barrier();
    CTILE e;
    coopMatLoadNV(e, mma_index, 0u, MMA_N, false);

    float a[MMA_J * MMA_LEN], g[MMA_J * MMA_LEN];
    if (gated)
        mma_sums(0u, 1u, true, r0, rows, t0, nt, e, a, g);
    else
        mma_sums(m, m, false, r0, rows, t0, nt, e, a, g);
    const uint band = gl_SubgroupID % MMA_BANDS;
    const uint side = gl_SubgroupID / MMA_BANDS;
    [[unroll]] for (uint j = 0u; j < MMA_J; j++)
        [[unroll]] for (uint i = 0u; i < MMA_LEN; i++) {
            const uint el = uint(e[i]);
            const uint r = r0 + MMA_M * band + (el >> 3u);
            const uint t = MMA_SIDE * side + MMA_N * j + (el & 7u);
            if (t >= nt || r >= rows)
                continue;
            if (gated)
                store_gated(r, t0 + t, a[j * MMA_LEN + i], g[j * MMA_LEN + i]);
            else
                store_sum(m, r, t0 + t, a[j * MMA_LEN + i]);
        }
}

#elif defined(MM_ROWWISE)

/* acc[s * MM_TOKENS + t]: slot s (the row; MM_GATED: 0 gate, 1 up). */
float acc[2u * MM_TOKENS];

/* Token t of group gi of the row (and its up row), and token t's
 * results: spelled out per token, for acc to stay in registers. */
#define ROW_TOKEN(t)                                                         \
    if ((t) < nt) {                                                          \
        vec4 xv[RUNS];                                                       \
        [[unroll]] for (uint k = 0u; k < RUNS; k++)                          \
            xv[k] = load_x4(t0 + (t), run_col(gi, k));                       \
        acc[t] += group_dot(v[0], xv);                                       \
        if (gated)                                                           \
            acc[MM_TOKENS + (t)] += group_dot(v[1], xv);                     \
    }
#define STORE_TOKEN(t)                                                       \
    if ((t) < nt) {                                                          \
        if (gated)                                                           \
            store_gated(r, t0 + (t), acc[t], acc[MM_TOKENS + (t)]);          \
        else                                                                 \
            store_sum(m, r, t0 + (t), acc[t]);                               \
    }

void main()
{
    const uint group = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    const uint m = matrix_of(group);
    const uint r = (group - pc.start[m]) * MM_ROWWISE_ROWS +
                   gl_LocalInvocationID.x;
    const bool gated = pc.mode == MM_GATED;
    const uint t0 = gl_WorkGroupID.y * MM_TOKENS;
    const uint nt = min(MM_TOKENS, pc.n_tokens - t0);
    norm_scales(t0, nt);   /* the whole workgroup, before any leaves */
    if (r >= pc.n_rows[m])
        return;
    const uint off = r * pc.row_bytes;
    [[unroll]] for (uint j = 0u; j < 2u * MM_TOKENS; j++)
        acc[j] = 0.0;
    const uint ng = n_groups();
    for (uint gi = 0u; gi < ng; gi++) {
        vec4 v[2][RUNS];
        values(row_form(), m, off, gi, v[0]);
        if (gated)
            values(row_form(), 1u, off, gi, v[1]);
        TOKENS_16(ROW_TOKEN)
    }
    TOKENS_16(STORE_TOKEN)
}

#else

/* F(s) for each of the MM_SLOTS slots and F(t) for each of the MM_TOKENS
 * tokens: spelled out rather than loops, because glslc leaves loops this
 * size rolled, and acc indexed by a loop counter lives in memory, not
 * registers (that made the whole matmul 5x slower). */
#if MM_NS == 4
#define SLOTS(F) F(0u) F(1u) F(2u) F(3u)
#elif MM_NS == 2
#define SLOTS(F) F(0u) F(1u)
#else
#error "matmul.comp: MM_NS is 2 or 4"
#endif
#define TOKENS_0_3(F) F(0u) F(1u) F(2u) F(3u)
#define TOKENS_4_7(F) F(4u) F(5u) F(6u) F(7u)
#define TOKENS_8_11(F) F(8u) F(9u) F(10u) F(11u)
#define TOKENS_12_15(F) F(12u) F(13u) F(14u) F(15u)
#define TOKENS_0_7(F) TOKENS_0_3(F) TOKENS_4_7(F)
#define TOKENS_8_15(F) TOKENS_8_11(F) TOKENS_12_15(F)
#if MM_NT == 16
#define TOKENS(F) TOKENS_16(F)
#elif MM_NT == 8
#define TOKENS(F) TOKENS_0_7(F)
#elif MM_NT == 4
#define TOKENS(F) TOKENS_0_3(F)
#elif MM_NT == 1
#define TOKENS(F) F(0u)
#else
#error "matmul.comp: MM_NT is 1, 4, 8 or 16"
#endif

/* acc[s * MM_TOKENS + t]: this thread's partial sum for slot s, token
 * t0 + t. Slot s is row r0 + s of matrix m, or for MM_GATED row
 * r0 + s / 2 of matrix s % 2 (r0: the thread's team's first row). */
float acc[MM_SLOTS * MM_TOKENS];

/* Each subgroup's sums (subgroups of 4+ lanes: at most WG MM_TEAMS / 4
 * of them), RED_FLOATS floats. */
#define SUMS (MM_SLOTS * MM_TOKENS)
#define RED_FLOATS ((WG * TEAMS / 4u) * SUMS)

#ifdef MM_XT
/* The x tile: MM_XT tokens of the WG groups the team's threads take
 * next, entry (t, r, g) (run r of group g) at xs[(t RUNS + r) WG + g],
 * so that a team's threads read a run from consecutive addresses (no
 * shared-memory bank conflicts). Once the tiles are done the subgroups'
 * sums go here too: one array, 16 KiB for 4 tokens of Q8_0, all that
 * Vulkan promises (lavapipe allows 32). */
#define X_TILE (uint(MM_XT) * RUNS * WG)
shared vec4 xs[X_TILE > RED_FLOATS / 4u ? X_TILE : RED_FLOATS / 4u];
void red_put(uint i, float v) { xs[i >> 2u][i & 3u] = v; }
float red_get(uint i) { return xs[i >> 2u][i & 3u]; }
#else
shared float red[RED_FLOATS];
void red_put(uint i, float v) { red[i] = v; }
float red_get(uint i) { return red[i]; }
#endif

#define LOAD_SLOT(s) values(form, sl.mat[s], sl.off[s], gi, v[s]);
#define LOAD_SLOT_NEXT(s) values(form, sl.mat[s], sl.off[s], gi + WG, v2[s]);

#ifndef MM_XT

/* Token t of a group: acc[., t] += the slots' values times x[t0 + t].
 * Tokens past nt (a short batch) repeat the last one and their sums are
 * never used: no branch between the tokens' x loads, so they are all in
 * flight together (a branch per token made each a round trip of its own,
 * as with the weight loads). */
#define ACCUMULATE_TOKEN(t)                                                  \
    {                                                                        \
        vec4 xv[RUNS];                                                       \
        [[unroll]] for (uint k = 0u; k < RUNS; k++)                          \
            xv[k] = load_x4(t0 + min((t), nt - 1u), run_col(gi, k));         \
        [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++)                      \
            acc[s * MM_TOKENS + (t)] += group_dot(v[s], xv);                 \
    }

/* acc += group gi of every slot's row times the nt tokens from t0. */
void accumulate(const uint form, uint gi, uint t0, uint nt, slots sl)
{
    vec4 v[MM_SLOTS][RUNS];
    SLOTS(LOAD_SLOT)
    TOKENS(ACCUMULATE_TOKEN)
}

/* The thread's groups gi = tid, tid + WG, ... in that order. With MM_PAIR
 * two of them at a time: both groups' loads first, then the sums, still
 * group gi's before group gi + WG's. */
void accumulate_row(const uint form, uint t0, uint nt, slots sl)
{
    const uint ng = n_groups();
    uint gi = gl_LocalInvocationID.x % WG;
#ifdef MM_PAIR
    for (; gi + WG < ng; gi += 2u * WG) {
        vec4 v[MM_SLOTS][RUNS], v2[MM_SLOTS][RUNS];
        SLOTS(LOAD_SLOT)
        SLOTS(LOAD_SLOT_NEXT)
        TOKENS(ACCUMULATE_TOKEN)
        v = v2;
        gi += WG;
        TOKENS(ACCUMULATE_TOKEN)
        gi -= WG;
    }
#endif
    for (; gi < ng; gi += WG)
        accumulate(form, gi, t0, nt, sl);
}

#else /* MM_XT: x through shared memory */

/* Stages tokens t0 + tk .. t0 + tk + MM_XT (past nt: the last one again)
 * of groups g0 .. g0 + WG into xs. The workgroup's threads take the
 * entries in x's memory order (run fastest), so the loads coalesce;
 * groups past the row's last read its last group (never used). An entry
 * past the tile repeats the last one (same value, same place). Each entry
 * is stored as soon as it is loaded: loading all of a thread's entries
 * first (as loading the next tile during this one's sums must) made
 * verifying 9..16 tokens, which the 8-token form takes at 128 registers
 * already, 11% slower on the H200 (1B shape, 16 tokens: 3.78-3.86 ms
 * against 3.39-3.46). Loading the next tile and the next groups' weights
 * a step ahead in t8s2 alone (80 registers) gave 8 tokens 2.26-2.30 ms
 * against 2.27-2.30: the wait is not in these loads. */
void stage_x(uint g0, uint tk, uint t0, uint nt)
{
    const uint ng = n_groups(), threads = WG * TEAMS;
    [[unroll]] for (uint k = 0u; k < (X_TILE + threads - 1u) / threads; k++) {
        const uint e = min(k * threads + gl_LocalInvocationID.x, X_TILE - 1u);
        const uint t = e / (RUNS * WG), g = (e / RUNS) % WG, r = e % RUNS;
        const uint gi = min(g0 + g, ng - 1u);
        xs[(t * RUNS + r) * WG + g] =
            load_x4(t0 + min(tk + t, nt - 1u), run_col(gi, r));
    }
}

/* Token t (tile tk's) of group gi: as ACCUMULATE_TOKEN with x from the
 * tile, and only where the group is in the row (has): a select after the
 * loads, not a branch between them. */
#define ACCUMULATE_TILE_TOKEN(t)                                             \
    {                                                                        \
        vec4 xv[RUNS];                                                       \
        [[unroll]] for (uint k = 0u; k < RUNS; k++)                          \
            xv[k] = xs[(((t) - tk) * RUNS + k) * WG + lane];                 \
        [[unroll]] for (uint s = 0u; s < MM_SLOTS; s++) {                    \
            const uint j = s * MM_TOKENS + (t);                              \
            const float p = group_dot(v[s], xv);                             \
            acc[j] = has ? acc[j] + p : acc[j];                              \
        }                                                                    \
    }
/* One tile: its tokens (TOKENS_a_b) from tk. The first barrier keeps the
 * last tile until every thread has read it. */
#define TILE_STEP(tk_, TOKENS_OF)                                            \
    {                                                                        \
        const uint tk = (tk_);                                               \
        barrier();                                                           \
        stage_x(g0, tk, t0, nt);                                             \
        barrier();                                                           \
        TOKENS_OF(ACCUMULATE_TILE_TOKEN)                                     \
    }
#if MM_XT == MM_NT
#define TILE_STEPS TILE_STEP(0u, TOKENS)
#elif MM_XT == 4 && MM_NT == 8
#define TILE_STEPS TILE_STEP(0u, TOKENS_0_3) TILE_STEP(4u, TOKENS_4_7)
#elif MM_XT == 8 && MM_NT == 16
#define TILE_STEPS                                                           \
    TILE_STEP(0u, TOKENS_0_7) TILE_STEP(8u, TOKENS_8_15)
#elif MM_XT == 4 && MM_NT == 16
#define TILE_STEPS                                                           \
    TILE_STEP(0u, TOKENS_0_3) TILE_STEP(4u, TOKENS_4_7)                      \
    TILE_STEP(8u, TOKENS_8_11) TILE_STEP(12u, TOKENS_12_15)
#else
#error "matmul.comp: MM_XT is MM_NT, or 4 or 8 below it"
#endif

/* The same groups per thread (gi = lane, lane + WG, ...) in the same
 * order as without tiles, a team's x from the tile all teams share:
 * every x value loaded once per workgroup serves MM_TEAMS x MM_SLOTS
 * rows instead of MM_SLOTS. Every thread runs every tile (barriers). */
void accumulate_row(const uint form, uint t0, uint nt, slots sl)
{
    const uint ng = n_groups(), lane = gl_LocalInvocationID.x % WG;
    for (uint g0 = 0u; g0 < ng; g0 += WG) {
        const bool has = g0 + lane < ng;
        const uint gi = min(g0 + lane, ng - 1u);
        vec4 v[MM_SLOTS][RUNS];
        SLOTS(LOAD_SLOT)
        TILE_STEPS
    }
    barrier(); /* the subgroups' sums go where the tiles were */
}

#endif /* MM_XT */

/* Team `team`'s total of acc[j]: its subgroups' sums, in order. A team's
 * threads are whole subgroups (subgroups of at most WG lanes, numbered
 * in invocation order). */
float total(uint team, uint j)
{
    const uint per_team = gl_NumSubgroups / TEAMS, first = team * per_team;
    float s = red_get(first * SUMS + j);
    for (uint k = 1u; k < per_team; k++)
        s += red_get((first + k) * SUMS + j);
    return s;
}

/* Each subgroup's sums of acc, for the tokens in use, into red. */
void reduce(uint nt)
{
    [[unroll]] for (uint j = 0u; j < SUMS; j++) {
        if (j % MM_TOKENS < nt) {
            float s = subgroupAdd(acc[j]);
            if (subgroupElect())
                red_put(gl_SubgroupID * SUMS + j, s);
        }
    }
    barrier();
}

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint lane = tid % WG, team = tid / WG;
    const uint group = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    const bool gated = pc.mode == MM_GATED;
    const uint m = matrix_of(group);
    const uint per = gated ? MM_SLOTS / 2u : MM_SLOTS;
    const uint first = (group - pc.start[m]) * per * TEAMS;
    const uint r0 = first + team * per;
    const uint rows = pc.n_rows[m];
    if (first >= rows)
        return;
    const uint t0 = gl_WorkGroupID.y * MM_TOKENS;
    const uint nt = min(MM_TOKENS, pc.n_tokens - t0);
    norm_scales(t0, nt);

    const slots sl = slots_of(m, r0, rows, gated);
    [[unroll]] for (uint j = 0u; j < SUMS; j++)
        acc[j] = 0.0;
    const uint form = row_form();
    if (form == 0u)
        accumulate_row(0u, t0, nt, sl);
    else if (form == 1u)
        accumulate_row(1u, t0, nt, sl);
    else
        accumulate_row(2u, t0, nt, sl);
    reduce(nt);

    if (lane >= SUMS)
        return;
    const uint s = lane / MM_TOKENS, t = lane % MM_TOKENS;
    if (t >= nt)
        return;
    if (!gated) {
        if (r0 + s < rows)
            store_sum(m, r0 + s, t0 + t, total(team, lane));
    } else if (s % 2u == 0u && r0 + s / 2u < rows) {
        store_gated(r0 + s / 2u, t0 + t, total(team, lane),
                    total(team, lane + MM_TOKENS));
    }
}

#endif
