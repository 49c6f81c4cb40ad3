/* engine_thread.h — the engine thread: owns the models and the session.
 *
 * The UI thread sends requests into a queue (mutex + condvar) and reads
 * events from another; an eventfd becomes readable whenever events are
 * waiting, so the UI polls it beside stdin and never blocks on the engine.
 * Nothing is shared but the queues and the stop flag: every event carries
 * its own copies (text, a struct kk_stats snapshot, an error message).
 *
 * A request carries the whole conversation rendered by the chat template;
 * the engine keeps the longest prefix its session already holds and
 * evaluates only the rest, so a new turn, a switch of conversation, a
 * regenerate or an edit are one and the same request.
 *
 * Checkpoints (see checkpoint.h): a request may carry the newest stored
 * checkpoint of its conversation; the engine restores it when it covers
 * more of the prompt than the session holds. After a turn, or a prefill
 * that computed at least CHECKPOINT_MIN_NEW_TOKENS, the engine saves its
 * session and hands the bytes back in a CHECKPOINT event for the
 * controller to store: the engine never touches the store.
 *
 * Context overflow (see overflow.h): a request whose rendered conversation
 * plus a reserve for the answer would not fit the context follows its
 * overflow policy. ask and refuse end it at once with an OVERFLOW event
 * (nothing evaluated) for the UI to tell the user; drop evaluates the
 * conversation without its oldest turns and posts a NOTE saying how many;
 * sink re-creates the sessions with a larger context and the LOSSY
 * sink+window cache on their global layers (a NOTE says so, and every
 * later event's is_lossy is set), which they keep from then on. */
#ifndef KK_ENGINE_THREAD_H
#define KK_ENGINE_THREAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya.h"
#include "overflow.h"

struct engine_config {
    const char *model_path;     /* copied */
    const char *draft_path;     /* may be NULL; copied */
    int n_ctx, n_threads;
    enum kk_backend backend;    /* where the sessions compute */
    int device;
    int n_predict;              /* per answer */
    int kv_sinks;               /* sink policy: sinks kept (0: 4) */
};

enum engine_event_kind {
    ENGINE_EVENT_READY,    /* models loaded: info, names */
    ENGINE_EVENT_TOKEN,    /* text (may be "") and stats */
    ENGINE_EVENT_PROGRESS, /* done / total of a prefill */
    ENGINE_EVENT_DONE,     /* the request finished: final stats */
    ENGINE_EVENT_ERROR,    /* message in err; the request is over */
    ENGINE_EVENT_RESUME,   /* a checkpoint was restored (done: its tokens)
                              or refused (done 0, text says why) */
    ENGINE_EVENT_CHECKPOINT, /* checkpoint: the session after a request */
    ENGINE_EVENT_OVERFLOW, /* the conversation does not fit (plan, policy,
                              text); the request is over, nothing ran */
    ENGINE_EVENT_NOTE,     /* text: an overflow policy was applied (plan) */
};

/* A restored-context checkpoint on its way to the engine (to restore) or
 * back (to store). Owns its buffers. */
struct engine_checkpoint {
    int64_t conversation_id;
    char fingerprint[72];      /* the model files' (kk_model_fingerprint) */
    void *blob;                /* kk_session_save's bytes */
    size_t bytes;
    int32_t *token_ids;        /* the tokens the blob holds */
    size_t n_tokens;
};

/* Frees the buffers and zeroes c; NULL-safe. */
void engine_checkpoint_free(struct engine_checkpoint *c);

struct engine_event {
    enum engine_event_kind kind;
    uint64_t request_id;
    char *text;                 /* TOKEN, RESUME; owned by the event */
    struct kk_stats stats;      /* TOKEN, DONE */
    int done, total;            /* PROGRESS; RESUME: done */
    struct engine_checkpoint checkpoint;   /* CHECKPOINT; owned */
    struct kk_error err;        /* ERROR */
    struct overflow_plan plan;  /* OVERFLOW, NOTE */
    enum overflow_policy policy;   /* OVERFLOW, NOTE: the request's */
    bool is_lossy;              /* the session uses sink+window (all) */
    /* READY */
    char model_name[128], draft_name[128];
    int n_ctx;
    bool has_draft;
    char fingerprint[72];       /* the target model files' */
};

void engine_event_free(struct engine_event *ev);

enum engine_request_kind {
    ENGINE_REQUEST_GENERATE,  /* prompt, then an answer */
    ENGINE_REQUEST_PREFILL,   /* prompt only (a document), with progress */
};

struct engine_thread;

/* Starts the thread, which opens the models and posts READY or ERROR.
 * Fails only when the thread or the eventfd cannot be made. */
int engine_thread_start(const struct engine_config *cfg,
                        struct engine_thread **out, struct kk_error *err);
/* Asks the thread to stop the current request, finish and exit; joins it.
 * The events it posted stay for engine_thread_poll (the last checkpoint
 * among them). NULL-safe; once is enough, engine_thread_stop does it too. */
void engine_thread_join(struct engine_thread *e);
/* Joins the thread (engine_thread_join) and frees everything, events not
 * yet polled included. NULL-safe. */
void engine_thread_stop(struct engine_thread *e);

/* The fd to poll for events (readable while events wait). */
int engine_thread_fd(const struct engine_thread *e);

/* Queues a request: the conversation as n messages (roles "system",
 * "user", "assistant"; static strings), which the engine thread renders
 * with the model's chat template. The contents are copied.
 * conversation_id tags the checkpoint saved after it (0: none is saved).
 * restore may be NULL; otherwise its buffers are taken over and *restore
 * is zeroed, whatever the outcome. Returns the request's id (> 0), or 0
 * when out of memory. Clears the stop flag. */
uint64_t engine_thread_submit(struct engine_thread *e,
                              enum engine_request_kind kind,
                              const char *const *roles,
                              const char *const *contents, size_t n,
                              int64_t conversation_id,
                              struct engine_checkpoint *restore);

/* engine_thread_submit with an overflow policy and the tokens to keep
 * free for the answer (reserve 0: overflow_reserve's default).
 * engine_thread_submit is this with OVERFLOW_ASK and 0. */
uint64_t engine_thread_submit_policy(struct engine_thread *e,
                                     enum engine_request_kind kind,
                                     const char *const *roles,
                                     const char *const *contents, size_t n,
                                     int64_t conversation_id,
                                     struct engine_checkpoint *restore,
                                     enum overflow_policy policy,
                                     int reserve);

/* Asks the running request to stop at the next step boundary. */
void engine_thread_request_stop(struct engine_thread *e);

/* Takes the next event (true) or returns false when none waits. The
 * caller frees the event's contents with engine_event_free. */
bool engine_thread_poll(struct engine_thread *e, struct engine_event *out);

#endif
