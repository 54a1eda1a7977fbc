// SPDX-License-Identifier: MIT
/*
 * The role swappers on real swap files: parameter walks with read-ahead in
 * both directions, clean eviction, max_in_cpu, a randomized reference
 * check; the optimizer swapper pipelined with 2 to 8 buffers giving the
 * same result as memory; gradients accumulated across micro-batches at
 * unaligned offsets; and the bad inputs.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/offload.h"
#include "nvswap/swapper.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(offload, .fini = fini);

static struct nvs_swapper *core(size_t bufsz, unsigned count, const char *name)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = tu_dir();
	o.name = name;
	o.buffer_size = bufsz;
	o.buffer_count = count;
	o.aio.queue_depth = 8;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

static enum nvs_tensor_state state_of(struct nvs_swapper *s, uint64_t id)
{
	struct nvs_tensor_info i;

	cr_assert_eq(nvs_swapper_info(s, id, &i), 0, "%s", nvs_last_error());
	return i.state;
}

/* The core id of layer @l's packed tensors (id_base 0). */
static uint64_t id_of(unsigned l)
{
	return (uint64_t)l << 20;
}

/* ------------------------------------------------------------ parameters */

enum { L = 8, W = 12000, B = 300 }; /* per layer: W and B bytes */

static unsigned char ref[L][2][W];

static struct nvs_param_swapper *params_la(struct nvs_swapper *s, uint64_t cpu,
					   unsigned lookahead)
{
	struct nvs_param_swapper_opts o;
	struct nvs_param_swapper *p = NULL;

	nvs_param_swapper_opts_init(&o);
	o.max_in_cpu = cpu;
	o.lookahead = lookahead;
	cr_assert_eq(nvs_param_swapper_create(s, &o, &p), 0);
	for (unsigned l = 0; l < L; l++) {
		size_t sz[2] = {W, B};
		const void *init[2] = {ref[l][0], ref[l][1]};
		tu_fill(ref[l][0], W, l);
		tu_fill(ref[l][1], B, 100 + l);
		cr_assert_eq(nvs_param_add_layer(p, l, 2, sz, init), 0, "%s",
			     nvs_last_error());
	}
	return p;
}

static struct nvs_param_swapper *params(struct nvs_swapper *s, uint64_t cpu)
{
	return params_la(s, cpu, 1);
}

static void check_layer(void **ptr, unsigned l)
{
	cr_assert(!memcmp(ptr[0], ref[l][0], W), "layer %u weights", l);
	cr_assert(!memcmp(ptr[1], ref[l][1], B), "layer %u bias", l);
}

Test(offload, a_forward_walk_reads_the_next_layer_ahead)
{
	struct nvs_swapper *s = core(16384, 4, NULL);
	struct nvs_param_swapper *p = params(s, 0);
	void *ptr[2];

	for (unsigned l = 0; l < L; l++) {
		cr_assert_eq(nvs_param_acquire_layer(p, l, ptr), 0, "%s",
			     nvs_last_error());
		check_layer(ptr, l);
		if (l + 1 < L)
			cr_assert_neq(state_of(s, id_of(l + 1)),
				      NVS_TENSOR_ON_NVME, "layer %u ahead",
				      l + 1);
		cr_assert_eq(nvs_param_release_layer(p, l, false), 0);
		cr_assert_eq(nvs_param_evict_layer(p, l), 0);
	}
	struct nvs_swap_stats st;
	nvs_swapper_stats(s, &st);
	cr_assert_eq(st.writes, L,
		     "only register wrote: clean layers are "
		     "dropped");
	cr_assert_eq(st.clean_evictions, L);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	nvs_swapper_stats(s, &st);
	cr_assert_eq(st.tensors, 0, "destroy unregisters");
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, a_backward_walk_reads_ahead_downwards_and_keeps_updates)
{
	struct nvs_swapper *s = core(16384, 4, NULL);
	struct nvs_param_swapper *p = params(s, 0);
	void *ptr[2];

	cr_assert_eq(nvs_param_acquire_layer(p, L - 1, ptr), 0);
	cr_assert_eq(nvs_param_release_layer(p, L - 1, false), 0);
	cr_assert_eq(nvs_param_evict_layer(p, L - 1), 0);
	for (int l = L - 2; l >= 0; l--) {
		cr_assert_eq(nvs_param_acquire_layer(p, (unsigned)l, ptr), 0);
		if (l > 0)
			cr_assert_neq(state_of(s, id_of((unsigned)l - 1)),
				      NVS_TENSOR_ON_NVME, "layer %d ahead",
				      l - 1);
		/* the optimizer changed it */
		tu_fill(ref[l][0], W, 1000 + (unsigned)l);
		memcpy(ptr[0], ref[l][0], W);
		cr_assert_eq(nvs_param_release_layer(p, (unsigned)l, true), 0);
		cr_assert_eq(nvs_param_evict_layer(p, (unsigned)l), 0);
		/* Its write-back holds a buffer until it lands, and read-ahead
		 * takes only free ones (it shrinks, never stalls): written
		 * before the next acquire, so that "ahead" does not depend on
		 * the disk's speed (a loaded host failed it on io_uring). */
		cr_assert_eq(nvs_swapper_wait(s, id_of((unsigned)l)), 0);
	}
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	for (unsigned l = 0; l < L; l++) {
		cr_assert_eq(nvs_param_acquire_layer(p, l, ptr), 0);
		check_layer(ptr, l);
		cr_assert_eq(nvs_param_release_layer(p, l, false), 0);
		cr_assert_eq(nvs_param_evict_layer(p, l), 0);
	}
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, max_in_cpu_keeps_the_first_layers_off_the_disk)
{
	struct nvs_swapper *s = core(16384, 2, NULL);
	/* packed: 12032 + 320 bytes a layer */
	struct nvs_param_swapper *p = params(s, 3 * (12032 + 320) + 10);
	struct nvs_swap_stats st;
	void *ptr[2];

	for (unsigned l = 0; l < L; l++)
		cr_assert_eq(nvs_param_layer_in_cpu(p, l), l < 3, "layer %u",
			     l);
	nvs_swapper_stats(s, &st);
	cr_assert_eq(st.tensors, L - 3, "one packed tensor a layer");
	cr_assert_eq(st.writes, L - 3);
	cr_assert_eq(nvs_param_acquire_layer(p, 1, ptr), 0);
	check_layer(ptr, 1);
	memset(ptr[1], 7, B);
	memset(ref[1][1], 7, B);
	cr_assert_eq(nvs_param_release_layer(p, 1, true), 0);
	cr_assert_eq(nvs_param_evict_layer(p, 1), 0, "a no-op");
	cr_assert_eq(nvs_param_acquire_layer(p, 1, ptr), 0);
	check_layer(ptr, 1);
	cr_assert_eq(nvs_param_release_layer(p, 1, false), 0);
	nvs_swapper_stats(s, &st);
	cr_assert_eq(st.writes, L - 3, "the in-CPU layer was not written");
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, add_layer_where_chooses_which_layers_stay_in_cpu)
{
	struct nvs_swapper *s = core(16384, 2, NULL);
	struct nvs_param_swapper_opts o;
	struct nvs_param_swapper *p = NULL;
	static unsigned char big[40000], small[1000];
	size_t bsz = sizeof(big), ssz = sizeof(small);
	const void *bi[1] = {big}, *si[1] = {small};
	void *ptr[1];

	tu_fill(big, bsz, 1);
	tu_fill(small, ssz, 2);
	nvs_param_swapper_opts_init(&o);
	o.max_in_cpu = bsz + ssz;
	cr_assert_eq(nvs_param_swapper_create(s, &o, &p), 0);
	/* streamed whatever max_in_cpu has left */
	cr_assert_eq(nvs_param_add_layer_where(p, 0, 1, &ssz, si, false), 0);
	/* larger than a pool buffer (16 KiB): only as a CPU layer */
	cr_assert_eq(nvs_param_add_layer_where(p, 1, 1, &bsz, bi, true), 0,
		     "%s", nvs_last_error());
	cr_assert_eq(nvs_param_add_layer_where(p, 2, 1, &ssz, si, true), 0);
	/* max_in_cpu is spent: first fit streams it */
	cr_assert_eq(nvs_param_add_layer_where(p, 3, 1, &ssz, si, true), 0);
	cr_assert(!nvs_param_layer_in_cpu(p, 0));
	cr_assert(nvs_param_layer_in_cpu(p, 1));
	cr_assert(nvs_param_layer_in_cpu(p, 2));
	cr_assert(!nvs_param_layer_in_cpu(p, 3));
	cr_assert_eq(nvs_param_add_layer_where(p, 4, 1, &bsz, bi, false),
		     -EFBIG, "%s", nvs_last_error());
	cr_assert_eq(nvs_param_acquire_layer(p, 1, ptr), 0);
	cr_assert(memcmp(ptr[0], big, bsz) == 0);
	cr_assert_eq(nvs_param_release_layer(p, 1, false), 0);
	cr_assert_eq(nvs_param_acquire_layer(p, 0, ptr), 0);
	cr_assert(memcmp(ptr[0], small, ssz) == 0);
	cr_assert_eq(nvs_param_release_layer(p, 0, false), 0);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, random_parameter_walks_match_a_reference)
{
	struct nvs_swapper *s = core(16384, 3, NULL);
	struct nvs_param_swapper *p = params(s, W + B);
	uint64_t x = 77;
	void *ptr[2];

	for (unsigned step = 0; step < 400; step++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		unsigned l = (unsigned)(x >> 33) % L;
		bool dirty = (x >> 20) & 1;
		cr_assert_eq(nvs_param_acquire_layer(p, l, ptr), 0, "%s",
			     nvs_last_error());
		check_layer(ptr, l);
		if (dirty) {
			tu_fill(ref[l][0], W, step);
			memcpy(ptr[0], ref[l][0], W);
		}
		cr_assert_eq(nvs_param_release_layer(p, l, dirty), 0);
		if ((x >> 40) % 4)
			cr_assert_eq(nvs_param_evict_layer(p, l), 0);
		else /* leave it resident; evict everything else */
			for (unsigned k = 0; k < L; k++)
				if (k != l)
					cr_assert_eq(
						nvs_param_evict_layer(p, k), 0);
	}
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, parameter_bad_input)
{
	struct nvs_swapper *s = core(16384, 2, NULL);
	struct nvs_param_swapper_opts o;
	struct nvs_param_swapper *p = NULL;
	size_t sz[2] = {100, 16300}; /* 128 + 16320 packed: over 16384 */
	void *ptr[2];

	nvs_param_swapper_opts_init(&o);
	cr_assert_eq(nvs_param_swapper_create(NULL, &o, &p), -EINVAL);
	cr_assert_null(p);
	o.size = 0;
	cr_assert_eq(nvs_param_swapper_create(s, &o, &p), -EINVAL);
	nvs_param_swapper_opts_init(&o);
	cr_assert_eq(nvs_param_swapper_create(s, &o, &p), 0);
	cr_assert_eq(nvs_param_add_layer(p, 0, 2, sz, NULL), -EFBIG,
		     "a layer larger than a pool buffer, packed");
	cr_assert(strstr(nvs_last_error(), "layer 0"), "%s", nvs_last_error());
	cr_assert_eq(nvs_param_acquire_layer(p, 0, ptr), -ENOENT,
		     "nothing was added");
	cr_assert_eq(nvs_param_add_layer(p, 0, 0, sz, NULL), -EINVAL);
	cr_assert_eq(nvs_param_add_layer(p, 0, 1, sz, NULL), 0);
	cr_assert_eq(nvs_param_add_layer(p, 0, 1, sz, NULL), -EEXIST);
	cr_assert_eq(nvs_param_acquire_layer(p, 5, ptr), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "no layer 5"));
	cr_assert_eq(nvs_param_prefetch_layer(p, 5), -ENOENT);
	cr_assert_eq(nvs_param_release_layer(p, 0, false), -EBUSY);
	cr_assert_eq(nvs_param_acquire_layer(p, 0, ptr), 0);
	cr_assert_eq(nvs_param_acquire_layer(p, 0, ptr), -EBUSY);
	cr_assert_eq(nvs_param_evict_layer(p, 0), -EBUSY);
	cr_assert_eq(nvs_param_release_layer(p, 0, false), 0);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_param_swapper_destroy(NULL), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* ------------------------------------------------------ a traced walk */

#define END ~0u
#define A(...) ((const unsigned[]){__VA_ARGS__, END})
#define NOTHING ((const unsigned[]){END})

/* Acquire @l: exactly the layers @want (END-terminated) are read ahead
 * (started reads, layers off the disk); then everything goes back to
 * the disk (but the layer the walk turns on, kept for its repeat), so
 * each step starts from the same state. */
static void walk_step(struct nvs_swapper *s, struct nvs_param_swapper *p,
		      unsigned l, const unsigned *want)
{
	struct nvs_swap_stats a, b;
	bool ahead[L] = {false};
	unsigned n = 0;
	void *ptr[2];

	for (; want[n] != END; n++)
		ahead[want[n]] = true;
	nvs_swapper_stats(s, &a);
	cr_assert_eq(nvs_param_acquire_layer(p, l, ptr), 0, "%s",
		     nvs_last_error());
	check_layer(ptr, l);
	nvs_swapper_stats(s, &b);
	cr_assert_eq(b.prefetches - a.prefetches, n, "after layer %u", l);
	for (unsigned k = 0; k < L; k++)
		if (k != l)
			cr_assert_eq(
				state_of(s, id_of(k)) != NVS_TENSOR_ON_NVME,
				ahead[k], "after layer %u: layer %u", l, k);
	cr_assert_eq(nvs_param_release_layer(p, l, false), 0);
	for (unsigned k = 0; k < L; k++)
		cr_assert_eq(nvs_param_evict_layer(p, k), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
}

Test(offload, a_permuted_walk_reads_ahead_in_its_order_both_ways)
{
	const unsigned walk[L] = {3, 0, 6, 1, 7, 2, 5, 4};
	struct nvs_swapper *s = core(16384, L, NULL);
	struct nvs_param_swapper *p = params_la(s, 0, 2);

	cr_assert_eq(nvs_param_set_walk(p, L, walk), 0, "%s", nvs_last_error());
	/* forward; near the end on past the turn, back along the walk */
	for (unsigned i = 0; i < L; i++)
		walk_step(s, p, walk[i],
			  i + 2 < L   ? A(walk[i + 1], walk[i + 2])
			  : i + 1 < L ? A(walk[i + 1], walk[i - 1])
				      : A(walk[i - 1], walk[i - 2]));
	/* backward: the last layer again turns the walk; near the start,
	 * the next step's first layers */
	for (unsigned i = L; i-- > 0;)
		walk_step(s, p, walk[i],
			  i >= 2   ? A(walk[i - 1], walk[i - 2])
			  : i == 1 ? A(walk[0], walk[2])
				   : A(walk[1], walk[2]));
	walk_step(s, p, walk[0], A(walk[1], walk[2])); /* the next step */
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, a_walk_with_repeats_reads_each_layer_ahead_once)
{
	/* layer 0 tied: used first and last; layer 2 called twice */
	const unsigned walk[] = {0, 1, 2, 2, 3, 0};
	struct nvs_swapper *s = core(16384, L, NULL);
	struct nvs_param_swapper *p = params_la(s, 0, 2);

	cr_assert_eq(nvs_param_set_walk(p, 6, walk), 0, "%s", nvs_last_error());
	walk_step(s, p, 0, A(1, 2));
	walk_step(s, p, 1, A(2, 3));
	walk_step(s, p, 2, A(3, 0));
	walk_step(s, p, 2, A(3, 0));
	walk_step(s, p, 3, A(0, 2));
	walk_step(s, p, 0, A(3, 2));
	walk_step(s, p, 0, A(3, 2)); /* backward */
	walk_step(s, p, 3, A(2, 1));
	walk_step(s, p, 2, A(1, 0));
	walk_step(s, p, 2, A(1, 0));
	walk_step(s, p, 1, A(0, 2));
	walk_step(s, p, 0, A(1, 2));
	walk_step(s, p, 0, A(1, 2)); /* the next step */
	/* a layer not in the walk: no read-ahead, the position stays */
	walk_step(s, p, 5, NOTHING);
	walk_step(s, p, 1, A(2, 3));
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, an_empty_walk_restores_read_ahead_by_number)
{
	const unsigned walk[] = {3, 6, 1};
	struct nvs_swapper *s = core(16384, L, NULL);
	struct nvs_param_swapper *p = params_la(s, 0, 2);

	walk_step(s, p, 3, A(4, 5));
	cr_assert_eq(nvs_param_set_walk(p, 3, walk), 0);
	walk_step(s, p, 3, A(6, 1));
	walk_step(s, p, 6, A(1, 3));
	cr_assert_eq(nvs_param_set_walk(p, 0, NULL), 0);
	walk_step(s, p, 6, A(7));
	walk_step(s, p, 3, A(2, 1)); /* downwards after a higher layer */
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, set_walk_bad_input_keeps_the_walk)
{
	const unsigned walk[] = {2, 0}, bad[] = {1, 4, 9};
	struct nvs_swapper *s = core(16384, L, NULL);
	struct nvs_param_swapper *p = params_la(s, 0, 1);

	cr_assert_eq(nvs_param_set_walk(p, 2, walk), 0);
	cr_assert_eq(nvs_param_set_walk(NULL, 2, walk), -EINVAL);
	cr_assert_eq(nvs_param_set_walk(p, 2, NULL), -EINVAL);
	cr_assert_eq(nvs_param_set_walk(p, NVS_OFFLOAD_MAX_WALK + 1, walk),
		     -EINVAL);
	cr_assert(strstr(nvs_last_error(), "at most 4194304"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_param_set_walk(p, 3, bad), -ENOENT);
	cr_assert(strstr(nvs_last_error(),
			 "entry 2 of the walk is layer 9, which was not added"),
		  "%s", nvs_last_error());
	walk_step(s, p, 2, A(0)); /* the walk set first */
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* ------------------------------------------------------- optimizer state */

enum { G = 5, N = 1000 }; /* groups of N floats: master, exp_avg, exp_avg_sq */

/* A step of Adam on one group, with a made-up gradient. */
static void adam(float *w, float *m, float *v, unsigned step, unsigned g)
{
	const float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f;

	for (unsigned i = 0; i < N; i++) {
		float grad =
			(float)((i * 7 + g * 13 + step) % 17) / 17.0f - 0.5f;
		m[i] = b1 * m[i] + (1 - b1) * grad;
		v[i] = b2 * v[i] + (1 - b2) * grad * grad;
		w[i] -= lr * m[i] / (sqrtf(v[i]) + eps);
	}
}

static void run_optim(unsigned buffers, bool pipelined, float out[G][3][N])
{
	char name[32];
	snprintf(name, sizeof(name), "opt%u%d", buffers, pipelined);
	struct nvs_swapper *s = core(3 * N * 4 + 192, buffers, name);
	struct nvs_optim_swapper_opts o;
	struct nvs_optim_swapper *x;
	size_t sz[3] = {N * 4, N * 4, N * 4};
	float init[N];

	for (unsigned i = 0; i < N; i++)
		init[i] = (float)i / N;
	const void *iv[3] = {init, NULL, NULL};
	nvs_optim_swapper_opts_init(&o);
	o.pipeline_read = o.pipeline_write = pipelined;
	cr_assert_eq(nvs_optim_swapper_create(s, &o, &x), 0);
	for (unsigned g = 0; g < G; g++)
		cr_assert_eq(nvs_optim_add_group(x, g, 3, sz, iv), 0);
	for (unsigned step = 1; step <= 3; step++)
		for (unsigned g = 0; g < G; g++) {
			void *st[3];
			cr_assert_eq(nvs_optim_swap_in(x, g, st), 0,
				     "%u buffers: %s", buffers,
				     nvs_last_error());
			adam(st[0], st[1], st[2], step, g);
			cr_assert_eq(nvs_optim_swap_out(x, g), 0, "%s",
				     nvs_last_error());
		}
	for (unsigned g = 0; g < G; g++) {
		void *st[3];
		cr_assert_eq(nvs_optim_swap_in(x, g, st), 0);
		for (unsigned k = 0; k < 3; k++)
			memcpy(out[g][k], st[k], N * 4);
		cr_assert_eq(nvs_optim_swap_out(x, g), 0);
	}
	cr_assert_eq(nvs_optim_swapper_destroy(x), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

static float mem[G][3][N], swp[G][3][N];

Test(offload, pipelined_optimizer_with_2_to_8_buffers_matches_memory)
{
	for (unsigned g = 0; g < G; g++) {
		for (unsigned i = 0; i < N; i++) {
			mem[g][0][i] = (float)i / N;
			mem[g][1][i] = mem[g][2][i] = 0;
		}
	}
	for (unsigned step = 1; step <= 3; step++)
		for (unsigned g = 0; g < G; g++)
			adam(mem[g][0], mem[g][1], mem[g][2], step, g);
	for (unsigned b = 1; b <= 8; b++) {
		run_optim(b, true, swp);
		cr_assert(!memcmp(swp, mem, sizeof(mem)), "%u buffers", b);
	}
	run_optim(2, false, swp);
	cr_assert(!memcmp(swp, mem, sizeof(mem)), "not pipelined");
}

Test(offload, optimizer_bad_input)
{
	struct nvs_swapper *s = core(4096, 2, NULL);
	struct nvs_optim_swapper_opts o;
	struct nvs_optim_swapper *x;
	size_t sz[3] = {1000, 1000, 1000};
	void *st[3];

	nvs_optim_swapper_opts_init(&o);
	cr_assert_eq(nvs_optim_swapper_create(s, &o, &x), 0);
	cr_assert_eq(nvs_optim_add_group(x, 0, 3, sz, NULL), 0);
	sz[2] = 3000;
	cr_assert_eq(nvs_optim_add_group(x, 1, 3, sz, NULL), -EFBIG);
	cr_assert_eq(nvs_optim_swap_in(x, 0, st), 0);
	cr_assert_eq((char *)st[1] - (char *)st[0], 1024, "packed, aligned");
	cr_assert_eq(nvs_optim_swap_in(x, 0, st), -EBUSY);
	cr_assert_eq(nvs_optim_swap_out(x, 0), 0);
	cr_assert_eq(nvs_optim_swap_out(x, 0), -EBUSY, "not swapped in");
	cr_assert_eq(nvs_optim_swap_in(x, 9, st), -ENOENT);
	cr_assert_eq(nvs_optim_swapper_destroy(x), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* ------------------------------------------------------------- gradients */

Test(offload, gradients_accumulate_across_micro_batches_at_odd_offsets)
{
	enum { R = 10000, M = 3 };
	struct nvs_swapper *s = core(R * 4, 2, NULL);
	struct nvs_grad_swapper_opts o;
	struct nvs_grad_swapper *g;
	static float want[2][R], part[R];
	const void *p;

	nvs_grad_swapper_opts_init(&o);
	cr_assert_eq(nvs_grad_swapper_create(s, &o, &g), 0);
	cr_assert_eq(nvs_grad_add_group(g, 0, R * 4), 0);
	cr_assert_eq(nvs_grad_add_group(g, 1, R * 4 - 4), 0);
	memset(want, 0, sizeof(want));
	for (unsigned mb = 0; mb < M; mb++) {
		for (unsigned grp = 0; grp < 2; grp++) {
			size_t len = grp ? R - 1 : R;
			/* partitions of 333 floats (1332 bytes: not a
			 * multiple of any block) written behind in order */
			for (size_t off = 0; off < len; off += 333) {
				size_t n = len - off < 333 ? len - off : 333;
				for (size_t i = 0; i < n; i++) {
					part[i] = (float)(mb + 1) *
						  (float)(off + i + grp);
					want[grp][off + i] += part[i];
				}
				cr_assert_eq(
					nvs_grad_write(g, grp, off * 4, part,
						       n * 4,
						       NVS_GRAD_ACCUMULATE_F32),
					0, "%s", nvs_last_error());
			}
			cr_assert_eq(nvs_grad_flush(g, grp), 0);
		}
	}
	for (unsigned grp = 0; grp < 2; grp++) {
		cr_assert_eq(nvs_grad_acquire(g, grp, &p), 0, "%s",
			     nvs_last_error());
		cr_assert(!memcmp(p, want[grp], (grp ? R - 1 : R) * 4),
			  "group %u", grp);
		cr_assert_eq(
			nvs_grad_write(g, grp, 0, part, 4, NVS_GRAD_ASSIGN),
			-EBUSY, "acquired for reading");
		cr_assert_eq(nvs_grad_release(g, grp), 0);
	}
	/* A new step starts from zeros, without I/O. */
	struct nvs_swap_stats a, b;
	nvs_swapper_stats(s, &a);
	cr_assert_eq(nvs_grad_zero(g, 0), 0);
	cr_assert_eq(nvs_grad_acquire(g, 0, &p), 0);
	static const float zero[R];
	cr_assert(!memcmp(p, zero, sizeof(zero)));
	cr_assert_eq(nvs_grad_release(g, 0), 0);
	nvs_swapper_stats(s, &b);
	cr_assert_eq(b.bytes_read, a.bytes_read);
	cr_assert_eq(nvs_grad_swapper_destroy(g), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, gradient_bad_input)
{
	struct nvs_swapper *s = core(4096, 2, NULL);
	struct nvs_grad_swapper_opts o;
	struct nvs_grad_swapper *g;
	float v[4] = {1, 2, 3, 4};

	nvs_grad_swapper_opts_init(&o);
	cr_assert_eq(nvs_grad_swapper_create(s, &o, &g), 0);
	cr_assert_eq(nvs_grad_add_group(g, 0, 100), 0);
	cr_assert_eq(nvs_grad_add_group(g, 1, 5000), -EFBIG);
	cr_assert_eq(nvs_grad_write(g, 0, 96, v, 8, NVS_GRAD_ASSIGN), -EINVAL,
		     "past the end");
	cr_assert(strstr(nvs_last_error(), "outside gradient group 0"));
	cr_assert_eq(nvs_grad_write(g, 0, 2, v, 8, NVS_GRAD_ACCUMULATE_F32),
		     -EINVAL);
	cr_assert_eq(nvs_grad_write(g, 0, 0, v, 8, (enum nvs_grad_mode)5),
		     -EINVAL);
	cr_assert_eq(nvs_grad_write(g, 3, 0, v, 8, NVS_GRAD_ASSIGN), -ENOENT);
	cr_assert_eq(nvs_grad_write(g, 0, 1, v, 7, NVS_GRAD_ASSIGN), 0,
		     "any offset and size");
	cr_assert_eq(nvs_grad_zero(g, 0), -EBUSY, "open");
	cr_assert_eq(nvs_grad_flush(g, 0), 0);
	cr_assert_eq(nvs_grad_flush(g, 0), 0, "nothing pending");
	cr_assert_eq(nvs_grad_zero(g, 0), 0);
	/* Open regions hold their buffers until flushed: a third region on
	 * a two-buffer pool cannot open. */
	cr_assert_eq(nvs_grad_add_group(g, 1, 100), 0);
	cr_assert_eq(nvs_grad_add_group(g, 2, 100), 0);
	cr_assert_eq(nvs_grad_write(g, 0, 0, v, 4, NVS_GRAD_ASSIGN), 0);
	cr_assert_eq(nvs_grad_write(g, 1, 0, v, 4, NVS_GRAD_ASSIGN), 0);
	cr_assert_eq(nvs_grad_write(g, 2, 0, v, 4, NVS_GRAD_ASSIGN), -EDEADLK);
	cr_assert_eq(nvs_grad_flush(g, 0), 0);
	cr_assert_eq(nvs_grad_write(g, 2, 0, v, 4, NVS_GRAD_ASSIGN), 0);
	cr_assert_eq(nvs_grad_swapper_destroy(g), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

static uint64_t rnd(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

Test(offload, random_gradient_writes_flushes_and_zeros_match_a_reference)
{
	enum { GR = 3, F = 3000 };
	/* An open region holds a buffer until its flush: one each. */
	struct nvs_swapper *s = core(F * 4, GR, NULL);
	struct nvs_grad_swapper_opts o;
	struct nvs_grad_swapper *g;
	static float want[GR][F], part[F];
	uint64_t x = 5;
	const void *p;

	nvs_grad_swapper_opts_init(&o);
	cr_assert_eq(nvs_grad_swapper_create(s, &o, &g), 0);
	for (unsigned k = 0; k < GR; k++)
		cr_assert_eq(nvs_grad_add_group(g, k, F * 4), 0);
	memset(want, 0, sizeof(want));
	for (unsigned step = 0; step < 600; step++) {
		unsigned k = (unsigned)(rnd(&x) % GR), what = rnd(&x) % 10;
		size_t off = rnd(&x) % F, n = 1 + rnd(&x) % (F - off);
		if (what < 4) { /* accumulate a partition of floats */
			for (size_t i = 0; i < n; i++) {
				part[i] = (float)(rnd(&x) % 1000) / 7.0f;
				want[k][off + i] += part[i];
			}
			cr_assert_eq(nvs_grad_write(g, k, off * 4, part, n * 4,
						    NVS_GRAD_ACCUMULATE_F32),
				     0, "%s", nvs_last_error());
		} else if (what < 6) { /* assign bytes anywhere */
			size_t boff = rnd(&x) % (F * 4),
			       bn = 1 + rnd(&x) % (F * 4 - boff);
			unsigned char *b = (unsigned char *)part;
			for (size_t i = 0; i < bn; i++)
				b[i] = (unsigned char)rnd(&x);
			memcpy((unsigned char *)want[k] + boff, b, bn);
			cr_assert_eq(nvs_grad_write(g, k, boff, b, bn,
						    NVS_GRAD_ASSIGN),
				     0, "%s", nvs_last_error());
		} else if (what < 8) {
			cr_assert_eq(nvs_grad_flush(g, k), 0);
		} else if (what < 9) {
			cr_assert_eq(nvs_grad_acquire(g, k, &p), 0, "%s",
				     nvs_last_error());
			cr_assert(!memcmp(p, want[k], sizeof(want[k])),
				  "group %u at step %u", k, step);
			cr_assert_eq(nvs_grad_release(g, k), 0);
		} else {
			cr_assert_eq(nvs_grad_flush(g, k), 0);
			cr_assert_eq(nvs_grad_zero(g, k), 0);
			memset(want[k], 0, sizeof(want[k]));
		}
	}
	for (unsigned k = 0; k < GR; k++) {
		cr_assert_eq(nvs_grad_acquire(g, k, &p), 0);
		cr_assert(!memcmp(p, want[k], sizeof(want[k])), "group %u", k);
		cr_assert_eq(nvs_grad_release(g, k), 0);
	}
	cr_assert_eq(nvs_grad_swapper_destroy(g), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(offload, random_optimizer_swaps_in_any_order_match_a_reference)
{
	enum { GR = 6, F = 500 };
	static float want[GR][2][F];
	uint64_t x = 9;

	for (unsigned buffers = 1; buffers <= 4; buffers++) {
		char name[16];
		snprintf(name, sizeof(name), "r%u", buffers);
		struct nvs_swapper *s = core(2 * F * 4 + 64, buffers, name);
		struct nvs_optim_swapper_opts o;
		struct nvs_optim_swapper *opt;
		size_t sz[2] = {F * 4, F * 4};
		nvs_optim_swapper_opts_init(&o);
		o.pipeline_read = buffers % 2;
		o.pipeline_write = buffers > 2;
		cr_assert_eq(nvs_optim_swapper_create(s, &o, &opt), 0);
		memset(want, 0, sizeof(want));
		for (unsigned k = 0; k < GR; k++)
			cr_assert_eq(nvs_optim_add_group(opt, k, 2, sz, NULL),
				     0);
		for (unsigned step = 0; step < 300; step++) {
			unsigned k = (unsigned)(rnd(&x) % GR);
			void *st[2];
			cr_assert_eq(nvs_optim_swap_in(opt, k, st), 0, "%s",
				     nvs_last_error());
			cr_assert(!memcmp(st[0], want[k][0], F * 4) &&
					  !memcmp(st[1], want[k][1], F * 4),
				  "group %u, %u buffers, step %u", k, buffers,
				  step);
			for (unsigned t = 0; t < 2; t++)
				for (unsigned i = rnd(&x) % F; i < F; i += 37) {
					float v = (float)(rnd(&x) % 100);
					want[k][t][i] = v;
					((float *)st[t])[i] = v;
				}
			cr_assert_eq(nvs_optim_swap_out(opt, k), 0, "%s",
				     nvs_last_error());
		}
		cr_assert_eq(nvs_optim_swapper_destroy(opt), 0);
		cr_assert_eq(nvs_swapper_destroy(s), 0);
	}
}
