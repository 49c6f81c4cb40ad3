/* store_edit.h — the edits the chat needs that store.h does not (yet)
 * offer: dropping messages (regenerate, edit and resend, a failed empty
 * answer) and changing a conversation's system prompt. Same rules as
 * store.h: one transaction each, 0 or -1 with a message. To be folded into
 * store.h by its owner. */
#ifndef KK_STORE_EDIT_H
#define KK_STORE_EDIT_H

#include <stdint.h>

#include "store.h"

/* Deletes message id and every later message of its conversation. */
int store_delete_messages_from(struct store *s, int64_t conversation_id,
                               int64_t message_id, struct kk_error *err);
int store_set_system_prompt(struct store *s, int64_t conversation_id,
                            const char *text, struct kk_error *err);

#endif
