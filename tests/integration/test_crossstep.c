// SPDX-License-Identifier: MIT
/*
 * Training steps back to back on real swap files. The swapper: an acquire
 * of a tensor whose write-back is in flight gets its buffer at once, and
 * changes made meanwhile are written again.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "aio/engine.h"
#include "nvswap/swapper.h"
#include "swapper/swapper.h"
#include "tu_swapper.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(crossstep, .fini = fini);

enum { BUF = 32 << 10, SZ = 20000 }; /* SZ: not a multiple of 4096 */

/* A swapper on tu_dir() with @count buffers of BUF (automatic eviction
 * off: waits of 100 ms); @plan non-NULL: over the fault backend. */
static struct nvs_swapper *mk_with(unsigned count, bool checksum,
				   bool auto_evict,
				   const struct nvs_fault_plan *plan)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	tu_swapper_opts(&o, BUF, count);
	o.checksum = checksum;
	o.auto_evict = auto_evict;
	o.wait_ms = auto_evict ? 0 : 100;
	cr_assert_eq(plan ? nvs__swapper_create_fault(&o, plan, &s)
			  : nvs_swapper_create(&o, &s),
		     0, "%s", nvs_last_error());
	return s;
}

static struct nvs_swapper *mk(unsigned count, bool checksum)
{
	return mk_with(count, checksum, true, NULL);
}

static struct nvs_swap_stats stats(struct nvs_swapper *s)
{
	struct nvs_swap_stats st;

	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	return st;
}

static struct nvs_tensor_info info(struct nvs_swapper *s, uint64_t id)
{
	struct nvs_tensor_info i;

	cr_assert_eq(nvs_swapper_info(s, id, &i), 0, "%s", nvs_last_error());
	return i;
}

/* Acquire @id, compare with @ref, release clean. */
static void expect(struct nvs_swapper *s, uint64_t id, const void *ref)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	cr_assert(!memcmp(p, ref, SZ), "tensor %llu differs",
		  (unsigned long long)id);
	cr_assert_eq(nvs_swapper_release(s, id, false), 0);
}

/* Acquire @id, write pattern @seed into it and @ref, release dirty and
 * evict: its write-back is in flight (nothing collects it before the
 * next call). */
static void write_back(struct nvs_swapper *s, uint64_t id, unsigned char *ref,
		       uint64_t seed)
{
	void *p;

	tu_fill(ref, SZ, seed); /* the new contents, then into the tensor */
	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	memcpy(p, ref, SZ);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, id), 0, "%s", nvs_last_error());
	cr_assert_eq(info(s, id).state, NVS_TENSOR_WRITING);
}

/* ------------------------------------------------- acquire during a write */

Test(crossstep, changes_made_during_the_write_back_are_written_again)
{
	struct nvs_swapper *s = mk(2, true);
	unsigned char *ref = malloc(SZ);
	void *p;

	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	write_back(s, 1, ref, 1);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(stats(s).write_hits, 1);
	cr_assert_eq(stats(s).acquire_hits, 1, "no wait: a hit");
	cr_assert(!memcmp(p, ref, SZ));
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_WRITING);
	cr_assert_eq(info(s, 1).acquired, 1);
	/* changed while the first write may still be reading the buffer */
	tu_fill(ref, SZ, 2);
	memcpy(p, ref, SZ);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	cr_assert(info(s, 1).dirty);
	/* the first write is waited for, then the tensor written again */
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).writes, 2);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	/* read back: the second contents, and their checksum */
	expect(s, 1, ref);
	cr_assert_eq(stats(s).reads, 1);
	cr_assert_eq(stats(s).checksum_errors, 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(ref);
}

Test(crossstep, released_clean_during_the_write_back_needs_no_second_write)
{
	struct nvs_swapper *s = mk(2, true);
	unsigned char *ref = malloc(SZ);

	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	write_back(s, 1, ref, 3);
	expect(s, 1, ref);
	cr_assert_eq(stats(s).write_hits, 1);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "a no-op: the write runs");
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME,
		     "evicted after all: the buffer went back");
	cr_assert_eq(stats(s).writes, 1);
	cr_assert_eq(stats(s).revived, 0);
	expect(s, 1, ref);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(ref);
}

Test(crossstep, a_write_back_that_ends_while_acquired_keeps_the_buffer_held)
{
	struct nvs_swapper *s = mk(1, false);
	unsigned char *ref = malloc(SZ);
	void *p, *q;

	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	cr_assert_eq(nvs_swapper_register(s, 2, SZ, NULL), 0);
	write_back(s, 1, ref, 4);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_RESIDENT);
	cr_assert(!info(s, 1).dirty, "written");
	cr_assert_eq(stats(s).revived, 1);
	/* still held: the only buffer cannot be evicted automatically */
	cr_assert_eq(nvs_swapper_acquire(s, 2, &q), -EDEADLK);
	cr_assert(!memcmp(p, ref, SZ));
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &q), 0, "%s", nvs_last_error());
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME,
		     "released clean, then evicted for room: no write");
	cr_assert_eq(stats(s).writes, 1);
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	expect(s, 1, ref);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(ref);
}

Test(crossstep, a_write_back_that_fails_while_acquired_loses_nothing)
{
	/* the first write meets a full disk */
	struct nvs_fault_rule full = {NVS_FAULT_ENOSPC, 1, 1, NVS_IOREQ_WRITE};
	struct nvs_fault_plan plan = {.rules = {full}, .nrules = 1};
	struct nvs_swapper *s = mk_with(2, false, true, &plan);
	unsigned char *ref = malloc(SZ);
	void *p;

	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	write_back(s, 1, ref, 5);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), -ENOSPC);
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_RESIDENT);
	cr_assert_eq(info(s, 1).acquired, 1);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert(info(s, 1).dirty, "still not on disk");
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME);
	expect(s, 1, ref);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(ref);
}
