/* overflow.c — the context-overflow policies' arithmetic (see overflow.h). */
#include "overflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

enum {
    DRAFT_BLOCK_ROOM = 17,   /* one verify step: 1 + 16 tokens */
    RESERVE_MAX = 256,       /* a turn that leaves this much may start */
};

static const char *const names[] = {"ask", "refuse", "drop", "sink"};

int overflow_parse(const char *name, enum overflow_policy *out)
{
    for (int i = 0; name && i < 4; i++) {
        if (!strcmp(name, names[i])) {
            *out = (enum overflow_policy)i;
            return 0;
        }
    }
    return -1;
}

const char *overflow_name(enum overflow_policy p)
{
    return (unsigned)p < 4 ? names[p] : "?";
}

int overflow_reserve(int n_ctx, int n_predict)
{
    int answer = n_predict < n_ctx / 8 ? n_predict : n_ctx / 8;
    if (answer > RESERVE_MAX)
        answer = RESERVE_MAX;
    return (answer > 0 ? answer : 0) + DRAFT_BLOCK_ROOM;
}

static bool is_role(const char *role, const char *want)
{
    return role && !strcmp(role, want);
}

/* Tokens of the system prompt (head messages) plus messages [from, n). */
static int count_from(const char *const *roles, const char *const *contents,
                      size_t n, size_t head, size_t from,
                      overflow_count_fn count, void *ud, const char **r,
                      const char **c, struct kk_error *err)
{
    size_t k = 0;
    for (size_t i = 0; i < head; i++, k++)
        r[k] = roles[i], c[k] = contents[i];
    for (size_t i = from; i < n; i++, k++)
        r[k] = roles[i], c[k] = contents[i];
    return count(ud, r, c, k, err);
}

/* The turn starts a plan may cut at: starts[0] = head (nothing dropped),
 * then every later user message up to and including the current
 * question. Returns how many. */
static size_t turn_starts(const char *const *roles, size_t n, size_t head,
                          size_t *starts)
{
    size_t question = n;
    for (size_t i = n; i > head; i--) {
        if (is_role(roles[i - 1], "user")) {
            question = i - 1;
            break;
        }
    }
    size_t k = 0;
    starts[k++] = head;
    if (question == n)
        return k;   /* no question: nothing can be dropped */
    for (size_t i = head + 1; i < question; i++)
        if (is_role(roles[i], "user"))
            starts[k++] = i;
    if (question > head)
        starts[k++] = question;
    return k;
}

int overflow_plan(const char *const *roles, const char *const *contents,
                  size_t n, int n_ctx, int reserve, overflow_count_fn count,
                  void *ud, struct overflow_plan *out, struct kk_error *err)
{
    memset(out, 0, sizeof *out);
    out->n_ctx = n_ctx;
    out->reserve = reserve;
    size_t head = n && is_role(roles[0], "system") ? 1 : 0;
    const char **r = malloc(sizeof *r * (n + 1));
    const char **c = malloc(sizeof *c * (n + 1));
    size_t *starts = malloc(sizeof *starts * (n + 1));
    int rc = -1;
    if (!r || !c || !starts) {
        kk_fail(err, "out of memory planning the context");
        goto out;
    }
    size_t n_starts = turn_starts(roles, n, head, starts);
    int limit = n_ctx - reserve;
    out->n_tokens = count(ud, roles, contents, n, err);
    if (out->n_tokens < 0)
        goto out;
    out->first_dropped = out->first_kept = (int)head;
    out->n_tokens_kept = out->n_tokens_minimal = out->n_tokens;
    out->fits = out->n_tokens <= limit;
    if (out->fits || n_starts == 1) {
        out->can_drop = out->fits;
        rc = 0;
        goto out;
    }
    /* Fewer tokens the more turns go: the smallest k that fits, by
     * bisection over [1, n_starts - 1]. */
    size_t lo = 1, hi = n_starts - 1;
    int tokens_hi = count_from(roles, contents, n, head, starts[hi], count,
                               ud, r, c, err);
    if (tokens_hi < 0)
        goto out;
    out->n_tokens_minimal = tokens_hi;
    out->can_drop = tokens_hi <= limit;
    int best_tokens = tokens_hi;
    while (out->can_drop && lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int t = count_from(roles, contents, n, head, starts[mid], count, ud,
                           r, c, err);
        if (t < 0)
            goto out;
        if (t <= limit)
            hi = mid, best_tokens = t;
        else
            lo = mid + 1;
    }
    if (out->can_drop) {   /* best_tokens is always starts[hi]'s count */
        out->first_kept = (int)starts[hi];
        out->n_tokens_kept = best_tokens;
        out->n_dropped_messages = out->first_kept - out->first_dropped;
        out->n_dropped_turns = (int)hi;
    }
    rc = 0;
out:
    free(r);
    free(c);
    free(starts);
    return rc;
}

size_t overflow_apply(const struct overflow_plan *p, const char *const *roles,
                      const char *const *contents, size_t n,
                      const char **out_roles, const char **out_contents)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p->fits && (int)i >= p->first_dropped && (int)i < p->first_kept)
            continue;
        out_roles[k] = roles[i];
        out_contents[k++] = contents[i];
    }
    return k;
}

void overflow_describe(const struct overflow_plan *p, char *buf, size_t size)
{
    int need = p->n_tokens + p->reserve;
    int len = snprintf(buf, size, "the conversation needs %d tokens (%d, "
                       "plus %d for the answer) but the context holds %d",
                       need, p->n_tokens, p->reserve, p->n_ctx);
    if (len < 0 || (size_t)len >= size)
        return;
    if (p->can_drop)
        snprintf(buf + len, size - (size_t)len, "; dropping the %d oldest "
                 "turn%s would make it fit (%d tokens)", p->n_dropped_turns,
                 p->n_dropped_turns == 1 ? "" : "s", p->n_tokens_kept);
    else
        snprintf(buf + len, size - (size_t)len, "; even the current message "
                 "alone needs %d tokens, so dropping turns cannot help",
                 p->n_tokens_minimal + p->reserve);
}

int overflow_tokenize(const struct kk_model *m, const char *const *roles,
                      const char *const *contents, size_t n,
                      bool add_generation_prompt, int32_t **ids,
                      struct kk_error *err)
{
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    char *text = kk_chat_render(m, roles, contents, n, add_generation_prompt);
    if (!text)
        return kk_fail(err, "out of memory rendering the conversation");
    size_t len = strlen(text);
    int count = kk_tokenize(m, text, len, info.add_bos, true, NULL, 0, err);
    if (count >= 0 && ids) {
        *ids = malloc(sizeof **ids * (size_t)(count + 1));
        if (!*ids)
            count = kk_fail(err, "out of memory tokenizing the conversation");
        else
            count = kk_tokenize(m, text, len, info.add_bos, true, *ids, count,
                                err);
    }
    free(text);
    return count;
}

int overflow_count_model(void *ud, const char *const *roles,
                         const char *const *contents, size_t n,
                         struct kk_error *err)
{
    const struct overflow_model *om = ud;
    return overflow_tokenize(om->model, roles, contents, n,
                             om->add_generation_prompt, NULL, err);
}
