/* kv_slot.glsl — where a position's keys and values live in a layer of
 * the KV cache: kv.h's kv_slot, for shaders. policy 0 full (slot =
 * position), 1 ring (position % capacity), 2 sink+window (the first n_sink
 * positions, then a ring over the rest). */
#ifndef KV_SLOT_GLSL
#define KV_SLOT_GLSL

uint kv_slot(uint k, uint policy, uint capacity, uint n_sink)
{
    if (policy == 1u)
        return k % capacity;
    if (policy == 2u)
        return k < n_sink ? k : n_sink + (k - n_sink) % (capacity - n_sink);
    return k;
}

/* The positions a query at p sees (kv.h's kv_visible): [0, sink_end) and
 * [lo, p], numbered 0 .. n_vis - 1 in that order (the return value is
 * n_vis). window: the layer's (policy 2) or the model's (0: none). */
uint kv_visible(int p, uint policy, uint n_sink, uint window,
                out int sink_end, out int lo)
{
    const int w = int(window);
    sink_end = policy == 2u ? min(int(n_sink), p + 1) : 0;
    lo = w > 0 && p - w + 1 > sink_end ? p - w + 1 : sink_end;
    return uint(sink_end + max(0, p - lo + 1));
}

/* The word of the layer's rows that word i of a batch's rows goes to,
 * written straight into their slots: the batch at positions pos0.., rows
 * of row_bytes, a multiple of 4 (so every word is of one row). */
uint kv_slot_word(uint i, uint pos0, uint row_bytes, uint policy,
                  uint capacity, uint n_sink)
{
    const uint row_words = row_bytes / 4u;
    const uint row = i / row_words;
    return kv_slot(pos0 + row, policy, capacity, n_sink) * row_words +
           (i - row * row_words);
}

#endif
