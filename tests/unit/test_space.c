// SPDX-License-Identifier: MIT
/*
 * Swap space: aligned best-fit allocation, coalescing and reuse, the end
 * given back, refusals that change nothing, a randomized run against a
 * reference map, and the striping layout over several paths.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal/alloc.h"
#include "swapper/space.h"

#define A 4096u

TestSuite(space);

static uint64_t take(struct nvs_space *s, uint64_t len)
{
	uint64_t off;

	cr_assert_eq(nvs__space_alloc(s, len, &off), 0);
	return off;
}

/* Free ranges sorted, disjoint, never adjacent, below the end. */
static void check_invariants(const struct nvs_space *s)
{
	uint64_t free_bytes = 0;

	for (size_t i = 0; i < s->nfree; i++) {
		const struct nvs_range *r = &s->free[i];
		cr_assert_gt(r->len, 0);
		cr_assert_eq(r->off % s->align, 0);
		cr_assert_eq(r->len % s->align, 0);
		cr_assert_lt(r->off + r->len, s->end,
			     "a free tail is given back");
		if (i > 0)
			cr_assert_gt(r->off,
				     s->free[i - 1].off + s->free[i - 1].len,
				     "coalesced");
		free_bytes += r->len;
	}
	cr_assert_eq(s->used + free_bytes, s->end);
}

Test(space, allocations_are_aligned_and_rounded_up)
{
	struct nvs_space s;

	nvs__space_init(&s, A);
	cr_assert_eq(take(&s, 1), 0);
	cr_assert_eq(take(&s, A + 1), A);
	cr_assert_eq(take(&s, A), 3 * A);
	cr_assert_eq(s.end, 4 * A);
	cr_assert_eq(s.used, 4 * A);
	uint64_t off = 7;
	cr_assert_eq(nvs__space_alloc(&s, 0, &off), -EINVAL);
	cr_assert_eq(off, 7, "untouched");
	nvs__space_fini(&s);
}

Test(space, freed_ranges_are_reused_best_fit_then_lowest)
{
	struct nvs_space s;
	uint64_t a, b, c, d, e;

	nvs__space_init(&s, A);
	a = take(&s, 4 * A);
	b = take(&s, A);
	c = take(&s, 2 * A);
	d = take(&s, A);
	e = take(&s, 2 * A);
	(void)b, (void)d;
	cr_assert_eq(nvs__space_free(&s, a, 4 * A), 0);
	cr_assert_eq(nvs__space_free(&s, c, 2 * A), 0);
	check_invariants(&s);
	cr_assert_eq(take(&s, 2 * A), c, "the 2-block hole, not the 4");
	cr_assert_eq(take(&s, A), a, "then the lowest that fits");
	cr_assert_eq(take(&s, 3 * A), a + A, "the rest of it exactly");
	cr_assert_eq(s.nfree, 0);
	cr_assert_eq(take(&s, A), e + 2 * A, "no hole left: the end");
	check_invariants(&s);
	nvs__space_fini(&s);
}

Test(space, neighbours_coalesce_and_a_free_tail_lowers_the_end)
{
	struct nvs_space s;
	uint64_t o[5];

	nvs__space_init(&s, A);
	for (int i = 0; i < 5; i++)
		o[i] = take(&s, A);
	cr_assert_eq(nvs__space_free(&s, o[1], A), 0);
	cr_assert_eq(nvs__space_free(&s, o[3], A), 0);
	cr_assert_eq(s.nfree, 2);
	cr_assert_eq(nvs__space_free(&s, o[2], A), 0); /* both sides */
	cr_assert_eq(s.nfree, 1);
	cr_assert_eq(s.free[0].off, o[1]);
	cr_assert_eq(s.free[0].len, 3 * A);
	check_invariants(&s);
	/* Freeing the last block gives back it and the hole before it. */
	cr_assert_eq(nvs__space_free(&s, o[4], A), 0);
	cr_assert_eq(s.end, A);
	cr_assert_eq(s.nfree, 0);
	cr_assert_eq(nvs__space_free(&s, o[0], A), 0);
	cr_assert_eq(s.end, 0);
	cr_assert_eq(s.used, 0);
	nvs__space_fini(&s);
}

Test(space, bad_frees_are_einval_and_change_nothing)
{
	struct nvs_space s, before;
	uint64_t a, b;

	nvs__space_init(&s, A);
	a = take(&s, 2 * A);
	b = take(&s, 2 * A);
	take(&s, A);
	cr_assert_eq(nvs__space_free(&s, a, 2 * A), 0);
	before = s;
	cr_assert_eq(nvs__space_free(&s, a, 2 * A), -EINVAL, "double free");
	cr_assert_eq(nvs__space_free(&s, a + A, 2 * A), -EINVAL, "overlap");
	cr_assert_eq(nvs__space_free(&s, b + 1, A), -EINVAL, "misaligned");
	cr_assert_eq(nvs__space_free(&s, s.end, A), -EINVAL, "past the end");
	cr_assert_eq(nvs__space_free(&s, b, 0), -EINVAL);
	cr_assert_eq(s.nfree, before.nfree);
	cr_assert_eq(s.used, before.used);
	cr_assert_eq(s.end, before.end);
	check_invariants(&s);
	nvs__space_fini(&s);
}

Test(space, a_free_that_cannot_grow_the_table_is_enomem_and_changes_nothing)
{
	struct nvs_space s;
	uint64_t o[3];

	nvs__space_init(&s, A);
	for (int i = 0; i < 3; i++)
		o[i] = take(&s, A);
	nvs__alloc_fail_at(1);
	cr_assert_eq(nvs__space_free(&s, o[1], A), -ENOMEM);
	nvs__alloc_fail_at(0);
	cr_assert_eq(s.used, 3 * A);
	cr_assert_eq(nvs__space_free(&s, o[1], A), 0);
	check_invariants(&s);
	nvs__space_fini(&s);
}

Test(space, random_allocs_and_frees_never_overlap)
{
	enum { N = 200, BLOCKS = 1 << 14 };
	struct nvs_space s;
	struct nvs_range live[N] = {{0, 0}};
	unsigned char *owner = calloc(BLOCKS, 1);
	unsigned seed = 12345;

	nvs__space_init(&s, A);
	for (int step = 0; step < 20000; step++) {
		unsigned i = (unsigned)rand_r(&seed) % N;

		if (live[i].len) {
			for (uint64_t b = live[i].off / A;
			     b < (live[i].off + live[i].len) / A; b++)
				owner[b] = 0;
			cr_assert_eq(
				nvs__space_free(&s, live[i].off, live[i].len),
				0);
			live[i].len = 0;
		} else {
			uint64_t len = A * (1 + (unsigned)rand_r(&seed) % 16);
			live[i].off = take(&s, len);
			live[i].len = len;
			cr_assert_lt((live[i].off + len) / A, BLOCKS);
			for (uint64_t b = live[i].off / A;
			     b < (live[i].off + len) / A; b++) {
				cr_assert_eq(owner[b], 0, "block %llu twice",
					     (unsigned long long)b);
				owner[b] = 1;
			}
		}
		if (step % 500 == 0)
			check_invariants(&s);
	}
	for (unsigned i = 0; i < N; i++)
		if (live[i].len)
			cr_assert_eq(
				nvs__space_free(&s, live[i].off, live[i].len),
				0);
	cr_assert_eq(s.end, 0, "everything given back");
	cr_assert_eq(s.nfree, 0);
	nvs__space_fini(&s);
	free(owner);
}

Test(space, small_tensors_go_whole_to_the_least_filled_path)
{
	struct nvs_space sp[3];
	struct nvs_extent e[4];
	size_t n;

	for (int i = 0; i < 3; i++)
		nvs__space_init(&sp[i], A);
	take(&sp[0], 8 * A);
	take(&sp[2], 2 * A);
	cr_assert_eq(nvs__space_place(sp, 3, 16 * A, 5 * A + 1, e, 4, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(e[0].path, 1);
	cr_assert_eq(e[0].tensor_off, 0);
	cr_assert_eq(e[0].len, 5 * A + 1);
	cr_assert_eq(sp[1].used, 6 * A);
	nvs__space_release(sp, e, n);
	cr_assert_eq(sp[1].used, 0);
	for (int i = 0; i < 3; i++)
		nvs__space_fini(&sp[i]);
}

Test(space, large_tensors_stripe_round_robin_and_cover_every_byte)
{
	struct nvs_space sp[3];
	struct nvs_extent e[16];
	uint64_t stripe = 4 * A, nbytes = 7 * stripe + 100, covered = 0;
	size_t n;

	for (int i = 0; i < 3; i++)
		nvs__space_init(&sp[i], A);
	take(&sp[0], A); /* path 1 is the least filled: it starts */
	take(&sp[2], A);
	cr_assert_eq(nvs__space_place(sp, 3, stripe, nbytes, e, 16, &n), 0);
	cr_assert_eq(n, 8);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(e[i].tensor_off, i * stripe);
		cr_assert_eq(e[i].path, (1 + i) % 3);
		cr_assert_eq(e[i].off % A, 0);
		if (i >= 3)
			cr_assert_eq(e[i].off, e[i - 3].off + stripe,
				     "a path's share is contiguous");
		covered += e[i].len;
	}
	cr_assert_eq(e[7].len, 100);
	cr_assert_eq(covered, nbytes);
	/* Path 1 holds chunks 0, 3, 6; path 2: 1, 4, 7; path 0: 2, 5. */
	cr_assert_eq(sp[1].used, 3 * stripe);
	cr_assert_eq(sp[2].used, A + 2 * stripe + A);
	cr_assert_eq(sp[0].used, A + 2 * stripe);
	nvs__space_release(sp, e, n);
	cr_assert_eq(sp[0].used, A);
	cr_assert_eq(sp[1].used, 0);
	cr_assert_eq(sp[2].used, A);
	for (int i = 0; i < 3; i++)
		nvs__space_fini(&sp[i]);
}

Test(space, too_few_slots_for_the_pieces_is_einval_and_allocates_nothing)
{
	struct nvs_space sp[2];
	struct nvs_extent e[2];
	size_t n = 0;

	for (int i = 0; i < 2; i++)
		nvs__space_init(&sp[i], A);
	cr_assert_eq(nvs__space_place(sp, 2, A, 5 * A, e, 2, &n), -EINVAL);
	cr_assert_eq(n, 5, "how many are needed");
	cr_assert_eq(sp[0].used + sp[1].used, 0);
	cr_assert_eq(nvs__space_place(sp, 2, A + 1, 5 * A, e, 2, &n), -EINVAL,
		     "a stripe must be a multiple of the alignment");
	cr_assert_eq(nvs__space_place(sp, 0, A, 5 * A, e, 2, &n), -EINVAL);
	for (int i = 0; i < 2; i++)
		nvs__space_fini(&sp[i]);
}

/* Rebuilding a space from records (a persistent set's reopen): ranges
 * reserved in any order leave the gaps free, and a range that is taken
 * is refused. */
Test(space, reserve_rebuilds_a_space_and_refuses_overlaps)
{
	struct nvs_space s;
	struct nvs_extent ext[3];
	struct nvs_space sp[2];
	uint64_t off;

	nvs__space_init(&s, 4096);
	cr_assert_eq(nvs__space_reserve(&s, 8 * 4096, 4096), 0);
	cr_assert_eq(s.end, 9 * 4096);
	cr_assert_eq(s.used, 4096);
	cr_assert_eq(s.nfree, 1);
	cr_assert_eq(nvs__space_reserve(&s, 2 * 4096, 100), 0); /* rounded */
	cr_assert_eq(nvs__space_reserve(&s, 8 * 4096, 4096), -EEXIST);
	cr_assert_eq(nvs__space_reserve(&s, 2 * 4096, 2 * 4096), -EEXIST);
	cr_assert_eq(nvs__space_reserve(&s, 7 * 4096, 2 * 4096), -EEXIST);
	cr_assert_eq(nvs__space_reserve(&s, 100, 4096), -EINVAL);
	cr_assert_eq(nvs__space_reserve(&s, 4096, 0), -EINVAL);
	check_invariants(&s);
	cr_assert_eq(s.used, 2 * 4096);
	/* The gaps are allocatable: [0,2) [3,8). */
	cr_assert_eq(nvs__space_alloc(&s, 2 * 4096, &off), 0);
	cr_assert_eq(off, 0);
	cr_assert_eq(nvs__space_alloc(&s, 5 * 4096, &off), 0);
	cr_assert_eq(off, 3 * 4096);
	cr_assert_eq(s.nfree, 0);
	cr_assert_eq(s.end, 9 * 4096);
	nvs__space_fini(&s);

	/* A striped placement claimed whole, then refused again, and the
	 * failed claim leaves nothing behind. */
	nvs__space_init(&sp[0], 4096);
	nvs__space_init(&sp[1], 4096);
	size_t n = 0;
	cr_assert_eq(nvs__space_place(sp, 2, 8192, 20000, ext, 3, &n), 0);
	cr_assert_eq(n, 3);
	uint64_t placed = sp[0].used + sp[1].used; /* 12 KiB + 8 KiB */
	cr_assert_eq(placed, 20480);
	nvs__space_release(sp, ext, n);
	cr_assert_eq(sp[0].used + sp[1].used, 0);
	cr_assert_eq(nvs__space_claim(sp, ext, n), 0);
	uint64_t used = sp[0].used + sp[1].used;
	cr_assert_eq(used, placed);
	cr_assert_eq(nvs__space_claim(sp, ext, n), -EEXIST);
	cr_assert_eq(sp[0].used + sp[1].used, used);
	nvs__space_release(sp, ext, n);
	cr_assert_eq(sp[0].used + sp[1].used, 0);
	nvs__space_fini(&sp[0]);
	nvs__space_fini(&sp[1]);
}
