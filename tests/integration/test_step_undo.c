// SPDX-License-Identifier: MIT
/*
 * nvs_swapper_step_open(NVS_STEP_UNDOABLE, 0, UINT64_MAX) and nvs_swapper_step_undo():
 * a speculative optimizer step writes its new values to new places and
 * keeps the old ones, so an undo puts every tensor back bit for bit (on
 * disk and resident), and the end gives the old places back. Scratch
 * and persistent sets.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "nvswap/offload.h"
#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(step_undo, .fini = fini);

enum { SZ = 64 << 10, N = 4 };

static struct nvs_swapper *open_in(const char *dir, int persist)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	tu_swapper_opts(&o, SZ, 4);
	o.nvme_paths[0] = dir;
	o.persist = (uint8_t)persist;
	o.name = "su";
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

static struct nvs_swapper *open_set(int persist)
{
	return open_in(tu_path("a"), persist);
}

/* Tensors 1..N registered with the bytes of step 1. */
static struct nvs_swapper *fill_in(struct nvs_swapper *s)
{
	static char buf[SZ];

	for (uint64_t id = 1; id <= N; id++) {
		tu_fill(buf, SZ, 7 + id);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0, "%s",
			     nvs_last_error());
	}
	return s;
}

static struct nvs_swapper *step_one(int persist)
{
	return fill_in(open_set(persist));
}

/* Tensor @id := the bytes of @seed, in memory (released dirty). */
static void change(struct nvs_swapper *s, uint64_t id, uint64_t seed)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	tu_fill(p, SZ, seed * 7 + id);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
}

/* ... and written to the disk now. */
static void put(struct nvs_swapper *s, uint64_t id, uint64_t seed)
{
	change(s, id, seed);
	cr_assert_eq(nvs_swapper_evict(s, id), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, id), 0, "%s", nvs_last_error());
}

/* Tensor @id holds the bytes of @seed (read from the disk when @cold). */
static void expect_one(struct nvs_swapper *s, uint64_t id, uint64_t seed,
		       bool cold)
{
	static char want[SZ];
	struct nvs_tensor_info info;
	void *p;

	if (cold) {
		cr_assert_eq(nvs_swapper_info(s, id, &info), 0);
		cr_assert_eq(info.state, NVS_TENSOR_ON_NVME, "tensor %lu",
			     (unsigned long)id);
	}
	tu_fill(want, SZ, seed * 7 + id);
	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	cr_assert(memcmp(p, want, SZ) == 0, "tensor %lu is not step %lu",
		  (unsigned long)id, (unsigned long)seed);
	cr_assert_eq(nvs_swapper_release(s, id, false), 0);
}

static uint64_t space_used(struct nvs_swapper *s)
{
	struct nvs_swap_stats st;

	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	return st.path_space_used[0];
}

Test(step_undo, an_undo_puts_back_what_was_written_and_what_was_changed)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);
	uint64_t base = space_used(s);

	cr_assert_eq(nvs_swapper_step_open(s, "speculative step 2",
					   NVS_STEP_UNDOABLE, 0, UINT64_MAX),
		     0, "%s", nvs_last_error());
	put(s, 1, 2);	 /* on disk: the old value kept beside it */
	put(s, 1, 3);	 /* again: in its new place */
	put(s, 2, 2);	 /* on disk ... */
	change(s, 2, 3); /* ... then changed again, only in memory */
	change(s, 3, 2); /* only in memory */
	expect_one(s, 1, 3, true);
	cr_assert_eq(space_used(s), base + 2 * SZ);
	cr_assert_eq(nvs_swapper_step_undo(s), 3, "%s", nvs_last_error());
	for (uint64_t id = 1; id <= N; id++)
		expect_one(s, id, 1, true);
	cr_assert_eq(space_used(s), base);
	/* Closed: a second undo has nothing to undo. */
	cr_assert_eq(nvs_swapper_step_undo(s), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "no undoable step is open"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, the_end_keeps_the_step_and_gives_the_old_places_back)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);
	uint64_t base = space_used(s);

	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	for (uint64_t id = 1; id <= N; id++)
		put(s, id, 2);
	change(s, 1, 3);
	cr_assert_eq(space_used(s), base + N * SZ);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	cr_assert_eq(space_used(s), base);
	expect_one(s, 1, 3, false);
	for (uint64_t id = 2; id <= N; id++)
		expect_one(s, id, 2, true);
	/* The next step is plain: written in place, nothing kept. */
	cr_assert_eq(nvs_swapper_step_begin(s, "3"), 0);
	put(s, 2, 4);
	cr_assert_eq(space_used(s), base);
	cr_assert_eq(nvs_swapper_step_undo(s), -EINVAL);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	expect_one(s, 2, 4, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, a_tensor_never_written_reads_as_zeros_again)
{
	static const char zero[SZ];
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);
	void *p;

	cr_assert_eq(nvs_swapper_register(s, 9, SZ, NULL), 0);
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	put(s, 9, 2);
	expect_one(s, 9, 2, true);
	cr_assert_eq(nvs_swapper_step_undo(s), 1);
	cr_assert_eq(nvs_swapper_acquire(s, 9, &p), 0);
	cr_assert(memcmp(p, zero, SZ) == 0);
	cr_assert_eq(nvs_swapper_release(s, 9, false), 0);
	cr_assert_eq(nvs_swapper_unregister(s, 9), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, an_acquired_tensor_holds_the_undo_back_whole)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);
	void *p;

	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	put(s, 1, 2);
	put(s, 2, 2);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	cr_assert_eq(nvs_swapper_step_undo(s), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "tensor 2 is acquired 1 time(s): "
					   "nothing was undone"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	expect_one(s, 1, 2, false); /* nothing undone, still open */
	cr_assert_eq(nvs_swapper_step_undo(s), 2, "%s", nvs_last_error());
	expect_one(s, 1, 1, true);
	expect_one(s, 2, 1, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, an_undo_waits_for_a_write_in_flight)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);

	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	for (uint64_t id = 1; id <= N; id++) {
		change(s, id, 2);
		cr_assert_eq(nvs_swapper_evict(s, id), 0, "%s",
			     nvs_last_error());
	}
	cr_assert_eq(nvs_swapper_step_undo(s), N, "%s", nvs_last_error());
	for (uint64_t id = 1; id <= N; id++)
		expect_one(s, id, 1, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, the_open_is_refused_while_a_value_is_not_on_disk)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);

	change(s, 3, 2);
	cr_assert_eq(
		nvs_swapper_step_open(s, "x", NVS_STEP_UNDOABLE, 0, UINT64_MAX),
		-EBUSY);
	cr_assert(strstr(nvs_last_error(), "tensor 3 is dirty (1 in all): an "
					   "undoable step needs every value"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint(s, "y"), -EINVAL); /* scratch */
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(nvs_swapper_step_open(s, "x", 2, 0, UINT64_MAX), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "unknown flags 0x2"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_step_begin(s, "plain"), 0);
	cr_assert_eq(
		nvs_swapper_step_open(s, "x", NVS_STEP_UNDOABLE, 0, UINT64_MAX),
		-EBUSY);
	cr_assert(strstr(nvs_last_error(), "plain is open"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	cr_assert_eq(
		nvs_swapper_step_open(s, "x", NVS_STEP_UNDOABLE, 0, UINT64_MAX),
		0);
	cr_assert_eq(
		nvs_swapper_step_open(s, "y", NVS_STEP_UNDOABLE, 0, UINT64_MAX),
		-EBUSY);
	cr_assert_eq(nvs_swapper_step_begin(s, "renamed"), 0); /* stays */
	put(s, 3, 3);
	cr_assert_eq(nvs_swapper_step_undo(s), 1);
	expect_one(s, 3, 2, true);
	cr_assert_eq(nvs_swapper_step_undo(NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_step_open(NULL, NULL, 0, 0, 0), -EINVAL);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, only_the_ids_it_covers_are_kept_and_undone)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);
	uint64_t base = space_used(s);

	change(s, 1, 9); /* dirty, but outside: the open goes on */
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 3, 2),
		     -EINVAL);
	cr_assert(strstr(nvs_last_error(), "ids 3..2 cover nothing"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 2, 3), 0,
		     "%s", nvs_last_error());
	for (uint64_t id = 1; id <= N; id++)
		put(s, id, 2);
	cr_assert_eq(space_used(s), base + 2 * SZ); /* 2 and 3 kept */
	cr_assert_eq(nvs_swapper_step_undo(s), 2);
	cr_assert_eq(space_used(s), base);
	expect_one(s, 1, 2, true);
	expect_one(s, 2, 1, true);
	expect_one(s, 3, 1, true);
	expect_one(s, 4, 2, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, unregistering_gives_both_places_back)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_SCRATCH);
	uint64_t base = space_used(s);

	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	put(s, 4, 2);
	cr_assert_eq(space_used(s), base + SZ);
	cr_assert_eq(nvs_swapper_unregister(s, 4), 0);
	cr_assert_eq(space_used(s), base - SZ);
	cr_assert_eq(nvs_swapper_step_undo(s), 0); /* 4 stays removed */
	cr_assert_eq(nvs_swapper_info(s, 4, &(struct nvs_tensor_info){0}),
		     -ENOENT);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, a_zeroed_gradient_region_comes_back)
{
	static float v[SZ / 4];
	struct nvs_swapper *s = open_set(NVS_PERSIST_SCRATCH);
	struct nvs_grad_swapper_opts o;
	struct nvs_grad_swapper *g;
	void *p;

	nvs_grad_swapper_opts_init(&o);
	cr_assert_eq(nvs_grad_swapper_create(s, &o, &g), 0);
	cr_assert_eq(nvs_grad_add_group(g, 0, sizeof(v)), 0);
	for (size_t i = 0; i < SZ / 4; i++)
		v[i] = (float)i;
	cr_assert_eq(nvs_grad_write(g, 0, 0, v, sizeof(v), NVS_GRAD_ASSIGN), 0);
	cr_assert_eq(nvs_grad_flush(g, 0), 0);
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	cr_assert_eq(nvs_grad_zero(g, 0), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_step_undo(s), 1);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	cr_assert(memcmp(p, v, sizeof(v)) == 0);
	cr_assert_eq(nvs_swapper_release(s, 0, false), 0);
	nvs_grad_swapper_destroy(g);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* Persistent: a generation holds step 1 (copy on write keeps it too). */
static struct nvs_swapper *saved_step_one(void)
{
	struct nvs_swapper *s = step_one(NVS_PERSIST_PERSISTENT);

	cr_assert_eq(nvs_swapper_checkpoint(s, "step 1"), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1, "%s", nvs_last_error());
	return s;
}

Test(step_undo, a_persistent_set_undoes_and_checkpoints_after)
{
	struct nvs_swapper *s = saved_step_one();
	struct nvs_generation_info g[2];

	put(s, 1, 9); /* after the checkpoint, before the step: kept too */
	cr_assert_eq(nvs_swapper_step_open(s, "spec", NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	cr_assert_eq(nvs_swapper_checkpoint(s, "x"), -EBUSY);
	for (uint64_t id = 1; id <= N; id++)
		put(s, id, 2);
	cr_assert_eq(nvs_swapper_step_undo(s), N);
	expect_one(s, 1, 9, true);
	for (uint64_t id = 2; id <= N; id++)
		expect_one(s, id, 1, true);
	/* The redo, then a checkpoint of it. */
	cr_assert_eq(nvs_swapper_step_open(s, "redo", NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	for (uint64_t id = 1; id <= N; id++)
		put(s, id, 3);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	cr_assert_eq(nvs_swapper_checkpoint(s, "step 2"), 2, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	s = open_set(NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_generations(s, g, 2), 2);
	for (uint64_t id = 1; id <= N; id++)
		expect_one(s, id, 3, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(step_undo, a_persistent_set_closed_in_the_step_reopens_before_it)
{
	struct nvs_swapper *s = saved_step_one();

	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	for (uint64_t id = 1; id <= N; id++)
		put(s, id, 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	s = open_set(NVS_PERSIST_RESUME);
	for (uint64_t id = 1; id <= N; id++)
		expect_one(s, id, 1, true);
	/* An undone step leaves nothing for the check to find. */
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	put(s, 2, 2);
	cr_assert_eq(nvs_swapper_step_undo(s), 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	s = open_set(NVS_PERSIST_RESUME);
	for (uint64_t id = 1; id <= N; id++)
		expect_one(s, id, 1, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* Fill the filesystem of @dir: file @dir/filler takes what is left. */
static void fill_disk(const char *dir)
{
	static char junk[4096];
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	while (write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk))
		;
	cr_assert_eq(errno, ENOSPC, "%s", strerror(errno));
	close(fd);
}

Test(step_undo, a_disk_full_in_the_step_still_undoes_and_ends)
{
	const char *mnt = tu_path("small");
	char filler[4200];
	struct nvs_swapper *s;

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a tmpfs here (%s): needs root and "
			     "CAP_SYS_ADMIN",
			     strerror(errno));
	s = fill_in(open_in(mnt, NVS_PERSIST_SCRATCH));
	fill_disk(mnt);
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	change(s, 1, 2);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 1), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "tensor 1: writing"), "%s",
		  nvs_last_error());
	expect_one(s, 1, 2, false); /* nothing lost: still resident */
	cr_assert_eq(nvs_swapper_step_undo(s), 1, "%s", nvs_last_error());
	expect_one(s, 1, 1, true);
	/* Room again: the redo is written and kept. */
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	cr_assert_eq(unlink(filler), 0);
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	put(s, 1, 3);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	expect_one(s, 1, 3, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	umount2(mnt, MNT_DETACH);
}

/* The new place never written (the disk full) when the step ends: the
 * old place stays the tensor's, and the data, resident and dirty, is
 * written there once there is room. */
Test(step_undo, an_end_after_a_failed_write_keeps_the_written_place)
{
	const char *mnt = tu_path("small2");
	char filler[4200];
	struct nvs_swapper *s;
	uint64_t base;

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a tmpfs here (%s): needs root and "
			     "CAP_SYS_ADMIN",
			     strerror(errno));
	s = fill_in(open_in(mnt, NVS_PERSIST_SCRATCH));
	base = space_used(s);
	fill_disk(mnt);
	cr_assert_eq(nvs_swapper_step_open(s, NULL, NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     0);
	change(s, 2, 2);
	cr_assert_eq(nvs_swapper_evict(s, 2), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 2), -ENOSPC);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	cr_assert_eq(space_used(s), base);
	expect_one(s, 2, 2, false);
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	cr_assert_eq(unlink(filler), 0);
	cr_assert_eq(nvs_swapper_evict(s, 2), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 2), 0, "%s", nvs_last_error());
	expect_one(s, 2, 2, true);
	expect_one(s, 1, 1, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	umount2(mnt, MNT_DETACH);
}
