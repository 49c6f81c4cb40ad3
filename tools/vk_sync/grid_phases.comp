#version 450
// grid_phases.comp — the shader of tools/vk_sync/bench_grid_sync.c.
//
// `phases` rounds of a ping-pong over data[0..2n): round p reads half p % 2
// at a permuted index (written by another workgroup in round p - 1) and
// writes half (p + 1) % 2 plus one. With spin = 1 the workgroups meet at a
// grid-wide barrier between rounds (an atomic counter they spin on); with
// spin = 0 the host runs one round per dispatch, with a pipeline barrier
// between dispatches. Either way every value ends at its start plus the
// number of rounds, unless a round read before the one before it had
// written: the host checks that.
layout(local_size_x = 128) in;

layout(std430, binding = 0) coherent buffer Data { float data[]; };
layout(std430, binding = 1) coherent buffer Count { uint count; };

layout(push_constant) uniform Push {
    uint n;        // values per half, a power of two
    uint phases;   // rounds in this dispatch
    uint first;    // the round this dispatch starts with
    uint spin;     // 1: a grid barrier between rounds
} pc;

void grid_barrier(uint target)
{
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0) {
        atomicAdd(count, 1u);
        while (atomicAdd(count, 0u) < target) {
        }
    }
    barrier();
    memoryBarrierBuffer();
}

void main()
{
    uint groups = gl_NumWorkGroups.x;
    uint stride = groups * 128u;
    for (uint r = 0; r < pc.phases; r++) {
        uint p = pc.first + r;
        uint src = (p & 1u) * pc.n, dst = pc.n - src;
        for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
            data[dst + i] = data[src + ((i * 97u + 13u * p) & (pc.n - 1u))] + 1.0;
        if (pc.spin != 0u)
            grid_barrier((r + 1u) * groups);
    }
}
