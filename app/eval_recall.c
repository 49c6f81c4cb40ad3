/* eval_recall.c — `kakeya eval-recall`: long-document recall per KV policy.
 *
 * Each needle document (data/recall/needles.jsonl, made by the generator
 * beside it with fixed seeds) plants one fact in real documentation text
 * and asks for it. For every KV configuration the model answers greedily;
 * the score is exact recall (the answer contains the planted value) and
 * agreement with the full f16 cache (token-for-token the same answer),
 * printed next to the KV saved at the end of the document and the KV saved
 * at four times the sliding window: the cache state after a document of
 * 4 x window tokens, the point where the bar is set (a ring layer
 * then holds window + slack of 4 x window positions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "args.h"
#include "commands.h"
#include "error.h"
#include "kakeya.h"

enum { MAX_ITEMS = 64, MAX_TOKENS = 4096, ANSWER_TOKENS = 24 };

struct needle {
    int32_t *ids;
    int n;
    int length_chars;
    char answer[32];
};

struct config {
    const char *name;
    struct kk_session_params params;
};

struct answer {
    int32_t ids[64];
    int n;
    char text[512];
    int len;
};

static bool collect(void *ud, int32_t id, const char *text,
                    const struct kk_stats *st)
{
    struct answer *a = ud;
    if (id >= 0 && a->n < 64)
        a->ids[a->n++] = id;
    size_t tl = strlen(text);
    if (a->len + tl < sizeof a->text) {
        memcpy(a->text + a->len, text, tl + 1);
        a->len += (int)tl;
    }
    return true;
}

static int load_needle(struct kk_model *m, const cJSON *item, int max_tokens,
                       struct needle *out)
{
    const char *roles[4], *contents[4];
    size_t n = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, cJSON_GetObjectItem(item, "messages"))
    {
        if (n == 4)
            break;
        roles[n] = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "role"));
        contents[n] = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "content"));
        if (!roles[n] || !contents[n])
            return -1;
        n++;
    }
    const char *answer = cJSON_GetStringValue(cJSON_GetObjectItem(item, "answer"));
    if (!answer || strlen(answer) >= sizeof out->answer)
        return -1;
    snprintf(out->answer, sizeof out->answer, "%s", answer);
    out->length_chars = cJSON_GetObjectItem(item, "length_chars")
                            ? cJSON_GetObjectItem(item, "length_chars")->valueint
                            : 0;
    char *text = kk_chat_render(m, roles, contents, n, true);
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_error err;
    out->ids = malloc(sizeof(int32_t) * MAX_TOKENS);
    out->n = text && out->ids ? kk_tokenize(m, text, strlen(text), info.add_bos,
                                            true, out->ids, MAX_TOKENS, &err)
                              : -1;
    free(text);
    if (out->n <= 0 || out->n > max_tokens) {
        free(out->ids);
        out->ids = NULL;
        return -1;
    }
    return 0;
}

static int load_needles(struct kk_model *m, const char *path, int max_tokens,
                        struct needle *out, struct kk_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err->msg, sizeof err->msg, "%s: cannot open the needle "
                 "documents (run from the repository, or pass --needles)",
                 path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (n < MAX_ITEMS && getline(&line, &cap, f) > 0) {
        cJSON *item = cJSON_Parse(line);
        if (item && !load_needle(m, item, max_tokens, &out[n]))
            n++;
        cJSON_Delete(item);
    }
    free(line);
    fclose(f);
    return n;
}

/* One answer under one configuration; *saved gets the KV saved after the
 * document. */
static int answer_one(struct kk_model *m, const struct config *c,
                      const struct needle *nd, struct answer *a, double *saved,
                      struct kk_error *err)
{
    struct kk_session *s;
    if (kk_session_new(m, &c->params, &s, err))
        return -1;
    struct kk_generate_params gp = {.n_predict = ANSWER_TOKENS,
                                    .stop_at_eog = true};
    memset(a, 0, sizeof *a);
    int rc = kk_generate(s, nd->ids, nd->n, &gp, collect, a, NULL, err);
    struct kk_kv_info info;
    kk_session_kv_info(s, &info);
    *saved = info.saved;
    kk_session_free(s);
    return rc;
}

/* The KV saved after evaluating n_doc tokens (the needles' own tokens,
 * repeated to length: accounting depends only on the count). */
static int saved_after(struct kk_model *m, const struct config *c,
                       const struct needle *nd, int n_doc, double *saved,
                       struct kk_error *err)
{
    struct kk_session *s;
    int32_t *doc = malloc(sizeof *doc * (size_t)n_doc);
    if (!doc)
        return kk_fail(err, "out of memory");
    for (int i = 0; i < n_doc; i++)
        doc[i] = nd->ids[i % nd->n];
    int rc = kk_session_new(m, &c->params, &s, err);
    if (!rc)
        rc = kk_session_eval(s, doc, n_doc, false, NULL, NULL, err);
    if (!rc) {
        struct kk_kv_info info;
        kk_session_kv_info(s, &info);
        *saved = info.saved;
    }
    kk_session_free(s);
    free(doc);
    return rc;
}

static cJSON *score_config(struct kk_model *m, const struct config *c,
                           const struct needle *needles, int n,
                           struct answer *reference, bool is_reference,
                           int n_at_4x, struct kk_error *err)
{
    double saved_4x = 0.0;   /* negative for f32: more than full f16 */
    bool has_4x = n_at_4x > 0 && n > 0;
    if (has_4x && saved_after(m, c, &needles[0], n_at_4x, &saved_4x, err))
        return NULL;
    int recalled = 0, agreed = 0;
    double saved_sum = 0.0;
    for (int i = 0; i < n; i++) {
        struct answer a;
        double saved;
        if (answer_one(m, c, &needles[i], &a, &saved, err))
            return NULL;
        recalled += strstr(a.text, needles[i].answer) != NULL;
        if (is_reference)
            reference[i] = a;
        agreed += a.n == reference[i].n &&
                  !memcmp(a.ids, reference[i].ids, sizeof(int32_t) * (size_t)a.n);
        saved_sum += saved;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kv", c->name);
    cJSON_AddNumberToObject(j, "documents", n);
    cJSON_AddNumberToObject(j, "recall", n ? (double)recalled / n : 0.0);
    cJSON_AddNumberToObject(j, "agrees_with_full_f16", n ? (double)agreed / n
                                                         : 0.0);
    cJSON_AddNumberToObject(j, "kv_saved_mean", n ? saved_sum / n : 0.0);
    if (has_4x)
        cJSON_AddNumberToObject(j, "kv_saved_at_4x_window", saved_4x);
    else
        cJSON_AddNullToObject(j, "kv_saved_at_4x_window");
    char at_4x[32] = "   n/a";
    if (has_4x)
        snprintf(at_4x, sizeof at_4x, "%5.1f%%", 100.0 * saved_4x);
    fprintf(stderr, "  %-24s recall %5.1f%%  same answer as full f16 %5.1f%%  "
                    "KV saved %5.1f%% (mean), %s at 4x window\n", c->name,
            100.0 * recalled / n, 100.0 * agreed / n, 100.0 * saved_sum / n,
            at_4x);
    return j;
}

int cmd_eval_recall(int argc, char **argv)
{
    struct args a;
    args_init(&a, "kakeya eval-recall", argc, argv);
    const char *model = NULL, *needles_path = "data/recall/needles.jsonl";
    int threads = 2, n_ctx = 2048;
    while (args_next(&a)) {
        if (args_is(&a, "-m", "--model"))
            model = args_value(&a);
        else if (args_is(&a, NULL, "--needles"))
            needles_path = args_value(&a);
        else if (args_is(&a, "-t", "--threads"))
            threads = args_int(&a, 1, 64);
        else if (args_is(&a, "-c", "--ctx"))
            n_ctx = args_int(&a, 64, 1 << 16);
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!model) {
        fprintf(stderr, "kakeya eval-recall: needs -m MODEL.gguf\n");
        return 2;
    }
    struct kk_error err = {{0}};
    struct kk_model *m;
    if (kk_model_open(model, &m, &err)) {
        fprintf(stderr, "kakeya eval-recall: %s\n", err.msg);
        return 1;
    }
    const struct kk_session_params base = {.n_ctx = n_ctx, .n_threads = threads};
    struct config configs[] = {
        {"full f16 (reference)", base}, {"ring f16", base},
        {"ring q8_0", base},            {"ring f32", base},
        {"sink+window f16 (lossy)", base},
    };
    configs[0].params.kv_full_sliding = true;
    configs[2].params.kv_type = KK_KV_Q8_0;
    configs[3].params.kv_type = KK_KV_F32;
    configs[4].params.kv_window = 256;
    configs[4].params.kv_sinks = 4;
    static struct needle needles[MAX_ITEMS];
    static struct answer reference[MAX_ITEMS];
    int n = load_needles(m, needles_path, n_ctx - ANSWER_TOKENS - 1, needles,
                         &err);
    int rc = n < 0 ? 1 : 0;
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    int n_at_4x = 4 * info.sliding_window;
    if (n_at_4x <= 0 || n_at_4x > n_ctx - 1)
        n_at_4x = 0;   /* no sliding layers, or a context too small */
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "model", model);
    cJSON_AddNumberToObject(out, "sliding_window", info.sliding_window);
    cJSON_AddNumberToObject(out, "sliding_layers", info.n_sliding_layers);
    cJSON_AddNumberToObject(out, "layers", info.n_layer);
    cJSON_AddNumberToObject(out, "tokens_at_4x_window", n_at_4x);
    cJSON *rows = cJSON_AddArrayToObject(out, "kv_configurations");
    if (!rc)
        fprintf(stderr, "%s: %d needle documents; sliding window %d on %d "
                        "of %d layers\n", model, n, info.sliding_window,
                info.n_sliding_layers, info.n_layer);
    for (size_t c = 0; !rc && c < sizeof configs / sizeof configs[0]; c++) {
        cJSON *row = score_config(m, &configs[c], needles, n, reference,
                                  c == 0, n_at_4x, &err);
        if (!row)
            rc = 1;
        else
            cJSON_AddItemToArray(rows, row);
    }
    if (rc) {
        fprintf(stderr, "kakeya eval-recall: %s\n", err.msg);
    } else {
        char *text = cJSON_Print(out);
        puts(text ? text : "{}");
        free(text);
    }
    for (int i = 0; i < n; i++)
        free(needles[i].ids);
    cJSON_Delete(out);
    kk_model_close(m);
    return rc;
}
