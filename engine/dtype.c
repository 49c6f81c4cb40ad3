/* dtype.c — see dtype.h. Block layouts follow ggml (ggml-common.h). */
#include "dtype.h"

static const struct kk_dtype_info infos[KK_DTYPE_LIMIT] = {
    [KK_F32] = {"F32", 1, 4, true},
    [KK_F16] = {"F16", 1, 2, true},
    [KK_Q4_0] = {"Q4_0", 32, 18, true},
    [KK_Q4_1] = {"Q4_1", 32, 20, false},
    [KK_Q5_0] = {"Q5_0", 32, 22, true},
    [KK_Q5_1] = {"Q5_1", 32, 24, false},
    [KK_Q8_0] = {"Q8_0", 32, 34, true},
    [KK_Q8_1] = {"Q8_1", 32, 36, false},
    [KK_Q2_K] = {"Q2_K", 256, 84, false},
    [KK_Q3_K] = {"Q3_K", 256, 110, false},
    [KK_Q4_K] = {"Q4_K", 256, 144, true},
    [KK_Q5_K] = {"Q5_K", 256, 176, false},
    [KK_Q6_K] = {"Q6_K", 256, 210, true},
    [KK_Q8_K] = {"Q8_K", 256, 292, false},
    [16] = {"IQ2_XXS", 256, 66, false},
    [17] = {"IQ2_XS", 256, 74, false},
    [18] = {"IQ3_XXS", 256, 98, false},
    [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, false},
    [21] = {"IQ3_S", 256, 110, false},
    [22] = {"IQ2_S", 256, 82, false},
    [23] = {"IQ4_XS", 256, 136, false},
    [24] = {"I8", 1, 1, false},
    [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},
    [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", 256, 56, false},
    [KK_BF16] = {"BF16", 1, 2, true},
    [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false},
    [39] = {"MXFP4", 32, 17, false},
};

const struct kk_dtype_info *dtype_info(uint32_t type)
{
    if (type >= KK_DTYPE_LIMIT || !infos[type].name)
        return NULL;
    return &infos[type];
}

size_t dtype_row_bytes(uint32_t type, uint64_t n)
{
    const struct kk_dtype_info *t = dtype_info(type);
    if (!t || n % t->block_elems)
        return 0;
    return (size_t)(n / t->block_elems) * t->block_bytes;
}
