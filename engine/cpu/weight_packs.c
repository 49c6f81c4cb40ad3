/* weight_packs.c — see weight_packs.h.
 *
 * The copies sit in one anonymous mapping backed by transparent huge pages
 * (as the model file itself, gguf.c: a pass streams every weight once, and
 * from 4 KiB pages each page costs a TLB miss and stops the prefetchers);
 * an open-addressing table keyed by the weight's data pointer finds them
 * (a pass looks up ~75 times). */
#include "weight_packs.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtype.h"
#include "error.h"
#include "matmul.h"
#include "model.h"

struct pack_slot {
    const void *data;      /* the weight's own data; NULL: empty slot */
    const void *packed;
};

struct weight_packs {
    struct pack_slot *slots;
    size_t n_slots;        /* a power of two, at least twice the packs */
    void *memory;
    size_t bytes;
};

/* The matrices a forward pass multiplies with (the output may be the
 * token embedding itself: packed once). */
static int model_matrices(const struct model *m, const struct weight **out,
                          int max)
{
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct layer *L = &m->layers[il];
        const struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                     &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0] && n < max; i++)
            out[n++] = ws[i];
    }
    if (n < max)
        out[n++] = &m->output;
    return n;
}

static bool is_packable(const struct weight *w)
{
    return w->type == KK_Q8_0 && w->n_cols % 32 == 0 && w->n_rows > 0;
}

/* The copy is worth its memory only while it takes at most half of what
 * is free now (the row kernels read the original otherwise). */
static bool fits_in_memory(size_t bytes)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 && bytes <= (size_t)pages * (size_t)page / 2;
}

static size_t slot_of(const struct weight_packs *p, const void *data)
{
    uint64_t h = (uint64_t)(uintptr_t)data * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (p->n_slots - 1);
}

size_t packs_bytes(const struct weight_packs *p)
{
    return p ? p->bytes : 0;
}

const void *packs_find(const struct weight_packs *p, const struct weight *w)
{
    if (!p)
        return NULL;
    for (size_t i = slot_of(p, w->data);; i = (i + 1) & (p->n_slots - 1)) {
        if (p->slots[i].data == w->data)
            return p->slots[i].packed;
        if (!p->slots[i].data)
            return NULL;
    }
}

int packs_new(const struct model *m, struct weight_packs **out,
              struct kk_error *err)
{
    *out = NULL;
    if (!matmul_has_amx())
        return 0;
    int max = 7 * m->hp.n_layer + 1, n = 0;
    const struct weight **ws = malloc((size_t)max * sizeof *ws);
    if (!ws)
        return kk_fail(err, "out of memory");
    int total = model_matrices(m, ws, max);
    size_t bytes = 0;
    for (int i = 0; i < total; i++)
        if (is_packable(ws[i])) {
            bytes += matmul_amx_packed_bytes(ws[i]->n_rows, ws[i]->n_cols);
            n++;
        }
    if (n == 0 || !fits_in_memory(bytes)) {
        free(ws);
        return 0;
    }
    struct weight_packs *p = calloc(1, sizeof *p);
    p->n_slots = 16;
    while (p && p->n_slots < 2 * (size_t)n)
        p->n_slots *= 2;
    if (p) {
        p->slots = calloc(p->n_slots, sizeof *p->slots);
        p->memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        p->bytes = bytes;
        if (p->memory == MAP_FAILED)
            p->memory = NULL;
        else
            madvise(p->memory, bytes, MADV_HUGEPAGE);
    }
    if (!p || !p->slots || !p->memory) {
        free(ws);
        packs_free(p);
        return kk_fail(err, "out of memory repacking %zu MiB of weights",
                       bytes >> 20);
    }
    char *at = p->memory;
    for (int i = 0; i < total; i++) {
        const struct weight *w = ws[i];
        if (!is_packable(w) || packs_find(p, w))
            continue;
        matmul_amx_pack(w->data, w->n_rows, w->n_cols, at);
        size_t s = slot_of(p, w->data);
        while (p->slots[s].data)
            s = (s + 1) & (p->n_slots - 1);
        p->slots[s] = (struct pack_slot){w->data, at};
        at += matmul_amx_packed_bytes(w->n_rows, w->n_cols);
    }
    free(ws);
    mprotect(p->memory, bytes, PROT_READ);
    *out = p;
    return 0;
}

void packs_free(struct weight_packs *p)
{
    if (!p)
        return;
    free(p->slots);
    if (p->memory)
        munmap(p->memory, p->bytes);
    free(p);
}
