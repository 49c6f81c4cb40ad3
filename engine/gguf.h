/* gguf.h — read-only view of a GGUF model file (versions 2 and 3).
 *
 * gguf_open() maps the file and validates all of it before returning: the
 * header, every metadata key and value (nested arrays included), every tensor
 * record and that each tensor's bytes lie inside the file. Afterwards nothing
 * in this API can read out of bounds, so callers need not re-check. A
 * truncated, corrupt or hostile file fails with a message naming the problem
 * (which key or tensor, which offset) — never a crash and never an
 * allocation larger than the file justifies.
 *
 * Ownership: struct gguf owns the mapping; every pointer handed out
 * (strings, array data, tensor data) points into it and lives until
 * gguf_close(). Strings in the file are not NUL-terminated: they come as
 * struct gguf_str. Not thread-safe to open/close concurrently; read-only use
 * from several threads is fine. */
#ifndef KK_GGUF_H
#define KK_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya_error.h"

enum gguf_type {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
};

/* A string inside the file: len bytes at ptr, no terminator. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

/* One metadata value. Scalars are widened: integers to i64/u64 (both filled
 * when representable; otherwise u64 is 0 for a negative value and i64 is
 * INT64_MAX for one above it), floats to f64. Booleans must be 0 or 1 in
 * the file, and arrays nest at most 16 levels deep. Arrays of numbers keep their raw
 * little-endian bytes (read them with gguf_arr_*); arrays of strings and of
 * arrays are parsed into `items`. */
struct gguf_value {
    enum gguf_type type;
    union {
        struct {
            uint64_t u64;
            int64_t i64;
            bool is_negative;
        } integer;
        double f64;
        bool b;
        struct gguf_str str;
        struct {
            enum gguf_type elem_type;
            uint64_t n;
            const uint8_t *raw;           /* numeric/bool elements */
            const struct gguf_value *items; /* string/array elements */
        } arr;
    } v;
};

struct gguf_kv {
    struct gguf_str key;
    struct gguf_value value;
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;     /* 1..4 */
    uint64_t ne[4];      /* ne[0] is the row length; unused dims are 1 */
    uint32_t type;       /* enum kk_dtype value (dtype.h); may be unsupported */
    uint64_t offset;     /* relative to the data section */
    uint64_t size;       /* bytes */
    const void *data;    /* inside the mapping */
};

struct gguf;

/* Opens and validates path. On failure *out is NULL and err says why,
 * prefixed with the file name. */
int gguf_open(const char *path, struct gguf **out, struct kk_error *err);

/* The same over a caller-owned buffer (fuzzing, tests). The buffer must
 * outlive the returned struct gguf. */
int gguf_open_memory(const void *data, size_t size, struct gguf **out,
                     struct kk_error *err);

void gguf_close(struct gguf *g); /* NULL is fine */

uint32_t gguf_version(const struct gguf *g);
size_t gguf_file_size(const struct gguf *g);
uint32_t gguf_alignment(const struct gguf *g);

/* The whole file's bytes (inside the mapping) and where its data section
 * starts: for code that hashes or copies the file as stored. The offset may
 * equal or exceed gguf_file_size() in a file without tensors. */
const void *gguf_file_bytes(const struct gguf *g);
size_t gguf_data_offset(const struct gguf *g);

/* Metadata, in file order. */
uint64_t gguf_n_kv(const struct gguf *g);
const struct gguf_kv *gguf_kv_at(const struct gguf *g, uint64_t i);
const struct gguf_value *gguf_get(const struct gguf *g, const char *key);

/* Typed lookups: return false when the key is absent or its value cannot be
 * represented in the asked type (e.g. a negative number for u32, a string
 * for f32). Integer getters accept any integer type in range; gguf_get_f32
 * accepts floats and integers. */
bool gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
bool gguf_get_i64(const struct gguf *g, const char *key, int64_t *out);
bool gguf_get_f32(const struct gguf *g, const char *key, float *out);
bool gguf_get_bool(const struct gguf *g, const char *key, bool *out);
bool gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
/* Array lookup: false unless key holds an array. */
bool gguf_get_arr(const struct gguf *g, const char *key,
                  const struct gguf_value **out);

/* Element i of a numeric array, converted (i < arr.n; bounds are the
 * caller's, as for any C array). */
int64_t gguf_arr_i64(const struct gguf_value *arr, uint64_t i);
double gguf_arr_f64(const struct gguf_value *arr, uint64_t i);

/* Tensors, in file order. */
uint64_t gguf_n_tensors(const struct gguf *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, uint64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g,
                                           const char *name);

/* True when s equals the NUL-terminated c. */
bool gguf_str_eq(struct gguf_str s, const char *c);

/* Name of a value type ("uint32", "array", ...) for messages. */
const char *gguf_type_name(enum gguf_type t);

#endif
