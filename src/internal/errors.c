// SPDX-License-Identifier: MIT
/* Thread-local error sentences and a thread-safe strerror. */
#include "internal/errors.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[NVS_ERRMSG_MAX];

const char *nvs_last_error(void)
{
	return last_error;
}

void nvs__errfmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

int nvs__err(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}

int nvs__err_set(int err, const char *msg)
{
	snprintf(last_error, sizeof(last_error), "%s", msg);
	return err;
}

const char *nvs_strerror(int err)
{
	if (err == INT_MIN)
		return "unknown error"; /* -INT_MIN does not exist */
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "success";
	case EBADMSG:
		return "data read back differs from data written";
	case EDEADLK:
		return "would wait forever";
	case EINPROGRESS:
		return "operation still in progress";
	default:
		break;
	}
	/* strerrordesc_np is thread-safe and static (glibc >= 2.32). */
	const char *s = strerrordesc_np(err);
	return s ? s : "unknown error";
}
