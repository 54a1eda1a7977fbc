// SPDX-License-Identifier: MIT
/*
 * A fixed pool of equal pinned buffers carved from one pinned allocation:
 * a LIFO stack of free indices, a per-buffer "out" flag that catches
 * double and foreign puts in O(1), and a condition variable for blocking
 * gets. Nothing is allocated after create.
 */
#include "buffers/pool.h"
#include "buffers/pinned.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

struct nvs_pool {
	/* Read-only after create. */
	char *base;
	size_t stride; /* buffer_size rounded up to the alignment */
	size_t buffer_size;
	unsigned count;
	bool locked;
	/* lock protects everything below; cond signals a put. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned *free_stack; /* indices; top = most recently put */
	unsigned nfree;
	unsigned char *out; /* out[i]: buffer i is handed out */
	unsigned waiters;
	unsigned high_water;
	uint64_t gets, puts, waits, wait_ns, bad_puts;
};

void nvs_pool_opts_init(struct nvs_pool_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
}

static int check_opts(const struct nvs_pool_opts *o, size_t *align,
		      size_t *stride)
{
	if (o->buffer_size == 0 || o->buffer_count == 0)
		return nvs__err(-EINVAL,
				"nvs_pool_create: buffer_size %zu and "
				"buffer_count %u must both be above 0",
				o->buffer_size, o->buffer_count);
	if (o->alignment & (o->alignment - 1))
		return nvs__err(-EINVAL,
				"nvs_pool_create: alignment %u is not a "
				"power of two",
				o->alignment);
	*align = NVS_MAX((size_t)o->alignment, (size_t)NVS_PINNED_ALIGN);
	if (o->buffer_size > SIZE_MAX - *align ||
	    nvs__round_up(o->buffer_size, *align) >
		    (size_t)PTRDIFF_MAX / o->buffer_count)
		return nvs__err(-EINVAL,
				"nvs_pool_create: %u buffers of %zu bytes "
				"overflow the address space",
				o->buffer_count, o->buffer_size);
	*stride = nvs__round_up(o->buffer_size, *align);
	return 0;
}

int nvs_pool_create(const struct nvs_pool_opts *opts, struct nvs_pool **out)
{
	struct nvs_pool_opts o;
	pthread_condattr_t ca;
	struct nvs_pool *p;
	size_t stride = 0, align = 0;
	int ret;

	if (!out)
		return nvs__err(-EINVAL, "nvs_pool_create: out is NULL");
	*out = NULL;
	if (!opts)
		return nvs__err(-EINVAL, "nvs_pool_create: opts is NULL");
	if (opts->size < offsetof(struct nvs_pool_opts, reserved8) ||
	    opts->size > sizeof(*opts))
		return nvs__err(-EINVAL,
				"nvs_pool_create: opts->size %zu is not from "
				"nvs_pool_opts_init()",
				opts->size);
	nvs_pool_opts_init(&o);
	memcpy(&o, opts, opts->size);
	ret = check_opts(&o, &align, &stride);
	if (ret < 0)
		return ret;
	p = nvs__calloc(1, sizeof(*p));
	if (!p)
		return nvs__err(-ENOMEM, "nvs_pool_create: out of memory");
	p->free_stack = nvs__calloc(o.buffer_count, sizeof(*p->free_stack));
	p->out = nvs__calloc(o.buffer_count, 1);
	if (!p->free_stack || !p->out) {
		ret = nvs__err(-ENOMEM,
			       "nvs_pool_create: out of memory for "
			       "%u buffer slots",
			       o.buffer_count);
		goto fail;
	}
	p->base = nvs__pinned_alloc(stride * o.buffer_count, align,
				    o.allow_unpinned, "nvs_pool_create",
				    &p->locked, &ret);
	if (!p->base)
		goto fail;
	p->stride = stride;
	p->buffer_size = o.buffer_size;
	p->count = o.buffer_count;
	/* Buffer 0 on top: the first get takes the lowest address. */
	for (unsigned i = o.buffer_count; i-- > 0;)
		p->free_stack[p->nfree++] = i;
	pthread_mutex_init(&p->lock, NULL);
	/* Timed gets measure against the monotonic clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_condattr_destroy(&ca);
	*out = p;
	return 0;
fail:
	nvs__free(p->free_stack);
	nvs__free(p->out);
	nvs__free(p);
	return ret;
}

int nvs_pool_destroy(struct nvs_pool *pool)
{
	unsigned out, waiters;

	if (!pool)
		return 0;
	pthread_mutex_lock(&pool->lock);
	out = pool->count - pool->nfree;
	waiters = pool->waiters;
	pthread_mutex_unlock(&pool->lock);
	if (out || waiters)
		return nvs__err(-EBUSY,
				"nvs_pool_destroy: %u of %u buffers are still "
				"out and %u threads wait in get; nothing freed",
				out, pool->count, waiters);
	nvs__pinned_free(pool->base, "nvs_pool_destroy");
	nvs__pinned_trim();
	pthread_cond_destroy(&pool->cond);
	pthread_mutex_destroy(&pool->lock);
	nvs__free(pool->free_stack);
	nvs__free(pool->out);
	nvs__free(pool);
	return 0;
}

/* Pop the most recently returned buffer; the caller holds the lock and
 * saw nfree > 0. */
static void *take_locked(struct nvs_pool *p)
{
	unsigned i = p->free_stack[--p->nfree];
	unsigned used = p->count - p->nfree;

	p->out[i] = 1;
	p->gets++;
	if (used > p->high_water)
		p->high_water = used;
	return p->base + (size_t)i * p->stride;
}

/* @deadline NULL waits forever. */
static int get(struct nvs_pool *pool, void **buf, bool wait,
	       const struct timespec *deadline, const char *call)
{
	uint64_t t0 = 0;
	int ret = 0;

	if (!pool || !buf)
		return nvs__err(-EINVAL, "%s: %s is NULL", call,
				pool ? "buf" : "pool");
	*buf = NULL;
	pthread_mutex_lock(&pool->lock);
	if (pool->nfree == 0 && wait) {
		t0 = nvs__now_ns();
		pool->waits++;
		pool->waiters++;
		while (pool->nfree == 0 && ret == 0)
			ret = deadline ? pthread_cond_timedwait(&pool->cond,
								&pool->lock,
								deadline)
				       : pthread_cond_wait(&pool->cond,
							   &pool->lock);
		pool->waiters--;
		pool->wait_ns += nvs__now_ns() - t0;
	}
	if (pool->nfree > 0)
		*buf = take_locked(pool);
	pthread_mutex_unlock(&pool->lock);
	if (*buf)
		return 0;
	if (!wait)
		return -EAGAIN; /* the caller says so, or it is backpressure */
	return nvs__err(-ETIMEDOUT,
			"%s: no buffer came back in time (all %u out)", call,
			pool->count);
}

int nvs_pool_get(struct nvs_pool *pool, void **buf)
{
	return get(pool, buf, true, NULL, "nvs_pool_get");
}

int nvs__pool_try_get(struct nvs_pool *pool, void **buf)
{
	return get(pool, buf, false, NULL, "nvs_pool_try_get");
}

int nvs_pool_try_get(struct nvs_pool *pool, void **buf)
{
	int ret = get(pool, buf, false, NULL, "nvs_pool_try_get");

	if (ret == -EAGAIN)
		nvs__err(ret, "nvs_pool_try_get: all %u buffers are out",
			 pool->count);
	return ret;
}

int nvs_pool_get_timeout(struct nvs_pool *pool, void **buf, unsigned timeout_ms)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return get(pool, buf, true, &dl, "nvs_pool_get_timeout");
}

int nvs_pool_put(struct nvs_pool *pool, void *buf)
{
	uintptr_t a = (uintptr_t)buf, b;
	size_t off, i;
	const char *why = NULL;

	if (!pool || !buf)
		return nvs__err(-EINVAL, "nvs_pool_put: %s is NULL",
				pool ? "buf" : "pool");
	b = (uintptr_t)pool->base;
	off = a - b;
	if (a < b || off >= pool->stride * pool->count)
		why = "is not from this pool";
	else if (off % pool->stride)
		why = "points inside a buffer, not at its start";
	i = off / pool->stride;
	pthread_mutex_lock(&pool->lock);
	if (!why && !pool->out[i])
		why = "is already back in the pool (double put)";
	if (why) {
		pool->bad_puts++;
		pthread_mutex_unlock(&pool->lock);
		return nvs__err(-EINVAL, "nvs_pool_put: buffer %p %s", buf,
				why);
	}
	pool->out[i] = 0;
	pool->free_stack[pool->nfree++] = (unsigned)i;
	pool->puts++;
	pthread_cond_signal(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

size_t nvs_pool_buffer_size(const struct nvs_pool *pool)
{
	return pool ? pool->buffer_size : 0;
}

unsigned nvs_pool_buffer_count(const struct nvs_pool *pool)
{
	return pool ? pool->count : 0;
}

int nvs_pool_stats(const struct nvs_pool *pool, struct nvs_pool_stats *st)
{
	/* The lock is the pool's own mutable state, even for readers. */
	struct nvs_pool *p = (struct nvs_pool *)(uintptr_t)pool;

	if (!pool || !st)
		return nvs__err(-EINVAL, "nvs_pool_stats: NULL argument");
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->lock);
	st->buffer_size = p->buffer_size;
	st->buffer_count = p->count;
	st->in_use = p->count - p->nfree;
	st->high_water = p->high_water;
	st->pinned = p->locked;
	st->gets = p->gets;
	st->puts = p->puts;
	st->waits = p->waits;
	st->wait_ns = p->wait_ns;
	st->bad_puts = p->bad_puts;
	pthread_mutex_unlock(&p->lock);
	return 0;
}
