/* store_edit.c — message deletion and system prompts (see store_edit.h). */
#include "store_edit.h"

#include "store_internal.h"

int store_delete_messages_from(struct store *s, int64_t conversation_id,
                               int64_t message_id, struct kk_error *err)
{
    return sql_do(s, "deleting messages", err,
                  "DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                  "ii", conversation_id, message_id);
}

int store_set_system_prompt(struct store *s, int64_t conversation_id,
                            const char *text, struct kk_error *err)
{
    return sql_do(s, "setting the system prompt", err,
                  "UPDATE conversations SET system_prompt = ? WHERE id = ?",
                  "ti", text ? text : "", conversation_id);
}
