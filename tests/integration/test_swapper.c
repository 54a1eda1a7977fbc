// SPDX-License-Identifier: MIT
/*
 * The swap manager on real swap files: every legal and illegal state
 * transition, data read back byte for byte (odd sizes, striping over two
 * paths), pool exhaustion (-EDEADLK, automatic eviction, waiting for
 * another thread, try_prefetch), and a long swap loop that allocates
 * nothing. Checksums, injected faults and full disks are in
 * test_swapper_faults.c; scratch files, processes and failed allocations
 * in test_swapper_files.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/buffers.h"
#include "nvswap/swapper.h"
#include "tu_swapper_cases.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(swapper, .fini = fini);

/* auto_evict off: the caller evicts (others wait for it). */
static struct nvs_swapper *mk_manual(unsigned count)
{
	struct nvs_swapper_opts o;

	opts(&o, count);
	o.auto_evict = false;
	return mk_with(&o);
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

/* nvs_swapper_acquire_blank(): a buffer as it is for a tensor the caller
 * fills whole: a never-written one is not zero-filled (the bytes another
 * tensor left are there), a written one is not read; a release without
 * dirty gives the buffer back and the tensor is as it was. A resident
 * tensor is handed out with its data, one being read is waited for. */
Test(swapper, acquire_blank_neither_reads_nor_zero_fills_and_can_be_undone)
{
	struct nvs_swapper *s = mk(1);
	static unsigned char ref[BUF], got[BUF];
	struct nvs_swap_stats a, b;
	void *p;

	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0);
	cr_assert_eq(nvs_swapper_register(s, 2, BUF, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	memset(p, 0xAB, BUF);
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 2), 0);
	a = stats(s);
	cr_assert_eq(nvs_swapper_acquire_blank(s, 1, &p), 0, "%s",
		     nvs_last_error());
	b = stats(s);
	cr_assert_eq(((unsigned char *)p)[0], 0xAB, "not zero-filled");
	cr_assert_eq(((unsigned char *)p)[BUF - 1], 0xAB);
	cr_assert_eq(b.zero_fills, a.zero_fills);
	cr_assert_eq(b.acquires, a.acquires + 1);
	tu_fill(ref, BUF, 41);
	memcpy(p, ref, BUF);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(stats(s).bytes_written, BUF, "written at eviction");
	/* written, on NVMe: no read; released clean, it is as it was */
	a = stats(s);
	cr_assert_eq(nvs_swapper_acquire_blank(s, 1, &p), 0);
	cr_assert_eq(stats(s).bytes_read, a.bytes_read, "no read");
	memset(p, 0x5C, BUF);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME, "the buffer given back");
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(nvs_swapper_read(s, 1, got, BUF), 0);
	cr_assert(!memcmp(got, ref, BUF), "the undone fill left no trace");
	/* filled and released dirty: the new bytes, without a read */
	a = stats(s);
	cr_assert_eq(nvs_swapper_acquire_blank(s, 1, &p), 0);
	tu_fill(ref, BUF, 42);
	memcpy(p, ref, BUF);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	/* resident: its data, as acquire */
	cr_assert_eq(nvs_swapper_acquire_blank(s, 1, &p), 0);
	cr_assert(!memcmp(p, ref, BUF));
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT, "still its data");
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(stats(s).bytes_read, a.bytes_read);
	/* being read: waited for, its data handed out */
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0);
	cr_assert_eq(nvs_swapper_acquire_blank(s, 1, &p), 0);
	cr_assert(!memcmp(p, ref, BUF), "the read ahead's bytes");
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(nvs_swapper_acquire_blank(s, 9, &p), -ENOENT);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_acquire_blank"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* nvs_swapper_read(): a tensor's bytes as they stand, its state kept: a
 * resident one changed and not written (from its buffer, no I/O), one on
 * NVMe (read, counted, still on NVMe, no buffer taken). */
Test(swapper, read_copies_a_tensor_out_and_leaves_it_as_it_was)
{
	struct nvs_swapper *s = mk_manual(2);
	unsigned char *a = malloc(BUF), *b = malloc(BUF), *out = malloc(BUF);
	struct nvs_swap_stats st;
	void *p;

	tu_fill(a, BUF, 3);
	tu_fill(b, BUF, 4);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, a), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	memcpy(p, b, BUF);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	st = stats(s);
	cr_assert_eq(nvs_swapper_read(s, 1, out, BUF), 0, "%s",
		     nvs_last_error());
	cr_assert(memcmp(out, b, BUF) == 0, "the resident, unwritten bytes");
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(stats(s).bytes_read, st.bytes_read);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	memset(out, 0, BUF);
	st = stats(s);
	cr_assert_eq(nvs_swapper_read(s, 1, out, BUF), 0, "%s",
		     nvs_last_error());
	cr_assert(memcmp(out, b, BUF) == 0, "the bytes written back");
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).bytes_read, st.bytes_read + BUF);
	cr_assert_eq(stats(s).reads, st.reads + 1);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(b);
	free(out);
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
	tu_write_file(tu_path("file"), "x", 1);
	o.nvme_paths[0] = tu_path("file/nvme");
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOTDIR);
	cr_assert(strstr(nvs_last_error(), tu_path("file")));
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
