// SPDX-License-Identifier: MIT
/* Full-length pread/pwrite, sorted-array search, the uthash OOM flag. */
#include "internal/util.h"
#include "internal/hash.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

_Thread_local int nvs__hash_oom;

long nvs__find_le(const void *base, size_t n, size_t size, size_t key_off,
		  uintptr_t key)
{
	const char *b = base;
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uintptr_t k;
		memcpy(&k, b + mid * size + key_off, sizeof(k));
		if (k <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (long)lo - 1;
}

ssize_t nvs__pio_full(int fd, void *buf, size_t len, off_t off, bool write)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = write ? pwrite(fd, (char *)buf + done, len - done,
					   off + (off_t)done)
				  : pread(fd, (char *)buf + done, len - done,
					  off + (off_t)done);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (r == 0) {
			/* EOF on a read; a zero-byte write means no space. */
			if (write)
				return -ENOSPC;
			break;
		}
		done += (size_t)r;
	}
	return (ssize_t)done;
}
