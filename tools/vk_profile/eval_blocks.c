/* eval_blocks.c — where the GPU time of one kind of pass goes: a decode
 * step (L = 1) or a verify block of L tokens, alone. `kakeya bench`
 * times every kind of pass in one run, so KAKEYA_VK_PROFILE=1 over it
 * adds prefill, decode and every block size into the same rows; this
 * program prefills a prompt of P tokens once and then evaluates the same
 * block of L tokens N times, trimming back to P after each (as a rejected
 * speculative block is), so the profile's rows are that pass's dispatches
 * (plus one prefill). Not part of the build:
 *
 *   make build/libkakeya.a
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iengine tools/vk_profile/eval_blocks.c \
 *       build/libkakeya.a -lm -ldl -lpthread \
 *       -L/usr/lib/x86_64-linux-gnu/openblas-pthread/ -lopenblas \
 *       -o build/eval_blocks
 *   KAKEYA_VK_PROFILE=1 build/eval_blocks MODEL.gguf L [N [P]]
 *
 * N defaults to 300 and P to 256 (the bench's prompt). Greedy passes
 * (kk_session_eval_greedy, every row's argmax), as the bench's greedy
 * figures and the speculative loop's verify blocks are. Prints what it
 * ran and its wall time a pass on stdout (against the profile's GPU time,
 * what the host adds); the profile comes on stderr at exit. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kakeya.h"

enum { MOST_TOKENS = 16 };

/* argv[i] as a count in [lo, hi], or -1 with a message. */
static int count_arg(const char *what, const char *s, int lo, int hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "eval_blocks: %s must be a number from %d to %d "
                        "(got '%s')\n", what, lo, hi, s);
        return -1;
    }
    return (int)v;
}

/* Token ids spread over the vocabulary, never past it. */
static void fill_ids(int32_t *ids, int n, int32_t first, int32_t n_vocab)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)((first + (int64_t)i * 7919) % n_vocab);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Evaluates the block n times after the prompt; *pass_ms, the mean wall
 * time of one pass with its trim (the host's walk, submission and wait
 * included, which the profile's GPU rows leave out). */
static int run(struct kk_session *s, int L, int n, int prompt,
               int32_t n_vocab, double *pass_ms, struct kk_error *err)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)prompt);
    if (!ids) {
        fprintf(stderr, "eval_blocks: out of memory\n");
        return -1;
    }
    fill_ids(ids, prompt, 100 % n_vocab, n_vocab);
    int rc = kk_session_eval(s, ids, prompt, false, NULL, NULL, err);
    free(ids);
    if (rc)
        return -1;
    int32_t block[MOST_TOKENS];
    fill_ids(block, L, 300 % n_vocab, n_vocab);
    const double start = now_ms();
    for (int i = 0; i < n; i++) {
        if (kk_session_eval_greedy(s, block, L, true, NULL, NULL, err))
            return -1;
        kk_session_trim(s, prompt);
    }
    *pass_ms = (now_ms() - start) / n;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: KAKEYA_VK_PROFILE=1 eval_blocks MODEL.gguf "
                        "L [N [P]]   (L 1..%d tokens a pass, N passes, "
                        "after a prompt of P)\n", MOST_TOKENS);
        return 2;
    }
    const int L = count_arg("L", argv[2], 1, MOST_TOKENS);
    const int n = argc > 3 ? count_arg("N", argv[3], 1, 1000000) : 300;
    const int prompt = argc > 4 ? count_arg("P", argv[4], 1, 1 << 20) : 256;
    if (L < 0 || n < 0 || prompt < 0)
        return 2;

    struct kk_error err;
    struct kk_model *m;
    if (kk_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "eval_blocks: %s\n", err.msg);
        return 1;
    }
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    struct kk_session_params p = {.n_ctx = prompt + MOST_TOKENS,
                                  .backend = KK_BACKEND_VULKAN};
    struct kk_session *s;
    if (kk_session_new(m, &p, &s, &err)) {
        fprintf(stderr, "eval_blocks: %s\n", err.msg);
        kk_model_close(m);
        return 1;
    }
    double pass_ms = 0.0;
    int rc = run(s, L, n, prompt, info.n_vocab, &pass_ms, &err);
    if (rc)
        fprintf(stderr, "eval_blocks: %s\n", err.msg);
    else
        printf("%d passes of %d token%s after %d, on %s: %.4f ms a pass "
               "(wall)\n", n, L, L == 1 ? "" : "s", prompt,
               kk_session_backend(s), pass_ms);
    kk_session_free(s);
    kk_model_close(m);
    return rc ? 1 : 0;
}
