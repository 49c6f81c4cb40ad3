/* error.c — see error.h. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kk_fail(struct kk_error *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void kk_error_prefix(struct kk_error *err, const char *prefix)
{
    if (!err || !prefix)
        return;
    /* Build "prefix: message" in a copy, truncating at the buffer's end. */
    char tmp[sizeof err->msg];
    size_t np = strlen(prefix), nm = strnlen(err->msg, sizeof err->msg);
    size_t len = 0;
    for (size_t i = 0; i < np && len < sizeof tmp - 1; i++)
        tmp[len++] = prefix[i];
    for (size_t i = 0; i < 2 && len < sizeof tmp - 1; i++)
        tmp[len++] = ": "[i];
    for (size_t i = 0; i < nm && len < sizeof tmp - 1; i++)
        tmp[len++] = err->msg[i];
    tmp[len] = 0;
    memcpy(err->msg, tmp, len + 1);
}
