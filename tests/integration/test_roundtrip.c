// SPDX-License-Identifier: MIT
/*
 * Round trips through the handle across sizes, offsets, parallelism, queue
 * depth, block size, submit modes, backends and buffer alignment. Each one
 * writes into a file that already holds other bytes and checks the exact
 * file size, the written bytes, the untouched bytes around them, and the
 * bytes read back (with guard bytes around the read buffer).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvswap/aio.h"
#include "testutil.h"

struct rt_case {
	enum nvs_backend backend;
	size_t size;
	int64_t offset;
	unsigned par, qd, bs;
	bool ss, oe;
	size_t misalign;
};

static void fini(void)
{
	tu_cleanup();
}

static void run_case(const struct rt_case *c)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = NULL;
	const char *path = tu_path("rt.swp");
	/* An old file covering half of the range, to test extension and
	 * that bytes outside the write survive. */
	size_t old = (size_t)(c->offset + (int64_t)c->size / 2) + 777;
	size_t expect_size = old > (size_t)c->offset + c->size
				     ? old
				     : (size_t)c->offset + c->size;
	unsigned char *oldbuf = malloc(old), *src, *dst, *file;
	size_t n;
	int ret;

	tu_fill(oldbuf, old, 7);
	tu_write_file(path, oldbuf, old);
	src = tu_alloc(c->size, c->misalign);
	dst = tu_alloc(c->size, c->misalign ? 4096 - c->misalign : 0);
	tu_fill(src, c->size, c->size + (size_t)c->offset);
	memset(dst, 0, c->size);

	nvs_aio_opts_init(&o);
	o.backend = c->backend;
	o.intra_op_parallelism = c->par;
	o.queue_depth = c->qd;
	o.block_size = c->bs;
	o.single_submit = c->ss;
	o.overlap_events = c->oe;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());

	ret = nvs_aio_sync_pwrite(h, src, c->size, path, c->offset);
	cr_assert_eq(ret, 1, "write returned %d: %s", ret, nvs_last_error());
	cr_assert_eq(tu_file_size(path), (off_t)expect_size);
	file = tu_read_file(path, &n);
	cr_assert_eq(n, expect_size);
	cr_assert(memcmp(file, oldbuf, (size_t)c->offset) == 0,
		  "bytes before the write changed");
	cr_assert(memcmp(file + c->offset, src, c->size) == 0,
		  "written bytes differ");
	if (old > (size_t)c->offset + c->size)
		cr_assert(memcmp(file + c->offset + c->size,
				 oldbuf + c->offset + c->size,
				 old - (size_t)c->offset - c->size) == 0,
			  "bytes after the write changed");

	ret = nvs_aio_sync_pread(h, dst, c->size, path, c->offset);
	cr_assert_eq(ret, 1, "read returned %d: %s", ret, nvs_last_error());
	cr_assert(memcmp(dst, src, c->size) == 0, "read back differs");
	cr_assert(tu_guards_ok(dst, c->size), "read wrote outside buffer");
	cr_assert(tu_guards_ok(src, c->size), "write touched its source");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	free(file);
	free(oldbuf);
	tu_free(src);
	tu_free(dst);
}

static const size_t sizes[] = {
	0, 1, 511, 4095, 4096, 4097, (1 << 20) - 1, 1 << 20, (1 << 20) + 1};
static const int64_t offsets[] = {0, 1, 4095, 4096, (1 << 20) + 3};
static const enum nvs_backend backends[] = {NVS_BACKEND_LIBAIO,
					    NVS_BACKEND_PSYNC};

#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define NOFFS (sizeof(offsets) / sizeof(offsets[0]))

ParameterizedTestParameters(roundtrip, sizes_and_offsets)
{
	static struct rt_case cases[2 * NSIZES * NOFFS * 2];
	size_t n = 0;

	for (size_t b = 0; b < 2; b++)
		for (size_t s = 0; s < NSIZES; s++)
			for (size_t o = 0; o < NOFFS; o++)
				for (size_t m = 0; m < 2; m++)
					cases[n++] = (struct rt_case){
						.backend = backends[b],
						.size = sizes[s],
						.offset = offsets[o],
						.par = 3,
						.qd = 2,
						.bs = 4096,
						.oe = (s + o) % 2,
						.misalign = m ? 1 + s % 511 : 0,
					};
	return cr_make_param_array(struct rt_case, cases, n);
}

ParameterizedTest(struct rt_case *c, roundtrip, sizes_and_offsets, .fini = fini)
{
	run_case(c);
}

ParameterizedTestParameters(roundtrip, settings_matrix)
{
	static const unsigned pars[] = {1, 2, 3, 8};
	static const unsigned qds[] = {1, 2, 128};
	static const unsigned bss[] = {4096, 1 << 20};
	static struct rt_case cases[4 * 3 * 2 * 4 * 2];
	size_t n = 0;

	for (size_t p = 0; p < 4; p++)
		for (size_t q = 0; q < 3; q++)
			for (size_t b = 0; b < 2; b++)
				for (unsigned f = 0; f < 4; f++)
					for (size_t be = 0; be < 2; be++)
						cases[n++] = (struct rt_case){
							.backend = backends[be],
							.size = (3u << 20) +
								4097,
							.offset = 4095,
							.par = pars[p],
							.qd = qds[q],
							.bs = bss[b],
							.ss = f & 1,
							.oe = f & 2,
							.misalign = (n % 3) * 8,
						};
	return cr_make_param_array(struct rt_case, cases, n);
}

ParameterizedTest(struct rt_case *c, roundtrip, settings_matrix, .fini = fini)
{
	run_case(c);
}

ParameterizedTestParameters(roundtrip, large)
{
	static struct rt_case cases[] = {
		{NVS_BACKEND_LIBAIO, (64u << 20) + 4097, 0, 1, 128, 1 << 20,
		 false, false, 0},
		{NVS_BACKEND_LIBAIO, (64u << 20) + 4097, (1 << 20) + 3, 3, 128,
		 1 << 20, false, true, 0},
		{NVS_BACKEND_LIBAIO, (64u << 20) + 4097, 4096, 8, 32, 1 << 20,
		 true, true, 1},
		{NVS_BACKEND_PSYNC, (64u << 20) + 4097, 1, 2, 2, 4096, false,
		 false, 0},
		{NVS_BACKEND_PSYNC, (64u << 20) + 4097, 4095, 2, 128, 1 << 20,
		 false, true, 4095},
	};
	return cr_make_param_array(struct rt_case, cases,
				   sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct rt_case *c, roundtrip, large, .fini = fini,
		  .timeout = 120)
{
	run_case(c);
}

Test(roundtrip, buffered_mode_never_uses_odirect, .fini = fini)
{
	struct rt_case c = {
		NVS_BACKEND_LIBAIO, 100003, 5, 2, 4, 4096, false, true, 3};
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	struct nvs_aio_stats st;
	unsigned char *src = tu_alloc(c.size, 3), *dst = tu_alloc(c.size, 0);

	(void)c;
	tu_fill(src, c.size, 1);
	nvs_aio_opts_init(&o);
	o.direct = NVS_DIRECT_NEVER;
	o.block_size = 4096;
	cr_assert_eq(nvs_aio_create(&o, &h), 0);
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, c.size, tu_path("b"), 5), 1);
	cr_assert_eq(nvs_aio_sync_pread(h, dst, c.size, tu_path("b"), 5), 1);
	cr_assert(memcmp(src, dst, c.size) == 0);
	cr_assert_eq(tu_file_size(tu_path("b")), 100008);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.bounced_requests, 0, "buffered I/O needs no bounce");
	cr_assert_eq(st.edge_bytes, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	tu_free(src);
	tu_free(dst);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* busy_ns counts the time ops were in flight: none before any op, some
 * after a write and an async read, never more than the wall time they
 * took, and nothing while the handle sits idle. */
Test(roundtrip, busy_time_is_the_time_ops_were_in_flight, .fini = fini)
{
	size_t size = 8u << 20;
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	struct nvs_aio_stats st;
	unsigned char *src = tu_alloc(size, 0), *dst = tu_alloc(size, 0);
	uint64_t t0, busy;
	struct timespec idle = {0, 50 * 1000 * 1000};

	tu_fill(src, size, 7);
	nvs_aio_opts_init(&o);
	cr_assert_eq(nvs_aio_create(&o, &h), 0);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.busy_ns, 0, "no op yet: %llu ns busy",
		     (unsigned long long)st.busy_ns);
	t0 = now_ns();
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, size, tu_path("busy"), 0), 1);
	cr_assert_eq(nvs_aio_async_pread(h, dst, size, tu_path("busy"), 0), 0);
	cr_assert_eq(nvs_aio_wait(h), 1);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	busy = st.busy_ns;
	cr_assert(busy > 0 && busy <= now_ns() - t0,
		  "busy %llu ns over %llu ns of wall time",
		  (unsigned long long)busy,
		  (unsigned long long)(now_ns() - t0));
	cr_assert(memcmp(src, dst, size) == 0);
	nanosleep(&idle, NULL);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.busy_ns, busy, "idle, yet busy went from %llu to %llu",
		     (unsigned long long)busy, (unsigned long long)st.busy_ns);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	tu_free(src);
	tu_free(dst);
}
