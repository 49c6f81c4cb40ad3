/* rope_kv_store.comp — a batch's RoPE and KV store in one dispatch
 * (contract in engine/vulkan/vk_shaders.h): rope.comp on Q in place, and
 * kv_store.comp of K rotated on the fly and of V, into the staging rows
 * (or, in_place, straight into the cache's slots).
 * gl_WorkGroupID.y picks the part: 0 the query pairs, 1 the key words,
 * 2 the value words; x covers the largest part. The rotation is
 * rope.glsl's and the conversion kv_convert.glsl's, so the bytes are those
 * of rope then kv_store.
 *
 * With -DQK_NORM (rope_kv_store_norm) each head of Q and K is RMS-normed
 * first (qwen3, gemma3), as rmsnorm.comp norms groups of head_dim values:
 * one workgroup of NORM_LANES per head of a row, as rmsnorm has one per
 * group, finds its head's scale with norm.glsl (the code rmsnorm runs, so
 * the same bits), then rotates the head's normed queries, or stores the
 * head's normed, rotated keys and its values (the words of a head: its
 * rows' bytes must split into heads of whole words; the host checks, and
 * norms separately otherwise). A head's normed value is rounded to a float
 * before it is rotated, as when rmsnorm stores it. A decode pass of gemma3
 * loses two dispatches a layer, each a wait. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "kv_convert.glsl"
#include "kv_slot.glsl"
#include "rope.glsl"

layout(local_size_x = 64) in;   /* with QK_NORM, NORM_LANES */

layout(std430, binding = 0) buffer QBuf { float q[]; };
layout(std430, binding = 1) readonly buffer KBuf { float k[]; };
layout(std430, binding = 2) readonly buffer VBuf { uint v[]; };
layout(std430, binding = 3) readonly buffer CSBuf { float cs[]; };
/* The same table's words: word pos_at is the batch's first position. */
layout(std430, binding = 3) readonly buffer CSWords { uint cs_words[]; };
layout(std430, binding = 4) buffer KStage { uint k_stage[]; };
layout(std430, binding = 5) buffer VStage { uint v_stage[]; };

layout(push_constant) uniform Push {
    uint n_rows, n_head, n_head_kv, head_dim, n_rot, style;
    uint type, block, row_bytes, in_place, pos_at;
    uint policy, capacity, n_sink;   /* in_place: the layer's slots */
    float eps;   /* QK_NORM: the norms' epsilon */
} pc;

/* The word of the stage buffers that word i of the batch's rows goes to. */
uint dst_word(uint i)
{
    return pc.in_place != 0u
               ? kv_slot_word(i, cs_words[pc.pos_at], pc.row_bytes, pc.policy,
                              pc.capacity, pc.n_sink)
               : i;
}

#ifdef QK_NORM
layout(std430, binding = 0) readonly buffer QBuf4 { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer KBuf4 { vec4 k4[]; };
/* The norms' weights, head_dim each. */
layout(std430, binding = 6) readonly buffer QWBuf { float qw[]; };
layout(std430, binding = 7) readonly buffer KWBuf { float kw[]; };

/* norm.glsl reads the workgroup's head from Q or K. */
bool norm_keys;
#define NORM_X4(i) (norm_keys ? k4[i] : q4[i])
#define NORM_X(i) (norm_keys ? k[i] : q[i])
#include "norm.glsl"

shared float part[NORM_LANES];   /* a sum per subgroup, as in rmsnorm */
/* The workgroup's head's scale. */
float head_scale;
#endif

/* Key i of the batch (row i / kv_dim, dimension d of its head), normed
 * where the heads are. */
float key_at(uint i, uint d)
{
#ifdef QK_NORM
    return norm_value(k[i], head_scale, kw[d]);   /* i is in the head */
#else
    return k[i];
#endif
}

/* Which of K and V kv_src_bits reads (set before kv_word). */
bool reading_keys;

/* Value i of the batch's keys (rotated) or values, as bits. */
uint kv_src_bits(uint i)
{
    if (!reading_keys)
        return v[i];
    const uint kv_dim = pc.n_head_kv * pc.head_dim;
    const uint row = i / kv_dim, d = i % pc.head_dim;
    if (d >= pc.n_rot)
        return floatBitsToUint(key_at(i, d));
    bool is_b;
    const uint p = rope_pair(d, pc.n_rot, pc.style, is_b);
    const uint head0 = i - d;
    const uint da = rope_a(p, pc.n_rot, pc.style);
    const uint db = rope_b(p, pc.n_rot, pc.style);
    const float xa = key_at(head0 + da, da), xb = key_at(head0 + db, db);
    const uint at = (row * (pc.n_rot / 2u) + p) * 2u;
    const float c = cs[at], s = cs[at + 1u];
    return floatBitsToUint(is_b ? rope_rotated_b(xa, xb, c, s)
                                : rope_rotated_a(xa, xb, c, s));
}

#ifdef QK_NORM

/* Queries of the head from value head0 on, normed and rotated in place:
 * the thread of a pair's first dimension writes both (no other thread
 * reads them), dimensions past n_rot are only normed. */
void rope_normed_queries(uint row, uint head0, uint lane)
{
    for (uint d = lane; d < pc.head_dim; d += NORM_LANES) {
        if (d >= pc.n_rot) {
            q[head0 + d] = norm_value(q[head0 + d], head_scale, qw[d]);
            continue;
        }
        bool is_b;
        const uint p = rope_pair(d, pc.n_rot, pc.style, is_b);
        if (is_b)
            continue;
        const uint db = rope_b(p, pc.n_rot, pc.style);
        const float xa = norm_value(q[head0 + d], head_scale, qw[d]);
        const float xb = norm_value(q[head0 + db], head_scale, qw[db]);
        const uint at = (row * (pc.n_rot / 2u) + p) * 2u;
        const float c = cs[at], s = cs[at + 1u];
        q[head0 + d] = rope_rotated_a(xa, xb, c, s);
        q[head0 + db] = rope_rotated_b(xa, xb, c, s);
    }
}

/* Workgroup (h, row): head h of the row's queries, or for h >= n_head key
 * and value head h - n_head. */
void main()
{
    const uint h = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
    const uint lane = gl_LocalInvocationID.x;
    norm_keys = h >= pc.n_head;
    const uint head0 = norm_keys
        ? (row * pc.n_head_kv + (h - pc.n_head)) * pc.head_dim
        : (row * pc.n_head + h) * pc.head_dim;
    NORM_PUT(part, 0u, lane, norm_lane_sum(head0, pc.head_dim, lane))
    barrier();
    precise float scale;
    NORM_SCALE(part, 0u, pc.head_dim, pc.eps, scale)
    head_scale = scale;
    if (!norm_keys) {
        rope_normed_queries(row, head0, lane);
        return;
    }
    const kv_layout L = kv_layout(pc.n_rows, pc.n_head_kv * pc.head_dim,
                                  pc.type, pc.block, pc.row_bytes);
    const uint head_words = pc.row_bytes / 4u / pc.n_head_kv;
    const uint w0 = row * (pc.row_bytes / 4u) + (h - pc.n_head) * head_words;
    for (uint j = lane; j < 2u * head_words; j += NORM_LANES) {
        reading_keys = j < head_words;
        const uint wi = w0 + (reading_keys ? j : j - head_words);
        const uint at = dst_word(wi);
        if (reading_keys)
            k_stage[at] = kv_word(L, wi, k_stage[at]);
        else
            v_stage[at] = kv_word(L, wi, v_stage[at]);
    }
}

#else

void main()
{
    const uint id = gl_GlobalInvocationID.x;
    if (gl_WorkGroupID.y == 0u) {
        KK_ROPE_PAIR(q, cs, id, pc.n_rows, pc.n_head, pc.head_dim, pc.n_rot,
                     pc.style)
        return;
    }
    const kv_layout L = kv_layout(pc.n_rows, pc.n_head_kv * pc.head_dim,
                                  pc.type, pc.block, pc.row_bytes);
    if (id >= kv_words(L))
        return;
    reading_keys = gl_WorkGroupID.y == 1u;
    const uint at = dst_word(id);
    if (reading_keys)
        k_stage[at] = kv_word(L, id, k_stage[at]);
    else
        v_stage[at] = kv_word(L, id, v_stage[at]);
}

#endif
