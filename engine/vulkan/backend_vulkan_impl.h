/* backend_vulkan_impl.h — the inside of the Vulkan backend, shared by its
 * files (internal to engine/vulkan):
 *   backend_vulkan.c  the backend: pipelines, weights, tensors, a pass and
 *                     its reads, the elementwise ops, the ops table
 *   vk_matmul.c       the products: which form takes a batch, and its
 *                     dispatch (vkb_matmul, vkb_gated_matmul, ...)
 *   vk_attention.c    positions, the KV cache's rows, attention
 * backend_vulkan.c's head comment says how a pass runs. */
#ifndef KK_BACKEND_VULKAN_IMPL_H
#define KK_BACKEND_VULKAN_IMPL_H

#include "backend_impl.h"
#include "error.h"
#include "kv.h"
#include "vk_device.h"
#include "vk_model.h"
#include "vk_shaders.h"

/* The attention shader keeps one head of a query in registers. */
enum { MAX_HEAD_DIM = 256 };
/* Distinct RoPE tables one pass may use (gemma3 has two bases). */
enum { MAX_ROPE_TABLES = 4 };

/* The weight types the matmul shaders are compiled for (vk_matmul.c's
 * vkb_matmul_types: the shader is matmul_<form><name>). */
struct vkb_matmul_type {
    uint32_t type;
    const char *name;
};
enum { N_MATMUL = 8 };
extern const struct vkb_matmul_type vkb_matmul_types[N_MATMUL];
/* Index of `type` in vkb_matmul_types, or -1: no shader multiplies it. */
int vkb_matmul_index(uint32_t type);

/* The GPU's matmul forms by batch size: vk_matmul_forms (vk_shaders.h). */
enum { N_GPU_FORMS = VK_MATMUL_FORMS };

/* A pass's positions as its shaders read them: for each of n rows, the
 * angles of RoPE with this base over n_rot dimensions (rope_angles), then
 * the word pos_at = n * n_rot, the batch's first position. The shaders
 * that place the batch in the KV cache (rope_kv_store, attention) read it
 * there rather than from push constants, so that a decode step records
 * the same commands at every position and the device can submit a kept
 * recording of it (vk_device.h, replays). */
struct rope_table {
    float base;
    int n_rot;
    uint32_t pos_at, pos0;
    struct vk_buffer buf;
};

struct vk_backend {
    struct backend base;     /* first: a struct backend * points here */
    struct vk_device *dev;
    struct vk_model *weights;
    char name[300];
    /* The matmul forms: cooperating workgroups on a GPU, one form per
     * batch size (vk_matmul_forms), or one invocation per row on a CPU-backed
     * device (vk_shaders.h; then only matmul[0] is made). */
    bool matmul_rowwise;
    struct vk_pipeline matmul[N_GPU_FORMS][N_MATMUL];
    /* The forms with the norm folded in, where has_norm_form says. */
    bool has_norm_form[N_GPU_FORMS];
    struct vk_pipeline matmul_norm[N_GPU_FORMS][N_MATMUL];
    /* The decode forms, plain and with the norm folded in, where the
     * device's subgroups are their width (has_decode_form). */
    bool has_decode_form;
    struct vk_pipeline matmul_dec[2][N_MATMUL];
    /* The int8 tile form of Q8_0, where the device has int8 tiles
     * (has_mma): prefill's batches of the matrices that fit it (mma_fits). */
    bool has_mma;
    struct vk_pipeline matmul_mma[VK_MMA_FORMS];
    /* The integer forms of Q8_0, plain and with the norm folded in, by
     * batch size (vk_qx_forms), where the device runs them (has_qx): the
     * Q8_0 products of normed x in batches of up to VK_QX_MAX_BATCH tokens
     * (qx_takes). */
    bool has_qx;
    int qx_min_cols;   /* VK_QX_MIN_COLS, or 0 where KAKEYA_VK_QX=1 */
    struct vk_pipeline matmul_qx[2][VK_QX_FORMS];
    struct vk_pipeline rmsnorm, rmsnorm_add, rope, add, gated_act, kv_store,
        rope_kv_store, rope_kv_store_norm, attention, attention_rope, argmax;
    /* attention and attention_rope for 2 and 4 query heads of a kv head a
     * workgroup (attention_h2, attention_rope_h2, ...), where
     * has_heads_forms: GPUs whose subgroups are at least
     * VK_ATTENTION_HEADS_SUBGROUP wide (attention_heads) */
    bool has_heads_forms;
    struct vk_pipeline attention_rope_h2, attention_rope_h4, attention_h2,
        attention_h4;
    /* Host data of the pass being recorded (upload_alloc). The GPU may read
     * a region as soon as the copy that reads it is recorded, since chunks
     * of the pass are submitted while it is recorded; that is safe because
     * the host fills each region before recording its copy (vkb_embed,
     * rope_table), regions are handed out once per pass and never written
     * again in it, and upload_used goes back to 0 only in vkb_begin, after
     * the previous pass's vk_submit_wait waited for all its chunks (also
     * when it failed). A vkQueueSubmit makes the host's earlier writes to
     * this coherent memory visible to the work it submits. */
    struct vk_buffer upload;
    size_t upload_used;
    struct rope_table rope_tables[MAX_ROPE_TABLES];
    int n_rope_tables;        /* filled in this pass */
    int max_tokens, head_dim; /* what backend_reserve sized for */
    struct vk_buffer readback;
    /* The greedy choices of a pass's rows (vkb_read_argmax): argmax.comp's
     * pairs on the device and on their way back, then, once the pass is
     * done (vkb_end), each row's choice made from them (argmax_rows rows
     * of argmax_groups pairs, 0 when the pass asked for none). */
    struct vk_buffer pairs, pairs_readback;
    int32_t *ids;
    int ids_cap, argmax_rows;
    uint32_t argmax_groups;
    /* Draws made where the logits are (vkb_read_sample), where the device
     * runs sample.comp (has_sample): its scratch weights, the rows'
     * uniforms, the tokens, its bins and sums (state), and the tokens on
     * their way back. */
    bool has_sample;
    struct vk_pipeline sample;
    struct vk_buffer sample_w, sample_u, sample_tok, sample_state,
        sample_readback;
    /* attention_rope's partials of the rows it splits, and per row and
     * head how many of a row's workgroups are done, zero between passes
     * (vk_shaders.h; reserve_splits) */
    struct vk_buffer splits, split_counts;
    /* The bound cache: per layer, its key and value rows; the batch's
     * staged rows. */
    struct kv_cache *kv;
    int n_kv_layers;          /* kept: the cache may be freed before us */
    struct vk_buffer *kv_k, *kv_v;
    struct vk_buffer stage_k, stage_v;
    /* A problem met while recording: be_end() reports it. */
    bool failed;
    struct kk_error fail;
};

static inline struct vk_backend *vkb(struct backend *be)
{
    return (struct vk_backend *)be;
}

static inline struct vk_buffer *buf(const struct be_tensor *t)
{
    return t->device;
}

/* Remembers the first problem of a pass; ops after it record nothing. */
static inline void pass_fail(struct vk_backend *be, const char *msg)
{
    if (!be->failed)
        kk_fail(&be->fail, "%s", msg);
    be->failed = true;
}

/* ---- dispatch helpers ---- */

static inline void dispatch(struct vk_backend *be,
                            const struct vk_pipeline *p,
                            const struct vk_buffer *const *bufs,
                            const void *push, uint32_t gx, uint32_t gy,
                            uint32_t gz)
{
    if (!be->failed)
        vk_dispatch(be->dev, p, bufs, push, gx, gy, gz);
}

static inline void copy(struct vk_backend *be, const struct vk_buffer *src,
                        VkDeviceSize src_off, const struct vk_buffer *dst,
                        VkDeviceSize dst_off, VkDeviceSize bytes)
{
    if (!be->failed && bytes > 0)
        vk_copy(be->dev, src, src_off, dst, dst_off, bytes);
}

static inline uint32_t groups_of(int64_t count, int64_t per)
{
    return (uint32_t)((count + per - 1) / per);
}

/* Elementwise shaders loop over the grid, so a capped grid covers all. */
static inline uint32_t elementwise_groups(int64_t count)
{
    uint32_t g = groups_of(count, 256);
    return g > ELEMWISE_MAX_GROUPS ? ELEMWISE_MAX_GROUPS : g ? g : 1;
}

/* Space for `bytes` of host data in this pass's upload buffer; its offset,
 * or -1 (and the pass fails) when backend_reserve sized too little. A
 * failed pass gets none, so nothing is written where work of a pass that
 * failed to finish (a timeout) might still read. */
static inline int64_t upload_alloc(struct vk_backend *be, size_t bytes)
{
    if (be->failed)
        return -1;
    size_t off = (be->upload_used + 15) / 16 * 16;
    if (off + bytes > be->upload.size) {
        pass_fail(be, "internal: a pass needs more upload space than "
                      "backend_reserve made");
        return -1;
    }
    be->upload_used = off + bytes;
    return (int64_t)off;
}

/* ---- ops the other files implement (backend.h says what each does) ---- */

/* vk_matmul.c */
void vkb_matmul(struct backend *base, const struct weight *w,
                const struct be_tensor *x, const struct be_norm *norm, int n,
                struct be_tensor *y);
void vkb_matmul_multi(struct backend *base, int count,
                      const struct weight *const *w,
                      const struct be_tensor *x, const struct be_norm *norm,
                      int n, struct be_tensor *const *y);
void vkb_matmul_add(struct backend *base, const struct weight *w,
                    const struct be_tensor *x, int n, struct be_tensor *tmp,
                    struct be_tensor *acc);
void vkb_gated_matmul(struct backend *base, const struct weight *w_gate,
                      const struct weight *w_up, const struct be_tensor *x,
                      const struct be_norm *norm, int n,
                      struct be_tensor *gate, struct be_tensor *up,
                      bool use_gelu);

/* vk_attention.c */
int vkb_bind_kv(struct backend *base, struct kv_cache *kv,
                struct kk_error *err);
int vkb_kv_pull(struct backend *base, struct kv_cache *kv,
                struct kk_error *err);
int vkb_kv_push(struct backend *base, struct kv_cache *kv,
                struct kk_error *err);
void vkb_rope(struct backend *base, struct be_tensor *x, int n, int n_heads,
              int head_dim, int n_rot, const int32_t *pos, float rope_base,
              enum rope_style style);
void vkb_kv_store(struct backend *base, struct kv_cache *kv, int il, int pos0,
                  int n, const struct be_tensor *k, const struct be_tensor *v);
void vkb_rope_kv_store(struct backend *base, struct kv_cache *kv, int il,
                       int pos0, int n, struct be_tensor *q, int n_head,
                       struct be_tensor *k, const struct be_tensor *v,
                       int n_head_kv, int head_dim,
                       const struct be_rope *rope);
void vkb_kv_commit(struct backend *base, struct kv_cache *kv);
void vkb_attention(struct backend *base, struct be_tensor *out,
                   const struct be_tensor *q, const struct kv_cache *kv,
                   int il, int n, int pos0, int n_head, int n_head_kv,
                   int head_dim, int window, float scale);
void vkb_rope_attention(struct backend *base, struct kv_cache *kv, int il,
                        int pos0, int n, struct be_tensor *q, int n_head,
                        struct be_tensor *k, const struct be_tensor *v,
                        int n_head_kv, int head_dim,
                        const struct be_rope *rope, struct be_tensor *out,
                        int window, float scale);

/* backend_vulkan.c: rmsnorm's dispatch (matmul_input norms x with it where
 * the forms do not fold the norm); the KV cache's device buffers freed. */
void vkb_rmsnorm(struct backend *base, struct be_tensor *y,
                 const struct be_tensor *x, const float *weight, int n_groups,
                 int dim, float eps);
void vkb_free_kv_buffers(struct vk_backend *be);

#endif
