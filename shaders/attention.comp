/* attention.comp — softmax(scale q.K) V for one (head, query row) per
 * workgroup (contract in engine/vulkan/vk_shaders.h; the CPU twin is
 * backend_cpu.c's attention_task with kv.h's kv_visible and kv_slot).
 *
 * The positions the query sees, [0, sink_end) and [lo, p], are numbered
 * 0..n_vis-1 in order (the batch's own, in the stage buffers, come last)
 * and taken WG at a time. Each thread scores one key of the chunk (a dot
 * product with the query, held in shared memory, over head_dim values read
 * in place from the cache or stage buffer: f32, f16 or q8_0). The chunk's
 * maximum is each subgroup's (subgroupMax), then the largest of those,
 * which pass through shared memory (gl_NumSubgroups of them, whatever the
 * device's subgroup size); an online softmax rescales what was accumulated
 * so far (running maximum m, per-thread running sums l, outputs o) by
 * e^(m_old - m_new). Then the threads, split into partitions of tpp threads
 * (head_dim/4 rounded up to a power of two), add p_k V[k] for the chunk's
 * keys: each thread owns 4 output values of its partition, each partition
 * every parts-th key. At the end the threads' sums are added the same way
 * (subgroupAdd, then the subgroups' sums) and the partitions' outputs in
 * shared memory. Nothing but a few shared arrays is needed, for any context
 * length. Scores and the softmax are f32 with the maximum subtracted (the
 * CPU sums in double): agreement is to ~1e-5, not to the bit. Every
 * reduction stays inside the workgroup, in an order fixed by the device
 * alone, so a row has the same bits alone (decoding) as in a batch
 * (speculative verification), which greedy speculative decoding needs.
 *
 * Speed: decoding runs only n_head workgroups, too few to fill a GPU, so a
 * workgroup's time is its chain of waits, for loads and at barriers. So on
 * a GPU a workgroup is 512 threads (ATT_WG), whose chunks of 512 keys halve
 * the chain past 256 positions: on the H200 (1B shape, Q8_0, after a
 * 256-token prompt) decoding took 1.45 ms a token against 1.50 with 256
 * threads and 1.53 with 128; below 256 positions 512 threads cost ~1.7 us
 * more a layer (14.3 against 12.6 us), most of them idle. A CPU-backed
 * device (lavapipe) runs a workgroup's invocations as one thread's SIMD
 * lanes, where every idle lane and barrier is paid for: attention_cpu is
 * this shader with 64 (tiny-llama shape on 2 cores: prefill 2,241 tok/s
 * against 681 with 256 and 310 with 512; decode 484 against 345). A
 * chunk costs two barriers (after the subgroups' maxima, after the
 * probabilities) where trees in shared memory took eleven, and the end one
 * where it took nine. The chunk's shared arrays come in two copies used in
 * turn, so that a chunk overwrites nothing a slower thread may still read
 * from the one before and needs no barrier of its own: the copy it writes
 * was last read by the chunk before last, which every thread had finished
 * before the last chunk's first barrier. Partitions are as narrow as the
 * head allows (16 threads for a head of 64, where 32 left half of them
 * idle), so that a chunk's V rows take half the rounds of loads. The loops
 * that read K and V are specialised per storage type and buffer, with no
 * branch between a load and its use, so that a thread's loads (8 at a time)
 * are in flight together; a branch there makes the GPU wait for each load
 * in turn (on an H200, 4x slower). 16 loads at a time (a key's 64 values,
 * or 16 keys' values) made lavapipe up to 2x slower; on a GPU that is
 * unmeasured. Heads whose values cannot be read 4 at a time (f16 rows off a
 * word, q8_0 blocks not a multiple of 4, head_dim not a multiple of 4) take
 * a slower path value by value.
 *
 * A decode step's row of a long context used to be the one workgroup of
 * its head, walking the row's chunks in turn while the rest of the GPU
 * waited (on the H200, 187 us a layer of the 1B shape after 8,000
 * positions). attention_rope therefore cuts such rows into splits
 * (att_split.glsl): workgroup z takes its splits of the row, each with the
 * online softmax from scratch, and writes a partial per split (its
 * maximum, its sum of exponentials, its weighted values); the last of the
 * row's workgroups to be done (a count in a device buffer) adds them in
 * order (att_merge.glsl). That was a dispatch of its own, attention_merge,
 * whose launch and wait cost each layer ~6 us of a decode step past 512
 * positions on the H200.
 *
 * A workgroup of one query head reads its kv head's keys and values for
 * itself: a prompt's or a long verify block's kv head was read 4 times
 * over for the 4 query heads of each kv head of the 1B shape. The forms
 * of -DATT_HEADS (attention_h2, _h4, attention_rope_h2, _h4) take 2 or 4
 * query heads of one kv head a workgroup: a thread loads its key once and
 * scores it against each head, and a partition's value rows serve each
 * head's output, while every head's sums (the dot products, the softmax,
 * o += p v, the reductions) run in the order one head's run in, so each
 * head gets the one-head form's bits (test_vk_ops, on lavapipe and on the
 * NVIDIA driver) and the backend may pick the form per batch. The chain
 * of work a workgroup does grows with its heads (a decode step's
 * attention_rope on the 1B shape 26.5 us with 4 against 14.2 with 1), so
 * only a batch with more workgroups than the GPU runs at once gains (H200,
 * 1B shape, after 4,096 positions): verifying 8 tokens 4.5 ms against 5.4,
 * 16 tokens 6.6 against 9.1, a prompt of 4,096 tokens 6,050 tok/s against
 * 3,780.
 *
 * With -DATT_ROPE (attention_rope, attention_rope_cpu) the shader also
 * does rope_kv_store's work for a batch of up to 17 rows (decoding and
 * verifying): see "attention_rope" below. On the H200 it took a decode
 * step's rope_kv_store dispatch off each layer: 1B shape 1.070-1.101 ms
 * against 1.107-1.126, qwen3-0.6b 1.46-1.51 against 1.58-1.64, the default
 * model 0.510-0.518 against 0.530-0.549 (tools/gpu-ab.sh); its first
 * forms gained nothing or little (the rows through a device buffer; every
 * value made behind branches that each held a load). The softmax's
 * running sums are `precise`, as the dot products are, so that no
 * compilation of it may contract them its own way. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "common.glsl"
#include "kv_slot.glsl"
#include "att_split.glsl"

/* Threads a workgroup (the Makefile's -DATT_WG; at least HD_MAX / 4, so
 * that a partition of 4 values a thread covers any head). */
#ifndef ATT_WG
#define ATT_WG 512
#endif
#if ATT_WG < 64
#error "attention.comp: ATT_WG is at least HD_MAX / 4 = 64"
#endif
#define WG uint(ATT_WG)
/* Query heads a workgroup (the Makefile's -DATT_HEADS; attention_h2, _h4,
 * attention_rope_h2, _h4): heads h0 .. h0 + ATT_HEADS - 1 of one kv head,
 * each key and value loaded once for all of them, each head's sums made as
 * a workgroup of one head makes them (its bits). Past one head, subgroups
 * are at least 8 wide (the host's condition), which keeps the shared
 * arrays in 48 KiB. glslc's [[unroll]] keeps `precise` (NoContraction)
 * on the first copy of an instruction only, leaving the other heads' to
 * the driver to fuse or reorder: with the softmax's step (RESCALE)
 * unrolled so, attention_h2 parted from attention's bits on lavapipe and,
 * before its exponents were (s - m) scale, on the NVIDIA driver. So that
 * step is written out once per head; the loops left to [[unroll]] hold
 * explicit fmas and sums of loaded values only, which both drivers keep
 * as written (test_vk_ops). */
#ifndef ATT_HEADS
#define ATT_HEADS 1
#endif
#define NH uint(ATT_HEADS)
#if ATT_HEADS != 1 && ATT_HEADS != 2 && ATT_HEADS != 4
#error "attention.comp: ATT_HEADS is 1, 2 or 4"
#endif
#if ATT_HEADS * 64 > ATT_WG
#error "attention.comp: ATT_WG makes the query heads: 64 threads each"
#endif
#if ATT_HEADS > 1
#define SG_MIN 8u
#else
#define SG_MIN 1u
#endif
#define HD_MAX 256u
#define STAGED 0x80000000u  /* row index flag: in the stage buffers */
#define V_STEP 8u           /* keys whose values are loaded together */
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = ATT_WG) in;

layout(std430, binding = 0) readonly buffer QBuf { float q[]; };
layout(std430, binding = 5) writeonly buffer OutBuf { float o_out[]; };
layout(std430, binding = 6) readonly buffer PosBuf { uint pos_words[]; };
#ifdef ATT_ROPE
layout(std430, binding = 0) readonly buffer QBuf4 { vec4 q4[]; };
/* each split's partial: its largest dot product m, its sum of
 * e^(scale (s - m)) and its head of sum e^(scale (s - m)) v, at split_at()
 * (attention_push.glsl) */
layout(std430, binding = 9) writeonly buffer PartBuf { float part_out[]; };
/* the same partials as the row's last workgroup reads them, other
 * workgroups' among them: past this multiprocessor's cache */
layout(std430, binding = 9) coherent readonly buffer PartIn { float part[]; };
/* per row and workgroup of heads: how many of its split workgroups are
 * done (0 between passes: the last one clears it) */
layout(std430, binding = 10) buffer SplitCounts { uint split_counts[]; };
/* the batch's rows go into their slots (one workgroup per kv head writes) */
layout(std430, binding = 1) buffer KCache { uint kc[]; };
layout(std430, binding = 2) buffer VCache { uint vc[]; };
layout(std430, binding = 3) readonly buffer KRaw { float k_raw[]; };
layout(std430, binding = 3) readonly buffer KRaw4 { vec4 k_raw4[]; };
layout(std430, binding = 4) readonly buffer VRaw { uint v_raw[]; };
layout(std430, binding = 6) readonly buffer CSBuf { float cs[]; };
layout(std430, binding = 7) readonly buffer QWBuf { float qw[]; };
layout(std430, binding = 8) readonly buffer KWBuf { float kw[]; };
/* The batch's rows of this workgroup's kv head that its query sees, keys
 * then values (2 (t + 1) head_bytes; the host keeps 2 n head_bytes within
 * this: vk_shaders.h) */
#define ROPE_STAGE_WORDS 4352u
shared uint hs[ROPE_STAGE_WORDS];
#else
layout(std430, binding = 1) readonly buffer KCache { uint kc[]; };
layout(std430, binding = 2) readonly buffer VCache { uint vc[]; };
layout(std430, binding = 3) readonly buffer KStage { uint ks[]; };
layout(std430, binding = 4) readonly buffer VStage { uint vs[]; };
#endif
/* The cache's f16 and f32 rows read 16 or 8 bytes a load where they are
 * aligned (`wide` below): the same words as kc and vc, fewer loads. */
layout(std430, binding = 1) readonly buffer KCacheWide { uvec4 kc4[]; };
layout(std430, binding = 2) readonly buffer VCacheWide { uvec2 vc2[]; };
layout(std430, binding = 2) readonly buffer VCacheWide4 { uvec4 vc4[]; };

#include "attention_push.glsl"
#ifdef ATT_ROPE
#include "att_merge.glsl"
#endif

/* The chunk's arrays come in two copies used in turn (chunk c's are
 * [c & 1]); WG entries hold every subgroup's value whatever its size. */
shared vec4 qsh[NH][HD_MAX / 4u]; /* the query heads, zero-padded to 4 */
shared float msh[2][NH][WG / SG_MIN]; /* each subgroup's largest dot */
shared uint rsh[2][WG];         /* the chunk's rows: index | STAGED */
shared float lsh[WG / SG_MIN];  /* each subgroup's sum of l, at the end */
/* The chunk's probabilities, copy b and head q at PSH(b, q, 0), and at a
 * split's end the partitions' outputs of one head at OSH(0) (4 WG: a
 * thread's 4 values), which reuse the same words behind a barrier. */
#define POOL_WORDS (NH > 1u ? 2u * NH * WG : 4u * WG)
shared float pool[POOL_WORDS];
#define PSH(b, q, j) pool[((b) * NH + (q)) * WG + (j)]
#define OSH(i) pool[i]

/* ---- reading values of a stored row ---- */

/* Values e .. e+3 of the row at byte off of buffer buf, 4 at a time:
 * f32 words; f16 two words (row and value on a word); q8_0 four int8
 * of one block (block a multiple of 4) times its f16 scale, as
 * kv_load_head computes them (scale * q). */
#define FETCH_F32(buf, off, e)                                               \
    uintBitsToFloat(uvec4(buf[((off) >> 2u) + (e)],                          \
                          buf[((off) >> 2u) + (e) + 1u],                     \
                          buf[((off) >> 2u) + (e) + 2u],                     \
                          buf[((off) >> 2u) + (e) + 3u]))
#define FETCH_F16(buf, off, e)                                               \
    vec4(unpackHalf2x16(buf[((off) + 2u * (e)) >> 2u]),                      \
         unpackHalf2x16(buf[(((off) + 2u * (e)) >> 2u) + 1u]))
#define FETCH_Q8(buf, off, e) fetch_q8_##buf(off, e)
/* FETCH_F16 through buf's 8-byte view (vc2): one load, where off + 2 e
 * is a multiple of 8 (`wide`); FETCH_F32 through its 16-byte view (kc4,
 * vc4), where off + 4 e is a multiple of 16: a key's 64 f32 values in 16
 * loads instead of 64. */
#define FETCH_F16_WIDE(buf, off, e)                                          \
    f16_pairs(buf##2[((off) + 2u * (e)) >> 3u])
#define FETCH_F32_WIDE(buf, off, e)                                          \
    uintBitsToFloat(buf##4[((off) + 4u * (e)) >> 4u])

vec4 f16_pairs(uvec2 w)
{
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}

#define DEFINE_READERS(buf)                                                  \
    vec4 fetch_q8_##buf(uint off, uint e)                                    \
    {                                                                        \
        const uint B = pc.block;                                             \
        uint bb = off + (e / B) * (2u + B);                                  \
        uint at = bb + 2u + e % B;                                           \
        uint qw = KK_U32(buf, at);                                           \
        float sc = kk_f16_to_f32(KK_U16(buf, bb));                           \
        return sc * vec4(kk_sbyte(qw, 0u), kk_sbyte(qw, 1u),                 \
                         kk_sbyte(qw, 2u), kk_sbyte(qw, 3u));                \
    }                                                                        \
    /* Value e, any type and alignment: the slow path. */                    \
    float value_##buf(uint off, uint e)                                      \
    {                                                                        \
        if (pc.type == 0u)                                                   \
            return uintBitsToFloat(buf[(off >> 2u) + e]);                    \
        if (pc.type == 1u) {                                                 \
            uint at = off + 2u * e;                                          \
            return kk_f16_to_f32(KK_U16(buf, at));                           \
        }                                                                    \
        const uint B = pc.block;                                             \
        uint bb = off + (e / B) * (2u + B);                                  \
        uint at = bb + 2u + e % B;                                           \
        int qv = bitfieldExtract(int(KK_U8(buf, at)), 0, 8);                 \
        return kk_f16_to_f32(KK_U16(buf, bb)) * float(qv);                   \
    }

DEFINE_READERS(kc)
DEFINE_READERS(vc)
#ifdef ATT_ROPE
DEFINE_READERS(hs)
/* The batch's rows: the workgroup's copy in shared memory, a head's
 * values each. */
#define KS hs
#define VS hs
#else
DEFINE_READERS(ks)
DEFINE_READERS(vs)
#define KS ks
#define VS vs
#endif

/* s + a . b as one fma chain, x to w. Every sum that a key's or value's
 * row goes into is spelled out this way and `precise`, because a row is
 * read through one of two copies of the same code (cache or stage
 * buffer): left to itself the compiler may contract or reorder the two
 * copies differently (dot() leaves the order to it), and the same key
 * would score differently decoded than verified. Explicit fmas have one
 * rounding each, whatever the copy. */
float fma_dot(vec4 a, vec4 b, float s)
{
    precise float r = fma(a.x, b.x, s);
    r = fma(a.y, b.y, r);
    r = fma(a.z, b.z, r);
    r = fma(a.w, b.w, r);
    return r;
}

/* f_[0..7] = values e .. e+31 of the row at off of buf, 4 a vec4: eight
 * fetches; or (LOAD_F16_WIDE, where off + 2 e is a multiple of 16) the
 * same values from four 16-byte loads of buf's view kc4. A thread scores
 * a key alone, so each load of a subgroup touches as many rows as it has
 * lanes, and a quarter of the loads is a quarter of the rows' lines to
 * walk: on the H200 (1B shape, f16 cache, decoding after 8,000
 * positions) attention_rope took 30 us a layer against 55 with the
 * word-by-word fetches, and a token 1.39 ms against 1.77-1.80. */
#define LOAD_EACH(FETCH, buf, off, e, f_)                                    \
    [[unroll]] for (uint u_ = 0u; u_ < 8u; u_++)                             \
        f_[u_] = FETCH(buf, off, (e) + 4u * u_);
#define LOAD_F16_WIDE(FETCH, buf, off, e, f_)                                \
    [[unroll]] for (uint u_ = 0u; u_ < 4u; u_++) {                           \
        const uvec4 w_ = buf##4[((off) + 2u * ((e) + 8u * u_)) >> 4u];       \
        f_[2u * u_] = f16_pairs(w_.xy);                                      \
        f_[2u * u_ + 1u] = f16_pairs(w_.zw);                                 \
    }
/* q8_0 rows of blocks of 32 (e on a block: `q8_blocks`): the block's 34
 * bytes as the 9 words that hold them, where FETCH_Q8 read two words for
 * each 4 quants and the scale again each time (32 loads). The block starts
 * on an even byte (34-byte blocks from a word), so its quants start on a
 * word (r_ = 2) or 2 bytes into one (r_ = 0); each word of quants and the
 * scale are the bits KK_U32 and KK_U16 read, times the scale as FETCH_Q8
 * multiplies them. */
#define LOAD_Q8_BLOCK(FETCH, buf, off, e, f_)                                \
    {                                                                        \
        const uint bb_ = (off) + ((e) >> 5u) * 34u, r_ = bb_ & 3u;          \
        uint w_[9];                                                          \
        [[unroll]] for (uint i_ = 0u; i_ < 9u; i_++)                         \
            w_[i_] = buf[(bb_ >> 2u) + i_];                                  \
        const float sc_ = kk_f16_to_f32((w_[0] >> (r_ << 3u)) & 0xffffu);   \
        [[unroll]] for (uint u_ = 0u; u_ < 8u; u_++) {                       \
            const uint q_ = r_ == 0u ? (w_[u_] >> 16u) | (w_[u_ + 1u] << 16u) \
                                     : w_[u_ + 1u];                          \
            f_[u_] = sc_ * vec4(kk_sbyte(q_, 0u), kk_sbyte(q_, 1u),          \
                                kk_sbyte(q_, 2u), kk_sbyte(q_, 3u));         \
        }                                                                    \
    }

/* s[q] = query head q . K-row head (values e0.., head_dim of them, a
 * multiple of 32 then of 4), 8 values' loads (LOAD) issued before any is
 * used, the rest FETCHed 4 at a time; each head's sums in the same order
 * whatever NH or LOAD. */
#define DOT_LOOP(LOAD, FETCH, buf, off, e0, s)                               \
    {                                                                        \
        precise float s0_[NH], s1_[NH];                                      \
        [[unroll]] for (uint q_ = 0u; q_ < NH; q_++) {                       \
            s0_[q_] = 0.0;                                                   \
            s1_[q_] = 0.0;                                                   \
        }                                                                    \
        uint d_ = 0u;                                                        \
        for (; d_ + 32u <= pc.head_dim; d_ += 32u) {                         \
            vec4 f_[8];                                                      \
            LOAD(FETCH, buf, off, (e0) + d_, f_)                             \
            [[unroll]] for (uint u_ = 0u; u_ < 8u; u_ += 2u)                 \
                [[unroll]] for (uint q_ = 0u; q_ < NH; q_++) {               \
                    const uint i_ = (d_ >> 2u) + u_;                         \
                    s0_[q_] = fma_dot(qsh[q_][i_], f_[u_], s0_[q_]);         \
                    s1_[q_] = fma_dot(qsh[q_][i_ + 1u], f_[u_ + 1u],         \
                                      s1_[q_]);                              \
                }                                                            \
        }                                                                    \
        for (; d_ < pc.head_dim; d_ += 4u) {                                 \
            const vec4 f_ = FETCH(buf, off, (e0) + d_);                      \
            [[unroll]] for (uint q_ = 0u; q_ < NH; q_++)                     \
                s0_[q_] = fma_dot(qsh[q_][d_ >> 2u], f_, s0_[q_]);           \
        }                                                                    \
        [[unroll]] for (uint q_ = 0u; q_ < NH; q_++)                         \
            s[q_] = s0_[q_] + s1_[q_];                                       \
    }

/* Value e of the row at off of buf, value by value (a macro, so that a
 * buf named by a macro, KS or VS, is expanded first). */
#define VALUE(buf, off, e) value_##buf(off, e)

/* The same, value by value, for any type and alignment. */
#define DOT_SLOW(buf, off, e0, s)                                            \
    {                                                                        \
        [[unroll]] for (uint q_ = 0u; q_ < NH; q_++)                         \
            s[q_] = 0.0;                                                     \
        for (uint d_ = 0u; d_ < pc.head_dim; d_++) {                         \
            const float v_ = VALUE(buf, off, (e0) + d_);                     \
            [[unroll]] for (uint q_ = 0u; q_ < NH; q_++)                     \
                s[q_] = fma(qsh[q_][d_ >> 2u][d_ & 3u], v_, s[q_]);          \
        }                                                                    \
    }

/* o[q] += p_qj V_j (values dv .. dv+3) for this partition's keys j in
 * [jb, je) of chunk copy b (jb in the partition's sequence), V_STEP keys
 * per step with all their loads before the first use: keys past je are
 * clamped to a valid one and weigh 0, so no branch separates a load from
 * its use. Row r of buf starts at byte base + r * stride, its head at
 * value eh. */
#define V_LOOP(FETCH, buf, jb, je, base, stride, eh)                         \
    for (uint j0_ = (jb); j0_ < (je); j0_ += V_STEP * parts) {               \
        vec4 v_[V_STEP];                                                     \
        uint j_[V_STEP];                                                     \
        [[unroll]] for (uint u_ = 0u; u_ < V_STEP; u_++) {                   \
            j_[u_] = min(j0_ + u_ * parts, (je) - 1u);                       \
            const uint r_ = rsh[b][j_[u_]] & ~STAGED;                        \
            const uint off_ = (base) + r_ * (stride);                        \
            v_[u_] = FETCH(buf, off_, (eh) + dv);                            \
        }                                                                    \
        [[unroll]] for (uint u_ = 0u; u_ < V_STEP; u_++)                     \
            [[unroll]] for (uint q_ = 0u; q_ < NH; q_++) {                   \
                const float p_ =                                             \
                    j0_ + u_ * parts < (je) ? PSH(b, q_, j_[u_]) : 0.0;      \
                o[q_] = fma(vec4(p_), v_[u_], o[q_]);                        \
            }                                                                \
    }

/* The same, value by value (n of the 4 valid), for any type. */
#define V_SLOW(buf, jb, je, base, stride, eh)                                \
    for (uint j_ = (jb); j_ < (je); j_ += parts) {                           \
        const uint off_ = (base) + (rsh[b][j_] & ~STAGED) * (stride);        \
        vec4 v_ = vec4(0.0);                                                 \
        for (uint i_ = 0u; i_ < nv; i_++)                                    \
            v_[i_] = VALUE(buf, off_, (eh) + dv + i_);                       \
        [[unroll]] for (uint q_ = 0u; q_ < NH; q_++)                         \
            o[q_] = fma(vec4(PSH(b, q_, j_)), v_, o[q_]);                    \
    }

/* The cache slot of position k (kv.h's kv_slot). */
uint slot_of(uint k)
{
    return kv_slot(k, pc.policy, pc.capacity, pc.n_sink);
}

/* ---- reductions over the workgroup (every thread calls, in uniform
 * control flow; each holds one barrier) ---- */

/* The largest x[q] of the workgroup for each head q, in every thread:
 * each subgroup's (subgroupMax), through msh[b], then the largest of
 * those, a few to a lane, by subgroupMax again; one barrier for all heads.
 * Max is exact, so no order matters. */
void workgroup_max(float x[NH], uint b, out float y[NH])
{
    [[unroll]] for (uint q = 0u; q < NH; q++) {
        const float sub = subgroupMax(x[q]);
        if (subgroupElect())
            msh[b][q][gl_SubgroupID] = sub;
    }
    barrier();
    [[unroll]] for (uint q = 0u; q < NH; q++) {
        float z = NEG_INF;
        for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups;
             i += gl_SubgroupSize)
            z = max(z, msh[b][q][i]);
        y[q] = subgroupMax(z);
    }
}

/* The sum of x over the workgroup the same way, through lsh: the same
 * additions in the same order whatever the batch, as each workgroup
 * reduces only its own threads. */
float workgroup_sum(float x)
{
    const float sub = subgroupAdd(x);
    if (subgroupElect())
        lsh[gl_SubgroupID] = sub;
    barrier();
    float y = 0.0;
    for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups;
         i += gl_SubgroupSize)
        y += lsh[i];
    return subgroupAdd(y);
}

#ifdef ATT_ROPE
/* ---- attention_rope: rope_kv_store's work for this workgroup ----
 *
 * The batch (at most ROPE_MAX_ROWS rows) comes as the q/k/v products left
 * it: this workgroup norms (has_norm) and rotates its query heads into qsh,
 * and norms, rotates and converts its kv head's keys and values of the
 * rows its query sees (0..t) into shared memory (hs), which it then reads
 * as the stage buffers are read; the last row's workgroup of the first
 * head of each kv head also writes them into their slots for later
 * passes. Each step is rope_kv_store's expressions (norm.glsl, rope.glsl,
 * kv_convert.glsl) on the same values: its bytes on lavapipe, while the
 * NVIDIA compiler rounds a rotation's last bit its own way in one of the
 * two (a batch's own rows then differ by a rounding, test_vk_ops). What
 * speculative = plain needs holds either way: a decode step and a verify
 * block both come here. The queries' values are made by the last threads
 * and the rows' words by the first, so that their loads go out together:
 * decoding, the prologue costs one round trip, as qsh's load did. */
#define ROPE_MAX_ROWS 17u
#define NORM_X4(i) (norm_keys ? k_raw4[i] : q4[i])
#define NORM_X(i) (norm_keys ? k_raw[i] : q[i])
bool norm_keys;
#include "norm.glsl"
#include "rope.glsl"

/* Each norm's subgroup sums (item q < NH query head q, NH + r key row r),
 * then its scale. */
shared float nsh[(ROPE_MAX_ROWS + NH) * (NORM_LANES / SG_MIN)];
shared float scl[ROPE_MAX_ROWS + NH];

/* This workgroup's kv head and query row. */
uint rope_g, rope_t;

/* out[i] = value d0 + i (i < N, a constant) of the head whose raw values
 * start at x0 of X (q or k_raw), normed (scale sc, weights W) where the
 * heads are and rotated with the angles of batch row r: rope_kv_store's
 * values, by its expressions. Every load goes out before any value is
 * used (a branch between a load and its use makes each a round trip of
 * its own): a dimension past n_rot loads itself as its pair and the first
 * angle, and keeps its value; past head_dim, the last dimension's. */
#define HEAD_VALUES(X, W, x0, r, sc, d0, N, out)                             \
    {                                                                        \
        uint ia_[N], ib_[N], ic_[N];                                         \
        bool rot_[N], isb_[N];                                               \
        [[unroll]] for (uint i_ = 0u; i_ < N; i_++) {                        \
            const uint d_ = min((d0) + i_, pc.head_dim - 1u);                \
            bool b_;                                                         \
            const uint p_ = rope_pair(d_, pc.n_rot, pc.style, b_);           \
            rot_[i_] = d_ < pc.n_rot;                                        \
            isb_[i_] = b_;                                                   \
            ia_[i_] = rot_[i_] ? rope_a(p_, pc.n_rot, pc.style) : d_;        \
            ib_[i_] = rot_[i_] ? rope_b(p_, pc.n_rot, pc.style) : d_;        \
            ic_[i_] = rot_[i_] ? ((r) * (pc.n_rot / 2u) + p_) * 2u : 0u;     \
        }                                                                    \
        /* the norm's weights only where there is a norm (W is then bound    \
         * to any buffer: its word 0) */                                     \
        const uint wm_ = pc.has_norm != 0u ? 0xffffffffu : 0u;               \
        float xa_[N], xb_[N], wa_[N], wb_[N], c_[N], s_[N];                  \
        [[unroll]] for (uint i_ = 0u; i_ < N; i_++) {                        \
            xa_[i_] = X[(x0) + ia_[i_]];                                     \
            xb_[i_] = X[(x0) + ib_[i_]];                                     \
            wa_[i_] = W[ia_[i_] & wm_];                                      \
            wb_[i_] = W[ib_[i_] & wm_];                                      \
            c_[i_] = cs[ic_[i_]];                                            \
            s_[i_] = cs[ic_[i_] + 1u];                                       \
        }                                                                    \
        [[unroll]] for (uint i_ = 0u; i_ < N; i_++) {                        \
            float a_ = xa_[i_], b_ = xb_[i_];                                \
            if (pc.has_norm != 0u) {                                         \
                a_ = norm_value(a_, sc, wa_[i_]);                            \
                b_ = norm_value(b_, sc, wb_[i_]);                            \
            }                                                                \
            out[i_] = !rot_[i_] ? a_                                         \
                      : isb_[i_] ? rope_rotated_b(a_, b_, c_[i_], s_[i_])    \
                                 : rope_rotated_a(a_, b_, c_[i_], s_[i_]);   \
        }                                                                    \
    }

/* Where key row r of this workgroup's kv head starts in K (and V). */
uint raw_row(uint r)
{
    return (r * pc.n_head_kv + rope_g) * pc.head_dim;
}

/* Which of K and V kv_src_bits reads (set before kv_word). */
bool reading_keys;

/* Value i of the batch's rows of this kv head (row i / head_dim), rotated
 * keys or values, as bits: kv_convert.glsl's source, for q8_0 rows. */
uint kv_src_bits(uint i)
{
    const uint r = i / pc.head_dim, d = i % pc.head_dim;
    if (!reading_keys)
        return v_raw[raw_row(r) + d];
    float x[1];
    HEAD_VALUES(k_raw, kw, raw_row(r), r, scl[NH + r], d, 1u, x)
    return floatBitsToUint(x[0]);
}
#include "kv_convert.glsl"

/* Word wi of the batch's rows of this kv head, keys or values, f32 or
 * f16 (kv_word's bytes: a word is 1 or 2 values of one row), with the
 * loads of its values out together. */
uint kv_word_f(uint wi, bool keys)
{
    const uint per = pc.type == 0u ? 1u : 2u;
    const uint i = wi * per, r = i / pc.head_dim, d = i - r * pc.head_dim;
    float x[2];
    if (keys) {
        HEAD_VALUES(k_raw, kw, raw_row(r), r, scl[NH + r], d, 2u, x)
    } else {
        const uint at = raw_row(r) + d;
        x[0] = uintBitsToFloat(v_raw[at]);
        x[1] = uintBitsToFloat(v_raw[at + per - 1u]);
    }
    if (pc.type == 0u)
        return floatBitsToUint(x[0]);
    return kk_f32_bits_to_f16(floatBitsToUint(x[0])) |
           (kk_f32_bits_to_f16(floatBitsToUint(x[1])) << 16u);
}

/* The heads' norm scales into scl: item q < NH the query head at q0 + q
 * head_dim, NH + r key row r, each by NORM_LANES lanes as
 * rope_kv_store_norm finds them. */
void norm_scales(uint q0, uint tid)
{
    const uint n = pc.n_rows, hd = pc.head_dim;
    for (uint i0 = 0u; i0 < n + NH; i0 += WG / NORM_LANES) {
        const uint item = i0 + tid / NORM_LANES, lane = tid % NORM_LANES;
        if (item < n + NH) {   /* the same for a whole subgroup */
            norm_keys = item >= NH;
            const uint base = item < NH
                                  ? q0 + item * hd
                                  : ((item - NH) * pc.n_head_kv + rope_g) * hd;
            NORM_PUT(nsh, item * norm_subgroups(), lane,
                     norm_lane_sum(base, hd, lane))
        }
    }
    barrier();
    if (tid < n + NH) {
        precise float sc;
        NORM_SCALE(nsh, tid * norm_subgroups(), hd, pc.eps, sc)
        scl[tid] = sc;
    }
    barrier();
}

/* Rows 0..rows-1 of the batch's keys and values of kv head g into hs
 * (keys, then values, head_bytes a row) and, by `writer`, into their
 * slots; the NH query heads starting at q0 (head_dim apart) into qsh.
 * Visible to the whole workgroup after the caller's barrier. */
void stage_batch(uint rows, bool writer, uint first, uint q0, uint tid)
{
    const uint hw = pc.head_bytes / 4u;
    const uint qt = tid + NH * (HD_MAX / 4u) - WG;   /* the last threads' */
    if (tid >= WG - NH * (HD_MAX / 4u)) {
        const uint qh = qt / (HD_MAX / 4u), qi = qt % (HD_MAX / 4u);
        float x[4];
        HEAD_VALUES(q, qw, q0 + qh * pc.head_dim, rope_t, scl[qh], 4u * qi,
                    4u, x)
        const vec4 v = vec4(x[0], x[1], x[2], x[3]);
        const uvec4 d = 4u * qi + uvec4(0u, 1u, 2u, 3u);
        qsh[qh][qi] = mix(vec4(0.0), v, lessThan(d, uvec4(pc.head_dim)));
    }
    const kv_layout L = kv_layout(rows, pc.head_dim, pc.type, pc.block,
                                  pc.head_bytes);
    for (uint j = tid; j < 2u * rows * hw; j += WG) {
        reading_keys = j < rows * hw;
        const uint wi = reading_keys ? j : j - rows * hw;
        const uint word = pc.type == 2u ? kv_word(L, wi, 0u)
                                        : kv_word_f(wi, reading_keys);
        hs[j] = word;
        if (writer) {
            const uint r = wi / hw;
            const uint row_word = r * (pc.row_bytes / 4u) + rope_g * hw +
                                  (wi - r * hw);
            const uint at = kv_slot_word(row_word, first, pc.row_bytes,
                                         pc.policy, pc.capacity, pc.n_sink);
            if (reading_keys)
                kc[at] = word;
            else
                vc[at] = word;
        }
    }
}
#endif

#ifdef ATT_ROPE
/* Once this workgroup's partials are written: it counts itself among the
 * n_wg workgroups of row t's heads h.. and, if it is the last, makes their
 * outputs from every split's partial (att_merge.glsl) and clears the count
 * for the next pass. Each workgroup's writes are made visible on the
 * device before it counts (memoryBarrierBuffer, then the barrier before
 * invocation 0's atomic), and the last reads them coherently after its
 * count. Every invocation calls, in uniform control flow. */
shared bool merging;
void merge_when_last(uint t, uint h, uint n_split, uint n_wg, uint tid)
{
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        const uint at = t * pc.n_head + h;
        merging = atomicAdd(split_counts[at], 1u) + 1u == n_wg;
        if (merging)
            split_counts[at] = 0u;
    }
    barrier();
    if (!merging)
        return;
    memoryBarrierBuffer();
    /* not unrolled: glslc keeps `precise` on an unrolled loop's first
     * copy only (see ATT_HEADS) */
    [[dont_unroll]] for (uint q = 0u; q < NH; q++)
        att_merge_head(t, h + q, n_split, tid, WG);
}
#endif

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    /* query heads h .. h + NH - 1 of row t, of kv head g */
    const uint h = gl_WorkGroupID.x * NH, t = gl_WorkGroupID.y;
    const uint hd = pc.head_dim;
    const uint g = h / (pc.n_head / pc.n_head_kv);
    const uint e0 = g * hd;
    const uint qo = (t * pc.n_head + h) * hd;
    /* Whether every head's values can be read 4 at a time. */
    const bool fast = (hd & 3u) == 0u &&
                      (pc.type == 0u ||
                       (pc.type == 1u && (pc.row_bytes & 3u) == 0u &&
                        (e0 & 1u) == 0u) ||
                       (pc.type == 2u && (pc.block & 3u) == 0u));
    /* Whether the cache's f16 or f32 rows of this kv head can be read 16
     * bytes a load (kc4, and vc2 or vc4): each row and the head on 16
     * bytes; and whether its q8_0 keys can be read a block at a time. */
    const bool wide = fast && (pc.row_bytes & 15u) == 0u &&
                      ((pc.type == 1u && (e0 & 7u) == 0u) ||
                       (pc.type == 0u && (e0 & 3u) == 0u));
    const bool q8_blocks = fast && pc.type == 2u && pc.block == 32u &&
                           (hd & 31u) == 0u;

    /* The batch's first position. */
    const uint first = pos_words[pc.pos_at];
#ifdef ATT_ROPE
    /* read from this workgroup's own rows, whatever went into the slots */
    const bool in_place = false;
    rope_g = g;
    rope_t = t;
    const uint ks_base = 0u, s_stride = pc.head_bytes, s_e = 0u;
    const uint vs_base = (t + 1u) * pc.head_bytes;
    if (pc.has_norm != 0u)
        norm_scales(qo, tid);
    stage_batch(t + 1u,
                t + 1u == pc.n_rows && h % (pc.n_head / pc.n_head_kv) == 0u &&
                    gl_WorkGroupID.z == 0u,
                first, qo, tid);
    barrier();
#else
    const bool in_place = pc.stage_in_place != 0u;
    const uint ks_base = 0u, vs_base = 0u, s_stride = pc.row_bytes, s_e = e0;
#endif
    /* What position p = first + t sees (kv_visible), and the index of
     * the first visible position in the stage buffers (>= first; none
     * there when the batch is in place). Found after the prologue, so that
     * none of it holds registers there. */
    const int p = int(first + t);
    int sink_end, lo;
    const uint n_vis = att_visible(p, sink_end, lo);
    const int pos0 = int(first);
    /* This workgroup's splits of the row, [s0, s1), of row_keys
     * positions each (att_split.glsl): each goes to a partial of its own,
     * which the row's last workgroup adds; a row that is not split is z = 0's
     * whole, which writes its output. A row of fewer splits than the
     * batch's most leaves its last workgroups nothing to do. */
    uint row_keys;
    const uint n_split = att_splits(n_vis, pc.split_keys, pc.max_splits,
                                    row_keys);
    const bool splitting = n_split > 1u;
    const uint group = max(pc.split_group, 1u);
    const uint s0 = gl_WorkGroupID.z * group;
    if (s0 >= n_split)
        return;   /* the whole workgroup (z is the same in all of it) */
    const uint s1 = min(s0 + group, n_split);
    const uint v_stage =
        in_place ? n_vis
                 : uint(pos0 <= sink_end ? pos0 : sink_end + max(0, pos0 - lo));

#ifndef ATT_ROPE
    if (tid < NH * (HD_MAX / 4u)) {
        const uint qh = tid / (HD_MAX / 4u), qi = tid % (HD_MAX / 4u);
        vec4 v = vec4(0.0);
        [[unroll]] for (uint i = 0u; i < 4u; i++)
            if (4u * qi + i < hd)
                v[i] = q[qo + qh * hd + 4u * qi + i];
        qsh[qh][qi] = v;
    }
    barrier();
#endif

    /* The V partitions: tpp threads of 4 values cover a head, tpp the
     * least power of two that does (at least 4), so that partitions tile
     * the workgroup and as many keys as possible are read at once. */
    uint tpp = 4u;
    while (4u * tpp < hd)
        tpp <<= 1u;
    const uint parts = WG / tpp;
    const uint part = tid / tpp, dv = 4u * (tid % tpp);
    const uint nv = dv < hd ? min(4u, hd - dv) : 0u;

    for (uint sp = s0; sp < s1; sp++) {
        /* the split's visible positions [v0, v1) */
        const uint v0 = sp * row_keys, v1 = min(v0 + row_keys, n_vis);
        /* per head: the running maximum (the same in every thread), this
         * thread's share of the running sum, and its values of its
         * partition's output (precise: see fma_dot) */
        float m[NH];
        precise float l[NH];
        precise vec4 o[NH];
        [[unroll]] for (uint q = 0u; q < NH; q++) {
            m[q] = NEG_INF;
            l[q] = 0.0;
            o[q] = vec4(0.0);
        }
        for (uint c0 = v0; c0 < v1; c0 += WG) {
            const uint cnt = min(WG, v1 - c0);
            const uint b = (c0 / WG) & 1u;  /* this chunk's copy of arrays */
            /* 1. score this thread's key against each query head */
            precise float s[NH];
            [[unroll]] for (uint q = 0u; q < NH; q++)
                s[q] = NEG_INF;
            if (tid < cnt) {
                const uint vi = c0 + tid;
                const uint k = vi < uint(sink_end)
                                   ? vi
                                   : uint(lo) + (vi - uint(sink_end));
                const bool staged = !in_place && k >= first;
                const uint row = staged ? k - first
                                        : slot_of(k);
                const uint off = staged ? ks_base + row * s_stride
                                        : row * pc.row_bytes;
                rsh[b][tid] = staged ? row | STAGED : row;
                if (!fast) {
                    if (staged)
                        DOT_SLOW(KS, off, s_e, s)
                    else
                        DOT_SLOW(kc, off, e0, s)
                } else if (pc.type == 1u) {
                    if (staged)
                        DOT_LOOP(LOAD_EACH, FETCH_F16, KS, off, s_e, s)
                    else if (wide)
                        DOT_LOOP(LOAD_F16_WIDE, FETCH_F16, kc, off, e0, s)
                    else
                        DOT_LOOP(LOAD_EACH, FETCH_F16, kc, off, e0, s)
                } else if (pc.type == 2u) {
                    if (staged)
                        DOT_LOOP(LOAD_EACH, FETCH_Q8, KS, off, s_e, s)
                    else if (q8_blocks)
                        DOT_LOOP(LOAD_Q8_BLOCK, FETCH_Q8, kc, off, e0, s)
                    else
                        DOT_LOOP(LOAD_EACH, FETCH_Q8, kc, off, e0, s)
                } else {
                    if (staged)
                        DOT_LOOP(LOAD_EACH, FETCH_F32, KS, off, s_e, s)
                    else if (wide)
                        DOT_LOOP(LOAD_EACH, FETCH_F32_WIDE, kc, off, e0, s)
                    else
                        DOT_LOOP(LOAD_EACH, FETCH_F32, kc, off, e0, s)
                }
            }
            /* 2. the chunk's maxima, probabilities, and what came before
             * rescaled, head by head, each written out (see ATT_HEADS).
             * Maxima are of the raw dot products (scale > 0, so the
             * largest is the largest scaled) and each exponent is
             * (s - m) scale: no product here meets a sum a compiler could
             * fuse it with, and the running sum's step is an explicit fma
             * (test_vk_ops walks the SPIR-V for such pairs). */
            float cmax[NH];
            workgroup_max(s, b, cmax);
#define RESCALE(q)                                                           \
    {                                                                        \
        const float m_new = max(m[q], cmax[q]);                              \
        const float alpha =                                                  \
            m[q] == NEG_INF ? 0.0 : exp((m[q] - m_new) * pc.scale);          \
        m[q] = m_new;                                                        \
        const float pr = tid < cnt ? exp((s[q] - m_new) * pc.scale) : 0.0;   \
        PSH(b, q, tid) = pr;                                                 \
        l[q] = fma(l[q], alpha, pr);                                         \
        o[q] *= alpha;                                                       \
    }
            RESCALE(0u)
#if ATT_HEADS > 1
            RESCALE(1u)
#endif
#if ATT_HEADS > 2
            RESCALE(2u)
            RESCALE(3u)
#endif
#undef RESCALE
            barrier();
            /* 3. o += p V over this partition's keys of the chunk: those
             * in the cache [part, cached), then those staged [jb, cnt). No
             * barrier after: the next chunk writes the other copy, and the
             * one after writes this copy only once every thread is past
             * the next chunk's first barrier, so done reading it here. */
            if (nv > 0u) {
                const uint cached = clamp(v_stage, c0, c0 + cnt) - c0;
                const uint jb =
                    cached <= part
                        ? part
                        : part + (cached - part + parts - 1u) / parts * parts;
                const uint rb = pc.row_bytes;
                if (!fast) {
                    V_SLOW(vc, part, cached, 0u, rb, e0)
                    V_SLOW(VS, jb, cnt, vs_base, s_stride, s_e)
                } else if (pc.type == 1u) {
                    if (wide)
                        V_LOOP(FETCH_F16_WIDE, vc, part, cached, 0u, rb, e0)
                    else
                        V_LOOP(FETCH_F16, vc, part, cached, 0u, rb, e0)
                    V_LOOP(FETCH_F16, VS, jb, cnt, vs_base, s_stride, s_e)
                } else if (pc.type == 2u) {
                    V_LOOP(FETCH_Q8, vc, part, cached, 0u, rb, e0)
                    V_LOOP(FETCH_Q8, VS, jb, cnt, vs_base, s_stride, s_e)
                } else {
                    if (wide)
                        V_LOOP(FETCH_F32_WIDE, vc, part, cached, 0u, rb, e0)
                    else
                        V_LOOP(FETCH_F32, vc, part, cached, 0u, rb, e0)
                    V_LOOP(FETCH_F32, VS, jb, cnt, vs_base, s_stride, s_e)
                }
            }
        }
        /* Each head's output: the sum of the partitions' outputs (OSH,
         * over the probabilities' words once every thread is done with
         * them: the barrier; workgroup_sum's makes OSH visible), over (or,
         * for a split, beside) the sum of every thread's share. The next
         * head's, or the next split's, writes come after a barrier that
         * every reader here has passed. */
        [[unroll]] for (uint q = 0u; q < NH; q++) {
            barrier();
            OSH(4u * tid) = o[q].x;
            OSH(4u * tid + 1u) = o[q].y;
            OSH(4u * tid + 2u) = o[q].z;
            OSH(4u * tid + 3u) = o[q].w;
            precise float l_sum = workgroup_sum(l[q]);
            precise float inv = 1.0 / l_sum;
            /* Thread i of partition k holds values 4i .. 4i+3 at OSH(4 (k
             * tpp + i) ..): value d of partition k is OSH(4 tpp k + d). */
            for (uint d = tid; d < hd; d += WG) {
                precise float sum = 0.0;
                for (uint k = 0u; k < parts; k++)
                    sum += OSH(k * 4u * tpp + d);
                if (!splitting) {
                    o_out[qo + q * hd + d] = sum * inv;
                    continue;
                }
#ifdef ATT_ROPE
                const uint at = split_at(t, h + q, sp);
                if (d == 0u) {
                    part_out[at] = m[q];
                    part_out[at + 1u] = l_sum;
                }
                part_out[at + 2u + d] = sum;
#endif
            }
        }
    }
#ifdef ATT_ROPE
    if (splitting)
        merge_when_last(t, h, n_split, (n_split + group - 1u) / group, tid);
#endif
}
