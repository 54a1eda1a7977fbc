// SPDX-License-Identifier: MIT
/*
 * The handle's read-only side: the option getters, the backend name and
 * nvs_aio_get_stats, gathered from the handle's counters and from every
 * worker's engine.
 */
#include "aio/stats.h"
#include "aio/align.h"
#include "aio/handle_types.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

uint32_t nvs_aio_get_block_size(const struct nvs_aio *h)
{
	return h ? h->opts.block_size : 0;
}

uint32_t nvs_aio_get_queue_depth(const struct nvs_aio *h)
{
	return h ? h->opts.queue_depth : 0;
}

uint32_t nvs_aio_get_queue_limit(const struct nvs_aio *h)
{
	return h ? nvs__aio_queue_limit(h) : 0;
}

int nvs_aio_set_queue_limit(struct nvs_aio *h, uint32_t depth)
{
	if (!h)
		return nvs__err(-EINVAL, "nvs_aio_set_queue_limit: h is NULL");
	if (depth > h->opts.queue_depth)
		return nvs__err(-EINVAL,
				"nvs_aio_set_queue_limit: depth %" PRIu32
				" is above the handle's queue_depth %" PRIu32,
				depth, h->opts.queue_depth);
	atomic_store_explicit(&h->queue_limit, depth, memory_order_relaxed);
	return 0;
}

uint32_t nvs_aio_queue_share(uint32_t queue_depth, unsigned nprocs)
{
	uint32_t share;

	if (nprocs <= 1)
		return queue_depth;
	share = queue_depth / nprocs;
	if (share < NVS_AIO_SHARE_MIN)
		share = queue_depth < NVS_AIO_SHARE_MIN ? queue_depth
							: NVS_AIO_SHARE_MIN;
	return share;
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
	st->device_bytes = load(&h->c.device_bytes);
	st->gds_bytes = load(&h->c.gds_bytes);
	st->requests = load(&h->c.requests);
	st->bounced_requests = load(&h->c.bounced);
	st->edge_bytes = load(&h->c.edge_bytes);
	st->retries = load(&h->c.retries);
	st->direct_fallbacks = load(&h->c.fallbacks);
	st->files_opened = load(&h->c.opened);
	st->files_reused = load(&h->c.reused);
	st->inline_ops = load(&h->c.inline_ops);
	/* The lock is the handle's own mutable state, even for readers. */
	pthread_mutex_lock((pthread_mutex_t *)(uintptr_t)&h->lock);
	st->busy_ns =
		h->busy_ns + (h->inflight ? nvs__now_ns() - h->busy_since : 0);
	pthread_mutex_unlock((pthread_mutex_t *)(uintptr_t)&h->lock);
	st->bounce_locked = true;
	st->requests_high_water =
		atomic_load_explicit(&h->req_high, memory_order_relaxed);
	st->backend = h->backend;
	st->backend_reason = h->backend_reason;
	snprintf(st->backend_notes, sizeof(st->backend_notes), "%s",
		 h->backend_notes);
	for (unsigned i = 0; i < h->nworkers; i++) {
		const struct nvs_worker *w = &h->workers[i];
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
