/* rope.comp — rotates the first n_rot dims of each head of each row, in
 * place (contract in engine/vulkan/vk_shaders.h; the rotation is
 * rope.glsl's). One invocation per rotated pair. The angles' cosines and
 * sines come from the host (CS), computed as the CPU computes them, so the
 * result is the CPU's to the bit. */
#version 450

#include "rope.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer XBuf { float x[]; };
layout(std430, binding = 1) readonly buffer CSBuf { float cs[]; };

layout(push_constant) uniform Push {
    uint n_rows, n_heads, head_dim, n_rot, style;
} pc;

void main()
{
    KK_ROPE_PAIR(x, cs, gl_GlobalInvocationID.x, pc.n_rows, pc.n_heads,
                 pc.head_dim, pc.n_rot, pc.style)
}
