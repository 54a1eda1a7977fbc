// SPDX-License-Identifier: MIT
/*
 * The engine core shared by every backend: the in-flight count, and the
 * resubmission of short transfers and EAGAIN/EINTR so no backend can leave
 * a request half done.
 */
#include "aio/engine.h"
#include "aio/ops.h"
#include "internal/alloc.h"
#include "internal/util.h"

#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

struct nvs_engine {
	const struct nvs_engine_ops *ops;
	const struct nvs_engine_ops *base; /* under the fault backend */
	void *be;
	unsigned depth;
	unsigned inflight;	   /* accepted, not yet handed back */
	unsigned nretry;	   /* requests waiting in retry[] */
	unsigned nfailed;	   /* requests waiting in failed[] */
	struct nvs_ioreq **retry;  /* depth slots: to resubmit */
	struct nvs_ioreq **failed; /* depth slots: refused at submit, final */
	struct nvs_ioreq **raw;	   /* depth slots: scratch for backend reap */
	/* Written by the owning thread, read by any (stats): relaxed. */
	atomic_uint_fast64_t retries;
	char name[32];
};

int nvs__engine_create(enum nvs_backend backend,
		       const struct nvs_engine_cfg *cfg,
		       struct nvs_engine **out)
{
	const struct nvs_engine_ops *ops;
	struct nvs_engine *e;
	unsigned depth = cfg->depth;
	int ret;

	*out = NULL;
	switch (backend) {
	case NVS_BACKEND_IO_URING:
		ops = &nvs__uring_ops;
		break;
	case NVS_BACKEND_LIBAIO:
		ops = &nvs__libaio_ops;
		break;
	case NVS_BACKEND_PSYNC:
		ops = &nvs__psync_ops;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (depth == 0)
		return -EINVAL;
	e = nvs__calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->ops = ops;
	if (cfg->plan) {
		e->base = ops;
		e->ops = &nvs__fault_ops;
		snprintf(e->name, sizeof(e->name), "fault(%s)", ops->name);
	} else {
		snprintf(e->name, sizeof(e->name), "%s", ops->name);
	}
	e->depth = depth;
	e->retry = nvs__calloc(depth, sizeof(*e->retry));
	e->failed = nvs__calloc(depth, sizeof(*e->failed));
	e->raw = nvs__calloc(depth, sizeof(*e->raw));
	if (!e->retry || !e->failed || !e->raw) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = e->base ? nvs__fault_init(e->base, cfg, &e->be)
		      : ops->init(cfg, &e->be);
	if (ret < 0)
		goto fail;
	*out = e;
	return 0;
fail:
	nvs__free(e->retry);
	nvs__free(e->failed);
	nvs__free(e->raw);
	nvs__free(e);
	return ret;
}

unsigned long nvs__aio_max_nr(void)
{
	char buf[32] = "";
	int fd = open("/proc/sys/fs/aio-max-nr", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 65536;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtoul(buf, NULL, 10) : 65536;
}

static atomic_bool libaio_works; /* a probe succeeded; pairs with nothing */

static int libaio_probe(unsigned depth, char *why, size_t n)
{
	io_context_t ctx = 0;
	int ret;

	if (depth > nvs__aio_max_nr()) {
		snprintf(why, n,
			 "queue_depth %u is above the kernel's fs.aio-max-nr "
			 "%lu (sysctl -w fs.aio-max-nr=N)",
			 depth, nvs__aio_max_nr());
		return -EINVAL;
	}
	/* Once native AIO worked it stays available: later handles skip the
	 * probe's io_setup/io_destroy pair, which costs an RCU grace period
	 * (~30 ms) per handle. A context limit hit later is reported by the
	 * engine's own io_setup. */
	if (atomic_load_explicit(&libaio_works, memory_order_relaxed))
		return 0;
	ret = io_setup(1, &ctx);
	if (ret == 0) {
		io_destroy(ctx);
		atomic_store_explicit(&libaio_works, true,
				      memory_order_relaxed);
		return 0;
	}
	if (ret == -ENOSYS)
		snprintf(why, n, "the kernel has no native AIO (ENOSYS)");
	else if (ret == -EPERM)
		snprintf(why, n,
			 "io_setup is refused with EPERM (a seccomp filter or "
			 "security policy)");
	else if (ret == -EAGAIN)
		snprintf(why, n,
			 "io_setup: fs.aio-max-nr is used up by other "
			 "processes (EAGAIN)");
	else
		snprintf(why, n, "io_setup failed: %s", nvs_strerror(ret));
	return ret;
}

int nvs__engine_probe(enum nvs_backend backend, unsigned depth, char *why,
		      size_t n)
{
	switch (backend) {
	case NVS_BACKEND_IO_URING:
		return nvs__uring_probe(why, n);
	case NVS_BACKEND_LIBAIO:
		return libaio_probe(depth, why, n);
	case NVS_BACKEND_PSYNC:
		return 0;
	default:
		snprintf(why, n, "not a backend");
		return -EINVAL;
	}
}

void nvs__engine_destroy(struct nvs_engine *e)
{
	if (!e)
		return;
	e->ops->fini(e->be);
	nvs__free(e->retry);
	nvs__free(e->failed);
	nvs__free(e->raw);
	nvs__free(e);
}

unsigned nvs__engine_submit(struct nvs_engine *e, struct nvs_ioreq **reqs,
			    unsigned n)
{
	unsigned room = e->depth - e->inflight;
	int acc;

	if (n > room)
		n = room;
	if (n == 0)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		reqs[i]->done = 0;
		reqs[i]->tries = 0;
		reqs[i]->res = 0;
		reqs[i]->cap = 0;
	}
	acc = e->ops->submit(e->be, reqs, n);
	if (acc < 0) {
		/* Nothing accepted and nothing will be: the first request
		 * is final with that error, and is reaped like any other. */
		reqs[0]->res = acc;
		e->failed[e->nfailed++] = reqs[0];
		acc = 1;
	}
	e->inflight += (unsigned)acc;
	return (unsigned)acc;
}

/* Resubmit what waits in retry[]; a request the backend does not take
 * stays there for the next round. */
static void flush_retries(struct nvs_engine *e)
{
	unsigned keep = 0;
	int acc;

	if (e->nretry == 0)
		return;
	acc = e->ops->submit(e->be, e->retry, e->nretry);
	if (acc < 0)
		acc = 0;
	for (unsigned i = (unsigned)acc; i < e->nretry; i++)
		e->retry[keep++] = e->retry[i];
	e->nretry = keep;
}

/*
 * Classify one raw attempt. Returns true when @r is final; otherwise it was
 * queued for resubmission.
 */
static bool settle(struct nvs_engine *e, struct nvs_ioreq *r)
{
	int64_t res = r->res;

	if (res == -EINTR || res == -EAGAIN) {
		if (++r->tries >= NVS_ENGINE_MAX_TRIES)
			return true;
		goto again;
	}
	if (res < 0)
		return true;
	if (res == 0 && r->done < r->len) {
		/* End of file on a read; a write that moved nothing. */
		r->res = (int64_t)r->done;
		return true;
	}
	r->done += (size_t)res;
	if (r->done >= r->len) {
		r->res = (int64_t)r->done;
		return true;
	}
again:
	atomic_fetch_add_explicit(&e->retries, 1, memory_order_relaxed);
	e->retry[e->nretry++] = r;
	return false;
}

unsigned nvs__engine_reap(struct nvs_engine *e, unsigned min,
			  struct nvs_ioreq **out, unsigned max)
{
	unsigned got = 0;
	unsigned idle = 0;

	if (min > e->inflight)
		min = e->inflight;
	if (max > e->inflight)
		max = e->inflight;
	while (got < max) {
		unsigned before = e->nretry;
		int n;

		flush_retries(e);
		while (e->nfailed > 0 && got < max) {
			out[got++] = e->failed[--e->nfailed];
			e->inflight--;
		}
		if (got >= min && got > 0)
			break;
		if (e->inflight == e->nretry + e->nfailed) {
			/* Nothing with the backend: the backend refused our
			 * resubmissions. Yield and try again. */
			if (e->nretry == 0 || got >= min || got >= max)
				break;
			if (e->nretry == before && ++idle > 1000)
				sched_yield();
			continue;
		}
		n = e->ops->reap(e->be, got < min ? 1 : 0, e->raw,
				 NVS_MIN(max - got,
					 e->inflight - e->nretry - e->nfailed));
		if (n <= 0) {
			if (got >= min)
				break;
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct nvs_ioreq *r = e->raw[i];
			if (settle(e, r)) {
				out[got++] = r;
				e->inflight--;
			}
		}
		if (got >= min && got > 0 && e->nretry == 0)
			break;
	}
	return got;
}

unsigned nvs__engine_inflight(const struct nvs_engine *e)
{
	return e->inflight;
}

const char *nvs__engine_name(const struct nvs_engine *e)
{
	return e->name;
}

uint64_t nvs__engine_retries(const struct nvs_engine *e)
{
	return atomic_load_explicit(&e->retries, memory_order_relaxed);
}

/* The real backend and its state, under the fault backend if any: the
 * optional ops (stats, kick, forget_files) go straight to it. */
static const struct nvs_engine_ops *real(const struct nvs_engine *e, void **be)
{
	*be = e->base ? nvs__fault_base_be(e->be) : e->be;
	return e->base ? e->base : e->ops;
}

void nvs__engine_stats(const struct nvs_engine *e, struct nvs_engine_stats *st)
{
	void *be;
	const struct nvs_engine_ops *ops = real(e, &be);

	memset(st, 0, sizeof(*st));
	if (ops->stats)
		ops->stats(be, st);
	st->retries = nvs__engine_retries(e);
}

void nvs__engine_kick(struct nvs_engine *e)
{
	void *be;
	const struct nvs_engine_ops *ops = real(e, &be);

	if (ops->kick)
		ops->kick(be);
}

void nvs__engine_forget_files(struct nvs_engine *e)
{
	void *be;
	const struct nvs_engine_ops *ops = real(e, &be);

	if (ops->forget_files)
		ops->forget_files(be);
}
