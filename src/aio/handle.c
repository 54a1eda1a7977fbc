// SPDX-License-Identifier: MIT
/*
 * The aio handle: DeepNVMe's aio_handle. An op is opened and checked on the
 * caller's thread, cut into one contiguous slice per worker, and each
 * worker cuts its slices into block_size requests kept queue_depth deep on
 * its own engine. Completion is counted per op (tickets) and per handle
 * (wait). Alignment for O_DIRECT is handled here: the aligned body goes to
 * the engine (through bounce slots when the user's memory is misaligned),
 * the unaligned head and tail go through a buffered descriptor.
 */
#include "aio/handle.h"
#include "aio/choice.h"
#include "aio/align.h"
#include "aio/engine.h"
#include "aio/files.h"
#include "buffers/pinned.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define OP_SLOT_BITS 20u
#define OP_SLOT_MASK ((1u << OP_SLOT_BITS) - 1)
#define OP_PATH_KEEP 256 /* path bytes kept for error messages */
#define DEFAULT_MAX_OPS 1024u
#define DEFAULT_BOUNCE_SLOTS 8u
#define DEFAULT_BOUNCE_MAX (8u << 20)
#define DEFAULT_OPEN_FILES 64u
#define MAX_OPEN_FILES 4096u

enum op_state { OP_FREE = 0, OP_RUNNING, OP_DONE };

struct op;

struct edge {
	char *buf;
	int64_t off;
	size_t len;
};

/* The part of an op one worker does. Owned by that worker while queued. */
struct slice {
	struct op *op;
	struct slice *next;   /* worker queue, then active list */
	struct slice *prev;   /* active list */
	char *buf;	      /* user memory at the body's start */
	int64_t off;	      /* file offset of the body */
	size_t len;	      /* body bytes (aligned when direct) */
	size_t issued;	      /* body bytes cut into requests so far */
	unsigned outstanding; /* requests in flight */
	bool started;	      /* edges done, body may be issued */
	int err;	      /* first failure, stops issuing */
	struct edge edge[2];  /* unaligned head and tail, buffered I/O */
};

struct op {
	/* Protected by h->lock. */
	enum op_state state;
	bool ticket;
	uint32_t gen; /* bumped on every reuse: stale tickets miss */
	uint64_t seq; /* submission order, for "first failed op" */
	int err;
	char msg[NVS_ERRMSG_MAX];
	struct op *next_free;
	/* Written by the submitter before dispatch, then read-only. */
	bool write;
	bool direct;
	bool stage_all; /* bounce every request, aligned or not */
	int fd, bfd;	/* body descriptor; buffered one for edges or -1 */
	bool own_fd, own_bfd;
	struct nvs_file *file; /* cached descriptors, released at the end */
	uint32_t mem_align;
	uint32_t grain; /* body boundaries: edges never share a page */
	size_t chunk;	/* request size for this file */
	int64_t offset;
	size_t nbytes;
	char path[OP_PATH_KEEP];
	/* Slices not finished; the worker that takes it to 0 finishes. */
	atomic_uint slices_left;
	struct slice *slices; /* nworkers of them */
};

struct req {
	struct nvs_ioreq io; /* first: engine hands back &io */
	struct slice *s;
	char *user; /* bounce reads: where the bytes go */
	int slot;   /* bounce slot, or -1 */
	struct req *next_free;
};

struct worker {
	struct nvs_aio *h;
	pthread_t thread;
	bool running;
	/* lock protects qhead, qtail and stop; cond wakes the worker. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct slice *qhead, *qtail;
	bool stop;
	/* Worker thread only. */
	struct nvs_engine *eng;
	struct req *reqs, *free_reqs;
	struct nvs_ioreq **batch;
	struct nvs_ioreq **done;
	struct slice *ahead, *atail; /* active slices */
	char *bounce;
	size_t slot_size;
	unsigned nslots, nfree_slots;
	int *free_slots;
	bool bounce_locked;
	uint64_t retries_seen; /* engine retries already counted */
	uint64_t closes_seen;  /* file-cache closes already acted on */
	/* Start-up, under lock: the worker creates its own engine (an
	 * io_uring ring is then single-issuer) and reports here. */
	bool ready;
	int init_ret;
	char init_msg[NVS_ERRMSG_MAX];
};

struct counters {
	/* Relaxed atomics: statistics only, no ordering with data. */
	atomic_uint_fast64_t ops_completed, ops_failed, bytes_read,
		bytes_written, requests, bounced, edge_bytes, retries,
		fallbacks, opened, reused;
};

struct nvs_aio {
	struct nvs_aio_opts opts;
	unsigned long born; /* fork generation: see internal/fork.h */
	enum nvs_backend backend;
	enum nvs_backend_reason backend_reason;
	char backend_name[32];
	char backend_notes[240];
	unsigned nworkers;
	struct worker *workers;
	const struct nvs_fault_plan *plan; /* &fault, or NULL */
	struct nvs_fault_plan fault;	   /* the tests' plan, copied */
	atomic_ulong submits; /* nvs_aio_submit calls, for REFUSE rules */
	/* lock protects the op slots' state/err/msg, the free list and every
	 * field up to first_msg; cond signals op completion and free slots. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct op *ops;
	unsigned nops;
	struct op *free_ops;
	unsigned inflight;     /* ops submitted and not finished */
	unsigned finished;     /* untracked ops finished since last wait */
	unsigned tickets_done; /* finished ticketed ops not yet collected */
	uint64_t next_seq;
	unsigned rr;   /* first worker of the next op */
	int first_err; /* first failed untracked op since last wait */
	uint64_t first_seq;
	char first_msg[NVS_ERRMSG_MAX];
	struct counters c;
	struct slice *slices;
	struct nvs_files *files; /* NULL when caching is off */
};

static void count(atomic_uint_fast64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static const char *opname(bool write)
{
	return write ? "write" : "read";
}

/* ---------------------------------------------------------------- ops */

static void op_close_fds(struct nvs_aio *h, struct op *op)
{
	if (op->file)
		nvs__files_release(h->files, op->file);
	op->file = NULL;
	if (op->own_bfd && op->bfd >= 0)
		close(op->bfd);
	if (op->own_fd && op->fd >= 0)
		close(op->fd);
	op->fd = op->bfd = -1;
	op->own_fd = op->own_bfd = false;
}

static void op_free_locked(struct nvs_aio *h, struct op *op)
{
	op->state = OP_FREE;
	op->gen = (op->gen + 1) & 0xfffffffu;
	if (op->gen == 0)
		op->gen = 1;
	op->next_free = h->free_ops;
	h->free_ops = op;
}

/* Record @err for @op unless it already failed. Any thread. */
static void op_fail(struct nvs_aio *h, struct op *op, int err, const char *msg)
{
	pthread_mutex_lock(&h->lock);
	if (!op->err) {
		op->err = err;
		snprintf(op->msg, sizeof(op->msg), "%s", msg);
	}
	pthread_mutex_unlock(&h->lock);
}

static void op_finish_locked(struct nvs_aio *h, struct op *op)
{
	h->inflight--;
	count(&h->c.ops_completed, 1);
	if (op->err)
		count(&h->c.ops_failed, 1);
	else if (op->write)
		count(&h->c.bytes_written, op->nbytes);
	else
		count(&h->c.bytes_read, op->nbytes);
	if (op->ticket) {
		op->state = OP_DONE;
		h->tickets_done++;
	} else {
		h->finished++;
		if (op->err && (!h->first_err || op->seq < h->first_seq)) {
			h->first_err = op->err;
			h->first_seq = op->seq;
			memcpy(h->first_msg, op->msg, sizeof(h->first_msg));
		}
		op_free_locked(h, op);
	}
	pthread_cond_broadcast(&h->cond);
}

/* A slice of @op is finished; the last one closes and completes the op. */
static void op_slice_done(struct nvs_aio *h, struct op *op)
{
	if (atomic_fetch_sub_explicit(&op->slices_left, 1,
				      memory_order_acq_rel) != 1)
		return;
	op_close_fds(h, op);
	pthread_mutex_lock(&h->lock);
	op_finish_locked(h, op);
	pthread_mutex_unlock(&h->lock);
}

/* ------------------------------------------------------------ workers */

static void active_append(struct worker *w, struct slice *s)
{
	s->next = NULL;
	s->prev = w->atail;
	if (w->atail)
		w->atail->next = s;
	else
		w->ahead = s;
	w->atail = s;
}

static void active_remove(struct worker *w, struct slice *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		w->ahead = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		w->atail = s->prev;
	s->next = s->prev = NULL;
}

static void slice_fail(struct worker *w, struct slice *s, int err, int64_t off,
		       size_t len, const char *cause)
{
	struct op *op = s->op;
	char msg[NVS_ERRMSG_MAX];

	if (s->err)
		return;
	s->err = err;
	nvs__errfmt(msg, sizeof(msg),
		    "nvs_aio %s %s: request at offset %" PRId64
		    " length %zu (op offset %" PRId64
		    " length %zu, backend %s): %s",
		    opname(op->write), op->path, off, len, op->offset,
		    op->nbytes, w->h->backend_name, cause);
	op_fail(w->h, op, err, msg);
}

static bool slice_finished(const struct slice *s)
{
	return s->started && s->outstanding == 0 &&
	       (s->err || s->issued == s->len);
}

static void slice_finish(struct worker *w, struct slice *s)
{
	active_remove(w, s);
	op_slice_done(w->h, s->op);
}

/* Unaligned head and tail: buffered, synchronous, on a distinct page. */
static void slice_edges(struct worker *w, struct slice *s)
{
	struct op *op = s->op;

	for (int i = 0; i < 2 && !s->err; i++) {
		struct edge *e = &s->edge[i];
		ssize_t n;

		if (e->len == 0)
			continue;
		n = nvs__pio_full(op->bfd, e->buf, e->len, (off_t)e->off,
				  op->write);
		if (n < 0)
			slice_fail(w, s, (int)n, e->off, e->len,
				   nvs_strerror((int)n));
		else if ((size_t)n < e->len)
			slice_fail(w, s, -EIO, e->off, e->len,
				   "file ended early (truncated meanwhile?)");
		else
			count(&w->h->c.edge_bytes, e->len);
	}
	s->started = true;
}

/*
 * Cut the next request off @s; NULL when no request struct or bounce slot
 * is free. Request structs can run out below the queue depth: reap()
 * refills while completed requests still wait to be processed.
 */
static struct req *slice_next_req(struct worker *w, struct slice *s)
{
	struct op *op = s->op;
	struct req *r;
	char *user = s->buf + s->issued;
	size_t len = NVS_MIN(op->chunk, s->len - s->issued);
	int slot = -1;

	if (!w->free_reqs)
		return NULL;
	if (op->direct &&
	    (op->stage_all || ((uintptr_t)user & (op->mem_align - 1)))) {
		if (w->nfree_slots == 0)
			return NULL;
		slot = w->free_slots[--w->nfree_slots];
		len = NVS_MIN(len, w->slot_size);
	}
	r = w->free_reqs;
	w->free_reqs = r->next_free;
	r->s = s;
	r->slot = slot;
	r->user = user;
	r->io.fd = op->fd;
	r->io.file_key = op->file ? op->file->id : 0;
	r->io.opcode = op->write ? NVS_IOREQ_WRITE : NVS_IOREQ_READ;
	r->io.off = s->off + (int64_t)s->issued;
	r->io.len = len;
	if (slot >= 0) {
		r->io.buf = w->bounce + (size_t)slot * w->slot_size;
		if (op->write)
			nvs_copy(r->io.buf, user, len);
		count(&w->h->c.bounced, 1);
	} else {
		r->io.buf = user;
	}
	s->issued += len;
	s->outstanding++;
	count(&w->h->c.requests, 1);
	return r;
}

static void req_release(struct worker *w, struct req *r)
{
	if (r->slot >= 0)
		w->free_slots[w->nfree_slots++] = r->slot;
	r->next_free = w->free_reqs;
	w->free_reqs = r;
}

static void req_complete(struct worker *w, struct req *r)
{
	struct slice *s = r->s;
	int64_t res = r->io.res;

	s->outstanding--;
	if (res < 0) {
		slice_fail(w, s, (int)res, r->io.off, r->io.len,
			   nvs_strerror((int)res));
	} else if ((size_t)res < r->io.len) {
		char cause[128];
		snprintf(cause, sizeof(cause),
			 "short %s: %" PRId64 " of %zu bytes%s",
			 opname(s->op->write), res, r->io.len,
			 s->op->write ? "" : " (file truncated meanwhile?)");
		slice_fail(w, s, s->op->write ? -ENOSPC : -EIO, r->io.off,
			   r->io.len, cause);
	} else if (r->slot >= 0 && !s->op->write) {
		nvs_copy(r->user, r->io.buf, r->io.len);
	}
	req_release(w, r);
	if (slice_finished(s))
		slice_finish(w, s);
}

/* Give back requests the engine did not take (newest first). */
static void unissue(struct worker *w, struct nvs_ioreq **v, unsigned n)
{
	while (n-- > 0) {
		struct req *r = (struct req *)v[n];
		r->s->issued -= r->io.len;
		r->s->outstanding--;
		req_release(w, r);
	}
}

static unsigned submit_batch(struct worker *w, unsigned nb)
{
	unsigned acc = nvs__engine_submit(w->eng, w->batch, nb);

	if (acc < nb)
		unissue(w, w->batch + acc, nb - acc);
	return acc;
}

/* Issue requests from the active slices up to the queue depth. */
static void fill(struct worker *w)
{
	const struct nvs_aio_opts *o = &w->h->opts;
	unsigned qd = o->queue_depth;
	unsigned nb = 0;
	struct slice *s = w->ahead;

	if (w->h->files && nvs__files_closes(w->h->files) != w->closes_seen) {
		/* Registered files would keep closed ones open. */
		w->closes_seen = nvs__files_closes(w->h->files);
		nvs__engine_forget_files(w->eng);
	}
	while (s) {
		struct slice *next = s->next;

		if (!s->started)
			slice_edges(w, s);
		while (!s->err && s->issued < s->len &&
		       nvs__engine_inflight(w->eng) + nb < qd) {
			struct req *r = slice_next_req(w, s);
			if (!r)
				goto out;
			if (o->single_submit) {
				w->batch[0] = &r->io;
				if (submit_batch(w, 1) == 0)
					goto out; /* kernel busy: reap first */
			} else {
				w->batch[nb++] = &r->io;
			}
			if (r->slot >= 0 && s->op->write && nb > 0) {
				/* Staged: the copy just made took far longer
				 * than a system call. Let the disk start on it
				 * while the next one is copied. */
				bool all = submit_batch(w, nb) == nb;

				nb = 0;
				nvs__engine_kick(w->eng);
				if (!all)
					goto out; /* kernel busy: reap first */
			}
		}
		if (slice_finished(s))
			slice_finish(w, s);
		if (nvs__engine_inflight(w->eng) + nb >= qd)
			break;
		s = next;
	}
out:
	if (nb)
		submit_batch(w, nb);
}

static void reap(struct worker *w)
{
	unsigned inflight = nvs__engine_inflight(w->eng);
	/* Sliding window: refill after each completion. Batch-and-drain:
	 * the whole batch completes before the next one is cut. */
	unsigned min = w->h->opts.overlap_events ? 1 : inflight;
	unsigned n = nvs__engine_reap(w->eng, min, w->done, inflight);

	/* Count retries before completing: a waiter woken by a completion
	 * must see the retries of its own op in the stats. */
	if (nvs__engine_retries(w->eng) != w->retries_seen) {
		count(&w->h->c.retries,
		      nvs__engine_retries(w->eng) - w->retries_seen);
		w->retries_seen = nvs__engine_retries(w->eng);
	}
	for (unsigned i = 0; i < n; i++) {
		struct req *r = (struct req *)w->done[i];
		/* A staged read frees its slot only after its copy-out: in a
		 * sliding window, put the slot back to work before copying
		 * the next one, so the disk never waits on our copies. */
		bool refill = w->h->opts.overlap_events && r->slot >= 0 &&
			      !r->s->op->write && i + 1 < n;

		req_complete(w, r);
		if (refill) {
			fill(w);
			nvs__engine_kick(w->eng);
		}
	}
}

static int worker_start(struct worker *w)
{
	const struct nvs_aio *h = w->h;
	unsigned flags = 0;
	struct nvs_engine_cfg cfg = {
		.depth = h->opts.queue_depth,
		.plan = h->plan,
	};
	int ret;

	if (h->opts.uring_flags & NVS_URING_SQPOLL)
		flags |= NVS_ENGINE_SQPOLL;
	if (h->opts.uring_flags & NVS_URING_IOPOLL)
		flags |= NVS_ENGINE_IOPOLL;
	if (h->opts.uring_flags & NVS_URING_NO_FIXED)
		flags |= NVS_ENGINE_NO_FIXED;
	if (h->opts.single_submit)
		flags |= NVS_ENGINE_EAGER;
	cfg.flags = flags;
	ret = nvs__engine_create(h->backend, &cfg, &w->eng);
	pthread_mutex_lock(&w->lock);
	w->init_ret = ret;
	if (ret < 0)
		snprintf(w->init_msg, sizeof(w->init_msg), "%s engine: %s",
			 h->backend_name, nvs_strerror(ret));
	w->ready = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	if (worker_start(w) < 0)
		return NULL;
	for (;;) {
		pthread_mutex_lock(&w->lock);
		while (!w->qhead && !w->ahead && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		if (!w->qhead && !w->ahead) {
			pthread_mutex_unlock(&w->lock);
			break; /* stop, and nothing left */
		}
		while (w->qhead) {
			struct slice *s = w->qhead;
			w->qhead = s->next;
			active_append(w, s);
		}
		w->qtail = NULL;
		pthread_mutex_unlock(&w->lock);

		fill(w);
		if (nvs__engine_inflight(w->eng) > 0)
			reap(w);
	}
	/* The engine belongs to this thread, and tearing it down can sleep
	 * (io_destroy waits out an RCU grace period, ~30 ms): each worker
	 * does its own, so a handle's workers do theirs in parallel. */
	nvs__engine_destroy(w->eng);
	w->eng = NULL;
	return NULL;
}

static void worker_enqueue(struct worker *w, struct slice *s)
{
	s->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->qtail)
		w->qtail->next = s;
	else
		w->qhead = s;
	w->qtail = s;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void worker_release(struct worker *w)
{
	nvs__engine_destroy(w->eng);
	if (w->bounce)
		nvs__pinned_free(w->bounce, "nvs_aio_destroy");
	nvs__free(w->free_slots);
	nvs__free(w->reqs);
	nvs__free(w->batch);
	nvs__free(w->done);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

static int worker_init(struct nvs_aio *h, struct worker *w)
{
	const struct nvs_aio_opts *o = &h->opts;
	unsigned qd = o->queue_depth;
	size_t bounce;
	int ret;

	w->h = h;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->reqs = nvs__calloc(qd, sizeof(*w->reqs));
	w->batch = nvs__calloc(qd, sizeof(*w->batch));
	w->done = nvs__calloc(qd, sizeof(*w->done));
	if (!w->reqs || !w->batch || !w->done)
		return -ENOMEM;
	for (unsigned i = qd; i-- > 0;) {
		w->reqs[i].next_free = w->free_reqs;
		w->free_reqs = &w->reqs[i];
	}
	/* Bounce memory: bounded and allocated once, here. */
	w->slot_size = nvs__round_up(
		NVS_MIN(o->block_size,
			o->bounce_bytes ? o->bounce_bytes : UINT32_MAX),
		NVS_BOUNCE_GRAIN);
	bounce = o->bounce_bytes
			 ? o->bounce_bytes
			 : NVS_MIN((size_t)DEFAULT_BOUNCE_SLOTS * w->slot_size,
				   (size_t)DEFAULT_BOUNCE_MAX);
	w->nslots = (unsigned)NVS_MAX(1, NVS_MIN(bounce / w->slot_size, qd));
	w->free_slots = nvs__calloc(w->nslots, sizeof(*w->free_slots));
	if (!w->free_slots)
		return -ENOMEM;
	/* Pinned, once, here: never a lock per op. Unlocked memory when the
	 * memlock limit refuses (correct, just not locked; see stats). */
	w->bounce = nvs__pinned_alloc((size_t)w->nslots * w->slot_size,
				      NVS_BOUNCE_GRAIN, true, "nvs_aio_create",
				      &w->bounce_locked, &ret);
	if (!w->bounce)
		return ret;
	for (unsigned i = w->nslots; i-- > 0;)
		w->free_slots[w->nfree_slots++] = (int)i;
	return 0;
}

/* ------------------------------------------------------------- create */

static int check_opts(struct nvs_aio_opts *o, const struct nvs_aio_opts *in,
		      enum nvs_backend_reason *why)
{
	nvs_aio_opts_init(o);
	if (in) {
		if (in->size < offsetof(struct nvs_aio_opts, bounce_bytes) ||
		    in->size > sizeof(*in))
			return nvs__err(-EINVAL,
					"nvs_aio_create: opts->size %zu is not "
					"from nvs_aio_opts_init()",
					in->size);
		memcpy(o, in, in->size);
		o->size = sizeof(*o);
	}
	if (o->block_size == 0 || o->block_size % 512 ||
	    o->block_size > NVS_AIO_MAX_BLOCK_SIZE)
		return nvs__err(-EINVAL,
				"nvs_aio_create: block_size %" PRIu32
				" must be a non-zero multiple of 512 up to %u",
				o->block_size, NVS_AIO_MAX_BLOCK_SIZE);
	if (o->queue_depth == 0 || o->queue_depth > NVS_AIO_MAX_QUEUE_DEPTH)
		return nvs__err(-EINVAL,
				"nvs_aio_create: queue_depth %" PRIu32
				" must be 1..%u",
				o->queue_depth, NVS_AIO_MAX_QUEUE_DEPTH);
	if (o->intra_op_parallelism == 0 ||
	    o->intra_op_parallelism > NVS_AIO_MAX_PARALLELISM)
		return nvs__err(-EINVAL,
				"nvs_aio_create: intra_op_parallelism %" PRIu32
				" must be 1..%u",
				o->intra_op_parallelism,
				NVS_AIO_MAX_PARALLELISM);
	if ((unsigned)o->backend > NVS_BACKEND_PSYNC)
		return nvs__err(-EINVAL, "nvs_aio_create: unknown backend %d",
				(int)o->backend);
	if ((unsigned)o->direct > NVS_DIRECT_NEVER)
		return nvs__err(-EINVAL,
				"nvs_aio_create: unknown direct mode %d",
				(int)o->direct);
	if ((unsigned)o->staging > NVS_STAGE_UNPINNED)
		return nvs__err(-EINVAL,
				"nvs_aio_create: unknown staging mode %d",
				(int)o->staging);
	if (o->uring_flags & ~(uint32_t)(NVS_URING_SQPOLL | NVS_URING_IOPOLL |
					 NVS_URING_NO_FIXED))
		return nvs__err(-EINVAL,
				"nvs_aio_create: unknown uring_flags bits "
				"0x%" PRIx32,
				o->uring_flags);
	if (o->max_ops > (1u << OP_SLOT_BITS))
		return nvs__err(-EINVAL,
				"nvs_aio_create: max_ops %" PRIu32 " above %u",
				o->max_ops, 1u << OP_SLOT_BITS);
	if (o->max_ops == 0)
		o->max_ops = DEFAULT_MAX_OPS;
	if (o->open_files == 0)
		o->open_files = DEFAULT_OPEN_FILES;
	else if (o->open_files == NVS_AIO_FILES_OFF)
		o->open_files = 0;
	else if (o->open_files > MAX_OPEN_FILES)
		return nvs__err(-EINVAL,
				"nvs_aio_create: open_files %" PRIu32
				" above %u",
				o->open_files, MAX_OPEN_FILES);
	return nvs__backend_choose(&o->backend, why);
}

void nvs_aio_opts_init(struct nvs_aio_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->block_size = 1u << 20;
	opts->queue_depth = 128;
	opts->single_submit = false;
	opts->overlap_events = false;
	opts->intra_op_parallelism = 1;
	opts->backend = NVS_BACKEND_AUTO;
	opts->direct = NVS_DIRECT_AUTO;
}

/* Stop and free every worker; they must have nothing in flight. All are
 * told to stop before the first join, so they wind down together. */
static void workers_teardown(struct nvs_aio *h)
{
	for (unsigned i = 0; h->workers && i < h->nworkers; i++) {
		struct worker *w = &h->workers[i];
		if (w->running) {
			pthread_mutex_lock(&w->lock);
			w->stop = true;
			pthread_cond_signal(&w->cond);
			pthread_mutex_unlock(&w->lock);
		}
	}
	for (unsigned i = 0; h->workers && i < h->nworkers; i++) {
		struct worker *w = &h->workers[i];
		if (w->running)
			pthread_join(w->thread, NULL);
		if (w->h)
			worker_release(w);
		memset(w, 0, sizeof(*w));
	}
}

static void handle_free(struct nvs_aio *h)
{
	workers_teardown(h);
	nvs__pinned_users(-1); /* and the bounce memory goes back */
	nvs__files_destroy(h->files);
	nvs__free(h->workers);
	nvs__free(h->slices);
	nvs__free(h->ops);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	nvs__free(h);
}

const char *nvs_backend_name(enum nvs_backend b)
{
	switch (b) {
	case NVS_BACKEND_IO_URING:
		return "io_uring";
	case NVS_BACKEND_LIBAIO:
		return "libaio";
	case NVS_BACKEND_PSYNC:
		return "psync";
	default:
		return "auto";
	}
}

/* Workers with @backend: memory first, then threads, each of which makes
 * its own engine. On failure nvs_last_error() says why. */
static int create_workers(struct nvs_aio *h, enum nvs_backend backend)
{
	int ret;

	h->backend = backend;
	snprintf(h->backend_name, sizeof(h->backend_name),
		 h->plan ? "fault(%s)" : "%s", nvs_backend_name(backend));
	for (unsigned i = 0; i < h->nworkers; i++) {
		ret = worker_init(h, &h->workers[i]);
		if (ret < 0)
			return ret == -ENOMEM
				       ? nvs__err(ret,
						  "nvs_aio_create: out of "
						  "memory for worker state "
						  "and bounce buffers")
				       : ret;
	}
	for (unsigned i = 0; i < h->nworkers; i++) {
		struct worker *w = &h->workers[i];
		ret = pthread_create(&w->thread, NULL, worker_main, w);
		if (ret)
			return nvs__err(-ret,
					"nvs_aio_create: starting worker "
					"thread %u: %s",
					i, nvs_strerror(ret));
		w->running = true;
	}
	for (unsigned i = 0; i < h->nworkers; i++) {
		struct worker *w = &h->workers[i];
		pthread_mutex_lock(&w->lock);
		while (!w->ready)
			pthread_cond_wait(&w->cond, &w->lock);
		ret = w->init_ret;
		pthread_mutex_unlock(&w->lock);
		if (ret < 0)
			return nvs__err(ret, "nvs_aio_create: %s", w->init_msg);
	}
	return 0;
}

static void note(struct nvs_aio *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct nvs_aio *h, const char *fmt, ...)
{
	size_t len = strlen(h->backend_notes);
	va_list ap;

	if (len >= sizeof(h->backend_notes) - 1)
		return;
	va_start(ap, fmt);
	vsnprintf(h->backend_notes + len, sizeof(h->backend_notes) - len, fmt,
		  ap);
	va_end(ap);
}

/*
 * Pick and start the backend. AUTO walks io_uring -> libaio -> psync and
 * takes the first that probes well and starts; an explicit one must work
 * (-EOPNOTSUPP with the reason when the kernel refuses it).
 */
static int start_backend(struct nvs_aio *h)
{
	static const enum nvs_backend chain[] = {
		NVS_BACKEND_IO_URING, NVS_BACKEND_LIBAIO, NVS_BACKEND_PSYNC};
	enum nvs_backend want = h->opts.backend;
	char why[200];
	int ret = -EOPNOTSUPP;

	for (size_t i = 0; i < NVS_ARRAY_SIZE(chain); i++) {
		enum nvs_backend b = chain[i];
		const char *name = nvs_backend_name(b);

		if (want != NVS_BACKEND_AUTO && b != want)
			continue;
		why[0] = 0;
		ret = nvs__engine_probe(b, h->opts.queue_depth, why,
					sizeof(why));
		if (ret < 0) {
			note(h, "%s: %s; ", name, why);
			if (want != NVS_BACKEND_AUTO)
				return nvs__err(
					ret == -EINVAL ? -EINVAL : -EOPNOTSUPP,
					"nvs_aio_create: the %s backend cannot "
					"run here: %s",
					name, why);
			continue;
		}
		ret = create_workers(h, b);
		if (ret == 0) {
			note(h, "%s: chosen%s%s%s", name, want ? " (" : "",
			     want ? nvs_backend_reason_name(h->backend_reason)
				  : "",
			     want ? ")" : "");
			return 0;
		}
		if (ret == -ENOMEM || want != NVS_BACKEND_AUTO)
			return ret;
		note(h, "%s: %s; ", name, nvs_last_error());
		workers_teardown(h);
	}
	return ret;
}

static int create(const struct nvs_aio_opts *opts,
		  const struct nvs_fault_plan *plan, struct nvs_aio **out)
{
	struct nvs_aio *h;
	int ret;

	if (!out)
		return nvs__err(-EINVAL, "nvs_aio_create: out is NULL");
	*out = NULL;
	h = nvs__calloc(1, sizeof(*h));
	if (!h)
		return nvs__err(-ENOMEM, "nvs_aio_create: out of memory");
	nvs__pinned_users(1); /* until handle_free */
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	h->born = nvs__fork_gen();
	ret = check_opts(&h->opts, opts, &h->backend_reason);
	if (ret < 0)
		goto fail;
	if (plan) {
		h->fault = *plan;
		h->plan = &h->fault;
	}
	h->nworkers = h->opts.intra_op_parallelism;
	h->nops = h->opts.max_ops;
	h->ops = nvs__calloc(h->nops, sizeof(*h->ops));
	h->slices =
		nvs__calloc((size_t)h->nops * h->nworkers, sizeof(*h->slices));
	h->workers = nvs__calloc(h->nworkers, sizeof(*h->workers));
	if (nvs__files_create(h->opts.open_files, &h->files) < 0 || !h->ops ||
	    !h->slices || !h->workers) {
		ret = nvs__err(-ENOMEM,
			       "nvs_aio_create: out of memory for "
			       "%u op slots",
			       h->nops);
		goto fail;
	}
	for (unsigned i = h->nops; i-- > 0;) {
		struct op *op = &h->ops[i];
		op->gen = 1;
		op->fd = op->bfd = -1;
		op->slices = &h->slices[(size_t)i * h->nworkers];
		op->next_free = h->free_ops;
		h->free_ops = op;
	}
	ret = start_backend(h);
	if (ret < 0)
		goto fail;
	*out = h;
	return 0;
fail:
	handle_free(h);
	return ret;
}

int nvs_aio_create(const struct nvs_aio_opts *opts, struct nvs_aio **out)
{
	return create(opts, NULL, out);
}

int nvs__aio_create_fault(const struct nvs_aio_opts *opts,
			  const struct nvs_fault_plan *plan,
			  struct nvs_aio **out)
{
	static const struct nvs_fault_plan none;
	return create(opts, plan ? plan : &none, out);
}

/* --------------------------------------------------------------- wait */

/* Collect every finished op; the caller holds h->lock, nothing in flight. */
static int collect_all_locked(struct nvs_aio *h, char *msg)
{
	unsigned n = h->finished;
	int err = h->first_err;
	uint64_t seq = h->first_seq;

	if (err)
		memcpy(msg, h->first_msg, NVS_ERRMSG_MAX);
	for (unsigned i = 0; h->tickets_done && i < h->nops; i++) {
		struct op *op = &h->ops[i];
		if (op->state != OP_DONE)
			continue;
		n++;
		if (op->err && (!err || op->seq < seq)) {
			err = op->err;
			seq = op->seq;
			memcpy(msg, op->msg, NVS_ERRMSG_MAX);
		}
		h->tickets_done--;
		op_free_locked(h, op);
	}
	h->finished = 0;
	h->first_err = 0;
	pthread_cond_broadcast(&h->cond);
	return err ? err : (int)NVS_MIN(n, (unsigned)INT_MAX);
}

int nvs_aio_wait(struct nvs_aio *h)
{
	char msg[NVS_ERRMSG_MAX];
	int ret;

	if (!h)
		return nvs__err(-EINVAL, "nvs_aio_wait: handle is NULL");
	NVS__PARENT_ONLY(h, "nvs_aio_wait", "handle");
	pthread_mutex_lock(&h->lock);
	while (h->inflight > 0)
		pthread_cond_wait(&h->cond, &h->lock);
	ret = collect_all_locked(h, msg);
	pthread_mutex_unlock(&h->lock);
	if (ret < 0)
		nvs__err_set(ret, msg);
	return ret;
}

static int ticket_op(struct nvs_aio *h, uint64_t id, struct op **out)
{
	uint64_t slot = id & OP_SLOT_MASK;
	struct op *op;

	if (slot >= h->nops)
		return -ENOENT;
	op = &h->ops[slot];
	if (op->gen != (uint32_t)(id >> OP_SLOT_BITS) || op->state == OP_FREE ||
	    !op->ticket)
		return -ENOENT;
	*out = op;
	return 0;
}

static int collect_op(struct nvs_aio *h, uint64_t id, bool block,
		      const char *call)
{
	char msg[NVS_ERRMSG_MAX];
	struct op *op;
	int ret;

	if (!h)
		return nvs__err(-EINVAL, "%s: handle is NULL", call);
	NVS__PARENT_ONLY(h, call, "handle");
	pthread_mutex_lock(&h->lock);
	for (;;) {
		ret = ticket_op(h, id, &op);
		if (ret < 0 || op->state == OP_DONE)
			break;
		if (!block) {
			ret = -EINPROGRESS;
			break;
		}
		pthread_cond_wait(&h->cond, &h->lock);
	}
	if (ret == 0) {
		ret = op->err;
		if (ret)
			memcpy(msg, op->msg, sizeof(msg));
		h->tickets_done--;
		op_free_locked(h, op);
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	if (ret == -ENOENT)
		return nvs__err(ret,
				"%s: no op behind ticket %#" PRIx64
				" (unknown, or already collected)",
				call, id);
	if (ret < 0 && ret != -EINPROGRESS)
		nvs__err_set(ret, msg);
	return ret;
}

int nvs_aio_wait_op(struct nvs_aio *h, uint64_t op_id)
{
	return collect_op(h, op_id, true, "nvs_aio_wait_op");
}

int nvs_aio_poll_op(struct nvs_aio *h, uint64_t op_id)
{
	return collect_op(h, op_id, false, "nvs_aio_poll_op");
}

int nvs_aio_destroy(struct nvs_aio *h)
{
	int ret;

	if (!h)
		return 0;
	NVS__PARENT_ONLY(h, "nvs_aio_destroy", "handle");
	ret = nvs_aio_wait(h);
	handle_free(h);
	return ret < 0 ? ret : 0;
}

/* ------------------------------------------------------------- submit */

struct target {
	int fd, bfd;
	bool own_fd, own_bfd, direct;
	struct nvs_dio_align al;
	unsigned max_segments; /* of the disk's queue, 0 = unknown */
	struct nvs_file *file; /* from the cache: fd and bfd belong to it */
	unsigned closed;       /* idle cached files this op closed */
};

static void target_close(struct nvs_aio *h, struct target *t)
{
	if (t->file)
		nvs__files_release(h->files, t->file);
	if (t->own_bfd && t->bfd >= 0)
		close(t->bfd);
	if (t->own_fd && t->fd >= 0)
		close(t->fd);
}

#define SUBMIT_ERR(err, io, what, ...)                                         \
	nvs__err((err), "nvs_aio %s %s offset %" PRId64 " length %zu: " what,  \
		 opname((io)->opcode == NVS_AIO_WRITE), path, (io)->offset,    \
		 (io)->nbytes, __VA_ARGS__)

static int open_path(struct nvs_aio *h, const struct nvs_aio_io *io,
		     const char *path, struct target *t)
{
	bool write = io->opcode == NVS_AIO_WRITE;
	int flags = (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_CLOEXEC;
	int err;

	if (h->opts.direct != NVS_DIRECT_NEVER) {
		t->fd = nvs__files_open(h->files, path, flags | O_DIRECT, 0600);
		if (t->fd >= 0) {
			t->direct = true;
		} else if (errno == EINVAL &&
			   h->opts.direct == NVS_DIRECT_AUTO) {
			count(&h->c.fallbacks, 1);
		} else if (errno == EINVAL) {
			return SUBMIT_ERR(-EINVAL, io, "%s",
					  "the filesystem refuses O_DIRECT "
					  "(direct mode ALWAYS)");
		} else {
			err = errno;
			return SUBMIT_ERR(-err, io, "open: %s",
					  nvs_strerror(err));
		}
	}
	if (t->fd < 0) {
		t->fd = nvs__files_open(h->files, path, flags, 0600);
		if (t->fd < 0) {
			err = errno;
			return SUBMIT_ERR(-err, io, "open: %s",
					  nvs_strerror(err));
		}
	}
	t->own_fd = true;
	count(&h->c.opened, 1);
	return 0;
}

static int check_fd(const struct nvs_aio_io *io, const char *path,
		    struct target *t)
{
	int fl = fcntl(io->fd, F_GETFL);
	int acc;

	if (fl < 0)
		return SUBMIT_ERR(-EBADF, io, "%s", "not an open descriptor");
	acc = fl & O_ACCMODE;
	if (io->opcode == NVS_AIO_WRITE ? acc == O_RDONLY : acc == O_WRONLY)
		return SUBMIT_ERR(-EBADF, io, "descriptor is not open for %s",
				  opname(io->opcode == NVS_AIO_WRITE));
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

/* fstat an open target and, for O_DIRECT, learn its alignment. */
static int describe_fd(const struct nvs_aio_io *io, const char *path,
		       struct target *t, struct stat *st)
{
	int ret;

	if (fstat(t->fd, st) < 0) {
		ret = -errno;
		return SUBMIT_ERR(ret, io, "fstat: %s", nvs_strerror(ret));
	}
	if (!t->direct)
		return 0;
	t->max_segments = nvs__dio_max_segments(t->fd);
	return nvs_dio_alignment(t->fd, &t->al);
}

/*
 * The descriptor for a path-based op: from the cache when the path still
 * names the cached inode (one stat instead of open, fstat, statx, close),
 * else opened here and offered to the cache. Fills @st.
 */
static int path_fd(struct nvs_aio *h, const struct nvs_aio_io *io,
		   const char *path, struct target *t, struct stat *st)
{
	bool write = io->opcode == NVS_AIO_WRITE;
	int ret;

	if (h->files && stat(path, st) == 0 && S_ISREG(st->st_mode)) {
		t->file = nvs__files_get(h->files, path, write, st);
		if (t->file) {
			count(&h->c.reused, 1);
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
		ret = describe_fd(io, path, t, st);
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

static int open_target(struct nvs_aio *h, const struct nvs_aio_io *io,
		       const char *path, struct target *t)
{
	struct stat st;
	int ret;

	if (io->path) {
		ret = path_fd(h, io, path, t, &st);
	} else {
		ret = check_fd(io, path, t);
		if (ret == 0)
			ret = describe_fd(io, path, t, &st);
	}
	if (ret < 0)
		return ret;
	if (S_ISDIR(st.st_mode))
		return SUBMIT_ERR(-EISDIR, io, "%s", "is a directory");
	if (io->opcode == NVS_AIO_READ) {
		int64_t size = target_size(t->fd, &st);
		if (size < 0)
			return SUBMIT_ERR((int)size, io, "size: %s",
					  nvs_strerror((int)size));
		if (io->offset > size ||
		    (int64_t)io->nbytes > size - io->offset)
			return SUBMIT_ERR(-EINVAL, io,
					  "read ends beyond the end of the "
					  "file (%" PRId64 " bytes); buffer "
					  "untouched",
					  size);
	} else if (t->direct && io->nbytes > 0 && S_ISREG(st.st_mode) &&
		   io->offset + (int64_t)io->nbytes > st.st_size) {
		ret = preallocate(t->fd, &st, io);
		/* Closed deleted files free space once the worker drops
		 * the engine's hold, before it writes: the write decides. */
		if (ret == -ENOSPC && (t->closed || nvs__files_prune(h->files)))
			ret = 0;
		if (ret < 0)
			return SUBMIT_ERR(ret, io, "preallocating: %s",
					  nvs_strerror(ret));
	} else if (io->nbytes == 0 && st.st_size < io->offset &&
		   S_ISREG(st.st_mode)) {
		/* The file ends at max(old size, offset + nbytes). */
		if (ftruncate(t->fd, io->offset) < 0) {
			ret = -errno;
			return SUBMIT_ERR(ret, io, "ftruncate: %s",
					  nvs_strerror(ret));
		}
	}
	if (t->direct) {
		if (t->al.offset_align > NVS_BOUNCE_GRAIN)
			return SUBMIT_ERR(-EINVAL, io,
					  "O_DIRECT offset alignment %" PRIu32
					  " is above the supported %u",
					  t->al.offset_align, NVS_BOUNCE_GRAIN);
	}
	return 0;
}

/* Buffered descriptor on the same file, for the unaligned edges. */
static int open_buffered(struct nvs_aio *h, const struct nvs_aio_io *io,
			 const char *path, struct target *t)
{
	char proc[64];
	const char *p = io->path;
	int flags =
		(io->opcode == NVS_AIO_WRITE ? O_WRONLY : O_RDONLY) | O_CLOEXEC;
	int err;

	if (t->file) {
		t->bfd = nvs__files_bfd(h->files, t->file);
		if (t->bfd >= 0)
			return 0;
	}
	if (!p) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", io->fd);
		p = proc;
	}
	t->bfd = nvs__files_open(h->files, p, flags, 0);
	if (t->bfd < 0) {
		err = errno;
		return SUBMIT_ERR(-err, io,
				  "opening a buffered descriptor "
				  "for the unaligned edges: %s",
				  nvs_strerror(err));
	}
	if (t->file)
		t->bfd = nvs__files_set_bfd(h->files, t->file, t->bfd);
	else
		t->own_bfd = true;
	return 0;
}

/*
 * Cut the op into slices. Direct: the body is the part between page-or-
 * alignment boundaries E (so buffered edges never share a page with direct
 * I/O), split at multiples of E; head and tail edges go to the first and
 * last slice. Buffered: the whole range is body.
 */
static unsigned plan_slices(struct nvs_aio *h, struct op *op, char *buf)
{
	int64_t off = op->offset, end = op->offset + (int64_t)op->nbytes;
	uint64_t g = op->grain, b0 = (uint64_t)off, b1 = (uint64_t)end;
	uint64_t units, body;
	unsigned k;
	struct slice *first = &op->slices[0], *last;

	if (op->direct) {
		b0 = nvs__round_up((uint64_t)off, g);
		b1 = nvs__round_down((uint64_t)end, g);
		if (b0 >= b1)
			b0 = b1 = (uint64_t)end;
	}
	body = b1 - b0;
	units = body / g;
	k = (unsigned)NVS_MAX(1, NVS_MIN((uint64_t)h->nworkers, units));
	uint64_t pos = b0;
	for (unsigned i = 0; i < k; i++) {
		struct slice *s = &op->slices[i];
		uint64_t u = units / k + (i < units % k);
		uint64_t len = i == k - 1 ? b1 - pos : u * g;
		memset(s, 0, sizeof(*s));
		s->op = op;
		s->off = (int64_t)pos;
		s->len = (size_t)len;
		s->buf = buf + (pos - (uint64_t)off);
		pos += len;
	}
	last = &op->slices[k - 1];
	if (op->direct) {
		if (b0 == b1) {
			/* No aligned body: one buffered piece. */
			first->edge[0] = (struct edge){buf, off, op->nbytes};
		} else {
			first->edge[0] = (struct edge){
				buf, off, (size_t)(b0 - (uint64_t)off)};
			last->edge[1] = (struct edge){
				buf + (b1 - (uint64_t)off), (int64_t)b1,
				(size_t)((uint64_t)end - b1)};
		}
	}
	return k;
}

/* Body boundaries for a direct file: a page or the offset alignment. */
static uint32_t edge_grain(const struct target *t)
{
	uint64_t g = NVS_MAX((uint64_t)t->al.offset_align,
			     (uint64_t)sysconf(_SC_PAGESIZE));
	return (uint32_t)NVS_MAX(g, (uint64_t)4096);
}

static bool needs_edges(const struct target *t, int64_t off, size_t n)
{
	uint64_t g = edge_grain(t);

	if (!t->direct || n == 0)
		return false;
	return (uint64_t)off % g || ((uint64_t)off + n) % g;
}

/*
 * Whether unpinned memory should be staged through the pinned bounce slots
 * for @t. AUTO does it when the disk's queue cannot take a block_size
 * request of scattered 4 KiB pages in one piece (virtio: 254 segments for
 * 256 pages of 1 MiB): measured there, staging reads at 0.96x pinned and
 * direct 4 KiB-page I/O at 0.80x (writes 0.98x and 0.65x).
 */
static bool stage_unpinned(const struct nvs_aio *h, const struct target *t)
{
	if (h->opts.staging == NVS_STAGE_UNPINNED)
		return true;
	return h->opts.staging == NVS_STAGE_AUTO && t->max_segments &&
	       h->opts.block_size / 4096 > t->max_segments;
}

static int get_slot(struct nvs_aio *h, bool ticket, struct op **out)
{
	struct op *op;

	pthread_mutex_lock(&h->lock);
	while (!h->free_ops) {
		if (h->inflight == 0) {
			pthread_mutex_unlock(&h->lock);
			return nvs__err(-EAGAIN,
					"nvs_aio_submit: all %u op slots hold "
					"finished tickets nobody collected",
					h->nops);
		}
		pthread_cond_wait(&h->cond, &h->lock);
	}
	op = h->free_ops;
	h->free_ops = op->next_free;
	op->state = OP_RUNNING;
	op->ticket = ticket;
	op->err = 0;
	op->msg[0] = '\0';
	op->seq = h->next_seq++;
	h->inflight++;
	*out = op;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static int check_io(const struct nvs_aio *h, const struct nvs_aio_io *io,
		    const char *path)
{
	if (!h || !io)
		return nvs__err(-EINVAL, "nvs_aio_submit: %s is NULL",
				h ? "io" : "handle");
	NVS__PARENT_ONLY(h, "nvs_aio_submit", "handle");
	if (io->opcode != NVS_AIO_READ && io->opcode != NVS_AIO_WRITE)
		return nvs__err(-EINVAL, "nvs_aio_submit: unknown opcode %d",
				(int)io->opcode);
	if (!io->buf && io->nbytes > 0)
		return SUBMIT_ERR(-EINVAL, io, "%s", "buffer is NULL");
	if (!io->path && io->fd < 0)
		return SUBMIT_ERR(-EINVAL, io, "%s",
				  "path is NULL and no descriptor given");
	if (io->offset < 0)
		return SUBMIT_ERR(-EINVAL, io, "%s", "negative offset");
	if (io->nbytes > (uint64_t)INT64_MAX - (uint64_t)io->offset)
		return SUBMIT_ERR(-EINVAL, io, "%s",
				  "offset + length overflows");
	return 0;
}

/* A REFUSE rule of the tests' fault plan matching this submit: its
 * errno, else 0. */
static int refused(struct nvs_aio *h, const struct nvs_aio_io *io)
{
	unsigned long n;

	if (!h->plan)
		return 0;
	n = atomic_fetch_add_explicit(&h->submits, 1, memory_order_relaxed) + 1;
	for (unsigned i = 0; i < h->plan->nrules; i++) {
		const struct nvs_fault_rule *ru = &h->plan->rules[i];
		if (ru->kind != NVS_FAULT_REFUSE || n < ru->nth ||
		    (ru->count && n >= ru->nth + ru->count))
			continue;
		if (ru->opcode >= 0 &&
		    ru->opcode != (io->opcode == NVS_AIO_WRITE
					   ? NVS_IOREQ_WRITE
					   : NVS_IOREQ_READ))
			continue;
		return ru->refuse_err;
	}
	return 0;
}

int nvs_aio_submit(struct nvs_aio *h, const struct nvs_aio_io *io,
		   uint64_t *op_id)
{
	char fdname[32];
	const char *path;
	struct target t = {.fd = -1, .bfd = -1};
	struct op *op = NULL;
	unsigned k, start;
	int ret;

	if (io && !io->path)
		snprintf(fdname, sizeof(fdname), "fd %d", io->fd);
	path = io ? (io->path ? io->path : fdname) : "";
	ret = check_io(h, io, path);
	if (ret < 0)
		return ret;
	ret = refused(h, io);
	if (ret)
		return SUBMIT_ERR(-ret, io, "refused by the fault plan (%s)",
				  nvs_strerror(ret));
	ret = open_target(h, io, path, &t);
	if (ret == 0 && needs_edges(&t, io->offset, io->nbytes))
		ret = open_buffered(h, io, path, &t);
	if (ret == 0)
		ret = get_slot(h, op_id != NULL, &op);
	if (ret < 0) {
		target_close(h, &t);
		return ret;
	}
	op->write = io->opcode == NVS_AIO_WRITE;
	op->direct = t.direct;
	op->stage_all = t.direct && stage_unpinned(h, &t) &&
			!nvs_pinned_contains(io->buf, io->nbytes);
	op->fd = t.fd;
	op->bfd = t.bfd;
	op->own_fd = t.own_fd;
	op->own_bfd = t.own_bfd;
	op->file = t.file;
	op->offset = io->offset;
	op->nbytes = io->nbytes;
	snprintf(op->path, sizeof(op->path), "%s", path);
	if (t.direct) {
		uint64_t a = t.al.offset_align;
		op->mem_align = t.al.mem_align;
		op->grain = edge_grain(&t);
		op->chunk = (size_t)NVS_MAX(
			a, nvs__round_down(h->opts.block_size, a));
	} else {
		op->mem_align = 1;
		op->grain = 4096;
		op->chunk = h->opts.block_size;
	}
	if (op_id)
		*op_id = ((uint64_t)op->gen << OP_SLOT_BITS) |
			 (uint64_t)(op - h->ops);
	if (io->nbytes == 0) {
		atomic_store_explicit(&op->slices_left, 1,
				      memory_order_relaxed);
		op_slice_done(h, op);
		return 0;
	}
	k = plan_slices(h, op, io->buf);
	atomic_store_explicit(&op->slices_left, k, memory_order_relaxed);
	pthread_mutex_lock(&h->lock);
	start = h->rr;
	h->rr = (h->rr + k) % h->nworkers;
	pthread_mutex_unlock(&h->lock);
	for (unsigned i = 0; i < k; i++)
		worker_enqueue(&h->workers[(start + i) % h->nworkers],
			       &op->slices[i]);
	return 0;
}

/* ------------------------------------------------------ DeepNVMe calls */

static int do_io(struct nvs_aio *h, enum nvs_aio_opcode opc, void *buf,
		 size_t nbytes, const char *path, int fd, int64_t off,
		 bool async)
{
	struct nvs_aio_io io = {
		.opcode = opc,
		.buf = buf,
		.nbytes = nbytes,
		.path = path,
		.fd = path ? -1 : fd,
		.offset = off,
	};
	int ret = nvs_aio_submit(h, &io, NULL);

	if (ret < 0 || async)
		return ret;
	return nvs_aio_wait(h);
}

int nvs_aio_pread(struct nvs_aio *h, void *buf, size_t nbytes, const char *path,
		  int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_READ, buf, nbytes, path, -1, file_offset,
		     async);
}

int nvs_aio_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
		   const char *path, int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_WRITE, (void *)(uintptr_t)buf, nbytes, path, -1,
		     file_offset, async);
}

int nvs_aio_sync_pread(struct nvs_aio *h, void *buf, size_t nbytes,
		       const char *path, int64_t file_offset)
{
	return nvs_aio_pread(h, buf, nbytes, path, file_offset, false);
}

int nvs_aio_sync_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
			const char *path, int64_t file_offset)
{
	return nvs_aio_pwrite(h, buf, nbytes, path, file_offset, false);
}

int nvs_aio_async_pread(struct nvs_aio *h, void *buf, size_t nbytes,
			const char *path, int64_t file_offset)
{
	return nvs_aio_pread(h, buf, nbytes, path, file_offset, true);
}

int nvs_aio_async_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
			 const char *path, int64_t file_offset)
{
	return nvs_aio_pwrite(h, buf, nbytes, path, file_offset, true);
}

int nvs_aio_pread_fd(struct nvs_aio *h, void *buf, size_t nbytes, int fd,
		     int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_READ, buf, nbytes, NULL, fd, file_offset,
		     async);
}

int nvs_aio_pwrite_fd(struct nvs_aio *h, const void *buf, size_t nbytes, int fd,
		      int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_WRITE, (void *)(uintptr_t)buf, nbytes, NULL, fd,
		     file_offset, async);
}

/* ------------------------------------------- pinned buffers (DeepNVMe) */

void *nvs_aio_new_cpu_locked_buffer(struct nvs_aio *h, size_t nbytes)
{
	int err;
	void *p;

	if (!h) {
		nvs__err(-EINVAL, "nvs_aio_new_cpu_locked_buffer: handle is "
				  "NULL");
		errno = EINVAL;
		return NULL;
	}
	p = nvs__pinned_alloc(nbytes, NVS_PINNED_ALIGN, false,
			      "nvs_aio_new_cpu_locked_buffer", NULL, &err);
	if (!p)
		errno = -err;
	return p;
}

int nvs_aio_free_cpu_locked_buffer(struct nvs_aio *h, void *ptr)
{
	if (!h || !ptr)
		return nvs__err(-EINVAL,
				"nvs_aio_free_cpu_locked_buffer: %s is NULL",
				h ? "ptr" : "handle");
	return nvs__pinned_free(ptr, "nvs_aio_free_cpu_locked_buffer");
}

bool nvs_aio_is_pinned(const struct nvs_aio *h, const void *ptr, size_t nbytes)
{
	return h && nvs_pinned_contains(ptr, nbytes);
}

/* ------------------------------------------------------------ getters */

uint32_t nvs_aio_get_block_size(const struct nvs_aio *h)
{
	return h ? h->opts.block_size : 0;
}

uint32_t nvs_aio_get_queue_depth(const struct nvs_aio *h)
{
	return h ? h->opts.queue_depth : 0;
}

bool nvs_aio_get_single_submit(const struct nvs_aio *h)
{
	return h ? h->opts.single_submit : 0;
}

bool nvs_aio_get_overlap_events(const struct nvs_aio *h)
{
	return h ? h->opts.overlap_events : 0;
}

uint32_t nvs_aio_get_intra_op_parallelism(const struct nvs_aio *h)
{
	return h ? h->opts.intra_op_parallelism : 0;
}

uint32_t nvs_aio_get_alignment(const struct nvs_aio *h)
{
	long page = sysconf(_SC_PAGESIZE);

	if (!h)
		return 0;
	return (uint32_t)NVS_MAX(page, (long)NVS_DEFAULT_DIO_ALIGN);
}

const char *nvs_aio_backend_name(const struct nvs_aio *h)
{
	return h ? h->backend_name : "";
}

static uint64_t load(const atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

int nvs_aio_get_stats(const struct nvs_aio *h, struct nvs_aio_stats *st)
{
	if (!h || !st)
		return nvs__err(-EINVAL, "nvs_aio_get_stats: NULL argument");
	memset(st, 0, sizeof(*st));
	st->ops_completed = load(&h->c.ops_completed);
	st->ops_failed = load(&h->c.ops_failed);
	st->bytes_read = load(&h->c.bytes_read);
	st->bytes_written = load(&h->c.bytes_written);
	st->requests = load(&h->c.requests);
	st->bounced_requests = load(&h->c.bounced);
	st->edge_bytes = load(&h->c.edge_bytes);
	st->retries = load(&h->c.retries);
	st->direct_fallbacks = load(&h->c.fallbacks);
	st->files_opened = load(&h->c.opened);
	st->files_reused = load(&h->c.reused);
	st->bounce_locked = true;
	st->backend = h->backend;
	st->backend_reason = h->backend_reason;
	snprintf(st->backend_notes, sizeof(st->backend_notes), "%s",
		 h->backend_notes);
	for (unsigned i = 0; i < h->nworkers; i++) {
		const struct worker *w = &h->workers[i];
		struct nvs_engine_stats es;

		st->bounce_bytes_total += (uint64_t)w->nslots * w->slot_size;
		st->bounce_locked = st->bounce_locked && w->bounce_locked;
		nvs__engine_stats(w->eng, &es);
		st->uring_setup_flags = es.setup_flags;
		st->fixed_buffer_requests += es.fixed_bufs;
		st->fixed_file_requests += es.fixed_files;
		st->registered_bytes += es.registered;
		if (!st->register_error)
			st->register_error = es.register_error;
	}
	return 0;
}
