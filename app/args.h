/* args.h — the small option parser the subcommands share.
 *
 * Options are matched by name in order; each subcommand walks argv with
 * args_next() and asks for values with args_value()/args_int()/args_float().
 * Errors are printed to stderr with the command's name and make the caller
 * exit with status 2 (usage error). */
#ifndef KK_ARGS_H
#define KK_ARGS_H

#include <stdbool.h>
#include <stdint.h>

struct args {
    const char *cmd;   /* "kakeya run", for messages */
    int argc;
    char **argv;
    int i;             /* next index */
    const char *opt;   /* the option just read by args_next */
    bool failed;
};

void args_init(struct args *a, const char *cmd, int argc, char **argv);

/* Advances to the next argument; returns it (an option "-x"/"--xx" or a
 * positional), or NULL at the end. */
const char *args_next(struct args *a);

bool args_is(const struct args *a, const char *short_name,
             const char *long_name);

/* The value of the current option (the next argv element). */
const char *args_value(struct args *a);
int args_int(struct args *a, int lo, int hi);
double args_float(struct args *a, double lo, double hi);
uint64_t args_u64(struct args *a);

/* --overflow POLICY: ask, refuse, drop or sink (see overflow.h). */
enum overflow_policy;
void args_overflow(struct args *a, enum overflow_policy *out);

/* --kv f16|f32|q8_0: the KV cache's type (run and bench). */
enum kk_kv_type;
void args_kv_type(struct args *a, enum kk_kv_type *out);

/* --backend cpu|vulkan|auto and --device N, the options every command that
 * computes takes: returns true (having read the value into p) when the
 * current option is one of them. */
enum kk_backend;
bool args_backend_option(struct args *a, enum kk_backend *backend,
                         int *device);

/* Reports an unknown option or unexpected positional. */
void args_unknown(struct args *a);

#endif
