// SPDX-License-Identifier: MIT
/*
 * The buffer pool: buffers are pinned, aligned, distinct and zeroed; LIFO
 * reuse; try/timeout/blocking gets; bad puts and -EBUSY destroy change
 * nothing; concurrent get/put loses nothing; bad options and allocation
 * failures are clean errors.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/buffers.h"
#include "testutil.h"

static struct nvs_pool *mk(size_t size, unsigned count)
{
	struct nvs_pool_opts o;
	struct nvs_pool *p = NULL;

	nvs_pool_opts_init(&o);
	o.buffer_size = size;
	o.buffer_count = count;
	cr_assert_eq(nvs_pool_create(&o, &p), 0, "%s", nvs_last_error());
	cr_assert_not_null(p);
	return p;
}

static struct nvs_pool_stats pstats(const struct nvs_pool *p)
{
	struct nvs_pool_stats st;

	cr_assert_eq(nvs_pool_stats(p, &st), 0);
	return st;
}

TestSuite(pool, .fini = tu_cleanup);

Test(pool, buffers_are_pinned_aligned_distinct_and_zeroed)
{
	enum { N = 6 };
	size_t size = 1000003; /* not a multiple of anything */
	struct nvs_pool *p = mk(size, N);
	unsigned char *b[N];

	cr_assert_eq(nvs_pool_buffer_size(p), size);
	cr_assert_eq(nvs_pool_buffer_count(p), N);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(nvs_pool_get(p, (void **)&b[i]), 0);
		cr_assert_eq((uintptr_t)b[i] % NVS_PINNED_ALIGN, 0);
		cr_assert(nvs_pinned_contains(b[i], size), "buffer %d pinned",
			  i);
		for (size_t k = 0; k < size; k++)
			cr_assert_eq(b[i][k], 0);
		memset(b[i], i + 1, size); /* overlap would show below */
	}
	for (int i = 0; i < N; i++) {
		for (size_t k = 0; k < size; k += 4099)
			cr_assert_eq(b[i][k], i + 1, "buffer %d intact", i);
		for (int j = 0; j < i; j++)
			cr_assert_neq(b[i], b[j]);
	}
	struct nvs_pool_stats st = pstats(p);
	cr_assert_eq(st.in_use, N);
	cr_assert_eq(st.high_water, N);
	cr_assert(st.pinned);
	for (int i = 0; i < N; i++)
		cr_assert_eq(nvs_pool_put(p, b[i]), 0);
	cr_assert_eq(nvs_pool_destroy(p), 0);
}

Test(pool, reuse_is_lifo)
{
	struct nvs_pool *p = mk(4096, 4);
	void *a, *b, *c;

	cr_assert_eq(nvs_pool_get(p, &a), 0);
	cr_assert_eq(nvs_pool_get(p, &b), 0);
	cr_assert_eq(nvs_pool_put(p, a), 0);
	cr_assert_eq(nvs_pool_put(p, b), 0);
	cr_assert_eq(nvs_pool_get(p, &c), 0);
	cr_assert_eq(c, b, "the last returned comes out first");
	cr_assert_eq(nvs_pool_get(p, &c), 0);
	cr_assert_eq(c, a);
	nvs_pool_put(p, a);
	nvs_pool_put(p, b);
	cr_assert_eq(nvs_pool_destroy(p), 0);
}

Test(pool, exhausted_pool_try_get_is_eagain_and_timeout_is_etimedout)
{
	struct nvs_pool *p = mk(8192, 2);
	void *a, *b, *c = (void *)1;
	struct timespec t0, t1;

	cr_assert_eq(nvs_pool_try_get(p, &a), 0);
	cr_assert_eq(nvs_pool_try_get(p, &b), 0);
	cr_assert_eq(nvs_pool_try_get(p, &c), -EAGAIN);
	cr_assert_null(c);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_assert_eq(nvs_pool_get_timeout(p, &c, 50), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_assert_null(c);
	cr_assert_geq((t1.tv_sec - t0.tv_sec) * 1000000000L +
			      (t1.tv_nsec - t0.tv_nsec),
		      50000000L, "waited the whole timeout");
	cr_assert(strstr(nvs_last_error(), "no buffer came back"));
	cr_assert_eq(nvs_pool_put(p, a), 0);
	cr_assert_eq(nvs_pool_get_timeout(p, &c, 50), 0);
	cr_assert_eq(c, a);
	struct nvs_pool_stats st = pstats(p);
	cr_assert_eq(st.waits, 1, "one get had to wait");
	cr_assert_eq(st.gets, 3);
	cr_assert_eq(st.puts, 1);
	nvs_pool_put(p, b);
	nvs_pool_put(p, c);
	cr_assert_eq(nvs_pool_destroy(p), 0);
}

Test(pool, foreign_interior_and_double_puts_are_einval_and_change_nothing)
{
	struct nvs_pool *p = mk(10000, 3), *q = mk(10000, 1);
	char *a, *other, heap[64];

	cr_assert_eq(nvs_pool_get(p, (void **)&a), 0);
	cr_assert_eq(nvs_pool_get(q, (void **)&other), 0);
	cr_assert_eq(nvs_pool_put(p, heap), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "not from this pool"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_pool_put(p, other), -EINVAL, "another pool's");
	cr_assert_eq(nvs_pool_put(p, a + 1), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "inside a buffer"));
	cr_assert_eq(nvs_pool_put(p, a + 12288), -EINVAL,
		     "the start of a buffer that is not out");
	cr_assert_eq(nvs_pool_put(p, NULL), -EINVAL);
	cr_assert_eq(nvs_pool_put(NULL, a), -EINVAL);
	cr_assert_eq(pstats(p).in_use, 1, "nothing changed");
	cr_assert_eq(nvs_pool_put(p, a), 0);
	cr_assert_eq(nvs_pool_put(p, a), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "double put"));
	struct nvs_pool_stats st = pstats(p);
	cr_assert_eq(st.in_use, 0);
	cr_assert_eq(st.bad_puts, 5);
	cr_assert_eq(st.puts, 1);
	/* The double put did not make the buffer come out twice. */
	void *x, *y, *z, *w;
	cr_assert_eq(nvs_pool_try_get(p, &x), 0);
	cr_assert_eq(nvs_pool_try_get(p, &y), 0);
	cr_assert_eq(nvs_pool_try_get(p, &z), 0);
	cr_assert_eq(nvs_pool_try_get(p, &w), -EAGAIN);
	cr_assert(x != y && y != z && x != z);
	nvs_pool_put(p, x);
	nvs_pool_put(p, y);
	nvs_pool_put(p, z);
	nvs_pool_put(q, other);
	cr_assert_eq(nvs_pool_destroy(p), 0);
	cr_assert_eq(nvs_pool_destroy(q), 0);
}

Test(pool, destroy_with_buffers_out_is_ebusy_and_frees_nothing)
{
	struct nvs_pool *p = mk(4096, 2);
	struct nvs_pinned_stats st;
	uint64_t live;
	char *a;

	cr_assert_eq(nvs_pool_destroy(NULL), 0);
	cr_assert_eq(nvs_pool_get(p, (void **)&a), 0);
	nvs_pinned_stats(&st);
	live = st.live_allocations;
	cr_assert_eq(nvs_pool_destroy(p), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "1 of 2 buffers"), "%s",
		  nvs_last_error());
	memset(a, 7, 4096); /* still ours */
	cr_assert(nvs_pinned_contains(a, 4096));
	nvs_pinned_stats(&st);
	cr_assert_eq(st.live_allocations, live);
	cr_assert_eq(nvs_pool_put(p, a), 0);
	cr_assert_eq(nvs_pool_destroy(p), 0);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.live_allocations, live - 1, "its memory went back");
}

struct waiter {
	struct nvs_pool *p;
	void *got;
	int ret;
};

static void *blocked_get(void *arg)
{
	struct waiter *w = arg;

	w->ret = nvs_pool_get(w->p, &w->got);
	return NULL;
}

Test(pool, blocking_get_is_woken_by_a_put_from_another_thread)
{
	struct nvs_pool *p = mk(4096, 1);
	struct waiter w = {p, NULL, -1};
	struct nvs_pool_stats st;
	pthread_t th;
	void *a;

	cr_assert_eq(nvs_pool_get(p, &a), 0);
	cr_assert_eq(pthread_create(&th, NULL, blocked_get, &w), 0);
	/* Wait until the thread is really blocked in get. */
	do {
		usleep(1000);
		st = pstats(p);
	} while (st.waits == 0);
	cr_assert_eq(nvs_pool_destroy(p), -EBUSY, "a thread waits");
	cr_assert_eq(nvs_pool_put(p, a), 0);
	pthread_join(th, NULL);
	cr_assert_eq(w.ret, 0);
	cr_assert_eq(w.got, a);
	st = pstats(p);
	cr_assert_eq(st.waits, 1);
	cr_assert_gt(st.wait_ns, 0);
	cr_assert_eq(nvs_pool_put(p, w.got), 0);
	cr_assert_eq(nvs_pool_destroy(p), 0);
}

struct churn {
	struct nvs_pool *p;
	int id;
	int bad;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	size_t sz = nvs_pool_buffer_size(c->p);

	for (int i = 0; i < 2000; i++) {
		unsigned char *b;
		if (nvs_pool_get(c->p, (void **)&b) != 0) {
			c->bad++;
			continue;
		}
		/* Mark it ours; anyone else holding it would clobber it. */
		memset(b, c->id, sz);
		sched_yield();
		for (size_t k = 0; k < sz; k += 512)
			if (b[k] != c->id)
				c->bad++;
		if (nvs_pool_put(c->p, b) != 0)
			c->bad++;
	}
	return NULL;
}

Test(pool, eight_threads_get_and_put_without_loss)
{
	enum { T = 8 };
	struct nvs_pool *p = mk(4096, 3);
	struct churn c[T];
	pthread_t th[T];

	for (int i = 0; i < T; i++) {
		c[i] = (struct churn){p, i + 1, 0};
		cr_assert_eq(pthread_create(&th[i], NULL, churn_main, &c[i]),
			     0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(c[i].bad, 0, "thread %d", i);
	}
	struct nvs_pool_stats st = pstats(p);
	cr_assert_eq(st.in_use, 0);
	cr_assert_eq(st.gets, T * 2000);
	cr_assert_eq(st.puts, T * 2000);
	cr_assert_eq(st.high_water, 3);
	cr_assert_eq(nvs_pool_destroy(p), 0);
}

Test(pool, alignment_option)
{
	struct nvs_pool_opts o;
	struct nvs_pool *p;
	void *b[3];

	nvs_pool_opts_init(&o);
	o.buffer_size = 5000;
	o.buffer_count = 3;
	o.alignment = 2u << 20;
	cr_assert_eq(nvs_pool_create(&o, &p), 0, "%s", nvs_last_error());
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(nvs_pool_get(p, &b[i]), 0);
		cr_assert_eq((uintptr_t)b[i] % (2u << 20), 0);
	}
	for (int i = 0; i < 3; i++)
		nvs_pool_put(p, b[i]);
	cr_assert_eq(nvs_pool_destroy(p), 0);
}

Test(pool, bad_options_are_einval)
{
	struct nvs_pool_opts o;
	struct nvs_pool *p = (struct nvs_pool *)&o;

	nvs_pool_opts_init(&o);
	cr_assert_eq(nvs_pool_create(&o, &p), -EINVAL, "zero size/count");
	cr_assert_null(p);
	o.buffer_size = 4096;
	cr_assert_eq(nvs_pool_create(&o, &p), -EINVAL, "zero count");
	o.buffer_count = 2;
	o.alignment = 3000;
	cr_assert_eq(nvs_pool_create(&o, &p), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "power of two"));
	o.alignment = 0;
	o.buffer_size = SIZE_MAX / 2;
	o.buffer_count = 4;
	cr_assert_eq(nvs_pool_create(&o, &p), -EINVAL, "overflow");
	cr_assert(strstr(nvs_last_error(), "overflow"), "%s", nvs_last_error());
	o.buffer_size = SIZE_MAX;
	o.buffer_count = 1;
	cr_assert_eq(nvs_pool_create(&o, &p), -EINVAL);
	o.buffer_size = 4096;
	o.size = 3;
	cr_assert_eq(nvs_pool_create(&o, &p), -EINVAL, "opts->size");
	cr_assert_eq(nvs_pool_create(NULL, &p), -EINVAL);
	cr_assert_eq(nvs_pool_create(&o, NULL), -EINVAL);
	void *b;
	cr_assert_eq(nvs_pool_get(NULL, &b), -EINVAL);
	cr_assert_eq(nvs_pool_try_get(NULL, &b), -EINVAL);
	cr_assert_eq(nvs_pool_stats(NULL, NULL), -EINVAL);
	cr_assert_eq(nvs_pool_buffer_size(NULL), 0);
	cr_assert_eq(nvs_pool_buffer_count(NULL), 0);
}

Test(pool, every_failed_allocation_in_create_is_enomem)
{
	struct nvs_pool_opts o;
	struct nvs_pool *p;
	unsigned failures = 0;

	nvs_pool_opts_init(&o);
	o.buffer_size = 1 << 20;
	o.buffer_count = 4;
	/* Fail each allocation create makes, in turn, until the injected
	 * failure lies past the last one. Process-wide tables grow lazily,
	 * so a later create may need fewer allocations than an earlier. */
	for (unsigned long i = 1;; i++) {
		nvs__alloc_fail_at(i);
		p = (struct nvs_pool *)&o;
		int ret = nvs_pool_create(&o, &p);
		unsigned long used = nvs__alloc_fail_at(0);
		if (ret == 0) {
			cr_assert_eq(nvs_pool_destroy(p), 0);
			if (used < i)
				break;
			continue;
		}
		cr_assert_eq(ret, -ENOMEM, "allocation %lu", i);
		cr_assert_null(p);
		failures++;
		cr_assert_lt(i, 64);
	}
	cr_assert_geq(failures, 3, "the pool's own three allocations");
	struct nvs_pinned_stats st;
	nvs_pinned_stats(&st);
	cr_assert_eq(st.live_allocations, 0, "nothing leaked");
}

Test(pool, small_memlock_limit_fails_unless_unpinned_is_allowed)
{
	struct tu_child c;

	if (!tu_as_nobody("pool", 64 << 10, &c))
		cr_skip_test("cannot lower RLIMIT_MEMLOCK and drop root here");
	cr_assert_eq(c.res[0], -ENOMEM);
	cr_assert(strstr(c.msg, "nvs_pool_create"), "%s", c.msg);
	cr_assert(strstr(c.msg, "ulimit -l"), "%s", c.msg);
	cr_assert_eq(c.res[1], 0);
	cr_assert_eq(c.res[2], 0, "reported as not pinned");
	cr_assert_eq(c.res[3], 0);
}
