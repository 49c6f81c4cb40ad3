/* vk_profile.c — KAKEYA_VK_PROFILE (vk_device.h): per-dispatch GPU
 * times, the host's recording and waiting, and the driver's statistics of
 * each pipeline dispatched, printed when the device closes. */
#include "vk_device_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- profiling ---- */

double vkd_ms_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e3 +
           (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* KAKEYA_VK_PROFILE's value when it asks for profiling, else NULL. */
const char *vkd_profile_mode(void)
{
    const char *env = getenv("KAKEYA_VK_PROFILE");
    return env && *env && strcmp(env, "0") ? env : NULL;
}

/* Starts profiling when KAKEYA_VK_PROFILE asks and the queue has
 * timestamps; otherwise leaves d->profile NULL (profiling is optional).
 * has_statistics: the device was made with pipeline statistics on. */
void vkd_profile_open(struct vk_device *d, uint32_t timestamp_bits,
                  bool has_statistics)
{
    const char *env = vkd_profile_mode();
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
void vkd_profile_call(struct vk_device *d, int k, struct timespec *t0)
{
    if (!d->profile || d->profile->is_host_only)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    d->profile->call_ms[k] += vkd_ms_between(t0, &t);
    d->profile->calls[k]++;
    *t0 = t;
}

void vkd_profile_stamp(struct vk_device *d, const char *what,
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
void vkd_profile_begin(struct vk_device *d)
{
    struct vk_profile *p = d->profile;
    if (!p)
        return;
    clock_gettime(CLOCK_MONOTONIC, &p->begun);
    p->current = (struct vk_record_split){0, 0, 0};
}

/* Its first chunk begins: the GPU's clock. */
void vkd_profile_begin_stamps(struct vk_device *d)
{
    struct vk_profile *p = d->profile;
    if (!p || p->is_host_only)
        return;
    d->fn.vkCmdResetQueryPool(d->cmd, p->pool, 0, VK_PROFILE_STAMPS);
    p->n = 0;
    vkd_profile_stamp(d, "start", 0);
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
void vkd_profile_end(struct vk_device *d, bool is_replay)
{
    struct vk_profile *p = d->profile;
    if (!p || (!p->is_host_only && p->n < 2))
        return;
    struct timespec done;
    clock_gettime(CLOCK_MONOTONIC, &done);
    p->record_ms += vkd_ms_between(&p->begun, &p->submitted);
    if (is_replay) {
        p->replay_record_ms += vkd_ms_between(&p->begun, &p->submitted);
        p->replays++;
    }
    p->wait_ms += vkd_ms_between(&p->submitted, &done);
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
bool vkd_profile_has_statistics(const struct vk_device *d)
{
    return d->profile && d->profile->has_statistics;
}

/* Keeps what the driver reports of pipe, just made; returns the entry's
 * number for vk_pipeline.stats_entry (0: statistics are off, or memory
 * ran out and this pipeline goes without). Read now, as the pipeline may
 * be gone by the time the profile is printed. */
int vkd_profile_pipeline_made(struct vk_device *d, VkPipeline pipe)
{
    struct vk_profile *p = d->profile;
    if (!vkd_profile_has_statistics(d))
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
void vkd_profile_dispatched(struct vk_device *d,
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
    return vkd_ms_between(&a, &b) * 1e6 / 1001;
}

void vkd_profile_close(struct vk_device *d)
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

