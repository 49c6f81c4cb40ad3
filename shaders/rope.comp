/* rope.comp — rotates the first n_rot dims of each head of each row, in
 * place (contract in engine/vulkan/vk_shaders.h).
 *
 * One invocation per rotated pair. The angles' cosines and sines come from
 * the host (CS), computed as the CPU computes them, so with the products
 * kept unfused (precise) the result is the CPU's to the bit. */
#version 450

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
    const uint i = id % half_rot;
    const uint head = (id / half_rot) % pc.n_heads;
    const uint row = id / (half_rot * pc.n_heads);
    const uint base = (row * pc.n_heads + head) * pc.head_dim;
    /* style 0 (NORM) pairs (2i, 2i+1); 1 (NEOX) pairs (i, i + n_rot/2) */
    const uint a = base + (pc.style == 0u ? 2u * i : i);
    const uint b = base + (pc.style == 0u ? 2u * i + 1u : i + half_rot);
    const float c = cs[(row * half_rot + i) * 2u];
    const float s = cs[(row * half_rot + i) * 2u + 1u];
    const float x0 = x[a], x1 = x[b];
    precise float ca = x0 * c, sa = x1 * s, cb = x0 * s, sb = x1 * c;
    precise float ra = ca - sa, rb = cb + sb;
    x[a] = ra;
    x[b] = rb;
}
