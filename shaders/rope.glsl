/* rope.glsl — one rotated value of RoPE, shared by rope.comp and
 * rope_kv_store.comp so that both rotate to the same bits.
 *
 * Dimension i (< n_rot) of a head is one of the pair (a, b): style 0
 * (NORM) pairs (2p, 2p+1), style 1 (NEOX) pairs (p, p + n_rot/2). With the
 * angle's cos c and sin s (the host's, from rope_angles), a becomes
 * a c - b s and b becomes a s + b c, the products kept unfused (precise)
 * as the CPU computes them. */
#ifndef KK_ROPE_GLSL
#define KK_ROPE_GLSL

/* The pair index p of dimension i, and whether i is the pair's b. */
uint rope_pair(uint i, uint n_rot, uint style, out bool is_b)
{
    const uint half_rot = n_rot / 2u;
    if (style == 0u) {
        is_b = (i & 1u) != 0u;
        return i / 2u;
    }
    is_b = i >= half_rot;
    return is_b ? i - half_rot : i;
}

/* Dimension offsets of pair p within a head. */
uint rope_a(uint p, uint n_rot, uint style)
{
    return style == 0u ? 2u * p : p;
}

uint rope_b(uint p, uint n_rot, uint style)
{
    return style == 0u ? 2u * p + 1u : p + n_rot / 2u;
}

float rope_rotated_a(float xa, float xb, float c, float s)
{
    precise float ca = xa * c, sb = xb * s;
    precise float r = ca - sb;
    return r;
}

float rope_rotated_b(float xa, float xb, float c, float s)
{
    precise float sa = xa * s, cb = xb * c;
    precise float r = sa + cb;
    return r;
}

/* Rotates pair `id` (row, head, pair p, counted pair-fastest) of buf, n_rows
 * rows of n_heads heads, with the angles in cs (rope's contract in
 * vk_shaders.h). A macro: GLSL cannot pass a buffer to a function. */
#define KK_ROPE_PAIR(buf, cs, id, n_rows, n_heads, head_dim, n_rot, style)  \
    {                                                                        \
        const uint half_ = (n_rot) / 2u;                                     \
        if (half_ != 0u && (id) < (n_rows) * (n_heads) * half_) {            \
            const uint p_ = (id) % half_;                                    \
            const uint head_ = ((id) / half_) % (n_heads);                   \
            const uint row_ = (id) / (half_ * (n_heads));                    \
            const uint base_ = (row_ * (n_heads) + head_) * (head_dim);      \
            const uint a_ = base_ + rope_a(p_, n_rot, style);                \
            const uint b_ = base_ + rope_b(p_, n_rot, style);                \
            const float c_ = cs[(row_ * half_ + p_) * 2u];                   \
            const float s_ = cs[(row_ * half_ + p_) * 2u + 1u];              \
            const float xa_ = buf[a_], xb_ = buf[b_];                        \
            buf[a_] = rope_rotated_a(xa_, xb_, c_, s_);                      \
            buf[b_] = rope_rotated_b(xa_, xb_, c_, s_);                      \
        }                                                                    \
    }

#endif
