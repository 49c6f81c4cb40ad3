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
