// SPDX-License-Identifier: MIT
/* Full-length pread/pwrite and the uthash out-of-memory flag. */
#include "internal/util.h"
#include "internal/hash.h"

#include <errno.h>
#include <unistd.h>

_Thread_local int nvs__hash_oom;

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
