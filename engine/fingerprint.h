/* fingerprint.h — a stable identity for a model file.
 *
 * gguf_fingerprint() names a GGUF file by what it holds, so that a saved KV
 * checkpoint can be matched to the model that produced it (and refused for
 * any other). It hashes, with SHA-256: the file size, every byte before the
 * data section (header, all metadata, the tensor directory) and a sample of
 * each tensor's bytes (the first, middle and last 256). Two files with the
 * same fingerprint have identical metadata and shapes and agree on every
 * sampled byte; the cost is a few pages per tensor, not a read of the file.
 * The value never changes for a given file: a new scheme would get a new
 * version tag inside the hash.
 *
 * The SHA-256 itself (FIPS 180-4) is exposed for other callers that need a
 * digest; no state is shared. */
#ifndef KK_FINGERPRINT_H
#define KK_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

struct sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t block[64];
    size_t used;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, uint8_t digest[32]);

/* Writes 64 lowercase hex digits and a NUL into out. Returns 0 (it cannot
 * fail on an open file; the status is for symmetry with the engine). */
int gguf_fingerprint(const struct gguf *g, char out[65]);

#endif
