/* SPDX-License-Identifier: MIT */
/* Library-internal entry points of the aio handle (tests use them). */
#ifndef NVS_AIO_HANDLE_H
#define NVS_AIO_HANDLE_H

#include "aio/engine.h"
#include "nvswap/aio.h"

/*
 * Like nvs_aio_create(), but every worker's engine is the fault backend
 * following @plan (copied) over the backend the handle would use anyway
 * (opts->backend, NVSWAP_BACKEND, AUTO's probe). Each worker counts its own
 * attempts, so with intra_op_parallelism 1 a rule's nth is exact.
 * NVS_FAULT_REFUSE rules are the handle's own: they count its
 * nvs_aio_submit calls and refuse the matching ones before queuing.
 */
int nvs__aio_create_fault(const struct nvs_aio_opts *opts,
			  const struct nvs_fault_plan *plan,
			  struct nvs_aio **out);

/* Bounce slot size granularity; also the largest offset alignment served. */
#define NVS_BOUNCE_GRAIN (64u << 10)

#endif
