/* test_golden.c — the engine reproduces llama.cpp on every golden model,
 * on the CPU (tests/lib/golden_check.h says what is checked). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "golden_check.h"

static void test_engine_matches_llama_cpp(void **state)
{
    golden_check_model(*state, KK_BACKEND_CPU);
}

int main(void)
{
    struct CMUnitTest tests[64];
    for (int i = 0; i < golden_n_cases && i < 64; i++) {
        struct CMUnitTest t = cmocka_unit_test_prestate(
            test_engine_matches_llama_cpp, (void *)&golden_cases[i]);
        t.name = golden_cases[i].model;
        tests[i] = t;
    }
    return _cmocka_run_group_tests("golden", tests, (size_t)golden_n_cases,
                                   NULL, NULL);
}
