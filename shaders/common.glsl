/* common.glsl — helpers every kakeya compute shader includes.
 *
 * Buffers are bound as arrays of 32-bit words (vk_shaders.h), but GGUF
 * blocks and KV rows are byte-addressed: Q8_0's 34-byte blocks, f16 rows of
 * an odd width and q8_0 KV rows start anywhere in a word. The KK_U8 /
 * KK_U16 / KK_U32 / KK_LOAD_WORDS macros read little-endian values at any
 * byte offset of a named uint array (GLSL cannot pass a buffer array to a
 * function, hence macros). None of them reads a word past the one holding
 * the last byte asked for, so a value at the very end of a buffer is safe
 * without robust buffer access. Arguments are evaluated more than once:
 * pass plain variables.
 *
 * Half floats: kk_f16_to_f32 decodes exactly (unpackHalf2x16); kk_f32_to_f16
 * rounds to nearest, ties to even, with integer operations only, because
 * packHalf2x16's rounding is left to the implementation and the KV cache
 * and GELU must round as the CPU's f32_to_fp16 (engine/quant.c) does.
 * kk_div_rn divides correctly rounded, again in integers, because GLSL's
 * `/` may be 2.5 ulp off (the q8_0 KV scale must be the CPU's to the bit). */
#ifndef KK_COMMON_GLSL
#define KK_COMMON_GLSL

#extension GL_EXT_control_flow_attributes : require

/* ---- bytes at any offset of a uint array ---- */

/* The byte at byte offset off. */
#define KK_U8(buf, off) ((buf[(off) >> 2u] >> (((off) & 3u) << 3u)) & 0xffu)

/* The u16 at off. The second word is read only when the value straddles
 * two words ((off + 1) >> 2 is off >> 2 otherwise); the shift is split in
 * two so that an aligned read shifts by 32 in no single step. */
#define KK_U16(buf, off)                                                     \
    (((buf[(off) >> 2u] >> (((off) & 3u) << 3u)) |                           \
      ((buf[((off) + 1u) >> 2u] << (31u - (((off) & 3u) << 3u))) << 1u)) &   \
     0xffffu)

/* The u32 at off: one word when aligned (read twice), else two. */
#define KK_U32(buf, off)                                                     \
    ((buf[(off) >> 2u] >> (((off) & 3u) << 3u)) |                            \
     ((buf[((off) + 3u) >> 2u] << (31u - (((off) & 3u) << 3u))) << 1u))

/* raw[i] = the u32 at off + 4 i for i < N (a constant): N + 1 word loads
 * when off is unaligned, N (+ one repeated) when aligned. The last load is
 * of the word holding the last byte, so nothing past the range is read. */
#define KK_LOAD_WORDS(buf, off, raw, N)                                      \
    {                                                                        \
        uint kk_a = (off) >> 2u, kk_s = ((off) & 3u) << 3u;                  \
        uint kk_lo = buf[kk_a];                                              \
        [[unroll]] for (uint kk_i = 0u; kk_i < (N); kk_i++) {                \
            uint kk_hi = buf[kk_i + 1u < (N) ? kk_a + kk_i + 1u              \
                                             : ((off) + 4u * (N) - 1u) >> 2u]; \
            raw[kk_i] = (kk_lo >> kk_s) | ((kk_hi << (31u - kk_s)) << 1u);   \
            kk_lo = kk_hi;                                                   \
        }                                                                    \
    }

/* Byte i (0..3) of a word, as unsigned and as signed int8. */
uint kk_byte(uint word, uint i)
{
    return (word >> (i << 3u)) & 0xffu;
}

int kk_sbyte(uint word, uint i)
{
    return bitfieldExtract(int(word), int(i << 3u), 8);
}

/* ---- half, bfloat16 ---- */

float kk_f16_to_f32(uint h)
{
    return unpackHalf2x16(h & 0xffffu).x;
}

float kk_bf16_to_f32(uint h)
{
    return uintBitsToFloat((h & 0xffffu) << 16u);
}

/* m >> shift rounded to nearest, ties to even (1 <= shift <= 31). */
uint kk_shift_round_even(uint m, uint shift)
{
    uint q = m >> shift;
    uint rem = m & ((1u << shift) - 1u);
    uint half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (q & 1u) != 0u))
        q++;
    return q;
}

/* The half nearest the f32 with bits u (ties to even), as quant.c's
 * f32_to_fp16: NaN stays a quiet NaN, overflow gives inf, f32 values
 * below the half range become half subnormals or zero. Takes bits so that
 * an f32 subnormal input is not flushed on the way in. */
uint kk_f32_bits_to_f16(uint u)
{
    uint sign = (u >> 16u) & 0x8000u;
    uint a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00u | ((a >> 13u) & 0x3ffu);
    if (a >= 0x477ff000u)
        return sign | 0x7c00u;
    if (a < 0x38800000u) {
        uint e = a >> 23u;
        uint m = (a & 0x7fffffu) | (e != 0u ? 0x800000u : 0u);
        uint shift = 126u - (e != 0u ? e : 1u);
        if (shift > 24u)
            return sign;
        return sign | kk_shift_round_even(m, shift);
    }
    return sign | kk_shift_round_even(a - (112u << 23u), 13u);
}

uint kk_f32_to_f16(float f)
{
    return kk_f32_bits_to_f16(floatBitsToUint(f));
}

/* f16(f) back in f32: the rounding a half-precision store would do. */
float kk_round_f16(float f)
{
    return kk_f16_to_f32(kk_f32_to_f16(f));
}

/* ---- correctly rounded division ---- */

/* a / b rounded to nearest, ties to even, for a and b given as bits, not
 * NaN, b != 0 (IEEE division; subnormal operands and results included).
 * Long division of the 24-bit significands: 26 quotient bits and a sticky
 * remainder decide the rounding. */
uint kk_div_rn_bits(uint a, uint b)
{
    uint sign = (a ^ b) & 0x80000000u;
    uint ea = (a >> 23u) & 0xffu, eb = (b >> 23u) & 0xffu;
    uint ma = a & 0x7fffffu, mb = b & 0x7fffffu;
    if ((ea == 0u && ma == 0u) || eb == 255u)  /* 0 / b, a / inf */
        return sign;
    if (ea == 255u)  /* inf / b */
        return sign | 0x7f800000u;
    /* Subnormals: normalise the significand, lowering the exponent. */
    int xa = int(ea), xb = int(eb);
    if (ea == 0u) {
        int z = 23 - findMSB(ma);
        ma <<= uint(z);
        xa = 1 - z;
    } else {
        ma |= 0x800000u;
    }
    if (eb == 0u) {
        int z = 23 - findMSB(mb);
        mb <<= uint(z);
        xb = 1 - z;
    } else {
        mb |= 0x800000u;
    }
    int e = xa - xb + 127;  /* biased exponent of the quotient in [1, 2) */
    if (ma < mb) {
        ma <<= 1u;
        e--;
    }
    /* ma / mb in [1, 2): 26 quotient bits (1 integer, 25 fraction). */
    uint q = 0u, r = ma;
    [[unroll]] for (int i = 0; i < 26; i++) {
        q <<= 1u;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1u;
    }
    bool sticky = r != 0u;
    if (e >= 255)
        return sign | 0x7f800000u;
    /* Keep 24 significant bits (fewer for a subnormal result). */
    int shift = e >= 1 ? 2 : 3 - e;
    if (shift > 26)
        return sign;
    uint s = q >> uint(shift);
    uint rem = q & ((1u << uint(shift)) - 1u);
    uint half_ = 1u << uint(shift - 1);
    if (rem > half_ || (rem == half_ && (sticky || (s & 1u) != 0u)))
        s++;
    /* The implicit bit adds one to the exponent field; a carry out of the
     * significand rolls into the exponent, as rounding up should. */
    uint bits = e >= 1 ? (uint(e - 1) << 23u) + s : s;
    return sign | min(bits, 0x7f800000u);
}

float kk_div_rn(float a, float b)
{
    return uintBitsToFloat(kk_div_rn_bits(floatBitsToUint(a),
                                          floatBitsToUint(b)));
}

#endif
