/* cmd_run.c — `kakeya run`: raw completion (or one chat turn with --chat)
 * streamed to stdout, statistics to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "error.h"
#include "kakeya.h"
#include "overflow.h"

struct run_options {
    const char *model;
    const char *draft;
    enum kk_spec_mode spec;
    bool spec_given;
    int block;
    struct kk_session_params sess; /* cache and backend options */
    const char *prompt;
    int n_predict;
    int n_threads;
    int n_ctx;
    bool print_ids;
    bool chat;
    bool parse_special;
    bool ignore_eos;
    struct kk_sampling sampling;
    enum overflow_policy overflow;   /* refuse (ask reads so) or sink */
};

static void parse_spec(struct args *a, struct run_options *o)
{
    static const char *names[] = {"off", "ngram", "draft", "auto"};
    const char *v = args_value(a);
    for (int i = 0; v && i < 4; i++) {
        if (!strcmp(v, names[i])) {
            o->spec = (enum kk_spec_mode)i;
            o->spec_given = true;
            return;
        }
    }
    if (v)
        fprintf(stderr, "kakeya run: --spec wants auto, draft, ngram or off, "
                        "not '%s'\n", v);
    a->failed = true;
}

static int parse_run(int argc, char **argv, struct run_options *o)
{
    struct args a;
    args_init(&a, "kakeya run", argc, argv);
    *o = (struct run_options){.n_predict = 128,
                              .sampling = {.top_p = 1.0f, .seed = 42}};
    while (args_next(&a)) {
        if (args_is(&a, "-m", "--model"))
            o->model = args_value(&a);
        else if (args_is(&a, "-p", "--prompt"))
            o->prompt = args_value(&a);
        else if (args_is(&a, "-n", "--n-predict"))
            o->n_predict = args_int(&a, 0, 1 << 20);
        else if (args_is(&a, "-t", "--threads"))
            o->n_threads = args_int(&a, 1, 256);
        else if (args_is(&a, "-c", "--ctx"))
            o->n_ctx = args_int(&a, 16, 1 << 20);
        else if (args_is(&a, NULL, "--greedy"))
            o->sampling.temperature = 0.0f;
        else if (args_is(&a, NULL, "--temp"))
            o->sampling.temperature = (float)args_float(&a, 0.0, 100.0);
        else if (args_is(&a, NULL, "--top-p"))
            o->sampling.top_p = (float)args_float(&a, 0.0, 1.0);
        else if (args_is(&a, NULL, "--seed"))
            o->sampling.seed = args_u64(&a);
        else if (args_is(&a, NULL, "--ids"))
            o->print_ids = true;
        else if (args_is(&a, NULL, "--chat"))
            o->chat = true;
        else if (args_is(&a, NULL, "--special"))
            o->parse_special = true;
        else if (args_is(&a, NULL, "--ignore-eos"))
            o->ignore_eos = true;
        else if (args_is(&a, "-d", "--draft"))
            o->draft = args_value(&a);
        else if (args_is(&a, NULL, "--block"))
            o->block = args_int(&a, 1, 16);
        else if (args_is(&a, NULL, "--spec"))
            parse_spec(&a, o);
        else if (args_is(&a, NULL, "--kv"))
            args_kv_type(&a, &o->sess.kv_type);
        else if (args_is(&a, NULL, "--kv-window"))
            o->sess.kv_window = args_int(&a, 1, 1 << 20);
        else if (args_is(&a, NULL, "--kv-sinks"))
            o->sess.kv_sinks = args_int(&a, 0, 1024);
        else if (args_is(&a, NULL, "--kv-full"))
            o->sess.kv_full_sliding = true;
        else if (args_is(&a, NULL, "--overflow"))
            args_overflow(&a, &o->overflow);
        else if (!args_backend_option(&a, &o->sess.backend,
                                          &o->sess.device))
            args_unknown(&a);
    }
    if (a.failed)
        return 2;
    if (!o->model || !o->prompt) {
        fprintf(stderr, "kakeya run: needs -m MODEL.gguf and -p PROMPT\n");
        return 2;
    }
    if (o->overflow == OVERFLOW_DROP) {
        fprintf(stderr, "kakeya run: --overflow drop leaves out whole turns, "
                        "and a raw prompt has none: use --overflow sink "
                        "(lossy) or a larger --ctx\n");
        return 2;
    }
    if (!o->spec_given)
        o->spec = o->draft ? KK_SPEC_AUTO : KK_SPEC_OFF;
    if (o->sess.kv_window)
        fprintf(stderr, "kakeya run: note: --kv-window is LOSSY: global layers "
                        "keep only the first %d and the last %d positions, so "
                        "the middle of a long input is forgotten\n",
                o->sess.kv_sinks, o->sess.kv_window);
    if ((o->spec == KK_SPEC_DRAFT || o->spec == KK_SPEC_AUTO) && !o->draft) {
        fprintf(stderr, "kakeya run: --spec %s needs --draft MODEL.gguf\n",
                o->spec == KK_SPEC_DRAFT ? "draft" : "auto");
        return 2;
    }
    return 0;
}

static bool print_token(void *ud, int32_t id, const char *text,
                        const struct kk_stats *st)
{
    const struct run_options *o = ud;
    if (o->print_ids) {
        if (id >= 0)
            printf("%d ", id);
    } else {
        fputs(text, stdout);
    }
    fflush(stdout);
    return true;
}

/* The prompt as token ids (malloc'd), through the chat template if asked. */
static int prompt_ids(struct kk_model *m, const struct run_options *o,
                      int32_t **out, struct kk_error *err)
{
    struct kk_model_info info;
    kk_model_get_info(m, &info);
    char *text = NULL;
    if (o->chat) {
        const char *roles[] = {"user"}, *contents[] = {o->prompt};
        if (info.chat_format_is_fallback)
            fprintf(stderr, "kakeya: warning: the model's chat template is "
                            "not one kakeya knows; using ChatML\n");
        text = kk_chat_render(m, roles, contents, 1, true);
    } else {
        text = strdup(o->prompt);
    }
    if (!text)
        return -1;
    bool special = o->chat || o->parse_special;
    int n = kk_tokenize(m, text, strlen(text), info.add_bos, special, NULL, 0,
                        err);
    if (n >= 0) {
        *out = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        if (*out)
            n = kk_tokenize(m, text, strlen(text), info.add_bos, special,
                            *out, n, err);
    }
    free(text);
    return n;
}

static void print_stats(const struct kk_stats *st, enum kk_spec_mode spec,
                        const char *backend)
{
    fprintf(stderr, "\n\nprompt %d tokens, %.1f tok/s | generated %d tokens, "
                    "%.1f tok/s%s | on %s\n", st->n_prompt,
            st->prefill_tok_per_s, st->n_generated, st->decode_tok_per_s,
            st->stopped_at_eog ? " | stopped at end of generation" : "",
            backend);
    if (st->stopped_at_context_limit)
        fprintf(stderr, "stopped: the context (%d tokens) is full; raise "
                        "--ctx, or use --overflow sink (lossy) to keep going "
                        "past it\n", st->n_ctx);
    fprintf(stderr, "KV cache: %.1f%% saved (%.2f of %.2f MiB as full f16)\n",
            100.0 * st->kv_saved, st->kv_resident_bytes / 1048576.0,
            st->kv_full_bytes / 1048576.0);
    if (spec == KK_SPEC_OFF)
        return;
    fprintf(stderr, "speculative: tau %.2f tokens/step over %d steps, "
                    "acceptance %.1f%% (%d of %d drafted), last block %d\n"
                    "accepted from n-gram %d, draft %d; target's own %d | "
                    "draft %.2f s, verify %.2f s\n",
            st->tau, st->n_steps, 100.0 * st->acceptance_rate, st->n_accepted,
            st->n_proposed, st->block, st->accepted_by[KK_PROPOSER_NGRAM],
            st->accepted_by[KK_PROPOSER_DRAFT],
            st->accepted_by[KK_PROPOSER_TARGET], st->draft_seconds,
            st->verify_seconds);
}

/* The prompt plus -n (and a draft block) must fit the context: refused
 * with what to do, or under --overflow sink the session is made again
 * with room for it and the LOSSY sink+window cache (*sp updated). */
static int fit_context(struct kk_model *m, const struct run_options *o,
                       int n_prompt, struct kk_session **s,
                       struct kk_session_params *sp, struct kk_error *err)
{
    int n_ctx = kk_session_n_ctx(*s);
    int need = n_prompt + o->n_predict + 17;
    if (need <= n_ctx)
        return 0;
    if (o->overflow != OVERFLOW_SINK)
        return kk_fail(err, "the prompt (%d tokens) and -n %d need %d tokens "
                       "but the context holds %d: pass a larger --ctx, a "
                       "smaller -n, or --overflow sink (LOSSY sink+window)",
                       n_prompt, o->n_predict, need, n_ctx);
    struct kk_session_params p = *sp;
    p.n_ctx = (need + 255) / 256 * 256;
    if (!p.kv_window) {
        p.kv_sinks = 4;
        p.kv_window = n_ctx - 4 - 17 > 16 ? n_ctx - 4 - 17 : 16;
    }
    struct kk_session *fresh;
    if (kk_session_new(m, &p, &fresh, err))
        return -1;
    kk_session_free(*s);
    *s = fresh;
    *sp = p;
    fprintf(stderr, "kakeya run: --overflow sink: context %d tokens, LOSSY: "
                    "global layers keep only the first %d and the last %d "
                    "positions\n", p.n_ctx, p.kv_sinks, p.kv_window);
    return 0;
}

/* Opens the draft model and its session, checking its vocabulary. */
static int open_draft(struct kk_model *target, const struct run_options *o,
                      const struct kk_session_params *sp,
                      struct kk_model **dm, struct kk_session **ds,
                      struct kk_error *err)
{
    if (!o->draft || o->spec == KK_SPEC_OFF || o->spec == KK_SPEC_NGRAM)
        return 0;
    if (kk_model_open(o->draft, dm, err))
        return -1;
    if (kk_check_draft(target, *dm, err))
        return -1;
    return kk_draft_session_new(*dm, sp, ds, err);
}

int cmd_run(int argc, char **argv)
{
    struct run_options o;
    int rc = parse_run(argc, argv, &o);
    if (rc)
        return rc;
    struct kk_error err = {{0}};
    struct kk_model *m = NULL, *dm = NULL;
    struct kk_session *s = NULL, *ds = NULL;
    int32_t *ids = NULL;
    int n = 0;
    struct kk_session_params sp = o.sess;
    sp.n_ctx = o.n_ctx;
    sp.n_threads = o.n_threads;
    struct kk_generate_params gp = {.n_predict = o.n_predict,
                                    .sampling = o.sampling,
                                    .stop_at_eog = !o.ignore_eos,
                                    .spec = o.spec,
                                    .block = o.block};
    struct kk_stats st;
    rc = 1;
    if (kk_model_open(o.model, &m, &err) ||
        (n = prompt_ids(m, &o, &ids, &err)) < 0 ||
        kk_session_new(m, &sp, &s, &err) ||
        fit_context(m, &o, n, &s, &sp, &err))
        goto out;
    sp.n_ctx = kk_session_n_ctx(s);
    if (open_draft(m, &o, &sp, &dm, &ds, &err))
        goto out;
    gp.draft = ds;
    if (!o.print_ids)
        fputs(o.prompt, stdout);
    if (kk_generate(s, ids, n, &gp, print_token, &o, &st, &err))
        goto out;
    if (o.print_ids)
        printf("\n");
    print_stats(&st, o.spec, kk_session_backend(s));
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "kakeya run: %s\n", err.msg[0] ? err.msg
                                                        : "out of memory");
    free(ids);
    kk_session_free(ds);
    kk_model_close(dm);
    kk_session_free(s);
    kk_model_close(m);
    return rc;
}
