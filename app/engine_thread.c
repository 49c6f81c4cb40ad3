/* engine_thread.c — the engine's own thread and its two queues (see
 * engine_thread.h). Everything below "engine side" runs on that thread
 * only; the queues are the one place both threads touch, under mu. */
#include "engine_thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "checkpoint.h"
#include "error.h"

struct request {
    struct request *next;
    enum engine_request_kind kind;
    uint64_t id;
    size_t n;
    const char **roles;
    char **contents;
    int64_t conversation_id;
    struct engine_checkpoint restore;
    enum overflow_policy policy;
    int reserve;                 /* 0: overflow_reserve's default */
};

static void request_free(struct request *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->contents && i < r->n; i++)
        free(r->contents[i]);
    free(r->contents);
    free(r->roles);
    engine_checkpoint_free(&r->restore);
    free(r);
}

struct event_node {
    struct event_node *next;
    struct engine_event ev;
};

struct engine_thread {
    pthread_t thread;
    int efd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct request *req_head, *req_tail;
    struct event_node *ev_head, *ev_tail;
    bool quitting;
    bool joined;
    uint64_t next_id;
    _Atomic(bool) stop;
    /* engine side */
    struct engine_config cfg;
    char *model_path, *draft_path;
    struct kk_model *model, *draft_model;
    struct kk_session *session, *draft_session;
    uint64_t current_id;
    bool is_lossy;               /* the sessions use sink+window */
    int base_ctx;                /* the context first opened */
};

void engine_checkpoint_free(struct engine_checkpoint *c)
{
    if (!c)
        return;
    free(c->blob);
    free(c->token_ids);
    memset(c, 0, sizeof *c);
}

void engine_event_free(struct engine_event *ev)
{
    if (ev) {
        free(ev->text);
        ev->text = NULL;
        engine_checkpoint_free(&ev->checkpoint);
    }
}

/* ---- the event queue ---- */

static void post(struct engine_thread *e, const struct engine_event *ev)
{
    struct event_node *n = malloc(sizeof *n);
    if (!n) {
        struct engine_event lost = *ev;
        engine_event_free(&lost);
        return;   /* a lost token beats a crash; DONE/ERROR are tiny */
    }
    n->next = NULL;
    n->ev = *ev;
    n->ev.is_lossy = e->is_lossy;
    pthread_mutex_lock(&e->mu);
    if (e->ev_tail)
        e->ev_tail->next = n;
    else
        e->ev_head = n;
    e->ev_tail = n;
    pthread_mutex_unlock(&e->mu);
    uint64_t one = 1;
    ssize_t w = write(e->efd, &one, sizeof one);
    (void)w;   /* the counter only saturates; the UI drains the queue */
}

static void post_error(struct engine_thread *e, uint64_t id,
                       const struct kk_error *err)
{
    struct engine_event ev = {.kind = ENGINE_EVENT_ERROR, .request_id = id};
    ev.err = *err;
    if (!ev.err.msg[0])
        snprintf(ev.err.msg, sizeof ev.err.msg, "out of memory");
    post(e, &ev);
}

bool engine_thread_poll(struct engine_thread *e, struct engine_event *out)
{
    pthread_mutex_lock(&e->mu);
    struct event_node *n = e->ev_head;
    if (n) {
        e->ev_head = n->next;
        if (!e->ev_head)
            e->ev_tail = NULL;
    } else {
        uint64_t count;
        ssize_t r = read(e->efd, &count, sizeof count);  /* non-blocking */
        (void)r;
    }
    pthread_mutex_unlock(&e->mu);
    if (!n)
        return false;
    *out = n->ev;
    free(n);
    return true;
}

/* ---- engine side ---- */

static void base_name(const char *path, char *buf, size_t size)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    snprintf(buf, size, "%s", slash ? slash + 1 : path ? path : "");
}

static int open_models(struct engine_thread *e, struct engine_event *ready,
                       struct kk_error *err)
{
    struct kk_session_params sp = {.n_ctx = e->cfg.n_ctx,
                                   .n_threads = e->cfg.n_threads,
                                   .backend = e->cfg.backend,
                                   .device = e->cfg.device};
    if (kk_model_open(e->model_path, &e->model, err) ||
        kk_session_new(e->model, &sp, &e->session, err))
        return -1;
    base_name(e->model_path, ready->model_name, sizeof ready->model_name);
    snprintf(ready->fingerprint, sizeof ready->fingerprint, "%s",
             kk_model_fingerprint(e->model));
    ready->n_ctx = kk_session_n_ctx(e->session);
    e->base_ctx = ready->n_ctx;
    if (!e->draft_path)
        return 0;
    sp.n_ctx = ready->n_ctx;
    struct kk_error derr = {{0}};
    if (kk_model_open(e->draft_path, &e->draft_model, &derr) ||
        kk_check_draft(e->model, e->draft_model, &derr) ||
        kk_draft_session_new(e->draft_model, &sp, &e->draft_session, &derr)) {
        /* The chat still works without a draft: say so and go on. */
        kk_session_free(e->draft_session);
        kk_model_close(e->draft_model);
        e->draft_session = NULL;
        e->draft_model = NULL;
        struct engine_event ev = {.kind = ENGINE_EVENT_ERROR};
        snprintf(ev.err.msg, sizeof ev.err.msg,
                 "draft model not used (n-gram lookup instead): %.400s",
                 derr.msg);
        post(e, &ev);
        return 0;
    }
    ready->has_draft = true;
    base_name(e->draft_path, ready->draft_name, sizeof ready->draft_name);
    return 0;
}

/* Renders the request's messages with the chat template and tokenizes
 * them (special tokens parsed); returns the count or -1. */
static int tokenize_prompt(struct engine_thread *e, const struct request *r,
                           int32_t **ids, struct kk_error *err)
{
    return overflow_tokenize(e->model, r->roles,
                             (const char *const *)r->contents, r->n,
                             r->kind == ENGINE_REQUEST_GENERATE, ids, err);
}

/* Brings the session to the longest prefix of ids it can have without
 * computing: what it holds, or the request's checkpoint when that covers
 * more (a RESUME event tells the UI which). Returns the tokens kept. */
static int resume(struct engine_thread *e, const struct request *r,
                  const int32_t *ids, int n)
{
    const struct engine_checkpoint *c = &r->restore;
    struct checkpoint_resume res;
    checkpoint_resume(e->session, c->blob, c->bytes, c->token_ids,
                      c->n_tokens, ids, n, &res);
    if (res.restored || res.refused) {
        struct engine_event ev = {.kind = ENGINE_EVENT_RESUME,
                                  .request_id = r->id,
                                  .done = res.restored};
        ev.text = strdup(res.note);
        if (ev.text)
            post(e, &ev);
    }
    return res.kept;
}

/* Posts the session's state for the controller to store. */
static void post_checkpoint(struct engine_thread *e, const struct request *r)
{
    struct engine_event ev = {.kind = ENGINE_EVENT_CHECKPOINT,
                              .request_id = r->id};
    struct engine_checkpoint *c = &ev.checkpoint;
    int n;
    const int32_t *ids = kk_session_tokens(e->session, &n);
    c->conversation_id = r->conversation_id;
    snprintf(c->fingerprint, sizeof c->fingerprint, "%s",
             kk_model_fingerprint(e->model));
    c->blob = kk_session_save(e->session, &c->bytes);
    c->token_ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    c->n_tokens = (size_t)n;
    if (!c->blob || !c->token_ids) {
        engine_checkpoint_free(c);   /* only a later recompute is lost */
        return;
    }
    memcpy(c->token_ids, ids, sizeof *ids * (size_t)n);
    post(e, &ev);
}

static bool on_token(void *ud, int32_t id, const char *text,
                     const struct kk_stats *stats)
{
    struct engine_thread *e = ud;
    struct engine_event ev = {.kind = ENGINE_EVENT_TOKEN,
                              .request_id = e->current_id,
                              .stats = *stats};
    ev.text = strdup(text ? text : "");
    if (!ev.text)
        return true;
    post(e, &ev);
    return true;
}

static void on_progress(void *ud, int done, int total)
{
    struct engine_thread *e = ud;
    struct engine_event ev = {.kind = ENGINE_EVENT_PROGRESS,
                              .request_id = e->current_id,
                              .done = done, .total = total};
    post(e, &ev);
}

/* ---- context overflow ---- */

static void post_text(struct engine_thread *e, const struct request *r,
                      enum engine_event_kind kind,
                      const struct overflow_plan *plan, const char *text)
{
    struct engine_event ev = {.kind = kind, .request_id = r->id,
                              .policy = r->policy};
    if (plan)
        ev.plan = *plan;
    ev.text = strdup(text);
    if (ev.text)
        post(e, &ev);
}

/* drop: replaces *ids with the conversation rendered without the plan's
 * oldest turns; returns their count or -1. */
static int apply_drop(struct engine_thread *e, const struct request *r,
                      const struct overflow_plan *plan, int32_t **ids,
                      struct kk_error *err)
{
    const char **roles = malloc(sizeof *roles * (r->n + 1));
    const char **contents = malloc(sizeof *contents * (r->n + 1));
    int32_t *kept = NULL;
    int n = -1;
    if (!roles || !contents) {
        kk_fail(err, "out of memory dropping turns");
    } else {
        size_t k = overflow_apply(plan, r->roles,
                                  (const char *const *)r->contents, r->n,
                                  roles, contents);
        n = overflow_tokenize(e->model, roles, contents, k,
                              r->kind == ENGINE_REQUEST_GENERATE, &kept, err);
    }
    free(roles);
    free(contents);
    if (n < 0)
        return -1;
    free(*ids);
    *ids = kept;
    char note[256];
    snprintf(note, sizeof note, "left the %d oldest turn%s (%d messages) out "
             "of the model's context: %d of %d tokens now; they stay in the "
             "conversation", plan->n_dropped_turns,
             plan->n_dropped_turns == 1 ? "" : "s", plan->n_dropped_messages,
             n, plan->n_ctx);
    post_text(e, r, ENGINE_EVENT_NOTE, plan, note);
    return n;
}

/* sink: new sessions (target and draft) with room for need tokens and the
 * LOSSY sink+window cache on global layers, holding about as many
 * positions as the first context did. */
static int apply_sink(struct engine_thread *e, const struct request *r,
                      int need, struct kk_error *err)
{
    int old = kk_session_n_ctx(e->session);
    int n_ctx = 2 * old > need ? 2 * old : (need + 255) / 256 * 256;
    int sinks = e->cfg.kv_sinks > 0 ? e->cfg.kv_sinks : 4;
    int window = e->base_ctx - sinks - 17;
    struct kk_session_params sp = {.n_ctx = n_ctx,
                                   .n_threads = e->cfg.n_threads,
                                   .backend = e->cfg.backend,
                                   .device = e->cfg.device,
                                   .kv_window = window > 16 ? window : 16,
                                   .kv_sinks = sinks};
    struct kk_session *s = NULL, *ds = NULL;
    if (kk_session_new(e->model, &sp, &s, err) ||
        (e->draft_model && kk_draft_session_new(e->draft_model, &sp, &ds, err))) {
        kk_session_free(s);
        return -1;
    }
    kk_session_free(e->session);
    kk_session_free(e->draft_session);
    e->session = s;
    e->draft_session = ds;
    e->is_lossy = true;
    char note[256];
    snprintf(note, sizeof note, "sink+window (LOSSY): the context is now %d "
             "tokens; global layers keep only the first %d and the last %d "
             "positions, so the middle of the conversation is forgotten",
             n_ctx, sinks, sp.kv_window);
    post_text(e, r, ENGINE_EVENT_NOTE, NULL, note);
    return 0;
}

/* The conversation (n tokens in *ids) plus reserve does not fit: applies
 * the request's policy. 0: go on with *ids and *n; 1: the request is over
 * (an OVERFLOW event says why); -1: error. */
static int fit_context(struct engine_thread *e, const struct request *r,
                       int reserve, int32_t **ids, int *n,
                       struct kk_error *err)
{
    if (r->policy == OVERFLOW_SINK)
        return apply_sink(e, r, *n + reserve, err);
    struct overflow_model om = {e->model, r->kind == ENGINE_REQUEST_GENERATE};
    struct overflow_plan plan;
    if (overflow_plan(r->roles, (const char *const *)r->contents, r->n,
                      kk_session_n_ctx(e->session), reserve,
                      overflow_count_model, &om, &plan, err))
        return -1;
    if (r->policy == OVERFLOW_DROP && plan.can_drop) {
        *n = apply_drop(e, r, &plan, ids, err);
        return *n < 0 ? -1 : 0;
    }
    char text[512];
    overflow_describe(&plan, text, sizeof text);
    post_text(e, r, ENGINE_EVENT_OVERFLOW, &plan, text);
    return 1;
}

/* Runs one request; *computed says how many prompt tokens it evaluated.
 * Returns 0, 1 when the context overflowed and the request ended without
 * running (fit_context says why), or -1. */
static int run_request(struct engine_thread *e, const struct request *r,
                       struct kk_stats *st, int *computed,
                       struct kk_error *err)
{
    int32_t *ids = NULL;
    int n = tokenize_prompt(e, r, &ids, err);
    int rc = -1;
    if (n < 0)
        goto out;
    int reserve = r->reserve > 0 ? r->reserve
                                 : overflow_reserve(kk_session_n_ctx(e->session),
                                                    e->cfg.n_predict);
    if (n + reserve > kk_session_n_ctx(e->session) &&
        (rc = fit_context(e, r, reserve, &ids, &n, err)) != 0)
        goto out;
    rc = -1;
    int n_ctx = kk_session_n_ctx(e->session);
    int room = n_ctx - n - 17;   /* the largest draft block stays free */
    if (n >= n_ctx || (r->kind == ENGINE_REQUEST_GENERATE && room < 1)) {
        kk_fail(err, "the conversation (%d tokens) no longer fits the "
                     "context of %d tokens: start a new one (F2) or run "
                     "with a larger --ctx", n, n_ctx);
        goto out;
    }
    int keep = resume(e, r, ids, n);
    *computed = n - keep;
    if (r->kind == ENGINE_REQUEST_PREFILL) {
        rc = kk_session_eval(e->session, ids + keep, n - keep, false,
                             on_progress, e, err);
        *st = (struct kk_stats){.n_prompt = n - keep, .n_ctx = n_ctx,
                                .n_tokens = kk_session_n_tokens(e->session)};
        goto out;
    }
    struct kk_generate_params gp = {
        .n_predict = e->cfg.n_predict < room ? e->cfg.n_predict : room,
        .stop_at_eog = true,
        .spec = e->draft_session ? KK_SPEC_AUTO : KK_SPEC_NGRAM,
        .draft = e->draft_session,
        .stop = &e->stop,
    };
    rc = kk_generate(e->session, ids + keep, n - keep, &gp, on_token, e, st,
                     err);
out:
    free(ids);
    return rc;
}

static struct request *next_request(struct engine_thread *e)
{
    pthread_mutex_lock(&e->mu);
    while (!e->req_head && !e->quitting)
        pthread_cond_wait(&e->cv, &e->mu);
    struct request *r = NULL;
    if (!e->quitting) {
        r = e->req_head;
        e->req_head = r->next;
        if (!e->req_head)
            e->req_tail = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    return r;
}

static void *engine_main(void *arg)
{
    struct engine_thread *e = arg;
    struct kk_error err = {{0}};
    struct engine_event ready = {.kind = ENGINE_EVENT_READY};
    bool ok = open_models(e, &ready, &err) == 0;
    if (ok)
        post(e, &ready);
    else
        post_error(e, 0, &err);
    struct request *r;
    while ((r = next_request(e))) {
        e->current_id = r->id;
        struct kk_stats st = {0};
        int computed = 0, rc;
        err.msg[0] = 0;
        if (!ok) {
            kk_fail(&err, "no model is loaded (see the message above)");
            post_error(e, r->id, &err);
        } else if ((rc = run_request(e, r, &st, &computed, &err)) < 0) {
            post_error(e, r->id, &err);
        } else if (rc == 0) {
            struct engine_event done = {.kind = ENGINE_EVENT_DONE,
                                        .request_id = r->id, .stats = st};
            post(e, &done);
            /* Worth storing: a turn, or a prefill a reopening would
             * otherwise redo (not one that only resumed a checkpoint). */
            if (r->conversation_id &&
                (r->kind == ENGINE_REQUEST_GENERATE ||
                 computed >= CHECKPOINT_MIN_NEW_TOKENS))
                post_checkpoint(e, r);
        }
        request_free(r);
    }
    return NULL;
}

/* ---- UI side ---- */

int engine_thread_start(const struct engine_config *cfg,
                        struct engine_thread **out, struct kk_error *err)
{
    struct engine_thread *e = calloc(1, sizeof *e);
    if (!e)
        return kk_fail(err, "out of memory");
    e->cfg = *cfg;
    e->model_path = strdup(cfg->model_path ? cfg->model_path : "");
    e->draft_path = cfg->draft_path ? strdup(cfg->draft_path) : NULL;
    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    atomic_init(&e->stop, false);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->model_path || (cfg->draft_path && !e->draft_path) || e->efd < 0 ||
        pthread_create(&e->thread, NULL, engine_main, e)) {
        if (e->efd >= 0)
            close(e->efd);
        free(e->model_path);
        free(e->draft_path);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return kk_fail(err, "cannot start the engine thread");
    }
    *out = e;
    return 0;
}

void engine_thread_join(struct engine_thread *e)
{
    if (!e || e->joined)
        return;
    atomic_store(&e->stop, true);
    pthread_mutex_lock(&e->mu);
    e->quitting = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->joined = true;
}

void engine_thread_stop(struct engine_thread *e)
{
    if (!e)
        return;
    engine_thread_join(e);
    for (struct request *r = e->req_head, *next; r; r = next) {
        next = r->next;
        request_free(r);
    }
    for (struct event_node *n = e->ev_head, *next; n; n = next) {
        next = n->next;
        engine_event_free(&n->ev);
        free(n);
    }
    kk_session_free(e->draft_session);
    kk_model_close(e->draft_model);
    kk_session_free(e->session);
    kk_model_close(e->model);
    close(e->efd);
    free(e->model_path);
    free(e->draft_path);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

int engine_thread_fd(const struct engine_thread *e) { return e->efd; }

uint64_t engine_thread_submit(struct engine_thread *e,
                              enum engine_request_kind kind,
                              const char *const *roles,
                              const char *const *contents, size_t n,
                              int64_t conversation_id,
                              struct engine_checkpoint *restore)
{
    return engine_thread_submit_policy(e, kind, roles, contents, n,
                                       conversation_id, restore,
                                       OVERFLOW_ASK, 0);
}

uint64_t engine_thread_submit_policy(struct engine_thread *e,
                                     enum engine_request_kind kind,
                                     const char *const *roles,
                                     const char *const *contents, size_t n,
                                     int64_t conversation_id,
                                     struct engine_checkpoint *restore,
                                     enum overflow_policy policy,
                                     int reserve)
{
    struct request *r = calloc(1, sizeof *r);
    if (!r) {
        engine_checkpoint_free(restore);
        return 0;
    }
    if (restore) {
        r->restore = *restore;
        memset(restore, 0, sizeof *restore);
    }
    r->conversation_id = conversation_id;
    r->kind = kind;
    r->policy = policy;
    r->reserve = reserve;
    r->n = n;
    r->roles = calloc(n + 1, sizeof *r->roles);
    r->contents = calloc(n + 1, sizeof *r->contents);
    bool ok = r->roles && r->contents;
    for (size_t i = 0; ok && i < n; i++) {
        r->roles[i] = roles[i];
        r->contents[i] = strdup(contents[i]);
        ok = r->contents[i] != NULL;
    }
    if (!ok) {
        request_free(r);
        return 0;
    }
    atomic_store(&e->stop, false);
    pthread_mutex_lock(&e->mu);
    r->id = ++e->next_id;
    if (e->req_tail)
        e->req_tail->next = r;
    else
        e->req_head = r;
    e->req_tail = r;
    uint64_t id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return id;
}

void engine_thread_request_stop(struct engine_thread *e)
{
    atomic_store(&e->stop, true);
}
