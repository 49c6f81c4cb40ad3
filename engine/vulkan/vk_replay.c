/* vk_replay.c — see vk_replay.h. */
#include "vk_replay.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The part of a command two recordings must share. */
#define COMPARED_BYTES offsetof(struct vk_command, pipeline)
/* Recordings vk_replays_worth_keeping remembers: enough for a decode step
 * and the verify blocks of a speculative loop between two of them. */
#define RECENT 8
#define MAX_CAPACITY 64

struct kept {
    struct vk_command *log;
    int n;
    VkCommandBuffer cmd;
    uint64_t last_used;
};

struct vk_replays {
    struct kept *kept;
    int n_kept, capacity;
    /* Matching: bit k set while kept[k] has the new recording's commands
     * so far. */
    uint64_t alive;
    uint64_t clock;     /* counts vk_replays_find calls, for LRU */
    /* Hashes of the last RECENT recordings made the ordinary way (0: an
     * empty slot), the oldest at `next`. */
    uint64_t recent[RECENT];
    int next;
};

void vk_command_clear(struct vk_command *c)
{
    memset(c, 0, sizeof *c);
}

struct vk_replays *vk_replays_new(int capacity)
{
    if (capacity < 1 || capacity > MAX_CAPACITY)
        return NULL;
    struct vk_replays *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->kept = calloc((size_t)capacity, sizeof *r->kept);
    if (!r->kept) {
        free(r);
        return NULL;
    }
    r->capacity = capacity;
    return r;
}

void vk_replays_free(struct vk_replays *r)
{
    if (!r)
        return;
    for (int k = 0; k < r->n_kept; k++)
        free(r->kept[k].log);
    free(r->kept);
    free(r);
}

void vk_replays_match_begin(struct vk_replays *r)
{
    r->alive = r->n_kept == 64 ? ~0ull : (1ull << r->n_kept) - 1;
}

/* Called per command of every pass: it visits only the kept recordings
 * still alive (usually one after the first command), not all of them. */
bool vk_replays_match(struct vk_replays *r, int i, const struct vk_command *c)
{
    for (uint64_t left = r->alive; left; left &= left - 1) {
        const int k = __builtin_ctzll(left);
        if (i >= r->kept[k].n ||
            memcmp(&r->kept[k].log[i], c, COMPARED_BYTES) != 0)
            r->alive &= ~(1ull << k);
    }
    return r->alive != 0;
}

VkCommandBuffer vk_replays_find(struct vk_replays *r, int n)
{
    for (int k = 0; k < r->n_kept; k++)
        if ((r->alive & (1ull << k)) && r->kept[k].n == n) {
            r->kept[k].last_used = ++r->clock;
            return r->kept[k].cmd;
        }
    return VK_NULL_HANDLE;
}

/* 64-bit words of the compared part of each command, mixed. */
static uint64_t log_hash(const struct vk_command *log, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        const unsigned char *bytes = (const unsigned char *)&log[i];
        for (size_t off = 0; off + 8 <= COMPARED_BYTES; off += 8) {
            uint64_t w;
            memcpy(&w, bytes + off, 8);
            h = (h ^ w) * 0xff51afd7ed558ccdull;
            h ^= h >> 32;
        }
    }
    return h ? h : 1;
}

bool vk_replays_worth_keeping(struct vk_replays *r,
                              const struct vk_command *log, int n)
{
    const uint64_t h = log_hash(log, n);
    for (int i = 0; i < RECENT; i++)
        if (r->recent[i] == h) {
            r->recent[i] = 0;   /* kept from now on, not remembered */
            return true;
        }
    r->recent[r->next] = h;
    r->next = (r->next + 1) % RECENT;
    return false;
}

/* The kept recording used longest ago. */
static int least_recent(const struct vk_replays *r)
{
    int oldest = 0;
    for (int k = 1; k < r->n_kept; k++)
        if (r->kept[k].last_used < r->kept[oldest].last_used)
            oldest = k;
    return oldest;
}

int vk_replays_add(struct vk_replays *r, const struct vk_command *log, int n,
                   VkCommandBuffer cmd, VkCommandBuffer *evicted)
{
    *evicted = VK_NULL_HANDLE;
    struct vk_command *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) {
        *evicted = cmd;
        return -1;
    }
    memcpy(copy, log, (size_t)n * sizeof *copy);
    int k = r->n_kept;
    if (k == r->capacity) {
        k = least_recent(r);
        *evicted = r->kept[k].cmd;
        free(r->kept[k].log);
    } else {
        r->n_kept++;
    }
    r->kept[k] = (struct kept){copy, n, cmd, ++r->clock};
    r->alive = 0;   /* a matching under way does not see it */
    return 0;
}

int vk_replays_clear(struct vk_replays *r, VkCommandBuffer *out)
{
    int n = r->n_kept;
    for (int k = 0; k < n; k++) {
        out[k] = r->kept[k].cmd;
        free(r->kept[k].log);
    }
    memset(r->kept, 0, (size_t)r->capacity * sizeof *r->kept);
    memset(r->recent, 0, sizeof r->recent);
    r->n_kept = 0;
    r->alive = 0;
    return n;
}

int vk_replays_count(const struct vk_replays *r)
{
    return r ? r->n_kept : 0;
}
