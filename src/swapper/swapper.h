/* SPDX-License-Identifier: MIT */
/*
 * Internal seam of the swap manager (the public API is nvswap/swapper.h):
 * a read-ahead that says what it did and one that gives a read ahead
 * back, for the role swappers; a swapper
 * whose aio handle injects faults, and that handle, for tests.
 */
#ifndef NVS_SWAPPER_SWAPPER_H
#define NVS_SWAPPER_SWAPPER_H

#include "aio/engine.h"
#include "nvswap/swapper.h"

/* nvs_swapper_create() over a fault-injecting handle following @plan. */
int nvs__swapper_create_fault(const struct nvs_swapper_opts *opts,
			      const struct nvs_fault_plan *plan,
			      struct nvs_swapper **out);

/* nvs_swapper_try_prefetch() that says what it did: 1 when it started
 * the read (or the zero fill) or kept the buffer of a write-back in
 * flight, 0 when the tensor was resident or on its way already; else
 * the -errno (-EAGAIN: no free buffer). For the role swappers'
 * counters. */
int nvs__swapper_readahead(struct nvs_swapper *s, uint64_t id);

/* Give back the buffer of @id, brought by a read-ahead that no acquire
 * took, without waiting: a read that has landed is dropped unchecked (its
 * bytes counted as read; a failed one kept for the next acquire, as a
 * failed prefetch is), a resident clean unheld one dropped, a
 * write-back whose buffer the read-ahead kept lets it go when it ends.
 * 1 when given back, 0 when there was nothing to give (acquired
 * meanwhile, changed, gone), -EINPROGRESS while its read is in flight
 * (ask again later). */
int nvs__swapper_drop_unused(struct nvs_swapper *s, uint64_t id);

/* Scratch space: tensor @id reads as zeros again, without I/O: its
 * buffer goes back (a write in flight is waited for first), its data is
 * dropped with any failure not yet reported, and its blocks stay its own
 * (no hole punched, nothing placed again: the next write-back overwrites
 * them). 0, -ENOENT, -EBUSY (acquired). */
int nvs__swapper_clear(struct nvs_swapper *s, uint64_t id, const char *call);

/* Whether @s is a persistent set (opts.persist). */
bool nvs__swapper_persistent(const struct nvs_swapper *s);

/* The swapper's aio handle, for tests that check nothing was left in
 * flight or uncollected (nvs_aio_wait() on it then returns 0). */
struct nvs_aio *nvs__swapper_aio(struct nvs_swapper *s);

#endif
