// SPDX-License-Identifier: MIT
/*
 * The io_uring backend: one ring per engine (so per worker thread), sized
 * from the queue depth. Pinned memory goes out as READ_FIXED/WRITE_FIXED
 * on buffers registered lazily, one arena mapping (at most 1 GiB of it) per
 * slot; descriptors of the handle's file cache are registered too. Any
 * registration the kernel refuses (memlock limit, old kernel) turns that
 * feature off for the ring, keeps the error for the stats, and the I/O goes
 * on unregistered. Every CQE's result is read; SQEs the kernel did not take
 * stay queued and are submitted again before any wait.
 */
#include "aio/ops.h"
#include "buffers/arena.h"
#include "internal/alloc.h"
#include "internal/util.h"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_SLOTS 16u
#define BUF_SLOTS 64u
#define BUF_CHUNK (1ull << 30) /* the kernel's limit per registered iovec */
#define MAX_ATTEMPT (1u << 30)

#if HAVE_IORING_SETUP_SUBMIT_ALL
#define SUBMIT_ALL IORING_SETUP_SUBMIT_ALL
#else
#define SUBMIT_ALL 0u /* liburing too old to know it */
#endif

struct bslot {
	uintptr_t start;
	size_t len;
};

struct uring {
	struct io_uring ring;
	bool ring_ok;
	bool eager; /* submit at once; else with the next reap's wait */
	int broken; /* a fatal io_uring_enter error: every submit fails */
	/* Prepared SQEs the kernel has not consumed (submit order). */
	struct nvs_reqq pend;
	unsigned inkernel;	/* consumed by the kernel, CQE not yet seen */
	struct nvs_reqq failed; /* never reached the kernel, reaped first */
	/* Registered files: the file-cache key held by each slot. */
	bool files_on;
	uint64_t fkey[FILE_SLOTS];
	unsigned fnext;
	/* Registered buffers: one iovec per slot, in use order. */
	bool bufs_on;
	struct bslot bslot[BUF_SLOTS];
	unsigned nbslots, blast;
	/* Read by stats from any thread: relaxed, no ordering with data. */
	atomic_uint_fast64_t fixed_bufs, fixed_files, registered;
	atomic_int reg_err;
	unsigned setup_flags;
};

/* ------------------------------------------------------------- probe */

/* Tests point this at a file of their own to play a disabled kernel. */
const char *nvs__uring_disabled_path = "/proc/sys/kernel/io_uring_disabled";

static int disabled_setting(void)
{
	char buf[16] = "";
	int fd = open(nvs__uring_disabled_path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0; /* kernels before 6.6 have no such switch */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? atoi(buf) : 0;
}

int nvs__uring_probe(char *why, size_t n)
{
	struct io_uring ring;
	int dis = disabled_setting();
	int ret;

	if (dis >= 2) {
		snprintf(why, n,
			 "kernel.io_uring_disabled=%d turns io_uring off for "
			 "every process (sysctl -w kernel.io_uring_disabled=0)",
			 dis);
		return -EPERM;
	}
	ret = io_uring_queue_init(2, &ring, 0);
	if (ret == 0) {
		io_uring_queue_exit(&ring);
		return 0;
	}
	if (ret == -ENOSYS)
		snprintf(why, n, "the kernel has no io_uring (ENOSYS)");
	else if (ret == -EPERM && dis == 1)
		snprintf(
			why, n,
			"kernel.io_uring_disabled=1 and this process is not in "
			"the kernel.io_uring_group group");
	else if (ret == -EPERM)
		snprintf(
			why, n,
			"io_uring_setup is refused with EPERM (a seccomp filter "
			"or security policy, as in many containers)");
	else
		snprintf(why, n, "io_uring_setup failed: %s",
			 nvs_strerror(ret));
	return ret;
}

/* ------------------------------------------------------ registration */

static void note_reg_error(struct uring *u, int err)
{
	int zero = 0;

	atomic_compare_exchange_strong_explicit(&u->reg_err, &zero, err,
						memory_order_relaxed,
						memory_order_relaxed);
}

static void setup_registration(struct uring *u, unsigned eflags)
{
	int ret;

	if (eflags & NVS_ENGINE_NO_FIXED)
		return;
#if HAVE_IO_URING_REGISTER_FILES_SPARSE
	ret = io_uring_register_files_sparse(&u->ring, FILE_SLOTS);
	u->files_on = ret == 0;
	if (ret < 0)
		note_reg_error(u, ret);
#endif
#if HAVE_IO_URING_REGISTER_BUFFERS_SPARSE
	ret = io_uring_register_buffers_sparse(&u->ring, BUF_SLOTS);
	u->bufs_on = ret == 0;
	if (ret < 0)
		note_reg_error(u, ret);
#endif
	(void)ret;
}

/* Registered-file slot for @r's descriptor, or -1 to use the plain fd. */
static int file_slot(struct uring *u, const struct nvs_ioreq *r)
{
	unsigned slot;
	int ret;

	if (!u->files_on || r->file_key == 0)
		return -1;
	for (unsigned i = 0; i < FILE_SLOTS; i++)
		if (u->fkey[i] == r->file_key)
			return (int)i;
	slot = u->fnext;
	ret = io_uring_register_files_update(&u->ring, slot, &r->fd, 1);
	if (ret != 1) {
		/* Keep going unregistered; the error is in the stats. */
		note_reg_error(u, ret < 0 ? ret : -EIO);
		u->files_on = false;
		return -1;
	}
	u->fkey[slot] = r->file_key;
	u->fnext = (slot + 1) % FILE_SLOTS;
	return (int)slot;
}

static void uring_forget_files(void *be)
{
	struct uring *u = be;
	int fds[FILE_SLOTS];

	if (!u->files_on)
		return;
	for (unsigned i = 0; i < FILE_SLOTS; i++)
		fds[i] = -1;
	if (io_uring_register_files_update(&u->ring, 0, fds, FILE_SLOTS) < 0)
		u->files_on = false;
	memset(u->fkey, 0, sizeof(u->fkey));
	u->fnext = 0;
}

static bool in_slot(const struct bslot *b, uintptr_t a, size_t len)
{
	return a >= b->start && a - b->start <= b->len &&
	       len <= b->len - (a - b->start);
}

/* Registered-buffer index holding [@p, @p + @len), or -1. */
static int buf_index(struct uring *u, const char *p, size_t len)
{
	uintptr_t a = (uintptr_t)p, ms, off;
	size_t ml;
	struct iovec iov;
	int ret;

	if (!u->bufs_on)
		return -1;
	if (u->nbslots && in_slot(&u->bslot[u->blast], a, len))
		return (int)u->blast;
	for (unsigned i = 0; i < u->nbslots; i++)
		if (in_slot(&u->bslot[i], a, len)) {
			u->blast = i;
			return (int)i;
		}
	/* Not registered yet: is it pinned memory at all? */
	if (u->nbslots == BUF_SLOTS || !nvs__arena_mapping(p, len, &ms, &ml))
		return -1;
	off = (a - ms) / BUF_CHUNK * BUF_CHUNK;
	iov.iov_base = (void *)(ms + off);
	iov.iov_len = NVS_MIN(ml - off, (size_t)BUF_CHUNK);
	if (!in_slot(&(struct bslot){ms + off, iov.iov_len}, a, len))
		return -1; /* straddles two chunks: plain I/O */
	ret = io_uring_register_buffers_update_tag(&u->ring, u->nbslots, &iov,
						   NULL, 1);
	if (ret != 1) {
		/* -ENOMEM/-EPERM: the memlock limit; -EOPNOTSUPP, -EFAULT:
		 * memory the kernel cannot pin long-term. */
		note_reg_error(u, ret < 0 ? ret : -EIO);
		u->bufs_on = false;
		return -1;
	}
	u->bslot[u->nbslots] = (struct bslot){ms + off, iov.iov_len};
	atomic_fetch_add_explicit(&u->registered, iov.iov_len,
				  memory_order_relaxed);
	u->blast = u->nbslots++;
	return (int)u->blast;
}

/* ------------------------------------------------------------ set-up */

static void uring_fini(void *be)
{
	struct uring *u = be;

	if (u->ring_ok)
		io_uring_queue_exit(&u->ring);
	nvs__reqq_fini(&u->pend);
	nvs__reqq_fini(&u->failed);
	nvs__free(u);
}

/* Ring set-up flags to try, best first; each falls back to the next when
 * the kernel does not know one of them (-EINVAL). */
static unsigned flag_sets(unsigned eflags, unsigned *sets)
{
	unsigned base = 0, n = 0, extra = 0;

	if (eflags & NVS_ENGINE_SQPOLL)
		base |= IORING_SETUP_SQPOLL;
	if (eflags & NVS_ENGINE_IOPOLL)
		base |= IORING_SETUP_IOPOLL;
	extra |= SUBMIT_ALL;
#if HAVE_IORING_SETUP_SINGLE_ISSUER && HAVE_IORING_SETUP_DEFER_TASKRUN
	/* Completions are processed only when this thread waits for
	 * them: no interrupts of the worker mid-batch. Not with SQPOLL. */
	if (!(base & IORING_SETUP_SQPOLL))
		sets[n++] = base | extra | IORING_SETUP_SINGLE_ISSUER |
			    IORING_SETUP_DEFER_TASKRUN;
#endif
#if HAVE_IORING_SETUP_COOP_TASKRUN
	if (!(base & IORING_SETUP_SQPOLL))
		sets[n++] = base | extra | IORING_SETUP_COOP_TASKRUN;
#endif
	if (extra)
		sets[n++] = base | extra;
	sets[n++] = base;
	return n;
}

static int uring_init(const struct nvs_engine_cfg *cfg, void **be)
{
	struct io_uring_params p;
	unsigned sets[4], nsets;
	struct uring *u;
	int ret = -EINVAL;

	u = nvs__calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	if (nvs__reqq_init(&u->pend, cfg->depth) < 0 ||
	    nvs__reqq_init(&u->failed, cfg->depth) < 0) {
		uring_fini(u);
		return -ENOMEM;
	}
	nsets = flag_sets(cfg->flags, sets);
	for (unsigned i = 0; i < nsets; i++) {
		memset(&p, 0, sizeof(p));
		p.flags = sets[i];
		if (p.flags & IORING_SETUP_SQPOLL)
			p.sq_thread_idle =
				100; /* ms before the thread sleeps */
		ret = io_uring_queue_init_params(cfg->depth, &u->ring, &p);
		if (ret != -EINVAL)
			break;
	}
	if (ret < 0) {
		uring_fini(u);
		return ret;
	}
	u->ring_ok = true;
	u->eager = cfg->flags & NVS_ENGINE_EAGER;
	u->setup_flags = p.flags;
	setup_registration(u, cfg->flags);
	*be = u;
	return 0;
}

/* ------------------------------------------------------------ submit */

static void prep(struct uring *u, struct io_uring_sqe *sqe, struct nvs_ioreq *r)
{
	char *buf = r->buf + r->done;
	unsigned len = (unsigned)NVS_MIN(nvs__ioreq_span(r), MAX_ATTEMPT);
	__u64 off = (__u64)(r->off + (int64_t)r->done);
	bool write = r->opcode == NVS_IOREQ_WRITE;
	int fi = file_slot(u, r);
	int fd = fi >= 0 ? fi : r->fd;
	int bi = buf_index(u, buf, len);

	if (bi >= 0 && write)
		io_uring_prep_write_fixed(sqe, fd, buf, len, off, bi);
	else if (bi >= 0)
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, bi);
	else if (write)
		io_uring_prep_write(sqe, fd, buf, len, off);
	else
		io_uring_prep_read(sqe, fd, buf, len, off);
	if (fi >= 0) {
		sqe->flags |= IOSQE_FIXED_FILE;
		atomic_fetch_add_explicit(&u->fixed_files, 1,
					  memory_order_relaxed);
	}
	if (bi >= 0)
		atomic_fetch_add_explicit(&u->fixed_bufs, 1,
					  memory_order_relaxed);
	io_uring_sqe_set_data(sqe, r);
}

/* Hand the prepared SQEs to the kernel and, with @wait, wait for that
 * many completions in the same io_uring_enter. Transient refusals leave
 * the SQEs queued for the next call; a fatal one fails them. */
static void flush(struct uring *u, unsigned wait)
{
	int ret;

	if (u->pend.n == 0)
		return;
	do {
		ret = wait ? io_uring_submit_and_wait(&u->ring, wait)
			   : io_uring_submit(&u->ring);
	} while (ret == -EINTR);
	if (ret == -EAGAIN || ret == -EBUSY || ret == -ENOMEM)
		return;
	if (ret < 0) {
		u->broken = ret;
		while (u->pend.n > 0) {
			struct nvs_ioreq *r = nvs__reqq_pop(&u->pend);
			r->res = ret;
			nvs__reqq_push(&u->failed, r);
		}
		return;
	}
	for (int i = 0; i < ret && u->pend.n > 0; i++) {
		nvs__reqq_pop(&u->pend);
		u->inkernel++;
	}
}

static int uring_submit(void *be, struct nvs_ioreq **reqs, unsigned n)
{
	struct uring *u = be;
	unsigned i;

	if (u->broken)
		return u->broken;
	for (i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			break; /* ring full: the engine retries after a reap */
		prep(u, sqe, reqs[i]);
		nvs__reqq_push(&u->pend, reqs[i]);
	}
	/* Otherwise the worker's next step is a reap: submitting there
	 * saves one system call per batch. */
	if (u->eager)
		flush(u, 0);
	return (int)i;
}

/* ------------------------------------------------------------- reap */

static int uring_reap(void *be, unsigned min, struct nvs_ioreq **out,
		      unsigned max)
{
	struct uring *u = be;
	struct io_uring_cqe *cqe;
	unsigned n = nvs__reqq_drain(&u->failed, out, 0, max), head, seen = 0;
	int ret = 0;

	if (n < min && u->pend.n > 0) {
		/* Submit and wait in one io_uring_enter. Without SUBMIT_ALL
		 * the kernel may stop at a failing SQE, so wait only for
		 * what is sure to complete: one more than before. */
		unsigned sure = u->setup_flags & SUBMIT_ALL
					? u->inkernel + u->pend.n
					: u->inkernel + 1;
		unsigned before = u->inkernel;

		flush(u, NVS_MIN(min - n, sure));
		if (u->inkernel > before)
			min = 0; /* waited inside the submit */
	}
	flush(u, 0);
	n = nvs__reqq_drain(&u->failed, out, n, max);
	if (n < min && u->inkernel == 0) {
		/* Everything waits in the SQ: the kernel is short of
		 * resources. Let it breathe, the engine calls again. */
		sched_yield();
		return (int)n;
	}
	if (n < min) {
		unsigned want = NVS_MIN(min - n, u->inkernel);
		do {
			ret = io_uring_wait_cqe_nr(&u->ring, &cqe, want);
		} while (ret == -EINTR || ret == -EAGAIN);
	}
	io_uring_for_each_cqe(&u->ring, head, cqe)
	{
		struct nvs_ioreq *r;

		if (n == max)
			break;
		r = io_uring_cqe_get_data(cqe);
		r->res = cqe->res; /* already -errno on failure */
		out[n++] = r;
		seen++;
	}
	io_uring_cq_advance(&u->ring, seen);
	u->inkernel -= seen;
	if (n == 0 && ret < 0)
		return ret;
	return (int)n;
}

static void uring_kick(void *be)
{
	flush(be, 0);
}

static void uring_stats(const void *be, struct nvs_engine_stats *st)
{
	const struct uring *u = be;

	st->fixed_bufs =
		atomic_load_explicit(&u->fixed_bufs, memory_order_relaxed);
	st->fixed_files =
		atomic_load_explicit(&u->fixed_files, memory_order_relaxed);
	st->registered =
		atomic_load_explicit(&u->registered, memory_order_relaxed);
	st->register_error =
		atomic_load_explicit(&u->reg_err, memory_order_relaxed);
	st->setup_flags = u->setup_flags;
}

const struct nvs_engine_ops nvs__uring_ops = {
	.submit = uring_submit,
	.reap = uring_reap,
	.init = uring_init,
	.fini = uring_fini,
	.kick = uring_kick,
	.stats = uring_stats,
	.forget_files = uring_forget_files,
	.name = "io_uring",
};
