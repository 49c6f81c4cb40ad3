/* cmd_ask.c — `kakeya ask [-c ID] "question" < document.txt`: one turn
 * without the screen, stored like any other (for scripts).
 *
 * Follows the chat's write discipline: the document (when stdin is not a
 * terminal and holds text) and the question are committed before the model
 * runs; the answer streams to stdout and is flushed to the store at least
 * once a second and on stop (SIGINT, SIGTERM) or error; it ends with its
 * statistics. After the turn the session is stored as a checkpoint, so the
 * next `ask -c ID` (or the chat) resumes without recomputing the document.
 * The conversation id goes to stderr. */
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "chat.h"
#include "checkpoint.h"
#include "commands.h"
#include "error.h"
#include "kakeya.h"
#include "overflow.h"
#include "store.h"

enum { MAX_DOCUMENT_BYTES = 8 << 20, TITLE_CHARS = 48 };

struct ask_options {
    const char *model, *draft, *db, *question;
    int64_t conversation_id;      /* 0: a new conversation */
    int n_threads, n_ctx, n_predict;
    enum kk_backend backend;
    int device;
    int checkpoint_budget_mib;    /* 0: the store's default */
    enum overflow_policy overflow; /* ask reads as refuse: no one to ask */
};

/* Set by SIGINT/SIGTERM; generation stops at the next step boundary and
 * the partial answer is kept. (A signal handler can only reach a static.) */
static _Atomic(bool) stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, true);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_ask(int argc, char **argv, struct ask_options *o)
{
    struct args a;
    args_init(&a, "kakeya ask", argc, argv);
    *o = (struct ask_options){.n_predict = 1024};
    while (args_next(&a)) {
        if (args_is(&a, "-c", "--conversation"))
            o->conversation_id = (int64_t)args_u64(&a);
        else if (args_is(&a, "-m", "--model"))
            o->model = args_value(&a);
        else if (args_is(&a, "-d", "--draft"))
            o->draft = args_value(&a);
        else if (args_is(&a, NULL, "--db"))
            o->db = args_value(&a);
        else if (args_is(&a, "-t", "--threads"))
            o->n_threads = args_int(&a, 1, 256);
        else if (args_is(&a, NULL, "--ctx"))
            o->n_ctx = args_int(&a, 64, 1 << 20);
        else if (args_is(&a, "-n", "--n-predict"))
            o->n_predict = args_int(&a, 1, 1 << 20);
        else if (args_is(&a, NULL, "--checkpoint-budget"))
            o->checkpoint_budget_mib = args_int(&a, 1, 1 << 30);
        else if (args_is(&a, NULL, "--overflow"))
            args_overflow(&a, &o->overflow);
        else if (args_backend_option(&a, &o->backend, &o->device))
            ;
        else if (a.opt[0] != '-' && !o->question)
            o->question = a.opt;
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!o->question || !o->question[strspn(o->question, " \t\n")]) {
        fprintf(stderr, "kakeya ask: needs a question: kakeya ask [-c ID] "
                        "\"question\" [< document.txt]\n");
        return 2;
    }
    return 0;
}

/* The document on stdin: NULL when stdin is a terminal or holds only
 * blanks (*failed stays false), or when it cannot be used (*failed, with a
 * message printed). */
static char *read_document(bool *failed)
{
    *failed = false;
    if (isatty(STDIN_FILENO))
        return NULL;
    char *buf = malloc(MAX_DOCUMENT_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_DOCUMENT_BYTES + 1, stdin) : 0;
    const char *why = !buf                    ? "out of memory"
                      : ferror(stdin)         ? "read failed"
                      : n > MAX_DOCUMENT_BYTES ? "larger than 8 MiB: too long "
                                                 "for a document"
                      : memchr(buf, 0, n)     ? "not text (it holds NUL bytes)"
                                              : NULL;
    if (why) {
        fprintf(stderr, "kakeya ask: the document on stdin: %s\n", why);
        free(buf);
        *failed = true;
        return NULL;
    }
    buf[n] = 0;
    if (!buf[strspn(buf, " \t\r\n")]) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The first TITLE_CHARS characters of text on one line, whole UTF-8
 * characters only. */
static void make_title(const char *text, char *title, size_t size)
{
    size_t n = 0;
    int chars = 0;
    for (const char *p = text; *p && chars < TITLE_CHARS && n + 4 < size;
         p++) {
        title[n++] = *p == '\n' || *p == '\t' ? ' ' : *p;
        if ((*p & 0xc0) != 0x80)
            chars++;
    }
    while (n && (title[n - 1] & 0xc0) == 0xc0)
        n--;
    title[n] = 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- the models ---- */

struct engine {
    struct kk_model *model, *draft_model;
    struct kk_session *session, *draft;
    const char *model_path, *draft_path;   /* draft_path NULL: none used */
    int base_ctx;                          /* the context first opened */
};

/* --overflow sink: new sessions with room for need tokens and the LOSSY
 * sink+window cache on global layers, as many positions as before. */
static int engine_sink(struct engine *g, const struct ask_options *o,
                       int need, struct kk_error *err)
{
    int old = kk_session_n_ctx(g->session);
    struct kk_session_params sp = {
        .n_ctx = 2 * old > need ? 2 * old : (need + 255) / 256 * 256,
        .n_threads = o->n_threads, .kv_sinks = 4,
        .backend = o->backend, .device = o->device,
        .kv_window = g->base_ctx - 4 - 17 > 16 ? g->base_ctx - 4 - 17 : 16};
    struct kk_session *s = NULL, *ds = NULL;
    if (kk_session_new(g->model, &sp, &s, err) ||
        (g->draft_model && kk_draft_session_new(g->draft_model, &sp, &ds, err))) {
        kk_session_free(s);
        return -1;
    }
    kk_session_free(g->session);
    kk_session_free(g->draft);
    g->session = s;
    g->draft = ds;
    fprintf(stderr, "kakeya ask: sink+window (LOSSY): context %d tokens; "
                    "global layers keep only the first %d and the last %d "
                    "positions\n", sp.n_ctx, sp.kv_sinks, sp.kv_window);
    return 0;
}

static void engine_close(struct engine *g)
{
    kk_session_free(g->draft);
    kk_model_close(g->draft_model);
    kk_session_free(g->session);
    kk_model_close(g->model);
}

static int engine_open(struct engine *g, const struct ask_options *o,
                       struct kk_error *err)
{
    struct kk_session_params sp = {.n_ctx = o->n_ctx,
                                   .n_threads = o->n_threads,
                                   .backend = o->backend,
                                   .device = o->device};
    if (kk_model_open(g->model_path, &g->model, err) ||
        kk_session_new(g->model, &sp, &g->session, err))
        return -1;
    g->base_ctx = kk_session_n_ctx(g->session);
    if (!g->draft_path)
        return 0;
    struct kk_error derr = {{0}};
    sp.n_ctx = kk_session_n_ctx(g->session);
    if (kk_model_open(g->draft_path, &g->draft_model, &derr) ||
        kk_check_draft(g->model, g->draft_model, &derr) ||
        kk_draft_session_new(g->draft_model, &sp, &g->draft, &derr)) {
        fprintf(stderr, "kakeya ask: draft model not used (n-gram lookup "
                        "instead): %s\n", derr.msg);
        kk_session_free(g->draft);
        kk_model_close(g->draft_model);
        g->draft = NULL;
        g->draft_model = NULL;
        g->draft_path = NULL;
    }
    return 0;
}

/* ---- the conversation ---- */

struct turn {
    struct store *store;
    int64_t conversation_id, answer_id;
    char *answer;
    size_t len, cap;
    int n_tokens;
    double last_flush;
    bool flush_failed;
    struct store_stats stats;
    bool has_stats;
};

static void stats_for_store(const struct kk_stats *st, const char *proposer,
                            struct store_stats *out)
{
    *out = (struct store_stats){.tau = st->tau,
                                .acceptance_rate = st->acceptance_rate,
                                .tok_per_s = st->decode_tok_per_s,
                                .kv_saved = st->kv_saved};
    snprintf(out->proposer, sizeof out->proposer, "%s", proposer);
}

static void turn_flush(struct turn *t)
{
    struct kk_error err = {{0}};
    if (store_update_answer(t->store, t->answer_id, t->answer ? t->answer : "",
                            t->n_tokens, t->has_stats ? &t->stats : NULL,
                            &err) &&
        !t->flush_failed) {
        fprintf(stderr, "\nkakeya ask: %s\n", err.msg);
        t->flush_failed = true;   /* said once; the final write retries */
    }
    t->last_flush = now_seconds();
}

static bool on_token(void *ud, int32_t id, const char *text,
                     const struct kk_stats *stats)
{
    struct turn *t = ud;
    size_t n = strlen(text);
    fwrite(text, 1, n, stdout);
    fflush(stdout);
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->answer, cap);
        if (!p)
            return false;   /* stop: what was streamed so far is kept */
        t->answer = p;
        t->cap = cap;
    }
    memcpy(t->answer + t->len, text, n + 1);
    t->len += n;
    if (id >= 0)
        t->n_tokens++;
    char proposer[sizeof t->stats.proposer];
    memcpy(proposer, t->stats.proposer, sizeof proposer);
    stats_for_store(stats, proposer, &t->stats);
    t->has_stats = true;
    if (now_seconds() - t->last_flush >= 1.0)
        turn_flush(t);
    return true;
}

/* The conversation's messages as the chat template takes them (system
 * prompt first) into roles/contents (n + 1 entries); returns how many. */
static size_t conversation_messages(const char *system_prompt,
                                    const struct store_message *msgs,
                                    size_t n, const char **roles,
                                    const char **contents)
{
    size_t k = 0;
    if (system_prompt[0]) {
        roles[k] = "system";
        contents[k++] = system_prompt;
    }
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role == STORE_ROLE_SYSTEM)
            continue;
        roles[k] = store_role_name(msgs[i].role);
        contents[k++] = msgs[i].content;
    }
    return k;
}

/* Renders and tokenizes the conversation into *ids, under the overflow
 * policy when it does not fit with room for the answer (reserve): drop
 * leaves the oldest turns out, sink re-creates the sessions; refuse (and
 * ask) fails with what to do. Returns the token count or -1. */
static int render_fitting(struct engine *g, const struct ask_options *o,
                          const char *const *roles,
                          const char *const *contents, size_t n,
                          int32_t **ids, struct kk_error *err)
{
    int count = overflow_tokenize(g->model, roles, contents, n, true, ids,
                                  err);
    int n_ctx = kk_session_n_ctx(g->session);
    int reserve = overflow_reserve(n_ctx, o->n_predict);
    if (count < 0 || count + reserve <= n_ctx)
        return count;
    if (o->overflow == OVERFLOW_SINK)
        return engine_sink(g, o, count + reserve, err) ? -1 : count;
    struct overflow_model om = {g->model, true};
    struct overflow_plan plan;
    if (overflow_plan(roles, contents, n, n_ctx, reserve,
                      overflow_count_model, &om, &plan, err))
        return -1;
    if (o->overflow == OVERFLOW_DROP && plan.can_drop) {
        const char **r = calloc(n + 1, sizeof *r), **c = calloc(n + 1, sizeof *c);
        int kept = -1;
        if (!r || !c) {
            kk_fail(err, "out of memory");
        } else {
            size_t k = overflow_apply(&plan, roles, contents, n, r, c);
            free(*ids);
            *ids = NULL;
            kept = overflow_tokenize(g->model, r, c, k, true, ids, err);
        }
        free(r);
        free(c);
        if (kept >= 0)
            fprintf(stderr, "kakeya ask: left the %d oldest turn%s out of the "
                            "model's context (%d of %d tokens now); they "
                            "stay in the conversation\n",
                    plan.n_dropped_turns, plan.n_dropped_turns == 1 ? "" : "s",
                    kept, n_ctx);
        return kept;
    }
    char what[512];
    overflow_describe(&plan, what, sizeof what);
    return kk_fail(err, "%s. Nothing was sent to the model (the question is "
                   "saved). Pass %s--overflow sink (LOSSY sink+window), or a "
                   "larger --ctx", what,
                   plan.can_drop ? "--overflow drop (leave the oldest turns "
                                   "out of the model's context), " : "");
}

/* Stores the document (as the chat does: a documents row and a user
 * message naming it) and the question, each committed before the model
 * runs. */
static int store_inputs(struct store *s, int64_t conv, const char *document,
                        const char *question, struct kk_error *err)
{
    int64_t id;
    if (document) {
        static const char head[] = "Document: stdin\n\n";
        size_t len = strlen(document);
        char *content = malloc(sizeof head + len);
        if (!content)
            return kk_fail(err, "out of memory");
        memcpy(content, head, sizeof head - 1);
        memcpy(content + sizeof head - 1, document, len + 1);
        int rc = store_add_document(s, conv, document, "stdin", 0, &id, err) ||
                 store_add_message(s, conv, STORE_ROLE_USER, content, 0, NULL,
                                   &id, err);
        free(content);
        if (rc)
            return -1;
    }
    return store_add_message(s, conv, STORE_ROLE_USER, question, 0, NULL, &id,
                             err);
}

/* The conversation to continue (checked) or a new one titled after the
 * question; its system prompt in *system_prompt (malloc'd). */
static int open_conversation(struct store *s, const struct ask_options *o,
                             const struct engine *g, int64_t *conv,
                             char **system_prompt, struct kk_error *err)
{
    if (o->conversation_id) {
        struct store_conversation c = {0};
        if (store_get_conversation(s, o->conversation_id, &c, err))
            return -1;
        *system_prompt = strdup(c.system_prompt);
        store_conversation_free(&c);
        *conv = o->conversation_id;
        return *system_prompt ? 0 : kk_fail(err, "out of memory");
    }
    char title[TITLE_CHARS * 4 + 1];
    make_title(o->question, title, sizeof title);
    *system_prompt = strdup("");
    if (!*system_prompt)
        return kk_fail(err, "out of memory");
    return store_create_conversation(s, title, "", base_name(g->model_path),
                                     g->draft_path ? base_name(g->draft_path)
                                                   : "",
                                     conv, err);
}

/* Restores the conversation's checkpoint into the session when it helps;
 * returns the prompt tokens the session already holds. */
static int resume_from_store(struct store *s, int64_t conv,
                             struct kk_session *session, const char *fp,
                             const int32_t *ids, int n, int *restored)
{
    struct store_checkpoint ck;
    struct kk_error err = {{0}};
    char note[160];
    int rc = checkpoint_fetch(s, conv, fp, &ck, note, sizeof note, &err);
    if (rc < 0)
        fprintf(stderr, "kakeya ask: saved context not read (%s) — "
                        "recomputing\n", err.msg);
    else if (note[0])
        fprintf(stderr, "kakeya ask: %s\n", note);
    struct checkpoint_resume res;
    checkpoint_resume(session, rc == 1 ? ck.kv : NULL, ck.kv_bytes,
                      ck.token_ids, ck.n_tokens, ids, n, &res);
    if (res.refused)
        fprintf(stderr, "kakeya ask: %s\n", res.note);
    store_checkpoint_free(&ck);
    *restored = res.restored;
    return res.kept;
}

/* Generates the answer into the started turn t; 0 or -1. */
static int answer(struct engine *g, struct turn *t,
                  const struct ask_options *o,
                  const char *system_prompt, struct kk_stats *st,
                  int *restored, struct kk_error *err)
{
    struct store_message *msgs = NULL;
    size_t n_all = 0;
    int32_t *ids = NULL;
    int rc = -1;
    if (store_list_messages(t->store, t->conversation_id, &msgs, &n_all, err))
        return -1;
    /* The partial answer begun for this turn is not part of the prompt. */
    size_t n_msgs = n_all;
    if (n_msgs && msgs[n_msgs - 1].id == t->answer_id)
        n_msgs--;
    const char **roles = calloc(n_msgs + 1, sizeof *roles);
    const char **contents = calloc(n_msgs + 1, sizeof *contents);
    int n = -1;
    if (!roles || !contents)
        kk_fail(err, "out of memory");
    else
        n = render_fitting(g, o, roles, contents,
                           conversation_messages(system_prompt, msgs, n_msgs,
                                                 roles, contents),
                           &ids, err);
    free(roles);
    free(contents);
    if (n < 0)
        goto out;
    int n_ctx = kk_session_n_ctx(g->session);
    int room = n_ctx - n - 17;   /* the largest draft block stays free */
    if (room < 1) {
        kk_fail(err, "the conversation (%d tokens) does not fit the context "
                     "of %d tokens: start a new one or pass a larger --ctx",
                n, n_ctx);
        goto out;
    }
    int keep = o->conversation_id
                   ? resume_from_store(t->store, t->conversation_id,
                                       g->session,
                                       kk_model_fingerprint(g->model), ids, n,
                                       restored)
                   : 0;
    struct kk_generate_params gp = {
        .n_predict = o->n_predict < room ? o->n_predict : room,
        .stop_at_eog = true,
        .spec = g->draft ? KK_SPEC_AUTO : KK_SPEC_NGRAM,
        .draft = g->draft,
        .stop = &stop_requested,
    };
    t->last_flush = now_seconds();
    rc = kk_generate(g->session, ids + keep, n - keep, &gp, on_token, t, st,
                     err);
out:
    store_messages_free(msgs, n_all);
    free(ids);
    return rc;
}

static void print_stats(const struct kk_stats *st, int restored)
{
    fprintf(stderr, "[%d tokens, %.1f tok/s, tau %.2f; prompt: %d tokens "
                    "computed in %.2f s",
            st->n_generated, st->decode_tok_per_s, st->tau, st->n_prompt,
            st->prefill_seconds);
    if (restored)
        fprintf(stderr, ", %d restored from saved context", restored);
    fprintf(stderr, "%s]\n", st->stopped_by_request ? "; stopped" : "");
}

/* Stores the session after the turn; a failure only costs a later
 * recompute, so it is a warning. */
static void save_checkpoint(struct store *s, int64_t conv,
                            const struct engine *g, uint64_t budget)
{
    size_t bytes;
    void *blob = kk_session_save(g->session, &bytes);
    int n;
    const int32_t *ids = kk_session_tokens(g->session, &n);
    struct kk_error err = {{0}};
    if (!blob)
        kk_fail(&err, "out of memory");
    if (!blob || checkpoint_store(s, conv, kk_model_fingerprint(g->model), ids,
                                  (size_t)n, blob, bytes, budget, &err))
        fprintf(stderr, "kakeya ask: context checkpoint not saved: %s\n",
                err.msg);
    free(blob);
}

static int run_turn(struct store *s, struct engine *g,
                    const struct ask_options *o, const char *document,
                    int64_t *conv, struct kk_error *err)
{
    char *system_prompt = NULL;
    struct turn t = {.store = s};
    snprintf(t.stats.proposer, sizeof t.stats.proposer, "%s",
             g->draft ? "draft+ngram" : "ngram");
    if (open_conversation(s, o, g, conv, &system_prompt, err))
        return -1;
    t.conversation_id = *conv;
    struct kk_stats st = {0};
    int restored = 0, rc = -1;
    if (store_inputs(s, *conv, document, o->question, err) ||
        store_begin_answer(s, *conv, &t.answer_id, err))
        goto out;
    rc = answer(g, &t, o, system_prompt, &st, &restored, err);
    if (rc == 0) {
        char proposer[sizeof t.stats.proposer];
        memcpy(proposer, t.stats.proposer, sizeof proposer);
        stats_for_store(&st, proposer, &t.stats);
        t.has_stats = true;
    }
    /* Final on success, stop and error alike: what streamed is kept. */
    struct kk_error ferr = {{0}};
    if (store_finish_answer(s, t.answer_id, t.answer ? t.answer : "",
                            t.n_tokens, t.has_stats ? &t.stats : NULL, &ferr)) {
        if (rc == 0)
            *err = ferr;
        rc = -1;
    }
    if (t.len && t.answer[t.len - 1] != '\n')
        putchar('\n');
    fflush(stdout);
    if (rc == 0) {
        print_stats(&st, restored);
        save_checkpoint(s, *conv, g,
                        (uint64_t)o->checkpoint_budget_mib << 20);
    }
out:
    free(t.answer);
    free(system_prompt);
    return rc;
}

static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cmd_ask(int argc, char **argv)
{
    struct ask_options o;
    int rc = parse_ask(argc, argv, &o);
    if (rc)
        return rc;
    struct chat_paths paths;
    if (chat_resolve_paths("kakeya ask", o.model, o.draft, o.db, &paths))
        return 1;
    const char *model = paths.model, *draft = paths.draft, *db = paths.db;
    bool have_draft = paths.has_draft;
    struct kk_error err = {{0}};
    bool failed;
    char *document = read_document(&failed);
    if (failed)
        return 1;
    struct engine g = {.model_path = model,
                       .draft_path = have_draft ? draft : NULL};
    struct store *s = NULL;
    int64_t conv = 0;
    rc = 1;
    /* The model first: a file that does not load leaves no empty turn. */
    if (engine_open(&g, &o, &err) || store_open(db, NULL, &s, &err)) {
        fprintf(stderr, "kakeya ask: %s\n", err.msg);
        goto out;
    }
    catch_stop_signals();
    if (run_turn(s, &g, &o, document, &conv, &err))
        fprintf(stderr, "kakeya ask: %s\n", err.msg);
    else
        rc = 0;
    if (atomic_load(&stop_requested)) {
        fprintf(stderr, "kakeya ask: stopped; the partial answer is kept\n");
        rc = 1;
    }
    if (conv)
        fprintf(stderr, "conversation %lld\n", (long long)conv);
out:
    store_close(s);
    engine_close(&g);
    free(document);
    return rc;
}
