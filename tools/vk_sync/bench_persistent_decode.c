/* bench_persistent_decode.c — what a persistent pass would make of a
 * decode step, before the engine has one: decode_phases.comp does a
 * llama-shaped pass's work (Q8_0 products with x quantized to int8,
 * attention over an f16 cache) as 5 phases a layer and the output matrix,
 * either one dispatch a phase with a pipeline barrier between them (as
 * kakeya's passes run) or all in one dispatch whose workgroups meet at a
 * grid-wide barrier. decode_fused.comp does it in 2 phases a layer, its
 * products' partial sums added into the residual in fixed point;
 * decode_stream3.comp is a pass of 3 phases a layer that only reads the
 * bytes (the least such a pass can take). What they share is
 * decode_pass.glsl. Not part of the build:
 *
 *   make build/libkakeya.a
 *   for s in decode_phases decode_fused decode_stream3 decode_fill; do
 *       glslc --target-env=vulkan1.1 -O tools/vk_sync/$s.comp \
 *           -o build/$s.spv; done
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iengine -Iengine/vulkan \
 *       tools/vk_sync/bench_persistent_decode.c build/libkakeya.a -lm -ldl \
 *       -lpthread -o build/bench_persistent_decode
 *   build/bench_persistent_decode build [key=value ...]
 *
 * Keys:
 *   device    the Vulkan device (lavapipe is never picked unless named)
 *   d, ff, heads, kv, layers, vocab, ctx
 *             the shape, the 1B one after 256 positions by default
 *   tokens    a pass's, 1 (a decode step, the default) to 8 (a verify block)
 *   fused     1: the fused pass (decode_fused.spv, one token), 2 phases a
 *             layer; its partials make it another model's numbers, so
 *             compare its logits with its own runs only (1 by default
 *             for a shader named *fused*)
 *   split     the fused pass's workgroups a head (4): each makes the
 *             head's q, k and v and its attention, and a share of o's rows
 *   layer_phases  phases a layer: 5; 2 with fused=1, 3 for a shader
 *             named *stream3* (the shader says what each phase is)
 *   steps     passes a run (50)
 *   grids     workgroup counts, a comma list: 132 by default, one a
 *             multiprocessor of the H200 (more than one a multiprocessor
 *             need not all be resident, and the grid barrier then never
 *             ends); on a CPU-backed device 1 and 2, the grid barrier on
 *             one workgroup only (lavapipe runs a few at a time)
 *   skips     masks, a comma list: bit k leaves out the phases of kind k,
 *             5 the output matrix; what is left shows what a kind costs
 *             (fused: 0 the attention blocks, 1 the ffn blocks)
 *   shader    the .spv's name: decode_stream3, or another build of
 *             decode_phases.comp (-DACT_CACHED, -DSTREAMED, ..., as its
 *             header lists) or of decode_fused.comp
 *
 * Prints one JSON line a run: µs a pass; whether the logits are the bits
 * of the skip's first run (one dispatch a phase on 132 workgroups), which a
 * grid barrier that let a phase read early would break; a hash of them, to
 * compare builds; and a hash of the first token's, which must not depend
 * on `tokens` (a token's bits are the same alone as in a batch, as
 * kakeya's speculative decoding needs). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vk_device.h"
#include "vk_tool.h"

enum { HD = 64, TMAX = 8 };

struct shape {
    uint32_t d, ff, heads, kv, layers, vocab, ctx, tokens;
    uint32_t fused, split, layer_phases;
};

struct push {
    uint32_t first, n_phases, spin, base;
    uint32_t d, ff, n_head, n_kv;
    uint32_t n_layers, vocab, ctx, skip;
    uint32_t tokens, split;
};

struct fill_push {
    uint32_t w_words, kv_words, act_words, x_words;
};

struct bench {
    struct vk_device *dev;
    struct vk_pipeline phases, fill;
    struct vk_buffer w, kv, act, count;
    struct shape s;
    uint64_t w_bytes, kv_bytes, act_floats;
};

static uint64_t row_bytes(uint64_t cols) { return cols + cols / 16; }

static uint64_t layer_bytes(const struct shape *s)
{
    uint64_t qkv = s->d + 2ull * s->kv * HD;
    return qkv * row_bytes(s->d) + s->d * row_bytes(s->d) +
           2ull * s->ff * row_bytes(s->d) + s->d * row_bytes(s->ff);
}

/* Where the logits start among the activations (TMAX rows each of x,
 * q/k/v, the attention's output, h, logits: the shader's x_at ..
 * logits_at), in floats. */
static uint64_t logits_at(const struct shape *s)
{
    return TMAX * (s->d + (s->d + 2ull * s->kv * HD) + s->d + s->ff);
}

/* The activations' floats: then the fused pass's residual buffers, 2
 * layers of d values of two words each (the shader's fx_at). */
static uint64_t act_floats(const struct shape *s)
{
    uint64_t end = (logits_at(s) + (uint64_t)TMAX * s->vocab + 3) & ~3ull;
    return end + 2ull * s->layers * 2 * s->d;
}

static uint32_t phases_of(const struct shape *s)
{
    return s->layer_phases * s->layers + 1;
}

static struct push push_of(const struct shape *s)
{
    struct push pc = {0};
    pc.d = s->d;
    pc.ff = s->ff;
    pc.n_head = s->heads;
    pc.n_kv = s->kv;
    pc.n_layers = s->layers;
    pc.vocab = s->vocab;
    pc.ctx = s->ctx;
    pc.tokens = s->tokens;
    pc.split = s->split;
    return pc;
}

static int pipeline(struct bench *b, const char *dir, const char *name,
                    int n_buffers, uint32_t push_bytes, struct vk_pipeline *p)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.spv", dir, name);
    size_t bytes;
    uint32_t *spirv = read_file(path, &bytes);
    if (!spirv) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    struct kk_error err;
    int rc = vk_pipeline_new(b->dev, spirv, bytes, n_buffers, push_bytes, p,
                             &err);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    free(spirv);
    return rc;
}

/* decode_fill over the activations, and with `all` the weights and the
 * cache too (they never change after). Returns 0, or -1 with err set. */
static int fill(struct bench *b, bool all, struct kk_error *err)
{
    struct fill_push fp = {all ? (uint32_t)((b->w_bytes + 3) / 4) : 0,
                           all ? (uint32_t)(b->kv_bytes / 4) : 0,
                           (uint32_t)b->act_floats, TMAX * b->s.d};
    const struct vk_buffer *bufs[] = {&b->w, &b->kv, &b->act};
    if (vk_begin(b->dev, err))
        return -1;
    vk_dispatch(b->dev, &b->fill, bufs, &fp, 4096, 1, 1);
    return vk_submit_wait(b->dev, err);
}

static int setup(struct bench *b, const char *dir, const char *shader)
{
    struct kk_error err;
    const struct shape *s = &b->s;
    b->w_bytes = layer_bytes(s) * s->layers + s->vocab * row_bytes(s->d);
    b->kv_bytes = (uint64_t)s->layers * s->kv * 2 * s->ctx * HD * 2;
    b->act_floats = act_floats(s);
    if (s->ctx + s->tokens > 1024 || s->d % 64 || s->ff % 64 ||
        s->tokens < 1 || s->tokens > TMAX ||
        (uint64_t)s->d * s->tokens > 16384) {
        fprintf(stderr, "the shader takes ctx + tokens <= 1024, 1 to %d "
                "tokens, d and ff multiples of 64, and d tokens <= 16384 "
                "(a normed row's quants in shared memory)\n", TMAX);
        return -1;
    }
    if (!s->split || (s->fused && (s->tokens != 1 || s->d % (4 * s->split) ||
                                   s->heads % s->kv))) {
        fprintf(stderr, "split: 1 or more; the fused pass takes 1 token, a "
                "split that divides d / 4, and kv heads that divide "
                "heads\n");
        return -1;
    }
    if (b->w_bytes >= (1ull << 32)) {
        fprintf(stderr, "weights of %llu bytes: the shader's offsets are "
                "32-bit\n", (unsigned long long)b->w_bytes);
        return -1;
    }
    if (pipeline(b, dir, shader, 4, sizeof(struct push), &b->phases) ||
        pipeline(b, dir, "decode_fill", 3, sizeof(struct fill_push),
                 &b->fill))
        return -1;
    if (vk_buffer_new(b->dev, b->w_bytes, VK_MEM_DEVICE, &b->w, &err) ||
        vk_buffer_new(b->dev, b->kv_bytes, VK_MEM_DEVICE, &b->kv, &err) ||
        vk_buffer_new(b->dev, b->act_floats * 4, VK_MEM_DEVICE, &b->act,
                      &err) ||
        vk_buffer_new(b->dev, 4, VK_MEM_DEVICE, &b->count, &err) ||
        fill(b, true, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Fills the activations afresh (every run starts from the same x), zeroes
 * the counter, runs `steps` decode steps in one submission and reads the
 * logits back into `logits`. Returns µs per step, or -1. */
static double run(struct bench *b, uint32_t groups, int spin, int steps,
                  uint32_t skip, float *logits)
{
    struct kk_error err;
    const struct shape *s = &b->s;
    uint32_t zero = 0;
    if (vk_upload(b->dev, &b->count, 0, &zero, 4, &err) ||
        fill(b, false, &err) || vk_begin(b->dev, &err))
        goto fail;
    const struct vk_buffer *bufs[] = {&b->w, &b->kv, &b->act, &b->count};
    const uint32_t phases = phases_of(s);
    struct push pc = push_of(s);
    pc.skip = skip;
    double t0 = now_us();
    for (int step = 0; step < steps; step++) {
        if (spin) {
            pc.first = 0;
            pc.n_phases = phases;
            pc.spin = 1;
            pc.base = (uint32_t)step * (phases - 1) * groups;
            vk_dispatch(b->dev, &b->phases, bufs, &pc, groups, 1, 1);
        } else {
            for (uint32_t p = 0; p < phases; p++) {
                pc.first = p;
                pc.n_phases = 1;
                pc.spin = 0;
                vk_dispatch(b->dev, &b->phases, bufs, &pc, groups, 1, 1);
            }
        }
    }
    if (vk_submit_wait(b->dev, &err))
        goto fail;
    double us = (now_us() - t0) / steps;
    if (vk_download(b->dev, &b->act, logits_at(s) * 4, logits,
                    (size_t)s->tokens * s->vocab * 4, &err))
        goto fail;
    return us;
fail:
    fprintf(stderr, "%s\n", err.msg);
    return -1;
}

/* One run, and its JSON line. Returns nonzero on a failure. */
static int report(struct bench *b, uint32_t groups, int spin, int steps,
                  uint32_t skip, const float *ref, float *got)
{
    if (groups == 0) {
        fprintf(stderr, "grids: workgroup counts of at least 1\n");
        return 1;
    }
    if (spin && vk_device_is_cpu(b->dev) && groups > 1)
        return 0;
    double us = run(b, groups, spin, steps, skip, got);
    if (us < 0)
        return 1;
    const uint32_t n = b->s.tokens * b->s.vocab;
    int same = !memcmp(ref, got, n * sizeof *ref);
    /* logits that are all 0 or not finite would make `same` say nothing */
    uint32_t live = 0, hash = 2166136261u, first = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], 4);
        hash = (hash ^ bits) * 16777619u;   /* FNV-1a, a word at a time */
        live += got[i] != 0.0f && got[i] - got[i] == 0.0f;
        if (i + 1 == b->s.vocab)
            first = hash;
    }
    printf("{\"device\": \"%s\", \"mode\": \"%s\", \"workgroups\": %u, "
           "\"skip\": %u, \"tokens\": %u, \"layers\": %u, \"ctx\": %u, "
           "\"fused\": %u, \"split\": %u, \"layer_phases\": %u, "
           "\"us_per_step\": %.1f, \"weight_bytes\": %llu, "
           "\"logits_equal\": %s, \"logits_finite_nonzero\": %u, "
           "\"logits_hash\": \"%08x\", \"first_token_hash\": \"%08x\"}\n",
           vk_device_name(b->dev),
           spin ? "grid_barrier" : "dispatch_per_phase", groups, skip,
           b->s.tokens, b->s.layers, b->s.ctx, b->s.fused,
           b->s.split, b->s.layer_phases, us,
           (unsigned long long)b->w_bytes,
           same ? "true" : "false", live, hash, first);
    fflush(stdout);
    return 0;
}

static uint32_t key_u32(int argc, char **argv, const char *key, uint32_t def)
{
    size_t n = strlen(key);
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], key, n) && argv[i][n] == '=')
            return (uint32_t)strtoul(argv[i] + n + 1, NULL, 10);
    return def;
}

static const char *key_str(int argc, char **argv, const char *key,
                           const char *def)
{
    size_t n = strlen(key);
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], key, n) && argv[i][n] == '=')
            return argv[i] + n + 1;
    return def;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SPV_DIR [key=value ...]\n", argv[0]);
        return 2;
    }
    struct bench b = {0};
    b.s = (struct shape){
        key_u32(argc, argv, "d", 2048),     key_u32(argc, argv, "ff", 8192),
        key_u32(argc, argv, "heads", 32),   key_u32(argc, argv, "kv", 8),
        key_u32(argc, argv, "layers", 16),
        key_u32(argc, argv, "vocab", 128256),
        key_u32(argc, argv, "ctx", 256),    key_u32(argc, argv, "tokens", 1),
        0, key_u32(argc, argv, "split", 4), 0};
    /* the pass a shader does goes by its name (decode_fused*,
     * decode_stream3*), unless the keys say otherwise */
    const char *shader = key_str(argc, argv, "shader", NULL);
    b.s.fused = key_u32(argc, argv, "fused",
                        shader && strstr(shader, "fused") ? 1 : 0);
    if (!shader)
        shader = b.s.fused ? "decode_fused" : "decode_phases";
    b.s.layer_phases = key_u32(argc, argv, "layer_phases",
                               b.s.fused                   ? 2
                               : strstr(shader, "stream3") ? 3
                                                           : 5);
    int steps = (int)key_u32(argc, argv, "steps", 50);
    if (b.s.layer_phases < 1 || b.s.layer_phases > 5) {
        fprintf(stderr, "layer_phases: 1 to 5\n");
        return 2;
    }
    if (steps < 1 || steps > 100000) {
        fprintf(stderr, "steps: 1 to 100000\n");
        return 2;
    }
    struct kk_error err;
    int device = (int)key_u32(argc, argv, "device", (uint32_t)-1);
    if (vk_device_open(device, &b.dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int rc = 1;
    float *ref = malloc((size_t)TMAX * b.s.vocab * sizeof *ref);
    float *got = malloc((size_t)TMAX * b.s.vocab * sizeof *got);
    if (!ref || !got ||
        setup(&b, argv[1], shader))
        goto out;
    bool cpu = vk_device_is_cpu(b.dev);
    char grids[256];
    snprintf(grids, sizeof grids, "%s",
             key_str(argc, argv, "grids", cpu ? "1,2" : "132"));
    char skips[256];
    snprintf(skips, sizeof skips, "%s", key_str(argc, argv, "skips", "0"));
    /* a warm-up of the clocks */
    for (int i = 0; i < 2; i++)
        if (run(&b, 132, 0, 5, 0, ref) < 0)
            goto out;
    char *skip_end, *grid_end;
    for (char *k = strtok_r(skips, ",", &skip_end); k;
         k = strtok_r(NULL, ",", &skip_end)) {
        uint32_t skip = (uint32_t)strtoul(k, NULL, 0);
        /* the reference: one dispatch a phase on 132 workgroups */
        if (run(&b, 132, 0, steps, skip, ref) < 0)
            goto out;
        char list[256];
        snprintf(list, sizeof list, "%s", grids);
        for (char *g = strtok_r(list, ",", &grid_end); g;
             g = strtok_r(NULL, ",", &grid_end))
            for (int spin = 0; spin < 2; spin++)
                if (report(&b, (uint32_t)strtoul(g, NULL, 10), spin, steps,
                           skip, ref, got))
                    goto out;
    }
    rc = 0;
out:
    vk_buffer_free(b.dev, &b.count);
    vk_buffer_free(b.dev, &b.act);
    vk_buffer_free(b.dev, &b.kv);
    vk_buffer_free(b.dev, &b.w);
    vk_pipeline_free(b.dev, &b.fill);
    vk_pipeline_free(b.dev, &b.phases);
    vk_device_close(b.dev);
    free(ref);
    free(got);
    return rc;
}
