/* backend_cpu.c — the op set of backend.h on the CPU.
 *
 * Numerics follow llama.cpp's CPU backend where it matters for agreement
 * with the golden logits: RMSNorm sums in double, RoPE advances theta by
 * repeated multiplication in float, GELU goes through fp16 rounding like
 * ggml's lookup table. Attention (attention.c) folds per-chunk softmax
 * partials in float; the golden differences stay at the 1e-6 level.
 *
 * Threads: matmuls and attention run on the pool; the other ops run on the
 * calling thread, so they are vectorised rather than spread. */
#include "backend.h"

#include <assert.h>
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "dtype.h"
#include "error.h"
#include "kv.h"
#include "matmul.h"
#include "quant.h"
#include "simd_math.h"
#include "threadpool.h"

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

/* The q, k and v projections (and ffn gate and up) multiply the same
 * activations: the prepared form of the last input up to this many floats
 * is kept, with a copy of the input to recognise it. */
enum { MATMUL_REUSE_FLOATS = 64 * 1024 };

/* Chunk partials attention may keep for a step it spreads over the
 * threads (attention.h): 4 MiB, enough for a 17-token verify of a
 * 15-head model at 1,000 positions; larger steps run one task per tile. */
enum { ATTN_PARTIAL_FLOATS = 1 << 20 };

struct backend {
    struct pool *pool;
    int n_threads;
    void *prep;            /* prepared activations of the current matmul */
    size_t prep_bytes;
    /* What prep holds, when reusable: the input it was made from and how. */
    float *prep_src;       /* MATMUL_REUSE_FLOATS */
    int64_t prep_src_floats; /* 0: nothing reusable */
    uint32_t prep_type;
    struct matmul_input prep_in;
    int64_t max_cols;
    struct attention_scratch attn;
    int n_ctx;
    int head_dim;
    int group;             /* query heads per key/value head */
    int max_tokens;
};

int backend_new(int n_threads, struct backend **out, struct kk_error *err)
{
    *out = NULL;
    struct backend *be = calloc(1, sizeof *be);
    if (!be)
        return kk_fail(err, "out of memory");
    be->prep_src = malloc(MATMUL_REUSE_FLOATS * sizeof(float));
    if (!be->prep_src) {
        free(be);
        return kk_fail(err, "out of memory");
    }
    if (pool_new(n_threads, &be->pool, err)) {
        free(be->prep_src);
        free(be);
        return -1;
    }
    be->n_threads = pool_threads(be->pool);
    /* Our pool already runs one sgemm per thread on disjoint tiles. */
    openblas_set_num_threads(1);
    *out = be;
    return 0;
}

void backend_free(struct backend *be)
{
    if (!be)
        return;
    pool_free(be->pool);
    free(be->prep);
    free(be->prep_src);
    free(be->attn.per_thread);
    free(be->attn.partials);
    free(be);
}

int backend_threads(const struct backend *be)
{
    return be->n_threads;
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

int backend_reserve(struct backend *be, int max_tokens, int64_t max_cols,
                    int n_ctx, int head_dim, int group, struct kk_error *err)
{
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
        if (grow(&be->prep, need, err))
            return -1;
        be->prep_bytes = need;
        be->prep_src_floats = 0;
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
    return 0;
}

/* ---- matmul ---- */

/* Matrices of one dispatch, stacked: part p's rows are rows
 * first_row[p] .. first_row[p + 1] of the stack. */
enum { MATMUL_MAX_PARTS = 4 };

struct matmul_job {
    struct backend *be;
    const struct matmul_input *in;
    const float *x;
    int n;
    int parts;
    const struct weight *w[MATMUL_MAX_PARTS];
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
        if (r0 < r1)
            matmul_rows(j->w[p]->type, j->w[p]->data, j->in, j->y[p],
                        j->w[p]->n_rows, r0 - base, r1 - base);
    }
    (void)thread;
}

/* Fills bounds with shrinking row ranges (multiples of 8 rows, the
 * kernels' row block); returns how many. */
static int matmul_schedule(int64_t n_rows, size_t row_bytes, int n_threads,
                           int64_t *bounds)
{
    int64_t tail = MATMUL_TAIL_BYTES / (int64_t)row_bytes;
    tail = tail < 8 ? 8 : (tail + 7) / 8 * 8;
    int k = 0;
    bounds[0] = 0;
    for (int64_t r = 0; r < n_rows;) {
        int64_t left = n_rows - r;
        int64_t size = (left / (2 * n_threads) + 7) / 8 * 8;
        size = size < tail ? tail : size;
        if (size > left || k == MATMUL_TASKS_MAX - 1)
            size = left;
        r += size;
        bounds[++k] = r;
    }
    return k;
}

/* Prepares x for w into be->prep, unless it already holds exactly that. */
static const struct matmul_input *prepare_input(struct backend *be,
                                                const struct weight *w,
                                                const float *x, int n)
{
    int64_t floats = (int64_t)n * w->n_cols;
    if (floats == be->prep_src_floats && w->type == be->prep_type &&
        w->n_cols == be->prep_in.n_cols &&
        !memcmp(x, be->prep_src, (size_t)floats * sizeof(float)))
        return &be->prep_in;
    matmul_prepare(w->type, x, w->n_cols, n, be->prep, &be->prep_in);
    be->prep_src_floats = 0;
    if (floats <= MATMUL_REUSE_FLOATS) {
        memcpy(be->prep_src, x, (size_t)floats * sizeof(float));
        be->prep_src_floats = floats;
        be->prep_type = w->type;
    }
    return &be->prep_in;
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

void be_matmul(struct backend *be, const struct weight *w, const float *x,
               int n, float *y)
{
    struct matmul_job j = {.be = be, .x = x, .n = n, .parts = 1,
                           .w = {w}, .y = {y}, .first_row = {0, w->n_rows}};
    if (n >= SGEMM_MIN_TOKENS && w->type == KK_F32) {
        int tiles = (int)((w->n_rows + SGEMM_TILE_ROWS - 1) / SGEMM_TILE_ROWS);
        pool_run(be->pool, tiles, sgemm_task, &j);
        return;
    }
    j.in = prepare_input(be, w, x, n);
    pool_run(be->pool, matmul_schedule(w->n_rows, w->row_bytes, be->n_threads,
                                       j.bounds),
             matmul_task, &j);
}

void be_matmul_multi(struct backend *be, int count,
                     const struct weight *const *w, const float *x, int n,
                     float *const *y)
{
    bool is_stackable = count <= MATMUL_MAX_PARTS &&
                        !(n >= SGEMM_MIN_TOKENS && w[0]->type == KK_F32);
    for (int p = 1; p < count && is_stackable; p++)
        is_stackable = w[p]->type == w[0]->type &&
                       w[p]->n_cols == w[0]->n_cols;
    if (!is_stackable) {
        for (int p = 0; p < count; p++)
            be_matmul(be, w[p], x, n, y[p]);
        return;
    }
    struct matmul_job j = {.be = be, .x = x, .n = n, .parts = count};
    for (int p = 0; p < count; p++) {
        j.w[p] = w[p];
        j.y[p] = y[p];
        j.first_row[p + 1] = j.first_row[p] + w[p]->n_rows;
    }
    j.in = prepare_input(be, w[0], x, n);
    pool_run(be->pool, matmul_schedule(j.first_row[count], w[0]->row_bytes,
                                       be->n_threads, j.bounds),
             matmul_task, &j);
}

/* ---- cheap ops ---- */

void be_embed(const struct weight *w, const int32_t *tokens, int n,
              float scale, float *x)
{
    for (int t = 0; t < n; t++) {
        float *row = x + (int64_t)t * w->n_cols;
        dequantize_row(w->type, (const char *)w->data +
                                    (int64_t)tokens[t] * w->row_bytes,
                       row, w->n_cols);
        if (scale != 1.0f)
            for (int64_t i = 0; i < w->n_cols; i++)
                row[i] *= scale;
    }
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

void be_rmsnorm(float *y, const float *x, const float *weight, int n_groups,
                int dim, float eps)
{
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

/* The most rotated pairs per head be_rope handles (n_rot / 2). */
enum { ROPE_MAX_PAIRS = 512 };

/* be_rope turns q and k of every layer by the same angles, one or two sets
 * per model (bases): the angles of recent positions are kept, per thread,
 * in a small direct-mapped table (heads up to 128 wide). */
enum { ROPE_CACHE_SLOTS = 64, ROPE_CACHE_PAIRS = 64 };

struct rope_angles {
    float base;
    int n_rot;
    int32_t pos;           /* -1: empty */
    float cs[ROPE_CACHE_PAIRS], sn[ROPE_CACHE_PAIRS];
};

static _Thread_local struct rope_angles rope_cache[ROPE_CACHE_SLOTS];
static _Thread_local bool rope_cache_ready;

static void rope_compute(int32_t pos, int pairs, float theta_scale, float *cs,
                         float *sn)
{
    float theta = (float)pos;
    for (int i = 0; i < pairs; i++) {
        cs[i] = cosf(theta);
        sn[i] = sinf(theta);
        theta *= theta_scale;
    }
}

/* The cos/sin of position pos's angles: from the table, or computed into
 * cs_buf/sn_buf (and kept when they fit). */
static void rope_angles_of(int32_t pos, int n_rot, float base,
                           float theta_scale, float *cs_buf, float *sn_buf,
                           const float **cs, const float **sn)
{
    const int pairs = n_rot / 2;
    if (pairs > ROPE_CACHE_PAIRS) {
        rope_compute(pos, pairs, theta_scale, cs_buf, sn_buf);
        *cs = cs_buf;
        *sn = sn_buf;
        return;
    }
    if (!rope_cache_ready) {
        for (int i = 0; i < ROPE_CACHE_SLOTS; i++)
            rope_cache[i].pos = -1;
        rope_cache_ready = true;
    }
    uint32_t base_bits;
    memcpy(&base_bits, &base, sizeof base_bits);
    struct rope_angles *e =
        &rope_cache[((uint32_t)pos ^ base_bits ^ (base_bits >> 16)) %
                    ROPE_CACHE_SLOTS];
    if (e->pos != pos || e->n_rot != n_rot ||
        memcmp(&e->base, &base, sizeof base)) {
        rope_compute(pos, pairs, theta_scale, e->cs, e->sn);
        e->pos = pos;
        e->n_rot = n_rot;
        e->base = base;
    }
    *cs = e->cs;
    *sn = e->sn;
}

void be_rope(float *x, int n, int n_heads, int head_dim, int n_rot,
             const int32_t *pos, float base, enum rope_style style)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float cs_buf[ROPE_MAX_PAIRS], sn_buf[ROPE_MAX_PAIRS];
    const int pairs = n_rot / 2;
    assert(pairs <= ROPE_MAX_PAIRS);
    for (int t = 0; t < n; t++) {
        /* every head of a position turns by the same angles */
        const float *cs, *sn;
        rope_angles_of(pos[t], n_rot, base, theta_scale, cs_buf, sn_buf, &cs,
                       &sn);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((int64_t)t * n_heads + h) * head_dim;
            for (int i = 0; i < pairs; i++) {
                int a = style == ROPE_NORM ? 2 * i : i;
                int b = style == ROPE_NORM ? 2 * i + 1 : i + pairs;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

static float gelu_tanh(float x)
{
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x *
                                    (1.0f + 0.044715f * x * x)));
}

/* ggml looks GELU up in a table indexed by fp16(g) holding fp16 results;
 * we build the same table (one entry more, so a 32-bit gather of the last
 * entry stays inside it). Built once, on first use. */
static uint16_t gelu_table[65536 + 1];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_build(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        gelu_table[h] = f32_to_fp16(gelu_tanh(fp16_to_f32((uint16_t)h)));
}

static float gelu_lookup(float g)
{
    if (g <= -10.0f)
        return 0.0f;
    if (g >= 10.0f)
        return g;
    return fp16_to_f32(gelu_table[f32_to_fp16(g)]);
}

/* gelu_lookup() for 8 values: F16C rounds to fp16 to nearest even, as
 * f32_to_fp16() does, and a gather reads the table. */
static __m256 gelu_lookup8(__m256 g)
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

void be_gated_act(float *out, const float *gate, const float *up,
                  int64_t count, bool use_gelu)
{
    int64_t i = 0;
    if (use_gelu) {
        pthread_once(&gelu_once, gelu_table_build);
        for (; i + 8 <= count; i += 8)
            _mm256_storeu_ps(out + i,
                             _mm256_mul_ps(gelu_lookup8(_mm256_loadu_ps(gate + i)),
                                           _mm256_loadu_ps(up + i)));
        for (; i < count; i++)
            out[i] = gelu_lookup(gate[i]) * up[i];
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

void be_add(float *x, const float *y, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] += y[i];
}

/* ---- attention ---- */

void be_attention(struct backend *be, float *out, const float *q,
                  const struct kv_cache *kv, int il, int n, int pos0,
                  int n_head, int n_head_kv, int head_dim, int window,
                  float scale)
{
    const struct attention_args a = {
        .out = out, .q = q, .kv = kv, .il = il, .n = n, .pos0 = pos0,
        .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
        .window = window, .scale = scale,
    };
    attention_run(be->pool, &be->attn, &a);
}
