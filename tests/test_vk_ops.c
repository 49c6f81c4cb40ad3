/* test_vk_ops.c — every compute shader of the Vulkan backend agrees with
 * the CPU on random data.
 *
 * Runs each shader of vk_shaders.h on Vulkan device 0 (Mesa's lavapipe
 * here, a GPU elsewhere) through the device layer of vk_device.h, and
 * compares with a CPU reference written from engine/cpu/backend_cpu.c and
 * engine/kv.c: matmul for every weight type within 1e-4 of the sum of
 * |terms| (batches of 1, 3, 16, 17 tokens, odd row counts, rows that do
 * not start on a word); rmsnorm, rope, add and gated_act within 1e-5
 * relative (GELU may move its final f16 rounding by one half-ulp on rare
 * inputs); kv_store byte for byte against kv.c's staged rows, and its f16
 * rounding at every half's midpoint; attention over full, masked, ring and
 * sink+window caches within 1e-4, and a query row's attention alone to the
 * bit of the same row in a batch; argmax picking each row's token as
 * sample_argmax does, ties, NaNs and signed zeros included; and no
 * shader's SPIR-V leaving a product next to a sum for a driver to fuse
 * (which needs no device). Without a Vulkan device every other test
 * prints "SKIP (no Vulkan device): <why>" and skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "kv.h"
#include "quant.h"
#include "sample.h"
#include "vk_device.h"
#include "vk_model.h"
#include "vk_shaders.h"
#include "testutil.h"

/* ---- the device, pipelines and buffers ---- */

static struct vk_device *dev;
static char no_device[600];

struct cached_pipeline {
    char name[64];
    struct vk_pipeline pipe;
};
static struct cached_pipeline pipes[128];
static int n_pipes;

static int open_device(void **state)
{
    (void)state;
    struct kk_error err = {{0}};
    if (vk_device_open(0, &dev, &err)) {
        snprintf(no_device, sizeof no_device, "%s", err.msg);
        dev = NULL;
    }
    return 0;
}

static int close_device(void **state)
{
    (void)state;
    for (int i = 0; i < n_pipes; i++)
        vk_pipeline_free(dev, &pipes[i].pipe);
    n_pipes = 0;
    vk_device_close(dev);
    dev = NULL;
    return 0;
}

#define REQUIRE_DEVICE()                                                     \
    do {                                                                     \
        if (!dev) {                                                          \
            fprintf(stderr, "SKIP (no Vulkan device): %s\n", no_device);     \
            skip();                                                          \
        }                                                                    \
    } while (0)

/* The pipeline of shader `name` (binding i an array of count[i] buffers;
 * count NULL: one each), made once per test run. */
static const struct vk_pipeline *pipeline(const char *name, int n_bindings,
                                          const int *count,
                                          uint32_t push_bytes)
{
    for (int i = 0; i < n_pipes; i++)
        if (strcmp(pipes[i].name, name) == 0)
            return &pipes[i].pipe;
    const struct vk_spirv *sh = vk_shader_find(name);
    if (!sh)
        fail_msg("no embedded shader named %s", name);
    assert_true(n_pipes < (int)(sizeof pipes / sizeof pipes[0]));
    struct kk_error err = {{0}};
    struct cached_pipeline *c = &pipes[n_pipes];
    int rc = count ? vk_pipeline_new_arrays(dev, sh->code, sh->bytes,
                                            n_bindings, count, push_bytes,
                                            &c->pipe, &err)
                   : vk_pipeline_new(dev, sh->code, sh->bytes, n_bindings,
                                     push_bytes, &c->pipe, &err);
    if (rc)
        fail_msg("%s: %s", name, err.msg);
    snprintf(c->name, sizeof c->name, "%s", name);
    n_pipes++;
    return &c->pipe;
}

/* A device buffer of `bytes` holding data (zeros when data is NULL). */
static struct vk_buffer buffer_with(const void *data, size_t bytes)
{
    struct vk_buffer b;
    struct kk_error err = {{0}};
    if (vk_buffer_new(dev, bytes, VK_MEM_DEVICE, &b, &err))
        fail_msg("%s", err.msg);
    void *zeros = NULL;
    if (!data)
        data = zeros = calloc(1, bytes);
    if (vk_upload(dev, &b, 0, data, bytes, &err))
        fail_msg("%s", err.msg);
    free(zeros);
    return b;
}

static void download(const struct vk_buffer *b, void *out, size_t bytes)
{
    struct kk_error err = {{0}};
    if (vk_download(dev, b, 0, out, bytes, &err))
        fail_msg("%s", err.msg);
}

/* Records one dispatch of shader `name` and waits for it. */
static void run_arrays(const char *name, int n_bindings, const int *count,
                       const struct vk_buffer *const *bufs, const void *push,
                       uint32_t push_bytes, uint32_t gx, uint32_t gy,
                       uint32_t gz)
{
    const struct vk_pipeline *p = pipeline(name, n_bindings, count,
                                           push_bytes);
    struct kk_error err = {{0}};
    if (vk_begin(dev, &err))
        fail_msg("%s", err.msg);
    vk_dispatch(dev, p, bufs, push, gx, gy, gz);
    if (vk_submit_wait(dev, &err))
        fail_msg("%s: %s", name, err.msg);
}

static void run(const char *name, int n_buffers,
                const struct vk_buffer *const *bufs, const void *push,
                uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz)
{
    run_arrays(name, n_buffers, NULL, bufs, push, push_bytes, gx, gy, gz);
}

static uint32_t ceil_div(uint64_t a, uint64_t b)
{
    return (uint32_t)((a + b - 1) / b);
}

/* ---- random data ---- */

/* xorshift: deterministic test data without global state */
static uint32_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}

/* Uniform in [lo, hi). */
static float uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)(next_random(s) >> 8) * 0x1p-24f;
}

static float *random_floats(size_t n, float lo, float hi, uint64_t *s)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = uniform(s, lo, hi);
    return v;
}

static void expect_same_bits(const float *got, const float *want, size_t n,
                             const char *what, const char *shader)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got))
            fail_msg("%s (%s): value %zu is %.9g, want %.9g (to the bit)",
                     what, shader, i, got[i], want[i]);
}

static void put_fp16(uint8_t *p, float f)
{
    uint16_t h = f32_to_fp16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* n_rows weight rows of `type`: quantized from random floats where
 * quant.c can quantize the type, else random blocks with sane scales. */
static uint8_t *random_rows(uint32_t type, int n_cols, int n_rows,
                            size_t row_bytes, uint64_t *s)
{
    uint8_t *w = malloc(row_bytes * (size_t)n_rows);
    float *src = malloc((size_t)n_cols * sizeof *src);
    for (int r = 0; r < n_rows; r++) {
        uint8_t *row = w + (size_t)r * row_bytes;
        for (size_t i = 0; i < row_bytes; i++)
            row[i] = (uint8_t)next_random(s);
        switch (type) {
        case KK_Q5_0:
            for (int b = 0; b < n_cols / 32; b++)
                put_fp16(row + 22 * b, uniform(s, -0.05f, 0.05f));
            break;
        case KK_Q4_K:
            for (int b = 0; b < n_cols / 256; b++) {
                put_fp16(row + 144 * b, uniform(s, 0.0f, 0.01f));
                put_fp16(row + 144 * b + 2, uniform(s, 0.0f, 0.01f));
            }
            break;
        case KK_Q6_K:
            for (int b = 0; b < n_cols / 256; b++)
                put_fp16(row + 210 * b + 208, uniform(s, -0.01f, 0.01f));
            break;
        default:
            for (int i = 0; i < n_cols; i++)
                src[i] = uniform(s, -1.0f, 1.0f);
            assert_int_equal(quantize_row(type, src, row, n_cols), 0);
        }
    }
    free(src);
    return w;
}

/* ---- matmul ---- */

/* One dispatch of a matmul shader (vk_shaders.h): n_mats matrices of
 * n_rows[m] rows (raw GGUF rows, uploaded in the device layout), x of
 * n_tokens rows. y[m] receives the outputs (MM_STORE: one per matrix;
 * otherwise y[0] only, which for MM_ADD holds the values added to on
 * entry). Odd seeds spread the row groups over z, as the backend does past
 * the device's grid width. */
struct mm_call {
    const char *shader;
    uint32_t type, mode;
    bool use_gelu;
    int n_cols, n_mats, n_rows[MM_MAX_MATS], n_tokens;
    const uint8_t *const *w;
    const float *x;
    float *const *y;
    uint64_t seed;
    const float *norm;   /* the _norm_ forms' weights (n_cols), else NULL */
    float eps;
};

/* GPU form `shader`'s entry in vk_matmul_forms, and its teams per
 * workgroup (its norm form's where it is that). */
static const struct vk_matmul_form *matmul_form_of(const char *shader,
                                                   uint32_t *teams)
{
    const char *rest = shader + strlen("matmul_");
    const struct vk_matmul_form *last = &vk_matmul_forms[VK_MATMUL_FORMS - 1];
    for (const struct vk_matmul_form *f = vk_matmul_forms; f < last; f++) {
        if (f->norm_prefix && !strncmp(rest, f->norm_prefix,
                                       strlen(f->norm_prefix))) {
            *teams = (uint32_t)f->norm_teams;
            return f;
        }
        if (!strncmp(rest, f->prefix, strlen(f->prefix))) {
            *teams = (uint32_t)f->teams;
            return f;
        }
    }
    *teams = (uint32_t)last->teams;
    return last;
}

/* The integer form whose shader `shader` is (matmul_qx<name>...), or
 * NULL for another form. */
static const struct vk_qx_form *qx_form_of(const char *shader)
{
    for (int f = 0; f < VK_QX_FORMS; f++)
        for (int k = 0; k < 2; k++) {
            char name[64];
            vk_qx_shader_name(name, sizeof name, f, k);
            if (!strcmp(name, shader))
                return &vk_qx_forms[f];
        }
    return NULL;
}

/* The rows a workgroup of the int8 tile form `shader` takes, or 0 for
 * another form. */
static uint32_t mma_rows_of(const char *shader)
{
    for (int f = 0; f < VK_MMA_FORMS; f++) {
        char name[64];
        vk_mma_shader_name(name, sizeof name, f);
        if (!strcmp(name, shader))
            return (uint32_t)vk_mma_rows[f];
    }
    return 0;
}

static void matmul_on_device(const struct mm_call *c)
{
    static const int bindings[MM_BINDINGS] = {MM_MAX_MATS, 1, MM_MAX_MATS,
                                              1};
    const size_t row_bytes = dtype_row_bytes(c->type, (uint64_t)c->n_cols);
    const bool rowwise = strstr(c->shader, "_rows_") != NULL;
    const uint32_t mma_rows = mma_rows_of(c->shader);
    const bool mma = mma_rows > 0;
    const struct vk_qx_form *qx = qx_form_of(c->shader);
    int all_rows = 0;
    for (int m = 0; m < c->n_mats; m++)
        all_rows += c->n_rows[m];
    const uint32_t qx_lanes = vk_qx_lanes(
        (uint32_t)(c->mode == MM_GATED ? c->n_rows[0] : all_rows),
        (uint32_t)c->n_cols, vk_device_subgroup_size(dev));
    uint32_t teams = 1;
    const struct vk_matmul_form *form = matmul_form_of(c->shader, &teams);
    /* tokens a workgroup takes: the form's y-groups */
    const uint32_t y_tokens = rowwise ? MM_TOKENS
                              : mma   ? VK_MMA_TOKENS
                              : qx    ? (uint32_t)qx->tokens
                                      : (uint32_t)form->max_tokens;
    const uint32_t per =
        rowwise ? MM_ROWWISE_ROWS
        : mma   ? mma_rows
        : qx    ? VK_QX_INVOCATIONS / qx_lanes * (uint32_t)qx->rows
                : teams * (uint32_t)(c->mode == MM_GATED ? form->slots / 2
                                                          : form->slots);
    const int n_out = c->mode == MM_STORE ? c->n_mats : 1;
    struct vk_buffer bw[MM_MAX_MATS], by[MM_MAX_MATS];
    struct vk_push_matmul push = {.n_cols = (uint32_t)c->n_cols,
                                  .row_bytes = (uint32_t)row_bytes,
                                  .n_tokens = (uint32_t)c->n_tokens,
                                  .mode = c->mode, .use_gelu = c->use_gelu,
                                  .eps = c->eps, .lanes = qx_lanes};
    const struct vk_buffer *bufs[2 * MM_MAX_MATS + 2];
    uint32_t groups = 0;
    for (int m = 0; m < MM_MAX_MATS; m++) {
        const bool used = m < c->n_mats;
        if (used) {
            size_t bytes = row_bytes * (size_t)c->n_rows[m];
            uint8_t *packed = malloc(bytes);
            vk_model_repack_rows(c->type, c->n_cols, c->n_rows[m], row_bytes,
                                 c->w[m], packed);
            bw[m] = buffer_with(packed, bytes);
            free(packed);
        }
        if (m < n_out)
            by[m] = buffer_with(c->mode == MM_ADD ? c->y[0] : NULL,
                                (size_t)c->n_tokens * c->n_rows[m] * 4);
        bufs[m] = used ? &bw[m] : &bw[0];
        bufs[MM_MAX_MATS + 1 + m] = m < n_out ? &by[m] : &by[0];
        push.n_rows[m] = used ? (uint32_t)c->n_rows[m] : 0;
        push.start[m] = used && (m == 0 || c->mode != MM_GATED) ? groups
                                                                : ~0u;
        if (push.start[m] != ~0u)
            groups += ceil_div((uint64_t)c->n_rows[m], per);
    }
    struct vk_buffer bx = buffer_with(c->x, (size_t)c->n_tokens *
                                                (size_t)c->n_cols * 4);
    bufs[MM_MAX_MATS] = &bx;
    struct vk_buffer bn = buffer_with(c->norm ? c->norm : c->x,
                                      (size_t)c->n_cols * 4);
    bufs[2 * MM_MAX_MATS + 1] = &bn;
    uint32_t gz = (c->seed & 1) ? 2 : 1;
    uint32_t gx = ceil_div(groups, gz);
    if (!strncmp(c->shader + strlen("matmul_"), VK_MATMUL_DECODE_PREFIX,
                 strlen(VK_MATMUL_DECODE_PREFIX))) {
        /* the decode forms' subgroups take row sets in turn: an odd seed
         * has one workgroup take them all */
        gz = 1;
        gx = (c->seed & 1) ? 1 : ceil_div(groups, VK_DECODE_SUBGROUPS);
    }
    if (qx) {
        /* the integer forms take row sets in turn too: an odd seed has
         * one workgroup take them all, else one set per workgroup */
        gz = 1;
        gx = (c->seed & 1) ? 1 : groups;
    }
    uint32_t gy = ceil_div(c->n_tokens, y_tokens);
    if (mma) {
        /* the int8 tiles: token tiles in x, row groups in y */
        gx = gy;
        gy = groups;
        gz = 1;
    }
    run_arrays(c->shader, MM_BINDINGS, bindings, bufs, &push, sizeof push,
               gx, gy, gz);
    for (int m = 0; m < n_out; m++) {
        download(&by[m], c->y[m], (size_t)c->n_tokens * c->n_rows[m] * 4);
        vk_buffer_free(dev, &by[m]);
    }
    for (int m = 0; m < c->n_mats; m++)
        vk_buffer_free(dev, &bw[m]);
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &bn);
}

/* y = W x with one matrix (MM_STORE). */
static void matmul_store(const char *shader, uint32_t type, const uint8_t *w,
                         int n_cols, int n_rows, const float *x, int n_tokens,
                         float *y, uint64_t seed)
{
    struct mm_call c = {.shader = shader, .type = type, .mode = MM_STORE,
                        .n_cols = n_cols, .n_mats = 1, .n_rows = {n_rows},
                        .n_tokens = n_tokens, .w = &w, .x = x, .y = &y,
                        .seed = seed};
    matmul_on_device(&c);
}

/* y[t][r] of a matmul of n_tokens x n_cols by n_rows x n_cols in `shader`
 * (got) within `allowed` of the reference ref, whose terms' magnitudes sum
 * to mag. */
static void expect_product(const char *shader, int n_cols, int n_rows,
                           int n_tokens, int t, int r, double got, double ref,
                           double mag, double allowed)
{
    if (!(fabs(got - ref) <= allowed))
        fail_msg("%s %d cols x %d rows, %d tokens: y[%d][%d] = %.9g, want "
                 "%.9g (sum |terms| %.6g)", shader, n_cols, n_rows, n_tokens,
                 t, r, got, ref, mag);
}

static void check_matmul(uint32_t type, const char *shader, int n_cols,
                         int n_rows, int n_tokens, uint64_t seed)
{
    const size_t row_bytes = dtype_row_bytes(type, (uint64_t)n_cols);
    assert_true(row_bytes > 0);
    uint64_t s = seed;
    uint8_t *w = random_rows(type, n_cols, n_rows, row_bytes, &s);
    float *x = random_floats((size_t)n_tokens * n_cols, -1.0f, 1.0f, &s);
    float *y = malloc((size_t)n_tokens * n_rows * sizeof *y);
    float *row = malloc((size_t)n_cols * sizeof *row);
    matmul_store(shader, type, w, n_cols, n_rows, x, n_tokens, y, seed);

    for (int r = 0; r < n_rows; r++) {
        dequantize_row(type, w + (size_t)r * row_bytes, row, n_cols);
        for (int t = 0; t < n_tokens; t++) {
            double ref = 0, mag = 0;
            for (int c = 0; c < n_cols; c++) {
                double term = (double)row[c] * x[(size_t)t * n_cols + c];
                ref += term;
                mag += fabs(term);
            }
            expect_product(shader, n_cols, n_rows, n_tokens, t, r,
                           y[(size_t)t * n_rows + r], ref, mag,
                           1e-4 * mag + 1e-20);
        }
    }
    free(w);
    free(x);
    free(y);
    free(row);
}

/* Batches of 1, 3, 16 (MM_TOKENS) and 17 tokens; odd row counts (the
 * last workgroup has one row); a short row (fewer groups of values than
 * threads) and a long one (more). */
static void check_matmul_variant(uint32_t type, const char *shader,
                                 int short_cols, int long_cols)
{
    static const int shapes[][2] = {{5, 1}, {5, 3}, {7, 16}, {3, 17}, {1, 2}};
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ type;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_matmul(type, shader, short_cols, shapes[i][0], shapes[i][1],
                     seed + i);
    check_matmul(type, shader, long_cols, 3, 17, seed + 99);
    check_matmul(type, shader, long_cols, 2, 1, seed + 98);
    if (dtype_info(type)->block_elems == 1) {
        /* widths that are a multiple of 4 (x read as vec4s) but not of 8
         * (a partial last group), and of 8 */
        check_matmul(type, shader, 100, 3, 17, seed + 97);
        check_matmul(type, shader, 4096, 3, 5, seed + 96);
    }
    check_matmul(type, shader, short_cols, 130, 2, seed + 95);
}

/* A small-batch form (batches of at most max_batch tokens, in y-groups
 * of its own size): batches of 1 .. max_batch; a workgroup's rows all
 * real, the last one alone. */
static void check_matmul_small(uint32_t type, const char *shader,
                               int max_batch, int short_cols, int long_cols)
{
    static const int rows[] = {5, 1, 8, 17, 130};
    uint64_t seed = 0x0e3779b97f4a7c15ull ^ type ^ (uint64_t)max_batch;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        check_matmul(type, shader, short_cols, rows[i],
                     1 + (int)(i * 7) % max_batch, seed + i);
    check_matmul(type, shader, long_cols, 9, max_batch, seed + 99);
}

/* The GPU's small-batch forms of matmul_<t>: all but the last of
 * vk_matmul_forms. */
enum { N_SMALL_FORMS = VK_MATMUL_FORMS - 1 };

/* Whether this device runs the decode forms (matmul_dec_<t>: subgroups all
 * VK_DECODE_SUBGROUP wide; lavapipe's are 8, the NVIDIA GPU's 32). */
static bool has_decode_forms(void)
{
    return vk_device_subgroup_size(dev) == VK_DECODE_SUBGROUP;
}

/* Every form of the shader: matmul_<t> and its small-batch forms (GPUs),
 * the decode form where the device has it, and matmul_rows_<t>. */
static void check_matmul_shapes(uint32_t type, const char *shader,
                                int short_cols, int long_cols)
{
    const char *t = shader + strlen("matmul_");
    char name[64];
    check_matmul_variant(type, shader, short_cols, long_cols);
    snprintf(name, sizeof name, "matmul_rows_%s", t);
    check_matmul_variant(type, name, short_cols, long_cols);
    for (int f = 0; f < N_SMALL_FORMS; f++) {
        snprintf(name, sizeof name, "matmul_%s%s", vk_matmul_forms[f].prefix, t);
        check_matmul_small(type, name, vk_matmul_forms[f].max_batch, short_cols,
                           long_cols);
    }
    if (has_decode_forms()) {
        snprintf(name, sizeof name, "matmul_%s%s", VK_MATMUL_DECODE_PREFIX, t);
        check_matmul_small(type, name, 1, short_cols, long_cols);
    }
}

/* f32/f16/bf16: 77 and 4165 columns leave a partial last group, and f16
 * rows of 154 bytes start every other one mid-word. */
static void test_matmul_f32_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_F32, "matmul_f32", 77, 4165);
}

static void test_matmul_f16_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_F16, "matmul_f16", 77, 4165);
}

static void test_matmul_bf16_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_BF16, "matmul_bf16", 77, 4165);
}

/* 3 and 131 blocks per row: rows of 102 and 4454 bytes, not word aligned;
 * then rows of 30 blocks (1020 bytes, word aligned) and 64 and 264 blocks
 * (2176 and 8976 bytes, 16-byte aligned), each read another way. */
static void test_matmul_q8_0_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_Q8_0, "matmul_q8_0", 96, 32 * 131);
    check_matmul_shapes(KK_Q8_0, "matmul_q8_0", 32 * 30, 32 * 64);
    check_matmul_small(KK_Q8_0, "matmul_one_q8_0", 1, 32 * 64, 32 * 264);
    check_matmul_small(KK_Q8_0, "matmul_t4_q8_0", 4, 32 * 64, 32 * 264);
}

static void test_matmul_q4_0_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_Q4_0, "matmul_q4_0", 96, 32 * 131);
}

static void test_matmul_q5_0_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_Q5_0, "matmul_q5_0", 96, 32 * 131);
}

static void test_matmul_q4_k_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_Q4_K, "matmul_q4_k", 768, 256 * 33);
}

/* 210-byte super-blocks: odd rows start mid-word. */
static void test_matmul_q6_k_matches_dequantized_rows(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_matmul_shapes(KK_Q6_K, "matmul_q6_k", 768, 256 * 33);
}

/* ---- rmsnorm ---- */

/* backend_cpu.c's be_rmsnorm scale of the dim values at xr. */
static float cpu_rms_scale(const float *xr, int dim, float eps)
{
    double sum = 0.0;
    for (int i = 0; i < dim; i++)
        sum += (double)xr[i] * xr[i];
    return 1.0f / sqrtf((float)(sum / dim) + eps);
}

static void check_rmsnorm(int dim, int n_groups, bool in_place, uint64_t seed)
{
    uint64_t s = seed;
    const size_t n = (size_t)dim * n_groups;
    float *x = random_floats(n, -2.0f, 2.0f, &s);
    float *wt = random_floats((size_t)dim, 0.5f, 1.5f, &s);
    float *y = malloc(n * sizeof *y);
    const float eps = 1e-6f;

    struct vk_buffer bx = buffer_with(x, n * 4);
    struct vk_buffer by = in_place ? bx : buffer_with(NULL, n * 4);
    struct vk_buffer bw = buffer_with(wt, (size_t)dim * 4);
    const struct vk_buffer *bufs[] = {&bx, &by, &bw};
    struct vk_push_rmsnorm push = {(uint32_t)dim, (uint32_t)n_groups, eps};
    run("rmsnorm", 3, bufs, &push, sizeof push, (uint32_t)n_groups, 1, 1);
    download(&by, y, n * 4);

    /* backend_cpu.c's be_rmsnorm */
    for (int g = 0; g < n_groups; g++) {
        const float *xr = x + (size_t)g * dim;
        const float scale = cpu_rms_scale(xr, dim, eps);
        for (int i = 0; i < dim; i++) {
            float want = xr[i] * scale * wt[i];
            float got = y[(size_t)g * dim + i];
            if (!(fabsf(got - want) <= 1e-5f * fabsf(want) + 1e-30f))
                fail_msg("rmsnorm dim %d group %d [%d]: %.9g, want %.9g", dim,
                         g, i, got, want);
        }
    }
    vk_buffer_free(dev, &bx);
    if (!in_place)
        vk_buffer_free(dev, &by);
    vk_buffer_free(dev, &bw);
    free(x);
    free(wt);
    free(y);
}

static void test_rmsnorm_matches_cpu_in_place_and_not(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_rmsnorm(300, 3, false, 1);
    check_rmsnorm(300, 3, true, 2);
    check_rmsnorm(4096, 2, true, 3);
    check_rmsnorm(7, 5, false, 4);
}

/* ---- rope ---- */

static void check_rope(int style, int n_rot)
{
    const int n_rows = 3, n_heads = 4, head_dim = 64;
    const int32_t pos[] = {5, 6, 1000};
    const float base = 10000.0f;
    uint64_t s = 77 + (uint64_t)style;
    const size_t n = (size_t)n_rows * n_heads * head_dim;
    float *x = random_floats(n, -1.0f, 1.0f, &s);
    float *want = malloc(n * sizeof *want);
    float *got = malloc(n * sizeof *got);
    float *cs = malloc((size_t)n_rows * n_rot * sizeof *cs);
    memcpy(want, x, n * sizeof *x);

    /* The angles as be_rope advances them, and the rotation. */
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    for (int t = 0; t < n_rows; t++) {
        float theta = (float)pos[t];
        for (int i = 0; i < n_rot / 2; i++) {
            cs[(t * (n_rot / 2) + i) * 2] = cosf(theta);
            cs[(t * (n_rot / 2) + i) * 2 + 1] = sinf(theta);
            theta *= theta_scale;
        }
    }
    double mag[64 * 4 * 3] = {0};
    for (int t = 0; t < n_rows; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = want + ((size_t)t * n_heads + h) * head_dim;
            for (int i = 0; i < n_rot / 2; i++) {
                float c = cs[(t * (n_rot / 2) + i) * 2];
                float sn = cs[(t * (n_rot / 2) + i) * 2 + 1];
                int a = style == 0 ? 2 * i : i;
                int b = style == 0 ? 2 * i + 1 : i + n_rot / 2;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * sn;
                v[b] = x0 * sn + x1 * c;
                size_t base_i = ((size_t)t * n_heads + h) * head_dim;
                mag[base_i + a] = fabs(x0 * c) + fabs(x1 * sn);
                mag[base_i + b] = fabs(x0 * sn) + fabs(x1 * c);
            }
        }

    struct vk_buffer bx = buffer_with(x, n * 4);
    struct vk_buffer bc = buffer_with(cs, (size_t)n_rows * n_rot * 4);
    const struct vk_buffer *bufs[] = {&bx, &bc};
    struct vk_push_rope push = {(uint32_t)n_rows, (uint32_t)n_heads,
                                (uint32_t)head_dim, (uint32_t)n_rot,
                                (uint32_t)style};
    run("rope", 2, bufs, &push, sizeof push,
        ceil_div((uint64_t)n_rows * n_heads * (n_rot / 2), 64), 1, 1);
    download(&bx, got, n * 4);
    for (size_t i = 0; i < n; i++) {
        /* rotated dims within 1e-5 of their terms; the rest untouched */
        bool ok = mag[i] > 0 ? fabs(got[i] - want[i]) <= 1e-5 * mag[i] + 1e-30
                             : memcmp(&got[i], &want[i], 4) == 0;
        if (!ok)
            fail_msg("rope style %d n_rot %d [%zu]: %.9g, want %.9g", style,
                     n_rot, i, got[i], want[i]);
    }
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &bc);
    free(x);
    free(want);
    free(got);
    free(cs);
}

static void test_rope_norm_and_neox_match_cpu_and_leave_unrotated_dims(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_rope(0, 64);
    check_rope(1, 64);
    check_rope(0, 32);
    check_rope(1, 32);
}

/* ---- add ---- */

static void check_add(uint32_t count, uint32_t width, uint32_t groups)
{
    uint64_t s = count * 31u + width;
    const size_t ny = width ? width : count;
    float *x = random_floats(count, -1.0f, 1.0f, &s);
    float *y = random_floats(ny, -1.0f, 1.0f, &s);
    float *got = malloc((size_t)count * sizeof *got);
    struct vk_buffer bx = buffer_with(x, (size_t)count * 4);
    struct vk_buffer by = buffer_with(y, ny * 4);
    const struct vk_buffer *bufs[] = {&bx, &by};
    struct vk_push_add push = {count, width};
    run("add", 2, bufs, &push, sizeof push, groups, 1, 1);
    download(&bx, got, (size_t)count * 4);
    for (uint32_t i = 0; i < count; i++) {
        float want = x[i] + y[width ? i % width : i];
        if (!(fabsf(got[i] - want) <= 1e-5f * fabsf(want) + 1e-30f))
            fail_msg("add count %u width %u [%u]: %.9g, want %.9g", count,
                     width, i, got[i], want);
    }
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &by);
    free(x);
    free(y);
    free(got);
}

static void test_add_elementwise_broadcast_and_grid_stride(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_add(1000, 0, ceil_div(1000, 256));
    check_add(1000, 40, ceil_div(1000, 256));
    check_add(1, 0, 1);
    /* fewer groups than the count needs: the grid-stride loop covers it */
    check_add(70001, 0, 3);
    check_add(70001, 333, 5);
}

/* ---- argmax ---- */

/* Row r of a batch for argmax: random values, or one of the cases where
 * sample_argmax's choice is a matter of rules (equal values, NaNs, signed
 * zeros, infinities, subnormals). */
static void argmax_row(float *x, int width, int r, uint64_t *s)
{
    const float nan = nanf(""), inf = INFINITY;
    for (int i = 0; i < width; i++)
        x[i] = uniform(s, -8.0f, 8.0f);
    const int last = width - 1, mid = width / 2;
    switch (r % 10) {
    case 1:   /* the largest twice: the first */
        x[mid] = x[last] = 9.0f;
        break;
    case 2:   /* the largest last */
        x[last] = 9.0f;
        break;
    case 3:   /* a NaN first: 0, whatever follows */
        x[0] = nan;
        x[last] = 9.0f;
        break;
    case 4:   /* NaNs elsewhere are passed over */
        for (int i = 1; i < width; i += 3)
            x[i] = nan;
        break;
    case 5:   /* nothing but NaNs: 0 */
        for (int i = 0; i < width; i++)
            x[i] = nan;
        break;
    case 6:   /* -0 equals +0: the first zero */
        for (int i = 0; i < width; i++)
            x[i] = -1.0f;
        x[mid] = -0.0f;
        x[last] = 0.0f;
        break;
    case 7:   /* infinities: the first +inf; -inf everywhere else */
        for (int i = 0; i < width; i++)
            x[i] = -inf;
        x[last] = inf;
        x[mid] = inf;
        break;
    case 8:   /* subnormals, which a GPU may flush in a float compare */
        for (int i = 0; i < width; i++)
            x[i] = (float)(i % 7) * 1e-45f;
        x[mid] = 8e-45f;
        break;
    case 9:   /* nothing but -inf: 0 */
        for (int i = 0; i < width; i++)
            x[i] = -inf;
        break;
    }
}

/* argmax over a batch of rows of `width` values (every case of
 * argmax_row) and vk_argmax_choose over its pairs, against sample_argmax
 * row by row. */
static void check_argmax(int width, int n_rows)
{
    uint64_t s = (uint64_t)width * 7919u + (uint64_t)n_rows;
    const size_t n = (size_t)width * (size_t)n_rows;
    const uint32_t groups = ceil_div((uint64_t)width, VK_ARGMAX_SPAN);
    const size_t pair_bytes = (size_t)n_rows * groups * 2 * sizeof(uint32_t);
    float *x = malloc(n * sizeof *x);
    uint32_t *pairs = malloc(pair_bytes);
    assert_non_null(x);
    assert_non_null(pairs);
    for (int r = 0; r < n_rows; r++)
        argmax_row(x + (size_t)r * width, width, r, &s);
    struct vk_buffer bx = buffer_with(x, n * sizeof *x);
    struct vk_buffer bpairs = buffer_with(NULL, pair_bytes);
    const struct vk_buffer *bufs[] = {&bx, &bpairs};
    struct vk_push_argmax push = {(uint32_t)width, (uint32_t)n_rows};
    run("argmax", 2, bufs, &push, sizeof push, groups, (uint32_t)n_rows, 1);
    download(&bpairs, pairs, pair_bytes);
    for (int r = 0; r < n_rows; r++) {
        const int32_t got = vk_argmax_choose(pairs + 2 * (size_t)r * groups,
                                             groups);
        const int32_t want = sample_argmax(x + (size_t)r * width, width);
        if (got != want)
            fail_msg("argmax width %d row %d (case %d): %d, want %d", width,
                     r, r % 10, got, want);
    }
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &bpairs);
    free(x);
    free(pairs);
}

static void test_argmax_chooses_as_sample_argmax(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_argmax(131077, 17);   /* a vocabulary, a verify block */
    check_argmax(8192, 10);     /* whole spans */
    check_argmax(2049, 10);     /* a span and one value */
    check_argmax(257, 10);
    check_argmax(3, 10);        /* fewer values than a subgroup */
}

/* ---- sample ---- */

/* A row of logits for the sample shader, and how to draw from it. */
struct draw_case {
    int width;
    float temperature, top_p;
    float spread;      /* logits uniform in [-spread, spread] ... */
    enum {
        DRAW_RANDOM, DRAW_EQUAL, DRAW_TOP_TWICE, DRAW_MASKED, DRAW_LEVELS
    } kind;
};

static void draw_logits(const struct draw_case *c, uint64_t *s, float *x)
{
    for (int i = 0; i < c->width; i++)
        x[i] = c->kind == DRAW_EQUAL ? 1.5f : uniform(s, -c->spread, c->spread);
    if (c->kind == DRAW_TOP_TWICE)   /* ties for the top: the lower id */
        x[c->width / 30] = x[c->width / 2] = 2.0f * c->spread;
    if (c->kind == DRAW_LEVELS)      /* a few values, each many times */
        for (int i = 0; i < c->width; i++)
            x[i] = 0.5f * floorf(uniform(s, 0.0f, 4.0f));
    if (c->kind == DRAW_MASKED)      /* masked tokens are never drawn */
        for (int i = 1; i < c->width; i += 2)
            x[i] = -INFINITY;
}

/* Whether the nucleus' last token is clear of rounding: the host's kept
 * mass passes top_p by more than 2e-6, and would fall short of it by
 * more than 2e-6 without its least likely token. (The device sums in
 * fixed point, from its own e^x, a few ulp from the host's: an edge
 * closer than that could fall on either side.) */
static bool nucleus_is_clear(const struct draw_case *c, const float *x,
                             const float *probs)
{
    if (c->top_p >= 1.0f || c->top_p <= 0.0f)
        return true;
    float *w = malloc((size_t)c->width * sizeof *w);
    assert_non_null(w);
    const double all = sample_weights(x, c->width, c->temperature, w);
    double kept = 0.0, least = INFINITY;
    for (int i = 0; i < c->width; i++)
        if (probs[i] > 0.0f) {
            kept += w[i];
            least = w[i] < least ? w[i] : least;
        }
    free(w);
    return kept / all - c->top_p > 2e-6 &&
           c->top_p - (kept - least) / all > 2e-6;
}

static void swap_floats(float *a, float *b)
{
    const float t = *a;
    *a = *b;
    *b = t;
}

/* The smallest logit the nucleus keeps (probs from sample_probs). */
static float nucleus_edge(const float *x, const float *probs, int n)
{
    float edge = INFINITY;
    for (int i = 0; i < n; i++)
        edge = probs[i] > 0.0f && x[i] < edge ? x[i] : edge;
    return edge;
}

/* Moves the logits of a DRAW_LEVELS row (swaps only: the same values, so
 * the same nucleus mass and the same number of its ties kept) so that
 * the first tie the nucleus leaves out is token `at` and a kept token
 * follows it: with `at` a multiple of a large power of two, any cut of
 * the row into aligned pieces of a power of two puts both in one piece,
 * which a draw between them must walk. */
static void put_first_left_out_at(float *x, const float *probs, int n, int at)
{
    const float edge = nucleus_edge(x, probs, n);
    int kept_ties = 0, before = 0;
    for (int i = 0; i < n; i++) {
        kept_ties += probs[i] > 0.0f && x[i] == edge;
        before += i < at && x[i] == edge;
    }
    /* exactly kept_ties ties before `at`, swapped with ids past at + 1 */
    for (int i = 0, j = at + 2; before != kept_ties; i++) {
        assert_true(i < at);
        const bool want_edge = before < kept_ties;
        if ((x[i] == edge) == want_edge)
            continue;
        while (j < n && (x[j] == edge) != want_edge)
            j++;
        assert_true(j < n);
        swap_floats(&x[i], &x[j++]);
        before += want_edge ? 1 : -1;
    }
    /* then a tie at `at`, and a value above the edge (kept) after it */
    for (int j = at + 2; x[at] != edge; j++) {
        assert_true(j < n);
        if (x[j] == edge)
            swap_floats(&x[at], &x[j]);
    }
    for (int j = at + 2; !(x[at + 1] > edge); j++) {
        assert_true(j < n);
        if (x[j] > edge)
            swap_floats(&x[at + 1], &x[j]);
    }
}

/* The uniform's 53 bits at the middle of token i's share of the kept mass
 * (in id order, as a draw walks it): far from rounding's reach. */
static uint64_t u53_inside(const float *probs, int n, int i)
{
    double total = 0.0, before = 0.0;
    for (int j = 0; j < n; j++) {
        total += probs[j];
        before += j < i ? probs[j] : 0.0;
    }
    return (uint64_t)((before + 0.5 * probs[i]) / total * 0x1p53);
}

/* Rows of the case's logits, each with its own uniform: 0 (the first kept
 * id), the largest (the last kept id), then the middles of kept tokens
 * of at least 2e-5 of the mass (1e-5 from either edge, where the device's
 * sums are within ~1e-6), spread over them — and where all are equal, a
 * uniform right at a boundary; where the logits take a few values, the
 * middle of the first kept token past the first tie left out; the
 * shader's draws against sample_probs and sample_pick's, row by row. */
static void check_sample(const struct draw_case *c)
{
    enum { ROWS = 17 };
    const int n = c->width;
    float *x = malloc((size_t)n * ROWS * sizeof *x);
    float *probs = malloc((size_t)n * sizeof *probs);
    int32_t *order = malloc((size_t)n * sizeof *order);
    assert_non_null(x);
    assert_non_null(probs);
    assert_non_null(order);
    const struct kk_sampling sp = {.temperature = c->temperature,
                                   .top_p = c->top_p};
    uint64_t s = (uint64_t)n * 104729u + (uint64_t)(c->top_p * 1000.0f);
    bool clear = false;
    for (int tries = 0; tries < 50 && !clear; tries++) {
        draw_logits(c, &s, x);
        sample_probs(&sp, x, n, probs, order);
        clear = nucleus_is_clear(c, x, probs);
    }
    if (!clear)
        fail_msg("sample width %d T %g top-p %g (kind %d): no seed put the "
                 "nucleus' edge clear of rounding", n, c->temperature,
                 c->top_p, c->kind);
    if (c->kind == DRAW_LEVELS) {
        put_first_left_out_at(x, probs, n, n / 2);
        sample_probs(&sp, x, n, probs, order);
    }
    for (int r = 1; r < ROWS; r++)
        memcpy(x + (size_t)r * n, x, (size_t)n * sizeof *x);
    double total = 0.0;
    int n_wide = 0;
    for (int i = 0; i < n; i++)
        total += probs[i];
    for (int i = 0; i < n; i++)
        n_wide += probs[i] >= 2e-5 * total;
    assert_true(n_wide > 0);
    uint64_t u53[ROWS];
    u53[0] = 0;
    u53[1] = (1ull << 53) - 1;
    for (int r = 2, k = 0; r < ROWS; r++) {
        const int want_k = (r - 2) * n_wide / (ROWS - 2);
        int i = 0;
        for (;; i++)
            if (probs[i] >= 2e-5 * total && k++ == want_k)
                break;
        k = 0;
        u53[r] = u53_inside(probs, n, i);
    }
    if (c->kind == DRAW_EQUAL) {
        /* a uniform exactly at the first boundary of equal shares: the
         * next token (a draw takes the first whose mass so far passes
         * it), on the device too, whose sums are exact here */
        uint64_t n_kept = 0;
        for (int i = 0; i < n; i++)
            n_kept += probs[i] > 0.0f;
        u53[2] = ((1ull << 53) + n_kept - 1) / n_kept;
    }
    if (c->kind == DRAW_LEVELS) {
        /* the first kept token past the first tie the nucleus leaves out:
         * a draw that kept one tie too many would land before it */
        const float edge = nucleus_edge(x, probs, n);
        int left_out = 0;
        while (left_out < n &&
               !(probs[left_out] == 0.0f && x[left_out] == edge))
            left_out++;
        int next = left_out;
        while (next < n && probs[next] == 0.0f)
            next++;
        assert_int_equal(left_out, n / 2);
        assert_int_equal(next, n / 2 + 1);
        u53[3] = u53_inside(probs, n, next);
    }
    uint32_t u[2 * ROWS], got[ROWS];
    for (int r = 0; r < ROWS; r++) {
        u[2 * r] = (uint32_t)u53[r];
        u[2 * r + 1] = (uint32_t)(u53[r] >> 32);
    }
    const size_t bytes = (size_t)n * ROWS * sizeof(float);
    struct vk_buffer bx = buffer_with(x, bytes), bw = buffer_with(NULL, bytes);
    struct vk_buffer bu = buffer_with(u, sizeof u);
    struct vk_buffer btok = buffer_with(NULL, sizeof got);
    struct vk_buffer bs = buffer_with(NULL, (size_t)ROWS *
                                                VK_SAMPLE_ROW_WORDS *
                                                sizeof(uint32_t));
    const struct vk_buffer *bufs[] = {&bx, &bw, &bu, &btok, &bs};
    const bool keep_all = !(c->top_p < 1.0f);
    struct vk_push_sample push = {
        (uint32_t)n, ROWS, c->temperature,
        keep_all ? 0u : (uint32_t)ldexp(c->top_p, 32), keep_all, 0};
    /* the phases in one recording, as the backend makes them */
    const struct vk_pipeline *p = pipeline("sample", 5, NULL, sizeof push);
    struct kk_error err = {{0}};
    if (vk_begin(dev, &err))
        fail_msg("%s", err.msg);
    for (int phase = 0; phase < VK_SAMPLE_PHASES; phase++) {
        push.phase = (uint32_t)phase;
        vk_dispatch(dev, p, bufs, &push, vk_sample_groups(phase, (uint32_t)n),
                    ROWS, 1);
    }
    if (vk_submit_wait(dev, &err))
        fail_msg("sample: %s", err.msg);
    download(&btok, got, sizeof got);
    for (int r = 0; r < ROWS; r++) {
        const int32_t want = sample_pick(probs, n, u53[r]);
        if ((int32_t)got[r] != want)
            fail_msg("sample width %d T %g top-p %g (kind %d) row %d: %u, "
                     "want %d (p %g)", n, c->temperature, c->top_p, c->kind,
                     r, got[r], want, probs[want] / total);
    }
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &bw);
    vk_buffer_free(dev, &bu);
    vk_buffer_free(dev, &btok);
    vk_buffer_free(dev, &bs);
    free(x);
    free(probs);
    free(order);
}

static void test_sample_draws_as_the_host(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    if (!vk_device_has_int64(dev)) {
        fprintf(stderr, "SKIP (no 64-bit integers in shaders: the host "
                        "draws)\n");
        skip();
    }
    const struct draw_case cases[] = {
        {131077, 0.8f, 0.9f, 16.0f, DRAW_RANDOM},  /* a vocabulary */
        {8192, 1.0f, 0.5f, 3.0f, DRAW_RANDOM},
        {5000, 1.0f, 0.3055f, 0.0f, DRAW_EQUAL},    /* ties: the lower ids */
        {257, 0.7f, 1.0f, 3.0f, DRAW_RANDOM},       /* top-p off */
        {3000, 0.5f, 0.0f, 3.0f, DRAW_TOP_TWICE},   /* top-p 0: the top */
        {5000, 1.2f, 0.95f, 3.0f, DRAW_MASKED},
        /* the nucleus ends among ties, and tokens of it lie past the
         * ties it leaves out */
        {65536, 1.0f, 0.6f, 0.0f, DRAW_LEVELS},
        {3, 1.0f, 0.9f, 1.0f, DRAW_RANDOM},         /* under a subgroup */
        {4096, 0.05f, 0.9f, 3.0f, DRAW_RANDOM},     /* nearly greedy */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_sample(&cases[i]);
}

/* ---- gated_act ---- */

static float gelu_tanh(float x)
{
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x *
                                    (1.0f + 0.044715f * x * x)));
}

/* backend_cpu.c's be_gated_act for one value. */
static float gated_ref(float g, float up, bool use_gelu)
{
    float a;
    if (!use_gelu) {
        a = g / (1.0f + expf(-g));
    } else if (g <= -10.0f) {
        a = 0.0f;
    } else if (g >= 10.0f) {
        a = g;
    } else {
        float gh = fp16_to_f32(f32_to_fp16(g));
        a = fp16_to_f32(f32_to_fp16(gelu_tanh(gh)));
    }
    return a * up;
}

/* Runs gated_act over gate/up (count values); returns how many results
 * differ from the CPU's by more than 1e-5 relative, failing on any that
 * differs by more than `slack` relative. GELU's 1 + tanh(z) cancels for
 * g well below 0, where one ulp of tanh (the GPU's is not libm's) is a
 * large part of the result: there the error is measured against the
 * terms, |g up|, as matmul's is. */
static int check_gated(const float *gate, const float *up, uint32_t count,
                       bool use_gelu, double slack)
{
    float *got = malloc((size_t)count * sizeof *got);
    struct vk_buffer bg = buffer_with(gate, (size_t)count * 4);
    struct vk_buffer bu = buffer_with(up, (size_t)count * 4);
    const struct vk_buffer *bufs[] = {&bg, &bu};
    struct vk_push_gated_act push = {count, use_gelu};
    uint32_t groups = ceil_div(count, 256);
    run("gated_act", 2, bufs, &push, sizeof push,
        groups < ELEMWISE_MAX_GROUPS ? groups : ELEMWISE_MAX_GROUPS, 1, 1);
    download(&bg, got, (size_t)count * 4);
    int loose = 0;
    for (uint32_t i = 0; i < count; i++) {
        double want = gated_ref(gate[i], up[i], use_gelu);
        double diff = fabs(got[i] - want);
        double terms = use_gelu ? 1e-6 * fabs((double)gate[i] * up[i]) : 0;
        if (diff <= 1e-5 * fabs(want) + terms + 1e-30)
            continue;
        loose++;
        if (!(diff <= slack * fabs(want) + terms + 0x1p-24 * fabs(up[i])))
            fail_msg("gated_act %s: g %.9g up %.9g -> %.9g, want %.9g",
                     use_gelu ? "gelu" : "silu", gate[i], up[i], got[i],
                     want);
    }
    vk_buffer_free(dev, &bg);
    vk_buffer_free(dev, &bu);
    free(got);
    return loose;
}

static void test_gated_act_silu_matches_cpu(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    uint64_t s = 5;
    const uint32_t n = 5000;
    float *g = random_floats(n, -12.0f, 12.0f, &s);
    float *u = random_floats(n, -2.0f, 2.0f, &s);
    g[0] = 0.0f;
    g[1] = -0.0f;
    g[2] = -88.0f;
    g[3] = 88.0f;
    assert_int_equal(check_gated(g, u, n, false, 1e-5), 0);
    free(g);
    free(u);
}

/* Every half in [-10, 10] (GELU's table domain) and the clamps around it:
 * the f16 roundings are the CPU's except, at most, where the two tanh
 * implementations straddle a rounding boundary (one half-ulp apart). */
static void test_gated_act_gelu_rounds_through_f16_like_ggml(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    float *g = malloc(70000 * sizeof *g), *u = malloc(70000 * sizeof *u);
    uint32_t n = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = fp16_to_f32((uint16_t)h);
        if (v >= -10.0f && v <= 10.0f)
            g[n++] = v;
    }
    const float extra[] = {-10.5f, 10.5f, -1e6f, 1e6f, 9.9999f, -9.9999f,
                           0.3333333f, -2.7182817f, 1e-8f, -1e-8f};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        g[n++] = extra[i];
    uint64_t s = 11;
    for (uint32_t i = 0; i < n; i++)
        u[i] = uniform(&s, 0.5f, 2.0f);
    int loose = check_gated(g, u, n, true, 0x1p-10);
    fprintf(stderr, "gelu: %d of %u values one f16 rounding away from the "
            "CPU's\n", loose, n);
    assert_true(loose <= (int)(n / 1000));
    free(g);
    free(u);
}

/* ---- kv_store ---- */

static struct kv_cache *new_cache(enum kv_type type, int n_head_kv,
                                  int head_dim, int n_ctx, int max_batch,
                                  const int *sliding, int sink_window,
                                  int n_sink)
{
    struct kv_config cfg = {
        .n_layer = 1, .n_ctx = n_ctx, .n_head_kv = n_head_kv,
        .head_dim = head_dim, .type = type, .max_batch = max_batch,
        .sliding_window = sliding, .sink_window = sink_window,
        .n_sink = n_sink,
    };
    struct kv_cache *kv;
    struct kk_error err = {{0}};
    if (kv_new(&cfg, &kv, &err))
        fail_msg("%s", err.msg);
    return kv;
}

/* Keys with blocks of very different magnitudes, an all-zero block, a
 * block of exact .5 ties for q8_0 (amax 127: d = 1), and, for f16 and f32,
 * values at the edges of half precision. */
static float *kv_input(enum kv_type type, int n_rows, int kv_dim, int block,
                       uint64_t *s)
{
    float *x = malloc((size_t)n_rows * kv_dim * sizeof *x);
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < kv_dim; i++) {
            float mag = powf(10.0f, (float)((r * 7 + i / block) % 9) - 4);
            x[(size_t)r * kv_dim + i] = mag * uniform(s, -1.0f, 1.0f);
        }
    if (n_rows > 1)
        memset(x + kv_dim, 0, (size_t)block * sizeof *x);
    if (n_rows > 2) {
        float *b = x + 2 * (size_t)kv_dim;
        for (int i = 0; i < block; i++)
            b[i] = (float)(i % 64 - 32) + 0.5f;
        b[block - 1] = -127.0f;
    }
    if (type != KV_Q8_0 && kv_dim >= 16) {
        const float edge[] = {1e-6f, 65504.0f, 65520.0f, 70000.0f, -0.0f,
                              1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 0x1p-25f,
                              0x3p-25f, 1e-40f, -0x1.ffep-15f, NAN,
                              -INFINITY, 0x1.0p-24f, 0x1.8p-24f, 2.0f};
        memcpy(x, edge, sizeof edge);
    }
    return x;
}

/* Where kv_store puts a batch: staged (packed from word 0), or in place,
 * straight into the slots of positions pos0.. of a layer of `capacity`
 * rows under policy. */
struct kv_placement {
    bool in_place;
    int pos0;
    enum kv_policy policy;
    int capacity, n_sink;
};

/* The byte of the destination where row t of the batch starts. */
static size_t placed_at(const struct kv_placement *pl, size_t row_bytes,
                        int t)
{
    if (!pl->in_place)
        return (size_t)t * row_bytes;
    const struct kv_layer L = {.policy = pl->policy,
                               .capacity = pl->capacity,
                               .n_sink = pl->n_sink};
    return (size_t)kv_slot(&L, pl->pos0 + t) * row_bytes;
}

/* kv_store of n_rows rows placed as pl says: kv.c's bytes in each row's
 * place, and nothing else touched. */
static void check_kv_store(enum kv_type type, int n_head_kv, int head_dim,
                           int n_rows, const struct kv_placement *pl)
{
    struct kv_cache *kv = new_cache(type, n_head_kv, head_dim, 32, 8, NULL,
                                    0, 0);
    uint64_t s = 1234 + (uint64_t)type * 7 + (uint64_t)head_dim;
    float *k = kv_input(type, n_rows, kv->kv_dim, kv->block, &s);
    kv_stage(kv, 0, 0, n_rows, k, k);

    const size_t rb = kv->row_bytes;
    const size_t total = (size_t)(pl->in_place ? pl->capacity : n_rows) * rb;
    const size_t room = (total + 3) / 4 * 4 + 8;
    uint8_t *dst = malloc(room), *want = malloc(room);
    memset(dst, 0xa5, room);
    memset(want, 0xa5, room);
    for (int t = 0; t < n_rows; t++)
        memcpy(want + placed_at(pl, rb, t), kv->stage_k + (size_t)t * rb, rb);
    struct vk_buffer bs = buffer_with(k, (size_t)n_rows * kv->kv_dim * 4);
    struct vk_buffer bd = buffer_with(dst, room);
    const struct vk_buffer *bufs[] = {&bs, &bd};
    struct vk_push_kv_store push = {
        (uint32_t)n_rows, (uint32_t)kv->kv_dim, (uint32_t)type,
        (uint32_t)kv->block, (uint32_t)rb, pl->in_place, (uint32_t)pl->pos0,
        (uint32_t)pl->policy, (uint32_t)pl->capacity, (uint32_t)pl->n_sink};
    run("kv_store", 2, bufs, &push, sizeof push,
        ceil_div(ceil_div((uint64_t)n_rows * rb, 4), 64), 1, 1);
    download(&bd, dst, room);
    for (size_t i = 0; i < room; i++)
        if (dst[i] != want[i])
            fail_msg("kv_store %s, %d x %d, %s policy %d at %d: byte %zu "
                     "(row %zu byte %zu) is 0x%02x, want 0x%02x",
                     kv_type_name(type), n_head_kv, head_dim,
                     pl->in_place ? "in place" : "staged", (int)pl->policy,
                     pl->pos0, i, i / rb, i % rb, dst[i], want[i]);
    vk_buffer_free(dev, &bs);
    vk_buffer_free(dev, &bd);
    free(k);
    free(dst);
    free(want);
    kv_free(kv);
}

/* Byte for byte kv.c's rows, for rows that start mid-word (q8_0 rows of
 * 102, 82 and 105 bytes; f16 rows of 198) and blocks of 32, 80 and 33,
 * into a staging buffer; rows of whole words also straight into a layer's
 * slots: a full cache's further on, a ring's and a sink+window's around
 * their wrap. */
static void test_kv_store_writes_kv_c_rows_byte_for_byte(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    static const int shapes[][3] = {{3, 32, 5}, {1, 80, 5}, {3, 33, 5},
                                    {2, 64, 1}, {1, 32, 7}};
    for (int type = KV_F32; type <= KV_Q8_0; type++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const int n = shapes[i][2];
            const struct kv_placement staged = {.in_place = false};
            check_kv_store((enum kv_type)type, shapes[i][0], shapes[i][1], n,
                           &staged);
            struct kv_cache *kv = new_cache((enum kv_type)type, shapes[i][0],
                                            shapes[i][1], 32, 8, NULL, 0, 0);
            const bool whole_words = kv->row_bytes % 4 == 0;
            kv_free(kv);
            if (!whole_words)
                continue;
            const struct kv_placement places[] = {
                {true, 5, KV_FULL, 5 + n + 2, 0},
                {true, 7, KV_RING, n + 3, 0},
                {true, 9, KV_SINK_WINDOW, 2 + n + 1, 2},
            };
            for (size_t j = 0; j < sizeof places / sizeof places[0]; j++)
                check_kv_store((enum kv_type)type, shapes[i][0],
                               shapes[i][1], n, &places[j]);
        }
}

/* kk_f32_to_f16 against quant.c's f32_to_fp16 where rounding is decided:
 * each half's midpoint to the next (ties go to even), one ulp either side,
 * f32 subnormals, and random bit patterns. */
static void test_kv_store_f16_rounds_every_half_midpoint_like_the_cpu(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    const uint32_t n = 65536 * 4 + 4096;
    uint32_t *bits = malloc((size_t)n * 4);
    uint64_t s = 99;
    for (uint32_t h = 0; h < 65536; h++) {
        float lo = fp16_to_f32((uint16_t)h);
        float hi = fp16_to_f32((uint16_t)(h + 1));
        float mid = isfinite(lo) && isfinite(hi) && (h & 0x7fff) != 0x7fff
                        ? lo + (hi - lo) / 2 : lo;
        uint32_t m;
        memcpy(&m, &mid, 4);
        bits[4 * h] = m - 1;
        bits[4 * h + 1] = m;
        bits[4 * h + 2] = m + 1;
        memcpy(&bits[4 * h + 3], &lo, 4);
    }
    for (uint32_t i = 65536 * 4; i < n; i++)
        bits[i] = i & 1 ? next_random(&s) : next_random(&s) & 0x807fffffu;

    const uint32_t n_rows = n / 64;
    uint16_t *got = malloc((size_t)n * 2);
    struct vk_buffer bs = buffer_with(bits, (size_t)n * 4);
    struct vk_buffer bd = buffer_with(NULL, (size_t)n * 2);
    const struct vk_buffer *bufs[] = {&bs, &bd};
    struct vk_push_kv_store push = {n_rows, 64, KV_F16, 64, 128,
                                    0,      0,  0,      0,  0};
    run("kv_store", 2, bufs, &push, sizeof push, ceil_div(n / 2, 64), 1, 1);
    download(&bd, got, (size_t)n * 2);
    for (uint32_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, &bits[i], 4);
        if (got[i] != f32_to_fp16(f))
            fail_msg("f16 of 0x%08x: 0x%04x, want 0x%04x", bits[i], got[i],
                     f32_to_fp16(f));
    }
    vk_buffer_free(dev, &bs);
    vk_buffer_free(dev, &bd);
    free(bits);
    free(got);
}

/* ---- attention ---- */

struct attention_case {
    enum kv_type type;
    int n_head, n_head_kv, head_dim;
    int n_ctx;
    int sliding;             /* ring window (0: none) */
    int sink_window, n_sink; /* sink+window (0: none) */
    int model_window;        /* mask of a full cache (0: none) */
    int n_past, n;           /* committed tokens, then a batch of n */
};

/* Scores twice a model's (1/sqrt), so that the softmax has peaks. */
static float attention_scale(int head_dim)
{
    return 2.0f / sqrtf((float)head_dim);
}

static void upload_padded(struct vk_buffer *b, const uint8_t *bytes,
                          size_t n)
{
    *b = buffer_with(bytes, n ? n : 4);
}

/* The cache of case c: positions [0, n_commit) committed (32 at a time),
 * then [n_commit, n_commit + n_stage) staged; position k's key and value
 * are row k of k and v (kv_dim floats each). */
static struct kv_cache *attention_cache(const struct attention_case *c,
                                        const float *k, const float *v,
                                        int n_commit, int n_stage)
{
    const int sliding[1] = {c->sliding};
    struct kv_cache *kv = new_cache(c->type, c->n_head_kv, c->head_dim,
                                    c->n_ctx, 32, c->sliding ? sliding : NULL,
                                    c->sink_window, c->n_sink);
    const size_t kv_dim = (size_t)kv->kv_dim;
    for (int pos = 0; pos < n_commit; pos += 32) {
        const int nb = n_commit - pos < 32 ? n_commit - pos : 32;
        kv_stage(kv, 0, pos, nb, k + pos * kv_dim, v + pos * kv_dim);
        kv_commit(kv);
    }
    kv_stage(kv, 0, n_commit, n_stage, k + n_commit * kv_dim,
             v + n_commit * kv_dim);
    return kv;
}

/* The cache rows of kv's layer 0 with the staged rows of a batch at pos0
 * written into their slots (a full cache), in a new buffer. */
static struct vk_buffer cache_with_batch(const struct kv_cache *kv,
                                         const uint8_t *rows,
                                         const uint8_t *staged, int pos0,
                                         int n)
{
    const size_t rb = kv->row_bytes;
    const size_t bytes = (size_t)kv->layers[0].capacity * rb;
    uint8_t *all = malloc(bytes);
    memcpy(all, rows, bytes);
    memcpy(all + (size_t)pos0 * rb, staged, (size_t)n * rb);
    struct vk_buffer b;
    upload_padded(&b, all, bytes);
    free(all);
    return b;
}

/* attention's forms: a shader (GPUs' and CPU devices' workgroup sizes,
 * and several query heads a workgroup) and the heads a workgroup takes. */
struct attention_form {
    const char *shader;
    uint32_t heads;
};
static const struct attention_form attention_forms[] = {
    {"attention", 1}, {"attention_cpu", 1}, {"attention_h2", 2},
    {"attention_h4", 4}};
enum { N_ATTENTION_FORMS = 4 };
_Static_assert(sizeof attention_forms / sizeof attention_forms[0] ==
                   N_ATTENTION_FORMS,
               "N_ATTENTION_FORMS counts attention_forms");

/* Whether a form of `heads` query heads a workgroup runs a model of n_head
 * heads over n_head_kv here: several heads a workgroup need them to
 * divide a kv head's and subgroups of VK_ATTENTION_HEADS_SUBGROUP or more
 * (attention and attention_rope alike). */
static bool heads_form_runs(uint32_t heads, int n_head, int n_head_kv)
{
    return heads == 1 ||
           ((n_head / n_head_kv) % (int)heads == 0 &&
            vk_device_subgroup_size(dev) >= VK_ATTENTION_HEADS_SUBGROUP);
}

/* out = the attention shader's n rows for queries q at positions pos0..,
 * the rows kv has staged: in stage buffers, or (in_place, a full cache)
 * in their slots, the cache bound as its own stage from row pos0, as the
 * backend runs a full cache. */
static void attention_on_device(const struct attention_form *f,
                                const struct attention_case *c,
                                const struct kv_cache *kv, int pos0, int n,
                                const float *q, bool in_place, float *out)
{
    const struct kv_layer *L = &kv->layers[0];
    const size_t nq = (size_t)n * c->n_head * c->head_dim;
    struct vk_buffer bq = buffer_with(q, nq * 4), bo = buffer_with(NULL, nq * 4);
    struct vk_buffer bkc, bvc, bks, bvs;
    if (in_place) {
        bkc = cache_with_batch(kv, L->k, kv->stage_k, pos0, n);
        bvc = cache_with_batch(kv, L->v, kv->stage_v, pos0, n);
    } else {
        upload_padded(&bkc, L->k, (size_t)L->capacity * kv->row_bytes);
        upload_padded(&bvc, L->v, (size_t)L->capacity * kv->row_bytes);
        upload_padded(&bks, kv->stage_k, (size_t)n * kv->row_bytes);
        upload_padded(&bvs, kv->stage_v, (size_t)n * kv->row_bytes);
    }
    /* pos0 as the backend passes it: a word of a buffer (here word 1) */
    const uint32_t positions[] = {0xdeadbeef, (uint32_t)pos0};
    struct vk_buffer bpos = buffer_with(positions, sizeof positions);
    const struct vk_buffer *bufs[] = {&bq, &bkc, &bvc, in_place ? &bkc : &bks,
                                      in_place ? &bvc : &bvs, &bo, &bpos};
    struct vk_push_attention push = {
        .n_rows = (uint32_t)n, .pos_at = 1,
        .n_head = (uint32_t)c->n_head, .n_head_kv = (uint32_t)c->n_head_kv,
        .head_dim = (uint32_t)c->head_dim, .type = (uint32_t)kv->type,
        .block = (uint32_t)kv->block, .row_bytes = (uint32_t)kv->row_bytes,
        .policy = (uint32_t)L->policy, .capacity = (uint32_t)L->capacity,
        .n_sink = (uint32_t)L->n_sink, .layer_window = (uint32_t)L->window,
        .model_window = (uint32_t)c->model_window,
        .scale = attention_scale(c->head_dim),
        .stage_in_place = in_place,
    };
    run(f->shader, 7, bufs, &push, sizeof push, (uint32_t)c->n_head / f->heads,
        (uint32_t)n, 1);
    download(&bo, out, nq * 4);
    vk_buffer_free(dev, &bq);
    vk_buffer_free(dev, &bo);
    vk_buffer_free(dev, &bpos);
    vk_buffer_free(dev, &bkc);
    vk_buffer_free(dev, &bvc);
    if (!in_place) {
        vk_buffer_free(dev, &bks);
        vk_buffer_free(dev, &bvs);
    }
}

/* The CPU formula in double, reading rows through kv.h: for query row t,
 * head h, value d at i = (t n_head + h) head_dim + d, want[i] and the
 * weighted magnitude mag[i] its tolerance scales with. */
static void attention_on_cpu(const struct attention_case *c,
                             const struct kv_cache *kv, const float *q,
                             double *want, double *mag)
{
    const struct kv_layer *L = &kv->layers[0];
    const int hd = c->head_dim, pos0 = c->n_past;
    const int group = c->n_head / c->n_head_kv;
    const float scale = attention_scale(hd);
    double *w = malloc((size_t)c->n_ctx * sizeof *w);
    float *row = malloc((size_t)hd * sizeof *row);
    for (int t = 0; t < c->n; t++) {
        const int p = pos0 + t;
        int sink_end, lo;
        kv_visible(L, c->model_window, p, &sink_end, &lo);
        for (int h = 0; h < c->n_head; h++) {
            const int g = h / group;
            const size_t at = ((size_t)t * c->n_head + h) * hd;
            double max = -INFINITY, sum = 0;
            for (int k = 0; k <= p; k++) {
                w[k] = NAN;
                if (k >= sink_end && k < lo)
                    continue;
                kv_load_head(kv, kv_key_row(kv, 0, k), g * hd, row);
                double dot = 0;
                for (int d = 0; d < hd; d++)
                    dot += (double)q[at + d] * row[d];
                w[k] = dot * scale;
                max = w[k] > max ? w[k] : max;
            }
            for (int d = 0; d < hd; d++)
                want[at + d] = mag[at + d] = 0;
            for (int k = 0; k <= p; k++) {
                if (isnan(w[k]))
                    continue;
                double e = exp(w[k] - max);
                sum += e;
                kv_load_head(kv, kv_value_row(kv, 0, k), g * hd, row);
                for (int d = 0; d < hd; d++) {
                    want[at + d] += e * row[d];
                    mag[at + d] += e * fabs(row[d]);
                }
            }
            for (int d = 0; d < hd; d++) {
                want[at + d] /= sum;
                mag[at + d] /= sum;
            }
        }
    }
    free(w);
    free(row);
}

/* Every form against the CPU formula, a full cache's batch both staged
 * and in its slots; the forms of several heads a workgroup give the bits
 * of attention's one head. */
static void check_attention(const struct attention_case *c)
{
    const int hd = c->head_dim, n_pos = c->n_past + c->n;
    const size_t kv_dim = (size_t)c->n_head_kv * hd;
    uint64_t s = 4242 + (uint64_t)c->n_past * 3 + (uint64_t)hd;
    float *kin = random_floats((size_t)n_pos * kv_dim, -1.0f, 1.0f, &s);
    float *vin = random_floats((size_t)n_pos * kv_dim, -1.0f, 1.0f, &s);
    struct kv_cache *kv = attention_cache(c, kin, vin, c->n_past, c->n);
    const struct kv_layer *L = &kv->layers[0];
    const int pos0 = c->n_past;
    const size_t nq = (size_t)c->n * c->n_head * hd;
    float *q = random_floats(nq, -1.0f, 1.0f, &s);
    float *got = malloc(nq * sizeof *got), *one_head[2] = {0};
    double *want = malloc(nq * sizeof *want), *mag = malloc(nq * sizeof *mag);
    attention_on_cpu(c, kv, q, want, mag);
    const bool full = c->sliding == 0 && c->sink_window == 0;
    const size_t hz = (size_t)hd, heads = (size_t)c->n_head;
    for (int i = 0; i < 2 * N_ATTENTION_FORMS; i++) {
        const struct attention_form *f = &attention_forms[i / 2];
        const char *shader = f->shader;
        const bool in_place = i % 2;
        if ((in_place && !full) ||
            !heads_form_runs(f->heads, c->n_head, c->n_head_kv))
            continue;
        attention_on_device(f, c, kv, pos0, c->n, q, in_place, got);
        if (i / 2 == 0) {
            one_head[in_place] = malloc(nq * sizeof *got);
            memcpy(one_head[in_place], got, nq * sizeof *got);
        } else if (f->heads > 1) {
            expect_same_bits(got, one_head[in_place], nq,
                             in_place ? "in place, against attention"
                                      : "against attention",
                             shader);
        }
        for (size_t j = 0; j < nq; j++)
            if (!(fabs(got[j] - want[j]) <= 1e-4 * mag[j] + 1e-7))
                fail_msg("%s %s %s%s, head_dim %d, pos0 %d: out[%zu][%zu]"
                         "[%zu] = %.9g, want %.9g", shader,
                         kv_type_name(kv->type), kv_policy_name(L->policy),
                         in_place ? " in place" : "", hd, pos0,
                         j / (heads * hz), j / hz % heads, j % hz, got[j],
                         want[j]);
    }
    free(kin);
    free(vin);
    free(q);
    free(got);
    free(one_head[0]);
    free(one_head[1]);
    free(want);
    free(mag);
    kv_free(kv);
}

static void test_attention_full_cache_matches_cpu(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* 567 positions: two chunks of keys; GQA groups of 2 */
    const struct attention_case c1 = {KV_F16, 4, 2, 64, 600, 0, 0, 0, 0, 550,
                                      17};
    /* everything in the stage buffers; head_dim 33: odd f16 rows */
    const struct attention_case c2 = {KV_F32, 2, 2, 33, 64, 0, 0, 0, 0, 0, 17};
    const struct attention_case c3 = {KV_F16, 2, 1, 33, 64, 0, 0, 0, 0, 20, 3};
    /* q8_0 rows of 34 bytes (mid-word), a model window masking a full
     * cache */
    const struct attention_case c4 = {KV_Q8_0, 2, 1, 32, 300, 0, 0, 0, 40,
                                      100, 3};
    /* ~1,100 positions: three chunks, the third reusing the first's shared
     * arrays; the decode shape (head_dim 64, f16, groups of 4) */
    const struct attention_case c5 = {KV_F16, 8, 2, 64, 1200, 0, 0, 0, 0,
                                      1090, 9};
    /* head_dim 68, rows of 272 bytes: kv head 0 sits on 16 bytes and is
     * read 8 values a load, kv head 1 (byte 136) a word at a time, in one
     * dispatch; 68 = 2 x 32 + 4 takes the dot product's tail too */
    const struct attention_case c6 = {KV_F16, 4, 2, 68, 300, 0, 0, 0, 0, 200,
                                      3};
    check_attention(&c1);
    check_attention(&c2);
    check_attention(&c3);
    check_attention(&c4);
    check_attention(&c5);
    check_attention(&c6);
}

static void test_attention_ring_cache_after_wrap_matches_cpu(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* window 32 + slack 17 = 49 slots, 200 positions committed */
    const struct attention_case c1 = {KV_F32, 2, 2, 128, 300, 32, 0, 0, 32,
                                      200, 5};
    /* q8_0 blocks of 33 (head_dim 33): values that never align */
    const struct attention_case c2 = {KV_Q8_0, 4, 2, 33, 300, 32, 0, 0, 32,
                                      190, 17};
    check_attention(&c1);
    check_attention(&c2);
}

static void test_attention_sink_window_matches_cpu(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* 4 sinks + window 24 (+ slack): head_dim 256, the most supported */
    const struct attention_case c1 = {KV_F16, 2, 1, 256, 300, 0, 24, 4, 0,
                                      150, 3};
    /* the first positions, where sink_end = p + 1; q8_0 blocks of 80 */
    const struct attention_case c2 = {KV_Q8_0, 3, 1, 80, 300, 0, 24, 4, 0, 0,
                                      6};
    const struct attention_case c3 = {KV_Q8_0, 2, 2, 64, 300, 0, 24, 4, 0, 70,
                                      17};
    check_attention(&c1);
    check_attention(&c2);
    check_attention(&c3);
}

/* Row t of a batch of c->n queries at positions n_past.. against row t
 * decoded alone at n_past + t, the batch's rows before it committed. */
static void check_attention_batch_invariance(const struct attention_form *f,
                                             const struct attention_case *c)
{
    if (!heads_form_runs(f->heads, c->n_head, c->n_head_kv))
        return;
    const char *shader = f->shader;
    const int hd = c->head_dim, n_pos = c->n_past + c->n;
    const size_t kv_dim = (size_t)c->n_head_kv * hd;
    const size_t row_q = (size_t)c->n_head * hd;
    uint64_t s = 99 + (uint64_t)c->n_past + (uint64_t)hd;
    float *kin = random_floats((size_t)n_pos * kv_dim, -1.0f, 1.0f, &s);
    float *vin = random_floats((size_t)n_pos * kv_dim, -1.0f, 1.0f, &s);
    float *q = random_floats((size_t)c->n * row_q, -1.0f, 1.0f, &s);
    float *batch = malloc((size_t)c->n * row_q * sizeof *batch);
    float *alone = malloc(row_q * sizeof *alone);

    struct kv_cache *kv = attention_cache(c, kin, vin, c->n_past, c->n);
    attention_on_device(f, c, kv, c->n_past, c->n, q, false, batch);
    kv_free(kv);
    for (int t = 0; t < c->n; t++) {
        kv = attention_cache(c, kin, vin, c->n_past + t, 1);
        attention_on_device(f, c, kv, c->n_past + t, 1, q + t * row_q, false,
                            alone);
        char what[96];
        snprintf(what, sizeof what, "%s %s, head_dim %d: row %d alone",
                 kv_type_name(kv->type), kv_policy_name(kv->layers[0].policy),
                 hd, t);
        expect_same_bits(alone, batch + t * row_q, row_q, what, shader);
        kv_free(kv);
    }
    free(kin);
    free(vin);
    free(q);
    free(batch);
    free(alone);
}

/* Speculative greedy decoding must equal plain greedy decoding: a query
 * row's attention has the same bits alone (decode) as in a verify batch. */
static void test_attention_gives_a_row_the_same_bits_alone_and_in_a_batch(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* a batch of 16 across the second chunk's start (positions 506..521);
     * the decode shape */
    const struct attention_case c1 = {KV_F16, 8, 2, 64, 600, 0, 0, 0, 0, 506,
                                      16};
    /* a ring after wrapping, value by value (q8_0 blocks of 33) */
    const struct attention_case c2 = {KV_Q8_0, 4, 2, 33, 300, 32, 0, 0, 32,
                                      190, 16};
    /* sinks + window, f32, head_dim 128 */
    const struct attention_case c3 = {KV_F32, 2, 1, 128, 300, 0, 24, 4, 0,
                                      100, 16};
    for (int i = 0; i < N_ATTENTION_FORMS; i++) {
        check_attention_batch_invariance(&attention_forms[i], &c1);
        check_attention_batch_invariance(&attention_forms[i], &c2);
        check_attention_batch_invariance(&attention_forms[i], &c3);
    }
}

/* ---- the embedded table ---- */

/* ---- the matmul's fused forms ---- */

/* Three matrices of 9, 4 and 6 rows of one type (random_rows), and x. */
struct mm_data {
    uint32_t type;
    int n_cols;
    int unit;   /* the rows of a matrix are a multiple of it */
    uint8_t *w[MM_MAX_MATS];
    int n_rows[MM_MAX_MATS];
    float *x;
};

/* Matrices of 9, 4 and 6 times `unit` rows (forms whose workgroups take
 * whole tiles of rows need whole tiles), and x. */
static struct mm_data mm_data_tiles(uint32_t type, int n_cols, int n_tokens,
                                    uint64_t seed, int unit)
{
    struct mm_data d = {.type = type, .n_cols = n_cols, .unit = unit,
                        .n_rows = {9 * unit, 4 * unit, 6 * unit}};
    const size_t row_bytes = dtype_row_bytes(type, (uint64_t)n_cols);
    uint64_t s = seed;
    for (int m = 0; m < MM_MAX_MATS; m++)
        d.w[m] = random_rows(type, n_cols, d.n_rows[m], row_bytes, &s);
    d.x = random_floats((size_t)n_tokens * n_cols, -1.0f, 1.0f, &s);
    return d;
}

static struct mm_data mm_data_new(uint32_t type, int n_cols, int n_tokens,
                                  uint64_t seed)
{
    return mm_data_tiles(type, n_cols, n_tokens, seed, 1);
}

static void mm_data_free(struct mm_data *d)
{
    for (int m = 0; m < MM_MAX_MATS; m++)
        free(d->w[m]);
    free(d->x);
}

/* The epsilon of the norms the tests fold into matmuls. */
#define NORM_EPS 1e-5f

/* Every mode, with the matrices mm_run gives it. */
static const struct mm_mode {
    uint32_t mode;
    int n_mats;
} mm_modes[] = {{MM_STORE, 3}, {MM_ADD, 1}, {MM_GATED, 2}};
enum { N_MM_MODES = sizeof mm_modes / sizeof mm_modes[0] };

/* The outputs mm_run fills in mode md: one per matrix for MM_STORE. */
static int mm_outputs(const struct mm_mode *md)
{
    return md->mode == MM_STORE ? md->n_mats : 1;
}

/* The rows of output m of mm_run in `mode` (gate and up are cut to 6
 * units). */
static int mm_out_rows(const struct mm_data *d, uint32_t mode, int m)
{
    return mode == MM_GATED ? 6 * d->unit : d->n_rows[m];
}

/* Runs `mode` over d's first n_mats matrices (MM_GATED: matrices 0 and 2,
 * 9 and 6 rows, cut to 6 rows both) into out[m]; a _norm_ shader norms x
 * by the weights `norm` first. */
static void mm_run(const char *shader, const struct mm_data *d, uint32_t mode,
                   int n_mats, bool gelu, int n_tokens, const float *x,
                   const float *norm, float *const *out, uint64_t seed)
{
    struct mm_call c = {.shader = shader, .type = d->type, .mode = mode,
                        .use_gelu = gelu, .n_cols = d->n_cols,
                        .n_mats = n_mats, .n_tokens = n_tokens, .x = x,
                        .y = out, .seed = seed, .norm = norm,
                        .eps = NORM_EPS};
    const uint8_t *w[MM_MAX_MATS];
    for (int m = 0; m < n_mats; m++) {
        int from = mode == MM_GATED && m == 1 ? 2 : m;
        w[m] = d->w[from];
        c.n_rows[m] = mm_out_rows(d, mode, from);
    }
    c.w = w;
    matmul_on_device(&c);
}

/* The fused forms give the bits of the ops they stand for: three matrices
 * in one dispatch, each as alone; MM_ADD, y + the product; MM_GATED,
 * gated_act over the products of gate and up. */
static void check_fused_tiles(const char *shader, uint32_t type, int n_cols,
                              int n_tokens, uint64_t seed, int unit)
{
    struct mm_data d = mm_data_tiles(type, n_cols, n_tokens, seed, unit);
    const size_t nt = (size_t)n_tokens;
    const size_t n0 = (size_t)d.n_rows[0], n6 = (size_t)(6 * unit);
    float *alone[MM_MAX_MATS], *together[MM_MAX_MATS];
    for (int m = 0; m < MM_MAX_MATS; m++) {
        alone[m] = malloc(nt * (size_t)d.n_rows[m] * sizeof(float));
        together[m] = malloc(nt * (size_t)d.n_rows[m] * sizeof(float));
        matmul_store(shader, type, d.w[m], n_cols, d.n_rows[m], d.x,
                     n_tokens, alone[m], seed + (uint64_t)m);
    }
    mm_run(shader, &d, MM_STORE, 3, false, n_tokens, d.x, NULL, together,
           seed);
    for (int m = 0; m < MM_MAX_MATS; m++)
        expect_same_bits(together[m], alone[m], nt * (size_t)d.n_rows[m],
                         "three matrices in one dispatch", shader);

    /* MM_ADD onto random values: each sum is one IEEE addition. */
    uint64_t s = seed ^ 0xadd;
    float *acc = random_floats(nt * n0, -4.0f, 4.0f, &s);
    float *want = malloc(nt * n0 * sizeof *want);
    for (size_t i = 0; i < nt * n0; i++)
        want[i] = acc[i] + alone[0][i];
    mm_run(shader, &d, MM_ADD, 1, false, n_tokens, d.x, NULL, &acc, seed);
    expect_same_bits(acc, want, nt * n0, "matmul then add", shader);

    /* MM_GATED against gated_act's shader over the two products (the
     * first 6 rows of matrix 0, and matrix 2). */
    for (int gelu = 0; gelu < 2; gelu++) {
        float *gate = malloc(nt * n6 * sizeof *gate);
        float *fused = malloc(nt * n6 * sizeof *fused);
        float *gate_only[MM_MAX_MATS] = {gate};
        struct mm_data six = d;
        six.n_rows[0] = (int)n6;
        mm_run(shader, &six, MM_STORE, 1, false, n_tokens, d.x, NULL,
               gate_only, seed);
        struct vk_buffer bg = buffer_with(gate, nt * n6 * 4);
        struct vk_buffer bu = buffer_with(alone[2], nt * n6 * 4);
        const struct vk_buffer *bufs[] = {&bg, &bu};
        struct vk_push_gated_act push = {(uint32_t)(nt * n6), (uint32_t)gelu};
        run("gated_act", 2, bufs, &push, sizeof push, 1, 1, 1);
        download(&bg, gate, nt * n6 * 4);
        vk_buffer_free(dev, &bg);
        vk_buffer_free(dev, &bu);
        mm_run(shader, &d, MM_GATED, 2, gelu, n_tokens, d.x, NULL, &fused,
               seed);
        expect_same_bits(fused, gate, nt * n6,
                         gelu ? "gate and up then GELU" : "gate and up then "
                                                          "SiLU", shader);
        free(gate);
        free(fused);
    }
    for (int m = 0; m < MM_MAX_MATS; m++) {
        free(alone[m]);
        free(together[m]);
    }
    free(acc);
    free(want);
    mm_data_free(&d);
}

static void check_fused_forms(const char *shader, uint32_t type, int n_cols,
                              int n_tokens, uint64_t seed)
{
    check_fused_tiles(shader, type, n_cols, n_tokens, seed, 1);
}

static void test_matmul_fused_forms_give_the_bits_of_separate_ops(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* every GPU form (vk_matmul_forms), then the rowwise one; the
     * batched forms take 17 tokens, the small-batch ones their most (the
     * 4-token form more: batches of small products, in y-groups) */
    for (int f = 0; f <= VK_MATMUL_FORMS; f++) {
        const bool rows = f == VK_MATMUL_FORMS;
        const char *prefix = rows ? "rows_" : vk_matmul_forms[f].prefix;
        const int most = rows || f == VK_MATMUL_FORMS - 1
                             ? 17 : vk_matmul_forms[f].max_batch;
        const int more = f == VK_FORM_T4 ? VK_SMALL_MAX_BATCH : most,
                  some = most < 5 ? most : 5;
        char q8[64], f16[64], q4k[64];
        snprintf(q8, sizeof q8, "matmul_%sq8_0", prefix);
        snprintf(f16, sizeof f16, "matmul_%sf16", prefix);
        snprintf(q4k, sizeof q4k, "matmul_%sq4_k", prefix);
        check_fused_forms(q8, KK_Q8_0, 32 * 67, 1, 11);
        check_fused_forms(q8, KK_Q8_0, 32 * 12, more, 12);
        check_fused_forms(q8, KK_Q8_0, 32 * 64, some, 15);
        check_fused_forms(f16, KK_F16, 1000, some, 13);
        check_fused_forms(q4k, KK_Q4_K, 256 * 3, most < 3 ? most : 3,
                          14);
    }
}

/* Token t of a batch of 17 through `batched`, against the same token
 * through `part`, in batches of `k` (the last one shorter), in every mode,
 * to the bit; both norm x with the weights `norm` first where that is not
 * NULL (_norm_ forms). The parts' grid is the least the form allows. */
static void check_same_bits_normed(const char *batched, const char *part,
                                   int k, const struct mm_data *d,
                                   const float *norm)
{
    enum { TOKENS = 17 };
    const int n_cols = d->n_cols;
    for (int i = 0; i < N_MM_MODES; i++) {
        const struct mm_mode *md = &mm_modes[i];
        /* outputs of up to 9 tiles of the int8 tile forms' rows (64 at
         * most: vk_mma_rows) */
        enum { MOST_ROWS = 9 * 64 };
        static float batch[MM_MAX_MATS][TOKENS * MOST_ROWS],
            some[MM_MAX_MATS][TOKENS * MOST_ROWS];
        float *bp[MM_MAX_MATS], *sp[MM_MAX_MATS];
        for (int m = 0; m < MM_MAX_MATS; m++) {
            memset(batch[m], 0, sizeof batch[m]);
            bp[m] = batch[m];
            sp[m] = some[m];
        }
        mm_run(batched, d, md->mode, md->n_mats, false, TOKENS, d->x, norm,
               bp, 0);
        for (int t0 = 0; t0 < TOKENS; t0 += k) {
            const int n = TOKENS - t0 < k ? TOKENS - t0 : k;
            memset(some, 0, sizeof some);
            mm_run(part, d, md->mode, md->n_mats, false, n,
                   d->x + (size_t)t0 * n_cols, norm, sp, 1);
            for (int m = 0; m < mm_outputs(md); m++) {
                int rows = mm_out_rows(d, md->mode, m);
                for (int t = 0; t < n; t++)
                    if (memcmp(some[m] + (size_t)t * rows,
                               batch[m] + (size_t)(t0 + t) * rows,
                               (size_t)rows * sizeof(float)))
                        fail_msg("%s %d cols, mode %u, matrix %d: token %d "
                                 "of a batch of %d differs from token %d of "
                                 "a batch of %d (%s)", part, n_cols,
                                 md->mode, m, t, n, t0 + t, TOKENS,
                                 batched);
            }
        }
    }
}

/* check_same_bits_normed with x as it is (no norm folded in). */
static void check_same_bits_by_parts(const char *batched, const char *part,
                                     int k, const struct mm_data *d)
{
    check_same_bits_normed(batched, part, k, d, NULL);
}

/* A token's product does not depend on the batch it is in: speculative
 * verification (a batch) must reproduce plain decoding (one token) to the
 * bit, or greedy output could part at a near-tie. Every shader form (the
 * GPU's small-batch forms against its batched one), a quantized type (rows
 * 16-byte aligned, 4-byte aligned, and not; rows of 2, 3 and 8+ groups per
 * thread), a half and a K-quant type, every fused form: 17 tokens against
 * each alone, and against batches of 3 and of the small forms' sizes;
 * the decode form, where the device has it, against each alone. */
static void test_matmul_gives_a_token_the_same_bits_alone_and_in_a_batch(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    static const struct {
        uint32_t type;
        const char *name;
        int n_cols;
    } cases[] = {{KK_Q8_0, "q8_0", 32 * 64}, {KK_Q8_0, "q8_0", 32 * 30},
                 {KK_Q8_0, "q8_0", 32 * 67}, {KK_Q8_0, "q8_0", 32 * 264},
                 {KK_F16, "f16", 1000}, {KK_Q4_K, "q4_k", 256 * 5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct mm_data d = mm_data_new(cases[c].type, cases[c].n_cols, 17,
                                       0x5eed + c);
        char gpu[64], rows[64], small[64];
        snprintf(gpu, sizeof gpu, "matmul_%s", cases[c].name);
        snprintf(rows, sizeof rows, "matmul_rows_%s", cases[c].name);
        check_same_bits_by_parts(gpu, gpu, 1, &d);
        check_same_bits_by_parts(gpu, gpu, 3, &d);
        check_same_bits_by_parts(rows, rows, 1, &d);
        for (int f = 0; f < N_SMALL_FORMS; f++) {
            snprintf(small, sizeof small, "matmul_%s%s",
                     vk_matmul_forms[f].prefix, cases[c].name);
            check_same_bits_by_parts(gpu, small, vk_matmul_forms[f].max_batch,
                                     &d);
        }
        /* the one-token form also takes short batches, a y-group a token */
        snprintf(small, sizeof small, "matmul_%s%s", vk_matmul_forms[0].prefix,
                 cases[c].name);
        check_same_bits_by_parts(gpu, small, VK_ONE_MAX_BATCH, &d);
        /* and the 4-token form batches of small products, in y-groups */
        snprintf(small, sizeof small, "matmul_%s%s",
                 vk_matmul_forms[VK_FORM_T4].prefix, cases[c].name);
        assert_int_equal(vk_matmul_forms[VK_FORM_T4].max_tokens, 4);
        check_same_bits_by_parts(gpu, small, VK_SMALL_MAX_BATCH, &d);
        if (has_decode_forms()) {
            snprintf(small, sizeof small, "matmul_%s%s",
                     VK_MATMUL_DECODE_PREFIX, cases[c].name);
            check_same_bits_by_parts(gpu, small, 1, &d);
        }
        mm_data_free(&d);
    }
    if (!has_decode_forms())
        fprintf(stderr, "*** SKIPPED: the decode forms (matmul_dec_<t>): "
                "this device's subgroups are %u wide (0: not fixed), they "
                "need %d; tools/gpu-bench.sh runs these tests on the NVIDIA "
                "GPU\n", vk_device_subgroup_size(dev), VK_DECODE_SUBGROUP);
}

/* ---- the norm folded into the matmul ---- */

/* rmsnorm's shader over n_tokens rows of x (n_cols each, weights wt): the
 * rows a plain form multiplies where the norm is a dispatch of its own. */
static float *rmsnorm_on_device(const float *x, const float *wt, int n_cols,
                                int n_tokens)
{
    const size_t n = (size_t)n_cols * (size_t)n_tokens;
    float *h = malloc(n * sizeof *h);
    struct vk_buffer bx = buffer_with(x, n * 4);
    struct vk_buffer by = buffer_with(NULL, n * 4);
    struct vk_buffer bw = buffer_with(wt, (size_t)n_cols * 4);
    const struct vk_buffer *bufs[] = {&bx, &by, &bw};
    struct vk_push_rmsnorm push = {(uint32_t)n_cols, (uint32_t)n_tokens,
                                   NORM_EPS};
    run("rmsnorm", 3, bufs, &push, sizeof push, (uint32_t)n_tokens, 1, 1);
    download(&by, h, n * 4);
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &by);
    vk_buffer_free(dev, &bw);
    return h;
}

/* matmul_<norm_prefix><t> on x against matmul_<prefix><t> on rmsnorm's
 * rows of x, in every mode, to the bit. */
static void check_norm_form(const char *prefix, const char *norm_prefix,
                            const char *type_name, uint32_t type, int n_cols,
                            int n_tokens, uint64_t seed)
{
    struct mm_data d = mm_data_new(type, n_cols, n_tokens, seed);
    uint64_t s = seed ^ 0x4e4f524dull;
    float *wt = random_floats((size_t)n_cols, 0.5f, 1.5f, &s);
    float *h = rmsnorm_on_device(d.x, wt, n_cols, n_tokens);
    char plain[64], normed[64];
    snprintf(plain, sizeof plain, "matmul_%s%s", prefix, type_name);
    snprintf(normed, sizeof normed, "matmul_%s%s", norm_prefix, type_name);
    const size_t nt = (size_t)n_tokens;
    for (int i = 0; i < N_MM_MODES; i++) {
        const struct mm_mode *md = &mm_modes[i];
        float *want[MM_MAX_MATS], *got[MM_MAX_MATS];
        for (int m = 0; m < MM_MAX_MATS; m++) {
            want[m] = calloc(nt * (size_t)d.n_rows[m], sizeof(float));
            got[m] = calloc(nt * (size_t)d.n_rows[m], sizeof(float));
        }
        mm_run(plain, &d, md->mode, md->n_mats, false, n_tokens, h, NULL,
               want, seed);
        mm_run(normed, &d, md->mode, md->n_mats, false, n_tokens, d.x, wt,
               got, seed);
        for (int m = 0; m < mm_outputs(md); m++) {
            int rows = mm_out_rows(&d, md->mode, m);
            expect_same_bits(got[m], want[m], nt * (size_t)rows,
                             "the norm folded in, against rmsnorm first",
                             normed);
        }
        for (int m = 0; m < MM_MAX_MATS; m++) {
            free(want[m]);
            free(got[m]);
        }
    }
    free(wt);
    free(h);
    mm_data_free(&d);
}

/* A matmul that norms its input itself (decode, where the norm's own
 * dispatch would cost more than the norm) gives the bits of rmsnorm and
 * then the plain matmul (a verify batch, whose form has no norm folded
 * in): otherwise speculative output could part from plain decoding. Every
 * form with a norm form, quantized rows aligned and not, f16 rows whose x
 * is read value by value (a width not a multiple of 4), a K-quant; the
 * rowwise form also over 17 tokens (two y-groups, norms 4 at a time); the
 * decode form where the device has it. */
static void test_matmul_norm_forms_give_the_bits_of_rmsnorm_then_matmul(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    static const struct {
        uint32_t type;
        const char *name;
        int n_cols;
    } cases[] = {{KK_Q8_0, "q8_0", 32 * 64}, {KK_Q8_0, "q8_0", 32 * 67},
                 {KK_F16, "f16", 1000}, {KK_F16, "f16", 1002},
                 {KK_Q4_K, "q4_k", 256 * 3}};
    for (int f = 0; f <= VK_MATMUL_FORMS; f++) {
        const bool rows = f == VK_MATMUL_FORMS;
        const char *prefix = rows ? VK_MATMUL_ROWS_PREFIX
                                  : vk_matmul_forms[f].prefix;
        const char *norm = rows ? VK_MATMUL_ROWS_NORM_PREFIX
                                : vk_matmul_forms[f].norm_prefix;
        if (!norm)
            continue;
        const int most = rows ? 17 : vk_matmul_forms[f].max_batch;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            check_norm_form(prefix, norm, cases[c].name, cases[c].type,
                            cases[c].n_cols, 1, 0x90 + c);
            if (most > 1)
                check_norm_form(prefix, norm, cases[c].name, cases[c].type,
                                cases[c].n_cols, most, 0xa0 + c);
        }
    }
    for (size_t c = 0; has_decode_forms() && c < sizeof cases / sizeof cases[0];
         c++)
        check_norm_form(VK_MATMUL_DECODE_PREFIX, VK_MATMUL_DECODE_NORM_PREFIX,
                        cases[c].name, cases[c].type, cases[c].n_cols, 1,
                        0x90 + c);
}

/* ---- the int8 tile forms ---- */

/* The product of Q8_0 rows w with x in `shader` (a form that quantizes x:
 * the int8 tiles, the integer forms), as the CPU's Q8_0 arithmetic makes
 * it (x quantized per block of 32: amax, q = round to even(x 127 / amax),
 * scale amax / 127), within 1e-5 of the sum of the terms' magnitudes plus
 * one quant step of x per block (the shader's 127 / amax may be an ulp off
 * the exact one, moving a quant at a tie). With `norm` (a _norm_ form) x
 * is RMS-normed by those weights first. */
static void check_matmul_q8x(const char *shader, int n_cols, int n_rows,
                             int n_tokens, const float *norm, uint64_t seed)
{
    const int nb = n_cols / 32;
    const size_t row_bytes = dtype_row_bytes(KK_Q8_0, (uint64_t)n_cols);
    uint64_t s = seed;
    uint8_t *w = random_rows(KK_Q8_0, n_cols, n_rows, row_bytes, &s);
    float *x = random_floats((size_t)n_tokens * n_cols, -1.0f, 1.0f, &s);
    float *y = malloc((size_t)n_tokens * n_rows * sizeof *y);
    float *h = malloc((size_t)n_cols * sizeof *h);
    struct mm_call c = {.shader = shader, .type = KK_Q8_0, .mode = MM_STORE,
                        .n_cols = n_cols, .n_mats = 1, .n_rows = {n_rows},
                        .n_tokens = n_tokens, .w = (const uint8_t *[]){w},
                        .x = x, .y = &y, .seed = seed, .norm = norm,
                        .eps = NORM_EPS};
    matmul_on_device(&c);
    for (int t = 0; t < n_tokens; t++) {
        const float *xt = x + (size_t)t * n_cols;
        const float scale = norm ? cpu_rms_scale(xt, n_cols, NORM_EPS) : 1;
        for (int i = 0; i < n_cols; i++)
            h[i] = norm ? xt[i] * scale * norm[i] : xt[i];
        for (int r = 0; r < n_rows; r++) {
            const uint8_t *row = w + (size_t)r * row_bytes;
            double ref = 0, mag = 0, step = 0;
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = row + 34 * b;
                double dw = fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
                double amax = 0;
                for (int j = 0; j < 32; j++)
                    amax = fmax(amax, fabs(h[32 * b + j]));
                double id = amax > 0 ? 127.0 / amax : 0, dx = amax / 127.0;
                long isum = 0;
                for (int j = 0; j < 32; j++) {
                    long qw = (int8_t)blk[2 + j];
                    isum += qw * lrint(h[32 * b + j] * id);
                    mag += fabs(dw * qw * h[32 * b + j]);
                }
                ref += dw * dx * (double)isum;
                step = fmax(step, fabs(dw) * dx * 128.0);
            }
            expect_product(shader, n_cols, n_rows, n_tokens, t, r,
                           y[(size_t)t * n_rows + r], ref, mag,
                           1e-5 * mag + step);
        }
    }
    free(w);
    free(x);
    free(y);
    free(h);
}

/* On a device with int8 tiles (the NVIDIA GPU) prefill's products of a
 * Q8_0 matrix go through the matmul_mma<rows>_q8_0 forms: each must
 * compute the CPU's Q8_0 product (rows of 8 to 264 blocks, 16-byte, 4-byte
 * and 2-byte aligned, tiles of rows and of tokens whole and short, one
 * tile of tokens and several), give a token the same bits alone and in
 * any batch (a prompt cut into chunks another way gets the same cache) and
 * in every form (the backend picks the form by the batch's size), and give
 * the fused modes the bits of the separate ops. */
static void test_matmul_mma_forms_agree_with_the_cpu_and_themselves(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    if (!vk_device_has_int8_mma(dev)) {
        fprintf(stderr, "*** SKIPPED: the int8 tile forms (matmul_mma*): "
                "this device has no int8 cooperative matrices of 16 x 8 x "
                "32; tools/gpu-bench.sh runs these tests on the NVIDIA "
                "GPU\n");
        return;
    }
    char first[64];
    vk_mma_shader_name(first, sizeof first, 0);
    for (int f = 0; f < VK_MMA_FORMS; f++) {
        char mma[64];
        vk_mma_shader_name(mma, sizeof mma, f);
        const int unit = vk_mma_rows[f];
        check_matmul_q8x(mma, 256, 16, 1, NULL, 1);
        check_matmul_q8x(mma, 2048, 48, 8, NULL, 2);
        check_matmul_q8x(mma, 32 * 264, 32, 17, NULL, 3);
        check_matmul_q8x(mma, 1024 + 256, 16, 3, NULL, 4);
        /* rows 4-byte aligned, then 2-byte aligned */
        check_matmul_q8x(mma, 32 * 30, 32, 9, NULL, 5);
        check_matmul_q8x(mma, 32 * 67, 16, 5, NULL, 6);
        /* tiles of rows and of tokens short, two tiles of tokens */
        check_matmul_q8x(mma, 2048, 200, 70, NULL, 7);
        check_fused_tiles(mma, KK_Q8_0, 2048, 70, 0x6a, unit);
        static const int widths[] = {256, 2048, 32 * 264, 32 * 30, 32 * 67};
        for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
            struct mm_data d = mm_data_tiles(KK_Q8_0, widths[i], 17,
                                             0x3a + i, unit);
            check_same_bits_by_parts(mma, mma, 1, &d);
            check_same_bits_by_parts(mma, mma, 3, &d);
            check_same_bits_by_parts(first, mma, 17, &d);
            mm_data_free(&d);
            check_fused_tiles(mma, KK_Q8_0, widths[i], 1, 0x4a + i, unit);
            check_fused_tiles(mma, KK_Q8_0, widths[i], 11, 0x5a + i, unit);
        }
    }
}

/* ---- the integer forms ---- */

/* Where the device runs them (vk_device_has_int_dot), every Q8_0 product
 * of a decode or verify batch goes through the integer forms, so each must
 * compute the CPU's Q8_0 product (x quantized per block; rows of 12 to
 * 264 blocks, 16-byte, 4-byte and 2-byte aligned, rows wider than a chunk
 * of x in shared memory, row sets not full, one workgroup taking every
 * set; normed first in the _norm_ forms), give a token the same bits
 * decoded and in a verify batch of any size (or speculative output could
 * part from plain decoding at a near-tie), and give the fused modes the
 * bits of the separate ops. */
static void test_matmul_qx_forms_agree_with_the_cpu_and_themselves(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    if (!vk_device_has_int_dot(dev)) {
        fprintf(stderr, "*** SKIPPED: the integer forms (matmul_qx): this "
                "device has no packed int8 dot products, clustered subgroup "
                "operations or subgroups of a fixed multiple of 8 lanes\n");
        return;
    }
    static const int widths[] = {32 * 12, 2048, 32 * 264, 32 * 30, 32 * 67};
    uint64_t s = 0x71;
    float *wt = random_floats(32 * 264, 0.5f, 1.5f, &s);
    char name[VK_QX_FORMS][2][64];
    for (int f = 0; f < VK_QX_FORMS; f++)
        for (int k = 0; k < 2; k++) {
            vk_qx_shader_name(name[f][k], sizeof name[f][k], f, k);
            const int most = vk_qx_forms[f].max_batch;
            for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
                check_matmul_q8x(name[f][k], widths[i], 37 + (int)i,
                                 1 + (int)i * 5 % most, k ? wt : NULL,
                                 (uint64_t)(10 * f + i));
            check_matmul_q8x(name[f][k], 2048, 70, most, k ? wt : NULL, 7);
        }
    /* a batch of 17 in the last form against its tokens in every form */
    enum { ONE, FOUR, EIGHT, PAIRS };
    _Static_assert(PAIRS == VK_QX_FORMS - 1, "the forms in vk_qx_forms");
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
            struct mm_data d = mm_data_tiles(KK_Q8_0, widths[i], 17,
                                             0x6a + i, 5);
            const float *norm = k ? wt : NULL;
            check_same_bits_normed(name[PAIRS][k], name[ONE][k], 1, &d, norm);
            check_same_bits_normed(name[PAIRS][k], name[FOUR][k], 2, &d, norm);
            check_same_bits_normed(name[PAIRS][k], name[FOUR][k], 4, &d, norm);
            check_same_bits_normed(name[PAIRS][k], name[EIGHT][k], 5, &d,
                                   norm);
            check_same_bits_normed(name[PAIRS][k], name[EIGHT][k], 8, &d,
                                   norm);
            check_same_bits_normed(name[PAIRS][k], name[PAIRS][k], 9, &d,
                                   norm);
            mm_data_free(&d);
        }
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        check_fused_tiles(name[ONE][0], KK_Q8_0, widths[i], 1, 0x7a + i, 1);
        check_fused_tiles(name[FOUR][0], KK_Q8_0, widths[i], 3, 0x8a + i, 7);
        check_fused_tiles(name[EIGHT][0], KK_Q8_0, widths[i], 7, 0x9a + i, 9);
        check_fused_tiles(name[PAIRS][0], KK_Q8_0, widths[i], 11, 0xaa + i,
                          9);
    }
    free(wt);
}

/* ---- rope_kv_store ---- */

/* n_rows x n_groups groups of dim values of buffer b normed in place by
 * the rmsnorm shader with weights w. */
static void rmsnorm_in_place(struct vk_buffer *b, struct vk_buffer *w,
                             int n_groups, int dim, float eps)
{
    struct vk_push_rmsnorm pn = {(uint32_t)dim, (uint32_t)n_groups, eps};
    run("rmsnorm", 3, (const struct vk_buffer *[]){b, b, w}, &pn, sizeof pn,
        (uint32_t)n_groups, 1, 1);
}

/* One case of rope_kv_store: with norms, rope_kv_store_norm against
 * rmsnorm of each head of q and k first. */
struct rkv_case {
    enum kv_type type;
    int style, n_rot, head_dim;
    bool norms;
};

/* The fused dispatch gives the bits of rope on q and k, then kv_store of k
 * and v (with norms: of rmsnorm on each head of q and k first). */
static void check_rope_kv_store(const struct rkv_case *c)
{
    const int n_rows = 3, n_head = 4, n_head_kv = 2, head_dim = c->head_dim;
    const int n_rot = c->n_rot;
    const enum kv_type type = c->type;
    const float eps = 1e-6f;
    struct kv_cache *kv = new_cache(type, n_head_kv, head_dim, 32, 8, NULL,
                                    0, 0);
    uint64_t s = 4321 + (uint64_t)type * 3 + (uint64_t)c->style +
                 (uint64_t)head_dim;
    const size_t nq = (size_t)n_rows * n_head * head_dim;
    const size_t nk = (size_t)n_rows * kv->kv_dim;
    float *q = random_floats(nq, -1.0f, 1.0f, &s);
    /* normed keys from kv_input's extremes would all be NaN or 0 */
    float *k = c->norms ? random_floats(nk, -3.0f, 3.0f, &s)
                        : kv_input(type, n_rows, kv->kv_dim, kv->block, &s);
    float *v = kv_input(type, n_rows, kv->kv_dim, kv->block, &s);
    /* the angles, then (word n_rows * n_rot) the batch's first position */
    const size_t n_angles = (size_t)n_rows * n_rot;
    float *cs = random_floats(n_angles + 1, -1.0f, 1.0f, &s);
    float *qw = random_floats((size_t)head_dim, 0.5f, 1.5f, &s);
    float *kw = random_floats((size_t)head_dim, 0.5f, 1.5f, &s);
    const size_t room = ((size_t)n_rows * kv->row_bytes + 3) / 4 * 4 + 8;
    uint8_t *want_k = malloc(room), *want_v = malloc(room);
    /* the fused dispatch writes rows of whole words in place, as in a full
     * cache's slots, from the row of position 3 (word `shift`), with
     * untouched bytes before; others at word 0 */
    const bool in_place = kv->row_bytes % 4 == 0;
    const uint32_t pos0 = 3;
    const uint32_t shift = in_place ? pos0 * (uint32_t)(kv->row_bytes / 4) : 0;
    memcpy(cs + n_angles, &pos0, sizeof pos0);
    uint8_t *got_k = malloc(room + 4 * shift);
    uint8_t *got_v = malloc(room + 4 * shift);
    float *want_q = malloc(nq * 4), *got_q = malloc(nq * 4);
    memset(got_k, 0xa5, room + 4 * shift);

    /* rmsnorm, rope on q and k, then kv_store of each */
    struct vk_buffer bq = buffer_with(q, nq * 4), bk = buffer_with(k, nk * 4);
    struct vk_buffer bv = buffer_with(v, nk * 4);
    struct vk_buffer bc = buffer_with(cs, (n_angles + 1) * 4);
    struct vk_buffer bqw = buffer_with(qw, (size_t)head_dim * 4);
    struct vk_buffer bkw = buffer_with(kw, (size_t)head_dim * 4);
    struct vk_buffer sk = buffer_with(got_k, room), sv = buffer_with(got_k,
                                                                     room);
    if (c->norms) {
        rmsnorm_in_place(&bq, &bqw, n_rows * n_head, head_dim, eps);
        rmsnorm_in_place(&bk, &bkw, n_rows * n_head_kv, head_dim, eps);
    }
    struct vk_push_rope rq = {(uint32_t)n_rows, (uint32_t)n_head,
                              (uint32_t)head_dim, (uint32_t)n_rot,
                              (uint32_t)c->style};
    struct vk_push_rope rk = rq;
    rk.n_heads = (uint32_t)n_head_kv;
    run("rope", 2, (const struct vk_buffer *[]){&bq, &bc}, &rq, sizeof rq,
        64, 1, 1);
    run("rope", 2, (const struct vk_buffer *[]){&bk, &bc}, &rk, sizeof rk,
        64, 1, 1);
    struct vk_push_kv_store ps = {(uint32_t)n_rows, (uint32_t)kv->kv_dim,
                                  (uint32_t)type, (uint32_t)kv->block,
                                  (uint32_t)kv->row_bytes, 0, 0, 0, 0, 0};
    uint32_t words = ceil_div(ceil_div((uint64_t)n_rows * kv->row_bytes, 4),
                              64);
    run("kv_store", 2, (const struct vk_buffer *[]){&bk, &sk}, &ps,
        sizeof ps, words, 1, 1);
    run("kv_store", 2, (const struct vk_buffer *[]){&bv, &sv}, &ps,
        sizeof ps, words, 1, 1);
    download(&bq, want_q, nq * 4);
    download(&sk, want_k, room);
    download(&sv, want_v, room);
    vk_buffer_free(dev, &bq);
    vk_buffer_free(dev, &bk);
    vk_buffer_free(dev, &sk);
    vk_buffer_free(dev, &sv);

    /* the fused dispatch, from the same inputs */
    bq = buffer_with(q, nq * 4);
    bk = buffer_with(k, nk * 4);
    sk = buffer_with(got_k, room + 4 * shift);
    sv = buffer_with(got_k, room + 4 * shift);
    struct vk_push_rope_kv_store pf = {
        (uint32_t)n_rows, (uint32_t)n_head, (uint32_t)n_head_kv,
        (uint32_t)head_dim, (uint32_t)n_rot, (uint32_t)c->style,
        (uint32_t)type, (uint32_t)kv->block, (uint32_t)kv->row_bytes,
        in_place, (uint32_t)n_angles, KV_FULL, 0, 0, eps};
    const struct vk_buffer *fused[] = {&bq, &bk, &bv, &bc,
                                       &sk, &sv, &bqw, &bkw};
    uint32_t pairs = ceil_div((uint64_t)n_rows * n_head * (n_rot / 2), 64);
    if (c->norms)
        run("rope_kv_store_norm", 8, fused, &pf, sizeof pf,
            (uint32_t)(n_head + n_head_kv), (uint32_t)n_rows, 1);
    else
        run("rope_kv_store", 6, fused, &pf, sizeof pf,
            pairs > words ? pairs : words, 3, 1);
    const char *shader = c->norms ? "rope_kv_store_norm" : "rope_kv_store";
    download(&bq, got_q, nq * 4);
    download(&sk, got_k, room + 4 * shift);
    download(&sv, got_v, room + 4 * shift);
    expect_same_bits(got_q, want_q, nq, "the queries", shader);
    if (memcmp(got_k + 4 * shift, want_k, room) ||
        memcmp(got_v + 4 * shift, want_v, room))
        fail_msg("%s %s style %d n_rot %d head_dim %d: staged rows differ "
                 "from the separate dispatches", shader, kv_type_name(type),
                 c->style, n_rot, head_dim);
    for (size_t i = 0; i < 4 * shift; i++)
        if (got_k[i] != 0xa5 || got_v[i] != 0xa5)
            fail_msg("%s %s: byte %zu before word %u was overwritten",
                     shader, kv_type_name(type), i, shift);
    struct vk_buffer *all[] = {&bq, &bk, &bv, &bc, &sk, &sv, &bqw, &bkw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vk_buffer_free(dev, all[i]);
    free(q), free(k), free(v), free(cs), free(qw), free(kw);
    free(want_k), free(want_v), free(got_k), free(got_v);
    free(want_q), free(got_q);
    kv_free(kv);
}

static void check_rope_kv_store_cases(bool norms)
{
    const enum kv_type types[] = {KV_F32, KV_F16, KV_Q8_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int style = 0; style < 2; style++) {
            struct rkv_case c = {types[t], style, 64, 64, norms};
            check_rope_kv_store(&c);
            c.n_rot = 32;   /* the rest of each head only normed */
            check_rope_kv_store(&c);
            if (types[t] != KV_Q8_0) {
                /* heads narrower than the norm's lanes' first step */
                c.head_dim = c.n_rot = 40;
                check_rope_kv_store(&c);
            }
        }
}

static void test_rope_kv_store_gives_the_bits_of_rope_then_kv_store(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_rope_kv_store_cases(false);
}

static void test_rope_kv_store_norm_gives_the_bits_of_rmsnorm_first(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_rope_kv_store_cases(true);
}

/* ---- attention_rope ---- */

/* A layer's batch for attention_rope: a cache of n_past positions
 * (full, a ring of window `sliding`, or sink+window), then n rows of q, k
 * and v as the products leave them. */
struct rope_attention_case {
    enum kv_type type;
    int n_head, n_head_kv, head_dim, n_rot, style;
    bool norms;
    int sliding;
    int n_past, n;
    int sink_window, n_sink;
    /* attention_rope's splits (vk_shaders.h): the fewest positions a split
     * takes (0: none), the most splits a row (0: no limit), and splits a
     * workgroup takes in a batch (0: 1); a row decoded alone is checked
     * with one a workgroup */
    int split_keys, max_splits, split_group;
};

/* Inputs both ways start from: the batch, its angles (and, at word
 * pos_at, its first position), the norms' weights. */
struct rope_attention_data {
    float *q, *k, *v, *cs, *qw, *kw;
    uint32_t pos_at;
};

/* The device buffers of n rows of a batch both ways use: its inputs, the
 * attention output, and the cache's rows (kc, vc) from k_in and v_in. */
struct rope_attention_buffers {
    struct vk_buffer q, k, v, cs, qw, kw, out, kc, vc;
};

static void rope_attention_upload(const struct rope_attention_case *c,
                                  const struct kv_cache *kv,
                                  const struct rope_attention_data *d, int n,
                                  const uint8_t *k_in, const uint8_t *v_in,
                                  struct rope_attention_buffers *b)
{
    const size_t nq = (size_t)n * c->n_head * c->head_dim;
    const size_t nk = (size_t)n * kv->kv_dim, hd = (size_t)c->head_dim;
    const size_t cache = (size_t)kv->layers[0].capacity * kv->row_bytes;
    b->q = buffer_with(d->q, nq * 4);
    b->k = buffer_with(d->k, nk * 4);
    b->v = buffer_with(d->v, nk * 4);
    b->cs = buffer_with(d->cs, (d->pos_at + 1) * 4);
    b->qw = buffer_with(d->qw, hd * 4);
    b->kw = buffer_with(d->kw, hd * 4);
    b->out = buffer_with(NULL, nq * 4);
    b->kc = buffer_with(k_in, cache);
    b->vc = buffer_with(v_in, cache);
}

static void rope_attention_buffers_free(struct rope_attention_buffers *b)
{
    struct vk_buffer *all[] = {&b->q,  &b->k,   &b->v,  &b->cs, &b->qw,
                               &b->kw, &b->out, &b->kc, &b->vc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vk_buffer_free(dev, all[i]);
}

/* attention's push constants for n rows of case c (the rows in their
 * slots); attention_rope's fields are left for the caller. */
static struct vk_push_attention rope_attention_push(
    const struct rope_attention_case *c, const struct kv_cache *kv,
    const struct rope_attention_data *d, int n)
{
    const struct kv_layer *L = &kv->layers[0];
    return (struct vk_push_attention){
        .n_rows = (uint32_t)n, .pos_at = d->pos_at,
        .n_head = (uint32_t)c->n_head, .n_head_kv = (uint32_t)c->n_head_kv,
        .head_dim = (uint32_t)c->head_dim, .type = (uint32_t)kv->type,
        .block = (uint32_t)kv->block, .row_bytes = (uint32_t)kv->row_bytes,
        .policy = (uint32_t)L->policy, .capacity = (uint32_t)L->capacity,
        .n_sink = (uint32_t)L->n_sink, .layer_window = (uint32_t)L->window,
        .model_window = (uint32_t)c->sliding,
        .scale = attention_scale(c->head_dim), .stage_in_place = 1,
    };
}

/* rope_kv_store (or _norm) into the slots (the cache's rows after it in
 * k_rows, v_rows), then attention of its rotated queries over the cache
 * whose rows are k_att and v_att: out. */
static void rope_then_attention(const struct rope_attention_case *c,
                                const struct kv_cache *kv,
                                const struct rope_attention_data *d,
                                const char *attention, const uint8_t *k_att,
                                const uint8_t *v_att, float *out,
                                uint8_t *k_rows, uint8_t *v_rows)
{
    const struct kv_layer *L = &kv->layers[0];
    const int n = c->n, hd = c->head_dim;
    const size_t nq = (size_t)n * c->n_head * hd;
    const size_t cache = (size_t)L->capacity * kv->row_bytes;
    struct rope_attention_buffers b;
    rope_attention_upload(c, kv, d, n, L->k, L->v, &b);
    struct vk_push_rope_kv_store pr = {
        (uint32_t)n, (uint32_t)c->n_head, (uint32_t)c->n_head_kv,
        (uint32_t)hd, (uint32_t)c->n_rot, (uint32_t)c->style,
        (uint32_t)kv->type, (uint32_t)kv->block, (uint32_t)kv->row_bytes, 1,
        d->pos_at, (uint32_t)L->policy, (uint32_t)L->capacity,
        (uint32_t)L->n_sink, 1e-6f};
    const struct vk_buffer *rb[] = {&b.q,  &b.k,  &b.v,  &b.cs,
                                    &b.kc, &b.vc, &b.qw, &b.kw};
    if (c->norms) {
        run("rope_kv_store_norm", 8, rb, &pr, sizeof pr,
            (uint32_t)(c->n_head + c->n_head_kv), (uint32_t)n, 1);
    } else {
        uint32_t pairs = ceil_div((uint64_t)nq / 2, 64);
        uint32_t words = ceil_div(ceil_div((uint64_t)n * kv->row_bytes, 4),
                                  64);
        run("rope_kv_store", 6, rb, &pr, sizeof pr,
            pairs > words ? pairs : words, 3, 1);
    }
    download(&b.kc, k_rows, cache);
    download(&b.vc, v_rows, cache);
    struct vk_buffer ka = buffer_with(k_att, cache), va = buffer_with(v_att,
                                                                      cache);
    const struct vk_push_attention pa = rope_attention_push(c, kv, d, n);
    const struct vk_buffer *ab[] = {&b.q, &ka, &va, &ka, &va, &b.out, &b.cs};
    run(attention, 7, ab, &pa, sizeof pa, (uint32_t)c->n_head, (uint32_t)n,
        1);
    download(&b.out, out, nq * 4);
    vk_buffer_free(dev, &ka);
    vk_buffer_free(dev, &va);
    rope_attention_buffers_free(&b);
}

/* The most splits a row of case c. */
static uint32_t rope_attention_max_splits(const struct rope_attention_case *c)
{
    return c->max_splits > 0 ? (uint32_t)c->max_splits : UINT32_MAX;
}

/* The most splits of a row of n rows of case c from position pos0 (1:
 * none). */
static uint32_t rope_attention_splits(const struct rope_attention_case *c,
                                      const struct kv_cache *kv, int pos0,
                                      int n)
{
    return vk_attention_most_splits(&kv->layers[0], c->sliding, pos0, n,
                                    (uint32_t)c->split_keys,
                                    rope_attention_max_splits(c));
}

/* A form of attention_rope: its shader, the query heads a workgroup, and
 * the separate attention shader it is checked against. */
struct rope_attention_form {
    const char *shader;
    uint32_t heads;
    const char *separate;
};

/* n rows of a batch through attention_rope form f alone (rows split with
 * `group` splits a workgroup, whose last merges them), on a cache whose
 * rows are k_in and v_in (bytes). The split counts it is given are zero
 * and must be zero again after it, for the next dispatch. */
static void rope_attention_fused(const struct rope_attention_case *c,
                                 const struct kv_cache *kv,
                                 const struct rope_attention_data *d, int n,
                                 const struct rope_attention_form *f,
                                 uint32_t group,
                                 const uint8_t *k_in, const uint8_t *v_in,
                                 float *out, uint8_t *k_rows, uint8_t *v_rows)
{
    const size_t nq = (size_t)n * c->n_head * c->head_dim;
    const size_t cache = (size_t)kv->layers[0].capacity * kv->row_bytes;
    struct rope_attention_buffers b;
    rope_attention_upload(c, kv, d, n, k_in, v_in, &b);
    struct vk_push_attention pa = rope_attention_push(c, kv, d, n);
    pa.n_rot = (uint32_t)c->n_rot;
    pa.style = (uint32_t)c->style;
    pa.has_norm = c->norms;
    pa.head_bytes = (uint32_t)(kv->row_bytes / (size_t)c->n_head_kv);
    pa.eps = 1e-6f;
    uint32_t pos0;
    memcpy(&pos0, d->cs + d->pos_at, sizeof pos0);
    const uint32_t splits = rope_attention_splits(c, kv, (int)pos0, n);
    pa.split_keys = (uint32_t)c->split_keys;
    pa.split_group = group;
    pa.max_splits = rope_attention_max_splits(c);
    pa.split_stride = splits;
    struct vk_buffer parts = buffer_with(
        NULL, (size_t)nq / (size_t)c->head_dim * splits *
                  (size_t)(c->head_dim + 2) * 4);
    const size_t n_counts = (size_t)n * (size_t)c->n_head;
    struct vk_buffer counts = buffer_with(NULL, n_counts * 4);
    const struct vk_buffer *ab[] = {&b.q,  &b.kc, &b.vc,  &b.k,
                                    &b.v,  &b.out, &b.cs, &b.qw,
                                    &b.kw, &parts, &counts};
    run(f->shader, 11, ab, &pa, sizeof pa, (uint32_t)c->n_head / f->heads,
        (uint32_t)n, ceil_div(splits, group));
    uint32_t *left = malloc(n_counts * 4);
    download(&counts, left, n_counts * 4);
    for (size_t i = 0; i < n_counts; i++)
        if (left[i] != 0)
            fail_msg("%s: split count %zu left at %u", f->shader, i,
                     left[i]);
    free(left);
    vk_buffer_free(dev, &parts);
    vk_buffer_free(dev, &counts);
    download(&b.out, out, nq * 4);
    download(&b.kc, k_rows, cache);
    download(&b.vc, v_rows, cache);
    rope_attention_buffers_free(&b);
}

/* Row t of the batch d decoded alone by attention_rope at n_past + t,
 * on the cache the whole batch left (k_in, v_in: a row sees no slot the
 * batch wrote after it), into out. */
static void rope_attention_row_alone(const struct rope_attention_case *c,
                                     const struct kv_cache *kv,
                                     const struct rope_attention_data *d,
                                     int t,
                                     const struct rope_attention_form *f,
                                     const uint8_t *k_in, const uint8_t *v_in,
                                     float *out, uint8_t *k_rows,
                                     uint8_t *v_rows)
{
    const size_t row_q = (size_t)c->n_head * c->head_dim;
    const size_t kv_dim = (size_t)kv->kv_dim, n_rot = (size_t)c->n_rot;
    float *cs = malloc((n_rot + 1) * sizeof *cs);
    memcpy(cs, d->cs + t * n_rot, n_rot * sizeof *cs);
    const uint32_t pos = (uint32_t)(c->n_past + t);
    memcpy(cs + n_rot, &pos, sizeof pos);
    const struct rope_attention_data row = {
        .q = d->q + t * row_q, .k = d->k + t * kv_dim, .v = d->v + t * kv_dim,
        .cs = cs, .qw = d->qw, .kw = d->kw, .pos_at = (uint32_t)n_rot};
    rope_attention_fused(c, kv, &row, 1, f, 1, k_in, v_in, out, k_rows,
                         v_rows);
    free(cs);
}

/* The cache rows got (k or v) against want: the same bytes but in the
 * batch's slots (positions n_past..), whose values may be a rounding apart
 * (the rotation in another shader may round its last bit otherwise, which
 * an f16 or q8_0 rounding can carry to a unit of the type). */
static void expect_rows_near(const struct rope_attention_case *c,
                             const struct kv_cache *kv, const uint8_t *got,
                             const uint8_t *want, bool values,
                             const char *shader, const char *what)
{
    const struct kv_layer *L = &kv->layers[0];
    const size_t rb = kv->row_bytes, cache = (size_t)L->capacity * rb;
    bool *batch = calloc(L->capacity, sizeof *batch);
    for (int pos = c->n_past; pos < c->n_past + c->n; pos++)
        batch[(kv_key_row(kv, 0, pos) - L->k) / rb] = true;
    const double unit = kv->type == KV_F32 ? 0x1p-23
                        : kv->type == KV_F16 ? 0x1p-10 : 3.0 / 127;
    float *a = malloc((size_t)c->head_dim * sizeof *a);
    float *b = malloc((size_t)c->head_dim * sizeof *b);
    for (size_t slot = 0; slot < cache / rb; slot++) {
        if (!memcmp(got + slot * rb, want + slot * rb, rb))
            continue;
        if (!batch[slot])
            fail_msg("%s %s: slot %zu of the %s, not the batch's, was "
                     "changed", shader, what, slot, values ? "values" : "keys");
        for (int h = 0; h < c->n_head_kv; h++) {
            kv_load_head(kv, got + slot * rb, h * c->head_dim, a);
            kv_load_head(kv, want + slot * rb, h * c->head_dim, b);
            for (int i = 0; i < c->head_dim; i++)
                if (!(fabs(a[i] - b[i]) <= unit * fmax(1.0, fabs(b[i]))))
                    fail_msg("%s %s: slot %zu head %d value %d of the %s is "
                             "%.9g, rope_kv_store stored %.9g", shader, what,
                             slot, h, i, values ? "values" : "keys", a[i],
                             b[i]);
        }
    }
    free(batch), free(a), free(b);
}

/* attention_rope stores the batch's rows as rope_kv_store does (within a
 * rounding: another shader), gives the attention output of rope_kv_store's
 * queries over those rows (within rounding), and gives each row of a batch
 * the bits of that row decoded alone, in both workgroup sizes — what keeps
 * greedy speculative output equal to plain. The forms of several query
 * heads a workgroup (where the case's heads of a kv head divide into them
 * and the device takes them) also give every head attention_rope's bits
 * and store its bytes. */
static void check_rope_attention(const struct rope_attention_case *c)
{
    const int hd = c->head_dim, n = c->n;
    const size_t kv_dim = (size_t)c->n_head_kv * hd;
    uint64_t s = 777 + (uint64_t)c->type * 5 + (uint64_t)c->n_past +
                 (uint64_t)n;
    const struct attention_case ac = {c->type,    c->n_head,
                                      c->n_head_kv, hd,
                                      c->n_past + n + 8, c->sliding,
                                      c->sink_window, c->n_sink,
                                      0,          c->n_past,
                                      0};
    float *kin = random_floats((size_t)c->n_past * kv_dim + 1, -1, 1, &s);
    float *vin = random_floats((size_t)c->n_past * kv_dim + 1, -1, 1, &s);
    struct kv_cache *kv = attention_cache(&ac, kin, vin, c->n_past, 0);
    const size_t nq = (size_t)n * c->n_head * hd;
    const size_t cache = (size_t)kv->layers[0].capacity * kv->row_bytes;
    struct rope_attention_data d = {
        .q = random_floats(nq, -1, 1, &s),
        .k = random_floats((size_t)n * kv_dim, -3, 3, &s),
        .v = random_floats((size_t)n * kv_dim, -1, 1, &s),
        .cs = random_floats((size_t)n * c->n_rot + 1, -1, 1, &s),
        .qw = random_floats((size_t)hd, 0.5f, 1.5f, &s),
        .kw = random_floats((size_t)hd, 0.5f, 1.5f, &s),
        .pos_at = (uint32_t)(n * c->n_rot),
    };
    const uint32_t pos0 = (uint32_t)c->n_past;
    memcpy(d.cs + d.pos_at, &pos0, sizeof pos0);
    const size_t row_q = (size_t)c->n_head * hd;
    float *want = malloc(nq * 4), *got = malloc(nq * 4), *alone = malloc(nq * 4);
    uint8_t *want_k = malloc(cache), *want_v = malloc(cache);
    uint8_t *got_k = malloc(cache), *got_v = malloc(cache);
    uint8_t *row_k = malloc(cache), *row_v = malloc(cache);
    const struct kv_layer *L = &kv->layers[0];
    char what[160];
    snprintf(what, sizeof what,
             "%s %s%s, %d rows after %d, head_dim %d, splits of %d or more "
             "(at most %d, %d a workgroup)",
             kv_type_name(kv->type), kv_policy_name(L->policy),
             c->norms ? ", heads normed" : "", n, c->n_past, hd,
             c->split_keys, c->max_splits, c->split_group);
    static const struct rope_attention_form forms[] = {
        {"attention_rope", 1, "attention"},
        {"attention_rope_h2", 2, "attention"},
        {"attention_rope_h4", 4, "attention"},
        {"attention_rope_cpu", 1, "attention_cpu"}};
    float *one_head = malloc(nq * 4);
    uint8_t *one_head_k = malloc(cache), *one_head_v = malloc(cache);
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        const struct rope_attention_form *f = &forms[i];
        if (!heads_form_runs(f->heads, c->n_head, c->n_head_kv))
            continue;
        const char *shader = f->shader;
        rope_attention_fused(c, kv, &d, n, f,
                             c->split_group > 0 ? (uint32_t)c->split_group
                                                : 1,
                             L->k, L->v, got, got_k, got_v);
        if (i == 0) {
            memcpy(one_head, got, nq * 4);
            memcpy(one_head_k, got_k, cache);
            memcpy(one_head_v, got_v, cache);
        } else if (f->heads > 1) {
            expect_same_bits(got, one_head, nq, what, shader);
            if (memcmp(got_k, one_head_k, cache) ||
                memcmp(got_v, one_head_v, cache))
                fail_msg("%s %s: stored other bytes than attention_rope",
                         shader, what);
        }
        rope_then_attention(c, kv, &d, f->separate, got_k, got_v, want,
                            want_k, want_v);
        expect_rows_near(c, kv, got_k, want_k, false, shader, what);
        expect_rows_near(c, kv, got_v, want_v, true, shader, what);
        for (size_t j = 0; j < nq; j++)
            if (!(fabsf(got[j] - want[j]) <= 1e-5f * fabsf(want[j]) + 1e-7f))
                fail_msg("%s %s: out[%zu] = %.9g, rope_kv_store then "
                         "attention give %.9g", shader, what, j, got[j],
                         want[j]);
        for (int t = 0; t < n; t++) {
            rope_attention_row_alone(c, kv, &d, t, f, got_k, got_v, alone,
                                     row_k, row_v);
            if (memcmp(row_k, got_k, cache) || memcmp(row_v, got_v, cache))
                fail_msg("%s %s: row %d alone stored other bytes", shader,
                         what, t);
            char row[200];
            snprintf(row, sizeof row, "%s: row %d alone", what, t);
            expect_same_bits(alone, got + t * row_q, row_q, row, shader);
        }
    }
    free(kin), free(vin), free(want), free(got), free(alone), free(one_head);
    free(want_k), free(want_v), free(got_k), free(got_v), free(row_k),
        free(row_v), free(one_head_k), free(one_head_v);
    free(d.q), free(d.k), free(d.v), free(d.cs), free(d.qw), free(d.kw);
    kv_free(kv);
}

static void test_attention_rope_stores_rope_kv_store_bytes_and_rows_alone_bits(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* llama: adjacent pairs, no norms; a decode step and a verify block */
    struct rope_attention_case c = {.type = KV_F16, .n_head = 4,
                                    .n_head_kv = 2, .head_dim = 64,
                                    .n_rot = 64, .n_past = 40, .n = 1};
    check_rope_attention(&c);
    c.n = 17;
    check_rope_attention(&c);
    /* qwen3/gemma3: heads normed, NEOX pairs; a ring past its wrap */
    const struct rope_attention_case ring = {
        .type = KV_Q8_0, .n_head = 4, .n_head_kv = 1, .head_dim = 64,
        .n_rot = 64, .style = 1, .norms = true, .sliding = 24, .n_past = 70,
        .n = 5};
    check_rope_attention(&ring);
    /* part of each head rotated; f32 rows; the first batch of a cache */
    const struct rope_attention_case part = {
        .type = KV_F32, .n_head = 2, .n_head_kv = 2, .head_dim = 64,
        .n_rot = 32, .style = 1, .norms = true, .n = 3};
    check_rope_attention(&part);
    /* sink+window past its wrap: the batch lands on slots of positions
     * no query of it sees */
    const struct rope_attention_case sink = {
        .type = KV_F16, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
        .n_rot = 64, .n = 9, .n_past = 60, .sink_window = 24, .n_sink = 4};
    check_rope_attention(&sink);
    /* heads of 128, 8 queries to a key head */
    const struct rope_attention_case wide = {
        .type = KV_F16, .n_head = 8, .n_head_kv = 1, .head_dim = 128,
        .n_rot = 128, .style = 1, .norms = true, .sliding = 32, .n_past = 100,
        .n = 17};
    check_rope_attention(&wide);
}

/* Rows that see more than split_keys positions are cut into splits whose
 * partials the row's last workgroup adds: the output is the unsplit attention's
 * (within rounding) and a row gets the same bits in a batch (several
 * splits a workgroup) as decoded alone (one) — the splits of a row depend
 * on its position alone. Splits here are a few positions, so that small
 * caches have many, and one may hold both cached and staged rows. */
static void test_attention_rope_splits_long_rows_and_keeps_rows_alone_bits(
    void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    /* 57 positions seen by the last row, splits of 16: the third split
     * holds cached positions 32..39 and the batch's from 40 on */
    struct rope_attention_case c = {.type = KV_F16, .n_head = 4,
                                    .n_head_kv = 2, .head_dim = 64,
                                    .n_rot = 64, .n_past = 40, .n = 17,
                                    .split_keys = 16, .split_group = 3};
    check_rope_attention(&c);
    /* a decode step of 4 splits, one a workgroup */
    c.n = 1;
    c.split_group = 1;
    check_rope_attention(&c);
    /* at most 3 splits a row, of whole 16s: 57 positions in 32 + 25, 41
     * in 16 + 16 + 9 */
    c.n = 17;
    c.max_splits = 3;
    c.split_group = 2;
    check_rope_attention(&c);
    /* rows of 11..16 positions whole, 17..19 split, in one batch */
    const struct rope_attention_case edge = {
        .type = KV_F32, .n_head = 2, .n_head_kv = 1, .head_dim = 64,
        .n_rot = 32, .style = 1, .norms = true, .n_past = 10, .n = 9,
        .split_keys = 16, .split_group = 2};
    check_rope_attention(&edge);
    /* a ring past its wrap and sink+window past its wrap */
    const struct rope_attention_case ring = {
        .type = KV_Q8_0, .n_head = 4, .n_head_kv = 1, .head_dim = 64,
        .n_rot = 64, .style = 1, .norms = true, .sliding = 24, .n_past = 70,
        .n = 5, .split_keys = 7, .split_group = 2};
    check_rope_attention(&ring);
    const struct rope_attention_case sink = {
        .type = KV_F16, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
        .n_rot = 64, .n = 9, .n_past = 60, .sink_window = 24, .n_sink = 4,
        .split_keys = 10, .split_group = 4};
    check_rope_attention(&sink);
    /* heads of 128 */
    const struct rope_attention_case wide = {
        .type = KV_F16, .n_head = 8, .n_head_kv = 1, .head_dim = 128,
        .n_rot = 128, .style = 1, .norms = true, .n_past = 100, .n = 17,
        .split_keys = 48, .split_group = 1};
    check_rope_attention(&wide);
    /* splits of two chunks of the GPU form (600 positions: 512 + 88), where
     * a head's running sums are rescaled: 4 query heads a kv head */
    const struct rope_attention_case chunks = {
        .type = KV_F16, .n_head = 8, .n_head_kv = 2, .head_dim = 64,
        .n_rot = 64, .n_past = 1300, .n = 5, .split_keys = 600,
        .split_group = 2};
    check_rope_attention(&chunks);
}

/* ---- rmsnorm_add ---- */

/* rmsnorm_add gives y the bits of rmsnorm of x then add into y. */
static void check_rmsnorm_add(int dim, int n_rows, uint64_t seed)
{
    uint64_t s = seed;
    const size_t n = (size_t)dim * n_rows;
    const float eps = 1e-6f;
    float *x = random_floats(n, -2.0f, 2.0f, &s);
    float *y = random_floats(n, -4.0f, 4.0f, &s);
    float *wt = random_floats((size_t)dim, 0.5f, 1.5f, &s);
    float *want = malloc(n * 4), *got = malloc(n * 4);
    struct vk_buffer bx = buffer_with(x, n * 4), by = buffer_with(y, n * 4);
    struct vk_buffer bw = buffer_with(wt, (size_t)dim * 4);
    rmsnorm_in_place(&bx, &bw, n_rows, dim, eps);
    struct vk_push_add pa = {(uint32_t)n, 0};
    run("add", 2, (const struct vk_buffer *[]){&by, &bx}, &pa, sizeof pa,
        ceil_div(n, 256), 1, 1);
    download(&by, want, n * 4);
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &by);

    bx = buffer_with(x, n * 4);
    by = buffer_with(y, n * 4);
    struct vk_push_rmsnorm pn = {(uint32_t)dim, (uint32_t)n_rows, eps};
    run("rmsnorm_add", 3, (const struct vk_buffer *[]){&bx, &by, &bw}, &pn,
        sizeof pn, (uint32_t)n_rows, 1, 1);
    download(&by, got, n * 4);
    expect_same_bits(got, want, n, "the sums", "rmsnorm_add");
    /* and the sum is y + x normed, within rmsnorm's tolerance */
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * dim;
        const float scale = cpu_rms_scale(xr, dim, eps);
        for (int i = 0; i < dim; i++) {
            size_t at = (size_t)r * dim + i;
            float w = y[at] + xr[i] * scale * wt[i];
            if (!(fabsf(got[at] - w) <= 1e-5f * (fabsf(y[at]) + 4.0f)))
                fail_msg("rmsnorm_add dim %d row %d [%d]: %.9g, want %.9g",
                         dim, r, i, got[at], w);
        }
    }
    vk_buffer_free(dev, &bx);
    vk_buffer_free(dev, &by);
    vk_buffer_free(dev, &bw);
    free(x), free(y), free(wt), free(want), free(got);
}

static void test_rmsnorm_add_gives_the_bits_of_rmsnorm_then_add(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    check_rmsnorm_add(384, 3, 11);
    check_rmsnorm_add(4096, 2, 12);
    check_rmsnorm_add(7, 5, 13);
}

/* ---- the embedded table ---- */

static void test_every_shader_is_embedded(void **state)
{
    (void)state;
    static const char *names[] = {
        "matmul_f32", "matmul_f16", "matmul_bf16", "matmul_q8_0",
        "matmul_q4_0", "matmul_q5_0", "matmul_q4_k", "matmul_q6_k",
        "matmul_one_f32", "matmul_one_q8_0", "matmul_one_q6_k",
        "matmul_t4_f16", "matmul_t4_q8_0", "matmul_t4_q4_k",
        "matmul_t8_bf16", "matmul_t8_q8_0", "matmul_t8_q4_0",
        "matmul_t8_q5_0", "matmul_rows_f32", "matmul_rows_f16", "matmul_rows_bf16",
        "matmul_rows_q8_0", "matmul_rows_q4_0", "matmul_rows_q5_0",
        "matmul_rows_q4_k", "matmul_rows_q6_k", "matmul_qx1_q8_0",
        "matmul_qx4_norm_q8_0", "matmul_qx8_q8_0",
        "rmsnorm", "rmsnorm_add", "rope", "add", "gated_act", "kv_store",
        "rope_kv_store", "rope_kv_store_norm", "attention", "attention_cpu",
        "attention_h2", "attention_h4",
        "attention_rope", "attention_rope_h2", "attention_rope_h4",
        "attention_rope_cpu", "argmax"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const struct vk_spirv *sh = vk_shader_find(names[i]);
        if (!sh)
            fail_msg("no embedded shader %s", names[i]);
        assert_string_equal(sh->name, names[i]);
        assert_true(sh->bytes > 20 && sh->bytes % 4 == 0);
        assert_int_equal(sh->code[0], 0x07230203); /* SPIR-V magic */
    }
    assert_null(vk_shader_find("matmul_q2_k"));
}

/* ---- the shaders' arithmetic as compiled ----
 *
 * A token gets the same bits decoded and verified only if every form of a
 * computation rounds it the same way. A product (a * b) that meets a sum
 * (+ c) may be fused into one fma by the driver's compiler in one form
 * and not in another, unless the sum or the product is NoContraction
 * (`precise`) — and glslc's loop unrolling keeps that decoration on the
 * first copy of an instruction only: attention_h2's other heads' `s *
 * scale - m`, unrolled, were open to fusing, and parted from attention's
 * bits on the NVIDIA driver; Q4_K's d sc q - dmin m was open in every
 * form. This walks each embedded shader's SPIR-V for an undecorated
 * product that reaches an undecorated sum, through the instructions that
 * pass a value on unchanged (or negated). */

enum {
    SPV_DECORATE = 71, SPV_VECTOR_SHUFFLE = 79, SPV_COMPOSITE_CONSTRUCT = 80,
    SPV_COMPOSITE_EXTRACT = 81, SPV_COPY_OBJECT = 83, SPV_FNEGATE = 127,
    SPV_FADD = 129, SPV_FSUB = 131, SPV_FMUL = 133,
    SPV_VECTOR_TIMES_SCALAR = 142, SPV_MATRIX_TIMES_SCALAR = 143,
    SPV_SELECT = 169, SPV_PHI = 245, SPV_NO_CONTRACTION = 42
};

/* The id operands of instruction `in` (wc words) that carry a value on:
 * [*first, *end) of its words. */
static bool spv_passes_on(const uint32_t *in, uint32_t wc, uint32_t *first,
                          uint32_t *end, uint32_t *step)
{
    *first = 3, *end = wc, *step = 1;
    switch (in[0] & 0xffff) {
    case SPV_COMPOSITE_CONSTRUCT: case SPV_COPY_OBJECT: case SPV_FNEGATE:
        return true;
    case SPV_COMPOSITE_EXTRACT:
        *end = 4;          /* then literal indices */
        return true;
    case SPV_VECTOR_SHUFFLE:
        *end = 5;          /* two vectors, then literal components */
        return true;
    case SPV_SELECT:
        *first = 4;        /* after the condition */
        return true;
    case SPV_PHI:
        *step = 2;         /* (value, parent block) pairs */
        return true;
    default:
        return false;
    }
}

/* Sums (FAdd, FSub) that a driver may fuse with a product: neither is
 * NoContraction and the product reaches the sum unchanged or negated. */
static int spv_fusable_sums(const uint32_t *code, size_t words)
{
    const uint32_t bound = code[3];
    bool *fixed = calloc(bound, 1), *product = calloc(bound, 1);
    /* Decorations come before any function in a module, so a product is
     * known fixed or not when it is met. Every walk stops at a zero word
     * count (malformed). */
    for (size_t i = 5; i < words && code[i] >> 16; i += code[i] >> 16) {
        const uint32_t op = code[i] & 0xffff;
        if (op == SPV_DECORATE && code[i + 2] == SPV_NO_CONTRACTION &&
            code[i + 1] < bound)
            fixed[code[i + 1]] = true;
        if ((op == SPV_FMUL || op == SPV_VECTOR_TIMES_SCALAR ||
             op == SPV_MATRIX_TIMES_SCALAR) && code[i + 2] < bound &&
            !fixed[code[i + 2]])
            product[code[i + 2]] = true;
    }
    for (bool grew = true; grew;) {   /* phis may name later ids */
        grew = false;
        for (size_t i = 5; i < words && code[i] >> 16; i += code[i] >> 16) {
            uint32_t first, end, step;
            const uint32_t wc = code[i] >> 16;
            if (!spv_passes_on(&code[i], wc, &first, &end, &step) || wc < 4 ||
                code[i + 2] >= bound || product[code[i + 2]])
                continue;
            const uint32_t id = code[i + 2];
            for (uint32_t k = first; k < end && k < wc; k += step)
                if (code[i + k] < bound && product[code[i + k]]) {
                    product[id] = grew = true;
                    break;
                }
        }
    }
    int n = 0;
    for (size_t i = 5; i < words && code[i] >> 16; i += code[i] >> 16) {
        const uint32_t op = code[i] & 0xffff;
        if ((op == SPV_FADD || op == SPV_FSUB) && code[i + 2] < bound &&
            !fixed[code[i + 2]] &&
            ((code[i + 3] < bound && product[code[i + 3]]) ||
             (code[i + 4] < bound && product[code[i + 4]])))
            n++;
    }
    free(fixed);
    free(product);
    return n;
}

static void test_no_shader_leaves_a_product_for_the_driver_to_fuse(
    void **state)
{
    (void)state;
    int shaders = 0;
    for (const struct vk_spirv *sh; (sh = vk_shader_at(shaders)); shaders++) {
        const int n = spv_fusable_sums(sh->code, sh->bytes / 4);
        if (n)
            fail_msg("%s: %d sums a driver may fuse with a product before "
                     "them (their bits then depend on the compilation): "
                     "write the fma, or keep products and sums apart",
                     sh->name, n);
    }
    assert_true(shaders > 40);
    /* and the walk finds one: a product left before a sum */
    static const uint32_t fused[] = {
        0x07230203, 0x00010000, 0, 9, 0,
        (5u << 16) | SPV_FMUL, 1, 4, 2, 3,
        (4u << 16) | SPV_FNEGATE, 1, 5, 4,
        (5u << 16) | SPV_FADD, 1, 6, 5, 2,
        (5u << 16) | SPV_FADD, 1, 7, 2, 3};
    assert_int_equal(spv_fusable_sums(fused, sizeof fused / 4), 1);
    static const uint32_t apart[] = {
        0x07230203, 0x00010000, 0, 9, 0,
        (3u << 16) | SPV_DECORATE, 6, SPV_NO_CONTRACTION,
        (5u << 16) | SPV_FMUL, 1, 4, 2, 3,
        (5u << 16) | SPV_FADD, 1, 6, 4, 2};
    assert_int_equal(spv_fusable_sums(apart, sizeof apart / 4), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_shader_is_embedded),
        cmocka_unit_test(
            test_no_shader_leaves_a_product_for_the_driver_to_fuse),
        cmocka_unit_test(
            test_matmul_gives_a_token_the_same_bits_alone_and_in_a_batch),
        cmocka_unit_test(
            test_matmul_fused_forms_give_the_bits_of_separate_ops),
        cmocka_unit_test(
            test_rope_kv_store_gives_the_bits_of_rope_then_kv_store),
        cmocka_unit_test(
            test_rope_kv_store_norm_gives_the_bits_of_rmsnorm_first),
        cmocka_unit_test(test_rmsnorm_add_gives_the_bits_of_rmsnorm_then_add),
        cmocka_unit_test(
            test_matmul_mma_forms_agree_with_the_cpu_and_themselves),
        cmocka_unit_test(test_matmul_f32_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_f16_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_bf16_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_q8_0_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_q4_0_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_q5_0_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_q4_k_matches_dequantized_rows),
        cmocka_unit_test(test_matmul_q6_k_matches_dequantized_rows),
        cmocka_unit_test(test_rmsnorm_matches_cpu_in_place_and_not),
        cmocka_unit_test(
            test_matmul_norm_forms_give_the_bits_of_rmsnorm_then_matmul),
        cmocka_unit_test(
            test_rope_norm_and_neox_match_cpu_and_leave_unrotated_dims),
        cmocka_unit_test(test_add_elementwise_broadcast_and_grid_stride),
        cmocka_unit_test(test_argmax_chooses_as_sample_argmax),
        cmocka_unit_test(test_sample_draws_as_the_host),
        cmocka_unit_test(test_gated_act_silu_matches_cpu),
        cmocka_unit_test(test_gated_act_gelu_rounds_through_f16_like_ggml),
        cmocka_unit_test(test_kv_store_writes_kv_c_rows_byte_for_byte),
        cmocka_unit_test(
            test_kv_store_f16_rounds_every_half_midpoint_like_the_cpu),
        cmocka_unit_test(
            test_matmul_qx_forms_agree_with_the_cpu_and_themselves),
        cmocka_unit_test(test_attention_full_cache_matches_cpu),
        cmocka_unit_test(test_attention_ring_cache_after_wrap_matches_cpu),
        cmocka_unit_test(test_attention_sink_window_matches_cpu),
        cmocka_unit_test(
            test_attention_gives_a_row_the_same_bits_alone_and_in_a_batch),
        cmocka_unit_test(
            test_attention_rope_stores_rope_kv_store_bytes_and_rows_alone_bits),
        cmocka_unit_test(
            test_attention_rope_splits_long_rows_and_keeps_rows_alone_bits),
    };
    testutil_filter_from_env();
    return cmocka_run_group_tests(tests, open_device, close_device);
}
