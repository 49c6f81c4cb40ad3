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
    const uint half_rot = pc.n_rot / 2u;
    const uint id = gl_GlobalInvocationID.x;
    if (half_rot == 0u || id >= pc.n_rows * pc.n_heads * half_rot)
        return;
    const uint p = id % half_rot;
    const uint head = (id / half_rot) % pc.n_heads;
    const uint row = id / (half_rot * pc.n_heads);
    const uint base = (row * pc.n_heads + head) * pc.head_dim;
    const uint a = base + rope_a(p, pc.n_rot, pc.style);
    const uint b = base + rope_b(p, pc.n_rot, pc.style);
    const float c = cs[(row * half_rot + p) * 2u];
    const float s = cs[(row * half_rot + p) * 2u + 1u];
    const float xa = x[a], xb = x[b];
    x[a] = rope_rotated_a(xa, xb, c, s);
    x[b] = rope_rotated_b(xa, xb, c, s);
}
