/* store.h — the conversation store: one SQLite database per user.
 *
 * Holds every conversation, message, loaded document and restored-context
 * checkpoint (the engine's KV state), and a full-text index over messages.
 * The schema is data/schema.sql (embedded in the binary); an older database
 * is migrated forward when it is opened, a newer one is refused.
 *
 * Durability: WAL journal, synchronous=FULL, foreign keys on, one transaction
 * per logical change. The write discipline the controller follows:
 *   store_add_message(user)          before generation starts;
 *   store_begin_answer()             an empty partial assistant message;
 *   store_update_answer()            at most once a second while streaming,
 *                                    and on stop, error and exit;
 *   store_finish_answer()            the final text and stats.
 * A kill -9 therefore loses at most the text streamed since the last update
 * and never corrupts the database. A second process may open the same file;
 * writers wait up to the busy timeout, then fail with a message.
 *
 * Ownership: struct store is one connection, used by one thread at a time
 * (the controller's). Every struct or array the store returns is malloc'd
 * and freed with the matching *_free function (NULL-safe). Strings in
 * returned structs are never NULL ("" when unset).
 *
 * Errors: every function that can fail returns 0 or -1 and fills err with
 * "<db path>: <what failed>: <why and what to do>". A read-only, full,
 * locked or damaged database never crashes the process and a failed write
 * changes nothing (its transaction is rolled back). */
#ifndef KK_STORE_H
#define KK_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The schema version this build writes (PRAGMA user_version). */
#define STORE_SCHEMA_VERSION 2
#define STORE_DEFAULT_BUSY_TIMEOUT_MS 5000
/* The default checkpoint budget for store_prune_checkpoints. */
#define STORE_DEFAULT_CHECKPOINT_BUDGET ((uint64_t)1 << 30)

struct store;

/* ---- opening ---------------------------------------------------------- */

struct store_options {
    int busy_timeout_ms;   /* <= 0: STORE_DEFAULT_BUSY_TIMEOUT_MS */
};

/* $XDG_DATA_HOME/kakeya/kakeya.db, or ~/.local/share/kakeya/kakeya.db when
 * XDG_DATA_HOME is unset or not absolute. Writes into buf (size bytes). */
int store_default_path(char *buf, size_t size, struct kk_error *err);

/* Opens (creating it and its parent folders if needed) the database at
 * path, applies the connection settings and migrates the schema forward.
 * opts may be NULL. Fails with a clear message for a read-only file or
 * folder, a file that is not a kakeya database or is damaged, a database
 * locked beyond the busy timeout, or a schema newer than this build. */
int store_open(const char *path, const struct store_options *opts,
               struct store **out, struct kk_error *err);
void store_close(struct store *s);

/* The file this store was opened on (owned by the store). */
const char *store_path(const struct store *s);

/* ---- conversations ---------------------------------------------------- */

struct store_conversation {
    int64_t id;
    char *title;
    char *system_prompt;
    char *target_model;    /* model file names or fingerprints, as given */
    char *draft_model;
    int64_t created_at;    /* unix time in milliseconds */
    int64_t updated_at;    /* last message written */
    int64_t n_messages;    /* filled by list/get */
};

/* New conversation; the strings may be NULL (stored as ""). */
int store_create_conversation(struct store *s, const char *title,
                              const char *system_prompt,
                              const char *target_model,
                              const char *draft_model, int64_t *id,
                              struct kk_error *err);
/* Fails with "no conversation N" when it does not exist. */
int store_get_conversation(struct store *s, int64_t id,
                           struct store_conversation *out,
                           struct kk_error *err);
void store_conversation_free(struct store_conversation *c);
/* All conversations, most recently updated first. */
int store_list_conversations(struct store *s,
                             struct store_conversation **out, size_t *n,
                             struct kk_error *err);
void store_conversations_free(struct store_conversation *list, size_t n);
int store_set_title(struct store *s, int64_t id, const char *title,
                    struct kk_error *err);
/* Deletes the conversation with its messages, documents and checkpoints. */
int store_delete_conversation(struct store *s, int64_t id,
                              struct kk_error *err);

/* ---- messages --------------------------------------------------------- */

enum store_role { STORE_ROLE_SYSTEM, STORE_ROLE_USER, STORE_ROLE_ASSISTANT };

/* "system", "user", "assistant"; store_role_parse returns -1 otherwise. */
const char *store_role_name(enum store_role role);
int store_role_parse(const char *name, enum store_role *role);

/* Per-message statistics of a generated answer (stored as JSON). */
struct store_stats {
    double tau;              /* tokens committed per target verify step */
    double acceptance_rate;  /* accepted / drafted */
    double tok_per_s;
    double kv_saved;         /* 1 - resident KV bytes / full f16 KV bytes */
    char proposer[32];       /* "draft", "ngram", "none" ... */
};

struct store_message {
    int64_t id;
    int64_t conversation_id;
    enum store_role role;
    char *content;
    int n_tokens;
    bool has_stats;
    struct store_stats stats;
    bool is_partial;         /* an answer that was never finished */
    int64_t created_at;
};

/* Commits one complete message (stats may be NULL) and touches the
 * conversation's updated_at, in one transaction. */
int store_add_message(struct store *s, int64_t conversation_id,
                      enum store_role role, const char *content, int n_tokens,
                      const struct store_stats *stats, int64_t *id,
                      struct kk_error *err);

/* Commits an empty partial assistant message; *id names it for the
 * update/finish calls below. */
int store_begin_answer(struct store *s, int64_t conversation_id,
                       int64_t *id, struct kk_error *err);
/* Replaces the partial answer's text (and stats, if non-NULL) in its own
 * transaction. The message stays partial. */
int store_update_answer(struct store *s, int64_t message_id, const char *text,
                        int n_tokens, const struct store_stats *stats,
                        struct kk_error *err);
/* Final text and stats; the message is no longer partial. */
int store_finish_answer(struct store *s, int64_t message_id, const char *text,
                        int n_tokens, const struct store_stats *stats,
                        struct kk_error *err);

/* The messages of a conversation, oldest first. */
int store_list_messages(struct store *s, int64_t conversation_id,
                        struct store_message **out, size_t *n,
                        struct kk_error *err);
void store_messages_free(struct store_message *list, size_t n);

/* ---- documents -------------------------------------------------------- */

struct store_document {
    int64_t id;
    int64_t conversation_id;
    char *content;
    char *content_hash;      /* "fnv1a64:" + 16 hex digits of content */
    char *source_path;
    int n_tokens;
    int64_t created_at;
};

int store_add_document(struct store *s, int64_t conversation_id,
                       const char *content, const char *source_path,
                       int n_tokens, int64_t *id, struct kk_error *err);
/* Documents of a conversation, oldest first. */
int store_list_documents(struct store *s, int64_t conversation_id,
                         struct store_document **out, size_t *n,
                         struct kk_error *err);
void store_documents_free(struct store_document *list, size_t n);

/* ---- restored-context checkpoints ------------------------------------- */

enum store_checkpoint_status {
    STORE_CHECKPOINT_NONE,        /* the conversation has no checkpoint */
    STORE_CHECKPOINT_OTHER_MODEL, /* only checkpoints for other model files */
    STORE_CHECKPOINT_CORRUPT,     /* the newest match fails its checksum */
    STORE_CHECKPOINT_FOUND,
};

struct store_checkpoint {
    int64_t id;
    int32_t *token_ids;   /* n_tokens ids the KV state holds */
    size_t n_tokens;
    void *kv;             /* the serialised KV state, kv_bytes long */
    size_t kv_bytes;
    int64_t created_at;
};

/* Stores a checkpoint with an FNV-1a 64 checksum over the token ids and the
 * KV blob. Ids are stored as int32 little-endian. */
int store_put_checkpoint(struct store *s, int64_t conversation_id,
                         const char *model_fingerprint,
                         const int32_t *token_ids, size_t n_tokens,
                         const void *kv, size_t kv_bytes, int64_t *id,
                         struct kk_error *err);
/* The newest checkpoint of the conversation for this fingerprint. On
 * FOUND, out is filled (free with store_checkpoint_free) and the
 * checkpoint's last_used_at is touched; on any other status out is zeroed.
 * Returns -1 only when the database itself fails. */
int store_get_checkpoint(struct store *s, int64_t conversation_id,
                         const char *model_fingerprint,
                         struct store_checkpoint *out,
                         enum store_checkpoint_status *status,
                         struct kk_error *err);
void store_checkpoint_free(struct store_checkpoint *c);
/* Deletes the checkpoints of the conversation for this fingerprint but
 * the newest: it covers what they cover, and stale ones would otherwise
 * push other conversations' checkpoints out of the budget. */
int store_drop_superseded_checkpoints(struct store *s, int64_t conversation_id,
                                      const char *model_fingerprint,
                                      struct kk_error *err);
/* Deletes least recently used checkpoints until the rest fit in
 * budget_bytes (token ids + KV bytes). n_deleted may be NULL. */
int store_prune_checkpoints(struct store *s, uint64_t budget_bytes,
                            int *n_deleted, struct kk_error *err);

/* ---- export, import, search ------------------------------------------- */

/* The conversation with its messages (and stats) and documents, as
 * malloc'd text. JSON is the import format; Markdown is for reading. */
int store_export_json(struct store *s, int64_t conversation_id, char **out,
                      struct kk_error *err);
int store_export_markdown(struct store *s, int64_t conversation_id,
                          char **out, struct kk_error *err);
/* Validates an export (len bytes of JSON) and stores it as a new
 * conversation, all or nothing. Errors name the offending field, e.g.
 * "messages[3].role: expected \"system\", \"user\" or \"assistant\"". */
int store_import_json(struct store *s, const char *json, size_t len,
                      int64_t *conversation_id, struct kk_error *err);

struct store_hit {
    int64_t conversation_id;
    int64_t message_id;
    char *conversation_title;
    enum store_role role;
    char *snippet;        /* matches between mark_open and mark_close */
};

/* Full-text search over message contents, best match first, at most limit
 * hits. The text is split into words and each word quoted, so any user
 * text is a valid query (all words must occur; no FTS5 operators). Blank
 * text gives no hits. */
int store_search(struct store *s, const char *text, const char *mark_open,
                 const char *mark_close, size_t limit,
                 struct store_hit **out, size_t *n, struct kk_error *err);
void store_hits_free(struct store_hit *hits, size_t n);

/* FNV-1a 64 over a buffer, continuing from h (start with STORE_FNV_SEED). */
#define STORE_FNV_SEED 0xcbf29ce484222325ull
uint64_t store_fnv1a64(uint64_t h, const void *data, size_t len);

#endif
