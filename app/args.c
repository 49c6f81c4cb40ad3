/* args.c — see args.h. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kakeya.h"
#include "overflow.h"

void args_init(struct args *a, const char *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
}

const char *args_next(struct args *a)
{
    if (a->failed || a->i >= a->argc)
        return NULL;
    a->opt = a->argv[a->i++];
    return a->opt;
}

bool args_is(const struct args *a, const char *short_name,
             const char *long_name)
{
    return (short_name && strcmp(a->opt, short_name) == 0) ||
           (long_name && strcmp(a->opt, long_name) == 0);
}

const char *args_value(struct args *a)
{
    if (a->i >= a->argc) {
        fprintf(stderr, "%s: option %s needs a value\n", a->cmd, a->opt);
        a->failed = true;
        return NULL;
    }
    return a->argv[a->i++];
}

double args_float(struct args *a, double lo, double hi)
{
    const char *v = args_value(a);
    if (!v)
        return lo;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || *end || end == v || d < lo || d > hi) {
        fprintf(stderr, "%s: %s wants a number from %g to %g, not '%s'\n",
                a->cmd, a->opt, lo, hi, v);
        a->failed = true;
        return lo;
    }
    return d;
}

int args_int(struct args *a, int lo, int hi)
{
    const char *v = args_value(a);
    if (!v)
        return lo;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < lo || n > hi) {
        fprintf(stderr, "%s: %s wants a whole number from %d to %d, not "
                        "'%s'\n", a->cmd, a->opt, lo, hi, v);
        a->failed = true;
        return lo;
    }
    return (int)n;
}

uint64_t args_u64(struct args *a)
{
    const char *v = args_value(a);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || end == v || *v == '-') {
        fprintf(stderr, "%s: %s wants a non-negative whole number, not "
                        "'%s'\n", a->cmd, a->opt, v);
        a->failed = true;
        return 0;
    }
    return n;
}

void args_unknown(struct args *a)
{
    if (a->opt[0] == '-')
        fprintf(stderr, "%s: unknown option '%s' (see kakeya --help)\n",
                a->cmd, a->opt);
    else
        fprintf(stderr, "%s: unexpected argument '%s' (see kakeya --help)\n",
                a->cmd, a->opt);
    a->failed = true;
}

void args_overflow(struct args *a, enum overflow_policy *out)
{
    const char *v = args_value(a);
    if (v && overflow_parse(v, out) == 0)
        return;
    if (v)
        fprintf(stderr, "%s: --overflow wants ask, refuse, drop or sink, not "
                        "'%s'\n", a->cmd, v);
    a->failed = true;
}

void args_kv_type(struct args *a, enum kk_kv_type *out)
{
    static const struct {
        const char *name;
        enum kk_kv_type type;
    } types[] = {{"f16", KK_KV_F16}, {"f32", KK_KV_F32}, {"q8_0", KK_KV_Q8_0}};
    const char *v = args_value(a);
    for (size_t i = 0; v && i < sizeof types / sizeof types[0]; i++) {
        if (!strcmp(v, types[i].name)) {
            *out = types[i].type;
            return;
        }
    }
    if (v)
        fprintf(stderr, "%s: --kv wants f16, f32 or q8_0, not '%s'\n",
                a->cmd, v);
    a->failed = true;
}

static void parse_backend(struct args *a, enum kk_backend *out)
{
    const char *v = args_value(a);
    for (int i = 0; v && i < KK_BACKEND_COUNT; i++) {
        if (!strcmp(v, kk_backend_name((enum kk_backend)i))) {
            *out = (enum kk_backend)i;
            return;
        }
    }
    if (v)
        fprintf(stderr, "%s: --backend wants cpu, vulkan or auto, not '%s'\n",
                a->cmd, v);
    a->failed = true;
}

bool args_backend_option(struct args *a, enum kk_backend *backend,
                         int *device)
{
    if (args_is(a, NULL, "--backend"))
        parse_backend(a, backend);
    else if (args_is(a, NULL, "--device"))
        *device = args_int(a, 0, 63);
    else
        return false;
    return true;
}
