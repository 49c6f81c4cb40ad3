/* matmul_amx.c — Q8_0 matrices on AMX tiles (Sapphire Rapids and later).
 * Compiled with AVX-512 and AMX-INT8; matmul.c calls in only after
 * matmul_has_amx().
 *
 * Why: with the weights in cache, the AVX-512 kernel is compute-bound for
 * every token after the first (8 vpdpbusd per 16 blocks per token), so a
 * speculative verify of L tokens costs ~0.2 of a decode step per extra
 * token. One tile multiply (tdpbssd) does 16 rows x 16 tokens x one 32-block
 * in about as long as a single vpdpbusd pass over one token.
 *
 * Layout. A packed matrix is groups of 16 rows (the last padded with zero
 * rows); a group is nb records, one per 32-block: the 16 rows' quants in
 * the B-tile order (dword n of tile row k holds quants 4k..4k+3 of row n)
 * and the 16 rows' scales as floats. Activations are the prepared Q8_0
 * quants (matmul_kernels.h) read straight as the A tile: token t's block b
 * is 32 bytes at act_quants(in, t) + 32 b, tokens in_row_bytes apart.
 *
 * Arithmetic. A tile multiply gives the exact integer dot product of each
 * (row, token, block), the same integer the AVX-512 kernel's accumulator
 * lane holds for that block (it adds the unsigned-weight correction back).
 * The float work then repeats that kernel's steps for each row: the block
 * goes to the lane q8_tile_block() gives it in its tile of 16 blocks,
 * scale = w_scale * x_scale, lane = fma(float(int), scale, lane) tile after
 * tile, then the lanes are summed pairwise as _mm512_reduce_add_ps does
 * (j with j+8, then j+4, j+2, j+1). Here the vectors run over 16 rows
 * instead of 16 lanes, so every result equals the AVX-512 kernel's bit
 * for bit, whichever of the two computes a batch. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "matmul_kernels.h"

#define INLINE static inline __attribute__((always_inline))

enum {
    AMX_ROWS = 16,              /* rows of a group: the tiles' N */
    AMX_TOKENS = 16,            /* tokens of a tile: the tiles' M */
    AMX_PASS = 2 * AMX_TOKENS,  /* tokens per pass over the weights */
};

/* One 32-block of 16 rows. */
struct amx_block {
    int8_t q[8][64];
    float d[AMX_ROWS];
};

size_t matmul_amx_packed_bytes(int64_t n_rows, int64_t n_cols)
{
    int64_t groups = (n_rows + AMX_ROWS - 1) / AMX_ROWS;
    return (size_t)groups * (size_t)(n_cols / 32) * sizeof(struct amx_block);
}

void matmul_amx_pack(const void *w, int64_t n_rows, int64_t n_cols, void *out)
{
    const int64_t nb = n_cols / 32, groups = (n_rows + AMX_ROWS - 1) / AMX_ROWS;
    const size_t rb = (size_t)nb * 34;
    struct amx_block *blk = out;
    for (int64_t g = 0; g < groups; g++) {
        for (int64_t b = 0; b < nb; b++, blk++) {
            memset(blk, 0, sizeof *blk);
            for (int n = 0; n < AMX_ROWS; n++) {
                int64_t r = g * AMX_ROWS + n;
                if (r >= n_rows)
                    continue;
                const uint8_t *src = (const uint8_t *)w + (size_t)r * rb +
                                     (size_t)b * 34;
                uint16_t h;
                memcpy(&h, src, 2);
                blk->d[n] = _cvtsh_ss(h);
                for (int k = 0; k < 8; k++)
                    memcpy(&blk->q[k][4 * n], src + 2 + 4 * k, 4);
            }
        }
    }
}

/* ---- the kernel ---- */

/* Tile registers: blocks alternate between two sets so that one block's
 * multiply overlaps the next one's loads (tiles are not renamed): even
 * blocks use C 0, A 1, B 4; odd blocks C 2, A 3, B 5; tokens 16..31 of a
 * pass use C 6, A 7 with the block's B. */
struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void configure(int n0, int n1)
{
    struct tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int k = 0; k < 2; k++) {
        c.rows[2 * k] = c.rows[2 * k + 1] = (uint8_t)n0;
        c.colsb[2 * k] = 64;
        c.colsb[2 * k + 1] = 32;
        c.rows[4 + k] = 8;
        c.colsb[4 + k] = 64;
    }
    if (n1 > 0) {
        c.rows[6] = c.rows[7] = (uint8_t)n1;
        c.colsb[6] = 64;
        c.colsb[7] = 32;
    }
    _tile_loadconfig(&c);
}

/* How far ahead the weights are prefetched, in blocks. */
enum { PREFETCH_BLOCKS = 4 };

INLINE void prefetch_block(const struct amx_block *blk)
{
    const char *p = (const char *)blk;
#pragma GCC unroll 9
    for (size_t off = 0; off < sizeof *blk; off += 64)
        _mm_prefetch(p + off, _MM_HINT_T0);
}

/* Integer dot products of one row group's blocks [b0, b0 + count) with the
 * pass's tokens, into ints[block - b0][token][row]. */
static void group_ints(const struct amx_block *blk, const int8_t *a,
                       size_t stride, int b0, int count, int n1,
                       int32_t (*ints)[AMX_PASS][AMX_ROWS])
{
    const int8_t *a1 = a + AMX_TOKENS * stride;
    int i = 0;
    for (; i + 2 <= count; i += 2) {
        const int b = b0 + i;
        prefetch_block(&blk[b + PREFETCH_BLOCKS]);
        prefetch_block(&blk[b + PREFETCH_BLOCKS + 1]);
        _tile_loadd(4, blk[b].q, 64);
        _tile_loadd(1, a + 32 * b, stride);
        _tile_zero(0);
        _tile_loadd(5, blk[b + 1].q, 64);
        _tile_loadd(3, a + 32 * (b + 1), stride);
        _tile_zero(2);
        _tile_dpbssd(0, 1, 4);
        _tile_dpbssd(2, 3, 5);
        _tile_stored(0, ints[i][0], 64);
        _tile_stored(2, ints[i + 1][0], 64);
        if (n1 > 0) {
            _tile_zero(6);
            _tile_loadd(7, a1 + 32 * b, stride);
            _tile_dpbssd(6, 7, 4);
            _tile_stored(6, ints[i][AMX_TOKENS], 64);
            _tile_zero(6);
            _tile_loadd(7, a1 + 32 * (b + 1), stride);
            _tile_dpbssd(6, 7, 5);
            _tile_stored(6, ints[i + 1][AMX_TOKENS], 64);
        }
    }
    if (i < count) {
        const int b = b0 + i;
        _tile_loadd(4, blk[b].q, 64);
        _tile_loadd(1, a + 32 * b, stride);
        _tile_zero(0);
        _tile_dpbssd(0, 1, 4);
        _tile_stored(0, ints[i][0], 64);
        if (n1 > 0) {
            _tile_zero(6);
            _tile_loadd(7, a1 + 32 * b, stride);
            _tile_dpbssd(6, 7, 4);
            _tile_stored(6, ints[i][AMX_TOKENS], 64);
        }
    }
}

/* lanes[0] = sum of the 16 lane vectors, paired as _mm512_reduce_add_ps
 * pairs the lanes of one vector. */
INLINE __m512 lane_sum(__m512 v[16])
{
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        v[j] = _mm512_add_ps(v[j], v[j + 8]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        v[j] = _mm512_add_ps(v[j], v[j + 4]);
    v[0] = _mm512_add_ps(v[0], v[2]);
    v[1] = _mm512_add_ps(v[1], v[3]);
    return _mm512_add_ps(v[0], v[1]);
}

/* Rows [r, r + 16) of y for the pass's tokens t0 .. t0 + nt - 1. */
static void group_rows(const struct amx_block *blk, int64_t nb,
                       const struct matmul_input *in, int t0, int nt,
                       float *y, int64_t ldy, int64_t r, __mmask16 keep)
{
    int32_t ints[Q8_TILE_BLOCKS][AMX_PASS][AMX_ROWS]
        __attribute__((aligned(64)));
    __m512 acc[AMX_PASS][16];
    const int n0 = nt < AMX_TOKENS ? nt : AMX_TOKENS, n1 = nt - n0;
    const int8_t *a = act_quants(in, t0);
    const int64_t tiles = (nb + Q8_TILE_BLOCKS - 1) / Q8_TILE_BLOCKS;
    for (int64_t g = 0; g < tiles; g++) {
        const int b0 = (int)(g * Q8_TILE_BLOCKS);
        const int count = nb - b0 < Q8_TILE_BLOCKS ? (int)(nb - b0)
                                                   : Q8_TILE_BLOCKS;
        group_ints(blk, a, in->row_bytes, b0, count, n1, ints);
        for (int t = 0; t < nt; t++) {
            const float *xd = q8_scales(in, t0 + t);
            __m512 v[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                const int k = q8_tile_block(j);
                __m512 prev = g == 0 ? _mm512_setzero_ps() : acc[t][j];
                if (k >= count) {
                    v[j] = prev;
                    continue;
                }
                __m512 scale = _mm512_mul_ps(_mm512_load_ps(blk[b0 + k].d),
                                             _mm512_set1_ps(xd[8 * (b0 + k)]));
                v[j] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(_mm512_load_si512(ints[k][t])), scale,
                    prev);
            }
            if (g + 1 < tiles) {
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++)
                    acc[t][j] = v[j];
            } else {
                _mm512_mask_storeu_ps(y + (int64_t)(t0 + t) * ldy + r, keep,
                                      lane_sum(v));
            }
        }
    }
}

void matmul_rows_amx(const void *packed, const struct matmul_input *in,
                     float *y, int64_t ldy, int64_t n_rows, int64_t row_begin,
                     int64_t row_end)
{
    const int64_t nb = in->n_cols / 32;
    const struct amx_block *base = packed;
    int configured = -1;
    for (int t0 = 0; t0 < in->n_tokens; t0 += AMX_PASS) {
        int nt = in->n_tokens - t0 < AMX_PASS ? in->n_tokens - t0 : AMX_PASS;
        if (nt != configured) {
            configure(nt < AMX_TOKENS ? nt : AMX_TOKENS,
                      nt > AMX_TOKENS ? nt - AMX_TOKENS : 0);
            configured = nt;
        }
        for (int64_t r = row_begin / AMX_ROWS * AMX_ROWS; r < row_end;
             r += AMX_ROWS) {
            /* rows of this group inside [row_begin, row_end) and the matrix */
            int64_t lo = r < row_begin ? row_begin : r;
            int64_t hi = r + AMX_ROWS < row_end ? r + AMX_ROWS : row_end;
            hi = hi < n_rows ? hi : n_rows;
            if (hi <= lo)
                continue;
            __mmask16 keep = (__mmask16)(((1u << (hi - lo)) - 1) << (lo - r));
            group_rows(base + (r / AMX_ROWS) * nb, nb, in, t0, nt, y, ldy, r,
                       keep);
        }
    }
    _tile_release();
}
