/* vk_model.c — see vk_model.h. */
#include "vk_model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "error.h"
#include "model.h"

struct vk_tensor_copy {
    const void *host;
    struct vk_buffer buf;
};

struct vk_model {
    struct vk_tensor_copy *items;   /* sorted by host address */
    int n, cap;
    uint64_t bytes;
};

void vk_model_repack_rows(uint32_t type, int64_t n_cols, int64_t n_rows,
                          size_t row_bytes, const void *src, void *dst)
{
    if (type != KK_Q8_0) {
        memcpy(dst, src, (size_t)n_rows * row_bytes);
        return;
    }
    const int64_t nb = n_cols / 32;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *in = (const uint8_t *)src + (size_t)r * row_bytes;
        uint8_t *quants = (uint8_t *)dst + (size_t)r * row_bytes;
        uint8_t *scales = quants + n_cols;
        for (int64_t b = 0; b < nb; b++) {
            memcpy(scales + 2 * b, in + 34 * b, 2);
            memcpy(quants + 32 * b, in + 34 * b + 2, 32);
        }
    }
}

/* Rows repacked per upload: bounded host memory for any matrix. */
enum { REPACK_CHUNK_BYTES = 16 << 20 };

/* Uploads w's rows in the device layout, a chunk of rows at a time. */
static int upload_repacked(struct vk_device *d, struct vk_buffer *dst,
                           const struct weight *w, struct kk_error *err)
{
    int64_t rows_per = REPACK_CHUNK_BYTES / (int64_t)w->row_bytes;
    rows_per = rows_per < 1 ? 1 : rows_per;
    uint8_t *tmp = malloc((size_t)rows_per * w->row_bytes);
    if (!tmp)
        return kk_fail(err, "out of memory");
    int rc = 0;
    for (int64_t r = 0; r < w->n_rows && rc == 0; r += rows_per) {
        int64_t n = w->n_rows - r < rows_per ? w->n_rows - r : rows_per;
        size_t at = (size_t)r * w->row_bytes;
        vk_model_repack_rows(w->type, w->n_cols, n, w->row_bytes,
                             (const uint8_t *)w->data + at, tmp);
        rc = vk_upload(d, dst, at, tmp, (size_t)n * w->row_bytes, err);
    }
    free(tmp);
    return rc;
}

/* Fails, saying what to do, when a tensor of `bytes` (a weight w, or a
 * vector when w is NULL) is more than the device binds at once: the
 * shaders see each tensor as one storage buffer, and the first dispatch
 * to bind it would be refused. Such a device (lavapipe binds 128 MiB)
 * cannot run the model; better said before the upload than mid-reply. */
static int check_binds(struct vk_device *d, size_t bytes,
                       const struct weight *w, struct kk_error *err)
{
    if (vk_device_binds(d, vk_padded_size(bytes)))
        return 0;
    const struct kk_dtype_info *t = w ? dtype_info(w->type) : NULL;
    char what[96];
    if (w)
        snprintf(what, sizeof what, "%lld x %lld %s matrix",
                 (long long)w->n_rows, (long long)w->n_cols,
                 t && t->name ? t->name : "weight");
    else
        snprintf(what, sizeof what, "vector");
    const struct vk_range_text r = vk_device_range_text(d, vk_padded_size(bytes));
    return kk_fail(err, "a %s of %s is more than %s binds at once (%s, its "
                   "maxStorageBufferRange): run this model with --backend "
                   "cpu, or on a device that binds more",
                   what, r.size, vk_device_name(d), r.limit);
}

/* A device copy of `bytes` at host, filed under host; a weight `w` is
 * uploaded in the device layout (NULL: the bytes as they are). */
static int add_copy(struct vk_device *d, struct vk_model *vm,
                    const void *host, size_t bytes, const struct weight *w,
                    struct kk_error *err)
{
    if (!host || vk_model_find(vm, host))
        return 0;   /* absent, or shared (a tied output matrix) */
    if (check_binds(d, bytes, w, err))
        return -1;
    if (vm->n == vm->cap) {
        int cap = vm->cap ? 2 * vm->cap : 256;
        void *items = realloc(vm->items, (size_t)cap * sizeof *vm->items);
        if (!items)
            return kk_fail(err, "out of memory");
        vm->items = items;
        vm->cap = cap;
    }
    struct vk_tensor_copy *c = &vm->items[vm->n];
    c->host = host;
    if (vk_buffer_new(d, vk_padded_size(bytes), VK_MEM_DEVICE, &c->buf, err) ||
        (w && w->type == KK_Q8_0 ? upload_repacked(d, &c->buf, w, err)
                                 : vk_upload(d, &c->buf, 0, host, bytes,
                                             err))) {
        vk_buffer_free(d, &c->buf);
        return -1;
    }
    vm->n++;
    vm->bytes += bytes;
    /* Keep the table sorted: insertion from the back (uploads are few). */
    for (int i = vm->n - 1;
         i > 0 && (uintptr_t)vm->items[i - 1].host > (uintptr_t)vm->items[i].host;
         i--) {
        struct vk_tensor_copy t = vm->items[i];
        vm->items[i] = vm->items[i - 1];
        vm->items[i - 1] = t;
    }
    return 0;
}

static int add_weight(struct vk_device *d, struct vk_model *vm,
                      const struct weight *w, struct kk_error *err)
{
    return add_copy(d, vm, w->data, (size_t)w->n_rows * w->row_bytes, w,
                    err);
}

static int add_vector(struct vk_device *d, struct vk_model *vm,
                      const float *v, int64_t n, struct kk_error *err)
{
    return add_copy(d, vm, v, (size_t)n * sizeof(float), NULL, err);
}

static int upload_layer(struct vk_device *d, struct vk_model *vm,
                        const struct model *m, const struct layer *L,
                        struct kk_error *err)
{
    const struct model_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, hd = hp->head_dim;
    const int64_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    const struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                 &L->ffn_gate, &L->ffn_up, &L->ffn_down};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (add_weight(d, vm, ws[i], err))
            return -1;
    const float *vecs[] = {L->attn_norm, L->ffn_norm, L->post_attn_norm,
                           L->post_ffn_norm, L->q_norm, L->k_norm,
                           L->bq, L->bk, L->bv};
    const int64_t lens[] = {e, e, e, e, hd, hd, q_dim, kv_dim, kv_dim};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        if (add_vector(d, vm, vecs[i], lens[i], err))
            return -1;
    return 0;
}

int vk_model_upload(struct vk_device *d, const struct model *m,
                    struct vk_model **out, struct kk_error *err)
{
    *out = NULL;
    struct vk_model *vm = calloc(1, sizeof *vm);
    if (!vm)
        return kk_fail(err, "out of memory");
    const struct model_hparams *hp = &m->hp;
    bool show = isatty(STDERR_FILENO);
    if (add_weight(d, vm, &m->output, err) ||
        add_vector(d, vm, m->output_norm, hp->n_embd, err))
        goto fail;
    for (int il = 0; il < hp->n_layer; il++) {
        if (upload_layer(d, vm, m, &m->layers[il], err))
            goto fail;
        if (show)
            fprintf(stderr, "\ruploading weights to %s: layer %d of %d",
                    vk_device_name(d), il + 1, hp->n_layer);
    }
    if (show)
        fprintf(stderr, "\r\033[K");
    *out = vm;
    return 0;
fail:
    if (show)
        fprintf(stderr, "\n");
    vk_model_free(d, vm);
    kk_error_prefix(err, "uploading the model's weights");
    return -1;
}

void vk_model_free(struct vk_device *d, struct vk_model *vm)
{
    if (!vm)
        return;
    for (int i = 0; i < vm->n; i++)
        vk_buffer_free(d, &vm->items[i].buf);
    free(vm->items);
    free(vm);
}

const struct vk_buffer *vk_model_find(const struct vk_model *vm,
                                      const void *host)
{
    int lo = 0, hi = vm->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const void *h = vm->items[mid].host;
        if (h == host)
            return &vm->items[mid].buf;
        if ((uintptr_t)h < (uintptr_t)host)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

uint64_t vk_model_bytes(const struct vk_model *vm)
{
    return vm->bytes;
}
