/* chat.h — `kakeya` with no subcommand: the interactive chat screen, and
 * the hidden `kakeya uibench` that measures its per-token cost. */
#ifndef KK_CHAT_H
#define KK_CHAT_H

#include <stddef.h>

#ifndef KAKEYA_PREFIX
#define KAKEYA_PREFIX "/usr/local"
#endif

int chat_main(int argc, char **argv);
int chat_uibench(int argc, char **argv);

/* The model to open: given, else $KAKEYA_MODEL, else the default model
 * next to the binary (../data/models/) or under PREFIX/share/kakeya/models.
 * Writes it into buf and returns 0, or -1 after writing into buf the list
 * of places it looked. name: "kakeya-chat.gguf". */
int chat_find_model(const char *given, const char *env_name,
                    const char *name, char *buf, size_t size);

#endif
