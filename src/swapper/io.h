/* SPDX-License-Identifier: MIT */
/*
 * A tensor's I/O: one ticketed aio op per extent, submitted and collected
 * (write-backs polled, reads waited for, a read's checksum verified), and
 * the state transition when the last ticket is in.
 */
#ifndef NVS_SWAPPER_IO_H
#define NVS_SWAPPER_IO_H

#include "internal/util.h"
#include "swapper/swapper_impl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/aio.h"

/* Bytes moved for extent @e: its length rounded up to whole aligned
 * blocks. */
static inline uint64_t nvs__io_len(const struct nvs_swapper *s,
				   const struct nvs_extent *e)
{
	return nvs__round_up(e->len, s->align);
}

/* Queue one op per extent of @t, reading into or writing from @base
 * (@padded: whole aligned blocks; else exact lengths). Returns how many
 * were queued in *n; 0 or the first submit error. */
int nvs__submit_extents(struct nvs_swapper *s, struct tensor *t,
			enum nvs_aio_opcode op, void *base, bool padded,
			size_t *n);

/* Wait for tickets [from, to) of @t; the first failure, with its
 * sentence in this thread's last error. No lock needed: @t is busy. */
int nvs__wait_tickets(struct nvs_swapper *s, struct tensor *t, size_t from,
		      size_t to, bool write);

/* A submit of @t's extents failed with @ret (its sentence in the last
 * error) after @n were queued: wait for those with the lock dropped (@t
 * must be busy) and return @ret, its sentence intact. Lock held. */
int nvs__drain_failed_submit(struct nvs_swapper *s, struct tensor *t, size_t n,
			     bool write, int ret);

/* Add @t's extent lengths to the per-path bytes read or written. Lock
 * held. */
void nvs__count_path_bytes(struct nvs_swapper *s, const struct tensor *t,
			   bool write);

/* Wait for @t's I/O in flight with the lock dropped, check a read, and
 * finish it. Lock held on entry and return; @t is in flight, not busy. */
void nvs__collect(struct nvs_swapper *s, struct tensor *t);

/* Collect the write-backs that have ended, without waiting; whether any
 * gave a buffer back. Lock held. */
bool nvs__reap_writes(struct nvs_swapper *s);

/* Start the write-back of resident, unpinned, dirty @t. Lock held (it is
 * dropped meanwhile). Returns 0 when queued; a submit failure leaves @t
 * resident and dirty and is returned, not kept. */
int nvs__start_write(struct nvs_swapper *s, struct tensor *t);

/* Start reading ON_NVME @t into @buf (a never-written tensor is zero
 * filled by whoever collects it). Lock held. 0, or a submit failure:
 * @t is ON_NVME again and @buf back in the pool. */
int nvs__start_read(struct nvs_swapper *s, struct tensor *t, void *buf);

#endif
