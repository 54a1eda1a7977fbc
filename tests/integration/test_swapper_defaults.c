// SPDX-License-Identifier: MIT
/*
 * No default that can hang (issue 16): the defaults of
 * nvs_swapper_opts_init() serve a single thread that acquires more
 * tensors than the pool holds without evicting (auto_evict on: least
 * recently released, clean before dirty, every byte intact); with
 * auto_evict off, an acquire that cannot be served ends: -EDEADLK at once
 * when the calling thread holds every buffer, -ETIMEDOUT after wait_ms
 * otherwise, each with the pool's state in the sentence. A buffer held by
 * another thread's acquire is waited for, not -EDEADLK.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "testutil.h"

enum { BUF = 64 << 10 };

static void fini(void)
{
	tu_cleanup();
}

TestSuite(swapper, .fini = fini);

static struct nvs_swapper *mk(unsigned count, bool auto_evict, uint32_t ms)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = tu_dir();
	o.buffer_size = BUF;
	o.buffer_count = count;
	o.aio.queue_depth = 8;
	o.auto_evict = auto_evict;
	o.wait_ms = ms;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

static enum nvs_tensor_state state(struct nvs_swapper *s, uint64_t id)
{
	struct nvs_tensor_info i;

	cr_assert_eq(nvs_swapper_info(s, id, &i), 0, "%s", nvs_last_error());
	return i.state;
}

/* Acquire @id, check it holds @ref, optionally overwrite it with pattern
 * @seed (then release dirty), release. */
static void use(struct nvs_swapper *s, uint64_t id, unsigned char *ref,
		uint64_t seed, bool write)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "id %llu: %s",
		     (unsigned long long)id, nvs_last_error());
	cr_assert(!memcmp(p, ref, BUF), "tensor %llu differs",
		  (unsigned long long)id);
	if (write) {
		tu_fill(ref, BUF, seed);
		memcpy(p, ref, BUF);
	}
	cr_assert_eq(nvs_swapper_release(s, id, write), 0);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
	       (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

Test(swapper, default_opts_are_auto_evict_and_a_finite_wait)
{
	struct nvs_swapper_opts o;

	nvs_swapper_opts_init(&o);
	cr_assert(o.auto_evict);
	cr_assert_eq(o.wait_ms, NVS_SWAPPER_WAIT_MS_DEFAULT);
	cr_assert_eq(NVS_SWAPPER_WAIT_MS_DEFAULT, 60000u);
	cr_assert_neq(o.wait_ms, NVS_WAIT_FOREVER);
}

Test(swapper, default_opts_never_hang_a_thread_that_acquires_more_than_the_pool)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	unsigned char *ref[6];

	/* Exactly what a new user writes: opts_init, paths and sizes. */
	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = tu_dir();
	o.buffer_size = BUF;
	o.buffer_count = 2;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (unsigned i = 0; i < 6; i++) {
		ref[i] = malloc(BUF);
		tu_fill(ref[i], BUF, 100 + i);
		cr_assert_eq(nvs_swapper_register(s, i, BUF, ref[i]), 0);
	}
	/* Three times the pool, never an evict call. */
	for (unsigned round = 0; round < 4; round++)
		for (unsigned i = 0; i < 6; i++)
			use(s, i, ref[i], round * 10 + i, (i + round) % 2);
	for (unsigned i = 0; i < 6; i++) {
		use(s, i, ref[i], 0, false);
		free(ref[i]);
	}
	struct nvs_swap_stats st;
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_gt(st.auto_evictions, 20);
	cr_assert_eq(st.pool_high_water, 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, auto_evict_takes_the_least_recently_released_clean_then_dirty)
{
	struct nvs_swapper *s = mk(3, true, 0);
	unsigned char *ref[6];
	void *p;

	for (unsigned i = 0; i < 6; i++) {
		ref[i] = malloc(BUF);
		tu_fill(ref[i], BUF, 200 + i);
		cr_assert_eq(nvs_swapper_register(s, i, BUF, ref[i]), 0);
	}
	use(s, 0, ref[0], 0, false);  /* A: clean, released first */
	use(s, 1, ref[1], 301, true); /* B: dirty */
	use(s, 2, ref[2], 0, false);  /* C: clean, released last */
	/* D: the least recently released clean one goes (A). */
	cr_assert_eq(nvs_swapper_acquire(s, 3, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 0), NVS_TENSOR_ON_NVME);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(state(s, 2), NVS_TENSOR_RESIDENT);
	/* E: clean before dirty: C, although B was released before it. */
	cr_assert_eq(nvs_swapper_acquire(s, 4, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 2), NVS_TENSOR_ON_NVME);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT, "the dirty one stays");
	cr_assert_eq(nvs_swapper_release(s, 3, true), 0);
	cr_assert_eq(nvs_swapper_release(s, 4, true), 0);
	/* F: only dirty ones left: the least recently released (B) is
	 * written back and its buffer reused. */
	cr_assert_eq(nvs_swapper_acquire(s, 5, &p), 0, "%s", nvs_last_error());
	cr_assert_neq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(state(s, 3), NVS_TENSOR_RESIDENT);
	cr_assert_eq(state(s, 4), NVS_TENSOR_RESIDENT);
	cr_assert_eq(nvs_swapper_release(s, 5, false), 0);
	/* B's bytes went to disk and come back intact; so do the others. */
	for (unsigned i = 0; i < 6; i++) {
		use(s, i, ref[i], 0, false);
		free(ref[i]);
	}
	struct nvs_swap_stats st;
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_geq(st.writes, 6 + 1, "B's write-back");
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, default_opts_never_hang_without_auto_evict_it_times_out)
{
	struct nvs_swapper *s = mk(2, false, 50);
	struct timespec t0;
	void *p = &p;

	alarm(30); /* a wait that ignores wait_ms fails, not hangs */
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	cr_assert_eq(nvs_swapper_release(s, 0, true), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -ETIMEDOUT);
	cr_assert_geq(ms_since(&t0), 45.0);
	cr_assert_lt(ms_since(&t0), 10000.0, "wait_ms 50 took %.0f ms",
		     ms_since(&t0));
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(),
			 "nvs_swapper_acquire: no free pool buffer for tensor "
			 "2: none became free within wait_ms 50 ms"),
		  "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(),
			 "the pool: 2 buffers, 1 held by acquires (1 by this "
			 "thread), 0 resident released clean, 1 resident "
			 "released dirty, 0 in flight"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_prefetch(s, 2), -ETIMEDOUT);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_prefetch"), "%s",
		  nvs_last_error());
	cr_assert_eq(state(s, 0), NVS_TENSOR_RESIDENT, "nothing evicted");
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper,
     default_opts_never_hang_edeadlk_at_once_when_this_thread_holds_all)
{
	/* Even an explicitly unlimited wait: nobody else can free one. */
	struct nvs_swapper *s = mk(2, false, NVS_WAIT_FOREVER);
	struct timespec t0;
	void *p = &p;

	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -EDEADLK);
	cr_assert_lt(ms_since(&t0), 1000.0, "at once");
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(),
			 "nvs_swapper_acquire: no free pool buffer for tensor "
			 "2: all 2 pool buffers are held by acquires of this "
			 "thread"),
		  "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(),
			 "the pool: 2 buffers, 2 held by acquires (2 by this "
			 "thread), 0 resident released clean, 0 resident "
			 "released dirty, 0 in flight"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 0, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

struct holder {
	struct nvs_swapper *s;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool holding;
	int ret;
};

/* Acquire tensors 0 and 1 (every buffer), say so, release 0 later. */
static void *hold_all(void *arg)
{
	struct holder *h = arg;
	struct timespec d = {0, 100 * 1000 * 1000};
	void *p;

	h->ret = nvs_swapper_acquire(h->s, 0, &p);
	if (!h->ret)
		h->ret = nvs_swapper_acquire(h->s, 1, &p);
	pthread_mutex_lock(&h->lock);
	h->holding = true;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	if (h->ret)
		return NULL;
	nanosleep(&d, NULL);
	h->ret = nvs_swapper_release(h->s, 0, false);
	if (!h->ret)
		h->ret = nvs_swapper_release(h->s, 1, false);
	return NULL;
}

Test(swapper, buffers_held_by_another_threads_acquires_are_waited_for)
{
	struct nvs_swapper *s = mk(2, true, 0);
	struct holder h = {.s = s, .ret = 1};
	struct timespec t0;
	pthread_t th;
	void *p;

	pthread_mutex_init(&h.lock, NULL);
	pthread_cond_init(&h.cond, NULL);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(pthread_create(&th, NULL, hold_all, &h), 0);
	pthread_mutex_lock(&h.lock);
	while (!h.holding)
		pthread_cond_wait(&h.cond, &h.lock);
	pthread_mutex_unlock(&h.lock);
	/* Not -EDEADLK: the other thread may (and does) release. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	cr_assert_geq(ms_since(&t0), 50.0);
	pthread_join(th, NULL);
	cr_assert_eq(h.ret, 0);
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	pthread_cond_destroy(&h.cond);
	pthread_mutex_destroy(&h.lock);
}

/* Another thread's acquire of a tensor this thread holds, once released,
 * leaves the tensor this thread's again; and when this thread releases
 * first, the tensor is the other's. Either way the thread that then holds
 * every buffer gets -EDEADLK at once, even with NVS_WAIT_FOREVER. */
struct nested {
	struct nvs_swapper *s;
	int ret;
};

static void *nested_acquires(void *arg)
{
	struct nested *n = arg;
	void *p;

	n->ret = nvs_swapper_acquire(n->s, 0, &p);
	if (n->ret == 0)
		n->ret = nvs_swapper_release(n->s, 0, false);
	return NULL;
}

Test(swapper, edeadlk_after_another_thread_released_its_share_of_a_tensor)
{
	struct nvs_swapper *s = mk(2, false, NVS_WAIT_FOREVER);
	struct nested n = {.s = s};
	pthread_t b;
	void *p;

	alarm(30); /* a missed -EDEADLK fails, not hangs */
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	cr_assert_eq(pthread_create(&b, NULL, nested_acquires, &n), 0);
	pthread_join(b, NULL);
	cr_assert_eq(n.ret, 0, "the other thread: %s", nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -EDEADLK);
	cr_assert(strstr(nvs_last_error(), "2 held by acquires (2 by this "
					   "thread)"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 0, false), 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* Acquires tensor 0 beside the main thread, waits while the main thread
 * releases its share, then acquires 1 and 2: it holds every buffer. */
static pthread_barrier_t step;

static void *holds_all(void *arg)
{
	struct nested *n = arg;
	void *p;

	n->ret = nvs_swapper_acquire(n->s, 0, &p);
	pthread_barrier_wait(&step); /* main releases its share of 0 */
	pthread_barrier_wait(&step);
	if (n->ret == 0)
		n->ret = nvs_swapper_acquire(n->s, 1, &p);
	if (n->ret == 0)
		n->ret = nvs_swapper_acquire(n->s, 2, &p);
	return NULL;
}

Test(swapper, edeadlk_for_the_thread_left_holding_a_tensor_two_acquired)
{
	struct nvs_swapper *s = mk(2, false, NVS_WAIT_FOREVER);
	struct nested n = {.s = s};
	pthread_t b;
	void *p;

	alarm(30);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	pthread_barrier_init(&step, NULL, 2);
	cr_assert_eq(pthread_create(&b, NULL, holds_all, &n), 0);
	pthread_barrier_wait(&step);
	cr_assert_eq(nvs_swapper_release(s, 0, false), 0);
	pthread_barrier_wait(&step);
	pthread_join(b, NULL);
	pthread_barrier_destroy(&step);
	cr_assert_eq(n.ret, -EDEADLK, "%d: %s", n.ret, nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
