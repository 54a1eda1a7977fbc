// SPDX-License-Identifier: MIT
/* Full-length pread/pwrite, sorted-array search, the uthash OOM flag,
 * a path's open that never blocks, the on/off environment variables. */
#include "internal/util.h"
#include "internal/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

int nvs__open_file(int dirfd, const char *path, int flags, mode_t mode,
		   struct stat *st)
{
	int fd, fl, err;

	st->st_mode = 0;
	fd = openat(dirfd, path, flags | O_NONBLOCK, mode);
	if (fd < 0) {
		err = errno;
		/* ENXIO names neither a FIFO nor a socket: let the caller. */
		if (err != ENXIO ||
		    fstatat(dirfd, path, st,
			    flags & O_NOFOLLOW ? AT_SYMLINK_NOFOLLOW : 0) < 0 ||
		    nvs__file_io_ok(st->st_mode))
			st->st_mode = 0;
		errno = err;
		return -1;
	}
	if (fstat(fd, st) < 0)
		goto fail;
	if (!nvs__file_io_ok(st->st_mode))
		return fd;
	/* Cleared for the files that are used: io_uring answers EAGAIN on
	 * an O_NONBLOCK file, and a later reader of the flags must not
	 * take it for the caller's choice. */
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0)
		return fd;
fail:
	err = errno;
	close(fd);
	st->st_mode = 0;
	errno = err;
	return -1;
}

const char *nvs__file_type(mode_t mode)
{
	if (S_ISREG(mode))
		return "a regular file";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISLNK(mode))
		return "a symbolic link";
	return "of an unknown type";
}

int nvs__env_switch(const char *name, bool dflt, bool *on, char *msg,
		    size_t len)
{
	static const char *const yes[] = {"1", "on", "true", "yes"};
	static const char *const no[] = {"0", "off", "false", "no"};
	const char *v = getenv(name);

	*on = dflt;
	if (!v || !*v)
		return 0;
	for (size_t i = 0; i < NVS_ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(v, yes[i])) {
			*on = true;
			return 0;
		}
		if (!strcasecmp(v, no[i])) {
			*on = false;
			return 0;
		}
	}
	snprintf(msg, len, "%s=%.100s%s is not one of " NVS_ENV_SWITCH_VALUES,
		 name, v, strlen(v) > 100 ? "..." : "");
	return -EINVAL;
}
