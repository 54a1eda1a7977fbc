// SPDX-License-Identifier: MIT
/*
 * The buffers layer from many threads, without Criterion so it also runs
 * under ThreadSanitizer: pinned allocations (small and big paths) made,
 * checked and freed concurrently; pool get/put churn; a blocked get woken
 * by another thread's put; concurrent multi-threaded copies. Each check
 * asserts an exact outcome; prints "N passed, N failed".
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/buffers.h"
#include "check.h"

enum { T = 8 };

struct arg {
	int id;
	int bad;
	struct nvs_pool *pool;
};

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Random pinned allocations of both paths, each filled with this
 * thread's byte and checked before it is freed: memory handed to two
 * threads at once would show. */
static void *pinned_churn(void *p)
{
	struct arg *a = p;
	uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(a->id + 1);
	unsigned char *live[6] = {0};
	size_t len[6] = {0};

	for (int i = 0; i < 300; i++) {
		int k = (int)(next(&x) % 6);
		if (live[k]) {
			if (!nvs_pinned_contains(live[k], len[k]))
				a->bad++;
			for (size_t j = 0; j < len[k]; j += 257)
				if (live[k][j] != (unsigned char)a->id)
					a->bad++;
			nvs_pinned_free(live[k]);
			live[k] = NULL;
			continue;
		}
		len[k] = next(&x) % 2 ? 1 + next(&x) % (300 << 10)
				      : (2u << 20) + next(&x) % (4u << 20);
		live[k] = nvs_pinned_alloc(len[k], NULL);
		if (!live[k]) {
			a->bad++;
			continue;
		}
		for (size_t j = 0; j < len[k]; j += 4096)
			if (live[k][j])
				a->bad++; /* not zeroed */
		memset(live[k], a->id, len[k]);
	}
	for (int k = 0; k < 6; k++)
		nvs_pinned_free(live[k]);
	return NULL;
}

static void *pool_churn(void *p)
{
	struct arg *a = p;
	size_t sz = nvs_pool_buffer_size(a->pool);

	for (int i = 0; i < 3000; i++) {
		unsigned char *b;
		int r = i % 3 ? nvs_pool_get(a->pool, (void **)&b)
			      : nvs_pool_get_timeout(a->pool, (void **)&b,
						     10000);
		if (r) {
			a->bad++;
			continue;
		}
		memset(b, a->id, sz);
		if (i % 7 == 0)
			sched_yield();
		for (size_t j = 0; j < sz; j += 128)
			if (b[j] != (unsigned char)a->id)
				a->bad++;
		if (nvs_pool_put(a->pool, b))
			a->bad++;
	}
	return NULL;
}

static void run(void *(*fn)(void *), struct nvs_pool *pool, const char *what)
{
	pthread_t th[T];
	struct arg a[T];

	for (int i = 0; i < T; i++) {
		a[i] = (struct arg){i + 1, 0, pool};
		pthread_create(&th[i], NULL, fn, &a[i]);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		CHECK(a[i].bad == 0, "%s: thread %d: %d failures", what, i,
		      a[i].bad);
	}
}

struct waiter {
	struct nvs_pool *pool;
	void *got;
	int ret;
};

static void *waiter_main(void *p)
{
	struct waiter *w = p;

	w->ret = nvs_pool_get(w->pool, &w->got);
	return NULL;
}

static void test_blocked_get(void)
{
	struct nvs_pool_opts o;
	struct nvs_pool *pool;
	struct nvs_pool_stats st;
	struct waiter w = {NULL, NULL, -1};
	pthread_t th;
	void *b;

	nvs_pool_opts_init(&o);
	o.buffer_size = 4096;
	o.buffer_count = 1;
	CHECK(nvs_pool_create(&o, &pool) == 0, "create");
	CHECK(nvs_pool_get(pool, &b) == 0, "get");
	w.pool = pool;
	pthread_create(&th, NULL, waiter_main, &w);
	do {
		usleep(1000);
		nvs_pool_stats(pool, &st);
	} while (st.waits == 0);
	CHECK(nvs_pool_put(pool, b) == 0, "put wakes the waiter");
	pthread_join(th, NULL);
	CHECK(w.ret == 0 && w.got == b, "waiter got the buffer put");
	CHECK(nvs_pool_put(pool, w.got) == 0, "put");
	CHECK(nvs_pool_destroy(pool) == 0, "destroy");
}

struct copy_arg {
	unsigned char *src, *dst;
	size_t n;
	int bad;
};

static void *copy_main(void *p)
{
	struct copy_arg *c = p;

	for (int i = 0; i < 3; i++) {
		memset(c->dst, 0, c->n);
		nvs_copy_mt(c->dst, c->src + 1, c->n - 1, 3);
		if (memcmp(c->dst, c->src + 1, c->n - 1))
			c->bad++;
	}
	return NULL;
}

static void test_concurrent_copies(void)
{
	enum { C = 3 };
	struct copy_arg c[C];
	pthread_t th[C];

	for (int i = 0; i < C; i++) {
		c[i].n = (24u << 20) + (size_t)i * 4097;
		c[i].src = malloc(c[i].n);
		c[i].dst = malloc(c[i].n);
		c[i].bad = 0;
		for (size_t j = 0; j < c[i].n; j++)
			c[i].src[j] = (unsigned char)(j * 31 + (size_t)i);
		pthread_create(&th[i], NULL, copy_main, &c[i]);
	}
	for (int i = 0; i < C; i++) {
		pthread_join(th[i], NULL);
		CHECK(c[i].bad == 0, "copy %d", i);
		free(c[i].src);
		free(c[i].dst);
	}
}

int main(void)
{
	struct nvs_pool_opts o;
	struct nvs_pool *pool;
	struct nvs_pinned_stats st;
	struct nvs_pool_stats ps;

	run(pinned_churn, NULL, "pinned");
	nvs_pinned_stats(&st);
	CHECK(st.live_allocations == 0, "%llu live",
	      (unsigned long long)st.live_allocations);
	CHECK(st.bytes_in_use == 0, "in use");
	CHECK(st.bad_frees == 0, "bad frees");
	CHECK(st.allocs == st.frees, "allocs %llu frees %llu",
	      (unsigned long long)st.allocs, (unsigned long long)st.frees);

	nvs_pool_opts_init(&o);
	o.buffer_size = 8192;
	o.buffer_count = 3;
	CHECK(nvs_pool_create(&o, &pool) == 0, "pool");
	run(pool_churn, pool, "pool");
	nvs_pool_stats(pool, &ps);
	CHECK(ps.in_use == 0 && ps.gets == T * 3000 && ps.puts == T * 3000,
	      "gets %llu puts %llu in use %u", (unsigned long long)ps.gets,
	      (unsigned long long)ps.puts, ps.in_use);
	CHECK(ps.bad_puts == 0, "bad puts");
	CHECK(nvs_pool_destroy(pool) == 0, "destroy");

	test_blocked_get();
	test_concurrent_copies();

	return check_report();
}
