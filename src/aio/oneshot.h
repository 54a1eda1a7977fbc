/* SPDX-License-Identifier: MIT */
/* Library-internal part of the one-shot calls (tests use it). */
#ifndef NVS_AIO_ONESHOT_H
#define NVS_AIO_ONESHOT_H

#include <stddef.h>

/*
 * Compare the first @n bytes of @path, read with plain buffered I/O, with
 * @buf. Returns 0, -EBADMSG naming the first differing byte (or a file too
 * short), or -errno.
 */
int nvs__validate_file(const char *call, const char *path, const void *buf,
		       size_t n);

#endif
