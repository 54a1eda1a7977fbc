// SPDX-License-Identifier: MIT
/*
 * The traced walk alone (no swapper): where each acquire puts the
 * position, when the direction turns, the exact distinct layers listed
 * ahead (on past an end into the next pass), for a permuted walk,
 * repeats, jumps and strays; and what it learns at its ends: turns, an
 * optimizer pass going forward, gradient accumulation, no pattern.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal/alloc.h"
#include "swapper/walk.h"

TestSuite(walk);

#define END ~0u

/* Acquire @layer: expect position @pos, direction @dir and exactly the
 * layers @want (END-terminated) ahead, nearest first. */
static void step(struct nvs_walk *w, unsigned layer, size_t pos, int dir,
		 const unsigned *want)
{
	struct nvs_walk_ahead it;
	unsigned got[64], n = 0, x;
	char line[256] = "";

	cr_assert(nvs__walk_step(w, layer), "layer %u is in the walk", layer);
	cr_assert_eq(w->pos, pos, "after %u: position %zu, not %zu", layer,
		     w->pos, pos);
	cr_assert_eq(w->dir, dir, "after %u: direction", layer);
	nvs__walk_ahead_begin(w, &it);
	while (n < 64 && nvs__walk_ahead_next(w, &it, &x))
		got[n++] = x;
	for (unsigned i = 0; i < n; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line),
			 " %u", got[i]);
	for (unsigned i = 0; i <= n; i++) {
		cr_assert_eq(i < n ? got[i] : END, want[i],
			     "after %u: ahead was%s", layer, line);
		if (want[i] == END)
			break;
	}
}

#define A(...) ((const unsigned[]){__VA_ARGS__, END})
#define NOTHING ((const unsigned[]){END})

Test(walk, a_permuted_walk_reads_ahead_in_its_order_and_turns_at_the_ends)
{
	const unsigned seq[] = {3, 0, 6, 1, 7, 2, 5, 4};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 8, seq), 0);
	/* Past the end, the turn: back along the walk (the current layer
	 * and those listed already are not listed again). */
	step(&w, 3, 0, 1, A(0, 6, 1, 7, 2, 5, 4));
	step(&w, 0, 1, 1, A(6, 1, 7, 2, 5, 4, 3));
	step(&w, 6, 2, 1, A(1, 7, 2, 5, 4, 0, 3));
	step(&w, 1, 3, 1, A(7, 2, 5, 4, 6, 0, 3));
	step(&w, 7, 4, 1, A(2, 5, 4, 1, 6, 0, 3));
	step(&w, 2, 5, 1, A(5, 4, 7, 1, 6, 0, 3));
	step(&w, 5, 6, 1, A(4, 2, 7, 1, 6, 0, 3));
	step(&w, 4, 7, 1, A(5, 2, 7, 1, 6, 0, 3));
	/* backward starts with the layer forward ended with */
	step(&w, 4, 7, -1, A(5, 2, 7, 1, 6, 0, 3));
	cr_assert_eq(w.ended, NVS_WALK_REPEAT);
	step(&w, 5, 6, -1, A(2, 7, 1, 6, 0, 3, 4));
	step(&w, 2, 5, -1, A(7, 1, 6, 0, 3, 5, 4));
	step(&w, 7, 4, -1, A(1, 6, 0, 3, 2, 5, 4));
	step(&w, 1, 3, -1, A(6, 0, 3, 7, 2, 5, 4));
	step(&w, 6, 2, -1, A(0, 3, 1, 7, 2, 5, 4));
	step(&w, 0, 1, -1, A(3, 6, 1, 7, 2, 5, 4));
	/* the next step's layers, read during backward's last ones */
	step(&w, 3, 0, -1, A(0, 6, 1, 7, 2, 5, 4));
	/* the next step starts with the layer backward ended with */
	step(&w, 3, 0, 1, A(0, 6, 1, 7, 2, 5, 4));
	cr_assert_eq(w.ended, NVS_WALK_REPEAT);
	nvs__walk_fini(&w);
}

Test(walk, backward_without_the_repeat_turns_at_the_neighbour_behind)
{
	const unsigned seq[] = {3, 0, 6};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 3, seq), 0);
	unsigned next;

	step(&w, 3, 0, 1, A(0, 6));
	step(&w, 0, 1, 1, A(6, 3));
	step(&w, 6, 2, 1, A(0, 3));
	cr_assert(nvs__walk_next(&w, &next));
	cr_assert_eq(next, 6, "nothing learned yet: a turn on 6");
	step(&w, 0, 1, -1, A(3, 6));
	cr_assert_eq(w.ended, NVS_WALK_BACK);
	step(&w, 3, 0, -1, A(0, 6));
	step(&w, 0, 1, 1, A(6, 3)); /* forward again */
	cr_assert_eq(w.ended, NVS_WALK_BACK);
	step(&w, 6, 2, 1, A(0, 3));
	cr_assert(nvs__walk_next(&w, &next));
	cr_assert_eq(next, 0, "learned: backward starts at the neighbour");
	nvs__walk_fini(&w);
}

Test(walk, a_tied_layer_is_listed_once_and_found_at_both_ends)
{
	/* an embedding (9) used first and, tied, as the head last */
	const unsigned seq[] = {9, 1, 2, 3, 9};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 5, seq), 0);
	step(&w, 9, 0, 1, A(1, 2, 3));
	step(&w, 1, 1, 1, A(2, 3, 9));
	step(&w, 2, 2, 1, A(3, 9, 1));
	step(&w, 3, 3, 1, A(9, 2, 1));
	step(&w, 9, 4, 1, A(3, 2, 1));
	step(&w, 9, 4, -1, A(3, 2, 1));
	step(&w, 3, 3, -1, A(2, 1, 9));
	step(&w, 2, 2, -1, A(1, 9, 3));
	step(&w, 1, 1, -1, A(9, 2, 3));
	step(&w, 9, 0, -1, A(1, 2, 3));
	step(&w, 9, 0, 1, A(1, 2, 3));
	nvs__walk_fini(&w);
}

Test(walk, a_module_called_twice_stays_put_on_its_repeat)
{
	const unsigned seq[] = {0, 1, 1, 2, 3};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 5, seq), 0);
	step(&w, 0, 0, 1, A(1, 2, 3));
	step(&w, 1, 1, 1, A(2, 3, 0));
	step(&w, 1, 1, 1, A(2, 3, 0)); /* the second call: a repeat */
	step(&w, 2, 3, 1, A(3, 1, 0)); /* found further on */
	step(&w, 3, 4, 1, A(2, 1, 0));
	step(&w, 3, 4, -1, A(2, 1, 0));
	step(&w, 2, 3, -1, A(1, 0, 3));
	step(&w, 1, 2, -1, A(0, 2, 3));
	step(&w, 1, 2, -1, A(0, 2, 3));
	step(&w, 0, 0, -1, A(1, 2, 3)); /* found further on, downwards */
	nvs__walk_fini(&w);
}

Test(walk, jumps_go_on_in_the_direction_or_restart_from_the_top)
{
	const unsigned seq[] = {0, 1, 2, 3, 4, 5};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 6, seq), 0);
	step(&w, 2, 2, 1, A(3, 4, 5, 1, 0));  /* unplaced: first occurrence */
	step(&w, 4, 4, 1, A(5, 3, 2, 1, 0));  /* skipped 3 */
	step(&w, 3, 3, -1, A(2, 1, 0, 4, 5)); /* the neighbour behind: turn */
	step(&w, 1, 1, -1, A(0, 2, 3, 4, 5));
	step(&w, 4, 4, 1, A(5, 3, 2, 1, 0)); /* not ahead downwards: from
						the top */
	cr_assert_eq(w.ended, -1, "jumps are not at an end");
	cr_assert_eq(w.end[NVS_WALK_LAST].count + w.end[NVS_WALK_FIRST].count,
		     0);
	nvs__walk_fini(&w);
}

Test(walk, a_layer_not_in_the_walk_moves_nothing)
{
	const unsigned seq[] = {0, 2, 4};
	struct nvs_walk w;
	struct nvs_walk_ahead it;
	unsigned x;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 3, seq), 0);
	cr_assert_not(nvs__walk_step(&w, 1));
	cr_assert_not(w.placed);
	nvs__walk_ahead_begin(&w, &it);
	cr_assert_not(nvs__walk_ahead_next(&w, &it, &x), "unplaced: none");
	step(&w, 2, 1, 1, A(4, 0));
	cr_assert_not(nvs__walk_step(&w, 5));
	cr_assert_eq(w.pos, 1);
	step(&w, 4, 2, 1, A(2, 0));
	nvs__walk_fini(&w);
}

Test(walk, set_replaces_resets_and_clears)
{
	const unsigned a[] = {5, 6, 7}, b[] = {7, 6};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_not(nvs__walk_step(&w, 5), "empty");
	cr_assert_eq(nvs__walk_set(&w, 3, a), 0);
	step(&w, 6, 1, 1, A(7, 5));
	cr_assert_eq(nvs__walk_set(&w, 2, b), 0);
	cr_assert_not(w.placed, "a new walk starts unplaced");
	step(&w, 6, 1, 1, A(7));
	step(&w, 7, 0, -1, A(6));
	cr_assert_eq(nvs__walk_set(&w, 0, NULL), 0);
	cr_assert_eq(w.n, 0);
	cr_assert_null(w.seq);
	cr_assert_not(nvs__walk_step(&w, 7));
	nvs__walk_fini(&w);
}

Test(walk, out_of_memory_keeps_the_old_walk)
{
	const unsigned a[] = {1, 2}, b[] = {3, 4};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 2, a), 0);
	for (unsigned long i = 1; i <= 2; i++) {
		nvs__alloc_fail_at(i);
		cr_assert_eq(nvs__walk_set(&w, 2, b), -ENOMEM, "allocation %lu",
			     i);
		nvs__alloc_fail_at(0);
		cr_assert_eq(w.n, 2);
		cr_assert_eq(w.seq[0], 1);
	}
	step(&w, 1, 0, 1, A(2));
	nvs__walk_fini(&w);
}

Test(walk, marks_survive_the_generation_wrapping)
{
	const unsigned seq[] = {0, 1, 1, 2};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 4, seq), 0);
	w.gen = ~0u; /* the next listing wraps to 0 */
	w.mark[1] = 1;
	step(&w, 0, 0, 1, A(1, 2));
	cr_assert_eq(w.gen, 1);
	nvs__walk_fini(&w);
}

/* Acquire @layers in order (a pass), nothing checked. */
static void pass(struct nvs_walk *w, const unsigned *layers, unsigned n,
		 int dir)
{
	for (unsigned i = 0; i < n; i++)
		cr_assert(nvs__walk_step(w, layers[dir > 0 ? i : n - 1 - i]));
}

Test(walk, an_optimizer_pass_going_forward_is_learned_and_read_into)
{
	const unsigned seq[] = {0, 1, 2, 3};
	struct nvs_walk w;
	unsigned next;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 4, seq), 0);
	/* step 1: forward, backward, the optimizer forward again */
	pass(&w, seq, 4, 1);
	pass(&w, seq, 4, -1);
	step(&w, 0, 0, 1, A(1, 2, 3));
	cr_assert_eq(w.ended, NVS_WALK_REPEAT,
		     "backward ended where the "
		     "optimizer starts");
	pass(&w, seq + 1, 3, 1);
	/* only turns seen so far: a turn expected, wrongly */
	cr_assert_eq(nvs__walk_expect(&w, NVS_WALK_LAST), NVS_WALK_REPEAT);
	step(&w, 0, 0, 1, A(1, 2, 3)); /* step 2 starts over */
	cr_assert_eq(w.ended, NVS_WALK_RESTART);
	step(&w, 1, 1, 1, A(2, 3, 0));
	step(&w, 2, 2, 1, A(3, 1, 0));
	/* turn, start over: a cycle of two; a turn is next */
	step(&w, 3, 3, 1, A(2, 1, 0));
	cr_assert(nvs__walk_next(&w, &next));
	cr_assert_eq(next, 3);
	pass(&w, seq, 4, -1);
	step(&w, 0, 0, 1, A(1, 2, 3)); /* the optimizer */
	step(&w, 1, 1, 1, A(2, 3, 0));
	/* now the next step's first layers come after the last ones */
	step(&w, 2, 2, 1, A(3, 0, 1));
	step(&w, 3, 3, 1, A(0, 1, 2));
	cr_assert(nvs__walk_next(&w, &next));
	cr_assert_eq(next, 0);
	step(&w, 0, 0, 1, A(1, 2, 3));
	cr_assert_eq(w.ended, NVS_WALK_RESTART);
	nvs__walk_fini(&w);
}

Test(walk, gradient_accumulation_is_a_longer_cycle)
{
	/* two forward/backward pairs, then the optimizer, per step */
	const unsigned seq[] = {0, 1, 2};
	static const enum nvs_walk_outcome want[] = {
		NVS_WALK_REPEAT, NVS_WALK_REPEAT, NVS_WALK_RESTART};
	struct nvs_walk w;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 3, seq), 0);
	for (unsigned step = 0; step < 4; step++) {
		for (unsigned k = 0; k < 3; k++) {
			pass(&w, seq, 3, 1);
			if (step >= 2) /* one cycle seen, and its repeat */
				cr_assert_eq(
					nvs__walk_expect(&w, NVS_WALK_LAST),
					want[k], "step %u, pass %u", step, k);
			if (k < 2)
				pass(&w, seq, 3, -1);
		}
		cr_assert_eq(nvs__walk_expect(&w, NVS_WALK_FIRST),
			     NVS_WALK_REPEAT);
	}
	nvs__walk_fini(&w);
}

Test(walk, ends_that_follow_no_cycle_read_nothing_past_them)
{
	const unsigned seq[] = {0, 1, 2};
	/* no period up to 8 in these 16: T turn, S start over */
	const char *seen = "TTSTSSTTTSSSTSTS";
	struct nvs_walk_ahead it;
	struct nvs_walk w;
	unsigned next;

	nvs__walk_init(&w);
	cr_assert_eq(nvs__walk_set(&w, 3, seq), 0);
	for (const char *c = seen; *c; c++) {
		pass(&w, seq, 3, 1);
		if (*c == 'T')
			pass(&w, seq, 3, -1);
	}
	pass(&w, seq, 3, 1);
	cr_assert_eq(w.end[NVS_WALK_LAST].count, 16);
	cr_assert_eq(nvs__walk_expect(&w, NVS_WALK_LAST), NVS_WALK_OTHER);
	nvs__walk_ahead_begin(&w, &it);
	cr_assert_not(nvs__walk_ahead_next(&w, &it, &next), "nothing past");
	cr_assert_not(nvs__walk_next(&w, &next));
	/* the other end still turns */
	step(&w, 1, 1, -1, A(0, 2));
	/* a new walk forgets */
	cr_assert_eq(nvs__walk_set(&w, 3, seq), 0);
	cr_assert_eq(nvs__walk_expect(&w, NVS_WALK_LAST), NVS_WALK_REPEAT);
	nvs__walk_fini(&w);
}
