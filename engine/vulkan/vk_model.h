/* vk_model.h — a model's weights in device memory.
 *
 * vk_model_upload() copies every matrix the forward pass multiplies by (in
 * its stored type: quantized weights stay quantized) and every norm and
 * bias vector into device buffers, once. The forward pass still names
 * weights by their host addresses (struct weight's data, the model's f32
 * vectors); vk_model_find() maps such an address to its device buffer.
 * The embedding table stays on the host unless the output matrix shares
 * it: embedding rows are gathered on the host, where they are. */
#ifndef KK_VK_MODEL_H
#define KK_VK_MODEL_H

#include "kakeya_error.h"
#include "vk_device.h"

struct model;
struct vk_model;

int vk_model_upload(struct vk_device *d, const struct model *m,
                    struct vk_model **out, struct kk_error *err);
void vk_model_free(struct vk_device *d, struct vk_model *vm);

/* The device copy of the tensor or vector at host address `host`, or NULL
 * when none was uploaded from there. */
const struct vk_buffer *vk_model_find(const struct vk_model *vm,
                                      const void *host);

/* Bytes of weights on the device. */
uint64_t vk_model_bytes(const struct vk_model *vm);

#endif
