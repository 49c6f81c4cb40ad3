/* cmd_store.c — the store's subcommands:
 *   kakeya list   [--db FILE]
 *   kakeya export ID [--format md|json] [-o FILE] [--db FILE]
 *   kakeya import FILE.json|- [--db FILE]
 *   kakeya search TEXT... [--limit N] [--db FILE]
 * Each opens the database (default: store_default_path), does one thing
 * and prints errors as "kakeya CMD: message". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "store.h"

/* Opens db_path, or the default database when it is NULL. */
static struct store *open_store(const char *cmd, const char *db_path)
{
    char path[4096];
    struct kk_error err = {{0}};
    struct store *s = NULL;
    if (!db_path) {
        if (store_default_path(path, sizeof path, &err)) {
            fprintf(stderr, "%s: %s\n", cmd, err.msg);
            return NULL;
        }
        db_path = path;
    }
    if (store_open(db_path, NULL, &s, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return NULL;
    }
    return s;
}

static void format_time(int64_t ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!localtime_r(&t, &tm) ||
        !strftime(buf, size, "%Y-%m-%d %H:%M", &tm))
        snprintf(buf, size, "?");
}

int cmd_list(int argc, char **argv)
{
    const char *cmd = "kakeya list";
    struct args a;
    args_init(&a, cmd, argc, argv);
    const char *db = NULL;
    while (args_next(&a)) {
        if (args_is(&a, NULL, "--db"))
            db = args_value(&a);
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    struct store *s = open_store(cmd, db);
    if (!s)
        return 1;
    struct kk_error err = {{0}};
    struct store_conversation *list;
    size_t n;
    int rc = 0;
    if (store_list_conversations(s, &list, &n, &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        rc = 1;
    } else {
        for (size_t i = 0; i < n; i++) {
            char when[32];
            format_time(list[i].updated_at, when, sizeof when);
            printf("%6lld  %s  %4lld msgs  %s\n", (long long)list[i].id,
                   when, (long long)list[i].n_messages,
                   list[i].title[0] ? list[i].title : "(untitled)");
        }
        if (n == 0)
            fprintf(stderr, "%s: no conversations yet in %s\n", cmd,
                    store_path(s));
        store_conversations_free(list, n);
    }
    store_close(s);
    return rc;
}

static bool parse_id(const char *text, int64_t *id)
{
    char *end;
    long long v = text ? strtoll(text, &end, 10) : 0;
    if (!text || end == text || *end || v <= 0)
        return false;
    *id = v;
    return true;
}

static int write_text(const char *cmd, const char *path, const char *text)
{
    FILE *f = path ? fopen(path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %m\n", cmd, path);
        return 1;
    }
    bool ok = fputs(text, f) >= 0;
    ok = (path ? fclose(f) == 0 : fflush(f) == 0) && ok;
    if (!ok) {
        fprintf(stderr, "%s: writing %s failed: %m\n", cmd,
                path ? path : "standard output");
        return 1;
    }
    return 0;
}

int cmd_export(int argc, char **argv)
{
    const char *cmd = "kakeya export";
    struct args a;
    args_init(&a, cmd, argc, argv);
    const char *db = NULL, *format = "md", *id_text = NULL, *output = NULL;
    while (args_next(&a)) {
        if (args_is(&a, NULL, "--db"))
            db = args_value(&a);
        else if (args_is(&a, "-f", "--format"))
            format = args_value(&a);
        else if (args_is(&a, "-o", "--output"))
            output = args_value(&a);
        else if (a.opt[0] != '-' && !id_text)
            id_text = a.opt;
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    int64_t id;
    bool is_json = format && strcmp(format, "json") == 0;
    if (!parse_id(id_text, &id) || !format ||
        (!is_json && strcmp(format, "md") != 0)) {
        fprintf(stderr, "%s: needs a conversation ID (see kakeya list) and "
                "--format md or json\n", cmd);
        return 2;
    }
    struct store *s = open_store(cmd, db);
    if (!s)
        return 1;
    struct kk_error err = {{0}};
    char *text;
    int rc = is_json ? store_export_json(s, id, &text, &err)
                     : store_export_markdown(s, id, &text, &err);
    store_close(s);
    if (rc) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        return 1;
    }
    rc = write_text(cmd, output, text);
    free(text);
    return rc;
}

/* The whole of path ("-": standard input) into a malloc'd buffer. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *p = realloc(buf, cap * 2);
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    bool failed = !buf || ferror(f);
    if (f != stdin)
        fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_import(int argc, char **argv)
{
    const char *cmd = "kakeya import";
    struct args a;
    args_init(&a, cmd, argc, argv);
    const char *db = NULL, *path = NULL;
    while (args_next(&a)) {
        if (args_is(&a, NULL, "--db"))
            db = args_value(&a);
        else if ((a.opt[0] != '-' || !strcmp(a.opt, "-")) && !path)
            path = a.opt;
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!path) {
        fprintf(stderr, "%s: needs FILE.json (or - for standard input)\n",
                cmd);
        return 2;
    }
    size_t len = 0;
    char *json = read_all(path, &len);
    if (!json) {
        fprintf(stderr, "%s: cannot read %s: %m\n", cmd, path);
        return 1;
    }
    struct store *s = open_store(cmd, db);
    if (!s) {
        free(json);
        return 1;
    }
    struct kk_error err = {{0}};
    int64_t id;
    int rc = store_import_json(s, json, len, &id, &err);
    store_close(s);
    free(json);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", cmd, path, err.msg);
        return 1;
    }
    printf("imported as conversation %lld\n", (long long)id);
    return 0;
}

int cmd_search(int argc, char **argv)
{
    const char *cmd = "kakeya search";
    struct args a;
    args_init(&a, cmd, argc, argv);
    const char *db = NULL;
    int limit = 20;
    char text[4096] = "";
    size_t used = 0;
    while (args_next(&a)) {
        if (args_is(&a, NULL, "--db"))
            db = args_value(&a);
        else if (args_is(&a, "-n", "--limit"))
            limit = args_int(&a, 1, 100000);
        else if (used + strlen(a.opt) + 2 < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s",
                                     used ? " " : "", a.opt);
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!used) {
        fprintf(stderr, "%s: needs TEXT to search for\n", cmd);
        return 2;
    }
    struct store *s = open_store(cmd, db);
    if (!s)
        return 1;
    bool is_tty = isatty(STDOUT_FILENO);
    struct kk_error err = {{0}};
    struct store_hit *hits;
    size_t n;
    int rc = 0;
    if (store_search(s, text, is_tty ? "\033[1m" : "[",
                     is_tty ? "\033[0m" : "]", (size_t)limit, &hits, &n,
                     &err)) {
        fprintf(stderr, "%s: %s\n", cmd, err.msg);
        rc = 1;
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%lld  %s  %s: %s\n", (long long)hits[i].conversation_id,
                   hits[i].conversation_title[0] ? hits[i].conversation_title
                                                 : "(untitled)",
                   store_role_name(hits[i].role), hits[i].snippet);
        if (n == 0) {
            fprintf(stderr, "%s: no messages match\n", cmd);
            rc = 1;
        }
        store_hits_free(hits, n);
    }
    store_close(s);
    return rc;
}
