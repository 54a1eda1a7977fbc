// SPDX-License-Identifier: MIT
/*
 * The rank directory and its lock. flock, not fcntl locks: an flock
 * belongs to the open file, so it conflicts even within one process and
 * vanishes with the process, which is what tells a crashed owner's files
 * from a live one's.
 */
#include "swapper/swapdir.h"
#include "internal/errors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "swap."

/* mkdirat + open, refusing symlinks. */
static int subdir(int at, const char *name)
{
	if (mkdirat(at, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(at, name,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Remove every swap.* file; how many. */
static unsigned remove_swap_files(int dirfd)
{
	int fd = dup(dirfd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	unsigned n = 0;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	rewinddir(dir);
	while ((e = readdir(dir)))
		if (!strncmp(e->d_name, PREFIX, strlen(PREFIX)) &&
		    unlinkat(dirfd, e->d_name, 0) == 0)
			n++;
	closedir(dir);
	return n;
}

static long holder_pid(int lockfd)
{
	char buf[32] = "";
	ssize_t n = pread(lockfd, buf, sizeof(buf) - 1, 0);

	return n > 0 ? strtol(buf, NULL, 10) : 0;
}

/* A subdirectory name: one component, not "." or "..", printable. */
static bool good_name(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 64 || !strcmp(name, ".") || !strcmp(name, ".."))
		return false;
	for (size_t i = 0; i < n; i++)
		if (name[i] == '/' || (unsigned char)name[i] < 0x20)
			return false;
	return true;
}

int nvs__swapdir_open(const char *nvme_path, const char *name, int rank,
		      struct nvs_swapdir *d)
{
	char rname[32], pid[32];
	int base, top, ret, n;

	memset(d, 0, sizeof(*d));
	d->dirfd = d->lockfd = -1;
	if (name && !*name)
		name = NULL;
	if (rank < 0 || (name && !good_name(name)))
		return nvs__err(-EINVAL,
				"nvswap: bad swap directory name "
				"\"%s\" or rank %d",
				name ? name : "", rank);
	if (name)
		n = snprintf(d->path, sizeof(d->path), "%s/nvswap/%s/rank%d",
			     nvme_path, name, rank);
	else
		n = snprintf(d->path, sizeof(d->path), "%s/nvswap/rank%d",
			     nvme_path, rank);
	if (n >= (int)sizeof(d->path))
		return nvs__err(-ENAMETOOLONG, "nvswap: nvme_path %s: too long",
				nvme_path);
	d->named = name != NULL;
	base = open(nvme_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (base < 0)
		return nvs__err(-errno, "nvswap: nvme_path %s: %s", nvme_path,
				nvs_strerror(errno));
	top = subdir(base, "nvswap");
	close(base);
	if (top >= 0 && name) {
		int sub = subdir(top, name);
		close(top);
		top = sub;
	}
	if (top < 0)
		return nvs__err(top, "nvswap: %s: %s", d->path,
				nvs_strerror(-top));
	snprintf(rname, sizeof(rname), "rank%d", rank);
	d->dirfd = subdir(top, rname);
	close(top);
	if (d->dirfd < 0) {
		ret = d->dirfd;
		d->dirfd = -1;
		return nvs__err(ret, "nvswap: %s: %s", d->path,
				nvs_strerror(-ret));
	}
	d->lockfd = openat(d->dirfd, "lock",
			   O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (d->lockfd < 0) {
		ret = -errno;
		nvs__swapdir_close(d, false);
		return nvs__err(ret, "nvswap: %s/lock: %s", d->path,
				nvs_strerror(-ret));
	}
	if (flock(d->lockfd, LOCK_EX | LOCK_NB) < 0) {
		long holder = holder_pid(d->lockfd);
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		nvs__swapdir_close(d, false);
		return nvs__err(ret,
				"nvswap: %s is in use by process %ld (one "
				"swap directory per rank and process)",
				d->path, holder);
	}
	/* Ours now: whatever swap files are here, their owner is gone. */
	d->stale = remove_swap_files(d->dirfd);
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(d->lockfd, 0) < 0 ||
	    pwrite(d->lockfd, pid, (size_t)n, 0) != n) {
		ret = -errno;
		nvs__swapdir_close(d, false);
		return nvs__err(ret, "nvswap: %s/lock: %s", d->path,
				nvs_strerror(-ret));
	}
	return 0;
}

int nvs__swapdir_create(struct nvs_swapdir *d, const char *name, int flags)
{
	char file[256];
	int fd;

	if (snprintf(file, sizeof(file), PREFIX "%s", name) >=
	    (int)sizeof(file))
		return -ENAMETOOLONG;
	fd = openat(d->dirfd, file,
		    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags,
		    0600);
	if (fd < 0 && errno == EINVAL && (flags & O_DIRECT)) {
		/* The filesystem refuses O_DIRECT (after creating the
		 * file): buffered, then. */
		unlinkat(d->dirfd, file, 0);
		return nvs__swapdir_create(d, name, flags & ~O_DIRECT);
	}
	return fd < 0 ? -errno : fd;
}

void nvs__swapdir_close(struct nvs_swapdir *d, bool remove)
{
	bool owned = d->dirfd >= 0 && d->lockfd >= 0;

	if (remove && owned) {
		remove_swap_files(d->dirfd);
		unlinkat(d->dirfd, "lock", 0);
	}
	if (d->lockfd >= 0)
		close(d->lockfd); /* drops the flock */
	if (d->dirfd >= 0)
		close(d->dirfd);
	if (remove && owned) {
		/* Both fail harmlessly while someone else is in. */
		rmdir(d->path);
		if (d->named) {
			char *slash = strrchr(d->path, '/');
			*slash = '\0';
			rmdir(d->path);
			*slash = '/';
		}
	}
	d->dirfd = d->lockfd = -1;
}
