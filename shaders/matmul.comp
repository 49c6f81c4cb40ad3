/* matmul.comp — y[t][r] = sum_c W[r][c] x[t][c] for one weight type
 * (compiled once per -DWTYPE_<T>; contract in engine/vulkan/vk_shaders.h).
 *
 * A workgroup owns MM_ROWS weight rows and up to MM_TOKENS tokens. Each
 * row is cut into groups of 8 values (16 for Q6_K), each a few bytes of
 * one block, given as runs of 4 consecutive columns; the WG threads take
 * the groups in turn, so every weight byte is read from memory once per
 * workgroup, neighbouring threads read neighbouring bytes, and x is read
 * as vec4s a warp reads together. A thread multiplies its dequantised
 * values with every token of the batch, each x vec4 serving both rows, and
 * keeps MM_ROWS x MM_TOKENS f32 partial sums; a shared-memory reduction
 * adds the threads' partials at the end. Block layouts are ggml's, decoded
 * as engine/quant.c's dequantize_row does (same scale products). Rows may
 * start anywhere in a word (Q8_0 with an odd number of blocks, f16 rows of
 * an odd width): weights are read through common.glsl's byte helpers.
 *
 * F32/F16/BF16 rows of a width that is not a multiple of 8 end in a
 * partial group, read value by value; with a width that is not a multiple
 * of 4, x is read value by value too. Quantized rows are whole blocks.
 * (The unrolled token loop makes big shaders: lavapipe's LLVM takes
 * seconds to compile each, once per driver shader cache.)
 *
 * With -DMM_ROWWISE (matmul_rows_<t>) each invocation computes one whole
 * row instead, for CPU-backed devices; see MM_ROWWISE_ROWS. Row groups
 * past the device's grid limit spill into z in both variants. */
#version 450

#include "common.glsl"

#define MM_ROWS 2
#define MM_TOKENS 16
#define WG 128u
#define DECODE_STEP (8u / RUNS)
#define MM_OUT (MM_ROWS * MM_TOKENS)
#if MM_OUT != 32
#error "the reduction below gives one 32-thread slice an output each"
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

layout(std430, binding = 0) readonly buffer WBuf { uint w[]; };
/* X twice: as floats, and as vec4s for rows whose width is a multiple
 * of 4 (all quantized ones). */
layout(std430, binding = 1) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) readonly buffer XBuf4 { vec4 x4[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint n_cols, n_rows, n_tokens, row_bytes;
} pc;

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
    KK_LOAD_WORDS(w, b, raw, 4u);
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
    return kk_f16_to_f32(KK_U16(w, b));
#else
    return kk_bf16_to_f32(KK_U16(w, b));
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
    float d = kk_f16_to_f32(KK_U16(w, b));
    uint q[2];
    uint bq = b + 2u + 8u * (gi & 3u);
    KK_LOAD_WORDS(w, bq, q, 2u);
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
    float d = kk_f16_to_f32(KK_U16(w, b));
    uint bq = b + 2u + 4u * (gi & 3u);
    uint q = KK_U32(w, bq);
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
    float d = kk_f16_to_f32(KK_U16(w, b));
    uint bh = b + 2u;
    uint qh = KK_U32(w, bh);
    uint k = gi & 3u;
    uint bq = b + 6u + 4u * k;
    uint q = KK_U32(w, bq);
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
    uint b = off + (gi >> 5u) * 144u;
    float d = kk_f16_to_f32(KK_U16(w, b));
    uint bm = b + 2u;
    float dmin = kk_f16_to_f32(KK_U16(w, bm));
    uint s[3];
    uint bs = b + 4u;
    KK_LOAD_WORDS(w, bs, s, 3u);
    uint bq = b + 16u + 32u * c + 4u * (gi & 7u);
    uint q = KK_U32(w, bq);
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
    float d = kk_f16_to_f32(KK_U16(w, bd));
    uint b0 = b + 64u * h + 4u * k, b1 = b0 + 32u;
    uint bh = b + 128u + 32u * h + 4u * k;
    uint l0 = KK_U32(w, b0), l1 = KK_U32(w, b1), qh = KK_U32(w, bh);
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

/* acc[r * MM_TOKENS + t]: this thread's partial sum for row r0 + r and
 * token t0 + t. */
float acc[MM_OUT];

/* acc += the group's values of both rows times x, for the nt tokens from
 * t0. The token loop is unrolled to constant bounds so acc stays in
 * registers. */
void accumulate(uint gi, uint t0, uint nt, vec4 va[RUNS], vec4 vb[RUNS])
{
    [[unroll]] for (uint t = 0u; t < MM_TOKENS; t++) {
        if (t < nt) {
            float sa = 0.0, sb = 0.0;
            [[unroll]] for (uint r = 0u; r < RUNS; r++) {
                vec4 xv = load_x4(t0 + t, run_col(gi, r));
                sa += dot(va[r], xv);
                sb += dot(vb[r], xv);
            }
            acc[t] += sa;
            acc[MM_TOKENS + t] += sb;
        }
    }
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

/* Partials of every thread, padded to 33 so that a warp's 32 threads
 * writing their sums hit 32 different banks. */
shared float red[WG * 33u];
shared float red2[(WG / 32u) * MM_OUT];

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint r0 = (gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x)
                    * MM_ROWS;
    if (r0 >= pc.n_rows)
        return;
    const uint t0 = gl_WorkGroupID.y * MM_TOKENS;
    const uint nt = min(uint(MM_TOKENS), pc.n_tokens - t0);
    const bool has_row1 = r0 + 1u < pc.n_rows;
    const uint off0 = r0 * pc.row_bytes;
    /* A lone last row is read twice rather than reading past it. */
    const uint off1 = has_row1 ? off0 + pc.row_bytes : off0;

    [[unroll]] for (uint j = 0u; j < MM_OUT; j++)
        acc[j] = 0.0;

    const uint ng = n_groups();
    if (nt == 1u) {
        /* Decode, one token: memory-bound. DECODE_STEP groups per step,
         * all loaded before any is used, keep that many times the bytes
         * in flight (the registers are there: the batched loop below
         * sets the shader's allocation). Groups past the row are clamped
         * to its last and count 0, so that no branch separates a load
         * from its use (the GPU would wait for each load in turn). */
        for (uint g0 = tid; g0 < ng; g0 += DECODE_STEP * WG) {
            vec4 va[DECODE_STEP][RUNS], vb[DECODE_STEP][RUNS],
                xv[DECODE_STEP][RUNS];
            [[unroll]] for (uint u = 0u; u < DECODE_STEP; u++) {
                const uint gi = min(g0 + u * WG, ng - 1u);
                values(off0, gi, va[u]);
                values(off1, gi, vb[u]);
                [[unroll]] for (uint r = 0u; r < RUNS; r++)
                    xv[u][r] = load_x4(t0, run_col(gi, r));
            }
            [[unroll]] for (uint u = 0u; u < DECODE_STEP; u++) {
                float sa = 0.0, sb = 0.0;
                [[unroll]] for (uint r = 0u; r < RUNS; r++) {
                    sa += dot(va[u][r], xv[u][r]);
                    sb += dot(vb[u][r], xv[u][r]);
                }
                const bool inside = g0 + u * WG < ng;
                acc[0] += inside ? sa : 0.0;
                acc[MM_TOKENS] += inside ? sb : 0.0;
            }
        }
    } else {
        for (uint gi = tid; gi < ng; gi += WG) {
            vec4 va[RUNS], vb[RUNS];
            values(off0, gi, va);
            values(off1, gi, vb);
            accumulate(gi, t0, nt, va, vb);
        }
    }

    /* Reduction of the outputs in use (token t < nt): 32 sums per thread
     * -> each 32-thread slice adds its threads' partials, one output per
     * thread -> the first 32 threads add the slices and store. */
    [[unroll]] for (uint j = 0u; j < MM_OUT; j++)
        if (j % MM_TOKENS < nt)
            red[tid * 33u + j] = acc[j];
    barrier();
    const uint j = tid & 31u, slice = tid >> 5u;
    if (j % MM_TOKENS < nt) {
        float s = 0.0;
        for (uint k = 0u; k < 32u; k++)
            s += red[(slice * 32u + k) * 33u + j];
        red2[slice * MM_OUT + j] = s;
    }
    barrier();
    if (tid < MM_OUT) {
        uint r = tid / MM_TOKENS, t = tid % MM_TOKENS;
        if (t < nt && r0 + r < pc.n_rows) {
            float sum = 0.0;
            for (uint k = 0u; k < WG / 32u; k++)
                sum += red2[k * MM_OUT + tid];
            y[(t0 + t) * pc.n_rows + r0 + r] = sum;
        }
    }
}

#endif
