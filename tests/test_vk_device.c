/* test_vk_device.c — the Vulkan device layer does what vk_device.h says.
 *
 * Devices are listed with a name and a type; opening refuses an index past
 * the last device and never picks a software renderer by itself. Bytes go
 * to the device and back unchanged, in chunks and at odd offsets; recorded
 * copies and dispatches move and compute what they should; thousands of
 * small buffers share a few memory blocks without overlapping; a recording
 * long enough to go to the GPU in many chunks runs in the order it was
 * recorded; a recording mistake comes back from vk_submit_wait as a
 * message, also after earlier chunks of the recording were submitted.
 * Under KAKEYA_VK_PROFILE the table printed at close gives the driver's
 * statistics of each dispatched pipeline, or says the device has none.
 * A recording made twice is submitted again from a kept command buffer,
 * with each pass's own host data; one that parts from it anywhere runs as
 * recorded; freeing a buffer forgets what was kept.
 *
 * Runs on whatever the loader offers (lavapipe, the CPU driver, on machines
 * without a GPU). With no Vulkan device at all every test says SKIP loudly
 * and skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtype.h"
#include "kakeya.h"
#include "model.h"
#include "vk_device.h"
#include "vk_model.h"

/* What vk_submit.c stages through in one submission (VK_STAGING_BYTES):
 * transfers above it take several chunks. */
#define STAGING_CHUNK ((size_t)64 << 20)

/* y = a * scale + b, kept here as SPIR-V so the test needs no build step:
 *
 *   #version 450
 *   layout(local_size_x = 64) in;
 *   layout(std430, binding = 0) readonly buffer A { float a[]; };
 *   layout(std430, binding = 1) readonly buffer B { float b[]; };
 *   layout(std430, binding = 2) writeonly buffer Y { float y[]; };
 *   layout(push_constant) uniform P { uint n; float scale; } p;
 *   void main()
 *   {
 *       uint i = gl_GlobalInvocationID.x;
 *       if (i < p.n)
 *           y[i] = a[i] * p.scale + b[i];
 *   }
 *
 * compiled with `glslc --target-env=vulkan1.1 -O -mfmt=num`. */
static const uint32_t axpb_spirv[] = {
    0x07230203, 0x00010300, 0x000d000b, 0x0000003c, 0x00000000, 0x00020011,
    0x00000001, 0x0006000b, 0x00000001, 0x4c534c47, 0x6474732e, 0x3035342e,
    0x00000000, 0x0003000e, 0x00000000, 0x00000001, 0x0006000f, 0x00000005,
    0x00000004, 0x6e69616d, 0x00000000, 0x0000000b, 0x00060010, 0x00000004,
    0x00000011, 0x00000040, 0x00000001, 0x00000001, 0x00040047, 0x0000000b,
    0x0000000b, 0x0000001c, 0x00050048, 0x00000012, 0x00000000, 0x00000023,
    0x00000000, 0x00050048, 0x00000012, 0x00000001, 0x00000023, 0x00000004,
    0x00030047, 0x00000012, 0x00000002, 0x00040047, 0x0000001e, 0x00000006,
    0x00000004, 0x00040048, 0x0000001f, 0x00000000, 0x00000019, 0x00050048,
    0x0000001f, 0x00000000, 0x00000023, 0x00000000, 0x00030047, 0x0000001f,
    0x00000002, 0x00040047, 0x00000021, 0x00000022, 0x00000000, 0x00040047,
    0x00000021, 0x00000021, 0x00000002, 0x00040047, 0x00000023, 0x00000006,
    0x00000004, 0x00040048, 0x00000024, 0x00000000, 0x00000018, 0x00050048,
    0x00000024, 0x00000000, 0x00000023, 0x00000000, 0x00030047, 0x00000024,
    0x00000002, 0x00040047, 0x00000026, 0x00000022, 0x00000000, 0x00040047,
    0x00000026, 0x00000021, 0x00000000, 0x00040047, 0x00000030, 0x00000006,
    0x00000004, 0x00040048, 0x00000031, 0x00000000, 0x00000018, 0x00050048,
    0x00000031, 0x00000000, 0x00000023, 0x00000000, 0x00030047, 0x00000031,
    0x00000002, 0x00040047, 0x00000033, 0x00000022, 0x00000000, 0x00040047,
    0x00000033, 0x00000021, 0x00000001, 0x00040047, 0x0000003b, 0x0000000b,
    0x00000019, 0x00020013, 0x00000002, 0x00030021, 0x00000003, 0x00000002,
    0x00040015, 0x00000006, 0x00000020, 0x00000000, 0x00040017, 0x00000009,
    0x00000006, 0x00000003, 0x00040020, 0x0000000a, 0x00000001, 0x00000009,
    0x0004003b, 0x0000000a, 0x0000000b, 0x00000001, 0x0004002b, 0x00000006,
    0x0000000c, 0x00000000, 0x00040020, 0x0000000d, 0x00000001, 0x00000006,
    0x00030016, 0x00000011, 0x00000020, 0x0004001e, 0x00000012, 0x00000006,
    0x00000011, 0x00040020, 0x00000013, 0x00000009, 0x00000012, 0x0004003b,
    0x00000013, 0x00000014, 0x00000009, 0x00040015, 0x00000015, 0x00000020,
    0x00000001, 0x0004002b, 0x00000015, 0x00000016, 0x00000000, 0x00040020,
    0x00000017, 0x00000009, 0x00000006, 0x00020014, 0x0000001a, 0x0003001d,
    0x0000001e, 0x00000011, 0x0003001e, 0x0000001f, 0x0000001e, 0x00040020,
    0x00000020, 0x0000000c, 0x0000001f, 0x0004003b, 0x00000020, 0x00000021,
    0x0000000c, 0x0003001d, 0x00000023, 0x00000011, 0x0003001e, 0x00000024,
    0x00000023, 0x00040020, 0x00000025, 0x0000000c, 0x00000024, 0x0004003b,
    0x00000025, 0x00000026, 0x0000000c, 0x00040020, 0x00000028, 0x0000000c,
    0x00000011, 0x0004002b, 0x00000015, 0x0000002b, 0x00000001, 0x00040020,
    0x0000002c, 0x00000009, 0x00000011, 0x0003001d, 0x00000030, 0x00000011,
    0x0003001e, 0x00000031, 0x00000030, 0x00040020, 0x00000032, 0x0000000c,
    0x00000031, 0x0004003b, 0x00000032, 0x00000033, 0x0000000c, 0x0004002b,
    0x00000006, 0x00000039, 0x00000040, 0x0004002b, 0x00000006, 0x0000003a,
    0x00000001, 0x0006002c, 0x00000009, 0x0000003b, 0x00000039, 0x0000003a,
    0x0000003a, 0x00050036, 0x00000002, 0x00000004, 0x00000000, 0x00000003,
    0x000200f8, 0x00000005, 0x00050041, 0x0000000d, 0x0000000e, 0x0000000b,
    0x0000000c, 0x0004003d, 0x00000006, 0x0000000f, 0x0000000e, 0x00050041,
    0x00000017, 0x00000018, 0x00000014, 0x00000016, 0x0004003d, 0x00000006,
    0x00000019, 0x00000018, 0x000500b0, 0x0000001a, 0x0000001b, 0x0000000f,
    0x00000019, 0x000300f7, 0x0000001d, 0x00000000, 0x000400fa, 0x0000001b,
    0x0000001c, 0x0000001d, 0x000200f8, 0x0000001c, 0x00060041, 0x00000028,
    0x00000029, 0x00000026, 0x00000016, 0x0000000f, 0x0004003d, 0x00000011,
    0x0000002a, 0x00000029, 0x00050041, 0x0000002c, 0x0000002d, 0x00000014,
    0x0000002b, 0x0004003d, 0x00000011, 0x0000002e, 0x0000002d, 0x00060041,
    0x00000028, 0x00000035, 0x00000033, 0x00000016, 0x0000000f, 0x0004003d,
    0x00000011, 0x00000036, 0x00000035, 0x0008000c, 0x00000011, 0x00000037,
    0x00000001, 0x00000032, 0x0000002a, 0x0000002e, 0x00000036, 0x00060041,
    0x00000028, 0x00000038, 0x00000021, 0x00000016, 0x0000000f, 0x0003003e,
    0x00000038, 0x00000037, 0x000200f9, 0x0000001d, 0x000200f8, 0x0000001d,
    0x000100fd, 0x00010038,
};

struct push_axpb {
    uint32_t n;
    float scale;
};

/* ---- fixtures ---- */

/* The devices the loader lists (at most 8 described), or -1 after a loud
 * SKIP line and skip() when there is none. */
static int list_or_skip(struct kk_vk_device_info *info)
{
    struct kk_error err = {{0}};
    int n = vk_device_list(info, 8, &err);
    if (n <= 0) {
        fprintf(stderr, "SKIP (no Vulkan device): %s\n",
                n < 0 ? err.msg : "the loader reports no device");
        skip();
    }
    return n;
}

/* The first usable device (index 0 on a machine with only lavapipe), or a
 * loud skip when there is none. */
static struct vk_device *open_or_skip(void)
{
    struct kk_vk_device_info info[8];
    int n = list_or_skip(info);
    int index = -1;
    for (int i = 0; i < n && i < 8 && index < 0; i++)
        if (info[i].is_usable)
            index = i;
    if (index < 0) {
        fprintf(stderr, "SKIP (no Vulkan device): none of the %d device(s) "
                "is usable: %s\n", n, info[0].why_not);
        skip();
    }
    struct vk_device *d = NULL;
    struct kk_error err = {{0}};
    if (vk_device_open(index, &d, &err))
        fail_msg("vk_device_open(%d): %s", index, err.msg);
    assert_non_null(d);
    return d;
}

static struct vk_buffer new_buffer(struct vk_device *d, VkDeviceSize size,
                                   enum vk_memory where)
{
    struct vk_buffer b;
    struct kk_error err = {{0}};
    if (vk_buffer_new(d, size, where, &b, &err))
        fail_msg("vk_buffer_new(%llu): %s", (unsigned long long)size,
                 err.msg);
    return b;
}

/* Reproducible bytes that differ with seed and position. */
static void fill_bytes(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (unsigned char)(s >> 56);
    }
}

static void upload(struct vk_device *d, struct vk_buffer *b,
                   VkDeviceSize offset, const void *src, size_t n)
{
    struct kk_error err = {{0}};
    if (vk_upload(d, b, offset, src, n, &err))
        fail_msg("vk_upload: %s", err.msg);
}

static void download(struct vk_device *d, const struct vk_buffer *b,
                     VkDeviceSize offset, void *dst, size_t n)
{
    struct kk_error err = {{0}};
    if (vk_download(d, b, offset, dst, n, &err))
        fail_msg("vk_download: %s", err.msg);
}

static void submit(struct vk_device *d)
{
    struct kk_error err = {{0}};
    if (vk_submit_wait(d, &err))
        fail_msg("vk_submit_wait: %s", err.msg);
}

static void begin(struct vk_device *d)
{
    struct kk_error err = {{0}};
    if (vk_begin(d, &err))
        fail_msg("vk_begin: %s", err.msg);
}

static struct vk_pipeline axpb_pipeline(struct vk_device *d)
{
    struct vk_pipeline p;
    struct kk_error err = {{0}};
    if (vk_pipeline_new(d, axpb_spirv, sizeof axpb_spirv, 3,
                        sizeof(struct push_axpb), &p, &err))
        fail_msg("vk_pipeline_new: %s", err.msg);
    return p;
}

/* A chain of `steps` commands, each reading what the one before wrote:
 * step i moves the values from one of a pair of buffers to the other,
 * adding 1 (a dispatch of axpb with the ones of `one`) or, every seventh
 * step, unchanged (a copy). Returns how much the chain adds; the result
 * is in pair[steps % 2]. */
static int record_chain(struct vk_device *d, const struct vk_pipeline *p,
                        struct vk_buffer *pair, const struct vk_buffer *one,
                        uint32_t n, int steps)
{
    int added = 0;
    for (int i = 0; i < steps; i++) {
        const struct vk_buffer *from = &pair[i % 2], *to = &pair[1 - i % 2];
        if (i % 7 == 6) {
            vk_copy(d, from, 0, to, 0, (VkDeviceSize)n * sizeof(float));
            continue;
        }
        struct push_axpb pc = {.n = n, .scale = 1.0f};
        const struct vk_buffer *bind[] = {from, one, to};
        vk_dispatch(d, p, bind, &pc, (n + 63) / 64, 1, 1);
        added++;
    }
    return added;
}

/* What record_chain works on: the axpb pipeline, a pair of buffers of
 * CHAIN_N floats (pair[0] zeros) and CHAIN_N ones. */
enum { CHAIN_N = 4099 };
struct chain {
    struct vk_device *d;
    struct vk_pipeline p;
    struct vk_buffer pair[2], one;
};

/* A buffer of CHAIN_N floats, each `value`. */
static struct vk_buffer chain_buffer(struct vk_device *d, float value)
{
    struct vk_buffer b = new_buffer(d, CHAIN_N * sizeof(float),
                                    VK_MEM_DEVICE);
    float *x = malloc(CHAIN_N * sizeof *x);
    assert_non_null(x);
    for (int i = 0; i < CHAIN_N; i++)
        x[i] = value;
    upload(d, &b, 0, x, CHAIN_N * sizeof *x);
    free(x);
    return b;
}

static struct chain chain_open(void)
{
    struct chain c = {.d = open_or_skip()};
    c.p = axpb_pipeline(c.d);
    c.pair[0] = chain_buffer(c.d, 0.0f);
    c.pair[1] = chain_buffer(c.d, 0.0f);
    c.one = chain_buffer(c.d, 1.0f);
    return c;
}

static void chain_close(struct chain *c)
{
    vk_buffer_free(c->d, &c->pair[0]);
    vk_buffer_free(c->d, &c->pair[1]);
    vk_buffer_free(c->d, &c->one);
    vk_pipeline_free(c->d, &c->p);
    vk_device_close(c->d);
}

/* Every one of the n floats of b equals want. */
static void assert_all_equal(struct vk_device *d, const struct vk_buffer *b,
                             uint32_t n, float want)
{
    float *got = malloc(n * sizeof *got);
    assert_non_null(got);
    download(d, b, 0, got, n * sizeof *got);
    for (uint32_t i = 0; i < n; i++)
        if (got[i] != want)
            fail_msg("element %u is %g, not %g", i, got[i], want);
    free(got);
}

/* ---- devices ---- */

static void test_devices_are_listed_with_a_name_and_type(void **state)
{
    struct kk_vk_device_info info[8];
    int n = list_or_skip(info);
    static const char *const names[] = {"other", "integrated", "discrete",
                                        "virtual", "cpu"};
    for (int i = 0; i < n && i < 8; i++) {
        assert_true(strlen(info[i].name) > 0);
        assert_in_range(info[i].type, KK_VK_OTHER, KK_VK_CPU);
        assert_string_equal(info[i].type_name, names[info[i].type]);
        assert_true(info[i].api_version >= VK_API_VERSION_1_0);
        /* Usable exactly when nothing is missing. */
        assert_int_equal(info[i].is_usable, info[i].why_not[0] == 0);
        fprintf(stderr, "    device %d: %s (%s, Vulkan %u.%u, %.1f GiB, "
                "%s)%s%s\n", i, info[i].name, info[i].type_name,
                VK_API_VERSION_MAJOR(info[i].api_version),
                VK_API_VERSION_MINOR(info[i].api_version),
                info[i].memory_bytes / 1073741824.0, info[i].driver,
                info[i].is_usable ? "" : " not usable: ", info[i].why_not);
    }
    /* Counting needs no room, and the public API says the same. */
    struct kk_error err = {{0}};
    assert_int_equal(vk_device_list(NULL, 0, &err), n);
    struct kk_vk_device_info again[8];
    assert_int_equal(kk_vulkan_devices(again, 8, &err), n);
    assert_string_equal(again[0].name, info[0].name);
}

static void test_an_index_past_the_last_device_is_refused_with_a_message(
    void **state)
{
    struct kk_vk_device_info info[8];
    int n = list_or_skip(info);
    struct vk_device *d = (struct vk_device *)&d;   /* must be reset */
    struct kk_error err = {{0}};
    assert_int_equal(vk_device_open(n, &d, &err), -1);
    assert_null(d);
    assert_non_null(strstr(err.msg, "kakeya info --devices"));
    char count[32];
    snprintf(count, sizeof count, "%d device", n);
    assert_non_null(strstr(err.msg, count));
}

static void test_the_automatic_choice_never_takes_a_software_renderer(
    void **state)
{
    struct kk_vk_device_info info[8];
    int n = list_or_skip(info);
    int gpu = -1;
    for (int i = 0; i < n && i < 8 && gpu < 0; i++)
        if (info[i].is_usable && info[i].type != KK_VK_CPU)
            gpu = i;
    struct vk_device *d = NULL;
    struct kk_error err = {{0}};
    int rc = vk_device_open(-1, &d, &err);
    if (gpu >= 0) {
        assert_int_equal(rc, 0);
        assert_string_equal(vk_device_name(d), info[gpu].name);
        vk_device_close(d);
    } else {
        /* Only a CPU renderer (lavapipe) or nothing usable: refused. */
        assert_int_equal(rc, -1);
        assert_null(d);
        assert_non_null(strstr(err.msg, "--backend cpu"));
        fprintf(stderr, "    vk_device_open(-1): %s\n", err.msg);
    }
}

/* Work goes to a family that computes and does not draw where the device
 * has one (NVIDIA's families: draw-compute-copy, copy, compute-copy), to
 * the first that computes where none is compute-only (lavapipe's one
 * family) or when asked for it (KAKEYA_VK_QUEUE=graphics), never to a
 * family of no queues, and nowhere when none computes. Needs no device. */
static void test_the_queue_family_computes_and_does_not_draw_where_it_can(
    void **state)
{
    (void)state;
    enum { G = VK_QUEUE_GRAPHICS_BIT, C = VK_QUEUE_COMPUTE_BIT,
           T = VK_QUEUE_TRANSFER_BIT };
    const VkQueueFamilyProperties nvidia[] = {
        {.queueFlags = G | C | T, .queueCount = 16},
        {.queueFlags = T, .queueCount = 2},
        {.queueFlags = C | T, .queueCount = 8}};
    assert_int_equal(vk_compute_family(nvidia, 3, false), 2);
    assert_int_equal(vk_compute_family(nvidia, 3, true), 0);
    const VkQueueFamilyProperties one[] = {
        {.queueFlags = G | C | T, .queueCount = 1}};
    assert_int_equal(vk_compute_family(one, 1, false), 0);
    const VkQueueFamilyProperties empty_compute[] = {
        {.queueFlags = T, .queueCount = 1},
        {.queueFlags = C, .queueCount = 0},
        {.queueFlags = G | C, .queueCount = 1}};
    assert_int_equal(vk_compute_family(empty_compute, 3, false), 2);
    const VkQueueFamilyProperties none[] = {
        {.queueFlags = G, .queueCount = 1},
        {.queueFlags = T, .queueCount = 1}};
    assert_int_equal(vk_compute_family(none, 2, false), UINT32_MAX);
    assert_int_equal(vk_compute_family(none, 0, false), UINT32_MAX);
}

static void test_an_open_device_reports_its_name_and_limits(void **state)
{
    struct vk_device *d = open_or_skip();
    assert_true(strlen(vk_device_name(d)) > 0);
    assert_non_null(vk_device_handle(d));
    assert_non_null(vk_device_fn(d)->vkCmdDispatch);
    assert_non_null(vk_device_fn(d)->vkCmdPushDescriptorSetKHR);
    /* The minimums every Vulkan device guarantees. */
    assert_true(vk_device_max_groups_x(d) >= 65535);
    assert_true(vk_device_max_buffer_range(d) >= (1u << 27));
    fprintf(stderr, "    %s: maxComputeWorkGroupCount[0] %u, "
            "maxStorageBufferRange %llu\n", vk_device_name(d),
            vk_device_max_groups_x(d),
            (unsigned long long)vk_device_max_buffer_range(d));
    vk_device_close(d);
}

/* A model with a matrix past what the device binds at once (lavapipe: 128
 * MiB, a 128k-vocabulary output matrix of a 1B model is twice that) is
 * refused at upload, before any pass, with its size and the way out. The
 * matrix is only described: its bytes are never read. */
static void test_a_matrix_past_the_device_range_is_refused_at_upload(
    void **state)
{
    struct vk_device *d = open_or_skip();
    static const unsigned char never_read;
    struct model m;
    memset(&m, 0, sizeof m);
    m.output.type = KK_Q8_0;
    m.output.n_cols = 2048;
    m.output.row_bytes = 2176;
    m.output.n_rows = (int64_t)(vk_device_max_buffer_range(d) / 2176) + 1;
    m.output.data = &never_read;
    struct vk_model *vm = NULL;
    struct kk_error err = {{0}};
    assert_int_equal(vk_model_upload(d, &m, &vm, &err), -1);
    assert_null(vm);
    assert_non_null(strstr(err.msg, "2048 Q8_0 matrix"));
    assert_non_null(strstr(err.msg, "maxStorageBufferRange"));
    assert_non_null(strstr(err.msg, "--backend cpu"));
    fprintf(stderr, "    %s\n", err.msg);
    vk_device_close(d);
}

static void test_free_and_close_accept_null_and_zeroed_structs(void **state)
{
    vk_device_close(NULL);
    struct vk_device *d = open_or_skip();
    struct vk_buffer b = {0};
    struct vk_pipeline p = {0};
    vk_buffer_free(d, NULL);
    vk_buffer_free(d, &b);
    vk_pipeline_free(d, NULL);
    vk_pipeline_free(d, &p);
    /* Freed twice: the first free zeroes it. */
    b = new_buffer(d, 100, VK_MEM_DEVICE);
    vk_buffer_free(d, &b);
    vk_buffer_free(d, &b);
    vk_device_close(d);
}

/* ---- memory and transfers ---- */

static void test_upload_then_download_returns_the_same_bytes(void **state)
{
    struct vk_device *d = open_or_skip();
    /* Odd sizes at odd offsets, the largest over two staging chunks. */
    const size_t sizes[] = {1, 3, 4097, 2 * STAGING_CHUNK + 12345};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        VkDeviceSize offset = 7 + k;
        struct vk_buffer b = new_buffer(d, offset + n + 3, VK_MEM_DEVICE);
        unsigned char *src = malloc(n), *dst = malloc(n);
        assert_non_null(src);
        assert_non_null(dst);
        fill_bytes(src, n, k + 1);
        memset(dst, 0xee, n);
        upload(d, &b, offset, src, n);
        download(d, &b, offset, dst, n);
        assert_memory_equal(src, dst, n);
        free(src);
        free(dst);
        vk_buffer_free(d, &b);
    }
    vk_device_close(d);
}

static void test_a_transfer_past_the_end_is_refused_with_a_message(
    void **state)
{
    struct vk_device *d = open_or_skip();
    struct vk_buffer b = new_buffer(d, 100, VK_MEM_DEVICE);
    unsigned char bytes[64] = {0};
    struct kk_error err = {{0}};
    assert_int_equal(vk_upload(d, &b, 50, bytes, 51, &err), -1);
    assert_non_null(strstr(err.msg, "past the end"));
    err.msg[0] = 0;
    assert_int_equal(vk_download(d, &b, 101, bytes, 0, &err), -1);
    assert_non_null(strstr(err.msg, "past the end"));
    vk_buffer_free(d, &b);
    vk_device_close(d);
}

static void test_many_small_buffers_share_blocks(void **state)
{
    enum { N = 3000 };
    struct vk_device *d = open_or_skip();
    struct vk_buffer *b = calloc(N, sizeof *b);
    assert_non_null(b);
    for (int i = 0; i < N; i++)
        b[i] = new_buffer(d, 1 + (VkDeviceSize)(i * 37 % 9000),
                          VK_MEM_DEVICE);
    /* A few blocks hold them all (about 14 MiB here: one 256 MiB block),
     * none overlapping another in the same memory. */
    VkDeviceMemory mems[8];
    int n_mems = 0;
    for (int i = 0; i < N; i++) {
        assert_true(b[i].block >= 0);
        int m = 0;
        while (m < n_mems && mems[m] != b[i].mem)
            m++;
        if (m == n_mems) {
            assert_true(n_mems < 8);
            mems[n_mems++] = b[i].mem;
        }
    }
    assert_true(n_mems <= 2);
    for (int i = 1; i < N; i++)
        if (b[i].mem == b[i - 1].mem)   /* bump allocation: in order */
            assert_true(b[i - 1].offset + b[i - 1].size <= b[i].offset);
    /* And each keeps its own bytes. */
    unsigned char want[9000], got[9000];
    for (int i = 0; i < N; i += 97) {
        fill_bytes(want, b[i].size, (uint64_t)i);
        upload(d, &b[i], 0, want, b[i].size);
    }
    for (int i = 0; i < N; i += 97) {
        fill_bytes(want, b[i].size, (uint64_t)i);
        download(d, &b[i], 0, got, b[i].size);
        assert_memory_equal(want, got, b[i].size);
    }
    for (int i = 0; i < N; i++)
        vk_buffer_free(d, &b[i]);
    /* The emptied block went back; a new buffer still gets memory. */
    b[0] = new_buffer(d, 4096, VK_MEM_DEVICE);
    vk_buffer_free(d, &b[0]);
    free(b);
    vk_device_close(d);
}

static void test_host_visible_buffers_are_mapped(void **state)
{
    struct vk_device *d = open_or_skip();
    struct vk_buffer up = new_buffer(d, 1001, VK_MEM_UPLOAD);
    struct vk_buffer dev = new_buffer(d, 1001, VK_MEM_DEVICE);
    struct vk_buffer back = new_buffer(d, 1001, VK_MEM_READBACK);
    assert_non_null(up.mapped);
    assert_non_null(back.mapped);
    unsigned char want[1001];
    fill_bytes(want, sizeof want, 42);
    memcpy(up.mapped, want, sizeof want);
    memset(back.mapped, 0, sizeof want);
    begin(d);
    vk_copy(d, &up, 0, &dev, 0, sizeof want);
    vk_copy(d, &dev, 0, &back, 0, sizeof want);
    submit(d);
    assert_memory_equal(back.mapped, want, sizeof want);
    vk_buffer_free(d, &up);
    vk_buffer_free(d, &dev);
    vk_buffer_free(d, &back);
    vk_device_close(d);
}

/* ---- recording ---- */

static void test_a_recorded_copy_moves_bytes_at_unaligned_offsets(
    void **state)
{
    struct vk_device *d = open_or_skip();
    enum { SRC = 1001, DST = 2003, AT_SRC = 3, AT_DST = 5, N = 997 };
    struct vk_buffer src = new_buffer(d, SRC, VK_MEM_DEVICE);
    struct vk_buffer dst = new_buffer(d, DST, VK_MEM_DEVICE);
    unsigned char s[SRC], before[DST], got[DST];
    fill_bytes(s, SRC, 1);
    fill_bytes(before, DST, 2);
    upload(d, &src, 0, s, SRC);
    upload(d, &dst, 0, before, DST);
    begin(d);
    vk_copy(d, &src, AT_SRC, &dst, AT_DST, N);
    /* A second copy after the barrier reads what the first wrote. */
    vk_copy(d, &dst, AT_DST, &dst, 1500, 400);
    submit(d);
    download(d, &dst, 0, got, DST);
    unsigned char want[DST];
    memcpy(want, before, DST);
    memcpy(want + AT_DST, s + AT_SRC, N);
    memcpy(want + 1500, s + AT_SRC, 400);
    assert_memory_equal(got, want, DST);
    vk_buffer_free(d, &src);
    vk_buffer_free(d, &dst);
    vk_device_close(d);
}

static void test_a_dispatch_binds_buffers_in_order_and_pushes_constants(
    void **state)
{
    struct vk_device *d = open_or_skip();
    struct vk_pipeline p = axpb_pipeline(d);
    enum { N = 1000 };
    float a[N], b[N], y[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(10000 - i);
    }
    struct vk_buffer ba = new_buffer(d, sizeof a, VK_MEM_DEVICE);
    struct vk_buffer bb = new_buffer(d, sizeof b, VK_MEM_DEVICE);
    struct vk_buffer by = new_buffer(d, sizeof y, VK_MEM_DEVICE);
    upload(d, &ba, 0, a, sizeof a);
    upload(d, &bb, 0, b, sizeof b);
    /* Two dispatches in one recording: the second reads the first's y. */
    struct push_axpb first = {.n = N, .scale = 0.5f};
    struct push_axpb second = {.n = N - 1, .scale = 2.0f};
    const struct vk_buffer *bind1[] = {&ba, &bb, &by};
    const struct vk_buffer *bind2[] = {&by, &bb, &ba};
    begin(d);
    vk_dispatch(d, &p, bind1, &first, (N + 63) / 64, 1, 1);
    vk_dispatch(d, &p, bind2, &second, (N + 63) / 64, 1, 1);
    submit(d);
    download(d, &by, 0, y, sizeof y);
    download(d, &ba, 0, a, sizeof a);
    for (int i = 0; i < N; i++) {
        float y1 = (float)i * 0.5f + (float)(10000 - i);   /* exact */
        assert_true(y[i] == y1);
        float a2 = i < N - 1 ? y1 * 2.0f + (float)(10000 - i) : (float)i;
        assert_true(a[i] == a2);
    }
    vk_buffer_free(d, &ba);
    vk_buffer_free(d, &bb);
    vk_buffer_free(d, &by);
    vk_pipeline_free(d, &p);
    vk_device_close(d);
}

static void test_a_recording_of_many_chunks_runs_in_recorded_order(
    void **state)
{
    /* 1000 commands: more than the first chunk (8), more than later ones
     * (24, 72, ...), more than all command buffers hold before the last
     * chunk grows (968); twice, so the second recording reuses every
     * chunk. */
    enum { STEPS = 1000 };
    struct chain c = chain_open();
    int added = 0;
    for (int pass = 0; pass < 2; pass++) {
        begin(c.d);
        added += record_chain(c.d, &c.p, c.pair, &c.one, CHAIN_N, STEPS);
        submit(c.d);
        assert_all_equal(c.d, &c.pair[STEPS % 2], CHAIN_N, (float)added);
    }
    assert_int_equal(added, 2 * (STEPS - STEPS / 7));
    chain_close(&c);
}

static void test_a_mistake_after_a_submitted_chunk_is_reported_and_waited_for(
    void **state)
{
    struct chain c = chain_open();
    /* 100 commands fill the first chunks, which go to the GPU; then a copy
     * past an end, then more commands, which are dropped. */
    begin(c.d);
    record_chain(c.d, &c.p, c.pair, &c.one, CHAIN_N, 100);
    vk_copy(c.d, &c.one, 0, &c.pair[0], 4, CHAIN_N * sizeof(float));
    record_chain(c.d, &c.p, c.pair, &c.one, CHAIN_N, 10);
    struct kk_error err = {{0}};
    assert_int_equal(vk_submit_wait(c.d, &err), -1);
    assert_non_null(strstr(err.msg, "past an end"));
    /* The submitted chunks are done: their buffers may go at once. */
    vk_buffer_free(c.d, &c.pair[0]);
    vk_buffer_free(c.d, &c.pair[1]);
    /* And the device goes on working, chunks and all. */
    c.pair[0] = chain_buffer(c.d, 0.0f);
    c.pair[1] = chain_buffer(c.d, 0.0f);
    begin(c.d);
    int added = record_chain(c.d, &c.p, c.pair, &c.one, CHAIN_N, 100);
    submit(c.d);
    assert_all_equal(c.d, &c.pair[0], CHAIN_N, (float)added);
    chain_close(&c);
}

static void test_bytes_that_are_not_spirv_are_refused_with_a_message(
    void **state)
{
    struct vk_device *d = open_or_skip();
    static const uint32_t junk[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    struct vk_pipeline p;
    struct kk_error err = {{0}};
    assert_int_equal(vk_pipeline_new(d, junk, sizeof junk, 1, 0, &p, &err),
                     -1);
    assert_non_null(strstr(err.msg, "SPIR-V"));
    assert_null(p.pipe);
    vk_pipeline_free(d, &p);
    err.msg[0] = 0;
    assert_int_equal(vk_pipeline_new(d, axpb_spirv, sizeof axpb_spirv, 3,
                                     130, &p, &err), -1);
    assert_true(strlen(err.msg) > 0);
    vk_device_close(d);
}

static void test_a_recording_mistake_is_reported_by_submit_wait(void **state)
{
    struct vk_device *d = open_or_skip();
    struct vk_buffer a = new_buffer(d, 100, VK_MEM_DEVICE);
    struct vk_buffer b = new_buffer(d, 100, VK_MEM_DEVICE);
    struct kk_error err = {{0}};
    begin(d);
    vk_copy(d, &a, 0, &b, 50, 60);          /* past b's end */
    vk_copy(d, &a, 0, &b, 0, 10);           /* fine, but after a mistake */
    assert_int_equal(vk_submit_wait(d, &err), -1);
    assert_non_null(strstr(err.msg, "past an end"));
    /* Uploads are refused while recording. */
    begin(d);
    err.msg[0] = 0;
    unsigned char x[4] = {1, 2, 3, 4};
    assert_int_equal(vk_upload(d, &a, 0, x, 4, &err), -1);
    assert_non_null(strstr(err.msg, "recorded"));
    /* The device goes on working afterwards. */
    vk_copy(d, &a, 0, &b, 0, 4);
    submit(d);
    upload(d, &a, 0, x, 4);
    begin(d);
    vk_copy(d, &a, 0, &b, 96, 4);
    submit(d);
    unsigned char got[4];
    download(d, &b, 96, got, 4);
    assert_memory_equal(got, x, 4);
    /* vk_submit_wait with nothing begun fails instead of submitting. */
    err.msg[0] = 0;
    assert_int_equal(vk_submit_wait(d, &err), -1);
    assert_true(strlen(err.msg) > 0);
    vk_buffer_free(d, &a);
    vk_buffer_free(d, &b);
    vk_device_close(d);
}

/* ---- profiling ---- */

/* Closes d with stderr going to a file; what it printed, malloc'd. */
static char *close_capturing_stderr(struct vk_device *d)
{
    FILE *f = tmpfile();
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    if (!f || saved < 0 || dup2(fileno(f), STDERR_FILENO) < 0)
        fail_msg("could not redirect stderr to a temporary file");
    vk_device_close(d);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    long n = ftell(f);
    char *text = calloc(1, n > 0 ? (size_t)n + 1 : 1);
    assert_non_null(text);
    rewind(f);
    if (n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n)
        fail_msg("could not read back the captured stderr");
    fclose(f);
    return text;
}

static struct vk_pipeline new_axpb(struct vk_device *d, const char *name)
{
    struct vk_pipeline p;
    struct kk_error err = {{0}};
    if (vk_pipeline_new(d, axpb_spirv, sizeof axpb_spirv, 3,
                        sizeof(struct push_axpb), &p, &err))
        fail_msg("vk_pipeline_new: %s", err.msg);
    snprintf(p.name, sizeof p.name, "%s", name);
    return p;
}

/* With pipeline statistics the creation flag and the extension must be
 * accepted by the driver; without, profiling goes on as before. Either
 * way the pipelines are freed first, as the backend does. */
static void test_profiling_prints_dispatched_pipelines_statistics_or_why_not(
    void **state)
{
    setenv("KAKEYA_VK_PROFILE", "1", 1);
    struct vk_device *d = open_or_skip();   /* the profile starts here */
    unsetenv("KAKEYA_VK_PROFILE");
    struct vk_pipeline used = new_axpb(d, "axpb_used");
    struct vk_pipeline idle = new_axpb(d, "axpb_idle");
    struct vk_buffer a = new_buffer(d, 256, VK_MEM_DEVICE);
    struct vk_buffer b = new_buffer(d, 256, VK_MEM_DEVICE);
    struct vk_buffer y = new_buffer(d, 256, VK_MEM_DEVICE);
    const struct vk_buffer *bind[] = {&a, &b, &y};
    struct push_axpb push = {.n = 64, .scale = 1.0f};
    begin(d);
    vk_dispatch(d, &used, bind, &push, 1, 1, 1);
    submit(d);
    vk_pipeline_free(d, &used);
    vk_pipeline_free(d, &idle);
    vk_buffer_free(d, &a);
    vk_buffer_free(d, &b);
    vk_buffer_free(d, &y);
    char *out = close_capturing_stderr(d);
    bool has_stats = strstr(out, "\n  stats axpb_used") != NULL;
    bool says_none = strstr(out, "\n  pipeline statistics: not available "
                                 "on this device") != NULL;
    if (!strstr(out, "vulkan profile, 1 recordings") ||
        has_stats == says_none || strstr(out, "axpb_idle"))
        fail_msg("the profile printed at close:\n%s", out);
    free(out);
}

static void test_without_profiling_closing_prints_nothing(void **state)
{
    unsetenv("KAKEYA_VK_PROFILE");
    struct vk_device *d = open_or_skip();
    struct vk_pipeline p = new_axpb(d, "axpb");
    assert_int_equal(p.stats_entry, 0);
    vk_pipeline_free(d, &p);
    char *out = close_capturing_stderr(d);
    assert_string_equal(out, "");
    free(out);
}

/* ---- replays ---- */

/* What the replay tests run: a chain, a mapped upload buffer and x, each
 * CHAIN_N floats. */
struct upload_chain {
    struct chain c;
    struct vk_buffer up, x;
};

static struct upload_chain upload_chain_open(void)
{
    struct upload_chain u = {.c = chain_open()};
    u.up = new_buffer(u.c.d, CHAIN_N * sizeof(float), VK_MEM_UPLOAD);
    u.x = chain_buffer(u.c.d, 0.0f);
    return u;
}

static void upload_chain_close(struct upload_chain *u)
{
    vk_buffer_free(u->c.d, &u->up);
    vk_buffer_free(u->c.d, &u->x);
    chain_close(&u->c);
}

/* Every float of the mapped upload buffer is `value`. */
static void upload_fill(struct upload_chain *u, float value)
{
    float *host = u->up.mapped;
    for (int i = 0; i < CHAIN_N; i++)
        host[i] = value;
}

/* Records, into the recording under way, the upload buffer copied to x
 * and y = x * scale + one (pair[0]). */
static void record_upload_pass(struct upload_chain *u, float scale)
{
    struct push_axpb pc = {.n = CHAIN_N, .scale = scale};
    const struct vk_buffer *bind[] = {&u->x, &u->c.one, &u->c.pair[0]};
    vk_copy(u->c.d, &u->up, 0, &u->x, 0, CHAIN_N * sizeof(float));
    vk_dispatch(u->c.d, &u->c.p, bind, &pc, (CHAIN_N + 63) / 64, 1, 1);
}

/* One pass of a recording that reads host data: `value` goes into the
 * mapped upload buffer, is copied to x, and y = x * scale + one. */
static void upload_pass(struct upload_chain *u, float value, float scale)
{
    upload_fill(u, value);
    begin(u->c.d);
    record_upload_pass(u, scale);
    submit(u->c.d);
}

static void test_a_recording_made_twice_is_replayed_with_the_host_data_of_each_pass(
    void **state)
{
    struct upload_chain u = upload_chain_open();
    for (int pass = 0; pass < 5; pass++) {
        upload_pass(&u, (float)pass, 3.0f);
        assert_all_equal(u.c.d, &u.c.pair[0], CHAIN_N,
                         3.0f * (float)pass + 1);
    }
    /* The first two passes are recorded (the second is kept), the rest
     * submitted from the kept command buffer. */
    assert_int_equal(vk_device_replayed(u.c.d), 3);
    upload_chain_close(&u);
}

static void test_a_recording_that_parts_from_a_kept_one_runs_as_recorded(
    void **state)
{
    struct upload_chain u = upload_chain_open();
    struct vk_device *d = u.c.d;
    upload_pass(&u, 1.0f, 3.0f);
    upload_pass(&u, 2.0f, 3.0f);
    /* Its last command's push constants differ. */
    upload_pass(&u, 2.0f, 5.0f);
    assert_all_equal(d, &u.c.pair[0], CHAIN_N, 11.0f);
    /* Only its first command: a prefix of the kept one. */
    upload_fill(&u, 7.0f);
    begin(d);
    vk_copy(d, &u.up, 0, &u.x, 0, CHAIN_N * sizeof(float));
    submit(d);
    float first;
    download(d, &u.x, 0, &first, sizeof first);
    assert_true(first == 7.0f);
    /* One command more than the kept one. */
    begin(d);
    record_upload_pass(&u, 3.0f);
    vk_copy(d, &u.c.pair[0], 0, &u.c.pair[1], 0, CHAIN_N * sizeof(float));
    submit(d);
    assert_all_equal(d, &u.c.pair[1], CHAIN_N, 3.0f * 7.0f + 1);
    assert_int_equal(vk_device_replayed(d), 0);
    /* The kept one still replays. */
    upload_pass(&u, 4.0f, 3.0f);
    assert_all_equal(d, &u.c.pair[0], CHAIN_N, 13.0f);
    assert_int_equal(vk_device_replayed(d), 1);
    upload_chain_close(&u);
}

static void test_freeing_a_buffer_forgets_the_kept_recordings(void **state)
{
    struct upload_chain u = upload_chain_open();
    upload_pass(&u, 1.0f, 3.0f);
    upload_pass(&u, 1.0f, 3.0f);
    /* A new x, which may well get the old one's handle. */
    vk_buffer_free(u.c.d, &u.x);
    u.x = chain_buffer(u.c.d, 0.0f);
    upload_pass(&u, 2.0f, 3.0f);
    assert_all_equal(u.c.d, &u.c.pair[0], CHAIN_N, 7.0f);
    assert_int_equal(vk_device_replayed(u.c.d), 0);
    upload_chain_close(&u);
}

static void test_replays_are_off_under_kakeya_vk_replay_0(void **state)
{
    setenv("KAKEYA_VK_REPLAY", "0", 1);
    struct upload_chain u = upload_chain_open();
    unsetenv("KAKEYA_VK_REPLAY");
    for (int pass = 0; pass < 4; pass++) {
        upload_pass(&u, (float)pass, 2.0f);
        assert_all_equal(u.c.d, &u.c.pair[0], CHAIN_N,
                         2.0f * (float)pass + 1);
    }
    assert_int_equal(vk_device_replayed(u.c.d), 0);
    upload_chain_close(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_are_listed_with_a_name_and_type),
        cmocka_unit_test(
            test_an_index_past_the_last_device_is_refused_with_a_message),
        cmocka_unit_test(
            test_the_automatic_choice_never_takes_a_software_renderer),
        cmocka_unit_test(
            test_the_queue_family_computes_and_does_not_draw_where_it_can),
        cmocka_unit_test(test_an_open_device_reports_its_name_and_limits),
        cmocka_unit_test(
            test_a_matrix_past_the_device_range_is_refused_at_upload),
        cmocka_unit_test(test_free_and_close_accept_null_and_zeroed_structs),
        cmocka_unit_test(test_upload_then_download_returns_the_same_bytes),
        cmocka_unit_test(
            test_a_transfer_past_the_end_is_refused_with_a_message),
        cmocka_unit_test(test_many_small_buffers_share_blocks),
        cmocka_unit_test(test_host_visible_buffers_are_mapped),
        cmocka_unit_test(
            test_a_recorded_copy_moves_bytes_at_unaligned_offsets),
        cmocka_unit_test(
            test_a_dispatch_binds_buffers_in_order_and_pushes_constants),
        cmocka_unit_test(
            test_a_recording_of_many_chunks_runs_in_recorded_order),
        cmocka_unit_test(
            test_a_mistake_after_a_submitted_chunk_is_reported_and_waited_for),
        cmocka_unit_test(
            test_bytes_that_are_not_spirv_are_refused_with_a_message),
        cmocka_unit_test(test_a_recording_mistake_is_reported_by_submit_wait),
        cmocka_unit_test(
            test_profiling_prints_dispatched_pipelines_statistics_or_why_not),
        cmocka_unit_test(test_without_profiling_closing_prints_nothing),
        cmocka_unit_test(
            test_a_recording_made_twice_is_replayed_with_the_host_data_of_each_pass),
        cmocka_unit_test(
            test_a_recording_that_parts_from_a_kept_one_runs_as_recorded),
        cmocka_unit_test(test_freeing_a_buffer_forgets_the_kept_recordings),
        cmocka_unit_test(test_replays_are_off_under_kakeya_vk_replay_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
