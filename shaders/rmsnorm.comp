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
 * to ~1e-6 relative, not to the bit.
 *
 * With -DNORM_ADD (rmsnorm_add) Y is a second array that the normed values
 * are added to, y += x normed: a post-norm's block output joining the
 * residual stream (gemma3), in one dispatch where rmsnorm then add took
 * two. The normed value is rounded to a float before the add, as it is
 * when rmsnorm stores it and add.comp reads it back (`precise`: no fma
 * may fuse the product into the sum), so both ways give the same bits. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 0) readonly buffer XBuf4 { vec4 x4[]; };
#ifdef NORM_ADD
layout(std430, binding = 1) buffer YBuf { float y[]; };
#else
layout(std430, binding = 1) writeonly buffer YBuf { float y[]; };
#endif
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
#ifdef NORM_ADD
            precise float normed = v * wt[i];
            precise float sum = y[base + i] + normed;
            y[base + i] = sum;
#else
            y[base + i] = v * wt[i];
#endif
        }
}
