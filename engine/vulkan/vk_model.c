/* vk_model.c — see vk_model.h. */
#include "vk_model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

/* Shaders read whole 32-bit words, and an unaligned block may end one word
 * past its last byte: every buffer gets that much slack. */
static VkDeviceSize padded(size_t bytes)
{
    return (bytes + 3) / 4 * 4 + 4;
}

static int add_copy(struct vk_device *d, struct vk_model *vm,
                    const void *host, size_t bytes, struct kk_error *err)
{
    if (!host || vk_model_find(vm, host))
        return 0;   /* absent, or shared (a tied output matrix) */
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
    if (vk_buffer_new(d, padded(bytes), VK_MEM_DEVICE, &c->buf, err) ||
        vk_upload(d, &c->buf, 0, host, bytes, err)) {
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
    return add_copy(d, vm, w->data, (size_t)w->n_rows * w->row_bytes, err);
}

static int add_vector(struct vk_device *d, struct vk_model *vm,
                      const float *v, int64_t n, struct kk_error *err)
{
    return add_copy(d, vm, v, (size_t)n * sizeof(float), err);
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
