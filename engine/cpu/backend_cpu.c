/* backend_cpu.c — the op set of backend.h on the CPU: ops run as they are
 * called, the heavy ones (matmul, attention) on the thread pool.
 *
 * Numerics follow llama.cpp's CPU backend where it matters for agreement
 * with the golden logits: RMSNorm sums in double, RoPE advances theta by
 * repeated multiplication in float, GELU goes through fp16 rounding like
 * ggml's lookup table. Attention (attention.c) folds per-chunk softmax
 * partials in float; the golden differences stay at the 1e-6 level.
 *
 * Threads: matmuls and attention run on the pool; the other ops run on the
 * calling thread, so they are vectorised rather than spread. */
#include "backend_impl.h"

#include <assert.h>
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "dtype.h"
#include "error.h"
#include "kv.h"
#include "matmul.h"
#include "quant.h"
#include "sample.h"
#include "simd_math.h"
#include "threadpool.h"
#include "weight_packs.h"

/* F32 weights with batches at least this large go through OpenBLAS sgemm:
 * compute-bound, where BLAS's register blocking wins. Everything else
 * (decode, draft verification, and quantized or half-precision weights at
 * any batch size) streams each weight row once through the dot kernels,
 * which round the activations the way llama.cpp does (Q8_0/Q8_K, f16,
 * bf16): an sgemm on dequantized weights would move quantized models'
 * logits by ~0.1 away from the reference. */
enum { SGEMM_MIN_TOKENS = 32, SGEMM_TILE_ROWS = 64 };

/* Row ranges handed to threads shrink as a matmul proceeds (guided
 * scheduling): big ones first to amortise claiming, then smaller ones down
 * to about MATMUL_TAIL_BYTES of weights, so the threads finish within a
 * microsecond or so of each other. At most MATMUL_TASKS_MAX ranges. */
enum { MATMUL_TAIL_BYTES = 24 * 1024, MATMUL_TASKS_MAX = 64 };

/* Matrices up to MATMUL_EVEN_BYTES go to the threads in equal parts
 * instead, one range each: long runs stream better than a dozen pieces,
 * and as the calling thread claims the first part and the worker the
 * next, each core meets the same rows again in its own L2 on the next
 * call (how a draft model's weights stay in cache between its tokens).
 * Below MATMUL_INLINE_BYTES the calling thread does it all: handing half
 * to a worker costs more than it saves. */
enum { MATMUL_EVEN_BYTES = 2 << 20, MATMUL_INLINE_BYTES = 64 * 1024 };

/* Which batches multiply packed weights with AMX tiles (matmul.h): all,
 * when the model's packed weights are at most AMX_CACHED_BYTES and stay
 * in the caches from token to token. A larger model streams from DRAM,
 * where the row kernels' interleaved row streams keep more reads in flight
 * than one stream of tiles, and the tiles win only once a batch has enough
 * tokens to be compute-bound (SmolLM2-360M: one token 30 tok/s on the row
 * kernels, 25 on tiles; the two break even at 5-6 tokens). */
enum { AMX_CACHED_BYTES = 64 << 20, AMX_STREAMED_MIN_TOKENS = 6 };

/* Chunk partials attention may keep for a step it spreads over the
 * threads (attention.h): 4 MiB, enough for a 17-token verify of a
 * 15-head model at 1,000 positions; larger steps run one task per tile. */
enum { ATTN_PARTIAL_FLOATS = 1 << 20 };

/* Distinct RoPE bases a backend keeps angles for (gemma3 has two). */
enum { MAX_ROPE_TABLES = 4 };

/* RoPE angles are kept for every position of the context when that costs
 * at most this much (all tables together); otherwise each rope call
 * computes its positions' angles. */
enum { ROPE_CACHE_BYTES = 16 << 20 };

/* The angles of positions 0 .. n_cached-1 for one base (rope_angles'
 * layout: cos, sin per pair, n_rot floats per position), computed as
 * positions are first reached: every layer of every pass turns q and k by
 * the same angles, and a position's angles never change. */
struct rope_table {
    float base;
    int n_rot;
    int n_cached;
    float *cs;             /* rope_positions * head_dim floats */
};

struct cpu_backend {
    struct backend base;   /* first: a struct backend * points here */
    struct pool *pool;     /* own_pool, or a lender's (backend_share_threads) */
    struct pool *own_pool;
    int n_threads;
    struct weight_packs *packs; /* AMX copies of the model's matrices */
    int amx_min_tokens;    /* batches this large use them */
    void *prep;            /* prepared activations of the current matmul */
    size_t prep_bytes;
    struct matmul_input prep_in; /* what prep holds */
    int64_t max_cols;
    struct attention_scratch attn;
    int n_ctx;
    int head_dim;
    int group;             /* query heads per key/value head */
    int max_tokens;
    struct rope_table rope[MAX_ROPE_TABLES];
    int rope_positions;    /* capacity of each table, in positions */
    int n_rope;            /* tables in use */
    float *rope_call;      /* max_tokens * head_dim: angles of one call
                              when its positions are not in the tables */
    int32_t *argmax;       /* max_tokens: cpu_read_argmax's choices */
    /* GELU as ggml looks it up: fp16(gelu(h)) for every fp16 h (one entry
     * more, so a 32-bit gather of the last stays inside); made on first
     * use. */
    uint16_t *gelu_table;
};

static const struct backend_ops cpu_ops;

static struct cpu_backend *cpu(struct backend *be)
{
    return (struct cpu_backend *)be;
}

int backend_cpu_new(int n_threads, const struct model *m,
                    struct backend **out, struct kk_error *err)
{
    *out = NULL;
    struct cpu_backend *be = calloc(1, sizeof *be);
    if (!be)
        return kk_fail(err, "out of memory");
    be->base.ops = &cpu_ops;
    if (pool_new(n_threads, &be->pool, err)) {
        free(be);
        return -1;
    }
    be->n_threads = pool_threads(be->pool);
    be->own_pool = be->pool;
    if (packs_new(m, &be->packs, err)) {
        pool_free(be->pool);
        free(be);
        return -1;
    }
    be->amx_min_tokens = packs_bytes(be->packs) <= AMX_CACHED_BYTES
                             ? 1 : AMX_STREAMED_MIN_TOKENS;
    /* Our pool already runs one sgemm per thread on disjoint tiles. */
    openblas_set_num_threads(1);
    *out = &be->base;
    return 0;
}

static void cpu_free(struct backend *base)
{
    struct cpu_backend *be = cpu(base);
    pool_free(be->own_pool);
    packs_free(be->packs);
    free(be->prep);
    free(be->attn.per_thread);
    free(be->attn.partials);
    for (int i = 0; i < MAX_ROPE_TABLES; i++)
        free(be->rope[i].cs);
    free(be->rope_call);
    free(be->argmax);
    free(be->gelu_table);
    free(be);
}

static const char *cpu_name(const struct backend *be)
{
    (void)be;
    return "cpu";
}

static int cpu_threads(const struct backend *be)
{
    return ((const struct cpu_backend *)be)->n_threads;
}

/* Same thread count: the per-thread scratch stays the right size. */
static void cpu_share_threads(struct backend *base, struct backend *lender)
{
    struct cpu_backend *be = cpu(base);
    be->pool = lender && cpu(lender)->n_threads == be->n_threads
                   ? cpu(lender)->pool : be->own_pool;
}

static int grow(void **buf, size_t bytes, struct kk_error *err)
{
    void *nb = realloc(*buf, bytes ? bytes : 1);
    if (!nb)
        return kk_fail(err, "out of memory reserving %zu MiB of scratch",
                       bytes >> 20);
    *buf = nb;
    return 0;
}

/* The RoPE tables for the whole context when they fit ROPE_CACHE_BYTES,
 * and the per-call table for max_tokens positions. */
static int reserve_rope(struct cpu_backend *be, struct kk_error *err)
{
    size_t per_pos = (size_t)be->head_dim * sizeof(float);
    int want = (size_t)be->n_ctx * per_pos * MAX_ROPE_TABLES <= ROPE_CACHE_BYTES
                   ? be->n_ctx : 0;
    if (want > be->rope_positions) {
        for (int k = 0; k < MAX_ROPE_TABLES; k++)
            if (grow((void **)&be->rope[k].cs, (size_t)want * per_pos, err))
                return -1;
        be->rope_positions = want;
    }
    return grow((void **)&be->rope_call, (size_t)be->max_tokens * per_pos,
                err);
}

static int cpu_reserve(struct backend *base, int max_tokens, int64_t max_cols,
                       int n_ctx, int head_dim, int group,
                       struct kk_error *err)
{
    struct cpu_backend *be = cpu(base);
    static const uint32_t types[] = {KK_F32, KK_F16, KK_BF16, KK_Q8_0,
                                     KK_Q4_0, KK_Q5_0, KK_Q4_K, KK_Q6_K};
    if (max_tokens > be->max_tokens || max_cols > be->max_cols) {
        size_t need = 0;
        int64_t cols = max_cols > be->max_cols ? max_cols : be->max_cols;
        int toks = max_tokens > be->max_tokens ? max_tokens : be->max_tokens;
        /* K-quant activations need whole 256-blocks: round columns up. */
        int64_t padded = (cols + 255) / 256 * 256;
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            size_t b = matmul_prepared_bytes(types[i], padded, toks);
            need = b > need ? b : need;
        }
        if (grow(&be->prep, need, err) ||
            grow((void **)&be->argmax, (size_t)toks * sizeof(int32_t), err))
            return -1;

        be->prep_bytes = need;
        be->max_cols = cols;
        be->max_tokens = toks;
    }
    if (n_ctx > be->n_ctx || head_dim > be->head_dim || group > be->group) {
        int ctx = n_ctx > be->n_ctx ? n_ctx : be->n_ctx;
        int hd = head_dim > be->head_dim ? head_dim : be->head_dim;
        int grp = group > be->group ? group : be->group;
        size_t per = attention_scratch_floats(hd, grp);
        if (grow((void **)&be->attn.per_thread,
                 (size_t)be->n_threads * per * sizeof(float), err))
            return -1;
        be->attn.thread_floats = per;
        if (!be->attn.partials) {
            if (grow((void **)&be->attn.partials,
                     ATTN_PARTIAL_FLOATS * sizeof(float), err))
                return -1;
            be->attn.partial_floats = ATTN_PARTIAL_FLOATS;
        }
        be->n_ctx = ctx;
        be->head_dim = hd;
        be->group = grp;
    }
    return reserve_rope(be, err);
}

/* ---- matmul ---- */

/* Matrices of one dispatch, stacked: part p's rows are rows
 * first_row[p] .. first_row[p + 1] of the stack. */
enum { MATMUL_MAX_PARTS = 4 };

struct matmul_job {
    struct cpu_backend *be;
    const struct matmul_input *in;
    const float *x;
    int n;
    int parts;
    const struct weight *w[MATMUL_MAX_PARTS];
    const void *packed[MATMUL_MAX_PARTS]; /* AMX copies, when used */
    float *y[MATMUL_MAX_PARTS];
    int64_t first_row[MATMUL_MAX_PARTS + 1];
    int64_t bounds[MATMUL_TASKS_MAX + 1]; /* task i: stacked rows
                                              bounds[i] .. bounds[i + 1] */
};

static void matmul_task(void *ctx, int i, int thread)
{
    const struct matmul_job *j = ctx;
    for (int p = 0; p < j->parts; p++) {
        int64_t base = j->first_row[p];
        int64_t r0 = j->bounds[i] > base ? j->bounds[i] : base;
        int64_t r1 = j->bounds[i + 1] < j->first_row[p + 1]
                         ? j->bounds[i + 1] : j->first_row[p + 1];
        if (r0 >= r1)
            continue;
        if (j->packed[p])
            matmul_rows_amx(j->packed[p], j->in, j->y[p], j->w[p]->n_rows,
                            j->w[p]->n_rows, r0 - base, r1 - base);
        else
            matmul_rows(j->w[p]->type, j->w[p]->data, j->in, j->y[p],
                        j->w[p]->n_rows, r0 - base, r1 - base);
    }
    (void)thread;
}

/* Fills bounds with row ranges (multiples of `unit` rows, the kernel's
 * row block: 8, or 16 for AMX): equal parts for a small matrix, else
 * shrinking ranges; returns how many. */
static int matmul_schedule(int64_t n_rows, size_t row_bytes, int n_threads,
                           int unit, int64_t *bounds)
{
    int k = 0;
    bounds[0] = 0;
    const int64_t bytes = n_rows * (int64_t)row_bytes;
    if (bytes <= MATMUL_EVEN_BYTES) {
        int parts = bytes <= MATMUL_INLINE_BYTES ? 1 : n_threads;
        int64_t part = (n_rows / parts + unit - 1) / unit * unit;
        for (int64_t r = part; k + 1 < parts && r < n_rows; r += part)
            bounds[++k] = r;
        bounds[++k] = n_rows;
        return k;
    }
    int64_t tail = MATMUL_TAIL_BYTES / (int64_t)row_bytes;
    tail = tail < unit ? unit : (tail + unit - 1) / unit * unit;
    for (int64_t r = 0; r < n_rows;) {
        int64_t left = n_rows - r;
        int64_t size = (left / (2 * n_threads) + unit - 1) / unit * unit;
        size = size < tail ? tail : size;
        if (size > left || k == MATMUL_TASKS_MAX - 1)
            size = left;
        r += size;
        bounds[++k] = r;
    }
    return k;
}

/* x in the form w's kernels read (quantized like llama.cpp's activations),
 * in be->prep. */
static const struct matmul_input *prepare_input(struct cpu_backend *be,
                                                const struct matmul_job *j,
                                                const float *x, int n)
{
    bool is_amx = true;
    for (int p = 0; p < j->parts; p++)
        is_amx = is_amx && j->packed[p];
    matmul_prepare_for(j->w[0]->type, x, j->w[0]->n_cols, n, is_amx, be->prep,
                       &be->prep_in);
    return &be->prep_in;
}

/* Points the job's parts at their AMX copies when the batch is worth it;
 * returns the row block the schedule must keep to. */
static int use_packs(const struct cpu_backend *be, struct matmul_job *j, int n)
{
    int unit = 8;
    for (int p = 0; p < j->parts; p++) {
        j->packed[p] = n >= be->amx_min_tokens
                           ? packs_find(be->packs, j->w[p]) : NULL;
        if (j->packed[p])
            unit = 16;
    }
    return unit;
}

/* One tile of rows of an F32 matrix, multiplied with BLAS. */
static void sgemm_task(void *ctx, int i, int thread)
{
    (void)thread;
    const struct matmul_job *j = ctx;
    const struct weight *w = j->w[0];
    int64_t r0 = (int64_t)i * SGEMM_TILE_ROWS;
    int64_t rows = w->n_rows - r0 < SGEMM_TILE_ROWS ? w->n_rows - r0
                                                    : SGEMM_TILE_ROWS;
    const float *tile = (const float *)w->data + r0 * w->n_cols;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, (int)rows,
                (int)w->n_cols, 1.0f, j->x, (int)w->n_cols, tile,
                (int)w->n_cols, 0.0f, j->y[0] + r0, (int)w->n_rows);
}

static void matmul_one(struct cpu_backend *be, const struct weight *w,
                       const float *x, int n, float *y)
{
    struct matmul_job j = {.be = be, .x = x, .n = n, .parts = 1,
                           .w = {w}, .y = {y}, .first_row = {0, w->n_rows}};
    if (n >= SGEMM_MIN_TOKENS && w->type == KK_F32) {
        int tiles = (int)((w->n_rows + SGEMM_TILE_ROWS - 1) / SGEMM_TILE_ROWS);
        pool_run(be->pool, tiles, sgemm_task, &j);
        return;
    }
    int unit = use_packs(be, &j, n);
    j.in = prepare_input(be, &j, x, n);
    pool_run(be->pool, matmul_schedule(w->n_rows, w->row_bytes, be->n_threads,
                                       unit, j.bounds),
             matmul_task, &j);
}

/* The CPU does not fold norms (backend.c norms first): norm is NULL. */
static void cpu_matmul(struct backend *base, const struct weight *w,
                       const struct be_tensor *x, const struct be_norm *norm,
                       int n, struct be_tensor *y)
{
    (void)norm;
    matmul_one(cpu(base), w, x->data, n, y->data);
}

static void cpu_matmul_multi(struct backend *base, int count,
                             const struct weight *const *w,
                             const struct be_tensor *xt,
                             const struct be_norm *norm, int n,
                             struct be_tensor *const *yt)
{
    (void)norm;
    struct cpu_backend *be = cpu(base);
    const float *x = xt->data;
    bool is_stackable = count <= MATMUL_MAX_PARTS &&
                        !(n >= SGEMM_MIN_TOKENS && w[0]->type == KK_F32);
    for (int p = 1; p < count && is_stackable; p++)
        is_stackable = w[p]->type == w[0]->type &&
                       w[p]->n_cols == w[0]->n_cols;
    if (!is_stackable) {
        for (int p = 0; p < count; p++)
            matmul_one(be, w[p], x, n, yt[p]->data);
        return;
    }
    struct matmul_job j = {.be = be, .x = x, .n = n, .parts = count};
    for (int p = 0; p < count; p++) {
        j.w[p] = w[p];
        j.y[p] = yt[p]->data;
        j.first_row[p + 1] = j.first_row[p] + w[p]->n_rows;
    }
    int unit = use_packs(be, &j, n);
    j.in = prepare_input(be, &j, x, n);
    pool_run(be->pool, matmul_schedule(j.first_row[count], w[0]->row_bytes,
                                       be->n_threads, unit, j.bounds),
             matmul_task, &j);
}

/* ---- cheap ops ---- */

static void cpu_embed(struct backend *be, const struct weight *w,
                      const int32_t *tokens, int n, float scale,
                      struct be_tensor *x)
{
    (void)be;
    embed_rows(w, tokens, n, scale, x->data);
}

/* Sum of squares of n floats, in double (as llama.cpp sums): four lanes
 * of doubles, then the lanes pairwise, then a scalar tail. */
static double sum_squares(const float *x, int n)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        a0 = _mm256_fmadd_pd(lo, lo, a0); /* exact: float * float fits */
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    __m256d a = _mm256_add_pd(a0, a1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++)
        sum += (double)x[i] * x[i];
    return sum;
}

static void cpu_rmsnorm(struct backend *be, struct be_tensor *yt,
                        const struct be_tensor *xt, const float *weight,
                        int n_groups, int dim, float eps)
{
    (void)be;
    const float *x = xt->data;
    float *y = yt->data;
    for (int g = 0; g < n_groups; g++) {
        const float *xr = x + (int64_t)g * dim;
        float *yr = y + (int64_t)g * dim;
        float scale = 1.0f / sqrtf((float)(sum_squares(xr, dim) / dim) + eps);
        const __m256 sv = _mm256_set1_ps(scale);
        int i = 0;
        for (; i + 8 <= dim; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(
                                                       _mm256_loadu_ps(xr + i), sv),
                                                   _mm256_loadu_ps(weight + i)));
        for (; i < dim; i++)
            yr[i] = xr[i] * scale * weight[i];
    }
}

/* The angles of positions pos[0..n) for (base, n_rot), n_rot floats per
 * position: from the backend's tables when the positions are consecutive
 * and inside them, else computed into rope_call. */
static const float *rope_table(struct cpu_backend *be, int n, int n_rot,
                               const int32_t *pos, float base)
{
    bool is_run = pos[0] >= 0 && pos[n - 1] == pos[0] + n - 1 &&
                  pos[n - 1] < be->rope_positions;
    for (int t = 1; t < n && is_run; t++)
        is_run = pos[t] == pos[t - 1] + 1;
    struct rope_table *rt = NULL;
    for (int i = 0; i < be->n_rope && !rt; i++)
        if (be->rope[i].base == base && be->rope[i].n_rot == n_rot)
            rt = &be->rope[i];
    if (!rt && is_run) {
        /* More bases than tables: the last is started over (never seen). */
        rt = &be->rope[be->n_rope < MAX_ROPE_TABLES ? be->n_rope++
                                                    : MAX_ROPE_TABLES - 1];
        *rt = (struct rope_table){base, n_rot, 0, rt->cs};
    }
    if (!rt || !is_run) {
        for (int t = 0; t < n; t++)
            rope_angles(pos[t], n_rot, base,
                        be->rope_call + (size_t)t * (size_t)n_rot);
        return be->rope_call;
    }
    for (; rt->n_cached <= pos[n - 1]; rt->n_cached++)
        rope_angles(rt->n_cached, n_rot, base,
                    rt->cs + (size_t)rt->n_cached * (size_t)n_rot);
    return rt->cs + (size_t)pos[0] * (size_t)n_rot;
}

/* Splits 16 interleaved (cos, sin) floats into 8 cosines and 8 sines. */
static void split_cs(const float *cs, __m256 *c, __m256 *s)
{
    __m256 a = _mm256_loadu_ps(cs), b = _mm256_loadu_ps(cs + 8);
    *c = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
        _MM_SHUFFLE(3, 1, 2, 0)));
    *s = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))),
        _MM_SHUFFLE(3, 1, 2, 0)));
}

/* One head turned by the angles cs, pairs (i, i + pairs) (NEOX) or
 * (2i, 2i + 1) (NORM): x0 c - x1 s and x0 s + x1 c, each product rounded
 * before the sum as the scalar code does (C11 does not contract). */
static void rope_head(float *v, const float *cs, int pairs,
                      enum rope_style style)
{
    int i = 0;
    if (style == ROPE_NEOX) {
        for (; i + 8 <= pairs; i += 8) {
            __m256 c, s;
            split_cs(cs + 2 * i, &c, &s);
            __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + pairs);
            _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c),
                                                  _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(v + i + pairs, _mm256_add_ps(_mm256_mul_ps(x0, s),
                                                          _mm256_mul_ps(x1, c)));
        }
    }
    for (; i < pairs; i++) {
        int a = style == ROPE_NORM ? 2 * i : i;
        int b = style == ROPE_NORM ? 2 * i + 1 : i + pairs;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
        v[b] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
    }
}

static void cpu_rope(struct backend *base, struct be_tensor *xt, int n,
                     int n_heads, int head_dim, int n_rot, const int32_t *pos,
                     float rope_base, enum rope_style style)
{
    const float *table = rope_table(cpu(base), n, n_rot, pos, rope_base);
    for (int t = 0; t < n; t++) {
        /* every head of a position turns by the same angles */
        const float *cs = table + (size_t)t * (size_t)n_rot;
        for (int h = 0; h < n_heads; h++)
            rope_head(xt->data + ((int64_t)t * n_heads + h) * head_dim, cs,
                      n_rot / 2, style);
    }
}

static float gelu_tanh(float x)
{
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x *
                                    (1.0f + 0.044715f * x * x)));
}

/* ggml looks GELU up in a table indexed by fp16(g) holding fp16 results;
 * the backend builds the same table on first use. */
static const uint16_t *gelu_table(struct cpu_backend *be)
{
    if (!be->gelu_table) {
        be->gelu_table = malloc((65536 + 1) * sizeof(uint16_t));
        if (!be->gelu_table)
            return NULL;
        for (uint32_t h = 0; h < 65536; h++)
            be->gelu_table[h] =
                f32_to_fp16(gelu_tanh(fp16_to_f32((uint16_t)h)));
        be->gelu_table[65536] = 0;
    }
    return be->gelu_table;
}

static float gelu_lookup(const uint16_t *gelu_table, float g)
{
    if (g <= -10.0f)
        return 0.0f;
    if (g >= 10.0f)
        return g;
    return fp16_to_f32(gelu_table[f32_to_fp16(g)]);
}

/* gelu_lookup() for 8 values: F16C rounds to fp16 to nearest even, as
 * f32_to_fp16() does, and a gather reads the table. */
static __m256 gelu_lookup8(const uint16_t *gelu_table, __m256 g)
{
    __m128i h = _mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT |
                                       _MM_FROUND_NO_EXC);
    __m256i got = _mm256_i32gather_epi32((const int *)gelu_table,
                                         _mm256_cvtepu16_epi32(h), 2);
    got = _mm256_and_si256(got, _mm256_set1_epi32(0xffff));
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(got),
                                      _mm256_extracti128_si256(got, 1));
    __m256 a = _mm256_cvtph_ps(packed);
    __m256 lo = _mm256_cmp_ps(g, _mm256_set1_ps(-10.0f), _CMP_LE_OQ);
    __m256 hi = _mm256_cmp_ps(g, _mm256_set1_ps(10.0f), _CMP_GE_OQ);
    a = _mm256_andnot_ps(lo, a);
    return _mm256_blendv_ps(a, g, hi);
}

/* SiLU, g / (1 + e^-g), for 8 values (the vector exp is within 2 ulp of
 * expf; llama.cpp's SIMD path approximates it too). */
static __m256 silu8(__m256 g)
{
    __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* The exact GELU (tanh form, both fp16 roundings) without the table:
 * what gelu_lookup gives, for when the table could not be made. */
static float gelu_direct(float g)
{
    if (g <= -10.0f)
        return 0.0f;
    if (g >= 10.0f)
        return g;
    return fp16_to_f32(f32_to_fp16(gelu_tanh(fp16_to_f32(f32_to_fp16(g)))));
}

static void cpu_gated_act(struct backend *base, struct be_tensor *gt,
                          const struct be_tensor *ut, int64_t count,
                          bool use_gelu)
{
    float *out = gt->data;
    const float *gate = gt->data, *up = ut->data;
    int64_t i = 0;
    if (use_gelu) {
        const uint16_t *table = gelu_table(cpu(base));
        for (; table && i + 8 <= count; i += 8)
            _mm256_storeu_ps(out + i,
                             _mm256_mul_ps(gelu_lookup8(table,
                                                        _mm256_loadu_ps(gate + i)),
                                           _mm256_loadu_ps(up + i)));
        for (; i < count; i++)
            out[i] = (table ? gelu_lookup(table, gate[i])
                            : gelu_direct(gate[i])) * up[i];
        return;
    }
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)),
                                                _mm256_loadu_ps(up + i)));
    if (i < count) {
        /* the tail through the same vector code: a value's activation does
         * not depend on where it falls */
        float g[8] = {0}, a[8];
        for (int64_t k = i; k < count; k++)
            g[k - i] = gate[k];
        _mm256_storeu_ps(a, silu8(_mm256_loadu_ps(g)));
        for (int64_t k = i; k < count; k++)
            out[k] = a[k - i] * up[k];
    }
}

static void add_f32(float *x, const float *y, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] += y[i];
}

static void cpu_add(struct backend *be, struct be_tensor *x,
                    const struct be_tensor *y, int64_t count)
{
    (void)be;
    add_f32(x->data, y->data, count);
}

static void cpu_add_row(struct backend *be, struct be_tensor *x,
                        const float *row, int n, int width)
{
    (void)be;
    for (int t = 0; t < n; t++)
        add_f32(x->data + (int64_t)t * width, row, width);
}

static void cpu_copy_rows(struct backend *be, struct be_tensor *dst,
                          const struct be_tensor *src, int row0, int n)
{
    (void)be;
    memcpy(dst->data, src->data + (int64_t)row0 * src->width,
           (size_t)n * (size_t)src->width * sizeof(float));
}

/* ---- attention ---- */

static void cpu_attention(struct backend *base, struct be_tensor *out,
                          const struct be_tensor *q, const struct kv_cache *kv,
                          int il, int n, int pos0, int n_head, int n_head_kv,
                          int head_dim, int window, float scale)
{
    struct cpu_backend *be = cpu(base);
    const struct attention_args a = {
        .out = out->data, .q = q->data, .kv = kv, .il = il, .n = n,
        .pos0 = pos0, .n_head = n_head, .n_head_kv = n_head_kv,
        .head_dim = head_dim, .window = window, .scale = scale,
    };
    attention_run(be->pool, &be->attn, &a);
}

/* ---- the rest of the op set: host memory, ops run as called ---- */

static int cpu_kv_noop(struct backend *be, struct kv_cache *kv,
                       struct kk_error *err)
{
    (void)be, (void)kv, (void)err;
    return 0;
}

static struct be_tensor *cpu_tensor_new(struct backend *be, int rows,
                                        int64_t width, struct kk_error *err)
{
    (void)be;
    struct be_tensor *t = calloc(1, sizeof *t);
    if (t)
        t->data = malloc((size_t)(rows > 0 ? rows : 1) * (size_t)width *
                         sizeof(float));
    if (!t || !t->data) {
        free(t);
        kk_fail(err, "out of memory for %d rows of %lld activations", rows,
                (long long)width);
        return NULL;
    }
    t->rows = rows;
    t->width = width;
    return t;
}

static void cpu_tensor_free(struct backend *be, struct be_tensor *t)
{
    (void)be;
    free(t->data);
    free(t);
}

static void cpu_begin(struct backend *base)
{
    (void)base;
}

static int cpu_end(struct backend *be, struct kk_error *err)
{
    (void)be, (void)err;
    return 0;
}

static const float *cpu_read(struct backend *be, const struct be_tensor *t,
                             int rows)
{
    (void)be, (void)rows;
    return t->data;
}

/* The rows are host memory, computed already (ops run as they are
 * called), so the choices are made now. */
static const int32_t *cpu_read_argmax(struct backend *base,
                                      const struct be_tensor *t, int rows)
{
    struct cpu_backend *be = cpu(base);
    assert(rows <= be->max_tokens);
    for (int r = 0; r < rows; r++)
        be->argmax[r] = sample_argmax(t->data + (size_t)r * t->width,
                                      (int32_t)t->width);
    return be->argmax;
}

static void cpu_kv_store(struct backend *be, struct kv_cache *kv, int il,
                         int pos0, int n, const struct be_tensor *k,
                         const struct be_tensor *v)
{
    (void)be;
    kv_stage(kv, il, pos0, n, k->data, v->data);
}

static void cpu_kv_commit(struct backend *be, struct kv_cache *kv)
{
    (void)be;
    kv_commit(kv);
}

static const struct backend_ops cpu_ops = {
    .free = cpu_free, .name = cpu_name, .threads = cpu_threads,
    .share_threads = cpu_share_threads,
    .reserve = cpu_reserve, .bind_kv = cpu_kv_noop, .kv_pull = cpu_kv_noop,
    .kv_push = cpu_kv_noop, .tensor_new = cpu_tensor_new,
    .tensor_free = cpu_tensor_free, .begin = cpu_begin, .end = cpu_end,
    .read = cpu_read, .read_argmax = cpu_read_argmax, .embed = cpu_embed,
    .matmul = cpu_matmul,
    .matmul_multi = cpu_matmul_multi, .copy_rows = cpu_copy_rows,
    .rmsnorm = cpu_rmsnorm, .rope = cpu_rope, .gated_act = cpu_gated_act,
    .add = cpu_add, .add_row = cpu_add_row, .kv_store = cpu_kv_store,
    .kv_commit = cpu_kv_commit, .attention = cpu_attention,
};
