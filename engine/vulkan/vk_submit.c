/* vk_submit.c — submitting work and waiting for it, and vk_upload and
 * vk_download (vk_device.h): copies staged through host-visible memory. */
#include "vk_device_impl.h"

#include <string.h>

/* The staging buffer of vk_upload/vk_download; bigger transfers go in
 * chunks of this size. */
#define VK_STAGING_BYTES ((VkDeviceSize)64 << 20)
/* How long vk_submit_wait waits before calling the device hung: far more
 * than any one forward pass, even on lavapipe. */
#define VK_WAIT_NS (60ull * 1000000000ull)
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

/* ---- submitting ---- */

/* A full memory barrier between everything before and after it in
 * submission order: compute and transfer (and, with host, host) work. */
void vkd_barrier(struct vk_device *d, VkCommandBuffer cmd,
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

/* Submits cmd (already ended), or with VK_NULL_HANDLE no work at all,
 * without waiting. A fence (VK_NULL_HANDLE: none) is signalled once all
 * work submitted to the queue so far has completed, earlier submissions
 * included — the Vulkan spec, "Fence Signaling": "Fence signal operations
 * that are defined by vkQueueSubmit or vkQueueSubmit2 additionally include
 * in the first synchronization scope all commands that occur earlier in
 * submission order", and their first access scope is all memory access
 * performed by the device. `what` names the work for the message, which
 * leaves the device's name to the caller. */
int vkd_queue_submit(struct vk_device *d, VkCommandBuffer cmd,
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
    } while (vkd_ms_between(&t0, &t) < VK_POLL_MS);
}

/* Waits for d->fence (VK_WAIT_NS at most) and resets it: on a GPU it polls
 * first (fence_poll). */
int vkd_fence_wait(struct vk_device *d, const char *what,
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
    if (vkd_queue_submit(d, cmd, d->fence, what, err)) {
        kk_error_prefix(err, d->props.deviceName);
        return -1;
    }
    return vkd_fence_wait(d, what, err);
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
    vkd_barrier(d, d->xfer, STAGES_WORK, WRITES_WORK, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    VkBufferCopy region = {.srcOffset = src_off, .dstOffset = dst_off,
                           .size = bytes};
    d->fn.vkCmdCopyBuffer(d->xfer, src, dst, 1, &region);
    vkd_barrier(d, d->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT,
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

