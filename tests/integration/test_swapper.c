// SPDX-License-Identifier: MIT
/*
 * The swap manager on real swap files: every legal and illegal state
 * transition, data read back byte for byte (odd sizes, striping over two
 * paths), pool exhaustion (-EDEADLK, automatic eviction, waiting for
 * another thread), checksums against a corrupted file, injected -EIO and
 * -ENOSPC (nothing lost, retryable), cleanup and stale-file recovery after
 * SIGKILL, and every failed allocation.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/buffers.h"
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "swapper/swapper.h"
#include "tu_swapper.h"
#include "testutil.h"

enum { BUF = 64 << 10 };

static void fini(void)
{
	tu_cleanup();
}

TestSuite(swapper, .fini = fini);

static void opts(struct nvs_swapper_opts *o, unsigned count)
{
	tu_swapper_opts(o, BUF, count);
}

static struct nvs_swapper *mk_with(const struct nvs_swapper_opts *o)
{
	struct nvs_swapper *s = NULL;

	cr_assert_eq(nvs_swapper_create(o, &s), 0, "%s", nvs_last_error());
	return s;
}

static struct nvs_swapper *mk(unsigned count)
{
	struct nvs_swapper_opts o;

	opts(&o, count);
	return mk_with(&o);
}

/* auto_evict off: the caller evicts (others wait for it). */
static struct nvs_swapper *mk_manual(unsigned count)
{
	struct nvs_swapper_opts o;

	opts(&o, count);
	o.auto_evict = false;
	return mk_with(&o);
}

static enum nvs_tensor_state state(struct nvs_swapper *s, uint64_t id)
{
	struct nvs_tensor_info i;

	cr_assert_eq(nvs_swapper_info(s, id, &i), 0, "%s", nvs_last_error());
	return i.state;
}

static struct nvs_swap_stats stats(struct nvs_swapper *s)
{
	struct nvs_swap_stats st;

	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	return st;
}

/* Acquire @id and compare its @n bytes with @want. */
static void expect(struct nvs_swapper *s, uint64_t id, const void *want,
		   size_t n)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "id %llu: %s",
		     (unsigned long long)id, nvs_last_error());
	cr_assert(!memcmp(p, want, n), "tensor %llu differs",
		  (unsigned long long)id);
	cr_assert_eq(nvs_swapper_release(s, id, false), 0);
}

/* Acquire @id, overwrite it with pattern @seed, release dirty. */
static void modify(struct nvs_swapper *s, uint64_t id, void *ref, size_t n,
		   uint64_t seed)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	tu_fill(ref, n, seed);
	memcpy(p, ref, n);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
}

/* Acquire @id and release it dirty, unchanged. */
static void touch(struct nvs_swapper *s, uint64_t id)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
}

static unsigned count_swap_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, "swap.", 5);
	closedir(d);
	return n;
}

/* ------------------------------------------------------ transitions */

Test(swapper, register_with_data_starts_on_nvme_and_reads_back_exactly)
{
	struct nvs_swapper *s = mk(2);
	unsigned char *a = malloc(BUF);
	struct nvs_swap_stats st;

	tu_fill(a, BUF, 1);
	cr_assert_eq(nvs_swapper_register(s, 7, BUF, a), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(state(s, 7), NVS_TENSOR_ON_NVME);
	st = stats(s);
	cr_assert_eq(st.bytes_written, BUF);
	cr_assert_eq(st.buffers_in_use, 0, "registering holds no buffer");
	expect(s, 7, a, BUF);
	st = stats(s);
	cr_assert_eq(st.bytes_read, BUF);
	cr_assert_eq(st.reads, 1);
	cr_assert_eq(state(s, 7), NVS_TENSOR_RESIDENT);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_tensor_registered_without_data_reads_as_zeros_without_io)
{
	struct nvs_swapper *s = mk(2);
	unsigned char *zero = calloc(1, 1000);
	void *p;

	cr_assert_eq(nvs_swapper_register(s, 1, 1000, NULL), 0);
	/* Leave garbage in the pool buffer it will get. */
	cr_assert_eq(nvs_swapper_register(s, 2, BUF, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	memset(p, 0xAB, BUF);
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 2), 0);
	expect(s, 1, zero, 1000);
	struct nvs_swap_stats st = stats(s);
	cr_assert_eq(st.bytes_read, 0);
	cr_assert_eq(st.bytes_written, 0);
	cr_assert_eq(st.zero_fills, 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(zero);
}

Test(swapper, every_legal_transition_in_order)
{
	struct nvs_swapper *s = mk(2);
	unsigned char *a = malloc(BUF), *b = malloc(BUF);
	struct nvs_tensor_info info;
	void *p;

	tu_fill(a, BUF, 2);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, a), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	/* ON_NVME -> READING -> RESIDENT */
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_READING);
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0, "again: a no-op");
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(stats(s).prefetches, 1);
	/* RESIDENT: acquire, release dirty */
	modify(s, 1, b, BUF, 3);
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert(info.dirty);
	cr_assert_eq(info.acquired, 0);
	/* RESIDENT -> WRITING -> ON_NVME */
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_WRITING);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "again: a no-op");
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "ON_NVME: a no-op");
	/* ON_NVME -> (acquire) -> RESIDENT, clean evict: no write */
	expect(s, 1, b, BUF);
	cr_assert_eq(stats(s).bytes_written, 2 * BUF);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).bytes_written, 2 * BUF, "clean: no I/O");
	cr_assert_eq(stats(s).clean_evictions, 1);
	/* READING -> evict: waited for, then dropped */
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	/* WRITING -> prefetch: the buffer is kept, nothing is read */
	modify(s, 1, b, BUF, 4);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	uint64_t reads = stats(s).reads;
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(stats(s).revived, 1);
	cr_assert_eq(stats(s).reads, reads, "revived, not read back");
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert(!info.dirty, "written, so clean");
	/* WRITING -> acquire: the buffer at once, while the write goes on;
	 * kept when the write ends */
	modify(s, 1, b, BUF, 5);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	cr_assert(!memcmp(p, b, BUF));
	cr_assert_eq(state(s, 1), NVS_TENSOR_WRITING);
	cr_assert_eq(stats(s).write_hits, 1);
	/* nested acquires need as many releases */
	void *q;
	cr_assert_eq(nvs_swapper_acquire(s, 1, &q), 0);
	cr_assert_eq(p, q);
	cr_assert_eq(stats(s).write_hits, 2);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), -EBUSY);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(stats(s).revived, 2);
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert(!info.dirty, "written, and released clean since");
	/* WRITING, then evicted again: the earlier prefetch is cancelled */
	modify(s, 1, b, BUF, 6);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	expect(s, 1, b, BUF);
	cr_assert_eq(nvs_swapper_unregister(s, 1), 0);
	cr_assert_eq(nvs_swapper_info(s, 1, &info), -ENOENT);
	cr_assert_eq(stats(s).tensors, 0);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(b);
}

Test(swapper, illegal_calls_return_the_documented_errors)
{
	struct nvs_swapper *s = mk(2);
	struct nvs_tensor_info info;
	void *p = &p;

	cr_assert_eq(nvs_swapper_register(s, 1, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_register(s, 1, 100, NULL), -EEXIST);
	cr_assert_eq(nvs_swapper_register(s, 2, 0, NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_register(s, 2, BUF + 1, NULL), -EFBIG);
	cr_assert(strstr(nvs_last_error(), "65537"), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "65536"), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 1, false), -EBUSY,
		     "release without acquire");
	/* unknown ids */
	cr_assert_eq(nvs_swapper_prefetch(s, 9), -ENOENT);
	cr_assert_eq(nvs_swapper_acquire(s, 9, &p), -ENOENT);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "9"));
	cr_assert_eq(nvs_swapper_release(s, 9, true), -ENOENT);
	cr_assert_eq(nvs_swapper_evict(s, 9), -ENOENT);
	cr_assert_eq(nvs_swapper_wait(s, 9), -ENOENT);
	cr_assert_eq(nvs_swapper_unregister(s, 9), -ENOENT);
	cr_assert_eq(nvs_swapper_info(s, 9, &info), -ENOENT);
	/* acquired */
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), -EBUSY);
	cr_assert_eq(nvs_swapper_unregister(s, 1), -EBUSY);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), -EBUSY);
	/* NULLs */
	cr_assert_eq(nvs_swapper_acquire(s, 1, NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_acquire(NULL, 1, &p), -EINVAL);
	cr_assert_eq(nvs_swapper_register(NULL, 1, 1, NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_prefetch(NULL, 1), -EINVAL);
	cr_assert_eq(nvs_swapper_release(NULL, 1, false), -EINVAL);
	cr_assert_eq(nvs_swapper_evict(NULL, 1), -EINVAL);
	cr_assert_eq(nvs_swapper_wait(NULL, 1), -EINVAL);
	cr_assert_eq(nvs_swapper_wait_all(NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_unregister(NULL, 1), -EINVAL);
	cr_assert_eq(nvs_swapper_stats(NULL, NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_info(s, 1, NULL), -EINVAL);
	cr_assert_null(nvs_swapper_dir(s, 1));
	cr_assert_eq(nvs_swapper_destroy(NULL), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, bad_options_are_refused_and_leave_out_null)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (struct nvs_swapper *)&s;

	opts(&o, 2);
	o.npaths = 0;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert_null(s);
	opts(&o, 2);
	o.buffer_count = 0;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	opts(&o, 2);
	o.stripe_size = 1000;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	opts(&o, 2);
	o.name = "../x";
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	opts(&o, 2);
	o.nvme_paths[0] = "/nonexistent/nvme";
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "/nonexistent/nvme"));
	opts(&o, 2);
	o.size = 0;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert_eq(nvs_swapper_create(NULL, &s), -EINVAL);
	opts(&o, 2);
	cr_assert_eq(nvs_swapper_create(&o, NULL), -EINVAL);
}

/* ------------------------------------------------------------- data */

Test(swapper, odd_sized_tensors_keep_their_neighbours_intact)
{
	enum { N = 24 };
	struct nvs_swapper *s = mk(3);
	unsigned char *ref[N];
	size_t sz[N];

	for (unsigned i = 0; i < N; i++) {
		sz[i] = 1 + (i * 7919u) % BUF;
		ref[i] = malloc(sz[i]);
		tu_fill(ref[i], sz[i], 100 + i);
		cr_assert_eq(nvs_swapper_register(s, i, sz[i],
						  i % 2 ? ref[i] : NULL),
			     0, "%s", nvs_last_error());
		if (i % 2 == 0)
			memset(ref[i], 0, sz[i]);
	}
	for (unsigned round = 0; round < 3; round++)
		for (unsigned i = 0; i < N; i++) {
			if ((i + round) % 3 == 0)
				modify(s, i, ref[i], sz[i], round * 1000 + i);
			else
				expect(s, i, ref[i], sz[i]);
			cr_assert_eq(nvs_swapper_evict(s, i), 0, "%s",
				     nvs_last_error());
		}
	cr_assert_eq(nvs_swapper_wait_all(s), 0, "%s", nvs_last_error());
	for (unsigned i = 0; i < N; i++) {
		expect(s, i, ref[i], sz[i]);
		cr_assert_eq(nvs_swapper_evict(s, i), 0);
		free(ref[i]);
	}
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* Two paths (tu_dir's d0 and d1, made if missing), 2 buffers of 8 x BUF,
 * stripes of BUF. */
static void striped_opts(struct nvs_swapper_opts *o)
{
	static char p0[4200], p1[4200];

	snprintf(p0, sizeof(p0), "%s/d0", tu_dir());
	snprintf(p1, sizeof(p1), "%s/d1", tu_dir());
	cr_assert(mkdir(p0, 0700) == 0 || errno == EEXIST);
	cr_assert(mkdir(p1, 0700) == 0 || errno == EEXIST);
	opts(o, 2);
	o->npaths = 2;
	o->nvme_paths[0] = p0;
	o->nvme_paths[1] = p1;
	o->buffer_size = 8 * BUF;
	o->stripe_size = BUF;
}

/* Hostile input 11: a caller that does not use the config gives one
 * directory twice: create names both spellings instead of refusing the
 * directory as in use by its own process. */
Test(swapper, the_same_directory_twice_is_refused_naming_both_spellings)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (struct nvs_swapper *)&o;
	char slash[4300], want[9000];

	striped_opts(&o);
	snprintf(slash, sizeof(slash), "%s/", o.nvme_paths[0]);
	o.nvme_paths[1] = slash;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert_null(s);
	snprintf(want, sizeof(want),
		 "nvme_paths[0] '%s' and nvme_paths[1] '%s' are the same "
		 "directory",
		 o.nvme_paths[0], slash);
	cr_assert(strstr(nvs_last_error(), want), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_create"));
}

Test(swapper, large_tensors_stripe_over_two_paths_and_small_ones_balance)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	struct nvs_tensor_info info;
	size_t big = 5 * BUF + 1000;
	unsigned char *a = malloc(big), *b = malloc(big);

	striped_opts(&o);
	s = mk_with(&o);
	char want[4300];
	snprintf(want, sizeof(want), "%s/nvswap/rank0", o.nvme_paths[1]);
	cr_assert_str_eq(nvs_swapper_dir(s, 1), want);
	tu_fill(a, big, 9);
	cr_assert_eq(nvs_swapper_register(s, 1, big, a), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert_eq(info.extents, 6);
	struct nvs_swap_stats st = stats(s);
	cr_assert_eq(st.npaths, 2);
	cr_assert_eq(st.path_bytes_written[0], 3 * BUF);
	cr_assert_eq(st.path_bytes_written[1], 2 * BUF + 1000);
	/* Small ones go whole to the least-filled path: 1 first. */
	cr_assert_eq(nvs_swapper_register(s, 2, 4096, a), 0);
	st = stats(s);
	cr_assert_eq(st.path_bytes_written[1], 2 * BUF + 1000 + 4096);
	expect(s, 1, a, big);
	modify(s, 1, b, big, 10);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	expect(s, 1, b, big);
	expect(s, 2, a, 4096);
	st = stats(s);
	cr_assert_eq(st.path_bytes_read[0], 6 * BUF, "%llu %llu",
		     (unsigned long long)st.path_bytes_read[0],
		     (unsigned long long)st.path_bytes_read[1]);
	cr_assert_eq(st.path_bytes_read[1], 4 * BUF + 2000 + 4096);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(b);
}

Test(swapper, unregistered_space_is_reused)
{
	struct nvs_swapper *s = mk(2);
	unsigned char *a = malloc(BUF);

	tu_fill(a, BUF, 4);
	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(nvs_swapper_register(s, i, BUF, a), 0);
	uint64_t size = stats(s).path_file_size[0];
	cr_assert_eq(size, 4 * BUF);
	cr_assert_eq(nvs_swapper_unregister(s, 1), 0);
	cr_assert_eq(stats(s).path_space_used[0], 3 * BUF);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF - 100, a), 0);
	cr_assert_eq(stats(s).path_file_size[0], size, "the hole is reused");
	expect(s, 1, a, BUF - 100);
	expect(s, 2, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* ------------------------------------------------------------- pool */

Test(swapper, an_acquire_that_can_never_succeed_is_edeadlk)
{
	struct nvs_swapper *s = mk(2);
	void *p;

	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -EDEADLK);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "held by acquires"));
	cr_assert_eq(nvs_swapper_prefetch(s, 2), -EDEADLK);
	cr_assert_eq(state(s, 2), NVS_TENSOR_ON_NVME);
	cr_assert_eq(nvs_swapper_release(s, 0, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	cr_assert_eq(stats(s).pool_high_water, 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, auto_evict_drops_clean_tensors_before_dirty_ones)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	unsigned char *ref[8];
	void *p;

	opts(&o, 2);
	o.auto_evict = true;
	s = mk_with(&o);
	for (unsigned i = 0; i < 8; i++) {
		ref[i] = malloc(BUF);
		tu_fill(ref[i], BUF, 50 + i);
		cr_assert_eq(nvs_swapper_register(s, i, BUF, ref[i]), 0);
	}
	modify(s, 0, ref[0], BUF, 60); /* dirty, released first */
	expect(s, 1, ref[1], BUF);     /* clean, released later */
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME, "the clean one went");
	cr_assert_eq(state(s, 0), NVS_TENSOR_RESIDENT, "the dirty one stays");
	cr_assert_eq(nvs_swapper_release(s, 2, true), 0);
	/* Only dirty tensors left: the least recently released goes. */
	cr_assert_eq(nvs_swapper_acquire(s, 3, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 3, false), 0);
	cr_assert_neq(state(s, 0), NVS_TENSOR_RESIDENT);
	cr_assert_eq(state(s, 2), NVS_TENSOR_RESIDENT);
	/* Many times the pool, no evict calls: every byte survives. */
	for (unsigned round = 0; round < 3; round++)
		for (unsigned i = 0; i < 8; i++) {
			if ((i + round) % 2)
				modify(s, i, ref[i], BUF, round * 10 + i);
			else
				expect(s, i, ref[i], BUF);
		}
	for (unsigned i = 0; i < 8; i++) {
		expect(s, i, ref[i], BUF);
		free(ref[i]);
	}
	struct nvs_swap_stats st = stats(s);
	cr_assert_gt(st.auto_evictions, 10);
	cr_assert_eq(st.pool_high_water, 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, without_auto_evict_a_full_pool_times_out_after_wait_ms)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	void *p;

	opts(&o, 1);
	o.auto_evict = false;
	o.wait_ms = 50;
	s = mk_with(&o);
	cr_assert_eq(nvs_swapper_register(s, 1, 10, NULL), 0);
	cr_assert_eq(nvs_swapper_register(s, 2, 10, NULL), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -ETIMEDOUT);
	cr_assert(strstr(nvs_last_error(), "auto_evict"));
	cr_assert_eq(stats(s).buffer_waits > 0, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

struct evictor {
	struct nvs_swapper *s;
	uint64_t id;
	int ret;
};

static void *evict_later(void *arg)
{
	struct evictor *e = arg;
	struct timespec d = {0, 50 * 1000 * 1000};

	nanosleep(&d, NULL);
	e->ret = nvs_swapper_evict(e->s, e->id);
	return NULL;
}

Test(swapper, a_full_pool_waits_for_another_threads_eviction)
{
	struct nvs_swapper *s = mk_manual(1);
	struct evictor e = {.s = s, .id = 1, .ret = 1};
	unsigned char *a = malloc(BUF);
	pthread_t th;
	void *p;

	tu_fill(a, BUF, 5);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0);
	cr_assert_eq(nvs_swapper_register(s, 2, BUF, a), 0);
	touch(s, 1); /* resident, released, dirty */
	cr_assert_eq(pthread_create(&th, NULL, evict_later, &e), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	pthread_join(th, NULL);
	cr_assert_eq(e.ret, 0);
	cr_assert(!memcmp(p, a, BUF));
	struct nvs_swap_stats st = stats(s);
	cr_assert_eq(st.buffer_waits > 0, true);
	cr_assert_gt(st.acquire_wait_ns, 10 * 1000 * 1000);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* ----------------------------------------------------- integrity, faults */

Test(swapper, a_corrupted_swap_file_is_ebadmsg_and_never_handed_out)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	unsigned char *a = malloc(BUF), *junk = malloc(BUF), *keep;
	char file[4300];
	void *p = &p;
	int fd;

	opts(&o, 2);
	o.checksum = true;
	s = mk_with(&o);
	tu_fill(a, BUF, 11);
	cr_assert_eq(nvs_swapper_register(s, 42, BUF, a), 0);
	expect(s, 42, a, BUF);
	cr_assert_eq(nvs_swapper_evict(s, 42), 0);
	snprintf(file, sizeof(file), "%s/swap.0", nvs_swapper_dir(s, 0));
	fd = open(file, O_RDWR);
	cr_assert_geq(fd, 0);
	keep = malloc(BUF);
	cr_assert_eq(pread(fd, keep, BUF, 0), BUF);
	memcpy(junk, keep, BUF);
	junk[12345] ^= 0x01; /* one bit */
	cr_assert_eq(pwrite(fd, junk, BUF, 0), BUF);
	fsync(fd);
	cr_assert_eq(nvs_swapper_acquire(s, 42, &p), -EBADMSG);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "tensor 42"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), file), "%s", nvs_last_error());
	cr_assert_eq(state(s, 42), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).checksum_errors, 1);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	/* Repaired, it reads again. */
	cr_assert_eq(pwrite(fd, keep, BUF, 0), BUF);
	fsync(fd);
	close(fd);
	expect(s, 42, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(junk);
	free(keep);
}

/* Hostile input 12: a swap file truncated behind the swapper's back is an
 * I/O error of the swapper's, naming the tensor and the file, not a bare
 * -EINVAL about a file end; the tensor stays on disk, readable once the
 * file is whole again. */
Test(swapper, a_truncated_swap_file_is_eio_naming_the_tensor_and_the_file)
{
	struct nvs_swapper *s = mk(2);
	unsigned char *a = malloc(BUF), *keep = malloc(BUF);
	char file[4300];
	void *p = &p;
	int fd;

	tu_fill(a, BUF, 12);
	cr_assert_eq(nvs_swapper_register(s, 7, BUF, a), 0);
	cr_assert_eq(nvs_swapper_evict(s, 7), 0);
	cr_assert_eq(nvs_swapper_wait(s, 7), 0);
	snprintf(file, sizeof(file), "%s/swap.0", nvs_swapper_dir(s, 0));
	fd = open(file, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, keep, BUF, 0), BUF);
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 7, &p), -EIO, "%s",
		     nvs_last_error());
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "tensor 7"), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), file), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "truncated"), "%s",
		  nvs_last_error());
	cr_assert_eq(state(s, 7), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(pwrite(fd, keep, BUF, 0), BUF);
	close(fd);
	expect(s, 7, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(keep);
}

/* A swapper whose @nth I/O attempt (reads and writes counted together)
 * fails with @kind when it is an @opcode. */
/* A swapper (auto_evict as given) whose first @nth-th @opcode request
 * fails with @kind. */
static struct nvs_swapper *mk_fault_evict(enum nvs_fault_kind kind, int opcode,
					  unsigned long nth, bool auto_evict)
{
	struct nvs_fault_plan plan = {
		.rules = {{.kind = kind,
			   .nth = nth,
			   .count = 1,
			   .opcode = opcode}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	opts(&o, 2);
	o.checksum = true;
	o.auto_evict = auto_evict;
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0, "%s",
		     nvs_last_error());
	return s;
}

static struct nvs_swapper *mk_fault(enum nvs_fault_kind kind, int opcode,
				    unsigned long nth)
{
	return mk_fault_evict(kind, opcode, nth, true);
}

Test(swapper, a_full_disk_on_write_back_keeps_the_tensor_resident_and_dirty)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_ENOSPC, NVS_IOREQ_WRITE, 1);
	unsigned char *a = malloc(BUF);
	struct nvs_tensor_info info;

	cr_assert_eq(nvs_swapper_register(s, 3, BUF, NULL), 0);
	modify(s, 3, a, BUF, 12);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0, "queued");
	cr_assert_eq(nvs_swapper_wait(s, 3), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "swap.0"), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 3), 0, "reported once");
	cr_assert_eq(nvs_swapper_info(s, 3, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty);
	cr_assert_eq(stats(s).io_errors, 1);
	/* Nothing lost: the data is still there, and a retry writes it. */
	expect(s, 3, a, BUF);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_wait(s, 3), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 3), NVS_TENSOR_ON_NVME);
	expect(s, 3, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* A private mount namespace with a 1 MiB tmpfs: a real full disk. */
static const char *small_fs(void)
{
	const char *mnt = tu_path("mnt");

	return tu_mount_private(mnt, "tmpfs", 0, "size=1m") ? mnt : NULL;
}

Test(swapper, a_really_full_disk_loses_nothing_and_unregistering_frees_it)
{
	enum { T = 6, SZ = 256 << 10 };
	const char *mnt = small_fs();
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	struct nvs_tensor_info info;
	unsigned char *ref[T];
	int ret = 0;
	unsigned i;

	if (!mnt)
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	opts(&o, 2);
	o.nvme_paths[0] = mnt;
	o.buffer_size = SZ;
	s = mk_with(&o);
	/* 6 x 256 KiB on a 1 MiB disk: placing is free (the file is
	 * sparse), writing them is not. */
	for (i = 0; i < T; i++) {
		ref[i] = malloc(SZ);
		cr_assert_eq(nvs_swapper_register(s, i, SZ, NULL), 0);
	}
	for (i = 0; i < T; i++) {
		modify(s, i, ref[i], SZ, 200 + i);
		cr_assert_eq(nvs_swapper_evict(s, i), 0, "%s",
			     nvs_last_error());
		ret = nvs_swapper_wait(s, i);
		if (ret < 0)
			break;
	}
	cr_assert_eq(ret, -ENOSPC, "tensor %u: %d %s", i, ret,
		     nvs_last_error());
	cr_assert_lt(i, T);
	cr_assert(strstr(nvs_last_error(), mnt), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, i, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty, "nothing lost: still resident, still dirty");
	expect(s, i, ref[i], SZ);
	/* Freeing an earlier tensor gives its blocks back to the disk; the
	 * retry then succeeds and every byte reads back. */
	cr_assert_eq(nvs_swapper_unregister(s, 0), 0);
	cr_assert_eq(nvs_swapper_evict(s, i), 0);
	cr_assert_eq(nvs_swapper_wait(s, i), 0, "%s", nvs_last_error());
	for (unsigned k = 1; k <= i; k++) {
		expect(s, k, ref[k], SZ);
		cr_assert_eq(nvs_swapper_evict(s, k), 0);
	}
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	for (i = 0; i < T; i++)
		free(ref[i]);
}

Test(swapper, a_failed_write_back_is_reported_by_wait_all_and_destroy)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_WRITE, 1);
	unsigned char *a = malloc(BUF);

	cr_assert_eq(nvs_swapper_register(s, 3, BUF, NULL), 0);
	modify(s, 3, a, BUF, 13);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), -EIO);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(state(s, 3), NVS_TENSOR_RESIDENT);
	free(a);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_WRITE, 1);
	cr_assert_eq(nvs_swapper_register(s, 3, 100, NULL), 0);
	a = malloc(100);
	modify(s, 3, a, 100, 14);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_destroy(s), -EIO, "never silent");
	free(a);
}

Test(swapper, a_failed_register_write_leaves_nothing_registered)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_ENOSPC, NVS_IOREQ_WRITE, 1);
	unsigned char *a = malloc(BUF);
	struct nvs_tensor_info info;

	tu_fill(a, BUF, 15);
	cr_assert_eq(nvs_swapper_register(s, 5, BUF, a), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "not registered"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 5, &info), -ENOENT);
	cr_assert_eq(stats(s).path_space_used[0], 0);
	cr_assert_eq(nvs_swapper_register(s, 5, BUF, a), 0);
	expect(s, 5, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_failed_read_leaves_the_tensor_on_nvme_and_retryable)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_READ, 2);
	unsigned char *a = malloc(BUF);
	void *p = &p;

	tu_fill(a, BUF, 16);
	cr_assert_eq(nvs_swapper_register(s, 8, BUF, a), 0);
	int r = nvs_swapper_acquire(s, 8, &p);
	cr_assert_eq(r, -EIO, "%d %s", r, nvs_last_error());
	cr_assert_null(p);
	cr_assert_eq(state(s, 8), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	expect(s, 8, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_READ, 2);
	cr_assert_eq(nvs_swapper_register(s, 8, BUF, a), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 8), 0, "fails later");
	cr_assert_eq(nvs_swapper_wait(s, 8), -EIO);
	cr_assert_eq(state(s, 8), NVS_TENSOR_ON_NVME);
	cr_assert_eq(nvs_swapper_prefetch(s, 8), 0, "retry");
	expect(s, 8, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* A swapper over two paths, a tensor of 5 x BUF + 1000 bytes striped in
 * 6 extents, whose handle refuses its @nth submit (counting every
 * nvs_aio_submit of the swapper, reads and writes) with -@err: the
 * submit-time failures (no op slot, no space to preallocate) that
 * happen after some extents of a tensor were queued. */
enum { BIG = 5 * BUF + 1000 };

static struct nvs_swapper *mk_refusing(unsigned long nth, int opcode, int err)
{
	struct nvs_fault_plan plan = {
		.rules = {{.kind = NVS_FAULT_REFUSE,
			   .nth = nth,
			   .count = 1,
			   .opcode = opcode,
			   .refuse_err = err}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	striped_opts(&o);
	o.checksum = true;
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0, "%s",
		     nvs_last_error());
	return s;
}

/* The extents queued before the refusal were waited for and collected
 * before the call returned: the buffer (or the caller's memory) is free
 * to change and the space to reuse. */
static void all_collected(struct nvs_swapper *s)
{
	cr_assert_eq(nvs_aio_wait(nvs__swapper_aio(s)), 0,
		     "the swapper left ops of the failed call in the handle");
}

Test(swapper,
     a_register_refused_midway_waits_for_the_rest_and_registers_nothing)
{
	struct nvs_swapper *s = mk_refusing(3, NVS_IOREQ_WRITE, ENOSPC);
	unsigned char *a = malloc(BIG);
	struct nvs_tensor_info info;

	tu_fill(a, BIG, 31);
	/* Extents 1 and 2 are queued, the third is refused. */
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "not registered"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &info), -ENOENT);
	cr_assert_eq(stats(s).path_space_used[0], 0);
	cr_assert_eq(stats(s).path_space_used[1], 0);
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(nvs_swapper_wait_all(s), 0, "nothing left in flight");
	/* The retry (submits 7-12) writes all of it. */
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert_eq(info.extents, 6);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_write_back_refused_midway_keeps_the_tensor_resident_and_dirty)
{
	struct nvs_swapper *s = mk_refusing(4, NVS_IOREQ_WRITE, EAGAIN);
	unsigned char *a = malloc(BIG);
	struct nvs_tensor_info info;

	cr_assert_eq(nvs_swapper_register(s, 1, BIG, NULL), 0);
	modify(s, 1, a, BIG, 32);
	/* Extents 1-3 are queued, the fourth is refused: evict says so at
	 * once, after the three queued ones have finished. */
	cr_assert_eq(nvs_swapper_evict(s, 1), -EAGAIN);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty, "nothing lost: resident and dirty");
	cr_assert_eq(info.acquired, 0);
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(stats(s).buffers_in_use, 1, "the data keeps its buffer");
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	expect(s, 1, a, BIG);
	/* The retry writes it; it reads back after a real round trip. */
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_read_refused_midway_leaves_the_tensor_on_nvme_and_retryable)
{
	/* Submits 1-6 register it; 7 and 8 are queued reads, 9 refused. */
	struct nvs_swapper *s = mk_refusing(9, NVS_IOREQ_READ, EAGAIN);
	unsigned char *a = malloc(BIG);
	void *p = &p;

	tu_fill(a, BIG, 33);
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 1), -EAGAIN);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0, "the buffer went back");
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	/* The same through acquire: the error, no pointer. */
	s = mk_refusing(9, NVS_IOREQ_READ, ENOMEM);
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), -ENOMEM);
	cr_assert_null(p);
	all_collected(s);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* --------------------------------------------------- files, processes */

Test(swapper, destroy_removes_the_scratch_files_and_directory)
{
	struct nvs_swapper *s = mk(2);
	char dir[4200];
	struct stat st;

	snprintf(dir, sizeof(dir), "%s", nvs_swapper_dir(s, 0));
	cr_assert_eq(stat(dir, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	cr_assert_eq(count_swap_files(dir), 1);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0);
	touch(s, 1);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "in flight at destroy");
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(stat(dir, &st), -1);
}

Test(swapper, a_second_swapper_on_the_same_rank_is_ebusy_unless_named)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *a = mk(1), *b = (struct nvs_swapper *)&b;

	opts(&o, 1);
	cr_assert_eq(nvs_swapper_create(&o, &b), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "in use by process"));
	o.name = "optimizer";
	b = mk_with(&o);
	o.rank = 1;
	o.name = NULL;
	struct nvs_swapper *c = mk_with(&o);
	cr_assert_eq(nvs_swapper_destroy(c), 0);
	cr_assert_eq(nvs_swapper_destroy(b), 0);
	cr_assert_eq(nvs_swapper_destroy(a), 0);
}

Test(swapper, files_of_a_killed_process_are_reclaimed_at_the_next_start)
{
	int ready[2];
	char c;
	pid_t pid;

	char file[4300];
	snprintf(file, sizeof(file), "%s/nvswap/rank0/swap.0", tu_dir());
	cr_assert_eq(pipe(ready), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct nvs_swapper_opts o;
		struct nvs_swapper *s;
		opts(&o, 1);
		if (nvs_swapper_create(&o, &s) < 0 ||
		    nvs_swapper_register(s, 1, BUF, NULL) < 0 ||
		    nvs_swapper_register(s, 2, BUF, NULL) < 0)
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	ssize_t got = read(ready[0], &c, 1);
	off_t size = tu_file_size(file);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ready[0]);
	cr_assert_eq(got, 1, "the child set up");
	cr_assert_eq(size, 2 * BUF, "the child's swap file");

	struct nvs_swapper *s = mk(1);
	cr_assert_eq(tu_file_size(file), 0, "a fresh swap file");
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(tu_file_size(file), -1);
}

/* The calls the allocation test fails in turn; 0 or the first error. */
static int alloc_run(const struct nvs_swapper_opts *o, const void *a,
		     struct nvs_swapper **s)
{
	int ret = nvs_swapper_create(o, s);

	for (uint64_t id = 0; id < 40 && ret == 0; id++)
		ret = nvs_swapper_register(*s, id, 1000, a);
	if (ret == 0)
		ret = nvs_swapper_unregister(*s, 3);
	return ret;
}

Test(swapper, every_failed_allocation_is_enomem_and_leaks_nothing)
{
	struct nvs_swapper_opts o;
	unsigned char *a = malloc(1000);
	struct nvs_swapper *s = NULL;
	unsigned long total, failed = 0;

	opts(&o, 2);
	o.aio.backend = NVS_BACKEND_PSYNC; /* the same allocations each run */
	tu_fill(a, 1000, 17);
	nvs__alloc_fail_at(0);
	cr_assert_eq(alloc_run(&o, a, &s), 0, "%s", nvs_last_error());
	total = nvs__alloc_fail_at(0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_gt(total, 40, "a tensor each, and the table");
	for (unsigned long n = 1; n <= total; n++) {
		int ret;
		s = NULL;
		nvs__alloc_fail_at(n);
		ret = alloc_run(&o, a, &s);
		nvs__alloc_fail_at(0);
		if (ret < 0) {
			failed++;
			cr_assert_eq(ret, -ENOMEM, "allocation %lu: %d %s", n,
				     ret, nvs_last_error());
		}
		if (s) {
			/* What was registered is intact. */
			struct nvs_tensor_info info;
			if (nvs_swapper_info(s, 0, &info) == 0)
				expect(s, 0, a, 1000);
			cr_assert_eq(nvs_swapper_destroy(s), 0);
		}
	}
	cr_assert_gt(failed, 40, "%lu of %lu", failed, total);
	free(a);
}

Test(swapper, param_and_optimizer_swappers_from_one_config_share_a_path)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_swapper_opts o;
	struct nvs_swapper *p, *q;
	unsigned char *a = malloc(8000);

	snprintf(json, sizeof(json),
		 "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": "
		 "3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
		 "\"%s\", \"buffer_count\": 2, \"buffer_size\": 4000}, "
		 "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
		 "\"%s\", \"buffer_count\": 2, \"buffer_size\": 2000, "
		 "\"fast_init\": false}}, \"aio\": {\"queue_depth\": 4}}",
		 tu_dir(), tu_dir());
	cr_assert_eq(nvs_config_load_string(json, "ds.json", &c), 0, "%s",
		     nvs_last_error());
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o), 0);
	p = mk_with(&o);
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_OPTIMIZER, 0, &o),
		     0);
	q = mk_with(&o);
	cr_assert(strstr(nvs_swapper_dir(p, 0), "/nvswap/param/rank0"));
	cr_assert(strstr(nvs_swapper_dir(q, 0), "/nvswap/optimizer/rank0"));
	cr_assert_eq(stats(p).buffer_size, 8192, "4000 fp16, rounded");
	cr_assert_eq(stats(q).buffer_size, 8192, "2000 fp32, rounded");
	tu_fill(a, 8000, 18);
	cr_assert_eq(nvs_swapper_register(p, 1, 8000, a), 0);
	cr_assert_eq(nvs_swapper_register(q, 1, 8001, a), -EFBIG);
	cr_assert_eq(nvs_swapper_register(q, 1, 7999, a + 1), 0);
	expect(p, 1, a, 8000);
	expect(q, 1, a + 1, 7999);
	cr_assert_eq(nvs_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(q), 0);
	nvs_config_free(c);
	free(a);
}

Test(swapper, try_prefetch_takes_a_free_or_written_back_buffer_or_says_eagain)
{
	struct nvs_swapper *s = mk(2);
	void *p;

	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	cr_assert_eq(nvs_swapper_try_prefetch(s, 0), 0);
	cr_assert_eq(nvs_swapper_try_prefetch(s, 1), 0);
	cr_assert_eq(nvs_swapper_try_prefetch(s, 2), -EAGAIN);
	cr_assert(strstr(nvs_last_error(), "no free pool buffer"));
	cr_assert_eq(state(s, 2), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffer_waits, 0, "it did not wait");
	cr_assert_eq(nvs_swapper_try_prefetch(s, 9), -ENOENT);
	/* A write-back that has ended gives its buffer to the next try. */
	touch(s, 0);
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	struct timespec d = {0, 20 * 1000 * 1000};
	while (state(s, 0) == NVS_TENSOR_WRITING) {
		if (nvs_swapper_try_prefetch(s, 2) == 0)
			break;
		nanosleep(&d, NULL);
	}
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	cr_assert_eq(state(s, 0), NVS_TENSOR_ON_NVME);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, ten_thousand_swap_cycles_allocate_nothing_and_lock_no_more)
{
	struct nvs_swapper *s = mk(4);
	struct nvs_pinned_stats before, after;
	unsigned long allocs;
	void *p;

	for (unsigned i = 0; i < 8; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 4096 + i * 100, NULL),
			     0);
	/* One round first: tables and caches reach their size. */
	for (unsigned i = 0; i < 8; i++) {
		touch(s, i);
		cr_assert_eq(nvs_swapper_evict(s, i), 0);
	}
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(nvs_pinned_stats(&before), 0);
	nvs__alloc_fail_at(0);
	for (unsigned c = 0; c < 10000; c++) {
		uint64_t id = c % 8;
		cr_assert_eq(nvs_swapper_prefetch(s, (id + 1) % 8), 0);
		cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s",
			     nvs_last_error());
		((unsigned char *)p)[c % 4096]++;
		cr_assert_eq(nvs_swapper_release(s, id, c % 3 != 0), 0);
		cr_assert_eq(nvs_swapper_evict(s, id), 0);
	}
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	allocs = nvs__alloc_fail_at(0);
	cr_assert_eq(nvs_pinned_stats(&after), 0);
	cr_assert_eq(allocs, 0, "%lu allocations on the swap path", allocs);
	cr_assert_eq(after.bytes_locked, before.bytes_locked);
	cr_assert_eq(after.bytes_in_use, before.bytes_in_use);
	cr_assert_eq(stats(s).pool_high_water, 4);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper, a_buffer_held_by_a_failed_write_back_is_an_error_not_a_wait)
{
	/* Without auto_evict (with it, tensor 1 would be written back). */
	struct nvs_swapper *s =
		mk_fault_evict(NVS_FAULT_ENOSPC, NVS_IOREQ_WRITE, 1, false);
	void *p = &p;

	/* Both buffers (mk_fault's pool) held by dirty tensors, one of them
	 * after a failed write-back: only the caller can free it, and a
	 * single-threaded caller must hear why instead of waiting forever. */
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	touch(s, 0);
	touch(s, 1);
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -ENOSPC);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "tensor 0 holds one"), "%s",
		  nvs_last_error());
	cr_assert_eq(state(s, 0), NVS_TENSOR_RESIDENT, "nothing lost");
	cr_assert_eq(nvs_swapper_wait(s, 0), -ENOSPC, "still reported");
	/* The disk has room again (the fault was one write): evict, go on. */
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper,
     auto_evict_on_a_disk_that_refuses_every_write_stops_with_the_error)
{
	struct nvs_fault_plan plan = {
		.rules = {{.kind = NVS_FAULT_ENOSPC,
			   .nth = 1,
			   .count = 0,
			   .opcode = NVS_IOREQ_WRITE}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	void *p;

	opts(&o, 2);
	o.auto_evict = true;
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	touch(s, 0);
	touch(s, 1);
	/* Each dirty tensor is tried once, then the error comes back:
	 * no endless rewriting of the same tensors. */
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "write-back failed"), "%s",
		  nvs_last_error());
	cr_assert_eq(stats(s).io_errors, 2);
	cr_assert_eq(state(s, 0), NVS_TENSOR_RESIDENT);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(nvs_swapper_destroy(s), -ENOSPC, "never silent");
}
