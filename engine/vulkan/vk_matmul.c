/* vk_matmul.c — the Vulkan backend's products (backend_vulkan_impl.h):
 * which form of matmul.comp takes a batch (the GPU forms by batch size,
 * the integer forms of normed Q8_0, the int8 tiles for prefill, the
 * decode form for matrices of many rows, the rowwise form on a CPU
 * device), the norm folded in where the form folds it, and the dispatch.
 * Every form gives a token the same bits (vk_shaders.h). */
#include "backend_vulkan_impl.h"

#include "dtype.h"

const struct vkb_matmul_type vkb_matmul_types[N_MATMUL] = {
    {KK_F32, "f32"},   {KK_F16, "f16"},   {KK_BF16, "bf16"},
    {KK_Q8_0, "q8_0"}, {KK_Q4_0, "q4_0"}, {KK_Q5_0, "q5_0"},
    {KK_Q4_K, "q4_k"}, {KK_Q6_K, "q6_k"},
};

int vkb_matmul_index(uint32_t type)
{
    for (int i = 0; i < N_MATMUL; i++)
        if (vkb_matmul_types[i].type == type)
            return i;
    return -1;
}

/* The rows of `count` matrices together. */
static int64_t rows_of(int count, const struct weight *const *w)
{
    int64_t rows = 0;
    for (int m = 0; m < count; m++)
        rows += w[m]->n_rows;
    return rows;
}

/* The bytes of `count` matrices together. */
static int64_t bytes_of(int count, const struct weight *const *w)
{
    int64_t bytes = 0;
    for (int m = 0; m < count; m++)
        bytes += w[m]->n_rows * (int64_t)w[m]->row_bytes;
    return bytes;
}

/* Whether a batch of n tokens of the `count` matrices w is one of small
 * products that the 4-token form takes in y-groups (VK_SMALL_MAX_BATCH):
 * the weights that the y-groups after the first read again come to less
 * than VK_SMALL_EXTRA_BYTES. */
static bool small_product(int n, int count, const struct weight *const *w)
{
    if (n > VK_SMALL_MAX_BATCH)
        return false;
    const int64_t again =
        groups_of(n, vk_matmul_forms[VK_FORM_T4].max_tokens) - 1;
    return bytes_of(count, w) * again < VK_SMALL_EXTRA_BYTES;
}

/* The form (index into be->matmul) that multiplies a batch of n tokens by
 * the `count` matrices w: on a GPU the smallest that holds it (same bits,
 * fewer partial sums); but the one-token form, a y-group a token, for
 * short batches of a layer's matrices (VK_ONE_MAX_BATCH), and the 4-token
 * form, in y-groups, for batches of small products. */
static int matmul_form(const struct vk_backend *be, int n, int count,
                       const struct weight *const *w)
{
    if (be->matmul_rowwise ||
        (n <= VK_ONE_MAX_BATCH && w[0]->n_rows < VK_DECODE_MIN_ROWS))
        return 0;
    int f = 0;
    while (f + 1 < N_GPU_FORMS && n > vk_matmul_forms[f].max_batch)
        f++;
    return f > VK_FORM_T4 && small_product(n, count, w) ? VK_FORM_T4 : f;
}

/* Whether the integer forms take these matrices in a batch of n, where
 * `normed` says whether an RMSNorm of x comes with the product: Q8_0 rows
 * of VK_QX_MIN_COLS or more (any, with KAKEYA_VK_QX=1), on a device that
 * runs them, in batches up to VK_QX_MAX_BATCH, of normed x.
 * Normed, because that is where they pay: a float form norms x in every
 * workgroup of a few rows, the integer forms once per workgroup of many,
 * along with quantizing it; x as it comes (the o and down projections) the
 * float forms stream with no prologue at all. On the H200 (1B shape) o and
 * down took 11.1 us a decode step in the float form against 14.0 in the
 * integer one, and 26.0 a verify block (of 8 or 16 tokens) against 37.7
 * (KAKEYA_VK_PROFILE); q/k/v and gate/up with their norms 10.4 and 25.9
 * against 10.9 and 17.4 decoding, 33.4 and 94 against 30.1 and 61.6 a
 * verify block. Decoding took 1.27-1.33 ms against 1.35-1.49, verifying 8
 * tokens 2.47-2.61 against 2.92-3.01. */
static bool qx_takes(const struct vk_backend *be, int count,
                     const struct weight *const *w, int n, bool normed)
{
    bool takes = be->has_qx && n <= VK_QX_MAX_BATCH && normed;
    for (int m = 0; m < count && takes; m++)
        takes = w[m]->type == KK_Q8_0 && w[m]->n_cols >= be->qx_min_cols;
    return takes;
}

/* What the matmuls of n tokens by the `count` matrices w multiply: x with
 * the norm to fold, where each of their forms folds it; else norm's rows
 * of x, made by a dispatch of their own (then *fold is NULL). A call whose
 * matrices the integer forms take only in part norms in a dispatch for
 * every batch size, so that those matrices get the same input decoding and
 * verifying (the float forms give the same bits either way: norm.glsl). */
static const struct be_tensor *matmul_input(struct vk_backend *be,
                                            const struct be_tensor *x,
                                            const struct be_norm *norm, int n,
                                            int count,
                                            const struct weight *const *w,
                                            const struct be_norm **fold)
{
    *fold = NULL;
    if (!norm)
        return x;
    int qx = 0;
    for (int m = 0; m < count; m++)
        qx += qx_takes(be, 1, &w[m], n, true);
    if (qx == count ||
        /* (the form of the whole call: a part of it, a type of its own,
         * takes that form or the one-token or 4-token one, both of which
         * fold a norm as well) */
        (qx == 0 && be->has_norm_form[matmul_form(be, n, count, w)])) {
        *fold = norm;
        return x;
    }
    vkb_rmsnorm(&be->base, norm->out, x, norm->weight, n, (int)x->width,
                norm->eps);
    return norm->out;
}

/* Workgroups for the decode form's `sets` row sets: one set per subgroup,
 * up to VK_DECODE_MAX_WORKGROUPS, past which subgroups take several in
 * turn (and the workgroups' norm prologues are fewer). */
static uint32_t decode_workgroups(uint32_t sets)
{
    uint32_t wgs = (sets + VK_DECODE_SUBGROUPS - 1) / VK_DECODE_SUBGROUPS;
    return wgs < VK_DECODE_MAX_WORKGROUPS ? wgs : VK_DECODE_MAX_WORKGROUPS;
}

/* The row tiles of the int8 tile form `form` over these matrices (MM_GATED:
 * matrix 0's, each tile holding the same rows of both). */
static int64_t mma_tiles(int form, uint32_t mode, int count,
                         const struct weight *const *w)
{
    int64_t tiles = 0;
    for (int m = 0; m < (mode == MM_GATED ? 1 : count); m++)
        tiles += groups_of(w[m]->n_rows, vk_mma_rows[form]);
    return tiles;
}

/* Whether the int8 tile forms take these matrices: Q8_0, in row tiles that
 * the grid's y holds in every form (Vulkan's least
 * maxComputeWorkGroupCount). */
static bool mma_fits(const struct vk_backend *be, uint32_t mode, int count,
                     const struct weight *const *w)
{
    bool fits = be->has_mma;
    for (int m = 0; m < count && fits; m++)
        fits = w[m]->type == KK_Q8_0;
    return fits && mma_tiles(VK_MMA_FORMS - 1, mode, count, w) <= 65535;
}

/* The int8 tile form for a batch of n (vk_shaders.h): on rows of
 * VK_MMA_WIDE_COLS or more the one of most rows a workgroup; on narrower
 * rows the one of most rows whose grid keeps the GPU busy, else the one of
 * fewest. */
static int mma_form(uint32_t mode, int count, const struct weight *const *w,
                    int n)
{
    if (w[0]->n_cols >= VK_MMA_WIDE_COLS)
        return 0;
    const int64_t token_tiles = groups_of(n, VK_MMA_TOKENS);
    int f = 0;
    while (f + 1 < VK_MMA_FORMS &&
           token_tiles * mma_tiles(f, mode, count, w) < VK_MMA_BUSY)
        f++;
    return f;
}

/* Records one matmul dispatch over `count` matrices of one type and width
 * (vk_shaders.h): y[m] = w[m] · x (MM_STORE), y[0] += w[0] · x (MM_ADD),
 * or y[0] = act(w[0] · x) * (w[1] · x) (MM_GATED), x normed first by the
 * form that folds norm when norm is not NULL (matmul_input); `normed`: x
 * is the output of a norm that came with the call, folded or not. */
static void record_matmul(struct vk_backend *be, uint32_t mode, int count,
                          const struct weight *const *w,
                          const struct be_tensor *x,
                          const struct be_norm *norm, bool normed, int n,
                          struct be_tensor *const *y, bool use_gelu)
{
    const int mi = vkb_matmul_index(w[0]->type);
    const int form = matmul_form(be, n, count, w);
    struct vk_push_matmul pc = {.n_cols = (uint32_t)w[0]->n_cols,
                                .row_bytes = (uint32_t)w[0]->row_bytes,
                                .n_tokens = (uint32_t)n, .mode = mode,
                                .use_gelu = use_gelu,
                                .eps = norm ? norm->eps : 0.0f};
    /* (a prefill batch's norm is a dispatch of its own: matmul_input) */
    const bool qx = qx_takes(be, count, w, n, normed);
    const int qf = vk_qx_form_of(n);
    const bool mma = !qx && !norm && n >= VK_MMA_MIN_TOKENS &&
                     mma_fits(be, mode, count, w);
    const int mf = mma ? mma_form(mode, count, w, n) : 0;
    const bool decode = !qx && be->has_decode_form && n == 1 &&
                        w[0]->n_rows >= VK_DECODE_MIN_ROWS;
    const int teams = decode ? 1
                      : norm ? vk_matmul_forms[form].norm_teams
                             : vk_matmul_forms[form].teams;
    const int slots = decode ? MM_SLOTS : vk_matmul_forms[form].slots;
    if (qx)
        pc.lanes = vk_qx_lanes((uint32_t)(mode == MM_GATED ? w[0]->n_rows
                                                            : rows_of(count, w)),
                               pc.n_cols, vk_device_subgroup_size(be->dev));
    const uint32_t per =
        qx    ? VK_QX_INVOCATIONS / pc.lanes * (uint32_t)vk_qx_forms[qf].rows
        : mma ? (uint32_t)vk_mma_rows[mf]
        : be->matmul_rowwise ? MM_ROWWISE_ROWS
                             : (uint32_t)(teams * (mode == MM_GATED
                                                       ? slots / 2
                                                       : slots));
    const struct vk_buffer *bufs[2 * MM_MAX_MATS + 2];
    uint32_t groups = 0;
    for (int m = 0; m < MM_MAX_MATS; m++) {
        const bool used = m < count;
        const struct vk_buffer *wb = used ? vk_model_find(be->weights,
                                                          w[m]->data)
                                          : bufs[0];
        if (!wb || mi < 0) {
            pass_fail(be, "internal: a weight matrix is not on the GPU");
            return;
        }
        bufs[m] = wb;
        bufs[MM_MAX_MATS + 1 + m] = used && mode == MM_STORE ? buf(y[m])
                                                             : buf(y[0]);
        pc.n_rows[m] = used ? (uint32_t)w[m]->n_rows : 0;
        /* MM_GATED numbers matrix 0's rows only: both are read per group. */
        pc.start[m] = used && (m == 0 || mode != MM_GATED) ? groups : ~0u;
        if (pc.start[m] != ~0u)
            groups += groups_of(w[m]->n_rows, per);
    }
    bufs[MM_MAX_MATS] = buf(x);
    bufs[2 * MM_MAX_MATS + 1] = buf(x);
    if (norm && !(bufs[2 * MM_MAX_MATS + 1] =
                      vk_model_find(be->weights, norm->weight))) {
        pass_fail(be, "internal: a norm vector is not on the GPU");
        return;
    }
    if (decode) {
        dispatch(be, &be->matmul_dec[norm != NULL][mi], bufs, &pc,
                 decode_workgroups(groups), 1, 1);
        return;
    }
    if (qx) {
        const uint32_t cap = vk_qx_forms[qf].max_workgroups;
        dispatch(be, &be->matmul_qx[norm != NULL][qf], bufs, &pc,
                 groups < cap ? groups : cap,
                 groups_of(n, vk_qx_forms[qf].tokens), 1);
        return;
    }
    if (mma) {
        dispatch(be, &be->matmul_mma[mf], bufs, &pc,
                 groups_of(n, VK_MMA_TOKENS), groups, 1);
        return;
    }
    /* Row groups past the device's grid limit (a 256k-token vocabulary)
     * spill into z; the shader numbers groups x + z * groups_x. */
    uint32_t max_x = vk_device_max_groups_x(be->dev);
    uint32_t gz = (groups + max_x - 1) / max_x;
    uint32_t gx = (groups + gz - 1) / gz;
    dispatch(be, norm ? &be->matmul_norm[form][mi] : &be->matmul[form][mi],
             bufs, &pc, gx,
             groups_of(n, be->matmul_rowwise
                              ? MM_TOKENS
                              : vk_matmul_forms[form].max_tokens),
             gz);
}

void vkb_matmul(struct backend *base, const struct weight *w,
                const struct be_tensor *x, const struct be_norm *norm,
                int n, struct be_tensor *y)
{
    struct vk_backend *be = vkb(base);
    const struct be_norm *fold;
    x = matmul_input(be, x, norm, n, 1, &w, &fold);
    record_matmul(be, MM_STORE, 1, &w, x, fold, norm != NULL, n, &y, false);
}

/* Matrices of one type and width go in one dispatch (q, k and v usually;
 * a Q4_K_M file may mix types, and those go in dispatches of their own). */
void vkb_matmul_multi(struct backend *base, int count,
                      const struct weight *const *w,
                      const struct be_tensor *x,
                      const struct be_norm *norm, int n,
                      struct be_tensor *const *y)
{
    struct vk_backend *be = vkb(base);
    const struct be_norm *fold;
    x = matmul_input(be, x, norm, n, count, w, &fold);
    for (int i = 0; i < count;) {
        int k = 1;
        while (i + k < count && k < MM_MAX_MATS &&
               w[i + k]->type == w[i]->type &&
               w[i + k]->n_cols == w[i]->n_cols)
            k++;
        record_matmul(be, MM_STORE, k, w + i, x, fold, norm != NULL, n, y + i,
                      false);
        i += k;
    }
}

void vkb_matmul_add(struct backend *base, const struct weight *w,
                    const struct be_tensor *x, int n,
                    struct be_tensor *tmp, struct be_tensor *acc)
{
    (void)tmp;
    record_matmul(vkb(base), MM_ADD, 1, &w, x, NULL, false, n, &acc, false);
}

void vkb_gated_matmul(struct backend *base, const struct weight *w_gate,
                      const struct weight *w_up,
                      const struct be_tensor *x,
                      const struct be_norm *norm, int n,
                      struct be_tensor *gate, struct be_tensor *up,
                      bool use_gelu)
{
    (void)up;
    struct vk_backend *be = vkb(base);
    const struct weight *w[] = {w_gate, w_up};
    const struct be_norm *fold;
    x = matmul_input(be, x, norm, n, 2, w, &fold);
    record_matmul(be, MM_GATED, 2, w, x, fold, norm != NULL, n, &gate,
                  use_gelu);
}

