/* test_kv_cli.c — choosing the KV cache's type from the command line:
 * `--kv f16|f32|q8_0` reaches the session's cache in `kakeya bench` (whose
 * JSON reports the type the session holds, so a benchmark says what it
 * measured), and a type that does not exist is refused by run and bench
 * alike with a message that names the choices.
 *
 * Runs the built binary (build/kakeya, or $KK_BIN) on the real tiny model
 * ../shared/models/aidreams260K-F32.gguf, on the CPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>

#include "testutil.h"

static int setup(void **state)
{
    return testutil_binary_on_model(state, "test_kv_cli",
                                    "models/aidreams260K-F32.gguf");
}

static void test_a_kv_type_that_does_not_exist_is_refused(void **state)
{
    if (!*state)
        skip();
    static const char *const commands[] = {
        "run -p hi -n 1", "bench --quick --bandwidth 10"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const char *err = testutil_tmp_path("kv-err");
        assert_int_equal(testutil_sh("'%s' %s -m '%s' --kv q4 > /dev/null "
                                     "2> '%s'",
                                     testutil_binary(), commands[i],
                                     (char *)*state, err),
                         2);
        size_t len;
        char *msg = testutil_read_file(err, &len);
        assert_non_null(msg);
        assert_non_null(strstr(msg, "--kv wants f16, f32 or q8_0, not 'q4'"));
        free(msg);
        unlink(err);
    }
}

/* The "kv_type" of `kakeya bench --kv TYPE`'s engine object. */
static char *bench_kv_type(const char *model, const char *type)
{
    const char *out = testutil_tmp_path("kv-bench");
    assert_int_equal(testutil_sh("'%s' bench -m '%s' --quick --context 16 "
                                 "--bandwidth 10 --kv %s > '%s'",
                                 testutil_binary(), model, type, out),
                     0);
    cJSON *json = testutil_read_json(out);
    assert_non_null(json);
    const cJSON *engine = cJSON_GetObjectItem(json, "engine");
    const cJSON *kv = cJSON_GetObjectItem(engine, "kv_type");
    const cJSON *ms = cJSON_GetObjectItem(engine, "decode_ms_median");
    assert_true(cJSON_IsString(kv));
    assert_true(cJSON_IsNumber(ms) && ms->valuedouble > 0);
    char *got = strdup(kv->valuestring);
    cJSON_Delete(json);
    unlink(out);
    return got;
}

static void test_bench_measures_the_cache_type_it_is_given(void **state)
{
    if (!*state)
        skip();
    static const char *const types[] = {"q8_0", "f32", "f16"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char *got = bench_kv_type(*state, types[i]);
        assert_string_equal(got, types[i]);
        free(got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_kv_type_that_does_not_exist_is_refused),
        cmocka_unit_test(test_bench_measures_the_cache_type_it_is_given),
    };
    return cmocka_run_group_tests(tests, setup, testutil_free_state);
}
