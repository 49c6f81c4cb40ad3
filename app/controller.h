/* controller.h — the UI thread's side of a chat: turns, conversations,
 * the store.
 *
 * Owns the turn state (the streaming answer, its store row, the last
 * flush), the mirror of the current conversation's messages, the
 * transcript and the panes' data, and is the only code that talks to the
 * store. Sends requests to the engine thread and applies its events; it
 * never waits on the engine. chat.c draws what it holds.
 *
 * Checkpoints: opening a conversation sends its newest checkpoint for the
 * loaded model files with the prefill request; the checkpoints the engine
 * hands back after turns and document loads are stored here and the store
 * is pruned to the budget (see checkpoint.h). */
#ifndef KK_CONTROLLER_H
#define KK_CONTROLLER_H

#include <stdbool.h>
#include <stdint.h>

#include "convlist.h"
#include "engine_thread.h"
#include "panes.h"
#include "store.h"
#include "transcript.h"

struct chat_message {
    enum store_role role;
    char *content;
    int64_t id;
};

struct controller {
    struct store *store;
    struct engine_thread *engine;
    struct transcript *transcript;
    struct panes_model panes;
    struct convlist_item *convs;
    int n_convs;
    int64_t conv_id;          /* 0: a new conversation, not saved yet */
    char *system_prompt;      /* of the current conversation ("" none) */
    struct chat_message *msgs;
    int n_msgs, cap_msgs;
    /* the turn */
    bool streaming;
    uint64_t answer_request, prefill_request;
    int64_t answer_id;
    char *answer;
    size_t answer_len, answer_cap;
    int answer_tokens;
    double last_flush;
    struct kk_stats last_stats;
    bool has_last_stats;
    /* the app */
    char model_label[256];
    bool model_ready;
    char fingerprint[72];     /* the model files', once ready */
    uint64_t checkpoint_budget;
    int resumed_tokens;       /* restored by the current prefill */
    bool quit;
    bool help_visible;
    bool confirm_delete;
    bool dirty;               /* something changed: redraw */
    char *pending_input;      /* text for the input line (edit), or NULL */
};

struct controller_options {
    const char *model_path, *draft_path, *db_path;
    int n_ctx, n_threads, n_predict;
    uint64_t checkpoint_budget;   /* bytes; 0: the store's default */
};

/* Opens the store and starts the engine thread (which loads the models in
 * the background). width: the transcript's first width. */
int controller_open(struct controller *c, const struct controller_options *o,
                    int width, struct kk_error *err);
/* Commits a streaming answer, stops the engine, closes the store. */
void controller_close(struct controller *c);

/* A line from the input: a message, or a slash command. Takes line. */
void controller_submit(struct controller *c, char *line);
/* Applies every waiting engine event. */
void controller_drain(struct controller *c);
/* The periodic work: flushes a streaming answer once a second. */
void controller_tick(struct controller *c, double now);

void controller_stop(struct controller *c);
void controller_new(struct controller *c);
/* Switches to the conversation delta places down (up) the list. */
void controller_step(struct controller *c, int delta);
void controller_switch(struct controller *c, int64_t id);
void controller_regenerate(struct controller *c);
void controller_edit_last(struct controller *c);
void controller_load_document(struct controller *c, const char *path);
void controller_copy_last(struct controller *c, const char *path);
void controller_show_stats(struct controller *c);
/* Adds a note to the transcript (not stored). */
void controller_notice(struct controller *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Seconds on a monotonic clock. */
double controller_now(void);

/* slash.c: runs "/name args"; unknown commands give a notice. */
void slash_run(struct controller *c, const char *line);
/* The slash commands' help lines (static). */
const char *slash_help(void);

#endif
