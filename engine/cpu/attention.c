/* attention.c — see attention.h.
 *
 * Within a chunk, the keys (and later the values) that any query of a tile
 * sees are converted to f32 once, into the thread's scratch, and shared by
 * the tile's queries and the query heads of the group (GQA). Scores come
 * eight keys at a time (dot8), weighted values accumulate in registers over
 * the keys of the chunk (weighted_sum); neither depends on which other keys
 * or queries share the block. Where the CPU has AVX-512, the same sums run
 * on 16 lanes for up to four query heads at once (attention_avx512.c), to
 * the bit the same results. */
#include "attention.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "attention_avx512.h"
#include "kv.h"
#include "simd_math.h"
#include "threadpool.h"

/* Keys per chunk (a multiple of 8): enough work per task to amortise it,
 * few enough that a decode step at a few hundred positions has several
 * chunks per head to spread over the threads. */
enum { ATTN_CHUNK = 64 };

/* Queries of one batch that share the converted keys of a task. */
enum { ATTN_TILE = 8 };

/* A chunk's partial for one query and head: max, sum, then o[head_dim]. */
enum { PART_M = 0, PART_L = 1, PART_O = 2 };

size_t attention_scratch_floats(int head_dim, int group)
{
    size_t d = (size_t)head_dim, G = (size_t)group;
    return 2 * ATTN_CHUNK * d                    /* keys, values */
           + ATTN_TILE * G * ATTN_CHUNK          /* scores */
           + 2 * ATTN_TILE * G * (d + PART_O);   /* a chunk's partials, fold */
}

static int chunks_upto(int n_positions)
{
    return (n_positions + ATTN_CHUNK - 1) / ATTN_CHUNK;
}

size_t attention_partial_floats(int n, int n_head, int head_dim, int n_ctx)
{
    return (size_t)n * (size_t)n_head * (size_t)chunks_upto(n_ctx) *
           ((size_t)head_dim + PART_O);
}

/* ---- small vector helpers ---- */

/* q · k for the 8 keys kb[0..7] (rows of d floats). Each key's products
 * are summed lane-wise over d, then its 8 lanes pairwise, the same way for
 * every key of the block. In two halves of four keys (dot4_fold), so that
 * two query heads can share each key load (dot8x2). */

/* Lane sums of q · k for the 4 keys kb[0..3], after the first two hadd
 * steps of the 8-key fold (dot8_finish does the rest). */
static inline __m256 dot4_fold(const float *q, const float *kb, int d)
{
    __m256 a[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        a[k] = _mm256_setzero_ps();
    for (int i = 0; i + 8 <= d; i += 8) {
        __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            a[k] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kb + (size_t)k * d + i),
                                   a[k]);
    }
    return _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]),
                          _mm256_hadd_ps(a[2], a[3]));
}

/* dot4_fold for two queries over the same keys, each key loaded once. */
static inline void dot4_fold2(const float *qa, const float *qb,
                              const float *kb, int d, __m256 *ua, __m256 *ub)
{
    __m256 a[4], b[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        a[k] = b[k] = _mm256_setzero_ps();
    for (int i = 0; i + 8 <= d; i += 8) {
        __m256 qva = _mm256_loadu_ps(qa + i), qvb = _mm256_loadu_ps(qb + i);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256 kv = _mm256_loadu_ps(kb + (size_t)k * d + i);
            a[k] = _mm256_fmadd_ps(qva, kv, a[k]);
            b[k] = _mm256_fmadd_ps(qvb, kv, b[k]);
        }
    }
    *ua = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    *ub = _mm256_hadd_ps(_mm256_hadd_ps(b[0], b[1]), _mm256_hadd_ps(b[2], b[3]));
}

/* The 8 dot products from the folds of keys 0-3 (u0) and 4-7 (u1), with
 * the columns past the last multiple of 8 added last. */
static inline __m256 dot8_finish(__m256 u0, __m256 u1, const float *q,
                                 const float *kb, int d)
{
    __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                             _mm256_permute2f128_ps(u0, u1, 0x31));
    int i = d / 8 * 8;
    if (i < d) { /* head widths that are not a multiple of 8 */
        float tail[8];
        for (int k = 0; k < 8; k++) {
            tail[k] = 0.0f;
            for (int t = i; t < d; t++)
                tail[k] += q[t] * kb[(size_t)k * d + t];
        }
        s = _mm256_add_ps(s, _mm256_loadu_ps(tail));
    }
    return s;
}

static __m256 dot8(const float *q, const float *kb, int d)
{
    return dot8_finish(dot4_fold(q, kb, d), dot4_fold(q, kb + 4 * (size_t)d, d),
                       q, kb, d);
}

/* dot8 for two queries. */
static void dot8x2(const float *qa, const float *qb, const float *kb, int d,
                   __m256 *sa, __m256 *sb)
{
    __m256 ua0, ub0, ua1, ub1;
    dot4_fold2(qa, qb, kb, d, &ua0, &ub0);
    dot4_fold2(qa, qb, kb + 4 * (size_t)d, d, &ua1, &ub1);
    *sa = dot8_finish(ua0, ua1, qa, kb, d);
    *sb = dot8_finish(ub0, ub1, qb, kb, d);
}

/* o[0..d) += sum over k in [k0, k1) of w[k] * vb[k][0..d), in key order,
 * with the running sums in registers. */
static void weighted_sum(float *o, const float *w, const float *vb, int k0,
                         int k1, int d)
{
    int i = 0;
    /* 64 columns at once: eight independent sums hide the FMA latency
     * (with four, a key's FMAs waited on the previous key's) */
    for (; i + 64 <= d; i += 64) {
        __m256 a[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_loadu_ps(o + i + 8 * j);
        for (int k = k0; k < k1; k++) {
            const float *v = vb + (size_t)k * d + i;
            __m256 wk = _mm256_broadcast_ss(w + k);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                a[j] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(v + 8 * j), a[j]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(o + i + 8 * j, a[j]);
    }
    for (; i + 32 <= d; i += 32) {
        __m256 a0 = _mm256_loadu_ps(o + i), a1 = _mm256_loadu_ps(o + i + 8);
        __m256 a2 = _mm256_loadu_ps(o + i + 16), a3 = _mm256_loadu_ps(o + i + 24);
        for (int k = k0; k < k1; k++) {
            const float *v = vb + (size_t)k * d + i;
            __m256 wk = _mm256_broadcast_ss(w + k);
            a0 = _mm256_fmadd_ps(wk, _mm256_loadu_ps(v), a0);
            a1 = _mm256_fmadd_ps(wk, _mm256_loadu_ps(v + 8), a1);
            a2 = _mm256_fmadd_ps(wk, _mm256_loadu_ps(v + 16), a2);
            a3 = _mm256_fmadd_ps(wk, _mm256_loadu_ps(v + 24), a3);
        }
        _mm256_storeu_ps(o + i, a0);
        _mm256_storeu_ps(o + i + 8, a1);
        _mm256_storeu_ps(o + i + 16, a2);
        _mm256_storeu_ps(o + i + 24, a3);
    }
    for (; i + 8 <= d; i += 8) {
        __m256 a = _mm256_loadu_ps(o + i);
        for (int k = k0; k < k1; k++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + k),
                                _mm256_loadu_ps(vb + (size_t)k * d + i), a);
        _mm256_storeu_ps(o + i, a);
    }
    for (; i < d; i++)
        for (int k = k0; k < k1; k++)
            o[i] += w[k] * vb[(size_t)k * d + i];
}

/* ---- which keys a tile of queries sees ---- */

/* Positions [lo, hi). */
struct span {
    int lo, hi;
};

static struct span span_and(struct span a, struct span b)
{
    struct span s = {a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
    if (s.hi < s.lo)
        s.hi = s.lo;
    return s;
}

/* Query rows t0 .. t0+nt-1 of the batch. Row r sees sink[r] and win[r]
 * (the window part starts after the sinks); the tile as a whole sees
 * `sinks` and `window`, the union over its rows. */
struct tile {
    int t0, nt;
    struct span sink[ATTN_TILE], win[ATTN_TILE];
    struct span sinks, window;
};

static void tile_init(const struct attention_args *a, int tile, struct tile *T)
{
    const struct kv_layer *L = &a->kv->layers[a->il];
    T->t0 = tile * ATTN_TILE;
    T->nt = a->n - T->t0 < ATTN_TILE ? a->n - T->t0 : ATTN_TILE;
    T->sinks = (struct span){0, 0};
    T->window = (struct span){INT32_MAX, 0};
    for (int r = 0; r < T->nt; r++) {
        int p = a->pos0 + T->t0 + r, sink_end, lo;
        kv_visible(L, a->window, p, &sink_end, &lo);
        T->sink[r] = (struct span){0, sink_end};
        T->win[r] = (struct span){lo, p + 1};
        T->sinks.hi = sink_end > T->sinks.hi ? sink_end : T->sinks.hi;
        T->window.lo = lo < T->window.lo ? lo : T->window.lo;
        T->window.hi = p + 1;
    }
    if (T->window.lo < T->sinks.hi)
        T->window.lo = T->sinks.hi;
}

/* The chunks holding keys the tile sees: [*c0, *c1). */
static void tile_chunks(const struct tile *T, int *c0, int *c1)
{
    int first = T->sinks.hi > 0 ? 0 : T->window.lo;
    *c0 = first / ATTN_CHUNK;
    *c1 = chunks_upto(T->window.hi);
}

/* ---- one chunk ---- */

struct task_ctx {
    const struct attention_args *a;
    const struct attention_scratch *sc;
    int group, n_tiles, c_first, n_chunks; /* chunks of a parallel step */
    bool is_wide;          /* the AVX-512 loops (attention_avx512.h) */
};

/* Where the partial of (row r, head h) of a chunk goes: base + r * row +
 * h * head. */
struct part_layout {
    float *base;
    size_t row, head;
};

/* Converts the rows of `spans` (positions; slots relative to chunk start
 * c0) of kv head g into buf; slots in [b0, b1) that no span covers become
 * zeros, so every dot product of the block range is of finite numbers. */
static void load_rows(const struct attention_args *a, bool values, int g,
                      int c0, const struct span *spans, int b0, int b1,
                      float *buf)
{
    const int d = a->head_dim;
    int k = b0;
    for (int i = 0; i < 2; i++) {
        int lo = spans[i].lo - c0, hi = spans[i].hi - c0;
        if (hi <= lo)
            continue;
        if (lo > k)
            memset(buf + (size_t)k * d, 0, (size_t)(lo - k) * d * sizeof(float));
        kv_load_heads(a->kv, a->il, values, c0 + lo, c0 + hi, g * d,
                      buf + (size_t)lo * d, (size_t)d);
        k = hi;
    }
    if (b1 > k)
        memset(buf + (size_t)k * d, 0, (size_t)(b1 - k) * d * sizeof(float));
}

/* All-ones lanes for the positions p .. p+7 in sink or win. */
static __m256 seen8(int p, struct span sink, struct span win)
{
    const __m256i pv = _mm256_add_epi32(_mm256_set1_epi32(p),
                                        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    /* lo <= p < hi as lo - 1 < p and hi > p */
    __m256i in_sink = _mm256_and_si256(
        _mm256_cmpgt_epi32(pv, _mm256_set1_epi32(sink.lo - 1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(sink.hi), pv));
    __m256i in_win = _mm256_and_si256(
        _mm256_cmpgt_epi32(pv, _mm256_set1_epi32(win.lo - 1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(win.hi), pv));
    return _mm256_castsi256_ps(_mm256_or_si256(in_sink, in_win));
}

static float hmax256(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* One query head's view of a chunk: its query, the positions it sees,
 * where its scores and partial go. */
struct head_view {
    const float *q;
    struct span sink, win;
    float *s, *part;
};

/* Scaled scores of 8 keys at slot k, -inf where the head does not look;
 * stored into v->s and folded into the running maximum. */
static inline void store_scores(const struct head_view *v, int c0, int k,
                                __m256 dots, float scale, __m256 *mv)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 x = _mm256_mul_ps(dots, _mm256_set1_ps(scale));
    x = _mm256_blendv_ps(ninf, x, seen8(c0 + k, v->sink, v->win));
    _mm256_storeu_ps(v->s + k, x);
    *mv = _mm256_max_ps(*mv, x);
}

/* From the scores over slots [b0, b1) and their maximum: e^(s - m) for
 * the slots the head sees and 0 elsewhere. Writes m and l into the
 * partial; m = -inf when it sees none. */
static void exp_scores(const struct head_view *v, int b0, int b1, __m256 mv)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    float m = hmax256(mv);
    v->part[PART_M] = m;
    v->part[PART_L] = 0.0f;
    if (m == -INFINITY)
        return;
    mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int k = b0; k < b1; k += 8) {
        __m256 x = _mm256_loadu_ps(v->s + k);
        __m256 e = exp256(_mm256_sub_ps(x, mv));
        e = _mm256_and_ps(e, _mm256_cmp_ps(x, ninf, _CMP_NEQ_OQ));
        _mm256_storeu_ps(v->s + k, e);
        sum = _mm256_add_ps(sum, e);
    }
    v->part[PART_L] = hsum256(sum);
}

/* Scores and their exponentials for one query head over slots [b0, b1)
 * of the chunk starting at c0 (keys in kbuf, by slot). */
static void chunk_scores(const struct head_view *v, const float *kbuf, int d,
                         float scale, int c0, int b0, int b1)
{
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (int k = b0; k < b1; k += 8)
        store_scores(v, c0, k, dot8(v->q, kbuf + (size_t)k * d, d), scale, &mv);
    exp_scores(v, b0, b1, mv);
}

/* chunk_scores for two query heads at once, each key loaded once for
 * both; each head's arithmetic is chunk_scores' own. */
static void chunk_scores2(const struct head_view *va,
                          const struct head_view *vb, const float *kbuf,
                          int d, float scale, int c0, int b0, int b1)
{
    __m256 ma = _mm256_set1_ps(-INFINITY), mb = ma;
    for (int k = b0; k < b1; k += 8) {
        __m256 sa, sb;
        dot8x2(va->q, vb->q, kbuf + (size_t)k * d, d, &sa, &sb);
        store_scores(va, c0, k, sa, scale, &ma);
        store_scores(vb, c0, k, sb, scale, &mb);
    }
    exp_scores(va, b0, b1, ma);
    exp_scores(vb, b0, b1, mb);
}

/* Query head i of tile T (row i / G, head i % G of kv head g's group). */
static struct head_view head_view_of(const struct attention_args *a,
                                     const struct tile *T, int g, int G,
                                     int i, float *s, struct part_layout pl)
{
    int r = i / G, h = i % G;
    return (struct head_view){
        .q = a->q + ((int64_t)(T->t0 + r) * a->n_head + (int64_t)g * G + h) *
                        a->head_dim,
        .sink = T->sink[r], .win = T->win[r],
        .s = s + (size_t)i * ATTN_CHUNK,
        .part = pl.base + r * pl.row + h * pl.head,
    };
}

/* chunk_scores for n query heads, the dot products on 512-bit vectors. */
static void wide_scores(const struct head_view *v, int n, const float *kbuf,
                        int d, float scale, int c0, int b0, int b1)
{
    const float *q[ATTN512_HEADS];
    float *dots[ATTN512_HEADS];
    for (int k = 0; k < n; k++) {
        q[k] = v[k].q;
        dots[k] = v[k].s;
    }
    attn512_dots(q, n, kbuf, d, b0, b1, dots);
    for (int k = 0; k < n; k++) {
        __m256 mv = _mm256_set1_ps(-INFINITY);
        for (int b = b0; b < b1; b += 8)
            store_scores(&v[k], c0, b, _mm256_loadu_ps(v[k].s + b), scale, &mv);
        exp_scores(&v[k], b0, b1, mv);
    }
}

/* The partials of tile T, kv head g, over chunk c. */
static void chunk_partial(const struct task_ctx *x, const struct tile *T,
                          int g, int c, float *scratch, struct part_layout pl)
{
    const struct attention_args *a = x->a;
    const int d = a->head_dim, G = x->group;
    const int c0 = c * ATTN_CHUNK;
    const struct span chunk = {c0, c0 + ATTN_CHUNK};
    struct span spans[2] = {span_and(T->sinks, chunk), span_and(T->window, chunk)};
    int lo = spans[0].hi > spans[0].lo ? spans[0].lo : spans[1].lo;
    int hi = spans[1].hi > spans[1].lo ? spans[1].hi : spans[0].hi;
    if (hi <= lo) {
        for (int r = 0; r < T->nt; r++)
            for (int h = 0; h < G; h++)
                pl.base[r * pl.row + h * pl.head + PART_M] = -INFINITY;
        return;
    }
    /* whole 8-key blocks around the keys seen */
    const int b0 = (lo - c0) / 8 * 8, b1 = (hi - c0 + 7) / 8 * 8;
    float *kbuf = scratch, *vbuf = kbuf + (size_t)ATTN_CHUNK * d;
    float *s = vbuf + (size_t)ATTN_CHUNK * d;
    load_rows(a, false, g, c0, spans, b0, b1, kbuf);
    /* the tile's query heads (row r, head h at r * G + h), a few at once */
    const int n_views = T->nt * G, step = x->is_wide ? ATTN512_HEADS : 2;
    for (int i = 0; i < n_views; i += step) {
        struct head_view v[ATTN512_HEADS];
        int n = n_views - i < step ? n_views - i : step;
        for (int k = 0; k < n; k++)
            v[k] = head_view_of(a, T, g, G, i + k, s, pl);
        if (x->is_wide)
            wide_scores(v, n, kbuf, d, a->scale, c0, b0, b1);
        else if (n == 2)
            chunk_scores2(&v[0], &v[1], kbuf, d, a->scale, c0, b0, b1);
        else
            chunk_scores(&v[0], kbuf, d, a->scale, c0, b0, b1);
    }
    load_rows(a, true, g, c0, spans, b0, b1, vbuf);
    for (int r = 0; r < T->nt; r++) {
        struct span sk = span_and(T->sink[r], chunk), wk = span_and(T->win[r], chunk);
        float *o[ATTN512_HEADS];
        const float *e[ATTN512_HEADS];
        int n = 0;
        for (int h = 0; h < G; h++) {
            float *part = pl.base + r * pl.row + h * pl.head;
            if (part[PART_M] == -INFINITY)
                continue;
            e[n] = s + (size_t)(r * G + h) * ATTN_CHUNK;
            o[n] = part + PART_O;
            memset(o[n], 0, (size_t)d * sizeof(float));
            if (!x->is_wide) {
                weighted_sum(o[n], e[n], vbuf, sk.lo - c0, sk.hi - c0, d);
                weighted_sum(o[n], e[n], vbuf, wk.lo - c0, wk.hi - c0, d);
                continue;
            }
            if (++n == ATTN512_HEADS || h == G - 1) {
                attn512_weighted_sums(o, e, n, vbuf, sk.lo - c0, sk.hi - c0, d);
                attn512_weighted_sums(o, e, n, vbuf, wk.lo - c0, wk.hi - c0, d);
                n = 0;
            }
        }
        if (n > 0) {
            attn512_weighted_sums(o, e, n, vbuf, sk.lo - c0, sk.hi - c0, d);
            attn512_weighted_sums(o, e, n, vbuf, wk.lo - c0, wk.hi - c0, d);
        }
    }
}

/* ---- folding chunks ---- */

static void fold_init(float *st, int d)
{
    st[PART_M] = -INFINITY;
    st[PART_L] = 0.0f;
    memset(st + PART_O, 0, (size_t)d * sizeof(float));
}

/* st = (M, S, O) absorbs a chunk's partial (m, l, o), rescaling both to
 * the larger maximum. */
static void fold(float *st, const float *part, int d)
{
    float m = part[PART_M];
    if (m == -INFINITY)
        return;
    float M = st[PART_M] > m ? st[PART_M] : m;
    float a = expf(st[PART_M] - M), b = expf(m - M);
    st[PART_M] = M;
    st[PART_L] = st[PART_L] * a + part[PART_L] * b;
    float *O = st + PART_O;
    const float *o = part + PART_O;
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    int i = 0;
    for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(O + i, _mm256_fmadd_ps(_mm256_loadu_ps(O + i), av,
                                                _mm256_mul_ps(_mm256_loadu_ps(o + i), bv)));
    for (; i < d; i++)
        O[i] = O[i] * a + o[i] * b;
}

static void fold_finish(const float *st, float *out, int d)
{
    /* A query always sees at least its own position. */
    const float inv = 1.0f / st[PART_L];
    for (int i = 0; i < d; i++)
        out[i] = st[PART_O + i] * inv;
}

static float *out_row(const struct attention_args *a, int t, int head)
{
    return a->out + ((int64_t)t * a->n_head + head) * a->head_dim;
}

/* AVX-512 F and DQ, which attention_avx512.c is built for. */
static bool has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512dq");
}

/* ---- tasks ---- */

/* One tile and kv head, every chunk in turn (batches). */
static void tile_task(void *ctx, int i, int thread)
{
    const struct task_ctx *x = ctx;
    const struct attention_args *a = x->a;
    const int g = i % a->n_head_kv, d = a->head_dim, G = x->group;
    struct tile T;
    tile_init(a, i / a->n_head_kv, &T);
    float *scratch = x->sc->per_thread + (size_t)thread * x->sc->thread_floats;
    float *part = scratch + 2 * (size_t)ATTN_CHUNK * d +
                  (size_t)ATTN_TILE * G * ATTN_CHUNK;
    float *state = part + (size_t)ATTN_TILE * G * (d + PART_O);
    const size_t rec = (size_t)d + PART_O;
    for (int k = 0; k < T.nt * G; k++)
        fold_init(state + k * rec, d);
    int c0, c1;
    tile_chunks(&T, &c0, &c1);
    struct part_layout pl = {part, G * rec, rec};
    for (int c = c0; c < c1; c++) {
        chunk_partial(x, &T, g, c, scratch, pl);
        for (int k = 0; k < T.nt * G; k++)
            fold(state + k * rec, part + k * rec, d);
    }
    for (int r = 0; r < T.nt; r++)
        for (int h = 0; h < G; h++)
            fold_finish(state + (r * G + h) * rec,
                        out_row(a, T.t0 + r, g * G + h), d);
}

/* Partials of a parallel step: (row t, head, chunk c) at
 * ((t * n_head + head) * n_chunks + c - c_first) * rec. */
static struct part_layout split_layout(const struct task_ctx *x,
                                       const struct tile *T, int g, int c)
{
    const struct attention_args *a = x->a;
    const size_t rec = (size_t)a->head_dim + PART_O, nc = (size_t)x->n_chunks;
    float *base = x->sc->partials +
                  (((size_t)T->t0 * a->n_head + (size_t)g * x->group) * nc +
                   (size_t)(c - x->c_first)) * rec;
    return (struct part_layout){base, (size_t)a->n_head * nc * rec, nc * rec};
}

/* One tile, kv head and chunk (decode, short verifies). */
static void chunk_task(void *ctx, int i, int thread)
{
    const struct task_ctx *x = ctx;
    const struct attention_args *a = x->a;
    const int c = x->c_first + i % x->n_chunks;
    const int g = (i / x->n_chunks) % a->n_head_kv;
    struct tile T;
    tile_init(a, i / x->n_chunks / a->n_head_kv, &T);
    float *scratch = x->sc->per_thread + (size_t)thread * x->sc->thread_floats;
    chunk_partial(x, &T, g, c, scratch, split_layout(x, &T, g, c));
}

/* Folds the chunks of one tile and kv head after chunk_task. */
static void fold_task(void *ctx, int i, int thread)
{
    const struct task_ctx *x = ctx;
    const struct attention_args *a = x->a;
    const int g = i % a->n_head_kv, d = a->head_dim, G = x->group;
    struct tile T;
    tile_init(a, i / a->n_head_kv, &T);
    float *state = x->sc->per_thread + (size_t)thread * x->sc->thread_floats;
    for (int r = 0; r < T.nt; r++) {
        for (int h = 0; h < G; h++) {
            fold_init(state, d);
            for (int c = x->c_first; c < x->c_first + x->n_chunks; c++) {
                struct part_layout pl = split_layout(x, &T, g, c);
                fold(state, pl.base + r * pl.row + h * pl.head, d);
            }
            fold_finish(state, out_row(a, T.t0 + r, g * G + h), d);
        }
    }
}

void attention_run(struct pool *pool, const struct attention_scratch *sc,
                   const struct attention_args *a)
{
    struct task_ctx x = {.a = a, .sc = sc, .group = a->n_head / a->n_head_kv,
                         .is_wide = a->head_dim % 16 == 0 && has_avx512()};
    x.n_tiles = (a->n + ATTN_TILE - 1) / ATTN_TILE;
    const int tasks = x.n_tiles * a->n_head_kv;
    /* Chunks any query of the step sees (the first tile starts earliest). */
    struct tile first;
    tile_init(a, 0, &first);
    int c1;
    tile_chunks(&first, &x.c_first, &c1);
    c1 = chunks_upto(a->pos0 + a->n);
    x.n_chunks = c1 - x.c_first;
    size_t need = (size_t)a->n * a->n_head * (size_t)x.n_chunks *
                  ((size_t)a->head_dim + PART_O);
    /* Few tasks for the threads: split each over its chunks. */
    bool split = pool_threads(pool) > 1 && x.n_chunks > 1 &&
                 tasks < 4 * pool_threads(pool) && need <= sc->partial_floats;
    if (!split) {
        pool_run(pool, tasks, tile_task, &x);
        return;
    }
    pool_run(pool, tasks * x.n_chunks, chunk_task, &x);
    pool_run(pool, tasks, fold_task, &x);
}
