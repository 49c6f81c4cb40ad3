/* controller.c — turns, conversations and the store, on the UI thread
 * (see controller.h). */
#include "controller.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "error.h"
#include "store_edit.h"

enum { TITLE_CHARS = 48, MAX_DOCUMENT_BYTES = 8 << 20 };

double controller_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void controller_notice(struct controller *c, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* A notice after a streaming answer would break appending to it. */
    if (c->streaming) {
        snprintf(c->panes.note, sizeof c->panes.note, "%.150s", buf);
    } else {
        transcript_add(c->transcript, TRANSCRIPT_NOTICE, buf);
        transcript_scroll_to(c->transcript, false, 0);
    }
    c->dirty = true;
}

static void notice_error(struct controller *c, const struct kk_error *err)
{
    controller_notice(c, "error: %s", err->msg[0] ? err->msg
                                                  : "out of memory");
}

static enum transcript_role role_for(enum store_role r)
{
    return r == STORE_ROLE_USER        ? TRANSCRIPT_USER
           : r == STORE_ROLE_ASSISTANT ? TRANSCRIPT_ASSISTANT
                                       : TRANSCRIPT_SYSTEM;
}

/* ---- the message mirror ---- */

static int msgs_push(struct controller *c, enum store_role role,
                     const char *content, int64_t id)
{
    if (c->n_msgs == c->cap_msgs) {
        int cap = c->cap_msgs ? c->cap_msgs * 2 : 16;
        void *p = realloc(c->msgs, sizeof *c->msgs * (size_t)cap);
        if (!p)
            return -1;
        c->msgs = p;
        c->cap_msgs = cap;
    }
    char *copy = strdup(content);
    if (!copy)
        return -1;
    c->msgs[c->n_msgs++] = (struct chat_message){role, copy, id};
    return 0;
}

static void msgs_clear(struct controller *c)
{
    for (int i = 0; i < c->n_msgs; i++)
        free(c->msgs[i].content);
    c->n_msgs = 0;
}

/* Drops the mirror from message i on, in the store and on screen. */
static int msgs_drop_from(struct controller *c, int i)
{
    struct kk_error err = {{0}};
    if (i >= c->n_msgs)
        return 0;
    if (store_delete_messages_from(c->store, c->conv_id, c->msgs[i].id,
                                   &err)) {
        notice_error(c, &err);
        return -1;
    }
    /* Transcript messages include notices: find the i-th real message. */
    int seen = 0, cut = transcript_n_messages(c->transcript);
    for (int k = 0; k < transcript_n_messages(c->transcript); k++) {
        if (transcript_role_of(c->transcript, k) == TRANSCRIPT_NOTICE)
            continue;
        if (seen++ == i) {
            cut = k;
            break;
        }
    }
    transcript_truncate(c->transcript, cut);
    while (c->n_msgs > i)
        free(c->msgs[--c->n_msgs].content);
    return 0;
}

/* ---- the conversation list ---- */

static void refresh_list(struct controller *c)
{
    struct store_conversation *list = NULL;
    size_t n = 0;
    struct kk_error err = {{0}};
    if (store_list_conversations(c->store, &list, &n, &err)) {
        notice_error(c, &err);
        return;
    }
    struct convlist_item *items = calloc(n + 1, sizeof *items);
    if (items) {
        for (size_t i = 0; i < n; i++) {
            items[i].id = list[i].id;
            items[i].n_messages = list[i].n_messages;
            snprintf(items[i].title, sizeof items[i].title, "%s",
                     list[i].title);
        }
        free(c->convs);
        c->convs = items;
        c->n_convs = (int)n;
    }
    store_conversations_free(list, n);
    c->dirty = true;
}

/* ---- engine requests ---- */

/* Sends the conversation (system prompt first) to the engine, with a
 * checkpoint to restore (may be NULL; taken over), under an overflow
 * policy (reserve 0: the default room for the answer). */
static uint64_t send_conversation_policy(struct controller *c,
                                         enum engine_request_kind kind,
                                         struct engine_checkpoint *restore,
                                         enum overflow_policy policy,
                                         int reserve)
{
    size_t n = (size_t)c->n_msgs + 1, k = 0;
    const char **roles = calloc(n, sizeof *roles);
    const char **contents = calloc(n, sizeof *contents);
    uint64_t id = 0;
    if (roles && contents) {
        if (c->system_prompt && c->system_prompt[0]) {
            roles[k] = "system";
            contents[k++] = c->system_prompt;
        }
        for (int i = 0; i < c->n_msgs; i++) {
            if (c->msgs[i].role == STORE_ROLE_SYSTEM)
                continue;
            roles[k] = store_role_name(c->msgs[i].role);
            contents[k++] = c->msgs[i].content;
        }
        id = engine_thread_submit_policy(c->engine, kind, roles, contents,
                                         k, c->conv_id, restore, policy,
                                         reserve);
        restore = NULL;
    }
    engine_checkpoint_free(restore);
    free(roles);
    free(contents);
    if (!id)
        controller_notice(c, "error: out of memory sending the conversation");
    return id;
}

static uint64_t send_conversation(struct controller *c,
                                  enum engine_request_kind kind,
                                  struct engine_checkpoint *restore)
{
    return send_conversation_policy(c, kind, restore, c->overflow, 0);
}

static void stats_for_store(const struct controller *c,
                            const struct kk_stats *st, struct store_stats *out)
{
    *out = (struct store_stats){.tau = st->tau,
                                .acceptance_rate = st->acceptance_rate,
                                .tok_per_s = st->decode_tok_per_s,
                                .kv_saved = st->kv_saved};
    snprintf(out->proposer, sizeof out->proposer, "%s",
             c->panes.proposer ? c->panes.proposer : "none");
}

/* Starts an answer to the conversation as it stands. */
static void start_answer_policy(struct controller *c,
                                enum overflow_policy policy, int reserve)
{
    struct kk_error err = {{0}};
    if (store_begin_answer(c->store, c->conv_id, &c->answer_id, &err)) {
        notice_error(c, &err);
        return;
    }
    c->answer_len = 0;
    c->answer_tokens = 0;
    if (c->answer)
        c->answer[0] = 0;
    c->panes.note[0] = 0;
    c->overflow_note[0] = 0;
    c->choice.open = false;
    c->answer_request = send_conversation_policy(c, ENGINE_REQUEST_GENERATE,
                                                 NULL, policy, reserve);
    if (!c->answer_request)
        return;
    c->streaming = true;
    c->panes.streaming = true;
    c->last_flush = controller_now();
    transcript_add(c->transcript, TRANSCRIPT_ASSISTANT, "");
    transcript_scroll_to(c->transcript, false, 0);
    c->dirty = true;
}

static void start_answer(struct controller *c)
{
    start_answer_policy(c, c->overflow, 0);
}

/* Commits the answer (final, or partial when is_final is false). */
static void commit_answer(struct controller *c, bool is_final)
{
    struct kk_error err = {{0}};
    struct store_stats ss;
    stats_for_store(c, &c->last_stats, &ss);
    const char *text = c->answer ? c->answer : "";
    int rc = is_final
                 ? store_finish_answer(c->store, c->answer_id, text,
                                       c->answer_tokens,
                                       c->has_last_stats ? &ss : NULL, &err)
                 : store_update_answer(c->store, c->answer_id, text,
                                       c->answer_tokens,
                                       c->has_last_stats ? &ss : NULL, &err);
    if (rc)
        notice_error(c, &err);
}

static void end_answer(struct controller *c)
{
    commit_answer(c, true);
    msgs_push(c, STORE_ROLE_ASSISTANT, c->answer ? c->answer : "",
              c->answer_id);
    c->streaming = false;
    c->panes.streaming = false;
    c->answer_request = 0;
    refresh_list(c);
    if (c->overflow_note[0])
        controller_notice(c, "%s", c->overflow_note);
    c->overflow_note[0] = 0;
}

/* The answer begun for a request that never ran (the context overflowed):
 * its empty row and transcript entry go; the question stays. */
static void discard_answer(struct controller *c)
{
    struct kk_error err = {{0}};
    if (c->answer_id &&
        store_delete_messages_from(c->store, c->conv_id, c->answer_id, &err))
        notice_error(c, &err);
    int n = transcript_n_messages(c->transcript);
    if (n && transcript_role_of(c->transcript, n - 1) == TRANSCRIPT_ASSISTANT)
        transcript_truncate(c->transcript, n - 1);
    c->answer_id = 0;
    c->streaming = false;
    c->panes.streaming = false;
    c->answer_request = 0;
    c->overflow_note[0] = 0;
    refresh_list(c);
}

static int answer_append(struct controller *c, const char *text)
{
    size_t len = strlen(text);
    if (c->answer_len + len + 1 > c->answer_cap) {
        size_t cap = c->answer_cap ? c->answer_cap : 1024;
        while (cap < c->answer_len + len + 1)
            cap *= 2;
        char *p = realloc(c->answer, cap);
        if (!p)
            return -1;
        c->answer = p;
        c->answer_cap = cap;
    }
    memcpy(c->answer + c->answer_len, text, len + 1);
    c->answer_len += len;
    return 0;
}

/* ---- engine events ---- */

static void on_ready(struct controller *c, const struct engine_event *ev)
{
    c->model_ready = true;
    snprintf(c->panes.target, sizeof c->panes.target, "%.90s", ev->model_name);
    snprintf(c->panes.draft, sizeof c->panes.draft, "%.90s", ev->draft_name);
    c->panes.proposer = ev->has_draft ? "draft+ngram" : "ngram";
    c->panes.n_ctx = ev->n_ctx;
    snprintf(c->fingerprint, sizeof c->fingerprint, "%s", ev->fingerprint);
    snprintf(c->model_label, sizeof c->model_label, "%.120s%s%.120s",
             ev->model_name,
             ev->has_draft ? " + " : "", ev->draft_name);
    if (!c->streaming)
        c->panes.note[0] = 0;
}

/* The engine's state after a request: stored, then the store pruned to
 * the budget. One transaction of a few MB; a failure costs only a later
 * recompute, so it is a status-line note. */
static void on_checkpoint(struct controller *c, const struct engine_event *ev)
{
    const struct engine_checkpoint *k = &ev->checkpoint;
    struct kk_error err = {{0}};
    if (checkpoint_store(c->store, k->conversation_id, k->fingerprint,
                         k->token_ids, k->n_tokens, k->blob, k->bytes,
                         c->checkpoint_budget, &err))
        snprintf(c->panes.note, sizeof c->panes.note,
                 "context checkpoint not saved: %.120s", err.msg);
}

static void on_resume(struct controller *c, const struct engine_event *ev)
{
    if (ev->request_id == c->prefill_request)
        c->resumed_tokens = ev->done;
    if (ev->done)
        snprintf(c->panes.note, sizeof c->panes.note,
                 "restored %d tokens of saved context", ev->done);
    else
        controller_notice(c, "%s", ev->text ? ev->text : "");
}

/* ---- context overflow ---- */

static bool busy(struct controller *c);

static const char refuse_help[] =
    "nothing was sent to the model and your message stays saved. To go "
    "on: /overflow drop (leave the oldest turns out of the model's "
    "context) or /overflow sink (lossy), then F5 or a new message; F2 for "
    "a new conversation; or restart with a larger --ctx";

/* Opens the overflow prompt for a request of kind that did not run. */
static void offer_choice(struct controller *c, const char *what,
                         bool can_drop, enum engine_request_kind kind,
                         int reserve, bool after_cut)
{
    c->choice = (struct overflow_choice){.open = true, .can_drop = can_drop,
                                         .after_cut = after_cut,
                                         .kind = kind, .reserve = reserve};
    controller_notice(c, "%s.\nContext full — choose: %ss sink+window "
                      "(LOSSY: the middle of the conversation is forgotten), "
                      "r refuse (send nothing)", what,
                      can_drop ? "d drop the oldest turns (they stay saved), "
                               : "");
}

/* The engine's OVERFLOW event: the request ended with nothing evaluated. */
static void on_overflow(struct controller *c, const struct engine_event *ev,
                        enum engine_request_kind kind)
{
    const char *what = ev->text ? ev->text : "the context is full";
    if (kind == ENGINE_REQUEST_PREFILL && !c->prefill_is_document) {
        controller_notice(c, "%s; your next message will ask what to do "
                          "(/overflow sets it ahead)", what);
    } else if (ev->policy == OVERFLOW_REFUSE) {
        controller_notice(c, "refused: %s; %s", what, refuse_help);
    } else {
        if (ev->policy == OVERFLOW_DROP)
            controller_notice(c, "the overflow policy is drop, but dropping "
                                 "turns cannot make this fit");
        offer_choice(c, what, ev->plan.can_drop, kind, 0, false);
    }
}

static void on_answer_cut(struct controller *c)
{
    if (c->overflow == OVERFLOW_REFUSE) {
        controller_notice(c, "the context is full: the answer was cut here. "
                             "/new starts a fresh conversation; /overflow "
                             "drop or sink, then F5, answers again; kakeya "
                             "--ctx N allows a longer one");
        return;
    }
    char what[160];
    snprintf(what, sizeof what, "the context (%d tokens) is full: the answer "
             "was cut after %d tokens", c->last_stats.n_ctx,
             c->answer_tokens);
    /* Answering again needs room for at least what was cut. */
    int reserve = c->answer_tokens +
                  overflow_reserve(c->last_stats.n_ctx, c->n_predict);
    offer_choice(c, what, true, ENGINE_REQUEST_GENERATE, reserve, true);
    controller_notice(c, "d or s answers again (the cut answer is replaced); "
                         "r keeps it");
}

void controller_overflow_choose(struct controller *c, enum overflow_policy p)
{
    if (!c->choice.open) {
        controller_notice(c, "no context overflow to resolve");
        return;
    }
    if (busy(c))
        return;
    if (p == OVERFLOW_DROP && !c->choice.can_drop) {
        controller_notice(c, "dropping turns cannot make this fit: even the "
                             "current message alone is too long. s or r");
        return;
    }
    struct overflow_choice ch = c->choice;
    c->choice.open = false;
    if (p == OVERFLOW_REFUSE || p == OVERFLOW_ASK) {
        if (ch.after_cut)
            controller_notice(c, "kept the cut answer");
        else
            controller_notice(c, "refused: %s", refuse_help);
        return;
    }
    if (ch.kind == ENGINE_REQUEST_PREFILL) {
        c->resumed_tokens = 0;
        c->prefill_request = send_conversation_policy(c, ch.kind, NULL, p,
                                                      ch.reserve);
        c->panes.progress = 0;
        return;
    }
    if (ch.after_cut &&
        (c->n_msgs == 0 ||
         c->msgs[c->n_msgs - 1].role != STORE_ROLE_ASSISTANT ||
         msgs_drop_from(c, c->n_msgs - 1)))
        return;
    start_answer_policy(c, p, ch.reserve);
}

void controller_set_overflow(struct controller *c, const char *name)
{
    enum overflow_policy p;
    if (!name[0]) {
        controller_notice(c, "overflow policy: %s%s", overflow_name(c->overflow),
                          c->panes.kv_lossy ? " (the cache is sink+window "
                                              "now: LOSSY)" : "");
        return;
    }
    if (overflow_parse(name, &p)) {
        controller_notice(c, "usage: /overflow ask|refuse|drop|sink");
        return;
    }
    c->overflow = p;
    if (c->choice.open && p != OVERFLOW_ASK) {
        controller_overflow_choose(c, p);
        return;
    }
    controller_notice(c, "overflow policy: %s, from the next turn", name);
}

static void on_note(struct controller *c, const struct engine_event *ev)
{
    const char *text = ev->text ? ev->text : "";
    snprintf(c->panes.note, sizeof c->panes.note, "%.150s", text);
    if (ev->request_id == c->answer_request)
        snprintf(c->overflow_note, sizeof c->overflow_note, "%s", text);
    else
        controller_notice(c, "%s", text);
}

static void on_event(struct controller *c, struct engine_event *ev)
{
    c->panes.kv_lossy = ev->is_lossy;
    bool is_answer = ev->request_id && ev->request_id == c->answer_request;
    bool is_prefill = ev->request_id && ev->request_id == c->prefill_request;
    switch (ev->kind) {
    case ENGINE_EVENT_READY:
        on_ready(c, ev);
        break;
    case ENGINE_EVENT_TOKEN:
        if (!is_answer)
            break;
        if (answer_append(c, ev->text) == 0)
            transcript_append(c->transcript, ev->text, strlen(ev->text));
        c->answer_tokens++;
        c->last_stats = ev->stats;
        c->has_last_stats = true;
        panes_model_update(&c->panes, &ev->stats);
        break;
    case ENGINE_EVENT_PROGRESS:
        if (is_prefill)
            c->panes.progress = ev->total ? (double)ev->done / ev->total : 0;
        break;
    case ENGINE_EVENT_DONE:
        if (is_answer) {
            if (ev->stats.n_generated || ev->stats.n_prompt) {
                c->last_stats = ev->stats;
                c->has_last_stats = true;
                panes_model_update(&c->panes, &ev->stats);
            }
            end_answer(c);
            if (ev->stats.stopped_by_request)
                controller_notice(c, "stopped; the partial answer is kept");
            else if (ev->stats.stopped_at_context_limit)
                on_answer_cut(c);
        } else if (is_prefill) {
            c->panes.progress = -1;
            c->prefill_request = 0;
            c->panes.n_tokens = ev->stats.n_tokens;
            c->panes.n_ctx = ev->stats.n_ctx;
            if (c->resumed_tokens)
                snprintf(c->panes.note, sizeof c->panes.note,
                         "saved context restored (%d tokens); %d new tokens "
                         "evaluated", c->resumed_tokens, ev->stats.n_prompt);
            else
                snprintf(c->panes.note, sizeof c->panes.note,
                         "%d tokens evaluated into the context",
                         ev->stats.n_prompt);
        }
        break;
    case ENGINE_EVENT_RESUME:
        on_resume(c, ev);
        break;
    case ENGINE_EVENT_CHECKPOINT:
        on_checkpoint(c, ev);
        break;
    case ENGINE_EVENT_NOTE:
        if (is_answer || is_prefill)
            on_note(c, ev);
        break;
    case ENGINE_EVENT_OVERFLOW:
        if (is_answer) {
            discard_answer(c);
            on_overflow(c, ev, ENGINE_REQUEST_GENERATE);
        } else if (is_prefill) {
            c->panes.progress = -1;
            c->prefill_request = 0;
            on_overflow(c, ev, ENGINE_REQUEST_PREFILL);
        }
        break;
    case ENGINE_EVENT_ERROR:
        if (is_prefill) {
            c->panes.progress = -1;
            c->prefill_request = 0;
        }
        if (is_answer)
            end_answer(c);
        controller_notice(c, "%s%s", ev->request_id ? "error: " : "",
                          ev->err.msg);
        break;
    }
    c->dirty = true;
}

void controller_drain(struct controller *c)
{
    struct engine_event ev;
    while (engine_thread_poll(c->engine, &ev)) {
        on_event(c, &ev);
        engine_event_free(&ev);
    }
}

void controller_tick(struct controller *c, double now)
{
    if (c->streaming && now - c->last_flush >= 1.0) {
        commit_answer(c, false);
        c->last_flush = now;
    }
}

/* ---- conversations ---- */

/* The newest usable checkpoint of the current conversation, moved into
 * *out (zeroed when there is none: before the model is ready, the
 * fingerprint is unknown and the context is recomputed). */
static void fetch_checkpoint(struct controller *c, struct engine_checkpoint *out)
{
    memset(out, 0, sizeof *out);
    if (!c->fingerprint[0])
        return;
    struct store_checkpoint sc;
    struct kk_error err = {{0}};
    char note[160];
    int rc = checkpoint_fetch(c->store, c->conv_id, c->fingerprint, &sc, note,
                              sizeof note, &err);
    if (rc < 0) {
        controller_notice(c, "saved context not read (%s) — recomputing",
                          err.msg);
    } else if (rc == 0 && note[0]) {
        controller_notice(c, "%s", note);
    } else if (rc == 1) {
        out->conversation_id = c->conv_id;
        snprintf(out->fingerprint, sizeof out->fingerprint, "%s",
                 c->fingerprint);
        out->blob = sc.kv;
        out->bytes = sc.kv_bytes;
        out->token_ids = sc.token_ids;
        out->n_tokens = sc.n_tokens;
    }
}

static void prefill_conversation(struct controller *c)
{
    struct engine_checkpoint restore;
    fetch_checkpoint(c, &restore);
    c->resumed_tokens = 0;
    c->prefill_is_document = false;
    c->prefill_request = send_conversation(c, ENGINE_REQUEST_PREFILL,
                                           &restore);
}

static void load_conversation(struct controller *c, int64_t id)
{
    struct kk_error err = {{0}};
    struct store_conversation conv = {0};
    struct store_message *list = NULL;
    size_t n = 0;
    if (store_get_conversation(c->store, id, &conv, &err) ||
        store_list_messages(c->store, id, &list, &n, &err)) {
        store_conversation_free(&conv);
        notice_error(c, &err);
        return;
    }
    msgs_clear(c);
    transcript_clear(c->transcript);
    c->conv_id = id;
    c->choice.open = false;
    free(c->system_prompt);
    c->system_prompt = strdup(conv.system_prompt);
    if (c->system_prompt && c->system_prompt[0])
        transcript_add(c->transcript, TRANSCRIPT_SYSTEM, c->system_prompt);
    for (size_t i = 0; i < n; i++) {
        msgs_push(c, list[i].role, list[i].content, list[i].id);
        transcript_add(c->transcript, role_for(list[i].role),
                       list[i].content);
    }
    store_messages_free(list, n);
    store_conversation_free(&conv);
    c->dirty = true;
    /* Bring the engine's cache to this conversation now, so the next turn
     * only evaluates the new message: from its checkpoint when there is
     * one for these model files. */
    if (c->n_msgs)
        prefill_conversation(c);
}

static bool busy(struct controller *c)
{
    if (!c->streaming)
        return false;
    controller_notice(c, "an answer is streaming: stop it first (Ctrl-C)");
    return true;
}

void controller_new(struct controller *c)
{
    if (busy(c))
        return;
    msgs_clear(c);
    transcript_clear(c->transcript);
    c->conv_id = 0;
    free(c->system_prompt);
    c->system_prompt = strdup("");
    c->confirm_delete = false;
    c->choice.open = false;
    c->panes.note[0] = 0;
    c->dirty = true;
}

void controller_switch(struct controller *c, int64_t id)
{
    if (busy(c))
        return;
    if (id != c->conv_id)
        load_conversation(c, id);
}

void controller_step(struct controller *c, int delta)
{
    if (c->n_convs == 0)
        return;
    int i = convlist_find(c->convs, c->n_convs, c->conv_id);
    if (i < 0)
        i = delta > 0 ? -1 : 0;   /* the unsaved new one sits on top */
    i += delta;
    if (i < 0 || i >= c->n_convs)
        return;
    controller_switch(c, c->convs[i].id);
}

/* Saves the new conversation on its first message. */
static int ensure_conversation(struct controller *c, const char *first_text)
{
    if (c->conv_id)
        return 0;
    char title[TITLE_CHARS * 4 + 1];
    size_t n = 0;
    int chars = 0;
    for (const char *p = first_text; *p && chars < TITLE_CHARS &&
                                     n + 4 < sizeof title; p++) {
        title[n++] = *p == '\n' || *p == '\t' ? ' ' : *p;
        if ((*p & 0xc0) != 0x80)
            chars++;
    }
    while (n && (title[n - 1] & 0xc0) == 0xc0)
        n--;   /* no split UTF-8 character at the end */
    title[n] = 0;
    struct kk_error err = {{0}};
    if (store_create_conversation(c->store, title, c->system_prompt,
                                  c->panes.target, c->panes.draft,
                                  &c->conv_id, &err)) {
        notice_error(c, &err);
        return -1;
    }
    refresh_list(c);
    return 0;
}

static void send_message(struct controller *c, const char *text)
{
    if (busy(c) || ensure_conversation(c, text))
        return;
    struct kk_error err = {{0}};
    int64_t id;
    if (store_add_message(c->store, c->conv_id, STORE_ROLE_USER, text, 0,
                          NULL, &id, &err)) {
        notice_error(c, &err);
        return;
    }
    msgs_push(c, STORE_ROLE_USER, text, id);
    transcript_add(c->transcript, TRANSCRIPT_USER, text);
    start_answer(c);
}

void controller_submit(struct controller *c, char *line)
{
    if (!line) {
        c->quit = true;   /* Ctrl-D on an empty line */
        return;
    }
    if (c->confirm_delete) {
        c->confirm_delete = false;
        if (!strcmp(line, "y") || !strcmp(line, "yes")) {
            slash_run(c, "/delete yes");
        } else {
            controller_notice(c, "not deleted");
        }
    } else if (line[0] == '/') {
        slash_run(c, line);
    } else if (line[strspn(line, " \t\n")]) {
        send_message(c, line);
    }
    free(line);
}

void controller_stop(struct controller *c)
{
    if (c->streaming)
        engine_thread_request_stop(c->engine);
}

void controller_regenerate(struct controller *c)
{
    if (busy(c))
        return;
    if (c->n_msgs == 0 || c->msgs[c->n_msgs - 1].role != STORE_ROLE_ASSISTANT) {
        controller_notice(c, "nothing to regenerate: the last message is not "
                             "an answer");
        return;
    }
    if (msgs_drop_from(c, c->n_msgs - 1) == 0)
        start_answer(c);
}

void controller_edit_last(struct controller *c)
{
    if (busy(c))
        return;
    int i = c->n_msgs - 1;
    while (i >= 0 && c->msgs[i].role != STORE_ROLE_USER)
        i--;
    if (i < 0) {
        controller_notice(c, "no message of yours to edit");
        return;
    }
    free(c->pending_input);
    c->pending_input = strdup(c->msgs[i].content);
    msgs_drop_from(c, i);
    c->dirty = true;
}

static char *read_text_file(const char *path, size_t *len,
                            struct kk_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        kk_fail(err, "%s: cannot open: %m", path);
        return NULL;
    }
    char *buf = malloc(MAX_DOCUMENT_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_DOCUMENT_BYTES + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad || n > MAX_DOCUMENT_BYTES) {
        free(buf);
        kk_fail(err, "%s: %s", path,
                !buf ? "out of memory"
                : bad ? "read failed"
                      : "larger than 8 MiB: too long for a document");
        return NULL;
    }
    buf[n] = 0;
    if (memchr(buf, 0, n)) {
        free(buf);
        kk_fail(err, "%s: not a text file (it holds NUL bytes)", path);
        return NULL;
    }
    *len = n;
    return buf;
}

void controller_load_document(struct controller *c, const char *path)
{
    if (busy(c))
        return;
    struct kk_error err = {{0}};
    size_t len;
    char *text = read_text_file(path, &len, &err);
    if (!text) {
        notice_error(c, &err);
        return;
    }
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t size = len + strlen(name) + 32;
    char *content = malloc(size);
    char title[96];
    snprintf(title, sizeof title, "document %s", name);
    int64_t doc_id, msg_id;
    if (!content) {
        controller_notice(c, "error: out of memory");
    } else if (snprintf(content, size, "Document: %s\n\n%s", name, text),
               ensure_conversation(c, title) == 0 &&
               (store_add_document(c->store, c->conv_id, text, path, 0,
                                   &doc_id, &err) ||
                store_add_message(c->store, c->conv_id, STORE_ROLE_USER,
                                  content, 0, NULL, &msg_id, &err))) {
        notice_error(c, &err);
    } else if (c->conv_id) {
        msgs_push(c, STORE_ROLE_USER, content, msg_id);
        transcript_add(c->transcript, TRANSCRIPT_USER, content);
        c->resumed_tokens = 0;
        c->prefill_is_document = true;
        c->prefill_request = send_conversation(c, ENGINE_REQUEST_PREFILL,
                                               NULL);
        c->panes.progress = 0;
        snprintf(c->panes.note, sizeof c->panes.note, "loading %s", name);
    }
    free(content);
    free(text);
    c->dirty = true;
}

static const char *last_answer(const struct controller *c)
{
    for (int i = c->n_msgs - 1; i >= 0; i--)
        if (c->msgs[i].role == STORE_ROLE_ASSISTANT)
            return c->msgs[i].content;
    return NULL;
}

/* OSC 52: the terminal puts base64 text on the clipboard. */
static void osc52(const char *text)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)text;
    size_t len = strlen(text);
    fputs("\033]52;c;", stdout);
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        char out[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63],
                       i + 1 < len ? b64[v >> 6 & 63] : '=',
                       i + 2 < len ? b64[v & 63] : '='};
        fwrite(out, 1, 4, stdout);
    }
    fputs("\a", stdout);
    fflush(stdout);
}

void controller_copy_last(struct controller *c, const char *path)
{
    const char *text = last_answer(c);
    if (!text) {
        controller_notice(c, "no answer to copy yet");
        return;
    }
    if (!path || !path[0]) {
        osc52(text);
        controller_notice(c, "copied the last answer (%zu bytes) to the "
                             "clipboard (OSC 52)", strlen(text));
        return;
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        controller_notice(c, "error: %s: cannot write: %m", path);
        return;
    }
    controller_notice(c, "wrote the last answer to %s", path);
}

void controller_show_stats(struct controller *c)
{
    if (!c->has_last_stats) {
        controller_notice(c, "no statistics yet: send a message first");
        return;
    }
    const struct kk_stats *s = &c->last_stats;
    controller_notice(c,
        "last answer: %d tokens in %d steps, tau %.2f, acceptance %.0f%% "
        "(%d/%d; n-gram %d, draft %d, target %d)\n"
        "prefill %d tokens at %.0f tok/s; decode %.1f tok/s; block %d\n"
        "context %d/%d; KV resident %llu of %llu bytes (%.1f%% saved)",
        s->n_generated, s->n_steps, s->tau, 100.0 * s->acceptance_rate,
        s->n_accepted, s->n_proposed, s->accepted_by[KK_PROPOSER_NGRAM],
        s->accepted_by[KK_PROPOSER_DRAFT], s->accepted_by[KK_PROPOSER_TARGET],
        s->n_prompt, s->prefill_tok_per_s, s->decode_tok_per_s, s->block,
        s->n_tokens, s->n_ctx, (unsigned long long)s->kv_resident_bytes,
        (unsigned long long)s->kv_full_bytes, 100.0 * s->kv_saved);
}

/* ---- life cycle ---- */

int controller_open(struct controller *c, const struct controller_options *o,
                    int width, struct kk_error *err)
{
    memset(c, 0, sizeof *c);
    panes_model_init(&c->panes);
    snprintf(c->panes.note, sizeof c->panes.note, "loading the model...");
    c->transcript = transcript_new(width);
    c->system_prompt = strdup("");
    if (!c->transcript || !c->system_prompt)
        return kk_fail(err, "out of memory");
    if (store_open(o->db_path, NULL, &c->store, err))
        return -1;
    c->checkpoint_budget = o->checkpoint_budget;
    c->overflow = o->overflow;
    c->n_predict = o->n_predict;
    struct engine_config ec = {.model_path = o->model_path,
                               .draft_path = o->draft_path,
                               .n_ctx = o->n_ctx, .n_threads = o->n_threads,
                               .backend = o->backend, .device = o->device,
                               .n_predict = o->n_predict};
    if (engine_thread_start(&ec, &c->engine, err))
        return -1;
    refresh_list(c);
    c->dirty = true;
    return 0;
}

void controller_close(struct controller *c)
{
    if (c->streaming && c->engine) {
        engine_thread_request_stop(c->engine);
        commit_answer(c, true);
    }
    /* The engine may still hand over the last turn's checkpoint: keep it,
     * or reopening would recompute the turn. */
    engine_thread_join(c->engine);
    struct engine_event ev;
    while (c->engine && c->store && engine_thread_poll(c->engine, &ev)) {
        if (ev.kind == ENGINE_EVENT_CHECKPOINT)
            on_checkpoint(c, &ev);
        engine_event_free(&ev);
    }
    engine_thread_stop(c->engine);
    store_close(c->store);
    transcript_free(c->transcript);
    msgs_clear(c);
    free(c->msgs);
    free(c->convs);
    free(c->answer);
    free(c->system_prompt);
    free(c->pending_input);
    memset(c, 0, sizeof *c);
}
