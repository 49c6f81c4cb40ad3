/* att_merge.glsl — the output of a row's head that attention_rope split
 * (vk_shaders.h): each split s of its visible positions (att_split.glsl)
 * left a partial in `part` at split_at(t, h, s) (m_s, its largest dot
 * product q.k; l_s, the sum of e^(scale (q.k - m_s)); o_s, the sum of
 * e^(scale (q.k - m_s)) v), and with M = max m_s and
 * w_s = e^(scale (m_s - M)) the head's output is
 *   sum_s w_s o_s / sum_s w_s l_s,
 * the softmax of all its scores times V, into o_out. Splits are added in
 * order, so a row has the same bits decoded as verified (its splits and
 * their order depend on its position alone). The including shader names
 * the buffers `part` and `o_out` and includes attention_push.glsl. */
#ifndef ATT_MERGE_GLSL
#define ATT_MERGE_GLSL

/* Head h of row t, whose n splits are written: values lane, lane + lanes,
 * ... of it by this invocation. */
void att_merge_head(uint t, uint h, uint n, uint lane, uint lanes)
{
    float mx = uintBitsToFloat(0xff800000u);
    for (uint s = 0u; s < n; s++)
        mx = max(mx, part[split_at(t, h, s)]);
    precise float l = 0.0;
    for (uint s = 0u; s < n; s++) {
        precise float w = exp((part[split_at(t, h, s)] - mx) * pc.scale);
        l = l + part[split_at(t, h, s) + 1u] * w;
    }
    precise float inv = 1.0 / l;
    const uint qo = (t * pc.n_head + h) * pc.head_dim;
    for (uint d = lane; d < pc.head_dim; d += lanes) {
        precise float sum = 0.0;
        for (uint s = 0u; s < n; s++) {
            precise float w = exp((part[split_at(t, h, s)] - mx) * pc.scale);
            sum = sum + part[split_at(t, h, s) + 2u + d] * w;
        }
        o_out[qo + d] = sum * inv;
    }
}

#endif
