#version 450
// decode_phases.comp — the shader of bench_persistent_decode.c beside it:
// the work of one forward pass of pc.tokens tokens (1: a decode step; up
// to 8: a verify block) of a llama-shaped model with Q8_0 weights and an
// f16 cache, as phases. Phase 5 l + k is layer l's
//   k = 0  q/k/v:   x normed (sum of squares over the row), quantized to
//                   int8 blocks of 32 in shared memory, times Wqkv
//   k = 1  attention: a workgroup a (head, token), over pc.ctx cached
//                   positions and the batch's up to the token (their keys
//                   and values from q/k/v)
//   k = 2  o:       x += Wo att
//   k = 3  gate/up: x normed and quantized, h = silu(Wg x) (Wu x)
//   k = 4  down:    x += Wd h
// and phase 5 n_layers is the output matrix (x normed, logits = Wout x).
//
// With pc.spin = 1 one dispatch runs pc.n_phases phases from pc.first and
// its workgroups, all resident, meet at a grid-wide barrier (an atomic
// counter) between phases; with spin = 0 the host records one dispatch a
// phase, with a pipeline barrier between them (what kakeya's passes do).
// The arithmetic of a value never depends on the mode or the grid, so the
// logits must be the same bits either way: the host checks that, which
// shows the grid barrier lets no phase read before the one before it wrote.
// Nor does a token's depend on the tokens after it: the first token's
// logits are the same bits alone as in a batch (the host prints their
// hash), as kakeya's speculative decoding needs of any verify form.
//
// x is read from the buffer once a phase, each token's row quantized
// where it was loaded. A single-token form of this shader (at d9e56d1)
// staged x in shared memory first: a decode step of the 1B shape 876 us on
// the H200 against this one's 946.
//
// Every workgroup must be resident at once for the grid barrier to end:
// the host runs one workgroup a multiprocessor. (Two workgroups of 256
// threads a multiprocessor of the H200, 264, never finished: the driver
// may lay out shared memory so that only one fits, and Vulkan has no way
// to ask.)
//
// Switches, for the measurements docs/vulkan-sessions.md records:
// -DWG_SIZE (threads a workgroup, 512 by default), -DCH_WORDS (16-byte
// words a lane loads at once per row, 4), -DPAIRS (pairs of rows a
// subgroup takes at once, 1), -DACT_CACHED (activations read through L1:
// right only with one dispatch a phase); -DSTREAMED (one token: each
// subgroup's run of rows read as one stream, -DSL_WORDS at once, 4; the
// same bits), with -DLITE_PROLOGUE (x quantized in one pass, its norm
// applied to the block scales after: other bits; with both, 0.81 ms a
// step on the H200 against 0.95, session 49) and -DEARLY_BATCH (the
// first loads before x's prologue). For timing only, wrong values:
// -DNO_PROLOGUE (x neither normed nor quantized), -DNO_SCALES (weight
// scales 1), -DXOR_ONLY (weight words xored, not multiplied), -DNO_REDUCE
// (no sum over a subgroup) and -DSTREAM (no products: each product phase
// only reads its matrix, stream_matrix).
#include "decode_pass.glsl"

void phase(uint ph)
{
    if (skipped(ph))
        return;
    matvec_t m;
    bool normed;
    const bool product = product_of(ph, m, normed);
#ifdef STREAM
    if (product) {   // (2 pairs rows, gated or not)
        stream_matrix(m.mat, 2u * m.pairs * row_bytes(m.cols));
        return;
    }
#endif
    if (!product) {
        for (uint i = gl_WorkGroupID.x; i < pc.n_head * pc.tokens;
             i += gl_NumWorkGroups.x)
            attention(ph / 5u, i % pc.n_head, i / pc.n_head, false);
        return;
    }
    matvec(m, normed);
}
