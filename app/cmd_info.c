/* cmd_info.c — `kakeya info MODEL.gguf`: what a model file holds;
 * `kakeya info --devices`: the Vulkan devices --device N picks from. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "kakeya.h"

struct type_count {
    const char *type;
    int count;
    uint64_t bytes;
};

struct tensor_summary {
    struct type_count types[16];
    int n_types;
    bool verbose;
};

static void count_tensor(void *ud, const char *name, size_t name_len,
                         const char *type, const uint64_t ne[4],
                         uint32_t n_dims, uint64_t bytes)
{
    struct tensor_summary *s = ud;
    if (s->verbose) {
        printf("  %-32.*s %-5s [", (int)name_len, name, type);
        for (uint32_t d = 0; d < n_dims; d++)
            printf("%s%llu", d ? ", " : "", (unsigned long long)ne[d]);
        printf("]\n");
    }
    for (int i = 0; i < s->n_types; i++) {
        if (strcmp(s->types[i].type, type) == 0) {
            s->types[i].count++;
            s->types[i].bytes += bytes;
            return;
        }
    }
    if (s->n_types < 16)
        s->types[s->n_types++] = (struct type_count){type, 1, bytes};
}

static void print_info(struct kk_model *m, bool verbose)
{
    struct kk_model_info i;
    kk_model_get_info(m, &i);
    printf("name            %s\n", i.name);
    printf("architecture    %s\n", i.arch);
    printf("parameters      %.1f M\n", i.n_params / 1e6);
    printf("file            %.1f MiB (weights %.1f MiB; %.1f MiB read per "
           "token)\n", i.file_bytes / 1048576.0, i.weight_bytes / 1048576.0,
           i.bytes_per_token / 1048576.0);
    printf("layers          %d (embedding %d, feed-forward %d)\n", i.n_layer,
           i.n_embd, i.n_ff);
    printf("attention       %d heads, %d key/value heads, head dim %d\n",
           i.n_head, i.n_head_kv, i.head_dim);
    if (i.sliding_window > 0)
        printf("sliding window  %d tokens on %d of %d layers\n",
               i.sliding_window, i.n_sliding_layers, i.n_layer);
    printf("context         %d tokens (training)\n", i.n_ctx_train);
    printf("vocabulary      %d tokens (bos %d, eos %d, adds bos: %s)\n",
           i.n_vocab, i.bos, i.eos, i.add_bos ? "yes" : "no");
    printf("chat template   %s%s\n", i.chat_format,
           !i.chat_template ? " (the file has none; ChatML assumed)"
           : i.chat_format_is_fallback ? " (template not recognised; "
                                         "ChatML assumed)" : "");
    struct tensor_summary s = {.verbose = verbose};
    if (verbose)
        printf("tensors\n");
    kk_model_each_tensor(m, count_tensor, &s);
    printf("tensor types   ");
    for (int t = 0; t < s.n_types; t++)
        printf(" %s x%d (%.1f MiB)", s.types[t].type, s.types[t].count,
               s.types[t].bytes / 1048576.0);
    printf("\ncpu kernels     %s\n", kk_cpu_kernels());
}

/* Exit status 0 when at least one device can run kakeya, 1 otherwise (so
 * scripts can ask "is there a GPU?"). */
static int print_devices(void)
{
    struct kk_vk_device_info d[16];
    struct kk_error err = {{0}};
    int n = kk_vulkan_devices(d, 16, &err);
    if (n < 0) {
        fprintf(stderr, "kakeya info --devices: %s\n", err.msg);
        return 1;
    }
    if (n == 0) {
        printf("no Vulkan device: the loader is there but reports no "
               "device (install a driver, e.g. mesa-vulkan-drivers); "
               "kakeya computes on the CPU\n");
        return 1;
    }
    int usable = 0;
    for (int i = 0; i < n && i < 16; i++) {
        printf("%d  %-40s %-10s %6.1f GiB  binds %6.1f MiB  Vulkan %u.%u%s%s\n",
               i, d[i].name, d[i].type_name, d[i].memory_bytes / 1073741824.0,
               d[i].binds_bytes / 1048576.0,
               (d[i].api_version >> 22) & 0x7f,
               (d[i].api_version >> 12) & 0x3ff, d[i].driver[0] ? "  " : "",
               d[i].driver);
        if (d[i].is_usable)
            usable++;
        else
            printf("   not usable: %s\n", d[i].why_not);
    }
    printf("--backend vulkan --device N picks one; --backend auto takes the "
           "first GPU and otherwise the CPU\n");
    return usable ? 0 : 1;
}

int cmd_info(int argc, char **argv)
{
    struct args a;
    args_init(&a, "kakeya info", argc, argv);
    const char *path = NULL;
    bool verbose = false, devices = false;
    while (args_next(&a)) {
        if (args_is(&a, "-v", "--tensors"))
            verbose = true;
        else if (args_is(&a, NULL, "--devices"))
            devices = true;
        else if (args_is(&a, "-m", "--model"))
            path = args_value(&a);
        else if (a.opt[0] != '-' && !path)
            path = a.opt;
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (devices && !path)
        return print_devices();
    if (!path) {
        fprintf(stderr, "kakeya info: needs a model file: kakeya info "
                        "MODEL.gguf (or --devices)\n");
        return 2;
    }
    struct kk_error err = {{0}};
    struct kk_model *m;
    if (kk_model_open(path, &m, &err)) {
        fprintf(stderr, "kakeya info: %s\n", err.msg);
        return 1;
    }
    print_info(m, verbose);
    kk_model_close(m);
    return 0;
}
