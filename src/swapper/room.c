// SPDX-License-Identifier: MIT
/*
 * The swapper's pool buffers (see room.h): get and put, the automatic
 * eviction policy (least recently released clean tensor first), and when
 * nothing it may do itself frees a buffer, a sentence with the pool's
 * census or a wait bounded by wait_ms.
 */
#include "swapper/room.h"
#include "buffers/pool.h"
#include "internal/errors.h"
#include "internal/util.h"
#include "swapper/io.h"
#include "swapper/registry.h"
#include "swapper/swapper_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "nvswap/buffers.h"
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

	if (!deadline) {
		pthread_cond_wait(cond, lock);
		return;
	}
	if (nvs__now_ns() >= deadline)
		return;
	/* @cond waits on CLOCK_MONOTONIC (see create.c), the clock of
	 * nvs__now_ns() and so of @deadline. */
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);
	pthread_cond_timedwait(cond, lock, &ts);
}

void *nvs__buffer_get(struct nvs_swapper *s)
{
	void *buf;

	if (nvs__pool_try_get(s->pool, &buf) < 0)
		return NULL;
	s->in_use++;
	if (s->in_use > s->st.pool_high_water)
		s->st.pool_high_water = s->in_use;
	return buf;
}

void nvs__buffer_put(struct nvs_swapper *s, struct tensor *t)
{
	nvs_pool_put(s->pool, t->buf);
	t->buf = NULL;
	s->in_use--;
	pthread_cond_broadcast(&s->cond);
}

void nvs__drop(struct nvs_swapper *s, struct tensor *t)
{
	nvs__tlist_remove(t);
	t->state = NVS_TENSOR_ON_NVME;
	nvs__buffer_put(s, t);
	s->st.clean_evictions++;
}

/* The victim for automatic eviction: the least recently released clean
 * tensor, else the least recently released dirty one. */
static struct tensor *victim(struct nvs_swapper *s)
{
	struct tensor *t, *dirty = NULL;

	for (t = s->lru.head; t; t = t->next) {
		if (!t->dirty)
			return t;
		/* Not one whose write-back just failed: writing it again
		 * and again would spin on a full disk (nvs__make_room() reports
		 * it instead). */
		if (!dirty && !t->err)
			dirty = t;
	}
	return dirty;
}

/* Where the pool's buffers are. Lock held. */
static void census(struct nvs_swapper *s, struct nvs__census *c)
{
	struct tensor *t, *tmp;

	*c = (struct nvs__census){.total = nvs_pool_buffer_count(s->pool)};
	for (t = s->lru.head; t; t = t->next)
		*(t->dirty ? &c->dirty : &c->clean) += 1;
	for (t = s->flight.head; t; t = t->next)
		*(t->state == NVS_TENSOR_READING ? &c->reading : &c->writing) +=
			1;
	HASH_ITER(hh, s->table, t, tmp)
	if (t->pins && t->buf) {
		c->held++;
		c->held_mine += t->holder_pins == t->pins &&
				pthread_equal(t->holder, pthread_self());
	}
}

int nvs__make_room(struct nvs_swapper *s, uint64_t deadline, const char *call,
		   uint64_t id)
{
	struct nvs__census c;
	struct tensor *t;

	if (nvs__reap_writes(s))
		return 0;
	for (t = s->flight.head; t; t = t->next)
		if (!t->busy && t->state == NVS_TENSOR_WRITING) {
			nvs__collect(s, t);
			return 0;
		}
	if (s->auto_evict) {
		t = victim(s);
		if (t && !t->dirty) {
			nvs__drop(s, t);
			s->st.auto_evictions++;
			return 0;
		}
		if (t) {
			int ret = nvs__start_write(s, t);
			if (ret < 0)
				return nvs__err(ret,
						"nvswap: no free buffer, and "
						"evicting tensor %" PRIu64
						" failed: %s",
						t->id, nvs_last_error());
			s->st.auto_evictions++;
			return 0;
		}
		/* Only reads in flight: one becomes evictable when done. */
		for (t = s->flight.head; t; t = t->next)
			if (!t->busy) {
				nvs__collect(s, t);
				return 0;
			}
	}
	/* A buffer held by data whose write-back failed comes back only
	 * when the caller acts (frees space, evicts again): say so now
	 * instead of waiting for it. */
	for (t = s->lru.head; t; t = t->next)
		if (t->err && t->dirty)
			return nvs__err(t->err,
					"nvswap: no free pool buffer: tensor "
					"%" PRIu64
					" holds one and its write-back failed "
					"(%s); free space and evict it again",
					t->id,
					t->errmsg ? t->errmsg
						  : nvs_strerror(-t->err));
	census(s, &c);
	if (nvs__census_deadlock(&c))
		return nvs__room_err(-EDEADLK, call, id, s->wait_ms, &c);
	/* Buffers are held by resident or arriving tensors that only the
	 * caller may evict, or by other threads' acquires: wait for another
	 * thread to give one back. */
	if (deadline && nvs__now_ns() >= deadline)
		return nvs__room_err(-ETIMEDOUT, call, id, s->wait_ms, &c);
	nvs__room_wait(&s->cond, &s->lock, deadline);
	return 0;
}
