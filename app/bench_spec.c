/* bench_spec.c — speculative against plain decoding, side by side.
 *
 * For each prompt (held-out conversations from data/eval: long-document
 * questions, whose answers quote the document, and short chat questions)
 * the same target generates greedily once per mode: plain, n-gram, draft
 * model, auto; and sampled (temperature 0.8, top-p 0.9, one seed) plain
 * and with the n-gram's drafts. Speculative output must equal the plain
 * output of its kind — greedy, or sampled with the n-gram's drafts, which
 * kk_generate decides by the target's own draws (the run reports whether
 * it did); the figures are tau, acceptance rate, decode tok/s and the
 * ratio to plain, per prompt set and mode. */
#include "bench_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kakeya.h"

enum { MAX_TOKENS = 4096, MAX_MSGS = 16 };

/* The sampled modes' draw: chat's kind of temperature and top-p. */
static const struct kk_sampling bench_sampling = {
    .temperature = 0.8f, .top_p = 0.9f, .seed = 1};

struct prompt {
    int32_t *ids;
    int n;
};

struct mode_total {
    const char *name;
    enum kk_spec_mode mode;
    bool sampled;   /* else greedy; compared with the plain run of its kind */
    int tokens, steps, proposed, accepted;
    double seconds;
    bool is_lossless;
};

/* The conversation of one eval item up to its first answer, as token ids
 * through the model's chat template. */
static int render_item(struct kk_model *m, const cJSON *item, struct prompt *p)
{
    const char *roles[MAX_MSGS], *contents[MAX_MSGS];
    size_t n = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, cJSON_GetObjectItem(item, "messages"))
    {
        const cJSON *role = cJSON_GetObjectItem(msg, "role");
        const cJSON *content = cJSON_GetObjectItem(msg, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content))
            return -1;
        if (!strcmp(role->valuestring, "assistant") || n == MAX_MSGS)
            break;
        roles[n] = role->valuestring;
        contents[n++] = content->valuestring;
    }
    char *text = kk_chat_render(m, roles, contents, n, true);
    if (!text)
        return -1;
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_error err;
    p->ids = malloc(sizeof(int32_t) * MAX_TOKENS);
    p->n = p->ids ? kk_tokenize(m, text, strlen(text), info.add_bos, true,
                                p->ids, MAX_TOKENS, &err) : -1;
    free(text);
    return p->n > 0 && p->n <= MAX_TOKENS ? 0 : -1;
}

/* Up to max prompts from a JSONL file. */
static int load_prompts(struct kk_model *m, const char *path, int max,
                        int max_tokens, struct prompt *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (n < max && getline(&line, &cap, f) > 0) {
        cJSON *item = cJSON_Parse(line);
        if (item && !render_item(m, item, &out[n]) && out[n].n <= max_tokens)
            n++;
        else if (item)
            free(out[n].ids);
        cJSON_Delete(item);
    }
    free(line);
    fclose(f);
    return n;
}

struct run_result {
    struct kk_stats st;
    int32_t ids[1024];
    int n;
};

static bool collect(void *ud, int32_t id, const char *text,
                    const struct kk_stats *st)
{
    struct run_result *r = ud;
    if (id >= 0 && r->n < 1024)
        r->ids[r->n++] = id;
    return true;
}

static int run_once(const struct spec_bench_options *o, struct kk_model *m,
                    struct kk_model *dm, const struct prompt *p,
                    enum kk_spec_mode mode, bool sampled,
                    struct run_result *r, struct kk_error *err)
{
    struct kk_session_params sp = {.n_ctx = 2048, .n_threads = o->n_threads,
                                   .backend = o->backend,
                                   .device = o->device};
    struct kk_session *s = NULL, *ds = NULL;
    int rc = kk_session_new(m, &sp, &s, err);
    if (!rc && dm && mode != KK_SPEC_OFF && mode != KK_SPEC_NGRAM)
        rc = kk_draft_session_new(dm, &sp, &ds, err);
    struct kk_generate_params gp = {.n_predict = o->n_predict,
                                    .stop_at_eog = true, .spec = mode,
                                    .draft = ds, .block = o->block};
    if (sampled)
        gp.sampling = bench_sampling;
    r->n = 0;
    if (!rc)
        rc = kk_generate(s, p->ids, p->n, &gp, collect, r, &r->st, err);
    kk_session_free(ds);
    kk_session_free(s);
    return rc;
}

/* tok/s of a mode's totals. */
static double tok_per_s(const struct mode_total *t)
{
    return t->seconds > 0 ? t->tokens / t->seconds : 0.0;
}

static cJSON *mode_json(const struct mode_total *t, double plain_tok_per_s)
{
    cJSON *j = cJSON_CreateObject();
    double tps = tok_per_s(t);
    cJSON_AddStringToObject(j, "mode", t->name);
    if (t->sampled) {
        cJSON_AddNumberToObject(j, "temperature", bench_sampling.temperature);
        cJSON_AddNumberToObject(j, "top_p", bench_sampling.top_p);
    }
    cJSON_AddNumberToObject(j, "tokens", t->tokens);
    cJSON_AddNumberToObject(j, "tau", t->steps ? (double)t->tokens / t->steps
                                               : 0.0);
    cJSON_AddNumberToObject(j, "acceptance_rate",
                            t->proposed ? (double)t->accepted / t->proposed
                                        : 0.0);
    cJSON_AddNumberToObject(j, "decode_tok_per_s", tps);
    cJSON_AddNumberToObject(j, "speedup_vs_plain",
                            plain_tok_per_s > 0 ? tps / plain_tok_per_s : 0.0);
    cJSON_AddBoolToObject(j, "output_equals_plain", t->is_lossless);
    return j;
}

/* All modes over one prompt set. */
static int bench_set(const struct spec_bench_options *o, struct kk_model *m,
                     struct kk_model *dm, const char *name,
                     const struct prompt *prompts, int n_prompts, cJSON *out,
                     struct kk_error *err)
{
    struct mode_total all[] = {
        {"plain", KK_SPEC_OFF, false, 0, 0, 0, 0, 0, true},
        {"ngram", KK_SPEC_NGRAM, false, 0, 0, 0, 0, 0, true},
        {"draft", KK_SPEC_DRAFT, false, 0, 0, 0, 0, 0, true},
        {"auto", KK_SPEC_AUTO, false, 0, 0, 0, 0, 0, true},
        {"plain_sampled", KK_SPEC_OFF, true, 0, 0, 0, 0, 0, true},
        {"ngram_sampled", KK_SPEC_NGRAM, true, 0, 0, 0, 0, 0, true},
    };
    /* without a draft model, the modes that need none */
    struct mode_total totals[sizeof all / sizeof all[0]];
    int n_modes = 0;
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (dm || (all[k].mode != KK_SPEC_DRAFT &&
                   all[k].mode != KK_SPEC_AUTO))
            totals[n_modes++] = all[k];
    /* each mode's plain run of its kind (greedy, sampled) comes first */
    struct run_result plain[2] = {0}, r = {0};
    for (int i = 0; i < n_prompts; i++) {
        for (int k = 0; k < n_modes; k++) {
            struct mode_total *t = &totals[k];
            const bool is_plain = t->mode == KK_SPEC_OFF;
            struct run_result *res = is_plain ? &plain[t->sampled] : &r;
            if (run_once(o, m, dm, &prompts[i], t->mode, t->sampled, res,
                         err))
                return -1;
            /* The first token comes from prefill: count decode steps only. */
            t->tokens += res->st.n_generated - 1;
            t->steps += res->st.n_steps;
            t->proposed += res->st.n_proposed;
            t->accepted += res->st.n_accepted;
            t->seconds += res->st.decode_seconds;
            const struct run_result *want = &plain[t->sampled];
            if (!is_plain && (res->n != want->n ||
                              memcmp(res->ids, want->ids,
                                     sizeof(int32_t) * (size_t)want->n)))
                t->is_lossless = false;
        }
    }
    cJSON *set = cJSON_CreateObject();
    cJSON_AddStringToObject(set, "prompts", name);
    cJSON_AddNumberToObject(set, "n_prompts", n_prompts);
    double plain_tps[2] = {0.0, 0.0};   /* greedy, sampled */
    for (int k = 0; k < n_modes; k++)
        if (totals[k].mode == KK_SPEC_OFF)
            plain_tps[totals[k].sampled] = tok_per_s(&totals[k]);
    cJSON *modes = cJSON_AddArrayToObject(set, "modes");
    for (int k = 0; k < n_modes; k++)
        cJSON_AddItemToArray(modes, mode_json(&totals[k],
                                              plain_tps[totals[k].sampled]));
    cJSON_AddItemToArray(out, set);
    return 0;
}

int bench_speculative(const struct spec_bench_options *o, cJSON *out,
                      struct kk_error *err)
{
    static const struct {
        const char *name, *file;
        int max_tokens;
    } sets[] = {
        {"long-document questions", "doc.jsonl", 1800},
        {"chat questions", "dict.jsonl", 1800},
        {"man-page questions", "man_what.jsonl", 1800},
    };
    struct kk_model *m = NULL, *dm = NULL;
    if (kk_model_open(o->model, &m, err) ||
        (o->draft && (kk_model_open(o->draft, &dm, err) ||
                      kk_check_draft(m, dm, err)))) {
        kk_model_close(dm);
        kk_model_close(m);
        return -1;
    }
    cJSON_AddStringToObject(out, "target", o->model);
    if (o->draft)
        cJSON_AddStringToObject(out, "draft", o->draft);
    if (dm)
        cJSON_AddStringToObject(out, "draft_backend",
                                kk_backend_name(kk_draft_backend(dm,
                                                                 o->backend)));
    cJSON_AddNumberToObject(out, "n_predict", o->n_predict);
    cJSON *arr = cJSON_AddArrayToObject(out, "sets");
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof sets / sizeof sets[0]; i++) {
        struct prompt prompts[64];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", o->eval_dir, sets[i].file);
        int n = load_prompts(m, path, o->n_prompts < 64 ? o->n_prompts : 64,
                             sets[i].max_tokens, prompts);
        if (n > 0)
            rc = bench_set(o, m, dm, sets[i].name, prompts, n, arr, err);
        for (int k = 0; k < n; k++)
            free(prompts[k].ids);
    }
    kk_model_close(dm);
    kk_model_close(m);
    return rc;
}
