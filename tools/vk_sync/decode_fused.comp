#version 450
// decode_fused.comp — bench_persistent_decode.c's fused pass (fused=1;
// one token): phase 2 l + k is layer l's
//   k = 0  attention block, a workgroup a unit u, head h = u / pc.split
//          and part u % pc.split: x normed and quantized; the head's q
//          rows and its kv head's k and v rows (each unit of a kv head
//          makes them again, the second on from L2); attention over the
//          cache and the token; its output quantized, times o's HD
//          columns of the head, for the part's d / split rows of x
//   k = 1  ffn block, a unit a chunk of HD of ff: x normed and quantized;
//          the chunk's gate and up rows; h = silu(g) u, quantized; times
//          down's HD columns of the chunk, for every row of x
// and phase 2 n_layers is the output matrix. A unit's sums for rows of x
// are partial: each is added to the residual atomically in fixed point
// (fx_add), integer adds, so the residual is the same bits whatever order
// they come in, and no workgroup waits for another. Phase p reads the
// residual from buffer p (phase 0 from x) and adds it, and its partials,
// into buffer p + 1. Two dependencies a layer instead of five.
//
// On the H200 (docs/vulkan-sessions.md, session 49) it was slower than
// decode_phases.comp's 5 phases (1.05 ms a step against 0.96): the
// attention block, 128 workgroups each streaming its q, k and v rows,
// took ~25 us a layer where q/k/v, attention and o take ~16; the ffn
// block ~24 against ~27 for gate/up and down apart. The atomic adds cost
// nothing that showed (-DNO_ATOMICS: 1.04 ms).
//
// o's and down's HD columns of a head or chunk are a matrix of their own
// (what an upload would repack them to): d rows of HD quants, then the d
// rows' two f16 scales, a word a row.
//
// -DNO_ATOMICS (timing only): partials stored, not added.
#define FUSED
#include "decode_pass.glsl"

// Buffer p's first word (p = 1 .. 2 n_layers), past the logits.
uint fx_at(uint p)
{
    const uint end = logits_at(0u) + TMAX * pc.vocab;
    return ((end + 3u) & ~3u) + (p - 1u) * 2u * pc.d;
}

// Adds (hi, lo) to value i of buffer base (fx_float's units).
void fx_add(uint base, uint i, uint lo, uint hi)
{
    atomicAdd(actu[base + i], lo);
    atomicAdd(actu[base + pc.d + i], hi);
}

// Adds value i of buffer src to value i of buffer dst, lo's carry moved.
void fx_add_fx(uint dst, uint src, uint i)
{
    const uint lo = actu[src + i], hi = actu[src + pc.d + i];
    fx_add(dst, i, lo & 0xfffffu, hi + (lo >> 20u));
}

void fx_add_float(uint base, uint i, float v)
{
#ifdef NO_ATOMICS   // (timing only: a plain store, wrong sums)
    actu[base + i] = floatBitsToUint(v);
    return;
#endif
    const float t = clamp(v, -524288.0, 524288.0) * 4096.0, hi = floor(t);
    fx_add(base, i, uint((t - hi) * 1048576.0), uint(int(hi)));
}

// The rows of m this workgroup's subgroups take, a pair each in turn (x
// quantized already), into shared memory (kind 3 or 4).
void local_rows(matvec_t m)
{
    g_pair_stride = gl_NumSubgroups;
    const uint chunks = (m.cols / 16u + gl_SubgroupSize * CH - 1u) /
                        (gl_SubgroupSize * CH);
    for (uint q0 = gl_SubgroupID; q0 < m.pairs;
         q0 += gl_NumSubgroups * uint(PAIRS)) {
        float p[NR][TMAX];
        [[unroll]] for (uint r = 0u; r < NR; r++)
            [[unroll]] for (uint t = 0u; t < TMAX; t++)
                p[r][t] = 0.0;
        for (uint c = 0u; c < chunks; c++)
            add_chunk(load_chunk(m, q0, 0u, m.cols, c), m.cols, c, p);
        store_pairs(m, q0, p);
    }
}

// hsh's HD values into hq, two blocks of 32 quantized as x is, and their
// scales into hd: 8 lanes a block.
void quantize_h()
{
    const uint t = gl_LocalInvocationID.x;
    barrier();   // hsh is written; the unit before has read hq and hd
    if (t < HD / 4u) {
        float amax;
        hq[t] = quantize4(vec4(hsh[4u * t], hsh[4u * t + 1u],
                               hsh[4u * t + 2u], hsh[4u * t + 3u]),
                          amax);
        if (t % 8u == 0u)
            hd[t / 8u] = amax / 127.0;
    }
    barrier();
}

// Rows r0 .. r0 + rows of the HD-column matrix at mat times hq, each
// added to buffer dst: a thread a row, RPT rows' loads issued at once.
#define RPT 4u
void chunk_partials(uint mat, uint r0, uint rows, uint dst)
{
    const uint t = gl_LocalInvocationID.x;
    uvec4 hx[4];
    [[unroll]] for (uint k = 0u; k < 4u; k++)
        hx[k] = uvec4(hq[4u * k], hq[4u * k + 1u], hq[4u * k + 2u],
                      hq[4u * k + 3u]);
    const float d0 = hd[0], d1 = hd[1];
    for (uint r1 = 0u; r1 < rows; r1 += RPT * WG) {
        uvec4 w[RPT][4];
        uint sc[RPT];
        [[unroll]] for (uint i = 0u; i < RPT; i++) {
            const uint r = r0 + min(r1 + i * WG + t, rows - 1u);
            [[unroll]] for (uint k = 0u; k < 4u; k++)
                w[i][k] = w4[(mat + r * HD) / 16u + k];
            sc[i] = w1[(mat + pc.d * HD) / 4u + r];
        }
        [[unroll]] for (uint i = 0u; i < RPT; i++) {
            const uint rr = r1 + i * WG + t;
            if (rr >= rows)
                break;
            int s[2];
            [[unroll]] for (uint b = 0u; b < 2u; b++) {
                const uvec4 a = w[i][2u * b], c = w[i][2u * b + 1u];
                const uvec4 x = hx[2u * b], y = hx[2u * b + 1u];
                s[b] = sdot(a.x, x.x, 0) + sdot(a.y, x.y, 0) +
                       sdot(a.z, x.z, 0) + sdot(a.w, x.w, 0) +
                       sdot(c.x, y.x, 0) + sdot(c.y, y.y, 0) +
                       sdot(c.z, y.z, 0) + sdot(c.w, y.w, 0);
            }
            const vec2 ds = unpackHalf2x16(sc[i]);
            fx_add_float(dst, r0 + rr,
                         fma(float(s[1]), ds.y * d1, float(s[0]) * (ds.x * d0)));
        }
    }
}

void attention_block(uint layer, uint u, uint dst)
{
    const uint rb = row_bytes(pc.d), part = u % pc.split;
    const uint wqkv = layer * layer_bytes();
    const uint wo = wqkv + qkv_rows() * rb;
    g_head = u / pc.split;
    g_kv_head = g_head / (pc.n_head / pc.n_kv);
    local_rows(matvec_t(wqkv, 3u * HD / 2u, pc.d, 0u, 0u, 0u, 0u, 3u, 0u));
    attention(layer, g_head, 0u, true);   // (its first barrier: qkv_sh)
    quantize_h();
    const uint rows = pc.d / pc.split;
    chunk_partials(wo + g_head * pc.d * row_bytes(HD), part * rows, rows,
                   dst);
}

void ffn_block(uint layer, uint c, uint dst)
{
    const uint rb = row_bytes(pc.d);
    const uint wgu = layer * layer_bytes() + (qkv_rows() + pc.d) * rb;
    const uint wd = wgu + 2u * pc.ff * rb;
    local_rows(matvec_t(wgu + c * HD * rb, HD, pc.d, 0u, 0u, 0u, 0u, 4u,
                        pc.ff));
    quantize_h();   // (its first barrier: hsh)
    chunk_partials(wd + c * pc.d * row_bytes(HD), 0u, pc.d, dst);
}

void fused_phase(uint ph)
{
    const uint L = pc.n_layers, k = ph % 2u;
    const uint gt = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
    const uint gs = gl_NumWorkGroups.x * WG;
    if (ph == 2u * L) {   // the output; buffers 1 .. 2L - 1 zeroed
        for (uint i = gt; i < (2u * L - 1u) * 2u * pc.d; i += gs)
            actu[fx_at(1u) + i] = 0u;
        if ((pc.skip >> 5u & 1u) == 0u)
            matvec(matvec_t(L * layer_bytes(), pc.vocab / 2u, pc.d,
                            FX_BIT | fx_at(2u * L), pc.d, logits_at(0u),
                            pc.vocab, 0u, 0u),
                   true);
        return;
    }
    if (ph == 0u)
        for (uint i = gt; i < 2u * pc.d; i += gs)
            actu[fx_at(2u * L) + i] = 0u;
    const uint src = ph == 0u ? x_at(0u) : FX_BIT | fx_at(ph);
    const uint dst = fx_at(ph + 1u);
    for (uint r = gt; r < pc.d; r += gs) {   // the residual itself
        if (ph == 0u)
            fx_add_float(dst, r, act[x_at(0u) + r]);
        else
            fx_add_fx(dst, fx_at(ph), r);
    }
    const uint units = k == 0u ? pc.n_head * pc.split : pc.ff / HD;
    if ((pc.skip >> k & 1u) != 0u || gl_WorkGroupID.x >= units)
        return;
    quantize_x(src, 0u, 0u, pc.d, true);
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) {
        if (k == 0u)
            attention_block(ph / 2u, u, dst);
        else
            ffn_block(ph / 2u, u, dst);
        barrier();   // shared memory is the next unit's
    }
}

void phase(uint ph) { fused_phase(ph); }
