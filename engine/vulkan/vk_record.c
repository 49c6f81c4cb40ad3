/* vk_record.c — pipelines, and recording a pass (vk_device.h): vk_begin,
 * vk_dispatch, vk_copy, vk_submit_wait; the commands go to the GPU in
 * chunks as they are recorded, or a recording made before is submitted
 * again (replays). */
#include "vk_device_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (vkd_profile_has_statistics(d))
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
    out->stats_entry = vkd_profile_pipeline_made(d, out->pipe);
    return 0;
}

void vk_pipeline_free(struct vk_device *d, struct vk_pipeline *p)
{
    if (!d || !p)
        return;
    vkd_replays_forget(d);
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
    *ms += vkd_ms_between(t0, &t);
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
        vkd_profile_begin_stamps(d);
    vkd_barrier(d, d->cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK, ACCESS_WORK);
    /* GPU time from the previous chunk's last command to here: the GPU
     * waiting for this chunk when the host records slower than it runs. */
    if (d->n_submitted > 0)
        vkd_profile_stamp(d, "(between chunks)", 0);
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
    vkd_profile_call(d, CALL_END, &t0);
    if (r != VK_SUCCESS) {
        record_fail(d, "recording the commands failed (%s): the device may "
                    "be out of memory; use a smaller context or --backend "
                    "cpu", vk_result_name(r));
        return false;
    }
    struct kk_error err;
    if (vkd_queue_submit(d, d->cmd, fence, "the recorded work", &err)) {
        record_fail(d, "%s", err.msg);
        return false;
    }
    vkd_profile_call(d, CALL_SUBMIT, &t0);
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
        if (vkd_queue_submit(d, VK_NULL_HANDLE, d->fence, what, &why) == 0) {
            rc = vkd_fence_wait(d, what, err);
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
        vkd_profile_stamp(d, "copy", 0);
        if (c->kind == VK_COMMAND_COPY)
            vkd_barrier(d, d->cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK,
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
    vkd_profile_dispatched(d, p);
    struct timespec t0 = {0, 0};
    if (d->profile && !d->profile->is_host_only)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    d->fn.vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipe);
    vkd_profile_call(d, CALL_BIND, &t0);
    d->fn.vkCmdPushDescriptorSetKHR(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE,
                                    p->layout, 0, (uint32_t)p->n_bindings,
                                    writes);
    vkd_profile_call(d, CALL_DESCRIPTORS, &t0);
    if (c->push_bytes)
        d->fn.vkCmdPushConstants(d->cmd, p->layout,
                                 VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                 c->push_bytes, c->push);
    vkd_profile_call(d, CALL_PUSH, &t0);
    d->fn.vkCmdDispatch(d->cmd, c->groups[0], c->groups[1], c->groups[2]);
    vkd_profile_call(d, CALL_DISPATCH, &t0);
    vkd_barrier(d, d->cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK, ACCESS_WORK);
    vkd_profile_call(d, CALL_BARRIER, &t0);
    vkd_profile_stamp(d, p->name[0] ? p->name : "dispatch",
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
bool vkd_replays_wanted(const struct vk_device *d)
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
void vkd_replays_forget(struct vk_device *d)
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
    vkd_barrier(d, cmd, STAGES_WORK, WRITES_WORK, STAGES_WORK, ACCESS_WORK);
    for (int i = 0; i < d->n_log; i++)
        command_record(d, &d->log[i]);
    vkd_barrier(d, cmd, STAGES_WORK, WRITES_WORK, VK_PIPELINE_STAGE_HOST_BIT,
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
    if (vkd_queue_submit(d, cmd, d->fence, "the recorded work", err)) {
        kk_error_prefix(err, d->props.deviceName);
        return -1;
    }
    if (vkd_fence_wait(d, "the recorded work", err))
        return -1;
    d->n_replayed++;
    vkd_profile_end(d, true);
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
    vkd_profile_begin(d);
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
        vkd_barrier(d, d->cmd, STAGES_WORK, WRITES_WORK,
                VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        if (d->profile)
            clock_gettime(CLOCK_MONOTONIC, &d->profile->submitted);
        /* The fence covers the chunks submitted before this one too. */
        chunk_submit(d, d->fence);
    }
    if (d->record_error[0])
        return recording_abandon(d, err);
    if (vkd_fence_wait(d, "the recorded work", err))
        return -1;
    vkd_profile_end(d, false);
    replays_keep(d);
    return 0;
}

