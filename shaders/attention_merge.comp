/* attention_merge.comp — the output of the rows attention_rope split
 * (contract in engine/vulkan/vk_shaders.h): each split of its visible
 * positions (att_split.glsl) left a partial (m_s, its largest dot product
 * q.k; l_s, the sum of e^(scale (q.k - m_s)); o_s, the sum of
 * e^(scale (q.k - m_s)) v), and with M = max m_s and
 * w_s = e^(scale (m_s - M)) the row's output is
 *   sum_s w_s o_s / sum_s w_s l_s,
 * the softmax of all its scores times V. Splits are added in order, so a
 * row has the same bits decoded as verified (the splits and their order
 * depend on its position alone). Rows not split are attention_rope's own
 * and left alone. */
#version 450

#include "common.glsl"
#include "kv_slot.glsl"
#include "att_split.glsl"

#define WG 64u
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer PartBuf { float part[]; };
layout(std430, binding = 1) writeonly buffer OutBuf { float o_out[]; };
layout(std430, binding = 2) readonly buffer PosBuf { uint pos_words[]; };

#include "attention_push.glsl"

void main()
{
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    int sink_end, lo;
    const uint n_vis = att_visible(int(pos_words[pc.pos_at] + t), sink_end,
                                   lo);
    uint row_keys;
    const uint n = att_splits(n_vis, pc.split_keys, pc.max_splits, row_keys);
    if (n == 1u)
        return;
    float mx = NEG_INF;
    for (uint s = 0u; s < n; s++)
        mx = max(mx, part[split_at(t, h, s)]);
    precise float l = 0.0;
    for (uint s = 0u; s < n; s++) {
        precise float w = exp((part[split_at(t, h, s)] - mx) * pc.scale);
        l = l + part[split_at(t, h, s) + 1u] * w;
    }
    precise float inv = 1.0 / l;
    const uint qo = (t * pc.n_head + h) * pc.head_dim;
    for (uint d = gl_LocalInvocationID.x; d < pc.head_dim; d += WG) {
        precise float sum = 0.0;
        for (uint s = 0u; s < n; s++) {
            precise float w = exp((part[split_at(t, h, s)] - mx) * pc.scale);
            sum = sum + part[split_at(t, h, s) + 2u + d] * w;
        }
        o_out[qo + d] = sum * inv;
    }
}
