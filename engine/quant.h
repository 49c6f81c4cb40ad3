/* quant.h — converting rows between f32 and the stored weight types.
 *
 * Block layouts are ggml's (Q4_0, Q5_0, Q8_0: 32 values with an f16 scale;
 * Q4_K, Q6_K: 256-value super-blocks). Dequantisation is bit-exact with
 * ggml's reference (tests check it against ../shared/golden/dequant).
 * Quantisation of weights (F16, BF16, Q8_0, Q4_0) serves the GGUF writer and
 * `kakeya mkmodel`. Pure functions, no state, thread-safe. */
#ifndef KK_QUANT_H
#define KK_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

/* IEEE half and bfloat16 <-> f32 (round to nearest even). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

/* Dequantises n values (a whole number of blocks) of `type` from src into
 * dst. type must be a supported dtype (dtype_info(type)->is_supported). */
void dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantises n values into dst (dtype_row_bytes(type, n) bytes). Supported
 * targets: F32, F16, BF16, Q8_0, Q4_0. Returns 0, or -1 for another type. */
int quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
