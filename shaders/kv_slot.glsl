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
