// SPDX-License-Identifier: MIT
/*
 * Training steps back to back on real swap files. The swapper: an acquire
 * of a tensor whose write-back is in flight gets its buffer at once, and
 * changes made meanwhile are written again. The parameter swapper: the
 * read-ahead goes on past the walk's ends (the turn, the next step's
 * first layers, an optimizer pass as learned), a clean layer the walk
 * turns on is kept for its repeat, a layer read ahead and then passed
 * gives its buffer back, and every byte survives many steps.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "aio/engine.h"
#include "nvswap/offload.h"
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

/* ------------------------------------------------- parameters, many steps */

enum { MAXL = 16 };

static unsigned char lref[MAXL][SZ];

/* A parameter swapper over @s with @nl one-tensor layers 0..nl-1, the
 * walk 0..nl-1 and read-ahead @la. */
static struct nvs_param_swapper *params(struct nvs_swapper *s, unsigned nl,
					unsigned la)
{
	struct nvs_param_swapper_opts o;
	struct nvs_param_swapper *p = NULL;
	unsigned walk[MAXL];
	size_t sz = SZ;

	nvs_param_swapper_opts_init(&o);
	o.lookahead = la;
	cr_assert_eq(nvs_param_swapper_create(s, &o, &p), 0);
	for (unsigned l = 0; l < nl; l++) {
		const void *init = lref[l];
		tu_fill(lref[l], SZ, 1000 + l);
		cr_assert_eq(nvs_param_add_layer(p, l, 1, &sz, &init), 0, "%s",
			     nvs_last_error());
		walk[l] = l;
	}
	cr_assert_eq(nvs_param_set_walk(p, nl, walk), 0);
	return p;
}

static struct nvs_param_stats pstats(struct nvs_param_swapper *p)
{
	struct nvs_param_stats st;

	cr_assert_eq(nvs_param_swapper_stats(p, &st), 0);
	return st;
}

/* One visit: acquire @l and check it; with @seed nonzero change it and
 * release it dirty, else clean; evict it. */
static void visit(struct nvs_param_swapper *p, unsigned l, uint64_t seed)
{
	void *ptr;

	cr_assert_eq(nvs_param_acquire_layer(p, l, &ptr), 0, "layer %u: %s", l,
		     nvs_last_error());
	cr_assert(!memcmp(ptr, lref[l], SZ), "layer %u differs", l);
	if (seed) {
		tu_fill(lref[l], SZ, seed);
		memcpy(ptr, lref[l], SZ);
	}
	cr_assert_eq(nvs_param_release_layer(p, l, seed != 0), 0);
	cr_assert_eq(nvs_param_evict_layer(p, l), 0, "%s", nvs_last_error());
}

/* Everything written and dropped, then every layer read back from the
 * disk and compared. */
static void check_disk(struct nvs_swapper *s, struct nvs_param_swapper *p,
		       unsigned nl)
{
	cr_assert_eq(nvs_swapper_wait_all(s), 0, "%s", nvs_last_error());
	for (unsigned l = 0; l < nl; l++) {
		uint64_t id = (uint64_t)l << 20;
		cr_assert_eq(nvs_swapper_evict(s, id), 0);
		cr_assert_eq(nvs_swapper_wait(s, id), 0);
		cr_assert_eq(info(s, id).state, NVS_TENSOR_ON_NVME);
	}
	for (unsigned l = 0; l < nl; l++)
		visit(p, l, 0);
}

/* A step of forward and backward, each layer changed at each visit. */
static void fwd_bwd(struct nvs_param_swapper *p, unsigned nl, uint64_t *seed)
{
	for (unsigned l = 0; l < nl; l++)
		visit(p, l, ++*seed);
	for (unsigned l = nl; l-- > 0;)
		visit(p, l, ++*seed);
}

Test(crossstep, a_forward_backward_walk_reads_past_both_turns_exactly)
{
	enum { NL = 8, STEPS = 5 };
	/* a buffer for every layer and two more: no read-ahead is ever
	 * short of one, so every count is exact */
	struct nvs_swapper *s = mk(NL + 2, false);
	struct nvs_param_swapper *p = params(s, NL, 2);
	uint64_t seed = 1;

	for (unsigned k = 0; k < STEPS; k++)
		fwd_bwd(p, NL, &seed);
	struct nvs_param_stats pst = pstats(p);
	struct nvs_swap_stats st = stats(s);
	cr_assert_eq(pst.acquires, 2 * NL * STEPS);
	cr_assert_eq(pst.turns, 2 * STEPS - 1, "each end, but the last");
	cr_assert_eq(pst.restarts, 0);
	/* per step, two layers past each turn: with read-ahead 2, on the
	 * last two visits before it */
	cr_assert_eq(pst.readaheads_past_end, 4 * STEPS);
	cr_assert_eq(pst.kept, 0, "changed layers are written back");
	/* Only the first pass read: every later layer was re-acquired
	 * from the buffer of its write-back (read ahead, or the turn). */
	cr_assert_eq(st.reads, NL);
	cr_assert_eq(st.write_hits, 2 * NL * STEPS - NL);
	check_disk(s, p, NL);
	cr_assert_eq(stats(s).writes, NL + 2 * NL * STEPS, "one a visit");
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* visit(), and whether its acquire took the buffer of a write-back. */
static bool visit_hit(struct nvs_swapper *s, struct nvs_param_swapper *p,
		      unsigned l, uint64_t seed)
{
	uint64_t before = stats(s).write_hits;

	visit(p, l, seed);
	return stats(s).write_hits == before + 1;
}

Test(crossstep, a_small_pool_over_many_steps_starts_each_step_without_io)
{
	struct nvs_swapper *s = mk(4, true);
	struct nvs_param_swapper *p = params(s, MAXL, 2);
	uint64_t seed = 100;
	unsigned k, l;

	/* The first layer of each step after the first is the last one
	 * written back, the turn's the one just written back: both are
	 * acquired from the buffer being written, whatever the disk. */
	for (k = 0; k < 12; k++) {
		for (l = 0; l < MAXL; l++)
			cr_assert(visit_hit(s, p, l, ++seed) || !k || l,
				  "step %u starts", k);
		for (l = MAXL; l-- > 0;)
			cr_assert(visit_hit(s, p, l, ++seed) || l < MAXL - 1,
				  "step %u turns", k);
	}
	cr_assert_eq(pstats(p).turns, 2 * k - 1);
	cr_assert_eq(stats(s).pool_high_water, 4);
	cr_assert_eq(stats(s).checksum_errors, 0);
	check_disk(s, p, MAXL);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(crossstep, an_optimizer_pass_is_learned_and_the_next_step_read_during_it)
{
	enum { NL = 6, STEPS = 5 };
	/* read-ahead 1; every layer fits, as in the first test */
	struct nvs_param_swapper *p;
	struct nvs_swapper *s = mk(NL + 2, false);
	uint64_t seed = 500;

	p = params(s, NL, 1);
	for (unsigned k = 0; k < STEPS; k++) {
		struct nvs_swap_stats a = stats(s), b;
		/* forward and backward read only; the layer at each turn
		 * is kept for its repeat */
		for (unsigned l = 0; l < NL; l++) {
			visit(p, l, 0);
			if (l == 0) {
				b = stats(s);
				/* step 1: from the disk; step 2: the end of
				 * the optimizer pass was taken for a turn;
				 * then learned: read during that pass */
				cr_assert_eq(b.reads - a.reads, k < 2,
					     "step %u starts", k);
			}
		}
		for (unsigned l = NL; l-- > 0;) {
			a = stats(s);
			visit(p, l, 0);
			if (l == NL - 1)
				cr_assert_eq(stats(s).reads - a.reads, 0,
					     "step %u: the turn was kept", k);
		}
		/* the optimizer goes forward again, changing each layer */
		for (unsigned l = 0; l < NL; l++) {
			a = stats(s);
			visit(p, l, ++seed);
			if (l == 0)
				cr_assert_eq(stats(s).reads - a.reads, 0,
					     "step %u: optimizer starts", k);
		}
		/* its write-back drained: only what was read ahead of the
		 * next step is resident when it starts */
		cr_assert_eq(nvs_swapper_wait_all(s), 0);
	}
	struct nvs_param_stats pst = pstats(p);
	cr_assert_eq(pst.turns, 2 * STEPS);
	cr_assert_eq(pst.restarts, STEPS - 1);
	cr_assert_eq(pst.kept, 2 * STEPS,
		     "the last forward and backward "
		     "layer of each step");
	cr_assert_eq(pst.kept_dropped, 0);
	/* past each of the three ends of a step, one layer (read-ahead 1) */
	cr_assert_eq(pst.readaheads_past_end, 3 * STEPS);
	check_disk(s, p, NL);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(crossstep, a_kept_layer_whose_turn_does_not_come_is_given_back_first)
{
	/* one buffer, no automatic eviction: the kept layer must be given
	 * back by the parameter swapper itself */
	struct nvs_swapper *s = mk_with(1, false, false, NULL);
	struct nvs_param_swapper *p = params(s, 3, 1);

	for (unsigned l = 0; l < 3; l++)
		visit(p, l, 0);
	cr_assert_eq(pstats(p).kept, 1);
	cr_assert_eq(info(s, 2u << 20).state, NVS_TENSOR_RESIDENT);
	/* not the turn: a new pass from the first layer */
	visit(p, 0, 0);
	cr_assert_eq(pstats(p).kept_dropped, 1);
	cr_assert_eq(pstats(p).restarts, 1);
	cr_assert_eq(info(s, 2u << 20).state, NVS_TENSOR_ON_NVME);
	visit(p, 1, 0);
	visit(p, 2, 0);
	cr_assert_eq(info(s, 2u << 20).state, NVS_TENSOR_ON_NVME,
		     "learned: a new pass comes, nothing kept");
	cr_assert_eq(pstats(p).kept, 1);
	visit(p, 0, 0);
	cr_assert_eq(pstats(p).restarts, 2);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(crossstep, a_layer_ahead_that_found_no_buffer_is_read_at_the_release)
{
	/* three buffers; the caller holds one with a tensor of its own */
	struct nvs_swapper *s = mk(3, false);
	struct nvs_param_swapper *p = params(s, 4, 2);
	void *x, *ptr;

	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &x), 0);
	cr_assert_eq(nvs_param_acquire_layer(p, 0, &ptr), 0);
	cr_assert_eq(pstats(p).readaheads, 1, "layer 1; none left for 2");
	cr_assert_eq(info(s, 2u << 20).state, NVS_TENSOR_ON_NVME);
	/* a buffer comes back while layer 0 computes */
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_param_release_layer(p, 0, false), 0);
	cr_assert_eq(pstats(p).readaheads, 2, "layer 2, at the release");
	cr_assert_neq(info(s, 2u << 20).state, NVS_TENSOR_ON_NVME);
	visit(p, 1, 0);
	visit(p, 2, 0);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* ------------------------------------------- read ahead, then not used */

Test(crossstep, a_layer_read_ahead_that_the_walk_passes_gives_its_buffer_back)
{
	/* four buffers, no automatic eviction: only the parameter swapper
	 * can give the buffers of the layers it passes back */
	struct nvs_swapper *s = mk_with(4, true, false, NULL);
	struct nvs_param_swapper *p = params(s, 6, 2);
	static const unsigned skips[] = {0, 3, 4, 5};
	void *ptr;

	visit(p, 0, 0);
	cr_assert_eq(pstats(p).readaheads, 2, "layers 1 and 2");
	/* landed: resident, clean, held by nobody */
	cr_assert_eq(nvs_swapper_wait(s, 1u << 20), 0);
	cr_assert_eq(nvs_swapper_wait(s, 2u << 20), 0);
	cr_assert_eq(info(s, 2u << 20).state, NVS_TENSOR_RESIDENT);
	/* the steps now go from 0 to 3: the caller traces a new walk */
	cr_assert_eq(nvs_param_set_walk(p, 4, skips), 0);
	cr_assert_eq(pstats(p).readaheads_unused, 0, "not placed yet");
	cr_assert_eq(nvs_param_acquire_layer(p, 3, &ptr), 0, "%s",
		     nvs_last_error());
	cr_assert(!memcmp(ptr, lref[3], SZ));
	cr_assert_eq(pstats(p).readaheads_unused, 2);
	cr_assert_eq(info(s, 1u << 20).state, NVS_TENSOR_ON_NVME);
	cr_assert_eq(info(s, 2u << 20).state, NVS_TENSOR_ON_NVME);
	/* so both layers of the window found a buffer (before, 1 and 2
	 * held theirs for good and 5 was never read ahead) */
	cr_assert_eq(pstats(p).readaheads, 4);
	cr_assert_neq(info(s, 4u << 20).state, NVS_TENSOR_ON_NVME);
	cr_assert_neq(info(s, 5u << 20).state, NVS_TENSOR_ON_NVME);
	cr_assert_eq(nvs_param_release_layer(p, 3, false), 0);
	cr_assert_eq(nvs_param_evict_layer(p, 3), 0);
	visit(p, 4, 0);
	visit(p, 5, 0);
	/* at the end, 5 was kept and 4 and 3 read ahead for a turn */
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(pstats(p).kept, 1);
	cr_assert_eq(stats(s).buffers_in_use, 3);
	cr_assert_eq(stats(s).reads, 8, "6 layers, and 3 and 4 again");
	/* the next pass starts over instead: 3 and 4, listed ahead in it,
	 * keep what was read for them, however far */
	visit(p, 0, 0);
	cr_assert_eq(pstats(p).kept_dropped, 1);
	cr_assert_eq(pstats(p).readaheads_unused, 2);
	cr_assert_eq(info(s, 4u << 20).state, NVS_TENSOR_RESIDENT);
	cr_assert_eq(stats(s).reads, 9);
	visit(p, 3, 0);
	visit(p, 4, 0);
	cr_assert_eq(stats(s).reads, 9, "3 and 4 were not read again");
	/* what was given back reads again, checked */
	visit(p, 1, 0);
	visit(p, 2, 0);
	cr_assert_eq(stats(s).reads, 11);
	cr_assert_eq(stats(s).checksum_errors, 0);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(crossstep, a_read_ahead_in_flight_is_given_back_once_it_has_landed)
{
	struct nvs_swapper *s = mk_with(2, true, false, NULL);
	unsigned char *ref = malloc(SZ);
	uint64_t before;
	void *ptr;
	int r;

	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	write_back(s, 1, ref, 7);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	before = stats(s).bytes_read;
	cr_assert_eq(nvs__swapper_readahead(s, 1), 1);
	/* left while the read runs; its buffer is not handed back under
	 * the kernel's feet */
	while ((r = nvs__swapper_drop_unused(s, 1)) == -EINPROGRESS)
		cr_assert_eq(info(s, 1).state, NVS_TENSOR_READING);
	cr_assert_eq(r, 1, "%s", nvs_last_error());
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(stats(s).bytes_read - before, SZ, "the read counted");
	cr_assert_eq(nvs__swapper_drop_unused(s, 1), 0, "nothing to give");
	expect(s, 1, ref); /* read again, its checksum checked */
	cr_assert_eq(stats(s).checksum_errors, 0);
	/* a write-back whose buffer the read-ahead kept lets it go */
	write_back(s, 1, ref, 8);
	cr_assert_eq(nvs__swapper_readahead(s, 1), 1);
	cr_assert_eq(nvs__swapper_drop_unused(s, 1), 1);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0);
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	/* held, or changed since: nothing to give */
	cr_assert_eq(nvs_swapper_acquire(s, 1, &ptr), 0);
	cr_assert_eq(nvs__swapper_drop_unused(s, 1), 0);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	cr_assert_eq(nvs__swapper_drop_unused(s, 1), 0);
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_RESIDENT);
	cr_assert(info(s, 1).dirty);
	cr_assert_eq(nvs__swapper_drop_unused(s, 99), 0, "not registered");
	expect(s, 1, ref);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(ref);
}

Test(crossstep, a_failed_read_ahead_given_back_is_the_next_acquires_answer)
{
	/* the first read fails (attempt 2: register's write is the first) */
	struct nvs_fault_plan plan = {
		.rules = {{NVS_FAULT_EIO, 2, 1, NVS_IOREQ_READ, 0}},
		.nrules = 1};
	struct nvs_swapper *s = mk_with(2, true, false, &plan);
	unsigned char *ref = malloc(SZ);
	void *ptr = &ptr;
	int r;

	tu_fill(ref, SZ, 9);
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, ref), 0);
	cr_assert_eq(nvs__swapper_readahead(s, 1), 1);
	while ((r = nvs__swapper_drop_unused(s, 1)) == -EINPROGRESS)
		;
	cr_assert_eq(r, 1, "its buffer back");
	cr_assert_eq(info(s, 1).state, NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(stats(s).reads, 0);
	/* as a failed prefetch: the next acquire says so, the one after
	 * reads again */
	cr_assert_eq(nvs_swapper_acquire(s, 1, &ptr), -EIO);
	cr_assert_null(ptr);
	expect(s, 1, ref);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(ref);
}

Test(crossstep, param_stats_bad_input)
{
	struct nvs_swapper *s = mk(2, false);
	struct nvs_param_swapper *p = params(s, 2, 1);
	struct nvs_param_stats st;

	cr_assert_eq(nvs_param_swapper_stats(NULL, &st), -EINVAL);
	cr_assert_eq(nvs_param_swapper_stats(p, NULL), -EINVAL);
	cr_assert_eq(nvs_param_swapper_stats(p, &st), 0);
	cr_assert_eq(st.acquires, 0);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
