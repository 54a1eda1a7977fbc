/* SPDX-License-Identifier: MIT */
/* The helpers the swap manager's own tests share (test_swapper.c,
 * test_swapper_faults.c, test_swapper_files.c): swappers of BUF-byte
 * buffers on tu_dir(), a tensor's state and the counters, and a tensor
 * read back, rewritten or dirtied through acquire and release. Their
 * short names are those the tests were written with; other tests that
 * include tu_swapper.h define their own under the same names, so these
 * live apart. */
#ifndef NVS_TU_SWAPPER_CASES_H
#define NVS_TU_SWAPPER_CASES_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "nvswap/swapper.h"
#include "tu_swapper.h"
#include "testutil.h"

enum { BUF = 64 << 10 };

static inline void opts(struct nvs_swapper_opts *o, unsigned count)
{
	tu_swapper_opts(o, BUF, count);
}

static inline struct nvs_swapper *mk_with(const struct nvs_swapper_opts *o)
{
	struct nvs_swapper *s = NULL;

	cr_assert_eq(nvs_swapper_create(o, &s), 0, "%s", nvs_last_error());
	return s;
}

static inline struct nvs_swapper *mk(unsigned count)
{
	struct nvs_swapper_opts o;

	opts(&o, count);
	return mk_with(&o);
}

static inline enum nvs_tensor_state state(struct nvs_swapper *s, uint64_t id)
{
	struct nvs_tensor_info i;

	cr_assert_eq(nvs_swapper_info(s, id, &i), 0, "%s", nvs_last_error());
	return i.state;
}

static inline struct nvs_swap_stats stats(struct nvs_swapper *s)
{
	struct nvs_swap_stats st;

	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	return st;
}

/* Acquire @id and compare its @n bytes with @want. */
static inline void expect(struct nvs_swapper *s, uint64_t id, const void *want,
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
static inline void modify(struct nvs_swapper *s, uint64_t id, void *ref,
			  size_t n, uint64_t seed)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	tu_fill(ref, n, seed);
	memcpy(p, ref, n);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
}

/* Acquire @id and release it dirty, unchanged. */
static inline void touch(struct nvs_swapper *s, uint64_t id)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
}

/* Two paths (tu_dir's d0 and d1, made if missing), 2 buffers of 8 x BUF,
 * stripes of BUF. */
static inline void striped_opts(struct nvs_swapper_opts *o)
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

#endif
