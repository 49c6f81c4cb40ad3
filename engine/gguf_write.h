/* gguf_write.h — writes GGUF v3 files.
 *
 * Used by `kakeya mkmodel` (random-weight models with the shapes of real
 * ones) and by the tests, which make their fixtures — corrupted files, odd
 * shapes — with it. Usage: gguf_writer_new(), add metadata and tensor
 * records (the tensor data is copied in, or produced later by a callback),
 * then gguf_writer_save(). The writer owns copies of everything it was given;
 * gguf_writer_free() releases them. */
#ifndef KK_GGUF_WRITE_H
#define KK_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

struct gguf_writer;

struct gguf_writer *gguf_writer_new(void); /* NULL only when out of memory */
void gguf_writer_free(struct gguf_writer *w);

/* Metadata. Each returns 0, or -1 when out of memory or the key repeats. */
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Arrays of numbers: n elements of elem_type, raw little-endian at data. */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key,
                        enum gguf_type elem_type, const void *data, uint64_t n);
int gguf_writer_set_str_arr(struct gguf_writer *w, const char *key,
                            const char *const *strs, uint64_t n);
/* Any value, as the reader describes it: every scalar type (integers from
 * v.integer.u64 for unsigned types, v.integer.i64 for signed ones), strings,
 * and arrays — numeric ones from arr.raw, arrays of strings or of arrays
 * from arr.items, nested to any depth the reader accepts. Copies a value
 * from an open file to a new one as is. Also -1 when an integer does not fit
 * its type or the type is unknown. */
int gguf_writer_set_value(struct gguf_writer *w, const char *key,
                          const struct gguf_value *v);

/* A tensor of the given enum kk_dtype and shape; `data` holds exactly
 * dtype_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes and is copied.
 * Returns -1 when out of memory, when the name repeats, or when the shape
 * is invalid (n_dims outside 1..4, a zero dimension, an unknown type, a row
 * length that is not a multiple of the type's block). */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
                           uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           const void *data);

/* The same, with the data produced at save time: fill(ctx, buf, size) must
 * write exactly `size` bytes into buf and return 0 (non-zero aborts the
 * save). Lets a tool write a model larger than it wants to hold in memory. */
typedef int (*gguf_fill_fn)(void *ctx, void *buf, size_t size);
int gguf_writer_add_tensor_fn(struct gguf_writer *w, const char *name,
                              uint32_t type, uint32_t n_dims,
                              const uint64_t *ne, gguf_fill_fn fill,
                              void *ctx);

/* Writes the file (alignment 32 unless general.alignment was set, as any
 * integer type; a value that is not a power of two fails here). */
int gguf_writer_save(const struct gguf_writer *w, const char *path,
                     struct kk_error *err);

#endif
