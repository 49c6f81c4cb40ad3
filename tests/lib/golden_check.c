/* golden_check.c — see golden_check.h. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "golden_check.h"
#include "testutil.h"

const struct golden_case golden_cases[] = {
    {"llama-smollm2-f32", 1e-4f}, {"llama-spm-f16", 1e-2f},
    {"qwen2-f32", 1e-4f},         {"qwen3-f32", 1e-4f},
    {"gemma3-f32", 5e-3f},        {"llama256-f32", 1e-4f},
    {"llama256-F16", 1e-2f},      {"llama256-BF16", 3e-2f},
    {"llama256-Q8_0", 0.15f},     {"llama256-Q6_K", 0.15f},
    {"llama256-Q5_0", 0.15f},     {"llama256-Q4_K_M", 0.15f},
    {"llama256-Q4_0", 0.15f},
};
const int golden_n_cases = sizeof golden_cases / sizeof golden_cases[0];

static int json_ids(const cJSON *arr, int32_t **out)
{
    int n = cJSON_GetArraySize(arr);
    *out = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++)
        (*out)[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return n;
}

/* Compares our logits row with golden step `step`; returns the largest
 * difference over the golden top-20. */
static float compare_step(const float *row, const cJSON *step)
{
    const cJSON *ids = cJSON_GetObjectItem(step, "top_ids");
    const cJSON *vals = cJSON_GetObjectItem(step, "top_logits");
    float worst = 0.0f;
    for (int i = 0; i < cJSON_GetArraySize(ids); i++) {
        int id = cJSON_GetArrayItem(ids, i)->valueint;
        float want = (float)cJSON_GetArrayItem(vals, i)->valuedouble;
        float d = fabsf(row[id] - want);
        worst = d > worst ? d : worst;
    }
    return worst;
}

static int32_t argmax(const float *row, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

static void check_tokenization(struct kk_model *m, const cJSON *item,
                               const int32_t *prompt, int n_prompt)
{
    const char *text = cJSON_GetObjectItem(item, "text")->valuestring;
    bool add_bos = cJSON_IsTrue(cJSON_GetObjectItem(item, "add_bos"));
    bool special = cJSON_IsTrue(cJSON_GetObjectItem(item, "parse_special"));
    int32_t ids[4096];
    struct kk_error err = {{0}};
    int n = kk_tokenize(m, text, strlen(text), add_bos, special, ids, 4096,
                        &err);
    assert_int_equal(n, n_prompt);
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], prompt[i]);
}

/* The prompt and the golden continuation in one batch: the worst logit
 * difference over every step; the argmax along the golden path is the
 * greedy check (only a near-tie may go the other way). A device runs this
 * way: a pass per token costs more than it adds on a software device, and
 * batched and incremental evaluation agree. */
static float teacher_forced_batched(struct kk_session *s, struct kk_model *m,
                                    const cJSON *steps, const int32_t *prompt,
                                    int n_prompt, const int32_t *gen,
                                    int n_gen, float tol)
{
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_error err = {{0}};
    int32_t all[256];
    assert_true(n_prompt + n_gen <= 256);
    memcpy(all, prompt, sizeof(int32_t) * (size_t)n_prompt);
    memcpy(all + n_prompt, gen, sizeof(int32_t) * (size_t)n_gen);
    assert_int_equal(kk_session_eval(s, all, n_prompt + n_gen, true, NULL,
                                     NULL, &err), 0);
    float worst = 0.0f;
    for (int p = 0; p < n_prompt + n_gen; p++) {
        const cJSON *step = cJSON_GetArrayItem(steps, p);
        const float *row = kk_session_logits(s, p);
        float d = compare_step(row, step);
        worst = d > worst ? d : worst;
        if (p >= n_prompt - 1 && p < n_prompt + n_gen - 1 &&
            argmax(row, info.n_vocab) != gen[p - n_prompt + 1])
            assert_true(cJSON_GetObjectItem(step, "gap12")->valuedouble <=
                        tol);
    }
    return worst;
}

/* The whole prompt in one batch, then each golden generated token alone,
 * exactly as the goldens were made. */
static float teacher_forced_incremental(struct kk_session *s,
                                        const cJSON *steps,
                                        const int32_t *prompt, int n_prompt,
                                        const int32_t *gen, int n_gen)
{
    struct kk_error err = {{0}};
    assert_int_equal(kk_session_eval(s, prompt, n_prompt, true, NULL, NULL,
                                     &err), 0);
    float worst = 0.0f;
    for (int p = 0; p < n_prompt; p++) {
        float d = compare_step(kk_session_logits(s, p),
                               cJSON_GetArrayItem(steps, p));
        worst = d > worst ? d : worst;
    }
    for (int k = 0; k < n_gen; k++) {
        assert_int_equal(kk_session_eval(s, &gen[k], 1, true, NULL, NULL,
                                         &err), 0);
        float d = compare_step(kk_session_logits(s, 0),
                               cJSON_GetArrayItem(steps, n_prompt + k));
        worst = d > worst ? d : worst;
    }
    return worst;
}

/* Teacher-forced comparison of every step of one prompt. */
static void check_teacher_forced(struct kk_model *m, const cJSON *item,
                                 const int32_t *prompt, int n_prompt,
                                 const int32_t *gen, int n_gen, float tol,
                                 const char *label, enum kk_backend backend)
{
    struct kk_session_params sp = {.n_ctx = 512, .n_threads = 2,
                                   .max_batch = 256, .kv_type = KK_KV_F32,
                                   .backend = backend};
    struct kk_session *s;
    struct kk_error err = {{0}};
    assert_int_equal(kk_session_new(m, &sp, &s, &err), 0);
    const cJSON *steps = cJSON_GetObjectItem(item, "steps");
    assert_int_equal(cJSON_GetArraySize(steps), n_prompt + n_gen);
    float worst = backend == KK_BACKEND_CPU
                      ? teacher_forced_incremental(s, steps, prompt, n_prompt,
                                                   gen, n_gen)
                      : teacher_forced_batched(s, m, steps, prompt, n_prompt,
                                               gen, n_gen, tol);
    printf("  %-24s teacher-forced max |diff| %.2e (tolerance %.0e)\n", label,
           worst, tol);
    assert_true(worst <= tol);
    kk_session_free(s);
}

struct greedy_run {
    int32_t ids[64];
    int n;
};

static bool collect(void *ud, int32_t id, const char *text,
                    const struct kk_stats *st)
{
    struct greedy_run *r = ud;
    if (id >= 0 && r->n < 64)
        r->ids[r->n++] = id;
    return true;
}

static void check_greedy(struct kk_model *m, const cJSON *item,
                         const int32_t *prompt, int n_prompt,
                         const int32_t *gen, int n_gen, float tol,
                         enum kk_backend backend)
{
    struct kk_session_params sp = {.n_ctx = 512, .n_threads = 2,
                                   .kv_type = KK_KV_F32, .backend = backend};
    struct kk_session *s;
    struct kk_error err = {{0}};
    assert_int_equal(kk_session_new(m, &sp, &s, &err), 0);
    struct kk_generate_params gp = {.n_predict = n_gen};
    struct greedy_run run = {.n = 0};
    assert_int_equal(kk_generate(s, prompt, n_prompt, &gp, collect, &run,
                                 NULL, &err), 0);
    assert_int_equal(run.n, n_gen);
    const cJSON *steps = cJSON_GetObjectItem(item, "steps");
    for (int k = 0; k < n_gen; k++) {
        if (run.ids[k] == gen[k])
            continue;
        double gap = cJSON_GetObjectItem(
            cJSON_GetArrayItem(steps, n_prompt - 1 + k), "gap12")->valuedouble;
        printf("  greedy diverges at token %d (gap %.2e)\n", k, gap);
        assert_true(gap <= tol); /* only a near-tie may go the other way */
        break;
    }
    kk_session_free(s);
}

static void check_full_logits(struct kk_model *m, const cJSON *item,
                              const int32_t *prompt, int n_prompt,
                              const int32_t *gen, float tol,
                              enum kk_backend backend)
{
    const cJSON *file = cJSON_GetObjectItem(item, "full_logits_file");
    if (!file)
        return;
    size_t len;
    char rel[512];
    snprintf(rel, sizeof rel, "golden/%s", file->valuestring);
    float *want = (float *)testutil_read_file(testutil_shared_path(rel), &len);
    assert_non_null(want);
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_session_params sp = {.n_ctx = 512, .n_threads = 2,
                                   .kv_type = KK_KV_F32, .backend = backend};
    struct kk_session *s;
    struct kk_error err = {{0}};
    assert_int_equal(kk_session_new(m, &sp, &s, &err), 0);
    assert_int_equal(kk_session_eval(s, prompt, n_prompt, true, NULL, NULL,
                                     &err), 0);
    const cJSON *positions = cJSON_GetObjectItem(item, "full_logits_positions");
    size_t nv = (size_t)info.n_vocab;
    assert_int_equal(len, sizeof(float) * nv * 3);
    float worst = 0.0f;
    for (int i = 0; i < cJSON_GetArraySize(positions); i++) {
        int pos = cJSON_GetArrayItem(positions, i)->valueint;
        if (pos == n_prompt)
            assert_int_equal(kk_session_eval(s, &gen[0], 1, true, NULL, NULL,
                                             &err), 0);
        const float *row = kk_session_logits(s, pos == n_prompt ? 0 : pos);
        for (size_t v = 0; v < nv; v++) {
            float d = fabsf(row[v] - want[(size_t)i * nv + v]);
            worst = d > worst ? d : worst;
        }
        assert_int_equal(argmax(row, (int)nv), argmax(want + (size_t)i * nv,
                                                      (int)nv));
    }
    printf("  full logits max |diff| %.2e\n", worst);
    assert_true(worst <= tol);
    free(want);
    kk_session_free(s);
}

void golden_check_model(const struct golden_case *c, enum kk_backend backend)
{
    char rel[256];
    snprintf(rel, sizeof rel, "golden/gen-%s.json", c->model);
    const char *path = testutil_shared_path(rel);
    if (!path)
        skip();
    if (access(path, R_OK)) {
        /* A partial copy of the golden data (the GPU machine carries only
         * what fits): say so, loudly, rather than fail. */
        fprintf(stderr, "SKIP %s: %s is absent\n", c->model, path);
        skip();
    }
    cJSON *g = testutil_read_json(path);
    assert_non_null(g);
    snprintf(rel, sizeof rel, "golden/models/%s.gguf", c->model);
    struct kk_model *m;
    struct kk_error err = {{0}};
    if (kk_model_open(testutil_shared_path(rel), &m, &err))
        fail_msg("%s", err.msg);
    printf("%s%s\n", c->model, backend == KK_BACKEND_VULKAN ? " (vulkan)" : "");
    const cJSON *item;
    bool first = true;
    cJSON_ArrayForEach(item, cJSON_GetObjectItem(g, "items"))
    {
        int32_t *prompt, *gen;
        int n_prompt = json_ids(cJSON_GetObjectItem(item, "prompt_ids"), &prompt);
        int n_gen = json_ids(cJSON_GetObjectItem(item, "gen_ids"), &gen);
        const char *name = cJSON_GetObjectItem(item, "name")->valuestring;
        check_tokenization(m, item, prompt, n_prompt);
        check_teacher_forced(m, item, prompt, n_prompt, gen, n_gen,
                             c->tolerance, name, backend);
        /* A device checks generation itself on the first prompt (the
         * teacher-forced argmax above covers every prompt's path). */
        if (backend == KK_BACKEND_CPU || first)
            check_greedy(m, item, prompt, n_prompt, gen, n_gen, c->tolerance,
                         backend);
        first = false;
        check_full_logits(m, item, prompt, n_prompt, gen, c->tolerance,
                          backend);
        free(prompt);
        free(gen);
    }
    kk_model_close(m);
    cJSON_Delete(g);
}

