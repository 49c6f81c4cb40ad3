/* rmsnorm.comp — y = x / sqrt(mean(x^2) + eps) * w over each group of dim
 * values (contract in engine/vulkan/vk_shaders.h).
 *
 * One workgroup of NORM_LANES threads per group: each thread sums the
 * squares of its strided values (norm.glsl, the code matmul.comp's folded
 * norm runs too, so both give a row the same bits), the sums meet in
 * shared memory, and each thread scales the values it summed. Y may be X
 * (in place): every element is read and written by the same thread, and
 * all reads for the sum happen before the barrier that precedes any
 * write. The sum is f32 (the CPU's is double): agreement is to ~1e-6
 * relative, not to the bit. */
#version 450

#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) writeonly buffer YBuf { float y[]; };
layout(std430, binding = 2) readonly buffer WBuf { float wt[]; };

layout(push_constant) uniform Push {
    uint dim, n_groups;
    float eps;
} pc;

#include "norm.glsl"

shared float part[NORM_LANES];

void main()
{
    const uint lane = gl_LocalInvocationID.x;
    const uint base = gl_WorkGroupID.x * pc.dim;
    part[lane] = norm_lane_sum(base, pc.dim, lane);
    barrier();
    float scale;
    NORM_SCALE(part, 0u, pc.dim, pc.eps, scale)
    for (uint i = lane; i < pc.dim; i += NORM_LANES) {
        /* (x * scale) * w, the CPU's order */
        precise float v = x[base + i] * scale;
        y[base + i] = v * wt[i];
    }
}
