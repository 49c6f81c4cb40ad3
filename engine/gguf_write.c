/* gguf_write.c — see gguf_write.h.
 *
 * Each metadata entry is serialised when it is set (key, type, value, as
 * they will sit in the file), so saving is concatenation. Tensor records are
 * laid out at save time: offsets are rounded up to the alignment, the data
 * section starts aligned, and the file ends right after the last tensor's
 * bytes (no trailing padding), so any truncation is detectable. */
#include "gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"

enum {
    DEFAULT_ALIGNMENT = 32,
    MAX_DEPTH = 16, /* the reader's limit on nested arrays */
};

/* A growable byte buffer; `failed` sticks after the first allocation
 * failure so a series of appends needs one check. */
struct bytes {
    uint8_t *p;
    size_t len, cap;
    bool failed;
};

struct kv_entry {
    char *key;
    struct bytes record; /* key, type and value, serialised */
};

struct tensor_entry {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t size;
    void *data;        /* owned copy, or NULL when fill is set */
    gguf_fill_fn fill;
    void *fill_ctx;
};

struct gguf_writer {
    struct kv_entry *kvs;
    size_t n_kv, cap_kv;
    struct tensor_entry *tensors;
    size_t n_tensors, cap_tensors;
};

/* ---- bytes -------------------------------------------------------------- */

static void bytes_put(struct bytes *b, const void *p, size_t n)
{
    if (b->failed)
        return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void bytes_put_le(struct bytes *b, uint64_t v, unsigned n)
{
    uint8_t le[8];
    for (unsigned i = 0; i < n; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    bytes_put(b, le, n);
}

static void bytes_put_str(struct bytes *b, const char *s, uint64_t len)
{
    bytes_put_le(b, len, 8);
    bytes_put(b, s, (size_t)len);
}

/* ---- writer ------------------------------------------------------------- */

struct gguf_writer *gguf_writer_new(void)
{
    return calloc(1, sizeof(struct gguf_writer));
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].record.p);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static size_t elem_size(enum gguf_type t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static bool has_key(const struct gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            return true;
    return false;
}

/* Starts a record for key (checking it is new); the caller appends the
 * type and value, then calls kv_commit. */
static struct kv_entry *kv_begin(struct gguf_writer *w, const char *key)
{
    if (has_key(w, key))
        return NULL;
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        struct kv_entry *n = realloc(w->kvs, cap * sizeof *n);
        if (!n)
            return NULL;
        w->kvs = n;
        w->cap_kv = cap;
    }
    struct kv_entry *e = &w->kvs[w->n_kv];
    memset(e, 0, sizeof *e);
    e->key = strdup(key);
    if (!e->key)
        return NULL;
    bytes_put_str(&e->record, key, strlen(key));
    return e;
}

static int kv_commit(struct gguf_writer *w, struct kv_entry *e, bool ok)
{
    if (!ok || e->record.failed) {
        free(e->key);
        free(e->record.p);
        return -1;
    }
    w->n_kv++;
    return 0;
}

static int set_scalar(struct gguf_writer *w, const char *key,
                      enum gguf_type type, uint64_t bits)
{
    struct kv_entry *e = kv_begin(w, key);
    if (!e)
        return -1;
    bytes_put_le(&e->record, type, 4);
    bytes_put_le(&e->record, bits, (unsigned)elem_size(type));
    return kv_commit(w, e, true);
}

int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, GGUF_UINT32, v);
}

int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, GGUF_INT32, (uint32_t)v);
}

int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, GGUF_UINT64, v);
}

int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return set_scalar(w, key, GGUF_FLOAT32, bits);
}

int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    return set_scalar(w, key, GGUF_BOOL, v ? 1 : 0);
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    struct kv_entry *e = kv_begin(w, key);
    if (!e)
        return -1;
    bytes_put_le(&e->record, GGUF_STRING, 4);
    bytes_put_str(&e->record, v, strlen(v));
    return kv_commit(w, e, true);
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key,
                        enum gguf_type elem_type, const void *data, uint64_t n)
{
    size_t size = elem_size(elem_type);
    if (!size || n > SIZE_MAX / size)
        return -1;
    struct kv_entry *e = kv_begin(w, key);
    if (!e)
        return -1;
    bytes_put_le(&e->record, GGUF_ARRAY, 4);
    bytes_put_le(&e->record, elem_type, 4);
    bytes_put_le(&e->record, n, 8);
    bytes_put(&e->record, data, (size_t)n * size);
    return kv_commit(w, e, true);
}

int gguf_writer_set_str_arr(struct gguf_writer *w, const char *key,
                            const char *const *strs, uint64_t n)
{
    struct kv_entry *e = kv_begin(w, key);
    if (!e)
        return -1;
    bytes_put_le(&e->record, GGUF_ARRAY, 4);
    bytes_put_le(&e->record, GGUF_STRING, 4);
    bytes_put_le(&e->record, n, 8);
    for (uint64_t i = 0; i < n; i++)
        bytes_put_str(&e->record, strs[i], strlen(strs[i]));
    return kv_commit(w, e, true);
}

/* Whether an integer value fits its declared type. */
static bool integer_fits(const struct gguf_value *v, uint64_t *bits)
{
    int64_t lo = 0, hi = 0;
    uint64_t umax = 0;
    switch (v->type) {
    case GGUF_UINT8: umax = UINT8_MAX; break;
    case GGUF_UINT16: umax = UINT16_MAX; break;
    case GGUF_UINT32: umax = UINT32_MAX; break;
    case GGUF_UINT64: umax = UINT64_MAX; break;
    case GGUF_INT8: lo = INT8_MIN; hi = INT8_MAX; break;
    case GGUF_INT16: lo = INT16_MIN; hi = INT16_MAX; break;
    case GGUF_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
    case GGUF_INT64: lo = INT64_MIN; hi = INT64_MAX; break;
    default: return false;
    }
    if (umax) {
        *bits = v->v.integer.u64;
        return !v->v.integer.is_negative && v->v.integer.u64 <= umax;
    }
    *bits = (uint64_t)v->v.integer.i64;
    return v->v.integer.i64 >= lo && v->v.integer.i64 <= hi;
}

/* Appends the value (without its type tag) to b. */
static bool put_value(struct bytes *b, const struct gguf_value *v,
                      unsigned depth)
{
    uint64_t bits;
    switch (v->type) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_UINT16: case GGUF_INT16:
    case GGUF_UINT32: case GGUF_INT32: case GGUF_UINT64: case GGUF_INT64:
        if (!integer_fits(v, &bits))
            return false;
        bytes_put_le(b, bits, (unsigned)elem_size(v->type));
        return true;
    case GGUF_FLOAT32: {
        float f = (float)v->v.f64;
        uint32_t fbits;
        memcpy(&fbits, &f, 4);
        bytes_put_le(b, fbits, 4);
        return true;
    }
    case GGUF_FLOAT64:
        memcpy(&bits, &v->v.f64, 8);
        bytes_put_le(b, bits, 8);
        return true;
    case GGUF_BOOL:
        bytes_put_le(b, v->v.b ? 1 : 0, 1);
        return true;
    case GGUF_STRING:
        bytes_put_str(b, v->v.str.ptr, v->v.str.len);
        return true;
    case GGUF_ARRAY:
        break;
    default:
        return false;
    }
    enum gguf_type et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    bytes_put_le(b, et, 4);
    bytes_put_le(b, n, 8);
    size_t size = elem_size(et);
    if (size) {
        if (n > SIZE_MAX / size || (n && !v->v.arr.raw))
            return false;
        bytes_put(b, v->v.arr.raw, (size_t)n * size);
        return true;
    }
    if (et != GGUF_STRING && et != GGUF_ARRAY)
        return false;
    if (et == GGUF_ARRAY && depth + 1 >= MAX_DEPTH)
        return false;
    if (n && !v->v.arr.items)
        return false;
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_value *item = &v->v.arr.items[i];
        if (item->type != et || !put_value(b, item, depth + 1))
            return false;
    }
    return true;
}

int gguf_writer_set_value(struct gguf_writer *w, const char *key,
                          const struct gguf_value *v)
{
    struct kv_entry *e = kv_begin(w, key);
    if (!e)
        return -1;
    bytes_put_le(&e->record, v->type, 4);
    return kv_commit(w, e, put_value(&e->record, v, 0));
}

/* ---- tensors ------------------------------------------------------------ */

static struct tensor_entry *tensor_begin(struct gguf_writer *w,
                                         const char *name, uint32_t type,
                                         uint32_t n_dims, const uint64_t *ne)
{
    if (n_dims < 1 || n_dims > 4)
        return NULL;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return NULL;
    struct tensor_entry t = {.type = type, .n_dims = n_dims,
                             .ne = {1, 1, 1, 1}};
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > INT64_MAX)
            return NULL;
        t.ne[d] = ne[d];
    }
    uint64_t size = dtype_row_bytes(type, t.ne[0]);
    if (size == 0 || __builtin_mul_overflow(size, t.ne[1], &size) ||
        __builtin_mul_overflow(size, t.ne[2], &size) ||
        __builtin_mul_overflow(size, t.ne[3], &size) || size > SIZE_MAX)
        return NULL;
    t.size = size;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        struct tensor_entry *n = realloc(w->tensors, cap * sizeof *n);
        if (!n)
            return NULL;
        w->tensors = n;
        w->cap_tensors = cap;
    }
    t.name = strdup(name);
    if (!t.name)
        return NULL;
    w->tensors[w->n_tensors] = t;
    return &w->tensors[w->n_tensors];
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
                           uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           const void *data)
{
    struct tensor_entry *t = tensor_begin(w, name, type, n_dims, ne);
    if (!t)
        return -1;
    t->data = malloc(t->size);
    if (!t->data) {
        free(t->name);
        return -1;
    }
    memcpy(t->data, data, t->size);
    w->n_tensors++;
    return 0;
}

int gguf_writer_add_tensor_fn(struct gguf_writer *w, const char *name,
                              uint32_t type, uint32_t n_dims,
                              const uint64_t *ne, gguf_fill_fn fill,
                              void *ctx)
{
    struct tensor_entry *t = tensor_begin(w, name, type, n_dims, ne);
    if (!t)
        return -1;
    t->fill = fill;
    t->fill_ctx = ctx;
    w->n_tensors++;
    return 0;
}

/* ---- save --------------------------------------------------------------- */

static uint64_t align_up(uint64_t x, uint32_t a)
{
    return (x + a - 1) / a * a;
}

/* Header, metadata and tensor directory, with the data offsets laid out. */
static int build_head(const struct gguf_writer *w, uint32_t alignment,
                      struct bytes *head, struct kk_error *err)
{
    bytes_put(head, "GGUF", 4);
    bytes_put_le(head, 3, 4);
    bytes_put_le(head, w->n_tensors, 8);
    bytes_put_le(head, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++)
        bytes_put(head, w->kvs[i].record.p, w->kvs[i].record.len);
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct tensor_entry *t = &w->tensors[i];
        bytes_put_str(head, t->name, strlen(t->name));
        bytes_put_le(head, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            bytes_put_le(head, t->ne[d], 8);
        bytes_put_le(head, t->type, 4);
        offset = align_up(offset, alignment);
        bytes_put_le(head, offset, 8);
        offset += t->size;
    }
    if (w->n_tensors) {
        static const uint8_t zeros[64];
        size_t pad = (size_t)(align_up(head->len, alignment) - head->len);
        while (pad && !head->failed) {
            size_t n = pad < sizeof zeros ? pad : sizeof zeros;
            bytes_put(head, zeros, n);
            pad -= n;
        }
    }
    if (head->failed)
        return kk_fail(err, "out of memory while laying out the file");
    return 0;
}

static int write_zeros(FILE *f, uint64_t n)
{
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k)
            return -1;
        n -= k;
    }
    return 0;
}

static int write_tensor_data(const struct gguf_writer *w, uint32_t alignment,
                             FILE *f, const char *path, struct kk_error *err)
{
    uint64_t at = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct tensor_entry *t = &w->tensors[i];
        uint64_t start = align_up(at, alignment);
        if (write_zeros(f, start - at))
            return kk_fail(err, "%s: write failed: %s", path,
                           strerror(errno));
        void *data = t->data;
        if (t->fill) {
            data = malloc(t->size ? (size_t)t->size : 1);
            if (!data)
                return kk_fail(err, "%s: out of memory for tensor '%s'",
                               path, t->name);
            if (t->fill(t->fill_ctx, data, (size_t)t->size)) {
                free(data);
                return kk_fail(err, "%s: producing the data of tensor '%s' "
                               "failed", path, t->name);
            }
        }
        size_t wrote = fwrite(data, 1, (size_t)t->size, f);
        if (t->fill)
            free(data);
        if (wrote != t->size)
            return kk_fail(err, "%s: write failed: %s", path,
                           strerror(errno));
        at = start + t->size;
    }
    return 0;
}

/* The alignment the reader will use: general.alignment when set (read back
 * from its serialised record, whatever integer type it was given as),
 * otherwise the default. */
static int find_alignment(const struct gguf_writer *w, const char *path,
                          uint32_t *out, struct kk_error *err)
{
    static const char key[] = "general.alignment";
    *out = DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) != 0)
            continue;
        const uint8_t *p = w->kvs[i].record.p + 8 + sizeof key - 1;
        enum gguf_type type = (enum gguf_type)p[0];
        size_t n = elem_size(type);
        if (!n || type == GGUF_BOOL || type == GGUF_FLOAT32 ||
            type == GGUF_FLOAT64)
            return kk_fail(err, "%s: general.alignment must be an integer",
                           path);
        uint64_t v = 0;
        for (size_t k = 0; k < n; k++)
            v |= (uint64_t)p[4 + k] << (8 * k);
        bool is_signed = type == GGUF_INT8 || type == GGUF_INT16 ||
                         type == GGUF_INT32 || type == GGUF_INT64;
        bool is_negative = is_signed && (v >> (8 * n - 1)) & 1;
        if (is_negative || v == 0 || v > (1u << 30) || (v & (v - 1)))
            return kk_fail(err,
                           "%s: general.alignment is %s%llu; it must be a "
                           "power of two no larger than 2^30",
                           path, is_negative ? "negative " : "",
                           (unsigned long long)v);
        *out = (uint32_t)v;
    }
    return 0;
}

int gguf_writer_save(const struct gguf_writer *w, const char *path,
                     struct kk_error *err)
{
    uint32_t alignment;
    if (find_alignment(w, path, &alignment, err))
        return -1;
    struct bytes head = {0};
    if (build_head(w, alignment, &head, err)) {
        free(head.p);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(head.p);
        return kk_fail(err, "%s: cannot create: %s", path, strerror(errno));
    }
    int rc = 0;
    if (fwrite(head.p, 1, head.len, f) != head.len)
        rc = kk_fail(err, "%s: write failed: %s", path, strerror(errno));
    if (rc == 0)
        rc = write_tensor_data(w, alignment, f, path, err);
    free(head.p);
    if (fclose(f) != 0 && rc == 0)
        rc = kk_fail(err, "%s: write failed: %s", path, strerror(errno));
    if (rc)
        remove(path);
    return rc;
}
