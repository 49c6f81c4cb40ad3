/* attention_push.glsl — the push constants of attention and
 * attention_rope (vk_shaders.h's vk_push_attention, member for member),
 * and what a row sees by them. Include after kv_slot.glsl. */
#ifndef ATTENTION_PUSH_GLSL
#define ATTENTION_PUSH_GLSL

layout(push_constant) uniform Push {
    uint n_rows, pos_at, n_head, n_head_kv, head_dim;
    uint type, block, row_bytes;
    uint policy, capacity, n_sink, layer_window, model_window;
    float scale;
    uint stage_in_place;
    /* attention_rope: the rotation (rope_kv_store's), the heads' norms
     * (has_norm, eps) and the bytes of one head of a row */
    uint n_rot, style, has_norm, head_bytes;
    float eps;
    /* attention_rope: rows cut into splits of at least
     * split_keys positions (0: none), at most max_splits of them
     * (att_split.glsl), split_group of them a workgroup, their partials
     * split_stride apart */
    uint split_keys, split_group, max_splits, split_stride;
} pc;

/* The positions the query at p sees in this layer (kv_slot.glsl's
 * kv_visible with the layer's or the model's window): n_vis, and
 * [0, sink_end) and [lo, p]. */
uint att_visible(int p, out int sink_end, out int lo)
{
    return kv_visible(p, pc.policy, pc.n_sink,
                      pc.policy == 2u ? pc.layer_window : pc.model_window,
                      sink_end, lo);
}

/* Where split sp of head h of row t keeps its partial (vk_shaders.h):
 * m, l, then head_dim values. */
uint split_at(uint t, uint h, uint sp)
{
    return ((t * pc.n_head + h) * pc.split_stride + sp) * (pc.head_dim + 2u);
}

#endif
