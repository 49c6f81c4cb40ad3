/* generate.c — the fused speculative decoding loop (kk_generate).
 *
 * One step: propose L tokens -> ONE target forward over [pending, d1..dL]
 * -> accept the longest valid prefix plus one token of the target's own ->
 * trim the rest from the cache. Plain decoding is the same step with L = 0.
 *
 *   greedy:   accept d_i while it is the target's argmax; at the first
 *             mismatch commit the argmax instead; after a full match the
 *             last row gives a bonus token. Output = plain greedy output.
 *   sampling: a draft model's d_i (q its distribution) is accepted with
 *             probability min(1, p(d_i) / q(d_i)); on rejection a draw
 *             from max(0, p - q) renormalised is committed (Leviathan et
 *             al. 2023, Chen et al. 2023), so tokens follow p exactly.
 *             A deterministic proposer's (the n-gram's: q = 1 at its
 *             token) d_i is accepted when the target's own draw from row
 *             i is d_i, and that draw is committed either way: accepted
 *             with probability p(d_i), otherwise a draw from p without
 *             d_i, just as rejection sampling gives. Row i's draw takes
 *             the uniform plain decoding takes at its position (the
 *             generator moves on by the rows decided), so the tokens are
 *             plain sampled decoding's, token for token; and on a GPU
 *             the draws are made where the logits are.
 *
 * The block length L adapts each step to maximise expected committed
 * tokens per second: with per-token acceptance a, a block of L commits
 * (1 - a^(L+1)) / (1 - a) tokens on average and costs the draft time of L
 * tokens plus the verify time of L + 1 rows, both measured as we go. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "error.h"
#include "kv.h"
#include "model.h"
#include "proposer.h"
#include "sample.h"
#include "session.h"
#include "spec.h"
#include "tokenizer.h"

enum { MAX_BLOCK = 16, NGRAM_MIN_MATCH = 2, NGRAM_CONFIDENT = 3 };

struct generation {
    struct kk_session *s;
    const struct kk_generate_params *p;
    kk_token_fn on_token;
    void *ud;
    int32_t n_vocab;
    int max_block;
    bool is_greedy;
    float *probs, *resid;  /* n_vocab each */
    float *scratch;        /* 2 * n_vocab */
    struct proposal prop;
    uint64_t rng;
    uint64_t u53[MAX_BLOCK + 1];  /* rows' uniforms, when they are draws */
    struct tok_stream ts;
    struct kk_stats st;
    double accept_ema[3];  /* per-token acceptance, per proposer */
    double verify_s[MAX_BLOCK + 1]; /* EMA of verify seconds for L */
    double draft_token_s;  /* EMA of draft seconds per proposed token */
    int step_tokens;       /* committed by decode steps (not prefill) */
    double decode_start;   /* when the first decode step began */
    bool is_done;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double ema(double old, double sample)
{
    return old <= 0.0 ? sample : 0.8 * old + 0.2 * sample;
}

/* ---- block length ---- */

/* Verify seconds for L, from measurements where we have them: the nearest
 * measured L scaled by a mild linear growth (the weights are read once; the
 * extra rows cost compute). */
static double verify_cost(const struct generation *g, int L)
{
    if (g->verify_s[L] > 0.0)
        return g->verify_s[L];
    for (int d = 1; d <= MAX_BLOCK; d++) {
        int lo = L - d, hi = L + d;
        int ref = lo >= 0 && g->verify_s[lo] > 0.0 ? lo
                  : hi <= MAX_BLOCK && g->verify_s[hi] > 0.0 ? hi : -1;
        if (ref >= 0)
            return g->verify_s[ref] * (1.0 + 0.05 * L) / (1.0 + 0.05 * ref);
    }
    return 1.0 + 0.05 * L;
}

static int choose_block(const struct generation *g, enum kk_proposer by)
{
    if (g->p->block > 0)
        return g->p->block < g->max_block ? g->p->block : g->max_block;
    double a = g->accept_ema[by];
    a = a < 0.02 ? 0.02 : a > 0.98 ? 0.98 : a;
    double draft = by == KK_PROPOSER_DRAFT ? g->draft_token_s : 0.0;
    int best = 1;
    double best_rate = 0.0;
    for (int L = 1; L <= g->max_block; L++) {
        double tokens = (1.0 - pow(a, L + 1)) / (1.0 - a);
        double rate = tokens / (L * draft + verify_cost(g, L));
        if (rate > best_rate) {
            best_rate = rate;
            best = L;
        }
    }
    return best;
}

/* ---- proposing ---- */

static int propose(struct generation *g, int L, struct kk_error *err)
{
    struct kk_session *s = g->s;
    struct proposal *prop = &g->prop;
    prop->n = 0;
    prop->by = KK_PROPOSER_TARGET;
    if (L <= 0 || g->p->spec == KK_SPEC_OFF)
        return 0;
    if (g->p->spec != KK_SPEC_DRAFT) {
        int min = g->p->spec == KK_SPEC_AUTO ? NGRAM_CONFIDENT : NGRAM_MIN_MATCH;
        if (ngram_propose(s->tokens, s->n_tokens, min, L, prop) > 0 ||
            g->p->spec == KK_SPEC_NGRAM)
            return 0;
    }
    double t0 = now_seconds();
    int rc = draft_propose(g->p->draft, s->tokens, s->n_tokens, L,
                           &g->p->sampling, &g->rng, g->scratch, prop, err);
    double dt = now_seconds() - t0;
    g->st.draft_seconds += dt;
    if (prop->n > 0)
        g->draft_token_s = ema(g->draft_token_s, dt / prop->n);
    return rc;
}

/* ---- verifying ---- */

/* Whether the step's drafts are a draft model's, sampled: decided by
 * spec_accept from each row's distribution. Every other step's rows are
 * decided by their own token, a greedy choice or a draw. */
static bool rows_rejection_sampled(const struct generation *g)
{
    return !g->is_greedy && g->prop.n > 0 &&
           g->prop.by == KK_PROPOSER_DRAFT;
}

/* Whether the step's rows are decided by draws of their own: sampling
 * with no drafts or with point-mass ones (the n-gram's), row i drawn with
 * g->u53[i]. */
static bool rows_are_draws(const struct generation *g)
{
    return !g->is_greedy && !rows_rejection_sampled(g);
}

/* What an evaluation asks of the target's rows: greedy decoding needs only
 * each row's argmax, rows decided by draws (rows_are_draws) only a draw
 * from each — on a GPU both can be made where the logits are, so that one
 * int a row comes back instead of a vocabulary of floats. Verifying a
 * draft model's drafts needs each row's distribution: the logits. Row i's
 * uniform is the generator's i-th next one (taken when the rows are
 * decided: take_uniforms). Where the backend draws on the host, drafts'
 * rows come back as logits and are drawn from one by one as they are
 * verified, so that a rejection spares the rest. */
static enum forward_out rows_wanted(struct generation *g, int n_drafts,
                                    struct be_draw *draw)
{
    if (g->is_greedy)
        return FORWARD_ARGMAX;
    if (!rows_are_draws(g))
        return FORWARD_LOGITS;
    uint64_t rng = g->rng;
    for (int i = 0; i <= n_drafts; i++)
        g->u53[i] = sample_bits53(&rng);
    *draw = (struct be_draw){g->p->sampling.temperature,
                             g->p->sampling.top_p, g->u53};
    return n_drafts == 0 || be_draws_samples(g->s->be, g->n_vocab)
               ? FORWARD_SAMPLE : FORWARD_LOGITS;
}

/* Moves the generator past the uniforms of the `used` rows decided (their
 * draws' uniforms: rows_wanted). */
static void take_uniforms(struct generation *g, int used)
{
    if (rows_are_draws(g))
        for (int i = 0; i < used; i++)
            sample_bits53(&g->rng);
}

/* Row i's distribution (from its logits) into g->probs. */
static const float *row_probs(struct generation *g, int i)
{
    sample_probs(&g->p->sampling, session_logits(g->s, i), g->n_vocab,
                 g->probs, (int32_t *)g->scratch);
    return g->probs;
}

/* Row i's token where rows are choices or draws: the one the pass gave
 * back, or a draw from its logits with its uniform. */
static int32_t row_token(struct generation *g, int i)
{
    if (!session_logits(g->s, i))
        return session_token(g->s, i);
    return sample_pick(row_probs(g, i), g->n_vocab, g->u53[i]);
}

/* Decides draft i against the target's row i: true to accept; otherwise
 * *out is the token to commit instead. */
static bool verify_token(struct generation *g, int i, int32_t *out)
{
    const int32_t d = g->prop.ids[i], n = g->n_vocab;
    if (!rows_rejection_sampled(g)) {
        *out = row_token(g, i);
        return *out == d;
    }
    return spec_accept(row_probs(g, i), g->prop.q + (size_t)i * (size_t)n,
                       d, n, &g->rng, g->resid, out);
}

/* The target's own token from its row i (bonus after a full match): the
 * row's choice or draw (row_token); after a draft model's drafts, a draw
 * from its logits with the generator's next uniform. */
static int32_t target_token(struct generation *g, int i)
{
    if (!rows_rejection_sampled(g))
        return row_token(g, i);
    return sample_from(row_probs(g, i), g->n_vocab, &g->rng);
}

/* ---- committing ---- */

static void snapshot_kv(struct generation *g)
{
    struct kk_kv_info info;
    kk_session_kv_info(g->s, &info);
    g->st.n_ctx = g->s->n_ctx;
    g->st.n_tokens = g->s->n_tokens;
    g->st.kv_resident_bytes = info.resident_bytes;
    g->st.kv_full_bytes = info.full_f16_bytes;
    g->st.kv_saved = info.saved;
}

/* Reports one committed token; false when generation must end after it. */
static bool emit(struct generation *g, int32_t id)
{
    char text[512];
    g->st.n_generated++;
    tok_stream_push(g->s->model->m->tok, &g->ts, id, g->p->render_special,
                    text, sizeof text);
    if (g->on_token && !g->on_token(g->ud, id, text, &g->st)) {
        g->st.stopped_by_request = true;
        return false;
    }
    if (g->p->stop_at_eog && tok_is_eog(g->s->model->m->tok, id)) {
        g->st.stopped_at_eog = true;
        return false;
    }
    return g->st.n_generated < g->p->n_predict;
}

static void update_stats(struct generation *g, int n_accepted, int committed,
                         double verify_s, int L)
{
    struct kk_stats *st = &g->st;
    st->n_steps++;
    st->n_proposed += g->prop.n;
    st->n_accepted += n_accepted;
    st->accepted_by[g->prop.by] += n_accepted;
    st->accepted_by[KK_PROPOSER_TARGET] += committed - n_accepted;
    st->verify_seconds += verify_s;
    st->block = L;
    if (g->prop.n > 0)
        g->accept_ema[g->prop.by] =
            ema(g->accept_ema[g->prop.by], (double)n_accepted / g->prop.n);
    g->verify_s[g->prop.n] = ema(g->verify_s[g->prop.n], verify_s);
    memmove(st->recent, st->recent + 1, KK_STATS_RECENT - 1);
    st->recent[KK_STATS_RECENT - 1] = (uint8_t)(committed > 255 ? 255 : committed);
    st->n_recent += st->n_recent < KK_STATS_RECENT;
    g->step_tokens += committed;
    st->tau = (double)g->step_tokens / st->n_steps;
    st->acceptance_rate = st->n_proposed ? (double)st->n_accepted /
                                               st->n_proposed : 0.0;
}

/* One fused step. The history ends with the pending token (committed, not
 * yet in the cache). */
static int step(struct generation *g, struct kk_error *err)
{
    struct kk_session *s = g->s;
    const int n_before = s->n_tokens;
    int room = s->n_ctx - n_before;  /* context left after the pending one */
    int left = g->p->n_predict - g->st.n_generated;
    int L = g->p->spec == KK_SPEC_OFF ? 0
            : choose_block(g, g->p->spec == KK_SPEC_NGRAM ? KK_PROPOSER_NGRAM
                                                          : KK_PROPOSER_DRAFT);
    L = L < left - 1 ? L : left - 1;
    L = L < room - 1 ? L : room - 1;
    if (room <= 0) {
        /* Context full: stop and report it; the caller decides what next
         * (start over, drop old turns, or a sink+window cache). */
        g->st.stopped_at_context_limit = true;
        g->is_done = true;
        return 0;
    }
    if (propose(g, L < 0 ? 0 : L, err))
        return -1;
    double t0 = now_seconds();
    struct be_draw draw;
    const enum forward_out out = rows_wanted(g, g->prop.n, &draw);
    if (session_append_eval(s, g->prop.ids, g->prop.n, g->prop.n + 1, out,
                            &draw, NULL, NULL, err))
        return -1;
    int n_acc = 0;
    int32_t next = -1;
    while (n_acc < g->prop.n && verify_token(g, n_acc, &next))
        n_acc++;
    if (n_acc == g->prop.n)
        next = target_token(g, n_acc);
    take_uniforms(g, n_acc + 1);
    /* Keep pending + accepted drafts; the new token becomes pending. */
    kk_session_trim(s, n_before + n_acc);
    double now = now_seconds(), verify_s = now - t0;
    /* Keep the live rate current for the panes while tokens stream. */
    g->st.decode_seconds = now - g->decode_start;
    g->st.decode_tok_per_s = (g->step_tokens + n_acc + 1) / g->st.decode_seconds;
    int committed = 0;
    for (int i = 0; i < n_acc && !g->is_done; i++, committed++)
        g->is_done = !emit(g, g->prop.ids[i]);
    if (g->is_done) {
        kk_session_trim(s, n_before + committed);
    } else {
        if (session_push(s, &next, 1, err))
            return -1;
        committed++;
        g->is_done = !emit(g, next);
    }
    update_stats(g, n_acc < committed ? n_acc : committed, committed,
                 verify_s, L);
    snapshot_kv(g);
    return 0;
}

/* ---- the whole generation ---- */

static int generation_init(struct generation *g, struct kk_session *s,
                           const struct kk_generate_params *p,
                           struct kk_error *err)
{
    memset(g, 0, sizeof *g);
    g->s = s;
    g->p = p;
    g->n_vocab = s->model->m->hp.n_vocab;
    g->is_greedy = p->sampling.temperature <= 0.0f;
    g->max_block = p->max_block > 0 && p->max_block < MAX_BLOCK ? p->max_block
                                                                : MAX_BLOCK;
    g->rng = kk_rng_seed(p->sampling.seed);
    for (int i = 0; i < 3; i++)
        g->accept_ema[i] = 0.5;
    tok_stream_init(&g->ts);
    if ((p->spec == KK_SPEC_DRAFT || p->spec == KK_SPEC_AUTO) && !p->draft)
        return kk_fail(err, "speculative mode '%s' needs a draft model "
                            "(--draft MODEL.gguf)",
                       p->spec == KK_SPEC_DRAFT ? "draft" : "auto");
    if (p->draft && p->draft->model->m->hp.n_vocab != g->n_vocab)
        return kk_fail(err, "the draft model's vocabulary differs from the "
                            "target's");
    /* The draft and the target take turns: one set of workers serves both
     * (undone in generation_free). */
    if (p->draft)
        backend_share_threads(p->draft->be, s->be);
    size_t v = (size_t)g->n_vocab;
    g->probs = malloc(v * sizeof(float));
    g->resid = malloc(v * sizeof(float));
    g->scratch = malloc(2 * v * sizeof(float));
    g->prop.ids = malloc(MAX_BLOCK * sizeof(int32_t));
    if (p->draft && !g->is_greedy)
        g->prop.q = malloc(MAX_BLOCK * v * sizeof(float));
    if (!g->probs || !g->resid || !g->scratch || !g->prop.ids ||
        (p->draft && !g->is_greedy && !g->prop.q))
        return kk_fail(err, "out of memory");
    return 0;
}

static void generation_free(struct generation *g)
{
    if (g->p->draft)
        backend_share_threads(g->p->draft->be, NULL);
    free(g->probs);
    free(g->resid);
    free(g->scratch);
    free(g->prop.ids);
    free(g->prop.q);
}

/* Evaluates the prompt (or the pending token) and commits the first token. */
static int start(struct generation *g, const int32_t *prompt, int n_prompt,
                 struct kk_error *err)
{
    struct kk_session *s = g->s;
    if (n_prompt == 0 && s->kv->n_tokens == s->n_tokens) {
        if (s->n_tokens == 0)
            return kk_fail(err, "nothing to continue from: the prompt is "
                                "empty");
        /* Recompute the last token's logits: they predict the next one. */
        kv_trim(s->kv, s->n_tokens - 1);
    }
    double t0 = now_seconds();
    struct be_draw draw;
    const enum forward_out out = rows_wanted(g, 0, &draw);
    if (session_append_eval(s, prompt, n_prompt, 1, out, &draw, NULL, NULL,
                            err))
        return -1;
    if (g->p->draft && g->p->spec != KK_SPEC_NGRAM &&
        g->p->spec != KK_SPEC_OFF &&
        draft_catch_up(g->p->draft, s->tokens, s->n_tokens, err))
        return -1;
    g->st.prefill_seconds = now_seconds() - t0;
    if (g->st.prefill_seconds > 0)
        g->st.prefill_tok_per_s = n_prompt / g->st.prefill_seconds;
    int32_t first = target_token(g, 0);
    take_uniforms(g, 1);
    if (session_push(s, &first, 1, err))
        return -1;
    g->st.accepted_by[KK_PROPOSER_TARGET]++;
    snapshot_kv(g);
    g->is_done = !emit(g, first);
    return 0;
}

int kk_generate(struct kk_session *s, const int32_t *prompt, int n_prompt,
                const struct kk_generate_params *p, kk_token_fn on_token,
                void *ud, struct kk_stats *stats, struct kk_error *err)
{
    struct generation g;
    int rc = generation_init(&g, s, p, err);
    g.on_token = on_token;
    g.ud = ud;
    g.st.n_prompt = n_prompt;
    if (!rc && p->n_predict > 0)
        rc = start(&g, prompt, n_prompt, err);
    double t0 = now_seconds();
    g.decode_start = t0;
    while (!rc && !g.is_done && p->n_predict > 0) {
        if (p->stop && *p->stop) {
            g.st.stopped_by_request = true;
            break;
        }
        rc = step(&g, err);
        g.st.decode_seconds = now_seconds() - t0;
    }
    char text[64];
    if (tok_stream_finish(&g.ts, text, sizeof text) > 0 && on_token)
        on_token(ud, -1, text, &g.st);
    g.st.decode_seconds = now_seconds() - t0;
    if (g.st.prefill_seconds > 0)
        g.st.prefill_tok_per_s = n_prompt / g.st.prefill_seconds;
    /* The first token comes from prefill; decode speed counts the rest. */
    if (g.st.decode_seconds > 0)
        g.st.decode_tok_per_s = g.step_tokens / g.st.decode_seconds;
    if (stats)
        *stats = g.st;
    generation_free(&g);
    return rc;
}
