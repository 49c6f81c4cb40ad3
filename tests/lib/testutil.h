/* testutil.h — what the test programs share: finding ../shared, reading
 * files and JSON, hex strings. Tests that need the golden data call
 * testutil_shared_dir(); when the folder is absent they skip loudly. */
#ifndef KK_TESTUTIL_H
#define KK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "kakeya.h"

/* The shared data folder ($KK_SHARED, default "../shared"), or NULL after
 * printing a loud SKIP line when it does not exist. */
const char *testutil_shared_dir(void);

/* "<shared>/<rel>" in a static buffer (valid until the next call), or NULL
 * when the shared folder is absent. */
const char *testutil_shared_path(const char *rel);

/* Runs only the tests whose names match $KK_TEST_FILTER (cmocka's
 * patterns: * and ?) where it is set: a device call, whose minutes are
 * counted, can run the one test it is about (tools/gpu-ab.sh). */
void testutil_filter_from_env(void);

/* Whole file into a malloc'd buffer (NUL-terminated; *len without the NUL).
 * NULL if it cannot be read. */
char *testutil_read_file(const char *path, size_t *len);

/* Parses a JSON file; NULL on failure. Free with cJSON_Delete. */
cJSON *testutil_read_json(const char *path);

/* Decodes lowercase/uppercase hex into a malloc'd buffer; NULL on bad hex. */
unsigned char *testutil_unhex(const char *hex, size_t *len);

/* Opens ../shared/golden/models/<name>.gguf; NULL (after the loud skip
 * line) when the shared folder or that file is absent; fails the test if
 * it won't open. */
struct kk_model *testutil_open_golden(const char *name);

/* The token ids of a plain-text prompt, with BOS where the model adds one
 * (at most 256 ids). */
int testutil_prompt(struct kk_model *m, const char *text, int32_t *ids);

/* Evaluates the prompt `text` on backend b twice, for the logits of every
 * row and (kk_session_eval_greedy) for only their greedy choices, and
 * fails unless each row's choice is kk_sample's at temperature 0 from its
 * logits — and the logits are gone after the greedy evaluation, the
 * choices after the other. */
void testutil_check_greedy_rows(struct kk_model *m, enum kk_backend b,
                                const char *text);

/* The default chat model (data/models/kakeya-chat.gguf, from the
 * repository root, where the tests run); fails when it cannot be opened. */
struct kk_model *testutil_open_default_model(void);

/* Decodes from the prompt `text` on backend b with draws at temperature
 * 0.8 and top-p 0.9 three ways from one seed — kk_sample from each step's
 * logits, kk_session_eval_sample (on a GPU, the draw made where the logits
 * are), and kk_generate — and fails unless all three give the same tokens,
 * and the logits are gone after a sampled evaluation. */
void testutil_check_sampled_draws(struct kk_model *m, enum kk_backend b,
                                  const char *text);

/* Runs a shell command line made like printf's; its exit status (-1 when
 * it did not exit). */
int testutil_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Path of a fresh temporary file name under $TMPDIR (static buffer). */
const char *testutil_tmp_path(const char *stem);

/* The kakeya binary the command-line tests run: $KK_BIN, default
 * build/kakeya (from the repository root, where the tests run). */
const char *testutil_binary(void);

/* A cmocka group setup for tests that run the binary on a model of the
 * shared folder: *state becomes a malloc'd "<shared>/<model_rel>", or NULL
 * after a loud SKIP line naming `test` when the folder or the binary is
 * missing (each test then skips). testutil_free_state is its teardown. */
int testutil_binary_on_model(void **state, const char *test,
                             const char *model_rel);
int testutil_free_state(void **state);

#endif
