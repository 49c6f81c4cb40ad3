/* test_keys.c — the keybinding table, the man page and the help overlay
 * agree: every key of ui/keys.c is documented in man/kakeya.1's
 * KEYBINDINGS section and listed in the overlay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "keys.h"
#include "testutil.h"

/* The KEYBINDINGS section of the man page (malloc'd), roff escapes for
 * '-' undone so keys compare as typed. */
static char *man_keybindings(void)
{
    size_t len;
    char *man = testutil_read_file("man/kakeya.1", &len);
    assert_non_null(man);
    char *start = strstr(man, ".SH KEYBINDINGS");
    assert_non_null(start);
    char *end = strstr(start + 1, "\n.SH ");
    if (end)
        *end = 0;
    char *out = strdup(start);
    free(man);
    char *w = out;
    for (const char *r = out; *r; r++) {
        if (r[0] == '\\' && r[1] == '-')
            continue;
        *w++ = *r;
    }
    *w = 0;
    return out;
}

static void test_every_key_is_in_the_man_page_keybindings(void **state)
{
    (void)state;
    char *section = man_keybindings();
    size_t n;
    const struct key_binding *t = keys_table(&n);
    assert_true(n >= 10);
    for (size_t i = 0; i < n; i++) {
        char want[96];
        snprintf(want, sizeof want, "\n.B %s\n", t[i].key);
        if (!strstr(section, want))
            fail_msg("key '%s' is not documented in man/kakeya.1 KEYBINDINGS",
                     t[i].key);
    }
    free(section);
}

static void test_every_key_is_in_the_help_overlay(void **state)
{
    (void)state;
    char *text = keys_overlay_text("  /new   start\n");
    assert_non_null(text);
    size_t n;
    const struct key_binding *t = keys_table(&n);
    for (size_t i = 0; i < n; i++) {
        char want[96];
        snprintf(want, sizeof want, "  %s ", t[i].key);
        if (!strstr(text, want))
            fail_msg("key '%s' is missing from the help overlay", t[i].key);
        assert_non_null(strstr(text, t[i].description));
    }
    assert_non_null(strstr(text, "/new   start"));
    free(text);
}

static void test_man_page_documents_no_key_the_table_lacks(void **state)
{
    (void)state;
    char *section = man_keybindings();
    size_t n;
    const struct key_binding *t = keys_table(&n);
    /* A key is the .B line that opens a .TP paragraph. */
    for (char *p = strstr(section, "\n.TP\n.B "); p;
         p = strstr(p + 1, "\n.TP\n.B ")) {
        char key[96];
        if (sscanf(p + 8, "%95[^\n]", key) != 1)
            continue;
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = !strcmp(key, t[i].key);
        if (!found)
            fail_msg("man/kakeya.1 documents key '%s' that ui/keys.c lacks",
                     key);
    }
    free(section);
}

static void test_esc_stops_only_while_streaming(void **state)
{
    (void)state;
    const struct key_binding *k = keys_lookup(27, 1);
    assert_non_null(k);
    assert_int_equal(k->action, KEY_ACTION_STOP);
    assert_null(keys_lookup(27, 0));
    assert_null(keys_lookup('a', 1));
    assert_null(keys_lookup('\r', 0));   /* Enter belongs to readline */
}

static void test_overflow_choices_are_keys_only_while_the_prompt_is_open(
    void **state)
{
    (void)state;
    assert_null(keys_lookup('d', 0));
    assert_null(keys_lookup('s', KEYS_STREAMING));
    const struct key_binding *k = keys_lookup('d', KEYS_CHOOSING);
    assert_non_null(k);
    assert_int_equal(k->action, KEY_ACTION_OVERFLOW_DROP);
    k = keys_lookup('s', KEYS_CHOOSING);
    assert_non_null(k);
    assert_int_equal(k->action, KEY_ACTION_OVERFLOW_SINK);
    k = keys_lookup('R', KEYS_CHOOSING);
    assert_non_null(k);
    assert_int_equal(k->action, KEY_ACTION_OVERFLOW_REFUSE);
    assert_null(keys_lookup('x', KEYS_CHOOSING));
    assert_null(keys_lookup(27, KEYS_CHOOSING));   /* Esc still readline's */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_key_is_in_the_man_page_keybindings),
        cmocka_unit_test(test_every_key_is_in_the_help_overlay),
        cmocka_unit_test(test_man_page_documents_no_key_the_table_lacks),
        cmocka_unit_test(test_esc_stops_only_while_streaming),
        cmocka_unit_test(
            test_overflow_choices_are_keys_only_while_the_prompt_is_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
