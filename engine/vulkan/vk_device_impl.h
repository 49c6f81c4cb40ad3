/* vk_device_impl.h — the inside of struct vk_device, shared by the files
 * that implement vk_device.h (internal to engine/vulkan/vk_*.c):
 *   vk_device.c   the loader, describing and opening devices, closing
 *   vk_memory.c   memory: a bump suballocator over 256 MiB blocks
 *   vk_submit.c   submitting and waiting, and staged transfers
 *   vk_profile.c  KAKEYA_VK_PROFILE: per-dispatch times and statistics
 *   vk_record.c   pipelines, and recording a pass: chunks, replays
 * All state lives in struct vk_device; nothing here is thread-safe (the
 * device's thread owns it). */
#ifndef KK_VK_DEVICE_IMPL_H
#define KK_VK_DEVICE_IMPL_H

#include <time.h>

#include "error.h"
#include "vk_device.h"
#include "vk_replay.h"

/* Command buffers of one recording (vk_record.c's chunks). */
#define VK_MAX_CHUNKS 6
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

    /* Recordings kept to submit again (vk_replay.h; vk_record.c's
     * "replays"); NULL when off: KAKEYA_VK_REPLAY=0, or timestamps profiled
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

/* ---- shared within the implementation ---- */

static inline VkDeviceSize align_up(VkDeviceSize x, VkDeviceSize a)
{
    return a > 1 ? (x + a - 1) / a * a : x;
}

/* vk_device.c: a VkResult's name, for messages. */
const char *vk_result_name(VkResult r);

/* vk_profile.c: KAKEYA_VK_PROFILE's value when it asks for profiling, else
 * NULL; starting (at open), per-recording and per-command hooks that do
 * nothing unless d->profile is set; printing and freeing at close. */
double vkd_ms_between(const struct timespec *a, const struct timespec *b);
const char *vkd_profile_mode(void);
void vkd_profile_open(struct vk_device *d, uint32_t timestamp_bits,
                      bool has_statistics);
void vkd_profile_call(struct vk_device *d, int k, struct timespec *t0);
void vkd_profile_stamp(struct vk_device *d, const char *what,
                       uint32_t groups);
void vkd_profile_begin(struct vk_device *d);
void vkd_profile_begin_stamps(struct vk_device *d);
void vkd_profile_end(struct vk_device *d, bool is_replay);
bool vkd_profile_has_statistics(const struct vk_device *d);
int vkd_profile_pipeline_made(struct vk_device *d, VkPipeline pipe);
void vkd_profile_dispatched(struct vk_device *d,
                            const struct vk_pipeline *pipe);
void vkd_profile_close(struct vk_device *d);

/* vk_record.c: whether recordings are kept to submit again (replays), and
 * forgetting every kept one (a buffer or pipeline they name is going). */
bool vkd_replays_wanted(const struct vk_device *d);
void vkd_replays_forget(struct vk_device *d);

/* vk_submit.c: a memory barrier on cmd; submitting cmd (already ended)
 * without waiting, a fence signalled when all work so far is done; waiting
 * for d->fence and resetting it. Failures say what failed and mark a lost
 * device lost. */
void vkd_barrier(struct vk_device *d, VkCommandBuffer cmd,
                 VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                 VkPipelineStageFlags dst_stage, VkAccessFlags dst_access);
int vkd_queue_submit(struct vk_device *d, VkCommandBuffer cmd, VkFence fence,
                     const char *what, struct kk_error *err);
int vkd_fence_wait(struct vk_device *d, const char *what,
                   struct kk_error *err);
#define STAGES_WORK (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | \
                     VK_PIPELINE_STAGE_TRANSFER_BIT)
#define WRITES_WORK (VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)
#define ACCESS_WORK (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | \
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)

#endif
