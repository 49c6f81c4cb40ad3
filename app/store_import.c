/* store_import.c — a JSON export (store_export.c) stored as a new
 * conversation. The whole document is validated first, so a malformed
 * file is refused with the path of the offending field and nothing is
 * written; the rows then go in as one transaction. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "store_internal.h"

#define EXPORT_FORMAT "kakeya-conversation"
#define EXPORT_VERSION 1
#define MAX_JSON_INTEGER 9007199254740992.0   /* 2^53: exact in a double */

/* ---- validation ------------------------------------------------------- */

/* Fails with "<where>.<key>: <problem>". */
static int field_fail(struct kk_error *err, const char *where,
                      const char *key, const char *problem)
{
    return kk_fail(err, "not a valid kakeya export: %s%s%s: %s", where,
                   where[0] ? "." : "", key, problem);
}

/* An optional string member (absent: ""). */
static int opt_string(const cJSON *o, const char *key, const char *where,
                      const char **out, struct kk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = "";
    if (!v)
        return 0;
    if (!cJSON_IsString(v) || !v->valuestring)
        return field_fail(err, where, key, "expected a string");
    *out = v->valuestring;
    return 0;
}

/* An optional whole number in [lo, hi] (absent: dflt). */
static int opt_integer(const cJSON *o, const char *key, const char *where,
                       double lo, double hi, int64_t dflt, int64_t *out,
                       struct kk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = dflt;
    if (!v)
        return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d)) {
        char problem[96];
        snprintf(problem, sizeof problem, "expected a whole number from %.0f "
                 "to %.0f", lo, hi);
        return field_fail(err, where, key, problem);
    }
    *out = (int64_t)d;
    return 0;
}

static int opt_bool(const cJSON *o, const char *key, const char *where,
                    bool *out, struct kk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = false;
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return field_fail(err, where, key, "expected true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

static int opt_number(const cJSON *o, const char *key, const char *where,
                      double *out, struct kk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = 0;
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return field_fail(err, where, key, "expected a number");
    *out = v->valuedouble;
    return 0;
}

static int read_stats(const cJSON *o, const char *where,
                      struct store_stats *st, struct kk_error *err)
{
    memset(st, 0, sizeof *st);
    const char *proposer;
    if (!cJSON_IsObject(o))
        return field_fail(err, where, "stats", "expected an object");
    char here[64];
    snprintf(here, sizeof here, "%s.stats", where);
    if (opt_number(o, "tau", here, &st->tau, err) ||
        opt_number(o, "acceptance_rate", here, &st->acceptance_rate, err) ||
        opt_number(o, "tok_per_s", here, &st->tok_per_s, err) ||
        opt_number(o, "kv_saved", here, &st->kv_saved, err) ||
        opt_string(o, "proposer", here, &proposer, err))
        return -1;
    if (strlen(proposer) >= sizeof st->proposer)
        return field_fail(err, here, "proposer", "longer than 31 bytes");
    memcpy(st->proposer, proposer, strlen(proposer) + 1);
    return 0;
}

/* One message, validated; strings point into the cJSON tree. */
struct import_message {
    enum store_role role;
    const char *content;
    int64_t n_tokens, created_at;
    bool is_partial, has_stats;
    struct store_stats stats;
};

static int read_message(const cJSON *o, size_t i, int64_t now,
                        struct import_message *m, struct kk_error *err)
{
    char where[48];
    snprintf(where, sizeof where, "messages[%zu]", i);
    memset(m, 0, sizeof *m);
    if (!cJSON_IsObject(o))
        return kk_fail(err, "not a valid kakeya export: %s: expected an "
                       "object", where);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(o, "role");
    if (!cJSON_IsString(role) || store_role_parse(role->valuestring,
                                                  &m->role))
        return field_fail(err, where, "role", "expected \"system\", \"user\" "
                          "or \"assistant\"");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!cJSON_IsString(content) || !content->valuestring)
        return field_fail(err, where, "content", "expected a string");
    m->content = content->valuestring;
    if (opt_integer(o, "n_tokens", where, 0, INT32_MAX, 0, &m->n_tokens,
                    err) ||
        opt_integer(o, "created_at", where, 0, MAX_JSON_INTEGER, now,
                    &m->created_at, err) ||
        opt_bool(o, "is_partial", where, &m->is_partial, err))
        return -1;
    if (m->is_partial && m->role != STORE_ROLE_ASSISTANT)
        return field_fail(err, where, "is_partial", "only an assistant "
                          "answer can be unfinished");
    const cJSON *stats = cJSON_GetObjectItemCaseSensitive(o, "stats");
    if (stats && !cJSON_IsNull(stats)) {
        if (read_stats(stats, where, &m->stats, err))
            return -1;
        m->has_stats = true;
    }
    return 0;
}

struct import_document {
    const char *content, *source_path;
    int64_t n_tokens, created_at;
    char hash[32];
};

static int read_document(const cJSON *o, size_t i, int64_t now,
                         struct import_document *d, struct kk_error *err)
{
    char where[48];
    snprintf(where, sizeof where, "documents[%zu]", i);
    memset(d, 0, sizeof *d);
    if (!cJSON_IsObject(o))
        return kk_fail(err, "not a valid kakeya export: %s: expected an "
                       "object", where);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!cJSON_IsString(content) || !content->valuestring)
        return field_fail(err, where, "content", "expected a string");
    d->content = content->valuestring;
    const char *hash;
    if (opt_string(o, "source_path", where, &d->source_path, err) ||
        opt_string(o, "content_hash", where, &hash, err) ||
        opt_integer(o, "n_tokens", where, 0, INT32_MAX, 0, &d->n_tokens,
                    err) ||
        opt_integer(o, "created_at", where, 0, MAX_JSON_INTEGER, now,
                    &d->created_at, err))
        return -1;
    snprintf(d->hash, sizeof d->hash, "fnv1a64:%016" PRIx64,
             store_fnv1a64(STORE_FNV_SEED, d->content, strlen(d->content)));
    if (hash[0] && strcmp(hash, d->hash) != 0)
        return field_fail(err, where, "content_hash", "does not match the "
                          "content (the file was changed or damaged)");
    return 0;
}

/* The whole export, validated. */
struct import {
    const char *title, *system_prompt, *target_model, *draft_model;
    int64_t created_at, updated_at;
    struct import_message *messages;
    size_t n_messages;
    struct import_document *documents;
    size_t n_documents;
};

static int read_array(const cJSON *root, const char *key, bool required,
                      const cJSON **out, size_t *n, struct kk_error *err)
{
    *out = cJSON_GetObjectItemCaseSensitive(root, key);
    *n = 0;
    if (!*out && !required)
        return 0;
    if (!cJSON_IsArray(*out))
        return field_fail(err, "", key, "expected an array");
    *n = (size_t)cJSON_GetArraySize(*out);
    return 0;
}

static int check_header(const cJSON *root, struct kk_error *err)
{
    if (!cJSON_IsObject(root))
        return kk_fail(err, "not a valid kakeya export: expected a JSON "
                       "object at the top");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring,
                                          EXPORT_FORMAT) != 0)
        return kk_fail(err, "not a kakeya export: it lacks \"format\": \""
                       EXPORT_FORMAT "\"");
    int64_t version;
    if (opt_integer(root, "version", "", 1, 1e9, 0, &version, err))
        return -1;
    if (version != EXPORT_VERSION)
        return kk_fail(err, "the export has version %lld; this kakeya reads "
                       "version %d", (long long)version, EXPORT_VERSION);
    return 0;
}

static int read_import(const cJSON *root, struct import *im,
                       struct kk_error *err)
{
    memset(im, 0, sizeof *im);
    int64_t now = store_now_ms();
    const cJSON *msgs, *docs;
    if (check_header(root, err) ||
        opt_string(root, "title", "", &im->title, err) ||
        opt_string(root, "system_prompt", "", &im->system_prompt, err) ||
        opt_string(root, "target_model", "", &im->target_model, err) ||
        opt_string(root, "draft_model", "", &im->draft_model, err) ||
        opt_integer(root, "created_at", "", 0, MAX_JSON_INTEGER, now,
                    &im->created_at, err) ||
        opt_integer(root, "updated_at", "", 0, MAX_JSON_INTEGER,
                    im->created_at, &im->updated_at, err) ||
        read_array(root, "messages", true, &msgs, &im->n_messages, err) ||
        read_array(root, "documents", false, &docs, &im->n_documents, err))
        return -1;
    im->messages = calloc(im->n_messages + 1, sizeof *im->messages);
    im->documents = calloc(im->n_documents + 1, sizeof *im->documents);
    if (!im->messages || !im->documents)
        return kk_fail(err, "importing: out of memory");
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, msgs) {
        if (read_message(item, i, now, &im->messages[i], err))
            return -1;
        i++;
    }
    i = 0;
    cJSON_ArrayForEach(item, docs) {
        if (read_document(item, i, now, &im->documents[i], err))
            return -1;
        i++;
    }
    return 0;
}

/* ---- writing ---------------------------------------------------------- */

static int write_message(struct store *s, int64_t conv,
                         const struct import_message *m, struct kk_error *err)
{
    const char *what = "importing a message";
    char *json = m->has_stats ? store_stats_to_json(&m->stats) : NULL;
    if (m->has_stats && !json)
        return kk_fail(err, "%s: %s: out of memory", s->path, what);
    int rc = sql_do(s, what, err,
                    "INSERT INTO messages (conversation_id, role, content, "
                    "n_tokens, is_partial, created_at, stats_json) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", "ittiiit", conv,
                    store_role_name(m->role), m->content, m->n_tokens,
                    (int64_t)m->is_partial, m->created_at, json);
    cJSON_free(json);
    return rc;
}

static int write_import(struct store *s, const struct import *im,
                        int64_t *conv, struct kk_error *err)
{
    if (sql_do(s, "importing a conversation", err,
               "INSERT INTO conversations (title, system_prompt, "
               "target_model, draft_model, created_at, updated_at) "
               "VALUES (?, ?, ?, ?, ?, ?)", "ttttii", im->title,
               im->system_prompt, im->target_model, im->draft_model,
               im->created_at, im->updated_at))
        return -1;
    *conv = sqlite3_last_insert_rowid(s->db);
    for (size_t i = 0; i < im->n_messages; i++)
        if (write_message(s, *conv, &im->messages[i], err))
            return -1;
    for (size_t i = 0; i < im->n_documents; i++) {
        const struct import_document *d = &im->documents[i];
        if (sql_do(s, "importing a document", err,
                   "INSERT INTO documents (conversation_id, content, "
                   "content_hash, source_path, n_tokens, created_at) "
                   "VALUES (?, ?, ?, ?, ?, ?)", "itttii", *conv, d->content,
                   d->hash, d->source_path, d->n_tokens, d->created_at))
            return -1;
    }
    return 0;
}

/* Whether text ends inside a string or an open array/object: the usual
 * shape of a file cut short. */
static bool looks_truncated(const char *json, size_t len)
{
    long depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = json[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return in_string || depth > 0;
}

/* Parses len bytes; the error names the line and column of a syntax
 * error. */
static cJSON *parse(const char *json, size_t len, struct kk_error *err)
{
    if (len == 0 || !json)
        return kk_fail(err, "the file is empty, not a kakeya export"), NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    size_t pos = end ? (size_t)(end - json) : 0;
    bool has_trailing_text = false;
    if (root) {
        while (pos < len && json[pos] && strchr(" \t\r\n", json[pos]))
            pos++;
        if (pos == len)
            return root;
        cJSON_Delete(root);
        has_trailing_text = true;
    }
    if (pos > len)
        pos = len;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos; i++, col++)
        if (json[i] == '\n')
            line++, col = 0;
    const char *problem = has_trailing_text ? "unexpected text after the end"
                          : looks_truncated(json, len)
                          ? "the text ends too early (truncated?)"
                          : "syntax error";
    kk_fail(err, "not valid JSON: %s at line %zu, column %zu (byte %zu of "
            "%zu)", problem, line, col, pos, len);
    return NULL;
}

int store_import_json(struct store *s, const char *json, size_t len,
                      int64_t *conversation_id, struct kk_error *err)
{
    cJSON *root = parse(json, len, err);
    if (!root)
        return -1;
    struct import im;
    int64_t conv = 0;
    int rc = read_import(root, &im, err);
    if (rc == 0 && (rc = store_begin(s, err)) == 0) {
        rc = write_import(s, &im, &conv, err);
        if (rc == 0)
            rc = store_commit(s, err);
        else
            store_rollback(s);
    }
    free(im.messages);
    free(im.documents);
    cJSON_Delete(root);
    if (rc == 0 && conversation_id)
        *conversation_id = conv;
    return rc;
}
