/* vk_device.h — one Vulkan compute device: the loader, the device, memory,
 * compute pipelines and one command stream.
 *
 * The loader (libvulkan.so.1) is opened at run time with dlopen, so the
 * same kakeya binary runs on machines with no Vulkan at all (it computes on
 * the CPU there) and every Vulkan entry point is called through the table
 * in struct vk_device (fn). Nothing here knows about models: buffers are
 * bytes, pipelines are SPIR-V with N storage buffers and push constants.
 *
 * Requirements on a device (checked by vk_device_list, which says what is
 * missing): Vulkan 1.1+, a compute queue, VK_KHR_push_descriptor (each
 * dispatch pushes its buffer bindings; no descriptor pools to manage),
 * subgroup arithmetic in compute shaders and dynamically uniform indexing
 * of storage-buffer arrays (every desktop GPU driver and lavapipe).
 * Shaders read and write storage buffers as 32-bit words only, so no 8- or
 * 16-bit storage features are needed. Optional, enabled where the device
 * has them: packed int8 dot products (Vulkan 1.3 or VK_KHR_shader_integer_
 * dot_product) and NVIDIA's int8 cooperative matrices.
 *
 * Recording: vk_begin() opens a recording; vk_dispatch() and vk_copy()
 * record into it, each followed by a full compute/transfer memory barrier
 * (ops of one forward pass depend on each other almost always; correctness
 * over overlap). The recording is submitted in chunks as it grows — the
 * first after a few commands, each next one a few times longer — so the
 * GPU computes while the host records the rest; each chunk opens with the
 * same full barrier, so every command sees what the commands recorded
 * before it wrote, whichever chunk they went in. vk_submit_wait() submits
 * the last chunk and blocks until the GPU has done them all. So a command
 * may run as soon as it is recorded: host data it reads (mapped UPLOAD
 * memory) must be in place before the call that records it and stay
 * unchanged, and the buffers it uses must not be freed, until
 * vk_submit_wait returns. One thread owns a device. On a GPU the waits
 * poll before they block (the driver's blocking wait wakes the host late),
 * so a thread waiting for a pass keeps its core busy for up to 20 ms.
 *
 * Replays: a recording whose commands (pipelines, buffers, push constants,
 * workgroups, copies) are exactly those of one that came twice before is
 * not recorded again: the device kept a command buffer of it, and
 * vk_submit_wait submits that one in one go (vk_replay.h). While a
 * recording may still be a kept one, its commands are only compared, not
 * submitted; the first that differs sends all of them the ordinary way.
 * So a kept recording runs only once the host has written all the mapped
 * memory it reads, as the contract above already asks; what a pass varies
 * from step to step must come from buffers, not push constants, for it to
 * be replayed. Destroying any buffer or pipeline forgets every kept
 * recording. KAKEYA_VK_REPLAY=0 turns replays off, and so does
 * KAKEYA_VK_PROFILE=1 (see below).
 *
 * KAKEYA_VK_PROFILE=1 times every dispatch and copy on the GPU (timestamp
 * queries; a row "(between chunks)" is the GPU's time from one chunk's end
 * to the next one's start, mostly waiting for the host to submit it) and
 * the host's recording and waiting (replays off, so the profile sees the
 * chunks), and prints a table per pipeline name
 * to stderr when the device is closed. KAKEYA_VK_PROFILE=host times only
 * the host's recording (split into vk_dispatch, copies, switching chunks
 * and the caller's own work) and waiting, adding nothing to the GPU's
 * work. Under either, where the device offers
 * VK_KHR_pipeline_executable_properties the pipelines are made with their
 * statistics captured, and the table ends with what the driver reports
 * (registers, spills, shared memory...) for each pipeline that was
 * dispatched; without the extension a line says so. Profiling off, nothing
 * of this is asked for.
 *
 * Ownership: every _new/_open has its _free/_close, safe on NULL or on a
 * zeroed struct. Errors are values: functions that can fail return 0 or -1
 * and fill err with what happened and what to do. */
#ifndef KK_VK_DEVICE_H
#define KK_VK_DEVICE_H

#define VK_NO_PROTOTYPES
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "kakeya.h"
#include "kakeya_error.h"

/* The entry points kakeya calls, loaded from the loader at open. */
struct vk_fn {
#define VK_FN(name) PFN_##name name;
#include "vk_functions.h"
#undef VK_FN
};

/* Where a buffer lives: DEVICE is device-local (weights, activations, KV
 * cache); UPLOAD and READBACK are host-visible, coherent and persistently
 * mapped (`mapped`), for data going to and coming from the device. */
enum vk_memory { VK_MEM_DEVICE, VK_MEM_UPLOAD, VK_MEM_READBACK };

struct vk_buffer {
    VkBuffer buf;
    VkDeviceSize size;      /* bytes asked for */
    void *mapped;           /* UPLOAD/READBACK: host pointer; else NULL */
    /* Where its memory came from (a block of the suballocator, or its own
     * allocation for large buffers); internal to vk_memory.c. */
    VkDeviceMemory mem;
    VkDeviceSize offset;
    int block;              /* -1: own allocation */
};

/* Bindings of one pipeline, at most (each may be an array of buffers). */
#define VK_PIPELINE_MAX_BINDINGS 16

struct vk_pipeline {
    VkPipeline pipe;
    VkPipelineLayout layout;
    VkDescriptorSetLayout set_layout;
    int n_bindings;         /* storage-buffer bindings 0..n_bindings-1 */
    uint8_t count[VK_PIPELINE_MAX_BINDINGS];   /* buffers in binding i */
    int n_buffers;          /* the sum of count: buffers a dispatch binds */
    uint32_t push_bytes;    /* push-constant block size */
    char name[64];          /* for KAKEYA_VK_PROFILE's table; may be "" */
    /* KAKEYA_VK_PROFILE with pipeline statistics: 1 + the index of what
     * the driver reported for this pipeline among the device's; else 0. */
    int stats_entry;
};

struct vk_device;

/* ---- devices ---- */

/* Lists the devices in the loader's order (what --device N indexes):
 * fills at most max entries of out, returns how many devices there are,
 * or -1 when no loader can be opened or no instance created (err says
 * which, and that kakeya computes on the CPU with --backend cpu). */
int vk_device_list(struct kk_vk_device_info *out, int max,
                   struct kk_error *err);

/* The queue family to compute on, of the n a device reports: one that
 * computes and does not draw where there is one (NVIDIA's compute engine;
 * README's architecture notes say what it measured), else, or with
 * `first`, the first that computes; UINT32_MAX where none does. */
uint32_t vk_compute_family(const VkQueueFamilyProperties *families,
                           uint32_t n, bool first);

/* Opens device `index` (from vk_device_list), or with index < 0 the first
 * usable GPU that is not a software renderer (KK_BACKEND_AUTO; fails when
 * there is none). The message of a failure names the device and what to do
 * (`kakeya info --devices`, `--backend cpu`). */
int vk_device_open(int index, struct vk_device **out, struct kk_error *err);
void vk_device_close(struct vk_device *d);

/* The device's name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)". */
const char *vk_device_name(const struct vk_device *d);
/* Entry points, for code that records more than vk_dispatch/vk_copy. */
const struct vk_fn *vk_device_fn(const struct vk_device *d);
VkDevice vk_device_handle(const struct vk_device *d);
/* Whether the device is a CPU in disguise (lavapipe): shaders that run
 * well on a GPU's many threads may have a better form for it. */
bool vk_device_is_cpu(const struct vk_device *d);
/* The width of every compute shader's subgroups, or 0 where the driver
 * may pick different widths for different shaders. */
uint32_t vk_device_subgroup_size(const struct vk_device *d);
/* Whether the device multiplies int8 tiles of 16 x 8 x 32 per subgroup
 * (VK_NV_cooperative_matrix, enabled when opened; KAKEYA_VK_MMA=0 leaves
 * it off): the matmul_mma_ forms run there. */
bool vk_device_has_int8_mma(const struct vk_device *d);
/* Whether the matmul_qx forms can run: packed int8 dot products
 * (OpSDotKHR: shaderIntegerDotProduct, enabled at open where the device
 * has it), subgroup shuffles, and subgroups of one width, a multiple of 8.
 * (The backend decides whether they do: KAKEYA_VK_QX.) */
bool vk_device_has_int_dot(const struct vk_device *d);
/* Whether the sample shader can run: 64-bit integers (shaderInt64,
 * enabled at open where the device has it) and workgroups of
 * VK_SAMPLE_WORKGROUP invocations. */
bool vk_device_has_int64(const struct vk_device *d);
/* The limits a caller sizes dispatches by. */
uint32_t vk_device_max_groups_x(const struct vk_device *d);
uint64_t vk_device_max_buffer_range(const struct vk_device *d);
/* Whether a buffer of `size` bytes (as given to vk_buffer_new) can be bound
 * whole to a dispatch: its word-rounded size within maxStorageBufferRange.
 * vk_dispatch refuses a binding that cannot. */
bool vk_device_binds(const struct vk_device *d, VkDeviceSize size);
/* The buffer size for `bytes` of data the shaders read: shaders read
 * 32-bit words, and an unaligned row's last bytes may sit in a word past
 * its end, so whole words and one more. */
static inline VkDeviceSize vk_padded_size(size_t bytes)
{
    return (bytes + 3) / 4 * 4 + 4;
}
/* The most rows of `row_bytes` whose vk_padded_size the device binds. */
uint64_t vk_device_binds_rows(const struct vk_device *d, size_t row_bytes);
/* For a message about a buffer of `size` bytes that the device does not
 * bind: the size and the device's limit as text, in MiB to one decimal, or
 * both in bytes where the MiB would read the same. */
struct vk_range_text {
    char size[32], limit[32];
};
struct vk_range_text vk_device_range_text(const struct vk_device *d,
                                          VkDeviceSize size);

/* ---- memory ---- */

/* A buffer of `size` bytes (> 0), usable as storage buffer and as transfer
 * source and destination. Small buffers (< 64 MiB) are suballocated from
 * 256 MiB blocks, so thousands of them (a model's tensors) stay within the
 * device's limit on allocations; a block goes back to the device when its
 * last buffer is freed (space freed inside a block is not reused). Offsets
 * in a block respect minStorageBufferOffsetAlignment. The VkBuffer is
 * rounded up to a whole 32-bit word, so a shader may touch the word that
 * holds the last bytes. Fails with the size and the memory left in the
 * message; `out` is then zeroed (safe to free). */
int vk_buffer_new(struct vk_device *d, VkDeviceSize size, enum vk_memory where,
                  struct vk_buffer *out, struct kk_error *err);
void vk_buffer_free(struct vk_device *d, struct vk_buffer *b);

/* Synchronous copies between host memory and a DEVICE buffer through an
 * internal staging buffer (64 MiB, made on first use; bigger copies go in
 * chunks, one submission each: any size works). A mapped (UPLOAD/READBACK)
 * buffer is copied with memcpy. Must not be called between vk_begin and
 * vk_submit_wait (they are refused there). */
int vk_upload(struct vk_device *d, struct vk_buffer *dst, VkDeviceSize offset,
              const void *src, size_t bytes, struct kk_error *err);
int vk_download(struct vk_device *d, const struct vk_buffer *src,
                VkDeviceSize offset, void *dst, size_t bytes,
                struct kk_error *err);

/* ---- pipelines ---- */

/* A compute pipeline from SPIR-V (entry point "main") whose shader reads
 * n_buffers storage buffers at set 0, bindings 0..n_buffers-1, and a
 * push-constant block of push_bytes (<= 128). */
int vk_pipeline_new(struct vk_device *d, const uint32_t *spirv, size_t bytes,
                    int n_buffers, uint32_t push_bytes,
                    struct vk_pipeline *out, struct kk_error *err);
/* The same with binding i an array of count[i] (>= 1) storage buffers, for
 * a shader that picks one by a workgroup-uniform index. */
int vk_pipeline_new_arrays(struct vk_device *d, const uint32_t *spirv,
                           size_t bytes, int n_bindings, const int *count,
                           uint32_t push_bytes, struct vk_pipeline *out,
                           struct kk_error *err);
void vk_pipeline_free(struct vk_device *d, struct vk_pipeline *p);

/* ---- recording ---- */

/* Opens a recording; it starts with a full barrier against the work of
 * earlier submissions. (Its command buffers are reused: the previous
 * recording's vk_submit_wait waited for them.) */
int vk_begin(struct vk_device *d, struct kk_error *err);
/* Binds bufs[0..p->n_buffers-1] (whole buffers) to bindings 0.., an
 * array binding taking the next count[i] of them, pushes push_bytes of
 * `push`, dispatches groups_x * groups_y * groups_z workgroups, then a
 * barrier. */
void vk_dispatch(struct vk_device *d, const struct vk_pipeline *p,
                 const struct vk_buffer *const *bufs, const void *push,
                 uint32_t groups_x, uint32_t groups_y, uint32_t groups_z);
/* Records a copy of `bytes` (any offsets, any alignment), then a barrier. */
void vk_copy(struct vk_device *d, const struct vk_buffer *src,
             VkDeviceSize src_offset, const struct vk_buffer *dst,
             VkDeviceSize dst_offset, VkDeviceSize bytes);
/* vk_copy without the barrier after it, for a copy whose destination
 * nothing later in this recording reads or writes (the KV cache's slots
 * that only the next pass reads: each recording starts with a barrier). */
void vk_copy_for_next_pass(struct vk_device *d, const struct vk_buffer *src,
                           VkDeviceSize src_offset,
                           const struct vk_buffer *dst,
                           VkDeviceSize dst_offset, VkDeviceSize bytes);
/* Submits the rest of what was recorded since vk_begin and waits for all
 * of it (60 s at most); afterwards the results are visible to host reads
 * of mapped buffers too. A lost device or a timeout fails with a message
 * (and every later call fails: restart). A mistake while recording (a
 * range past a buffer's end, too many workgroups, a missing buffer) stops
 * the recording and is reported here: nothing from the chunk it happened
 * in onwards is submitted, chunks submitted before it may have run (what
 * the recording writes is then undefined), and this waits for them before
 * it returns, so buffers may be freed afterwards as usual. */
int vk_submit_wait(struct vk_device *d, struct kk_error *err);
/* How many recordings were submitted from a kept one so far. */
long vk_device_replayed(const struct vk_device *d);

#endif
