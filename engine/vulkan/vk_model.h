/* vk_model.h — a model's weights in device memory.
 *
 * vk_model_upload() copies every matrix the forward pass multiplies by (in
 * its stored type: quantized weights stay quantized) and every norm and
 * bias vector into device buffers, once. The forward pass still names
 * weights by their host addresses (struct weight's data, the model's f32
 * vectors); vk_model_find() maps such an address to its device buffer.
 * The embedding table stays on the host unless the output matrix shares
 * it: embedding rows are gathered on the host, where they are.
 *
 * Q8_0 rows are rearranged on the way (vk_model_repack_rows): a GPU reads
 * 34-byte blocks only 2 bytes at a time, their quants 16 bytes at a time. */
#ifndef KK_VK_MODEL_H
#define KK_VK_MODEL_H

#include "kakeya_error.h"
#include "vk_device.h"

struct model;
struct vk_model;

/* Fails with a message (and uploads nothing more) when a tensor is more
 * than the device binds at once (vk_device_max_buffer_range), naming its
 * size and the way out, --backend cpu. */
int vk_model_upload(struct vk_device *d, const struct model *m,
                    struct vk_model **out, struct kk_error *err);
void vk_model_free(struct vk_device *d, struct vk_model *vm);

/* The device copy of the tensor or vector at host address `host`, or NULL
 * when none was uploaded from there. */
const struct vk_buffer *vk_model_find(const struct vk_model *vm,
                                      const void *host);

/* The device layout of n_rows rows of `type` (row_bytes each) from src to
 * dst (not overlapping): Q8_0 rows become the row's 32-byte quant runs, all
 * of them, then its f16 scales, in the same row_bytes (what the matmul
 * shader reads); other types are copied as they are. */
void vk_model_repack_rows(uint32_t type, int64_t n_cols, int64_t n_rows,
                          size_t row_bytes, const void *src, void *dst);

/* Bytes of weights on the device. */
uint64_t vk_model_bytes(const struct vk_model *vm);

#endif
