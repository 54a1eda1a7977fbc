// SPDX-License-Identifier: MIT
/*
 * Resolving an op's target: a path through the open-file cache (reopened
 * when the path names another inode) or a caller's descriptor, checked for
 * the op; O_DIRECT with a buffered fallback, alignment, a read's range, a
 * write's preallocation, and the buffered descriptor for unaligned edges.
 */
#include "aio/target.h"
#include "aio/align.h"
#include "aio/files.h"
#include "aio/handle.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void nvs__target_close(struct nvs_aio *h, struct nvs_target *t)
{
	if (t->file)
		nvs__files_release(h->files, t->file);
	if (t->own_bfd && t->bfd >= 0)
		close(t->bfd);
	if (t->own_fd && t->fd >= 0)
		close(t->fd);
	*t = (struct nvs_target){.fd = -1, .bfd = -1};
}

/*
 * open() failed with errno: say why. A FIFO without a reader or a socket
 * opened for writing fails with ENXIO, which names neither: name the
 * type instead, as a read of one does.
 */
static int open_failed(const struct nvs_aio_io *io, const char *path)
{
	int err = errno;
	struct stat st;

	if (err == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISBLK(st.st_mode))
		return NVS__SUBMIT_ERR(-EINVAL, io,
				       "is %s, not a regular file or a block "
				       "device",
				       nvs__file_type(st.st_mode));
	return NVS__SUBMIT_ERR(-err, io, "open: %s", nvs_strerror(err));
}

static int open_path(struct nvs_aio *h, const struct nvs_aio_io *io,
		     const char *path, struct nvs_target *t)
{
	bool write = io->opcode == NVS_AIO_WRITE;
	int flags = (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_CLOEXEC;

	if (h->opts.direct != NVS_DIRECT_NEVER) {
		t->fd = nvs__files_open(h->files, path, flags | O_DIRECT, 0600);
		if (t->fd >= 0) {
			t->direct = true;
		} else if (errno == EINVAL &&
			   h->opts.direct == NVS_DIRECT_AUTO) {
			nvs__aio_count(&h->c.fallbacks, 1);
		} else if (errno == EINVAL) {
			return NVS__SUBMIT_ERR(
				-EINVAL, io, "%s",
				"the filesystem refuses O_DIRECT "
				"(direct mode ALWAYS)");
		} else {
			return open_failed(io, path);
		}
	}
	if (t->fd < 0) {
		t->fd = nvs__files_open(h->files, path, flags, 0600);
		if (t->fd < 0)
			return open_failed(io, path);
	}
	t->own_fd = true;
	nvs__aio_count(&h->c.opened, 1);
	return 0;
}

static int check_fd(const struct nvs_aio_io *io, const char *path,
		    struct nvs_target *t)
{
	int fl = fcntl(io->fd, F_GETFL);
	int acc;

	if (fl < 0)
		return NVS__SUBMIT_ERR(-EBADF, io, "%s",
				       "not an open descriptor");
	acc = fl & O_ACCMODE;
	if (io->opcode == NVS_AIO_WRITE ? acc == O_RDONLY : acc == O_WRONLY)
		return NVS__SUBMIT_ERR(
			-EBADF, io, "descriptor is not open for %s",
			nvs__aio_opname(io->opcode == NVS_AIO_WRITE));
	t->fd = io->fd;
	t->direct = fl & O_DIRECT;
	return 0;
}

/* Size of a regular file or block device, or -errno. */
static int64_t target_size(int fd, const struct stat *st)
{
	uint64_t sz;

	if (!S_ISBLK(st->st_mode))
		return st->st_size;
	if (ioctl(fd, BLKGETSIZE64, &sz) < 0)
		return -errno;
	return (int64_t)sz;
}

/*
 * Give an O_DIRECT write that extends the file its blocks and final size
 * up front. Extending direct writes are serialized by filesystems (ext4
 * takes the inode lock exclusively to move i_size), so without this the
 * queue depth buys little; fio does the same by default. A full disk then
 * fails the submit before a byte is written. Filesystems without
 * fallocate just write more slowly.
 */
static int preallocate(int fd, const struct stat *st,
		       const struct nvs_aio_io *io)
{
	int64_t start = NVS_MAX(io->offset, (int64_t)st->st_size);
	int64_t end = io->offset + (int64_t)io->nbytes;

	if (fallocate(fd, 0, (off_t)start, (off_t)(end - start)) == 0)
		return 0;
	if (errno == ENOSPC || errno == EDQUOT || errno == EFBIG)
		return -errno;
	return 0; /* EOPNOTSUPP and friends: not needed for correctness */
}

/*
 * Deleted files whose descriptors were just closed give their blocks
 * back when the kernel drops its last reference to them, which io_uring
 * may leave to a kernel worker a moment later (and the engine's own hold
 * goes when the worker next submits). Ask again a few times, 1023 ms at
 * most (255 ms was once too little on a loaded machine: fresh CI saw the
 * write fail); then the write decides. Only on a full disk, after
 * descriptors of deleted files were closed, never on the fast path.
 */
static void wait_for_space(int fd, const struct stat *st,
			   const struct nvs_aio_io *io)
{
	for (unsigned i = 0; i < 10; i++) {
		struct timespec ts = {0, (long)(1000000L << i)};
		nanosleep(&ts, NULL);
		if (preallocate(fd, st, io) == 0)
			return;
	}
}

/* fstat an open target and, for O_DIRECT, learn its alignment. */
static int describe_fd(struct nvs_aio *h, const struct nvs_aio_io *io,
		       const char *path, struct nvs_target *t, struct stat *st)
{
	int ret;

	if (fstat(t->fd, st) < 0) {
		ret = -errno;
		return NVS__SUBMIT_ERR(ret, io, "fstat: %s", nvs_strerror(ret));
	}
	if (!t->direct)
		return 0;
	return nvs__files_describe(h->files, t->fd, st, &t->al,
				   &t->max_segments);
}

/*
 * The descriptor for a path-based op: from the cache when the path still
 * names the cached inode (one stat instead of open, fstat, statx, close),
 * else opened here and offered to the cache. Fills @st.
 */
static int path_fd(struct nvs_aio *h, const struct nvs_aio_io *io,
		   const char *path, struct nvs_target *t, struct stat *st)
{
	bool write = io->opcode == NVS_AIO_WRITE;
	int ret;

	if (h->files && stat(path, st) == 0 && S_ISREG(st->st_mode)) {
		t->file = nvs__files_get(h->files, path, write, st);
		if (t->file) {
			nvs__aio_count(&h->c.reused, 1);
			t->fd = t->file->fd;
			t->direct = t->file->direct;
			t->al = t->file->al;
			t->max_segments = t->file->max_segments;
			return 0;
		}
	}
	t->closed = nvs__files_prune(h->files); /* deleted files' blocks */
	ret = open_path(h, io, path, t);
	if (ret == 0)
		ret = describe_fd(h, io, path, t, st);
	if (ret < 0)
		return ret;
	if (h->files && S_ISREG(st->st_mode)) {
		t->file = nvs__files_add(h->files, path, write, st, t->fd,
					 t->direct, &t->al, t->max_segments);
		if (t->file)
			t->own_fd = false;
	}
	return 0;
}

/* Body boundaries for a direct file: a page or the offset alignment. */
uint32_t nvs__target_edge_grain(const struct nvs_target *t)
{
	uint64_t g = NVS_MAX((uint64_t)t->al.offset_align,
			     (uint64_t)sysconf(_SC_PAGESIZE));
	return (uint32_t)NVS_MAX(g, (uint64_t)4096);
}

/* Whether @n bytes at @off have unaligned edges to do buffered. */
static bool needs_edges(const struct nvs_target *t, int64_t off, size_t n)
{
	uint64_t g = nvs__target_edge_grain(t);

	if (!t->direct || n == 0)
		return false;
	return (uint64_t)off % g || ((uint64_t)off + n) % g;
}

/* Buffered descriptor on the same file, for the unaligned edges: the
 * cached file's, else opened for this op alone. */
static int open_buffered(struct nvs_aio *h, const struct nvs_aio_io *io,
			 const char *path, struct nvs_target *t)
{
	char proc[64];
	const char *p = io->path;
	int flags =
		(io->opcode == NVS_AIO_WRITE ? O_WRONLY : O_RDONLY) | O_CLOEXEC;
	int err;

	if (!p) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", io->fd);
		p = proc;
	}
	if (t->file) {
		t->bfd = nvs__files_bfd(h->files, t->file, p, flags);
	} else {
		t->bfd = nvs__files_open(h->files, p, flags, 0);
		t->own_bfd = t->bfd >= 0;
	}
	if (t->bfd < 0) {
		err = errno;
		return NVS__SUBMIT_ERR(-err, io,
				       "opening a buffered descriptor "
				       "for the unaligned edges: %s",
				       nvs_strerror(err));
	}
	return 0;
}

/* A read's range, a write's blocks (or an empty write's new size). */
static int check_range(struct nvs_aio *h, const struct nvs_aio_io *io,
		       const char *path, struct nvs_target *t,
		       const struct stat *st)
{
	int ret;

	if (io->opcode == NVS_AIO_READ) {
		int64_t size = target_size(t->fd, st);
		if (size < 0)
			return NVS__SUBMIT_ERR((int)size, io, "size: %s",
					       nvs_strerror((int)size));
		if (io->offset > size ||
		    (int64_t)io->nbytes > size - io->offset)
			return NVS__SUBMIT_ERR(
				-EINVAL, io,
				"read ends beyond the end of the "
				"file (%" PRId64 " bytes); buffer "
				"untouched",
				size);
	} else if (t->direct && io->nbytes > 0 && S_ISREG(st->st_mode) &&
		   io->offset + (int64_t)io->nbytes > st->st_size) {
		ret = preallocate(t->fd, st, io);
		if (ret == -ENOSPC &&
		    (t->closed || nvs__files_prune(h->files))) {
			wait_for_space(t->fd, st, io);
			ret = 0; /* the write decides */
		}
		if (ret < 0)
			return NVS__SUBMIT_ERR(ret, io, "preallocating: %s",
					       nvs_strerror(ret));
	} else if (io->nbytes == 0 && st->st_size < io->offset &&
		   S_ISREG(st->st_mode)) {
		/* The file ends at max(old size, offset + nbytes). */
		if (ftruncate(t->fd, io->offset) < 0) {
			ret = -errno;
			return NVS__SUBMIT_ERR(ret, io, "ftruncate: %s",
					       nvs_strerror(ret));
		}
	}
	return 0;
}

int nvs__target_open(struct nvs_aio *h, const struct nvs_aio_io *io,
		     const char *path, struct nvs_target *t)
{
	struct stat st;
	int ret;

	if (io->path) {
		ret = path_fd(h, io, path, t, &st);
	} else {
		ret = check_fd(io, path, t);
		if (ret == 0)
			ret = describe_fd(h, io, path, t, &st);
	}
	if (ret < 0)
		return ret;
	if (S_ISDIR(st.st_mode))
		return NVS__SUBMIT_ERR(-EISDIR, io, "%s", "is a directory");
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
		return NVS__SUBMIT_ERR(-EINVAL, io,
				       "is %s, not a regular file or a block "
				       "device",
				       nvs__file_type(st.st_mode));
	ret = check_range(h, io, path, t, &st);
	if (ret < 0)
		return ret;
	if (t->direct && t->al.offset_align > NVS_BOUNCE_GRAIN)
		return NVS__SUBMIT_ERR(-EINVAL, io,
				       "O_DIRECT offset alignment %" PRIu32
				       " is above the supported %u",
				       t->al.offset_align, NVS_BOUNCE_GRAIN);
	t->edges = needs_edges(t, io->offset, io->nbytes);
	if (t->edges)
		return open_buffered(h, io, path, t);
	return 0;
}

/*
 * Whether unpinned memory should be staged through the pinned bounce slots
 * for @t. AUTO does it when the disk's queue cannot take a block_size
 * request of scattered 4 KiB pages in one piece (virtio: 254 segments for
 * 256 pages of 1 MiB): measured there, staging reads at 0.96x pinned and
 * direct 4 KiB-page I/O at 0.80x (writes 0.98x and 0.65x).
 */
bool nvs__target_stage_unpinned(const struct nvs_aio *h,
				const struct nvs_target *t)
{
	if (h->opts.staging == NVS_STAGE_UNPINNED)
		return true;
	return h->opts.staging == NVS_STAGE_AUTO && t->max_segments &&
	       h->opts.block_size / 4096 > t->max_segments;
}
