/* golden_check.h — checking the engine against llama.cpp's reference
 * outputs in ../shared/golden, on a chosen backend (test_golden runs the
 * CPU, test_vulkan a Vulkan device).
 *
 * For each prompt of ../shared/golden/gen-<model>.json:
 *   - the prompt text tokenizes to the golden prompt ids;
 *   - teacher-forced logits match: the whole prompt in one batch, then each
 *     golden generated token alone, exactly as the goldens were made; every
 *     one of the top-20 logits of every step is within the type's tolerance;
 *   - greedy generation reproduces the golden continuation token for token,
 *     except after a step whose top-2 gap is within tolerance (a tie that
 *     legitimately goes either way, see the golden README §4);
 *   - the full-vocabulary rows of the "plain" prompt match.
 * Tolerances are those the golden README suggests per weight type. The
 * sessions use an f32 KV cache, as the goldens were made with one. */
#ifndef KK_GOLDEN_CHECK_H
#define KK_GOLDEN_CHECK_H

#include "kakeya.h"

struct golden_case {
    const char *model;   /* gen-<model>.json, models/<model>.gguf */
    float tolerance;
};

extern const struct golden_case golden_cases[];
extern const int golden_n_cases;

/* Runs every check on one model (skips when ../shared is absent). */
void golden_check_model(const struct golden_case *c, enum kk_backend backend);

#endif
