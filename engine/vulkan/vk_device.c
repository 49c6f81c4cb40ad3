/* vk_device.c — see vk_device.h.
 *
 * Layout: loading (dlopen, the entry-point table, the instance), describing
 * devices, opening one, memory (a bump suballocator over 256 MiB blocks),
 * staged transfers, pipelines, recording. All state lives in struct
 * vk_device; vk_device_list uses a throwaway one, so each call opens and
 * closes the loader on its own. */
#include "vk_device.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "vk_replay.h"
#include "vk_shaders.h"

/* Buffers under VK_OWN_ALLOCATION_BYTES share blocks of VK_BLOCK_BYTES:
 * a model has hundreds of tensors and a device may allow as few as 4096
 * allocations. Larger ones get their own so a block never wastes more than
 * a quarter of itself on a buffer that does not fit. */
#define VK_BLOCK_BYTES ((VkDeviceSize)256 << 20)
#define VK_OWN_ALLOCATION_BYTES ((VkDeviceSize)64 << 20)
/* The staging buffer of vk_upload/vk_download; bigger transfers go in
 * chunks of this size. */
#define VK_STAGING_BYTES ((VkDeviceSize)64 << 20)
/* How long vk_submit_wait waits before calling the device hung: far more
 * than any one forward pass, even on lavapipe. */
#define VK_WAIT_NS (60ull * 1000000000ull)
/* A recording goes to the GPU in chunks while the host records the rest
 * (see "chunks" below): the GPU would otherwise sit idle through the whole
 * recording, ~4 us of host time a command, ~0.4 ms of a 1.25 ms decode
 * pass on an H200. The first chunk is small so that the GPU starts early;
 * each later one is VK_CHUNK_GROWTH times the one before, because every
 * chunk costs the GPU a submission boundary (~30-60 us on the H200,
 * KAKEYA_VK_PROFILE's "(between chunks)", whoever is ahead), and the host
 * records a chunk in less time than the GPU spends on the one before it
 * (a decode dispatch averages ~12 us of GPU time there), so the GPU does
 * not catch up with the host. A decode pass of the 1B shape (~100
 * commands) goes as 8 + 24 + the rest. Measured there (1B shape,
 * `tools/gpu-ab.sh`, three rounds in one call): decode 1.213-1.231 ms a
 * token against 1.246-1.284 with 8 and then 32 a chunk, 1.251-1.275
 * growing from 12, 1.244-1.293 with 25 and then the rest; in another
 * call, 8, 16, 32, 32... and 4, 8, 16, 32... took 1.30-1.43 against
 * 1.26-1.29 (more boundaries). A recording has VK_MAX_CHUNKS command
 * buffers: 8 + 24 + 72 + 216 + 648 = 968 commands go in the first five,
 * and past that the last chunk just grows. */
#define VK_FIRST_CHUNK_COMMANDS 8
#define VK_CHUNK_GROWTH 3
#define VK_MAX_CHUNKS 6
/* How long a wait for the GPU polls its fence before it blocks. The
 * NVIDIA driver's blocking wait gives the host back ~60-80 us after the
 * work is done, a tenth of a decode step: on the H200 a step of the 1B
 * shape took 1.11-1.16 ms polling against 1.20-1.27 blocking, the default
 * model's 0.54-0.57 against 0.60-0.63 (tools/gpu-ab.sh, three rounds).
 * Polling keeps a core busy while the GPU works; a pass longer than this
 * (a long prompt) is long enough for the wake-up not to matter. Not on a
 * CPU device (lavapipe), whose work runs on the cores the poll would
 * take. */
#define VK_POLL_MS 20.0
/* Recordings kept to be submitted again (vk_replay.h): a decode step,
 * and the verify blocks of each size a speculative loop asks for. */
#define VK_KEPT_RECORDINGS 24

#define MIB(bytes) ((double)(bytes) / 1048576.0)

/* A block of device memory that small buffers are carved from (or, with
 * is_own, the allocation of one large buffer). mem == VK_NULL_HANDLE marks
 * a free slot. */
struct vk_block {
    VkDeviceMemory mem;
    uint32_t type_index;
    enum vk_memory where;
    bool is_own;
    VkDeviceSize size, used;
    int n_buffers;           /* freed when it drops to 0 */
    void *mapped;            /* UPLOAD/READBACK: the whole block's mapping */
};

/* Per-dispatch GPU times (KAKEYA_VK_PROFILE): a timestamp after each
 * dispatch or copy of a recording; the time between two is charged to the
 * second's name and workgroup count (a pipeline serves matrices of several
 * shapes, and which of them costs what is the question a profile asks). */
#define VK_PROFILE_STAMPS 4096
#define VK_PROFILE_ROWS 160
/* The driver's recording calls timed on the host. */
enum { CALL_BIND, CALL_DESCRIPTORS, CALL_PUSH, CALL_DISPATCH, CALL_BARRIER,
       CALL_END, CALL_SUBMIT, N_CALLS };
struct vk_profile {
    /* KAKEYA_VK_PROFILE=host: the host's recording and waiting alone, no
     * timestamps and no clock reads per call, whose own cost would be
     * counted in what they measure. */
    bool is_host_only;
    VkQueryPool pool;
    double ns_per_tick;
    int n;                                   /* stamps this recording */
    const char *what[VK_PROFILE_STAMPS];     /* what ended at stamp i */
    uint32_t groups[VK_PROFILE_STAMPS];      /* its workgroups (x z), or 0 */
    struct {
        char name[64];     /* a copy: pipelines may go before the device */
        double ms;
        long count;
    } rows[VK_PROFILE_ROWS];
    int n_rows;
    double record_ms, wait_ms;
    /* Of those, the recordings submitted from a kept one (replays): the
     * host's time from vk_begin to the submission, and how many. */
    double replay_record_ms;
    long replays;
    /* Of record_ms: inside vk_dispatch, inside the copies and switching
     * chunks (ending and submitting a full one, resetting and beginning
     * the next; the rest is the caller's own work between them); in
     * `current` for the recording under way, added to `total` when it
     * completes (record_ms counts only those). */
    struct vk_record_split {
        double dispatch_ms, copy_ms, chunk_ms;
    } current, total;
    long passes;
    /* Host time in the driver's recording calls, per kind of call. */
    double call_ms[N_CALLS];
    long calls[N_CALLS];
    struct timespec begun, submitted;
    /* What the driver reports of each pipeline made while profiling
     * (VK_KHR_pipeline_executable_properties; has_statistics is false
     * where the device does not offer it), in the order they were made;
     * vk_pipeline.stats_entry points here. Printed for those dispatched. */
    bool has_statistics;
    struct pipeline_statistics *stats;
    int n_stats, cap_stats;
};

/* The statistics of one pipeline, kept past the pipeline's end (pipelines
 * may go before the device). */
struct pipeline_statistics {
    char name[64];          /* copied at its first dispatch */
    bool is_dispatched;
    /* Per executable a line to follow the name (": Register Count 128,
     * ..."); malloc'd, NULL when memory ran out. */
    char *text;
};

/* Packed int8 dot products in shaders (OpSDotKHR): absent, core (Vulkan
 * 1.3) or through VK_KHR_shader_integer_dot_product. */
enum int_dot { INT_DOT_NONE, INT_DOT_CORE, INT_DOT_EXTENSION };

struct vk_device {
    void *lib;                            /* dlopen handle of the loader */
    PFN_vkGetInstanceProcAddr get_proc;
    struct vk_fn fn;
    uint32_t instance_api;
    VkInstance instance;

    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    uint32_t fixed_subgroup_size;   /* struct device_facts */
    bool has_clustered;             /* struct device_facts */
    bool has_shuffle;               /* struct device_facts */
    bool has_int8_mma;              /* offers_int8_mma, and enabled */
    bool has_int64;                 /* offers_int64, and enabled */
    enum int_dot int_dot;           /* how packed int8 dot products are on */
    VkPhysicalDeviceMemoryProperties mem_props;
    VkDevice device;
    uint32_t queue_family;
    VkQueue queue;
    VkCommandPool pool;
    /* vk_begin .. vk_submit_wait: the recording's chunks, in order; cmd is
     * the one being recorded, chunks[n_submitted]. */
    VkCommandBuffer chunks[VK_MAX_CHUNKS];
    VkCommandBuffer cmd;
    int n_submitted;        /* chunks of this recording already submitted */
    int chunk_commands;     /* dispatches and copies recorded into cmd */
    int chunk_capacity;     /* ... before it is submitted */
    bool is_chunk_open;     /* cmd is begun and not yet ended */
    struct vk_profile *profile;   /* KAKEYA_VK_PROFILE, else NULL */
    VkCommandBuffer xfer;   /* vk_upload / vk_download, one chunk each */
    VkFence fence;          /* unsignaled between submissions */

    /* Recordings kept to submit again (vk_replay.h; see "replays"
     * below); NULL when off: KAKEYA_VK_REPLAY=0, or timestamps profiled
     * (a kept recording has no stamps of its own). */
    struct vk_replays *replays;
    /* The commands of the recording under way, in order (with replays). */
    struct vk_command *log;
    int n_log, cap_log;
    /* Nothing of the recording under way is recorded into chunks yet: it
     * may still be a kept one (vk_replays_match). */
    bool is_matching;
    long n_replayed;        /* recordings submitted from a kept one */

    bool is_recording;
    bool is_lost;           /* a wait timed out or the device was lost */
    char record_error[384]; /* the first mistake recorded since vk_begin */

    struct vk_buffer staging;   /* READBACK memory, made on first use */
    struct vk_block *blocks;
    int n_blocks;
    VkDeviceSize heap_held[VK_MAX_MEMORY_HEAPS];   /* bytes we allocated */
};

static void replays_forget(struct vk_device *d);
static bool replays_wanted(const struct vk_device *d);

/* ---- small helpers ---- */

static const char *vk_result_name(VkResult r)
{
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "an unknown VkResult";
    }
}

static VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a)
{
    return a > 1 ? (x + a - 1) / a * a : x;
}

static const char *type_name(enum kk_vk_device_type t)
{
    switch (t) {
    case KK_VK_DISCRETE: return "discrete";
    case KK_VK_INTEGRATED: return "integrated";
    case KK_VK_VIRTUAL: return "virtual";
    case KK_VK_CPU: return "cpu";
    default: return "other";
    }
}

/* Appends "; text" (or "text" to an empty string) within cap bytes. */
static void append_reason(char *s, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append_reason(char *s, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(s);
    if (len && len + 2 < cap) {
        memcpy(s + len, "; ", 3);
        len += 2;
    }
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s + len, cap - len, fmt, ap);
    va_end(ap);
}

/* ---- the loader and the instance ---- */

#ifdef __SANITIZE_ADDRESS__
#include <link.h>

/* Under AddressSanitizer only: keeps every module now loaded (the Vulkan
 * loader and its driver among them) mapped until the process ends.
 * Lavapipe keeps blocks of its one-time initialisation (pthread_once)
 * only in its globals, and the loader unloads it at vkDestroyInstance;
 * with its globals unmapped LeakSanitizer no longer sees anything point at
 * those blocks and reports them as leaks at exit, failing every sanitized
 * test that opened a device (seen on an AMD EPYC machine with Mesa
 * 22.3.6, not on the machines before it). */
static int keep_module(struct dl_phdr_info *info, size_t size, void *unused)
{
    (void)size;
    (void)unused;
    if (info->dlpi_name && info->dlpi_name[0])
        dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}

static void keep_modules_loaded(void)
{
    dl_iterate_phdr(keep_module, NULL);
}
#else
static void keep_modules_loaded(void) {}
#endif

/* The entry points kakeya does without: the 1.1 queries (a 1.0 loader),
 * the statistics of KAKEYA_VK_PROFILE (an extension, loaded only where
 * it was enabled). */
static bool is_optional_fn(const char *name)
{
    return !strcmp(name, "vkEnumerateInstanceVersion") ||
           !strcmp(name, "vkGetPhysicalDeviceProperties2") ||
           !strcmp(name, "vkGetPhysicalDeviceFeatures2") ||
           !strcmp(name, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV") ||
           !strcmp(name, "vkGetPipelineExecutablePropertiesKHR") ||
           !strcmp(name, "vkGetPipelineExecutableStatisticsKHR");
}

/* Opens the loader, creates an instance at the highest API version the
 * loader supports up to 1.3, and loads the instance-level entry points. */
static int instance_open(struct vk_device *d, struct kk_error *err)
{
    d->lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d->lib)
        d->lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!d->lib)
        return kk_fail(err, "no Vulkan loader (libvulkan.so.1) could be "
                       "opened: install libvulkan1 and a driver (e.g. "
                       "mesa-vulkan-drivers), or use --backend cpu");
    d->get_proc = (PFN_vkGetInstanceProcAddr)dlsym(d->lib,
                                                   "vkGetInstanceProcAddr");
    if (!d->get_proc)
        return kk_fail(err, "the Vulkan loader has no vkGetInstanceProcAddr "
                       "(a broken libvulkan.so.1): reinstall libvulkan1, or "
                       "use --backend cpu");

#define VK_FN_LOADER(name) \
    d->fn.name = (PFN_##name)d->get_proc(VK_NULL_HANDLE, #name);
#define VK_FN_INSTANCE(name)
#define VK_FN_DEVICE(name)
#include "vk_functions.h"
#undef VK_FN_LOADER
#undef VK_FN_INSTANCE
#undef VK_FN_DEVICE
    if (!d->fn.vkCreateInstance)
        return kk_fail(err, "the Vulkan loader has no vkCreateInstance (a "
                       "broken libvulkan.so.1): reinstall libvulkan1, or use "
                       "--backend cpu");

    /* A 1.0 loader has no vkEnumerateInstanceVersion and refuses any
     * apiVersion above 1.0; newer ones take what they report. */
    uint32_t loader = VK_API_VERSION_1_0;
    if (d->fn.vkEnumerateInstanceVersion)
        d->fn.vkEnumerateInstanceVersion(&loader);
    uint32_t api = VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(loader),
                                       VK_API_VERSION_MINOR(loader), 0);
    if (api > VK_API_VERSION_1_3)
        api = VK_API_VERSION_1_3;
    d->instance_api = api;

    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "kakeya",
        .pEngineName = "kakeya",
        .apiVersion = api,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pApplicationInfo = &app,
    };
    VkResult r = d->fn.vkCreateInstance(&ci, NULL, &d->instance);
    if (r != VK_SUCCESS) {
        d->instance = VK_NULL_HANDLE;
        return kk_fail(err, "the Vulkan loader could not create an instance "
                       "(%s)%s: install a working driver (e.g. "
                       "mesa-vulkan-drivers), or use --backend cpu",
                       vk_result_name(r),
                       r == VK_ERROR_INCOMPATIBLE_DRIVER
                           ? " — no Vulkan driver is installed" : "");
    }

    const char *missing = NULL;
#define VK_FN_LOADER(name)
#define VK_FN_INSTANCE(name)                                              \
    d->fn.name = (PFN_##name)d->get_proc(d->instance, #name);            \
    if (!d->fn.name && !is_optional_fn(#name) && !missing)                \
        missing = #name;
#define VK_FN_DEVICE(name)
#include "vk_functions.h"
#undef VK_FN_LOADER
#undef VK_FN_INSTANCE
#undef VK_FN_DEVICE
    if (missing)
        return kk_fail(err, "the Vulkan loader has no %s: update libvulkan1, "
                       "or use --backend cpu", missing);
    return 0;
}

/* The physical devices in the loader's order (malloc'd), their count in *n;
 * -1 on failure. */
static int physical_devices(struct vk_device *d, VkPhysicalDevice **out,
                            uint32_t *n, struct kk_error *err)
{
    *out = NULL;
    *n = 0;
    VkResult r = d->fn.vkEnumeratePhysicalDevices(d->instance, n, NULL);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return kk_fail(err, "the Vulkan loader could not list devices (%s): "
                       "check the driver, or use --backend cpu",
                       vk_result_name(r));
    if (*n == 0)
        return 0;
    *out = calloc(*n, sizeof **out);
    if (!*out)
        return kk_fail(err, "out of memory listing %u Vulkan devices", *n);
    r = d->fn.vkEnumeratePhysicalDevices(d->instance, n, *out);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(*out);
        *out = NULL;
        *n = 0;
        return kk_fail(err, "the Vulkan loader could not list devices (%s): "
                       "check the driver, or use --backend cpu",
                       vk_result_name(r));
    }
    return 0;
}

/* ---- describing a device ---- */

/* Whether device pd lists extension `name`. */
static bool has_extension(const struct vk_device *d, VkPhysicalDevice pd,
                          const char *name)
{
    bool found = false;
    uint32_t n = 0;
    if (d->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) !=
        VK_SUCCESS || n == 0)
        return false;
    VkExtensionProperties *ext = calloc(n, sizeof *ext);
    if (ext && d->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &n,
                                                          ext) >= 0)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(ext[i].extensionName, name);
    free(ext);
    return found;
}

/* What opening a device needs beyond its kk_vk_device_info. */
struct device_facts {
    uint32_t queue_family;    /* the one that computes; UINT32_MAX: none */
    /* The subgroup width every compute shader gets, else 0: where Vulkan
     * 1.3's subgroup size control lets the driver pick a width per shader
     * (minSubgroupSize < maxSubgroupSize), a shader cannot count on the
     * width the device reports. */
    uint32_t fixed_subgroup_size;
    /* Clustered subgroup operations in compute shaders (matmul_mma_q8_0's
     * amax of 4 lanes), and shuffles (the matmul_qx forms' sums of 8). */
    bool has_clustered, has_shuffle;
};

/* Fills info and facts for pd. */
static void describe(const struct vk_device *d, VkPhysicalDevice pd,
                     struct kk_vk_device_info *info,
                     struct device_facts *facts)
{
    facts->fixed_subgroup_size = 0;
    facts->has_clustered = false;
    facts->has_shuffle = false;
    memset(info, 0, sizeof *info);
    VkPhysicalDeviceProperties props;
    d->fn.vkGetPhysicalDeviceProperties(pd, &props);
    snprintf(info->name, sizeof info->name, "%s", props.deviceName);
    switch (props.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info->type = KK_VK_DISCRETE; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info->type = KK_VK_INTEGRATED; break;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: info->type = KK_VK_VIRTUAL; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: info->type = KK_VK_CPU; break;
    default: info->type = KK_VK_OTHER; break;
    }
    info->type_name = type_name(info->type);
    info->api_version = props.apiVersion;
    info->binds_bytes = props.limits.maxStorageBufferRange;

    VkPhysicalDeviceMemoryProperties mem;
    d->fn.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (uint32_t h = 0; h < mem.memoryHeapCount; h++)
        if ((mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mem.memoryHeaps[h].size > info->memory_bytes)
            info->memory_bytes = mem.memoryHeaps[h].size;

    facts->queue_family = UINT32_MAX;
    uint32_t n_families = 0;
    d->fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_families, NULL);
    VkQueueFamilyProperties *families = calloc(n_families ? n_families : 1,
                                               sizeof *families);
    if (families) {
        d->fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_families,
                                                       families);
        for (uint32_t i = 0; i < n_families; i++)
            if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
                families[i].queueCount > 0) {
                facts->queue_family = i;
                break;
            }
        free(families);
    }

    const bool has_push =
        has_extension(d, pd, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    const bool has_driver_props =
        has_extension(d, pd, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);

    /* One query for what Vulkan 1.1 reports beyond the core properties:
     * the subgroup operations (the matmul shader reduces with subgroupAdd
     * and picks one of several matrices by a workgroup-uniform index into
     * an array of buffers) and width (1.3: whether it is fixed) and, where
     * known, the driver's name. */
    bool has_arith = false;
    VkPhysicalDeviceSubgroupProperties sub = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
    };
    VkPhysicalDeviceSubgroupSizeControlProperties control = {
        .sType =
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES,
    };
    VkPhysicalDeviceDriverProperties driver = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
    };
    const bool ask_sub = props.apiVersion >= VK_API_VERSION_1_1;
    const bool ask_control = props.apiVersion >= VK_API_VERSION_1_3 &&
                             d->instance_api >= VK_API_VERSION_1_3;
    const bool ask_driver =
        props.apiVersion >= VK_API_VERSION_1_2 || has_driver_props;
    if (d->fn.vkGetPhysicalDeviceProperties2 &&
        d->instance_api >= VK_API_VERSION_1_1 && (ask_sub || ask_driver)) {
        VkPhysicalDeviceProperties2 p2 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
        };
        /* chain: p2 -> [sub] -> [control] -> [driver] */
        void **next = &p2.pNext;
        if (ask_sub) {
            *next = &sub;
            next = &sub.pNext;
        }
        if (ask_control) {
            *next = &control;
            next = &control.pNext;
        }
        if (ask_driver)
            *next = &driver;
        d->fn.vkGetPhysicalDeviceProperties2(pd, &p2);
        const bool in_compute =
            ask_sub && (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
        has_arith = in_compute && (sub.supportedOperations &
                                   VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
        facts->has_clustered = in_compute &&
                               (sub.supportedOperations &
                                VK_SUBGROUP_FEATURE_CLUSTERED_BIT);
        facts->has_shuffle = in_compute && (sub.supportedOperations &
                                            VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
        if (ask_sub && (!ask_control ||
                        control.minSubgroupSize == control.maxSubgroupSize))
            facts->fixed_subgroup_size = sub.subgroupSize;
        if (ask_driver)
            snprintf(info->driver, sizeof info->driver, "%.63s%s%.63s",
                     driver.driverName, driver.driverInfo[0] ? " " : "",
                     driver.driverInfo);
    }
    VkPhysicalDeviceFeatures features;
    d->fn.vkGetPhysicalDeviceFeatures(pd, &features);

    if (props.apiVersion < VK_API_VERSION_1_1)
        append_reason(info->why_not, sizeof info->why_not,
                      "it supports Vulkan %u.%u, kakeya needs 1.1",
                      VK_API_VERSION_MAJOR(props.apiVersion),
                      VK_API_VERSION_MINOR(props.apiVersion));
    if (d->instance_api < VK_API_VERSION_1_1)
        append_reason(info->why_not, sizeof info->why_not,
                      "the Vulkan loader supports only 1.0 (update "
                      "libvulkan1)");
    if (facts->queue_family == UINT32_MAX)
        append_reason(info->why_not, sizeof info->why_not,
                      "it has no compute queue");
    if (!has_push)
        append_reason(info->why_not, sizeof info->why_not,
                      "it lacks VK_KHR_push_descriptor (update the driver)");
    if (!has_arith)
        append_reason(info->why_not, sizeof info->why_not,
                      "it has no subgroup arithmetic in compute shaders");
    if (!features.shaderStorageBufferArrayDynamicIndexing)
        append_reason(info->why_not, sizeof info->why_not,
                      "it cannot index arrays of storage buffers");
    /* Attention's workgroups, and the matmul's batched forms (teams of 64
     * invocations), are larger than the 128 Vulkan promises
     * (vk_shaders.h). */
    const uint32_t wg = (uint32_t)vk_shader_max_invocations();
    if (props.limits.maxComputeWorkGroupInvocations < wg ||
        props.limits.maxComputeWorkGroupSize[0] < wg)
        append_reason(info->why_not, sizeof info->why_not,
                      "it allows %u invocations per workgroup, kakeya needs "
                      "%u", props.limits.maxComputeWorkGroupInvocations, wg);
    info->is_usable = info->why_not[0] == 0;
}

int vk_device_list(struct kk_vk_device_info *out, int max,
                   struct kk_error *err)
{
    struct vk_device *d = calloc(1, sizeof *d);
    if (!d)
        return kk_fail(err, "out of memory listing Vulkan devices");
    int result = -1;
    VkPhysicalDevice *pds = NULL;
    uint32_t n = 0;
    if (instance_open(d, err) == 0 && physical_devices(d, &pds, &n, err) == 0) {
        for (uint32_t i = 0; out && i < n && (int)i < max; i++) {
            struct device_facts facts;
            describe(d, pds[i], &out[i], &facts);
        }
        result = n > (uint32_t)INT32_MAX ? INT32_MAX : (int)n;
    }
    free(pds);
    vk_device_close(d);
    return result;
}

int kk_vulkan_devices(struct kk_vk_device_info *out, int max,
                      struct kk_error *err)
{
    return vk_device_list(out, max, err);
}

/* ---- opening a device ---- */

static const char *profile_mode(void);
static void profile_open(struct vk_device *d, uint32_t timestamp_bits,
                         bool has_statistics);

/* Whether the chosen device can report its pipelines' register use and
 * spills: VK_KHR_pipeline_executable_properties with the feature
 * pipelineExecutableInfo. */
static bool offers_pipeline_statistics(const struct vk_device *d)
{
    if (!d->fn.vkGetPhysicalDeviceFeatures2 ||
        !has_extension(d, d->phys,
                       VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME))
        return false;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
    };
    VkPhysicalDeviceFeatures2 features = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
        .pNext = &exec,
    };
    d->fn.vkGetPhysicalDeviceFeatures2(d->phys, &features);
    return exec.pipelineExecutableInfo == VK_TRUE;
}

/* Loads the device-level entry points; fails naming the first missing one
 * that kakeya cannot do without. */
static int device_functions(struct vk_device *d, struct kk_error *err)
{
    const char *missing = NULL;
#define VK_FN_LOADER(name)
#define VK_FN_INSTANCE(name)
#define VK_FN_DEVICE(name)                                                \
    d->fn.name = (PFN_##name)d->fn.vkGetDeviceProcAddr(d->device, #name); \
    if (!d->fn.name && !is_optional_fn(#name) && !missing)                \
        missing = #name;
#include "vk_functions.h"
#undef VK_FN_LOADER
#undef VK_FN_INSTANCE
#undef VK_FN_DEVICE
    if (missing)
        return kk_fail(err, "%s: the driver has no %s: update the driver, or "
                       "use --backend cpu", d->props.deviceName, missing);
    return 0;
}

/* Whether d's chosen device lists int8 x int8 -> int32 cooperative matrix
 * products of 16 x 8 x 32 per subgroup (matmul_mma_q8_0's shape). */
static bool lists_int8_tiles(const struct vk_device *d)
{
    uint32_t n = 0;
    if (d->fn.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(d->phys, &n,
                                                               NULL) !=
            VK_SUCCESS ||
        n == 0)
        return false;
    VkCooperativeMatrixPropertiesNV *ps = calloc(n, sizeof *ps);
    if (!ps)
        return false;
    for (uint32_t i = 0; i < n; i++)
        ps[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    bool found = false;
    if (d->fn.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(d->phys, &n,
                                                               ps) >= 0)
        for (uint32_t i = 0; i < n && !found; i++)
            found = ps[i].MSize == 16 && ps[i].NSize == 8 &&
                    ps[i].KSize == 32 &&
                    ps[i].AType == VK_COMPONENT_TYPE_SINT8_NV &&
                    ps[i].BType == VK_COMPONENT_TYPE_SINT8_NV &&
                    ps[i].CType == VK_COMPONENT_TYPE_SINT32_NV &&
                    ps[i].DType == VK_COMPONENT_TYPE_SINT32_NV &&
                    ps[i].scope == VK_SCOPE_SUBGROUP_NV;
    free(ps);
    return found;
}

/* Whether matmul_mma_q8_0 can run on d's chosen device: its int8 tiles
 * (VK_NV_cooperative_matrix), int8 in storage buffers and shared memory,
 * the Vulkan memory model, clustered subgroup operations, and subgroups
 * all 32 wide. If so, features12 and coop hold what to enable. */
static bool offers_int8_mma(const struct vk_device *d,
                            VkPhysicalDeviceVulkan12Features *features12,
                            VkPhysicalDeviceCooperativeMatrixFeaturesNV *coop)
{
    if (!d->fn.vkGetPhysicalDeviceFeatures2 ||
        !d->fn.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV ||
        d->props.apiVersion < VK_API_VERSION_1_2 ||
        d->instance_api < VK_API_VERSION_1_2 || d->fixed_subgroup_size != 32 ||
        !d->has_clustered ||
        !has_extension(d, d->phys, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME))
        return false;
    *coop = (VkPhysicalDeviceCooperativeMatrixFeaturesNV){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
    };
    *features12 = (VkPhysicalDeviceVulkan12Features){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = coop,
    };
    VkPhysicalDeviceFeatures2 has = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
        .pNext = features12,
    };
    d->fn.vkGetPhysicalDeviceFeatures2(d->phys, &has);
    if (!coop->cooperativeMatrix || !features12->storageBuffer8BitAccess ||
        !features12->shaderInt8 || !features12->vulkanMemoryModel ||
        !lists_int8_tiles(d))
        return false;
    /* enable only what the shader uses */
    *features12 = (VkPhysicalDeviceVulkan12Features){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = coop,
        .storageBuffer8BitAccess = VK_TRUE,
        .shaderInt8 = VK_TRUE,
        .vulkanMemoryModel = VK_TRUE,
    };
    *coop = (VkPhysicalDeviceCooperativeMatrixFeaturesNV){
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE,
    };
    return true;
}

/* Whether the sample shader can run on d's chosen device: 64-bit
 * integers (shaderInt64) and workgroups of VK_SAMPLE_WORKGROUP. */
static bool offers_int64(const struct vk_device *d)
{
    VkPhysicalDeviceFeatures features;
    d->fn.vkGetPhysicalDeviceFeatures(d->phys, &features);
    return features.shaderInt64 &&
           d->props.limits.maxComputeWorkGroupInvocations >=
               VK_SAMPLE_WORKGROUP &&
           d->props.limits.maxComputeWorkGroupSize[0] >= VK_SAMPLE_WORKGROUP;
}

/* Whether the matmul_qx forms can run on d's chosen device, and how to
 * enable what they need: packed int8 dot products (shaderIntegerDotProduct),
 * subgroup shuffles, subgroups of one width, a multiple of 8. */
static enum int_dot int_dot_support(const struct vk_device *d)
{
    if (!d->has_shuffle || d->fixed_subgroup_size < 8 ||
        d->fixed_subgroup_size % 8 != 0)
        return INT_DOT_NONE;
    const bool has_ext = has_extension(
        d, d->phys, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    const bool is_core = d->props.apiVersion >= VK_API_VERSION_1_3 &&
                         d->instance_api >= VK_API_VERSION_1_3;
    if (!d->fn.vkGetPhysicalDeviceFeatures2 ||
        d->instance_api < VK_API_VERSION_1_1 || (!is_core && !has_ext))
        return INT_DOT_NONE;
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {
        .sType =
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
    };
    VkPhysicalDeviceFeatures2 has = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
        .pNext = &dot,
    };
    d->fn.vkGetPhysicalDeviceFeatures2(d->phys, &has);
    if (!dot.shaderIntegerDotProduct)
        return INT_DOT_NONE;
    return is_core ? INT_DOT_CORE : INT_DOT_EXTENSION;
}

static int device_create(struct vk_device *d, struct kk_error *err)
{
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = d->queue_family,
        .queueCount = 1,
        .pQueuePriorities = &priority,
    };
    /* The pipelines' statistics are asked for only by KAKEYA_VK_PROFILE:
     * capturing them slows pipeline creation. */
    const bool wants_statistics = profile_mode() &&
                                  offers_pipeline_statistics(d);
    /* KAKEYA_VK_MMA=0 leaves the int8 product tiles off (to compare). */
    const char *mma_env = getenv("KAKEYA_VK_MMA");
    VkPhysicalDeviceVulkan12Features features12;
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop;
    d->has_int8_mma = !(mma_env && !strcmp(mma_env, "0")) &&
                      offers_int8_mma(d, &features12, &coop);
    d->int_dot = int_dot_support(d);
    d->has_int64 = offers_int64(d);
    const char *extensions[4] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
    uint32_t n_extensions = 1;
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {
        .sType =
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
        .shaderIntegerDotProduct = VK_TRUE,
    };
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pipelineExecutableInfo = VK_TRUE,
    };
    /* chain: ci -> [exec] -> [dot] -> [features12 -> coop] */
    const void *chain = NULL;
    if (d->has_int8_mma) {
        extensions[n_extensions++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
        chain = &features12;
    }
    if (d->int_dot != INT_DOT_NONE) {
        if (d->int_dot == INT_DOT_EXTENSION)
            extensions[n_extensions++] =
                VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
        dot.pNext = (void *)chain;
        chain = &dot;
    }
    if (wants_statistics) {
        extensions[n_extensions++] =
            VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
        exec.pNext = (void *)chain;
        chain = &exec;
    }
    VkPhysicalDeviceFeatures features = {
        .shaderStorageBufferArrayDynamicIndexing = VK_TRUE,
        .shaderInt64 = d->has_int64,
    };
    VkDeviceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = chain,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &queue,
        .enabledExtensionCount = n_extensions,
        .ppEnabledExtensionNames = extensions,
        .pEnabledFeatures = &features,
    };
    VkResult r = d->fn.vkCreateDevice(d->phys, &ci, NULL, &d->device);
    if (r != VK_SUCCESS) {
        d->device = VK_NULL_HANDLE;
        return kk_fail(err, "%s: vkCreateDevice failed (%s): update the "
                       "driver, pick another device (`kakeya info "
                       "--devices`), or use --backend cpu",
                       d->props.deviceName, vk_result_name(r));
    }
    if (device_functions(d, err))
        return -1;
    const bool has_statistics =
        wants_statistics && d->fn.vkGetPipelineExecutablePropertiesKHR &&
        d->fn.vkGetPipelineExecutableStatisticsKHR;

    d->fn.vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);

    /* RESET_COMMAND_BUFFER lets vkBeginCommandBuffer reset each buffer on
     * its own, so the two streams never wait on each other's reset. */
    VkCommandPoolCreateInfo pool = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = d->queue_family,
    };
    r = d->fn.vkCreateCommandPool(d->device, &pool, NULL, &d->pool);
    if (r != VK_SUCCESS) {
        d->pool = VK_NULL_HANDLE;
        return kk_fail(err, "%s: vkCreateCommandPool failed (%s)",
                       d->props.deviceName, vk_result_name(r));
    }
    /* The recording's chunks and the transfer buffer; an unused command
     * buffer is only a handle until something is recorded into it. */
    VkCommandBuffer cmds[VK_MAX_CHUNKS + 1];
    VkCommandBufferAllocateInfo alloc = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = d->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = VK_MAX_CHUNKS + 1,
    };
    r = d->fn.vkAllocateCommandBuffers(d->device, &alloc, cmds);
    if (r != VK_SUCCESS)
        return kk_fail(err, "%s: vkAllocateCommandBuffers failed (%s)",
                       d->props.deviceName, vk_result_name(r));
    memcpy(d->chunks, cmds, sizeof d->chunks);
    d->xfer = cmds[VK_MAX_CHUNKS];
    uint32_t n_families = 0;
    d->fn.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n_families, NULL);
    VkQueueFamilyProperties *families = calloc(n_families ? n_families : 1,
                                               sizeof *families);
    if (families) {
        d->fn.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n_families,
                                                       families);
        if (d->queue_family < n_families)
            profile_open(d, families[d->queue_family].timestampValidBits,
                         has_statistics);
        free(families);
    }
    /* Without it every pass is recorded (out of memory for it, too). */
    if (replays_wanted(d))
        d->replays = vk_replays_new(VK_KEPT_RECORDINGS);
    VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    r = d->fn.vkCreateFence(d->device, &fence, NULL, &d->fence);
    if (r != VK_SUCCESS) {
        d->fence = VK_NULL_HANDLE;
        return kk_fail(err, "%s: vkCreateFence failed (%s)",
                       d->props.deviceName, vk_result_name(r));
    }
    return 0;
}

/* Chooses the device for vk_device_open: index, or the first usable GPU. */
static int pick_device(const struct kk_vk_device_info *infos, uint32_t n,
                       int index, struct kk_error *err)
{
    if (index >= 0) {
        if ((uint32_t)index >= n)
            return kk_fail(err, "there is no Vulkan device %d: the loader "
                           "reports %u device%s (0..%u; `kakeya info "
                           "--devices` lists them)", index, n,
                           n == 1 ? "" : "s", n - 1);
        if (!infos[index].is_usable)
            return kk_fail(err, "Vulkan device %d (%.200s) cannot run kakeya: "
                           "%s — pick another with --device N (`kakeya info "
                           "--devices`), or use --backend cpu", index,
                           infos[index].name, infos[index].why_not);
        return index;
    }
    for (uint32_t i = 0; i < n; i++)
        if (infos[i].is_usable && infos[i].type != KK_VK_CPU)
            return (int)i;
    char seen[300] = "";
    for (uint32_t i = 0; i < n; i++)
        append_reason(seen, sizeof seen, "%u %.80s (%s%s)", i, infos[i].name,
                      infos[i].type_name,
                      infos[i].is_usable ? "" : ", not usable");
    return kk_fail(err, "no Vulkan GPU to compute on (the loader reports: %s; "
                   "a software renderer is never picked by itself): name one "
                   "with --backend vulkan --device N, or use --backend cpu",
                   seen);
}

int vk_device_open(int index, struct vk_device **out, struct kk_error *err)
{
    *out = NULL;
    struct vk_device *d = calloc(1, sizeof *d);
    if (!d)
        return kk_fail(err, "out of memory opening a Vulkan device");
    d->staging.block = -1;
    VkPhysicalDevice *pds = NULL;
    struct kk_vk_device_info *infos = NULL;
    struct device_facts *facts = NULL;
    uint32_t n = 0;
    int rc = -1;
    if (instance_open(d, err) || physical_devices(d, &pds, &n, err))
        goto done;
    if (n == 0) {
        kk_fail(err, "the Vulkan loader reports no device: install a driver "
                "(e.g. mesa-vulkan-drivers), or use --backend cpu");
        goto done;
    }
    infos = calloc(n, sizeof *infos);
    facts = calloc(n, sizeof *facts);
    if (!infos || !facts) {
        kk_fail(err, "out of memory opening a Vulkan device");
        goto done;
    }
    for (uint32_t i = 0; i < n; i++)
        describe(d, pds[i], &infos[i], &facts[i]);
    int chosen = pick_device(infos, n, index, err);
    if (chosen < 0)
        goto done;
    d->phys = pds[chosen];
    d->queue_family = facts[chosen].queue_family;
    d->fixed_subgroup_size = facts[chosen].fixed_subgroup_size;
    d->has_clustered = facts[chosen].has_clustered;
    d->has_shuffle = facts[chosen].has_shuffle;
    d->fn.vkGetPhysicalDeviceProperties(d->phys, &d->props);
    d->fn.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem_props);
    rc = device_create(d, err);
done:
    free(pds);
    free(infos);
    free(facts);
    if (rc) {
        vk_device_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

/* ---- profiling ---- */

static double ms_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e3 +
           (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* KAKEYA_VK_PROFILE's value when it asks for profiling, else NULL. */
static const char *profile_mode(void)
{
    const char *env = getenv("KAKEYA_VK_PROFILE");
    return env && *env && strcmp(env, "0") ? env : NULL;
}

/* Starts profiling when KAKEYA_VK_PROFILE asks and the queue has
 * timestamps; otherwise leaves d->profile NULL (profiling is optional).
 * has_statistics: the device was made with pipeline statistics on. */
static void profile_open(struct vk_device *d, uint32_t timestamp_bits,
                         bool has_statistics)
{
    const char *env = profile_mode();
    if (!env)
        return;
    const bool host_only = !strcmp(env, "host");
    if (!host_only && timestamp_bits == 0)
        return;
    struct vk_profile *p = calloc(1, sizeof *p);
    if (!p)
        return;
    p->is_host_only = host_only;
    p->has_statistics = has_statistics;
    if (host_only) {
        d->profile = p;
        return;
    }
    VkQueryPoolCreateInfo qi = {
        .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
        .queryType = VK_QUERY_TYPE_TIMESTAMP,
        .queryCount = VK_PROFILE_STAMPS,
    };
    if (d->fn.vkCreateQueryPool(d->device, &qi, NULL, &p->pool) != VK_SUCCESS) {
        free(p);
        return;
    }
    p->ns_per_tick = d->props.limits.timestampPeriod;
    d->profile = p;
}

static const char *const call_names[] = {"vkCmdBindPipeline",
                                         "vkCmdPushDescriptorSetKHR",
                                         "vkCmdPushConstants",
                                         "vkCmdDispatch",
                                         "vkCmdPipelineBarrier",
                                         "vkEndCommandBuffer",
                                         "vkQueueSubmit"};

/* Host time since *t0 charged to call kind k; *t0 moves to now. */
static void profile_call(struct vk_device *d, int k, struct timespec *t0)
{
    if (!d->profile || d->profile->is_host_only)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    d->profile->call_ms[k] += ms_between(t0, &t);
    d->profile->calls[k]++;
    *t0 = t;
}

static void profile_stamp(struct vk_device *d, const char *what,
                          uint32_t groups)
{
    struct vk_profile *p = d->profile;
    if (!p || p->is_host_only || p->n >= VK_PROFILE_STAMPS)
        return;
    d->fn.vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                              p->pool, (uint32_t)p->n);
    p->groups[p->n] = groups;
    p->what[p->n++] = what;
}

/* A recording begins: the host's clock. */
static void profile_begin(struct vk_device *d)
{
    struct vk_profile *p = d->profile;
    if (!p)
        return;
    clock_gettime(CLOCK_MONOTONIC, &p->begun);
    p->current = (struct vk_record_split){0, 0, 0};
}

/* Its first chunk begins: the GPU's clock. */
static void profile_begin_stamps(struct vk_device *d)
{
    struct vk_profile *p = d->profile;
    if (!p || p->is_host_only)
        return;
    d->fn.vkCmdResetQueryPool(d->cmd, p->pool, 0, VK_PROFILE_STAMPS);
    p->n = 0;
    profile_stamp(d, "start", 0);
}

static void profile_charge(struct vk_profile *p, const char *what,
                           uint32_t groups, double ms)
{
    char name[sizeof p->rows[0].name];
    if (groups)
        snprintf(name, sizeof name, "%s [%u]", what, (unsigned)groups);
    else
        snprintf(name, sizeof name, "%s", what);
    int i = 0;
    while (i < p->n_rows && strcmp(p->rows[i].name, name) != 0)
        i++;
    if (i == VK_PROFILE_ROWS)
        return;
    if (i == p->n_rows)
        snprintf(p->rows[p->n_rows++].name, sizeof p->rows[0].name, "%s",
                 name);
    p->rows[i].ms += ms;
    p->rows[i].count++;
}

/* After a recording completed: its stamps, charged to their names;
 * is_replay: it was submitted from a kept one. */
static void profile_end(struct vk_device *d, bool is_replay)
{
    struct vk_profile *p = d->profile;
    if (!p || (!p->is_host_only && p->n < 2))
        return;
    struct timespec done;
    clock_gettime(CLOCK_MONOTONIC, &done);
    p->record_ms += ms_between(&p->begun, &p->submitted);
    if (is_replay) {
        p->replay_record_ms += ms_between(&p->begun, &p->submitted);
        p->replays++;
    }
    p->wait_ms += ms_between(&p->submitted, &done);
    p->total.dispatch_ms += p->current.dispatch_ms;
    p->total.copy_ms += p->current.copy_ms;
    p->total.chunk_ms += p->current.chunk_ms;
    p->passes++;
    if (p->is_host_only)
        return;
    uint64_t ts[VK_PROFILE_STAMPS];
    if (d->fn.vkGetQueryPoolResults(d->device, p->pool, 0, (uint32_t)p->n,
                                    sizeof ts, ts, sizeof ts[0],
                                    VK_QUERY_RESULT_64_BIT |
                                        VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    for (int i = 1; i < p->n; i++)
        profile_charge(p, p->what[i], p->groups[i],
                       (double)(ts[i] - ts[i - 1]) * p->ns_per_tick / 1e6);
}

/* ---- pipeline statistics (KAKEYA_VK_PROFILE) ---- */

/* A growing string; is_short once an allocation failed (the text then
 * ends where it was, still terminated). */
struct text {
    char *s;
    size_t len, cap;
    bool is_short;
};

static void text_add(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
    if (t->is_short)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t need = t->len + (size_t)n + 1;
    if (need > t->cap) {
        char *grown = realloc(t->s, need * 2);
        if (!grown) {
            t->is_short = true;
            return;
        }
        t->s = grown;
        t->cap = need * 2;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* "Register Count 128": a statistic's name and value. The driver's
 * strings are bounded by VK_MAX_DESCRIPTION_SIZE, not trusted to end. */
static void text_add_statistic(struct text *t,
                               const VkPipelineExecutableStatisticKHR *s)
{
    const int w = VK_MAX_DESCRIPTION_SIZE;
    switch (s->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
        text_add(t, "%.*s %s", w, s->name, s->value.b32 ? "yes" : "no");
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
        text_add(t, "%.*s %lld", w, s->name, (long long)s->value.i64);
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        text_add(t, "%.*s %llu", w, s->name,
                 (unsigned long long)s->value.u64);
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
        text_add(t, "%.*s %g", w, s->name, s->value.f64);
        break;
    default:
        text_add(t, "%.*s (format %d)", w, s->name, (int)s->format);
        break;
    }
}

/* Appends " Register Count 128, Spill Bytes 0, ...": every statistic of
 * executable `index` of pipe. */
static void text_add_executable(struct vk_device *d, VkPipeline pipe,
                                uint32_t index, struct text *t)
{
    VkPipelineExecutableInfoKHR info = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
        .pipeline = pipe,
        .executableIndex = index,
    };
    uint32_t n = 0;
    VkPipelineExecutableStatisticKHR *stats = NULL;
    VkResult r = d->fn.vkGetPipelineExecutableStatisticsKHR(d->device, &info,
                                                            &n, NULL);
    if (r == VK_SUCCESS && n > 0) {
        stats = calloc(n, sizeof *stats);
        for (uint32_t i = 0; stats && i < n; i++)
            stats[i].sType =
                VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        r = stats ? d->fn.vkGetPipelineExecutableStatisticsKHR(
                        d->device, &info, &n, stats)
                  : VK_ERROR_OUT_OF_HOST_MEMORY;
        if (r == VK_INCOMPLETE)   /* fewer than counted: n says how many */
            r = VK_SUCCESS;
    }
    if (r != VK_SUCCESS)
        text_add(t, " not readable (%s)", vk_result_name(r));
    else if (n == 0)
        text_add(t, " no statistics");
    for (uint32_t i = 0; r == VK_SUCCESS && i < n; i++) {
        text_add(t, "%s", i ? ", " : " ");
        text_add_statistic(t, &stats[i]);
    }
    free(stats);
}

/* What the driver reports of pipe: per executable, a line to follow the
 * pipeline's name (": Register Count 128, ..."; where there are several
 * executables, their names first). malloc'd; NULL when out of memory. */
static char *statistics_text(struct vk_device *d, VkPipeline pipe)
{
    VkPipelineInfoKHR info = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR,
        .pipeline = pipe,
    };
    uint32_t n = 0;
    VkPipelineExecutablePropertiesKHR *exes = NULL;
    VkResult r = d->fn.vkGetPipelineExecutablePropertiesKHR(d->device, &info,
                                                            &n, NULL);
    if (r == VK_SUCCESS && n > 0) {
        exes = calloc(n, sizeof *exes);
        for (uint32_t i = 0; exes && i < n; i++)
            exes[i].sType =
                VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR;
        r = exes ? d->fn.vkGetPipelineExecutablePropertiesKHR(
                       d->device, &info, &n, exes)
                 : VK_ERROR_OUT_OF_HOST_MEMORY;
        if (r == VK_INCOMPLETE)
            r = VK_SUCCESS;
    }
    struct text t = {0};
    if (r != VK_SUCCESS)
        text_add(&t, ": statistics not readable (%s)\n", vk_result_name(r));
    else if (n == 0)
        text_add(&t, ": the driver reports no executables\n");
    for (uint32_t e = 0; r == VK_SUCCESS && e < n; e++) {
        if (n > 1)
            text_add(&t, " (%.*s)", VK_MAX_DESCRIPTION_SIZE, exes[e].name);
        text_add(&t, ":");
        text_add_executable(d, pipe, e, &t);
        text_add(&t, "\n");
    }
    free(exes);
    return t.s;
}

/* Whether pipelines are to be made with their statistics captured. */
static bool profile_has_statistics(const struct vk_device *d)
{
    return d->profile && d->profile->has_statistics;
}

/* Keeps what the driver reports of pipe, just made; returns the entry's
 * number for vk_pipeline.stats_entry (0: statistics are off, or memory
 * ran out and this pipeline goes without). Read now, as the pipeline may
 * be gone by the time the profile is printed. */
static int profile_pipeline_made(struct vk_device *d, VkPipeline pipe)
{
    struct vk_profile *p = d->profile;
    if (!profile_has_statistics(d))
        return 0;
    if (p->n_stats == p->cap_stats) {
        int cap = p->cap_stats ? p->cap_stats * 2 : 32;
        struct pipeline_statistics *grown =
            realloc(p->stats, (size_t)cap * sizeof *grown);
        if (!grown)
            return 0;
        p->stats = grown;
        p->cap_stats = cap;
    }
    p->stats[p->n_stats] = (struct pipeline_statistics){
        .text = statistics_text(d, pipe),
    };
    return ++p->n_stats;
}

/* A dispatch of pipe is being recorded: its statistics get printed, under
 * its name. */
static void profile_dispatched(struct vk_device *d,
                               const struct vk_pipeline *pipe)
{
    struct vk_profile *p = d->profile;
    if (!p || pipe->stats_entry <= 0 || pipe->stats_entry > p->n_stats)
        return;
    struct pipeline_statistics *s = &p->stats[pipe->stats_entry - 1];
    if (s->is_dispatched)
        return;
    s->is_dispatched = true;
    snprintf(s->name, sizeof s->name, "%s",
             pipe->name[0] ? pipe->name : "dispatch");
}

/* "  stats NAME: ..." per executable of each pipeline that was dispatched,
 * or one line saying the device has no statistics to give. */
static void profile_print_statistics(const struct vk_profile *p)
{
    if (!p->has_statistics) {
        fprintf(stderr, "  pipeline statistics: not available on this "
                "device (no VK_KHR_pipeline_executable_properties)\n");
        return;
    }
    for (int i = 0; i < p->n_stats; i++) {
        const struct pipeline_statistics *s = &p->stats[i];
        if (!s->is_dispatched)
            continue;
        if (!s->text) {
            fprintf(stderr, "  stats %s: not kept (out of memory)\n",
                    s->name);
            continue;
        }
        for (const char *line = s->text; *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            fprintf(stderr, "  stats %s%.*s\n", s->name, (int)len, line);
            line += len + (end != NULL);
        }
    }
}

/* What one clock_gettime costs here: the full profile reads the clock
 * six times a dispatch, and in a virtual machine a read may be a system
 * call, which then shows up as recording time. */
static double clock_read_ns(void)
{
    struct timespec a, b, t;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 1000; i++)
        clock_gettime(CLOCK_MONOTONIC, &t);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return ms_between(&a, &b) * 1e6 / 1001;
}

static void profile_close(struct vk_device *d)
{
    struct vk_profile *p = d->profile;
    if (!p)
        return;
    if (p->passes > 0) {
        const struct vk_record_split *t = &p->total;
        double gpu = 0;
        for (int i = 0; i < p->n_rows; i++)
            gpu += p->rows[i].ms;
        fprintf(stderr, "vulkan profile, %ld recordings, per recording: host "
                "recording %.3f ms, submit to done %.3f ms, GPU %.3f ms "
                "(a clock read costs %.0f ns)\n",
                p->passes, p->record_ms / p->passes, p->wait_ms / p->passes,
                gpu / p->passes, clock_read_ns());
        fprintf(stderr, "  of the recording: in vk_dispatch %.3f ms, in "
                "copies %.3f ms, switching chunks %.3f ms, the rest %.3f "
                "ms\n", t->dispatch_ms / p->passes, t->copy_ms / p->passes,
                t->chunk_ms / p->passes,
                (p->record_ms - t->dispatch_ms - t->copy_ms - t->chunk_ms) /
                    p->passes);
        if (d->replays)
            fprintf(stderr, "  %ld of the recordings submitted from a kept "
                    "one (replays), each after %.3f ms of the host's\n",
                    p->replays, p->replays ? p->replay_record_ms / p->replays
                                           : 0.0);
        for (int i = 0; i < p->n_rows; i++)
            fprintf(stderr, "  %-34s %8ld x %9.2f us = %8.3f ms/recording\n",
                    p->rows[i].name, p->rows[i].count,
                    1e3 * p->rows[i].ms / p->rows[i].count,
                    p->rows[i].ms / p->passes);
        for (int k = 0; k < N_CALLS; k++)
            if (p->calls[k])
                fprintf(stderr, "  host %-26s %8ld x %7.2f us\n",
                        call_names[k], p->calls[k],
                        1e3 * p->call_ms[k] / p->calls[k]);
        profile_print_statistics(p);
    }
    if (p->pool)
        d->fn.vkDestroyQueryPool(d->device, p->pool, NULL);
    for (int i = 0; i < p->n_stats; i++)
        free(p->stats[i].text);
    free(p->stats);
    free(p);
    d->profile = NULL;
}

void vk_device_close(struct vk_device *d)
{
    if (!d)
        return;
    if (d->device) {
        d->fn.vkDeviceWaitIdle(d->device);
        profile_close(d);
        vk_buffer_free(d, &d->staging);
        /* Blocks still held belong to buffers the caller did not free;
         * their memory goes with the device either way. */
        for (int i = 0; i < d->n_blocks; i++)
            if (d->blocks[i].mem)
                d->fn.vkFreeMemory(d->device, d->blocks[i].mem, NULL);
        if (d->fence)
            d->fn.vkDestroyFence(d->device, d->fence, NULL);
        replays_forget(d);
        if (d->pool)   /* frees its command buffers */
            d->fn.vkDestroyCommandPool(d->device, d->pool, NULL);
        d->fn.vkDestroyDevice(d->device, NULL);
    }
    if (d->instance) {
        keep_modules_loaded();
        d->fn.vkDestroyInstance(d->instance, NULL);
    }
    if (d->lib)
        dlclose(d->lib);
    vk_replays_free(d->replays);
    free(d->log);
    free(d->blocks);
    free(d);
}

const char *vk_device_name(const struct vk_device *d)
{
    return d ? d->props.deviceName : "";
}

const struct vk_fn *vk_device_fn(const struct vk_device *d)
{
    return &d->fn;
}

VkDevice vk_device_handle(const struct vk_device *d)
{
    return d->device;
}

bool vk_device_is_cpu(const struct vk_device *d)
{
    return d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
}

uint32_t vk_device_subgroup_size(const struct vk_device *d)
{
    return d->fixed_subgroup_size;
}

bool vk_device_has_int_dot(const struct vk_device *d)
{
    return d->int_dot != INT_DOT_NONE;
}

bool vk_device_has_int8_mma(const struct vk_device *d)
{
    return d->has_int8_mma;
}

bool vk_device_has_int64(const struct vk_device *d)
{
    return d->has_int64;
}

uint32_t vk_device_max_groups_x(const struct vk_device *d)
{
    return d->props.limits.maxComputeWorkGroupCount[0];
}

uint64_t vk_device_max_buffer_range(const struct vk_device *d)
{
    return d->props.limits.maxStorageBufferRange;
}

bool vk_device_binds(const struct vk_device *d, VkDeviceSize size)
{
    return align_up(size, 4) <= d->props.limits.maxStorageBufferRange;
}

struct vk_range_text vk_device_range_text(const struct vk_device *d,
                                          VkDeviceSize size)
{
    const uint64_t range = d->props.limits.maxStorageBufferRange;
    struct vk_range_text t;
    snprintf(t.size, sizeof t.size, "%.1f MiB", MIB(size));
    snprintf(t.limit, sizeof t.limit, "%.1f MiB", MIB(range));
    if (!strcmp(t.size, t.limit)) {
        snprintf(t.size, sizeof t.size, "%llu bytes",
                 (unsigned long long)size);
        snprintf(t.limit, sizeof t.limit, "%llu bytes",
                 (unsigned long long)range);
    }
    return t;
}

/* ---- memory ---- */

static const char *memory_name(enum vk_memory where)
{
    switch (where) {
    case VK_MEM_UPLOAD: return "upload (host-visible)";
    case VK_MEM_READBACK: return "readback (host-visible)";
    default: return "device";
    }
}

/* The first memory type in `bits` with everything `where` needs and wants,
 * else the first with what it needs; -1 when none. The spec orders types
 * so that the first match is the one with the fewest extra properties. */
static int memory_type(const struct vk_device *d, uint32_t bits,
                       enum vk_memory where)
{
    VkMemoryPropertyFlags need = 0, want = 0;
    switch (where) {
    case VK_MEM_DEVICE:
        want = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        break;
    case VK_MEM_UPLOAD:
        need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
               VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        break;
    case VK_MEM_READBACK:
        need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
               VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        want = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
        break;
    }
    for (int pass = 0; pass < 2; pass++) {
        VkMemoryPropertyFlags flags = pass == 0 ? need | want : need;
        for (uint32_t i = 0; i < d->mem_props.memoryTypeCount; i++)
            if ((bits & (1u << i)) &&
                (d->mem_props.memoryTypes[i].propertyFlags & flags) == flags)
                return (int)i;
    }
    return -1;
}

/* Allocates (and for host memory maps) one block in slot `slot`. */
static int block_allocate(struct vk_device *d, int slot, VkDeviceSize size,
                          uint32_t type, enum vk_memory where, bool is_own,
                          struct kk_error *err)
{
    struct vk_block *b = &d->blocks[slot];
    uint32_t heap = d->mem_props.memoryTypes[type].heapIndex;
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = size,
        .memoryTypeIndex = type,
    };
    VkDeviceMemory mem;
    VkResult r = d->fn.vkAllocateMemory(d->device, &ai, NULL, &mem);
    if (r != VK_SUCCESS)
        return kk_fail(err, "%s: could not allocate %.1f MiB of %s memory "
                       "(%s; heap %u has %.0f MiB, kakeya holds %.0f MiB of "
                       "it): use a smaller model or context, or --backend "
                       "cpu", d->props.deviceName, MIB(size),
                       memory_name(where), vk_result_name(r), heap,
                       MIB(d->mem_props.memoryHeaps[heap].size),
                       MIB(d->heap_held[heap]));
    void *mapped = NULL;
    if (where != VK_MEM_DEVICE) {
        r = d->fn.vkMapMemory(d->device, mem, 0, VK_WHOLE_SIZE, 0, &mapped);
        if (r != VK_SUCCESS) {
            d->fn.vkFreeMemory(d->device, mem, NULL);
            return kk_fail(err, "%s: could not map %.1f MiB of %s memory (%s)",
                           d->props.deviceName, MIB(size),
                           memory_name(where), vk_result_name(r));
        }
    }
    *b = (struct vk_block){.mem = mem, .type_index = type, .where = where,
                           .is_own = is_own, .size = size, .mapped = mapped};
    d->heap_held[heap] += size;
    return 0;
}

static void block_release(struct vk_device *d, struct vk_block *b)
{
    uint32_t heap = d->mem_props.memoryTypes[b->type_index].heapIndex;
    d->fn.vkFreeMemory(d->device, b->mem, NULL);   /* unmaps too */
    d->heap_held[heap] -= b->size;
    memset(b, 0, sizeof *b);
}

/* A free slot in d->blocks (growing the array), or -1. */
static int block_slot(struct vk_device *d, struct kk_error *err)
{
    for (int i = 0; i < d->n_blocks; i++)
        if (!d->blocks[i].mem)
            return i;
    int n = d->n_blocks ? d->n_blocks * 2 : 16;
    struct vk_block *grown = realloc(d->blocks, (size_t)n * sizeof *grown);
    if (!grown)
        return kk_fail(err, "out of memory tracking device memory blocks");
    memset(grown + d->n_blocks, 0,
           (size_t)(n - d->n_blocks) * sizeof *grown);
    d->blocks = grown;
    int slot = d->n_blocks;
    d->n_blocks = n;
    return slot;
}

int vk_buffer_new(struct vk_device *d, VkDeviceSize size, enum vk_memory where,
                  struct vk_buffer *out, struct kk_error *err)
{
    memset(out, 0, sizeof *out);
    out->block = -1;
    if (size == 0)
        return kk_fail(err, "vk_buffer_new: a buffer of 0 bytes (a bug in "
                       "kakeya)");
    if (d->is_lost)
        return kk_fail(err, "%s: the device stopped responding earlier; "
                       "restart kakeya, or use --backend cpu",
                       d->props.deviceName);

    /* Rounded up to a whole word: shaders address buffers as 32-bit words
     * and may touch the word holding the last bytes. */
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = align_up(size, 4),
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkBuffer buf;
    VkResult r = d->fn.vkCreateBuffer(d->device, &bci, NULL, &buf);
    if (r != VK_SUCCESS)
        return kk_fail(err, "%s: could not create a buffer of %.1f MiB (%s)",
                       d->props.deviceName, MIB(size), vk_result_name(r));
    VkMemoryRequirements req;
    d->fn.vkGetBufferMemoryRequirements(d->device, buf, &req);
    int type = memory_type(d, req.memoryTypeBits, where);
    if (type < 0) {
        d->fn.vkDestroyBuffer(d->device, buf, NULL);
        return kk_fail(err, "%s: no memory type can hold a %.1f MiB %s "
                       "buffer: this driver cannot run kakeya, use "
                       "--backend cpu", d->props.deviceName, MIB(size),
                       memory_name(where));
    }

    int slot = -1;
    VkDeviceSize offset = 0;
    if (req.size < VK_OWN_ALLOCATION_BYTES) {
        /* Offsets also obey minStorageBufferOffsetAlignment, so that any
         * buffer can be bound as a storage buffer at offset 0. */
        VkDeviceSize align = req.alignment;
        if (d->props.limits.minStorageBufferOffsetAlignment > align)
            align = d->props.limits.minStorageBufferOffsetAlignment;
        for (int i = 0; i < d->n_blocks && slot < 0; i++) {
            struct vk_block *b = &d->blocks[i];
            if (!b->mem || b->is_own || b->type_index != (uint32_t)type ||
                b->where != where)
                continue;
            VkDeviceSize at = align_up(b->used, align);
            if (at + req.size <= b->size) {
                slot = i;
                offset = at;
            }
        }
        if (slot < 0) {
            int fresh = block_slot(d, err);
            if (fresh < 0) {
                d->fn.vkDestroyBuffer(d->device, buf, NULL);
                return -1;
            }
            /* A device too full for a whole block may still take this
             * buffer alone: then it falls through to its own allocation. */
            if (block_allocate(d, fresh, VK_BLOCK_BYTES, (uint32_t)type,
                               where, false, NULL) == 0)
                slot = fresh;
        }
    }
    bool is_own = slot < 0;
    if (is_own) {
        slot = block_slot(d, err);
        if (slot < 0 || block_allocate(d, slot, req.size, (uint32_t)type,
                                       where, true, err)) {
            d->fn.vkDestroyBuffer(d->device, buf, NULL);
            return -1;
        }
    }

    struct vk_block *b = &d->blocks[slot];
    r = d->fn.vkBindBufferMemory(d->device, buf, b->mem, offset);
    if (r != VK_SUCCESS) {
        d->fn.vkDestroyBuffer(d->device, buf, NULL);
        if (b->n_buffers == 0)
            block_release(d, b);
        return kk_fail(err, "%s: could not bind a %.1f MiB buffer to its "
                       "memory (%s)", d->props.deviceName, MIB(size),
                       vk_result_name(r));
    }
    b->used = offset + req.size;
    b->n_buffers++;
    out->buf = buf;
    out->size = size;
    out->mapped = b->mapped ? (char *)b->mapped + offset : NULL;
    out->mem = b->mem;
    out->offset = offset;
    out->block = is_own ? -1 : slot;
    return 0;
}

void vk_buffer_free(struct vk_device *d, struct vk_buffer *b)
{
    if (!d || !b || !b->buf)
        return;
    replays_forget(d);
    d->fn.vkDestroyBuffer(d->device, b->buf, NULL);
    struct vk_block *block = NULL;
    if (b->block >= 0 && b->block < d->n_blocks &&
        d->blocks[b->block].mem == b->mem)
        block = &d->blocks[b->block];
    for (int i = 0; !block && i < d->n_blocks; i++)   /* own allocations */
        if (d->blocks[i].mem == b->mem && d->blocks[i].is_own)
            block = &d->blocks[i];
    if (block && --block->n_buffers <= 0)
        block_release(d, block);
    memset(b, 0, sizeof *b);
    b->block = -1;
}

/* ---- submitting ---- */

/* A full memory barrier between everything before and after it in
 * submission order: compute and transfer (and, with host, host) work. */
static void barrier(struct vk_device *d, VkCommandBuffer cmd,
                    VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst_access)
{
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = src_access,
        .dstAccessMask = dst_access,
    };
    d->fn.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, &mb, 0, NULL,
                               0, NULL);
}

#define STAGES_WORK (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | \
                     VK_PIPELINE_STAGE_TRANSFER_BIT)
#define WRITES_WORK (VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)
#define ACCESS_WORK (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | \
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)

/* Submits cmd (already ended), or with VK_NULL_HANDLE no work at all,
 * without waiting. A fence (VK_NULL_HANDLE: none) is signalled once all
 * work submitted to the queue so far has completed, earlier submissions
 * included — the Vulkan spec, "Fence Signaling": "Fence signal operations
 * that are defined by vkQueueSubmit or vkQueueSubmit2 additionally include
 * in the first synchronization scope all commands that occur earlier in
 * submission order", and their first access scope is all memory access
 * performed by the device. `what` names the work for the message, which
 * leaves the device's name to the caller. */
static int queue_submit(struct vk_device *d, VkCommandBuffer cmd,
                        VkFence fence, const char *what,
                        struct kk_error *err)
{
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &cmd,
    };
    VkResult r = d->fn.vkQueueSubmit(d->queue, cmd ? 1 : 0, &si, fence);
    if (r == VK_SUCCESS)
        return 0;
    if (r == VK_ERROR_DEVICE_LOST)
        d->is_lost = true;
    return kk_fail(err, "submitting %s failed (%s)%s", what,
                   vk_result_name(r),
                   r == VK_ERROR_DEVICE_LOST
                       ? ": the device was lost (a driver crash or reset); "
                         "restart kakeya, or use --backend cpu" : "");
}

/* Polls d->fence until it is signalled or VK_POLL_MS have passed (the
 * blocking wait after it then returns at once, or waits for a long
 * pass). */
static void fence_poll(struct vk_device *d)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if (d->fn.vkGetFenceStatus(d->device, d->fence) != VK_NOT_READY)
            return;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (ms_between(&t0, &t) < VK_POLL_MS);
}

/* Waits for d->fence (VK_WAIT_NS at most) and resets it: on a GPU it polls
 * first (fence_poll). */
static int fence_wait(struct vk_device *d, const char *what,
                      struct kk_error *err)
{
    if (!vk_device_is_cpu(d))
        fence_poll(d);
    VkResult r = d->fn.vkWaitForFences(d->device, 1, &d->fence, VK_TRUE,
                                       VK_WAIT_NS);
    if (r == VK_TIMEOUT) {
        /* The work may still be running: the command buffer and fence
         * cannot be reused, so the device is done for. */
        d->is_lost = true;
        return kk_fail(err, "%s: %s did not finish within %llu s (the device "
                       "hangs or a dispatch is far too large); restart "
                       "kakeya, or use --backend cpu", d->props.deviceName,
                       what, VK_WAIT_NS / 1000000000ull);
    }
    if (r != VK_SUCCESS) {
        d->is_lost = true;
        return kk_fail(err, "%s: waiting for %s failed (%s): the device was "
                       "lost (a driver crash or reset); restart kakeya, or "
                       "use --backend cpu", d->props.deviceName, what,
                       vk_result_name(r));
    }
    d->fn.vkResetFences(d->device, 1, &d->fence);
    return 0;
}

/* Submits cmd (already ended) and waits for it and all earlier work. */
static int submit_wait(struct vk_device *d, VkCommandBuffer cmd,
                       const char *what, struct kk_error *err)
{
    if (queue_submit(d, cmd, d->fence, what, err)) {
        kk_error_prefix(err, d->props.deviceName);
        return -1;
    }
    return fence_wait(d, what, err);
}

/* One staged copy on the transfer command buffer, ordered after all
 * earlier work and before all later work (host reads included). */
static int transfer(struct vk_device *d, VkBuffer src, VkDeviceSize src_off,
                    VkBuffer dst, VkDeviceSize dst_off, VkDeviceSize bytes,
                    const char *what, struct kk_error *err)
{
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkResult r = d->fn.vkBeginCommandBuffer(d->xfer, &bi);
    if (r != VK_SUCCESS)
        return kk_fail(err, "%s: vkBeginCommandBuffer failed for %s (%s)",
                       d->props.deviceName, what, vk_result_name(r));
    barrier(d, d->xfer, STAGES_WORK, WRITES_WORK, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    VkBufferCopy region = {.srcOffset = src_off, .dstOffset = dst_off,
                           .size = bytes};
    d->fn.vkCmdCopyBuffer(d->xfer, src, dst, 1, &region);
    barrier(d, d->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_WRITE_BIT,
            STAGES_WORK | VK_PIPELINE_STAGE_HOST_BIT,
            ACCESS_WORK | VK_ACCESS_HOST_READ_BIT);
    r = d->fn.vkEndCommandBuffer(d->xfer);
    if (r != VK_SUCCESS)
        return kk_fail(err, "%s: vkEndCommandBuffer failed for %s (%s)",
                       d->props.deviceName, what, vk_result_name(r));
    return submit_wait(d, d->xfer, what, err);
}

/* What vk_upload and vk_download check before they move bytes. */
static int transfer_check(struct vk_device *d, const struct vk_buffer *b,
                          VkDeviceSize offset, size_t bytes, const char *what,
                          struct kk_error *err)
{
    if (!b || !b->buf)
        return kk_fail(err, "%s: no buffer (a bug in kakeya)", what);
    if (offset > b->size || bytes > b->size - offset)
        return kk_fail(err, "%s: %zu bytes at offset %llu run past the end of "
                       "a %llu-byte buffer (a bug in kakeya)", what, bytes,
                       (unsigned long long)offset,
                       (unsigned long long)b->size);
    if (d->is_recording)
        return kk_fail(err, "%s while commands are being recorded (between "
                       "vk_begin and vk_submit_wait; a bug in kakeya)", what);
    if (d->is_lost)
        return kk_fail(err, "%s: the device stopped responding earlier; "
                       "restart kakeya, or use --backend cpu",
                       d->props.deviceName);
    if (!b->mapped && !d->staging.buf &&
        vk_buffer_new(d, VK_STAGING_BYTES, VK_MEM_READBACK, &d->staging, err))
        return -1;
    return 0;
}

int vk_upload(struct vk_device *d, struct vk_buffer *dst, VkDeviceSize offset,
              const void *src, size_t bytes, struct kk_error *err)
{
    if (transfer_check(d, dst, offset, bytes, "vk_upload", err))
        return -1;
    if (dst->mapped) {   /* coherent host memory: visible at next submit */
        if (bytes)
            memcpy((char *)dst->mapped + offset, src, bytes);
        return 0;
    }
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < VK_STAGING_BYTES ? bytes - done
                                                   : (size_t)VK_STAGING_BYTES;
        memcpy(d->staging.mapped, (const char *)src + done, n);
        if (transfer(d, d->staging.buf, 0, dst->buf, offset + done, n,
                     "an upload", err))
            return -1;
        done += n;
    }
    return 0;
}

int vk_download(struct vk_device *d, const struct vk_buffer *src,
                VkDeviceSize offset, void *dst, size_t bytes,
                struct kk_error *err)
{
    if (transfer_check(d, src, offset, bytes, "vk_download", err))
        return -1;
    if (src->mapped) {   /* made visible to the host by vk_submit_wait */
        if (bytes)
            memcpy(dst, (const char *)src->mapped + offset, bytes);
        return 0;
    }
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < VK_STAGING_BYTES ? bytes - done
                                                   : (size_t)VK_STAGING_BYTES;
        if (transfer(d, src->buf, offset + done, d->staging.buf, 0, n,
                     "a download", err))
            return -1;
        memcpy((char *)dst + done, d->staging.mapped, n);
        done += n;
    }
    return 0;
}

/* ---- pipelines ---- */

int vk_pipeline_new(struct vk_device *d, const uint32_t *spirv, size_t bytes,
                    int n_buffers, uint32_t push_bytes,
                    struct vk_pipeline *out, struct kk_error *err)
{
    int count[VK_PIPELINE_MAX_BINDINGS];
    for (int i = 0; i < VK_PIPELINE_MAX_BINDINGS; i++)
        count[i] = 1;
    return vk_pipeline_new_arrays(d, spirv, bytes, n_buffers, count,
                                  push_bytes, out, err);
}

int vk_pipeline_new_arrays(struct vk_device *d, const uint32_t *spirv,
                           size_t bytes, int n_bindings, const int *count,
                           uint32_t push_bytes, struct vk_pipeline *out,
                           struct kk_error *err)
{
    memset(out, 0, sizeof *out);
    if (!spirv || bytes < 20 || bytes % 4 || spirv[0] != 0x07230203u)
        return kk_fail(err, "vk_pipeline_new: %zu bytes are not SPIR-V (a "
                       "build problem: rebuild the shaders)", bytes);
    int n_buffers = 0;
    for (int i = 0; i < n_bindings && i < VK_PIPELINE_MAX_BINDINGS; i++)
        n_buffers += count[i] >= 1 ? count[i] : VK_MAX_BINDINGS + 1;
    if (n_bindings < 1 || n_bindings > VK_PIPELINE_MAX_BINDINGS ||
        n_buffers > VK_MAX_BINDINGS)
        return kk_fail(err, "vk_pipeline_new: %d bindings of %d storage "
                       "buffers (1..%d bindings, at most %d buffers, allowed; "
                       "a bug in kakeya)", n_bindings, n_buffers,
                       VK_PIPELINE_MAX_BINDINGS, VK_MAX_BINDINGS);
    if (push_bytes % 4 || push_bytes > VK_MAX_PUSH_BYTES ||
        push_bytes > d->props.limits.maxPushConstantsSize)
        return kk_fail(err, "vk_pipeline_new: a push-constant block of %u "
                       "bytes (whole words, at most %d; a bug in kakeya)",
                       push_bytes, VK_MAX_PUSH_BYTES);

    VkShaderModuleCreateInfo smi = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = bytes,
        .pCode = spirv,
    };
    VkShaderModule module;
    VkResult r = d->fn.vkCreateShaderModule(d->device, &smi, NULL, &module);
    if (r != VK_SUCCESS)
        return kk_fail(err, "%s: vkCreateShaderModule failed (%s)",
                       d->props.deviceName, vk_result_name(r));

    VkDescriptorSetLayoutBinding bindings[VK_PIPELINE_MAX_BINDINGS];
    for (int i = 0; i < n_bindings; i++)
        bindings[i] = (VkDescriptorSetLayoutBinding){
            .binding = (uint32_t)i,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .descriptorCount = (uint32_t)count[i],
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        };
    VkDescriptorSetLayoutCreateInfo dsl = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
        .bindingCount = (uint32_t)n_bindings,
        .pBindings = bindings,
    };
    const char *step = "vkCreateDescriptorSetLayout";
    r = d->fn.vkCreateDescriptorSetLayout(d->device, &dsl, NULL,
                                          &out->set_layout);
    if (r == VK_SUCCESS) {
        VkPushConstantRange range = {
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
            .size = push_bytes,
        };
        VkPipelineLayoutCreateInfo pli = {
            .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
            .setLayoutCount = 1,
            .pSetLayouts = &out->set_layout,
            .pushConstantRangeCount = push_bytes ? 1 : 0,
            .pPushConstantRanges = push_bytes ? &range : NULL,
        };
        step = "vkCreatePipelineLayout";
        r = d->fn.vkCreatePipelineLayout(d->device, &pli, NULL, &out->layout);
    }
    if (r == VK_SUCCESS) {
        VkComputePipelineCreateInfo cpi = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {
                .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = module,
                .pName = "main",
            },
            .layout = out->layout,
        };
        if (profile_has_statistics(d))
            cpi.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
        step = "vkCreateComputePipelines";
        r = d->fn.vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &cpi,
                                           NULL, &out->pipe);
    }
    d->fn.vkDestroyShaderModule(d->device, module, NULL);
    if (r != VK_SUCCESS) {
        out->pipe = VK_NULL_HANDLE;   /* may be written on failure */
        vk_pipeline_free(d, out);
        return kk_fail(err, "%s: %s failed (%s) for a shader of %zu bytes",
                       d->props.deviceName, step, vk_result_name(r), bytes);
    }
    out->n_bindings = n_bindings;
    for (int i = 0; i < n_bindings; i++)
        out->count[i] = (uint8_t)count[i];
    out->n_buffers = n_buffers;
    out->push_bytes = push_bytes;
    out->stats_entry = profile_pipeline_made(d, out->pipe);
    return 0;
}

void vk_pipeline_free(struct vk_device *d, struct vk_pipeline *p)
{
    if (!d || !p)
        return;
    replays_forget(d);
    if (p->pipe)
        d->fn.vkDestroyPipeline(d->device, p->pipe, NULL);
    if (p->layout)
        d->fn.vkDestroyPipelineLayout(d->device, p->layout, NULL);
    if (p->set_layout)
        d->fn.vkDestroyDescriptorSetLayout(d->device, p->set_layout, NULL);
    memset(p, 0, sizeof *p);
}

/* ---- recording ---- */

/* Remembers the first recording mistake for vk_submit_wait to report
 * (later ones are consequences, mostly). */
static void record_fail(struct vk_device *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void record_fail(struct vk_device *d, const char *fmt, ...)
{
    if (d->record_error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->record_error, sizeof d->record_error, fmt, ap);
    va_end(ap);
    if (!d->record_error[0])
        snprintf(d->record_error, sizeof d->record_error, "a recording error");
}

/* Whether recording may go on: inside vk_begin .. vk_submit_wait and no
 * mistake so far (after one, later commands would only add noise). */
static bool can_record(struct vk_device *d, const char *what)
{
    if (!d->is_recording) {
        record_fail(d, "%s outside vk_begin .. vk_submit_wait (a bug in "
                    "kakeya)", what);
        return false;
    }
    return d->record_error[0] == 0;
}

/* *ms += the time since *t0 (profiling only). */
static void profile_add(const struct timespec *t0, double *ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    *ms += ms_between(t0, &t);
}

/* *ms += the time since *t0 less what went to switching chunks since
 * then, chunk_ms0 being the profile's chunk_ms at *t0 (profiling only). */
static void profile_add_command(struct vk_profile *p,
                                const struct timespec *t0, double chunk_ms0,
                                double *ms)
{
    profile_add(t0, ms);
    *ms -= p->current.chunk_ms - chunk_ms0;
}

/* ---- chunks: a recording goes to the GPU in pieces as it is recorded ---- */

/* Begins chunks[n_submitted] as the command buffer being recorded.
 *
 * Beginning resets it: the pool allows resetting buffers one by one, and
 * nothing runs from it, since the vk_submit_wait of the recording that
 * used it waited. The reset is done here rather than right after that
 * wait because it is not free (lavapipe: ~2 us a command the buffer held),
 * and here, for every chunk but the first, it overlaps the GPU's work on
 * the chunks before.
 *
 * The chunk opens with a full barrier. For a pipeline barrier outside a
 * render pass, "the first synchronization scope includes all commands that
 * occur earlier in submission order" (Vulkan spec, vkCmdPipelineBarrier),
 * and submission order runs across the command buffers and submissions of
 * one queue: so the chunk sees what earlier chunks, recordings and
 * transfers wrote. The first chunk also resets the profile's query pool,
 * before every timestamp of the recording in submission order. */
static VkResult chunk_begin(struct vk_device *d)
{
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkCommandBuffer cmd = d->chunks[d->n_submitted];
    VkResult r = d->fn.vkBeginCommandBuffer(cmd, &bi);
    if (r != VK_SUCCESS)
        return r;
    d->cmd = cmd;
    d->is_chunk_open = true;
    d->chunk_commands = 0;
    d->chunk_capacity = d->n_submitted == 0
                            ? VK_FIRST_CHUNK_COMMANDS
                            : d->chunk_capacity * VK_CHUNK_GROWTH;
    if (d->n_submitted == 0)
        profile_begin_stamps(d);
    barrier(d, d->cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK, ACCESS_WORK);
    /* GPU time from the previous chunk's last command to here: the GPU
     * waiting for this chunk when the host records slower than it runs. */
    if (d->n_submitted > 0)
        profile_stamp(d, "(between chunks)", 0);
    return VK_SUCCESS;
}

/* Ends the chunk being recorded and submits it; fence as in queue_submit.
 * A failure becomes the recording's mistake, for vk_submit_wait to report;
 * returns whether the chunk was submitted. */
static bool chunk_submit(struct vk_device *d, VkFence fence)
{
    struct timespec t0 = {0, 0};
    if (d->profile && !d->profile->is_host_only)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    d->is_chunk_open = false;
    VkResult r = d->fn.vkEndCommandBuffer(d->cmd);
    profile_call(d, CALL_END, &t0);
    if (r != VK_SUCCESS) {
        record_fail(d, "recording the commands failed (%s): the device may "
                    "be out of memory; use a smaller context or --backend "
                    "cpu", vk_result_name(r));
        return false;
    }
    struct kk_error err;
    if (queue_submit(d, d->cmd, fence, "the recorded work", &err)) {
        record_fail(d, "%s", err.msg);
        return false;
    }
    profile_call(d, CALL_SUBMIT, &t0);
    return true;
}

/* After a command was recorded into the chunk: once the chunk is full it
 * is submitted, so the GPU runs it while the host records the next. With
 * every command buffer in use the last chunk just grows (never a failure). */
static void chunk_after_command(struct vk_device *d)
{
    if (++d->chunk_commands < d->chunk_capacity ||
        d->n_submitted + 1 >= VK_MAX_CHUNKS)
        return;
    struct timespec t0;
    if (d->profile)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    if (chunk_submit(d, VK_NULL_HANDLE)) {
        d->n_submitted++;
        VkResult r = chunk_begin(d);
        if (r != VK_SUCCESS)
            record_fail(d, "vkBeginCommandBuffer failed (%s)",
                        vk_result_name(r));
    }
    if (d->profile)
        profile_add(&t0, &d->profile->current.chunk_ms);
}

/* Ends a recording that met a mistake: the open chunk is ended and never
 * submitted, the chunks already submitted are waited for (the caller may
 * free the buffers they use once vk_submit_wait returns), and the mistake
 * is reported — or the wait's own failure, a lost or hung device, which
 * matters more. */
static int recording_abandon(struct vk_device *d, struct kk_error *err)
{
    if (d->is_chunk_open) {
        d->is_chunk_open = false;
        d->fn.vkEndCommandBuffer(d->cmd);   /* the next vk_begin resets it */
    }
    int rc = 0;
    if (d->n_submitted > 0) {
        /* A submission of no work: its fence signals once the chunks
         * submitted before it are done. */
        const char *what = "the work recorded before a mistake";
        struct kk_error why;
        if (queue_submit(d, VK_NULL_HANDLE, d->fence, what, &why) == 0) {
            rc = fence_wait(d, what, err);
        } else {
            /* The chunks may still be running and nothing can say when
             * they end: the device is given up. */
            rc = kk_fail(err, "%s: %s%s", d->props.deviceName, why.msg,
                         d->is_lost ? "" : "; restart kakeya, or use "
                                           "--backend cpu");
            d->is_lost = true;
        }
    }
    if (rc == 0)
        rc = kk_fail(err, "%s: %s", d->props.deviceName, d->record_error);
    d->record_error[0] = 0;
    return rc;
}

/* ---- commands: checked, then recorded into a chunk or matched ---- */

/* Records c into d->cmd: the command, then (but after a copy for the next
 * pass) a full barrier. */
static void command_record(struct vk_device *d, const struct vk_command *c)
{
    if (c->kind != VK_COMMAND_DISPATCH) {
        VkBufferCopy region = {.srcOffset = c->src_offset,
                               .dstOffset = c->dst_offset, .size = c->bytes};
        d->fn.vkCmdCopyBuffer(d->cmd, c->bufs[0], c->bufs[1], 1, &region);
        profile_stamp(d, "copy", 0);
        if (c->kind == VK_COMMAND_COPY)
            barrier(d, d->cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK,
                    ACCESS_WORK);
        return;
    }
    const struct vk_pipeline *p = c->pipeline;
    VkDescriptorBufferInfo infos[VK_MAX_BINDINGS];
    VkWriteDescriptorSet writes[VK_PIPELINE_MAX_BINDINGS];
    for (uint32_t i = 0; i < c->n_buffers; i++)
        infos[i] = (VkDescriptorBufferInfo){
            .buffer = c->bufs[i], .offset = 0, .range = VK_WHOLE_SIZE};
    for (int i = 0, first = 0; i < p->n_bindings; first += p->count[i++])
        writes[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstBinding = (uint32_t)i,
            .descriptorCount = p->count[i],
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .pBufferInfo = &infos[first],
        };
    profile_dispatched(d, p);
    struct timespec t0 = {0, 0};
    if (d->profile && !d->profile->is_host_only)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    d->fn.vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipe);
    profile_call(d, CALL_BIND, &t0);
    d->fn.vkCmdPushDescriptorSetKHR(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE,
                                    p->layout, 0, (uint32_t)p->n_bindings,
                                    writes);
    profile_call(d, CALL_DESCRIPTORS, &t0);
    if (c->push_bytes)
        d->fn.vkCmdPushConstants(d->cmd, p->layout,
                                 VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                 c->push_bytes, c->push);
    profile_call(d, CALL_PUSH, &t0);
    d->fn.vkCmdDispatch(d->cmd, c->groups[0], c->groups[1], c->groups[2]);
    profile_call(d, CALL_DISPATCH, &t0);
    barrier(d, d->cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK, ACCESS_WORK);
    profile_call(d, CALL_BARRIER, &t0);
    profile_stamp(d, p->name[0] ? p->name : "dispatch",
                  c->groups[0] * c->groups[2]);
}

/* Stops matching: the commands so far go into chunks, as if they had
 * been recorded as they came, and so does every later one. */
static void matching_end(struct vk_device *d)
{
    d->is_matching = false;
    VkResult r = chunk_begin(d);
    if (r != VK_SUCCESS) {
        record_fail(d, "vkBeginCommandBuffer failed (%s)", vk_result_name(r));
        return;
    }
    for (int i = 0; i < d->n_log && !d->record_error[0]; i++) {
        command_record(d, &d->log[i]);
        chunk_after_command(d);
    }
}

/* Appends c to the recording's log; false when out of memory. */
static bool log_append(struct vk_device *d, const struct vk_command *c)
{
    if (d->n_log == d->cap_log) {
        int cap = d->cap_log ? 2 * d->cap_log : 256;
        struct vk_command *log = realloc(d->log, (size_t)cap * sizeof *log);
        if (!log) {
            record_fail(d, "out of memory for the commands of a pass");
            return false;
        }
        d->log = log;
        d->cap_log = cap;
    }
    d->log[d->n_log++] = *c;
    return true;
}

/* A checked command of the recording: matched against the kept
 * recordings while they all still could be it, else recorded. */
static void command_add(struct vk_device *d, const struct vk_command *c)
{
    if (d->replays && !log_append(d, c))
        return;
    if (d->is_matching) {
        if (!vk_replays_match(d->replays, d->n_log - 1, c))
            matching_end(d);
        return;
    }
    command_record(d, c);
    chunk_after_command(d);
}

/* ---- replays: a recording made twice is kept and submitted again ---- */

/* Replays are on unless KAKEYA_VK_REPLAY=0 (to measure without them), or
 * the profile times dispatches on the GPU: a kept recording would need its
 * stamps' names kept with it, and the profile asks where a recording's
 * time goes, chunks included. */
static bool replays_wanted(const struct vk_device *d)
{
    const char *env = getenv("KAKEYA_VK_REPLAY");
    if (env && !strcmp(env, "0"))
        return false;
    return !d->profile || d->profile->is_host_only;
}

/* Forgets every kept recording and frees their command buffers: called
 * before a buffer or pipeline they may use is destroyed. Never while they
 * run: a recording is waited for before the next begins, and buffers are
 * not freed inside one (vk_device.h). */
static void replays_forget(struct vk_device *d)
{
    if (!d->replays || vk_replays_count(d->replays) == 0)
        return;
    VkCommandBuffer cmds[VK_KEPT_RECORDINGS];
    int n = vk_replays_clear(d->replays, cmds);
    d->fn.vkFreeCommandBuffers(d->device, d->pool, (uint32_t)n, cmds);
}

/* After a recording submitted in chunks completed: when it came before
 * too, records its commands once more into a command buffer of its own
 * and keeps it. Keeping is only a saving, so a failure just skips it. */
static void replays_keep(struct vk_device *d)
{
    if (!d->replays || d->n_log == 0 ||
        !vk_replays_worth_keeping(d->replays, d->log, d->n_log))
        return;
    VkCommandBufferAllocateInfo alloc = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = d->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    VkCommandBuffer cmd;
    if (d->fn.vkAllocateCommandBuffers(d->device, &alloc, &cmd) != VK_SUCCESS)
        return;
    VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (d->fn.vkBeginCommandBuffer(cmd, &bi) != VK_SUCCESS) {
        d->fn.vkFreeCommandBuffers(d->device, d->pool, 1, &cmd);
        return;
    }
    /* The same barriers as the chunks had, less those opening chunks
     * after the first: one command buffer has no boundaries to cross. */
    VkCommandBuffer chunk = d->cmd;
    d->cmd = cmd;
    barrier(d, cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK, ACCESS_WORK);
    for (int i = 0; i < d->n_log; i++)
        command_record(d, &d->log[i]);
    barrier(d, cmd, STAGES_WORK, WRITES_WORK, VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_HOST_READ_BIT);
    d->cmd = chunk;
    VkCommandBuffer evicted = VK_NULL_HANDLE;
    if (d->fn.vkEndCommandBuffer(cmd) != VK_SUCCESS)
        evicted = cmd;
    else
        vk_replays_add(d->replays, d->log, d->n_log, cmd, &evicted);
    if (evicted)
        d->fn.vkFreeCommandBuffers(d->device, d->pool, 1, &evicted);
}

/* Submits the kept recording cmd, which has exactly the commands just
 * matched, and waits for it. */
static int replay_submit_wait(struct vk_device *d, VkCommandBuffer cmd,
                              struct kk_error *err)
{
    if (d->profile)
        clock_gettime(CLOCK_MONOTONIC, &d->profile->submitted);
    if (queue_submit(d, cmd, d->fence, "the recorded work", err)) {
        kk_error_prefix(err, d->props.deviceName);
        return -1;
    }
    if (fence_wait(d, "the recorded work", err))
        return -1;
    d->n_replayed++;
    profile_end(d, true);
    return 0;
}

long vk_device_replayed(const struct vk_device *d)
{
    return d->n_replayed;
}

/* ---- the recording calls ---- */

int vk_begin(struct vk_device *d, struct kk_error *err)
{
    if (d->is_lost)
        return kk_fail(err, "%s: the device stopped responding earlier; "
                       "restart kakeya, or use --backend cpu",
                       d->props.deviceName);
    if (d->is_recording)
        return kk_fail(err, "vk_begin while already recording (a bug in "
                       "kakeya)");
    d->record_error[0] = 0;
    d->n_submitted = 0;
    d->n_log = 0;
    profile_begin(d);
    d->is_matching = vk_replays_count(d->replays) > 0;
    if (d->is_matching) {
        vk_replays_match_begin(d->replays);
    } else {
        VkResult r = chunk_begin(d);
        if (r != VK_SUCCESS)
            return kk_fail(err, "%s: vkBeginCommandBuffer failed (%s)",
                           d->props.deviceName, vk_result_name(r));
    }
    d->is_recording = true;
    return 0;
}

/* Checks a dispatch and describes it in *c; false when it was refused. */
static bool dispatch_command(struct vk_device *d, const struct vk_pipeline *p,
                             const struct vk_buffer *const *bufs,
                             const void *push, uint32_t groups_x,
                             uint32_t groups_y, uint32_t groups_z,
                             struct vk_command *c)
{
    if (!can_record(d, "vk_dispatch"))
        return false;
    if (!p || !p->pipe) {
        record_fail(d, "vk_dispatch: no pipeline (a bug in kakeya)");
        return false;
    }
    if (p->push_bytes && !push) {
        record_fail(d, "vk_dispatch: no push constants for a block of %u "
                    "bytes (a bug in kakeya)", p->push_bytes);
        return false;
    }
    const uint32_t *max = d->props.limits.maxComputeWorkGroupCount;
    if (groups_x > max[0] || groups_y > max[1] || groups_z > max[2]) {
        record_fail(d, "vk_dispatch: %u x %u x %u workgroups, past the "
                    "device's limit of %u x %u x %u (a bug in kakeya)",
                    groups_x, groups_y, groups_z, max[0], max[1], max[2]);
        return false;
    }
    vk_command_clear(c);
    for (int i = 0; i < p->n_buffers; i++) {
        const struct vk_buffer *b = bufs ? bufs[i] : NULL;
        if (!b || !b->buf) {
            record_fail(d, "vk_dispatch: binding %d has no buffer (a bug in "
                        "kakeya)", i);
            return false;
        }
        if (!vk_device_binds(d, b->size)) {
            record_fail(d, "vk_dispatch: binding %d is a %.1f MiB buffer, "
                        "past the device's storage buffer range of %.1f MiB "
                        "(a bug in kakeya: split the tensor)", i,
                        MIB(b->size),
                        MIB(d->props.limits.maxStorageBufferRange));
            return false;
        }
        c->bufs[i] = b->buf;
    }
    c->kind = VK_COMMAND_DISPATCH;
    c->groups[0] = groups_x;
    c->groups[1] = groups_y;
    c->groups[2] = groups_z;
    c->n_buffers = (uint32_t)p->n_buffers;
    c->push_bytes = p->push_bytes;
    c->pipe = p->pipe;
    c->pipeline = p;
    if (p->push_bytes)
        memcpy(c->push, push, p->push_bytes);
    return true;
}

void vk_dispatch(struct vk_device *d, const struct vk_pipeline *p,
                 const struct vk_buffer *const *bufs, const void *push,
                 uint32_t groups_x, uint32_t groups_y, uint32_t groups_z)
{
    struct timespec t0;
    const double chunk_ms0 = d->profile ? d->profile->current.chunk_ms : 0;
    if (d->profile)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    struct vk_command c;
    if (dispatch_command(d, p, bufs, push, groups_x, groups_y, groups_z, &c))
        command_add(d, &c);
    if (d->profile)
        profile_add_command(d->profile, &t0, chunk_ms0,
                            &d->profile->current.dispatch_ms);
}

/* Checks a copy and describes it in *c; false when it was refused (or
 * empty). */
static bool copy_command(struct vk_device *d, const struct vk_buffer *src,
                         VkDeviceSize src_offset, const struct vk_buffer *dst,
                         VkDeviceSize dst_offset, VkDeviceSize bytes,
                         enum vk_command_kind kind, struct vk_command *c)
{
    if (!can_record(d, "vk_copy"))
        return false;
    if (!src || !src->buf || !dst || !dst->buf) {
        record_fail(d, "vk_copy: no buffer (a bug in kakeya)");
        return false;
    }
    if (src_offset > src->size || bytes > src->size - src_offset ||
        dst_offset > dst->size || bytes > dst->size - dst_offset) {
        record_fail(d, "vk_copy: %llu bytes from offset %llu of a %llu-byte "
                    "buffer to offset %llu of a %llu-byte buffer run past an "
                    "end (a bug in kakeya)", (unsigned long long)bytes,
                    (unsigned long long)src_offset,
                    (unsigned long long)src->size,
                    (unsigned long long)dst_offset,
                    (unsigned long long)dst->size);
        return false;
    }
    if (bytes == 0)
        return false;
    if (src->buf == dst->buf && src_offset < dst_offset + bytes &&
        dst_offset < src_offset + bytes) {
        record_fail(d, "vk_copy: source and destination overlap inside one "
                    "buffer (a bug in kakeya)");
        return false;
    }
    vk_command_clear(c);
    c->kind = kind;
    c->bufs[0] = src->buf;
    c->bufs[1] = dst->buf;
    c->src_offset = src_offset;
    c->dst_offset = dst_offset;
    c->bytes = bytes;
    return true;
}

static void copy_add(struct vk_device *d, const struct vk_buffer *src,
                     VkDeviceSize src_offset, const struct vk_buffer *dst,
                     VkDeviceSize dst_offset, VkDeviceSize bytes,
                     enum vk_command_kind kind)
{
    struct timespec t0;
    const double chunk_ms0 = d->profile ? d->profile->current.chunk_ms : 0;
    if (d->profile)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    struct vk_command c;
    if (copy_command(d, src, src_offset, dst, dst_offset, bytes, kind, &c))
        command_add(d, &c);
    if (d->profile)
        profile_add_command(d->profile, &t0, chunk_ms0,
                            &d->profile->current.copy_ms);
}

void vk_copy(struct vk_device *d, const struct vk_buffer *src,
             VkDeviceSize src_offset, const struct vk_buffer *dst,
             VkDeviceSize dst_offset, VkDeviceSize bytes)
{
    copy_add(d, src, src_offset, dst, dst_offset, bytes, VK_COMMAND_COPY);
}

void vk_copy_for_next_pass(struct vk_device *d, const struct vk_buffer *src,
                           VkDeviceSize src_offset,
                           const struct vk_buffer *dst,
                           VkDeviceSize dst_offset, VkDeviceSize bytes)
{
    /* no barrier after it: the next chunk or recording opens with one */
    copy_add(d, src, src_offset, dst, dst_offset, bytes,
             VK_COMMAND_COPY_FOR_NEXT_PASS);
}

int vk_submit_wait(struct vk_device *d, struct kk_error *err)
{
    if (!d->is_recording) {
        int rc = kk_fail(err, "%s", d->record_error[0]
                                        ? d->record_error
                                        : "vk_submit_wait without vk_begin "
                                          "(a bug in kakeya)");
        d->record_error[0] = 0;
        return rc;
    }
    d->is_recording = false;
    if (d->is_matching && !d->record_error[0]) {
        VkCommandBuffer kept = vk_replays_find(d->replays, d->n_log);
        if (kept)
            return replay_submit_wait(d, kept, err);
        matching_end(d);
    }
    d->is_matching = false;
    if (!d->record_error[0]) {
        /* Makes the results visible to host reads of mapped buffers. */
        barrier(d, d->cmd, STAGES_WORK, WRITES_WORK,
                VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        if (d->profile)
            clock_gettime(CLOCK_MONOTONIC, &d->profile->submitted);
        /* The fence covers the chunks submitted before this one too. */
        chunk_submit(d, d->fence);
    }
    if (d->record_error[0])
        return recording_abandon(d, err);
    if (fence_wait(d, "the recorded work", err))
        return -1;
    profile_end(d, false);
    replays_keep(d);
    return 0;
}
