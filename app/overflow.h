/* overflow.h — what to do when a conversation would not fit the context.
 *
 * A conversation is rendered whole by the chat template for every turn;
 * when its tokens plus a reserve for the answer exceed the session's
 * context, one of three policies applies:
 *   refuse  nothing is evaluated; the user is told what to do;
 *   drop    the oldest user/assistant turns are left out of the rendering
 *           (the system prompt and the current question never are; the
 *           store keeps every message), the fewest that make it fit;
 *   sink    the session is re-created with a larger context and the LOSSY
 *           sink+window policy on its global layers.
 * "ask" is no policy but the chat's default: the engine stops and the user
 * picks one.
 *
 * overflow_plan() decides which turns to drop. It counts tokens through a
 * callback (the engine thread's render + tokenize; tests pass a fake), so
 * it runs without a terminal or a model. */
#ifndef KK_OVERFLOW_H
#define KK_OVERFLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kakeya.h"

enum overflow_policy {
    OVERFLOW_ASK,       /* stop and let the user choose (the chat's default) */
    OVERFLOW_REFUSE,
    OVERFLOW_DROP,
    OVERFLOW_SINK,
};

/* "ask", "refuse", "drop", "sink" -> 0 and *out; -1 for anything else. */
int overflow_parse(const char *name, enum overflow_policy *out);
/* The policy's name as overflow_parse reads it (static). */
const char *overflow_name(enum overflow_policy p);

/* The tokens kept free for the answer: min(n_predict, n_ctx / 8, 256)
 * plus the largest draft block, so that a conversation that fits has room
 * to answer (an answer longer than that may still hit the limit; the chat
 * then offers the policies again). */
int overflow_reserve(int n_ctx, int n_predict);

/* Tokens of the rendering of the n messages given; -1 with err on
 * failure. */
typedef int (*overflow_count_fn)(void *ud, const char *const *roles,
                                 const char *const *contents, size_t n,
                                 struct kk_error *err);

struct overflow_plan {
    int n_ctx, reserve;
    int n_tokens;         /* the whole conversation, rendered */
    bool fits;            /* n_tokens + reserve <= n_ctx */
    /* drop: messages [first_dropped, first_kept) are left out; the
     * messages before first_dropped are the system prompt, if any */
    int first_dropped, first_kept;
    int n_dropped_messages, n_dropped_turns;
    int n_tokens_kept;    /* after dropping (== n_tokens when fits) */
    bool can_drop;        /* dropping makes it fit */
    int n_tokens_minimal; /* the system prompt and the current question */
};

/* Plans for messages roles[i]/contents[i] (roles "system", "user",
 * "assistant"; the system prompt, if any, first). The current question is
 * the last "user" message and all that follows it; a turn is a user
 * message and the answers up to the next one. Finds the fewest oldest
 * turns whose dropping makes the rest fit (can_drop), or reports that even
 * the current question alone does not (can_drop false, n_tokens_minimal).
 * Returns 0, or -1 when count fails or memory runs out. */
int overflow_plan(const char *const *roles, const char *const *contents,
                  size_t n, int n_ctx, int reserve, overflow_count_fn count,
                  void *ud, struct overflow_plan *out, struct kk_error *err);

/* Copies the plan's kept messages of roles/contents into out_roles and
 * out_contents (arrays of at least n); returns how many. With fits, all. */
size_t overflow_apply(const struct overflow_plan *p, const char *const *roles,
                      const char *const *contents, size_t n,
                      const char **out_roles, const char **out_contents);

/* The conversation rendered with m's chat template and tokenized (special
 * tokens parsed, BOS as the model wants): returns the count, and with ids
 * non-NULL a malloc'd array of them (the caller frees). -1 with err. */
int overflow_tokenize(const struct kk_model *m, const char *const *roles,
                      const char *const *contents, size_t n,
                      bool add_generation_prompt, int32_t **ids,
                      struct kk_error *err);

/* An overflow_count_fn over overflow_tokenize: ud is a struct
 * overflow_model. */
struct overflow_model {
    const struct kk_model *model;
    bool add_generation_prompt;
};
int overflow_count_model(void *ud, const char *const *roles,
                         const char *const *contents, size_t n,
                         struct kk_error *err);

/* The message a user reads when it does not fit: tokens needed vs the
 * context, and what each policy would do, into buf. */
void overflow_describe(const struct overflow_plan *p, char *buf, size_t size);

#endif
