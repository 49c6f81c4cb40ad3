#version 450
// decode_stream3.comp — a pass of bench_persistent_decode.c (run with
// layer_phases=3; timing only): the least a pass of 3 phases a layer can
// take on a device, its products' bytes read and nothing done with them
// (stream_matrix). Phase 3 l + k is layer l's
//   k = 0  q/k/v's bytes;
//   k = 1  unit u's attention (head u / pc.split), then its share of o's
//          bytes for that head, as a fused pass's partials would read
//          them (decode_fused.comp);
//   k = 2  gate/up's bytes, then down's, with no barrier between (a chunk
//          of ff needs only its own gate and up rows);
// and phase 3 n_layers the output matrix's. On the H200 it took 0.531 ms
// a step against 0.581 for decode_phases' -DSTREAM with 5 phases a layer
// (docs/vulkan-sessions.md, session 49).
#include "decode_pass.glsl"

void stream3_phase(uint ph)
{
    const uint layer = ph / 3u, k = ph % 3u, rb = row_bytes(pc.d);
    const uint lb = layer * layer_bytes();
    const uint wo = lb + qkv_rows() * rb, wgu = wo + pc.d * rb;
    const uint wd = wgu + 2u * pc.ff * rb;
    const uint bit = layer == pc.n_layers ? 5u : k;
    if ((pc.skip >> bit & 1u) != 0u)
        return;
    if (layer == pc.n_layers)
        stream_matrix(lb, pc.vocab * rb);
    else if (k == 0u)
        stream_matrix(lb, qkv_rows() * rb);
    else if (k == 2u) {
        stream_matrix(wgu, 2u * pc.ff * rb);
        stream_matrix(wd, pc.d * row_bytes(pc.ff));
    } else {
        const uint share = pc.d * rb / pc.n_head / pc.split;
        for (uint u = gl_WorkGroupID.x; u < pc.n_head * pc.split;
             u += gl_NumWorkGroups.x) {
            attention(layer, u / pc.split, 0u, false);
            stream_by(wo + u * share, share, gl_LocalInvocationID.x, WG);
        }
    }
}

void phase(uint ph) { stream3_phase(ph); }
