// SPDX-License-Identifier: MIT
/*
 * The libaio backend: Linux native AIO. Handles partial io_submit (the
 * unaccepted tail goes back to the engine), an error on the first iocb
 * (that request fails, the rest are retried), and reads every io_event's
 * result: a negative one is the request's -errno.
 */
#include "aio/ops.h"
#include "internal/alloc.h"

#include <errno.h>
#include <libaio.h>

struct laio {
	io_context_t ctx;
	struct iocb *iocbs; /* depth control blocks */
	struct iocb **free; /* stack of unused ones */
	unsigned nfree;
	struct iocb **subv;	 /* scratch vector for io_submit */
	struct io_event *events; /* scratch for io_getevents */
	struct nvs_reqq early;	 /* failed at io_submit, reaped first */
	unsigned depth;
};

static void laio_fini(void *be)
{
	struct laio *a = be;

	if (a->ctx)
		io_destroy(a->ctx);
	nvs__free(a->iocbs);
	nvs__free(a->free);
	nvs__free(a->subv);
	nvs__free(a->events);
	nvs__reqq_fini(&a->early);
	nvs__free(a);
}

static int laio_init(const struct nvs_engine_cfg *cfg, void **be)
{
	unsigned depth = cfg->depth;
	struct laio *a;
	int ret;

	a = nvs__calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->depth = depth;
	a->iocbs = nvs__calloc(depth, sizeof(*a->iocbs));
	a->free = nvs__calloc(depth, sizeof(*a->free));
	a->subv = nvs__calloc(depth, sizeof(*a->subv));
	a->events = nvs__calloc(depth, sizeof(*a->events));
	if (!a->iocbs || !a->free || !a->subv || !a->events ||
	    nvs__reqq_init(&a->early, depth) < 0) {
		laio_fini(a);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < depth; i++)
		a->free[a->nfree++] = &a->iocbs[i];
	ret = io_setup((int)depth, &a->ctx); /* returns -errno */
	if (ret < 0) {
		a->ctx = 0;
		laio_fini(a);
		return ret;
	}
	*be = a;
	return 0;
}

static int laio_submit(void *be, struct nvs_ioreq **reqs, unsigned n)
{
	struct laio *a = be;
	unsigned accepted = 0;

	if (n > a->nfree)
		n = a->nfree;
	for (unsigned i = 0; i < n; i++) {
		struct nvs_ioreq *r = reqs[i];
		struct iocb *cb = a->free[--a->nfree];
		char *buf = r->buf + r->done;
		size_t len = nvs__ioreq_span(r);
		long long off = (long long)(r->off + (int64_t)r->done);

		if (r->opcode == NVS_IOREQ_WRITE)
			io_prep_pwrite(cb, r->fd, buf, len, off);
		else
			io_prep_pread(cb, r->fd, buf, len, off);
		cb->data = r;
		a->subv[i] = cb;
	}
	while (accepted < n) {
		int ret = io_submit(a->ctx, (long)(n - accepted),
				    a->subv + accepted);
		if (ret > 0) {
			accepted += (unsigned)ret;
			continue;
		}
		if (ret == -EINTR)
			continue;
		if (ret == -EAGAIN || ret == 0)
			break; /* kernel busy: the engine retries later */
		/* The first unaccepted iocb is invalid: it fails alone. */
		struct nvs_ioreq *r = a->subv[accepted]->data;
		r->res = ret;
		a->free[a->nfree++] = a->subv[accepted];
		nvs__reqq_push(&a->early, r);
		accepted++;
	}
	for (unsigned i = accepted; i < n; i++)
		a->free[a->nfree++] = a->subv[i];
	return (int)accepted;
}

static int laio_reap(void *be, unsigned min, struct nvs_ioreq **out,
		     unsigned max)
{
	struct laio *a = be;
	unsigned n = nvs__reqq_drain(&a->early, out, 0, max);
	int ret;

	if (n >= max || (n >= min && n > 0))
		return (int)n;
	if (min > n)
		min -= n;
	else
		min = 0;
	do {
		ret = io_getevents(a->ctx, (long)min, (long)(max - n),
				   a->events, NULL);
	} while (ret == -EINTR);
	if (ret < 0)
		return n > 0 ? (int)n : ret;
	for (int i = 0; i < ret; i++) {
		struct io_event *ev = &a->events[i];
		struct nvs_ioreq *r = ev->data;
		/* res is unsigned long in the ABI; negative means -errno. */
		r->res = (int64_t)(long)ev->res;
		a->free[a->nfree++] = ev->obj;
		out[n++] = r;
	}
	return (int)n;
}

const struct nvs_engine_ops nvs__libaio_ops = {
	.submit = laio_submit,
	.reap = laio_reap,
	.init = laio_init,
	.fini = laio_fini,
	.name = "libaio",
};
