/* test_vk_replay.c — the bookkeeping of kept recordings (vk_replay.h).
 *
 * A recording is worth keeping the second time it comes; a kept one is
 * found only when a new recording has exactly its commands, no more and
 * no fewer; when the room is full the recording used longest ago goes and
 * its command buffer comes back; clearing hands back every command buffer
 * and forgets what came before. No Vulkan device is needed: handles are
 * only compared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "vk_replay.h"

enum { N_COMMANDS = 5 };

/* A recording of N_COMMANDS dispatches, told apart by `id` (a push
 * constant of its last command). */
static void make_log(struct vk_command *log, uint32_t id)
{
    for (int i = 0; i < N_COMMANDS; i++) {
        vk_command_clear(&log[i]);
        log[i].kind = VK_COMMAND_DISPATCH;
        log[i].groups[0] = 4;
        log[i].groups[1] = log[i].groups[2] = 1;
        log[i].pipe = (VkPipeline)(uintptr_t)0x1000;
        log[i].n_buffers = 2;
        log[i].bufs[0] = (VkBuffer)(uintptr_t)(0x2000 + i);
        log[i].bufs[1] = (VkBuffer)(uintptr_t)(0x3000 + i);
        log[i].push_bytes = 4;
    }
    memcpy(log[N_COMMANDS - 1].push, &id, sizeof id);
}

static VkCommandBuffer cmd_of(uint32_t id)
{
    return (VkCommandBuffer)(uintptr_t)(0x100 + id);
}

/* Matches the first n commands of log; the command buffer found for
 * exactly those, or VK_NULL_HANDLE. */
static VkCommandBuffer match(struct vk_replays *r, const struct vk_command *log,
                             int n)
{
    vk_replays_match_begin(r);
    for (int i = 0; i < n; i++)
        if (!vk_replays_match(r, i, &log[i]))
            return VK_NULL_HANDLE;
    return vk_replays_find(r, n);
}

/* Keeps recording id (as the device does: when it comes the second time). */
static void keep(struct vk_replays *r, uint32_t id, VkCommandBuffer *evicted)
{
    struct vk_command log[N_COMMANDS];
    make_log(log, id);
    assert_false(vk_replays_worth_keeping(r, log, N_COMMANDS));
    assert_true(vk_replays_worth_keeping(r, log, N_COMMANDS));
    assert_int_equal(vk_replays_add(r, log, N_COMMANDS, cmd_of(id), evicted),
                     0);
}

/* Room for `capacity` kept recordings. */
static struct vk_replays *replays_new(int capacity)
{
    struct vk_replays *r = vk_replays_new(capacity);
    assert_non_null(r);
    return r;
}

/* Clears r, which keeps `kept` recordings, and frees it. */
static void replays_clear_and_free(struct vk_replays *r, int kept)
{
    VkCommandBuffer out[64];
    assert_int_equal(vk_replays_clear(r, out), kept);
    vk_replays_free(r);
}

static void test_a_kept_recording_is_found_only_for_exactly_its_commands(
    void **state)
{
    (void)state;
    struct vk_replays *r = replays_new(4);
    VkCommandBuffer evicted;
    keep(r, 1, &evicted);
    assert_null(evicted);
    struct vk_command log[N_COMMANDS + 1];
    make_log(log, 1);
    assert_ptr_equal(match(r, log, N_COMMANDS), cmd_of(1));
    /* a prefix, one command more, one byte of a push constant apart */
    assert_null(match(r, log, N_COMMANDS - 1));
    log[N_COMMANDS] = log[0];
    assert_null(match(r, log, N_COMMANDS + 1));
    log[N_COMMANDS - 1].push[0] ^= 1;
    assert_null(match(r, log, N_COMMANDS));
    /* the same commands with another pipeline object behind them (not
     * compared: the handle is) */
    make_log(log, 1);
    log[2].pipeline = (const struct vk_pipeline *)log;
    assert_ptr_equal(match(r, log, N_COMMANDS), cmd_of(1));
    replays_clear_and_free(r, 1);
}

static void test_a_full_room_gives_back_the_recording_used_longest_ago(
    void **state)
{
    (void)state;
    struct vk_replays *r = replays_new(3);
    VkCommandBuffer evicted;
    for (uint32_t id = 1; id <= 3; id++) {
        keep(r, id, &evicted);
        assert_null(evicted);
    }
    struct vk_command log[N_COMMANDS];
    make_log(log, 1);
    assert_ptr_equal(match(r, log, N_COMMANDS), cmd_of(1));   /* 2 oldest */
    keep(r, 4, &evicted);
    assert_ptr_equal(evicted, cmd_of(2));
    assert_int_equal(vk_replays_count(r), 3);
    make_log(log, 2);
    assert_null(match(r, log, N_COMMANDS));
    make_log(log, 4);
    assert_ptr_equal(match(r, log, N_COMMANDS), cmd_of(4));
    replays_clear_and_free(r, 3);
}

static void test_clearing_gives_back_every_command_buffer_and_forgets(
    void **state)
{
    (void)state;
    struct vk_replays *r = replays_new(4);
    VkCommandBuffer evicted;
    keep(r, 1, &evicted);
    keep(r, 2, &evicted);
    struct vk_command log[N_COMMANDS];
    make_log(log, 3);
    assert_false(vk_replays_worth_keeping(r, log, N_COMMANDS));
    VkCommandBuffer out[4];
    assert_int_equal(vk_replays_clear(r, out), 2);
    assert_true((out[0] == cmd_of(1) && out[1] == cmd_of(2)) ||
                (out[0] == cmd_of(2) && out[1] == cmd_of(1)));
    assert_int_equal(vk_replays_count(r), 0);
    make_log(log, 1);
    assert_null(match(r, log, N_COMMANDS));
    /* recording 3 came once before the clear: once more is not enough */
    make_log(log, 3);
    assert_false(vk_replays_worth_keeping(r, log, N_COMMANDS));
    vk_replays_free(r);
    vk_replays_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_a_kept_recording_is_found_only_for_exactly_its_commands),
        cmocka_unit_test(
            test_a_full_room_gives_back_the_recording_used_longest_ago),
        cmocka_unit_test(
            test_clearing_gives_back_every_command_buffer_and_forgets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
