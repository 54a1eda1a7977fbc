// SPDX-License-Identifier: MIT
/*
 * The swap manager from two threads, without Criterion so it also runs
 * under ThreadSanitizer. Tensors totalling four times the pool; one thread
 * acquires, checks every byte against its reference copy, modifies and
 * releases, while the other prefetches, evicts and waits at random. Run
 * three times: the evicting thread as the only evictor (acquire waits for
 * it), then with automatic eviction and checksums (and the disk shared:
 * nvs_swapper_share_disk() on the directory, recounted as both threads
 * read), then as a persistent
 * set that the other thread also checkpoints at random (reopened at the
 * end: every byte as the last release left it). Prints "N passed, N
 * failed".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "check.h"

enum { POOL = 4, BUF = 32 << 10, N = 24, STEPS = 3000 };

static char dir[4096];

struct run {
	struct nvs_swapper *s;
	unsigned char *ref[N];
	size_t size[N];
	atomic_bool done;
	bool persist;
	/* Each thread counts its own. */
	unsigned bad, timeouts;			  /* the user's */
	unsigned mover_bad, mover_timeouts, busy; /* the mover's */
};

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Acquire, retrying while the pool is full and the other thread has not
 * evicted yet (-ETIMEDOUT after wait_ms). */
static int acquire(struct run *r, uint64_t id, void **p)
{
	int ret;

	while ((ret = nvs_swapper_acquire(r->s, id, p)) == -ETIMEDOUT)
		r->timeouts++;
	return ret;
}

/* The only thread that changes tensors, so the reference copies are its
 * own. */
static void *user(void *arg)
{
	struct run *r = arg;
	uint64_t x = 0x9E3779B97F4A7C15ull;

	for (unsigned step = 0; step < STEPS && !r->bad; step++) {
		uint64_t id = next(&x) % N;
		unsigned char *p;
		int ret = acquire(r, id, (void **)&p);
		if (ret < 0) {
			fprintf(stderr, "acquire %llu: %d %s\n",
				(unsigned long long)id, ret, nvs_last_error());
			r->bad++;
			break;
		}
		if (memcmp(p, r->ref[id], r->size[id])) {
			fprintf(stderr, "step %u: tensor %llu differs\n", step,
				(unsigned long long)id);
			r->bad++;
		}
		bool dirty = next(&x) % 2;
		if (dirty) {
			size_t off = next(&x) % r->size[id];
			size_t len = 1 + next(&x) % (r->size[id] - off);
			memset(r->ref[id] + off, (int)(step & 0xff), len);
			memcpy(p + off, r->ref[id] + off, len);
		}
		if (nvs_swapper_release(r->s, id, dirty) < 0)
			r->bad++;
		if (next(&x) % 4 == 0) {
			ret = nvs_swapper_prefetch(r->s, next(&x) % N);
			r->bad += ret < 0 && ret != -ETIMEDOUT;
		}
	}
	atomic_store(&r->done, true);
	return NULL;
}

/* Prefetches, evictions and waits until the user is done. */
static void *mover(void *arg)
{
	struct run *r = arg;
	uint64_t x = 0xD1B54A32D192ED03ull;

	while (!atomic_load(&r->done)) {
		uint64_t id = next(&x) % N;
		int ret;
		switch (next(&x) % 8) {
		case 0:
			ret = nvs_swapper_prefetch(r->s, id);
			if (ret == -ETIMEDOUT)
				r->mover_timeouts++;
			else if (ret < 0)
				r->mover_bad++;
			break;
		case 6:
			ret = nvs_swapper_wait(r->s, id);
			r->mover_bad += ret < 0;
			break;
		case 7:
			ret = nvs_swapper_wait_all(r->s);
			r->mover_bad += ret < 0;
			break;
		case 5:
			if (!r->persist)
				goto evict;
			ret = nvs_swapper_checkpoint(r->s, "t");
			if (ret == -EBUSY)
				r->busy++; /* the user holds a changed one */
			else if (ret <= 0)
				r->mover_bad++;
			break;
		case 4:
			if (!r->persist)
				goto evict;
			ret = nvs_swapper_checkpoint_wait(r->s);
			r->mover_bad += ret < 0;
			break;
		default:
		evict:
			ret = nvs_swapper_evict(r->s, id);
			if (ret == -EBUSY)
				r->busy++; /* the user holds it */
			else if (ret < 0)
				r->mover_bad++;
		}
	}
	return NULL;
}

/* Reopen @r's persistent set and check every tensor's bytes. */
static void reopen_check(struct run *r, const struct nvs_swapper_opts *opts)
{
	struct nvs_swapper_opts o = *opts;
	struct nvs_swapper *s = NULL;

	o.persist = NVS_PERSIST_RESUME;
	CHECK(nvs_swapper_create(&o, &s) == 0, "reopen: %s", nvs_last_error());
	if (!s)
		return;
	CHECK(nvs_swapper_list(s, NULL, 0) == N, "reopened tensors");
	for (unsigned i = 0; i < N; i++) {
		void *p;
		if (nvs_swapper_acquire(s, i, &p) == 0) {
			CHECK(!memcmp(p, r->ref[i], r->size[i]),
			      "tensor %u reopened", i);
			nvs_swapper_release(s, i, false);
			nvs_swapper_evict(s, i);
		} else {
			CHECK(0, "acquire %u reopened: %s", i,
			      nvs_last_error());
		}
	}
	CHECK(nvs_swapper_destroy(s) == 0, "destroy reopened");
}

static void one_run(bool auto_evict, bool checksum, bool persist)
{
	struct nvs_swapper_opts o;
	struct run r = {.done = false, .persist = persist};
	struct nvs_swap_stats st;
	uint64_t x = 12345, total = 0;
	pthread_t a, b;
	int lockfd = -1;

	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = dir;
	o.buffer_size = BUF;
	o.buffer_count = POOL;
	o.auto_evict = auto_evict;
	o.checksum = checksum;
	o.wait_ms = auto_evict ? 0 : 2;
	o.aio.queue_depth = 8;
	o.persist = persist ? NVS_PERSIST_PERSISTENT : NVS_PERSIST_SCRATCH;
	o.name = persist ? "persist" : NULL;
	CHECK(nvs_swapper_create(&o, &r.s) == 0, "create");
	if (!r.s)
		return;
	if (checksum) {
		/* Held shared, as a server holds its weights' directory. */
		lockfd = open(dir, O_RDONLY | O_DIRECTORY);
		CHECK(lockfd >= 0 && flock(lockfd, LOCK_SH) == 0, "flock");
		CHECK(nvs_swapper_share_disk(r.s, dir) == 1, "share_disk: %s",
		      nvs_last_error());
	}
	for (unsigned i = 0; i < N; i++) {
		r.size[i] = BUF / 2 + next(&x) % (BUF / 2 + 1);
		total += r.size[i];
		r.ref[i] = malloc(r.size[i]);
		for (size_t k = 0; k < r.size[i]; k++)
			r.ref[i][k] = (unsigned char)next(&x);
		CHECK(nvs_swapper_register(r.s, i, r.size[i],
					   i % 3 ? r.ref[i] : NULL) == 0,
		      "register %u", i);
		if (i % 3 == 0)
			memset(r.ref[i], 0, r.size[i]);
	}
	CHECK(total >= 4ull * POOL * BUF * 3 / 4, "about 4x the pool");
	pthread_create(&a, NULL, user, &r);
	pthread_create(&b, NULL, mover, &r);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	CHECK(r.bad == 0 && r.mover_bad == 0,
	      "%u + %u bad results (auto_evict %d)", r.bad, r.mover_bad,
	      auto_evict);
	CHECK(nvs_swapper_wait_all(r.s) == 0, "wait_all");
	/* Every byte, after the dust settles, from disk. */
	for (unsigned i = 0; i < N; i++) {
		CHECK(nvs_swapper_evict(r.s, i) == 0, "evict %u", i);
		CHECK(nvs_swapper_wait(r.s, i) == 0, "write %u", i);
	}
	for (unsigned i = 0; i < N; i++) {
		void *p;
		if (acquire(&r, i, &p) == 0) {
			CHECK(!memcmp(p, r.ref[i], r.size[i]),
			      "tensor %u at the end", i);
			nvs_swapper_release(r.s, i, false);
			nvs_swapper_evict(r.s, i);
		} else {
			CHECK(0, "acquire %u at the end", i);
		}
	}
	CHECK(nvs_swapper_stats(r.s, &st) == 0, "stats");
	CHECK(st.pool_high_water <= POOL, "high water %u", st.pool_high_water);
	CHECK(st.bytes_written > total, "written back");
	CHECK(st.io_errors == 0 && st.checksum_errors == 0, "no I/O errors");
	CHECK(!auto_evict || st.auto_evictions > 0, "auto evictions");
	CHECK(st.disk_sharers == (checksum ? 1u : 0u), "sharers %u",
	      st.disk_sharers);
	printf("auto_evict %d: %llu acquires (%llu hits), %llu reads, %llu "
	       "writes, %u timeouts, %u busy evicts\n",
	       auto_evict, (unsigned long long)st.acquires,
	       (unsigned long long)st.acquire_hits,
	       (unsigned long long)st.reads, (unsigned long long)st.writes,
	       r.timeouts + r.mover_timeouts, r.busy);
	CHECK(nvs_swapper_destroy(r.s) == 0, "destroy: %s", nvs_last_error());
	if (lockfd >= 0)
		close(lockfd);
	if (persist)
		reopen_check(&r, &o);
	for (unsigned i = 0; i < N; i++)
		free(r.ref[i]);
}

int main(void)
{
	const char *base = getenv("NVSWAP_TEST_DIR");

	snprintf(dir, sizeof(dir), "%s/nvs-swapper-XXXXXX", base ? base : ".");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	one_run(false, false, false);
	one_run(true, true, false);
	one_run(true, false, true);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_report();
}
