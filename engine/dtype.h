/* dtype.h — the element types a tensor in a GGUF file can have.
 *
 * The numeric values are ggml's (they are what GGUF files store). A type is
 * stored in blocks: `block_elems` values take `block_bytes` bytes; a row of n
 * values (n a multiple of block_elems) takes n / block_elems * block_bytes.
 * Types kakeya cannot compute with are still known by name, so that a file
 * using them fails with "tensor X has type Q2_K, which kakeya does not
 * support" instead of a bare number. */
#ifndef KK_DTYPE_H
#define KK_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kk_dtype {
    KK_F32 = 0,
    KK_F16 = 1,
    KK_Q4_0 = 2,
    KK_Q4_1 = 3,
    KK_Q5_0 = 6,
    KK_Q5_1 = 7,
    KK_Q8_0 = 8,
    KK_Q8_1 = 9,
    KK_Q2_K = 10,
    KK_Q3_K = 11,
    KK_Q4_K = 12,
    KK_Q5_K = 13,
    KK_Q6_K = 14,
    KK_Q8_K = 15,
    KK_BF16 = 30,
    KK_DTYPE_LIMIT = 40 /* every stored type id is below this */
};

struct kk_dtype_info {
    const char *name;   /* "Q4_K"; NULL for an id ggml never defined */
    uint32_t block_elems;
    uint32_t block_bytes;
    bool is_supported;  /* kakeya has kernels for it */
};

/* Information on type id `type` (any uint32 read from a file); NULL when the
 * id is not a known type. */
const struct kk_dtype_info *dtype_info(uint32_t type);

/* Bytes of a row of n elements, or 0 when n is not a multiple of the block
 * size or the type is unknown. */
size_t dtype_row_bytes(uint32_t type, uint64_t n);

#endif
