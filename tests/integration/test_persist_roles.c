// SPDX-License-Identifier: MIT
/*
 * The role swappers (parameters, optimizer state, gradients) over a
 * persistent swap set: layers and groups survive destroy and a reopen,
 * the saved bytes win over the init given when they are added again, a
 * changed layout (count or sizes) is refused naming the group, and
 * max_in_cpu keeps nothing out of the set; opened with buffers smaller
 * than a layer, read-ahead passes over it and nvs_swapper_read() copies it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "nvswap/offload.h"
#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(persist_roles, .fini = fini);

enum { BUF = 256 << 10, NL = 3, OPT_BASE = 1 };

static const size_t sizes[2] = {10000, 30000};

static struct nvs_swapper *open_set(int persist)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	tu_swapper_opts(&o, BUF, 4);
	o.persist = (uint8_t)persist;
	o.name = "roles";
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* Layer or group @g's tensor @i at step @k. */
static void fill(void *p, unsigned g, unsigned i, unsigned k)
{
	tu_fill(p, sizes[i], g * 131u + i * 17u + k * 1000003u);
}

static void check(const void *p, unsigned g, unsigned i, unsigned k)
{
	char want[30000];

	fill(want, g, i, k);
	cr_assert(memcmp(p, want, sizes[i]) == 0,
		  "group %u tensor %u is not step %u", g, i, k);
}

struct roles {
	struct nvs_swapper *core;
	struct nvs_param_swapper *par;
	struct nvs_optim_swapper *opt;
};

/* Both roles over one set, every layer and group added with step @k as
 * its init. Return: the first add's result. */
static int open_roles(struct roles *r, int persist, unsigned k,
		      uint64_t max_in_cpu)
{
	struct nvs_param_swapper_opts po;
	struct nvs_optim_swapper_opts oo;
	static char init[NL][2][30000];
	int first = 0;

	r->core = open_set(persist);
	nvs_param_swapper_opts_init(&po);
	po.max_in_cpu = max_in_cpu;
	cr_assert_eq(nvs_param_swapper_create(r->core, &po, &r->par), 0);
	nvs_optim_swapper_opts_init(&oo);
	oo.id_base = (uint64_t)OPT_BASE << 40;
	cr_assert_eq(nvs_optim_swapper_create(r->core, &oo, &r->opt), 0);
	for (unsigned g = 0; g < NL; g++) {
		const void *in[2] = {init[g][0], init[g][1]};
		int ret;

		fill(init[g][0], g, 0, k);
		fill(init[g][1], g, 1, k);
		ret = nvs_param_add_layer(r->par, g, 2, sizes, in);
		if (!first)
			first = ret;
		ret = nvs_optim_add_group(r->opt, g, 2, sizes, in);
		if (!first)
			first = ret;
	}
	return first;
}

static void close_roles(struct roles *r)
{
	cr_assert_eq(nvs_param_swapper_destroy(r->par), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_optim_swapper_destroy(r->opt), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(r->core), 0, "%s", nvs_last_error());
}

/* Layer/group 1 to step 2, through each role. */
static void step_one(struct roles *r)
{
	void *p[2];

	cr_assert_eq(nvs_param_acquire_layer(r->par, 1, p), 0);
	fill(p[0], 1, 0, 2);
	fill(p[1], 1, 1, 2);
	cr_assert_eq(nvs_param_release_layer(r->par, 1, true), 0);
	cr_assert_eq(nvs_param_evict_layer(r->par, 1), 0);
	cr_assert_eq(nvs_optim_swap_in(r->opt, 1, p), 0);
	fill(p[0], 1, 0, 2);
	fill(p[1], 1, 1, 2);
	cr_assert_eq(nvs_optim_swap_out(r->opt, 1), 0);
}

static void expect(struct roles *r, unsigned g, unsigned k)
{
	void *p[2];

	cr_assert_eq(nvs_param_acquire_layer(r->par, g, p), 0, "%s",
		     nvs_last_error());
	check(p[0], g, 0, k);
	check(p[1], g, 1, k);
	cr_assert_eq(nvs_param_release_layer(r->par, g, false), 0);
	cr_assert_eq(nvs_optim_swap_in(r->opt, g, p), 0, "%s",
		     nvs_last_error());
	check(p[0], g, 0, k);
	check(p[1], g, 1, k);
	cr_assert_eq(nvs_optim_swap_out(r->opt, g), 0);
}

Test(persist_roles, layers_and_groups_survive_a_reopen)
{
	struct roles r;

	cr_assert_eq(open_roles(&r, NVS_PERSIST_PERSISTENT, 1, 0), 0, "%s",
		     nvs_last_error());
	step_one(&r);
	close_roles(&r);

	/* Added again with step 9 as init: the saved steps win. */
	cr_assert_eq(open_roles(&r, NVS_PERSIST_RESUME, 9, 0), 0, "%s",
		     nvs_last_error());
	expect(&r, 0, 1);
	expect(&r, 1, 2);
	expect(&r, 2, 1);
	close_roles(&r);
}

Test(persist_roles, a_scratch_set_starts_from_init)
{
	struct roles r;

	cr_assert_eq(open_roles(&r, NVS_PERSIST_SCRATCH, 1, 0), 0);
	step_one(&r);
	close_roles(&r);
	cr_assert_eq(open_roles(&r, NVS_PERSIST_SCRATCH, 5, 0), 0);
	expect(&r, 1, 5);
	close_roles(&r);
}

Test(persist_roles, another_layout_is_refused_naming_the_group)
{
	struct roles r;
	struct nvs_param_swapper_opts po;
	struct nvs_optim_swapper_opts oo;
	struct nvs_param_swapper *par;
	struct nvs_optim_swapper *opt;
	struct nvs_swapper *core;
	const size_t other[2] = {10000, 30004};
	const size_t three[3] = {10000, 30000, 8};

	cr_assert_eq(open_roles(&r, NVS_PERSIST_PERSISTENT, 1, 0), 0);
	close_roles(&r);

	core = open_set(NVS_PERSIST_RESUME);
	nvs_param_swapper_opts_init(&po);
	cr_assert_eq(nvs_param_swapper_create(core, &po, &par), 0);
	cr_assert_eq(nvs_param_add_layer(par, 0, 2, sizes, NULL), 0);
	cr_assert_eq(nvs_param_add_layer(par, 1, 2, other, NULL), -EINVAL);
	cr_assert(strstr(nvs_last_error(),
			 "layer 1 was saved with another layout"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_param_add_layer(par, 2, 3, three, NULL), -EINVAL);
	nvs_optim_swapper_opts_init(&oo);
	oo.id_base = (uint64_t)OPT_BASE << 40;
	cr_assert_eq(nvs_optim_swapper_create(core, &oo, &opt), 0);
	cr_assert_eq(nvs_optim_add_group(opt, 2, 1, sizes, NULL), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "2 was saved with another layout"),
		  "%s", nvs_last_error());
	/* A layer the set never held is new: added from init. */
	cr_assert_eq(nvs_param_add_layer(par, 7, 2, sizes, NULL), 0);
	cr_assert_eq(nvs_param_swapper_destroy(par), 0);
	cr_assert_eq(nvs_optim_swapper_destroy(opt), 0);
	cr_assert_eq(nvs_swapper_destroy(core), 0);

	/* The refused adds changed nothing: the set reopens as saved. */
	cr_assert_eq(open_roles(&r, NVS_PERSIST_RESUME, 9, 0), 0, "%s",
		     nvs_last_error());
	expect(&r, 1, 1);
	expect(&r, 2, 1);
	close_roles(&r);
}

Test(persist_roles, max_in_cpu_keeps_nothing_out_of_the_set)
{
	struct roles r;

	cr_assert_eq(open_roles(&r, NVS_PERSIST_PERSISTENT, 1, 1ull << 30), 0);
	for (unsigned g = 0; g < NL; g++)
		cr_assert_not(nvs_param_layer_in_cpu(r.par, g));
	step_one(&r);
	close_roles(&r);
	cr_assert_eq(open_roles(&r, NVS_PERSIST_RESUME, 9, 1ull << 30), 0);
	expect(&r, 1, 2);
	expect(&r, 0, 1);
	close_roles(&r);
}

Test(persist_roles, gradients_work_over_a_persistent_set)
{
	struct nvs_swapper *core = open_set(NVS_PERSIST_PERSISTENT);
	struct nvs_grad_swapper_opts go;
	struct nvs_grad_swapper *g;
	char data[4000];
	const void *p;

	nvs_grad_swapper_opts_init(&go);
	cr_assert_eq(nvs_grad_swapper_create(core, &go, &g), 0);
	cr_assert_eq(nvs_grad_add_group(g, 0, sizeof(data)), 0);
	tu_fill(data, sizeof(data), 3);
	cr_assert_eq(
		nvs_grad_write(g, 0, 0, data, sizeof(data), NVS_GRAD_ASSIGN), 0,
		"%s", nvs_last_error());
	cr_assert_eq(nvs_grad_flush(g, 0), 0);
	cr_assert_eq(nvs_grad_acquire(g, 0, &p), 0);
	cr_assert(memcmp(p, data, sizeof(data)) == 0);
	cr_assert_eq(nvs_grad_release(g, 0), 0);
	cr_assert_eq(nvs_grad_zero(g, 0), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_grad_acquire(g, 0, &p), 0);
	for (size_t i = 0; i < sizeof(data); i++)
		cr_assert_eq(((const unsigned char *)p)[i], 0);
	cr_assert_eq(nvs_grad_release(g, 0), 0);
	cr_assert_eq(nvs_grad_swapper_destroy(g), 0);
	cr_assert_eq(nvs_swapper_destroy(core), 0);
}

/* Layers 0 and 2 of 200 bytes, layer 1 of 40000, saved with 256 KiB
 * buffers and opened with 8 KiB ones: acquiring layer 0 reads ahead past
 * layer 1 (skipped, not an error) into layer 2; layer 1's acquire is
 * -EFBIG, and nvs_swapper_read() copies it out whole. */
Test(persist_roles, a_layer_larger_than_the_buffers_is_read_out_not_ahead)
{
	static const size_t small[2] = {100, 100};
	struct nvs_param_swapper_opts po;
	struct nvs_param_swapper *par;
	struct nvs_swapper_opts o;
	struct nvs_swap_stats st;
	struct nvs_swapper *s;
	static char a[10000], b[30000], out[40048];
	const void *in[2] = {a, b};
	void *p[2];

	fill(a, 1, 0, 1);
	fill(b, 1, 1, 1);
	tu_swapper_opts(&o, BUF, 4);
	o.persist = NVS_PERSIST_PERSISTENT;
	o.name = "big";
	nvs_param_swapper_opts_init(&po);
	po.lookahead = 2;
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_param_swapper_create(s, &po, &par), 0);
		cr_assert_eq(nvs_param_add_layer(par, 0, 2, small, NULL), 0);
		cr_assert_eq(nvs_param_add_layer(par, 1, 2, sizes, in), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_param_add_layer(par, 2, 2, small, NULL), 0);
		if (round == 1)
			break;
		cr_assert_eq(nvs_swapper_checkpoint(s, "saved"), 1);
		cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1);
		cr_assert_eq(nvs_param_swapper_destroy(par), 0);
		cr_assert_eq(nvs_swapper_destroy(s), 0);
		o.persist = NVS_PERSIST_RESUME;
		o.buffer_size = 8192;
	}
	cr_assert_eq(nvs_param_acquire_layer(par, 0, p), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_param_release_layer(par, 0, false), 0);
	cr_assert_eq(nvs_param_acquire_layer(par, 1, p), -EFBIG);
	cr_assert(strstr(nvs_last_error(), "larger than buffer_size 8192"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_read(s, 1ull << 20, out, sizeof(out)), 0, "%s",
		     nvs_last_error());
	check(out, 1, 0, 1);
	check(out + 10048, 1, 1, 1); /* packed at 64-byte offsets */
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_eq(st.bytes_read, 40048, "layer 1 read once, by read()");
	cr_assert_eq(nvs_param_acquire_layer(par, 2, p), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_param_release_layer(par, 2, false), 0);
	cr_assert_eq(nvs_param_swapper_destroy(par), 0);
	cr_assert_eq(nvs_swapper_unsaved(s), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}
