/* slash.c — the slash commands typed into the input line. Each does what
 * a key does (ui/keys.c) or what has no key (rename, delete, search...). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller.h"
#include "store_edit.h"

static const char help_text[] =
    "  /new              start a new conversation\n"
    "  /switch ID        open conversation ID (see the list)\n"
    "  /rename TITLE     rename this conversation\n"
    "  /delete           delete this conversation (asks first)\n"
    "  /search TEXT      search every conversation\n"
    "  /export [md|json] [FILE]  write this conversation to FILE\n"
    "  /system TEXT      set this conversation's system prompt\n"
    "  /doc PATH         load a text file into the conversation\n"
    "  /regen            generate the last answer again\n"
    "  /edit             edit and resend your last message\n"
    "  /copy [FILE]      copy the last answer (clipboard, or FILE)\n"
    "  /stats            statistics of the last answer\n"
    "  /overflow [ask|refuse|drop|sink]  what to do when the context is full\n"
    "  /model            the models in use\n"
    "  /stop             stop the streaming answer\n"
    "  /help             show or hide the help\n"
    "  /quit             quit\n";

const char *slash_help(void) { return help_text; }

static void cmd_rename(struct controller *c, const char *arg)
{
    struct kk_error err = {{0}};
    if (!c->conv_id || !arg[0]) {
        controller_notice(c, c->conv_id ? "usage: /rename TITLE"
                                        : "send a message first: this "
                                          "conversation is not saved yet");
        return;
    }
    if (store_set_title(c->store, c->conv_id, arg, &err))
        controller_notice(c, "error: %s", err.msg);
    else
        controller_notice(c, "renamed to \"%s\"", arg);
    for (int i = 0; i < c->n_convs; i++)
        if (c->convs[i].id == c->conv_id)
            snprintf(c->convs[i].title, sizeof c->convs[i].title, "%s", arg);
}

static void cmd_delete(struct controller *c, const char *arg)
{
    if (!c->conv_id) {
        controller_notice(c, "nothing to delete: this conversation is not "
                             "saved");
        return;
    }
    if (strcmp(arg, "yes") != 0) {
        c->confirm_delete = true;
        controller_notice(c, "delete this conversation and all its messages? "
                             "type y and Enter to confirm");
        return;
    }
    struct kk_error err = {{0}};
    int64_t id = c->conv_id;
    if (c->streaming) {
        controller_notice(c, "stop the answer first (Ctrl-C)");
        return;
    }
    if (store_delete_conversation(c->store, id, &err)) {
        controller_notice(c, "error: %s", err.msg);
        return;
    }
    controller_new(c);
    struct store_conversation *list = NULL;
    size_t n = 0;
    if (store_list_conversations(c->store, &list, &n, &err) == 0) {
        free(c->convs);
        c->convs = calloc(n + 1, sizeof *c->convs);
        c->n_convs = c->convs ? (int)n : 0;
        for (int i = 0; i < c->n_convs; i++) {
            c->convs[i].id = list[i].id;
            snprintf(c->convs[i].title, sizeof c->convs[i].title, "%s",
                     list[i].title);
        }
        store_conversations_free(list, n);
    }
    controller_notice(c, "deleted conversation %lld", (long long)id);
}

static void cmd_search(struct controller *c, const char *arg)
{
    struct store_hit *hits = NULL;
    size_t n = 0;
    struct kk_error err = {{0}};
    if (store_search(c->store, arg, "[", "]", 10, &hits, &n, &err)) {
        controller_notice(c, "error: %s", err.msg);
        return;
    }
    size_t cap = 256 + n * 400, len = 0;
    char *out = malloc(cap);
    if (out) {
        len += (size_t)snprintf(out, cap, "%zu hits for \"%s\" (open one with "
                                "/switch ID)", n, arg);
        for (size_t i = 0; i < n && len < cap; i++)
            len += (size_t)snprintf(out + len, cap - len,
                                    "\n  %lld %.60s: %.300s",
                                    (long long)hits[i].conversation_id,
                                    hits[i].conversation_title,
                                    hits[i].snippet);
        controller_notice(c, "%s", out);
    }
    free(out);
    store_hits_free(hits, n);
}

static void cmd_export(struct controller *c, const char *arg)
{
    if (!c->conv_id) {
        controller_notice(c, "nothing to export: this conversation is not "
                             "saved yet");
        return;
    }
    char format[8] = "md", path[512] = "";
    if (!strncmp(arg, "json", 4) && (arg[4] == ' ' || !arg[4]))
        strcpy(format, "json"), arg += 4;
    else if (!strncmp(arg, "md", 2) && (arg[2] == ' ' || !arg[2]))
        arg += 2;
    arg += strspn(arg, " ");
    if (arg[0])
        snprintf(path, sizeof path, "%s", arg);
    else
        snprintf(path, sizeof path, "kakeya-%lld.%s", (long long)c->conv_id,
                 format);
    struct kk_error err = {{0}};
    char *text = NULL;
    int rc = format[0] == 'j'
                 ? store_export_json(c->store, c->conv_id, &text, &err)
                 : store_export_markdown(c->store, c->conv_id, &text, &err);
    if (rc) {
        controller_notice(c, "error: %s", err.msg);
        return;
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f))
        controller_notice(c, "error: %s: cannot write: %m", path);
    else
        controller_notice(c, "exported to %s", path);
    free(text);
}

static void cmd_system(struct controller *c, const char *arg)
{
    if (!arg[0]) {
        controller_notice(c, "system prompt: %s",
                          c->system_prompt[0] ? c->system_prompt : "(none)");
        return;
    }
    struct kk_error err = {{0}};
    if (c->conv_id &&
        store_set_system_prompt(c->store, c->conv_id, arg, &err)) {
        controller_notice(c, "error: %s", err.msg);
        return;
    }
    char *copy = strdup(arg);
    if (!copy)
        return;
    free(c->system_prompt);
    c->system_prompt = copy;
    controller_notice(c, "system prompt set; it applies from the next answer");
}

void slash_run(struct controller *c, const char *line)
{
    char name[32];
    size_t n = strcspn(line + 1, " ");
    snprintf(name, sizeof name, "%.*s", (int)(n < 31 ? n : 31), line + 1);
    const char *arg = line + 1 + n;
    arg += strspn(arg, " ");
    if (!strcmp(name, "new"))
        controller_new(c);
    else if (!strcmp(name, "switch"))
        controller_switch(c, strtoll(arg, NULL, 10));
    else if (!strcmp(name, "rename"))
        cmd_rename(c, arg);
    else if (!strcmp(name, "delete"))
        cmd_delete(c, arg);
    else if (!strcmp(name, "search"))
        cmd_search(c, arg);
    else if (!strcmp(name, "export"))
        cmd_export(c, arg);
    else if (!strcmp(name, "system"))
        cmd_system(c, arg);
    else if (!strcmp(name, "doc"))
        arg[0] ? controller_load_document(c, arg)
               : controller_notice(c, "usage: /doc PATH");
    else if (!strcmp(name, "regen"))
        controller_regenerate(c);
    else if (!strcmp(name, "edit"))
        controller_edit_last(c);
    else if (!strcmp(name, "copy"))
        controller_copy_last(c, arg);
    else if (!strcmp(name, "stats"))
        controller_show_stats(c);
    else if (!strcmp(name, "overflow"))
        controller_set_overflow(c, arg);
    else if (!strcmp(name, "model"))
        controller_notice(c, "model: %s; proposer %s; context %d tokens",
                          c->model_label[0] ? c->model_label : "(loading)",
                          c->panes.proposer, c->panes.n_ctx);
    else if (!strcmp(name, "stop"))
        controller_stop(c);
    else if (!strcmp(name, "help"))
        c->help_visible = !c->help_visible, c->dirty = true;
    else if (!strcmp(name, "quit") || !strcmp(name, "q"))
        c->quit = true;
    else
        controller_notice(c, "unknown command /%s (F1 or /help lists them)",
                          name);
}
