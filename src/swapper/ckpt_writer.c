// SPDX-License-Identifier: MIT
/*
 * The checkpoint writer (nvswap/ckpt.h): a ring of pinned staging buffers
 * from a pool; the caller's bytes are copied into the current one, and a
 * full buffer becomes one write op on the aio handle at the next file
 * offset, so the copy into buffer k+1 overlaps the write of buffer k. The
 * data goes to a temp name that close fsyncs and renames.
 *
 * Deferred copies (nvs_ckpt_write_async): a FIFO of jobs that a copy
 * thread, started at the first one, runs through copy_in(). While jobs
 * are queued (done < issued) the copy state (slots, cur, offset, err,
 * msg) belongs to that thread; the caller touches it only after
 * quiesce() saw the queue empty (the mutex orders the two) or after
 * stop_thread() joined it. Small synchronous writes join the queue
 * through a side ring of bytes, released in FIFO order as jobs finish.
 */
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"
#include "nvswap/buffers.h"
#include "nvswap/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One staging buffer and the write op it is part of. */
struct slot {
	void *buf;	 /* pool buffer, buffer_size bytes */
	size_t fill;	 /* bytes copied in */
	uint64_t off;	 /* file offset of buf[0] */
	uint64_t ticket; /* the write op while busy */
	bool busy;	 /* submitted, not yet collected */
};

/* A deferred copy: @n bytes at @p (the caller's, or in the side ring,
 * whose @side bytes, padding included, it releases when done). */
struct job {
	const void *p;
	size_t n;
	size_t side;
};

/* The side ring's size: NVS_CKPT_SIDE_MAX fits in it four times. */
#define SIDE_SIZE (4 * (size_t)NVS_CKPT_SIDE_MAX)

struct nvs_ckpt_writer {
	struct nvs_aio *aio;
	bool own_aio;
	struct nvs_pool *pool;
	struct slot slot[NVS_CKPT_MAX_BUFFERS];
	unsigned nslots;
	unsigned cur; /* the slot being filled */
	size_t bufsize;
	int fd;
	uint64_t offset;   /* bytes copied into the staging buffers */
	uint64_t accepted; /* bytes accepted, queued ones included (caller) */
	uint64_t prealloc; /* bytes preallocated at open (size_hint) */
	bool fsync;
	int err; /* sticky: the first failed write, 0 if none */
	char msg[NVS_ERRMSG_MAX];
	char *path; /* final name */
	char *tmp;  /* temp name while writing */

	/* The copy thread and its queue. @mu protects the fields below it
	 * except @done's lock-free readers; @work wakes the thread (a job or
	 * @stop), @idle the caller (a job done). */
	pthread_t thread;
	bool has_thread; /* started and not yet joined (caller only) */
	pthread_mutex_t mu;
	pthread_cond_t work;
	pthread_cond_t idle;
	struct job q[NVS_CKPT_ASYNC_MAX];
	uint64_t issued;       /* jobs queued, ever */
	_Atomic uint64_t done; /* jobs finished, ever; stored with release
				   under @mu, read with acquire by
				   nvs_ckpt_async_done() */
	bool stop;	       /* the thread exits once the queue is empty */
	bool cancel;	       /* skip the queued jobs (abort) */
	int qerr;	       /* w->err as seen under @mu: set by fail() */
	char *side;	       /* the side ring, SIDE_SIZE bytes */
	uint64_t side_in;      /* bytes reserved in it, ever */
	uint64_t side_out;     /* bytes released, ever */
};

/* Suffix counter for temp names: two writers of one path in one process
 * get two names. Relaxed: only uniqueness matters. */
static atomic_uint tmp_seq;

void nvs_ckpt_opts_init(struct nvs_ckpt_opts *opts)
{
	if (!opts)
		return;
	*opts = (struct nvs_ckpt_opts){
		.size = sizeof(*opts),
		.buffer_size = NVS_CKPT_BUFFER_SIZE_DEFAULT,
		.buffer_count = NVS_CKPT_BUFFER_COUNT_DEFAULT,
		.fsync = true,
		.direct = NVS_DIRECT_AUTO,
		.mode = 0666,
	};
}

static char *dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = nvs__malloc(n);

	if (d)
		memcpy(d, s, n);
	return d;
}

static int check_opts(const struct nvs_ckpt_opts *o)
{
	if (o->size != sizeof(*o))
		return nvs__err(-EINVAL, "nvs_ckpt_writer_open: opts not "
					 "filled by nvs_ckpt_opts_init()");
	if (o->buffer_size == 0 || o->buffer_size % 4096)
		return nvs__err(-EINVAL,
				"nvs_ckpt_writer_open: buffer_size %zu is not "
				"a positive multiple of 4096",
				o->buffer_size);
	if (o->buffer_count < 2 || o->buffer_count > NVS_CKPT_MAX_BUFFERS)
		return nvs__err(-EINVAL,
				"nvs_ckpt_writer_open: buffer_count %u is "
				"outside 2..%u",
				o->buffer_count, NVS_CKPT_MAX_BUFFERS);
	if (o->direct != NVS_DIRECT_AUTO && o->direct != NVS_DIRECT_ALWAYS &&
	    o->direct != NVS_DIRECT_NEVER)
		return nvs__err(-EINVAL,
				"nvs_ckpt_writer_open: unknown direct mode %d",
				(int)o->direct);
	if (o->mode & ~07777u)
		return nvs__err(-EINVAL,
				"nvs_ckpt_writer_open: mode %#o has bits "
				"outside 07777",
				o->mode);
	return 0;
}

/* Create the temp file (O_EXCL: never an existing one), then ask for
 * O_DIRECT on it: asking at open would leave a file behind when the
 * filesystem refuses after creating it. */
static int create_tmp(struct nvs_ckpt_writer *w, const struct nvs_ckpt_opts *o)
{
	size_t len = strlen(w->path) + 48;
	int err;

	w->tmp = nvs__malloc(len);
	if (!w->tmp)
		return nvs__err(-ENOMEM,
				"nvs_ckpt_writer_open: %s: out of "
				"memory",
				w->path);
	for (int tries = 0; tries < 100; tries++) {
		snprintf(w->tmp, len, "%s.tmp.%ld.%u", w->path, (long)getpid(),
			 atomic_fetch_add_explicit(&tmp_seq, 1,
						   memory_order_relaxed));
		w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
			     (mode_t)o->mode);
		if (w->fd >= 0 || errno != EEXIST)
			break;
	}
	if (w->fd < 0) {
		err = errno;
		return nvs__err(-err, "nvs_ckpt_writer_open: creating %s: %s",
				w->tmp, nvs_strerror(err));
	}
	if (o->direct == NVS_DIRECT_NEVER)
		return 0;
	if (fcntl(w->fd, F_SETFL, O_DIRECT) == 0)
		return 0;
	err = errno;
	if (err == EINVAL && o->direct == NVS_DIRECT_AUTO)
		return 0; /* tmpfs and friends: buffered, as the handle does */
	return nvs__err(-err,
			"nvs_ckpt_writer_open: %s: the filesystem refuses "
			"O_DIRECT (%s)%s",
			w->tmp, nvs_strerror(err),
			err == EINVAL ? " and direct mode is ALWAYS" : "");
}

static int preallocate(struct nvs_ckpt_writer *w, uint64_t hint)
{
	int err;

	if (hint == 0 || hint > INT64_MAX)
		return 0;
	if (fallocate(w->fd, 0, 0, (off_t)hint) == 0) {
		w->prealloc = hint;
		return 0;
	}
	err = errno;
	if (err != ENOSPC && err != EDQUOT && err != EFBIG)
		return 0; /* no fallocate here: only slower */
	return nvs__err(-err,
			"nvs_ckpt_writer_open: %s: preallocating size_hint "
			"%" PRIu64 " bytes: %s",
			w->tmp, hint, nvs_strerror(err));
}

static int make_buffers(struct nvs_ckpt_writer *w,
			const struct nvs_ckpt_opts *o)
{
	struct nvs_pool_opts po;
	int ret;

	nvs_pool_opts_init(&po);
	po.buffer_size = o->buffer_size;
	po.buffer_count = o->buffer_count;
	po.allow_unpinned = true; /* O_DIRECT needs alignment, not locks */
	ret = nvs_pool_create(&po, &w->pool);
	if (ret < 0)
		return nvs__err(ret,
				"nvs_ckpt_writer_open: %s: %u staging buffers "
				"of %zu bytes: %s",
				w->path, o->buffer_count, o->buffer_size,
				nvs_strerror(ret));
	for (unsigned i = 0; i < o->buffer_count; i++) {
		ret = nvs_pool_get(w->pool, &w->slot[i].buf);
		if (ret < 0)
			return ret; /* cannot happen: the pool has them */
		w->nslots++;
	}
	w->bufsize = o->buffer_size;
	return 0;
}

static int make_aio(struct nvs_ckpt_writer *w, const struct nvs_ckpt_opts *o)
{
	struct nvs_aio_opts ao;
	int ret;

	if (o->aio) {
		w->aio = o->aio;
		return 0;
	}
	nvs_aio_opts_init(&ao);
	ao.direct = o->direct;
	ret = nvs_aio_create(&ao, &w->aio);
	if (ret < 0)
		return nvs__err(ret, "nvs_ckpt_writer_open: %s: aio handle: %s",
				w->path, nvs_last_error());
	w->own_aio = true;
	return 0;
}

/* Free everything; the temp file is the caller's business. */
static void writer_free(struct nvs_ckpt_writer *w)
{
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->mu);
	nvs__free(w->side);
	for (unsigned i = 0; i < w->nslots; i++)
		nvs_pool_put(w->pool, w->slot[i].buf);
	nvs_pool_destroy(w->pool);
	if (w->own_aio)
		nvs_aio_destroy(w->aio);
	if (w->fd >= 0)
		close(w->fd);
	nvs__free(w->tmp);
	nvs__free(w->path);
	nvs__free(w);
}

int nvs_ckpt_writer_open(const char *path, const struct nvs_ckpt_opts *opts,
			 struct nvs_ckpt_writer **out)
{
	struct nvs_ckpt_opts def;
	struct nvs_ckpt_writer *w;
	int ret;

	if (out)
		*out = NULL;
	if (!path || !*path || !out)
		return nvs__err(-EINVAL, "nvs_ckpt_writer_open: %s",
				!out ? "out is NULL" : "path is NULL or empty");
	if (!opts) {
		nvs_ckpt_opts_init(&def);
		opts = &def;
	}
	ret = check_opts(opts);
	if (ret < 0)
		return ret;
	w = nvs__calloc(1, sizeof(*w));
	if (!w)
		return nvs__err(-ENOMEM,
				"nvs_ckpt_writer_open: %s: out of "
				"memory",
				path);
	w->fd = -1;
	w->fsync = opts->fsync;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	w->path = dup_str(path);
	if (!w->path) {
		writer_free(w);
		return nvs__err(-ENOMEM,
				"nvs_ckpt_writer_open: %s: out of "
				"memory",
				path);
	}
	ret = create_tmp(w, opts);
	if (ret == 0)
		ret = preallocate(w, opts->size_hint);
	if (ret == 0)
		ret = make_buffers(w, opts);
	if (ret == 0)
		ret = make_aio(w, opts);
	if (ret < 0) {
		if (w->fd >= 0)
			unlink(w->tmp);
		writer_free(w);
		return ret;
	}
	*out = w;
	return 0;
}

/* Record the first failure (sticky) and return it. */
static int fail(struct nvs_ckpt_writer *w, int err, const char *fn,
		const char *what, uint64_t off, size_t len)
{
	if (!w->err) {
		w->err = err;
		nvs__errfmt(w->msg, sizeof(w->msg),
			    "%s: %s: %s %zu bytes at offset %" PRIu64
			    " failed: %s%s",
			    fn, w->tmp, what, len, off, nvs_strerror(err),
			    err == -ENOSPC ? " (the disk is full)" : "");
		pthread_mutex_lock(&w->mu);
		w->qerr = err;
		pthread_mutex_unlock(&w->mu);
	}
	return nvs__err_set(w->err, w->msg);
}

/* Collect @s's write; the slot is free afterwards either way. */
static int wait_slot(struct nvs_ckpt_writer *w, struct slot *s, const char *fn)
{
	int r = nvs_aio_wait_op(w->aio, s->ticket);

	s->busy = false;
	if (r < 0)
		return fail(w, r, fn, "writing", s->off, s->fill);
	s->fill = 0;
	return 0;
}

/* Submit the current slot and move to the next one, waiting for its
 * previous write. */
static int submit_cur(struct nvs_ckpt_writer *w, const char *fn)
{
	struct slot *s = &w->slot[w->cur];
	struct nvs_aio_io io = {
		.opcode = NVS_AIO_WRITE,
		.buf = s->buf,
		.nbytes = s->fill,
		.fd = w->fd,
		.offset = (int64_t)s->off,
	};
	int r = nvs_aio_submit(w->aio, &io, &s->ticket);

	if (r < 0)
		return fail(w, r, fn, "submitting the write of", s->off,
			    s->fill);
	s->busy = true;
	w->cur = (w->cur + 1) % w->nslots;
	s = &w->slot[w->cur];
	if (s->busy)
		return wait_slot(w, s, fn);
	return 0;
}

/* Copy @n bytes of @src into the staging buffers, submitting the full
 * ones. Runs on the caller, or on the copy thread for a job. */
static int copy_in(struct nvs_ckpt_writer *w, const char *src, size_t n,
		   const char *fn)
{
	int r;

	while (n) {
		struct slot *s = &w->slot[w->cur];
		size_t c = NVS_MIN(n, w->bufsize - s->fill);

		if (s->fill == 0)
			s->off = w->offset;
		nvs_copy((char *)s->buf + s->fill, src, c);
		s->fill += c;
		w->offset += c;
		src += c;
		n -= c;
		if (s->fill == w->bufsize) {
			r = submit_cur(w, fn);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* The copy thread: run the jobs in order until told to stop. */
static void *copier(void *arg)
{
	struct nvs_ckpt_writer *w = arg;
	uint64_t head;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct job j;
		bool skip;

		head = atomic_load_explicit(&w->done, memory_order_relaxed);
		while (head == w->issued && !w->stop)
			pthread_cond_wait(&w->work, &w->mu);
		if (head == w->issued)
			break;
		j = w->q[head % NVS_CKPT_ASYNC_MAX];
		skip = w->cancel || w->qerr;
		pthread_mutex_unlock(&w->mu);
		if (!skip)
			copy_in(w, j.p, j.n, "nvs_ckpt_write_async");
		pthread_mutex_lock(&w->mu);
		w->side_out += j.side;
		atomic_store_explicit(&w->done, head + 1, memory_order_release);
		pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Wait until the queue is empty: the copy state is the caller's again. */
static void quiesce(struct nvs_ckpt_writer *w)
{
	if (!w->has_thread)
		return;
	pthread_mutex_lock(&w->mu);
	while (atomic_load_explicit(&w->done, memory_order_relaxed) !=
	       w->issued)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/* Finish (or with @cancel skip) the queue, then join the thread. */
static void stop_thread(struct nvs_ckpt_writer *w, bool cancel)
{
	if (!w->has_thread)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	w->cancel = w->cancel || cancel;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	w->has_thread = false;
}

/* Start the copy thread; false when it cannot be (the caller copies). */
static bool start_thread(struct nvs_ckpt_writer *w)
{
	if (w->has_thread)
		return true;
	if (w->stop)
		return false; /* never restarted: close or abort is near */
	if (!w->side) {
		w->side = nvs__malloc(SIDE_SIZE);
		if (!w->side)
			return false;
	}
	if (pthread_create(&w->thread, NULL, copier, w) != 0)
		return false;
	w->has_thread = true;
	return true;
}

/* Queue a job, waiting for room; returns its ticket. With @side > 0, @p
 * already points into the side ring. */
static uint64_t enqueue(struct nvs_ckpt_writer *w, const void *p, size_t n,
			size_t side)
{
	uint64_t t;

	pthread_mutex_lock(&w->mu);
	while (w->issued -
		       atomic_load_explicit(&w->done, memory_order_relaxed) ==
	       NVS_CKPT_ASYNC_MAX)
		pthread_cond_wait(&w->idle, &w->mu);
	w->q[w->issued % NVS_CKPT_ASYNC_MAX] =
		(struct job){.p = p, .n = n, .side = side};
	t = ++w->issued;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	return t;
}

/* Copy @n <= NVS_CKPT_SIDE_MAX bytes into the side ring and queue them;
 * waits while the ring is full. */
static void enqueue_side(struct nvs_ckpt_writer *w, const void *p, size_t n)
{
	size_t pos = (size_t)(w->side_in % SIDE_SIZE);
	size_t pad = pos + n > SIDE_SIZE ? SIDE_SIZE - pos : 0;

	/* side_in is the caller's; side_out moves under @mu. */
	pthread_mutex_lock(&w->mu);
	while (w->side_in + pad + n - w->side_out > SIDE_SIZE)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
	w->side_in += pad + n;
	memcpy(w->side + (pad ? 0 : pos), p, n);
	enqueue(w, w->side + (pad ? 0 : pos), n, pad + n);
}

/* The sticky error, once the queue is empty; 0 if none. */
static int sticky(struct nvs_ckpt_writer *w)
{
	int e;

	pthread_mutex_lock(&w->mu);
	e = w->qerr;
	pthread_mutex_unlock(&w->mu);
	if (!e)
		return 0;
	quiesce(w);
	return nvs__err_set(w->err, w->msg);
}

static int check_write(struct nvs_ckpt_writer *w, const void *p, size_t n,
		       const char *fn)
{
	if (!w || (!p && n))
		return nvs__err(-EINVAL, "%s: %s", fn,
				!w ? "writer is NULL" : "buffer is NULL");
	if (n > UINT64_MAX - w->accepted)
		return nvs__err(-EFBIG,
				"%s: %s: %zu more bytes "
				"overflow the file offset",
				fn, w->tmp, n);
	return sticky(w);
}

int nvs_ckpt_write(struct nvs_ckpt_writer *w, const void *p, size_t n)
{
	static const char fn[] = "nvs_ckpt_write";
	int r = check_write(w, p, n, fn);

	if (r < 0)
		return r;
	if (n == 0)
		return 0;
	if (w->has_thread && n <= NVS_CKPT_SIDE_MAX &&
	    atomic_load_explicit(&w->done, memory_order_acquire) != w->issued) {
		enqueue_side(w, p, n);
		w->accepted += n;
		return 0;
	}
	quiesce(w);
	if (w->err)
		return nvs__err_set(w->err, w->msg);
	w->accepted += n;
	return copy_in(w, p, n, fn);
}

int nvs_ckpt_write_async(struct nvs_ckpt_writer *w, const void *p, size_t n,
			 uint64_t *ticket)
{
	static const char fn[] = "nvs_ckpt_write_async";
	uint64_t t;
	int r;

	if (ticket)
		*ticket = 0;
	r = check_write(w, p, n, fn);
	if (r < 0 || n == 0)
		return r;
	if (!start_thread(w)) {
		quiesce(w);
		if (w->err)
			return nvs__err_set(w->err, w->msg);
		w->accepted += n;
		return copy_in(w, p, n, fn);
	}
	w->accepted += n;
	t = enqueue(w, p, n, 0);
	if (ticket)
		*ticket = t;
	return 0;
}

uint64_t nvs_ckpt_async_done(const struct nvs_ckpt_writer *w)
{
	return w ? atomic_load_explicit(&w->done, memory_order_acquire) : 0;
}

int nvs_ckpt_wait(struct nvs_ckpt_writer *w)
{
	if (!w)
		return nvs__err(-EINVAL, "nvs_ckpt_wait: writer is NULL");
	quiesce(w);
	if (w->err)
		return nvs__err_set(w->err, w->msg);
	return 0;
}

uint64_t nvs_ckpt_offset(const struct nvs_ckpt_writer *w)
{
	return w ? w->accepted : 0;
}

const char *nvs_ckpt_temp_path(const struct nvs_ckpt_writer *w)
{
	return w ? w->tmp : "";
}

/* Collect every write in flight (all of them, even after a failure). */
static int drain(struct nvs_ckpt_writer *w, const char *fn)
{
	int ret = 0;

	for (unsigned i = 0; i < w->nslots; i++) {
		unsigned k = (w->cur + 1 + i) % w->nslots; /* oldest first */
		if (w->slot[k].busy) {
			int r = wait_slot(w, &w->slot[k], fn);
			if (r < 0 && !ret)
				ret = r;
		}
	}
	return ret;
}

/* The file's last steps before the rename: 0 or the failure (recorded). */
static int finish_file(struct nvs_ckpt_writer *w)
{
	static const char fn[] = "nvs_ckpt_close";
	struct slot *s = &w->slot[w->cur];
	int fd;

	if (!w->err && s->fill && !s->busy)
		submit_cur(w, fn);
	drain(w, fn);
	if (w->err) /* sticky: this call's or an earlier one's */
		return nvs__err_set(w->err, w->msg);
	if (w->prealloc > w->offset && ftruncate(w->fd, (off_t)w->offset) < 0)
		return fail(w, -errno, fn, "trimming the preallocation to",
			    w->offset, 0);
	if (w->fsync && fsync(w->fd) < 0)
		return fail(w, -errno, fn, "fsync of", 0, (size_t)w->offset);
	fd = w->fd;
	w->fd = -1;
	if (close(fd) < 0)
		return fail(w, -errno, fn, "closing after", 0,
			    (size_t)w->offset);
	return 0;
}

/* fsync the directory of @path, so the rename survives a crash. */
static int sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int fd, ret = 0;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		ret = -errno;
	if (fd >= 0)
		close(fd);
	if (ret < 0)
		return nvs__err(ret,
				"nvs_ckpt_close: %s is complete, but the fsync "
				"of its directory %s failed: %s",
				path, dir, nvs_strerror(ret));
	return 0;
}

int nvs_ckpt_close(struct nvs_ckpt_writer *w)
{
	int ret;

	if (!w)
		return nvs__err(-EINVAL, "nvs_ckpt_close: writer is NULL");
	stop_thread(w, false);
	ret = finish_file(w);
	if (ret == 0 && rename(w->tmp, w->path) < 0) {
		int err = errno;
		ret = nvs__err(-err, "nvs_ckpt_close: renaming %s to %s: %s",
			       w->tmp, w->path, nvs_strerror(err));
	} else if (ret == 0 && w->fsync) {
		ret = sync_dir(w->path);
		writer_free(w);
		return ret;
	} else if (ret == 0) {
		writer_free(w);
		return 0;
	}
	/* Failed before the rename: the final name was never touched. */
	unlink(w->tmp);
	writer_free(w);
	return ret;
}

int nvs_ckpt_abort(struct nvs_ckpt_writer *w)
{
	int ret = 0;

	if (!w)
		return 0;
	stop_thread(w, true);
	drain(w, "nvs_ckpt_abort");
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
	if (unlink(w->tmp) < 0 && errno != ENOENT) {
		int err = errno;
		ret = nvs__err(-err, "nvs_ckpt_abort: removing %s: %s", w->tmp,
			       nvs_strerror(err));
	}
	writer_free(w);
	return ret;
}
