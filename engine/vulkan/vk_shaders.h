/* vk_shaders.h — the compute shaders of the Vulkan backend, as embedded
 * SPIR-V, and the push-constant blocks they take.
 *
 * shaders/NAME.comp is compiled by glslc at build time (matmul.comp once
 * per weight type, with -DWTYPE_<T>) and linked into the binary; nothing
 * is compiled at run time. Every buffer is bound as an array of 32-bit
 * words (uint or float, std430); quantized bytes are unpacked from words
 * in the shader, so no 8/16-bit storage feature is needed.
 *
 * Each struct below is the shader's push_constant block, member for
 * member (all 4-byte scalars); the comment before it gives the bindings
 * and the dispatch grid the host records. */
#ifndef KK_VK_SHADERS_H
#define KK_VK_SHADERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vk_spirv {
    const char *name;        /* e.g. "matmul_q8_0", "rmsnorm" */
    const uint32_t *code;
    size_t bytes;
};

/* The embedded shader `name`, or NULL when the build has none of that
 * name. */
const struct vk_spirv *vk_shader_find(const char *name);
/* The i-th embedded shader (in the Makefile's order), or NULL past the
 * last: for walking them all. */
const struct vk_spirv *vk_shader_at(size_t i);

/* matmul_<t>, t in f32 f16 bf16 q8_0 q4_0 q5_0 q4_k q6_k: for up to
 * MM_MAX_MATS matrices W_m of one type and width n_cols,
 *   mode MM_STORE: Y_m[t][r] = sum_c W_m[r][c] * x[t][c]
 *   mode MM_ADD:   Y_0[t][r] += sum_c W_0[r][c] * x[t][c]
 *   mode MM_GATED: Y_0[t][r] = act(W_0[r] . x[t]) * (W_1[r] . x[t]), act
 *                  SiLU or (use_gelu) GELU as gated_act computes them
 * for t < n_tokens, r < n_rows[m]. A token's result has the same bits
 * whatever the batch it is computed in.
 * bindings: 0 W[MM_MAX_MATS] (the matrices' bytes, row r at r * row_bytes:
 *           GGUF blocks, Q8_0 rearranged by vk_model_repack_rows),
 *           1 X (float, n_tokens rows of n_cols),
 *           2 Y[MM_MAX_MATS] (float, n_tokens rows of n_rows[m]),
 *           3 NORM (float, n_cols: the norm's weights; read only by the
 *           _norm_ forms, any buffer otherwise).
 *           Unused array entries may repeat a used buffer.
 * The _norm_ forms (matmul_one_norm_<t>, matmul_t4_norm_<t>,
 * matmul_rows_norm_<t>) multiply each row of X RMS-normed first, with
 * NORM's weights and epsilon eps: the bits rmsnorm's output would give
 * the plain form.
 * Forms: matmul_<t> for GPUs, in y-groups of MM_TOKENS tokens; the same
 * for small batches, which keep fewer partial sums and run faster:
 * matmul_one_<t> (n_tokens = 1: decode), matmul_t4_<t> and matmul_t8_<t>
 * (y-groups of 4 and 8 tokens); each gives a token the bits every
 * other GPU form gives it, alone or in any batch. matmul_rows_<t>: one
 * invocation per row, for devices whose invocations are a CPU's SIMD
 * lanes (lavapipe).
 * grid: row groups of teams x slots rows (MM_GATED: teams x slots / 2
 * rows of both matrices) for the GPU forms (vk_matmul_forms),
 * MM_ROWWISE_ROWS rows (or row pairs) for matmul_rows_<t>. Matrix m's
 * groups are numbered from start[m] (start[0] = 0; ~0u for a matrix not
 * in the dispatch; MM_GATED numbers only matrix 0's). groups_y =
 * ceil(n_tokens / the form's tokens per y-group). Row
 * groups beyond the device's grid width may spill into z: group g = x +
 * z * groups_x; a group past its matrix's last row does nothing. */
enum { MM_SLOTS = 4, MM_TOKENS = 16, MM_ROWWISE_ROWS = 64, MM_MAX_MATS = 3 };
enum { MM_STORE = 0, MM_ADD = 1, MM_GATED = 2 };
enum { MM_BINDINGS = 4 };   /* W[], X, Y[], NORM */
struct vk_push_matmul {
    uint32_t n_cols, row_bytes, n_tokens, mode;
    uint32_t n_rows[MM_MAX_MATS];
    uint32_t start[MM_MAX_MATS];
    uint32_t use_gelu;
    float eps;
    uint32_t lanes;   /* the integer forms' lanes per row (vk_qx_lanes) */
};

/* The GPU forms of matmul_<t> by batch size, smallest first: the first
 * whose max_batch holds a batch runs it, in y-groups of its max_tokens
 * (the last takes any batch). A workgroup is `teams` teams of 64 threads,
 * each team on `slots` rows of its own (the Makefile's MATMUL_DEFS_
 * compile each form to match: -DMM_NT, -DMM_TEAMS, -DMM_NS). */
struct vk_matmul_form {
    const char *prefix;   /* the shader is matmul_<prefix><t> */
    int max_tokens;       /* tokens a workgroup takes (a y-group) */
    int max_batch;        /* the largest batch it runs (INT_MAX: any) */
    int teams;
    int slots;            /* rows a team (-DMM_NS), its norm form's too */
    /* The same form with the norm folded in (matmul_<norm_prefix><t>), or
     * NULL: then the norm is a dispatch of its own before the matmul; and
     * its teams (it may share x among more rows: every workgroup reads
     * the whole of x once more for the norm). */
    const char *norm_prefix;
    int norm_teams;
};
/* The rowwise form, and its form with the norm folded in. */
#define VK_MATMUL_ROWS_PREFIX "rows_"
#define VK_MATMUL_ROWS_NORM_PREFIX "rows_norm_"
enum { VK_MATMUL_FORMS = 5 };
extern const struct vk_matmul_form vk_matmul_forms[VK_MATMUL_FORMS];
/* The 4-token form's place in vk_matmul_forms (the one-token form's is 0). */
enum { VK_FORM_T4 = 1 };
/* The one-token form (the first) also takes batches of up to
 * VK_ONE_MAX_BATCH tokens, one y-group each, of matrices under
 * VK_DECODE_MIN_ROWS rows: each y-group reads the weights again, which a
 * layer's matrix serves from L2 and a vocabulary's from memory. On the
 * H200 (1B shape, tools/vk_profile/eval_blocks.c, 1,000 passes after 256
 * positions, two rounds) a block of 2 took 1.269-1.301 ms against
 * 1.398-1.407 in the 4-token form (the o and down products 13.2 us against
 * 16.4: 512 workgroups instead of 128); up to 3 and 4, blocks of 3 took
 * 1.395-1.432 against 1.423-1.426 and of 4 1.554-1.555 against
 * 1.492-1.514. The integer forms did not gain so (a block of 2 in the
 * one-token integer form: 1.320-1.343). */
enum { VK_ONE_MAX_BATCH = 2 };
/* Batches of up to VK_SMALL_MAX_BATCH tokens take the 4-token form, in
 * y-groups of 4, rather than a form of more tokens a workgroup, where the
 * weights (all the call's matrices) read again by the y-groups after the
 * first come to less than VK_SMALL_EXTRA_BYTES: small matrices leave the
 * forms of more tokens few workgroups (48 for the default model's o and
 * down in t8s2), and reading them again from L2 costs little. On the H200
 * (two rounds, one call) the default model verified 8 tokens in 0.645 ms
 * against 0.722 and 12 in 0.742 against 0.891-0.893, smollm2-360m's shape
 * 8 in 2.316-2.319 against 2.413-2.417 (q/k/v, o and down in y-groups;
 * with o alone, under 1 MiB, 2.407-2.413 against 2.423-2.467 in another
 * call) and 12 in 3.233-3.238 against 3.281-3.283. Up to 16 the default
 * model took 16 tokens in 0.866 against 0.931-0.934 but smollm2-360m's
 * 3.521-3.522 against 3.449-3.450 (o in 4 y-groups), so 12. No matrix of
 * the 1B shape is this small. */
enum { VK_SMALL_EXTRA_BYTES = 3 << 20, VK_SMALL_MAX_BATCH = 12 };

/* The decode forms for devices whose subgroups are all VK_DECODE_SUBGROUP
 * wide (vk_device_subgroup_size): matmul_dec_<t> and matmul_dec_norm_<t>,
 * one token, the bits of every other GPU form. A workgroup is
 * VK_DECODE_SUBGROUPS subgroups, each taking row sets of MM_SLOTS rows
 * (MM_GATED: MM_SLOTS / 2 of both), numbered as the groups above, in turn:
 * set k, k + stride, ... with stride = groups_x x VK_DECODE_SUBGROUPS, so
 * groups_x may be anything from 1 (no z). */
#define VK_MATMUL_DECODE_PREFIX "dec_"
#define VK_MATMUL_DECODE_NORM_PREFIX "dec_norm_"
enum { VK_DECODE_SUBGROUP = 32, VK_DECODE_SUBGROUPS = 4 };
/* The decode forms pay only on matrices of many rows (the output's
 * vocabulary): measured on the H200 (1B shape, Q8_0), the output matrix's
 * product took 125 us against 229 in matmul_one_norm, but the layers'
 * matrices (512 to 8,192 rows) were slower: ffn down 15.6 us against
 * 11.2, gate and up 23.8 against ~20. */
enum { VK_DECODE_MIN_ROWS = 16384 };
/* The grid's cap: the output matrix (32,064 row sets) took 125 us in 1,024
 * workgroups, 133 in 8,016 (one set per subgroup). */
enum { VK_DECODE_MAX_WORKGROUPS = 1024 };

/* The int8 tile forms, for devices that multiply int8 tiles of 16 x 8 x
 * 32 per subgroup (vk_device_has_int8_mma): matmul_mma<rows>_q8_0, x
 * quantized to int8 per block of 32 as the CPU's Q8_0 x is. A workgroup
 * takes vk_mma_rows[form] rows (MM_GATED: of both matrices; the last tile
 * of a matrix may be short) and VK_MMA_TOKENS tokens: grid (n_tokens /
 * VK_MMA_TOKENS rounded up, row groups numbered as above, 1) — token tiles
 * first, so that the tiles of one row tile run together and share its
 * weights in L2. The forms differ only in which workgroup makes a sum, not
 * in how, so they give a token the same bits (test_vk_ops). Rows of
 * VK_MMA_WIDE_COLS or more take 64 rows a workgroup; narrower ones the
 * form of most rows whose grid has VK_MMA_BUSY workgroups, else the last.
 * Measured on the H200, prefill of 256 tokens: the 1B shape 17,956-18,129
 * tok/s against 9,094-9,158 with the tiles of 16 rows by 8 tokens before
 * (after 4,096 positions 11,642 against 7,182), and 15,792-15,824 when its
 * o, down and q/k/v products took 32 rows for a busier grid (14,265-14,326
 * all in 32, 8,801-8,892 in 16): on long rows more workgroups only repeat
 * the staging of x. The default model (384 columns) 125,100-126,706 in
 * 16 or 32 rows against 117,748-118,959 in 64 (a build staging 4 blocks
 * in one stage).
 *
 * It takes prefill's batches only (VK_MMA_MIN_TOKENS and more; a verify
 * block has at most 17 rows): a token's bits there differ from the other
 * forms' (x quantized), and a verified token must get the bits of the same
 * token decoded. (In the form of 16 rows by 8 tokens that came before,
 * every batch size would have verified 8 tokens for 1.11 decode steps on
 * the 1B shape, but decoding took 2.41 ms a token against 1.45.) */
#define VK_MATMUL_MMA_PREFIX "mma"
enum { VK_MMA_FORMS = 3, VK_MMA_TOKENS = 64, VK_MMA_MIN_TOKENS = 32,
       VK_MMA_BUSY = 256, VK_MMA_WIDE_COLS = 1024 };
/* Rows a workgroup of each form (the Makefile's -DMMA_BANDS=rows/16). */
extern const int vk_mma_rows[VK_MMA_FORMS];
/* The form's shader name, matmul_mma<rows>_q8_0, into name (cap bytes). */
void vk_mma_shader_name(char *name, size_t cap, int form);

/* The integer forms of Q8_0, for devices with packed int8 dot products
 * (vk_device_has_int_dot): matmul_qx1_q8_0, matmul_qx4_q8_0,
 * matmul_qx8_q8_0 and matmul_qx8r2_q8_0 (y-groups of 1, 4, 8 and 8 tokens,
 * the last on two rows a unit for batches of up to VK_QX_MAX_BATCH in
 * several: vk_qx_forms), and the same with the norm folded in
 * (matmul_qx1_norm_q8_0, ...). x is quantized per block of 32 as the
 * CPU's Q8_0 x is, and a token gets the same bits in each of them, which
 * are not the float forms' bits: so a product they take in a decode batch
 * they take in every verify batch (the backend's rule, qx_takes, is the
 * matrix's type and width and whether x is normed first, never the batch;
 * prefill's longer batches may take other forms: no decoded token meets
 * them). A workgroup is VK_QX_INVOCATIONS invocations in units of `lanes`
 * (from vk_qx_lanes), each unit on `rows` rows at a time (vk_qx_forms;
 * MM_GATED: rows of both matrices); row sets of VK_QX_INVOCATIONS / lanes
 * x rows rows, unit u taking rows u, u + units, ... of a set, are numbered
 * as the groups above and taken in turn: set k, k + groups_x, ... (no z),
 * so groups_x may be anything from 1; the backend caps it at the form's
 * max_workgroups. */
#define VK_MATMUL_QX_PREFIX "qx"
/* VK_QX_MAX_BATCH: the longest verify batch, a block of 16 drafted tokens
 * and the last accepted one (a verify batch of 17 in other forms than the
 * decoded tokens' broke speculative = plain in test_vulkan). */
enum { VK_QX_INVOCATIONS = 256, VK_QX_MAX_BATCH = 17, VK_QX_FORMS = 4 };
/* The integer forms take rows of VK_QX_MIN_COLS values or more. On the
 * H200 the default model (384-wide rows) decoded 0.80-0.81 ms a token
 * through them against 0.76 and the 360M shape (960) 1.84-1.91 against
 * 1.76, while the 1B shape (2,048 and 8,192) got faster. A matrix is in
 * or out whatever the batch, so its bits stay the same in every batch. */
enum { VK_QX_MIN_COLS = 1024 };
/* The integer forms, smallest batches first: a batch takes the first whose
 * max_batch holds it, in y-groups of `tokens`. matmul_qx<name>[norm_]q8_0
 * (the Makefile's -DMM_NT=tokens -DQX_ROWS=rows for each; they must
 * match), with its cap on groups_x. */
struct vk_qx_form {
    const char *name;   /* "1_", "4_", ...: after VK_MATMUL_QX_PREFIX */
    int tokens, rows, max_batch;
    uint32_t max_workgroups;
};
extern const struct vk_qx_form vk_qx_forms[VK_QX_FORMS];
/* The form that takes a batch of n tokens (n <= VK_QX_MAX_BATCH). */
int vk_qx_form_of(int n);
/* Its shader's name, matmul_qx<name>[norm_]q8_0, into name (cap bytes). */
void vk_qx_shader_name(char *name, size_t cap, int form, bool norm);
/* The integer forms' lanes per row for a dispatch of `rows` rows (MM_GATED:
 * of one matrix) of n_cols on a device whose subgroups are `subgroup`
 * wide: 8, 16 or 32, more where rows are few, so that every matrix keeps
 * the GPU busy; never more than a subgroup (the lanes meet by shuffles) or
 * than the row has blocks. A function of the shape alone: a matrix's
 * products have the same bits in every batch. */
uint32_t vk_qx_lanes(uint32_t rows, uint32_t n_cols, uint32_t subgroup);

/* attention's workgroup size (attention.comp's ATT_WG; they must match);
 * attention_cpu, for CPU-backed devices, has 64. */
enum { VK_ATTENTION_INVOCATIONS = 512 };

/* The most invocations any shader's workgroup has: attention's, or 64 x
 * the most teams of a matmul form. */
int vk_shader_max_invocations(void);

/* rmsnorm: y = x / sqrt(mean(x^2) + eps) * w over each of n_groups groups
 * of dim values. bindings: 0 X (float), 1 Y (float; may be the same buffer
 * as X: in place), 2 W (float, dim). grid: (n_groups, 1, 1). */
struct vk_push_rmsnorm {
    uint32_t dim, n_groups;
    float eps;
};
/* rmsnorm_add: y += x / sqrt(mean(x^2) + eps) * w, the same bindings, push
 * constants and grid with Y a second buffer (not X): the bits of rmsnorm
 * into X, then add of X into Y. */

/* rope: rotates the first n_rot dims of each of n_heads heads (head_dim
 * apart) of n_rows rows, in place. style 0 (NORM) pairs (2i, 2i+1),
 * 1 (NEOX) pairs (i, i + n_rot/2). The angles come precomputed by the
 * host, so they are the CPU's to the bit: CS[(row * (n_rot/2) + i) * 2]
 * is cos, + 1 sin. bindings: 0 X (float), 1 CS (float).
 * grid: (ceil(n_rows * n_heads * n_rot/2 / 64), 1, 1). */
struct vk_push_rope {
    uint32_t n_rows, n_heads, head_dim, n_rot, style;
};

/* add: x[i] += y[width ? i % width : i] for i < count (width > 0 broadcasts
 * one row of y, e.g. a bias). bindings: 0 X (float), 1 Y (float).
 * grid: (min(ceil(count / 256), ELEMWISE_MAX_GROUPS), 1, 1), grid-stride loop. */
enum { ELEMWISE_MAX_GROUPS = 65535 };
struct vk_push_add {
    uint32_t count, width;
};

/* gated_act: gate[i] = act(gate[i]) * up[i] for i < count; act is SiLU, or
 * with use_gelu the tanh-approximated GELU evaluated as ggml does it:
 * 0 for g <= -10, g for g >= 10, else f16(gelu(f16(g))) where f16() rounds
 * to the nearest half, ties to even. bindings: 0 GATE (float, in/out),
 * 1 UP (float). grid as for add. */
struct vk_push_gated_act {
    uint32_t count, use_gelu;
};

/* kv_store: converts n_rows rows of kv_dim floats into the KV storage type,
 * rows packed back to back (row_bytes each, byte-addressed: rows need not
 * start on a word). type 0 f32, 1 f16 (nearest, ties to even), 2 q8_0:
 * blocks of `block` values, each an f16 scale d = f16(amax / 127) then
 * `block` int8 q = roundEven(x * (1 / (amax / 127))) (0 when amax is 0) —
 * kv.c's store_row, to the bit. Every output word is written by exactly
 * one invocation (bytes of one word may belong to two blocks or rows).
 * The rows go to DST packed from word 0 (the staging rows), or, in_place,
 * straight into the slots of positions pos0.. of a layer's rows under
 * policy (0 full, 1 ring, 2 sink+window; capacity and n_sink as in kv.h),
 * rows then of whole words (row_bytes a multiple of 4).
 * bindings: 0 SRC (float), 1 DST (uint).
 * grid: (ceil(ceil(n_rows * row_bytes / 4) / 64), 1, 1). */
struct vk_push_kv_store {
    uint32_t n_rows, kv_dim, type, block, row_bytes;
    uint32_t in_place, pos0, policy, capacity, n_sink;
};

/* rope_kv_store: rope of Q in place (n_rows rows of n_head heads), then
 * kv_store of K rotated the same way (rope's result, not written back to
 * K) and of V (n_rows rows of n_head_kv heads each) into the staging rows,
 * all as rope and kv_store would: kv_dim = n_head_kv * head_dim. The rows
 * go where kv_store puts them (the cache bound as its own stage buffers
 * when in_place), pos0 being word pos_at of CS: the batch's first position
 * comes from a buffer, not a push constant, so that a decode step records
 * the same commands at every position (vk_device.h, replays).
 * bindings: 0 Q (float), 1 K (float), 2 V (float), 3 CS (the angles, as
 * for rope, and the word pos_at), 4 K stage, 5 V stage (uint).
 * grid: (max(ceil(n_rows * n_head * n_rot/2 / 64),
 *            ceil(ceil(n_rows * row_bytes / 4) / 64)), 3, 1). */
struct vk_push_rope_kv_store {
    uint32_t n_rows, n_head, n_head_kv, head_dim, n_rot, style;
    uint32_t type, block, row_bytes, in_place, pos_at;
    uint32_t policy, capacity, n_sink;   /* in_place: the layer's slots */
    float eps;   /* rope_kv_store_norm's */
};
/* rope_kv_store_norm: rope_kv_store of Q and K whose every head was first
 * RMS-normed with eps (the bits of rmsnorm over groups of head_dim values
 * of Q, with weights QW, and of K, with KW, then rope_kv_store), for rows
 * whose bytes split into n_head_kv heads of whole words (row_bytes /
 * n_head_kv a multiple of 4; for q8_0, head_dim a multiple of block).
 * bindings: those of rope_kv_store, then 6 QW, 7 KW (float, head_dim each).
 * grid: (n_head + n_head_kv, n_rows, 1): a workgroup per head of a row, of
 * Q, then of K and V. */

/* attention: for query row t (position p = pos0 + t, pos0 word pos_at of
 * POS, as in rope_kv_store) and head h:
 *   out[t][h] = sum_k softmax_k(scale * q[t][h] . K[k][g]) V[k][g],
 *   g = h / (n_head / n_head_kv),
 * over the positions k the query sees (kv.h's kv_visible): w = layer_window
 * when policy is 2 (sink+window), else model_window (0: no limit);
 * sink_end = policy 2 ? min(n_sink, p + 1) : 0;
 * lo = (w > 0 && p - w + 1 > sink_end) ? p - w + 1 : sink_end;
 * k in [0, sink_end) and [lo, p].
 * Row of position k: k >= pos0 is row k - pos0 of the stage buffers (this
 * batch), unless stage_in_place (the batch written straight into its
 * slots); else slot s of the cache buffers, s = k
 * (policy 0, full), k % capacity (1, ring), k < n_sink ? k : n_sink +
 * (k - n_sink) % (capacity - n_sink) (2). Rows are row_bytes apart,
 * stored as kv_store writes them (type, block); head g's values start at
 * value g * head_dim.
 * bindings: 0 Q (float, n_rows x n_head x head_dim), 1 K cache, 2 V cache,
 *           3 K stage, 4 V stage (uint), 5 OUT (float, like Q), 6 POS
 *           (uint).
 * grid: (n_head, n_rows, 1). attention_cpu is the same in smaller
 * workgroups (other sums' order, the same contract). */
struct vk_push_attention {
    uint32_t n_rows, pos_at, n_head, n_head_kv, head_dim;
    uint32_t type, block, row_bytes;
    uint32_t policy, capacity, n_sink, layer_window, model_window;
    float scale;
    uint32_t stage_in_place;
    /* attention_rope only */
    uint32_t n_rot, style, has_norm, head_bytes;
    float eps;
    /* attention_rope: splits of long rows (below) */
    uint32_t split_keys, split_group, max_splits, split_stride;
};

/* attention_rope: rope_kv_store (with has_norm, rope_kv_store_norm) of a
 * batch of at most VK_ROPE_ATTENTION_ROWS rows straight into their slots
 * (as with in_place), then attention of its queries, in one dispatch:
 * out and the slots' bytes are those of the two dispatches (to the bit on
 * lavapipe; within a rounding of a rotation on the NVIDIA driver, whose
 * compiler rounds one of the two its own way). Q, K and V are
 * the products as they come (Q is not changed); the rows must split into
 * n_head_kv heads of whole words, head_bytes each (for q8_0, head_dim a
 * multiple of block), and a workgroup keeps its kv head's keys and values
 * of the batch in shared memory: 2 n_rows head_bytes at most
 * VK_ROPE_ATTENTION_BYTES.
 *
 * Splits: a row that sees n_vis > split_keys positions (split_keys > 0)
 * is cut into at most max_splits splits of row_keys positions, a multiple
 * of split_keys (the last may be shorter; att_split.glsl), in the order
 * attention numbers them (0 .. n_vis - 1). Split s of head h of row t
 * writes a partial of head_dim + 2 floats to PART at
 * ((t n_head + h) split_stride + s) (head_dim + 2), split_stride at least
 * the most splits of a row of the batch: its largest dot product
 * m = max q.k, the sum l of e^(scale (q.k - m)) over its positions, and
 * head_dim values sum e^(scale (q.k - m)) V (scale > 0). The last of a
 * row's workgroups (of heads h..) to write its partials makes those heads'
 * outputs from them, splits added in order (att_merge.glsl: with M the
 * largest m_s and w_s = e^(scale (m_s - M)), out = sum_s w_s o_s /
 * sum_s w_s l_s). Which is last is counted in COUNTS[t n_head + h] (one
 * word per row and head), which must be 0 before the dispatch and is 0
 * after it: the last workgroup clears it.
 * Workgroup z takes splits z split_group .. (z + 1) split_group - 1 of its
 * row (those that exist); a row not split is z = 0's whole, as without
 * splits. The splits of a row depend on its position and the push
 * constants alone, which the backend keeps the same for every batch, so a
 * token gets the same bits decoded as verified. Why: a decode step has
 * n_head workgroups, too few to fill a GPU, and each took its row's
 * chunks of 512 positions in turn: on the H200, decoding the 1B shape
 * after 8,000 positions took 3.8 ms a token, 2.5 after 4,096, against 1.1
 * after 256.
 * bindings: 0 Q (float), 1 K cache, 2 V cache (uint, written), 3 K
 *           (float), 4 V (uint), 5 OUT, 6 POS and the angles
 *           (rope_kv_store's CS), 7 QW, 8 KW (float; any buffer when
 *           has_norm is 0), 9 PART (float, written; any buffer when
 *           split_keys is 0), 10 COUNTS (uint, written; likewise).
 * grid: (n_head, n_rows, ceil(most splits of a row / split_group));
 * attention_rope_cpu as attention_cpu. */
#define VK_ROPE_ATTENTION_BYTES 17408
#define VK_ROPE_ATTENTION_ROWS 17
/* attention_h2, attention_h4, attention_rope_h2 and attention_rope_h4:
 * attention and attention_rope for 2 or 4 query heads of one kv head a
 * workgroup, heads x heads .. x heads + heads - 1 of workgroup x (grid:
 * (n_head / heads, as above)), each head's output the bits the one-head
 * shader gives it; for devices whose subgroups are at least
 * VK_ATTENTION_HEADS_SUBGROUP wide. Each key and value is loaded once for
 * all the heads. */
#define VK_ATTENTION_HEADS_SUBGROUP 8
/* The fewest workgroups a batch's grid of several heads a workgroup is
 * left with (backend_vulkan.c's attention_heads): about one to each
 * multiprocessor of an H200 (132). */
#define VK_ATTENTION_HEADS_WORKGROUPS 128
/* The fewest positions a split takes (one chunk of the GPU attention's
 * 512 threads), and the splits of a row's heads together at most (more
 * heads than that: one split a head). On the H200 (1B shape, 32 heads,
 * decoding after 8,000 positions): 4 splits a head (128 workgroups, about
 * one to each of its 132 multiprocessors, which a workgroup of 512
 * threads at ~117 registers fills) 1.80 ms a token, 8 1.85, 16 1.95;
 * after 2,048, 4 splits 1.29 ms, 5 1.41 (two waves of workgroups). */
#define VK_ATTENTION_SPLIT_KEYS 512
#define VK_ATTENTION_SPLIT_HEADS 128
/* The most workgroups the splits of a batch are spread over (a workgroup
 * then takes several of its row's splits in turn). */
#define VK_ATTENTION_SPLIT_WORKGROUPS 512
/* The most splits of a row (1: none is split) among a batch's n rows at
 * positions pos0.. of layer L, whose model window is `window` (kv.h's
 * kv_visible): shaders/att_split.glsl's rule, which the shaders follow,
 * applied on the host for the grid and split_stride. */
struct kv_layer;
uint32_t vk_attention_most_splits(const struct kv_layer *L, int window,
                                  int pos0, int n, uint32_t split_keys,
                                  uint32_t max_splits);

/* argmax: the greedy choice of each of n_rows rows of `width` values —
 * the index of the largest, the first of equal ones (-0 equals +0), never a
 * NaN's: 0 when the row starts with a NaN or holds no number, as
 * engine/sample.c's sample_argmax chooses — in two steps. On the device,
 * workgroup (g, r) writes the pair (key, index) at word 2 (r groups + g)
 * of PART (groups = the grid's x): the largest order key of values
 * g VK_ARGMAX_SPAN .. (g + 1) VK_ARGMAX_SPAN of row r (a value's bits as
 * an unsigned number in the floats' order; a NaN's key is 0) and the
 * lowest index holding it; the first workgroup of a row that starts with a
 * NaN writes the key 0xffffffff and index 0. On the host,
 * vk_argmax_choose makes the row's choice from its pairs.
 * bindings: 0 X (float, n_rows rows of width), 1 PART (uint,
 * 2 groups n_rows). grid: (ceil(width / VK_ARGMAX_SPAN), n_rows, 1). */
#define VK_ARGMAX_SPAN 2048
struct vk_push_argmax {
    uint32_t width, n_rows;
};
/* A row's choice from the `groups` pairs argmax wrote for it. */
int32_t vk_argmax_choose(const uint32_t *pairs, uint32_t groups);

/* sample: a draw from each of n_rows rows of `width` logits, as
 * engine/sample.c's sample_probs and sample_pick make it — the weights
 * e^((x - max) / temperature), 0 below e^-87.3 and for NaNs; the smallest
 * set of the most likely (ties: the lower id) whose mass reaches top_p,
 * at least one (all where keep_all); the first id, in id order, at which
 * the kept mass so far passes u times the kept total — except that masses
 * are integers in units of 2^-40 of the largest weight (a weight below
 * 2^-40 is never drawn), so a draw differs from the host's only where u
 * falls within rounding of a boundary between two tokens' shares. A row
 * with no finite logit draws 0. TOKEN[r] = row r's draw; W (as large as
 * X) and STATE (VK_SAMPLE_ROW_WORDS words a row) are the shader's
 * scratch. Rows of at most VK_SAMPLE_MAX_WIDTH; needs
 * vk_device_has_int64.
 * Six dispatches in order, `phase` 0 .. VK_SAMPLE_PHASES - 1, each
 * reading what the one before wrote: phase p's grid is
 * (vk_sample_groups(p, width), n_rows, 1), workgroups of
 * VK_SAMPLE_WORKGROUP (the shader's header says what each phase does).
 * bindings: 0 X (float), 1 W (float), 2 U (uint: row r's 53 uniform bits
 * at words 2r, low, and 2r + 1, high), 3 TOKEN (uint), 4 STATE (uint). */
#define VK_SAMPLE_WORKGROUP 256
#define VK_SAMPLE_PART (VK_SAMPLE_WORKGROUP * 8)   /* values a workgroup */
#define VK_SAMPLE_MAX_WIDTH (1 << 18)
#define VK_SAMPLE_ROW_WORDS (9 * 1024 + 32 + 5 * 128)
enum { VK_SAMPLE_PHASES = 6 };
struct vk_push_sample {
    uint32_t width, n_rows;
    float temperature;
    uint32_t top_p32;   /* top_p 2^32, floored (top_p < 1) */
    uint32_t keep_all;  /* 1: top_p 1 or more, every token kept */
    uint32_t phase;
};
/* Phase p's workgroups a row: one a part of VK_SAMPLE_PART values, and
 * one for the last phase, the draw. */
uint32_t vk_sample_groups(int phase, uint32_t width);

#endif
