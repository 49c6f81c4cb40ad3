/* test_tokenizer.c — the tokenizers against llama.cpp.
 *
 * Golden data (../shared/golden/tokenizer-*.json): for every string, in both
 * parse_special modes, the ids must be llama.cpp's exactly, every id's piece
 * must be llama_token_to_piece(special=true)'s bytes, and the streamed
 * detokenization must equal llama_detokenize's. Plus llama.cpp's own vocab
 * test vectors (the .inp/.out files in ../shared/models), the streaming detokenizer on
 * characters split across byte tokens, end-of-generation sets, hostile
 * input, speed, and load errors on hand-made vocabularies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "pretokenize.h"
#include "testutil.h"
#include "tokenizer.h"
#include "unicode.h"

/* ---- helpers ------------------------------------------------------------ */

struct loaded {
    struct gguf *g;
    struct tokenizer *t;
};

static struct loaded load_path(const char *path)
{
    struct loaded l = {0};
    struct kk_error err = {{0}};
    if (gguf_open(path, &l.g, &err) != 0)
        fail_msg("%s", err.msg);
    if (tok_load(l.g, &l.t, &err) != 0)
        fail_msg("tok_load(%s): %s", path, err.msg);
    return l;
}

static void unload(struct loaded *l)
{
    tok_free(l->t);
    gguf_close(l->g);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Encodes into a malloc'd array (checking that the count is stable when
 * the buffer is too small). */
static int32_t *encode(const struct tokenizer *t, const char *s, size_t len,
                       bool add_bos, bool parse_special, int *n)
{
    struct kk_error err = {{0}};
    int32_t probe[1];
    int total = tok_encode(t, s, len, add_bos, parse_special, probe, 1, &err);
    if (total < 0)
        fail_msg("tok_encode: %s", err.msg);
    int32_t *ids = malloc(((size_t)total + 1) * sizeof *ids);
    assert_non_null(ids);
    int again = tok_encode(t, s, len, add_bos, parse_special, ids, total, &err);
    assert_int_equal(again, total);
    *n = total;
    return ids;
}

static char *hex_of(const unsigned char *s, size_t n)
{
    char *h = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++)
        sprintf(h + 2 * i, "%02x", s[i]);
    h[2 * n] = '\0';
    return h;
}

/* Prints the first few ids of both lists, for a failure message. */
static void print_ids(const char *what, const int32_t *ids, int n)
{
    fprintf(stderr, "    %s (%d):", what, n);
    for (int i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* ---- golden ------------------------------------------------------------- */

/* Checks one mode of one item; returns the number of mismatches. */
static int check_mode(const struct tokenizer *t, const unsigned char *text,
                      size_t len, bool add_bos, bool parse_special,
                      const cJSON *block, int item)
{
    const char *mode = parse_special ? "parse_special" : "no_parse_special";
    int bad = 0, n;
    int32_t *ids = encode(t, (const char *)text, len, add_bos, parse_special,
                          &n);
    const cJSON *want = cJSON_GetObjectItem(block, "ids");
    int n_want = cJSON_GetArraySize(want);
    int32_t *want_ids = malloc(((size_t)n_want + 1) * sizeof *want_ids);
    bool same = n == n_want;
    for (int i = 0; i < n_want; i++) {
        want_ids[i] = (int32_t)cJSON_GetArrayItem(want, i)->valueint;
        same = same && ids[i] == want_ids[i];
    }
    if (!same) {
        fprintf(stderr, "  item %d (%s) ids differ: text %s\n", item, mode,
                cJSON_GetObjectItem(block, "detok")->valuestring);
        print_ids("got ", ids, n);
        print_ids("want", want_ids, n_want);
        bad++;
    }

    /* Pieces of the golden ids, and their streamed concatenation. */
    const cJSON *pieces = cJSON_GetObjectItem(block, "pieces_hex");
    struct tok_stream st;
    tok_stream_init(&st);
    size_t cap = 1024 + 8 * len, got_len = 0;
    char *got = malloc(cap + 512);
    for (int i = 0; i < n_want; i++) {
        char buf[1024];
        int k = tok_piece(t, want_ids[i], true, buf, sizeof buf);
        assert_in_range(k, 0, (int)sizeof buf);
        char *h = hex_of((unsigned char *)buf, (size_t)k);
        const char *wh = cJSON_GetArrayItem(pieces, i)->valuestring;
        if (strcmp(h, wh) != 0) {
            fprintf(stderr, "  item %d (%s) piece of id %d: got %s want %s\n",
                    item, mode, want_ids[i], h, wh);
            bad++;
        }
        free(h);
        got_len += (size_t)tok_stream_push(t, &st, want_ids[i], true,
                                           got + got_len, 512);
    }
    got_len += (size_t)tok_stream_finish(&st, got + got_len, 512);
    char *gh = hex_of((unsigned char *)got, got_len);
    const char *dh = cJSON_GetObjectItem(block, "detok_hex")->valuestring;
    if (strcmp(gh, dh) != 0) {
        fprintf(stderr, "  item %d (%s) detok: got %s want %s\n", item, mode,
                gh, dh);
        bad++;
    }
    free(gh);
    free(got);
    free(want_ids);
    free(ids);
    return bad;
}

static void check_golden(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/tokenizer-%s.json", name);
    const char *path = testutil_shared_path(rel);
    if (!path)
        skip();
    cJSON *doc = testutil_read_json(path);
    assert_non_null(doc);
    snprintf(rel, sizeof rel, "golden/models/%s",
             cJSON_GetObjectItem(doc, "model_file")->valuestring);
    struct loaded l = load_path(testutil_shared_path(rel));

    bool add_bos = cJSON_IsTrue(cJSON_GetObjectItem(doc, "add_bos"));
    assert_int_equal(tok_add_bos(l.t), add_bos);
    assert_int_equal(tok_bos(l.t), cJSON_GetObjectItem(doc, "bos")->valueint);
    assert_int_equal(tok_eos(l.t), cJSON_GetObjectItem(doc, "eos")->valueint);
    assert_int_equal(tok_n_vocab(l.t),
                     cJSON_GetObjectItem(doc, "n_vocab")->valueint);

    const cJSON *items = cJSON_GetObjectItem(doc, "items");
    int bad = 0, n_items = cJSON_GetArraySize(items);
    assert_true(n_items >= 48);
    for (int i = 0; i < n_items; i++) {
        const cJSON *it = cJSON_GetArrayItem(items, i);
        size_t len;
        unsigned char *text = testutil_unhex(
            cJSON_GetObjectItem(it, "text_hex")->valuestring, &len);
        assert_non_null(text);
        bad += check_mode(l.t, text, len, add_bos, true,
                          cJSON_GetObjectItem(it, "parse_special"), i);
        bad += check_mode(l.t, text, len, add_bos, false,
                          cJSON_GetObjectItem(it, "no_parse_special"), i);
        free(text);
    }
    unload(&l);
    cJSON_Delete(doc);
    if (bad)
        fail_msg("%s: %d mismatches with llama.cpp (listed above)", name, bad);
}

static void test_smollm2_ids_pieces_and_detok_equal_llama_cpp(void **state)
{
    (void)state;
    check_golden("smollm2");
}

static void test_llama_spm_ids_pieces_and_detok_equal_llama_cpp(void **state)
{
    (void)state;
    check_golden("llama-spm");
}

static void test_qwen_ids_pieces_and_detok_equal_llama_cpp(void **state)
{
    (void)state;
    check_golden("qwen");
}

static void test_gemma3_ids_pieces_and_detok_equal_llama_cpp(void **state)
{
    (void)state;
    check_golden("gemma3");
}

static void test_smollm2_trunc512_ids_pieces_and_detok_equal_llama_cpp(
    void **state)
{
    (void)state;
    check_golden("smollm2-trunc512");
}

/* ---- llama.cpp's vocab test vectors -------------------------------------- */

static void check_vectors(const char *vocab)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.inp", vocab);
    const char *p = testutil_shared_path(rel);
    if (!p)
        skip();
    size_t inp_len, out_len;
    char *inp = testutil_read_file(p, &inp_len);
    snprintf(rel, sizeof rel, "models/%s.out", vocab);
    char *out = testutil_read_file(testutil_shared_path(rel), &out_len);
    snprintf(rel, sizeof rel, "models/%s", vocab);
    assert_non_null(inp);
    assert_non_null(out);
    struct loaded l = load_path(testutil_shared_path(rel));

    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *in_cur = inp, *out_cur = out;
    int n_cases = 0, bad = 0;
    for (;;) {
        char *end = strstr(in_cur, sep);
        if (!end)
            break;
        char *line_end = strchr(out_cur, '\n');
        assert_non_null(line_end);
        *line_end = '\0';
        int n;
        int32_t *ids = encode(l.t, in_cur, (size_t)(end - in_cur), false,
                              false, &n);
        char *want = out_cur;
        bool same = true;
        int k = 0;
        for (char *tok = strtok(want, " "); tok; tok = strtok(NULL, " "), k++)
            same = same && k < n && ids[k] == atoi(tok);
        if (!same || k != n) {
            fprintf(stderr, "  %s case %d: '%.*s' differs\n", vocab, n_cases,
                    (int)(end - in_cur), in_cur);
            print_ids("got", ids, n);
            bad++;
        }
        free(ids);
        n_cases++;
        in_cur = end + strlen(sep);
        out_cur = line_end + 1;
    }
    unload(&l);
    free(inp);
    free(out);
    assert_true(n_cases >= 40);
    if (bad)
        fail_msg("%s: %d of %d test vectors differ", vocab, bad, n_cases);
}

static void test_llama_spm_vocab_vectors_equal_llama_cpp(void **state)
{
    (void)state;
    check_vectors("ggml-vocab-llama-spm.gguf");
}

static void test_gpt2_vocab_vectors_equal_llama_cpp(void **state)
{
    (void)state;
    check_vectors("ggml-vocab-gpt-2.gguf");
}

/* ---- streaming ---------------------------------------------------------- */

static void test_stream_holds_a_character_split_across_byte_tokens(
    void **state)
{
    (void)state;
    const char *p = testutil_shared_path("models/ggml-vocab-llama-spm.gguf");
    if (!p)
        skip();
    struct loaded l = load_path(p);
    /* "€" is E2 82 AC: three byte tokens. */
    int32_t e2 = tok_find(l.t, "<0xE2>"), x82 = tok_find(l.t, "<0x82>"),
            ac = tok_find(l.t, "<0xAC>"), a = tok_find(l.t, "a");
    assert_true(e2 >= 0 && x82 >= 0 && ac >= 0 && a >= 0);
    struct tok_stream st;
    char out[300];
    tok_stream_init(&st);
    assert_int_equal(tok_stream_push(l.t, &st, a, false, out, sizeof out), 1);
    assert_string_equal(out, "a");
    assert_int_equal(tok_stream_push(l.t, &st, e2, false, out, sizeof out), 0);
    assert_int_equal(tok_stream_push(l.t, &st, x82, false, out, sizeof out), 0);
    assert_int_equal(tok_stream_push(l.t, &st, ac, false, out, sizeof out), 3);
    assert_string_equal(out, "\xe2\x82\xac");
    assert_int_equal(tok_stream_finish(&st, out, sizeof out), 0);

    /* Never completed: held, then flushed as one U+FFFD. */
    tok_stream_init(&st);
    assert_int_equal(tok_stream_push(l.t, &st, e2, false, out, sizeof out), 0);
    assert_int_equal(tok_stream_push(l.t, &st, x82, false, out, sizeof out), 0);
    assert_int_equal(tok_stream_finish(&st, out, sizeof out), 3);
    assert_string_equal(out, "\xef\xbf\xbd");

    /* Interrupted by a new character: the stray start becomes U+FFFD and the
     * new character still comes out. */
    tok_stream_init(&st);
    assert_int_equal(tok_stream_push(l.t, &st, e2, false, out, sizeof out), 0);
    assert_int_equal(tok_stream_push(l.t, &st, a, false, out, sizeof out), 4);
    assert_string_equal(out, "\xef\xbf\xbd" "a");
    unload(&l);
}

/* ---- end of generation, control ---------------------------------------- */

static void test_gemma3_eog_is_eos_end_of_turn_and_promoted_slash_s(
    void **state)
{
    (void)state;
    const char *p = testutil_shared_path("golden/models/gemma3-f32.gguf");
    if (!p)
        skip();
    struct loaded l = load_path(p);
    assert_true(tok_is_eog(l.t, 1));   /* <eos> */
    assert_true(tok_is_eog(l.t, 106)); /* <end_of_turn> */
    assert_true(tok_is_eog(l.t, 212)); /* </s>, user-defined in the vocab */
    assert_true(tok_is_control(l.t, 212));
    assert_false(tok_is_eog(l.t, 2));  /* <bos> */
    assert_false(tok_is_eog(l.t, 105)); /* <start_of_turn> */
    assert_int_equal(tok_find(l.t, "</s>"), 212);
    char buf[16];
    assert_int_equal(tok_piece(l.t, 212, false, buf, sizeof buf), 0);
    assert_int_equal(tok_piece(l.t, 212, true, buf, sizeof buf), 4);
    unload(&l);
}

static void test_qwen_eog_includes_im_end_endoftext_and_slash_s(void **state)
{
    (void)state;
    const char *p = testutil_shared_path("golden/models/qwen2-f32.gguf");
    if (!p)
        skip();
    struct loaded l = load_path(p);
    assert_true(tok_is_eog(l.t, tok_find(l.t, "<|im_end|>")));
    assert_true(tok_is_eog(l.t, tok_find(l.t, "<|endoftext|>")));
    assert_int_equal(tok_find(l.t, "</s>"), 128247);
    assert_true(tok_is_eog(l.t, 128247));
    assert_false(tok_is_eog(l.t, tok_find(l.t, "<|im_start|>")));
    assert_false(tok_is_eog(l.t, tok_find(l.t, "Hello")));
    unload(&l);
}

/* ---- hostile input, API edges ------------------------------------------ */

static void test_invalid_utf8_is_tokenized_without_crashing(void **state)
{
    (void)state;
    static const char *const models[] = {
        "golden/models/llama-smollm2-f32.gguf",
        "golden/models/llama-spm-f16.gguf",
    };
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        const char *p = testutil_shared_path(models[m]);
        if (!p)
            skip();
        struct loaded l = load_path(p);
        unsigned char junk[4096];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof junk; i++) {
            x = x * 1103515245u + 12345u;
            junk[i] = (unsigned char)(x >> 16);
        }
        static const char *const edge[] = {
            "\xff", "\xc3", "\xe2\x82", "\xf0\x9f\x98", "\x80\x80",
            "\xf8\x88\x80\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
            "<|im_start|\xff", "a\0b",
        };
        int n;
        int32_t *ids = encode(l.t, (char *)junk, sizeof junk, true, true, &n);
        assert_true(n > 0);
        for (int i = 0; i < n; i++)
            assert_in_range(ids[i], 0, tok_n_vocab(l.t) - 1);
        free(ids);
        for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
            ids = encode(l.t, edge[e], strlen(edge[e]) + (e == 9 ? 2 : 0),
                         false, false, &n);
            assert_true(n > 0);
            free(ids);
        }
        unload(&l);
    }
}

static void test_encode_reports_total_count_when_buffer_is_small(void **state)
{
    (void)state;
    const char *p = testutil_shared_path("golden/models/llama-smollm2-f32.gguf");
    if (!p)
        skip();
    struct loaded l = load_path(p);
    struct kk_error err = {{0}};
    int32_t ids[3] = {-7, -7, -7};
    const char *s = "Hello, world! How are you today?";
    int n = tok_encode(l.t, s, strlen(s), false, false, ids, 2, &err);
    assert_true(n > 2);
    assert_int_equal(ids[2], -7); /* nothing written past cap */
    assert_int_equal(tok_encode(l.t, "", 0, false, false, ids, 3, &err), 0);
    assert_int_equal(tok_piece(l.t, -1, true, (char *)ids, 4), -1);
    assert_int_equal(tok_piece(l.t, tok_n_vocab(l.t), true, (char *)ids, 4),
                     -1);
    assert_null(tok_text(l.t, tok_n_vocab(l.t)));
    assert_string_equal(tok_text(l.t, 2), "<|im_end|>");
    unload(&l);
}

/* ---- speed -------------------------------------------------------------- */

static void test_100kb_of_text_tokenizes_in_well_under_a_second(void **state)
{
    (void)state;
    const char *p = testutil_shared_path("golden/models/llama-smollm2-f32.gguf");
    if (!p)
        skip();
    struct loaded l = load_path(p);
    static const char para[] =
        "The quick brown fox jumps over the lazy dog; 3.14159 and 2,718,281. "
        "def fib(n):\n    return n if n < 2 else fib(n-1)\n"
        "Ångström, 日本語のテキスト, Привет! 😀 <|im_end|>\n";
    size_t len = 100 * 1024;
    char *text = malloc(len);
    for (size_t i = 0; i < len; i++)
        text[i] = para[i % (sizeof para - 1)];
    double t0 = now_s();
    int n;
    int32_t *ids = encode(l.t, text, len, false, true, &n);
    double dt = now_s() - t0;
    fprintf(stderr, "  100 KB -> %d tokens in %.3f s (two passes)\n", n, dt);
    assert_true(n > 10000);
    assert_true(dt < 1.0);
    free(ids);
    free(text);
    unload(&l);
}

static void test_large_vocabularies_load_quickly(void **state)
{
    (void)state;
    static const char *const models[] = {
        "golden/models/qwen2-f32.gguf", "golden/models/gemma3-f32.gguf",
    };
    for (size_t m = 0; m < 2; m++) {
        const char *p = testutil_shared_path(models[m]);
        if (!p)
            skip();
        struct gguf *g = NULL;
        struct tokenizer *t = NULL;
        struct kk_error err = {{0}};
        assert_int_equal(gguf_open(p, &g, &err), 0);
        double t0 = now_s();
        assert_int_equal(tok_load(g, &t, &err), 0);
        double dt = now_s() - t0;
        fprintf(stderr, "  %s: %d tokens loaded in %.3f s\n", models[m],
                tok_n_vocab(t), dt);
        /* 200 ms is the target in a plain build; sanitizers are slower. */
        assert_true(dt < 1.0);
        tok_free(t);
        gguf_close(g);
    }
}

/* ---- hand-made vocabularies --------------------------------------------- */

/* An SPM vocabulary of the given tokens (all normal unless types given). */
static struct loaded load_fixture(const char *model, const char *const *toks,
                                  int n, const int32_t *types,
                                  struct kk_error *err, int *rc)
{
    struct gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    float scores[32];
    for (int i = 0; i < n; i++)
        scores[i] = (float)-i;
    assert_int_equal(gguf_writer_set_str(w, "tokenizer.ggml.model", model), 0);
    assert_int_equal(gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", toks,
                                             (uint64_t)n), 0);
    assert_int_equal(gguf_writer_set_arr(w, "tokenizer.ggml.scores",
                                         GGUF_FLOAT32, scores, (uint64_t)n), 0);
    if (types)
        assert_int_equal(gguf_writer_set_arr(w, "tokenizer.ggml.token_type",
                                             GGUF_INT32, types, (uint64_t)n),
                         0);
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_tmp_path("tok.gguf"));
    assert_int_equal(gguf_writer_save(w, path, err), 0);
    gguf_writer_free(w);
    struct loaded l = {0};
    assert_int_equal(gguf_open(path, &l.g, err), 0);
    unlink(path);
    *rc = tok_load(l.g, &l.t, err);
    return l;
}

static void test_unknown_tokenizer_model_fails_with_its_name(void **state)
{
    (void)state;
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "a"};
    struct kk_error err = {{0}};
    int rc;
    struct loaded l = load_fixture("bert", toks, 4, NULL, &err, &rc);
    assert_int_equal(rc, -1);
    assert_null(l.t);
    assert_non_null(strstr(err.msg, "'bert'"));
    gguf_close(l.g);

    /* gpt2 without merges cannot work either. */
    l = load_fixture("gpt2", toks, 4, NULL, &err, &rc);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err.msg, "merges"));
    gguf_close(l.g);
}

static void test_longer_special_token_is_cut_out_first(void **state)
{
    (void)state;
    /* "ab" and "bcd" overlap in "abcd": llama.cpp takes the longer one
     * first, wherever it is, leaving "a" to plain tokenization. */
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "ab", "bcd",
                                       "\xe2\x96\x81", "a", "c", "d"};
    static const int32_t types[] = {2, 3, 3, 4, 4, 1, 1, 1, 1};
    struct kk_error err = {{0}};
    int rc, n;
    struct loaded l = load_fixture("llama", toks, 9, types, &err, &rc);
    if (rc)
        fail_msg("%s", err.msg);
    int32_t *ids = encode(l.t, "abcd", 4, false, false, &n);
    /* "▁a" is no token: "▁" then "a"; then the user-defined "bcd". */
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 5);
    assert_int_equal(ids[1], 6);
    assert_int_equal(ids[2], 4);
    free(ids);
    /* Control tokens are text unless parse_special. */
    ids = encode(l.t, "</s>", 4, false, true, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    free(ids);
    unload(&l);
}

/* ---- pre-tokenizer splits --------------------------------------------- */

/* The words of text under kind, joined with '|'. */
static void check_split(enum pretok_kind kind, const char *text,
                        const char *want)
{
    size_t len = strlen(text);
    uint32_t cpts[256];
    uint16_t flags[256];
    size_t lens[256], scratch[256];
    assert_true(len < 256);
    size_t n = uni_decode(text, len, cpts);
    for (size_t i = 0; i < n; i++)
        flags[i] = (uint16_t)uni_flags(cpts[i]);
    size_t n_words = pretok_split(kind, cpts, flags, n, lens, scratch);
    char got[1024];
    size_t g = 0, start = 0;
    for (size_t w = 0; w < n_words; w++) {
        if (w)
            got[g++] = '|';
        for (size_t i = start; i < start + lens[w]; i++)
            g += (size_t)uni_encode(cpts[i], got + g);
        start += lens[w];
    }
    got[g] = '\0';
    assert_int_equal(start, n);
    assert_string_equal(got, want);
}

static void test_llama3_split_groups_digits_by_three_and_ignores_case(
    void **state)
{
    (void)state;
    check_split(PRETOK_LLAMA3, "I'M 1234567 ok\n\n  x",
                "I|'M| |123|456|7| ok|\n\n| | x");
    check_split(PRETOK_LLAMA3, "hi!!\n\nyo  ", "hi|!!\n\n|yo|  ");
}

static void test_qwen2_and_smollm_splits_take_digits_one_by_one(void **state)
{
    (void)state;
    check_split(PRETOK_QWEN2, "ab12 \u00e9t\u00e9", "ab|1|2| \u00e9t\u00e9");
    check_split(PRETOK_SMOLLM, "x 42", "x| |4|2");
}

static void test_gpt2_and_default_splits(void **state)
{
    (void)state;
    check_split(PRETOK_GPT2, "I'M it's  a\tb", "I|'|M| it|'s| | a|\t|b");
    check_split(PRETOK_DEFAULT, "a+b=3.14159, ok!!",
                "a|+|b|=|3|.|141|59|,| ok|!!");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_ids_pieces_and_detok_equal_llama_cpp),
        cmocka_unit_test(test_llama_spm_ids_pieces_and_detok_equal_llama_cpp),
        cmocka_unit_test(test_qwen_ids_pieces_and_detok_equal_llama_cpp),
        cmocka_unit_test(test_gemma3_ids_pieces_and_detok_equal_llama_cpp),
        cmocka_unit_test(
            test_smollm2_trunc512_ids_pieces_and_detok_equal_llama_cpp),
        cmocka_unit_test(test_llama_spm_vocab_vectors_equal_llama_cpp),
        cmocka_unit_test(test_gpt2_vocab_vectors_equal_llama_cpp),
        cmocka_unit_test(test_stream_holds_a_character_split_across_byte_tokens),
        cmocka_unit_test(test_gemma3_eog_is_eos_end_of_turn_and_promoted_slash_s),
        cmocka_unit_test(test_qwen_eog_includes_im_end_endoftext_and_slash_s),
        cmocka_unit_test(test_invalid_utf8_is_tokenized_without_crashing),
        cmocka_unit_test(test_encode_reports_total_count_when_buffer_is_small),
        cmocka_unit_test(test_100kb_of_text_tokenizes_in_well_under_a_second),
        cmocka_unit_test(test_large_vocabularies_load_quickly),
        cmocka_unit_test(test_unknown_tokenizer_model_fails_with_its_name),
        cmocka_unit_test(test_longer_special_token_is_cut_out_first),
        cmocka_unit_test(
            test_llama3_split_groups_digits_by_three_and_ignores_case),
        cmocka_unit_test(test_qwen2_and_smollm_splits_take_digits_one_by_one),
        cmocka_unit_test(test_gpt2_and_default_splits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
