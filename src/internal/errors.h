/* SPDX-License-Identifier: MIT */
/* Thread-local error sentences behind nvs_last_error(). */
#ifndef NVS_INTERNAL_ERRORS_H
#define NVS_INTERNAL_ERRORS_H

#include <stddef.h>

#include "nvswap/common.h"

/*
 * Record a failure for the calling thread and return @err (a -errno) so a
 * call can end with `return nvs__err(-EINVAL, "...", ...)`.
 */
int nvs__err(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Format a sentence into @buf (for errors raised on another thread). */
void nvs__errfmt(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Make @msg this thread's last error and return @err. */
int nvs__err_set(int err, const char *msg);

#endif
