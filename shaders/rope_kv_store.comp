/* rope_kv_store.comp — a batch's RoPE and KV store in one dispatch
 * (contract in engine/vulkan/vk_shaders.h): rope.comp on Q in place, and
 * kv_store.comp of K rotated on the fly and of V, into the staging rows
 * (or a full cache's slots, from word dst_word0).
 * gl_WorkGroupID.y picks the part: 0 the query pairs, 1 the key words,
 * 2 the value words; x covers the largest part. The rotation is
 * rope.glsl's and the conversion kv_convert.glsl's, so the bytes are those
 * of rope then kv_store. */
#version 450

#include "kv_convert.glsl"
#include "rope.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer QBuf { float q[]; };
layout(std430, binding = 1) readonly buffer KBuf { float k[]; };
layout(std430, binding = 2) readonly buffer VBuf { uint v[]; };
layout(std430, binding = 3) readonly buffer CSBuf { float cs[]; };
layout(std430, binding = 4) buffer KStage { uint k_stage[]; };
layout(std430, binding = 5) buffer VStage { uint v_stage[]; };

layout(push_constant) uniform Push {
    uint n_rows, n_head, n_head_kv, head_dim, n_rot, style;
    uint type, block, row_bytes, dst_word0;
} pc;

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
        return floatBitsToUint(k[i]);
    bool is_b;
    const uint p = rope_pair(d, pc.n_rot, pc.style, is_b);
    const uint head0 = i - d;
    const float xa = k[head0 + rope_a(p, pc.n_rot, pc.style)];
    const float xb = k[head0 + rope_b(p, pc.n_rot, pc.style)];
    const uint at = (row * (pc.n_rot / 2u) + p) * 2u;
    const float c = cs[at], s = cs[at + 1u];
    return floatBitsToUint(is_b ? rope_rotated_b(xa, xb, c, s)
                                : rope_rotated_a(xa, xb, c, s));
}

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
    const uint at = pc.dst_word0 + id;
    if (reading_keys)
        k_stage[at] = kv_word(L, id, k_stage[at]);
    else
        v_stage[at] = kv_word(L, id, v_stage[at]);
}
