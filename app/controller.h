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
 * is pruned to the budget (see checkpoint.h).
 *
 * Context overflow (see overflow.h): each turn goes out with the overflow
 * policy (--overflow, /overflow; "ask" by default). When the engine says
 * a conversation does not fit, or an answer was cut at the context limit,
 * the controller tells the user the numbers and, under "ask", opens the
 * overflow prompt: d, s or r (controller_overflow_choose). Nothing is
 * deleted by any choice: a refused message stays saved, dropped turns stay
 * in the store and on screen. */
#ifndef KK_CONTROLLER_H
#define KK_CONTROLLER_H

#include <stdbool.h>
#include <stdint.h>

#include "convlist.h"
#include "engine_thread.h"
#include "panes.h"
#include "store.h"
#include "transcript.h"

/* The open overflow prompt: what a choice will resend. */
struct overflow_choice {
    bool open;
    bool can_drop;            /* dropping turns can make it fit */
    bool after_cut;           /* an answer was cut: choosing answers again */
    enum engine_request_kind kind;
    int reserve;              /* tokens to keep for the answer (0: default) */
};

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
    /* the context */
    enum overflow_policy overflow;
    struct overflow_choice choice;
    bool prefill_is_document; /* the prefill loads a document (else: a
                                 conversation being opened) */
    char overflow_note[256];  /* what the policy did to the streaming turn */
    int n_predict;
};

struct controller_options {
    const char *model_path, *draft_path, *db_path;
    int n_ctx, n_threads, n_predict;
    enum kk_backend backend;      /* default CPU */
    int device;
    uint64_t checkpoint_budget;   /* bytes; 0: the store's default */
    enum overflow_policy overflow; /* default OVERFLOW_ASK */
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
/* Answers the overflow prompt (or says none is open). */
void controller_overflow_choose(struct controller *c, enum overflow_policy p);
/* Sets the policy for the next turns ("ask", "refuse", "drop", "sink");
 * with the prompt open, drop/sink/refuse also answer it. "" shows it. */
void controller_set_overflow(struct controller *c, const char *name);
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
