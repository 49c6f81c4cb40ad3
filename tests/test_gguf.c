/* test_gguf.c — the GGUF reader and writer.
 *
 * Round trips through the writer, the real model files in ../shared, and
 * hostile input: every truncation of a small file, byte flips, and
 * hand-built headers with impossible counts. Hostile files are built byte by
 * byte (struct raw) because the writer refuses to produce them.
 *
 * The fuzz seeds in tests/fuzz/seeds are made here too: this test checks
 * they are what the writer makes today; to regenerate them run
 *   KK_WRITE_SEEDS=tests/fuzz/seeds build/tests/test_gguf */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "gguf.h"
#include "gguf_write.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

/* Saves w to a temporary file and opens it; the file is removed at once
 * (the mapping keeps it alive). */
static struct gguf *save_and_open(struct gguf_writer *w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_tmp_path("rt.gguf"));
    struct kk_error err = {{0}};
    assert_int_equal(gguf_writer_save(w, path, &err), 0);
    struct gguf *g = NULL;
    int rc = gguf_open(path, &g, &err);
    if (rc)
        fail_msg("reopening the written file failed: %s", err.msg);
    unlink(path);
    return g;
}

/* Saves w and returns the file's bytes (malloc'd). */
static uint8_t *save_to_bytes(struct gguf_writer *w, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_tmp_path("bytes.gguf"));
    struct kk_error err = {{0}};
    if (gguf_writer_save(w, path, &err))
        fail_msg("save failed: %s", err.msg);
    uint8_t *bytes = (uint8_t *)testutil_read_file(path, len);
    unlink(path);
    assert_non_null(bytes);
    return bytes;
}

/* Opens an exact-size heap copy of data[0..len), so that ASan sees any read
 * past the end. Returns 0 or -1 like gguf_open_memory; on success the copy
 * is kept alive in *copy. */
static int open_copy(const uint8_t *data, size_t len, struct gguf **g,
                     uint8_t **copy, struct kk_error *err)
{
    *copy = malloc(len ? len : 1);
    assert_non_null(*copy);
    memcpy(*copy, data, len);
    int rc = gguf_open_memory(*copy, len, g, err);
    if (rc) {
        assert_null(*g);
        free(*copy);
        *copy = NULL;
    }
    return rc;
}

/* Asserts that data fails to open with a message containing `want`. */
static void expect_failure(const uint8_t *data, size_t len, const char *want)
{
    struct kk_error err = {{0}};
    struct gguf *g = NULL;
    uint8_t *copy;
    if (open_copy(data, len, &g, &copy, &err) == 0) {
        gguf_close(g);
        free(copy);
        fail_msg("a hostile file opened; expected an error with '%s'", want);
    }
    if (!strstr(err.msg, want))
        fail_msg("error message '%s' does not mention '%s'", err.msg, want);
}

/* Reads every byte the API exposes, so ASan checks it lies in bounds. */
static uint64_t touch_value(const struct gguf_value *v)
{
    uint64_t sum = 0;
    if (v->type == GGUF_STRING) {
        for (uint64_t i = 0; i < v->v.str.len; i++)
            sum += (unsigned char)v->v.str.ptr[i];
    } else if (v->type == GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->v.arr.n; i++) {
            if (v->v.arr.items)
                sum += touch_value(&v->v.arr.items[i]);
            else
                sum += (uint64_t)gguf_arr_i64(v, i) +
                       (uint64_t)(gguf_arr_f64(v, i) != 0);
        }
    } else {
        sum += v->v.integer.u64;
    }
    return sum;
}

static void touch_all(const struct gguf *g, const uint8_t *base, size_t size)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        sum += kv->key.len + touch_value(&kv->value);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        assert_true(d >= base && t->size <= size &&
                    (size_t)(d - base) <= size - t->size);
        sum += d[0] + d[t->size - 1] + t->name.len;
    }
    (void)sum;
}

/* ---- hostile files, byte by byte --------------------------------------- */

struct raw {
    uint8_t b[4096];
    size_t n;
};

static void raw_bytes(struct raw *r, const void *p, size_t n)
{
    assert_true(r->n + n <= sizeof r->b);
    memcpy(r->b + r->n, p, n);
    r->n += n;
}

/* n bytes of v, little-endian; bytes past the eighth are zero. */
static void raw_le(struct raw *r, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint8_t c = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
        raw_bytes(r, &c, 1);
    }
}

static void raw_str(struct raw *r, const char *s)
{
    raw_le(r, strlen(s), 8);
    raw_bytes(r, s, strlen(s));
}

static void raw_header(struct raw *r, uint64_t n_tensors, uint64_t n_kv)
{
    r->n = 0;
    raw_bytes(r, "GGUF", 4);
    raw_le(r, 3, 4);
    raw_le(r, n_tensors, 8);
    raw_le(r, n_kv, 8);
}

static void raw_kv_u32(struct raw *r, const char *key, uint32_t v)
{
    raw_str(r, key);
    raw_le(r, GGUF_UINT32, 4);
    raw_le(r, v, 4);
}

static void raw_tensor(struct raw *r, const char *name, uint32_t n_dims,
                       const uint64_t *ne, uint32_t type, uint64_t offset)
{
    raw_str(r, name);
    raw_le(r, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++)
        raw_le(r, ne[d], 8);
    raw_le(r, type, 4);
    raw_le(r, offset, 8);
}

/* Pads to 32 and appends n zero bytes of tensor data. */
static void raw_data(struct raw *r, size_t n)
{
    while (r->n % 32)
        raw_le(r, 0, 1);
    for (size_t i = 0; i < n; i++)
        raw_le(r, 0, 1);
}

/* ---- fixtures ----------------------------------------------------------- */

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
}

static void add_tensor_pattern(struct gguf_writer *w, const char *name,
                               uint32_t type, uint32_t n_dims,
                               const uint64_t *ne, unsigned seed)
{
    size_t size = dtype_row_bytes(type, ne[0]);
    for (uint32_t d = 1; d < n_dims; d++)
        size *= ne[d];
    uint8_t *data = malloc(size);
    assert_non_null(data);
    fill_pattern(data, size, seed);
    assert_int_equal(gguf_writer_add_tensor(w, name, type, n_dims, ne, data),
                     0);
    free(data);
}

/* A small model-like file (~2 KiB): metadata of several kinds and tensors of
 * several types, the last one ending the file. */
static struct gguf_writer *small_model_writer(void)
{
    struct gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "llama"),
                     0);
    assert_int_equal(gguf_writer_set_u32(w, "llama.block_count", 2), 0);
    assert_int_equal(gguf_writer_set_f32(w, "llama.rope.freq_base", 1e4f), 0);
    assert_int_equal(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token",
                                          true), 0);
    const char *tokens[] = {"<s>", "</s>", "a", "b", "\xe2\x96\x81the"};
    assert_int_equal(gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens",
                                             tokens, 5), 0);
    const float scores[] = {0, 0, -1, -2, -3};
    assert_int_equal(gguf_writer_set_arr(w, "tokenizer.ggml.scores",
                                         GGUF_FLOAT32, scores, 5), 0);
    const uint64_t ne_norm[] = {16};
    const uint64_t ne_f16[] = {32, 2};
    const uint64_t ne_q8[] = {64, 2};
    const uint64_t ne_k[] = {256, 1};
    add_tensor_pattern(w, "output_norm.weight", KK_F32, 1, ne_norm, 1);
    add_tensor_pattern(w, "token_embd.weight", KK_F16, 2, ne_f16, 2);
    add_tensor_pattern(w, "blk.0.attn_q.weight", KK_Q8_0, 2, ne_q8, 3);
    add_tensor_pattern(w, "blk.0.attn_k.weight", KK_Q4_0, 2, ne_q8, 4);
    add_tensor_pattern(w, "blk.0.ffn_up.weight", KK_Q4_K, 2, ne_k, 5);
    const uint64_t ne_bf16[] = {32, 8};
    add_tensor_pattern(w, "blk.0.ffn_down.weight", KK_BF16, 2, ne_bf16, 7);
    add_tensor_pattern(w, "output.weight", KK_Q6_K, 2, ne_k, 6);
    return w;
}

static uint8_t *small_model_bytes(size_t *len)
{
    struct gguf_writer *w = small_model_writer();
    uint8_t *bytes = save_to_bytes(w, len);
    gguf_writer_free(w);
    return bytes;
}

/* ---- round trips -------------------------------------------------------- */

static struct gguf_value int_value(enum gguf_type t, int64_t i)
{
    struct gguf_value v = {.type = t};
    v.v.integer.i64 = i;
    v.v.integer.u64 = i < 0 ? 0 : (uint64_t)i;
    v.v.integer.is_negative = i < 0;
    return v;
}

static void test_round_trip_keeps_every_scalar_type(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    struct gguf_value v;
    v = int_value(GGUF_UINT8, 250);
    assert_int_equal(gguf_writer_set_value(w, "u8", &v), 0);
    v = int_value(GGUF_INT8, -100);
    assert_int_equal(gguf_writer_set_value(w, "i8", &v), 0);
    v = int_value(GGUF_UINT16, 65000);
    assert_int_equal(gguf_writer_set_value(w, "u16", &v), 0);
    v = int_value(GGUF_INT16, -32000);
    assert_int_equal(gguf_writer_set_value(w, "i16", &v), 0);
    assert_int_equal(gguf_writer_set_u32(w, "u32", 4000000000u), 0);
    assert_int_equal(gguf_writer_set_i32(w, "i32", -2000000000), 0);
    assert_int_equal(gguf_writer_set_u64(w, "u64", UINT64_MAX), 0);
    v = int_value(GGUF_INT64, INT64_MIN);
    assert_int_equal(gguf_writer_set_value(w, "i64", &v), 0);
    assert_int_equal(gguf_writer_set_f32(w, "f32", 0.125f), 0);
    v = (struct gguf_value){.type = GGUF_FLOAT64, .v.f64 = 1e300};
    assert_int_equal(gguf_writer_set_value(w, "f64", &v), 0);
    assert_int_equal(gguf_writer_set_bool(w, "yes", true), 0);
    assert_int_equal(gguf_writer_set_bool(w, "no", false), 0);
    assert_int_equal(gguf_writer_set_str(w, "s", "héllo"), 0);
    assert_int_equal(gguf_writer_set_str(w, "empty", ""), 0);

    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_kv(g), 14);
    assert_int_equal(gguf_n_tensors(g), 0);
    /* Insertion order is file order. */
    assert_true(gguf_str_eq(gguf_kv_at(g, 0)->key, "u8"));
    assert_true(gguf_str_eq(gguf_kv_at(g, 13)->key, "empty"));
    assert_null(gguf_kv_at(g, 14));

    int64_t i;
    assert_true(gguf_get_i64(g, "u8", &i) && i == 250);
    assert_true(gguf_get_i64(g, "i8", &i) && i == -100);
    assert_true(gguf_get_i64(g, "u16", &i) && i == 65000);
    assert_true(gguf_get_i64(g, "i16", &i) && i == -32000);
    assert_true(gguf_get_i64(g, "u32", &i) && i == 4000000000ll);
    assert_true(gguf_get_i64(g, "i32", &i) && i == -2000000000);
    assert_true(gguf_get_i64(g, "i64", &i) && i == INT64_MIN);
    const struct gguf_value *u64 = gguf_get(g, "u64");
    assert_int_equal(u64->type, GGUF_UINT64);
    assert_true(u64->v.integer.u64 == UINT64_MAX);
    assert_int_equal(gguf_get(g, "i8")->type, GGUF_INT8);
    float f;
    assert_true(gguf_get_f32(g, "f32", &f) && f == 0.125f);
    assert_true(gguf_get(g, "f64")->v.f64 == 1e300);
    bool b;
    assert_true(gguf_get_bool(g, "yes", &b) && b);
    assert_true(gguf_get_bool(g, "no", &b) && !b);
    struct gguf_str s;
    assert_true(gguf_get_str(g, "s", &s) && gguf_str_eq(s, "héllo"));
    assert_true(gguf_get_str(g, "empty", &s) && s.len == 0);
    assert_null(gguf_get(g, "absent"));
    gguf_close(g);
}

static void test_round_trip_keeps_numeric_and_string_arrays(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    const uint8_t u8[] = {0, 255, 7};
    const int8_t i8[] = {-128, 127, -1};
    const uint16_t u16[] = {65535, 1};
    const int16_t i16[] = {-32768, 5};
    const uint32_t u32[] = {4294967295u, 3};
    const int32_t i32[] = {-7, 2147483647};
    const uint64_t u64[] = {1ull << 40};
    const int64_t i64[] = {-(1ll << 50), 9};
    const float f32[] = {-1.5f, 2.25f};
    const double f64[] = {3.5, -1e-300};
    const uint8_t bools[] = {1, 0, 1};
    assert_int_equal(gguf_writer_set_arr(w, "u8", GGUF_UINT8, u8, 3), 0);
    assert_int_equal(gguf_writer_set_arr(w, "i8", GGUF_INT8, i8, 3), 0);
    assert_int_equal(gguf_writer_set_arr(w, "u16", GGUF_UINT16, u16, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "i16", GGUF_INT16, i16, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "u32", GGUF_UINT32, u32, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "i32", GGUF_INT32, i32, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "u64", GGUF_UINT64, u64, 1), 0);
    assert_int_equal(gguf_writer_set_arr(w, "i64", GGUF_INT64, i64, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "f32", GGUF_FLOAT32, f32, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "f64", GGUF_FLOAT64, f64, 2), 0);
    assert_int_equal(gguf_writer_set_arr(w, "bool", GGUF_BOOL, bools, 3), 0);
    assert_int_equal(gguf_writer_set_arr(w, "none", GGUF_INT32, NULL, 0), 0);
    const char *strs[] = {"a", "", "long string with spaces"};
    assert_int_equal(gguf_writer_set_str_arr(w, "strs", strs, 3), 0);
    /* Arrays of strings and of arrays are not numeric. */
    assert_int_equal(gguf_writer_set_arr(w, "bad", GGUF_STRING, strs, 1), -1);

    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);
    const struct gguf_value *a;
    assert_true(gguf_get_arr(g, "u8", &a) && a->v.arr.n == 3);
    assert_int_equal(gguf_arr_i64(a, 1), 255);
    assert_true(gguf_get_arr(g, "i8", &a));
    assert_int_equal(gguf_arr_i64(a, 0), -128);
    assert_true(gguf_get_arr(g, "u16", &a));
    assert_int_equal(gguf_arr_i64(a, 0), 65535);
    assert_true(gguf_get_arr(g, "i16", &a));
    assert_int_equal(gguf_arr_i64(a, 0), -32768);
    assert_true(gguf_get_arr(g, "u32", &a));
    assert_int_equal(gguf_arr_i64(a, 0), 4294967295ll);
    assert_true(gguf_get_arr(g, "i32", &a));
    assert_int_equal(gguf_arr_i64(a, 0), -7);
    assert_int_equal(gguf_arr_i64(a, 1), 2147483647);
    assert_true(gguf_get_arr(g, "u64", &a));
    assert_int_equal(gguf_arr_i64(a, 0), 1ll << 40);
    assert_true(gguf_get_arr(g, "i64", &a));
    assert_int_equal(gguf_arr_i64(a, 0), -(1ll << 50));
    assert_true(gguf_get_arr(g, "f32", &a));
    assert_true(gguf_arr_f64(a, 0) == -1.5 && gguf_arr_f64(a, 1) == 2.25);
    assert_int_equal(gguf_arr_i64(a, 0), -1); /* truncates toward zero */
    assert_true(gguf_get_arr(g, "f64", &a));
    assert_true(gguf_arr_f64(a, 1) == -1e-300);
    assert_true(gguf_get_arr(g, "bool", &a));
    assert_int_equal(a->v.arr.elem_type, GGUF_BOOL);
    assert_int_equal(gguf_arr_i64(a, 0), 1);
    assert_int_equal(gguf_arr_i64(a, 1), 0);
    assert_true(gguf_get_arr(g, "none", &a) && a->v.arr.n == 0);
    assert_true(gguf_get_arr(g, "strs", &a) && a->v.arr.n == 3);
    assert_int_equal(a->v.arr.elem_type, GGUF_STRING);
    assert_true(gguf_str_eq(a->v.arr.items[0].v.str, "a"));
    assert_true(gguf_str_eq(a->v.arr.items[1].v.str, ""));
    assert_true(gguf_str_eq(a->v.arr.items[2].v.str,
                            "long string with spaces"));
    /* A string is not an array, and the reverse. */
    assert_false(gguf_get_arr(g, "absent", &a));
    struct gguf_str s;
    assert_false(gguf_get_str(g, "strs", &s));
    gguf_close(g);
}

/* [[["x", "yz"], []], [["w"]]] and [[1, 2], [3]]. */
static void test_round_trip_keeps_nested_arrays(void **state)
{
    (void)state;
    struct gguf_value x[2] = {{.type = GGUF_STRING, .v.str = {"x", 1}},
                              {.type = GGUF_STRING, .v.str = {"yz", 2}}};
    struct gguf_value wv[1] = {{.type = GGUF_STRING, .v.str = {"w", 1}}};
    struct gguf_value inner0[2] = {
        {.type = GGUF_ARRAY, .v.arr = {GGUF_STRING, 2, NULL, x}},
        {.type = GGUF_ARRAY, .v.arr = {GGUF_STRING, 0, NULL, NULL}}};
    struct gguf_value inner1[1] = {
        {.type = GGUF_ARRAY, .v.arr = {GGUF_STRING, 1, NULL, wv}}};
    struct gguf_value mid[2] = {
        {.type = GGUF_ARRAY, .v.arr = {GGUF_ARRAY, 2, NULL, inner0}},
        {.type = GGUF_ARRAY, .v.arr = {GGUF_ARRAY, 1, NULL, inner1}}};
    struct gguf_value top = {.type = GGUF_ARRAY,
                             .v.arr = {GGUF_ARRAY, 2, NULL, mid}};
    const int32_t n12[] = {1, 2}, n3[] = {3};
    struct gguf_value ints[2] = {
        {.type = GGUF_ARRAY,
         .v.arr = {GGUF_INT32, 2, (const uint8_t *)n12, NULL}},
        {.type = GGUF_ARRAY,
         .v.arr = {GGUF_INT32, 1, (const uint8_t *)n3, NULL}}};
    struct gguf_value top_ints = {.type = GGUF_ARRAY,
                                  .v.arr = {GGUF_ARRAY, 2, NULL, ints}};

    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_value(w, "nested.strings", &top), 0);
    assert_int_equal(gguf_writer_set_value(w, "nested.ints", &top_ints), 0);
    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);

    const struct gguf_value *a;
    assert_true(gguf_get_arr(g, "nested.strings", &a));
    assert_int_equal(a->v.arr.elem_type, GGUF_ARRAY);
    assert_int_equal(a->v.arr.n, 2);
    const struct gguf_value *m0 = &a->v.arr.items[0];
    assert_int_equal(m0->v.arr.n, 2);
    const struct gguf_value *xs = &m0->v.arr.items[0];
    assert_int_equal(xs->v.arr.elem_type, GGUF_STRING);
    assert_true(gguf_str_eq(xs->v.arr.items[1].v.str, "yz"));
    assert_int_equal(m0->v.arr.items[1].v.arr.n, 0);
    const struct gguf_value *ws = &a->v.arr.items[1].v.arr.items[0];
    assert_true(gguf_str_eq(ws->v.arr.items[0].v.str, "w"));
    assert_true(gguf_get_arr(g, "nested.ints", &a));
    assert_int_equal(gguf_arr_i64(&a->v.arr.items[0], 1), 2);
    assert_int_equal(gguf_arr_i64(&a->v.arr.items[1], 0), 3);

    /* Copying values from an open file reproduces them. */
    struct gguf_writer *w2 = gguf_writer_new();
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        assert_int_equal(gguf_writer_set_value(w2, key, &kv->value), 0);
    }
    struct gguf *g2 = save_and_open(w2);
    gguf_writer_free(w2);
    assert_true(gguf_get_arr(g2, "nested.strings", &a));
    assert_true(gguf_str_eq(
        a->v.arr.items[0].v.arr.items[0].v.arr.items[0].v.str, "x"));
    gguf_close(g2);
    gguf_close(g);
}

static void test_round_trip_keeps_tensors_of_every_type(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    uint32_t types[KK_DTYPE_LIMIT];
    size_t n_types = 0;
    for (uint32_t t = 0; t < KK_DTYPE_LIMIT; t++) {
        const struct kk_dtype_info *info = dtype_info(t);
        if (!info)
            continue;
        char name[32];
        snprintf(name, sizeof name, "t.%s", info->name);
        /* Odd sizes so that offsets need padding. */
        const uint64_t ne[3] = {2 * info->block_elems, 3, 1 + t % 2};
        add_tensor_pattern(w, name, t, 3, ne, t);
        types[n_types++] = t;
    }
    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);
    assert_int_equal(gguf_n_tensors(g), n_types);
    const uint8_t *first = gguf_tensor_at(g, 0)->data;
    for (size_t i = 0; i < n_types; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const struct kk_dtype_info *info = dtype_info(types[i]);
        char name[32];
        snprintf(name, sizeof name, "t.%s", info->name);
        assert_ptr_equal(gguf_find_tensor(g, name), t);
        assert_int_equal(t->type, types[i]);
        assert_int_equal(t->n_dims, 3);
        assert_int_equal(t->ne[0], 2 * info->block_elems);
        assert_int_equal(t->ne[1], 3);
        assert_int_equal(t->ne[2], 1 + types[i] % 2);
        assert_int_equal(t->ne[3], 1);
        size_t size = 2 * info->block_bytes * 3 * (1 + types[i] % 2);
        assert_int_equal(t->size, size);
        assert_int_equal(t->offset % 32, 0);
        assert_int_equal((const uint8_t *)t->data - first, t->offset);
        uint8_t *want = malloc(size);
        fill_pattern(want, size, types[i]);
        assert_memory_equal(t->data, want, size);
        free(want);
    }
    assert_null(gguf_find_tensor(g, "t.nothing"));
    assert_null(gguf_tensor_at(g, n_types));
    gguf_close(g);
}

static void test_writer_lays_out_data_at_general_alignment(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_u32(w, "general.alignment", 64), 0);
    const uint64_t ne[] = {3};
    add_tensor_pattern(w, "a", KK_F32, 1, ne, 1);
    add_tensor_pattern(w, "b", KK_F32, 1, ne, 2);
    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);
    assert_int_equal(gguf_alignment(g), 64);
    assert_int_equal(gguf_data_offset(g) % 64, 0);
    assert_int_equal(gguf_tensor_at(g, 1)->offset, 64);
    const struct gguf_tensor *a = gguf_tensor_at(g, 0);
    const struct gguf_tensor *b = gguf_tensor_at(g, 1);
    assert_int_equal((const uint8_t *)b->data - (const uint8_t *)a->data, 64);
    gguf_close(g);

    size_t len;
    uint8_t *bytes = small_model_bytes(&len);
    struct gguf *g2 = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(gguf_open_memory(bytes, len, &g2, &err), 0);
    assert_int_equal(gguf_alignment(g2), 32);
    assert_ptr_equal(gguf_file_bytes(g2), bytes);
    assert_int_equal(gguf_data_offset(g2) % 32, 0);
    assert_ptr_equal(gguf_tensor_at(g2, 0)->data,
                     bytes + gguf_data_offset(g2));
    /* The file ends with the last tensor: no trailing padding. */
    const struct gguf_tensor *last = gguf_tensor_at(g2, gguf_n_tensors(g2) - 1);
    assert_ptr_equal((const uint8_t *)last->data + last->size, bytes + len);
    gguf_close(g2);
    free(bytes);
}

static void test_writer_honours_general_alignment_of_any_integer_type(
    void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    struct gguf_value a = int_value(GGUF_UINT64, 128);
    assert_int_equal(gguf_writer_set_value(w, "general.alignment", &a), 0);
    const uint64_t ne[] = {5};
    add_tensor_pattern(w, "a", KK_F32, 1, ne, 1);
    add_tensor_pattern(w, "b", KK_F32, 1, ne, 2);
    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);
    assert_int_equal(gguf_alignment(g), 128);
    assert_int_equal(gguf_tensor_at(g, 1)->offset, 128);
    gguf_close(g);
}

static void test_writer_refuses_repeats_and_bad_shapes(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_u32(w, "k", 1), 0);
    assert_int_equal(gguf_writer_set_str(w, "k", "again"), -1);
    struct gguf_value too_big = int_value(GGUF_UINT8, 256);
    assert_int_equal(gguf_writer_set_value(w, "u8", &too_big), -1);
    struct gguf_value negative = int_value(GGUF_UINT32, -1);
    assert_int_equal(gguf_writer_set_value(w, "u32", &negative), -1);
    struct gguf_value low = int_value(GGUF_INT8, -129);
    assert_int_equal(gguf_writer_set_value(w, "i8", &low), -1);
    const uint8_t data[1024] = {0};
    const uint64_t ne[5] = {32, 1, 1, 1, 1};
    assert_int_equal(gguf_writer_add_tensor(w, "t", KK_Q4_0, 1, ne, data), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t", KK_Q4_0, 1, ne, data), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "u", KK_Q4_0, 0, ne, data), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "u", KK_Q4_0, 5, ne, data), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "u", 77, 1, ne, data), -1);
    const uint64_t odd[] = {33};
    assert_int_equal(gguf_writer_add_tensor(w, "u", KK_Q4_0, 1, odd, data),
                     -1);
    const uint64_t zero[] = {32, 0};
    assert_int_equal(gguf_writer_add_tensor(w, "u", KK_Q4_0, 2, zero, data),
                     -1);
    struct gguf *g = save_and_open(w);
    assert_int_equal(gguf_n_kv(g), 1);
    assert_int_equal(gguf_n_tensors(g), 1);
    gguf_close(g);
    gguf_writer_free(w);

    struct gguf_writer *bad = gguf_writer_new();
    assert_int_equal(gguf_writer_set_u32(bad, "general.alignment", 48), 0);
    struct kk_error err = {{0}};
    assert_int_equal(gguf_writer_save(bad, testutil_tmp_path("bad"), &err),
                     -1);
    assert_non_null(strstr(err.msg, "general.alignment is 48"));
    gguf_writer_free(bad);

    bad = gguf_writer_new();
    assert_int_equal(gguf_writer_set_f32(bad, "general.alignment", 32), 0);
    assert_int_equal(gguf_writer_save(bad, testutil_tmp_path("bad"), &err),
                     -1);
    assert_non_null(strstr(err.msg, "must be an integer"));
    gguf_writer_free(bad);
}

static int fill_counting(void *ctx, void *buf, size_t size)
{
    int *calls = ctx;
    fill_pattern(buf, size, (unsigned)(40 + *calls));
    ++*calls;
    return 0;
}

static int fill_failing(void *ctx, void *buf, size_t size)
{
    (void)ctx;
    (void)buf;
    (void)size;
    return -1;
}

static void test_fill_callback_produces_tensor_data_at_save(void **state)
{
    (void)state;
    int calls = 0;
    struct gguf_writer *w = gguf_writer_new();
    const uint64_t ne[] = {64, 5};
    assert_int_equal(gguf_writer_add_tensor_fn(w, "a", KK_Q8_0, 2, ne,
                                               fill_counting, &calls), 0);
    assert_int_equal(calls, 0);
    struct gguf *g = save_and_open(w);
    assert_int_equal(calls, 1);
    const struct gguf_tensor *t = gguf_find_tensor(g, "a");
    assert_int_equal(t->size, 2 * 34 * 5);
    uint8_t want[340];
    fill_pattern(want, sizeof want, 40);
    assert_memory_equal(t->data, want, sizeof want);
    gguf_close(g);
    gguf_writer_free(w);

    struct gguf_writer *wf = gguf_writer_new();
    assert_int_equal(gguf_writer_add_tensor_fn(wf, "b", KK_F32, 1, ne,
                                               fill_failing, NULL), 0);
    struct kk_error err = {{0}};
    const char *path = testutil_tmp_path("fill");
    assert_int_equal(gguf_writer_save(wf, path, &err), -1);
    assert_non_null(strstr(err.msg, "'b'"));
    assert_int_equal(access(path, F_OK), -1); /* no half-written file left */
    gguf_writer_free(wf);
}

/* ---- typed getters ------------------------------------------------------ */

static void test_typed_getters_convert_in_range_and_refuse_otherwise(
    void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_i32(w, "neg", -1), 0);
    assert_int_equal(gguf_writer_set_u64(w, "big", 1ull << 33), 0);
    assert_int_equal(gguf_writer_set_u64(w, "huge", UINT64_MAX), 0);
    struct gguf_value u8 = int_value(GGUF_UINT8, 200);
    assert_int_equal(gguf_writer_set_value(w, "small", &u8), 0);
    assert_int_equal(gguf_writer_set_f32(w, "f", 2.5f), 0);
    struct gguf_value d = {.type = GGUF_FLOAT64, .v.f64 = 1e300};
    assert_int_equal(gguf_writer_set_value(w, "dbig", &d), 0);
    assert_int_equal(gguf_writer_set_str(w, "s", "7"), 0);
    assert_int_equal(gguf_writer_set_bool(w, "b", true), 0);
    struct gguf *g = save_and_open(w);
    gguf_writer_free(w);

    uint32_t u = 12345;
    assert_false(gguf_get_u32(g, "neg", &u));
    assert_false(gguf_get_u32(g, "big", &u));
    assert_false(gguf_get_u32(g, "f", &u));
    assert_false(gguf_get_u32(g, "s", &u));
    assert_false(gguf_get_u32(g, "b", &u));
    assert_false(gguf_get_u32(g, "absent", &u));
    assert_int_equal(u, 12345); /* untouched on failure */
    assert_true(gguf_get_u32(g, "small", &u) && u == 200);

    int64_t i;
    assert_true(gguf_get_i64(g, "neg", &i) && i == -1);
    assert_true(gguf_get_i64(g, "big", &i) && i == 1ll << 33);
    assert_false(gguf_get_i64(g, "huge", &i));
    assert_false(gguf_get_i64(g, "f", &i));

    float f;
    assert_true(gguf_get_f32(g, "f", &f) && f == 2.5f);
    assert_true(gguf_get_f32(g, "small", &f) && f == 200.0f);
    assert_true(gguf_get_f32(g, "neg", &f) && f == -1.0f);
    assert_false(gguf_get_f32(g, "dbig", &f)); /* beyond float's range */
    assert_false(gguf_get_f32(g, "s", &f));
    assert_false(gguf_get_f32(g, "b", &f));

    bool b;
    assert_true(gguf_get_bool(g, "b", &b) && b);
    assert_false(gguf_get_bool(g, "small", &b));
    struct gguf_str s;
    assert_true(gguf_get_str(g, "s", &s) && gguf_str_eq(s, "7"));
    assert_false(gguf_str_eq(s, "77"));
    assert_false(gguf_get_str(g, "b", &s));
    assert_string_equal(gguf_type_name(GGUF_FLOAT64), "float64");
    assert_string_equal(gguf_type_name((enum gguf_type)99), "unknown");
    gguf_close(g);
}

/* ---- versions and headers ----------------------------------------------- */

static void test_version_2_opens_like_version_3(void **state)
{
    (void)state;
    size_t len;
    uint8_t *bytes = small_model_bytes(&len);
    bytes[4] = 2;
    struct gguf *g = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(gguf_open_memory(bytes, len, &g, &err), 0);
    assert_int_equal(gguf_version(g), 2);
    assert_int_equal(gguf_n_tensors(g), 7);
    assert_int_equal(gguf_file_size(g), len);
    gguf_close(g);
    free(bytes);
}

static void test_version_1_and_big_endian_files_are_refused_by_name(
    void **state)
{
    (void)state;
    size_t len;
    uint8_t *bytes = small_model_bytes(&len);
    bytes[4] = 1;
    expect_failure(bytes, len, "version 1 is not supported");
    bytes[4] = 0;
    bytes[7] = 3;
    expect_failure(bytes, len, "big-endian");
    bytes[7] = 0;
    bytes[4] = 4;
    expect_failure(bytes, len, "unsupported GGUF version 4");
    bytes[4] = 3;
    bytes[0] = 'X';
    expect_failure(bytes, len, "not a GGUF file");
    free(bytes);
    expect_failure((const uint8_t *)"GGUF\3\0", 6, "shorter than the 24-byte");
    expect_failure((const uint8_t *)"GG", 2, "not a GGUF file");
    expect_failure((const uint8_t *)"", 0, "not a GGUF file");
}

static void test_open_names_the_file_in_messages(void **state)
{
    (void)state;
    struct gguf *g = (struct gguf *)1;
    struct kk_error err = {{0}};
    assert_int_equal(gguf_open("/nonexistent/model.gguf", &g, &err), -1);
    assert_null(g);
    assert_non_null(strstr(err.msg, "/nonexistent/model.gguf: cannot open"));

    size_t len;
    uint8_t *bytes = small_model_bytes(&len);
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_tmp_path("cut.gguf"));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(bytes, 1, len - 10, f);
    fclose(f);
    free(bytes);
    assert_int_equal(gguf_open(path, &g, &err), -1);
    unlink(path);
    char want[4200];
    snprintf(want, sizeof want,
             "%s: tensor 'output.weight' ends at byte %zu, past the end of "
             "the file (%zu bytes) — the file is truncated",
             path, len, len - 10);
    assert_string_equal(err.msg, want);

    assert_int_equal(gguf_open("/tmp", &g, &err), -1);
    assert_non_null(strstr(err.msg, "not a regular file"));
}

/* ---- corruption --------------------------------------------------------- */

static void test_every_truncation_fails_with_a_message(void **state)
{
    (void)state;
    size_t len;
    uint8_t *bytes = small_model_bytes(&len);
    assert_true(len > 1500 && len < 4096);
    for (size_t cut = 0; cut < len; cut++) {
        struct kk_error err = {{0}};
        struct gguf *g = NULL;
        uint8_t *copy;
        if (open_copy(bytes, cut, &g, &copy, &err) == 0) {
            gguf_close(g);
            free(copy);
            fail_msg("the first %zu of %zu bytes opened", cut, len);
        }
        if (strlen(err.msg) < 20)
            fail_msg("truncation at %zu gave a bare message '%s'", cut,
                     err.msg);
        if (cut >= 24 && !strstr(err.msg, "truncated") &&
            !strstr(err.msg, "past the end"))
            fail_msg("truncation at %zu: '%s' does not say the file is cut "
                     "short", cut, err.msg);
    }
    free(bytes);
}

static void test_byte_flips_fail_cleanly_or_stay_in_bounds(void **state)
{
    (void)state;
    size_t len;
    uint8_t *bytes = small_model_bytes(&len);
    static const uint8_t flips[][2] = {
        {0x01, 0}, {0x80, 0}, {0xff, 0}, {0, 0xff}, {0, 0x00}, {0x10, 0}};
    size_t failed = 0, opened = 0;
    for (size_t pos = 0; pos < len; pos++) {
        for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
            uint8_t saved = bytes[pos];
            bytes[pos] = flips[k][0] ? (uint8_t)(saved ^ flips[k][0])
                                     : flips[k][1];
            struct kk_error err = {{0}};
            struct gguf *g = NULL;
            uint8_t *copy;
            if (open_copy(bytes, len, &g, &copy, &err) == 0) {
                touch_all(g, copy, len);
                gguf_close(g);
                free(copy);
                opened++;
            } else {
                if (!err.msg[0])
                    fail_msg("flip at %zu failed without a message", pos);
                failed++;
            }
            bytes[pos] = saved;
        }
    }
    /* Header and directory flips must be caught; data flips cannot be. */
    assert_true(failed > len / 4);
    assert_true(opened > 0);
    free(bytes);
}

static void test_hostile_counts_fail_before_allocating(void **state)
{
    (void)state;
    struct raw r;
    raw_header(&r, 0, 1ull << 62);
    expect_failure(r.b, r.n, "claims 4611686018427387904 metadata entries");

    raw_header(&r, 1ull << 60, 0);
    expect_failure(r.b, r.n, "claims 1152921504606846976 tensors");

    raw_header(&r, 0, 1);
    raw_le(&r, 50, 8); /* key length 50, then only 13 bytes */
    raw_bytes(&r, "abcdefghijklm", 13);
    expect_failure(r.b, r.n,
                   "metadata key #0: key length 50 at byte 24 runs past the "
                   "end of the file (45 bytes)");

    raw_header(&r, 0, 2);
    raw_kv_u32(&r, "a", 1);
    raw_str(&r, "x");
    raw_le(&r, GGUF_STRING, 4);
    raw_le(&r, 4294967295u, 8);
    raw_bytes(&r, "short string", 12);
    expect_failure(r.b, r.n,
                   "metadata key 'x' (#1): string length 4294967295 at byte "
                   "54 runs past the end of the file");

    raw_header(&r, 0, 1);
    raw_str(&r, "arr");
    raw_le(&r, GGUF_ARRAY, 4);
    raw_le(&r, GGUF_UINT64, 4);
    raw_le(&r, 1ull << 60, 8);
    raw_le(&r, 0, 8);
    expect_failure(r.b, r.n, "array of 1152921504606846976 uint64 elements");

    raw_header(&r, 0, 1);
    raw_str(&r, "arr");
    raw_le(&r, GGUF_ARRAY, 4);
    raw_le(&r, GGUF_STRING, 4);
    raw_le(&r, 1ull << 40, 8);
    raw_le(&r, 0, 64);
    expect_failure(r.b, r.n, "array of 1099511627776 string elements");

    raw_header(&r, 0, 1);
    raw_str(&r, "t");
    raw_le(&r, 13, 4);
    raw_le(&r, 0, 8);
    expect_failure(r.b, r.n, "unknown value type 13");

    raw_header(&r, 0, 1);
    raw_str(&r, "t");
    raw_le(&r, GGUF_ARRAY, 4);
    raw_le(&r, 99, 4);
    raw_le(&r, 0, 8);
    expect_failure(r.b, r.n, "unknown array element type 99");

    raw_header(&r, 0, 1);
    raw_str(&r, "b");
    raw_le(&r, GGUF_BOOL, 4);
    raw_le(&r, 2, 1);
    expect_failure(r.b, r.n, "boolean value 2");
}

static void test_deep_nesting_is_refused(void **state)
{
    (void)state;
    struct raw r;
    /* 15 levels of arrays open fine, 40 do not. */
    for (int depth = 15; depth <= 40; depth += 25) {
        raw_header(&r, 0, 1);
        raw_str(&r, "deep");
        raw_le(&r, GGUF_ARRAY, 4);
        for (int i = 0; i < depth - 1; i++) {
            raw_le(&r, GGUF_ARRAY, 4);
            raw_le(&r, 1, 8);
        }
        raw_le(&r, GGUF_UINT8, 4);
        raw_le(&r, 1, 8);
        raw_le(&r, 42, 1);
        if (depth == 40) {
            expect_failure(r.b, r.n, "nested more than 16 levels");
            continue;
        }
        struct gguf *g = NULL;
        struct kk_error err = {{0}};
        if (gguf_open_memory(r.b, r.n, &g, &err))
            fail_msg("%d levels: %s", depth, err.msg);
        const struct gguf_value *v = gguf_get(g, "deep");
        for (int i = 0; i < depth - 1; i++)
            v = &v->v.arr.items[0];
        assert_int_equal(gguf_arr_i64(v, 0), 42);
        gguf_close(g);
    }
}

static void test_duplicate_keys_and_tensor_names_are_refused(void **state)
{
    (void)state;
    struct raw r;
    raw_header(&r, 0, 3);
    raw_kv_u32(&r, "a", 1);
    raw_kv_u32(&r, "b", 1);
    raw_kv_u32(&r, "a", 2);
    expect_failure(r.b, r.n,
                   "metadata key 'a' (#2): the key appears twice (first as "
                   "#0)");

    const uint64_t ne[] = {8};
    raw_header(&r, 2, 0);
    raw_tensor(&r, "w", 1, ne, KK_F32, 0);
    raw_tensor(&r, "w", 1, ne, KK_F32, 32);
    raw_data(&r, 64);
    expect_failure(r.b, r.n, "tensor 'w' (#1): the name appears twice");
}

static void test_bad_tensor_records_are_refused_by_name(void **state)
{
    (void)state;
    struct raw r;
    const uint64_t ne5[] = {1, 1, 1, 1, 1};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "five", 5, ne5, KK_F32, 0);
    raw_data(&r, 4);
    expect_failure(r.b, r.n, "tensor 'five' (#0) has 5 dimensions");

    const uint64_t ne0[] = {0};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "zero", 1, ne0, KK_F32, 0);
    expect_failure(r.b, r.n, "tensor 'zero' (#0): dimension 0 is 0");

    const uint64_t over[] = {1ull << 32, 1ull << 32, 4};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "over", 3, over, KK_F32, 0);
    raw_data(&r, 32);
    expect_failure(r.b, r.n, "element count overflows");

    const uint64_t bytes_over[] = {1ull << 62};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "wide", 1, bytes_over, KK_F32, 0);
    raw_data(&r, 32);
    expect_failure(r.b, r.n, "tensor 'wide' (#0): byte size overflows");

    const uint64_t ne[] = {32};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "blk.3.odd", 1, ne, 77, 0);
    raw_data(&r, 128);
    expect_failure(r.b, r.n, "tensor 'blk.3.odd' (#0) has unknown type id 77");

    const uint64_t ne33[] = {33};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "q", 1, ne33, KK_Q8_0, 0);
    raw_data(&r, 64);
    expect_failure(r.b, r.n,
                   "row length 33 is not a multiple of the Q8_0 block size "
                   "(32)");

    raw_header(&r, 2, 0);
    raw_tensor(&r, "a", 1, ne, KK_F32, 0);
    raw_tensor(&r, "b", 1, ne, KK_F32, 130);
    raw_data(&r, 512);
    expect_failure(r.b, r.n,
                   "tensor 'b': data offset 130 is not a multiple of the "
                   "alignment (32)");

    raw_header(&r, 1, 0);
    raw_tensor(&r, "far", 1, ne, KK_F32, UINT64_MAX - 31);
    raw_data(&r, 128);
    expect_failure(r.b, r.n,
                   "tensor 'far': data offset 18446744073709551584 plus size "
                   "128 overflows");

    raw_header(&r, 1, 0);
    raw_tensor(&r, "blk.3.ffn_up.weight", 1, ne, KK_F32, 0);
    raw_data(&r, 127);
    char want[160];
    snprintf(want, sizeof want,
             "tensor 'blk.3.ffn_up.weight' ends at byte %zu, past the end of "
             "the file (%zu bytes) — the file is truncated",
             r.n + 1, r.n);
    expect_failure(r.b, r.n, want);
}

static void test_general_alignment_must_be_a_power_of_two(void **state)
{
    (void)state;
    struct raw r;
    const uint32_t bad[] = {0, 48, 3, 1u << 31};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_header(&r, 0, 1);
        raw_kv_u32(&r, "general.alignment", bad[i]);
        char want[80];
        snprintf(want, sizeof want, "general.alignment is %u", bad[i]);
        expect_failure(r.b, r.n, want);
    }
    raw_header(&r, 0, 1);
    raw_str(&r, "general.alignment");
    raw_le(&r, GGUF_STRING, 4);
    raw_str(&r, "32");
    expect_failure(r.b, r.n, "general.alignment has type string");

    /* A valid alignment moves the data section. */
    const uint64_t ne[] = {4};
    raw_header(&r, 1, 1);
    raw_kv_u32(&r, "general.alignment", 256);
    raw_tensor(&r, "t", 1, ne, KK_F32, 0);
    size_t start = (r.n + 255) / 256 * 256;
    while (r.n < start + 16)
        raw_le(&r, r.n == start ? 0xab : 0, 1);
    struct gguf *g = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(gguf_open_memory(r.b, r.n, &g, &err), 0);
    assert_int_equal(gguf_alignment(g), 256);
    assert_ptr_equal(gguf_tensor_at(g, 0)->data, r.b + start);
    gguf_close(g);
}

static void test_known_but_unsupported_types_open(void **state)
{
    (void)state;
    struct raw r;
    const uint64_t ne[] = {256, 2};
    raw_header(&r, 1, 0);
    raw_tensor(&r, "q2", 2, ne, KK_Q2_K, 0);
    raw_data(&r, 2 * 84);
    struct gguf *g = NULL;
    struct kk_error err = {{0}};
    if (gguf_open_memory(r.b, r.n, &g, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(gguf_tensor_at(g, 0)->type, KK_Q2_K);
    assert_int_equal(gguf_tensor_at(g, 0)->size, 168);
    gguf_close(g);

    /* A vocabulary-only file may end before the data section's padding. */
    raw_header(&r, 0, 1);
    raw_kv_u32(&r, "x", 1);
    assert_int_equal(gguf_open_memory(r.b, r.n, &g, &err), 0);
    gguf_close(g);
}

/* ---- real files --------------------------------------------------------- */

static bool parse_count(const char *s, const char *fmt, unsigned long *n)
{
    char tail;
    return sscanf(s, fmt, n, &tail) == 2 && tail == '>';
}

/* Checks one manifest metadata entry against the file. */
static void check_manifest_kv(const struct gguf *g, const char *file,
                              const cJSON *item)
{
    const char *key = item->string;
    const struct gguf_value *v = gguf_get(g, key);
    if (!v)
        fail_msg("%s: key '%s' is missing", file, key);
    unsigned long n;
    if (cJSON_IsBool(item)) {
        bool b;
        assert_true(gguf_get_bool(g, key, &b));
        assert_int_equal(b, cJSON_IsTrue(item));
    } else if (cJSON_IsNumber(item) && v->type != GGUF_FLOAT32 &&
               v->type != GGUF_FLOAT64) {
        int64_t i;
        assert_true(gguf_get_i64(g, key, &i));
        assert_int_equal(i, (int64_t)item->valuedouble);
    } else if (cJSON_IsNumber(item)) {
        double want = item->valuedouble;
        if (fabs(v->v.f64 - want) > 1e-6 * fabs(want))
            fail_msg("%s: %s is %g, manifest says %g", file, key, v->v.f64,
                     want);
    } else if (parse_count(item->valuestring, "<array of %lu%c", &n)) {
        const struct gguf_value *a;
        assert_true(gguf_get_arr(g, key, &a));
        assert_int_equal(a->v.arr.n, n);
        touch_value(a);
    } else if (parse_count(item->valuestring, "<%lu chars%c", &n)) {
        assert_int_equal(v->type, GGUF_STRING);
        assert_int_equal(v->v.str.len, n);
    } else {
        struct gguf_str s;
        assert_true(gguf_get_str(g, key, &s));
        if (!gguf_str_eq(s, item->valuestring))
            fail_msg("%s: %s is '%.*s', manifest says '%s'", file, key,
                     (int)s.len, s.ptr, item->valuestring);
    }
}

static void check_manifest_file(const char *dir, const cJSON *entry)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, entry->string) >=
        (int)sizeof path)
        fail_msg("path too long");
    struct gguf *g = NULL;
    struct kk_error err = {{0}};
    if (gguf_open(path, &g, &err))
        fail_msg("%s", err.msg);
    cJSON *bytes = cJSON_GetObjectItem(entry, "bytes");
    assert_int_equal(gguf_file_size(g), (size_t)bytes->valuedouble);
    assert_int_equal(gguf_n_tensors(g),
                     cJSON_GetObjectItem(entry, "n_tensors")->valueint);
    const cJSON *kv = cJSON_GetObjectItem(entry, "kv");
    size_t checked = 0;
    for (const cJSON *item = kv->child; item; item = item->next) {
        if (strcmp(item->string, "GGUF.version") == 0)
            assert_int_equal(gguf_version(g), item->valueint);
        else if (strcmp(item->string, "GGUF.tensor_count") == 0)
            assert_int_equal(gguf_n_tensors(g), item->valueint);
        else if (strcmp(item->string, "GGUF.kv_count") == 0)
            assert_int_equal(gguf_n_kv(g), item->valueint);
        else {
            check_manifest_kv(g, entry->string, item);
            checked++;
        }
    }
    assert_int_equal(checked, gguf_n_kv(g));
    /* Tensor types: per-type counts and each non-F32 tensor's type. */
    const cJSON *types = cJSON_GetObjectItem(entry, "tensor_types");
    for (const cJSON *t = types->child; t; t = t->next) {
        int count = 0;
        for (uint64_t i = 0; i < gguf_n_tensors(g); i++)
            if (strcmp(dtype_info(gguf_tensor_at(g, i)->type)->name,
                       t->string) == 0)
                count++;
        assert_int_equal(count, t->valueint);
    }
    const cJSON *named = cJSON_GetObjectItem(entry, "nonf32_tensor_types");
    for (const cJSON *t = named ? named->child : NULL; t; t = t->next) {
        const struct gguf_tensor *tensor = gguf_find_tensor(g, t->string);
        assert_non_null(tensor);
        assert_string_equal(dtype_info(tensor->type)->name, t->valuestring);
    }
    touch_all(g, (const uint8_t *)gguf_tensor_at(g, 0)->data -
                     gguf_tensor_at(g, 0)->offset,
              gguf_file_size(g));
    gguf_close(g);
}

static void test_golden_models_match_their_manifest(void **state)
{
    (void)state;
    const char *dir = testutil_shared_path("golden/models");
    if (!dir)
        skip();
    char models[4096];
    snprintf(models, sizeof models, "%s", dir);
    char manifest[4200];
    snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", models);
    cJSON *m = testutil_read_json(manifest);
    assert_non_null(m);
    int files = 0;
    for (const cJSON *entry = m->child; entry; entry = entry->next) {
        check_manifest_file(models, entry);
        files++;
    }
    assert_int_equal(files, 13);
    cJSON_Delete(m);
}

static struct gguf *open_shared_model(const char *name)
{
    const char *path = testutil_shared_path(name);
    struct gguf *g = NULL;
    struct kk_error err = {{0}};
    if (gguf_open(path, &g, &err))
        fail_msg("%s", err.msg);
    return g;
}

static void test_shared_models_open_with_their_documented_contents(
    void **state)
{
    (void)state;
    const char *pattern = testutil_shared_path("models/*.gguf");
    if (!pattern)
        skip();
    glob_t gl;
    assert_int_equal(glob(pattern, 0, NULL, &gl), 0);
    assert_true(gl.gl_pathc >= 4);
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        struct gguf *g = NULL;
        struct kk_error err = {{0}};
        if (gguf_open(gl.gl_pathv[i], &g, &err))
            fail_msg("%s", err.msg);
        gguf_close(g);
    }
    globfree(&gl);

    const struct gguf_value *a;
    struct gguf *g = open_shared_model("models/llama-2-tiny-random.gguf");
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_tensors(g), 12);
    assert_true(gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    assert_int_equal(a->v.arr.n, 32000);
    gguf_close(g);

    g = open_shared_model("models/ggml-vocab-gpt-2.gguf");
    assert_int_equal(gguf_n_tensors(g), 0);
    assert_true(gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    assert_int_equal(a->v.arr.n, 50257);
    assert_true(gguf_get_arr(g, "tokenizer.ggml.merges", &a));
    assert_int_equal(a->v.arr.n, 50000);
    gguf_close(g);

    g = open_shared_model("models/ggml-vocab-llama-spm.gguf");
    assert_int_equal(gguf_n_tensors(g), 0);
    struct gguf_str s;
    assert_true(gguf_get_str(g, "tokenizer.ggml.model", &s));
    assert_true(gguf_str_eq(s, "llama"));
    gguf_close(g);

    g = open_shared_model("models/aidreams260K-F32.gguf");
    assert_true(gguf_get_str(g, "general.architecture", &s));
    assert_true(gguf_str_eq(s, "llama"));
    assert_true(gguf_n_tensors(g) > 0);
    gguf_close(g);
}

/* ---- fuzz seeds --------------------------------------------------------- */

static struct gguf_writer *seed_metadata(void)
{
    struct gguf_writer *w = gguf_writer_new();
    struct gguf_value v = int_value(GGUF_INT8, -3);
    gguf_writer_set_value(w, "i8", &v);
    v = int_value(GGUF_UINT16, 700);
    gguf_writer_set_value(w, "u16", &v);
    v = int_value(GGUF_INT64, -5);
    gguf_writer_set_value(w, "i64", &v);
    v = (struct gguf_value){.type = GGUF_FLOAT64, .v.f64 = 0.5};
    gguf_writer_set_value(w, "f64", &v);
    gguf_writer_set_u32(w, "u32", 7);
    gguf_writer_set_i32(w, "i32", -7);
    gguf_writer_set_u64(w, "u64", 1ull << 40);
    gguf_writer_set_f32(w, "f32", 1.5f);
    gguf_writer_set_bool(w, "bool", true);
    gguf_writer_set_str(w, "str", "text");
    const int16_t i16[] = {-1, 2, -3};
    gguf_writer_set_arr(w, "arr.i16", GGUF_INT16, i16, 3);
    const char *strs[] = {"a", "bc", ""};
    gguf_writer_set_str_arr(w, "arr.str", strs, 3);
    struct gguf_value leaf[2] = {{.type = GGUF_STRING, .v.str = {"x", 1}},
                                 {.type = GGUF_STRING, .v.str = {"yz", 2}}};
    struct gguf_value inner[2] = {
        {.type = GGUF_ARRAY, .v.arr = {GGUF_STRING, 2, NULL, leaf}},
        {.type = GGUF_ARRAY, .v.arr = {GGUF_STRING, 1, NULL, leaf}}};
    struct gguf_value top = {.type = GGUF_ARRAY,
                             .v.arr = {GGUF_ARRAY, 2, NULL, inner}};
    gguf_writer_set_value(w, "arr.nested", &top);
    return w;
}

static struct gguf_writer *seed_aligned(void)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 64);
    const uint64_t ne[] = {32, 2};
    add_tensor_pattern(w, "a", KK_BF16, 2, ne, 9);
    add_tensor_pattern(w, "b", KK_Q5_0, 2, ne, 10);
    return w;
}

/* Writes each seed into dir. Version 2 is the small model with its version
 * field patched: the writer makes only version 3. */
static void write_seeds(const char *dir)
{
    struct {
        const char *name;
        struct gguf_writer *w;
        uint8_t version;
    } seeds[] = {
        {"empty.gguf", gguf_writer_new(), 3},
        {"metadata.gguf", seed_metadata(), 3},
        {"model.gguf", small_model_writer(), 3},
        {"model-v2.gguf", small_model_writer(), 2},
        {"aligned.gguf", seed_aligned(), 3},
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        size_t len;
        uint8_t *bytes = save_to_bytes(seeds[i].w, &len);
        gguf_writer_free(seeds[i].w);
        assert_true(len < 65536);
        bytes[4] = seeds[i].version;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, seeds[i].name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, len, f), len);
        fclose(f);
        free(bytes);
    }
}

static void test_fuzz_seeds_are_what_the_writer_makes(void **state)
{
    (void)state;
    const char *out = getenv("KK_WRITE_SEEDS");
    if (out && *out) {
        write_seeds(out);
        fprintf(stderr, "wrote fuzz seeds to %s\n", out);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmp_path("seeds"));
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    write_seeds(dir);
    glob_t gl;
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/*.gguf", dir);
    assert_int_equal(glob(pattern, 0, NULL, &gl), 0);
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        const char *base = strrchr(gl.gl_pathv[i], '/') + 1;
        char committed[4200];
        snprintf(committed, sizeof committed, "tests/fuzz/seeds/%s", base);
        size_t want_len, got_len;
        char *got = testutil_read_file(gl.gl_pathv[i], &got_len);
        char *want = testutil_read_file(committed, &want_len);
        if (!want)
            fail_msg("%s is missing; regenerate the seeds with "
                     "KK_WRITE_SEEDS=tests/fuzz/seeds build/tests/test_gguf",
                     committed);
        struct gguf *g = NULL;
        struct kk_error err = {{0}};
        if (gguf_open_memory(want, want_len, &g, &err))
            fail_msg("%s: %s", committed, err.msg);
        gguf_close(g);
        if (want_len != got_len || memcmp(want, got, got_len) != 0)
            fail_msg("%s differs from what the writer makes now; regenerate "
                     "with KK_WRITE_SEEDS=tests/fuzz/seeds "
                     "build/tests/test_gguf", committed);
        free(want);
        free(got);
        unlink(gl.gl_pathv[i]);
    }
    assert_int_equal(gl.gl_pathc, 5);
    globfree(&gl);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_keeps_every_scalar_type),
        cmocka_unit_test(test_round_trip_keeps_numeric_and_string_arrays),
        cmocka_unit_test(test_round_trip_keeps_nested_arrays),
        cmocka_unit_test(test_round_trip_keeps_tensors_of_every_type),
        cmocka_unit_test(test_writer_lays_out_data_at_general_alignment),
        cmocka_unit_test(
            test_writer_honours_general_alignment_of_any_integer_type),
        cmocka_unit_test(test_writer_refuses_repeats_and_bad_shapes),
        cmocka_unit_test(test_fill_callback_produces_tensor_data_at_save),
        cmocka_unit_test(
            test_typed_getters_convert_in_range_and_refuse_otherwise),
        cmocka_unit_test(test_version_2_opens_like_version_3),
        cmocka_unit_test(
            test_version_1_and_big_endian_files_are_refused_by_name),
        cmocka_unit_test(test_open_names_the_file_in_messages),
        cmocka_unit_test(test_every_truncation_fails_with_a_message),
        cmocka_unit_test(test_byte_flips_fail_cleanly_or_stay_in_bounds),
        cmocka_unit_test(test_hostile_counts_fail_before_allocating),
        cmocka_unit_test(test_deep_nesting_is_refused),
        cmocka_unit_test(test_duplicate_keys_and_tensor_names_are_refused),
        cmocka_unit_test(test_bad_tensor_records_are_refused_by_name),
        cmocka_unit_test(test_general_alignment_must_be_a_power_of_two),
        cmocka_unit_test(test_known_but_unsupported_types_open),
        cmocka_unit_test(test_golden_models_match_their_manifest),
        cmocka_unit_test(
            test_shared_models_open_with_their_documented_contents),
        cmocka_unit_test(test_fuzz_seeds_are_what_the_writer_makes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
