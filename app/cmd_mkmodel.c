/* cmd_mkmodel.c — `kakeya mkmodel --shape NAME --type T -o FILE`: a
 * random-weight model of a real model's exact shape, for benchmarks. */
#include <stdio.h>

#include "args.h"
#include "commands.h"
#include "kakeya.h"

int cmd_mkmodel(int argc, char **argv)
{
    struct args a;
    args_init(&a, "kakeya mkmodel", argc, argv);
    const char *shape = NULL, *type = "Q8_0", *out = NULL, *vocab = NULL;
    uint64_t seed = 1;
    while (args_next(&a)) {
        if (args_is(&a, "-s", "--shape"))
            shape = args_value(&a);
        else if (args_is(&a, "-t", "--type"))
            type = args_value(&a);
        else if (args_is(&a, "-o", "--output"))
            out = args_value(&a);
        else if (args_is(&a, NULL, "--vocab-from"))
            vocab = args_value(&a);
        else if (args_is(&a, NULL, "--seed"))
            seed = args_u64(&a);
        else if (args_is(&a, NULL, "--list")) {
            for (int i = 0; kk_model_shape_name(i); i++)
                printf("%s\n", kk_model_shape_name(i));
            return 0;
        } else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!shape || !out) {
        fprintf(stderr, "kakeya mkmodel: needs --shape NAME and -o FILE "
                        "(--list shows the shapes)\n");
        return 2;
    }
    struct kk_error err = {{0}};
    fprintf(stderr, "kakeya mkmodel: writing %s (%s, %s)...\n", out, shape,
            type);
    if (kk_make_model(shape, type, vocab, out, seed, &err)) {
        fprintf(stderr, "kakeya mkmodel: %s\n", err.msg);
        return 1;
    }
    return 0;
}
