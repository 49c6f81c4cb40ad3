/* vk_tool.h — what the vk_sync measuring tools (bench_grid_sync.c,
 * bench_persistent_decode.c) share: a clock and reading a .spv whole.
 * Header-only, so that each tool still builds from its one .c file. */
#ifndef KK_VK_TOOL_H
#define KK_VK_TOOL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Microseconds of CLOCK_MONOTONIC. */
static inline double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* The whole file at path in a malloc'd buffer (the caller frees it) and
 * its size in *bytes; NULL when it cannot be read or is empty. */
static inline void *read_file(const char *path, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = size > 0 ? malloc((size_t)size) : NULL;
    if (p && fread(p, 1, (size_t)size, f) != (size_t)size) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *bytes = (size_t)size;
    return p;
}

#endif
