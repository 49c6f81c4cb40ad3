/* cmd_tokenize.c — `kakeya tokenize -m MODEL [--no-bos] [--special] TEXT`:
 * prints the token ids of TEXT, one line, space separated (with --pieces,
 * one "id<TAB>piece" line per token). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "kakeya.h"

static void print_pieces(struct kk_model *m, const int32_t *ids, int n)
{
    char buf[256];
    for (int i = 0; i < n; i++) {
        int len = kk_token_piece(m, ids[i], true, buf, sizeof buf);
        len = len > (int)sizeof buf ? (int)sizeof buf : len;
        printf("%d\t'%.*s'\n", ids[i], len < 0 ? 0 : len, buf);
    }
}

int cmd_tokenize(int argc, char **argv)
{
    struct args a;
    args_init(&a, "kakeya tokenize", argc, argv);
    const char *path = NULL, *text = NULL;
    bool no_bos = false, special = false, pieces = false;
    while (args_next(&a)) {
        if (args_is(&a, "-m", "--model"))
            path = args_value(&a);
        else if (args_is(&a, NULL, "--no-bos"))
            no_bos = true;
        else if (args_is(&a, NULL, "--special"))
            special = true;
        else if (args_is(&a, NULL, "--pieces"))
            pieces = true;
        else if (a.opt[0] != '-' && !text)
            text = a.opt;
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!path || !text) {
        fprintf(stderr, "kakeya tokenize: needs -m MODEL.gguf and TEXT\n");
        return 2;
    }
    struct kk_error err = {{0}};
    struct kk_model *m;
    if (kk_model_open(path, &m, &err)) {
        fprintf(stderr, "kakeya tokenize: %s\n", err.msg);
        return 1;
    }
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    bool bos = info.add_bos && !no_bos;
    int rc = 1;
    int n = kk_tokenize(m, text, strlen(text), bos, special, NULL, 0, &err);
    int32_t *ids = n >= 0 ? malloc(sizeof(int32_t) * (size_t)(n + 1)) : NULL;
    if (ids && kk_tokenize(m, text, strlen(text), bos, special, ids, n,
                           &err) == n) {
        if (pieces) {
            print_pieces(m, ids, n);
        } else {
            for (int i = 0; i < n; i++)
                printf("%s%d", i ? " " : "", ids[i]);
            printf("\n");
        }
        rc = 0;
    } else {
        fprintf(stderr, "kakeya tokenize: %s\n", err.msg[0] ? err.msg
                                                            : "out of memory");
    }
    free(ids);
    kk_model_close(m);
    return rc;
}
