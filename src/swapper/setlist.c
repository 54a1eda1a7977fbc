// SPDX-License-Identifier: MIT
/*
 * nvs_swapset_list() (nvswap-fsck without --name): find the persistent
 * swap sets under an nvme_path, <path>/nvswap/rank<R> and
 * <path>/nvswap/<name>/rank<R>, and say what each is without opening it:
 * its generations, the newest one's tensors and paths, its data file's
 * size, and whether a live process holds it. Nothing is locked or
 * written, so listing never disturbs a set in use.
 */
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"
#include "swapper/flocks.h"
#include "swapper/manifest.h"
#include "swapper/paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/swapper.h"

#define WHO "nvs_swapset_list"

/* The pid the lock file in @dirfd names, 0 for none. */
static long named_pid(int dirfd)
{
	char line[32] = "";
	struct stat st;
	long pid = 0;
	int fd;

	/* A FIFO planted at "lock" must not block the listing. */
	fd = nvs__open_file(dirfd, "lock", O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0,
			    &st);
	if (fd < 0)
		return 0;
	if (S_ISREG(st.st_mode) && pread(fd, line, sizeof(line) - 1, 0) > 0)
		pid = strtol(line, NULL, 10);
	close(fd);
	return pid > 0 ? pid : 0;
}

/* The process holding @dirfd's lock (its flock, as /proc/locks lists
 * it), 0 for none. When no entry there matches the lock file's device
 * and inode (btrfs and overlayfs report another device to stat than to
 * /proc/locks), or there is no /proc: the live pid the lock file names,
 * with *@hint set; with /proc, only when that process holds an flock
 * on an inode of that number (a copy's lock file is another inode).
 * A hint: a copy of a set carries the pid of the original's holder. The
 * lock itself is never tried: that would make an opener fail meanwhile.
 */
static long holder(int dirfd, bool *hint)
{
	struct nvs__flock f[8];
	struct stat st;
	long named;
	int n;

	*hint = false;
	if (fstatat(dirfd, "lock", &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	named = named_pid(dirfd);
	n = nvs__flocks_on(st.st_dev, st.st_ino, f, 8);
	if (n >= 0) {
		bool flocks = false;
		if (n > 0 && f[0].same_dev)
			return f[0].pid;
		for (int i = 0; i < n && i < 8; i++)
			flocks |= named && f[i].pid == named;
		if (!flocks)
			return 0;
	}
	if (!named || (kill((pid_t)named, 0) < 0 && errno == ESRCH))
		return 0;
	*hint = true;
	return named;
}

/* Rank directory @rank (of @nvme_path, set @name) open as @dirfd: report
 * it when it holds a set. 1 reported, 0 not a set. */
static int one(const char *nvme_path, const char *real, const char *name,
	       const char *rank, int dirfd, nvs_swapset_fn fn, void *arg)
{
	char dir[4200], what[4200], abs[NVS_SWAPPER_MAX_PATHS][4096];
	struct nvs_swapset_info in = {0};
	struct nvs_manifest m = {0};
	uint64_t *gens = NULL;
	struct stat st;
	size_t n = 0;
	char *end;
	long r;

	errno = 0;
	r = strtol(rank + 4, &end, 10);
	if (*end || errno || r > INT32_MAX)
		return 0;
	if (nvs__manifest_list(dirfd, &gens, &n) < 0)
		n = 0;
	in.data_bytes =
		fstatat(dirfd, "set.data", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
				S_ISREG(st.st_mode)
			? (uint64_t)st.st_size
			: UINT64_MAX;
	if (!n && in.data_bytes == UINT64_MAX) {
		nvs__free(gens);
		return 0; /* scratch space, or nothing */
	}
	snprintf(dir, sizeof(dir), "%s/nvswap/%s%s%s", nvme_path, name,
		 *name ? "/" : "", rank);
	in.dir = dir;
	in.name = name;
	in.rank = (int)r;
	in.generations = (unsigned)n;
	in.pid = holder(dirfd, &in.pid_hint);
	in.what = "";
	if (n) {
		in.newest = gens[0];
		in.oldest = gens[n - 1];
		in.status = nvs__manifest_read(dirfd, dir, gens[0], &m);
		if (in.status < 0) {
			snprintf(what, sizeof(what), "%s", nvs_last_error());
			in.what = what;
		}
	}
	if (n && in.status == 0) {
		in.tensors = m.ntensors;
		for (size_t k = 0; k < m.ntensors; k++)
			in.tensor_bytes += m.t[k].nbytes;
		in.npaths = m.npaths;
		for (unsigned i = 0; i < m.npaths; i++) {
			if (nvs__paths_resolve(m.paths[i], real, abs[i],
					       sizeof(abs[i])) < 0)
				snprintf(abs[i], sizeof(abs[i]), "%s",
					 m.paths[i]);
			in.paths[i] = abs[i];
			if (*m.paths[i] == '/')
				in.whole |= 1u << i;
		}
		snprintf(what, sizeof(what), "%s", m.tag);
		in.what = what;
	}
	if (fn)
		fn(&in, arg);
	nvs__manifest_fini(&m);
	nvs__free(gens);
	return 1;
}

/* "rank<digits>": an unnamed set's rank directory, not a name. */
static bool is_rank(const char *s)
{
	if (strncmp(s, "rank", 4) || !s[4])
		return false;
	for (s += 4; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* Every rank<R> directory in @at (named @name, "" for none). */
static int ranks(const char *nvme_path, const char *real, const char *name,
		 int at, nvs_swapset_fn fn, void *arg)
{
	struct dirent *e;
	int found = 0, fd;
	DIR *d;

	fd = dup(at);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	rewinddir(d); /* the offset is shared with @at's */
	while ((e = readdir(d))) {
		int rfd;

		if (!is_rank(e->d_name))
			continue;
		rfd = openat(at, e->d_name,
			     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (rfd < 0)
			continue;
		found += one(nvme_path, real, name, e->d_name, rfd, fn, arg);
		close(rfd);
	}
	closedir(d);
	return found;
}

int nvs_swapset_list(const char *nvme_path, nvs_swapset_fn fn, void *arg)
{
	char top[4200], *real;
	struct dirent *e;
	int found, tfd;
	DIR *d;

	if (!nvme_path || !*nvme_path)
		return nvs__err(-EINVAL, WHO ": NULL or empty path");
	real = realpath(nvme_path, NULL);
	if (!real)
		return nvs__err(-errno, WHO ": %s: %s", nvme_path,
				nvs_strerror(errno));
	snprintf(top, sizeof(top), "%s/nvswap", nvme_path);
	tfd = open(top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tfd < 0) {
		int err = errno;
		free(real);
		if (err == ENOENT)
			return 0;
		return nvs__err(-err, WHO ": %s: %s", top, nvs_strerror(err));
	}
	found = ranks(nvme_path, real, "", tfd, fn, arg);
	{
		int fd = dup(tfd);

		d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d && fd >= 0)
			close(fd);
	}
	if (d)
		rewinddir(d);
	while (d && (e = readdir(d))) {
		int nfd;

		if (is_rank(e->d_name) || e->d_name[0] == '.')
			continue;
		nfd = openat(tfd, e->d_name,
			     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0)
			continue;
		found += ranks(nvme_path, real, e->d_name, nfd, fn, arg);
		close(nfd);
	}
	if (d)
		closedir(d);
	close(tfd);
	free(real);
	return found;
}
