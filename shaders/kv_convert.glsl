/* kv_convert.glsl — one 32-bit word of KV rows in their storage type,
 * shared by kv_store.comp and rope_kv_store.comp (the CPU twin is kv.c's
 * store_row; the types and their rounding are described in
 * engine/vulkan/vk_shaders.h under kv_store).
 *
 * The includer defines kv_src_bits(i): the bits of source value i (row i /
 * kv_dim, column i % kv_dim), read as bits so that an f32 copy is exact.
 * kv_word computes each of the word's four bytes on its own (a word of
 * q8_0 rows may hold the end of one block and the start of the next, or of
 * the next row), so no two invocations write the same word and no atomics
 * are needed; bytes past the last row keep `old`, what the word held.
 * For q8_0 an invocation recomputes amax for each block its word touches:
 * a few dozen reads, for a once-per-token op. The two divisions are
 * correctly rounded (kk_div_rn) and the product unfused, so the bytes are
 * the CPU's, not merely close (blocks whose amax is below ~1e-36, where
 * 1/d overflows, are not reproduced). */
#ifndef KK_KV_CONVERT_GLSL
#define KK_KV_CONVERT_GLSL

#include "common.glsl"

uint kv_src_bits(uint i);

struct kv_layout {
    uint n_rows, kv_dim, type, block, row_bytes;
};

/* Words the rows fill (the last may be partial). */
uint kv_words(kv_layout L)
{
    return (L.n_rows * L.row_bytes + 3u) / 4u;
}

uint kv_word(kv_layout L, uint wi, uint old)
{
    const uint total = L.n_rows * L.row_bytes;
    if (L.type == 0u)
        return kv_src_bits(wi);
    if (L.type == 1u) {
        const uint n = L.n_rows * L.kv_dim;
        uint lo = kk_f32_bits_to_f16(kv_src_bits(2u * wi));
        uint hi = 2u * wi + 1u < n ? kk_f32_bits_to_f16(kv_src_bits(2u * wi + 1u))
                                   : old >> 16u;
        return lo | (hi << 16u);
    }

    /* q8_0 */
    const uint bs = 2u + L.block;
    const uint nblk = L.kv_dim / L.block;
    uint cached = 0xffffffffu;  /* row * nblk + block of dh and id below */
    uint dh = 0u;
    float id = 0.0;
    uint word = 0u;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        const uint byte_at = 4u * wi + k;
        uint v;
        if (byte_at >= total) {
            v = (old >> (8u * k)) & 0xffu;
        } else {
            const uint row = byte_at / L.row_bytes;
            const uint o = byte_at - row * L.row_bytes;
            const uint blk = o / bs, bo = o - blk * bs;
            const uint x0 = row * L.kv_dim + blk * L.block;
            if (row * nblk + blk != cached) {
                cached = row * nblk + blk;
                uint amax = 0u;  /* |x| as bits: ordered like the floats */
                for (uint i = 0u; i < L.block; i++) {
                    uint a = kv_src_bits(x0 + i) & 0x7fffffffu;
                    if (a <= 0x7f800000u)  /* fabsf(NaN) > amax is false */
                        amax = max(amax, a);
                }
                uint d = amax != 0u
                             ? kk_div_rn_bits(amax, floatBitsToUint(127.0))
                             : 0u;
                dh = kk_f32_bits_to_f16(d);
                id = d != 0u ? uintBitsToFloat(kk_div_rn_bits(
                                   floatBitsToUint(1.0), d))
                             : 0.0;
            }
            if (bo < 2u) {
                v = (dh >> (8u * bo)) & 0xffu;
            } else {
                precise float p = uintBitsToFloat(kv_src_bits(x0 + bo - 2u)) * id;
                v = uint(int(roundEven(p))) & 0xffu;
            }
        }
        word |= v << (8u * k);
    }
    return word;
}

#endif
