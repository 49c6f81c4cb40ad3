/* vk_memory.c — vk_buffer_new and vk_buffer_free (vk_device.h): buffers
 * carved from 256 MiB blocks of device memory, large ones with memory of
 * their own. */
#include "vk_device_impl.h"

#include <stdlib.h>
#include <string.h>

/* Buffers under VK_OWN_ALLOCATION_BYTES share blocks of VK_BLOCK_BYTES:
 * a model has hundreds of tensors and a device may allow as few as 4096
 * allocations. Larger ones get their own so a block never wastes more than
 * a quarter of itself on a buffer that does not fit. */
#define VK_BLOCK_BYTES ((VkDeviceSize)256 << 20)
#define VK_OWN_ALLOCATION_BYTES ((VkDeviceSize)64 << 20)

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
    vkd_replays_forget(d);
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

