/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kakeya.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *testutil_shared_dir(void)
{
    const char *dir = getenv("KK_SHARED");
    if (!dir || !*dir)
        dir = "../shared";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr,
                "\n*** SKIP: shared data folder '%s' not found — golden "
                "tests are NOT being run (set KK_SHARED) ***\n\n", dir);
        return NULL;
    }
    return dir;
}

const char *testutil_shared_path(const char *rel)
{
    static char buf[4096];
    const char *dir = testutil_shared_dir();
    if (!dir)
        return NULL;
    snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    return buf;
}

void testutil_filter_from_env(void)
{
    const char *pattern = getenv("KK_TEST_FILTER");
    if (pattern && *pattern)
        cmocka_set_test_filter(pattern);
}

char *testutil_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

cJSON *testutil_read_json(const char *path)
{
    size_t len;
    char *text = testutil_read_file(path, &len);
    if (!text)
        return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    return j;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

unsigned char *testutil_unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex);
    if (n % 2)
        return NULL;
    unsigned char *out = malloc(n / 2 + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    out[n / 2] = 0;
    *len = n / 2;
    return out;
}

const char *testutil_tmp_path(const char *stem)
{
    static char buf[4096];
    static unsigned counter;
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    snprintf(buf, sizeof buf, "%s/kakeya-test-%d-%u-%s", dir, (int)getpid(),
             counter++, stem);
    return buf;
}

const char *testutil_binary(void)
{
    const char *bin = getenv("KK_BIN");
    return bin && *bin ? bin : "build/kakeya";
}

int testutil_binary_on_model(void **state, const char *test,
                             const char *model_rel)
{
    const char *model = testutil_shared_path(model_rel);
    *state = NULL;
    if (!model || access(testutil_binary(), X_OK)) {
        fprintf(stderr, "SKIP %s: %s\n", test,
                model ? "the kakeya binary is not built" : "no ../shared");
        return 0;
    }
    *state = strdup(model);
    return *state ? 0 : -1;
}

int testutil_free_state(void **state)
{
    free(*state);
    *state = NULL;
    return 0;
}

struct kk_model *testutil_open_golden(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/models/%s.gguf", name);
    const char *path = testutil_shared_path(rel);
    if (!path)
        return NULL;
    if (access(path, R_OK)) {
        /* A partial copy of the golden data (the GPU machine carries only
         * what fits): say so, loudly, and let the test skip. */
        fprintf(stderr, "SKIP: %s is absent\n", path);
        return NULL;
    }
    struct kk_model *m;
    struct kk_error err;
    if (kk_model_open(path, &m, &err))
        fail_msg("%s", err.msg);
    return m;
}

int testutil_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int testutil_prompt(struct kk_model *m, const char *text, int32_t *ids)
{
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_error err;
    return kk_tokenize(m, text, strlen(text), info.add_bos, false, ids, 256,
                       &err);
}

struct kk_model *testutil_open_default_model(void)
{
    struct kk_model *m;
    struct kk_error err = {{0}};
    if (kk_model_open("data/models/kakeya-chat.gguf", &m, &err))
        fail_msg("the default model: %s", err.msg);
    return m;
}

enum { DRAWS = 48 };

static bool collect_token(void *ud, int32_t id, const char *text,
                          const struct kk_stats *st)
{
    (void)text, (void)st;
    int32_t *ids = ud;
    if (id >= 0 && ids[DRAWS] < DRAWS)
        ids[ids[DRAWS]++] = id;
    return true;
}

/* DRAWS tokens from the prompt, each drawn from the logits on the host
 * (in_pass false) or in the pass (kk_session_eval_sample). */
static void draw_tokens(struct kk_session *s, const int32_t *prompt, int n,
                        const struct kk_sampling *p, bool in_pass,
                        int32_t *out, int32_t n_vocab)
{
    struct kk_error err = {{0}};
    float *scratch = malloc(2 * (size_t)n_vocab * sizeof *scratch);
    assert_non_null(scratch);
    uint64_t rng = kk_rng_seed(p->seed);
    kk_session_trim(s, 0);
    const int32_t *ids = prompt;
    for (int i = 0; i < DRAWS; i++) {
        const int rc = in_pass ? kk_session_eval_sample(s, ids, n, p, &rng,
                                                        NULL, NULL, &err)
                               : kk_session_eval(s, ids, n, false, NULL,
                                                 NULL, &err);
        if (rc)
            fail_msg("%s", err.msg);
        if (in_pass) {
            assert_null(kk_session_logits(s, 0));
            out[i] = kk_session_token(s, 0);
        } else {
            assert_int_equal(kk_session_token(s, 0), -1);
            out[i] = kk_sample(p, &rng, kk_session_logits(s, 0), n_vocab,
                               scratch);
        }
        ids = &out[i];
        n = 1;
    }
    free(scratch);
}

/* A session on backend b for the prompt `text`: its ids into prompt (256
 * at most, all of them one batch), their count into *n. */
static struct kk_session *prompt_session(struct kk_model *m, enum kk_backend b,
                                         const char *text, int32_t *prompt,
                                         int *n)
{
    *n = testutil_prompt(m, text, prompt);
    assert_true(*n > 1);
    struct kk_session_params sp = {.n_ctx = 512, .n_threads = 2,
                                   .max_batch = 256, .backend = b};
    struct kk_session *s;
    struct kk_error err = {{0}};
    if (kk_session_new(m, &sp, &s, &err))
        fail_msg("%s", err.msg);
    return s;
}

void testutil_check_sampled_draws(struct kk_model *m, enum kk_backend b,
                                  const char *text)
{
    int32_t prompt[256];
    int n;
    struct kk_session *s = prompt_session(m, b, text, prompt, &n);
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_error err = {{0}};
    const struct kk_sampling p = {.temperature = 0.8f, .top_p = 0.9f,
                                  .seed = 11};
    int32_t host[DRAWS], in_pass[DRAWS], generated[DRAWS + 1] = {0};
    draw_tokens(s, prompt, n, &p, false, host, info.n_vocab);
    draw_tokens(s, prompt, n, &p, true, in_pass, info.n_vocab);
    kk_session_trim(s, 0);
    const struct kk_generate_params gp = {.n_predict = DRAWS, .sampling = p};
    if (kk_generate(s, prompt, n, &gp, collect_token, generated, NULL, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(generated[DRAWS], DRAWS);
    for (int i = 0; i < DRAWS; i++)
        if (in_pass[i] != host[i] || generated[i] != host[i])
            fail_msg("%s token %d: drawn in the pass %d, by kk_generate %d, "
                     "from the logits on the host %d", kk_session_backend(s),
                     i, in_pass[i], generated[i], host[i]);
    kk_session_free(s);
}

void testutil_check_greedy_rows(struct kk_model *m, enum kk_backend b,
                                const char *text)
{
    int32_t prompt[256];
    int n;
    struct kk_session *s = prompt_session(m, b, text, prompt, &n);
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_error err = {{0}};
    int32_t *want = malloc((size_t)n * sizeof *want);
    float *scratch = malloc(2 * (size_t)info.n_vocab * sizeof *scratch);
    assert_non_null(want);
    assert_non_null(scratch);
    const struct kk_sampling greedy = {.temperature = 0.0f, .top_p = 1.0f};
    uint64_t rng = kk_rng_seed(1);
    if (kk_session_eval(s, prompt, n, true, NULL, NULL, &err))
        fail_msg("%s", err.msg);
    for (int r = 0; r < n; r++) {
        want[r] = kk_sample(&greedy, &rng, kk_session_logits(s, r),
                            info.n_vocab, scratch);
        assert_int_equal(kk_session_token(s, r), -1);
    }
    kk_session_trim(s, 0);
    if (kk_session_eval_greedy(s, prompt, n, true, NULL, NULL, &err))
        fail_msg("%s", err.msg);
    assert_null(kk_session_logits(s, 0));
    for (int r = 0; r < n; r++)
        if (kk_session_token(s, r) != want[r])
            fail_msg("%s row %d: greedy choice %d, the logits' argmax %d",
                     kk_session_backend(s), r, kk_session_token(s, r),
                     want[r]);
    assert_int_equal(kk_session_token(s, n), -1);
    free(want);
    free(scratch);
    kk_session_free(s);
}
