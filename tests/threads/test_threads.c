// SPDX-License-Identifier: MIT
/*
 * The handle's threaded paths without Criterion, so they can run under
 * ThreadSanitizer (Criterion's fork arena cannot be placed beside TSan's
 * shadow memory). Every check asserts an exact outcome; the program prints
 * "N passed, N failed" and exits non-zero on any failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aio/handle.h"
#include "check.h"
#include "nvswap/aio.h"

static char dir[4096];

static const char *path(const char *name, int i)
{
	static _Thread_local char buf[4][4200];
	static _Thread_local int next;
	char *p = buf[next++ % 4];

	snprintf(p, 4200, "%s/%s%d", dir, name, i);
	return p;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (unsigned char)x;
	}
}

static struct nvs_aio *mk(unsigned par, unsigned qd, unsigned bs, bool oe,
			  unsigned max_ops)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = NULL;

	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = par;
	o.queue_depth = qd;
	o.block_size = bs;
	o.overlap_events = oe;
	o.max_ops = max_ops;
	if (nvs_aio_create(&o, &h) < 0) {
		fprintf(stderr, "create: %s\n", nvs_last_error());
		exit(1);
	}
	return h;
}

struct thr {
	struct nvs_aio *h;
	int idx;
	int bad;
};

/* Each thread: its own file, write+read with tickets, unaligned sizes. */
static void *tickets(void *arg)
{
	struct thr *t = arg;
	size_t sz = 200000 + (size_t)t->idx * 4099;
	unsigned char *src = malloc(sz + 1), *dst = malloc(sz + 1);
	uint64_t id;

	for (int it = 0; it < 10; it++) {
		fill(src, sz, (unsigned)(t->idx * 100 + it));
		struct nvs_aio_io io = {NVS_AIO_WRITE,	    src + 1, sz,
					path("tk", t->idx), -1,	     it * 7};
		if (nvs_aio_submit(t->h, &io, &id) || nvs_aio_wait_op(t->h, id))
			t->bad++;
		io.opcode = NVS_AIO_READ;
		io.buf = dst;
		if (nvs_aio_submit(t->h, &io, &id) || nvs_aio_wait_op(t->h, id))
			t->bad++;
		if (memcmp(src + 1, dst, sz))
			t->bad++;
	}
	free(src);
	free(dst);
	return NULL;
}

/* Each thread: async writes then handle-wide waits. */
static void *waits(void *arg)
{
	struct thr *t = arg;
	unsigned char buf[70001];

	fill(buf, sizeof(buf), (unsigned)t->idx);
	for (int i = 0; i < 10; i++) {
		if (nvs_aio_async_pwrite(t->h, buf, sizeof(buf),
					 path("wt", t->idx), i))
			t->bad++;
		if (nvs_aio_wait(t->h) < 0)
			t->bad++;
	}
	return NULL;
}

/* Even threads: small aligned sync ops (on the caller's thread when the
 * handle is idle, else through the workers); odd ones: waits(). */
static void *small_sync(void *arg)
{
	struct thr *t = arg;
	unsigned char *src, *dst;

	if (t->idx % 2)
		return waits(arg);
	if (posix_memalign((void **)&src, 4096, 4096) ||
	    posix_memalign((void **)&dst, 4096, 4096)) {
		t->bad++;
		return NULL;
	}
	for (int it = 0; it < 20; it++) {
		fill(src, 4096, (unsigned)(t->idx * 100 + it));
		struct nvs_aio_io io = {NVS_AIO_WRITE,	    src, 4096,
					path("ss", t->idx), -1,	 it * 4096};
		if (nvs_aio_submit_wait(t->h, &io))
			t->bad++;
		io.opcode = NVS_AIO_READ;
		io.buf = dst;
		if (nvs_aio_submit_wait(t->h, &io))
			t->bad++;
		if (memcmp(src, dst, 4096))
			t->bad++;
	}
	free(src);
	free(dst);
	return NULL;
}

static void run_threads(struct nvs_aio *h, void *(*fn)(void *), int n)
{
	pthread_t th[8];
	struct thr t[8];

	for (int i = 0; i < n; i++) {
		t[i] = (struct thr){h, i, 0};
		pthread_create(&th[i], NULL, fn, &t[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		CHECK(t[i].bad == 0, "thread %d: %d failures", i, t[i].bad);
	}
}

static void threads_share_a_handle(void)
{
	struct nvs_aio *h = mk(3, 8, 64 << 10, true, 0);
	struct nvs_aio_stats st;

	run_threads(h, tickets, 4);
	run_threads(h, waits, 4);
	run_threads(h, small_sync, 4);
	CHECK(nvs_aio_wait(h) == 0, "nothing left");
	nvs_aio_get_stats(h, &st);
	CHECK(st.ops_completed == 4 * 20 + 4 * 10 + 2 * 40 + 2 * 10, "%llu ops",
	      (unsigned long long)st.ops_completed);
	CHECK(st.ops_failed == 0, "no failures");
	CHECK(nvs_aio_destroy(h) == 0, "destroy");
}

static void async_batch_then_wait(bool oe, unsigned par)
{
	struct nvs_aio *h = mk(par, 4, 16 << 10, oe, 4);
	enum { N = 12, SZ = 300007 };
	unsigned char *b = malloc((size_t)N * SZ), *r = malloc((size_t)N * SZ);

	fill(b, (size_t)N * SZ, 5);
	for (int i = 0; i < N; i++)
		CHECK(nvs_aio_async_pwrite(h, b + (size_t)i * SZ, SZ,
					   path("ab", 0), (int64_t)i * SZ) == 0,
		      "submit %d", i);
	CHECK(nvs_aio_wait(h) == N, "wait returns N");
	for (int i = 0; i < N; i++)
		CHECK(nvs_aio_async_pread(h, r + (size_t)i * SZ, SZ,
					  path("ab", 0), (int64_t)i * SZ) == 0,
		      "submit read %d", i);
	/* Destroy drains the reads. */
	CHECK(nvs_aio_destroy(h) == 0, "destroy with reads in flight");
	CHECK(memcmp(b, r, (size_t)N * SZ) == 0, "data");
	free(b);
	free(r);
}

static void fault_errors_cross_threads(void)
{
	struct nvs_fault_plan p = {
		.rules = {{NVS_FAULT_EIO, 5, 1, NVS_IOREQ_WRITE, 0},
			  {NVS_FAULT_SHORT, 1, 0, -1, 4096}},
		.nrules = 2};
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned char buf[1 << 20];

	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = 1;
	o.block_size = 64 << 10;
	CHECK(nvs__aio_create_fault(&o, &p, &h) == 0, "create fault");
	fill(buf, sizeof(buf), 3);
	CHECK(nvs_aio_sync_pwrite(h, buf, sizeof(buf), path("f", 0), 0) == -EIO,
	      "EIO reaches the caller");
	CHECK(nvs_aio_sync_pwrite(h, buf, sizeof(buf), path("f", 0), 0) == 1,
	      "then works");
	CHECK(nvs_aio_destroy(h) == 0, "destroy");
}

int main(void)
{
	const char *base = getenv("NVSWAP_TEST_DIR");

	snprintf(dir, sizeof(dir), "%s/nvs-threads-XXXXXX", base ? base : ".");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	threads_share_a_handle();
	async_batch_then_wait(true, 3);
	async_batch_then_wait(false, 2);
	fault_errors_cross_threads();
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_report();
}
