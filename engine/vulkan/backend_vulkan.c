/* backend_vulkan.c — the op set of backend.h as Vulkan compute shaders.
 *
 * Weights (vk_model), activations (one device buffer per be_tensor) and the
 * KV cache's rows live in device memory. An op does not run when called: it
 * records a dispatch (or a copy), which the device submits in chunks while
 * the pass is still being recorded (vk_device.h), and be_end() submits the
 * rest and waits, so the host waits for the GPU once a pass and nothing
 * comes back before the end. The host prepares the little a pass needs
 * from it — the embedding rows of its tokens and the RoPE angles, computed
 * by the same code as on the CPU — in an upload buffer, copied to the device
 * at the start of the pass; only the logits rows asked for come back.
 *
 * The KV cache keeps its bookkeeping (slots, ring positions, what is
 * staged) in struct kv_cache on the host, exactly as on the CPU; only its
 * rows are here. kv_commit_plan() tells which staged rows go to which slots,
 * and they are moved with device copies — except where a batch's rows can
 * be written straight into their slots (kv_in_place: every batch of a
 * layer that keeps every position, a batch no longer than a ring's slack),
 * and the cache serves as its own stage (32 copies fewer a decode pass of
 * a 16-layer model, each a wait between dispatches). The
 * host rows of the cache are filled only for checkpoints (backend_kv_pull
 * / backend_kv_push). */
#include "backend_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "kv.h"
#include "vk_device.h"
#include "vk_model.h"
#include "vk_shaders.h"

/* The attention shader keeps one head of a query in registers. */
enum { MAX_HEAD_DIM = 256 };
/* Distinct RoPE tables one pass may use (gemma3 has two bases). */
enum { MAX_ROPE_TABLES = 4 };

static const struct {
    uint32_t type;
    const char *name;   /* the shader is matmul_<name> or matmul_rows_<name> */
} matmul_shaders[] = {
    {KK_F32, "f32"},   {KK_F16, "f16"},   {KK_BF16, "bf16"},
    {KK_Q8_0, "q8_0"}, {KK_Q4_0, "q4_0"}, {KK_Q5_0, "q5_0"},
    {KK_Q4_K, "q4_k"}, {KK_Q6_K, "q6_k"},
};
enum { N_MATMUL = sizeof matmul_shaders / sizeof matmul_shaders[0] };

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
    struct vk_pipeline matmul_mma;
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

static struct vk_backend *vkb(struct backend *be)
{
    return (struct vk_backend *)be;
}

static struct vk_buffer *buf(const struct be_tensor *t)
{
    return t->device;
}

/* Remembers the first problem of a pass; ops after it record nothing. */
static void pass_fail(struct vk_backend *be, const char *msg)
{
    if (!be->failed)
        kk_fail(&be->fail, "%s", msg);
    be->failed = true;
}

/* Shaders read 32-bit words; an unaligned row's last bytes may sit in a
 * word past its end. */
static VkDeviceSize padded(size_t bytes)
{
    return (bytes + 3) / 4 * 4 + 4;
}

/* ---- dispatch helpers ---- */

static void dispatch(struct vk_backend *be, const struct vk_pipeline *p,
                     const struct vk_buffer *const *bufs, const void *push,
                     uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!be->failed)
        vk_dispatch(be->dev, p, bufs, push, gx, gy, gz);
}

static void copy(struct vk_backend *be, const struct vk_buffer *src,
                 VkDeviceSize src_off, const struct vk_buffer *dst,
                 VkDeviceSize dst_off, VkDeviceSize bytes)
{
    if (!be->failed && bytes > 0)
        vk_copy(be->dev, src, src_off, dst, dst_off, bytes);
}

static uint32_t groups_of(int64_t count, int64_t per)
{
    return (uint32_t)((count + per - 1) / per);
}

/* Elementwise shaders loop over the grid, so a capped grid covers all. */
static uint32_t elementwise_groups(int64_t count)
{
    uint32_t g = groups_of(count, 256);
    return g > ELEMWISE_MAX_GROUPS ? ELEMWISE_MAX_GROUPS : g ? g : 1;
}

/* Space for `bytes` of host data in this pass's upload buffer; its offset,
 * or -1 (and the pass fails) when backend_reserve sized too little. A
 * failed pass gets none, so nothing is written where work of a pass that
 * failed to finish (a timeout) might still read. */
static int64_t upload_alloc(struct vk_backend *be, size_t bytes)
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

/* ---- the backend ---- */

static const struct backend_ops vk_ops;

/* The pipeline of a built-in shader with n_bindings storage bindings:
 * arrays of count[i] buffers, or single buffers where count is NULL. */
static int make_pipeline_arrays(struct vk_backend *be, const char *shader,
                                int n_bindings, const int *count,
                                uint32_t push_bytes, struct vk_pipeline *out,
                                struct kk_error *err)
{
    const struct vk_spirv *code = vk_shader_find(shader);
    if (!code)
        return kk_fail(err, "internal: shader '%s' is not in this build",
                       shader);
    if (count ? vk_pipeline_new_arrays(be->dev, code->code, code->bytes,
                                       n_bindings, count, push_bytes, out,
                                       err)
              : vk_pipeline_new(be->dev, code->code, code->bytes, n_bindings,
                                push_bytes, out, err)) {
        kk_error_prefix(err, shader);
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", shader);
    return 0;
}

static int make_pipeline(struct vk_backend *be, const char *shader,
                         int n_buffers, uint32_t push_bytes,
                         struct vk_pipeline *out, struct kk_error *err)
{
    return make_pipeline_arrays(be, shader, n_buffers, NULL, push_bytes, out,
                                err);
}

/* Every matmul shader's bindings: W[MM_MAX_MATS], X, Y[MM_MAX_MATS], NORM. */
static const int matmul_bindings[MM_BINDINGS] = {MM_MAX_MATS, 1, MM_MAX_MATS,
                                                 1};

/* matmul_<form><type> for every weight type into ps. */
static int make_matmul_pipelines(struct vk_backend *be, const char *form,
                                 struct vk_pipeline *ps, struct kk_error *err)
{
    for (int i = 0; i < N_MATMUL; i++) {
        char name[64];
        snprintf(name, sizeof name, "matmul_%s%s", form,
                 matmul_shaders[i].name);
        if (make_pipeline_arrays(be, name, MM_BINDINGS, matmul_bindings,
                                 sizeof(struct vk_push_matmul), &ps[i], err))
            return -1;
    }
    return 0;
}

/* attention_h2, _h4, attention_rope_h2 and _h4 where the device takes them
 * (has_heads_forms): a GPU whose subgroups are wide enough. They are a
 * speed-up, not a need: a device that cannot make them (say, with less
 * shared memory than attention_rope_h4's 45 KiB) runs the one-head forms
 * alone. */
static void make_heads_pipelines(struct vk_backend *be, bool rowwise)
{
    be->has_heads_forms = !rowwise && vk_device_subgroup_size(be->dev) >=
                                         VK_ATTENTION_HEADS_SUBGROUP;
    if (!be->has_heads_forms)
        return;
    const struct {
        const char *shader;
        int n_buffers;
        struct vk_pipeline *out;
    } forms[] = {{"attention_h2", 7, &be->attention_h2},
                 {"attention_h4", 7, &be->attention_h4},
                 {"attention_rope_h2", 11, &be->attention_rope_h2},
                 {"attention_rope_h4", 11, &be->attention_rope_h4}};
    const size_t n = sizeof forms / sizeof forms[0];
    struct kk_error ignored;
    for (size_t i = 0; i < n && be->has_heads_forms; i++)
        be->has_heads_forms =
            !make_pipeline(be, forms[i].shader, forms[i].n_buffers,
                           sizeof(struct vk_push_attention), forms[i].out,
                           &ignored);
    for (size_t i = 0; i < n && !be->has_heads_forms; i++)
        vk_pipeline_free(be->dev, forms[i].out);
}

/* sample where the device takes it (vk_device_has_int64) unless
 * KAKEYA_VK_SAMPLE=0; a speed-up, not a need: without it the host draws
 * from the logits. */
static void make_sample_pipeline(struct vk_backend *be)
{
    struct kk_error ignored;
    const char *env = getenv("KAKEYA_VK_SAMPLE");
    be->has_sample = !(env && !strcmp(env, "0")) &&
                     vk_device_has_int64(be->dev) &&
                     !make_pipeline(be, "sample", 5,
                                    sizeof(struct vk_push_sample),
                                    &be->sample, &ignored);
}

static int make_pipelines(struct vk_backend *be, struct kk_error *err)
{
    bool rowwise = vk_device_is_cpu(be->dev);
    be->matmul_rowwise = rowwise;
    for (int f = 0; f < (rowwise ? 1 : N_GPU_FORMS); f++) {
        const char *norm = rowwise ? VK_MATMUL_ROWS_NORM_PREFIX
                                   : vk_matmul_forms[f].norm_prefix;
        if (make_matmul_pipelines(be, rowwise ? VK_MATMUL_ROWS_PREFIX
                                              : vk_matmul_forms[f].prefix,
                                  be->matmul[f], err) ||
            (norm && make_matmul_pipelines(be, norm, be->matmul_norm[f], err)))
            return -1;
        be->has_norm_form[f] = norm != NULL;
    }
    be->has_decode_form = !rowwise && vk_device_subgroup_size(be->dev) ==
                                          VK_DECODE_SUBGROUP;
    if (be->has_decode_form &&
        (make_matmul_pipelines(be, VK_MATMUL_DECODE_PREFIX, be->matmul_dec[0],
                               err) ||
         make_matmul_pipelines(be, VK_MATMUL_DECODE_NORM_PREFIX,
                               be->matmul_dec[1], err)))
        return -1;
    be->has_mma = vk_device_has_int8_mma(be->dev);
    if (be->has_mma &&
        make_pipeline_arrays(be, "matmul_" VK_MATMUL_MMA_PREFIX "q8_0",
                             MM_BINDINGS, matmul_bindings,
                             sizeof(struct vk_push_matmul), &be->matmul_mma,
                             err))
        return -1;
    /* Where invocations are a CPU's SIMD lanes (lavapipe) the integer forms
     * run 3x slower than the rowwise ones (llama256 Q8_0, decode 26 tok/s
     * against 88), and on narrow rows they do not pay (VK_QX_MIN_COLS):
     * KAKEYA_VK_QX=1 asks for them there too (tests: the forward pass on
     * lavapipe then mixes them and the float forms as a GPU does), 0 for
     * none at all (to compare). */
    const char *qx_env = getenv("KAKEYA_VK_QX");
    const bool qx_always = qx_env && !strcmp(qx_env, "1");
    const bool qx_never = qx_env && !strcmp(qx_env, "0");
    be->has_qx = vk_device_has_int_dot(be->dev) && !qx_never &&
                 (!rowwise || qx_always);
    be->qx_min_cols = qx_always ? 0 : VK_QX_MIN_COLS;
    for (int f = 0; be->has_qx && f < VK_QX_FORMS; f++)
        for (int k = 0; k < 2; k++) {
            char name[64];
            vk_qx_shader_name(name, sizeof name, f, k);
            if (make_pipeline_arrays(be, name, MM_BINDINGS, matmul_bindings,
                                     sizeof(struct vk_push_matmul),
                                     &be->matmul_qx[k][f], err))
                return -1;
        }
    return make_pipeline(be, "rmsnorm", 3, sizeof(struct vk_push_rmsnorm),
                         &be->rmsnorm, err) ||
           make_pipeline(be, "rmsnorm_add", 3,
                         sizeof(struct vk_push_rmsnorm), &be->rmsnorm_add,
                         err) ||
           make_pipeline(be, "rope", 2, sizeof(struct vk_push_rope),
                         &be->rope, err) ||
           make_pipeline(be, "add", 2, sizeof(struct vk_push_add), &be->add,
                         err) ||
           make_pipeline(be, "gated_act", 2, sizeof(struct vk_push_gated_act),
                         &be->gated_act, err) ||
           make_pipeline(be, "kv_store", 2, sizeof(struct vk_push_kv_store),
                         &be->kv_store, err) ||
           make_pipeline(be, "rope_kv_store", 6,
                         sizeof(struct vk_push_rope_kv_store),
                         &be->rope_kv_store, err) ||
           make_pipeline(be, "rope_kv_store_norm", 8,
                         sizeof(struct vk_push_rope_kv_store),
                         &be->rope_kv_store_norm, err) ||
           make_pipeline(be, rowwise ? "attention_cpu" : "attention", 7,
                         sizeof(struct vk_push_attention), &be->attention,
                         err) ||
           make_pipeline(be, rowwise ? "attention_rope_cpu" : "attention_rope",
                         11, sizeof(struct vk_push_attention),
                         &be->attention_rope, err) ||
           make_pipeline(be, "argmax", 2, sizeof(struct vk_push_argmax),
                         &be->argmax, err)
               ? -1
               : (make_heads_pipelines(be, rowwise), make_sample_pipeline(be),
                  0);
}

static int matmul_index(uint32_t type)
{
    for (int i = 0; i < N_MATMUL; i++)
        if (matmul_shaders[i].type == type)
            return i;
    return -1;
}

static bool layer_types_supported(const struct layer *L)
{
    const struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                 &L->ffn_gate, &L->ffn_up, &L->ffn_down};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (matmul_index(ws[i]->type) < 0)
            return false;
    return true;
}

/* What the shaders cannot run is refused before anything is uploaded. */
static int check_model(const struct model *m, struct kk_error *err)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->head_dim > MAX_HEAD_DIM)
        return kk_fail(err, "this model's attention heads have %d dimensions "
                            "and the Vulkan backend handles at most %d; use "
                            "--backend cpu", hp->head_dim, MAX_HEAD_DIM);
    bool ok = matmul_index(m->output.type) >= 0;
    for (int il = 0; ok && il < hp->n_layer; il++)
        ok = layer_types_supported(&m->layers[il]);
    if (!ok)
        return kk_fail(err, "the Vulkan backend has no kernel for one of this "
                            "model's weight types (it runs F32, F16, BF16, "
                            "Q8_0, Q4_0, Q5_0, Q4_K and Q6_K); use --backend "
                            "cpu");
    return 0;
}

int backend_vulkan_new(int device, const struct model *m,
                       struct backend **out, struct kk_error *err)
{
    *out = NULL;
    if (check_model(m, err))
        return -1;
    struct vk_backend *be = calloc(1, sizeof *be);
    if (!be)
        return kk_fail(err, "out of memory");
    be->base.ops = &vk_ops;
    if (vk_device_open(device, &be->dev, err)) {
        free(be);
        return -1;
    }
    snprintf(be->name, sizeof be->name, "vulkan: %s", vk_device_name(be->dev));
    if (make_pipelines(be, err) ||
        vk_model_upload(be->dev, m, &be->weights, err)) {
        be->base.ops->free(&be->base);
        return -1;
    }
    *out = &be->base;
    return 0;
}

static void free_kv_buffers(struct vk_backend *be)
{
    for (int il = 0; il < be->n_kv_layers; il++) {
        if (be->kv_k)
            vk_buffer_free(be->dev, &be->kv_k[il]);
        if (be->kv_v)
            vk_buffer_free(be->dev, &be->kv_v[il]);
    }
    free(be->kv_k);
    free(be->kv_v);
    be->kv_k = be->kv_v = NULL;
    be->n_kv_layers = 0;
    vk_buffer_free(be->dev, &be->stage_k);
    vk_buffer_free(be->dev, &be->stage_v);
    be->kv = NULL;
}

static void vkb_free(struct backend *base)
{
    struct vk_backend *be = vkb(base);
    free_kv_buffers(be);
    for (int i = 0; i < MAX_ROPE_TABLES; i++)
        vk_buffer_free(be->dev, &be->rope_tables[i].buf);
    vk_buffer_free(be->dev, &be->upload);
    vk_buffer_free(be->dev, &be->readback);
    vk_buffer_free(be->dev, &be->pairs);
    vk_buffer_free(be->dev, &be->pairs_readback);
    vk_buffer_free(be->dev, &be->sample_w);
    vk_buffer_free(be->dev, &be->sample_u);
    vk_buffer_free(be->dev, &be->sample_tok);
    vk_buffer_free(be->dev, &be->sample_state);
    vk_buffer_free(be->dev, &be->sample_readback);
    vk_buffer_free(be->dev, &be->splits);
    vk_buffer_free(be->dev, &be->split_counts);
    free(be->ids);
    struct vk_pipeline *ps[] = {&be->rmsnorm, &be->rmsnorm_add, &be->rope,
                                &be->add, &be->gated_act, &be->kv_store,
                                &be->rope_kv_store, &be->rope_kv_store_norm,
                                &be->attention, &be->attention_rope,
                                &be->argmax,
                                &be->sample,
                                &be->attention_rope_h2,
                                &be->attention_rope_h4, &be->attention_h2,
                                &be->attention_h4};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        vk_pipeline_free(be->dev, ps[i]);
    for (int f = 0; f < N_GPU_FORMS; f++)
        for (int i = 0; i < N_MATMUL; i++) {
            vk_pipeline_free(be->dev, &be->matmul[f][i]);
            vk_pipeline_free(be->dev, &be->matmul_norm[f][i]);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N_MATMUL; i++)
            vk_pipeline_free(be->dev, &be->matmul_dec[k][i]);
    vk_pipeline_free(be->dev, &be->matmul_mma);
    for (int k = 0; k < 2; k++)
        for (int f = 0; f < VK_QX_FORMS; f++)
            vk_pipeline_free(be->dev, &be->matmul_qx[k][f]);
    vk_model_free(be->dev, be->weights);
    vk_device_close(be->dev);
    free(be);
}

static const char *vkb_name(const struct backend *be)
{
    return ((const struct vk_backend *)be)->name;
}

static int vkb_threads(const struct backend *be)
{
    (void)be;
    return 1;
}

/* Room for attention_rope's partials (vk_shaders.h): a verify block's
 * rows of at most h = max_cols / head_dim heads, each head with the splits
 * of a row that sees all n_ctx positions, and no more than
 * max(h, VK_ATTENTION_SPLIT_HEADS) splits a row in all; and its counts of
 * split workgroups done, a word per row and head, zeroed here once (each
 * dispatch leaves them zero). */
static int reserve_splits(struct vk_backend *be, int n_ctx, int64_t max_cols,
                          int head_dim, struct kk_error *err)
{
    const int64_t heads = max_cols / head_dim;
    const int64_t per_head = groups_of(n_ctx, VK_ATTENTION_SPLIT_KEYS);
    const int64_t cap = heads > VK_ATTENTION_SPLIT_HEADS
                            ? heads : VK_ATTENTION_SPLIT_HEADS;
    const int64_t per_row = heads * per_head < cap ? heads * per_head : cap;
    const size_t bytes = (size_t)VK_ROPE_ATTENTION_ROWS * (size_t)per_row *
                         (size_t)(head_dim + 2) * sizeof(float);
    if (be->splits.buf && bytes <= be->splits.size)
        return 0;
    vk_buffer_free(be->dev, &be->splits);
    vk_buffer_free(be->dev, &be->split_counts);
    const size_t counts = (size_t)VK_ROPE_ATTENTION_ROWS * (size_t)heads *
                          sizeof(uint32_t);
    uint32_t *zeros = calloc(1, counts);
    if (!zeros)
        return kk_fail(err, "out of memory");
    const int rc =
        vk_buffer_new(be->dev, bytes, VK_MEM_DEVICE, &be->splits, err) ||
        vk_buffer_new(be->dev, counts, VK_MEM_DEVICE, &be->split_counts,
                      err) ||
        vk_upload(be->dev, &be->split_counts, 0, zeros, counts, err);
    free(zeros);
    return rc ? -1 : 0;
}

/* A pass's host data: its embedding rows (max_tokens x max_cols), its
 * position tables, and the uniforms of its draws (one a row), each region
 * aligned to 16 bytes (upload_alloc). */
static size_t upload_bytes(int max_tokens, int64_t max_cols, int head_dim)
{
    return (size_t)max_tokens *
               ((size_t)(max_cols + MAX_ROPE_TABLES * head_dim) *
                    sizeof(float) + sizeof(uint64_t)) +
           32 * (MAX_ROPE_TABLES + 2);
}

/* The upload buffer (upload_bytes); each position table's buffer holds
 * max_tokens x head_dim angles and a first position (struct rope_table).
 * Attention's partials get room for n_ctx positions (reserve_splits). */
static int vkb_reserve(struct backend *base, int max_tokens, int64_t max_cols,
                       int n_ctx, int head_dim, int group,
                       struct kk_error *err)
{
    (void)group;
    struct vk_backend *be = vkb(base);
    if (reserve_splits(be, n_ctx, max_cols, head_dim, err))
        return -1;
    if (max_tokens <= be->max_tokens && head_dim <= be->head_dim &&
        upload_bytes(max_tokens, max_cols, head_dim) <= be->upload.size)
        return 0;
    max_tokens = max_tokens > be->max_tokens ? max_tokens : be->max_tokens;
    head_dim = head_dim > be->head_dim ? head_dim : be->head_dim;
    size_t upload = upload_bytes(max_tokens, max_cols, head_dim);
    vk_buffer_free(be->dev, &be->upload);
    if (vk_buffer_new(be->dev, upload, VK_MEM_UPLOAD, &be->upload, err))
        return -1;
    for (int i = 0; i < MAX_ROPE_TABLES; i++) {
        vk_buffer_free(be->dev, &be->rope_tables[i].buf);
        if (vk_buffer_new(be->dev,
                          ((size_t)max_tokens * (size_t)head_dim + 1) *
                              sizeof(float),
                          VK_MEM_DEVICE, &be->rope_tables[i].buf, err))
            return -1;
    }
    be->max_tokens = max_tokens;
    be->head_dim = head_dim;
    return 0;
}

/* ---- the KV cache's rows ---- */

/* Fails, saying what to do, when a layer's keys (or values) are more than
 * the device binds at once: attention binds each layer's rows as one
 * storage buffer, and its first dispatch would be refused mid-reply. A
 * context long enough for that (lavapipe binds 128 MiB: two million f16
 * rows of a small model) is the user's to shorten, or to store smaller. */
static int check_kv_binds(const struct vk_backend *be,
                          const struct kv_cache *kv, struct kk_error *err)
{
    int most = 0;
    for (int il = 0; il < kv->n_layer; il++)
        if (kv->layers[il].capacity > most)
            most = kv->layers[il].capacity;
    const VkDeviceSize bytes = padded((size_t)most * kv->row_bytes);
    if (vk_device_binds(be->dev, bytes))
        return 0;
    /* padded() adds up to 7 bytes to a layer's rows */
    const uint64_t fits =
        (vk_device_max_buffer_range(be->dev) - 8) / kv->row_bytes;
    const struct vk_range_text r = vk_device_range_text(be->dev, bytes);
    return kk_fail(err, "the KV cache on the GPU: a layer's %s keys for %d "
                   "positions take %s, more than %s binds at once (%s, its "
                   "maxStorageBufferRange): use --ctx %llu or less%s, or "
                   "--backend cpu",
                   kv_type_name(kv->type), most, r.size,
                   vk_device_name(be->dev), r.limit, (unsigned long long)fits,
                   kv->type == KV_Q8_0 ? "" : ", or --kv q8_0 (smaller rows)");
}

static int vkb_bind_kv(struct backend *base, struct kv_cache *kv,
                       struct kk_error *err)
{
    struct vk_backend *be = vkb(base);
    free_kv_buffers(be);
    if (check_kv_binds(be, kv, err))
        return -1;
    be->kv = kv;
    be->kv_k = calloc((size_t)kv->n_layer, sizeof *be->kv_k);
    be->kv_v = calloc((size_t)kv->n_layer, sizeof *be->kv_v);
    if (!be->kv_k || !be->kv_v) {
        free_kv_buffers(be);
        return kk_fail(err, "out of memory");
    }
    be->n_kv_layers = kv->n_layer;
    for (int il = 0; il < kv->n_layer; il++) {
        size_t bytes = (size_t)kv->layers[il].capacity * kv->row_bytes;
        if (vk_buffer_new(be->dev, padded(bytes), VK_MEM_DEVICE,
                          &be->kv_k[il], err) ||
            vk_buffer_new(be->dev, padded(bytes), VK_MEM_DEVICE,
                          &be->kv_v[il], err))
            goto fail;
    }
    size_t stage = (size_t)kv->max_batch * kv->row_bytes;
    if (vk_buffer_new(be->dev, padded(stage), VK_MEM_DEVICE, &be->stage_k,
                      err) ||
        vk_buffer_new(be->dev, padded(stage), VK_MEM_DEVICE, &be->stage_v,
                      err))
        goto fail;
    return 0;
fail:
    free_kv_buffers(be);
    kk_error_prefix(err, "the KV cache on the GPU (try a smaller --ctx or "
                         "--kv q8_0)");
    return -1;
}

/* Every layer's key and value rows between the device and kv's host rows
 * (checkpoints): to the host, or back to the device. */
static int move_kv_rows(struct vk_backend *be, struct kv_cache *kv,
                        bool to_host, struct kk_error *err)
{
    for (int il = 0; il < kv->n_layer; il++) {
        size_t bytes = (size_t)kv->layers[il].capacity * kv->row_bytes;
        struct vk_buffer *dev[] = {&be->kv_k[il], &be->kv_v[il]};
        uint8_t *host[] = {kv->layers[il].k, kv->layers[il].v};
        for (int i = 0; i < 2; i++)
            if (to_host ? vk_download(be->dev, dev[i], 0, host[i], bytes, err)
                        : vk_upload(be->dev, dev[i], 0, host[i], bytes, err))
                return -1;
    }
    return 0;
}

static int vkb_kv_pull(struct backend *base, struct kv_cache *kv,
                       struct kk_error *err)
{
    return move_kv_rows(vkb(base), kv, true, err);
}

static int vkb_kv_push(struct backend *base, struct kv_cache *kv,
                       struct kk_error *err)
{
    return move_kv_rows(vkb(base), kv, false, err);
}

/* ---- tensors ---- */

static struct be_tensor *vkb_tensor_new(struct backend *base, int rows,
                                        int64_t width, struct kk_error *err)
{
    struct vk_backend *be = vkb(base);
    struct be_tensor *t = calloc(1, sizeof *t);
    struct vk_buffer *b = calloc(1, sizeof *b);
    if (!t || !b) {
        free(t);
        free(b);
        kk_fail(err, "out of memory");
        return NULL;
    }
    size_t bytes = (size_t)(rows > 0 ? rows : 1) * (size_t)width *
                   sizeof(float);
    if (vk_buffer_new(be->dev, bytes, VK_MEM_DEVICE, b, err)) {
        free(t);
        free(b);
        return NULL;
    }
    t->rows = rows;
    t->width = width;
    t->device = b;
    return t;
}

static void vkb_tensor_free(struct backend *base, struct be_tensor *t)
{
    vk_buffer_free(vkb(base)->dev, buf(t));
    free(t->device);
    free(t);
}

/* ---- a pass ---- */

static void vkb_begin(struct backend *base)
{
    struct vk_backend *be = vkb(base);
    be->failed = false;
    be->upload_used = 0;
    be->n_rope_tables = 0;
    be->argmax_rows = 0;
    if (vk_begin(be->dev, &be->fail))
        be->failed = true;
}

static int vkb_end(struct backend *base, struct kk_error *err)
{
    struct vk_backend *be = vkb(base);
    struct kk_error submit;
    int rc = vk_submit_wait(be->dev, &submit);
    if (be->failed) {
        if (err)
            *err = be->fail;
        return -1;
    }
    if (rc && err)
        *err = submit;
    const uint32_t *pairs = be->pairs_readback.mapped;
    for (int r = 0; rc == 0 && r < be->argmax_rows; r++)
        be->ids[r] = vk_argmax_choose(
            pairs + 2 * (size_t)r * be->argmax_groups, be->argmax_groups);
    return rc;
}

/* A buffer of a read (in `where` memory) of at least `need` bytes: *b, or,
 * when that is shorter, a new one of `size` bytes in its place; false
 * (the pass failed) when none can be made. A read's buffers are sized for
 * all of its tensor's rows: host-visible memory is slow to allocate (it is
 * pinned), so it is made once per size of the tensor, not per read. A pass
 * reads back once (forward.c), so a buffer replaced here was last used by
 * an earlier pass, which its be_end waited for; a second, larger read in
 * one pass would free it under the first read's copy. */
static bool read_buffer(struct vk_backend *be, struct vk_buffer *b,
                        size_t need, size_t size, enum vk_memory where)
{
    if (b->size >= need)
        return true;
    vk_buffer_free(be->dev, b);
    if (vk_buffer_new(be->dev, size, where, b, &be->fail)) {
        be->failed = true;
        return false;
    }
    return true;
}

static const float *vkb_read(struct backend *base, const struct be_tensor *t,
                             int rows)
{
    struct vk_backend *be = vkb(base);
    size_t bytes = (size_t)rows * (size_t)t->width * sizeof(float);
    size_t whole = (size_t)t->rows * (size_t)t->width * sizeof(float);
    if (!read_buffer(be, &be->readback, bytes, whole > bytes ? whole : bytes,
                     VK_MEM_READBACK))
        return NULL;
    copy(be, buf(t), 0, &be->readback, 0, bytes);
    return be->readback.mapped;
}

/* Each row's greedy choice, made where the logits are (argmax.comp's
 * pairs, a few hundred bytes a row, come back and vkb_end makes the
 * choices from them) instead of the vocabulary's floats: 0.5 MB a token
 * for a 128k vocabulary, 4 MB for a verify block of 8. */
static const int32_t *vkb_read_argmax(struct backend *base,
                                      const struct be_tensor *t, int rows)
{
    struct vk_backend *be = vkb(base);
    const uint32_t groups = groups_of(t->width, VK_ARGMAX_SPAN);
    const size_t bytes = (size_t)t->rows * groups * 2 * sizeof(uint32_t);
    if (!read_buffer(be, &be->pairs, bytes, bytes, VK_MEM_DEVICE) ||
        !read_buffer(be, &be->pairs_readback, bytes, bytes, VK_MEM_READBACK))
        return NULL;
    if (be->ids_cap < t->rows) {
        int32_t *ids = realloc(be->ids, (size_t)t->rows * sizeof *ids);
        if (!ids) {
            pass_fail(be, "out of memory for the greedy choices of a pass");
            return NULL;
        }
        be->ids = ids;
        be->ids_cap = t->rows;
    }
    const struct vk_push_argmax pc = {(uint32_t)t->width, (uint32_t)rows};
    const struct vk_buffer *bufs[] = {buf(t), &be->pairs};
    dispatch(be, &be->argmax, bufs, &pc, groups, (uint32_t)rows, 1);
    copy(be, &be->pairs, 0, &be->pairs_readback, 0,
         (VkDeviceSize)rows * groups * 2 * sizeof(uint32_t));
    be->argmax_rows = rows;
    be->argmax_groups = groups;
    return be->ids;
}

static bool vkb_draws_samples(const struct backend *base, int64_t width)
{
    return ((const struct vk_backend *)base)->has_sample &&
           width <= VK_SAMPLE_MAX_WIDTH;
}

/* Each row's draw, made where the logits are (sample.comp): four bytes a
 * row come back instead of the vocabulary's floats, and the host does not
 * sort out a nucleus from them. */
static const int32_t *vkb_read_sample(struct backend *base,
                                      const struct be_tensor *t, int rows,
                                      const struct be_draw *draw)
{
    struct vk_backend *be = vkb(base);
    const size_t whole = (size_t)t->rows * (size_t)t->width * sizeof(float);
    const size_t u_bytes = (size_t)rows * sizeof(uint64_t);
    const size_t tok_bytes = (size_t)t->rows * sizeof(uint32_t);
    const size_t state_bytes =
        (size_t)t->rows * VK_SAMPLE_ROW_WORDS * sizeof(uint32_t);
    if (!read_buffer(be, &be->sample_w, whole, whole, VK_MEM_DEVICE) ||
        !read_buffer(be, &be->sample_u, u_bytes,
                     (size_t)t->rows * sizeof(uint64_t), VK_MEM_DEVICE) ||
        !read_buffer(be, &be->sample_tok, tok_bytes, tok_bytes,
                     VK_MEM_DEVICE) ||
        !read_buffer(be, &be->sample_state, state_bytes, state_bytes,
                     VK_MEM_DEVICE) ||
        !read_buffer(be, &be->sample_readback, tok_bytes, tok_bytes,
                     VK_MEM_READBACK))
        return NULL;
    const int64_t off = upload_alloc(be, u_bytes);
    if (off < 0)
        return NULL;
    uint32_t *u = (uint32_t *)((char *)be->upload.mapped + off);
    for (int r = 0; r < rows; r++) {
        u[2 * r] = (uint32_t)draw->u53[r];
        u[2 * r + 1] = (uint32_t)(draw->u53[r] >> 32);
    }
    copy(be, &be->upload, (VkDeviceSize)off, &be->sample_u, 0, u_bytes);
    const bool keep_all = !(draw->top_p < 1.0f);
    const float top_p = draw->top_p > 0.0f ? draw->top_p : 0.0f;
    struct vk_push_sample pc = {
        (uint32_t)t->width, (uint32_t)rows, draw->temperature,
        keep_all ? 0u : (uint32_t)ldexp(top_p, 32), keep_all, 0};
    const struct vk_buffer *bufs[] = {buf(t), &be->sample_w, &be->sample_u,
                                      &be->sample_tok, &be->sample_state};
    for (int phase = 0; phase < VK_SAMPLE_PHASES; phase++) {
        pc.phase = (uint32_t)phase;
        dispatch(be, &be->sample, bufs, &pc,
                 vk_sample_groups(phase, pc.width), (uint32_t)rows, 1);
    }
    copy(be, &be->sample_tok, 0, &be->sample_readback, 0,
         (VkDeviceSize)rows * sizeof(uint32_t));
    return be->sample_readback.mapped;
}

/* ---- ops ---- */

static void vkb_embed(struct backend *base, const struct weight *w,
                      const int32_t *tokens, int n, float scale,
                      struct be_tensor *x)
{
    struct vk_backend *be = vkb(base);
    size_t bytes = (size_t)n * (size_t)w->n_cols * sizeof(float);
    int64_t off = upload_alloc(be, bytes);
    if (off < 0)
        return;
    embed_rows(w, tokens, n, scale,
               (float *)((char *)be->upload.mapped + off));
    copy(be, &be->upload, (VkDeviceSize)off, buf(x), 0, bytes);
}

/* The form (index into be->matmul) that multiplies a batch of n tokens:
 * on a GPU the smallest that holds it (same bits, fewer partial sums). */
static int matmul_form(const struct vk_backend *be, int n)
{
    int f = 0;
    while (!be->matmul_rowwise && f + 1 < N_GPU_FORMS &&
           n > vk_matmul_forms[f].max_batch)
        f++;
    return f;
}

static void vkb_rmsnorm(struct backend *base, struct be_tensor *y,
                        const struct be_tensor *x, const float *weight,
                        int n_groups, int dim, float eps);

/* The rows of `count` matrices together. */
static int64_t rows_of(int count, const struct weight *const *w)
{
    int64_t rows = 0;
    for (int m = 0; m < count; m++)
        rows += w[m]->n_rows;
    return rows;
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
        (qx == 0 && be->has_norm_form[matmul_form(be, n)])) {
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

/* Whether the int8 tile form takes these matrices: Q8_0 in whole 16-row
 * tiles (vk_shaders.h). */
static bool mma_fits(const struct vk_backend *be, int count,
                     const struct weight *const *w)
{
    bool fits = be->has_mma;
    for (int m = 0; m < count && fits; m++)
        fits = w[m]->type == KK_Q8_0 && w[m]->n_rows % VK_MMA_ROWS == 0;
    return fits;
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
    const int mi = matmul_index(w[0]->type), form = matmul_form(be, n);
    struct vk_push_matmul pc = {.n_cols = (uint32_t)w[0]->n_cols,
                                .row_bytes = (uint32_t)w[0]->row_bytes,
                                .n_tokens = (uint32_t)n, .mode = mode,
                                .use_gelu = use_gelu,
                                .eps = norm ? norm->eps : 0.0f};
    /* (a prefill batch's norm is a dispatch of its own: matmul_input) */
    const bool qx = qx_takes(be, count, w, n, normed);
    const int qf = vk_qx_form_of(n);
    const bool mma = !qx && !norm && n >= VK_MMA_MIN_TOKENS &&
                     mma_fits(be, count, w);
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
        : mma ? VK_MMA_ROWS
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
    /* Row groups past the device's grid limit (a 256k-token vocabulary)
     * spill into z; the shader numbers groups x + z * groups_x. */
    uint32_t max_x = vk_device_max_groups_x(be->dev);
    uint32_t gz = (groups + max_x - 1) / max_x;
    uint32_t gx = (groups + gz - 1) / gz;
    if (mma) {
        dispatch(be, &be->matmul_mma, bufs, &pc, gx,
                 groups_of(n, VK_MMA_TOKENS), gz);
        return;
    }
    dispatch(be, norm ? &be->matmul_norm[form][mi] : &be->matmul[form][mi],
             bufs, &pc, gx,
             groups_of(n, be->matmul_rowwise
                              ? MM_TOKENS
                              : vk_matmul_forms[form].max_tokens),
             gz);
}

static void vkb_matmul(struct backend *base, const struct weight *w,
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
static void vkb_matmul_multi(struct backend *base, int count,
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

static void vkb_matmul_add(struct backend *base, const struct weight *w,
                           const struct be_tensor *x, int n,
                           struct be_tensor *tmp, struct be_tensor *acc)
{
    (void)tmp;
    record_matmul(vkb(base), MM_ADD, 1, &w, x, NULL, false, n, &acc, false);
}

static void vkb_gated_matmul(struct backend *base, const struct weight *w_gate,
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

static void vkb_copy_rows(struct backend *base, struct be_tensor *dst,
                          const struct be_tensor *src, int row0, int n)
{
    size_t row = (size_t)src->width * sizeof(float);
    copy(vkb(base), buf(src), (VkDeviceSize)row0 * row, buf(dst), 0,
         (VkDeviceSize)n * row);
}

/* rmsnorm's dispatch, or rmsnorm_add's (p): y = or += x normed. */
static void norm_dispatch(struct vk_backend *be, const struct vk_pipeline *p,
                          struct be_tensor *y, const struct be_tensor *x,
                          const float *weight, int n_groups, int dim,
                          float eps)
{
    const struct vk_buffer *wb = vk_model_find(be->weights, weight);
    if (!wb) {
        pass_fail(be, "internal: a norm vector is not on the GPU");
        return;
    }
    struct vk_push_rmsnorm pc = {.dim = (uint32_t)dim,
                                 .n_groups = (uint32_t)n_groups, .eps = eps};
    const struct vk_buffer *bufs[] = {buf(x), buf(y), wb};
    dispatch(be, p, bufs, &pc, (uint32_t)n_groups, 1, 1);
}

static void vkb_rmsnorm(struct backend *base, struct be_tensor *y,
                        const struct be_tensor *x, const float *weight,
                        int n_groups, int dim, float eps)
{
    struct vk_backend *be = vkb(base);
    norm_dispatch(be, &be->rmsnorm, y, x, weight, n_groups, dim, eps);
}

static void vkb_norm_add(struct backend *base, struct be_tensor *x,
                         struct be_tensor *y, const float *weight, int n,
                         int dim, float eps)
{
    struct vk_backend *be = vkb(base);
    norm_dispatch(be, &be->rmsnorm_add, x, y, weight, n, dim, eps);
}

/* The table of this pass's n positions pos (pos0, pos0 + 1, ... in a
 * forward pass; pos may be NULL when n_rot is 0) for (base, n_rot), made
 * on first use. A pass is at one set of positions: a table asked for at
 * another first position fails the pass. */
static const struct rope_table *rope_table(struct vk_backend *be, int n,
                                           int n_rot, int pos0,
                                           const int32_t *pos, float base)
{
    for (int i = 0; i < be->n_rope_tables; i++) {
        const struct rope_table *rt = &be->rope_tables[i];
        if (rt->pos0 != (uint32_t)pos0) {
            pass_fail(be, "internal: one pass at two sets of positions");
            return NULL;
        }
        if (rt->base == base && rt->n_rot == n_rot)
            return rt;
    }
    if (be->n_rope_tables == MAX_ROPE_TABLES) {
        pass_fail(be, "internal: more RoPE bases in one pass than tables");
        return NULL;
    }
    const size_t n_angles = (size_t)n * (size_t)n_rot;
    const size_t bytes = (n_angles + 1) * sizeof(float);
    int64_t off = upload_alloc(be, bytes);
    if (off < 0)
        return NULL;
    float *cs = (float *)((char *)be->upload.mapped + off);
    for (int t = 0; t < n && n_rot > 0; t++)
        rope_angles(pos[t], n_rot, base, cs + (size_t)t * (size_t)n_rot);
    const uint32_t first = (uint32_t)pos0;
    memcpy(cs + n_angles, &first, sizeof first);
    struct rope_table *rt = &be->rope_tables[be->n_rope_tables++];
    rt->base = base;
    rt->n_rot = n_rot;
    rt->pos_at = (uint32_t)n_angles;
    rt->pos0 = first;
    copy(be, &be->upload, (VkDeviceSize)off, &rt->buf, 0, bytes);
    return rt;
}

/* A table of this pass at first position pos0, for a shader that reads
 * only that: any of the pass's, or one with no angles. */
static const struct rope_table *pass_positions(struct vk_backend *be, int n,
                                               int pos0)
{
    return be->n_rope_tables > 0
               ? rope_table(be, n, be->rope_tables[0].n_rot, pos0, NULL,
                            be->rope_tables[0].base)
               : rope_table(be, n, 0, pos0, NULL, 0.0f);
}

static void vkb_rope(struct backend *base, struct be_tensor *x, int n,
                     int n_heads, int head_dim, int n_rot, const int32_t *pos,
                     float rope_base, enum rope_style style)
{
    struct vk_backend *be = vkb(base);
    const struct rope_table *rt = rope_table(be, n, n_rot, pos[0], pos,
                                             rope_base);
    if (!rt)
        return;
    const struct vk_buffer *cs = &rt->buf;
    struct vk_push_rope pc = {.n_rows = (uint32_t)n,
                              .n_heads = (uint32_t)n_heads,
                              .head_dim = (uint32_t)head_dim,
                              .n_rot = (uint32_t)n_rot,
                              .style = style == ROPE_NEOX};
    const struct vk_buffer *bufs[] = {buf(x), cs};
    dispatch(be, &be->rope, bufs, &pc,
             groups_of((int64_t)n * n_heads * (n_rot / 2), 64), 1, 1);
}

static void vkb_gated_act(struct backend *base, struct be_tensor *gate,
                          const struct be_tensor *up, int64_t count,
                          bool use_gelu)
{
    struct vk_backend *be = vkb(base);
    struct vk_push_gated_act pc = {.count = (uint32_t)count,
                                   .use_gelu = use_gelu};
    const struct vk_buffer *bufs[] = {buf(gate), buf(up)};
    dispatch(be, &be->gated_act, bufs, &pc, elementwise_groups(count), 1, 1);
}

static void vkb_add(struct backend *base, struct be_tensor *x,
                    const struct be_tensor *y, int64_t count)
{
    struct vk_backend *be = vkb(base);
    struct vk_push_add pc = {.count = (uint32_t)count, .width = 0};
    const struct vk_buffer *bufs[] = {buf(x), buf(y)};
    dispatch(be, &be->add, bufs, &pc, elementwise_groups(count), 1, 1);
}

static void vkb_add_row(struct backend *base, struct be_tensor *x,
                        const float *row, int n, int width)
{
    struct vk_backend *be = vkb(base);
    const struct vk_buffer *rb = vk_model_find(be->weights, row);
    if (!rb) {
        pass_fail(be, "internal: a bias vector is not on the GPU");
        return;
    }
    int64_t count = (int64_t)n * width;
    struct vk_push_add pc = {.count = (uint32_t)count,
                             .width = (uint32_t)width};
    const struct vk_buffer *bufs[] = {buf(x), rb};
    dispatch(be, &be->add, bufs, &pc, elementwise_groups(count), 1, 1);
}

/* Whether layer il's batch of n rows goes straight into its slots, rows
 * starting on a word (so no word of a slot the batch writes holds bytes
 * of one it does not): in a full cache (slot = position, and a query
 * reads no position after its own), or in a ring (or sink+window) when
 * the batch is no longer than its slack — then a row of the batch lands
 * only on a position older than any query of the batch sees, as kv.h's
 * slack argument for commits goes. A longer batch (a prompt) is staged
 * and copied: its last rows may overwrite what its first queries read. */
static bool kv_in_place(const struct kv_cache *kv, int il, int n)
{
    return kv->row_bytes % 4 == 0 &&
           (kv->layers[il].policy == KV_FULL || n <= KV_SLACK);
}

/* Where layer il's batch of n rows is staged (the cache itself when in
 * place), and the shaders' description of that. */
struct kv_stage {
    const struct vk_buffer *k, *v;
    uint32_t in_place, policy, capacity, n_sink;
};

static struct kv_stage stage_of(const struct vk_backend *be,
                                const struct kv_cache *kv, int il, int n)
{
    /* enum kv_policy is full, ring, sink+window: the shaders' 0, 1, 2. */
    const struct kv_layer *L = &kv->layers[il];
    struct kv_stage st = {&be->stage_k, &be->stage_v, 0, (uint32_t)L->policy,
                          (uint32_t)L->capacity, (uint32_t)L->n_sink};
    if (kv_in_place(kv, il, n)) {
        st.k = &be->kv_k[il];
        st.v = &be->kv_v[il];
        st.in_place = 1;
    }
    return st;
}

static void vkb_kv_store(struct backend *base, struct kv_cache *kv, int il,
                         int pos0, int n, const struct be_tensor *k,
                         const struct be_tensor *v)
{
    struct vk_backend *be = vkb(base);
    const struct kv_stage st = stage_of(be, kv, il, n);
    /* enum kv_type is f32, f16, q8_0: the shader's 0, 1, 2. */
    struct vk_push_kv_store pc = {
        .n_rows = (uint32_t)n, .kv_dim = (uint32_t)kv->kv_dim,
        .type = (uint32_t)kv->type, .block = (uint32_t)kv->block,
        .row_bytes = (uint32_t)kv->row_bytes, .in_place = st.in_place,
        .pos0 = (uint32_t)pos0, .policy = st.policy,
        .capacity = st.capacity, .n_sink = st.n_sink,
    };
    uint32_t words = groups_of((int64_t)n * (int64_t)kv->row_bytes, 4);
    const struct vk_buffer *kb[] = {buf(k), st.k};
    const struct vk_buffer *vb[] = {buf(v), st.v};
    dispatch(be, &be->kv_store, kb, &pc, groups_of(words, 64), 1, 1);
    dispatch(be, &be->kv_store, vb, &pc, groups_of(words, 64), 1, 1);
    kv_stage_mark(kv, il, pos0, n);
}

static void vkb_rope_kv_store(struct backend *base, struct kv_cache *kv,
                              int il, int pos0, int n, struct be_tensor *q,
                              int n_head, struct be_tensor *k,
                              const struct be_tensor *v, int n_head_kv,
                              int head_dim, const struct be_rope *rope)
{
    struct vk_backend *be = vkb(base);
    /* Heads normed in this dispatch where its workgroups (one a head) can
     * write whole words of their own, else by rmsnorm dispatches first. */
    const bool fold_norms =
        rope->q_norm && kv->row_bytes % (4 * (size_t)n_head_kv) == 0 &&
        (kv->type != KV_Q8_0 || head_dim % kv->block == 0);
    if (!fold_norms)
        norm_heads(base, rope, q, n_head, k, n_head_kv, n, head_dim);
    const struct rope_table *rt = rope_table(be, n, rope->n_rot, pos0,
                                             rope->pos, rope->base);
    if (!rt)
        return;
    const struct vk_buffer *cs = &rt->buf;
    const struct kv_stage st = stage_of(be, kv, il, n);
    /* enum kv_type is f32, f16, q8_0: the shader's 0, 1, 2. */
    struct vk_push_rope_kv_store pc = {
        .n_rows = (uint32_t)n, .n_head = (uint32_t)n_head,
        .n_head_kv = (uint32_t)n_head_kv, .head_dim = (uint32_t)head_dim,
        .n_rot = (uint32_t)rope->n_rot, .style = rope->style == ROPE_NEOX,
        .type = (uint32_t)kv->type, .block = (uint32_t)kv->block,
        .row_bytes = (uint32_t)kv->row_bytes,
        .in_place = st.in_place, .pos_at = rt->pos_at, .policy = st.policy,
        .capacity = st.capacity, .n_sink = st.n_sink,
        .eps = rope->norm_eps,
    };
    if (fold_norms) {
        const struct vk_buffer *qw = vk_model_find(be->weights, rope->q_norm);
        const struct vk_buffer *kw = vk_model_find(be->weights, rope->k_norm);
        if (!qw || !kw) {
            pass_fail(be, "internal: a q/k norm vector is not on the GPU");
            return;
        }
        const struct vk_buffer *bufs[] = {buf(q), buf(k), buf(v), cs,
                                          st.k,   st.v,   qw,     kw};
        dispatch(be, &be->rope_kv_store_norm, bufs, &pc,
                 (uint32_t)(n_head + n_head_kv), (uint32_t)n, 1);
        kv_stage_mark(kv, il, pos0, n);
        return;
    }
    uint32_t pairs = groups_of((int64_t)n * n_head * (rope->n_rot / 2), 64);
    uint32_t words = groups_of(groups_of((int64_t)n * (int64_t)kv->row_bytes,
                                         4), 64);
    const struct vk_buffer *bufs[] = {buf(q), buf(k), buf(v), cs, st.k, st.v};
    dispatch(be, &be->rope_kv_store, bufs, &pc, pairs > words ? pairs : words,
             3, 1);
    kv_stage_mark(kv, il, pos0, n);
}

static void vkb_kv_commit(struct backend *base, struct kv_cache *kv)
{
    struct vk_backend *be = vkb(base);
    struct kv_run runs[KV_MAX_RUNS];
    int n_runs = kv_commit_plan(kv, runs, KV_MAX_RUNS);
    const size_t rb = kv->row_bytes;
    const int il = kv->stage_layer;
    if (n_runs > 0 && kv_in_place(kv, il, kv->stage_n))
        n_runs = 0;   /* written where they belong (stage_of) */
    for (int i = 0; i < n_runs; i++) {
        VkDeviceSize src = (VkDeviceSize)runs[i].stage_row * rb;
        VkDeviceSize dst = (VkDeviceSize)runs[i].slot * rb;
        VkDeviceSize bytes = (VkDeviceSize)runs[i].count * rb;
        /* Only later passes read the slots (this one reads the staging
         * rows), so the copies need no barrier: each pass begins with one. */
        if (!be->failed && bytes > 0) {
            vk_copy_for_next_pass(be->dev, &be->stage_k, src, &be->kv_k[il],
                                  dst, bytes);
            vk_copy_for_next_pass(be->dev, &be->stage_v, src, &be->kv_v[il],
                                  dst, bytes);
        }
    }
    kv_commit_done(kv);
}

/* attention's push constants for layer il's batch of n rows (positions
 * from rt), whose rows are in their slots when in_place. */
static struct vk_push_attention attention_push(const struct kv_cache *kv,
                                               int il, int n,
                                               const struct rope_table *rt,
                                               int n_head, int n_head_kv,
                                               int head_dim, int window,
                                               float scale, uint32_t in_place)
{
    /* enum kv_policy is full, ring, sink+window: the shader's 0, 1, 2;
     * enum kv_type is f32, f16, q8_0: 0, 1, 2. */
    const struct kv_layer *L = &kv->layers[il];
    return (struct vk_push_attention){
        .n_rows = (uint32_t)n, .pos_at = rt->pos_at,
        .n_head = (uint32_t)n_head, .n_head_kv = (uint32_t)n_head_kv,
        .head_dim = (uint32_t)head_dim, .type = (uint32_t)kv->type,
        .block = (uint32_t)kv->block, .row_bytes = (uint32_t)kv->row_bytes,
        .policy = (uint32_t)L->policy, .capacity = (uint32_t)L->capacity,
        .n_sink = (uint32_t)L->n_sink, .layer_window = (uint32_t)L->window,
        .model_window = (uint32_t)window, .scale = scale,
        .stage_in_place = in_place,
    };
}

/* How many query heads of a kv head an attention workgroup takes (1, 2
 * or 4, dividing the n_head / n_head_kv heads of a kv head) for `units`
 * workgroups of one head (heads x rows x splits). Loading a key once for 4
 * heads makes a workgroup's chain of work longer (1B shape on the H200: a
 * decode step's attention_rope 26.5 us with 4 against 14.2), which pays
 * only where the one-head form has more workgroups than the GPU runs at
 * once: so the most heads that leave at least
 * VK_ATTENTION_HEADS_WORKGROUPS workgroups. Every form gives a head the
 * same bits (test_vk_ops), so a token decoded and verified in different
 * forms is the same token. */
static uint32_t attention_heads(const struct vk_backend *be, int64_t units,
                                int n_head, int n_head_kv)
{
    const int group = n_head / n_head_kv;
    if (!be->has_heads_forms)
        return 1;
    for (uint32_t heads = 4; heads > 1; heads /= 2)
        if (group % (int)heads == 0 &&
            units / heads >= VK_ATTENTION_HEADS_WORKGROUPS)
            return heads;
    return 1;
}

/* The attention (or, with rope, attention_rope) pipeline of `heads` query
 * heads a workgroup. */
static const struct vk_pipeline *attention_form(const struct vk_backend *be,
                                                bool rope, uint32_t heads)
{
    if (heads == 4)
        return rope ? &be->attention_rope_h4 : &be->attention_h4;
    if (heads == 2)
        return rope ? &be->attention_rope_h2 : &be->attention_h2;
    return rope ? &be->attention_rope : &be->attention;
}

static void vkb_attention(struct backend *base, struct be_tensor *out,
                          const struct be_tensor *q, const struct kv_cache *kv,
                          int il, int n, int pos0, int n_head, int n_head_kv,
                          int head_dim, int window, float scale)
{
    struct vk_backend *be = vkb(base);
    const struct kv_stage st = stage_of(be, kv, il, n);
    const struct rope_table *rt = pass_positions(be, n, pos0);
    if (!rt)
        return;
    const struct vk_push_attention pc =
        attention_push(kv, il, n, rt, n_head, n_head_kv, head_dim, window,
                       scale, st.in_place);
    const struct vk_buffer *bufs[] = {buf(q), &be->kv_k[il], &be->kv_v[il],
                                      st.k, st.v, buf(out), &rt->buf};
    const uint32_t heads =
        attention_heads(be, (int64_t)n * n_head, n_head, n_head_kv);
    dispatch(be, attention_form(be, false, heads), bufs, &pc,
             (uint32_t)n_head / heads, (uint32_t)n, 1);
}

/* Whether attention_rope takes layer il's batch of n rows: at most
 * VK_ROPE_ATTENTION_ROWS, written straight into their slots, in rows that
 * split into heads of whole words (for q8_0, of whole blocks), of which
 * that many fit a workgroup's shared memory. Only n <=
 * VK_ROPE_ATTENTION_ROWS depends on the batch, so decoding (1 row) and
 * verifying (up to 17) take the same path, and a token gets the same bits
 * either way: the separate dispatches may round the attention
 * differently (another shader, another compilation). */
static bool rope_attention_takes(const struct kv_cache *kv, int il, int n,
                                 int n_head_kv, int head_dim)
{
    const size_t head_bytes = kv->row_bytes / (size_t)n_head_kv;
    return n <= VK_ROPE_ATTENTION_ROWS && kv_in_place(kv, il, n) &&
           kv->row_bytes % (4 * (size_t)n_head_kv) == 0 &&
           (kv->type != KV_Q8_0 || head_dim % kv->block == 0) &&
           2 * VK_ROPE_ATTENTION_ROWS * head_bytes <= VK_ROPE_ATTENTION_BYTES;
}

/* attention_rope's splits for layer il's batch of n rows at pos0 (the
 * split fields of pc, vk_shaders.h, but split_group): rows that see more
 * than VK_ATTENTION_SPLIT_KEYS positions (kv_visible) are split, into at
 * most VK_ATTENTION_SPLIT_HEADS / n_head splits, the same for every batch.
 * Returns the most splits of a row (1: none is split; not always the last
 * row's: splits are whole units of VK_ATTENTION_SPLIT_KEYS). */
static uint32_t attention_splits(const struct kv_cache *kv, int il, int pos0,
                                 int n, int n_head, int window,
                                 struct vk_push_attention *pc)
{
    pc->split_keys = VK_ATTENTION_SPLIT_KEYS;
    pc->max_splits = (uint32_t)n_head < VK_ATTENTION_SPLIT_HEADS
                         ? VK_ATTENTION_SPLIT_HEADS / (uint32_t)n_head
                         : 1;
    const uint32_t most =
        vk_attention_most_splits(&kv->layers[il], window, pos0, n,
                                 pc->split_keys, pc->max_splits);
    pc->split_stride = most;
    return most;
}

/* attention_rope's grid in z for a batch of n rows of `per_row`
 * workgroups whose rows take at most `most` splits (pc's split_group: a
 * workgroup takes several of its row's splits in turn past
 * VK_ATTENTION_SPLIT_WORKGROUPS). 0 on failure (pass_fail). */
static uint32_t attention_split_grid(struct vk_backend *be, int n,
                                     int n_head, int head_dim,
                                     uint32_t per_row, uint32_t most,
                                     struct vk_push_attention *pc)
{
    pc->split_group = 1;
    if (most == 1)
        return 1;
    if ((size_t)n * (size_t)n_head * most * (size_t)(head_dim + 2) *
            sizeof(float) > be->splits.size) {
        pass_fail(be, "internal: more attention splits than were reserved");
        return 0;
    }
    pc->split_group = groups_of((int64_t)per_row * n * most,
                                VK_ATTENTION_SPLIT_WORKGROUPS);
    return groups_of(most, pc->split_group);
}

static void vkb_rope_attention(struct backend *base, struct kv_cache *kv,
                               int il, int pos0, int n, struct be_tensor *q,
                               int n_head, struct be_tensor *k,
                               const struct be_tensor *v, int n_head_kv,
                               int head_dim, const struct be_rope *rope,
                               struct be_tensor *out, int window, float scale)
{
    struct vk_backend *be = vkb(base);
    if (!rope_attention_takes(kv, il, n, n_head_kv, head_dim)) {
        vkb_rope_kv_store(base, kv, il, pos0, n, q, n_head, k, v, n_head_kv,
                          head_dim, rope);
        vkb_attention(base, out, q, kv, il, n, pos0, n_head, n_head_kv,
                      head_dim, window, scale);
        return;
    }
    const struct rope_table *rt = rope_table(be, n, rope->n_rot, pos0,
                                             rope->pos, rope->base);
    if (!rt)
        return;
    const struct vk_buffer *qw = &rt->buf, *kw = &rt->buf;
    if (rope->q_norm) {
        qw = vk_model_find(be->weights, rope->q_norm);
        kw = vk_model_find(be->weights, rope->k_norm);
        if (!qw || !kw) {
            pass_fail(be, "internal: a q/k norm vector is not on the GPU");
            return;
        }
    }
    struct vk_push_attention pc = attention_push(
        kv, il, n, rt, n_head, n_head_kv, head_dim, window, scale, 1);
    pc.n_rot = (uint32_t)rope->n_rot;
    pc.style = rope->style == ROPE_NEOX;
    pc.has_norm = rope->q_norm != NULL;
    pc.head_bytes = (uint32_t)(kv->row_bytes / (size_t)n_head_kv);
    pc.eps = rope->norm_eps;
    const uint32_t most =
        attention_splits(kv, il, pos0, n, n_head, window, &pc);
    const uint32_t heads =
        attention_heads(be, (int64_t)n * n_head * most, n_head, n_head_kv);
    const uint32_t groups_z = attention_split_grid(
        be, n, n_head, head_dim, (uint32_t)n_head / heads, most, &pc);
    if (!groups_z)
        return;
    const struct vk_buffer *bufs[] = {buf(q),   &be->kv_k[il], &be->kv_v[il],
                                      buf(k),   buf(v),        buf(out),
                                      &rt->buf, qw,            kw,
                                      &be->splits,  &be->split_counts};
    dispatch(be, attention_form(be, true, heads), bufs, &pc,
             (uint32_t)n_head / heads, (uint32_t)n, groups_z);
    kv_stage_mark(kv, il, pos0, n);
}

static const struct backend_ops vk_ops = {
    .free = vkb_free, .name = vkb_name, .threads = vkb_threads,
    .reserve = vkb_reserve, .bind_kv = vkb_bind_kv, .kv_pull = vkb_kv_pull,
    .kv_push = vkb_kv_push, .tensor_new = vkb_tensor_new,
    .tensor_free = vkb_tensor_free, .begin = vkb_begin, .end = vkb_end,
    .read = vkb_read, .read_argmax = vkb_read_argmax,
    .draws_samples = vkb_draws_samples, .read_sample = vkb_read_sample,
    .embed = vkb_embed,
    .folds_norm = true,
    .matmul = vkb_matmul,
    .matmul_multi = vkb_matmul_multi, .matmul_add = vkb_matmul_add,
    .gated_matmul = vkb_gated_matmul, .rope_kv_store = vkb_rope_kv_store,
    .copy_rows = vkb_copy_rows, .rmsnorm = vkb_rmsnorm,
    .norm_add = vkb_norm_add, .rope = vkb_rope,
    .gated_act = vkb_gated_act, .add = vkb_add, .add_row = vkb_add_row,
    .kv_store = vkb_kv_store, .kv_commit = vkb_kv_commit,
    .attention = vkb_attention, .rope_attention = vkb_rope_attention,
};
