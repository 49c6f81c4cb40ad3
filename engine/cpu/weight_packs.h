/* weight_packs.h — the CPU backend's repacked copies of a model's weights.
 *
 * On a CPU with AMX, the Q8_0 matrices of the model a backend serves are
 * copied once, when the backend opens, into the tile order of
 * matmul_rows_amx (matmul.h); a batch of several tokens then multiplies
 * with tile instructions. packs_find() maps a weight of that model to its
 * copy (NULL: none, use the row kernels on the original). The packs own
 * their copies; they cost about as much memory again as the Q8_0 weights,
 * and are not made when that is more than half of the free memory.
 * Read-only after packs_new, so any thread may look up. */
#ifndef KK_CPU_WEIGHT_PACKS_H
#define KK_CPU_WEIGHT_PACKS_H

#include <stddef.h>

#include "kakeya_error.h"

struct model;
struct weight;
struct weight_packs;

/* *out = NULL (and 0 returned) when the CPU has no AMX, the model no Q8_0
 * matrix, or the memory is short. Fails only when out of memory. */
int packs_new(const struct model *m, struct weight_packs **out,
              struct kk_error *err);
void packs_free(struct weight_packs *p);

/* Bytes of the copies (0 when p is NULL). */
size_t packs_bytes(const struct weight_packs *p);

/* The packed copy of w, or NULL. p may be NULL. */
const void *packs_find(const struct weight_packs *p, const struct weight *w);

#endif
