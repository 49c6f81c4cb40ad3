/* fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Opens the input with gguf_open_memory() and, when it opens, reads every
 * byte the API hands out: keys, values (nested arrays included), tensor
 * names and tensor data. Sanitizers then flag any pointer the reader let
 * escape the buffer. The seeds in tests/fuzz/seeds are small valid files
 * made by the writer (see tests/test_gguf.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

static uint64_t touch_str(struct gguf_str s)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < s.len; i++)
        sum += (unsigned char)s.ptr[i];
    return sum;
}

static uint64_t touch_value(const struct gguf_value *v)
{
    switch (v->type) {
    case GGUF_STRING:
        return touch_str(v->v.str);
    case GGUF_ARRAY: {
        uint64_t sum = 0;
        for (uint64_t i = 0; i < v->v.arr.n; i++) {
            if (v->v.arr.items)
                sum += touch_value(&v->v.arr.items[i]);
            else
                sum += (uint64_t)gguf_arr_i64(v, i) +
                       (uint64_t)(gguf_arr_f64(v, i) > 0);
        }
        return sum;
    }
    case GGUF_FLOAT32:
    case GGUF_FLOAT64:
        return v->v.f64 > 0;
    case GGUF_BOOL:
        return v->v.b;
    default:
        return v->v.integer.u64 + (uint64_t)v->v.integer.i64;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf *g = NULL;
    struct kk_error err;
    if (gguf_open_memory(data, size, &g, &err) != 0) {
        if (g != NULL || err.msg[0] == 0)
            abort(); /* a failure must come with a message and no object */
        return 0;
    }
    volatile uint64_t sum = 0;
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        sum += touch_str(kv->key) + touch_value(&kv->value);
        char key[64];
        size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len
                                                : sizeof key - 1;
        memcpy(key, kv->key.ptr, n);
        key[n] = 0;
        uint32_t u;
        int64_t i64;
        float f;
        bool b;
        struct gguf_str s;
        const struct gguf_value *arr;
        sum += gguf_get_u32(g, key, &u) + gguf_get_i64(g, key, &i64) +
               gguf_get_f32(g, key, &f) + gguf_get_bool(g, key, &b) +
               gguf_get_str(g, key, &s) + gguf_get_arr(g, key, &arr);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        if (d < data || t->size > size || (size_t)(d - data) > size - t->size)
            abort();
        sum += touch_str(t->name);
        for (uint64_t k = 0; k < t->size; k++)
            sum += d[k];
    }
    sum += gguf_alignment(g) + gguf_version(g) + gguf_file_size(g);
    (void)sum;
    gguf_close(g);
    return 0;
}
