/* kakeya_error.h — the error struct shared by the public API and the engine
 * internals (kept apart so internal headers need not include kakeya.h). */
#ifndef KAKEYA_ERROR_H
#define KAKEYA_ERROR_H

struct kk_error {
    char msg[512];
};

#endif
