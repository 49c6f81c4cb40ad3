/* backend_cpu.c — the op set of backend.h on the CPU.
 *
 * Numerics follow llama.cpp's CPU backend where it matters for agreement
 * with the golden logits: RMSNorm sums in double, RoPE advances theta by
 * repeated multiplication in float, GELU goes through fp16 rounding like
 * ggml's lookup table, and softmax sums in double. */
#include "backend.h"

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "kv.h"
#include "matmul.h"
#include "quant.h"
#include "threadpool.h"

/* F32 weights with batches at least this large go through OpenBLAS sgemm:
 * compute-bound, where BLAS's register blocking wins. Everything else
 * (decode, draft verification, and quantized or half-precision weights at
 * any batch size) streams each weight row once through the dot kernels,
 * which round the activations the way llama.cpp does (Q8_0/Q8_K, f16,
 * bf16): an sgemm on dequantized weights would move quantized models'
 * logits by ~0.1 away from the reference. */
enum { SGEMM_MIN_TOKENS = 32, SGEMM_TILE_ROWS = 64 };

/* Row chunks handed to threads: small enough to balance, large enough to
 * amortise dispatch. */
enum { MATMUL_CHUNK_ROWS = 16 };

/* Query heads sharing one key/value head (GQA) that attention handles at
 * once; the model loader refuses larger groups. */
enum { MAX_GROUP = 64 };

/* Queries of one batch that attention handles together: each key and value
 * row is converted once for all of them (prefill, verification). */
enum { ATTN_TILE = 8 };

struct backend {
    struct pool *pool;
    int n_threads;
    void *prep;            /* prepared activations of the current matmul */
    size_t prep_bytes;
    int64_t max_cols;
    float *scores;         /* per thread: scores_per_thread floats */
    size_t scores_per_thread; /* tile * group * n_ctx scores + a row */
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
    if (pool_new(n_threads, &be->pool, err)) {
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
    free(be->scores);
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
        be->max_cols = cols;
        be->max_tokens = toks;
    }
    if (n_ctx > be->n_ctx || head_dim > be->head_dim || group > be->group) {
        int ctx = n_ctx > be->n_ctx ? n_ctx : be->n_ctx;
        int hd = head_dim > be->head_dim ? head_dim : be->head_dim;
        int grp = group > be->group ? group : be->group;
        size_t per = (size_t)ATTN_TILE * (size_t)grp * (size_t)ctx + (size_t)hd;
        if (grow((void **)&be->scores,
                 (size_t)be->n_threads * per * sizeof(float), err))
            return -1;
        be->scores_per_thread = per;
        be->n_ctx = ctx;
        be->head_dim = hd;
        be->group = grp;
    }
    return 0;
}

/* ---- matmul ---- */

struct matmul_job {
    struct backend *be;
    const struct weight *w;
    const struct matmul_input *in;
    const float *x;
    float *y;
    int n;
    int64_t chunk_rows;
};

static void matmul_task(void *ctx, int i, int thread)
{
    const struct matmul_job *j = ctx;
    int64_t r0 = (int64_t)i * j->chunk_rows;
    int64_t r1 = r0 + j->chunk_rows;
    if (r1 > j->w->n_rows)
        r1 = j->w->n_rows;
    matmul_rows(j->w->type, j->w->data, j->in, j->y, j->w->n_rows, r0, r1);
    (void)thread;
}

/* One tile of rows of an F32 matrix, multiplied with BLAS. */
static void sgemm_task(void *ctx, int i, int thread)
{
    (void)thread;
    const struct matmul_job *j = ctx;
    const struct weight *w = j->w;
    int64_t r0 = (int64_t)i * SGEMM_TILE_ROWS;
    int64_t rows = w->n_rows - r0 < SGEMM_TILE_ROWS ? w->n_rows - r0
                                                    : SGEMM_TILE_ROWS;
    const float *tile = (const float *)w->data + r0 * w->n_cols;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, (int)rows,
                (int)w->n_cols, 1.0f, j->x, (int)w->n_cols, tile,
                (int)w->n_cols, 0.0f, j->y + r0, (int)w->n_rows);
}

void be_matmul(struct backend *be, const struct weight *w, const float *x,
               int n, float *y)
{
    struct matmul_job j = {.be = be, .w = w, .x = x, .y = y, .n = n};
    if (n >= SGEMM_MIN_TOKENS && w->type == KK_F32) {
        int tiles = (int)((w->n_rows + SGEMM_TILE_ROWS - 1) / SGEMM_TILE_ROWS);
        pool_run(be->pool, tiles, sgemm_task, &j);
        return;
    }
    struct matmul_input in;
    matmul_prepare(w->type, x, w->n_cols, n, be->prep, &in);
    j.in = &in;
    /* Aim for a few chunks per thread so uneven progress evens out. */
    int64_t chunk = w->n_rows / (be->n_threads * 4);
    chunk = chunk < MATMUL_CHUNK_ROWS ? MATMUL_CHUNK_ROWS : chunk;
    chunk = (chunk + 3) / 4 * 4;
    j.chunk_rows = chunk;
    pool_run(be->pool, (int)((w->n_rows + chunk - 1) / chunk), matmul_task, &j);
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

void be_rmsnorm(float *y, const float *x, const float *weight, int n_groups,
                int dim, float eps)
{
    for (int g = 0; g < n_groups; g++) {
        const float *xr = x + (int64_t)g * dim;
        float *yr = y + (int64_t)g * dim;
        double sum = 0.0;
        for (int i = 0; i < dim; i++)
            sum += (double)xr[i] * xr[i];
        float scale = 1.0f / sqrtf((float)(sum / dim) + eps);
        for (int i = 0; i < dim; i++)
            yr[i] = xr[i] * scale * weight[i];
    }
}

void be_rope(float *x, int n, int n_heads, int head_dim, int n_rot,
             const int32_t *pos, float base, enum rope_style style)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((int64_t)t * n_heads + h) * head_dim;
            float theta = (float)pos[t];
            for (int i = 0; i < n_rot / 2; i++) {
                float c = cosf(theta), s = sinf(theta);
                int a = style == ROPE_NORM ? 2 * i : i;
                int b = style == ROPE_NORM ? 2 * i + 1 : i + n_rot / 2;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
                theta *= theta_scale;
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
    for (; i < count; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void be_add(float *x, const float *y, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] += y[i];
}

/* ---- attention ---- */

/* e^x for 8 floats (x <= 0 here: scores minus their maximum): Cephes'
 * degree-6 polynomial after a 2^n range reduction, within 2 ulp of expf. */
static __m256 exp256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
                          _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float dot_f32(const float *a, const float *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float sum = hsum256(acc);
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static void axpy_f32(float *y, float a, const float *x, int n)
{
    const __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* x[i] = e^(x[i] - max) for n values; returns their sum. */
static double exp_shifted(float *x, int n, float max)
{
    const __m256 mv = _mm256_set1_ps(max);
    double sum = 0.0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        sum += hsum256(e);
    }
    if (i < n) {
        /* The tail through the same polynomial, so a value's exponential
         * does not depend on where it falls in a vector. */
        float tail[8] = {0};
        for (int k = i; k < n; k++)
            tail[k - i] = x[k] - max;
        float e[8];
        _mm256_storeu_ps(e, exp256(_mm256_loadu_ps(tail)));
        for (int k = i; k < n; k++) {
            x[k] = e[k - i];
            sum += e[k - i];
        }
    }
    return sum;
}

struct attention_job {
    struct backend *be;
    float *out;
    const float *q;
    const struct kv_cache *kv;
    int il, n, pos0, n_head, n_head_kv, group, head_dim, window;
    float scale;
};

/* Which positions query p sees: [0, sink_end) and [lo, p]. */
struct visible {
    int sink_end, lo, p;
};

static bool sees(const struct visible *v, int k)
{
    return k < v->sink_end || (k >= v->lo && k <= v->p);
}

/* Task i: a tile of up to ATTN_TILE consecutive query rows and one
 * key/value head g = i % n_head_kv, with the `group` query heads sharing it
 * (GQA). Every query does exactly the arithmetic it would do alone — the
 * same dot products, in the same order — so batched and token-by-token
 * evaluation agree to the bit. Scores of query r, head h sit at
 * s[(r * group + h) * n_ctx + position]. */
static void attention_task(void *ctx, int i, int thread)
{
    const struct attention_job *j = ctx;
    const struct kv_cache *kv = j->kv;
    const int g = i % j->n_head_kv, t0 = (i / j->n_head_kv) * ATTN_TILE;
    const int nt = j->n - t0 < ATTN_TILE ? j->n - t0 : ATTN_TILE;
    const int d = j->head_dim, G = j->group, n_ctx = j->be->n_ctx;
    struct visible vis[ATTN_TILE];
    int first = INT32_MAX, last = 0, sinks = 0;
    for (int r = 0; r < nt; r++) {
        vis[r].p = j->pos0 + t0 + r;
        kv_visible(&kv->layers[j->il], j->window, vis[r].p, &vis[r].sink_end,
                   &vis[r].lo);
        first = vis[r].lo < first ? vis[r].lo : first;
        sinks = vis[r].sink_end > sinks ? vis[r].sink_end : sinks;
        last = vis[r].p;
    }
    float *s = j->be->scores + (size_t)thread * j->be->scores_per_thread;
    float *row = s + (size_t)ATTN_TILE * G * n_ctx;
    float max[ATTN_TILE][MAX_GROUP];
    double inv[ATTN_TILE][MAX_GROUP];
    for (int r = 0; r < nt; r++)
        for (int h = 0; h < G; h++)
            max[r][h] = -INFINITY;
    /* Keys in [0, sinks) and [first, last], each converted once. */
    const int span[2][2] = {{0, sinks}, {first > sinks ? first : sinks, last + 1}};
    for (int part = 0; part < 2; part++)
    for (int k = span[part][0]; k < span[part][1]; k++) {
        kv_load_head(kv, kv_key_row(kv, j->il, k), g * d, row);
        for (int r = 0; r < nt; r++) {
            if (!sees(&vis[r], k))
                continue;
            const float *q = j->q + ((int64_t)(t0 + r) * j->n_head +
                                     (int64_t)g * G) * d;
            for (int h = 0; h < G; h++) {
                float x = dot_f32(q + h * d, row, d) * j->scale;
                s[(size_t)(r * G + h) * n_ctx + k] = x;
                max[r][h] = x > max[r][h] ? x : max[r][h];
            }
        }
    }
    for (int r = 0; r < nt; r++)
        for (int h = 0; h < G; h++) {
            float *sr = s + (size_t)(r * G + h) * n_ctx;
            double sum = exp_shifted(sr, vis[r].sink_end, max[r][h]) +
                         exp_shifted(sr + vis[r].lo, vis[r].p + 1 - vis[r].lo,
                                     max[r][h]);
            inv[r][h] = 1.0 / sum;
        }
    for (int r = 0; r < nt; r++)
        memset(j->out + ((int64_t)(t0 + r) * j->n_head + (int64_t)g * G) * d, 0,
               (size_t)G * d * sizeof(float));
    for (int part = 0; part < 2; part++)
    for (int k = span[part][0]; k < span[part][1]; k++) {
        kv_load_head(kv, kv_value_row(kv, j->il, k), g * d, row);
        for (int r = 0; r < nt; r++) {
            if (!sees(&vis[r], k))
                continue;
            float *o = j->out + ((int64_t)(t0 + r) * j->n_head +
                                 (int64_t)g * G) * d;
            for (int h = 0; h < G; h++)
                axpy_f32(o + h * d,
                         (float)(s[(size_t)(r * G + h) * n_ctx + k] * inv[r][h]),
                         row, d);
        }
    }
}

void be_attention(struct backend *be, float *out, const float *q,
                  const struct kv_cache *kv, int il, int n, int pos0,
                  int n_head, int n_head_kv, int head_dim, int window,
                  float scale)
{
    struct attention_job j = {
        .be = be, .out = out, .q = q, .kv = kv, .il = il, .n = n,
        .pos0 = pos0, .n_head = n_head, .n_head_kv = n_head_kv,
        .group = n_head / n_head_kv, .head_dim = head_dim, .window = window,
        .scale = scale,
    };
    int tiles = (n + ATTN_TILE - 1) / ATTN_TILE;
    pool_run(be->pool, tiles * n_head_kv, attention_task, &j);
}
