// SPDX-License-Identifier: MIT
/*
 * The bodies of the tests that run as user nobody, as a program of their
 * own: tu_as_nobody() forks, lowers RLIMIT_MEMLOCK, drops root and execs
 * this, so each case starts in a fresh single-threaded process. Running
 * them in the forked test process instead deadlocked now and then under
 * ASan: its allocator takes no lock around fork(), so a child whose
 * parent had a thread inside malloc at that moment hangs on its first
 * allocation.
 *
 *   nvs-test-nobody CASE DIR    writes a struct tu_child to stdout
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/nvswap.h"
#include "testutil_child.h"

#define MiB (1u << 20)

static const char *dir;

static const char *path(const char *name)
{
	static char bufs[4][4096];
	static int next;
	char *p = bufs[next++ % 4];

	snprintf(p, 4096, "%s/%s", dir, name);
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

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* test_errors: unreadable and unwritable files are -EACCES. */
static void eacces(struct tu_child *child)
{
	int *res = child->res;
	char buf[16] = {1};
	struct nvs_aio *c = NULL;

	if (nvs_aio_create(NULL, &c) < 0)
		return;
	res[0] = nvs_aio_sync_pread(c, buf, 16, path("locked"), 0);
	res[1] = nvs_aio_sync_pwrite(c, buf, 16, path("locked"), 0);
	/* A directory we cannot write into. */
	res[2] = nvs_aio_sync_pwrite(c, buf, 16, path("new"), 0);
	nvs_aio_destroy(c);
}

/* test_errors: a handle works under a small memlock limit. */
static void memlock(struct tu_child *child)
{
	int *res = child->res;
	enum { SZ = (1 << 20) + 333 };
	struct nvs_aio_opts o;
	struct nvs_aio *c = NULL;
	struct nvs_aio_stats st;
	unsigned char *src = malloc(SZ + 1), *dst = malloc(SZ);
	char f[64];

	/* The test directory is root's; nobody writes in /tmp. */
	snprintf(f, sizeof(f), "/tmp/.nvs-memlock-%d", (int)getpid());
	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = 2;
	res[0] = nvs_aio_create(&o, &c);
	fill(src, SZ + 1, 6);
	res[1] = nvs_aio_sync_pwrite(c, src + 1, SZ, f, 0);
	res[2] = nvs_aio_sync_pread(c, dst, SZ, f, 0) == 1 &&
		 memcmp(src + 1, dst, SZ) == 0;
	nvs_aio_get_stats(c, &st);
	res[3] = st.bounce_locked;
	nvs_aio_destroy(c);
	unlink(f);
	free(src);
	free(dst);
}

/* test_pinned: -ENOMEM with advice, then the unpinned opt-in. */
static void small_memlock(struct tu_child *c)
{
	struct nvs_pinned_stats st;
	int err = 0;
	void *p = nvs_pinned_alloc(MiB, &err);

	c->res[0] = p != NULL;
	c->res[1] = err;
	snprintf(c->msg, sizeof(c->msg), "%s", nvs_last_error());
	nvs_pinned_allow_unpinned(true);
	p = nvs_pinned_alloc(MiB, &err);
	c->res[2] = p != NULL && all_zero(p, MiB);
	c->res[3] = nvs_pinned_contains(p, MiB);
	nvs_pinned_stats(&st);
	c->res[4] = (int)st.unpinned_allocations;
	c->res[5] = st.unpinned_bytes >= MiB;
	c->res[6] = st.memlock_limit == (64u << 10);
	nvs_pinned_free(p);
	nvs_pinned_stats(&st);
	c->res[7] = (int)st.unpinned_allocations;
}

/* test_pinned: NVSWAP_ALLOW_UNPINNED=1 in the environment. */
static void env_optin(struct tu_child *c)
{
	void *p;

	setenv("NVSWAP_ALLOW_UNPINNED", "1", 1);
	p = nvs_pinned_alloc(MiB, &c->res[1]);
	c->res[0] = p != NULL;
	c->res[2] = nvs_pinned_contains(p, 1);
	nvs_pinned_free(p);
}

/* test_pinned: a memlock limit of 0 is -EPERM. */
static void zero_memlock(struct tu_child *c)
{
	void *p = nvs_pinned_alloc(4096, &c->res[1]);

	c->res[0] = p != NULL;
	snprintf(c->msg, sizeof(c->msg), "%s", nvs_last_error());
}

/* test_pool: create fails unless unpinned memory is allowed. */
static void pool(struct tu_child *c)
{
	struct nvs_pool_opts o;
	struct nvs_pool *p = NULL;
	struct nvs_pool_stats st;

	nvs_pool_opts_init(&o);
	o.buffer_size = 1 << 20;
	o.buffer_count = 2;
	c->res[0] = nvs_pool_create(&o, &p);
	snprintf(c->msg, sizeof(c->msg), "%s", nvs_last_error());
	o.allow_unpinned = true;
	c->res[1] = nvs_pool_create(&o, &p);
	nvs_pool_stats(p, &st);
	c->res[2] = st.pinned;
	c->res[3] = nvs_pool_destroy(p);
}

/*
 * test_backends: io_uring accounts registered buffers against the memlock
 * limit per user, apart from mlock. Under 8 MiB, two rings registering the
 * same 6 MiB of pinned memory cannot both succeed: the second one's
 * requests go unregistered, and the data is right either way.
 */
static void uring_memlock(struct tu_child *c)
{
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;
	size_t n = 6 * MiB;
	int err;
	unsigned char *src = nvs_pinned_alloc(n, &err);
	unsigned char *dst = malloc(n);

	unsetenv("NVSWAP_BACKEND"); /* this case is about io_uring */
	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_IO_URING;
	o.intra_op_parallelism = 2;
	o.block_size = 64 << 10;
	c->res[7] = 1;
	if (!src || !dst) {
		snprintf(c->msg, sizeof(c->msg), "%s", nvs_last_error());
		return;
	}
	if (nvs_aio_create(&o, &h) < 0) {
		c->res[7] = 2; /* no io_uring here */
		snprintf(c->msg, sizeof(c->msg), "%s", nvs_last_error());
		return;
	}
	c->res[7] = 0;
	fill(src, n, 5);
	c->res[0] = nvs_aio_sync_pwrite(h, src, n, path("m"), 0);
	snprintf(c->msg, sizeof(c->msg), "%s", nvs_last_error());
	c->res[1] = nvs_aio_sync_pread(h, dst, n, path("m"), 0);
	c->res[2] = memcmp(src, dst, n) == 0;
	nvs_aio_get_stats(h, &st);
	c->res[3] = st.register_error;
	c->res[4] = (int)st.fixed_buffer_requests;
	c->res[5] = (int)st.requests;
	c->res[6] = nvs_aio_destroy(h);
	nvs_pinned_free(src);
	free(dst);
}

static const struct {
	const char *name;
	void (*body)(struct tu_child *c);
} cases[] = {
	{"eacces", eacces},
	{"memlock", memlock},
	{"small_memlock", small_memlock},
	{"env_optin", env_optin},
	{"zero_memlock", zero_memlock},
	{"pool", pool},
	{"uring_memlock", uring_memlock},
};

int main(int argc, char **argv)
{
	struct tu_child out;

	if (argc != 3) {
		fprintf(stderr, "usage: %s CASE DIR\n", argv[0]);
		return 2;
	}
	dir = argv[2];
	memset(&out, 0, sizeof(out));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (strcmp(cases[i].name, argv[1]))
			continue;
		cases[i].body(&out);
		if (write(STDOUT_FILENO, &out, sizeof(out)) != sizeof(out))
			return 1;
		return 0;
	}
	fprintf(stderr, "%s: no case %s\n", argv[0], argv[1]);
	return 2;
}
