/* SPDX-License-Identifier: MIT */
/*
 * The swapper's pool buffers: taking one and giving it back, dropping a
 * clean tensor, and what the swapper does when the pool has none free
 * (collect a write-back, evict automatically, or wait for another thread,
 * bounded, saying with the pool's census why it gives up: -EDEADLK,
 * -ETIMEDOUT).
 */
#ifndef NVS_SWAPPER_ROOM_H
#define NVS_SWAPPER_ROOM_H

#include <pthread.h>
#include <stdint.h>

struct nvs_swapper;
struct tensor;

/* Where a swapper's pool buffers are, for the sentence. */
struct nvs__census {
	unsigned total;	    /* pool buffers */
	unsigned held;	    /* held by acquires (acquired, not released) */
	unsigned held_mine; /* of those, only by the calling thread */
	unsigned clean;	    /* resident, released, clean */
	unsigned dirty;	    /* resident, released, dirty */
	unsigned reading;   /* in flight */
	unsigned writing;
};

/* Whether -EDEADLK is certain: every buffer is held by acquires and all
 * of them by the calling thread, so no other thread can give one back. */
static inline int nvs__census_deadlock(const struct nvs__census *c)
{
	return c->total && c->held == c->total && c->held_mine == c->held;
}

/* Set the last error to "<call>: no free pool buffer for tensor <id>:
 * <why>; the pool: ..." and return @err (-EDEADLK or -ETIMEDOUT). */
int nvs__room_err(int err, const char *call, uint64_t id, uint32_t wait_ms,
		  const struct nvs__census *c);

/* The deadline of a wait that starts now (0: none, NVS_WAIT_FOREVER). */
uint64_t nvs__room_deadline(uint32_t wait_ms);

/* Wait on @cond (with @lock held; a CLOCK_MONOTONIC condition) until it
 * is signalled or @deadline (nvs__now_ns() clock; 0 = none) passes. */
void nvs__room_wait(pthread_cond_t *cond, pthread_mutex_t *lock,
		    uint64_t deadline);

/* A free pool buffer (counted in use), or NULL when there is none. Lock
 * held. */
void *nvs__buffer_get(struct nvs_swapper *s);

/* Give @t's buffer back to the pool and wake the waiters. Lock held. */
void nvs__buffer_put(struct nvs_swapper *s, struct tensor *t);

/* Evict clean, unpinned, resident @t: no I/O. Lock held. */
void nvs__drop(struct nvs_swapper *s, struct tensor *t);

/* The pool is empty: do one thing that may give a buffer back, or wait
 * for another thread to. Lock held (dropped meanwhile). 0 to try again,
 * -EDEADLK, -ETIMEDOUT, or a write-back that could not start. */
int nvs__make_room(struct nvs_swapper *s, uint64_t deadline, const char *call,
		   uint64_t id);

#endif
