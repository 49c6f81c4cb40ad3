/* argmax.comp — each row's greedy choice from n_rows rows of `width`
 * logits, as partial choices over spans of ARG_SPAN values that the host
 * finishes (contract in engine/vulkan/vk_shaders.h): what
 * engine/sample.c's sample_argmax picks, so that greedy decoding on a GPU
 * reads back a few bytes a row instead of a vocabulary of floats.
 *
 * sample_argmax keeps the first of equal values and never moves to a NaN:
 * its choice is the first index of the largest number of the row, or 0
 * when the row starts with a NaN or holds no number. That is a reduction
 * in any order over (value, index) with the larger value winning and, for
 * equal values, the lower index. Values are compared as order_key()s:
 * their bits as unsigned integers in the floats' order, so the comparison
 * is exact on any device (a GPU may flush subnormals in float compares;
 * the CPU does not) and -0 equals +0, as it does for the CPU's `>`.
 *
 * Workgroup (g, r) takes values g ARG_SPAN .. (g + 1) ARG_SPAN of row r, a
 * few per invocation, all loaded before any is compared (one workgroup a
 * row, scanning 128k values in a loop, took ~50 us on the H200); the
 * subgroups and then the workgroup keep the largest key and the lowest
 * index holding it, and the workgroup writes that pair. The first
 * workgroup of a row whose first value is a NaN writes the key
 * ARG_NAN_FIRST, above every other: the row's choice is then 0. */
#version 450

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

#define ARG_WG 256u
#define ARG_PER 8u                     /* values an invocation takes */
#define ARG_SPAN (ARG_WG * ARG_PER)    /* vk_shaders.h's VK_ARGMAX_SPAN */
#define ARG_NAN_FIRST 0xffffffffu
#define NO_INDEX 0xffffffffu

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer XBuf { uint x[]; };
/* (key, index) of workgroup (g, r) at words 2 (r groups + g) .. + 2 */
layout(std430, binding = 1) writeonly buffer PartBuf { uint part[]; };

layout(push_constant) uniform Push {
    uint width, n_rows;
} pc;

/* A float's bits as an unsigned number in the floats' order, -0 as +0;
 * NaN is 0, below every number (no number's key is 0: that would be the
 * bits of a NaN). */
uint order_key(uint bits)
{
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return 0u;
    if (bits == 0x80000000u)
        bits = 0u;
    return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
}

shared uint sg_key[ARG_WG], sg_index[ARG_WG];

void main()
{
    const uint g = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
    const uint lane = gl_LocalInvocationIndex;
    const uint base = row * pc.width, first = g * ARG_SPAN;
    uint bits[ARG_PER];
    [[unroll]] for (uint k = 0u; k < ARG_PER; k++) {
        const uint i = first + k * ARG_WG + lane;
        bits[k] = x[base + min(i, pc.width - 1u)];
    }
    /* in increasing index: a strictly larger key is the first of its kind */
    uint key = 0u, index = NO_INDEX;
    [[unroll]] for (uint k = 0u; k < ARG_PER; k++) {
        const uint i = first + k * ARG_WG + lane;
        const uint kb = order_key(bits[k]);
        if (i < pc.width && kb > key) {
            key = kb;
            index = i;
        }
    }
    const uint best = subgroupMax(key);
    const uint at = subgroupMin(key == best ? index : NO_INDEX);
    if (subgroupElect()) {
        sg_key[gl_SubgroupID] = best;
        sg_index[gl_SubgroupID] = at;
    }
    barrier();
    if (lane != 0u)
        return;
    uint top = 0u, top_at = NO_INDEX;
    for (uint s = 0u; s < gl_NumSubgroups; s++)
        if (sg_key[s] > top || (sg_key[s] == top && sg_index[s] < top_at)) {
            top = sg_key[s];
            top_at = sg_index[s];
        }
    if (g == 0u && order_key(x[base]) == 0u) {
        top = ARG_NAN_FIRST;
        top_at = 0u;
    }
    const uint at_pair = 2u * (row * gl_NumWorkGroups.x + g);
    part[at_pair] = top;
    part[at_pair + 1u] = top_at;
}
