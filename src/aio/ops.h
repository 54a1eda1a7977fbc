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
	/* Set up for @depth attempts in flight; -errno when unavailable. */
	int (*init)(unsigned depth, const struct nvs_fault_plan *plan,
		    void **be);
	void (*fini)(void *be);
	const char *name;
};

extern const struct nvs_engine_ops nvs__psync_ops;
extern const struct nvs_engine_ops nvs__libaio_ops;
extern const struct nvs_engine_ops nvs__fault_ops;

/* One synchronous attempt of at most @max bytes (psync and fault). */
void nvs__psync_attempt(struct nvs_ioreq *r, size_t max);
/* Queue a finished attempt on a psync backend for reaping; false if full. */
bool nvs__psync_park(void *psync_be, struct nvs_ioreq *r);

#endif
