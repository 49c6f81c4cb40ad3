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
#include "backend_vulkan_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

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
                 vkb_matmul_types[i].name);
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
    for (int f = 0; be->has_mma && f < VK_MMA_FORMS; f++) {
        char name[64];
        vk_mma_shader_name(name, sizeof name, f);
        if (make_pipeline_arrays(be, name, MM_BINDINGS, matmul_bindings,
                                 sizeof(struct vk_push_matmul),
                                 &be->matmul_mma[f], err))
            return -1;
    }
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

static bool layer_types_supported(const struct layer *L)
{
    const struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                 &L->ffn_gate, &L->ffn_up, &L->ffn_down};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (vkb_matmul_index(ws[i]->type) < 0)
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
    bool ok = vkb_matmul_index(m->output.type) >= 0;
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

void vkb_free_kv_buffers(struct vk_backend *be)
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
    vkb_free_kv_buffers(be);
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
    for (int f = 0; f < VK_MMA_FORMS; f++)
        vk_pipeline_free(be->dev, &be->matmul_mma[f]);
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

void vkb_rmsnorm(struct backend *base, struct be_tensor *y,
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

