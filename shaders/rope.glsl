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

#endif
