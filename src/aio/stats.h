/* SPDX-License-Identifier: MIT */
/* The aio handle's statistics counters (read by nvs_aio_get_stats). */
#ifndef NVS_AIO_STATS_H
#define NVS_AIO_STATS_H

#include <stdatomic.h>
#include <stdint.h>

struct nvs_aio_counters {
	/* Relaxed atomics: statistics only, no ordering with data. */
	atomic_uint_fast64_t ops_completed, ops_failed, bytes_read,
		bytes_written, requests, bounced, edge_bytes, retries,
		fallbacks, opened, reused, inline_ops, device_bytes, gds_bytes;
};

static inline void nvs__aio_count(atomic_uint_fast64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

#endif
