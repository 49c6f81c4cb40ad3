/* rmsnorm.comp — y = x / sqrt(mean(x^2) + eps) * w over each group of dim
 * values (contract in engine/vulkan/vk_shaders.h).
 *
 * One workgroup of NORM_LANES threads per group: each thread sums the
 * squares of its runs of values (norm.glsl, the code matmul.comp's folded
 * norm runs too, so both give a row the same bits), the sums meet through
 * subgroupAdd and shared memory, and each thread scales the values it
 * summed. Y may be X (in place): every element is read and written by the
 * same thread, and all reads for the sum happen before the barrier that
 * precedes any write. The sum is f32 (the CPU's is double): agreement is
 * to ~1e-6 relative, not to the bit. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 0) readonly buffer XBuf4 { vec4 x4[]; };
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
    NORM_PUT(part, 0u, lane, norm_lane_sum(base, pc.dim, lane))
    barrier();
    precise float scale;
    NORM_SCALE(part, 0u, pc.dim, pc.eps, scale)
    for (uint c = lane; 4u * c < pc.dim; c += NORM_LANES)
        for (uint k = 0u; k < 4u && 4u * c + k < pc.dim; k++) {
            /* (x * scale) * w, the CPU's order */
            const uint i = 4u * c + k;
            precise float v = x[base + i] * scale;
            y[base + i] = v * wt[i];
        }
}
