// decode_pass.glsl — what the passes of bench_persistent_decode.c share
// (decode_phases.comp, decode_fused.comp, decode_stream3.comp, each of
// which defines phase(), the work of one phase): the buffers, the
// activations' layout, x normed and quantized into shared memory, the
// Q8_0 products of int8 x (OpSDot) a row pair a subgroup or as streams,
// attention over an f16 cache, the grid barrier, and main(), which runs
// pc.n_phases phases from pc.first with a grid barrier between them
// (pc.spin = 1) or is one phase of a dispatch a phase (spin = 0).
//
// Weights are not meant to be a model's: rows are n_cols int8 quants
// followed by n_cols / 32 f16 scales (the layout kakeya's repacked Q8_0
// rows have), filled with hashed words by decode_fill.comp. What is
// measured is time, not text.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_clustered : require
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require

#ifndef WG_SIZE
#define WG_SIZE 512
#endif
#define WG uint(WG_SIZE)
layout(local_size_x = WG_SIZE) in;

// binding 0: every layer's weights, then the output matrix
layout(std430, binding = 0) readonly buffer W4Buf { uvec4 w4[]; };
layout(std430, binding = 0) readonly buffer W1Buf { uint w1[]; };
// binding 1: the f16 cache: per layer, per kv head, ctx keys then ctx values
layout(std430, binding = 1) readonly buffer KV4Buf { uvec4 kv4[]; };
layout(std430, binding = 1) readonly buffer KV1Buf { uint kv1[]; };
// binding 2: activations: x, qkv, att, h, logits (offsets below), read
// past L1 (`coherent`): a multiprocessor's L1 may still hold lines another
// wrote since, which only a pipeline barrier invalidates
#ifdef ACT_CACHED
#define ACT_QUALIFIER
#else
#define ACT_QUALIFIER coherent
#endif
layout(std430, binding = 2) ACT_QUALIFIER buffer Act { float act[]; };
layout(std430, binding = 2) ACT_QUALIFIER buffer Act4 { vec4 act4[]; };
// binding 3: the grid barrier's counter
layout(std430, binding = 3) coherent buffer Count { uint count; };

layout(push_constant) uniform Push {
    uint first, n_phases, spin, base;   // phases; barrier target base
    uint d, ff, n_head, n_kv;         // model width, ffn width, heads
    uint n_layers, vocab, ctx;
    uint skip;     // bit k: phases of kind k (5: the output) do nothing
    uint tokens;   // 1 .. TMAX
    uint split;    // FUSED: workgroups a head's attention block takes
} pc;

#define HD 64u
#define TMAX 8u        // tokens a pass at most
#define CC 2048u       // x quants a token at TMAX tokens (more at fewer)

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"],
                  capabilities = [6019, 6018], id = 4450)
int sdot(uint a, uint b, spirv_literal int packed_vector_format);

// activations, each a row per token: x, q/k/v, the attention's output, h,
// logits (offsets in floats)
uint qkv_rows() { return pc.d + 2u * pc.n_kv * HD; }
uint x_at(uint t) { return t * pc.d; }
uint qkv_at(uint t) { return TMAX * pc.d + t * qkv_rows(); }
uint att_at(uint t) { return TMAX * (pc.d + qkv_rows()) + t * pc.d; }
uint h_at(uint t) { return TMAX * (2u * pc.d + qkv_rows()) + t * pc.ff; }
uint logits_at(uint t)
{
    return TMAX * (2u * pc.d + qkv_rows() + pc.ff) + t * pc.vocab;
}

// row bytes and matrix offsets, in bytes
uint row_bytes(uint cols) { return cols + cols / 16u; }
uint layer_bytes()
{
    return qkv_rows() * row_bytes(pc.d) + pc.d * row_bytes(pc.d) +
           2u * pc.ff * row_bytes(pc.d) + pc.d * row_bytes(pc.ff);
}

shared uvec4 xq4[TMAX * CC / 16u];   // x's quants, 16 a word
shared float xd[TMAX * CC / 32u];    // x's block scales
shared float red[WG / 8u][TMAX];     // a value a subgroup (at least 8 wide)
shared float norm[TMAX];             // each token's norm scale
// attention: q, then the batch's keys and values of the head's kv head;
// scores of up to 1024 positions, then WG partial sums
shared float qkv_sh[HD * (1u + 2u * TMAX)];
shared float scores[1024u + WG];
// FUSED: a head's attention output or an ffn chunk's h (HD values), their
// quants (4 a word) and the two blocks' scales
shared float hsh[HD];
shared uint hq[HD / 4u];
shared float hd[2];

#ifdef FUSED
layout(std430, binding = 2) coherent buffer ActU { uint actu[]; };
layout(std430, binding = 2) coherent buffer ActU4 { uvec4 actu4[]; };
#define FX_BIT 0x80000000u
// A value of the residual in fixed point, 32 bits past the point, as two
// words that are added to independently, so that no atomic add needs the
// old value back: hi, signed, in units of 2^-12 at base + d + i, and lo,
// unsigned, in units of 2^-32 at base + i. A partial's lo is under 2^20,
// so lo takes 4,096 of them before it could wrap; fx_add_fx moves a
// value's carry from lo into hi as it copies it.
float fx_float(uint lo, uint hi)
{
    return float(int(hi)) * 2.44140625e-4 + float(lo) * 2.3283064365386963e-10;
}
vec4 fx_load4(uint base, uint i)
{
    const uvec4 lo = actu4[(base + i) / 4u];
    const uvec4 hi = actu4[(base + pc.d + i) / 4u];
    return vec4(fx_float(lo.x, hi.x), fx_float(lo.y, hi.y),
                fx_float(lo.z, hi.z), fx_float(lo.w, hi.w));
}
#endif

vec4 x_load4(uint src0, uint i)
{
#ifdef FUSED
    if ((src0 & FX_BIT) != 0u)
        return fx_load4(src0 & ~FX_BIT, i);
#endif
    return act4[(src0 + i) / 4u];
}

// Four int8 values as one word, the first in the low byte.
uint pack_q4(ivec4 q)
{
    return (uint(q.x) & 255u) | ((uint(q.y) & 255u) << 8u) |
           ((uint(q.z) & 255u) << 16u) | ((uint(q.w) & 255u) << 24u);
}

// Four of a block's values quantized as the CPU's Q8_0 x is, the block
// spread over 8 lanes (a cluster) that all call this; its largest
// magnitude into amax.
uint quantize4(vec4 x, out float amax)
{
    const vec4 a = abs(x);
    amax = subgroupClusteredMax(max(max(a.x, a.y), max(a.z, a.w)), 8u);
    const float id = amax > 0.0 ? 127.0 / amax : 0.0;
    return pack_q4(ivec4(round(x * id)));
}

float wg_sum(float v)
{
    float s = subgroupAdd(v);
    if (subgroupElect())
        red[gl_SubgroupID][0] = s;
    barrier();
    float t = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++)
        t += red[i][0];
    barrier();
    return t;
}

float wg_max(float v)
{
    float s = subgroupMax(v);
    if (subgroupElect())
        red[gl_SubgroupID][0] = s;
    barrier();
    float t = -3.0e38;
    for (uint i = 0u; i < gl_NumSubgroups; i++)
        t = max(t, red[i][0]);
    barrier();
    return t;
}

// Columns col0 .. col0 + n of each token's row at act[src0 + t stride]
// into xq4/xd (token t's n / 16 words from t n / 16): 8 lanes a block of
// 32, 4 values a lane, every load issued before any is used, at most
// QROUNDS blocks a group of 8 lanes (pc.tokens n <= TMAX CC).
// `normed`: the columns are the whole row, times 1 / its rms, which the
// values loaded give (the tokens' sums of squares in one reduction).
#define QROUNDS (TMAX * CC / 4u / WG)
void quantize_x(uint src0, uint stride, uint col0, uint n, bool normed)
{
    const uint j = gl_LocalInvocationID.x % 8u;
    const uint g = gl_LocalInvocationID.x / 8u;
    const uint nb = n / 32u, units = pc.tokens * nb;
    const uint rounds = (units + WG / 8u - 1u) / (WG / 8u);
    vec4 v[QROUNDS];
    [[unroll]] for (uint k = 0u; k < QROUNDS; k++) {
        if (k >= rounds)   /* (uniform: no load issued for nothing) */
            break;
        const uint u = min(k * (WG / 8u) + g, units - 1u);
        const uint t = u / nb, b = u % nb;
        v[k] = x_load4(src0, t * stride + col0 + 32u * b + 4u * j);
    }
    if (normed) {
        float s[TMAX];
        [[unroll]] for (uint t = 0u; t < TMAX; t++)
            s[t] = 0.0;
        [[unroll]] for (uint k = 0u; k < QROUNDS; k++) {
            if (k >= rounds)
                break;
            const uint u = k * (WG / 8u) + g;
            const float sq = u < units ? dot(v[k], v[k]) : 0.0;
            [[unroll]] for (uint t = 0u; t < TMAX; t++)
                s[t] += u / nb == t ? sq : 0.0;
        }
        [[unroll]] for (uint t = 0u; t < TMAX; t++) {
            if (t >= pc.tokens)
                break;
            const float ss = subgroupAdd(s[t]);
            if (subgroupElect())
                red[gl_SubgroupID][t] = ss;
        }
        barrier();
        if (gl_LocalInvocationID.x < pc.tokens) {
            const uint t = gl_LocalInvocationID.x;
            float sum = 0.0;
            for (uint i = 0u; i < gl_NumSubgroups; i++)
                sum += red[i][t];
            norm[t] = inversesqrt(sum / float(n) + 1e-5);
        }
        barrier();
    }
    [[unroll]] for (uint k = 0u; k < QROUNDS; k++) {
        if (k >= rounds)
            break;
        const uint u = k * (WG / 8u) + g;
        const uint t = min(u, units - 1u) / nb, b = min(u, units - 1u) % nb;
        float amax;
        const uint q = quantize4(normed ? v[k] * norm[t] : v[k], amax);
        if (u >= units)
            continue;
        xq4[t * (n / 16u) + 2u * b + j / 4u][j % 4u] = q;
        if (j == 0u)
            xd[t * (n / 32u) + b] = amax / 127.0;
    }
    barrier();
}

#ifdef LITE_PROLOGUE
// -DLITE_PROLOGUE (one token): x's row col0 .. col0 + n quantized in one
// pass, a block of 32 a group of 8 lanes at a time, each block as it is
// loaded. Normed or not, a block's quants are the same (the norm scales
// a block and its largest value alike), so only the block scales wait
// for the row's sum of squares: x held a vec4 at a time, not all of it.
// (Not the bits of quantize_x: its quants are rounded after the norm.)
void quantize_x_lite(uint src0, uint col0, uint n, bool normed)
{
    const uint j = gl_LocalInvocationID.x % 8u;
    const uint g = gl_LocalInvocationID.x / 8u;
    const uint nb = n / 32u;
    float ss = 0.0;
    for (uint b = g; b < nb; b += WG / 8u) {
        const vec4 x = x_load4(src0, col0 + 32u * b + 4u * j);
        ss += dot(x, x);
        float amax;
        xq4[2u * b + j / 4u][j % 4u] = quantize4(x, amax);
        if (j == 0u)
            xd[b] = amax / 127.0;
    }
    if (normed) {
        const float inv = inversesqrt(wg_sum(ss) / float(n) + 1e-5);
        for (uint b = g; j == 0u && b < nb; b += WG / 8u)
            xd[b] *= inv;
    }
    barrier();
}
#endif

float half_at(uint byte_off)
{
    uint w = w1[byte_off / 4u];
    return unpackHalf2x16((byte_off & 2u) != 0u ? w >> 16u : w).x;
}

// A product phase: rows taken a pair at a time by a subgroup (rows 2q and
// 2q + 1, or gated: gate row q and up row ff + q), each pair's columns in
// chunks of CH 16-byte words a lane (lane j: words j, j + sg, ...), every
// load of a chunk (both rows) issued before any is used, each word's
// quants multiplied with every token's. A lane adds its words in the same
// order whatever CH is, so the bits are CH's too.
#ifndef CH_WORDS
#define CH_WORDS 4
#endif
#define CH uint(CH_WORDS)
// pairs of rows a subgroup takes at once (-DPAIRS, 1 by default)
#ifndef PAIRS
#define PAIRS 1
#endif
#define NR (2u * uint(PAIRS))   // rows a subgroup takes at once
struct matvec_t {
    uint mat, pairs, cols, src, src_stride, dst, dst_stride, kind, up;
};   // kind 0 store, 1 add, 2 gated (up: the up rows' first, from mat's);
     // FUSED: 3 store into qkv_sh, 4 gated into hsh (at dst)
struct chunk_t {
    uvec4 w[NR][CH];
    float dw[NR][CH];
};

uint row_a(matvec_t m, uint q)
{
    return m.kind == 2u || m.kind == 4u ? q : 2u * q;
}
uint row_b(matvec_t m, uint q)
{
    return m.kind == 2u || m.kind == 4u ? q + m.up : 2u * q + 1u;
}

uint subgroups() { return gl_NumWorkGroups.x * gl_NumSubgroups; }

// Pair i of the subgroup's wave from q0: q0 + i g_pair_stride, the
// subgroups taking part (the grid's, subgroups(), or FUSED's local_rows:
// the workgroup's).
uint g_pair_stride;
uint pair_of(uint q0, uint i) { return q0 + i * g_pair_stride; }

// FUSED: the head whose q, k and v rows kind 3 takes (local_rows), row r
// of 3 HD: q's rows of head g_head, then k's and v's of its kv head.
uint g_head, g_kv_head;
uint src_row(matvec_t m, uint r)
{
#ifndef FUSED
    return r;   // (kind 3 is the fused pass's alone)
#endif
    if (m.kind != 3u)
        return r;
    const uint part = r / HD, e = r % HD;
    return part == 0u ? g_head * HD + e
         : part == 1u ? pc.d + g_kv_head * HD + e
                      : pc.d + (pc.n_kv + g_kv_head) * HD + e;
}
// where attention() reads q (part 0), the token's key (1) and value (2)
uint qkv_sh_at(uint r)
{
    const uint part = r / HD, e = r % HD;
    return part == 0u ? e : part == 1u ? HD + e : HD * (1u + TMAX) + e;
}

// Chunk c of the wave's pairs' columns col0 .. col0 + n (a pair past the
// matrix loads its last one again, and is not stored).
chunk_t load_chunk(matvec_t m, uint q0, uint col0, uint n, uint c)
{
    const uint sg = gl_SubgroupSize, j = gl_SubgroupInvocationID;
    const uint words = n / 16u, rb = row_bytes(m.cols);
    chunk_t ch;
    [[unroll]] for (uint r = 0u; r < NR; r++) {
        const uint q = min(pair_of(q0, r / 2u), m.pairs - 1u);
        const uint base =
            m.mat +
            src_row(m, (r & 1u) == 0u ? row_a(m, q) : row_b(m, q)) * rb;
        [[unroll]] for (uint k = 0u; k < CH; k++) {
            const uint i =
                col0 / 16u + min(c * sg * CH + j + k * sg, words - 1u);
            ch.w[r][k] = w4[base / 16u + i];
#ifdef NO_SCALES   // (timing only, as the switches below: wrong sums)
            ch.dw[r][k] = 1.0;
#else
            ch.dw[r][k] = half_at(base + m.cols + 2u * (i / 2u));
#endif
        }
    }
    return ch;
}

void add_chunk(chunk_t ch, uint n, uint c, inout float p[NR][TMAX])
{
    const uint sg = gl_SubgroupSize, j = gl_SubgroupInvocationID;
    [[unroll]] for (uint k = 0u; k < CH; k++) {
        const uint i = c * sg * CH + j + k * sg;
        if (i >= n / 16u)
            break;
        [[unroll]] for (uint t = 0u; t < TMAX; t++) {
            if (t >= pc.tokens)
                break;
            const uvec4 x = xq4[t * (n / 16u) + i];
            const float dx = xd[t * (n / 32u) + i / 2u];
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                const uvec4 w = ch.w[r][k];
#ifdef XOR_ONLY   // the words kept, not multiplied
                const int s = int(w.x ^ w.y ^ w.z ^ w.w);
#else
                const int s = sdot(w.x, x.x, 0) + sdot(w.y, x.y, 0) +
                              sdot(w.z, x.z, 0) + sdot(w.w, x.w, 0);
#endif
                p[r][t] = fma(float(s), ch.dw[r][k] * dx, p[r][t]);
            }
        }
    }
}

// The wave's row sums for each token (each lane's part added over the
// subgroup), stored, added to the residual, or gated.
void store_pairs(matvec_t m, uint q0, float p[NR][TMAX])
{
    [[unroll]] for (uint i = 0u; i < NR / 2u; i++) {
        const uint q = pair_of(q0, i);
        if (q >= m.pairs)
            break;
        const uint ra = row_a(m, q), rb = row_b(m, q);
        [[unroll]] for (uint t = 0u; t < TMAX; t++) {
            if (t >= pc.tokens)
                break;
#ifdef NO_REDUCE   // each lane's own sum, stored only if it is 1
            const float a = p[2u * i][t], b = p[2u * i + 1u][t];
            if (a != 1.0 && b != 1.0)
                continue;
#else
            const float a = subgroupAdd(p[2u * i][t]);
            const float b = subgroupAdd(p[2u * i + 1u][t]);
#endif
            const uint o = m.dst + t * m.dst_stride;
            if (!subgroupElect())
                continue;
            if (m.kind == 0u) {
                act[o + ra] = a;
                act[o + rb] = b;
#ifdef FUSED
            } else if (m.kind == 3u) {
                qkv_sh[qkv_sh_at(ra)] = a;
                qkv_sh[qkv_sh_at(rb)] = b;
            } else if (m.kind == 4u) {
                hsh[m.dst + ra] = a / (1.0 + exp(-a)) * b;
#endif
            } else if (m.kind == 1u) {
                act[o + ra] += a;
                act[o + rb] += b;
            } else {
                act[o + ra] = a / (1.0 + exp(-a)) * b;
            }
        }
    }
}

uint first_pair()
{
    return gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
}

#ifdef STREAMED
// -DSTREAMED (one token): a product as a stream, its rows shared out as
// the streams of -DSTREAM are. Each subgroup takes a run of whole units
// (rows; gated, a gate row and its up row), the runs as even as units
// allow, and reads its run's quants as one stream, lane j the words j,
// j + sg, ... of each row in turn, SL_WORDS at once, the next batch's
// loads issued before this one is multiplied (-DEARLY_BATCH: the first
// batch's before x is normed and quantized). A row's sum is added over
// the subgroup when its last word is in: each row's words in the order
// the pairs of matvec add them, so the same bits. On the H200 (session
// 49) 2 words at once took 0.98 ms a step, 4 1.26 and 8 1.83 against 0.95
// for the pairs, likely because x's prologue (quantize_x, 8 vec4 of x a
// thread held for 8 tokens) leaves too few registers for the loads in
// flight; with -DLITE_PROLOGUE, 4 words 0.81, 3 0.86, 6 0.99.
#ifndef SL_WORDS
#define SL_WORDS 4
#endif
#define SLW uint(SL_WORDS)
struct batch_t {
    uvec4 w[SLW];
    uint sc[SLW];   // the word holding the word's block scale
};

uint unit_rows(matvec_t m) { return m.kind == 2u ? 2u : 1u; }

// Row ri of the run from unit u0 (gated: gate and up rows in turn).
uint run_row(matvec_t m, uint u0, uint ri)
{
    const uint u = u0 + ri / unit_rows(m);
    return m.kind == 2u && ri % 2u == 1u ? u + m.up : u;
}

// (lpr, a lane's words a row, is 2^lg: shifts, not divisions)
batch_t load_batch(matvec_t m, uint u0, uint b0, uint nw, uint lg)
{
    const uint sg = gl_SubgroupSize, j = gl_SubgroupInvocationID;
    const uint rb = row_bytes(m.cols), lpr = 1u << lg;
    batch_t bt;
    [[unroll]] for (uint k = 0u; k < SLW; k++) {
        const uint gw = min(b0 + k, nw - 1u);
        const uint row = run_row(m, u0, gw >> lg);
        const uint wi = (gw & (lpr - 1u)) * sg + j;
        bt.w[k] = w4[(m.mat + row * rb) / 16u + wi];
        bt.sc[k] = w1[(m.mat + row * rb + m.cols) / 4u + wi / 4u];
    }
    return bt;
}

void matvec_streamed(matvec_t m, bool normed)
{
    const uint sg = gl_SubgroupSize, j = gl_SubgroupInvocationID;
    const uint units = m.kind == 2u ? m.pairs : 2u * m.pairs;
    const uint id = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    const uint u0 = id * units / subgroups();
    const uint u1 = (id + 1u) * units / subgroups();
    const uint lpr = m.cols / 16u / sg;   // a lane's words a row
    const uint lg = findLSB(lpr);
    const uint nw = (u1 - u0) * unit_rows(m) * lpr;
#ifdef EARLY_BATCH   // (the first batch's loads before the prologue)
    batch_t cur;
    if (nw > 0u)
        cur = load_batch(m, u0, 0u, nw, lg);
#endif
#if defined(LITE_PROLOGUE)
    quantize_x_lite(m.src, 0u, m.cols, normed);
#elif !defined(NO_PROLOGUE)
    quantize_x(m.src, m.src_stride, 0u, m.cols, normed);
#endif
#ifndef EARLY_BATCH
    batch_t cur;
    if (nw > 0u)
        cur = load_batch(m, u0, 0u, nw, lg);
#endif
    float acc = 0.0, gate = 0.0;
    for (uint b0 = 0u; b0 < nw; b0 += SLW) {
        const batch_t nxt = load_batch(m, u0, min(b0 + SLW, nw - 1u), nw,
                                       lg);
        [[unroll]] for (uint k = 0u; k < SLW; k++) {
            const uint gw = b0 + k;
            if (gw >= nw)
                break;
            const uint wi = (gw & (lpr - 1u)) * sg + j;
            const uvec4 w = cur.w[k], x = xq4[wi];
            const int s = sdot(w.x, x.x, 0) + sdot(w.y, x.y, 0) +
                          sdot(w.z, x.z, 0) + sdot(w.w, x.w, 0);
            const float dw =
                unpackHalf2x16(cur.sc[k] >> (16u * (wi / 2u & 1u))).x;
            acc = fma(float(s), dw * xd[wi / 2u], acc);
            if ((gw & (lpr - 1u)) != lpr - 1u)
                continue;
            const float sum = subgroupAdd(acc);   // the row is in
            const uint ri = gw >> lg, row = run_row(m, u0, ri);
            acc = 0.0;
            if (m.kind == 2u && ri % 2u == 0u) {
                gate = sum;
                continue;
            }
            if (!subgroupElect())
                continue;
            if (m.kind == 0u)
                act[m.dst + row] = sum;
            else if (m.kind == 1u)
                act[m.dst + row] += sum;
            else
                act[m.dst + u0 + ri / 2u] = gate / (1.0 + exp(-gate)) * sum;
        }
        cur = nxt;
    }
}
#endif

// Waves of PAIRS pairs a subgroup (q, q + subgroups, ...), every
// workgroup taking part in each, for the barriers of quantizing x a span
// of columns at a time where all do not fit; a wave's chunks in turn.
// (-DNO_PROLOGUE: x left as the last phase quantized it: wrong, timing
// only, to see what norming and quantizing cost.) On the H200, at one
// token, these gained nothing: loading the next pair's chunk before
// adding up this one's (twice the registers), and loading a phase's first
// chunk before the grid barrier (in registers, and with a branch on them
// so that no compiler sinks the loads); and down's four chunks a pair
// split across four subgroups, their sums added through shared memory,
// gained 1.4% of a step.
void matvec(matvec_t m, bool normed)
{
#ifdef STREAMED
    if (pc.tokens == 1u && m.cols / 16u % gl_SubgroupSize == 0u &&
        bitCount(m.cols / 16u / gl_SubgroupSize) == 1u) {
        matvec_streamed(m, normed);
        return;
    }
#endif
    g_pair_stride = subgroups();
    const uint per_wave = subgroups() * (NR / 2u);
    const uint waves = (m.pairs + per_wave - 1u) / per_wave;
    /* columns quantized at a time: all of them when they fit (a normed
     * row always does) */
    const uint span = min(m.cols, (TMAX * CC / pc.tokens) & ~511u);
    const uint spans = (m.cols + span - 1u) / span;
#ifndef NO_PROLOGUE
    if (spans == 1u)
        quantize_x(m.src, m.src_stride, 0u, m.cols, normed);
#endif
    for (uint w = 0u; w < waves; w++) {
        const uint q0 = first_pair() + w * per_wave;
        float p[NR][TMAX];
        [[unroll]] for (uint r = 0u; r < NR; r++)
            [[unroll]] for (uint t = 0u; t < TMAX; t++)
                p[r][t] = 0.0;
        for (uint sp = 0u; sp < spans; sp++) {
            const uint col0 = sp * span, n = min(span, m.cols - col0);
#ifndef NO_PROLOGUE
            if (spans > 1u) {
                barrier();   // every subgroup is done with the last span
                quantize_x(m.src, m.src_stride, col0, n, false);
            }
#endif
            const uint chunks = (n / 16u + gl_SubgroupSize * CH - 1u) /
                                (gl_SubgroupSize * CH);
            if (q0 < m.pairs)
                for (uint c = 0u; c < chunks; c++)
                    add_chunk(load_chunk(m, q0, col0, n, c), n, c, p);
        }
        if (q0 < m.pairs)
            store_pairs(m, q0, p);
    }
}

// Head h's attention for token tk of the batch: over ctx cached positions
// and the batch's tokens 0 .. tk.
void attention(uint layer, uint h, uint tk, bool in_shared)
{
    const uint kvh = h / (pc.n_head / pc.n_kv), t = gl_LocalInvocationID.x;
    // cache words (2 halves each) of this kv head's keys, then values
    const uint kbase = ((layer * pc.n_kv + kvh) * 2u * pc.ctx) * HD / 2u;
    const uint vbase = kbase + pc.ctx * HD / 2u;
    const uint n = pc.ctx + tk + 1u;
    // q, then the batch's keys, then its values (up to tk), unless the
    // caller made them there (in_shared: FUSED, out into hsh too)
    for (uint i = t; !in_shared && i < HD * (1u + 2u * (tk + 1u)); i += WG) {
        const uint part = i / HD, e = i % HD;
        uint at;
        if (part == 0u)
            at = qkv_at(tk) + h * HD + e;
        else if (part <= tk + 1u)
            at = qkv_at(part - 1u) + pc.d + kvh * HD + e;
        else
            at = qkv_at(part - tk - 2u) + pc.d + (pc.n_kv + kvh) * HD + e;
        qkv_sh[part <= tk + 1u ? i : i + HD * (TMAX - tk - 1u)] = act[at];
    }
    barrier();
    float m = -3.0e38;
    for (uint p = t; p < n; p += WG) {
        float s = 0.0;
        if (p < pc.ctx) {
            uvec4 w[HD / 8u];
            [[unroll]] for (uint k = 0u; k < HD / 8u; k++)
                w[k] = kv4[(kbase + p * HD / 2u) / 4u + k];
            [[unroll]] for (uint k = 0u; k < HD / 8u; k++) {
                vec2 a = unpackHalf2x16(w[k].x), b = unpackHalf2x16(w[k].y);
                vec2 c = unpackHalf2x16(w[k].z), e = unpackHalf2x16(w[k].w);
                uint o = 8u * k;
                s += a.x * qkv_sh[o] + a.y * qkv_sh[o + 1u] +
                     b.x * qkv_sh[o + 2u] + b.y * qkv_sh[o + 3u] +
                     c.x * qkv_sh[o + 4u] + c.y * qkv_sh[o + 5u] +
                     e.x * qkv_sh[o + 6u] + e.y * qkv_sh[o + 7u];
            }
        } else {
            const uint kb = HD * (1u + p - pc.ctx);
            for (uint k = 0u; k < HD; k++)
                s += qkv_sh[kb + k] * qkv_sh[k];
        }
        s *= 0.125;
        scores[p] = s;
        m = max(m, s);
    }
    m = wg_max(m);
    float l = 0.0;
    for (uint p = t; p < n; p += WG) {
        float e = exp(scores[p] - m);
        scores[p] = e;
        l += e;
    }
    l = wg_sum(l);   // its barriers also make scores visible
    // WG / HD partitions of HD threads, each a value of the head
    const uint dim = t % HD, part = t / HD;
    float o = 0.0;
    for (uint p = part; p < n; p += WG / HD) {
        float v = p < pc.ctx
                      ? unpackHalf2x16(kv1[vbase + p * HD / 2u + dim / 2u] >>
                                       (16u * (dim & 1u))).x
                      : qkv_sh[HD * (1u + TMAX + p - pc.ctx) + dim];
        o = fma(scores[p], v, o);
    }
    scores[1024u + t] = o;
    barrier();
    if (t < HD) {
        float s = 0.0;
        for (uint k = 0u; k < WG / HD; k++)
            s += scores[1024u + k * HD + t];
        if (in_shared)
            hsh[t] = s / l;
        else
            act[att_at(tk) + h * HD + t] = s / l;
    }
    barrier();
}

void grid_barrier(uint target)
{
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        atomicAdd(count, 1u);
        /* polled by atomic loads (read-modify-writes of 0 took as long) */
        while (atomicLoad(count, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                          gl_SemanticsRelaxed) < target) {
        }
    }
    barrier();
    memoryBarrierBuffer();
}

bool skipped(uint ph)
{
    const uint layer = ph / 5u, k = ph % 5u;
    return (pc.skip >> (layer == pc.n_layers ? 5u : k) & 1u) != 0u;
}

// The product of phase ph (false: attention, which has none), and whether
// its x is normed.
bool product_of(uint ph, out matvec_t m, out bool normed)
{
    const uint layer = ph / 5u, k = ph % 5u;
    const uint lb = layer * layer_bytes();
    const uint wqkv = lb, wo = wqkv + qkv_rows() * row_bytes(pc.d);
    const uint wgu = wo + pc.d * row_bytes(pc.d);
    const uint wd = wgu + 2u * pc.ff * row_bytes(pc.d);
    const uint d = pc.d;
    normed = layer == pc.n_layers || k == 0u || k == 3u;
    m = matvec_t(0u, 0u, d, 0u, 0u, 0u, 0u, 0u, 0u);
    if (layer == pc.n_layers)
        m = matvec_t(lb, pc.vocab / 2u, d, x_at(0u), d, logits_at(0u),
                     pc.vocab, 0u, 0u);
    else if (k == 0u)
        m = matvec_t(wqkv, qkv_rows() / 2u, d, x_at(0u), d, qkv_at(0u),
                     qkv_rows(), 0u, 0u);
    else if (k == 2u)
        m = matvec_t(wo, d / 2u, d, att_at(0u), d, x_at(0u), d, 1u, 0u);
    else if (k == 3u)
        m = matvec_t(wgu, pc.ff, d, x_at(0u), d, h_at(0u), pc.ff, 2u,
                     pc.ff);
    else if (k == 4u)
        m = matvec_t(wd, d / 2u, pc.ff, h_at(0u), pc.ff, x_at(0u), d, 1u,
                     0u);
    return k != 1u || layer == pc.n_layers;
}


// A matrix's bytes read and nothing else (decode_phases' -DSTREAM,
// decode_stream3): the grid's threads STREAM_LOADS 16-byte words each at
// once in turn, xored (kept only so that the loads are). What a pass of
// these takes is what its products could take at best, with its
// attention and barriers as they are.
#ifndef STREAM_LOADS
#define STREAM_LOADS 8
#endif
#define SL uint(STREAM_LOADS)
// (stream_by: by `threads` threads, this one thread `first` of them)
void stream_by(uint mat, uint bytes, uint first, uint threads)
{
    const uint words = bytes / 16u;
    uvec4 acc = uvec4(0u);
    for (uint i = first; i < words; i += threads * SL) {
        uvec4 w[SL];
        [[unroll]] for (uint k = 0u; k < SL; k++)
            w[k] = w4[mat / 16u + min(i + k * threads, words - 1u)];
        [[unroll]] for (uint k = 0u; k < SL; k++)
            acc ^= w[k];
    }
    if (acc == uvec4(0x9e3779b9u))
        act[0] = 0.0;
}
void stream_matrix(uint mat, uint bytes)
{
    stream_by(mat, bytes, gl_WorkGroupID.x * WG + gl_LocalInvocationID.x,
              gl_NumWorkGroups.x * WG);
}

void phase(uint ph);   // the pass's own (the .comp that includes this)

void main()
{
    for (uint i = 0u; i < pc.n_phases; i++) {
        phase(pc.first + i);
        if (pc.spin != 0u && i + 1u < pc.n_phases)
            grid_barrier(pc.base + (i + 1u) * gl_NumWorkGroups.x);
        else
            barrier();   // shared memory is reused by the next phase
    }
}
