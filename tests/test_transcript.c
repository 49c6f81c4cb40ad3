/* test_transcript.c — wrapping and the cost of streaming into the
 * transcript (ui/transcript.c). */
#include <locale.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "screen.h"
#include "transcript.h"

/* The text lines of the last message, joined with '|'. */
static void last_lines(const struct transcript *t, char *out, size_t size)
{
    int last = transcript_n_messages(t) - 1;
    out[0] = 0;
    for (int i = 0; i < transcript_n_lines(t); i++) {
        const struct transcript_line *l = transcript_line_at(t, i);
        if ((int)l->msg != last || l->kind == TRANSCRIPT_LINE_HEADER ||
            l->kind == TRANSCRIPT_LINE_BLANK)
            continue;
        char buf[256];
        transcript_line_text(t, i, buf, sizeof buf);
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s%s", len ? "|" : "", buf);
    }
}

static void test_wraps_at_word_boundaries(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(10);
    transcript_add(t, TRANSCRIPT_USER, "the quick brown fox jumps");
    char out[256];
    last_lines(t, out, sizeof out);
    assert_string_equal(out, "the quick |brown fox |jumps");
    transcript_free(t);
}

static void test_long_word_is_split_at_the_width(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(5);
    transcript_add(t, TRANSCRIPT_USER, "ab abcdefghijkl");
    char out[256];
    last_lines(t, out, sizeof out);
    assert_string_equal(out, "ab |abcde|fghij|kl");
    transcript_free(t);
}

static void test_cjk_characters_take_two_columns(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(6);
    /* five CJK characters: 10 columns, so 3 + 2 per 6-column line */
    transcript_add(t, TRANSCRIPT_USER, "漢字漢字漢");
    char out[256];
    last_lines(t, out, sizeof out);
    assert_string_equal(out, "漢字漢|字漢");
    const struct transcript_line *l =
        transcript_line_at(t, transcript_n_lines(t) - 1);
    assert_int_equal(l->width, 4);
    transcript_free(t);
}

static void test_combining_marks_take_no_columns(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(5);
    /* "e" + COMBINING ACUTE five times: five columns, one line */
    transcript_add(t, TRANSCRIPT_USER,
                   "e\u0301e\u0301e\u0301e\u0301e\u0301");
    assert_int_equal(transcript_n_lines(t), 2);   /* header + one line */
    const struct transcript_line *l = transcript_line_at(t, 1);
    assert_int_equal(l->width, 5);
    transcript_free(t);
}

static void test_code_fences_are_set_apart_and_not_word_wrapped(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(12);
    transcript_add(t, TRANSCRIPT_ASSISTANT,
                   "see:\n```c\nint x = 1; int y;\n```\ndone");
    int kinds[16], n = 0;
    for (int i = 0; i < transcript_n_lines(t) && n < 16; i++)
        kinds[n++] = transcript_line_at(t, i)->kind;
    int want[] = {TRANSCRIPT_LINE_HEADER, TRANSCRIPT_LINE_TEXT,
                  TRANSCRIPT_LINE_FENCE,  TRANSCRIPT_LINE_CODE,
                  TRANSCRIPT_LINE_CODE,   TRANSCRIPT_LINE_FENCE,
                  TRANSCRIPT_LINE_TEXT};
    assert_int_equal(n, 7);
    assert_memory_equal(kinds, want, sizeof want);
    char out[256];
    last_lines(t, out, sizeof out);
    /* code: split by columns (width - 2 for the indent), indented */
    assert_string_equal(out, "see:|```c|  int x = 1;|   int y;|```|done");
    transcript_free(t);
}

static void test_streamed_text_wraps_like_text_added_whole(void **state)
{
    (void)state;
    const char *text = "Speculative decoding: a draft proposes, the target "
                       "verifies.\n```\ncode that is long enough to split\n"
                       "```\n漢字 and e\u0301 mixed   with  spaces end";
    struct transcript *whole = transcript_new(17), *streamed = transcript_new(17);
    transcript_add(whole, TRANSCRIPT_ASSISTANT, text);
    transcript_add(streamed, TRANSCRIPT_ASSISTANT, "");
    for (size_t i = 0; text[i];) {
        size_t n = 1;   /* byte by byte, splitting UTF-8 too */
        transcript_append(streamed, text + i, n);
        i += n;
    }
    char a[2048], b[2048];
    last_lines(whole, a, sizeof a);
    last_lines(streamed, b, sizeof b);
    assert_string_equal(a, b);
    transcript_free(whole);
    transcript_free(streamed);
}

/* The claim the chat's speed rests on: an append re-wraps a constant
 * number of lines, however many messages and lines came before. */
static void test_append_rewraps_a_constant_number_of_lines(void **state)
{
    (void)state;
    uint64_t per_append[2];
    int sizes[2] = {10, 10000};
    for (int k = 0; k < 2; k++) {
        struct transcript *t = transcript_new(60);
        for (int i = 0; i < sizes[k]; i++)
            transcript_add(t, i % 2 ? TRANSCRIPT_ASSISTANT : TRANSCRIPT_USER,
                           "a message of some length that wraps over more "
                           "than one line of sixty columns, twice at least");
        transcript_add(t, TRANSCRIPT_ASSISTANT, "");
        uint64_t before = transcript_lines_wrapped(t);
        for (int i = 0; i < 1000; i++)
            transcript_append(t, "word ", 5);
        per_append[k] = transcript_lines_wrapped(t) - before;
        assert_true(transcript_n_lines(t) > sizes[k]);
        transcript_free(t);
    }
    assert_int_equal(per_append[0], per_append[1]);
    /* about one line per append (plus one per new line), not the message */
    assert_true(per_append[1] <= 1000 + 1000 * 5 / 60 + 1);
}

static void test_scrolling_is_clamped_and_follows_the_end(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(20);
    for (int i = 0; i < 50; i++)
        transcript_add(t, TRANSCRIPT_USER, "hello");
    int rows = 10, n = transcript_n_lines(t);
    assert_int_equal(transcript_first_visible(t, rows), n - rows);
    transcript_scroll(t, 1000000, rows);
    assert_int_equal(transcript_first_visible(t, rows), 0);
    /* scrolled up, new lines do not move the view */
    transcript_add(t, TRANSCRIPT_USER, "more");
    assert_int_equal(transcript_first_visible(t, rows), 0);
    transcript_scroll(t, -1000000, rows);
    assert_int_equal(transcript_first_visible(t, rows),
                     transcript_n_lines(t) - rows);
    transcript_free(t);
}

static void test_truncate_drops_the_lines_of_removed_messages(void **state)
{
    (void)state;
    struct transcript *t = transcript_new(20);
    transcript_add(t, TRANSCRIPT_USER, "one");
    int after_one = transcript_n_lines(t);
    transcript_add(t, TRANSCRIPT_ASSISTANT, "two\nthree");
    transcript_truncate(t, 1);
    assert_int_equal(transcript_n_messages(t), 1);
    assert_int_equal(transcript_n_lines(t), after_one);
    transcript_free(t);
}

static bool inside(const struct rect *r, int rows, int cols)
{
    return r->h == 0 || (r->y >= 0 && r->x >= 0 && r->y + r->h <= rows &&
                         r->x + r->w <= cols);
}

static void test_layout_fits_every_size_and_folds_panes(void **state)
{
    (void)state;
    for (int rows = 1; rows <= 80; rows++) {
        for (int cols = 1; cols <= 220; cols += 3) {
            struct layout l;
            layout_compute(rows, cols, 3, &l);
            bool small = rows < SCREEN_MIN_ROWS || cols < SCREEN_MIN_COLS;
            assert_int_equal(l.too_small, small);
            if (small)
                continue;
            const struct rect *all[] = {&l.convlist, &l.transcript,
                                        &l.acceptance, &l.kv, &l.speed,
                                        &l.status, &l.input};
            for (size_t i = 0; i < 7; i++)
                assert_true(inside(all[i], rows, cols));
            assert_true(l.transcript.h >= 1);
            assert_int_equal(l.input.h >= 1, true);
            assert_int_equal(l.panes_folded, l.acceptance.h == 0);
        }
    }
    struct layout l;
    layout_compute(12, 40, 1, &l);
    assert_true(l.panes_folded);
    layout_compute(40, 120, 1, &l);
    assert_false(l.panes_folded);
    assert_true(l.convlist.w > 0);
}

int main(void)
{
    if (!setlocale(LC_CTYPE, "C.UTF-8")) {
        fprintf(stderr, "test_transcript: no C.UTF-8 locale\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wraps_at_word_boundaries),
        cmocka_unit_test(test_long_word_is_split_at_the_width),
        cmocka_unit_test(test_cjk_characters_take_two_columns),
        cmocka_unit_test(test_combining_marks_take_no_columns),
        cmocka_unit_test(test_code_fences_are_set_apart_and_not_word_wrapped),
        cmocka_unit_test(test_streamed_text_wraps_like_text_added_whole),
        cmocka_unit_test(test_append_rewraps_a_constant_number_of_lines),
        cmocka_unit_test(test_scrolling_is_clamped_and_follows_the_end),
        cmocka_unit_test(test_truncate_drops_the_lines_of_removed_messages),
        cmocka_unit_test(test_layout_fits_every_size_and_folds_panes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
