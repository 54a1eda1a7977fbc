// SPDX-License-Identifier: MIT
/*
 * The swapper's answer when its pool is empty and nothing it may do itself
 * frees a buffer (see room.h): a sentence with the pool's census, and a
 * wait bounded by wait_ms.
 */
#include "swapper/room.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "nvswap/swapper.h"

int nvs__room_err(int err, const char *call, uint64_t id, uint32_t wait_ms,
		  const struct nvs__census *c)
{
	char why[160];

	if (err == -EDEADLK)
		snprintf(why, sizeof(why),
			 "all %u pool buffers are held by acquires of this "
			 "thread, so waiting would never end; release (and "
			 "evict) a tensor first",
			 c->total);
	else
		snprintf(why, sizeof(why),
			 "none became free within wait_ms %" PRIu32
			 " ms (evict tensors, or turn on auto_evict)",
			 wait_ms);
	return nvs__err(err,
			"%s: no free pool buffer for tensor %" PRIu64
			": %s; the pool: %u buffers, %u held by acquires (%u "
			"by this thread), %u resident released clean, %u "
			"resident released dirty, %u in flight (%u reading, "
			"%u writing)",
			call, id, why, c->total, c->held, c->held_mine,
			c->clean, c->dirty, c->reading + c->writing, c->reading,
			c->writing);
}

uint64_t nvs__room_deadline(uint32_t wait_ms)
{
	if (wait_ms == NVS_WAIT_FOREVER)
		return 0;
	if (!wait_ms)
		wait_ms = NVS_SWAPPER_WAIT_MS_DEFAULT;
	return nvs__now_ns() + wait_ms * 1000000ull;
}

void nvs__room_wait(pthread_cond_t *cond, pthread_mutex_t *lock,
		    uint64_t deadline)
{
	struct timespec ts;
	uint64_t now, wake;

	if (!deadline) {
		pthread_cond_wait(cond, lock);
		return;
	}
	now = nvs__now_ns();
	if (now >= deadline)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	wake = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
	       (deadline - now);
	ts.tv_sec = (time_t)(wake / 1000000000ull);
	ts.tv_nsec = (long)(wake % 1000000000ull);
	pthread_cond_timedwait(cond, lock, &ts);
}
