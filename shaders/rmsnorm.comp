/* rmsnorm.comp — y = x / sqrt(mean(x^2) + eps) * w over each group of dim
 * values (contract in engine/vulkan/vk_shaders.h).
 *
 * One workgroup per group: the threads sum squares over strided elements,
 * a shared-memory tree adds the partials, then each thread scales the
 * elements it summed. Y may be X (in place): every element is read and
 * written by the same thread, and all reads of the sum happen before the
 * barrier that precedes any write. The sum is f32 (the CPU's is double):
 * agreement is to ~1e-6 relative, not to the bit. */
#version 450

#include "common.glsl"

#define WG 256u
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) writeonly buffer YBuf { float y[]; };
layout(std430, binding = 2) readonly buffer WBuf { float wt[]; };

layout(push_constant) uniform Push {
    uint dim, n_groups;
    float eps;
} pc;

shared float part[WG];

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint base = gl_WorkGroupID.x * pc.dim;
    float s = 0.0;
    for (uint i = tid; i < pc.dim; i += WG) {
        float v = x[base + i];
        s += v * v;
    }
    part[tid] = s;
    barrier();
    [[unroll]] for (uint h = WG / 2u; h > 0u; h >>= 1u) {
        if (tid < h)
            part[tid] += part[tid + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(part[0] / float(pc.dim) + pc.eps);
    for (uint i = tid; i < pc.dim; i += WG) {
        /* (x * scale) * w, the CPU's order */
        precise float v = x[base + i] * scale;
        y[base + i] = v * wt[i];
    }
}
