// SPDX-License-Identifier: MIT
/*
 * Randomized consistency test of the swap manager (suite "stress", not in
 * the default run; `make stress`). Each round makes a swapper with random
 * options (one or two paths, pool size, buffer and stripe sizes, checksum,
 * auto_evict, backend and queue depth), then runs a random mix of
 * register (with data or zeros), unregister, prefetch, try_prefetch,
 * acquire (checked against a shadow copy, sometimes modified, sometimes
 * held across later calls), release, evict, wait and wait_all on a few
 * dozen tensors of random sizes. Every acquire is checked byte for byte;
 * every return value must be one the header allows in that situation.
 * The round ends by reading every tensor back and destroying the swapper,
 * which must return 0 and leave no scratch files. Prints "N passed, N
 * failed".
 *
 *   stress_swapper [seconds (default 20)] [seed]
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvswap/swapper.h"

#define NT 40	  /* tensor ids per round */
#define MAXHOLD 2 /* tensors held acquired across calls */

static unsigned long long rng;

static unsigned long long rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct shadow {
	bool registered;
	size_t n;
	unsigned char *ref;
	void *held; /* acquired by us and not yet released, or NULL */
};

static struct shadow T[NT];
static unsigned long long seed;
static int passed, failed;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "stress_swapper (seed %llu): ", seed);         \
		fprintf(stderr, __VA_ARGS__);                                  \
		fprintf(stderr, " [%s]\n", nvs_last_error());                  \
		failed++;                                                      \
		return -1;                                                     \
	} while (0)

static void fill(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)rnd();
}

static size_t pick_size(size_t max)
{
	switch (rnd() % 4) {
	case 0:
		return 1 + rnd() % 100;
	case 1:
		return 1 + rnd() % (max < 8192 ? max : 8192);
	case 2:
		return max;
	default:
		return 1 + rnd() % max;
	}
}

static unsigned held(void)
{
	unsigned n = 0;

	for (int i = 0; i < NT; i++)
		n += T[i].held != NULL;
	return n;
}

/* Release a held tensor, maybe after changing it. */
static int let_go(struct nvs_swapper *s, int id)
{
	bool dirty = rnd() % 2;
	int ret;

	if (dirty) {
		size_t off = rnd() % T[id].n, len = 1 + rnd() % (T[id].n - off);
		fill(T[id].ref + off, len);
		memcpy((char *)T[id].held + off, T[id].ref + off, len);
	}
	T[id].held = NULL;
	ret = nvs_swapper_release(s, (uint64_t)id, dirty);
	if (ret)
		FAIL("release %d: %d", id, ret);
	return 0;
}

/* The pool is full: what a single-threaded caller does about it. */
static int make_room(struct nvs_swapper *s, int ret)
{
	if (ret == -EDEADLK) {
		/* every buffer acquired: let one go */
		for (int i = 0; i < NT; i++)
			if (T[i].held)
				return let_go(s, i);
		FAIL("-EDEADLK with nothing acquired");
	}
	/* -ETIMEDOUT (or -EAGAIN from try_prefetch): evict something */
	for (int k = 0; k < NT; k++) {
		int i = (int)(rnd() % NT);
		struct nvs_tensor_info info;
		if (!T[i].registered || T[i].held)
			continue;
		if (nvs_swapper_info(s, (uint64_t)i, &info) < 0)
			FAIL("info %d", i);
		if (info.state == NVS_TENSOR_RESIDENT && !info.acquired) {
			if ((ret = nvs_swapper_evict(s, (uint64_t)i)) < 0)
				FAIL("evict %d for room: %d", i, ret);
			return 0;
		}
	}
	if ((ret = nvs_swapper_wait_all(s)) < 0)
		FAIL("wait_all for room: %d", ret);
	return 0;
}

static int check(struct nvs_swapper *s, int id, void *p)
{
	if (!p || memcmp(p, T[id].ref, T[id].n)) {
		nvs_swapper_release(s, (uint64_t)id, false);
		FAIL("tensor %d (%zu bytes) differs from its shadow", id,
		     T[id].n);
	}
	passed++;
	return 0;
}

static int step(struct nvs_swapper *s, size_t bufsz)
{
	int id = (int)(rnd() % NT), ret;
	struct shadow *t = &T[id];
	void *p = NULL;

	if (!t->registered) {
		t->n = pick_size(bufsz);
		t->ref = realloc(t->ref, t->n);
		bool data = rnd() % 2;
		if (data)
			fill(t->ref, t->n);
		else
			memset(t->ref, 0, t->n);
		ret = nvs_swapper_register(s, (uint64_t)id, t->n,
					   data ? t->ref : NULL);
		if (ret)
			FAIL("register %d (%zu bytes): %d", id, t->n, ret);
		t->registered = true;
		return 0;
	}
	if (t->held)
		return let_go(s, id);
	switch (rnd() % 8) {
	case 0:
		if (rnd() % 4)
			break; /* unregister rarely */
		ret = nvs_swapper_unregister(s, (uint64_t)id);
		if (ret)
			FAIL("unregister %d: %d", id, ret);
		t->registered = false;
		return 0;
	case 1:
		ret = nvs_swapper_prefetch(s, (uint64_t)id);
		if (ret == -ETIMEDOUT || ret == -EDEADLK)
			return make_room(s, ret);
		if (ret)
			FAIL("prefetch %d: %d", id, ret);
		return 0;
	case 2:
		ret = nvs_swapper_try_prefetch(s, (uint64_t)id);
		if (ret == -EAGAIN)
			return make_room(s, ret);
		if (ret)
			FAIL("try_prefetch %d: %d", id, ret);
		return 0;
	case 3:
		ret = nvs_swapper_evict(s, (uint64_t)id);
		if (ret)
			FAIL("evict %d: %d", id, ret);
		return 0;
	case 4:
		ret = rnd() % 4 ? nvs_swapper_wait(s, (uint64_t)id)
				: nvs_swapper_wait_all(s);
		if (ret)
			FAIL("wait: %d", ret);
		return 0;
	default:
		break;
	}
	ret = nvs_swapper_acquire(s, (uint64_t)id, &p);
	if (ret == -ETIMEDOUT || ret == -EDEADLK)
		return make_room(s, ret);
	if (ret)
		FAIL("acquire %d: %d", id, ret);
	if (check(s, id, p) < 0)
		return -1;
	t->held = p;
	/* Keep a few across later calls; let the rest go now. */
	if (held() > MAXHOLD || rnd() % 3)
		return let_go(s, id);
	return 0;
}

static int round_once(const char *paths[2])
{
	static const enum nvs_backend be[] = {
		NVS_BACKEND_AUTO, NVS_BACKEND_IO_URING, NVS_BACKEND_LIBAIO,
		NVS_BACKEND_PSYNC};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	int ret, rc = 0;

	nvs_swapper_opts_init(&o);
	o.npaths = 1 + (unsigned)(rnd() % 2);
	o.nvme_paths[0] = paths[0];
	o.nvme_paths[1] = paths[1];
	o.buffer_count = 1 + (unsigned)(rnd() % 6);
	o.buffer_size = 512 + rnd() % (512 << 10);
	o.stripe_size = (uint64_t)4096 << (rnd() % 9);
	o.checksum = rnd() % 2;
	o.auto_evict = rnd() % 2;
	/* A single thread that waits for another's evict would wait
	 * forever: bound it, and evict on -ETIMEDOUT. */
	o.wait_ms = 20;
	o.aio.backend = be[rnd() % 4];
	o.aio.queue_depth = 1 + (unsigned)(rnd() % 32);
	o.aio.intra_op_parallelism = 1 + (unsigned)(rnd() % 3);
	o.aio.block_size = 4096u << (rnd() % 7);
	ret = nvs_swapper_create(&o, &s);
	if (ret == -EOPNOTSUPP)
		return 0; /* that backend is not here */
	if (ret) {
		fprintf(stderr, "stress_swapper (seed %llu): create: %d %s\n",
			seed, ret, nvs_last_error());
		failed++;
		return -1;
	}
	for (int i = 0; i < 300 && rc == 0; i++)
		rc = step(s, o.buffer_size);
	/* Read everything back, then tear down. */
	for (int id = 0; id < NT && rc == 0; id++) {
		void *p;
		if (T[id].held)
			rc = let_go(s, id);
		if (!T[id].registered || rc)
			continue;
		do {
			ret = nvs_swapper_acquire(s, (uint64_t)id, &p);
		} while ((ret == -ETIMEDOUT || ret == -EDEADLK) &&
			 make_room(s, ret) == 0);
		if (ret) {
			fprintf(stderr,
				"stress_swapper (seed %llu): final acquire %d: "
				"%d %s\n",
				seed, id, ret, nvs_last_error());
			failed++;
			rc = -1;
			break;
		}
		rc = check(s, id, p);
		if (rc == 0 && nvs_swapper_release(s, (uint64_t)id, false))
			rc = -1;
		if (rc == 0 && nvs_swapper_evict(s, (uint64_t)id))
			rc = -1;
	}
	for (int id = 0; id < NT; id++) {
		T[id].registered = false;
		T[id].held = NULL;
	}
	/* Destroy removes each path's rank directory (the shared nvswap/
	 * above it stays for other ranks). */
	char rankdir[2][4200];
	struct stat st;
	for (unsigned i = 0; i < o.npaths; i++)
		snprintf(rankdir[i], sizeof(rankdir[i]), "%s",
			 nvs_swapper_dir(s, i));
	ret = nvs_swapper_destroy(s);
	if (ret) {
		fprintf(stderr, "stress_swapper (seed %llu): destroy: %d %s\n",
			seed, ret, nvs_last_error());
		failed++;
		return -1;
	}
	for (unsigned i = 0; i < o.npaths; i++)
		if (stat(rankdir[i], &st) == 0) {
			fprintf(stderr,
				"stress_swapper (seed %llu): %s left behind\n",
				seed, rankdir[i]);
			failed++;
			return -1;
		}
	if (rc == 0)
		passed++;
	return rc;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 20;
	const char *base = getenv("NVSWAP_TEST_DIR");
	char dir[4096], p0[4200], p1[4200];
	const char *paths[2] = {p0, p1};
	time_t end;
	int rounds = 0;

	seed = argc > 2 ? strtoull(argv[2], NULL, 0)
			: (unsigned long long)time(NULL);
	rng = seed ? seed : 1;
	snprintf(dir, sizeof(dir), "%s/nvs-stress-swap-XXXXXX",
		 base ? base : ".");
	if (!mkdtemp(dir))
		return perror("mkdtemp"), 1;
	snprintf(p0, sizeof(p0), "%s/p0", dir);
	snprintf(p1, sizeof(p1), "%s/p1", dir);
	if (mkdir(p0, 0700) || mkdir(p1, 0700))
		return perror("mkdir"), 1;
	printf("stress_swapper: seed %llu, %.0f s (replay: stress_swapper "
	       "%.0f %llu)\n",
	       seed, secs, secs, seed);
	end = time(NULL) + (time_t)secs;
	while (time(NULL) < end && failed == 0) {
		round_once(paths);
		rounds++;
	}
	for (int i = 0; i < 2; i++) {
		char sub[4300];
		snprintf(sub, sizeof(sub), "%s/nvswap", paths[i]);
		rmdir(sub);
		rmdir(paths[i]);
	}
	rmdir(dir);
	for (int i = 0; i < NT; i++)
		free(T[i].ref);
	printf("stress_swapper: %d rounds\n", rounds);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
