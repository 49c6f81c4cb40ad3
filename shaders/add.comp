/* add.comp — x[i] += y[width ? i % width : i] for i < count (contract in
 * engine/vulkan/vk_shaders.h). width > 0 broadcasts one row of y, e.g. a
 * bias. Grid-stride loop: the grid is capped at ELEMWISE_MAX_GROUPS. */
#version 450

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer XBuf { float x[]; };
layout(std430, binding = 1) readonly buffer YBuf { float yv[]; };

layout(push_constant) uniform Push {
    uint count, width;
} pc;

void main()
{
    const uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride)
        x[i] += yv[pc.width != 0u ? i % pc.width : i];
}
