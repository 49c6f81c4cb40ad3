/* kv_store.comp — converts n_rows rows of kv_dim floats into the KV
 * storage type, rows packed back to back, row_bytes each (contract in
 * engine/vulkan/vk_shaders.h; the CPU twin is kv.c's store_row).
 *
 * One invocation per output word: it computes each of the word's four
 * bytes on its own (a word of q8_0 rows may hold the end of one block and
 * the start of the next, or of the next row), so no two invocations write
 * the same word and no atomics are needed. Bytes past the last row keep
 * what the buffer held. Types:
 *   0 f32   the words copied (as bits: nothing is flushed);
 *   1 f16   two halves per word, nearest even (row_bytes = 2 kv_dim, so
 *           the halves of all rows are one flat array);
 *   2 q8_0  blocks of `block` values: f16 d = f16(amax / 127), then int8
 *           q = roundEven(x * (1 / (amax / 127))), 0 when amax is 0. The
 *           two divisions are correctly rounded (kk_div_rn) and the product
 *           unfused, so the bytes are the CPU's, not merely close. (Blocks
 *           whose amax is below ~1e-36, where 1/d overflows, are not
 *           reproduced.) An invocation recomputes amax for each block its
 *           word touches: a few dozen reads, for a once-per-token op. */
#version 450

#include "common.glsl"

layout(local_size_x = 64) in;

/* SRC is read as bits so that an f32 copy is exact. */
layout(std430, binding = 0) readonly buffer SrcBuf { uint src[]; };
layout(std430, binding = 1) buffer DstBuf { uint dst[]; };

layout(push_constant) uniform Push {
    uint n_rows, kv_dim, type, block, row_bytes;
} pc;

void main()
{
    const uint wi = gl_GlobalInvocationID.x;
    const uint total = pc.n_rows * pc.row_bytes;
    if (wi >= (total + 3u) / 4u)
        return;

    if (pc.type == 0u) {
        dst[wi] = src[wi];
        return;
    }
    if (pc.type == 1u) {
        const uint n = pc.n_rows * pc.kv_dim;
        uint lo = kk_f32_bits_to_f16(src[2u * wi]);
        uint hi = 2u * wi + 1u < n ? kk_f32_bits_to_f16(src[2u * wi + 1u])
                                   : dst[wi] >> 16u;
        dst[wi] = lo | (hi << 16u);
        return;
    }

    /* q8_0 */
    const uint bs = 2u + pc.block;
    const uint nblk = pc.kv_dim / pc.block;
    uint cached = 0xffffffffu;  /* row * nblk + block of dh and id below */
    uint dh = 0u;
    float id = 0.0;
    uint word = 0u;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        const uint byte_at = 4u * wi + k;
        uint v;
        if (byte_at >= total) {
            v = (dst[wi] >> (8u * k)) & 0xffu;
        } else {
            const uint row = byte_at / pc.row_bytes;
            const uint o = byte_at - row * pc.row_bytes;
            const uint blk = o / bs, bo = o - blk * bs;
            const uint x0 = row * pc.kv_dim + blk * pc.block;
            if (row * nblk + blk != cached) {
                cached = row * nblk + blk;
                uint amax = 0u;  /* |x| as bits: ordered like the floats */
                for (uint i = 0u; i < pc.block; i++) {
                    uint a = src[x0 + i] & 0x7fffffffu;
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
                precise float p = uintBitsToFloat(src[x0 + bo - 2u]) * id;
                v = uint(int(roundEven(p))) & 0xffu;
            }
        }
        word |= v << (8u * k);
    }
    dst[wi] = word;
}
