/* vk_shaders.c — see vk_shaders.h. The SPIR-V comes from
 * build/shaders/spirv.S (.incbin of every .spv, between the symbols
 * kk_spv_NAME and kk_spv_NAME_end); shader_list.h names them, one
 * SHADER(name) line each, so this table follows the Makefile's list. */
#include "vk_shaders.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kv.h"

#define SHADER(n) extern const uint32_t kk_spv_##n[], kk_spv_##n##_end[];
#include "shader_list.h"
#undef SHADER

static const struct {
    const char *name;
    const uint32_t *start, *end;
} shader_table[] = {
#define SHADER(n) {#n, kk_spv_##n, kk_spv_##n##_end},
#include "shader_list.h"
#undef SHADER
};

enum { N_SHADERS = sizeof shader_table / sizeof shader_table[0] };

/* The sizes are differences of link-time addresses, which no static
 * initialiser may hold: the entries are filled once, on first use. */
static struct vk_spirv spirv[N_SHADERS];
static pthread_once_t spirv_once = PTHREAD_ONCE_INIT;

static void fill_spirv(void)
{
    for (size_t i = 0; i < N_SHADERS; i++) {
        spirv[i].name = shader_table[i].name;
        spirv[i].code = shader_table[i].start;
        spirv[i].bytes =
            (size_t)(shader_table[i].end - shader_table[i].start) * 4;
    }
}

const struct vk_spirv *vk_shader_at(size_t i)
{
    pthread_once(&spirv_once, fill_spirv);
    return i < N_SHADERS ? &spirv[i] : NULL;
}

const struct vk_spirv *vk_shader_find(const char *name)
{
    pthread_once(&spirv_once, fill_spirv);
    for (size_t i = 0; i < N_SHADERS; i++)
        if (strcmp(spirv[i].name, name) == 0)
            return &spirv[i];
    return NULL;
}

/* The 8-token form also takes blocks of 9..16 tokens, in two y-groups:
 * verifying 16 tokens of the 1B shape took 4.95-5.00 ms on the H200
 * against 6.18-6.23 in the 16-token form (12 tokens: 4.65-4.75 against
 * 5.73-5.77); the 4-token form in four y-groups, 5.73-5.77. For 5..8
 * tokens the 4-token form in two y-groups was slower than the 8-token
 * form (3.24-3.28 against 3.09-3.24 ms at 8).
 *
 * Batches of 5..8 take the 8-token form on 2 rows a team (t8s2): o and
 * down, the products of x as it comes, then run in 256 workgroups of 80
 * registers a thread instead of 128 of 128 registers, one a
 * multiprocessor, whose threads wait at the x tiles' barriers with
 * nothing else to run. On the H200 (1B shape, Q8_0) those products took
 * 26.0 us a dispatch against 28.8 (KAKEYA_VK_PROFILE=1), and verifying 8
 * tokens 2.24-2.29 ms against 2.37-2.41; but 16 tokens, in two y-groups,
 * 4.03-4.04 against 3.34-3.39 (twice the workgroups, each staging its own
 * x), so those keep 4 rows a team. Tiles of 8 tokens (-DMM_XT=8, 32 KiB)
 * gave 2.31-2.32 ms at 8 tokens and 3.75 at 16 (204 registers), and both
 * together 2.45-2.46 and 4.06.
 *
 * The 4-token form (blocks of 3 and 4) is on 2 rows a team for the same
 * reason: o and down in 256 workgroups instead of 128. On the H200, two
 * rounds each in two calls, verifying 4 tokens of the default model took
 * 0.551-0.569 ms against 0.641-0.656 (3 tokens 0.542-0.567 against
 * 0.628-0.639), of the 1B shape 1.466-1.495 against 1.495-1.539. The same
 * form in 2 teams of 2 rows (512 workgroups, each staging x for 4 rows)
 * took 1.83-1.84 ms for 4 tokens of the 1B shape, and t8s2 so 2.88-2.90
 * for 8. */
const struct vk_matmul_form vk_matmul_forms[VK_MATMUL_FORMS] = {
    {"one_", 1, 1, 1, MM_SLOTS, "one_norm_", 2},
    {"t4_", 4, 4, 4, 2, "t4_norm_", 4},
    {"t8s2_", 8, 8, 4, 2, NULL, 0},
    {"t8_", 8, 16, 4, MM_SLOTS, NULL, 0},
    {"", MM_TOKENS, INT_MAX, 1, MM_SLOTS, NULL, 0}};

/* Every workgroup quantizes its tokens' x before its first row, so a form
 * of more tokens wants fewer, longer lived workgroups: on the H200 (1B
 * shape) verifying 8 tokens took 2.86-2.88 ms with caps of 512 and 256,
 * 3.34-3.45 with 1,024 for all, and 4.38 with 256 and 128. The one-token
 * form's cap matters only for the output matrix (4,008 row sets of the
 * 1B shape; the layers' matrices have 96 and 256): there it took 100 us
 * a decode step with 512, 106 with 1,024, 115 with 2,048 and 132 with
 * none (KAKEYA_VK_PROFILE=1; 88 registers, two workgroups a
 * multiprocessor, so more only queue).
 *
 * Two rows a unit: each x word read from shared memory serves two rows of
 * each matrix (half as many reads per weight), in half as many
 * workgroups. On the H200 (1B shape, every form on two rows but the
 * one-token one) verifying 16 tokens took 3.49-3.51 ms against 3.93 (two
 * y-groups: 256 workgroups for gate/up), but 8 tokens 2.88-2.90 against
 * 2.59-2.61 and 4 tokens 1.85-1.97 against 1.68-1.74: in one y-group,
 * gate/up's 128 workgroups leave the GPU short of warps. So only batches
 * past 8 take it (16 tokens 3.43-3.44 ms against 3.76-3.79); 4 tokens on
 * two rows in two y-groups for batches of 5 to 8 were within the noise
 * (2.13-2.39 ms against 2.24-2.42). */
const struct vk_qx_form vk_qx_forms[VK_QX_FORMS] = {
    {"1_", 1, 1, 1, 512},
    {"4_", 4, 1, 4, 256},
    {"8_", 8, 1, 8, 256},
    {"8r2_", 8, 2, VK_QX_MAX_BATCH, 256}};

const int vk_mma_rows[VK_MMA_FORMS] = {64, 32, 16};

void vk_mma_shader_name(char *name, size_t cap, int form)
{
    snprintf(name, cap, "matmul_" VK_MATMUL_MMA_PREFIX "%d_q8_0",
             vk_mma_rows[form]);
}

int vk_qx_form_of(int n)
{
    int f = 0;
    while (f + 1 < VK_QX_FORMS && n > vk_qx_forms[f].max_batch)
        f++;
    return f;
}

void vk_qx_shader_name(char *name, size_t cap, int form, bool norm)
{
    snprintf(name, cap, "matmul_" VK_MATMUL_QX_PREFIX "%s%sq8_0",
             vk_qx_forms[form].name, norm ? "norm_" : "");
}

/* Invocations a dispatch should have at least (lanes double until they
 * do). Measured on the H200 (1B shape, Q8_0, two rounds): with 8 lanes a
 * row for every matrix, the o and down projections (2,048 rows, 64
 * workgroups) took 18.4 us a decode step and decoding 1.57-1.65 ms a token;
 * at 131,072 (32 lanes for o, down and q/k/v, 16 for gate and up) q/k/v
 * and gate/up were slower (13.7 and 20.1 us against 12.1 and 17.0) and
 * verifying 16 tokens took 5.9 ms; at 32,768 (o and down 16, the rest 8)
 * decoding took 1.39-1.41 ms and verifying 16 tokens 4.15-4.26. */
enum { QX_BUSY = 32768 };

uint32_t vk_qx_lanes(uint32_t rows, uint32_t n_cols, uint32_t subgroup)
{
    uint32_t lanes = 8;
    while (lanes < 32 && 2 * lanes <= subgroup &&
           2 * lanes <= n_cols / 32 && (uint64_t)rows * lanes < QX_BUSY)
        lanes *= 2;
    return lanes;
}

int32_t vk_argmax_choose(const uint32_t *pairs, uint32_t groups)
{
    uint32_t key = 0, index = UINT32_MAX;
    for (uint32_t g = 0; g < groups; g++) {
        const uint32_t k = pairs[2 * g], i = pairs[2 * g + 1];
        if (k > key || (k == key && i < index)) {
            key = k;
            index = i;
        }
    }
    /* no number in the row (key 0), or a NaN first (argmax.comp's key
     * 0xffffffff, index 0): sample_argmax stays at 0 */
    return key == 0 ? 0 : (int32_t)index;
}

uint32_t vk_sample_groups(int phase, uint32_t width)
{
    return phase == VK_SAMPLE_PHASES - 1
               ? 1
               : (width + VK_SAMPLE_PART - 1) / VK_SAMPLE_PART;
}

/* A row of n_vis positions: its splits, as att_split.glsl's att_splits. */
static uint32_t row_splits(uint32_t n_vis, uint32_t split_keys,
                           uint32_t max_splits)
{
    if (split_keys == 0 || n_vis <= split_keys)
        return 1;
    const uint32_t units = (n_vis + split_keys - 1) / split_keys;
    const uint32_t cap = max_splits > 1 ? max_splits : 1;
    const uint32_t row_keys = ((units - 1) / cap + 1) * split_keys;
    return (n_vis + row_keys - 1) / row_keys;
}

uint32_t vk_attention_most_splits(const struct kv_layer *L, int window,
                                  int pos0, int n, uint32_t split_keys,
                                  uint32_t max_splits)
{
    uint32_t most = 1;
    for (int p = pos0; p < pos0 + n; p++) {
        int sink_end, lo;
        kv_visible(L, window, p, &sink_end, &lo);
        const int n_vis = sink_end + (p - lo + 1 > 0 ? p - lo + 1 : 0);
        const uint32_t s = row_splits((uint32_t)n_vis, split_keys, max_splits);
        most = s > most ? s : most;
    }
    return most;
}

int vk_shader_max_invocations(void)
{
    int most = VK_ATTENTION_INVOCATIONS;
    for (int f = 0; f < VK_MATMUL_FORMS; f++) {
        const struct vk_matmul_form *m = &vk_matmul_forms[f];
        const int teams = m->teams > m->norm_teams ? m->teams : m->norm_teams;
        if (64 * teams > most)
            most = 64 * teams;
    }
    return most;
}
