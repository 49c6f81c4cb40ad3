/* matmul.h — y = W·x for a batch of tokens, on quantized weights (CPU).
 *
 * W has n_rows rows of n_cols values stored in any supported dtype. x holds
 * n_tokens activation vectors of n_cols floats. The work is in two steps:
 *
 *   1. matmul_prepare(): converts x once into the form the weight type's dot
 *      product wants (Q8_0 blocks for Q4_0/Q5_0/Q8_0 weights, Q8_K blocks for
 *      Q4_K/Q6_K, as llama.cpp does; f32 for F32/F16/BF16 weights, rounded to
 *      f16/bf16 precision for F16/BF16 as llama.cpp does). The quants and
 *      scales are stored planar, not as interleaved blocks (layout in
 *      matmul_kernels.h). Done once per matmul, shared by all threads.
 *   2. matmul_rows(): computes rows [row_begin, row_end) of y for all tokens.
 *      Each weight row is read from memory once and dotted with every token
 *      of the batch while it is in cache — the reason verifying a block of L
 *      draft tokens costs little more than decoding one. Threads call it on
 *      disjoint row ranges.
 *
 * Kernels: scalar reference, AVX2(+FMA,F16C), AVX-512(BW/VL, VNNI where
 * present), picked once at runtime by cpu_features(). Results of the SIMD
 * paths equal the scalar path up to float summation order. No allocation:
 * the caller provides the prepared-input buffer (matmul_prepared_bytes). */
#ifndef KK_CPU_MATMUL_H
#define KK_CPU_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct matmul_input {
    uint32_t act_type;   /* precision of the prepared activations:
                            Q8_0, Q8_K, F16, BF16 or F32 */
    int64_t n_cols;
    int n_tokens;
    size_t row_bytes;    /* bytes per prepared token vector */
    const void *data;
};

/* Bytes needed to prepare n_tokens vectors of n_cols for weights of
 * weight_type. */
size_t matmul_prepared_bytes(uint32_t weight_type, int64_t n_cols, int n_tokens);

/* Prepares x (n_tokens rows of n_cols floats, contiguous) into buf. */
void matmul_prepare(uint32_t weight_type, const float *x, int64_t n_cols,
                    int n_tokens, void *buf, struct matmul_input *out);
/* The same, for matmul_rows_amx only when is_amx: Q8_0 activations then
 * skip the tiled copy the AVX-512 kernel reads (the AMX kernel reads the
 * plain quants; regrouping them cost more than the tile multiplies). */
void matmul_prepare_for(uint32_t weight_type, const float *x, int64_t n_cols,
                        int n_tokens, bool is_amx, void *buf,
                        struct matmul_input *out);

/* y[t * ldy + r] = dot(row r of w, token t) for r in [row_begin, row_end),
 * t < in->n_tokens. w points at row 0; each row is
 * dtype_row_bytes(weight_type, n_cols) bytes. */
void matmul_rows(uint32_t weight_type, const void *w,
                 const struct matmul_input *in, float *y, int64_t ldy,
                 int64_t row_begin, int64_t row_end);

/* AMX (Intel Sapphire Rapids and later): Q8_0 matrices repacked once into
 * tile order (matmul_amx_pack, matmul_amx_packed_bytes bytes, owned by the
 * caller) and multiplied with tile instructions. matmul_rows_amx gives the
 * AVX-512 kernel's results bit for bit (the same integers per block, the
 * same float steps), so a caller may pick either for any batch; it wins
 * when a batch has several tokens. Rows [row_begin, row_end) of y; n_rows
 * is the matrix's. Only after matmul_has_amx(). */
bool matmul_has_amx(void);
size_t matmul_amx_packed_bytes(int64_t n_rows, int64_t n_cols);
void matmul_amx_pack(const void *w, int64_t n_rows, int64_t n_cols, void *out);
void matmul_rows_amx(const void *packed, const struct matmul_input *in,
                     float *y, int64_t ldy, int64_t n_rows, int64_t row_begin,
                     int64_t row_end);

/* Which kernel family runs ("avx512-vnni", "avx2", "scalar"), for `info`. */
const char *matmul_kernel_name(void);

/* The same computation on the portable scalar path, which defines the
 * result the SIMD paths must reproduce (tests compare the two). */
void matmul_rows_reference(uint32_t weight_type, const void *w,
                           const struct matmul_input *in, float *y,
                           int64_t ldy, int64_t row_begin, int64_t row_end);

#endif
