/* vk_replay.h — recordings kept to be submitted again.
 *
 * A decode step records the same commands every time: the same pipelines,
 * buffers, push constants and workgroup counts (what changes from token to
 * token, the token's embedding and its position, the device reads from
 * buffers the host fills before it submits). Recording ~100 commands costs
 * the host ~0.3 ms on the NVIDIA driver, and sending them in chunks while
 * they are recorded costs the GPU a submission boundary per chunk. So the
 * device keeps a command buffer of each recording that came twice, and
 * when a later recording asks for exactly the same commands, submits the
 * kept buffer in one go instead of recording it (vk_record.c).
 *
 * This module is the bookkeeping only, no Vulkan calls: the commands of
 * each kept recording, matched command by command against a new one, and
 * which to keep and which to forget. A struct vk_command is compared as
 * bytes, so it must be zeroed before it is filled (vk_command_clear).
 * Handles are compared by value: the device forgets every kept recording
 * whenever a buffer or pipeline is destroyed (a new one may reuse the
 * handle), which is also when their command buffers stop being valid.
 *
 * Ownership: the command buffers handed to vk_replays_add stay the
 * caller's to free; the module hands them back when it forgets them
 * (vk_replays_add's eviction, vk_replays_clear). Not thread-safe: the
 * device's thread owns it. */
#ifndef KK_VK_REPLAY_H
#define KK_VK_REPLAY_H

#define VK_NO_PROTOTYPES
#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

/* Buffers one dispatch may bind (maxPushDescriptors is at least 32). */
#define VK_MAX_BINDINGS 32
#define VK_MAX_PUSH_BYTES 128

struct vk_pipeline;

enum vk_command_kind {
    VK_COMMAND_DISPATCH,
    VK_COMMAND_COPY,            /* then a barrier */
    VK_COMMAND_COPY_FOR_NEXT_PASS,   /* no barrier after it */
};

/* One command as recorded: everything up to `pipeline` is what two
 * recordings must share to be the same. */
struct vk_command {
    uint32_t kind;              /* enum vk_command_kind */
    uint32_t groups[3];         /* dispatch: workgroups x, y, z */
    uint32_t n_buffers;         /* dispatch: buffers bound */
    uint32_t push_bytes;
    VkPipeline pipe;            /* dispatch */
    VkBuffer bufs[VK_MAX_BINDINGS];   /* dispatch: bound; copy: src, dst */
    VkDeviceSize src_offset, dst_offset, bytes;   /* copy */
    uint8_t push[VK_MAX_PUSH_BYTES];
    /* Not compared: the pipeline whose layout a dispatch is recorded
     * with (the same for the same `pipe`). */
    const struct vk_pipeline *pipeline;
};

void vk_command_clear(struct vk_command *c);

struct vk_replays;

/* Room for `capacity` kept recordings (at most 64); NULL when out of
 * memory (the device then records every pass). */
struct vk_replays *vk_replays_new(int capacity);
/* Frees the bookkeeping; its command buffers must have been taken back
 * with vk_replays_clear first. NULL-safe. */
void vk_replays_free(struct vk_replays *r);

/* ---- matching a recording as it is made ---- */

/* Starts matching a new recording against every kept one. */
void vk_replays_match_begin(struct vk_replays *r);
/* Command i (0, 1, ... in order) of the new recording: whether some kept
 * recording still has the same commands 0..i. Once false, stays false
 * until the next vk_replays_match_begin. */
bool vk_replays_match(struct vk_replays *r, int i, const struct vk_command *c);
/* The command buffer of the kept recording that is exactly the n commands
 * matched so far, marked as just used; VK_NULL_HANDLE when there is none. */
VkCommandBuffer vk_replays_find(struct vk_replays *r, int n);

/* ---- keeping and forgetting ---- */

/* Whether a recording of these n commands (submitted the ordinary way)
 * came before among the last few such recordings: only a recording that
 * repeats is worth a command buffer of its own. Remembers it either way. */
bool vk_replays_worth_keeping(struct vk_replays *r,
                              const struct vk_command *log, int n);
/* Keeps a copy of the n commands with cmd, the command buffer that
 * records them. When the module is full the least recently used one goes
 * to make room, and *evicted is its command buffer (else VK_NULL_HANDLE),
 * for the caller to free. Returns -1 when out of memory (then nothing is
 * kept and *evicted is cmd itself, for the caller to free). */
int vk_replays_add(struct vk_replays *r, const struct vk_command *log, int n,
                   VkCommandBuffer cmd, VkCommandBuffer *evicted);
/* Forgets every kept recording (and what vk_replays_worth_keeping
 * remembered). Writes their command buffers to out (room for `capacity`
 * of them) and returns how many. A matching under way fails from then on. */
int vk_replays_clear(struct vk_replays *r, VkCommandBuffer *out);
/* How many recordings are kept now. */
int vk_replays_count(const struct vk_replays *r);

#endif
