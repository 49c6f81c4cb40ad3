/* vk_attention.c — the Vulkan backend's positions, KV cache rows and
 * attention (backend_vulkan_impl.h): the RoPE tables of a pass, the
 * cache's rows on the device (bound, pulled and pushed for checkpoints,
 * stored and committed as kv.c plans), and attention with or without the
 * RoPE and the store folded in, split across workgroups past 512
 * positions. */
#include "backend_vulkan_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- the KV cache's rows ---- */

/* Fails, saying what to do, when a layer's keys (or values) are more than
 * the device binds at once: attention binds each layer's rows as one
 * storage buffer, and its first dispatch would be refused mid-reply. A
 * context long enough for that (lavapipe binds 128 MiB: two million f16
 * rows of a small model) is the user's to shorten, or to store smaller. */
static int check_kv_binds(const struct vk_backend *be,
                          const struct kv_cache *kv, struct kk_error *err)
{
    int most = 0;
    for (int il = 0; il < kv->n_layer; il++)
        if (kv->layers[il].capacity > most)
            most = kv->layers[il].capacity;
    const VkDeviceSize bytes = vk_padded_size((size_t)most * kv->row_bytes);
    if (vk_device_binds(be->dev, bytes))
        return 0;
    const uint64_t fits = vk_device_binds_rows(be->dev, kv->row_bytes);
    const struct vk_range_text r = vk_device_range_text(be->dev, bytes);
    return kk_fail(err, "the KV cache on the GPU: a layer's %s keys for %d "
                   "positions take %s, more than %s binds at once (%s, its "
                   "maxStorageBufferRange): use --ctx %llu or less%s, or "
                   "--backend cpu",
                   kv_type_name(kv->type), most, r.size,
                   vk_device_name(be->dev), r.limit, (unsigned long long)fits,
                   kv->type == KV_Q8_0 ? "" : ", or --kv q8_0 (smaller rows)");
}

int vkb_bind_kv(struct backend *base, struct kv_cache *kv,
                struct kk_error *err)
{
    struct vk_backend *be = vkb(base);
    vkb_free_kv_buffers(be);
    if (check_kv_binds(be, kv, err))
        return -1;
    be->kv = kv;
    be->kv_k = calloc((size_t)kv->n_layer, sizeof *be->kv_k);
    be->kv_v = calloc((size_t)kv->n_layer, sizeof *be->kv_v);
    if (!be->kv_k || !be->kv_v) {
        vkb_free_kv_buffers(be);
        return kk_fail(err, "out of memory");
    }
    be->n_kv_layers = kv->n_layer;
    for (int il = 0; il < kv->n_layer; il++) {
        size_t bytes = (size_t)kv->layers[il].capacity * kv->row_bytes;
        if (vk_buffer_new(be->dev, vk_padded_size(bytes), VK_MEM_DEVICE,
                          &be->kv_k[il], err) ||
            vk_buffer_new(be->dev, vk_padded_size(bytes), VK_MEM_DEVICE,
                          &be->kv_v[il], err))
            goto fail;
    }
    size_t stage = (size_t)kv->max_batch * kv->row_bytes;
    if (vk_buffer_new(be->dev, vk_padded_size(stage), VK_MEM_DEVICE, &be->stage_k,
                      err) ||
        vk_buffer_new(be->dev, vk_padded_size(stage), VK_MEM_DEVICE, &be->stage_v,
                      err))
        goto fail;
    return 0;
fail:
    vkb_free_kv_buffers(be);
    kk_error_prefix(err, "the KV cache on the GPU (try a smaller --ctx or "
                         "--kv q8_0)");
    return -1;
}

/* Every layer's key and value rows between the device and kv's host rows
 * (checkpoints): to the host, or back to the device. */
static int move_kv_rows(struct vk_backend *be, struct kv_cache *kv,
                        bool to_host, struct kk_error *err)
{
    for (int il = 0; il < kv->n_layer; il++) {
        size_t bytes = (size_t)kv->layers[il].capacity * kv->row_bytes;
        struct vk_buffer *dev[] = {&be->kv_k[il], &be->kv_v[il]};
        uint8_t *host[] = {kv->layers[il].k, kv->layers[il].v};
        for (int i = 0; i < 2; i++)
            if (to_host ? vk_download(be->dev, dev[i], 0, host[i], bytes, err)
                        : vk_upload(be->dev, dev[i], 0, host[i], bytes, err))
                return -1;
    }
    return 0;
}

int vkb_kv_pull(struct backend *base, struct kv_cache *kv,
                struct kk_error *err)
{
    return move_kv_rows(vkb(base), kv, true, err);
}

int vkb_kv_push(struct backend *base, struct kv_cache *kv,
                struct kk_error *err)
{
    return move_kv_rows(vkb(base), kv, false, err);
}

/* The table of this pass's n positions pos (pos0, pos0 + 1, ... in a
 * forward pass; pos may be NULL when n_rot is 0) for (base, n_rot), made
 * on first use. A pass is at one set of positions: a table asked for at
 * another first position fails the pass. */
static const struct rope_table *rope_table(struct vk_backend *be, int n,
                                           int n_rot, int pos0,
                                           const int32_t *pos, float base)
{
    for (int i = 0; i < be->n_rope_tables; i++) {
        const struct rope_table *rt = &be->rope_tables[i];
        if (rt->pos0 != (uint32_t)pos0) {
            pass_fail(be, "internal: one pass at two sets of positions");
            return NULL;
        }
        if (rt->base == base && rt->n_rot == n_rot)
            return rt;
    }
    if (be->n_rope_tables == MAX_ROPE_TABLES) {
        pass_fail(be, "internal: more RoPE bases in one pass than tables");
        return NULL;
    }
    const size_t n_angles = (size_t)n * (size_t)n_rot;
    const size_t bytes = (n_angles + 1) * sizeof(float);
    int64_t off = upload_alloc(be, bytes);
    if (off < 0)
        return NULL;
    float *cs = (float *)((char *)be->upload.mapped + off);
    for (int t = 0; t < n && n_rot > 0; t++)
        rope_angles(pos[t], n_rot, base, cs + (size_t)t * (size_t)n_rot);
    const uint32_t first = (uint32_t)pos0;
    memcpy(cs + n_angles, &first, sizeof first);
    struct rope_table *rt = &be->rope_tables[be->n_rope_tables++];
    rt->base = base;
    rt->n_rot = n_rot;
    rt->pos_at = (uint32_t)n_angles;
    rt->pos0 = first;
    copy(be, &be->upload, (VkDeviceSize)off, &rt->buf, 0, bytes);
    return rt;
}

/* A table of this pass at first position pos0, for a shader that reads
 * only that: any of the pass's, or one with no angles. */
static const struct rope_table *pass_positions(struct vk_backend *be, int n,
                                               int pos0)
{
    return be->n_rope_tables > 0
               ? rope_table(be, n, be->rope_tables[0].n_rot, pos0, NULL,
                            be->rope_tables[0].base)
               : rope_table(be, n, 0, pos0, NULL, 0.0f);
}

void vkb_rope(struct backend *base, struct be_tensor *x, int n,
              int n_heads, int head_dim, int n_rot, const int32_t *pos,
              float rope_base, enum rope_style style)
{
    struct vk_backend *be = vkb(base);
    const struct rope_table *rt = rope_table(be, n, n_rot, pos[0], pos,
                                             rope_base);
    if (!rt)
        return;
    const struct vk_buffer *cs = &rt->buf;
    struct vk_push_rope pc = {.n_rows = (uint32_t)n,
                              .n_heads = (uint32_t)n_heads,
                              .head_dim = (uint32_t)head_dim,
                              .n_rot = (uint32_t)n_rot,
                              .style = style == ROPE_NEOX};
    const struct vk_buffer *bufs[] = {buf(x), cs};
    dispatch(be, &be->rope, bufs, &pc,
             groups_of((int64_t)n * n_heads * (n_rot / 2), 64), 1, 1);
}

/* Whether layer il's batch of n rows goes straight into its slots, rows
 * starting on a word (so no word of a slot the batch writes holds bytes
 * of one it does not): in a full cache (slot = position, and a query
 * reads no position after its own), or in a ring (or sink+window) when
 * the batch is no longer than its slack — then a row of the batch lands
 * only on a position older than any query of the batch sees, as kv.h's
 * slack argument for commits goes. A longer batch (a prompt) is staged
 * and copied: its last rows may overwrite what its first queries read. */
static bool kv_in_place(const struct kv_cache *kv, int il, int n)
{
    return kv->row_bytes % 4 == 0 &&
           (kv->layers[il].policy == KV_FULL || n <= KV_SLACK);
}

/* Where layer il's batch of n rows is staged (the cache itself when in
 * place), and the shaders' description of that. */
struct kv_stage {
    const struct vk_buffer *k, *v;
    uint32_t in_place, policy, capacity, n_sink;
};

static struct kv_stage stage_of(const struct vk_backend *be,
                                const struct kv_cache *kv, int il, int n)
{
    /* enum kv_policy is full, ring, sink+window: the shaders' 0, 1, 2. */
    const struct kv_layer *L = &kv->layers[il];
    struct kv_stage st = {&be->stage_k, &be->stage_v, 0, (uint32_t)L->policy,
                          (uint32_t)L->capacity, (uint32_t)L->n_sink};
    if (kv_in_place(kv, il, n)) {
        st.k = &be->kv_k[il];
        st.v = &be->kv_v[il];
        st.in_place = 1;
    }
    return st;
}

void vkb_kv_store(struct backend *base, struct kv_cache *kv, int il,
                  int pos0, int n, const struct be_tensor *k,
                  const struct be_tensor *v)
{
    struct vk_backend *be = vkb(base);
    const struct kv_stage st = stage_of(be, kv, il, n);
    /* enum kv_type is f32, f16, q8_0: the shader's 0, 1, 2. */
    struct vk_push_kv_store pc = {
        .n_rows = (uint32_t)n, .kv_dim = (uint32_t)kv->kv_dim,
        .type = (uint32_t)kv->type, .block = (uint32_t)kv->block,
        .row_bytes = (uint32_t)kv->row_bytes, .in_place = st.in_place,
        .pos0 = (uint32_t)pos0, .policy = st.policy,
        .capacity = st.capacity, .n_sink = st.n_sink,
    };
    uint32_t words = groups_of((int64_t)n * (int64_t)kv->row_bytes, 4);
    const struct vk_buffer *kb[] = {buf(k), st.k};
    const struct vk_buffer *vb[] = {buf(v), st.v};
    dispatch(be, &be->kv_store, kb, &pc, groups_of(words, 64), 1, 1);
    dispatch(be, &be->kv_store, vb, &pc, groups_of(words, 64), 1, 1);
    kv_stage_mark(kv, il, pos0, n);
}

void vkb_rope_kv_store(struct backend *base, struct kv_cache *kv,
                       int il, int pos0, int n, struct be_tensor *q,
                       int n_head, struct be_tensor *k,
                       const struct be_tensor *v, int n_head_kv,
                       int head_dim, const struct be_rope *rope)
{
    struct vk_backend *be = vkb(base);
    /* Heads normed in this dispatch where its workgroups (one a head) can
     * write whole words of their own, else by rmsnorm dispatches first. */
    const bool fold_norms =
        rope->q_norm && kv->row_bytes % (4 * (size_t)n_head_kv) == 0 &&
        (kv->type != KV_Q8_0 || head_dim % kv->block == 0);
    if (!fold_norms)
        norm_heads(base, rope, q, n_head, k, n_head_kv, n, head_dim);
    const struct rope_table *rt = rope_table(be, n, rope->n_rot, pos0,
                                             rope->pos, rope->base);
    if (!rt)
        return;
    const struct vk_buffer *cs = &rt->buf;
    const struct kv_stage st = stage_of(be, kv, il, n);
    /* enum kv_type is f32, f16, q8_0: the shader's 0, 1, 2. */
    struct vk_push_rope_kv_store pc = {
        .n_rows = (uint32_t)n, .n_head = (uint32_t)n_head,
        .n_head_kv = (uint32_t)n_head_kv, .head_dim = (uint32_t)head_dim,
        .n_rot = (uint32_t)rope->n_rot, .style = rope->style == ROPE_NEOX,
        .type = (uint32_t)kv->type, .block = (uint32_t)kv->block,
        .row_bytes = (uint32_t)kv->row_bytes,
        .in_place = st.in_place, .pos_at = rt->pos_at, .policy = st.policy,
        .capacity = st.capacity, .n_sink = st.n_sink,
        .eps = rope->norm_eps,
    };
    if (fold_norms) {
        const struct vk_buffer *qw = vk_model_find(be->weights, rope->q_norm);
        const struct vk_buffer *kw = vk_model_find(be->weights, rope->k_norm);
        if (!qw || !kw) {
            pass_fail(be, "internal: a q/k norm vector is not on the GPU");
            return;
        }
        const struct vk_buffer *bufs[] = {buf(q), buf(k), buf(v), cs,
                                          st.k,   st.v,   qw,     kw};
        dispatch(be, &be->rope_kv_store_norm, bufs, &pc,
                 (uint32_t)(n_head + n_head_kv), (uint32_t)n, 1);
        kv_stage_mark(kv, il, pos0, n);
        return;
    }
    uint32_t pairs = groups_of((int64_t)n * n_head * (rope->n_rot / 2), 64);
    uint32_t words = groups_of(groups_of((int64_t)n * (int64_t)kv->row_bytes,
                                         4), 64);
    const struct vk_buffer *bufs[] = {buf(q), buf(k), buf(v), cs, st.k, st.v};
    dispatch(be, &be->rope_kv_store, bufs, &pc, pairs > words ? pairs : words,
             3, 1);
    kv_stage_mark(kv, il, pos0, n);
}

void vkb_kv_commit(struct backend *base, struct kv_cache *kv)
{
    struct vk_backend *be = vkb(base);
    struct kv_run runs[KV_MAX_RUNS];
    int n_runs = kv_commit_plan(kv, runs, KV_MAX_RUNS);
    const size_t rb = kv->row_bytes;
    const int il = kv->stage_layer;
    if (n_runs > 0 && kv_in_place(kv, il, kv->stage_n))
        n_runs = 0;   /* written where they belong (stage_of) */
    for (int i = 0; i < n_runs; i++) {
        VkDeviceSize src = (VkDeviceSize)runs[i].stage_row * rb;
        VkDeviceSize dst = (VkDeviceSize)runs[i].slot * rb;
        VkDeviceSize bytes = (VkDeviceSize)runs[i].count * rb;
        /* Only later passes read the slots (this one reads the staging
         * rows), so the copies need no barrier: each pass begins with one. */
        if (!be->failed && bytes > 0) {
            vk_copy_for_next_pass(be->dev, &be->stage_k, src, &be->kv_k[il],
                                  dst, bytes);
            vk_copy_for_next_pass(be->dev, &be->stage_v, src, &be->kv_v[il],
                                  dst, bytes);
        }
    }
    kv_commit_done(kv);
}

/* attention's push constants for layer il's batch of n rows (positions
 * from rt), whose rows are in their slots when in_place. */
static struct vk_push_attention attention_push(const struct kv_cache *kv,
                                               int il, int n,
                                               const struct rope_table *rt,
                                               int n_head, int n_head_kv,
                                               int head_dim, int window,
                                               float scale, uint32_t in_place)
{
    /* enum kv_policy is full, ring, sink+window: the shader's 0, 1, 2;
     * enum kv_type is f32, f16, q8_0: 0, 1, 2. */
    const struct kv_layer *L = &kv->layers[il];
    return (struct vk_push_attention){
        .n_rows = (uint32_t)n, .pos_at = rt->pos_at,
        .n_head = (uint32_t)n_head, .n_head_kv = (uint32_t)n_head_kv,
        .head_dim = (uint32_t)head_dim, .type = (uint32_t)kv->type,
        .block = (uint32_t)kv->block, .row_bytes = (uint32_t)kv->row_bytes,
        .policy = (uint32_t)L->policy, .capacity = (uint32_t)L->capacity,
        .n_sink = (uint32_t)L->n_sink, .layer_window = (uint32_t)L->window,
        .model_window = (uint32_t)window, .scale = scale,
        .stage_in_place = in_place,
    };
}

/* How many query heads of a kv head an attention workgroup takes (1, 2
 * or 4, dividing the n_head / n_head_kv heads of a kv head) for `units`
 * workgroups of one head (heads x rows x splits). Loading a key once for 4
 * heads makes a workgroup's chain of work longer (1B shape on the H200: a
 * decode step's attention_rope 26.5 us with 4 against 14.2), which pays
 * only where the one-head form has more workgroups than the GPU runs at
 * once: so the most heads that leave at least
 * VK_ATTENTION_HEADS_WORKGROUPS workgroups. Every form gives a head the
 * same bits (test_vk_ops), so a token decoded and verified in different
 * forms is the same token. */
static uint32_t attention_heads(const struct vk_backend *be, int64_t units,
                                int n_head, int n_head_kv)
{
    const int group = n_head / n_head_kv;
    if (!be->has_heads_forms)
        return 1;
    for (uint32_t heads = 4; heads > 1; heads /= 2)
        if (group % (int)heads == 0 &&
            units / heads >= VK_ATTENTION_HEADS_WORKGROUPS)
            return heads;
    return 1;
}

/* The attention (or, with rope, attention_rope) pipeline of `heads` query
 * heads a workgroup. */
static const struct vk_pipeline *attention_form(const struct vk_backend *be,
                                                bool rope, uint32_t heads)
{
    if (heads == 4)
        return rope ? &be->attention_rope_h4 : &be->attention_h4;
    if (heads == 2)
        return rope ? &be->attention_rope_h2 : &be->attention_h2;
    return rope ? &be->attention_rope : &be->attention;
}

void vkb_attention(struct backend *base, struct be_tensor *out,
                   const struct be_tensor *q, const struct kv_cache *kv,
                   int il, int n, int pos0, int n_head, int n_head_kv,
                   int head_dim, int window, float scale)
{
    struct vk_backend *be = vkb(base);
    const struct kv_stage st = stage_of(be, kv, il, n);
    const struct rope_table *rt = pass_positions(be, n, pos0);
    if (!rt)
        return;
    const struct vk_push_attention pc =
        attention_push(kv, il, n, rt, n_head, n_head_kv, head_dim, window,
                       scale, st.in_place);
    const struct vk_buffer *bufs[] = {buf(q), &be->kv_k[il], &be->kv_v[il],
                                      st.k, st.v, buf(out), &rt->buf};
    const uint32_t heads =
        attention_heads(be, (int64_t)n * n_head, n_head, n_head_kv);
    dispatch(be, attention_form(be, false, heads), bufs, &pc,
             (uint32_t)n_head / heads, (uint32_t)n, 1);
}

/* Whether attention_rope takes layer il's batch of n rows: at most
 * VK_ROPE_ATTENTION_ROWS, written straight into their slots, in rows that
 * split into heads of whole words (for q8_0, of whole blocks), of which
 * that many fit a workgroup's shared memory. Only n <=
 * VK_ROPE_ATTENTION_ROWS depends on the batch, so decoding (1 row) and
 * verifying (up to 17) take the same path, and a token gets the same bits
 * either way: the separate dispatches may round the attention
 * differently (another shader, another compilation). */
static bool rope_attention_takes(const struct kv_cache *kv, int il, int n,
                                 int n_head_kv, int head_dim)
{
    const size_t head_bytes = kv->row_bytes / (size_t)n_head_kv;
    return n <= VK_ROPE_ATTENTION_ROWS && kv_in_place(kv, il, n) &&
           kv->row_bytes % (4 * (size_t)n_head_kv) == 0 &&
           (kv->type != KV_Q8_0 || head_dim % kv->block == 0) &&
           2 * VK_ROPE_ATTENTION_ROWS * head_bytes <= VK_ROPE_ATTENTION_BYTES;
}

/* attention_rope's splits for layer il's batch of n rows at pos0 (the
 * split fields of pc, vk_shaders.h, but split_group): rows that see more
 * than VK_ATTENTION_SPLIT_KEYS positions (kv_visible) are split, into at
 * most VK_ATTENTION_SPLIT_HEADS / n_head splits, the same for every batch.
 * Returns the most splits of a row (1: none is split; not always the last
 * row's: splits are whole units of VK_ATTENTION_SPLIT_KEYS). */
static uint32_t attention_splits(const struct kv_cache *kv, int il, int pos0,
                                 int n, int n_head, int window,
                                 struct vk_push_attention *pc)
{
    pc->split_keys = VK_ATTENTION_SPLIT_KEYS;
    pc->max_splits = (uint32_t)n_head < VK_ATTENTION_SPLIT_HEADS
                         ? VK_ATTENTION_SPLIT_HEADS / (uint32_t)n_head
                         : 1;
    const uint32_t most =
        vk_attention_most_splits(&kv->layers[il], window, pos0, n,
                                 pc->split_keys, pc->max_splits);
    pc->split_stride = most;
    return most;
}

/* attention_rope's grid in z for a batch of n rows of `per_row`
 * workgroups whose rows take at most `most` splits (pc's split_group: a
 * workgroup takes several of its row's splits in turn past
 * VK_ATTENTION_SPLIT_WORKGROUPS). 0 on failure (pass_fail). */
static uint32_t attention_split_grid(struct vk_backend *be, int n,
                                     int n_head, int head_dim,
                                     uint32_t per_row, uint32_t most,
                                     struct vk_push_attention *pc)
{
    pc->split_group = 1;
    if (most == 1)
        return 1;
    if ((size_t)n * (size_t)n_head * most * (size_t)(head_dim + 2) *
            sizeof(float) > be->splits.size) {
        pass_fail(be, "internal: more attention splits than were reserved");
        return 0;
    }
    pc->split_group = groups_of((int64_t)per_row * n * most,
                                VK_ATTENTION_SPLIT_WORKGROUPS);
    return groups_of(most, pc->split_group);
}

void vkb_rope_attention(struct backend *base, struct kv_cache *kv,
                        int il, int pos0, int n, struct be_tensor *q,
                        int n_head, struct be_tensor *k,
                        const struct be_tensor *v, int n_head_kv,
                        int head_dim, const struct be_rope *rope,
                        struct be_tensor *out, int window, float scale)
{
    struct vk_backend *be = vkb(base);
    if (!rope_attention_takes(kv, il, n, n_head_kv, head_dim)) {
        vkb_rope_kv_store(base, kv, il, pos0, n, q, n_head, k, v, n_head_kv,
                          head_dim, rope);
        vkb_attention(base, out, q, kv, il, n, pos0, n_head, n_head_kv,
                      head_dim, window, scale);
        return;
    }
    const struct rope_table *rt = rope_table(be, n, rope->n_rot, pos0,
                                             rope->pos, rope->base);
    if (!rt)
        return;
    const struct vk_buffer *qw = &rt->buf, *kw = &rt->buf;
    if (rope->q_norm) {
        qw = vk_model_find(be->weights, rope->q_norm);
        kw = vk_model_find(be->weights, rope->k_norm);
        if (!qw || !kw) {
            pass_fail(be, "internal: a q/k norm vector is not on the GPU");
            return;
        }
    }
    struct vk_push_attention pc = attention_push(
        kv, il, n, rt, n_head, n_head_kv, head_dim, window, scale, 1);
    pc.n_rot = (uint32_t)rope->n_rot;
    pc.style = rope->style == ROPE_NEOX;
    pc.has_norm = rope->q_norm != NULL;
    pc.head_bytes = (uint32_t)(kv->row_bytes / (size_t)n_head_kv);
    pc.eps = rope->norm_eps;
    const uint32_t most =
        attention_splits(kv, il, pos0, n, n_head, window, &pc);
    const uint32_t heads =
        attention_heads(be, (int64_t)n * n_head * most, n_head, n_head_kv);
    const uint32_t groups_z = attention_split_grid(
        be, n, n_head, head_dim, (uint32_t)n_head / heads, most, &pc);
    if (!groups_z)
        return;
    const struct vk_buffer *bufs[] = {buf(q),   &be->kv_k[il], &be->kv_v[il],
                                      buf(k),   buf(v),        buf(out),
                                      &rt->buf, qw,            kw,
                                      &be->splits,  &be->split_counts};
    dispatch(be, attention_form(be, true, heads), bufs, &pc,
             (uint32_t)n_head / heads, (uint32_t)n, groups_z);
    kv_stage_mark(kv, il, pos0, n);
}

