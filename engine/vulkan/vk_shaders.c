/* vk_shaders.c — see vk_shaders.h. The SPIR-V comes from
 * build/shaders/spirv.S (.incbin of every .spv, between the symbols
 * kk_spv_NAME and kk_spv_NAME_end); shader_list.h names them, one
 * SHADER(name) line each, so this table follows the Makefile's list. */
#include "vk_shaders.h"

#include <limits.h>
#include <pthread.h>
#include <string.h>

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
 * form (3.24-3.28 against 3.09-3.24 ms at 8). */
const struct vk_matmul_form vk_matmul_forms[VK_MATMUL_FORMS] = {
    {"one_", 1, 1, 1, "one_norm_", 2},
    {"t4_", 4, 4, 4, "t4_norm_", 4},
    {"t8_", 8, 16, 4, NULL, 0},
    {"", MM_TOKENS, INT_MAX, 1, NULL, 0}};

const int vk_qx_tokens[VK_QX_FORMS] = {1, 4, 8};
const uint32_t vk_qx_max_workgroups[VK_QX_FORMS] = {512, 256, 256};

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
