/* gguf.c — see gguf.h.
 *
 * Layout of a GGUF v2/v3 file (all little-endian):
 *   "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv × { string key, u32 value type, value },
 *   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 type,
 *                 u64 offset },
 *   padding to the alignment, then the data section.
 * A string is a u64 length and that many bytes; an array is a u32 element
 * type, a u64 count and the elements.
 *
 * The parser walks the bytes once with a cursor that refuses to step past
 * the end, and checks every count against the bytes left before it
 * allocates anything for it, so memory stays proportional to the file. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "error.h"

enum {
    GGUF_HEADER_BYTES = 24,
    GGUF_DEFAULT_ALIGNMENT = 32,
    /* Nested arrays deeper than this are refused: no real file nests at
     * all, and the limit bounds the parser's recursion. */
    GGUF_MAX_DEPTH = 16,
    /* Smallest encodings, used to bound counts before allocating. */
    GGUF_MIN_KV_BYTES = 8 + 4 + 1,          /* key length, type, u8 value */
    GGUF_MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8, /* name, n_dims, ne, type, offset */
    NAME_SHOWN = 64, /* characters of a key or tensor name put in messages */
};

/* ---- little helpers ---------------------------------------------------- */

static uint16_t load_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* A name from the file made safe to print: control and non-ASCII bytes
 * become '?', long names are cut with "...". */
static void format_name(char *buf, size_t cap, struct gguf_str s)
{
    size_t n = 0;
    for (uint64_t i = 0; i < s.len && i < NAME_SHOWN && n + 1 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[n++] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    buf[n] = 0;
    if (s.len > NAME_SHOWN && n + 4 < cap)
        memcpy(buf + n, "...", 4);
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

const char *gguf_type_name(enum gguf_type t)
{
    static const char *const names[] = {
        [GGUF_UINT8] = "uint8",     [GGUF_INT8] = "int8",
        [GGUF_UINT16] = "uint16",   [GGUF_INT16] = "int16",
        [GGUF_UINT32] = "uint32",   [GGUF_INT32] = "int32",
        [GGUF_FLOAT32] = "float32", [GGUF_BOOL] = "bool",
        [GGUF_STRING] = "string",   [GGUF_ARRAY] = "array",
        [GGUF_UINT64] = "uint64",   [GGUF_INT64] = "int64",
        [GGUF_FLOAT64] = "float64",
    };
    if ((unsigned)t < sizeof names / sizeof names[0])
        return names[t];
    return "unknown";
}

/* Bytes one element of a fixed-size type takes; 0 for string and array. */
static size_t fixed_size(enum gguf_type t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Fewest bytes a value of type t can take in the file. */
static size_t min_value_size(enum gguf_type t)
{
    if (t == GGUF_STRING)
        return 8;
    if (t == GGUF_ARRAY)
        return 4 + 8;
    return fixed_size(t);
}

static bool is_valid_type(uint32_t t)
{
    return t <= GGUF_FLOAT64;
}

static bool is_integer_type(enum gguf_type t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_UINT16: case GGUF_INT16:
    case GGUF_UINT32: case GGUF_INT32: case GGUF_UINT64: case GGUF_INT64:
        return true;
    default:
        return false;
    }
}

/* ---- name index: open addressing over FNV-1a ---------------------------- */

struct name_index {
    size_t *slots; /* entry index + 1; 0 marks an empty slot */
    size_t mask;
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static int index_init(struct name_index *ix, uint64_t n)
{
    size_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? 0 : -1;
}

/* The slot where `name` lives, or the empty slot where it would go. `names`
 * gives the name of entry i. */
static size_t *index_slot(const struct name_index *ix, const char *name,
                          size_t len, const void *entries, size_t stride,
                          size_t name_offset)
{
    size_t at = (size_t)hash_bytes(name, len) & ix->mask;
    for (;;) {
        size_t *slot = &ix->slots[at];
        if (*slot == 0)
            return slot;
        const struct gguf_str *s = (const struct gguf_str *)(
            (const char *)entries + (*slot - 1) * stride + name_offset);
        if (s->len == len && memcmp(s->ptr, name, len) == 0)
            return slot;
        at = (at + 1) & ix->mask;
    }
}

/* ---- the parsed file ---------------------------------------------------- */

/* Arrays of strings and of arrays get their items from these blocks, all
 * freed together at close. */
struct arena_block {
    struct arena_block *next;
    max_align_t data[];
};

struct gguf {
    const uint8_t *base;
    size_t size;
    void *map; /* our mmap, or NULL over a caller's buffer */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    uint64_t n_tensors;
    struct gguf_kv *kvs;
    struct gguf_tensor *tensors;
    struct name_index kv_index;
    struct name_index tensor_index;
    struct arena_block *arena;
    size_t data_offset;
};

static void *arena_alloc(struct gguf *g, size_t n, size_t elem)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, elem, &bytes) ||
        bytes > SIZE_MAX - sizeof(struct arena_block))
        return NULL;
    struct arena_block *b = malloc(sizeof *b + bytes);
    if (!b)
        return NULL;
    b->next = g->arena;
    g->arena = b;
    return b->data;
}

/* ---- the cursor --------------------------------------------------------- */

struct parser {
    const uint8_t *base;
    size_t size;
    size_t pos;
    struct gguf *g;
    struct kk_error *err;
    char where[NAME_SHOWN + 48]; /* "metadata key 'x' (#3)" — message prefix */
};

static size_t remaining(const struct parser *p)
{
    return p->size - p->pos;
}

static int need(struct parser *p, size_t n, const char *what)
{
    if (n <= remaining(p))
        return 0;
    return kk_fail(p->err,
                   "%s: %s at byte %zu runs past the end of the file "
                   "(%zu bytes) — the file is truncated",
                   p->where, what, p->pos, p->size);
}

static int read_u32(struct parser *p, uint32_t *out, const char *what)
{
    if (need(p, 4, what))
        return -1;
    *out = load_le32(p->base + p->pos);
    p->pos += 4;
    return 0;
}

static int read_u64(struct parser *p, uint64_t *out, const char *what)
{
    if (need(p, 8, what))
        return -1;
    *out = load_le64(p->base + p->pos);
    p->pos += 8;
    return 0;
}

static int read_str(struct parser *p, struct gguf_str *out, const char *what)
{
    uint64_t len;
    size_t at = p->pos;
    if (read_u64(p, &len, what))
        return -1;
    if (len > remaining(p))
        return kk_fail(p->err,
                       "%s: %s length %llu at byte %zu runs past the end of "
                       "the file (%zu bytes)",
                       p->where, what, (unsigned long long)len, at, p->size);
    out->ptr = (const char *)p->base + p->pos;
    out->len = len;
    p->pos += (size_t)len;
    return 0;
}

/* ---- metadata values ---------------------------------------------------- */

static int read_value(struct parser *p, enum gguf_type type,
                      struct gguf_value *out, unsigned depth);

static void widen_integer(struct gguf_value *v, uint64_t u, bool is_signed,
                          unsigned bits)
{
    int64_t i = (int64_t)u;
    if (is_signed && bits < 64) {
        uint64_t sign = 1ull << (bits - 1);
        i = (int64_t)((u ^ sign) - sign); /* sign-extend */
    }
    v->v.integer.is_negative = is_signed && i < 0;
    if (v->v.integer.is_negative) {
        v->v.integer.i64 = i;
        v->v.integer.u64 = 0; /* not representable */
    } else {
        v->v.integer.u64 = u;
        v->v.integer.i64 = u > INT64_MAX ? INT64_MAX : (int64_t)u;
    }
}

static int read_scalar(struct parser *p, enum gguf_type type,
                       struct gguf_value *out)
{
    size_t n = fixed_size(type);
    char what[32];
    snprintf(what, sizeof what, "%s value", gguf_type_name(type));
    if (need(p, n, what))
        return -1;
    const uint8_t *b = p->base + p->pos;
    switch (type) {
    case GGUF_UINT8: widen_integer(out, b[0], false, 8); break;
    case GGUF_INT8: widen_integer(out, b[0], true, 8); break;
    case GGUF_UINT16: widen_integer(out, load_le16(b), false, 16); break;
    case GGUF_INT16: widen_integer(out, load_le16(b), true, 16); break;
    case GGUF_UINT32: widen_integer(out, load_le32(b), false, 32); break;
    case GGUF_INT32: widen_integer(out, load_le32(b), true, 32); break;
    case GGUF_UINT64: widen_integer(out, load_le64(b), false, 64); break;
    case GGUF_INT64: widen_integer(out, load_le64(b), true, 64); break;
    case GGUF_FLOAT32: {
        uint32_t bits = load_le32(b);
        float f;
        memcpy(&f, &bits, 4);
        out->v.f64 = f;
        break;
    }
    case GGUF_FLOAT64: {
        uint64_t bits = load_le64(b);
        memcpy(&out->v.f64, &bits, 8);
        break;
    }
    case GGUF_BOOL:
        if (b[0] > 1)
            return kk_fail(p->err,
                           "%s: boolean value %u at byte %zu is neither 0 "
                           "nor 1",
                           p->where, b[0], p->pos);
        out->v.b = b[0];
        break;
    default:
        return kk_fail(p->err, "%s: internal error: type %d is not a scalar",
                       p->where, (int)type);
    }
    p->pos += n;
    return 0;
}

static int read_array(struct parser *p, struct gguf_value *out,
                      unsigned depth)
{
    uint32_t elem_type;
    uint64_t n;
    size_t type_at = p->pos;
    if (read_u32(p, &elem_type, "array element type"))
        return -1;
    if (!is_valid_type(elem_type))
        return kk_fail(p->err,
                       "%s: unknown array element type %u at byte %zu",
                       p->where, elem_type, type_at);
    if (elem_type == GGUF_ARRAY && depth + 1 >= GGUF_MAX_DEPTH)
        return kk_fail(p->err,
                       "%s: arrays nested more than %d levels deep at byte "
                       "%zu",
                       p->where, GGUF_MAX_DEPTH, type_at);
    size_t count_at = p->pos;
    if (read_u64(p, &n, "array length"))
        return -1;
    size_t min = min_value_size((enum gguf_type)elem_type);
    if (n > remaining(p) / min)
        return kk_fail(p->err,
                       "%s: array of %llu %s elements at byte %zu needs at "
                       "least %llu bytes per element, but only %zu bytes "
                       "remain — the file is truncated or corrupt",
                       p->where, (unsigned long long)n,
                       gguf_type_name((enum gguf_type)elem_type), count_at,
                       (unsigned long long)min, remaining(p));
    out->v.arr.elem_type = (enum gguf_type)elem_type;
    out->v.arr.n = n;
    out->v.arr.raw = NULL;
    out->v.arr.items = NULL;
    if (fixed_size((enum gguf_type)elem_type)) {
        out->v.arr.raw = p->base + p->pos;
        if (elem_type == GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (out->v.arr.raw[i] > 1)
                    return kk_fail(p->err,
                                   "%s: boolean element %llu at byte %zu is "
                                   "%u, neither 0 nor 1",
                                   p->where, (unsigned long long)i,
                                   p->pos + (size_t)i, out->v.arr.raw[i]);
        }
        p->pos += (size_t)n * min;
        return 0;
    }
    if (n == 0)
        return 0;
    struct gguf_value *items = arena_alloc(p->g, (size_t)n, sizeof *items);
    if (!items)
        return kk_fail(p->err, "%s: out of memory for an array of %llu "
                       "elements", p->where, (unsigned long long)n);
    out->v.arr.items = items;
    for (uint64_t i = 0; i < n; i++)
        if (read_value(p, (enum gguf_type)elem_type, &items[i], depth + 1))
            return -1;
    return 0;
}

static int read_value(struct parser *p, enum gguf_type type,
                      struct gguf_value *out, unsigned depth)
{
    memset(out, 0, sizeof *out);
    out->type = type;
    if (type == GGUF_STRING)
        return read_str(p, &out->v.str, "string");
    if (type == GGUF_ARRAY)
        return read_array(p, out, depth);
    return read_scalar(p, type, out);
}

/* ---- header ------------------------------------------------------------- */

static int parse_header(struct parser *p, struct gguf *g)
{
    snprintf(p->where, sizeof p->where, "header");
    if (p->size < 4 || memcmp(p->base, "GGUF", 4) != 0) {
        if (p->size < 4)
            return kk_fail(p->err,
                           "not a GGUF file: it is only %zu bytes long",
                           p->size);
        return kk_fail(p->err,
                       "not a GGUF file: it starts with bytes %02x %02x %02x "
                       "%02x instead of \"GGUF\"",
                       p->base[0], p->base[1], p->base[2], p->base[3]);
    }
    p->pos = 4;
    if (read_u32(p, &g->version, "version"))
        return -1;
    if (g->version == 1)
        return kk_fail(p->err,
                       "GGUF version 1 is not supported (it predates 64-bit "
                       "counts); convert the model again with a current "
                       "llama.cpp");
    if (g->version == 0x02000000 || g->version == 0x03000000)
        return kk_fail(p->err,
                       "the file is big-endian GGUF (version %u byte-swapped); "
                       "kakeya reads little-endian files only",
                       __builtin_bswap32(g->version));
    if (g->version != 2 && g->version != 3)
        return kk_fail(p->err,
                       "unsupported GGUF version %u (kakeya reads versions 2 "
                       "and 3)",
                       g->version);
    if (read_u64(p, &g->n_tensors, "tensor count") ||
        read_u64(p, &g->n_kv, "metadata count"))
        return -1;
    return 0;
}

/* ---- metadata ----------------------------------------------------------- */

static int parse_kv(struct parser *p, struct gguf *g, uint64_t i)
{
    struct gguf_kv *kv = &g->kvs[i];
    snprintf(p->where, sizeof p->where, "metadata key #%llu",
             (unsigned long long)i);
    if (read_str(p, &kv->key, "key"))
        return -1;
    char name[NAME_SHOWN + 4];
    format_name(name, sizeof name, kv->key);
    snprintf(p->where, sizeof p->where, "metadata key '%s' (#%llu)", name,
             (unsigned long long)i);
    size_t *slot = index_slot(&g->kv_index, kv->key.ptr, (size_t)kv->key.len,
                              g->kvs, sizeof *g->kvs,
                              offsetof(struct gguf_kv, key));
    if (*slot)
        return kk_fail(p->err, "%s: the key appears twice (first as #%zu)",
                       p->where, *slot - 1);
    uint32_t type;
    size_t type_at = p->pos;
    if (read_u32(p, &type, "value type"))
        return -1;
    if (!is_valid_type(type))
        return kk_fail(p->err, "%s: unknown value type %u at byte %zu",
                       p->where, type, type_at);
    if (read_value(p, (enum gguf_type)type, &kv->value, 0))
        return -1;
    *slot = (size_t)i + 1;
    return 0;
}

static int parse_kvs(struct parser *p, struct gguf *g)
{
    if (g->n_kv > remaining(p) / GGUF_MIN_KV_BYTES)
        return kk_fail(p->err,
                       "header: the file claims %llu metadata entries, but "
                       "the %zu bytes after the header can hold at most %zu "
                       "— the file is truncated or corrupt",
                       (unsigned long long)g->n_kv, remaining(p),
                       remaining(p) / GGUF_MIN_KV_BYTES);
    g->kvs = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kvs);
    if (!g->kvs || index_init(&g->kv_index, g->n_kv))
        return kk_fail(p->err, "out of memory for %llu metadata entries",
                       (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (parse_kv(p, g, i))
            return -1;
    return 0;
}

static int apply_alignment(struct parser *p, struct gguf *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_value *v = gguf_get(g, "general.alignment");
    if (!v)
        return 0;
    if (!is_integer_type(v->type))
        return kk_fail(p->err,
                       "general.alignment has type %s; it must be an "
                       "unsigned integer", gguf_type_name(v->type));
    uint64_t a = v->v.integer.u64;
    if (v->v.integer.is_negative || a == 0 || a > (1u << 30) ||
        (a & (a - 1)) != 0)
        return kk_fail(p->err,
                       "general.alignment is %lld; it must be a power of two "
                       "between 1 and 2^30",
                       (long long)v->v.integer.i64);
    g->alignment = (uint32_t)a;
    return 0;
}

/* ---- tensors ------------------------------------------------------------ */

static int tensor_size(struct parser *p, struct gguf_tensor *t)
{
    const struct kk_dtype_info *info = dtype_info(t->type);
    if (!info)
        return kk_fail(p->err,
                       "%s has unknown type id %u — the file is corrupt or "
                       "was made by a newer tool",
                       p->where, t->type);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < 4; d++)
        if (__builtin_mul_overflow(elems, t->ne[d], &elems) ||
            elems > INT64_MAX)
            return kk_fail(p->err,
                           "%s: element count overflows (shape %llu x %llu x "
                           "%llu x %llu)",
                           p->where, (unsigned long long)t->ne[0],
                           (unsigned long long)t->ne[1],
                           (unsigned long long)t->ne[2],
                           (unsigned long long)t->ne[3]);
    if (t->ne[0] % info->block_elems)
        return kk_fail(p->err,
                       "%s: row length %llu is not a multiple of the %s "
                       "block size (%u)",
                       p->where, (unsigned long long)t->ne[0], info->name,
                       info->block_elems);
    /* Some types take more bytes than elements (F32: 4 per value), so the
     * byte count can overflow even when the element count did not. */
    uint64_t size = t->ne[0] / info->block_elems;
    if (__builtin_mul_overflow(size, (uint64_t)info->block_bytes, &size) ||
        __builtin_mul_overflow(size, t->ne[1], &size) ||
        __builtin_mul_overflow(size, t->ne[2], &size) ||
        __builtin_mul_overflow(size, t->ne[3], &size))
        return kk_fail(p->err, "%s: byte size overflows", p->where);
    t->size = size;
    return 0;
}

static int parse_tensor_info(struct parser *p, struct gguf *g, uint64_t i)
{
    struct gguf_tensor *t = &g->tensors[i];
    snprintf(p->where, sizeof p->where, "tensor #%llu",
             (unsigned long long)i);
    if (read_str(p, &t->name, "name"))
        return -1;
    char name[NAME_SHOWN + 4];
    format_name(name, sizeof name, t->name);
    snprintf(p->where, sizeof p->where, "tensor '%s' (#%llu)", name,
             (unsigned long long)i);
    size_t *slot = index_slot(&g->tensor_index, t->name.ptr,
                              (size_t)t->name.len, g->tensors,
                              sizeof *g->tensors,
                              offsetof(struct gguf_tensor, name));
    if (*slot)
        return kk_fail(p->err, "%s: the name appears twice (first as #%zu)",
                       p->where, *slot - 1);
    *slot = (size_t)i + 1;
    size_t dims_at = p->pos;
    if (read_u32(p, &t->n_dims, "dimension count"))
        return -1;
    if (t->n_dims < 1 || t->n_dims > 4)
        return kk_fail(p->err,
                       "%s has %u dimensions (at byte %zu); GGUF tensors "
                       "have 1 to 4",
                       p->where, t->n_dims, dims_at);
    for (uint32_t d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        size_t at = p->pos;
        if (read_u64(p, &t->ne[d], "dimension"))
            return -1;
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
            return kk_fail(p->err,
                           "%s: dimension %u is %llu (at byte %zu); it must "
                           "be between 1 and 2^63-1",
                           p->where, d, (unsigned long long)t->ne[d], at);
    }
    if (read_u32(p, &t->type, "type") ||
        read_u64(p, &t->offset, "data offset"))
        return -1;
    return tensor_size(p, t);
}

/* Checks where each tensor's bytes lie, now that the data section's start is
 * known, and points `data` at them. */
static int place_tensor(struct parser *p, struct gguf *g, uint64_t i,
                        size_t data_start)
{
    struct gguf_tensor *t = &g->tensors[i];
    char name[NAME_SHOWN + 4];
    format_name(name, sizeof name, t->name);
    if (t->offset % g->alignment)
        return kk_fail(p->err,
                       "tensor '%s': data offset %llu is not a multiple of "
                       "the alignment (%u)",
                       name, (unsigned long long)t->offset, g->alignment);
    uint64_t start, end;
    if (__builtin_add_overflow((uint64_t)data_start, t->offset, &start) ||
        __builtin_add_overflow(start, t->size, &end))
        return kk_fail(p->err,
                       "tensor '%s': data offset %llu plus size %llu "
                       "overflows",
                       name, (unsigned long long)t->offset,
                       (unsigned long long)t->size);
    if (end > p->size)
        return kk_fail(p->err,
                       "tensor '%s' ends at byte %llu, past the end of the "
                       "file (%zu bytes) — the file is truncated",
                       name, (unsigned long long)end, p->size);
    t->data = p->base + start;
    return 0;
}

static int parse_tensors(struct parser *p, struct gguf *g)
{
    snprintf(p->where, sizeof p->where, "tensor directory");
    if (g->n_tensors > remaining(p) / GGUF_MIN_TENSOR_BYTES)
        return kk_fail(p->err,
                       "header: the file claims %llu tensors, but the %zu "
                       "bytes after the metadata can hold at most %zu tensor "
                       "records — the file is truncated or corrupt",
                       (unsigned long long)g->n_tensors, remaining(p),
                       remaining(p) / GGUF_MIN_TENSOR_BYTES);
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1,
                        sizeof *g->tensors);
    if (!g->tensors || index_init(&g->tensor_index, g->n_tensors))
        return kk_fail(p->err, "out of memory for %llu tensors",
                       (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (parse_tensor_info(p, g, i))
            return -1;
    /* pos <= size and the alignment is at most 2^30: no overflow. A file
     * without tensors may end before the padding. */
    size_t data_start = (p->pos + g->alignment - 1) / g->alignment *
                        g->alignment;
    g->data_offset = data_start;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (place_tensor(p, g, i, data_start))
            return -1;
    return 0;
}

/* ---- open / close ------------------------------------------------------- */

int gguf_open_memory(const void *data, size_t size, struct gguf **out,
                     struct kk_error *err)
{
    *out = NULL;
    struct gguf *g = calloc(1, sizeof *g);
    if (!g)
        return kk_fail(err, "out of memory");
    g->base = data;
    g->size = size;
    struct parser p = {.base = data, .size = size, .g = g, .err = err};
    if (size < GGUF_HEADER_BYTES && size >= 4 &&
        memcmp(data, "GGUF", 4) == 0) {
        gguf_close(g);
        return kk_fail(err,
                       "header: the file is %zu bytes long, shorter than "
                       "the %d-byte GGUF header — the file is truncated",
                       size, GGUF_HEADER_BYTES);
    }
    if (parse_header(&p, g) || parse_kvs(&p, g) || apply_alignment(&p, g) ||
        parse_tensors(&p, g)) {
        gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

/* Whether a file of `size` bytes should be read into memory rather than
 * mapped: when it takes at most half of the memory available now, and
 * KAKEYA_MMAP is not set. */
static bool should_load_resident(size_t size)
{
    const char *force_mmap = getenv("KAKEYA_MMAP");
    if (force_mmap && *force_mmap && strcmp(force_mmap, "0"))
        return false;
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 && size <= (size_t)pages * (size_t)page / 2;
}

/* Reads the whole file into an anonymous mapping backed by transparent huge
 * pages. Decoding streams every weight once per token: from the page cache
 * (4 KiB pages) the hardware prefetchers stop at every page edge and each
 * page costs a TLB miss, and decode measured 20-35 tok/s on a 368 MiB model
 * where the same weights in huge pages gave a steady 35-37 (prefill 2x). */
static void *read_resident(int fd, size_t size)
{
    void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return NULL;
    madvise(buf, size, MADV_HUGEPAGE);
    for (size_t done = 0; done < size;) {
        ssize_t n = pread(fd, (char *)buf + done, size - done, (off_t)done);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            munmap(buf, size);
            return NULL;
        }
        done += (size_t)n;
    }
    mprotect(buf, size, PROT_READ);
    return buf;
}

int gguf_open(const char *path, struct gguf **out, struct kk_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kk_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kk_fail(err, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return kk_fail(err, "%s: the file is empty", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = should_load_resident(size) ? read_resident(fd, size) : NULL;
    if (!map)
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return kk_fail(err, "%s: cannot map the file: %s", path,
                       strerror(map_errno));
    if (gguf_open_memory(map, size, out, err)) {
        munmap(map, size);
        kk_error_prefix(err, path);
        return -1;
    }
    (*out)->map = map;
    return 0;
}

void gguf_close(struct gguf *g)
{
    if (!g)
        return;
    while (g->arena) {
        struct arena_block *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    free(g->kvs);
    free(g->tensors);
    if (g->map)
        munmap(g->map, g->size);
    free(g);
}

/* ---- queries ------------------------------------------------------------ */

uint32_t gguf_version(const struct gguf *g) { return g->version; }
size_t gguf_file_size(const struct gguf *g) { return g->size; }
uint32_t gguf_alignment(const struct gguf *g) { return g->alignment; }
uint64_t gguf_n_kv(const struct gguf *g) { return g->n_kv; }
const void *gguf_file_bytes(const struct gguf *g) { return g->base; }
size_t gguf_data_offset(const struct gguf *g) { return g->data_offset; }
uint64_t gguf_n_tensors(const struct gguf *g) { return g->n_tensors; }

const struct gguf_kv *gguf_kv_at(const struct gguf *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_value *gguf_get(const struct gguf *g, const char *key)
{
    if (!g->kv_index.slots)
        return NULL;
    size_t *slot = index_slot(&g->kv_index, key, strlen(key), g->kvs,
                              sizeof *g->kvs, offsetof(struct gguf_kv, key));
    return *slot ? &g->kvs[*slot - 1].value : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g,
                                           const char *name)
{
    if (!g->tensor_index.slots)
        return NULL;
    size_t *slot = index_slot(&g->tensor_index, name, strlen(name),
                              g->tensors, sizeof *g->tensors,
                              offsetof(struct gguf_tensor, name));
    return *slot ? &g->tensors[*slot - 1] : NULL;
}

bool gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
    const struct gguf_value *v = gguf_get(g, key);
    if (!v || !is_integer_type(v->type) || v->v.integer.is_negative ||
        v->v.integer.u64 > UINT32_MAX)
        return false;
    *out = (uint32_t)v->v.integer.u64;
    return true;
}

bool gguf_get_i64(const struct gguf *g, const char *key, int64_t *out)
{
    const struct gguf_value *v = gguf_get(g, key);
    if (!v || !is_integer_type(v->type))
        return false;
    if (!v->v.integer.is_negative && v->v.integer.u64 > INT64_MAX)
        return false;
    *out = v->v.integer.i64;
    return true;
}

bool gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
    const struct gguf_value *v = gguf_get(g, key);
    if (!v)
        return false;
    if (v->type == GGUF_FLOAT32 || v->type == GGUF_FLOAT64) {
        /* Converting a finite double beyond float's range is undefined. */
        if (isfinite(v->v.f64) && fabs(v->v.f64) > FLT_MAX)
            return false;
        *out = (float)v->v.f64;
        return true;
    }
    if (!is_integer_type(v->type))
        return false;
    *out = v->v.integer.is_negative ? (float)v->v.integer.i64
                                    : (float)v->v.integer.u64;
    return true;
}

bool gguf_get_bool(const struct gguf *g, const char *key, bool *out)
{
    const struct gguf_value *v = gguf_get(g, key);
    if (!v || v->type != GGUF_BOOL)
        return false;
    *out = v->v.b;
    return true;
}

bool gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
    const struct gguf_value *v = gguf_get(g, key);
    if (!v || v->type != GGUF_STRING)
        return false;
    *out = v->v.str;
    return true;
}

bool gguf_get_arr(const struct gguf *g, const char *key,
                  const struct gguf_value **out)
{
    const struct gguf_value *v = gguf_get(g, key);
    if (!v || v->type != GGUF_ARRAY)
        return false;
    *out = v;
    return true;
}

/* Element i of a numeric array as the widest type of its kind. */
static bool arr_load(const struct gguf_value *arr, uint64_t i, int64_t *si,
                     uint64_t *ui, double *f, int *kind)
{
    const uint8_t *b = arr->v.arr.raw;
    if (!b)
        return false;
    size_t n = fixed_size(arr->v.arr.elem_type);
    b += (size_t)i * n;
    *kind = 0; /* 0 signed, 1 unsigned, 2 float */
    switch (arr->v.arr.elem_type) {
    case GGUF_UINT8: case GGUF_BOOL: *ui = b[0]; *kind = 1; break;
    case GGUF_INT8: *si = (int8_t)b[0]; break;
    case GGUF_UINT16: *ui = load_le16(b); *kind = 1; break;
    case GGUF_INT16: *si = (int16_t)load_le16(b); break;
    case GGUF_UINT32: *ui = load_le32(b); *kind = 1; break;
    case GGUF_INT32: *si = (int32_t)load_le32(b); break;
    case GGUF_UINT64: *ui = load_le64(b); *kind = 1; break;
    case GGUF_INT64: *si = (int64_t)load_le64(b); break;
    case GGUF_FLOAT32: {
        uint32_t bits = load_le32(b);
        float x;
        memcpy(&x, &bits, 4);
        *f = x;
        *kind = 2;
        break;
    }
    case GGUF_FLOAT64: {
        uint64_t bits = load_le64(b);
        memcpy(f, &bits, 8);
        *kind = 2;
        break;
    }
    default:
        return false;
    }
    return true;
}

int64_t gguf_arr_i64(const struct gguf_value *arr, uint64_t i)
{
    int64_t si = 0;
    uint64_t ui = 0;
    double f = 0;
    int kind;
    if (!arr_load(arr, i, &si, &ui, &f, &kind))
        return 0;
    if (kind == 1)
        return ui > INT64_MAX ? INT64_MAX : (int64_t)ui;
    if (kind == 2) {
        /* Saturate: an out-of-range float-to-int conversion is undefined. */
        if (isnan(f))
            return 0;
        if (f >= 9223372036854775807.0)
            return INT64_MAX;
        if (f <= -9223372036854775808.0)
            return INT64_MIN;
        return (int64_t)f;
    }
    return si;
}

double gguf_arr_f64(const struct gguf_value *arr, uint64_t i)
{
    int64_t si = 0;
    uint64_t ui = 0;
    double f = 0;
    int kind;
    if (!arr_load(arr, i, &si, &ui, &f, &kind))
        return 0;
    if (kind == 1)
        return (double)ui;
    if (kind == 2)
        return f;
    return (double)si;
}
