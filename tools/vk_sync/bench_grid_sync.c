/* bench_grid_sync.c — what one dependency between phases of GPU work costs:
 * a pipeline barrier between dispatches (how every op of a kakeya pass
 * waits for the one before) against a grid-wide barrier inside one
 * dispatch (workgroups that all stay resident and meet at an atomic
 * counter), the price a persistent decode kernel would pay instead. Not
 * part of the build:
 *
 *   make build/libkakeya.a
 *   glslc --target-env=vulkan1.1 -O tools/vk_sync/grid_phases.comp \
 *       -o build/grid_phases.spv
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iengine -Iengine/vulkan \
 *       tools/vk_sync/bench_grid_sync.c build/libkakeya.a -lm -ldl \
 *       -lpthread -o build/bench_grid_sync
 *   build/bench_grid_sync build/grid_phases.spv [device]
 *
 * Prints one JSON line per grid size and mode: µs per phase, and whether
 * every value came out right (a grid barrier that let a workgroup read
 * before the phase before it had written would show here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vk_device.h"
#include "vk_tool.h"

enum { HALF = 1 << 16, PHASES = 2000 };

struct push {
    uint32_t n, phases, first, spin;
};

/* Zeroes data and the counter, runs PHASES phases over `groups`
 * workgroups (one dispatch with grid barriers, or one per phase), and
 * checks the values. Returns µs per phase, or -1. */
static double run(struct vk_device *d, const struct vk_pipeline *p,
                  struct vk_buffer *data, struct vk_buffer *count,
                  uint32_t groups, int spin, int *wrong)
{
    struct kk_error err;
    static float host[2 * HALF];
    memset(host, 0, sizeof host);
    uint32_t zero = 0;
    if (vk_upload(d, data, 0, host, sizeof host, &err) ||
        vk_upload(d, count, 0, &zero, sizeof zero, &err) ||
        vk_begin(d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    const struct vk_buffer *bufs[] = {data, count};
    double t0 = now_us();
    if (spin) {
        struct push pc = {HALF, PHASES, 0, 1};
        vk_dispatch(d, p, bufs, &pc, groups, 1, 1);
    } else {
        for (uint32_t r = 0; r < PHASES; r++) {
            struct push pc = {HALF, 1, r, 0};
            vk_dispatch(d, p, bufs, &pc, groups, 1, 1);
        }
    }
    if (vk_submit_wait(d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    double us = (now_us() - t0) / PHASES;
    if (vk_download(d, data, 0, host, sizeof host, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    /* After PHASES (even) phases the result is in the first half. */
    *wrong = 0;
    for (int i = 0; i < HALF; i++)
        *wrong += host[i] != (float)PHASES;
    return us;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s grid_phases.spv [device]\n", argv[0]);
        return 2;
    }
    size_t bytes;
    uint32_t *spirv = read_file(argv[1], &bytes);
    if (!spirv) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    struct kk_error err;
    struct vk_device *d;
    if (vk_device_open(argc > 2 ? atoi(argv[2]) : -1, &d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct vk_pipeline p = {0};
    struct vk_buffer data = {0}, count = {0};
    int rc = 1;
    if (vk_pipeline_new(d, spirv, bytes, 2, sizeof(struct push), &p, &err) ||
        vk_buffer_new(d, 2 * HALF * sizeof(float), VK_MEM_DEVICE, &data,
                      &err) ||
        vk_buffer_new(d, 4, VK_MEM_DEVICE, &count, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    /* Warm up the clocks. */
    int wrong;
    for (int i = 0; i < 3; i++)
        run(d, &p, &data, &count, 132, 0, &wrong);
    static const uint32_t grids[] = {66, 132, 264, 528, 1056};
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
        /* A CPU-backed device (lavapipe) runs a few workgroups at a time:
         * a grid barrier there would wait forever. */
        for (int spin = 0; spin < (vk_device_is_cpu(d) ? 1 : 2); spin++) {
            double us = run(d, &p, &data, &count, grids[g], spin, &wrong);
            if (us < 0)
                goto out;
            printf("{\"device\": \"%s\", \"workgroups\": %u, \"mode\": "
                   "\"%s\", \"us_per_phase\": %.3f, \"wrong\": %d}\n",
                   vk_device_name(d), grids[g],
                   spin ? "grid_barrier" : "pipeline_barrier", us, wrong);
        }
    rc = 0;
out:
    vk_buffer_free(d, &count);
    vk_buffer_free(d, &data);
    vk_pipeline_free(d, &p);
    vk_device_close(d);
    free(spirv);
    return rc;
}
