/* gated_act.comp — gate[i] = act(gate[i]) * up[i] for i < count (contract
 * in engine/vulkan/vk_shaders.h; the activation is act.glsl's).
 * Grid-stride loop. */
#version 450

#include "act.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer GateBuf { float gate[]; };
layout(std430, binding = 1) readonly buffer UpBuf { float up[]; };

layout(push_constant) uniform Push {
    uint count, use_gelu;
} pc;

void main()
{
    const uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride)
        gate[i] = kk_gated(gate[i], up[i], pc.use_gelu != 0u);
}
