#version 450
// decode_fill.comp — fills bench_persistent_decode's buffers with hashed
// words: weights whose f16 halves are small finite numbers (a quant's
// bytes any int8), a cache of halves in (-1, 1), and x in (-1, 1) with the
// other activations 0. Cheaper than uploading 1.3 GB from the host.
layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer W { uint w[]; };
layout(std430, binding = 1) buffer KV { uint kv[]; };
layout(std430, binding = 2) buffer Act { float act[]; };

layout(push_constant) uniform Push {
    uint w_words, kv_words, act_words, x_words;
} pc;

uint hash(uint v)
{
    v ^= v >> 16u;
    v *= 0x7feb352du;
    v ^= v >> 15u;
    v *= 0x846ca68bu;
    v ^= v >> 16u;
    return v;
}

void main()
{
    const uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < pc.w_words; i += stride)
        w[i] = hash(i) & 0x03ff03ffu;
    for (uint i = gl_GlobalInvocationID.x; i < pc.kv_words; i += stride)
        kv[i] = hash(i ^ 0x55555555u) & 0xbbffbbffu;
    for (uint i = gl_GlobalInvocationID.x; i < pc.act_words; i += stride)
        act[i] = i < pc.x_words ? float(hash(i + 7u) >> 8u) / 8388608.0 - 1.0
                                : 0.0;
}
