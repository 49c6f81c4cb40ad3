/* test_fingerprint.c — SHA-256 and the model-file fingerprint.
 *
 * The pinned fingerprints were computed by an independent Python script
 * (hashlib over the same byte ranges), so they check the byte selection as
 * well as the hash; they must never change for these files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "fingerprint.h"
#include "gguf.h"
#include "gguf_write.h"
#include "testutil.h"

static void hex_of(const uint8_t digest[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

static void expect_sha256(const void *data, size_t n, const char *want)
{
    struct sha256 s;
    uint8_t digest[32];
    char hex[65];
    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_final(&s, digest);
    hex_of(digest, hex);
    assert_string_equal(hex, want);
}

static void test_sha256_matches_the_fips_180_vectors(void **state)
{
    (void)state;
    expect_sha256("", 0,
                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_sha256("abc", 3,
                  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks =
        "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect_sha256(two_blocks, strlen(two_blocks),
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* One million 'a's, fed in uneven pieces. */
    struct sha256 s;
    sha256_init(&s);
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        sha256_update(&s, chunk, n);
        left -= n;
    }
    uint8_t digest[32];
    char hex[65];
    sha256_final(&s, digest);
    hex_of(digest, hex);
    assert_string_equal(
        hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void expect_fingerprint(const char *rel, const char *want)
{
    const char *path = testutil_shared_path(rel);
    struct gguf *g = NULL;
    struct kk_error err = {{0}};
    if (gguf_open(path, &g, &err))
        fail_msg("%s", err.msg);
    char fp[65], again[65];
    assert_int_equal(gguf_fingerprint(g, fp), 0);
    assert_int_equal(gguf_fingerprint(g, again), 0);
    assert_string_equal(fp, again);
    assert_string_equal(fp, want);
    gguf_close(g);
}

static void test_fingerprints_of_shared_files_are_pinned(void **state)
{
    (void)state;
    if (!testutil_shared_dir())
        skip();
    expect_fingerprint("golden/models/llama256-Q4_0.gguf",
                       "d07d257e45545ca5331394ac0d6ef950ab763999c9845a566e97401822282d62");
    /* Vocabulary only: no tensors, and the file ends before the padding. */
    expect_fingerprint("models/ggml-vocab-gpt-2.gguf",
                       "db338ac1237104d98f50f8199c52c634f51319e7511022ddd994cd67aac0a978");
}

/* Fingerprint of a one-tensor file whose tensor has `patched` at byte
 * `at`, and whose metadata value is `name`. */
static void fingerprint_variant(const char *name, size_t at, uint8_t patched,
                                char out[65])
{
    enum { N = 4096 };
    static float data[N];
    for (int i = 0; i < N; i++)
        data[i] = (float)i;
    ((uint8_t *)data)[at] ^= patched;
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_set_str(w, "general.name", name), 0);
    const uint64_t ne[] = {N};
    assert_int_equal(gguf_writer_add_tensor(w, "t", KK_F32, 1, ne, data), 0);
    ((uint8_t *)data)[at] ^= patched;
    char path[4096];
    snprintf(path, sizeof path, "%s", testutil_tmp_path("fp.gguf"));
    struct kk_error err = {{0}};
    assert_int_equal(gguf_writer_save(w, path, &err), 0);
    gguf_writer_free(w);
    struct gguf *g = NULL;
    if (gguf_open(path, &g, &err))
        fail_msg("%s", err.msg);
    unlink(path);
    assert_int_equal(gguf_fingerprint(g, out), 0);
    assert_int_equal(strlen(out), 64);
    assert_int_equal(strspn(out, "0123456789abcdef"), 64);
    gguf_close(g);
}

static void test_fingerprint_changes_with_metadata_and_sampled_bytes(
    void **state)
{
    (void)state;
    char base[65], other[65];
    fingerprint_variant("model", 0, 0, base);
    fingerprint_variant("model", 0, 0, other);
    assert_string_equal(base, other);
    fingerprint_variant("modem", 0, 0, other);
    assert_string_not_equal(base, other);
    fingerprint_variant("model", 0, 1, other); /* first byte */
    assert_string_not_equal(base, other);
    fingerprint_variant("model", 16383, 0x80, other); /* last byte */
    assert_string_not_equal(base, other);
    fingerprint_variant("model", 8192, 1, other); /* middle sample */
    assert_string_not_equal(base, other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_matches_the_fips_180_vectors),
        cmocka_unit_test(test_fingerprints_of_shared_files_are_pinned),
        cmocka_unit_test(
            test_fingerprint_changes_with_metadata_and_sampled_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
