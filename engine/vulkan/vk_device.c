/* vk_device.c — see vk_device.h: loading the loader (dlopen, the
 * entry-point table, the instance), describing devices, opening one and
 * closing it, and what callers ask of an open one. vk_device_list uses a
 * throwaway device, so each call opens and closes the loader on its own.
 * The rest of the implementation is in the files vk_device_impl.h lists. */
#include "vk_device_impl.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_shaders.h"

/* ---- small helpers ---- */

const char *vk_result_name(VkResult r)
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
    /* Clustered subgroup operations in compute shaders (the matmul_mma forms'
     * amax of 4 lanes), and shuffles (the matmul_qx forms' sums of 8). */
    bool has_clustered, has_shuffle;
};

uint32_t vk_compute_family(const VkQueueFamilyProperties *families,
                           uint32_t n, bool first)
{
    uint32_t found = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) ||
            families[i].queueCount == 0)
            continue;
        if (found == UINT32_MAX)
            found = i;
        if (!first && !(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            return i;
    }
    return found;
}

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
        /* KAKEYA_VK_QUEUE=graphics: the first that computes (to compare) */
        const char *env = getenv("KAKEYA_VK_QUEUE");
        facts->queue_family = vk_compute_family(
            families, n_families, env && !strcmp(env, "graphics"));
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
 * products of 16 x 8 x 32 per subgroup (the matmul_mma forms' shape). */
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

/* Whether the matmul_mma forms can run on d's chosen device: int8 tiles
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
    const bool wants_statistics = vkd_profile_mode() &&
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
            vkd_profile_open(d, families[d->queue_family].timestampValidBits,
                         has_statistics);
        free(families);
    }
    /* Without it every pass is recorded (out of memory for it, too). */
    if (vkd_replays_wanted(d))
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

void vk_device_close(struct vk_device *d)
{
    if (!d)
        return;
    if (d->device) {
        d->fn.vkDeviceWaitIdle(d->device);
        vkd_profile_close(d);
        vk_buffer_free(d, &d->staging);
        /* Blocks still held belong to buffers the caller did not free;
         * their memory goes with the device either way. */
        for (int i = 0; i < d->n_blocks; i++)
            if (d->blocks[i].mem)
                d->fn.vkFreeMemory(d->device, d->blocks[i].mem, NULL);
        if (d->fence)
            d->fn.vkDestroyFence(d->device, d->fence, NULL);
        vkd_replays_forget(d);
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

uint64_t vk_device_binds_rows(const struct vk_device *d, size_t row_bytes)
{
    /* vk_padded_size(n * row_bytes) = whole words of them + one word */
    const uint64_t range = d->props.limits.maxStorageBufferRange;
    return range < 4 ? 0 : (range - 4) / 4 * 4 / row_bytes;
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

