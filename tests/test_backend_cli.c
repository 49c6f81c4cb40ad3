/* test_backend_cli.c — choosing where kakeya computes, from the command
 * line: --backend and --device reach the engine (the same tokens come out
 * of the CPU and of a Vulkan device), `kakeya info --devices` lists what
 * --device picks from, and every wrong choice is refused with a message
 * that says what to do.
 *
 * Runs the built binary (build/kakeya, or $KK_BIN) on the real tiny model
 * ../shared/models/aidreams260K-F32.gguf. The Vulkan half needs a device;
 * in CI Mesa's lavapipe is one. Without a loader or device those cases
 * print a loud SKIP line and the refusal is checked instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kakeya.h"
#include "testutil.h"

static char *read_text(const char *path)
{
    size_t len;
    char *s = testutil_read_file(path, &len);
    assert_non_null(s);
    return s;
}

/* The number of Vulkan devices, or -1 (after a SKIP line) when none can
 * be asked. */
static int vulkan_devices(void)
{
    struct kk_vk_device_info d[8];
    struct kk_error err = {{0}};
    int n = kk_vulkan_devices(d, 8, &err);
    if (n <= 0)
        fprintf(stderr, "SKIP (Vulkan half): %s\n",
                n < 0 ? err.msg : "the loader reports no device");
    return n > 0 ? n : -1;
}

static int setup(void **state)
{
    return testutil_binary_on_model(state, "test_backend_cli",
                                    "models/aidreams260K-F32.gguf");
}

static void test_a_backend_that_does_not_exist_is_refused(void **state)
{
    if (!*state)
        skip();
    const char *err = testutil_tmp_path("backend-err");
    assert_int_equal(testutil_sh("'%s' run -m '%s' -p hi -n 1 --backend gpu "
                                 "2> '%s'",
                                 testutil_binary(), (char *)*state, err),
                     2);
    char *msg = read_text(err);
    assert_non_null(strstr(msg, "--backend wants cpu, vulkan or auto, not "
                                "'gpu'"));
    free(msg);
    unlink(err);
}

static void test_the_same_tokens_come_from_the_cpu_and_vulkan(void **state)
{
    if (!*state)
        skip();
    const char *cpu = strdup(testutil_tmp_path("backend-cpu"));
    const char *gpu = strdup(testutil_tmp_path("backend-vk"));
    const char *err = strdup(testutil_tmp_path("backend-vk-err"));
    const char *run = "'%s' run -m '%s' -p 'Once upon a time' -n 24 --ids "
                      "-t 1 --backend %s > '%s' 2> '%s'";
    const char *bin = testutil_binary(), *model = *state;
    assert_int_equal(testutil_sh(run, bin, model, "cpu", cpu, err), 0);
    int rc = testutil_sh(run, bin, model, "vulkan", gpu, err);
    char *msg = read_text(err);
    if (vulkan_devices() < 0) {
        /* No device: refused, saying what to do. */
        assert_int_equal(rc, 1);
        assert_non_null(strstr(msg, "--backend cpu"));
    } else {
        assert_int_equal(rc, 0);
        char *a = read_text(cpu), *b = read_text(gpu);
        assert_true(strlen(a) > 24);
        assert_string_equal(a, b);
        assert_non_null(strstr(msg, "on vulkan"));
        free(a);
        free(b);
    }
    free(msg);
    unlink(cpu);
    unlink(gpu);
    unlink(err);
    free((void *)cpu);
    free((void *)gpu);
    free((void *)err);
}

static void test_a_device_out_of_range_is_refused(void **state)
{
    if (!*state)
        skip();
    int n = vulkan_devices();
    if (n < 0)
        skip();
    const char *err = testutil_tmp_path("backend-dev-err");
    assert_int_equal(testutil_sh("'%s' run -m '%s' -p hi -n 1 --backend vulkan "
                                 "--device %d 2> '%s'",
                                 testutil_binary(), (char *)*state, n, err),
                     1);
    char *msg = read_text(err);
    assert_non_null(strstr(msg, "kakeya info --devices"));
    free(msg);
    unlink(err);
}

static void test_info_devices_lists_what_device_picks(void **state)
{
    if (!*state)
        skip();
    const char *out = strdup(testutil_tmp_path("devices-out"));
    int rc = testutil_sh("'%s' info --devices > '%s' 2>&1", testutil_binary(),
                         out);
    char *text = read_text(out);
    struct kk_vk_device_info d[8];
    struct kk_error err = {{0}};
    int n = kk_vulkan_devices(d, 8, &err);
    if (n <= 0) {
        assert_int_equal(rc, 1);
        assert_true(strlen(text) > 0);
    } else {
        assert_int_equal(rc, d[0].is_usable ? 0 : 1);
        /* One line per device, starting with its index and name. */
        char line[300];
        snprintf(line, sizeof line, "0  %s", d[0].name);
        assert_non_null(strstr(text, line));
        /* and what it binds at once, which a model's largest tensor and a
         * layer's keys for the whole context must fit */
        snprintf(line, sizeof line, "binds %6.1f MiB",
                 d[0].binds_bytes / 1048576.0);
        assert_non_null(strstr(text, line));
        assert_true(d[0].binds_bytes > 0);
        assert_non_null(strstr(text, "--device N"));
    }
    free(text);
    unlink(out);
    free((void *)out);
}

/* A few-million-parameter draft beside a GPU target proposes on the CPU,
 * where a pass costs a fraction of a GPU's fixed cost per pass. */
static void test_a_small_draft_beside_a_gpu_target_runs_on_the_cpu(
    void **state)
{
    if (!*state)
        skip();
    struct kk_model *m;
    struct kk_error err = {{0}};
    assert_int_equal(kk_model_open(*state, &m, &err), 0);
    assert_int_equal(kk_draft_backend(m, KK_BACKEND_VULKAN), KK_BACKEND_CPU);
    assert_int_equal(kk_draft_backend(m, KK_BACKEND_AUTO), KK_BACKEND_CPU);
    struct kk_session_params sp = {.n_ctx = 64, .n_threads = 1,
                                   .backend = KK_BACKEND_VULKAN};
    struct kk_session *ds = NULL;
    assert_int_equal(kk_draft_session_new(m, &sp, &ds, &err), 0);
    assert_string_equal(kk_session_backend(ds), "cpu");
    kk_session_free(ds);
    kk_model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_backend_that_does_not_exist_is_refused),
        cmocka_unit_test(test_the_same_tokens_come_from_the_cpu_and_vulkan),
        cmocka_unit_test(test_a_device_out_of_range_is_refused),
        cmocka_unit_test(test_info_devices_lists_what_device_picks),
        cmocka_unit_test(
            test_a_small_draft_beside_a_gpu_target_runs_on_the_cpu),
    };
    return cmocka_run_group_tests(tests, setup, testutil_free_state);
}
