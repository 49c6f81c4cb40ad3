/* kv_store.comp — converts n_rows rows of kv_dim floats into the KV
 * storage type, rows packed back to back, row_bytes each (contract in
 * engine/vulkan/vk_shaders.h; the conversion is kv_convert.glsl's).
 * One invocation per output word. */
#version 450

#include "kv_convert.glsl"
#include "kv_slot.glsl"

layout(local_size_x = 64) in;

/* SRC is read as bits so that an f32 copy is exact. */
layout(std430, binding = 0) readonly buffer SrcBuf { uint src[]; };
layout(std430, binding = 1) buffer DstBuf { uint dst[]; };

layout(push_constant) uniform Push {
    uint n_rows, kv_dim, type, block, row_bytes;
    uint in_place, pos0, policy, capacity, n_sink;
} pc;

uint kv_src_bits(uint i)
{
    return src[i];
}

void main()
{
    const kv_layout L = kv_layout(pc.n_rows, pc.kv_dim, pc.type, pc.block,
                                  pc.row_bytes);
    const uint wi = gl_GlobalInvocationID.x;
    if (wi >= kv_words(L))
        return;
    const uint at = pc.in_place != 0u
                        ? kv_slot_word(wi, pc.pos0, pc.row_bytes, pc.policy,
                                       pc.capacity, pc.n_sink)
                        : wi;
    dst[at] = kv_word(L, wi, dst[at]);
}
