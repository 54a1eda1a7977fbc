// SPDX-License-Identifier: MIT
/*
 * The aio handle's workers and slicing. An op is cut into one contiguous
 * slice per worker; each worker cuts its slices into block_size requests
 * kept queue_depth deep on its own engine (through pinned bounce slots when
 * the memory is misaligned), does the unaligned edges buffered, and
 * reports each finished slice to the op.
 */
#include "aio/worker.h"
#include "aio/engine.h"
#include "aio/files.h"
#include "aio/handle.h"
#include "aio/ticket.h"
#include "buffers/pinned.h"
#include "gpu/gds.h"
#include "gpu/stage.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define DEFAULT_BOUNCE_SLOTS 8u
#define DEFAULT_BOUNCE_MAX (8u << 20)

static void active_append(struct nvs_worker *w, struct nvs_slice *s)
{
	s->next = NULL;
	s->prev = w->atail;
	if (w->atail)
		w->atail->next = s;
	else
		w->ahead = s;
	w->atail = s;
}

static void active_remove(struct nvs_worker *w, struct nvs_slice *s)
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

static void slice_fail(struct nvs_worker *w, struct nvs_slice *s, int err,
		       int64_t off, size_t len, const char *cause)
{
	struct nvs_op *op = s->op;
	char msg[NVS_ERRMSG_MAX];

	if (s->err)
		return;
	s->err = err;
	nvs__errfmt(msg, sizeof(msg),
		    "nvs_aio %s %s: request at offset %" PRId64
		    " length %zu (op offset %" PRId64
		    " length %zu, backend %s): %s",
		    nvs__aio_opname(op->write), op->path, off, len, op->offset,
		    op->nbytes, w->h->backend_name, cause);
	nvs__op_fail(w->h, op, err, msg);
}

static bool slice_finished(const struct nvs_slice *s)
{
	return s->started && s->outstanding == 0 &&
	       (s->err || s->issued == s->len);
}

static void slice_finish(struct nvs_worker *w, struct nvs_slice *s)
{
	active_remove(w, s);
	nvs__op_slice_done(w->h, s->op);
}

static void req_release(struct nvs_worker *w, struct nvs_req *r);

/*
 * Copy between device memory and this worker's pinned memory (a bounce
 * slot or the edge scratch) for a device op; on failure the slice fails
 * with the driver's error for the request at @off.
 */
static int dev_copy(struct nvs_worker *w, struct nvs_slice *s, void *dst,
		    const void *src, size_t len, int64_t off)
{
	char cause[NVS_ERRMSG_MAX / 2];
	int ret = nvs__gpu_lane_copy(
		&w->lane, &s->op->mem, dst, src, len, w->bounce,
		(size_t)w->nslots * w->slot_size, cause, sizeof(cause));

	if (ret < 0)
		slice_fail(w, s, ret, off, len, cause);
	return ret;
}

/* A device op's edge through the (pinned) edge scratch, made once. */
static ssize_t dev_edge(struct nvs_worker *w, struct nvs_slice *s,
			struct nvs_edge *e)
{
	struct nvs_op *op = s->op;
	bool locked;
	ssize_t n;
	int ret;

	if (!w->edge_scratch) {
		w->edge_scratch = nvs__pinned_alloc(
			2 * NVS_BOUNCE_GRAIN, NVS_BOUNCE_GRAIN, true,
			"nvs_aio (device edges)", &locked, &ret);
		if (!w->edge_scratch)
			return ret;
	}
	if (op->write &&
	    dev_copy(w, s, w->edge_scratch, e->buf, e->len, e->off) < 0)
		return 0; /* failed with the driver's error */
	n = nvs__pio_full(op->t.bfd, w->edge_scratch, e->len, (off_t)e->off,
			  op->write);
	if (!op->write && n == (ssize_t)e->len &&
	    dev_copy(w, s, e->buf, w->edge_scratch, e->len, e->off) < 0)
		return 0;
	return n;
}

/* Unaligned head and tail: buffered, synchronous, on a distinct page. */
static void slice_edges(struct nvs_worker *w, struct nvs_slice *s)
{
	struct nvs_op *op = s->op;

	for (int i = 0; i < 2 && !s->err; i++) {
		struct nvs_edge *e = &s->edge[i];
		ssize_t n;

		if (e->len == 0)
			continue;
		if (op->mem.device >= 0)
			n = dev_edge(w, s, e);
		else
			n = nvs__pio_full(op->t.bfd, e->buf, e->len,
					  (off_t)e->off, op->write);
		if (s->err)
			break; /* the device copy failed */
		if (n < 0)
			slice_fail(w, s, (int)n, e->off, e->len,
				   nvs_strerror((int)n));
		else if ((size_t)n < e->len)
			slice_fail(w, s, -EIO, e->off, e->len,
				   "file ended early (truncated meanwhile?)");
		else
			nvs__aio_count(&w->h->c.edge_bytes, e->len);
	}
	s->started = true;
}

/*
 * Cut the next request off @s; NULL when no request struct or bounce slot
 * is free. Request structs can run out below the queue depth: reap()
 * refills while completed requests still wait to be processed.
 */
static struct nvs_req *slice_next_req(struct nvs_worker *w, struct nvs_slice *s)
{
	struct nvs_op *op = s->op;
	struct nvs_req *r;
	char *user = s->buf + s->issued;
	size_t len = NVS_MIN(op->chunk, s->len - s->issued);
	int slot = -1;

	if (!w->free_reqs)
		return NULL;
	if (op->mem.device >= 0 ||
	    (op->t.direct &&
	     (op->stage_all || ((uintptr_t)user & (op->mem_align - 1))))) {
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
	r->io.fd = op->t.fd;
	r->io.file_key = op->t.file ? op->t.file->id : 0;
	r->io.opcode = op->write ? NVS_IOREQ_WRITE : NVS_IOREQ_READ;
	r->io.off = s->off + (int64_t)s->issued;
	r->io.len = len;
	if (slot >= 0) {
		r->io.buf = w->bounce + (size_t)slot * w->slot_size;
		if (op->write && op->mem.device >= 0 &&
		    dev_copy(w, s, r->io.buf, user, len, r->io.off) < 0) {
			req_release(w, r);
			return NULL; /* the slice failed: nothing issued */
		}
		if (op->write && op->mem.device < 0)
			nvs_copy(r->io.buf, user, len);
		nvs__aio_count(&w->h->c.bounced, 1);
	} else {
		r->io.buf = user;
	}
	s->issued += len;
	s->outstanding++;
	nvs__aio_count(&w->h->c.requests, 1);
	return r;
}

static void req_release(struct nvs_worker *w, struct nvs_req *r)
{
	if (r->slot >= 0)
		w->free_slots[w->nfree_slots++] = r->slot;
	r->next_free = w->free_reqs;
	w->free_reqs = r;
}

/* A full disk may be held full by our own descriptors of files deleted
 * since: close them, so that a retry (the caller's: this write has
 * failed) finds their space. Says so in the sentence's @cause. */
static void prune_if_full(struct nvs_worker *w, int err, char *cause,
			  size_t size)
{
	size_t n = strlen(cause);

	if ((err == -ENOSPC || err == -EDQUOT) && nvs__files_prune(w->h->files))
		snprintf(cause + n, size - n,
			 " (descriptors of deleted files closed: a retry "
			 "may find space)");
}

static void req_complete(struct nvs_worker *w, struct nvs_req *r)
{
	struct nvs_slice *s = r->s;
	int64_t res = r->io.res;
	char cause[192];

	s->outstanding--;
	if (res < 0) {
		snprintf(cause, sizeof(cause), "%s", nvs_strerror((int)res));
		if (s->op->write)
			prune_if_full(w, (int)res, cause, sizeof(cause));
		slice_fail(w, s, (int)res, r->io.off, r->io.len, cause);
	} else if ((size_t)res < r->io.len) {
		snprintf(cause, sizeof(cause),
			 "short %s: %" PRId64 " of %zu bytes%s",
			 nvs__aio_opname(s->op->write), res, r->io.len,
			 s->op->write ? "" : " (file truncated meanwhile?)");
		if (s->op->write)
			prune_if_full(w, -ENOSPC, cause, sizeof(cause));
		slice_fail(w, s, s->op->write ? -ENOSPC : -EIO, r->io.off,
			   r->io.len, cause);
	} else if (r->slot >= 0 && !s->op->write) {
		if (s->op->mem.device >= 0)
			dev_copy(w, s, r->user, r->io.buf, r->io.len,
				 r->io.off);
		else
			nvs_copy(r->user, r->io.buf, r->io.len);
	}
	req_release(w, r);
	if (slice_finished(s))
		slice_finish(w, s);
}

/* Give back requests the engine did not take (newest first). */
static void unissue(struct nvs_worker *w, struct nvs_ioreq **v, unsigned n)
{
	while (n-- > 0) {
		struct nvs_req *r = (struct nvs_req *)v[n];
		r->s->issued -= r->io.len;
		r->s->outstanding--;
		req_release(w, r);
	}
}

static unsigned submit_batch(struct nvs_worker *w, unsigned nb)
{
	unsigned acc = nvs__engine_submit(w->eng, w->batch, nb);

	if (acc < nb)
		unissue(w, w->batch + acc, nb - acc);
	return acc;
}

/*
 * A use_gds handle's device slice: cuFile moves it, edges and body, in
 * calls of up to GDS_CALL_MAX on this thread (cuFile handles alignment
 * itself). Large calls, not block_size ones: each call is synchronous,
 * and cuFile splits a large one over its own I/O threads (its
 * "parallel_io"), where 1 MiB calls left one request in flight (0.81x
 * the disk in compatibility mode on the H200 machine).
 */
#define GDS_CALL_MAX (256u << 20)

static void slice_run_gds(struct nvs_worker *w, struct nvs_slice *s)
{
	struct nvs_op *op = s->op;
	struct nvs_edge body = {s->buf, s->off, s->len};
	struct nvs_edge *parts[3] = {&s->edge[0], &body, &s->edge[1]};
	char cause[NVS_ERRMSG_MAX / 2];

	for (int i = 0; i < 3 && !s->err; i++) {
		struct nvs_edge *e = parts[i];
		for (size_t done = 0; done < e->len && !s->err;) {
			size_t len =
				NVS_MIN((size_t)GDS_CALL_MAX, e->len - done);
			int64_t off = e->off + (int64_t)done;
			int ret = nvs__gds_io(op->gds_fh, &op->mem,
					      e->buf + done, len, off,
					      op->write, cause, sizeof(cause));
			if (ret < 0)
				slice_fail(w, s, ret, off, len, cause);
			else
				nvs__aio_count(&w->h->c.requests, 1);
			done += len;
		}
	}
	s->started = true;
	s->issued = s->len;
}

/* The most requests a worker had in flight (nvs_aio_stats). */
static void high_water(struct nvs_aio *h, unsigned n)
{
	uint32_t cur = atomic_load_explicit(&h->req_high, memory_order_relaxed);

	while (n > cur && !atomic_compare_exchange_weak_explicit(
				  &h->req_high, &cur, n, memory_order_relaxed,
				  memory_order_relaxed))
		;
}

/* Issue requests from the active slices up to the queue depth. */
static void fill(struct nvs_worker *w)
{
	const struct nvs_aio_opts *o = &w->h->opts;
	unsigned qd = nvs__aio_queue_limit(w->h);
	unsigned nb = 0;
	struct nvs_slice *s = w->ahead;

	if (w->h->files && nvs__files_closes(w->h->files) != w->closes_seen) {
		/* Registered files would keep closed ones open. */
		w->closes_seen = nvs__files_closes(w->h->files);
		nvs__engine_forget_files(w->eng);
	}
	while (s) {
		struct nvs_slice *next = s->next;

		if (s->op->gds && !s->started)
			slice_run_gds(w, s);
		else if (!s->started)
			slice_edges(w, s);
		while (!s->err && s->issued < s->len &&
		       nvs__engine_inflight(w->eng) + nb < qd) {
			struct nvs_req *r = slice_next_req(w, s);
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
	high_water(w->h, nvs__engine_inflight(w->eng));
}

static void reap(struct nvs_worker *w)
{
	unsigned inflight = nvs__engine_inflight(w->eng);
	/* Sliding window: refill after each completion. Batch-and-drain:
	 * the whole batch completes before the next one is cut, except
	 * while requests are staged: there a batch is only as deep as the
	 * bounce slots (8 by default, not queue_depth), and draining it
	 * would leave the disk idle during every copy (staged reads ran at
	 * 0.70x pinned that way, 0.95x with the window). */
	bool window = w->h->opts.overlap_events || w->nfree_slots < w->nslots;
	unsigned min = window ? 1 : inflight;
	unsigned n = nvs__engine_reap(w->eng, min, w->done, inflight);

	/* Count retries before completing: a waiter woken by a completion
	 * must see the retries of its own op in the stats. */
	if (nvs__engine_retries(w->eng) != w->retries_seen) {
		nvs__aio_count(&w->h->c.retries,
			       nvs__engine_retries(w->eng) - w->retries_seen);
		w->retries_seen = nvs__engine_retries(w->eng);
	}
	for (unsigned i = 0; i < n; i++) {
		struct nvs_req *r = (struct nvs_req *)w->done[i];
		/* A staged read frees its slot only after its copy-out: in a
		 * sliding window, put the slot back to work before copying
		 * the next one, so the disk never waits on our copies. */
		bool refill =
			window && r->slot >= 0 && !r->s->op->write && i + 1 < n;

		req_complete(w, r);
		if (refill) {
			fill(w);
			nvs__engine_kick(w->eng);
		}
	}
}

static int worker_start(struct nvs_worker *w)
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
	struct nvs_worker *w = arg;

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
		/* Batch-and-drain: ops queued meanwhile join at a batch's
		 * end, as they always did, even when the batch is reaped as
		 * a window because it is staged (see reap()). */
		if (w->h->opts.overlap_events ||
		    nvs__engine_inflight(w->eng) == 0) {
			while (w->qhead) {
				struct nvs_slice *s = w->qhead;
				w->qhead = s->next;
				active_append(w, s);
			}
			w->qtail = NULL;
		}
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

void nvs__worker_enqueue(struct nvs_worker *w, struct nvs_slice *s)
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

static void worker_release(struct nvs_worker *w)
{
	nvs__engine_destroy(w->eng);
	/* Before the bounce memory it may have registered goes. */
	nvs__gpu_lane_destroy(w->lane);
	if (w->edge_scratch)
		nvs__pinned_free(w->edge_scratch, "nvs_aio_destroy");
	if (w->bounce)
		nvs__pinned_free(w->bounce, "nvs_aio_destroy");
	nvs__free(w->free_slots);
	nvs__free(w->reqs);
	nvs__free(w->batch);
	nvs__free(w->done);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

static int worker_init(struct nvs_aio *h, struct nvs_worker *w)
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

/* Stop and free every worker; they must have nothing in flight. All are
 * told to stop before the first join, so they wind down together. */
void nvs__workers_teardown(struct nvs_aio *h)
{
	for (unsigned i = 0; h->workers && i < h->nworkers; i++) {
		struct nvs_worker *w = &h->workers[i];
		if (w->running) {
			pthread_mutex_lock(&w->lock);
			w->stop = true;
			pthread_cond_signal(&w->cond);
			pthread_mutex_unlock(&w->lock);
		}
	}
	for (unsigned i = 0; h->workers && i < h->nworkers; i++) {
		struct nvs_worker *w = &h->workers[i];
		if (w->running)
			pthread_join(w->thread, NULL);
		if (w->h)
			worker_release(w);
		memset(w, 0, sizeof(*w));
	}
}

/* Workers with @backend: memory first, then threads, each of which makes
 * its own engine. On failure nvs_last_error() says why. */
int nvs__workers_create(struct nvs_aio *h, enum nvs_backend backend)
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
		struct nvs_worker *w = &h->workers[i];
		ret = pthread_create(&w->thread, NULL, worker_main, w);
		if (ret)
			return nvs__err(-ret,
					"nvs_aio_create: starting worker "
					"thread %u: %s",
					i, nvs_strerror(ret));
		w->running = true;
	}
	for (unsigned i = 0; i < h->nworkers; i++) {
		struct nvs_worker *w = &h->workers[i];
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

/*
 * Cut the op into slices. Direct: the body is the part between page-or-
 * alignment boundaries E (so buffered edges never share a page with direct
 * I/O), split at multiples of E; head and tail edges go to the first and
 * last slice. Buffered: the whole range is body.
 */
unsigned nvs__slices_plan(struct nvs_aio *h, struct nvs_op *op, char *buf)
{
	int64_t off = op->offset, end = op->offset + (int64_t)op->nbytes;
	uint64_t g = op->grain, b0 = (uint64_t)off, b1 = (uint64_t)end;
	uint64_t units, body;
	unsigned k;
	struct nvs_slice *first = &op->slices[0], *last;

	if (op->t.direct) {
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
		struct nvs_slice *s = &op->slices[i];
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
	if (op->t.direct) {
		if (b0 == b1) {
			/* No aligned body: one buffered piece. */
			first->edge[0] =
				(struct nvs_edge){buf, off, op->nbytes};
		} else {
			first->edge[0] = (struct nvs_edge){
				buf, off, (size_t)(b0 - (uint64_t)off)};
			last->edge[1] = (struct nvs_edge){
				buf + (b1 - (uint64_t)off), (int64_t)b1,
				(size_t)((uint64_t)end - b1)};
		}
	}
	return k;
}
