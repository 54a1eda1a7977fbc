// SPDX-License-Identifier: MIT
/*
 * nvs_swapper_step_begin()/step_end(): while a step is open a persistent
 * set refuses checkpoints and destroy saves none of it, so a set closed
 * in the middle of an optimizer step reopens at the last whole one, bit
 * for bit, even after the step's writes reached the disk.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(persist_step, .fini = fini);

enum { SZ = 64 << 10, N = 4 };

static struct nvs_swapper *open_named(int persist, const char *name)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	tu_swapper_opts(&o, SZ, 4);
	o.nvme_paths[0] = tu_path("a");
	o.persist = (uint8_t)persist;
	o.name = name;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

static struct nvs_swapper *open_set(int persist)
{
	return open_named(persist, "st");
}

/* Tensor @id := the bytes of @seed, written to the disk now. */
static void put(struct nvs_swapper *s, uint64_t id, uint64_t seed)
{
	static char buf[SZ];
	void *p;

	tu_fill(buf, SZ, seed * 7 + id);
	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	memcpy(p, buf, SZ);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, id), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, id), 0, "%s", nvs_last_error());
}

/* Tensors 1..N hold the bytes of @seed. */
static void expect(struct nvs_swapper *s, uint64_t seed)
{
	static char want[SZ];
	void *p;

	for (uint64_t id = 1; id <= N; id++) {
		tu_fill(want, SZ, seed * 7 + id);
		cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s",
			     nvs_last_error());
		cr_assert(memcmp(p, want, SZ) == 0,
			  "tensor %lu is not step %lu", (unsigned long)id,
			  (unsigned long)seed);
		cr_assert_eq(nvs_swapper_release(s, id, false), 0);
	}
}

/* A set whose newest generation holds step 1 (tensors 1..N). */
static struct nvs_swapper *step_one(void)
{
	static char buf[SZ];
	struct nvs_swapper *s = open_set(NVS_PERSIST_PERSISTENT);

	for (uint64_t id = 1; id <= N; id++) {
		tu_fill(buf, SZ, 7 + id);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0, "%s",
			     nvs_last_error());
	}
	cr_assert_eq(nvs_swapper_checkpoint(s, "step 1"), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1, "%s", nvs_last_error());
	return s;
}

Test(persist_step, an_open_step_refuses_a_checkpoint_naming_it)
{
	struct nvs_swapper *s = step_one();

	cr_assert_eq(nvs_swapper_step_begin(s, "optimizer step 2"), 0);
	put(s, 1, 2);
	cr_assert_eq(nvs_swapper_checkpoint(s, "half"), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_checkpoint: "
					   "optimizer step 2 is open"),
		  "%s", nvs_last_error());
	/* Finished: the checkpoint is taken and holds the whole step. */
	for (uint64_t id = 2; id <= N; id++)
		put(s, id, 2);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	cr_assert_eq(nvs_swapper_step_end(s), 0); /* none open: a no-op */
	cr_assert_eq(nvs_swapper_checkpoint(s, "step 2"), 2, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 2, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	s = open_set(NVS_PERSIST_RESUME);
	expect(s, 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(persist_step, destroy_in_an_open_step_keeps_the_last_whole_one)
{
	struct nvs_swapper *s = step_one();
	struct nvs_generation_info g;

	/* Half of step 2 written to the disk, a quarter only in memory. */
	cr_assert_eq(nvs_swapper_step_begin(s, NULL), 0);
	put(s, 1, 2);
	put(s, 2, 2);
	cr_assert_eq(nvs_swapper_checkpoint(s, "x"), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "a step is open"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_unsaved(s), 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	s = open_set(NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_generations(s, &g, 1), 1);
	cr_assert_str_eq(g.tag, "step 1");
	expect(s, 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(persist_step, a_long_name_is_cut_and_a_scratch_swapper_takes_steps)
{
	char name[300];
	struct nvs_swapper *s = step_one();

	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	cr_assert_eq(nvs_swapper_step_begin(s, name), 0);
	cr_assert_eq(nvs_swapper_checkpoint(s, "x"), -EBUSY);
	name[NVS_STEP_NAME_MAX] = '\0';
	cr_assert(strstr(nvs_last_error(), name), "%s", nvs_last_error());
	cr_assert_null(strstr(nvs_last_error(), strcat(name, "n")));
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	s = open_named(NVS_PERSIST_SCRATCH, "sc");
	cr_assert_eq(nvs_swapper_step_begin(s, "s"), 0);
	cr_assert_eq(nvs_swapper_step_end(s), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
