// SPDX-License-Identifier: MIT
/*
 * Striping over several paths (issue 22): a mix of tensor sizes keeps the
 * paths' bytes balanced, also after tensors come and go; a path that fails
 * (an injected -EIO on one path, writing or reading; a really full tmpfs
 * as one of three paths) gives an error naming that path, and the tensors
 * already on disk read back byte for byte.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aio/engine.h"
#include "nvswap/swapper.h"
#include "swapper/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

enum { STRIPE = 64 << 10, MAXT = 1 << 20 };

static void fini(void)
{
	tu_cleanup();
}

TestSuite(stripe, .fini = fini);

/* @n fresh directories under tu_dir() as the swapper's paths. */
static void paths_opts(struct nvs_swapper_opts *o, unsigned n, size_t size,
		       unsigned count)
{
	static char dirs[NVS_SWAPPER_MAX_PATHS][4200];

	tu_swapper_opts(o, size, count);
	o->npaths = n;
	o->stripe_size = STRIPE;
	for (unsigned i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "p%u", i);
		snprintf(dirs[i], sizeof(dirs[i]), "%s", tu_path(name));
		cr_assert(mkdir(dirs[i], 0700) == 0 || errno == EEXIST);
		o->nvme_paths[i] = dirs[i];
	}
}

static struct nvs_swap_stats stats(struct nvs_swapper *s)
{
	struct nvs_swap_stats st;

	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	return st;
}

static enum nvs_tensor_state state(struct nvs_swapper *s, uint64_t id)
{
	struct nvs_tensor_info i;

	cr_assert_eq(nvs_swapper_info(s, id, &i), 0, "%s", nvs_last_error());
	return i.state;
}

/* Tensor @id on disk (not resident) reads back as pattern @seed. */
static void expect_from_disk(struct nvs_swapper *s, uint64_t id, size_t n,
			     uint64_t seed)
{
	unsigned char *want = malloc(n);
	void *p;

	cr_assert_eq(state(s, id), NVS_TENSOR_ON_NVME, "tensor %llu",
		     (unsigned long long)id);
	tu_fill(want, n, seed);
	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "id %llu: %s",
		     (unsigned long long)id, nvs_last_error());
	cr_assert(!memcmp(p, want, n), "tensor %llu differs",
		  (unsigned long long)id);
	cr_assert_eq(nvs_swapper_release(s, id, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, id), 0);
	free(want);
}

/* Acquire @id, fill it with pattern @seed, release dirty, evict. */
static void write_back(struct nvs_swapper *s, uint64_t id, size_t n,
		       uint64_t seed)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	tu_fill(p, n, seed);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, id), 0, "%s", nvs_last_error());
}

/* Sizes of a mixed model: one in three below the stripe unit (biases,
 * norms: any byte count), the rest 1 to 16 stripe units plus an odd
 * tail (weight matrices). Deterministic. */
static size_t mixed_size(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	uint64_t r = *x >> 33;
	if (r % 3 == 0)
		return 1 + (size_t)(r / 3 % (STRIPE - 1));
	return STRIPE * (1 + (size_t)(r / 3 % 15)) + (size_t)(r % 4096);
}

/* Every path's value within 5 % of their mean. */
static void assert_balanced(const uint64_t *v, unsigned n, const char *what)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < n; i++)
		sum += v[i];
	for (unsigned i = 0; i < n; i++) {
		double mean = (double)sum / n;
		double off = ((double)v[i] - mean) / mean;
		cr_assert(off < 0.05 && off > -0.05,
			  "%s: path %u has %llu bytes, mean %.0f (%+.1f %%)",
			  what, i, (unsigned long long)v[i], mean, off * 100);
	}
}

Test(stripe, a_mix_of_sizes_keeps_four_paths_within_five_percent)
{
	enum { N = 4, T = 160, MORE = 60 };
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	struct nvs_swap_stats st;
	struct nvs_tensor_info info;
	static size_t size[T + MORE];
	unsigned char *init = malloc(MAXT);
	uint64_t x = 22, total = 0, sum = 0;
	bool small = false, striped = false;

	paths_opts(&o, N, MAXT, 2);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (unsigned i = 0; i < T; i++) {
		size[i] = mixed_size(&x);
		total += size[i];
		tu_fill(init, size[i], 1000 + i);
		cr_assert_eq(nvs_swapper_register(s, i, size[i], init), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_swapper_info(s, i, &info), 0);
		/* Small ones whole on one path, large ones striped. */
		cr_assert_eq(
			info.extents,
			size[i] < STRIPE ? 1 : (size[i] + STRIPE - 1) / STRIPE);
		small |= size[i] < STRIPE;
		striped |= size[i] >= 4 * STRIPE;
	}
	cr_assert(small && striped, "the mix has both kinds");
	st = stats(s);
	cr_assert_eq(st.npaths, N);
	cr_assert_eq(st.bytes_written, total);
	for (unsigned p = 0; p < N; p++)
		sum += st.path_bytes_written[p];
	cr_assert_eq(sum, total, "each byte counted on exactly one path");
	assert_balanced(st.path_bytes_written, N, "bytes written");
	assert_balanced(st.path_space_used, N, "space used");

	/* Tensors come and go: every third one unregistered, new ones of
	 * the same mix written through the pool. */
	for (unsigned i = 0; i < T; i += 3)
		cr_assert_eq(nvs_swapper_unregister(s, i), 0);
	for (unsigned i = T; i < T + MORE; i++) {
		size[i] = mixed_size(&x);
		cr_assert_eq(nvs_swapper_register(s, i, size[i], NULL), 0);
		write_back(s, i, size[i], 1000 + i);
	}
	cr_assert_eq(nvs_swapper_wait_all(s), 0, "%s", nvs_last_error());
	st = stats(s);
	assert_balanced(st.path_space_used, N, "space used after churn");
	for (unsigned i = 0; i < T + MORE; i++)
		if (i >= T || i % 3)
			expect_from_disk(s, i, size[i], 1000 + i);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	free(init);
}

/* A failure's sentence names swap directory @want and none of @others. */
static void assert_names(const char *want, const char *const *others,
			 unsigned n)
{
	char dir[4300];

	snprintf(dir, sizeof(dir), "%s/nvswap/rank0/", want);
	cr_assert(strstr(nvs_last_error(), dir), "'%s' does not name %s",
		  nvs_last_error(), dir);
	for (unsigned i = 0; i < n; i++) {
		snprintf(dir, sizeof(dir), "%s/", others[i]);
		cr_assert(!strstr(nvs_last_error(), dir), "'%s' names %s",
			  nvs_last_error(), dir);
	}
}

Test(stripe, an_eio_on_one_path_names_it_and_the_other_paths_read_back)
{
	enum { N = 3, SZ = 16 << 10 };
	/* The second I/O attempt (reads and writes counted together; a
	 * never-written tensor is acquired without a read) fails: tensor
	 * 1's write, whole on path 1 (small tensors go to the least-filled
	 * path: 0, 1, 2 in turn). */
	struct nvs_fault_plan plan = {
		.rules = {{.kind = NVS_FAULT_EIO,
			   .nth = 2,
			   .count = 1,
			   .opcode = NVS_IOREQ_WRITE}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	struct nvs_swap_stats st;
	struct nvs_tensor_info info;

	paths_opts(&o, N, MAXT, 2);
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0, "%s",
		     nvs_last_error());
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(nvs_swapper_register(s, i, SZ, NULL), 0);
	for (unsigned i = 0; i < N; i++) {
		write_back(s, i, SZ, 40 + i);
		cr_assert_eq(nvs_swapper_wait(s, i), i == 1 ? -EIO : 0,
			     "tensor %u: %s", i, nvs_last_error());
		if (i == 1) {
			const char *others[] = {o.nvme_paths[0],
						o.nvme_paths[2]};
			assert_names(o.nvme_paths[1], others, 2);
		}
	}
	st = stats(s);
	cr_assert_eq(st.io_errors, 1);
	cr_assert_eq(st.path_bytes_written[0], SZ);
	cr_assert_eq(st.path_bytes_written[1], 0, "the failed write");
	cr_assert_eq(st.path_bytes_written[2], SZ);
	/* Nothing lost on path 1 (resident, dirty), nothing touched on the
	 * others. */
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty);
	expect_from_disk(s, 0, SZ, 40);
	expect_from_disk(s, 2, SZ, 42);
	/* The fault was one write: the retry lands on path 1. */
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(stats(s).path_bytes_written[1], SZ);
	expect_from_disk(s, 1, SZ, 41);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(stripe, a_full_path_names_it_and_the_striped_tensors_read_back)
{
	enum { N = 3, SZ = 12 * STRIPE, T = 16 };
	const char *mnt = tu_path("full");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	struct nvs_tensor_info info;
	unsigned i;
	int ret = 0;

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	paths_opts(&o, N, SZ, 2);
	o.nvme_paths[1] = mnt; /* 1 MiB: about four tensors' shares */
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (i = 0; i < T; i++) {
		cr_assert_eq(nvs_swapper_register(s, i, SZ, NULL), 0);
		cr_assert_eq(nvs_swapper_info(s, i, &info), 0);
		cr_assert_eq(info.extents, 12);
	}
	for (i = 0; i < T; i++) {
		write_back(s, i, SZ, 70 + i);
		ret = nvs_swapper_wait(s, i);
		if (ret < 0)
			break;
	}
	cr_assert_eq(ret, -ENOSPC, "tensor %u: %d %s", i, ret,
		     nvs_last_error());
	cr_assert_gt(i, 0, "some tensors fit");
	{
		const char *others[] = {o.nvme_paths[0], o.nvme_paths[2]};
		assert_names(mnt, others, 2);
	}
	cr_assert_eq(nvs_swapper_info(s, i, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty, "nothing lost: still resident, still dirty");
	/* The tensors written before, a third of each on every path, read
	 * back whole: the failed write touched none of their blocks. */
	for (unsigned k = 0; k < i; k++)
		expect_from_disk(s, k, SZ, 70 + k);
	/* Its data is still in memory, intact. */
	{
		unsigned char *want = malloc(SZ);
		void *p;
		tu_fill(want, SZ, 70 + i);
		cr_assert_eq(nvs_swapper_acquire(s, i, &p), 0);
		cr_assert(!memcmp(p, want, SZ));
		cr_assert_eq(nvs_swapper_release(s, i, false), 0);
		free(want);
	}
	/* Room again on the full path: the retry succeeds. */
	cr_assert_eq(nvs_swapper_unregister(s, 0), 0);
	cr_assert_eq(nvs_swapper_evict(s, i), 0);
	cr_assert_eq(nvs_swapper_wait(s, i), 0, "%s", nvs_last_error());
	expect_from_disk(s, i, SZ, 70 + i);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(stripe, a_read_eio_on_one_path_names_it_and_a_retry_reads_it)
{
	enum { N = 3, SZ = 16 << 10 };
	/* The fifth I/O attempt (reads and writes counted together) fails:
	 * after three writes and tensor 0's read, tensor 1's read, whole
	 * on path 1. */
	struct nvs_fault_plan plan = {
		.rules = {{.kind = NVS_FAULT_EIO,
			   .nth = 5,
			   .count = 1,
			   .opcode = NVS_IOREQ_READ}},
		.nrules = 1,
	};
	const char *others[2];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	unsigned char *init = malloc(SZ);
	void *p;

	paths_opts(&o, N, MAXT, 2);
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0, "%s",
		     nvs_last_error());
	for (unsigned i = 0; i < N; i++) {
		tu_fill(init, SZ, 50 + i);
		cr_assert_eq(nvs_swapper_register(s, i, SZ, init), 0);
		cr_assert_eq(stats(s).path_bytes_written[i], SZ, "path %u", i);
	}
	expect_from_disk(s, 0, SZ, 50);
	int ret = nvs_swapper_acquire(s, 1, &p);
	cr_assert_eq(ret, -EIO, "%d %s", ret, nvs_last_error());
	others[0] = o.nvme_paths[0];
	others[1] = o.nvme_paths[2];
	assert_names(o.nvme_paths[1], others, 2);
	cr_assert_eq(stats(s).io_errors, 1);
	expect_from_disk(s, 2, SZ, 52);
	expect_from_disk(s, 1, SZ, 51);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	free(init);
}
