/* vk_functions.h — every Vulkan entry point kakeya calls, as an X-macro
 * list. No include guard: it is included where the list is expanded (the
 * members of struct vk_fn in vk_device.h, the loaders in vk_device.c).
 *
 * Each entry is tagged by where it is loaded from, because Vulkan hands
 * them out at three levels:
 *   VK_FN_LOADER    vkGetInstanceProcAddr(NULL, name): before an instance;
 *   VK_FN_INSTANCE  vkGetInstanceProcAddr(instance, name);
 *   VK_FN_DEVICE    vkGetDeviceProcAddr(device, name): straight into the
 *                   driver, without the loader's trampoline.
 * An includer that defines only VK_FN gets all three mapped to it. To call
 * a function that is not here, add it here (under its level) first; one
 * that may be absent also goes in vk_device.c's is_optional_fn. */

#ifndef VK_FN_LOADER
#define VK_FN_LOADER VK_FN
#define KK_VK_FN_LOADER_DEFAULTED
#endif
#ifndef VK_FN_INSTANCE
#define VK_FN_INSTANCE VK_FN
#define KK_VK_FN_INSTANCE_DEFAULTED
#endif
#ifndef VK_FN_DEVICE
#define VK_FN_DEVICE VK_FN
#define KK_VK_FN_DEVICE_DEFAULTED
#endif

/* ---- loader level ---- */
VK_FN_LOADER(vkCreateInstance)
VK_FN_LOADER(vkEnumerateInstanceVersion) /* NULL in a Vulkan 1.0 loader */

/* ---- instance level ---- */
VK_FN_INSTANCE(vkDestroyInstance)
VK_FN_INSTANCE(vkEnumeratePhysicalDevices)
VK_FN_INSTANCE(vkGetPhysicalDeviceProperties)
VK_FN_INSTANCE(vkGetPhysicalDeviceProperties2) /* core 1.1; may be NULL */
VK_FN_INSTANCE(vkGetPhysicalDeviceFeatures)
VK_FN_INSTANCE(vkGetPhysicalDeviceFeatures2) /* core 1.1; may be NULL */
VK_FN_INSTANCE(vkGetPhysicalDeviceQueueFamilyProperties)
VK_FN_INSTANCE(vkGetPhysicalDeviceMemoryProperties)
VK_FN_INSTANCE(vkEnumerateDeviceExtensionProperties)
VK_FN_INSTANCE(vkCreateDevice)
VK_FN_INSTANCE(vkGetDeviceProcAddr)
/* VK_NV_cooperative_matrix: the int8 product tiles (may be NULL) */
VK_FN_INSTANCE(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)

/* ---- device level ---- */
VK_FN_DEVICE(vkDestroyDevice)
VK_FN_DEVICE(vkDeviceWaitIdle)
VK_FN_DEVICE(vkGetDeviceQueue)
VK_FN_DEVICE(vkQueueSubmit)
VK_FN_DEVICE(vkCreateFence)
VK_FN_DEVICE(vkDestroyFence)
VK_FN_DEVICE(vkWaitForFences)
VK_FN_DEVICE(vkGetFenceStatus)
VK_FN_DEVICE(vkResetFences)
VK_FN_DEVICE(vkCreateCommandPool)
VK_FN_DEVICE(vkDestroyCommandPool)
VK_FN_DEVICE(vkAllocateCommandBuffers)
VK_FN_DEVICE(vkFreeCommandBuffers)
VK_FN_DEVICE(vkBeginCommandBuffer)
VK_FN_DEVICE(vkEndCommandBuffer)
VK_FN_DEVICE(vkResetCommandBuffer)
VK_FN_DEVICE(vkCreateBuffer)
VK_FN_DEVICE(vkDestroyBuffer)
VK_FN_DEVICE(vkGetBufferMemoryRequirements)
VK_FN_DEVICE(vkAllocateMemory)
VK_FN_DEVICE(vkFreeMemory)
VK_FN_DEVICE(vkBindBufferMemory)
VK_FN_DEVICE(vkMapMemory)
VK_FN_DEVICE(vkUnmapMemory)
VK_FN_DEVICE(vkCreateShaderModule)
VK_FN_DEVICE(vkDestroyShaderModule)
VK_FN_DEVICE(vkCreateDescriptorSetLayout)
VK_FN_DEVICE(vkDestroyDescriptorSetLayout)
VK_FN_DEVICE(vkCreatePipelineLayout)
VK_FN_DEVICE(vkDestroyPipelineLayout)
VK_FN_DEVICE(vkCreateComputePipelines)
VK_FN_DEVICE(vkDestroyPipeline)
VK_FN_DEVICE(vkCmdBindPipeline)
VK_FN_DEVICE(vkCmdPushDescriptorSetKHR) /* VK_KHR_push_descriptor */
VK_FN_DEVICE(vkCmdPushConstants)
VK_FN_DEVICE(vkCmdDispatch)
VK_FN_DEVICE(vkCmdPipelineBarrier)
VK_FN_DEVICE(vkCreateQueryPool)
VK_FN_DEVICE(vkDestroyQueryPool)
VK_FN_DEVICE(vkCmdResetQueryPool)
VK_FN_DEVICE(vkCmdWriteTimestamp)
VK_FN_DEVICE(vkGetQueryPoolResults)
VK_FN_DEVICE(vkCmdCopyBuffer)
/* VK_KHR_pipeline_executable_properties, enabled only under
 * KAKEYA_VK_PROFILE where the device offers it; may be NULL. */
VK_FN_DEVICE(vkGetPipelineExecutablePropertiesKHR)
VK_FN_DEVICE(vkGetPipelineExecutableStatisticsKHR)

#ifdef KK_VK_FN_LOADER_DEFAULTED
#undef VK_FN_LOADER
#undef KK_VK_FN_LOADER_DEFAULTED
#endif
#ifdef KK_VK_FN_INSTANCE_DEFAULTED
#undef VK_FN_INSTANCE
#undef KK_VK_FN_INSTANCE_DEFAULTED
#endif
#ifdef KK_VK_FN_DEVICE_DEFAULTED
#undef VK_FN_DEVICE
#undef KK_VK_FN_DEVICE_DEFAULTED
#endif
