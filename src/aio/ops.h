/* SPDX-License-Identifier: MIT */
/*
 * The backend ops table behind an engine. A backend moves raw attempts: it
 * transfers (buf + done, len - done) at (off + done) and stores the raw
 * result in req->res. Retrying short transfers and EAGAIN/EINTR is the
 * engine's job (engine.c), so every backend gets it the same way.
 */
#ifndef NVS_AIO_OPS_H
#define NVS_AIO_OPS_H

#include "aio/engine.h"
#include "internal/alloc.h"

#include <errno.h>

struct nvs_engine_ops {
	/*
	 * Start up to @n attempts. Return how many were accepted (the first
	 * ones; the rest were not touched), or -errno when none could be and
	 * the engine should fail them. An attempt that fails at submit time
	 * is accepted and reaped with its error.
	 */
	int (*submit)(void *be, struct nvs_ioreq **reqs, unsigned n);
	/*
	 * Deliver finished attempts into @out (at most @max), blocking until
	 * at least @min are there. Return the count or -errno.
	 */
	int (*reap)(void *be, unsigned min, struct nvs_ioreq **out,
		    unsigned max);
	/* Set up for cfg->depth attempts in flight; -errno when
	 * unavailable. */
	int (*init)(const struct nvs_engine_cfg *cfg, void **be);
	void (*fini)(void *be);
	/* Optional: start queued attempts now (see nvs__engine_kick). */
	void (*kick)(void *be);
	/* Optional: backend counters (registered buffers and files). */
	void (*stats)(const void *be, struct nvs_engine_stats *st);
	/* Optional: drop registered files. */
	void (*forget_files)(void *be);
	const char *name;
};

extern const struct nvs_engine_ops nvs__psync_ops;
extern const struct nvs_engine_ops nvs__libaio_ops;
extern const struct nvs_engine_ops nvs__uring_ops;
/* The fault backend wraps another; its init is nvs__fault_init. */
extern const struct nvs_engine_ops nvs__fault_ops;
int nvs__fault_init(const struct nvs_engine_ops *base,
		    const struct nvs_engine_cfg *cfg, void **be);
/* The wrapped backend's state under a fault backend's. */
void *nvs__fault_base_be(void *fault_be);

/* io_uring usable here? 0, or -errno with the reason in @why. */
int nvs__uring_probe(char *why, size_t n);
/* The sysctl file nvs__uring_probe reads (tests replace it). */
extern const char *nvs__uring_disabled_path;

/*
 * A FIFO of requests, fixed capacity (a backend's depth): attempts parked
 * until reaped (psync), failed before reaching the kernel (fault,
 * io_uring), or prepared and not yet consumed by it (io_uring).
 */
struct nvs_reqq {
	struct nvs_ioreq **v;
	unsigned head, n, cap;
};

static inline int nvs__reqq_init(struct nvs_reqq *q, unsigned cap)
{
	q->v = nvs__calloc(cap, sizeof(*q->v));
	q->head = q->n = 0;
	q->cap = cap;
	return q->v ? 0 : -ENOMEM;
}

static inline void nvs__reqq_fini(struct nvs_reqq *q)
{
	nvs__free(q->v);
	q->v = NULL;
}

/* Append @r; false when full. */
static inline bool nvs__reqq_push(struct nvs_reqq *q, struct nvs_ioreq *r)
{
	if (q->n == q->cap)
		return false;
	q->v[(q->head + q->n++) % q->cap] = r;
	return true;
}

/* The oldest, taken out; the queue must not be empty. */
static inline struct nvs_ioreq *nvs__reqq_pop(struct nvs_reqq *q)
{
	struct nvs_ioreq *r = q->v[q->head];

	q->head = (q->head + 1) % q->cap;
	q->n--;
	return r;
}

/* Move the oldest ones to @out[@n...] up to @max; the new count. */
static inline unsigned nvs__reqq_drain(struct nvs_reqq *q,
				       struct nvs_ioreq **out, unsigned n,
				       unsigned max)
{
	while (n < max && q->n > 0)
		out[n++] = nvs__reqq_pop(q);
	return n;
}

/* Bytes the next attempt of @r moves: what is left, at most r->cap. */
static inline size_t nvs__ioreq_span(const struct nvs_ioreq *r)
{
	size_t left = r->len - r->done;

	return r->cap && r->cap < left ? r->cap : left;
}

#endif
