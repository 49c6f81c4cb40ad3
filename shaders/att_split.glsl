/* att_split.glsl — how attention_rope cuts a row that sees n_vis positions
 * into splits (vk_shaders.h; vk_attention_splits is the host's copy): a
 * row of more than split_keys positions is cut into at most max_splits
 * splits of a whole number of split_keys each (the last one shorter), so
 * that a split takes no more of the GPU form's chunks of 512 positions
 * than its positions need: splits of 1,025 positions made every row of a
 * verify block take 3 chunks a split where 2 would do. A function of the
 * row's own position and the model, never of the batch, so that a token
 * gets the same splits, and so the same bits, decoded as verified. */
#ifndef ATT_SPLIT_GLSL
#define ATT_SPLIT_GLSL

/* The row's splits (1: it is not split) and each one's positions. */
uint att_splits(uint n_vis, uint split_keys, uint max_splits,
                out uint row_keys)
{
    row_keys = n_vis;
    if (split_keys == 0u || n_vis <= split_keys)
        return 1u;
    const uint units = (n_vis + split_keys - 1u) / split_keys;
    const uint cap = max(max_splits, 1u);
    row_keys = ((units - 1u) / cap + 1u) * split_keys;
    return (n_vis + row_keys - 1u) / row_keys;
}

#endif
