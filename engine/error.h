/* error.h — errors as values with words.
 *
 * A function that can fail returns a status (0 on success, -1 on failure)
 * and fills a caller-owned struct kk_error with a message for the user: what
 * happened and, where it helps, what to do. The message is plain text, one or
 * two sentences, no trailing newline. Passing err == NULL is allowed: the
 * message is then dropped. */
#ifndef KK_ERROR_H
#define KK_ERROR_H

#include "kakeya_error.h"

/* Formats a message into err (if non-NULL) and returns -1, so a failing path
 * reads `return kk_fail(err, "...", ...);`. */
int kk_fail(struct kk_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to an existing message (e.g. the file name). */
void kk_error_prefix(struct kk_error *err, const char *prefix);

#endif
