/* bench_resume.c — resuming a long-document conversation from its
 * checkpoint against recomputing it (see bench_resume.h).
 *
 * The document is the text of the recall set's documents, joined until it
 * reaches doc_tokens tokens and cut there (a built-in paragraph repeated
 * when the set is missing). Both paths are timed the way the app runs
 * them: from the request (render, tokenize; for resume also the store read
 * and the restore) to the first answer token, in a session that holds
 * nothing yet; the store is already open, as in the app. */
#include "bench_resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "checkpoint.h"
#include "error.h"
#include "store.h"

enum { MAX_REPS = 15, FIRST_ANSWER_TOKENS = 16 };

static const char system_prompt[] = "You are Kakeya, a helpful assistant.";
static const char question1[] = "Summarise the document in one sentence.";
static const char question2[] = "Which command does the document describe "
                                "first, and what is it for?";

/* ---- the document ---- */

struct text {
    char *s;
    size_t len, cap;
};

static int text_add(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p)
            return -1;
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
    return 0;
}

/* The body of one recall item: its user message without the instruction
 * line before the document and the question after it. */
static int add_needle_document(struct text *t, const char *line)
{
    cJSON *item = cJSON_Parse(line);
    const cJSON *msg, *body = NULL;
    cJSON_ArrayForEach(msg, cJSON_GetObjectItem(item, "messages"))
    {
        const cJSON *role = cJSON_GetObjectItem(msg, "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "user"))
            body = cJSON_GetObjectItem(msg, "content");
    }
    int rc = 0;
    if (cJSON_IsString(body)) {
        const char *s = body->valuestring;
        const char *start = strstr(s, "\n\n");
        const char *end = strstr(s, "\n\nQuestion:");
        start = start ? start + 2 : s;
        if (!end || end < start)
            end = s + strlen(s);
        rc = text_add(t, start, (size_t)(end - start)) ||
             text_add(t, "\n\n", 2);
    }
    cJSON_Delete(item);
    return rc;
}

static int count_tokens(struct kk_model *m, const char *s,
                        struct kk_error *err)
{
    return kk_tokenize(m, s, strlen(s), false, false, NULL, 0, err);
}

/* Text of exactly n tokens of s (the pieces of its first n tokens). */
static char *cut_to_tokens(struct kk_model *m, const char *s, int n,
                           struct kk_error *err)
{
    int total = count_tokens(m, s, err);
    int32_t *ids = total > 0 ? malloc(sizeof *ids * (size_t)total) : NULL;
    struct text out = {0};
    if (!ids ||
        kk_tokenize(m, s, strlen(s), false, false, ids, total, err) < 0) {
        free(ids);
        return NULL;
    }
    char piece[256];
    for (int i = 0; i < n && i < total; i++) {
        int len = kk_token_piece(m, ids[i], false, piece, sizeof piece);
        if (len > 0 && text_add(&out, piece, (size_t)len)) {
            free(out.s);
            out.s = NULL;
            break;
        }
    }
    free(ids);
    return out.s;
}

static char *make_document(struct kk_model *m, const char *needles,
                           int doc_tokens, struct kk_error *err)
{
    static const char filler[] =
        "NAME\n    kakeya - a terminal chat with an in-process language "
        "model\n\nDESCRIPTION\n    Conversations, documents and restored-"
        "context checkpoints live in one SQLite database, so a long document "
        "is processed once and a conversation over it resumes at once.\n\n";
    struct text t = {0};
    FILE *f = needles ? fopen(needles, "r") : NULL;
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (f && n >= 0 && n < doc_tokens && getline(&line, &cap, f) > 0)
        n = add_needle_document(&t, line) ? -1
            : count_tokens(m, t.s ? t.s : "", err);
    free(line);
    if (f)
        fclose(f);
    while (n >= 0 && n < doc_tokens)
        n = text_add(&t, filler, sizeof filler - 1)
                ? -1
                : count_tokens(m, t.s, err);
    char *doc = n < 0 ? NULL : cut_to_tokens(m, t.s, doc_tokens, err);
    free(t.s);
    if (!doc && !err->msg[0])
        kk_fail(err, "out of memory making the document");
    return doc;
}

/* ---- one turn ---- */

static int render(struct kk_model *m, const char *const *contents, size_t n,
                  int32_t **ids, struct kk_error *err)
{
    static const char *const roles[] = {"system", "user", "assistant", "user"};
    char *text = kk_chat_render(m, roles, contents, n, true);
    if (!text)
        return kk_fail(err, "out of memory rendering");
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    size_t len = strlen(text);
    int count = kk_tokenize(m, text, len, info.add_bos, true, NULL, 0, err);
    *ids = count > 0 ? malloc(sizeof **ids * (size_t)count) : NULL;
    if (count > 0 && !*ids)
        count = kk_fail(err, "out of memory tokenizing");
    else if (count > 0)
        count = kk_tokenize(m, text, len, info.add_bos, true, *ids, count,
                            err);
    free(text);
    return count;
}

struct first_token {
    double t0, at;       /* when the request started, the first token came */
    int32_t id;
    struct text answer;
};

static bool on_token(void *ud, int32_t id, const char *text,
                     const struct kk_stats *stats)
{
    (void)stats;
    struct first_token *ft = ud;
    if (id >= 0 && ft->id < 0) {
        ft->id = id;
        ft->at = bench_now();
    }
    return text_add(&ft->answer, text, strlen(text)) == 0;
}

static int generate(struct kk_session *s, const int32_t *ids, int n,
                    int n_predict, struct first_token *ft,
                    struct kk_stats *st, struct kk_error *err)
{
    struct kk_generate_params gp = {.n_predict = n_predict,
                                    .stop_at_eog = true};
    ft->id = -1;
    return kk_generate(s, ids, n, &gp, on_token, ft, st, err);
}

/* ---- the benchmark ---- */

struct fixture {
    struct kk_model *m;
    struct kk_session_params sp;
    const char *contents[4];   /* system, document + q1, answer 1, q2 */
    char db[512];
    int64_t conv;
    size_t checkpoint_bytes;
    double write_seconds;   /* storing the checkpoint, as the UI thread does */
    int first_prompt_tokens;
};

/* Turn 1: answers the first question over the document and stores the
 * session as the conversation's checkpoint. */
static int first_turn(struct fixture *fx, struct first_token *ft,
                      struct kk_error *err)
{
    struct kk_session *s = NULL;
    struct store *st = NULL;
    int32_t *ids = NULL;
    void *blob = NULL;
    int rc = -1;
    int n = render(fx->m, fx->contents, 2, &ids, err);
    if (n < 0 || kk_session_new(fx->m, &fx->sp, &s, err) ||
        generate(s, ids, n, FIRST_ANSWER_TOKENS, ft, NULL, err))
        goto out;
    fx->first_prompt_tokens = n;
    int n_held;
    const int32_t *held = kk_session_tokens(s, &n_held);
    blob = kk_session_save(s, &fx->checkpoint_bytes);
    if (!blob) {
        kk_fail(err, "out of memory saving the session");
        goto out;
    }
    if (store_open(fx->db, NULL, &st, err) ||
        store_create_conversation(st, "bench --resume", system_prompt, NULL,
                                  NULL, &fx->conv, err))
        goto out;
    double t0 = bench_now();
    if (checkpoint_store(st, fx->conv, kk_model_fingerprint(fx->m), held,
                         (size_t)n_held, blob, fx->checkpoint_bytes, 0, err))
        goto out;
    fx->write_seconds = bench_now() - t0;
    rc = 0;
out:
    store_close(st);
    free(blob);
    free(ids);
    kk_session_free(s);
    return rc;
}

struct timing {
    double ttft, read, restore;
    int computed, restored;
    int32_t first;
};

/* (a): a fresh session computes the whole second prompt. */
static int time_recompute(struct fixture *fx, struct timing *t,
                          struct kk_error *err)
{
    struct kk_session *s = NULL;
    int32_t *ids = NULL;
    struct first_token ft = {0};
    struct kk_stats st;
    if (kk_session_new(fx->m, &fx->sp, &s, err))
        return -1;
    ft.t0 = bench_now();
    int n = render(fx->m, fx->contents, 4, &ids, err);
    int rc = n < 0 ? -1 : generate(s, ids, n, 1, &ft, &st, err);
    t->ttft = ft.at - ft.t0;
    t->computed = n;
    t->first = ft.id;
    free(ft.answer.s);
    free(ids);
    kk_session_free(s);
    return rc;
}

/* (b): a fresh session restores the checkpoint read from the store and
 * computes what follows it. */
static int time_resume(struct fixture *fx, struct store *store,
                       struct timing *t, struct kk_error *err)
{
    struct kk_session *s = NULL;
    int32_t *ids = NULL;
    struct first_token ft = {0};
    struct store_checkpoint ck = {0};
    struct kk_stats st;
    char note[160];
    int rc = -1;
    if (kk_session_new(fx->m, &fx->sp, &s, err))
        return -1;
    ft.t0 = bench_now();
    if (checkpoint_fetch(store, fx->conv, kk_model_fingerprint(fx->m), &ck,
                         note, sizeof note, err) != 1) {
        if (!err->msg[0])
            kk_fail(err, "the checkpoint was not found: %s", note);
        goto out;
    }
    t->read = bench_now() - ft.t0;
    int n = render(fx->m, fx->contents, 4, &ids, err);
    if (n < 0)
        goto out;
    double r0 = bench_now();
    struct checkpoint_resume res;
    checkpoint_resume(s, ck.kv, ck.kv_bytes, ck.token_ids, ck.n_tokens, ids, n,
                      &res);
    t->restore = bench_now() - r0;
    if (!res.restored) {
        kk_fail(err, "the checkpoint was not restored: %s", res.note);
        goto out;
    }
    rc = generate(s, ids + res.kept, n - res.kept, 1, &ft, &st, err);
    t->ttft = ft.at - ft.t0;
    t->computed = n - res.kept;
    t->restored = res.restored;
    t->first = ft.id;
out:
    store_checkpoint_free(&ck);
    free(ft.answer.s);
    free(ids);
    kk_session_free(s);
    return rc;
}

static int measure(struct fixture *fx, const struct resume_bench_options *o,
                   cJSON *out, struct kk_error *err)
{
    double a[MAX_REPS], b[MAX_REPS], read[MAX_REPS], restore[MAX_REPS];
    struct timing ta = {0}, tb = {0};
    bool same = true;
    int reps = o->reps < 1 ? 1 : o->reps > MAX_REPS ? MAX_REPS : o->reps;
    struct store *store = NULL;
    double t0 = bench_now();
    if (store_open(fx->db, NULL, &store, err))
        return -1;
    double open_s = bench_now() - t0;
    int rc = 0;
    for (int i = 0; i < reps && !rc; i++) {
        rc = time_recompute(fx, &ta, err) || time_resume(fx, store, &tb, err);
        a[i] = ta.ttft;
        b[i] = tb.ttft;
        read[i] = tb.read;
        restore[i] = tb.restore;
        same = same && ta.first == tb.first;
    }
    store_close(store);
    if (rc)
        return -1;
    double ma = bench_median(a, reps), mb = bench_median(b, reps);
    cJSON *rec = cJSON_AddObjectToObject(out, "recompute");
    cJSON_AddNumberToObject(rec, "time_to_first_token_ms", ma * 1e3);
    cJSON_AddNumberToObject(rec, "tokens_computed", ta.computed);
    cJSON *res = cJSON_AddObjectToObject(out, "resume");
    cJSON_AddNumberToObject(res, "time_to_first_token_ms", mb * 1e3);
    cJSON_AddNumberToObject(res, "tokens_computed", tb.computed);
    cJSON_AddNumberToObject(res, "tokens_restored", tb.restored);
    cJSON_AddNumberToObject(res, "store_open_ms", open_s * 1e3);
    cJSON_AddNumberToObject(res, "store_read_ms", bench_median(read, reps) * 1e3);
    cJSON_AddNumberToObject(res, "restore_ms", bench_median(restore, reps) * 1e3);
    cJSON_AddNumberToObject(out, "speedup", mb > 0 ? ma / mb : 0);
    cJSON_AddBoolToObject(out, "same_first_token", same);
    cJSON_AddNumberToObject(out, "reps", reps);
    return 0;
}

int bench_resume(const struct resume_bench_options *o, cJSON *out,
                 struct kk_error *err)
{
    struct fixture fx = {.sp = {.n_threads = o->n_threads}};
    struct first_token ft1 = {0};
    char *doc = NULL, *user1 = NULL, side[600];
    int rc = -1;
    const char *tmp = o->tmp_dir ? o->tmp_dir : getenv("TMPDIR");
    snprintf(fx.db, sizeof fx.db, "%s/kakeya-resume-%ld.db",
             tmp && *tmp ? tmp : "/tmp", (long)getpid());
    if (kk_model_open(o->model, &fx.m, err))
        return -1;
    doc = make_document(fx.m, o->needles, o->doc_tokens, err);
    size_t size = doc ? strlen(doc) + 256 : 0;
    user1 = doc ? malloc(size) : NULL;
    if (!user1) {
        if (doc)
            kk_fail(err, "out of memory");
        goto out;
    }
    snprintf(user1, size, "Read the following document and answer the "
             "question.\n\n%s\n\nQuestion: %s", doc, question1);
    /* Room for the document, the turns and the answers. */
    fx.sp.n_ctx = o->doc_tokens + 256;
    fx.contents[0] = system_prompt;
    fx.contents[1] = user1;
    if (first_turn(&fx, &ft1, err))
        goto out;
    fx.contents[2] = ft1.answer.s ? ft1.answer.s : "";
    fx.contents[3] = question2;
    cJSON_AddStringToObject(out, "model", o->model);
    cJSON_AddNumberToObject(out, "document_tokens", o->doc_tokens);
    cJSON_AddNumberToObject(out, "first_turn_prompt_tokens",
                            fx.first_prompt_tokens);
    cJSON_AddNumberToObject(out, "checkpoint_bytes",
                            (double)fx.checkpoint_bytes);
    cJSON_AddNumberToObject(out, "checkpoint_store_write_ms",
                            fx.write_seconds * 1e3);
    rc = measure(&fx, o, out, err);
out:
    remove(fx.db);
    snprintf(side, sizeof side, "%s-wal", fx.db);
    remove(side);
    snprintf(side, sizeof side, "%s-shm", fx.db);
    remove(side);
    free(ft1.answer.s);
    free(user1);
    free(doc);
    kk_model_close(fx.m);
    return rc;
}
