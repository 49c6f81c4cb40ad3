/* cmd_bench.c — `kakeya bench -m MODEL`: speed figures as JSON on stdout.
 *
 * In one run, on one model: the machine's memory read bandwidth, prefill
 * tok/s, decode tok/s, the roofline that bandwidth implies for this model
 * (weight bytes read per token / bandwidth) and decode's share of it, and
 * the verify cost ratio c(L) = time(forward of L tokens) / time(forward of
 * 1 token) for L = 1..16 — the price of checking a draft block of L tokens.
 * Decode and c(L) are measured after a prompt of --context N tokens
 * (default 256): past a few hundred, attention's share of a step grows
 * with the context; --kv f16|f32|q8_0 picks the KV cache's type (default
 * f16), since that is what attention reads. Each timing is the median of
 * several repetitions.
 * Decode and c(L) are measured twice: with the logits of the rows coming
 * back (what sampling needs) and with only their argmax
 * (kk_session_eval_greedy: what greedy decoding needs, which a GPU makes
 * itself): "decode_greedy_tok_per_s", "verify_cost_greedy". Decode is
 * timed a third time with a draw at temperature 0.8 and top-p 0.9 from
 * each step's logits ("decode_sampled": the host's share of a sampled
 * token, as a ratio to the step with logits alone), and a fourth with the
 * same draw made in the pass (kk_session_eval_sample: on a GPU, where the
 * logits are; "decode_sampled_in_pass", with its speed-up over the
 * third).
 *
 * --backend picks where the engine computes (the JSON says which device);
 * on a GPU the host's bandwidth means nothing for the roofline, so
 * --bandwidth GBS gives the device's (its data sheet's figure).
 *
 * `kakeya bench --resume` measures instead what a checkpoint saves when a
 * long-document conversation is reopened (bench_resume.h), on the default
 * model or the one given with --spec-model or -m. */
#include <cJSON.h>
#include <immintrin.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "bench_util.h"
#include "bench_resume.h"
#include "bench_spec.h"
#include "chat.h"
#include "commands.h"
#include "kakeya.h"

/* ---- memory bandwidth: n threads each sum their slice of a buffer ---- */

struct bw_slice {
    const __m256i *p;
    size_t n;      /* 32-byte vectors */
    long long sink;
};

static void *bw_read(void *arg)
{
    struct bw_slice *s = arg;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 4 <= s->n; i += 4) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(s->p + i));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(s->p + i + 1));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(s->p + i + 2));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(s->p + i + 3));
    }
    __m256i t = _mm256_add_epi64(_mm256_add_epi64(a0, a1),
                                 _mm256_add_epi64(a2, a3));
    long long out[4];
    _mm256_storeu_si256((__m256i *)out, t);
    s->sink = out[0] + out[1] + out[2] + out[3];
    return NULL;
}

/* Best of several passes over a buffer far larger than any cache. */
static double memory_bandwidth_gbs(int n_threads)
{
    const size_t bytes = (size_t)1 << 30;
    void *buf = aligned_alloc(64, bytes);
    if (!buf)
        return 0.0;
    memset(buf, 1, bytes);
    size_t vecs = bytes / 32 / (size_t)n_threads;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        struct bw_slice s[64];
        pthread_t th[64];
        double t0 = bench_now();
        for (int i = 0; i < n_threads; i++) {
            s[i] = (struct bw_slice){(const __m256i *)buf + vecs * (size_t)i,
                                     vecs, 0};
            pthread_create(&th[i], NULL, bw_read, &s[i]);
        }
        for (int i = 0; i < n_threads; i++)
            pthread_join(th[i], NULL);
        double gbs = (double)vecs * 32 * n_threads / (bench_now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    free(buf);
    return best;
}

/* ---- engine timings ---- */

struct bench_options {
    const char *model;
    int n_threads;
    enum kk_backend backend;
    int device;
    double bandwidth_gbs;   /* 0: measure the host's */
    enum kk_kv_type kv_type;
    int n_prefill;
    int n_decode;
    int reps;
};

/* Deterministic token ids spread over the vocabulary (not EOG-sensitive:
 * timings do not depend on which ids are used). */
static void fill_tokens(int32_t *ids, int n, int n_vocab)
{
    uint64_t s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)n_vocab);
    }
}

/* The draw a sampled decode step is timed with: a chat-like temperature
 * and nucleus. */
#define BENCH_TEMPERATURE 0.8
#define BENCH_TOP_P 0.9

/* What an evaluation gives back of its rows: logits, or greedy choices. */
enum rows_kind { ROWS_LOGITS, ROWS_GREEDY };

static int time_eval(struct kk_session *s, const int32_t *ids, int n,
                     bool all_rows, enum rows_kind kind, double *seconds,
                     struct kk_error *err)
{
    double t0 = bench_now();
    if (kind == ROWS_GREEDY
            ? kk_session_eval_greedy(s, ids, n, all_rows, NULL, NULL, err)
            : kk_session_eval(s, ids, n, all_rows, NULL, NULL, err))
        return -1;
    *seconds = bench_now() - t0;
    return 0;
}

/* A draw from each decode step's logits, timed with the step: what a
 * sampled (not greedy) generation pays on the host for every token; or
 * the same draw made in the pass (in_pass). */
struct bench_draw {
    bool in_pass;
    struct kk_sampling sampling;
    uint64_t rng;
    int32_t n_vocab;
    float *scratch;   /* 2 * n_vocab */
};

/* n decode steps of one token each on top of a fixed context (then
 * trimmed back to it), each followed by a draw when draw is not NULL:
 * each step's seconds into steps, their sum the return value; -1 on
 * failure. */
static double time_decode(struct kk_session *s, const int32_t *ids, int n,
                          enum rows_kind kind, struct bench_draw *draw,
                          double *steps, struct kk_error *err)
{
    int base = kk_session_n_tokens(s);
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        if (draw && draw->in_pass) {
            const double t0 = bench_now();
            if (kk_session_eval_sample(s, &ids[i], 1, &draw->sampling,
                                       &draw->rng, NULL, NULL, err))
                return -1.0;
            total += steps[i] = bench_now() - t0;
            continue;
        }
        if (time_eval(s, &ids[i], 1, false, kind, &steps[i], err))
            return -1.0;
        if (draw) {
            const double t0 = bench_now();
            kk_sample(&draw->sampling, &draw->rng, kk_session_logits(s, 0),
                      draw->n_vocab, draw->scratch);
            steps[i] += bench_now() - t0;
        }
        total += steps[i];
    }
    kk_session_trim(s, base);
    return total;
}

/* c(L): forwards of L tokens on top of a fixed context, trimmed after each,
 * every row's logits or greedy choice coming back; as `key` in out. */
static int measure_verify_cost(struct kk_session *s, const int32_t *ids,
                               int reps, enum rows_kind kind, const char *key,
                               cJSON *out, struct kk_error *err)
{
    int base = kk_session_n_tokens(s);
    double t1 = 0.0;
    cJSON *arr = cJSON_AddArrayToObject(out, key);
    for (int L = 1; L <= 16; L++) {
        double t[32];
        for (int r = 0; r < reps; r++) {
            if (time_eval(s, ids, L, true, kind, &t[r], err))
                return -1;
            kk_session_trim(s, base);
        }
        double med = bench_median(t, reps);
        if (L == 1)
            t1 = med;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "L", L);
        cJSON_AddNumberToObject(e, "ms", med * 1e3);
        cJSON_AddNumberToObject(e, "c", med / t1);
        cJSON_AddItemToArray(arr, e);
    }
    return 0;
}

/* The figures of a sampled decode (steps[n] each) as `key` in out. */
static void add_sampled(cJSON *out, const char *key, double *steps,
                        int n, double seconds, double plain_ms)
{
    const double ms = bench_median(steps, n) * 1e3;
    cJSON *sj = cJSON_AddObjectToObject(out, key);
    cJSON_AddNumberToObject(sj, "temperature", BENCH_TEMPERATURE);
    cJSON_AddNumberToObject(sj, "top_p", BENCH_TOP_P);
    cJSON_AddNumberToObject(sj, "tok_per_s", n / seconds);
    cJSON_AddNumberToObject(sj, "ms_median", ms);
    cJSON_AddNumberToObject(sj, "median_over_logits", ms / plain_ms);
}

/* Decode steps on top of the prompt, timed four ways: with the logits
 * coming back, with only the greedy choices, with the logits and a draw
 * from them (BENCH_TEMPERATURE, BENCH_TOP_P), and with that draw made in
 * the pass; into out. */
static int measure_decode(struct kk_session *s, const int32_t *ids,
                          int n_decode, int32_t n_vocab, cJSON *out,
                          struct kk_error *err)
{
    enum { MAX_STEPS = 4096 };
    const int n = n_decode < MAX_STEPS ? n_decode : MAX_STEPS;
    double *steps = malloc(4 * MAX_STEPS * sizeof *steps);
    struct bench_draw draw = {.sampling = {.temperature =
                                               (float)BENCH_TEMPERATURE,
                                           .top_p = (float)BENCH_TOP_P},
                              .rng = kk_rng_seed(1),
                              .n_vocab = n_vocab,
                              .scratch = malloc(2 * sizeof(float) *
                                                (size_t)n_vocab)};
    if (!steps || !draw.scratch) {
        free(steps);
        free(draw.scratch);
        snprintf(err->msg, sizeof err->msg,
                 "out of memory for timing decode steps over a %d-token "
                 "vocabulary", n_vocab);
        return -1;
    }
    double *plain = steps, *greedy = steps + MAX_STEPS,
           *sampled = steps + 2 * MAX_STEPS, *in_pass = steps + 3 * MAX_STEPS;
    const double t_dec = time_decode(s, ids, n, ROWS_LOGITS, NULL, plain, err);
    const double t_greedy = t_dec < 0 ? -1.0
                            : time_decode(s, ids, n, ROWS_GREEDY, NULL, greedy,
                                          err);
    const double t_sampled = t_greedy < 0 ? -1.0
                             : time_decode(s, ids, n, ROWS_LOGITS, &draw,
                                           sampled, err);
    draw.in_pass = true;
    draw.rng = kk_rng_seed(1);
    const double t_in_pass = t_sampled < 0 ? -1.0
                             : time_decode(s, ids, n, ROWS_LOGITS, &draw,
                                           in_pass, err);
    if (t_in_pass >= 0) {
        const double plain_ms = bench_median(plain, n) * 1e3;
        cJSON_AddNumberToObject(out, "decode_tokens", n);
        cJSON_AddNumberToObject(out, "decode_tok_per_s", n / t_dec);
        cJSON_AddNumberToObject(out, "decode_ms_median", plain_ms);
        cJSON_AddNumberToObject(out, "decode_greedy_tok_per_s", n / t_greedy);
        cJSON_AddNumberToObject(out, "decode_greedy_ms_median",
                                bench_median(greedy, n) * 1e3);
        add_sampled(out, "decode_sampled", sampled, n, t_sampled, plain_ms);
        add_sampled(out, "decode_sampled_in_pass", in_pass, n, t_in_pass,
                    plain_ms);
        cJSON_AddNumberToObject(
            cJSON_GetObjectItem(out, "decode_sampled_in_pass"),
            "speedup_over_host_draw",
            bench_median(sampled, n) / bench_median(in_pass, n));
    }
    free(steps);
    free(draw.scratch);
    return t_in_pass < 0 ? -1 : 0;
}

/* Runs what is about to be timed (a prefill, then decode steps), for at
 * least WARM_UP_SECONDS, and leaves the session empty. The first passes
 * pay one-time costs — buffers growing, a GPU's shaders reaching its
 * cache, its clocks rising from idle: timed cold, the first benchmark on
 * a freshly started H200 prefilled 5x slower than the next one. */
#define WARM_UP_SECONDS 1.0

static int warm_up(struct kk_session *s, const int32_t *ids, int n_prefill,
                   struct kk_error *err)
{
    double t0 = bench_now(), t;
    do {
        if (time_eval(s, ids, n_prefill, false, ROWS_LOGITS, &t, err))
            return -1;
        for (int i = 0; i < 8; i++)
            if (time_eval(s, &ids[n_prefill + i], 1, false,
                          i % 2 ? ROWS_GREEDY : ROWS_LOGITS, &t, err))
                return -1;
        kk_session_trim(s, 0);
    } while (bench_now() - t0 < WARM_UP_SECONDS);
    return 0;
}

static int run_bench(const struct bench_options *o, cJSON *out,
                     struct kk_error *err)
{
    struct kk_model *m = NULL;
    struct kk_session *s = NULL;
    int32_t *ids = NULL;
    int rc = -1;
    if (kk_model_open(o->model, &m, err))
        return -1;
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    int n_ctx = o->n_prefill + o->n_decode + 64;
    struct kk_session_params sp = {.n_ctx = n_ctx, .n_threads = o->n_threads,
                                   .max_batch = 256, .backend = o->backend,
                                   .device = o->device, .kv_type = o->kv_type};
    ids = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!ids || kk_session_new(m, &sp, &s, err))
        goto done;
    fill_tokens(ids, n_ctx, info.n_vocab);
    cJSON_AddStringToObject(out, "backend", kk_session_backend(s));
    struct kk_kv_info kv;
    kk_session_kv_info(s, &kv);
    cJSON_AddStringToObject(out, "kv_type", kv.type);

    double t_pre;
    if (warm_up(s, ids, o->n_prefill, err))
        goto done;
    if (time_eval(s, ids, o->n_prefill, false, ROWS_LOGITS, &t_pre, err))
        goto done;
    cJSON *mj = cJSON_AddObjectToObject(out, "model");
    cJSON_AddStringToObject(mj, "path", o->model);
    cJSON_AddStringToObject(mj, "name", info.name);
    cJSON_AddStringToObject(mj, "arch", info.arch);
    cJSON_AddNumberToObject(mj, "params", (double)info.n_params);
    cJSON_AddNumberToObject(mj, "bytes_per_token", (double)info.bytes_per_token);
    cJSON_AddNumberToObject(out, "prefill_tokens", o->n_prefill);
    cJSON_AddNumberToObject(out, "prefill_tok_per_s", o->n_prefill / t_pre);
    if (measure_decode(s, &ids[o->n_prefill], o->n_decode, info.n_vocab, out,
                       err))
        goto done;
    if (measure_verify_cost(s, &ids[o->n_prefill], o->reps, ROWS_LOGITS,
                            "verify_cost", out, err) == 0)
        rc = measure_verify_cost(s, &ids[o->n_prefill], o->reps, ROWS_GREEDY,
                                 "verify_cost_greedy", out, err);
done:
    free(ids);
    kk_session_free(s);
    kk_model_close(m);
    return rc;
}

static void add_roofline(cJSON *out, double bw_gbs)
{
    cJSON *bpt = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "model"),
                                     "bytes_per_token");
    cJSON *dec = cJSON_GetObjectItem(out, "decode_tok_per_s");
    if (!bpt || !dec || bpt->valuedouble <= 0)
        return;
    double roof = bw_gbs * 1e9 / bpt->valuedouble;
    cJSON_AddNumberToObject(out, "roofline_tok_per_s", roof);
    cJSON_AddNumberToObject(out, "decode_share_of_roofline",
                            dec->valuedouble / roof);
}

/* Prints the report (or the error) and frees it; the exit status. */
static int finish(cJSON *out, int rc, const char *cmd,
                  const struct kk_error *err)
{
    if (rc) {
        fprintf(stderr, "%s: %s\n", cmd, err->msg);
    } else {
        char *text = cJSON_Print(out);
        if (text)
            puts(text);
        free(text);
    }
    cJSON_Delete(out);
    return rc ? 1 : 0;
}

static int run_resume(struct resume_bench_options *ro, const char *given,
                      int n_threads)
{
    char model[PATH_MAX * 2];
    if (chat_find_model(given, "KAKEYA_MODEL", "kakeya-chat.gguf", model,
                        sizeof model)) {
        fprintf(stderr, "kakeya bench --resume: no model found; looked at "
                        "%s.\nPass one with --spec-model MODEL.gguf.\n", model);
        return 2;
    }
    ro->model = model;
    ro->n_threads = n_threads;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "benchmark", "kakeya-resume");
    cJSON_AddNumberToObject(out, "threads", n_threads);
    struct kk_error err = {{0}};
    int rc = bench_resume(ro, cJSON_AddObjectToObject(out, "resume"), &err);
    return finish(out, rc, "kakeya bench --resume", &err);
}

int cmd_bench(int argc, char **argv)
{
    struct args a;
    args_init(&a, "kakeya bench", argc, argv);
    struct bench_options o = {.n_threads = 2, .n_prefill = 256,
                              .n_decode = 64, .reps = 9};
    /* 32 prompts a set: with 8, the document set's answers came to 149
     * tokens in all, and a ratio moved by 15% with which 8 were taken. */
    struct spec_bench_options so = {.eval_dir = "data/eval", .n_prompts = 32,
                                    .n_predict = 128};
    struct resume_bench_options ro = {.needles = "data/recall/needles.jsonl",
                                      .doc_tokens = 2000, .reps = 3};
    bool resume = false;
    int context = 0;   /* --context, which --quick does not shorten */
    while (args_next(&a)) {
        if (args_is(&a, "-m", "--model"))
            o.model = args_value(&a);
        else if (args_is(&a, "-t", "--threads"))
            o.n_threads = args_int(&a, 1, 64);
        else if (args_is(&a, NULL, "--context"))
            context = args_int(&a, 16, 1 << 17);
        else if (args_is(&a, NULL, "--quick")) {
            o.n_prefill = 64;
            o.n_decode = 16;
            o.reps = 3;
            so.n_prompts = 2;
        } else if (args_is(&a, NULL, "--spec-model"))
            so.model = args_value(&a);
        else if (args_is(&a, "-d", "--draft"))
            so.draft = args_value(&a);
        else if (args_is(&a, NULL, "--eval-dir"))
            so.eval_dir = args_value(&a);
        else if (args_is(&a, NULL, "--prompts"))
            so.n_prompts = args_int(&a, 1, 64);
        else if (args_is(&a, NULL, "--block"))
            so.block = args_int(&a, 1, 16);
        else if (args_is(&a, NULL, "--resume"))
            resume = true;
        else if (args_is(&a, NULL, "--doc-tokens"))
            ro.doc_tokens = args_int(&a, 64, 1 << 16);
        else if (args_is(&a, NULL, "--needles"))
            ro.needles = args_value(&a);
        else if (args_is(&a, NULL, "--bandwidth"))
            o.bandwidth_gbs = args_float(&a, 0.1, 1e6);
        else if (args_is(&a, NULL, "--kv"))
            args_kv_type(&a, &o.kv_type);
        else if (args_backend_option(&a, &o.backend, &o.device))
            ;
        else if (a.opt[0] != '-' && !o.model)
            o.model = a.opt;
        else
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (context)
        o.n_prefill = context;
    if (resume)
        return run_resume(&ro, so.model ? so.model : o.model, o.n_threads);
    if (!o.model && !so.model) {
        fprintf(stderr, "kakeya bench: needs -m MODEL.gguf and/or "
                        "--spec-model MODEL.gguf [--draft DRAFT.gguf] (make "
                        "bench passes both)\n");
        return 2;
    }
    so.n_threads = o.n_threads;
    so.backend = o.backend;
    so.device = o.device;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "benchmark", "kakeya");
    cJSON_AddNumberToObject(out, "threads", o.n_threads);
    cJSON_AddStringToObject(out, "cpu_kernels", kk_cpu_kernels());
    struct kk_error err = {{0}};
    int rc = 0;
    if (o.model) {
        cJSON *engine = cJSON_AddObjectToObject(out, "engine");
        double bw = o.bandwidth_gbs > 0 ? o.bandwidth_gbs
                                         : memory_bandwidth_gbs(o.n_threads);
        cJSON_AddNumberToObject(engine, "memory_read_gb_per_s", bw);
        cJSON_AddStringToObject(engine, "bandwidth_source",
                                o.bandwidth_gbs > 0 ? "--bandwidth"
                                                    : "measured (host)");
        rc = run_bench(&o, engine, &err);
        if (!rc)
            add_roofline(engine, bw);
    }
    if (!rc && so.model) {
        cJSON *spec = cJSON_AddObjectToObject(out, "speculative");
        cJSON_AddStringToObject(spec, "backend", kk_backend_name(so.backend));
        rc = bench_speculative(&so, spec, &err);
    }
    return finish(out, rc, "kakeya bench", &err);
}
