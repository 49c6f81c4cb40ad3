/* matmul.comp — y[t][r] = sum_c W[r][c] x[t][c] for one weight type
 * (compiled once per -DWTYPE_<T>; contract in engine/vulkan/vk_shaders.h).
 *
 * Each row is cut into groups of 8 values (16 for Q6_K), each a few bytes
 * of one block, given as runs of 4 consecutive columns; neighbouring
 * threads take neighbouring groups, so they read neighbouring bytes, and
 * x is read as vec4s a warp reads together. Block layouts are ggml's,
 * decoded as engine/quant.c's dequantize_row does (same scale products).
 * Rows may start anywhere in a word (Q8_0 with an odd number of blocks,
 * f16 rows of an odd width): weights are read through the byte helpers
 * below, which load a second word only where a value straddles one.
 *
 * One token (decode, memory-bound): a workgroup owns MM_ROWS rows, each
 * 32-thread slice SLICE_ROWS of them, walked by the slice alone with
 * DECODE_STEP groups per thread loaded before any is used; the slice adds
 * its partials with subgroupAdd where the device runs 4 full subgroups of
 * 32 (NVIDIA), else through shared memory. Batches (up to MM_TOKENS
 * tokens): a workgroup owns MM_BATCH_ROWS = 2 rows, its 128 threads take
 * the groups in turn, each x vec4 serves both rows, tokens go MM_BATCH at
 * a time, and a shared-memory reduction adds the partials.
 *
 * F32/F16/BF16 rows of a width that is not a multiple of 8 end in a
 * partial group, read value by value; with a width that is not a multiple
 * of 4, x is read value by value too. Quantized rows are whole blocks.
 * (The unrolled token loop makes big shaders: lavapipe's LLVM takes
 * seconds to compile each, once per driver shader cache.)
 *
 * With -DMM_ROWWISE (matmul_rows_<t>) each invocation computes one whole
 * row instead, for CPU-backed devices; see MM_ROWWISE_ROWS. Row groups
 * past the device's grid limit spill into z in both variants.
 *
 * Measured on an H200 (14336 x 4096, one token): Q8_0 51 us, Q4_0 38 us,
 * F16 120 us, Q4_K 83 us, Q6_K 71 us (2 rows per workgroup: 64, 50, 152,
 * 115, 74). 4 rows a slice, 1 row a slice, or twice the groups in flight
 * were no faster. */
#version 450

#extension GL_KHR_shader_subgroup_arithmetic : require

#include "common.glsl"

/* MM_ROWS, MM_BATCH_ROWS and MM_TOKENS are vk_shaders.h's. */
#define SLICE_ROWS 2u
#define MM_ROWS (4u * SLICE_ROWS)
#define MM_BATCH_ROWS 2u
#define MM_TOKENS 16
#define WG 128u
#define DECODE_STEP (8u / RUNS)
/* Tokens a thread keeps sums for: 16 for quantized rows; 8 for float
 * ones, whose 16 took registers enough to halve their batch speed. */
#if defined(WTYPE_F32) || defined(WTYPE_F16) || defined(WTYPE_BF16)
#define MM_BATCH 8u
#else
#define MM_BATCH 16u
#endif

#ifdef MM_ROWWISE
/* One invocation per row: for devices that run invocations as SIMD lanes
 * of a CPU (lavapipe), where a workgroup of 128 cooperating threads for
 * two rows spends its time in barriers and idle lanes. */
#define MM_ROWWISE_ROWS 64u
layout(local_size_x = 64) in;
#else
layout(local_size_x = 128) in;
#endif

/* X twice: as floats, and as vec4s for rows whose width is a multiple
 * of 4 (all quantized ones). */
layout(std430, binding = 1) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict readonly buffer XBuf4 { vec4 x4[]; };
layout(std430, binding = 2) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint n_cols, n_rows, n_tokens, row_bytes;
} pc;

layout(std430, binding = 0) restrict readonly buffer WBuf { uint w[]; };
/* W as 16-byte units, for data known to be 16-byte aligned: one wide
 * load where four would be (f32/f16/bf16 rows of a 16-byte multiple,
 * Q4_K's block headers). */
layout(std430, binding = 0) restrict readonly buffer WBuf4 { uvec4 w4[]; };

/* Bytes of W at any offset, as common.glsl's KK_U16 / KK_U32 /
 * KK_LOAD_WORDS read them, but the word after is loaded only by the
 * threads whose value straddles into it: most weights are 2- or 4-byte
 * aligned, and a second load of the same bytes costs a memory request. */
uint w_u16(uint off)
{
    const uint a = off >> 2u, s = (off & 3u) << 3u;
    const uint hi = s == 24u ? w[a + 1u] : 0u;
    return ((w[a] >> s) | (hi << 8u)) & 0xffffu;
}

uint w_u32(uint off)
{
    const uint a = off >> 2u, s = (off & 3u) << 3u;
    const uint lo = w[a];
    const uint hi = s != 0u ? w[a + 1u] : 0u;
    return s != 0u ? (lo >> s) | (hi << (32u - s)) : lo;
}

/* raw[i] = the u32 at off + 4 i for i < N (a constant). */
#define W_LOAD_WORDS(off, raw, N)                                            \
    {                                                                        \
        const uint w_a = (off) >> 2u, w_s = ((off) & 3u) << 3u;             \
        uint w_lo = w[w_a];                                                  \
        [[unroll]] for (uint w_i = 0u; w_i < (N); w_i++) {                   \
            const uint w_hi = (w_i + 1u < (N) || w_s != 0u)                  \
                                  ? w[w_a + w_i + 1u] : 0u;                  \
            raw[w_i] = w_s != 0u ? (w_lo >> w_s) | (w_hi << (32u - w_s))     \
                                 : w_lo;                                     \
            w_lo = w_hi;                                                     \
        }                                                                    \
    }

/* ---- per weight type ----
 *   RUNS                      runs of 4 columns in a group
 *   n_groups()                groups in a row
 *   run_col(gi, r)            first column of run r of group gi
 *   group_values(off, gi, v)  the group's values in the row at byte off */

#if defined(WTYPE_F32) || defined(WTYPE_F16) || defined(WTYPE_BF16)

#define RUNS 2u
#define HAS_TAIL 1
uint n_groups() { return (pc.n_cols + 7u) / 8u; }
uint run_col(uint gi, uint r) { return 8u * gi + 4u * r; }

#if defined(WTYPE_F32)
/* Rows of f32 are always word aligned (row_bytes = 4 n_cols). */
void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    if ((off & 15u) == 0u) {
        [[unroll]] for (uint r = 0u; r < RUNS; r++)
            v[r] = uintBitsToFloat(w4[(off >> 4u) + 2u * gi + r]);
        return;
    }
    uint w0 = (off >> 2u) + 8u * gi;
    [[unroll]] for (uint r = 0u; r < RUNS; r++)
        v[r] = uintBitsToFloat(uvec4(w[w0 + 4u * r], w[w0 + 4u * r + 1u],
                                     w[w0 + 4u * r + 2u],
                                     w[w0 + 4u * r + 3u]));
}
float elem(uint off, uint c) { return uintBitsToFloat(w[(off >> 2u) + c]); }

#else /* F16, BF16: 16 bytes per group, possibly half-word aligned */
void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    uint raw[4];
    uint b = off + 16u * gi;
    if ((b & 15u) == 0u) {
        const uvec4 q = w4[b >> 4u];
        raw[0] = q.x;
        raw[1] = q.y;
        raw[2] = q.z;
        raw[3] = q.w;
    } else {
        W_LOAD_WORDS(b, raw, 4u);
    }
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
float elem(uint off, uint c)
{
    uint b = off + 2u * c;
#if defined(WTYPE_F16)
    return kk_f16_to_f32(w_u16(b));
#else
    return kk_bf16_to_f32(w_u16(b));
#endif
}
#endif

#elif defined(WTYPE_Q8_0)

/* { f16 d; i8 q[32]; } = 34 bytes: x = q * d. Group k (0..3) of a block:
 * q[8k .. 8k+8). */
#define RUNS 2u
uint n_groups() { return pc.n_cols / 8u; }
uint run_col(uint gi, uint r) { return 8u * gi + 4u * r; }
void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    uint b = off + (gi >> 2u) * 34u;
    float d = kk_f16_to_f32(w_u16(b));
    uint q[2];
    uint bq = b + 2u + 8u * (gi & 3u);
    W_LOAD_WORDS(bq, q, 2u);
    [[unroll]] for (uint r = 0u; r < RUNS; r++)
        v[r] = vec4(kk_sbyte(q[r], 0u), kk_sbyte(q[r], 1u),
                    kk_sbyte(q[r], 2u), kk_sbyte(q[r], 3u)) * d;
}

#elif defined(WTYPE_Q4_0)

/* { f16 d; u8 qs[16]; } = 18 bytes: x[j] = (lo nibble of qs[j] - 8) d,
 * x[j + 16] = (hi nibble - 8) d. Group k (0..3): qs[4k .. 4k+4), whose
 * low nibbles are columns 4k.. and high nibbles 16 + 4k.. */
#define RUNS 2u
uint n_groups() { return pc.n_cols / 8u; }
uint run_col(uint gi, uint r) { return 32u * (gi >> 2u) + 16u * r + 4u * (gi & 3u); }
void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    uint b = off + (gi >> 2u) * 18u;
    float d = kk_f16_to_f32(w_u16(b));
    uint bq = b + 2u + 4u * (gi & 3u);
    uint q = w_u32(bq);
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
void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    uint b = off + (gi >> 2u) * 22u;
    float d = kk_f16_to_f32(w_u16(b));
    uint bh = b + 2u;
    uint qh = w_u32(bh);
    uint k = gi & 3u;
    uint bq = b + 6u + 4u * k;
    uint q = w_u32(bq);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        uvec4 lo = (uvec4(q) >> (uvec4(0u, 8u, 16u, 24u) + 4u * r)) & 0xfu;
        uvec4 hi = (uvec4(qh) >> (uvec4(0u, 1u, 2u, 3u) + 16u * r + 4u * k)) & 1u;
        v[r] = vec4(ivec4(lo | (hi << 4u)) - 16) * d;
    }
}

#elif defined(WTYPE_Q4_K)

/* { f16 d, dmin; u8 scales[12]; u8 qs[128]; } = 144 bytes per 256 values.
 * qs[32c .. 32c+32) holds sub-block 2c in its low nibbles and 2c+1 in its
 * high ones: x = d sc q - dmin m. Group (c, k): qs[32c + 4k ..] (4 bytes),
 * 32 groups per super-block. */
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

void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    uint c = (gi >> 3u) & 3u;
    /* Rows are whole 144-byte blocks, so every block starts on 16
     * bytes: its d, dmin and scales are one wide load, its quants
     * aligned words. */
    uint b = off + (gi >> 5u) * 144u;
    const uvec4 head = w4[b >> 4u];
    float d = kk_f16_to_f32(head.x);
    float dmin = kk_f16_to_f32(head.x >> 16u);
    uint s[3] = uint[3](head.y, head.z, head.w);
    uint q = w[(b + 16u + 32u * c + 4u * (gi & 7u)) >> 2u];
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        uint sc, m;
        scale_min(s[0], s[1], s[2], 2u * c + r, sc, m);
        uvec4 n = (uvec4(q) >> (uvec4(0u, 8u, 16u, 24u) + 4u * r)) & 0xfu;
        v[r] = (d * float(sc)) * vec4(n) - dmin * float(m);
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
void group_values(uint off, uint gi, out vec4 v[RUNS])
{
    uint h = (gi >> 3u) & 1u, k = gi & 7u;
    uint b = off + (gi >> 4u) * 210u;
    uint bd = b + 208u;
    float d = kk_f16_to_f32(w_u16(bd));
    uint b0 = b + 64u * h + 4u * k, b1 = b0 + 32u;
    uint bh = b + 128u + 32u * h + 4u * k;
    uint l0 = w_u32(b0), l1 = w_u32(b1), qh = w_u32(bh);
    const uvec4 sh = uvec4(0u, 8u, 16u, 24u);
    [[unroll]] for (uint r = 0u; r < RUNS; r++) {
        uint bs = b + 192u + 8u * h + (k >> 2u) + 2u * r;
        int sc = bitfieldExtract(int(KK_U8(w, bs)), 0, 8);
        uint lw = (r & 1u) != 0u ? l1 : l0;
        uvec4 lo = (uvec4(lw) >> (sh + ((r & 2u) != 0u ? 4u : 0u))) & 0xfu;
        uvec4 hi = (uvec4(qh) >> (sh + 2u * r)) & 3u;
        v[r] = (d * float(sc)) * vec4(ivec4(lo | (hi << 4u)) - 32);
    }
}

#else
#error "matmul.comp: define one WTYPE_<T>"
#endif

/* ---- the product ---- */

/* x[t][col .. col+4) */
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
                v[i] = x[t * pc.n_cols + col + i];
        return v;
    }
#endif
    return x4[(t * pc.n_cols + col) >> 2u];
}

/* The values of group gi of the row at byte off. The partial last group
 * of an f32/f16/bf16 row: its values one by one, zeros after. */
void values(uint off, uint gi, out vec4 v[RUNS])
{
#ifdef HAS_TAIL
    const uint n = min(8u, pc.n_cols - 8u * gi);
    if (n < 8u) {
        [[unroll]] for (uint r = 0u; r < RUNS; r++) {
            v[r] = vec4(0.0);
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                if (4u * r + i < n)
                    v[r][i] = elem(off, run_col(gi, r) + i);
        }
        return;
    }
#endif
    group_values(off, gi, v);
}

#ifdef MM_ROWWISE

void main()
{
    const uint r = (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x)
                   * MM_ROWWISE_ROWS + gl_LocalInvocationID.x;
    if (r >= pc.n_rows)
        return;
    const uint t0 = gl_WorkGroupID.y * MM_TOKENS;
    const uint nt = min(uint(MM_TOKENS), pc.n_tokens - t0);
    const uint off = r * pc.row_bytes;
    float acc[MM_TOKENS];
    [[unroll]] for (uint j = 0u; j < MM_TOKENS; j++)
        acc[j] = 0.0;
    const uint ng = n_groups();
    for (uint gi = 0u; gi < ng; gi++) {
        vec4 v[RUNS];
        values(off, gi, v);
        [[unroll]] for (uint t = 0u; t < MM_TOKENS; t++) {
            if (t < nt) {
                float sum = 0.0;
                [[unroll]] for (uint k = 0u; k < RUNS; k++)
                    sum += dot(v[k], load_x4(t0 + t, run_col(gi, k)));
                acc[t] += sum;
            }
        }
    }
    for (uint t = 0u; t < nt; t++)
        y[(t0 + t) * pc.n_rows + r] = acc[t];
}

#else

/* acc[r * MM_BATCH + t]: a thread's partial sum for row r of the pair
 * and token t of the chunk (batches only). */
float acc[2u * MM_BATCH];

/* acc += the group's values of both rows times x, for the n tokens from
 * t0. The token loop is unrolled to constant bounds so acc stays in
 * registers. */
void accumulate(uint gi, uint t0, uint n, vec4 va[RUNS], vec4 vb[RUNS])
{
    [[unroll]] for (uint t = 0u; t < MM_BATCH; t++) {
        if (t < n) {
            float sa = 0.0, sb = 0.0;
            [[unroll]] for (uint r = 0u; r < RUNS; r++) {
                vec4 xv = load_x4(t0 + t, run_col(gi, r));
                sa += dot(va[r], xv);
                sb += dot(vb[r], xv);
            }
            acc[t] += sa;
            acc[MM_BATCH + t] += sb;
        }
    }
}

/* Partials of every thread, padded to 33 so that the 32 threads of a
 * slice writing their sums hit 32 different banks; then per slice. */
shared float red[WG * 33u];
shared float red2[(WG / 32u) * 32u];

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    /* A product of one token gives a workgroup MM_ROWS rows, of more
     * MM_BATCH_ROWS (uniform over the dispatch). */
    const bool decode = pc.n_tokens == 1u;
    const uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x)
                    * (decode ? MM_ROWS : MM_BATCH_ROWS);
    if (r0 >= pc.n_rows)
        return;
    const uint t0 = gl_WorkGroupID.y * MM_TOKENS;
    const uint nt = min(uint(MM_TOKENS), pc.n_tokens - t0);
    const uint ng = n_groups();

    if (decode) {
        /* Decode, one token: memory-bound. Slice s (32 threads) owns
         * rows r0 + SLICE_ROWS s .. and walks them alone, so a
         * workgroup's 4 slices stream MM_ROWS rows with no barrier until
         * the end. Where the device runs 4 full subgroups of 32, a
         * slice is a subgroup and adds its partials with subgroupAdd;
         * elsewhere (lavapipe's 8-wide subgroups, AMD's 64) slices are
         * threads tid / 32 and add through shared memory. Both tests are
         * uniform over the dispatch. */
        const bool by_subgroup =
            gl_SubgroupSize == 32u && gl_NumSubgroups == 4u;
        const uint slice = by_subgroup ? gl_SubgroupID : tid >> 5u;
        const uint lane = by_subgroup ? gl_SubgroupInvocationID : tid & 31u;
        /* Rows past the matrix read its last row and store nothing. */
        const uint rs = r0 + SLICE_ROWS * slice;
        uint off[SLICE_ROWS];
        [[unroll]] for (uint k = 0u; k < SLICE_ROWS; k++)
            off[k] = min(rs + k, pc.n_rows - 1u) * pc.row_bytes;
        /* DECODE_STEP groups per step, all loaded before any is used,
         * keep that many times the bytes in flight. Groups past the row
         * are clamped to its last and count 0, so that no branch
         * separates a load from its use (the GPU would wait for each
         * load in turn). */
        float sums[SLICE_ROWS];
        [[unroll]] for (uint k = 0u; k < SLICE_ROWS; k++)
            sums[k] = 0.0;
        for (uint g0 = lane; g0 < ng; g0 += DECODE_STEP * 32u) {
            vec4 v[DECODE_STEP][SLICE_ROWS][RUNS], xv[DECODE_STEP][RUNS];
            [[unroll]] for (uint u = 0u; u < DECODE_STEP; u++) {
                const uint gi = min(g0 + u * 32u, ng - 1u);
                [[unroll]] for (uint k = 0u; k < SLICE_ROWS; k++)
                    values(off[k], gi, v[u][k]);
                [[unroll]] for (uint r = 0u; r < RUNS; r++)
                    xv[u][r] = load_x4(t0, run_col(gi, r));
            }
            [[unroll]] for (uint u = 0u; u < DECODE_STEP; u++) {
                const bool inside = g0 + u * 32u < ng;
                [[unroll]] for (uint k = 0u; k < SLICE_ROWS; k++) {
                    float sk = 0.0;
                    [[unroll]] for (uint r = 0u; r < RUNS; r++)
                        sk += dot(v[u][k][r], xv[u][r]);
                    sums[k] += inside ? sk : 0.0;
                }
            }
        }
        /* Lane k ends with row rs + k's sum. */
        float mine = 0.0;
        if (by_subgroup) {
            [[unroll]] for (uint k = 0u; k < SLICE_ROWS; k++) {
                const float s = subgroupAdd(sums[k]);
                if (lane == k)
                    mine = s;
            }
        } else {
            [[unroll]] for (uint k = 0u; k < SLICE_ROWS; k++)
                red[k * WG + tid] = sums[k];
            barrier();
            if (lane < SLICE_ROWS)
                for (uint i = 0u; i < 32u; i++)
                    mine += red[lane * WG + slice * 32u + i];
        }
        if (lane < SLICE_ROWS && rs + lane < pc.n_rows)
            y[t0 * pc.n_rows + rs + lane] = mine;
        return;
    }

    /* Batches: the workgroup's threads walk its pair of rows together,
     * so each weight byte is read once per MM_TOKENS tokens; the tokens
     * go MM_BATCH at a time (a chunk after the first reads the pair
     * again, from cache), which bounds the registers the shader asks for
     * and so how many workgroups a GPU keeps in flight for decode. */
    const uint lane = tid & 31u, slice = tid >> 5u;
    /* A lone last row is read twice rather than reading past it. */
    const uint ra = r0, rb = min(r0 + 1u, pc.n_rows - 1u);
    const uint off0 = ra * pc.row_bytes, off1 = rb * pc.row_bytes;
    for (uint tc = 0u; tc < nt; tc += MM_BATCH) {
        const uint n = min(uint(MM_BATCH), nt - tc);
        [[unroll]] for (uint j = 0u; j < 2u * MM_BATCH; j++)
            acc[j] = 0.0;
        for (uint gi = tid; gi < ng; gi += WG) {
            vec4 va[RUNS], vb[RUNS];
            values(off0, gi, va);
            values(off1, gi, vb);
            accumulate(gi, t0 + tc, n, va, vb);
        }
        /* Output j (row j / MM_BATCH, token j % MM_BATCH) in use: each
         * slice of 32 threads adds its threads' partials, lane j taking
         * output j; then the first threads add the slices and store. */
        [[unroll]] for (uint j = 0u; j < 2u * MM_BATCH; j++)
            if (j % MM_BATCH < n)
                red[tid * 33u + j] = acc[j];
        barrier();
        if (lane < 2u * MM_BATCH && lane % MM_BATCH < n) {
            float s = 0.0;
            for (uint k = 0u; k < 32u; k++)
                s += red[(slice * 32u + k) * 33u + lane];
            red2[slice * 32u + lane] = s;
        }
        barrier();
        const uint r = ra + tid / MM_BATCH, t = tid % MM_BATCH;
        if (tid < 2u * MM_BATCH && t < n && r < pc.n_rows) {
            float s = 0.0;
            for (uint k = 0u; k < WG / 32u; k++)
                s += red2[k * 32u + tid];
            y[(t0 + tc + t) * pc.n_rows + r] = s;
        }
    }
}

#endif
