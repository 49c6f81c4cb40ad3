/* chat.h — `kakeya` with no subcommand: the interactive chat screen, and
 * the hidden `kakeya uibench` that measures its per-token cost. */
#ifndef KK_CHAT_H
#define KK_CHAT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#ifndef KAKEYA_PREFIX
#define KAKEYA_PREFIX "/usr/local"
/* The files a chat or `kakeya ask` turn uses. */
struct chat_paths {
    char model[PATH_MAX * 2];
    char draft[PATH_MAX * 2];
    bool has_draft;    /* given, or the default draft with the default model */
    char db[PATH_MAX];
};

/* Resolves the model (given, $KAKEYA_MODEL or the default), the draft (the
 * default one only goes with the default target) and the database (given,
 * or the XDG default). On failure prints a message starting with cmd and
 * returns -1. */
int chat_resolve_paths(const char *cmd, const char *model, const char *draft,
                       const char *db, struct chat_paths *out);

#endif

int chat_main(int argc, char **argv);
int chat_uibench(int argc, char **argv);

/* The model to open: given, else $KAKEYA_MODEL, else the default model
 * next to the binary (../data/models/) or under PREFIX/share/kakeya/models.
 * Writes it into buf and returns 0, or -1 after writing into buf the list
 * of places it looked. name: "kakeya-chat.gguf". */
int chat_find_model(const char *given, const char *env_name,
                    const char *name, char *buf, size_t size);

/* The files a chat or `kakeya ask` turn uses. */
struct chat_paths {
    char model[PATH_MAX * 2];
    char draft[PATH_MAX * 2];
    bool has_draft;    /* given, or the default draft with the default model */
    char db[PATH_MAX];
};

/* Resolves the model (given, $KAKEYA_MODEL or the default), the draft (the
 * default one only goes with the default target) and the database (given,
 * or the XDG default). On failure prints a message starting with cmd and
 * returns -1. */
int chat_resolve_paths(const char *cmd, const char *model, const char *draft,
                       const char *db, struct chat_paths *out);

#endif
