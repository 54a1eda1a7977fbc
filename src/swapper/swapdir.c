// SPDX-License-Identifier: MIT
/*
 * The rank directory and its lock. flock, not fcntl locks: an flock
 * belongs to the open file, so it conflicts even within one process and
 * vanishes with the process, which is what tells a crashed owner's files
 * from a live one's.
 */
#include "swapper/swapdir.h"
#include "internal/errors.h"
#include "swapper/flocks.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define PREFIX "swap."

/*
 * mkdirat + open, refusing symlinks and directories another user controls
 * (OpenSSH's StrictModes, systemd's tmpfiles): owned by someone else, or
 * writable by group or others without the sticky bit, whoever could
 * write there could plant or swap files under us. @shown names the
 * directory in the message; *@made says whether this call created it.
 * A reader (@ro) makes nothing and accepts another owner's directory
 * (it reads that user's set, as it would read their model file), not
 * one that others could write into.
 * Returns the descriptor or -errno with nvs_last_error() set.
 */
static int subdir(int at, const char *name, const char *shown, bool *made,
		  bool ro)
{
	struct stat st;
	int fd, ret;

	*made = !ro && mkdirat(at, name, 0700) == 0;
	if (!ro && !*made && errno != EEXIST)
		return nvs__err(-errno, "nvswap: %s: %s", shown,
				nvs_strerror(errno));
	fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return nvs__err(-errno, "nvswap: %s: %s", shown,
				nvs_strerror(errno));
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		close(fd);
		return nvs__err(ret, "nvswap: %s: %s", shown,
				nvs_strerror(-ret));
	}
	if (!ro && st.st_uid != geteuid()) {
		close(fd);
		return nvs__err(-EPERM,
				"nvswap: %s is owned by uid %u (mode %04o), "
				"not by this user (uid %u): its owner could "
				"plant or replace files there; remove it or "
				"use a path of your own",
				shown, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777),
				(unsigned)geteuid());
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
		close(fd);
		return nvs__err(-EPERM,
				"nvswap: %s (owner uid %u) has mode %04o: "
				"writable by group or others without the "
				"sticky bit, so another user could replace its "
				"files; chmod go-w it or remove it",
				shown, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777));
	}
	return fd;
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

/* A regular file of this user's with one link: what we create. A
 * reader (@ro) accepts another user's. */
static bool plain_file(int fd, bool ro)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       (ro || st.st_uid == geteuid()) && st.st_nlink == 1;
}

/*
 * The directories this process created (<nvme_path>/nvswap, and the
 * levels of a missing nvme_path itself), so that the last of its
 * swappers there removes them when empty (rmdir refuses a non-empty
 * one), and one the user made is left alone.
 */
#define MADE_MAX 256
static struct {
	pthread_mutex_t lock; /* protects everything below */
	struct nvs__dirid id[MADE_MAX];
	unsigned n;
	/* The swap directories open in this process: a forked child closes
	 * their descriptors (made_child), so that it holds no parent's lock
	 * beyond the parent's life. */
	struct nvs_swapdir *open[256];
	unsigned nopen;
} made = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* made.lock across fork(): held around it, so a child never inherits it
 * locked by a thread that does not exist there. */
static void made_lock(void)
{
	pthread_mutex_lock(&made.lock);
}

static void made_unlock(void)
{
	pthread_mutex_unlock(&made.lock);
}

/* In a forked child: the parent's swap directories are the parent's.
 * Their lock's open file description is shared with the parent; closing
 * the child's descriptor leaves the parent's flock in place, but a child
 * that outlives the parent no longer keeps the swap set locked. */
static void made_child(void)
{
	for (unsigned i = 0; i < made.nopen; i++) {
		struct nvs_swapdir *d = made.open[i];
		if (d->lockfd >= 0)
			close(d->lockfd);
		if (d->dirfd >= 0)
			close(d->dirfd);
		d->lockfd = d->dirfd = -1;
	}
	made.nopen = 0;
	pthread_mutex_unlock(&made.lock);
}

static pthread_once_t made_once = PTHREAD_ONCE_INIT;

static void made_atfork(void)
{
	pthread_atfork(made_lock, made_unlock, made_child);
}

static void track(struct nvs_swapdir *d, bool open)
{
	pthread_once(&made_once, made_atfork);
	pthread_mutex_lock(&made.lock);
	for (unsigned i = 0; i < made.nopen; i++)
		if (made.open[i] == d) {
			made.open[i] = made.open[--made.nopen];
			break;
		}
	if (open && made.nopen < sizeof(made.open) / sizeof(*made.open))
		made.open[made.nopen++] = d;
	pthread_mutex_unlock(&made.lock);
}

/* @path under @at (AT_FDCWD; "" for @at itself), not followed: 0 and
 * its identity when it is a directory, -ENOTDIR when it is something
 * else, or statx's -errno. */
static int dirid_at(int at, const char *path, struct nvs__dirid *id)
{
	struct statx sx;

	if (statx(at, path, AT_SYMLINK_NOFOLLOW | (*path ? 0 : AT_EMPTY_PATH),
		  STATX_TYPE | STATX_INO | STATX_BTIME, &sx) < 0)
		return -errno;
	id->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
	id->ino = sx.stx_ino;
	id->born_sec = 0;
	id->born_nsec = 0;
	if (sx.stx_mask & STATX_BTIME) {
		id->born_sec = sx.stx_btime.tv_sec;
		id->born_nsec = sx.stx_btime.tv_nsec;
	}
	return S_ISDIR(sx.stx_mode) ? 0 : -ENOTDIR;
}

static bool dirid_eq(const struct nvs__dirid *a, const struct nvs__dirid *b)
{
	return a->dev == b->dev && a->ino == b->ino &&
	       a->born_sec == b->born_sec && a->born_nsec == b->born_nsec;
}

static int made_find(const struct nvs__dirid *id)
{
	for (unsigned i = 0; i < made.n; i++)
		if (dirid_eq(&made.id[i], id))
			return (int)i;
	return -1;
}

/* Note a directory this process made; made.lock held. */
static void made_add(const struct nvs__dirid *id)
{
	if (made_find(id) < 0 && made.n < MADE_MAX)
		made.id[made.n++] = *id;
}

static void made_del(unsigned i)
{
	made.id[i] = made.id[--made.n];
}

static void note_top(struct nvs_swapdir *d, int top, bool created)
{
	pthread_once(&made_once, made_atfork);
	if (dirid_at(top, "", &d->top) < 0)
		return;
	pthread_mutex_lock(&made.lock);
	if (created)
		made_add(&d->top);
	pthread_mutex_unlock(&made.lock);
}

/* The top directory (<nvme_path>/nvswap) removed when this process made
 * it and it is empty (@remove), or forgotten (a persistent set's stays
 * for good: its entry would only wait for the inode to be reused). */
static void drop_top(struct nvs_swapdir *d, bool remove)
{
	struct nvs__dirid now;
	char c = d->path[d->top_len];
	int i;

	d->path[d->top_len] = '\0';
	pthread_mutex_lock(&made.lock);
	i = made_find(&d->top);
	if (i >= 0 && !remove)
		made_del((unsigned)i);
	else if (i >= 0 && dirid_at(AT_FDCWD, d->path, &now) == 0 &&
		 dirid_eq(&now, &d->top) && rmdir(d->path) == 0)
		made_del((unsigned)i);
	pthread_mutex_unlock(&made.lock);
	d->path[d->top_len] = c;
}

/* The directory that holds @path's last component ("/" or "."). */
static void parent_of(const char *path, size_t end, char *out, size_t len)
{
	while (end > 1 && path[end - 1] == '/')
		end--;
	while (end > 0 && path[end - 1] != '/')
		end--;
	while (end > 1 && path[end - 1] == '/')
		end--;
	if (end == 0)
		snprintf(out, len, ".");
	else
		snprintf(out, len, "%.*s", (int)end, path);
}

int nvs__swapdir_mkpath(const char *path, bool check, char *level, size_t len)
{
	char buf[sizeof(((struct nvs_swapdir *)0)->path)];
	size_t n = strlen(path), i = 0;
	struct nvs__dirid id;
	struct stat st;
	int ret = 0;

	snprintf(level, len, "%s", path);
	if (n == 0)
		return -ENOENT;
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	pthread_once(&made_once, made_atfork);
	pthread_mutex_lock(&made.lock);
	while (i < n) {
		/* The next level: up to the end of the next component. */
		while (i < n && buf[i] == '/')
			i++;
		while (i < n && buf[i] != '/')
			i++;
		char c = buf[i];
		buf[i] = '\0';
		snprintf(level, len, "%s", buf);
		if (stat(buf, &st) == 0) {
			if (!S_ISDIR(st.st_mode)) {
				ret = -ENOTDIR;
				break;
			}
		} else if (errno != ENOENT) {
			ret = -errno;
			break;
		} else if (check) {
			/* The rest would be made here: can it be? */
			char up[sizeof(buf)];
			parent_of(buf, i, up, sizeof(up));
			ret = access(up, W_OK | X_OK) < 0 ? -errno : 0;
			break;
		} else {
			/* EEXIST: made meanwhile by someone else. */
			bool ours = mkdir(buf, 0700) == 0;
			if (!ours && errno != EEXIST) {
				ret = -errno;
				break;
			}
			if ((ret = dirid_at(AT_FDCWD, buf, &id)) < 0)
				break;
			if (ours)
				made_add(&id);
		}
		buf[i] = c;
	}
	pthread_mutex_unlock(&made.lock);
	return ret;
}

/* The levels of @path this process made, from the last up: removed
 * while empty (@remove), or forgotten (a persistent set stays there). */
static void unmake(const char *path, bool remove)
{
	char buf[sizeof(((struct nvs_swapdir *)0)->path)];
	size_t n = strlen(path);
	struct nvs__dirid id;
	int i;

	if (n == 0 || n >= sizeof(buf))
		return;
	memcpy(buf, path, n + 1);
	pthread_once(&made_once, made_atfork);
	pthread_mutex_lock(&made.lock);
	for (;;) {
		while (n > 1 && buf[n - 1] == '/')
			buf[--n] = '\0';
		if (dirid_at(AT_FDCWD, buf, &id) < 0)
			break;
		i = made_find(&id);
		if (i < 0 || (remove && rmdir(buf) < 0))
			break;
		made_del((unsigned)i);
		char *slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			break;
		*slash = '\0';
		n = (size_t)(slash - buf);
	}
	pthread_mutex_unlock(&made.lock);
}

void nvs__swapdir_rmpath(const char *path)
{
	unmake(path, true);
}

static long holder_pid(int lockfd)
{
	char buf[32] = "";
	ssize_t n = pread(lockfd, buf, sizeof(buf) - 1, 0);

	return n > 0 ? strtol(buf, NULL, 10) : 0;
}

static bool alive(long pid)
{
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

/*
 * The lock is held, but by a process that no longer exists: the kernel
 * may drop a dead process's lock a little after it is reaped (an
 * io_uring's workers let go of its files last). Wait up to a second for
 * that, and take the lock (@op); false when it stays held.
 */
static bool holder_gone(int lockfd, int op)
{
	for (int i = 0; i < 100; i++) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
		if (flock(lockfd, op | LOCK_NB) == 0)
			return true;
	}
	errno = EWOULDBLOCK;
	return false;
}

/*
 * Take @d's lock, shared for a reader (@ro), else exclusive. Held by
 * others: the live holders /proc/locks lists are named (readers, or the
 * writer; without /proc, the pid the lock file holds) in -EBUSY, and a
 * lock only dead processes hold is waited for (holder_gone()).
 */
static int take_lock(struct nvs_swapdir *d, bool ro)
{
	int op = ro ? LOCK_SH : LOCK_EX, n, nlive = 0;
	struct nvs__flock f[8], live[8];
	bool writer = false;
	char who[160];
	struct stat st;

	if (flock(d->lockfd, op | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return nvs__err(-errno, "nvswap: %s/lock: %s", d->path,
				nvs_strerror(errno));
	n = fstat(d->lockfd, &st) == 0
		    ? nvs__flocks_on(st.st_dev, st.st_ino, f, 8)
		    : -1;
	for (int i = 0; i < n && i < 8; i++) {
		bool seen = false;
		/* pid 0: a holder /proc/locks could not translate (older
		 * kernels listed other PID namespaces' locks so), alive
		 * as far as we can tell. */
		if (f[i].same_dev != f[0].same_dev ||
		    (f[i].pid > 0 && !alive(f[i].pid)))
			continue;
		writer |= f[i].write;
		/* One process may hold several (two readers of its own). */
		for (int j = 0; j < nlive; j++)
			seen |= live[j].pid == f[i].pid;
		if (!seen)
			live[nlive++] = f[i];
	}
	if (nlive == 0) {
		/* None listed alive; without /proc the lock file says who. */
		long pid = holder_pid(d->lockfd);
		if (n < 0 && alive(pid)) {
			live[nlive++] = (struct nvs__flock){.pid = pid};
			writer = true;
		} else if (holder_gone(d->lockfd, op)) {
			return 0;
		} else if (n >= 0) {
			/* /proc/locks lists only the locks of processes this
			 * PID namespace shows: a container sharing the volume
			 * holds it; or a child that inherited the lock of a
			 * process now gone (listed under the dead pid). The
			 * lock file's pid is the last writer's (a reader
			 * writes none), not necessarily a holder. */
			char last[96] = "";
			if (pid > 0)
				snprintf(last, sizeof(last),
					 "; its lock file names process %ld, "
					 "the set's last writer",
					 pid);
			return nvs__err(-EBUSY,
					"nvswap: %s is locked by a process "
					"this PID namespace does not show (one "
					"in another container sharing the "
					"volume: /proc/locks lists only the "
					"locks of the processes it shows), or "
					"by a child that inherited the lock of "
					"a process now gone%s",
					d->path, last);
		} else {
			live[nlive++] = (struct nvs__flock){.pid = pid};
			writer = true;
		}
	}
	nvs__flocks_name(live, (unsigned)nlive, (unsigned)nlive, who,
			 sizeof(who));
	if (ro)
		return nvs__err(-EBUSY,
				"nvswap: %s is held for writing by %s: a "
				"read-only open shares a set only with other "
				"readers (open it when the writer has closed "
				"it)",
				d->path, who);
	if (!writer)
		return nvs__err(-EBUSY,
				"nvswap: %s is open read-only by %s: a writer "
				"needs the set alone (close the readers "
				"first)",
				d->path, who);
	return nvs__err(-EBUSY,
			"nvswap: %s is in use by %s (one swap directory per "
			"rank and process)",
			d->path, who);
}

/*
 * A reader's lock file: open read-only. Missing (a copy that left it
 * out): on a read-only filesystem no writer can come, so the set is
 * read unlocked (-1); in a directory of ours it is made, as the first
 * writer would; else -ENOENT.
 */
static int open_lock_ro(struct nvs_swapdir *d, int *fd)
{
	struct statvfs vfs;
	struct stat st;

	*fd = openat(d->dirfd, "lock",
		     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (*fd >= 0 || errno != ENOENT)
		return *fd >= 0 ? 0 : -errno;
	if (fstatvfs(d->dirfd, &vfs) == 0 && (vfs.f_flag & ST_RDONLY))
		return 0;
	if (fstat(d->dirfd, &st) == 0 && st.st_uid == geteuid()) {
		*fd = openat(d->dirfd, "lock",
			     O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
				     O_CLOEXEC,
			     0600);
		return *fd >= 0 ? 0 : -errno;
	}
	return -ENOENT;
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

static int open_once(const char *nvme_path, const char *name, int rank,
		     struct nvs_swapdir *d, bool ro)
{
	char rname[32], pid[32], lvl[sizeof(d->path)];
	int base, top, ret, n;
	bool made_top = false, mk;

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
	d->readonly = ro;
	d->top_len = strlen(nvme_path) + strlen("/nvswap");
	base = open(nvme_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (base < 0)
		return nvs__err(-errno, "nvswap: nvme_path %s: %s", nvme_path,
				nvs_strerror(errno));
	snprintf(lvl, sizeof(lvl), "%s/nvswap", nvme_path);
	top = subdir(base, "nvswap", lvl, &made_top, ro);
	close(base);
	if (top >= 0 && !ro)
		note_top(d, top, made_top);
	if (top >= 0 && name) {
		snprintf(lvl, sizeof(lvl), "%s/nvswap/%s", nvme_path, name);
		int sub = subdir(top, name, lvl, &mk, ro);
		close(top);
		top = sub;
	}
	if (top >= 0) {
		snprintf(rname, sizeof(rname), "rank%d", rank);
		snprintf(lvl, sizeof(lvl), "%s", d->path);
		d->dirfd = subdir(top, rname, d->path, &mk, ro);
		close(top);
		top = d->dirfd;
	}
	if (top < 0) {
		d->dirfd = -1;
		if (!ro)
			drop_top(d, true);
		else if (top == -ENOENT)
			nvs__err(top,
				 "nvswap: no persistent swap set to open "
				 "read-only in %s: %s does not exist",
				 d->path, lvl);
		return top;
	}
	/* O_NONBLOCK: a FIFO or device planted at "lock" must not block
	 * the open; it is refused below. */
	if (ro)
		ret = open_lock_ro(d, &d->lockfd);
	else
		ret = (d->lockfd = openat(d->dirfd, "lock",
					  O_RDWR | O_CREAT | O_NOFOLLOW |
						  O_NONBLOCK | O_CLOEXEC,
					  0600)) < 0
			      ? -errno
			      : 0;
	if (ret == 0 && d->lockfd >= 0 && !plain_file(d->lockfd, ro))
		ret = -EINVAL;
	if (ret < 0) {
		nvs__swapdir_close(d, false);
		return nvs__err(ret, "nvswap: %s/lock: %s", d->path,
				ret == -EINVAL ? "not a regular file of ours"
				: ret == -ENOENT
					? "missing, and this user cannot "
					  "make it (the set's owner opens "
					  "it once to)"
					: nvs_strerror(-ret));
	}
	if (d->lockfd < 0) {
		/* A read-only filesystem: nobody can write the set. */
		track(d, true);
		return 0;
	}
	if ((ret = take_lock(d, ro)) < 0) {
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		nvs__swapdir_close(d, false);
		return nvs__err_set(ret, msg);
	}
	if (ro) {
		/* A reader writes nothing: no pid, no adoption, no clean
		 * up of what a dead owner left. */
		track(d, true);
		return 0;
	}
	/* A pid in the lock: a dead owner's (we hold it now). Its
	 * <nvme_path>/nvswap is adopted as if made here, so the last
	 * scratch swapper removes it when empty: SIGKILL leaves nothing
	 * for good. */
	bool inherited = pread(d->lockfd, pid, sizeof(pid), 0) > 0;
	/* Ours now: say so first (a process refused meanwhile names us,
	 * not the dead owner), then clear what the dead owner left. */
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(d->lockfd, 0) < 0 ||
	    pwrite(d->lockfd, pid, (size_t)n, 0) != n) {
		ret = -errno;
		nvs__swapdir_close(d, false);
		return nvs__err(ret, "nvswap: %s/lock: %s", d->path,
				nvs_strerror(-ret));
	}
	d->stale = remove_swap_files(d->dirfd);
	if (inherited) {
		pthread_mutex_lock(&made.lock);
		made_add(&d->top);
		pthread_mutex_unlock(&made.lock);
	}
	track(d, true);
	return 0;
}

int nvs__swapdir_open(const char *nvme_path, const char *name, int rank,
		      struct nvs_swapdir *d)
{
	int ret = 0;

	/* The last swapper of another thread or process that created
	 * <nvme_path>/nvswap removes it when it is empty: if that happens
	 * between our opening it and making our directory inside, a step
	 * meets ENOENT, and the whole walk starts again. */
	for (int tries = 0; tries < 8; tries++) {
		ret = open_once(nvme_path, name, rank, d, false);
		if (ret != -ENOENT)
			break;
	}
	return ret;
}

int nvs__swapdir_open_ro(const char *nvme_path, const char *name, int rank,
			 struct nvs_swapdir *d)
{
	return open_once(nvme_path, name, rank, d, true);
}

int nvs__swapdir_make(const char *nvme_path, const char *name, int rank,
		      struct nvs_swapdir *d)
{
	char level[sizeof(d->path)];
	int ret = 0;

	/* As in nvs__swapdir_open, and a level of nvme_path this process
	 * made may go with its last scratch swapper meanwhile. */
	for (int tries = 0; tries < 8; tries++) {
		ret = nvs__swapdir_mkpath(nvme_path, false, level,
					  sizeof(level));
		if (ret < 0) {
			memset(d, 0, sizeof(*d));
			d->dirfd = d->lockfd = -1;
			return nvs__swapdir_mkpath_err(ret, nvme_path, level);
		}
		ret = open_once(nvme_path, name, rank, d, false);
		if (ret != -ENOENT)
			break;
	}
	return ret;
}

int nvs__swapdir_mkpath_err(int err, const char *nvme_path, const char *level)
{
	if (err == -ENOTDIR)
		return nvs__err(err,
				"nvswap: nvme_path %s: %s is not a directory",
				nvme_path, level);
	if (!strcmp(level, nvme_path))
		return nvs__err(err, "nvswap: nvme_path %s: %s", nvme_path,
				nvs_strerror(-err));
	return nvs__err(err, "nvswap: nvme_path %s: cannot create %s: %s",
			nvme_path, level, nvs_strerror(-err));
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
	bool owned = d->dirfd >= 0 && d->lockfd >= 0 && !d->readonly;

	if (d->readonly) {
		/* Nothing made, nothing to remove or forget. */
		if (d->dirfd >= 0)
			track(d, false);
		remove = false;
	}
	if (owned)
		track(d, false);

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
	if (owned) {
		/* nvswap/ and the levels of nvme_path made for it: removed
		 * when empty with a scratch set, forgotten with a kept one. */
		drop_top(d, remove);
		if (remove && d->discard) {
			/* nvswap's own level: a discarded set empties it. */
			char c = d->path[d->top_len];
			d->path[d->top_len] = '\0';
			rmdir(d->path);
			d->path[d->top_len] = c;
		}
		size_t n = d->top_len - strlen("/nvswap");
		char c = d->path[n];
		d->path[n] = '\0';
		unmake(d->path, remove);
		d->path[n] = c;
	}
	d->dirfd = d->lockfd = -1;
}
