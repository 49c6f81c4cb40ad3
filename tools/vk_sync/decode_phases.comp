#version 450
// decode_phases.comp — the shader of tools/vk_sync/bench_persistent_decode.c:
// the work of one decode step of a llama-shaped model with Q8_0 weights and
// an f16 cache, as phases. Phase 5 l + k is layer l's
//   k = 0  q/k/v:   x normed (sum of squares over the row), quantized to
//                   int8 blocks of 32 in shared memory, times Wqkv
//   k = 1  attention: a workgroup a head, over pc.ctx cached positions and
//                   the new one (its key and value from q/k/v)
//   k = 2  o:       x += Wo att
//   k = 3  gate/up: x normed and quantized, h = silu(Wg x) (Wu x)
//   k = 4  down:    x += Wd h
// and phase 5 n_layers is the output matrix (x normed, logits = Wout x).
//
// With pc.spin = 1 one dispatch runs pc.n_phases phases from pc.first and
// its workgroups, all resident, meet at a grid-wide barrier (an atomic
// counter) between phases; with spin = 0 the host records one dispatch a
// phase, with a pipeline barrier between them (what kakeya's passes do).
// The arithmetic of a value never depends on the mode or the grid, so the
// logits must be the same bits either way: the host checks that, which
// shows the grid barrier lets no phase read before the one before it wrote.
//
// Weights are not meant to be a model's: rows are n_cols int8 quants
// followed by n_cols / 32 f16 scales (the layout kakeya's repacked Q8_0
// rows have), filled with hashed words by decode_fill.comp. What is
// measured is time, not text.
//
// Every workgroup must be resident at once for the grid barrier to end:
// the host runs one workgroup a multiprocessor. (Two workgroups of 256
// threads a multiprocessor of the H200, 264, never finished: the driver
// may lay out shared memory so that only one fits, and Vulkan has no way
// to ask.)
//
// Switches, for the measurements README.md records: -DWG_SIZE (threads a
// workgroup, 512 by default), -DCH_WORDS (16-byte words a lane loads at
// once per row, 4), -DACT_CACHED (activations read through L1: right only
// with one dispatch a phase) and -DNO_PROLOGUE (x neither staged, normed
// nor quantized: wrong, timing only).
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
    uint skip;   // bit k: phases of kind k (5: the output) do nothing
} pc;

#define HD 64u

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"],
                  capabilities = [6019, 6018], id = 4450)
int sdot(uint a, uint b, spirv_literal int packed_vector_format);

// activation offsets
uint x_at() { return 0u; }
uint qkv_at() { return pc.d; }
uint att_at() { return qkv_at() + pc.d + 2u * pc.n_kv * HD; }
uint h_at() { return att_at() + pc.d; }
uint logits_at() { return h_at() + pc.ff; }

// row bytes and matrix offsets, in bytes
uint row_bytes(uint cols) { return cols + cols / 16u; }
uint qkv_rows() { return pc.d + 2u * pc.n_kv * HD; }
uint layer_bytes()
{
    return qkv_rows() * row_bytes(pc.d) + pc.d * row_bytes(pc.d) +
           2u * pc.ff * row_bytes(pc.d) + pc.d * row_bytes(pc.ff);
}

shared float xf[8192];            // the phase's input, staged
shared uvec4 xq4[8192u / 16u];   // x's quants, 16 a word
shared float xd[8192u / 32u];    // x's block scales
shared float red[WG / 8u];       // one value per subgroup (at least 8 wide)
// Attention's scores (up to 1024 positions, then WG partial sums) live in
// xf past the head's q, k and v: the arrays stay under the 48 KiB a
// workgroup gets on NVIDIA (past it, pipelines were made and the device
// was lost at the first dispatch).
#define SCORES(i) xf[1024u + (i)]

float wg_sum(float v)
{
    float s = subgroupAdd(v);
    if (subgroupElect())
        red[gl_SubgroupID] = s;
    barrier();
    float t = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++)
        t += red[i];
    barrier();
    return t;
}

float wg_max(float v)
{
    float s = subgroupMax(v);
    if (subgroupElect())
        red[gl_SubgroupID] = s;
    barrier();
    float t = -3.0e38;
    for (uint i = 0u; i < gl_NumSubgroups; i++)
        t = max(t, red[i]);
    barrier();
    return t;
}

// act[src .. src + n) into xf (n a multiple of 4, at most 8192): every
// load issued before any is stored, one round trip.
#define STAGE_MAX 8u
void stage_x(uint src, uint n)
{
    vec4 v[STAGE_MAX];
    [[unroll]] for (uint k = 0u; k < STAGE_MAX; k++)
        if (k * WG + gl_LocalInvocationID.x < n / 4u)
            v[k] = act4[src / 4u + k * WG + gl_LocalInvocationID.x];
    [[unroll]] for (uint k = 0u; k < STAGE_MAX; k++)
        if (k * WG + gl_LocalInvocationID.x < n / 4u) {
            uint c = 4u * (k * WG + gl_LocalInvocationID.x);
            xf[c] = v[k].x;
            xf[c + 1u] = v[k].y;
            xf[c + 2u] = v[k].z;
            xf[c + 3u] = v[k].w;
        }
    barrier();
}

float rms_scale(uint n)
{
    float s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < n; i += WG)
        s += xf[i] * xf[i];
    return inversesqrt(wg_sum(s) / float(n) + 1e-5);
}

// xf[0 .. n) times `scale` into xq4/xd: 8 lanes a block of 32, 4 values
// a lane.
void quantize_x(uint n, float scale)
{
    const uint j = gl_LocalInvocationID.x % 8u;
    for (uint b = gl_LocalInvocationID.x / 8u; b < n / 32u; b += WG / 8u) {
        const uint c = 32u * b + 4u * j;
        vec4 v = vec4(xf[c], xf[c + 1u], xf[c + 2u], xf[c + 3u]) * scale;
        vec4 a = abs(v);
        float amax = subgroupClusteredMax(max(max(a.x, a.y), max(a.z, a.w)), 8u);
        float id = amax > 0.0 ? 127.0 / amax : 0.0;
        ivec4 q = ivec4(round(v * id));
        uint word = (uint(q.x) & 255u) | ((uint(q.y) & 255u) << 8u) |
                    ((uint(q.z) & 255u) << 16u) | ((uint(q.w) & 255u) << 24u);
        xq4[2u * b + j / 4u][j % 4u] = word;
        if (j == 0u)
            xd[b] = amax / 127.0;
    }
    barrier();
}

float half_at(uint byte_off)
{
    uint w = w1[byte_off / 4u];
    return unpackHalf2x16((byte_off & 2u) != 0u ? w >> 16u : w).x;
}

// A product phase: rows taken a pair at a time by a subgroup (rows 2q and
// 2q + 1, or gated: gate row q and up row ff + q), each pair's columns in
// chunks of CH 16-byte words a lane (lane j: words j, j + sg, ...), every
// load of a chunk (both rows) issued before any is used. A lane adds its
// words in the same order whatever CH is, so the bits are CH's too.
#ifndef CH_WORDS
#define CH_WORDS 4
#endif
#define CH uint(CH_WORDS)
struct matvec_t {
    uint mat, pairs, cols, dst, kind;   // kind 0 store, 1 add, 2 gated
};
struct chunk_t {
    uvec4 w[2][CH];
    float dw[2][CH];
};

uint row_a(matvec_t m, uint q) { return m.kind == 2u ? q : 2u * q; }
uint row_b(matvec_t m, uint q) { return m.kind == 2u ? q + m.pairs : 2u * q + 1u; }

chunk_t load_chunk(matvec_t m, uint q, uint c)
{
    const uint sg = gl_SubgroupSize, j = gl_SubgroupInvocationID;
    const uint words = m.cols / 16u, rb = row_bytes(m.cols);
    chunk_t ch;
    [[unroll]] for (uint r = 0u; r < 2u; r++) {
        const uint base = m.mat + (r == 0u ? row_a(m, q) : row_b(m, q)) * rb;
        [[unroll]] for (uint k = 0u; k < CH; k++) {
            uint i = min(c * sg * CH + j + k * sg, words - 1u);
            ch.w[r][k] = w4[base / 16u + i];
            ch.dw[r][k] = half_at(base + m.cols + 2u * (i / 2u));
        }
    }
    return ch;
}

void add_chunk(matvec_t m, chunk_t ch, uint c, inout float p[2])
{
    const uint sg = gl_SubgroupSize, j = gl_SubgroupInvocationID;
    const uint words = m.cols / 16u;
    [[unroll]] for (uint k = 0u; k < CH; k++) {
        uint i = c * sg * CH + j + k * sg;
        if (i >= words)
            break;
        uvec4 x = xq4[i];
        float dx = xd[i / 2u];
        [[unroll]] for (uint r = 0u; r < 2u; r++) {
            int s = sdot(ch.w[r][k].x, x.x, 0) + sdot(ch.w[r][k].y, x.y, 0) +
                    sdot(ch.w[r][k].z, x.z, 0) + sdot(ch.w[r][k].w, x.w, 0);
            p[r] = fma(float(s), ch.dw[r][k] * dx, p[r]);
        }
    }
}

uint first_pair() { return gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; }

// The pair's row sums (each lane's part added over the subgroup), stored,
// added to the residual, or gated.
void store_pair(matvec_t m, uint q, float pa, float pb)
{
    float a = subgroupAdd(pa), b = subgroupAdd(pb);
    if (subgroupElect()) {
        uint ra = row_a(m, q), rb = row_b(m, q);
        if (m.kind == 0u) {
            act[m.dst + ra] = a;
            act[m.dst + rb] = b;
        } else if (m.kind == 1u) {
            act[m.dst + ra] += a;
            act[m.dst + rb] += b;
        } else {
            act[m.dst + ra] = a / (1.0 + exp(-a)) * b;
        }
    }
}

// Pair q, q + subgroups, ... of the phase for each subgroup: one pair at a
// time, its chunks in turn. On the H200 these gained nothing: loading the
// next pair's chunk before adding up this one's (twice the registers),
// and loading a phase's first chunk before the grid barrier (in registers,
// and with a branch on them so that no compiler sinks the loads); and down's
// four chunks a pair split across four subgroups, their sums added through
// shared memory, gained 1.4% of a step.
void matvec(matvec_t m)
{
    const uint subgroups = gl_NumWorkGroups.x * gl_NumSubgroups;
    const uint chunks = (m.cols / 16u + gl_SubgroupSize * CH - 1u) /
                        (gl_SubgroupSize * CH);
    for (uint q = first_pair(); q < m.pairs; q += subgroups) {
        float p[2] = float[2](0.0, 0.0);
        for (uint c = 0u; c < chunks; c++)
            add_chunk(m, load_chunk(m, q, c), c, p);
        store_pair(m, q, p[0], p[1]);
    }
}

// Head h's attention over ctx cached positions and the new one.
void attention(uint layer, uint h)
{
    const uint kvh = h / (pc.n_head / pc.n_kv), t = gl_LocalInvocationID.x;
    const uint kn = qkv_at() + pc.d + kvh * HD;
    const uint vn = kn + pc.n_kv * HD;
    // cache words (2 halves each) of this kv head's keys, then values
    const uint kbase = ((layer * pc.n_kv + kvh) * 2u * pc.ctx) * HD / 2u;
    const uint vbase = kbase + pc.ctx * HD / 2u;
    const uint n = pc.ctx + 1u;
    if (t < HD) {
        xf[t] = act[qkv_at() + h * HD + t];
        xf[HD + t] = act[kn + t];
        xf[2u * HD + t] = act[vn + t];
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
                s += a.x * xf[o] + a.y * xf[o + 1u] + b.x * xf[o + 2u] +
                     b.y * xf[o + 3u] + c.x * xf[o + 4u] + c.y * xf[o + 5u] +
                     e.x * xf[o + 6u] + e.y * xf[o + 7u];
            }
        } else {
            for (uint k = 0u; k < HD; k++)
                s += xf[HD + k] * xf[k];
        }
        s *= 0.125;
        SCORES(p) = s;
        m = max(m, s);
    }
    m = wg_max(m);
    float l = 0.0;
    for (uint p = t; p < n; p += WG) {
        float e = exp(SCORES(p) - m);
        SCORES(p) = e;
        l += e;
    }
    l = wg_sum(l);   // its barriers also make scores visible
    // 4 partitions of 64 threads, each a value of the head
    const uint dim = t % HD, part = t / HD;
    float o = 0.0;
    for (uint p = part; p < n; p += WG / HD) {
        float v = p < pc.ctx
                      ? unpackHalf2x16(kv1[vbase + p * HD / 2u + dim / 2u] >>
                                       (16u * (dim & 1u))).x
                      : xf[2u * HD + dim];
        o = fma(SCORES(p), v, o);
    }
    SCORES(1024u + t) = o;
    barrier();
    if (t < HD) {
        float s = 0.0;
        for (uint k = 0u; k < WG / HD; k++)
            s += SCORES(1024u + k * HD + t);
        act[att_at() + h * HD + t] = s / l;
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

// The product of phase ph (false: attention, which has none).
bool product_of(uint ph, out matvec_t m)
{
    const uint layer = ph / 5u, k = ph % 5u;
    const uint lb = layer * layer_bytes();
    const uint wqkv = lb, wo = wqkv + qkv_rows() * row_bytes(pc.d);
    const uint wgu = wo + pc.d * row_bytes(pc.d);
    const uint wd = wgu + 2u * pc.ff * row_bytes(pc.d);
    m = matvec_t(0u, 0u, pc.d, 0u, 0u);
    if (layer == pc.n_layers)
        m = matvec_t(lb, pc.vocab / 2u, pc.d, logits_at(), 0u);
    else if (k == 0u)
        m = matvec_t(wqkv, qkv_rows() / 2u, pc.d, qkv_at(), 0u);
    else if (k == 2u)
        m = matvec_t(wo, pc.d / 2u, pc.d, x_at(), 1u);
    else if (k == 3u)
        m = matvec_t(wgu, pc.ff, pc.d, h_at(), 2u);
    else if (k == 4u)
        m = matvec_t(wd, pc.d / 2u, pc.ff, x_at(), 1u);
    return k != 1u || layer == pc.n_layers;
}

void phase(uint ph)
{
    if (skipped(ph))
        return;
    const uint layer = ph / 5u, k = ph % 5u;
    matvec_t m;
    if (!product_of(ph, m)) {
        for (uint h = gl_WorkGroupID.x; h < pc.n_head; h += gl_NumWorkGroups.x)
            attention(layer, h);
        return;
    }
    const bool normed = layer == pc.n_layers || k == 0u || k == 3u;
    const uint src = k == 2u ? att_at() : k == 4u ? h_at() : x_at();
#ifndef NO_PROLOGUE
    /* (-DNO_PROLOGUE leaves x as the last phase left it: wrong, timing
     * only, to see what staging, norming and quantizing cost) */
    stage_x(src, m.cols);
    quantize_x(m.cols, normed ? rms_scale(m.cols) : 1.0);
#endif
    matvec(m);
}

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
