/* store_export.c — a conversation as JSON (the import format) or Markdown
 * (for reading), and importing JSON back as a new conversation.
 *
 * The JSON holds no row ids, so export -> import -> export gives the same
 * text. Import validates everything before writing anything and writes in
 * one transaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "store_internal.h"

#define EXPORT_FORMAT "kakeya-conversation"
#define EXPORT_VERSION 1

/* What one conversation holds, read in full. */
struct snapshot {
    struct store_conversation conv;
    struct store_message *messages;
    size_t n_messages;
    struct store_document *documents;
    size_t n_documents;
};

static void snapshot_free(struct snapshot *sn)
{
    store_conversation_free(&sn->conv);
    store_messages_free(sn->messages, sn->n_messages);
    store_documents_free(sn->documents, sn->n_documents);
}

static int snapshot_read(struct store *s, int64_t id, struct snapshot *sn,
                         struct kk_error *err)
{
    memset(sn, 0, sizeof *sn);
    /* One read transaction, so the three reads agree with each other. */
    if (sql_exec(s, "BEGIN", "reading a conversation", err))
        return -1;
    int rc = store_get_conversation(s, id, &sn->conv, err) ||
             store_list_messages(s, id, &sn->messages, &sn->n_messages, err) ||
             store_list_documents(s, id, &sn->documents, &sn->n_documents,
                                  err) ? -1 : 0;
    store_rollback(s);   /* nothing was written: ends the read */
    if (rc)
        snapshot_free(sn);
    return rc;
}

/* ---- JSON ------------------------------------------------------------- */

static cJSON *stats_object(const struct store_stats *st)
{
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddNumberToObject(o, "tau", st->tau) &&
        cJSON_AddNumberToObject(o, "acceptance_rate", st->acceptance_rate) &&
        cJSON_AddNumberToObject(o, "tok_per_s", st->tok_per_s) &&
        cJSON_AddNumberToObject(o, "kv_saved", st->kv_saved) &&
        cJSON_AddStringToObject(o, "proposer", st->proposer))
        return o;
    cJSON_Delete(o);
    return NULL;
}

static cJSON *message_object(const struct store_message *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "role", store_role_name(m->role)) ||
        !cJSON_AddStringToObject(o, "content", m->content) ||
        !cJSON_AddNumberToObject(o, "n_tokens", m->n_tokens) ||
        !cJSON_AddBoolToObject(o, "is_partial", m->is_partial) ||
        !cJSON_AddNumberToObject(o, "created_at", (double)m->created_at))
        goto fail;
    if (m->has_stats) {
        cJSON *st = stats_object(&m->stats);
        if (!st || !cJSON_AddItemToObject(o, "stats", st)) {
            cJSON_Delete(st);
            goto fail;
        }
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *document_object(const struct store_document *d)
{
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddStringToObject(o, "source_path", d->source_path) &&
        cJSON_AddStringToObject(o, "content_hash", d->content_hash) &&
        cJSON_AddNumberToObject(o, "n_tokens", d->n_tokens) &&
        cJSON_AddNumberToObject(o, "created_at", (double)d->created_at) &&
        cJSON_AddStringToObject(o, "content", d->content))
        return o;
    cJSON_Delete(o);
    return NULL;
}

static cJSON *snapshot_json(const struct snapshot *sn)
{
    const struct store_conversation *c = &sn->conv;
    cJSON *o = cJSON_CreateObject();
    cJSON *msgs, *docs;
    if (!o || !cJSON_AddStringToObject(o, "format", EXPORT_FORMAT) ||
        !cJSON_AddNumberToObject(o, "version", EXPORT_VERSION) ||
        !cJSON_AddStringToObject(o, "title", c->title) ||
        !cJSON_AddStringToObject(o, "system_prompt", c->system_prompt) ||
        !cJSON_AddStringToObject(o, "target_model", c->target_model) ||
        !cJSON_AddStringToObject(o, "draft_model", c->draft_model) ||
        !cJSON_AddNumberToObject(o, "created_at", (double)c->created_at) ||
        !cJSON_AddNumberToObject(o, "updated_at", (double)c->updated_at) ||
        !(msgs = cJSON_AddArrayToObject(o, "messages")) ||
        !(docs = cJSON_AddArrayToObject(o, "documents")))
        goto fail;
    for (size_t i = 0; i < sn->n_messages; i++) {
        cJSON *m = message_object(&sn->messages[i]);
        if (!m || !cJSON_AddItemToArray(msgs, m)) {
            cJSON_Delete(m);
            goto fail;
        }
    }
    for (size_t i = 0; i < sn->n_documents; i++) {
        cJSON *d = document_object(&sn->documents[i]);
        if (!d || !cJSON_AddItemToArray(docs, d)) {
            cJSON_Delete(d);
            goto fail;
        }
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* A malloc'd copy of cJSON's output (freed with free, not cJSON_free). */
static char *print_json(const cJSON *o)
{
    char *text = o ? cJSON_Print(o) : NULL;
    char *copy = text ? strdup(text) : NULL;
    cJSON_free(text);
    return copy;
}

int store_export_json(struct store *s, int64_t conversation_id, char **out,
                      struct kk_error *err)
{
    *out = NULL;
    struct snapshot sn;
    if (snapshot_read(s, conversation_id, &sn, err))
        return -1;
    cJSON *o = snapshot_json(&sn);
    *out = print_json(o);
    cJSON_Delete(o);
    snapshot_free(&sn);
    return *out ? 0 : kk_fail(err, "%s: exporting: out of memory", s->path);
}

/* ---- Markdown --------------------------------------------------------- */

static void print_time(FILE *f, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    char buf[64];
    if (localtime_r(&t, &tm) && strftime(buf, sizeof buf, "%Y-%m-%d %H:%M",
                                         &tm))
        fputs(buf, f);
    else
        fprintf(f, "%lld ms", (long long)ms);
}

/* A code fence longer than any run of backticks in text. */
static int fence_length(const char *text)
{
    int longest = 0, run = 0;
    for (const char *p = text; *p; p++) {
        run = *p == '`' ? run + 1 : 0;
        longest = run > longest ? run : longest;
    }
    return longest >= 3 ? longest + 1 : 3;
}

static void print_message(FILE *f, const struct store_message *m)
{
    static const char *const headings[] = {"System", "User", "Assistant"};
    fprintf(f, "## %s\n\n%s\n", headings[m->role], m->content);
    if (m->is_partial)
        fputs("\n*(unfinished answer)*\n", f);
    if (m->has_stats)
        fprintf(f, "\n*tau %.2f · acceptance %.0f%% · %.1f tok/s · KV saved "
                "%.0f%% · proposer %s · %d tokens*\n", m->stats.tau,
                100 * m->stats.acceptance_rate, m->stats.tok_per_s,
                100 * m->stats.kv_saved,
                m->stats.proposer[0] ? m->stats.proposer : "none",
                m->n_tokens);
    fputc('\n', f);
}

static void print_fence(FILE *f, int n)
{
    for (int i = 0; i < n; i++)
        fputc('`', f);
    fputc('\n', f);
}

static void print_markdown(FILE *f, const struct snapshot *sn)
{
    const struct store_conversation *c = &sn->conv;
    fprintf(f, "# %s\n\n", c->title[0] ? c->title : "(untitled)");
    fprintf(f, "- conversation %lld, created ", (long long)c->id);
    print_time(f, c->created_at);
    fputs(", updated ", f);
    print_time(f, c->updated_at);
    fputc('\n', f);
    if (c->target_model[0])
        fprintf(f, "- model: %s\n", c->target_model);
    if (c->draft_model[0])
        fprintf(f, "- draft model: %s\n", c->draft_model);
    fputc('\n', f);
    if (c->system_prompt[0])
        fprintf(f, "## System prompt\n\n%s\n\n", c->system_prompt);
    for (size_t i = 0; i < sn->n_documents; i++) {
        const struct store_document *d = &sn->documents[i];
        int fence = fence_length(d->content);
        fprintf(f, "## Document: %s (%d tokens)\n\n",
                d->source_path[0] ? d->source_path : "(pasted)", d->n_tokens);
        print_fence(f, fence);
        fprintf(f, "%s\n", d->content);
        print_fence(f, fence);
        fputc('\n', f);
    }
    for (size_t i = 0; i < sn->n_messages; i++)
        print_message(f, &sn->messages[i]);
}

int store_export_markdown(struct store *s, int64_t conversation_id,
                          char **out, struct kk_error *err)
{
    *out = NULL;
    struct snapshot sn;
    if (snapshot_read(s, conversation_id, &sn, err))
        return -1;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) {
        print_markdown(f, &sn);
        if (ferror(f) | fclose(f)) {
            free(text);
            text = NULL;
        }
    }
    snapshot_free(&sn);
    if (!text)
        return kk_fail(err, "%s: exporting: out of memory", s->path);
    *out = text;
    return 0;
}
