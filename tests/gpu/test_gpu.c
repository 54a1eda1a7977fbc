// SPDX-License-Identifier: MIT
/*
 * Device memory through the aio handle and the GPU calls of nvswap/gpu.h.
 * One source, two runs (tests/meson.build):
 *  - suite gpu: the machine's real CUDA driver; every test that needs a
 *    device skips, printing why, where there is none;
 *  - "gpu-fake" in the integration suite: the stand-in driver of
 *    tests/fakes/fake_cuda.c (NVSWAP_LIBCUDA), whose device memory the
 *    host cannot touch, to inject copy and initialisation failures and to
 *    run the staging paths under the sanitizers on machines without a GPU.
 * Tests on a missing driver run in both. Each test is a fresh process, so
 * each decides the environment before its first GPU call.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/aio.h"
#include "nvswap/gpu.h"
#include "testutil.h"
#include "tu_aio.h"

static bool fake(void)
{
	return getenv("NVSWAP_TEST_FAKE_CUDA") != NULL;
}

/* A device for this test, or skip (real run) / fail (fake run). */
static void need_gpu(void)
{
	int n = nvs_gpu_open();

	if (n < 0 && !fake())
		cr_skip_test("no CUDA GPU here: %s", nvs_last_error());
	cr_assert_gt(n, 0, "%s", nvs_last_error());
}

static void need_fake(void)
{
	if (!fake())
		cr_skip_test("fault injection needs the stand-in driver (the "
			     "gpu-fake run)");
	need_gpu();
}

static void *fake_sym_in(const char *env, const char *name)
{
	void *lib = dlopen(getenv(env), RTLD_NOW | RTLD_NOLOAD);
	void *s;

	cr_assert_not_null(lib, "nvswap loaded the stand-in (%s)", env);
	s = dlsym(lib, name);
	cr_assert_not_null(s, "%s", name);
	dlclose(lib);
	return s;
}

static void *fake_sym(const char *name)
{
	return fake_sym_in("NVSWAP_LIBCUDA", name);
}

static long fake_count_in(const char *env, const char *name)
{
	long (*fn)(void);
	void *s = fake_sym_in(env, name);

	memcpy(&fn, &s, sizeof(s));
	return fn();
}

static long fake_count(const char *name)
{
	return fake_count_in("NVSWAP_LIBCUDA", name);
}

static void *dev_alloc(size_t n)
{
	void *d = NULL;

	cr_assert_eq(nvs_gpu_malloc(0, n, &d), 0, "%s", nvs_last_error());
	cr_assert_not_null(d);
	return d;
}

static struct nvs_aio *handle(unsigned workers, uint32_t block,
			      enum nvs_direct direct)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = workers;
	if (block)
		o.block_size = block;
	o.queue_depth = 8;
	o.direct = direct;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	return h;
}

/*
 * Write @n bytes at device offset @doff to file offset @foff from device
 * memory, check the file on the host, read them back into fresh device
 * memory and check those on the host.
 */
static void roundtrip(struct nvs_aio *h, const char *path, size_t n,
		      int64_t foff, size_t doff)
{
	char *src = tu_alloc(n, 0), *back = tu_alloc(n, 0), *file;
	char *d1 = dev_alloc(n + doff), *d2 = dev_alloc(n + doff);
	size_t got;
	int ret;

	tu_fill(src, n, n ^ (size_t)foff);
	cr_assert_eq(nvs_gpu_memcpy(d1 + doff, src, n), 0, "%s",
		     nvs_last_error());
	ret = nvs_aio_pwrite(h, d1 + doff, n, path, foff, false);
	cr_assert_geq(ret, 0, "%s", nvs_last_error());
	file = tu_read_file(path, &got);
	cr_assert_geq(got, (size_t)foff + n);
	cr_assert_eq(memcmp(file + foff, src, n), 0,
		     "the file holds the device bytes (n %zu, off %lld)", n,
		     (long long)foff);
	free(file);
	cr_assert_eq(nvs_gpu_memset(d2, 0xee, n + doff), 0, "%s",
		     nvs_last_error());
	ret = nvs_aio_pread(h, d2 + doff, n, path, foff, false);
	cr_assert_geq(ret, 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_gpu_memcpy(back, d2 + doff, n), 0);
	cr_assert_eq(memcmp(back, src, n), 0,
		     "device memory holds the file's bytes (n %zu)", n);
	cr_assert_eq(nvs_gpu_free(d1), 0);
	cr_assert_eq(nvs_gpu_free(d2), 0);
	tu_free(src);
	tu_free(back);
}

Test(gpu, device_memory_round_trips_at_aligned_and_unaligned_places)
{
	static const struct {
		size_t n;
		int64_t foff;
		size_t doff;
	} cases[] = {
		{4u << 20, 0, 0},
		{4096 + 13, 13, 0},
		{3, 5, 1},
		{(3u << 20) + 4095, 4096, 7},
		{(1u << 20), 1u << 20, 4096},
	};
	struct nvs_aio *h;
	struct nvs_aio_stats st;
	uint64_t total = 0;

	need_gpu();
	h = handle(1, 0, NVS_DIRECT_AUTO);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		roundtrip(h, tu_path("dev.bin"), cases[i].n, cases[i].foff,
			  cases[i].doff);
		total += 2 * cases[i].n;
	}
	st = tu_aio_stats(h);
	cr_assert_eq(st.device_bytes, total);
	cr_assert_eq(st.gds_bytes, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(gpu, many_blocks_through_few_bounce_slots_with_two_workers)
{
	struct nvs_aio *h;

	need_gpu();
	/* 64 KiB blocks, 8 slots a worker: each slot is reused many times,
	 * so a slot handed back before its copy finished shows up as wrong
	 * bytes (the stand-in copies only at synchronisation). */
	h = handle(2, 64u << 10, NVS_DIRECT_AUTO);
	roundtrip(h, tu_path("many.bin"), (16u << 20) + 512, 0, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(gpu, buffered_handles_stage_device_memory_too)
{
	struct nvs_aio *h;

	need_gpu();
	h = handle(1, 256u << 10, NVS_DIRECT_NEVER);
	roundtrip(h, tu_path("buffered.bin"), (2u << 20) + 77, 3, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(gpu, async_ops_and_tickets_on_device_memory)
{
	const size_t n = 8u << 20;
	char *src = tu_alloc(n, 0), *back = tu_alloc(n, 0);
	char *d = NULL, *d2 = NULL;
	struct nvs_aio_io io = {0};
	struct nvs_aio *h;
	uint64_t id;

	need_gpu();
	d = dev_alloc(n);
	d2 = dev_alloc(n);
	h = handle(2, 1u << 20, NVS_DIRECT_AUTO);
	tu_fill(src, n, 7);
	cr_assert_eq(nvs_gpu_memcpy(d, src, n), 0);
	cr_assert_eq(nvs_aio_async_pwrite(h, d, n / 2, tu_path("a.bin"), 0), 0,
		     "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_async_pwrite(h, d + n / 2, n / 2, tu_path("a.bin"),
					  (int64_t)n / 2),
		     0);
	cr_assert_eq(nvs_aio_wait(h), 2, "%s", nvs_last_error());
	io.opcode = NVS_AIO_READ;
	io.buf = d2;
	io.nbytes = n;
	io.path = tu_path("a.bin");
	io.fd = -1;
	cr_assert_eq(nvs_aio_submit(h, &io, &id), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_wait_op(h, id), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_gpu_memcpy(back, d2, n), 0);
	cr_assert_eq(memcmp(back, src, n), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
	cr_assert_eq(nvs_gpu_free(d2), 0);
	tu_free(src);
	tu_free(back);
}

Test(gpu, one_shot_write_validates_device_memory)
{
	const size_t n = (1u << 20) + 3;
	char *src = tu_alloc(n, 0), *d;

	need_gpu();
	d = dev_alloc(n);
	tu_fill(src, n, 11);
	cr_assert_eq(nvs_gpu_memcpy(d, src, n), 0);
	cr_assert_eq(nvs_aio_write(d, n, tu_path("one.bin"), NULL, true, NULL),
		     0, "%s", nvs_last_error());
	cr_assert_eq(nvs_gpu_memset(d, 0, n), 0);
	cr_assert_eq(nvs_aio_read(d, n, tu_path("one.bin"), NULL, true, NULL),
		     0, "validate compares through a host copy: %s",
		     nvs_last_error());
	cr_assert_eq(nvs_gpu_free(d), 0);
	tu_free(src);
}

Test(gpu, pointers_are_told_apart)
{
	char stack[64];
	char *heap = malloc(64), *d;
	int dev = -5;

	need_gpu();
	d = dev_alloc(1u << 20);
	cr_assert_eq(nvs_gpu_pointer(stack, &dev), 0);
	cr_assert_eq(nvs_gpu_pointer(heap, &dev), 0);
	cr_assert_eq(nvs_gpu_pointer(NULL, &dev), 0);
	cr_assert_eq(dev, -5, "untouched for host memory");
	cr_assert_eq(nvs_gpu_pointer(d + 4097, &dev), 1);
	cr_assert_eq(dev, 0);
	cr_assert_eq(nvs_gpu_free(heap), -EINVAL);
	cr_assert_eq(nvs_gpu_memset(heap, 0, 64), -EINVAL);
	cr_assert_eq(nvs_gpu_free(d), 0);
	cr_assert_eq(nvs_gpu_free(NULL), 0);
	free(heap);
}

Test(gpu, host_memory_never_goes_through_the_device_path)
{
	const size_t n = 1u << 20;
	char *buf = tu_alloc(n, 0);
	struct nvs_aio *h;

	need_gpu();
	h = handle(1, 0, NVS_DIRECT_AUTO);
	tu_fill(buf, n, 3);
	cr_assert_geq(nvs_aio_pwrite(h, buf, n, tu_path("h.bin"), 0, false), 0);
	cr_assert_geq(nvs_aio_pread(h, buf, n, tu_path("h.bin"), 0, false), 0);
	cr_assert_eq(tu_aio_stats(h).device_bytes, 0);
	if (fake())
		cr_assert_eq(fake_count("fake_cuda_copies"), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	tu_free(buf);
}

/* --------------------------------------------------- injected faults */

static void copy_fails(bool write)
{
	const size_t n = 4u << 20;
	char *src = tu_alloc(n, 0), *d;
	struct nvs_aio *h;
	int ret;

	need_fake();
	d = dev_alloc(n);
	h = handle(1, 1u << 20, NVS_DIRECT_AUTO);
	tu_fill(src, n, 5);
	tu_write_file(tu_path("f.bin"), src, n);
	cr_assert_eq(nvs_gpu_memcpy(d, src, n), 0);
	setenv("FAKE_CUDA_FAIL_COPY", "2", 1); /* the second block's copy */
	ret = write ? nvs_aio_pwrite(h, d, n, tu_path("f.bin"), 0, false)
		    : nvs_aio_pread(h, d, n, tu_path("f.bin"), 0, false);
	cr_assert_eq(ret, -EIO, "%d: %s", ret, nvs_last_error());
	cr_assert(strstr(nvs_last_error(),
			 "cuMemcpyAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS"),
		  "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), tu_path("f.bin")), "%s",
		  nvs_last_error());
	unsetenv("FAKE_CUDA_FAIL_COPY");
	/* The handle goes on working. */
	ret = nvs_aio_pread(h, d, n, tu_path("f.bin"), 0, false);
	cr_assert_geq(ret, 0, "%s", nvs_last_error());
	cr_assert_eq(tu_aio_stats(h).ops_failed, 1);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
	tu_free(src);
}

Test(gpu, a_failed_device_copy_fails_the_read_with_the_drivers_error)
{
	copy_fails(false);
}

Test(gpu, a_failed_device_copy_fails_the_write_with_the_drivers_error)
{
	copy_fails(true);
}

Test(gpu, a_failed_edge_copy_fails_the_op)
{
	char src[100], *d;
	struct nvs_aio *h;

	need_fake();
	d = dev_alloc(sizeof(src));
	h = handle(1, 0, NVS_DIRECT_AUTO);
	memset(src, 'e', sizeof(src));
	tu_write_file(tu_path("e.bin"), src, sizeof(src));
	setenv("FAKE_CUDA_FAIL_COPY", "1", 1);
	cr_assert_eq(nvs_aio_pread(h, d, 100, tu_path("e.bin"), 0, false), -EIO,
		     "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"));
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
}

/*
 * Device memory set on the legacy default stream (as PyTorch computes and
 * cuMemsetD8 writes) just before a staged read into it: the read's copies
 * must come after the memset, not be overwritten by it. On the H200 a
 * non-blocking stream let them overtake it (the stand-in driver models
 * the same ordering).
 */
Test(gpu, staged_reads_are_ordered_after_the_legacy_stream)
{
	const size_t n = 1u << 20;
	char *src = tu_alloc(n, 0), *back = tu_alloc(n, 0), *d;
	int (*memset_d8)(uint64_t, unsigned char, size_t);
	struct nvs_aio *h;
	void *s;

	need_fake();
	s = fake_sym("cuMemsetD8_v2");
	memcpy(&memset_d8, &s, sizeof(s));
	d = dev_alloc(n);
	h = handle(1, 64u << 10, NVS_DIRECT_AUTO);
	tu_fill(src, n, 21);
	tu_write_file(tu_path("o.bin"), src, n);
	/* Queued on the legacy stream, as a kernel or memset would be (the
	 * context current on this thread: nvs_gpu_malloc put it back). */
	{
		int (*set)(void *), (*get_ctx)(void **, int);
		void *ctx = NULL, *p1 = fake_sym("cuCtxSetCurrent"),
		     *p2 = fake_sym("cuDevicePrimaryCtxRetain");
		memcpy(&set, &p1, sizeof(p1));
		memcpy(&get_ctx, &p2, sizeof(p2));
		cr_assert_eq(get_ctx(&ctx, 0), 0);
		cr_assert_eq(set(ctx), 0);
	}
	cr_assert_eq(memset_d8((uint64_t)(uintptr_t)d, 0xee, n), 0);
	cr_assert_geq(nvs_aio_pread(h, d, n, tu_path("o.bin"), 0, false), 0,
		      "%s", nvs_last_error());
	cr_assert_eq(nvs_gpu_memcpy(back, d, n), 0);
	cr_assert_eq(memcmp(back, src, n), 0,
		     "the memset landed after the staged read's copies");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
	tu_free(src);
	tu_free(back);
}

Test(gpu, destroy_releases_streams_and_registrations)
{
	struct nvs_aio *h;

	need_fake();
	h = handle(2, 64u << 10, NVS_DIRECT_AUTO);
	roundtrip(h, tu_path("r.bin"), 1u << 20, 0, 0);
	cr_assert_gt(fake_count("fake_cuda_live_streams"), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(fake_count("fake_cuda_live_streams"), 0);
	cr_assert_eq(fake_count("fake_cuda_host_registered"), 0);
	cr_assert_eq(fake_count("fake_cuda_live_allocs"), 0);
}

Test(gpu, calls_on_the_callers_thread_put_its_context_back)
{
	int (*get)(void **);
	void *s, *cur = (void *)1, *d;

	need_fake();
	s = fake_sym("cuCtxGetCurrent");
	memcpy(&get, &s, sizeof(s));
	d = dev_alloc(4096);
	cr_assert_eq(get(&cur), 0);
	cr_assert_null(cur, "the thread had no context and has none");
	cr_assert_eq(nvs_gpu_memset(d, 1, 4096), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
	cr_assert_eq(get(&cur), 0);
	cr_assert_null(cur);
}

Test(gpu, a_driver_that_finds_no_device_gives_enodev)
{
	if (!fake())
		cr_skip_test("needs the stand-in driver (the gpu-fake run)");
	setenv("FAKE_CUDA_INIT_FAIL", "100", 1);
	cr_assert_eq(nvs_gpu_open(), -ENODEV);
	cr_assert(strstr(nvs_last_error(), "found no GPU"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "CUDA_ERROR_NO_DEVICE"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_gpu_pointer(&(int){0}, NULL), 0);
}

/* ------------------------------------------------ no driver, no cuFile */

Test(gpu, without_a_driver_every_gpu_call_says_which_library_is_missing)
{
	struct nvs_gpu_info info;
	struct nvs_aio_opts o;
	struct nvs_aio *h = (void *)1;
	void *d = (void *)1;

	setenv("NVSWAP_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	cr_assert_eq(nvs_gpu_open(), -ENODEV);
	cr_assert(strstr(nvs_last_error(), "/nonexistent/libcuda.so.1"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_gpu_malloc(0, 4096, &d), -ENODEV);
	cr_assert_null(d);
	cr_assert_eq(nvs_gds_open(), -ENODEV);
	cr_assert(strstr(nvs_last_error(), "no CUDA driver"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_gds_register(&info, 64), -ENODEV);
	cr_assert_eq(nvs_gpu_pointer(&info, NULL), 0);
	nvs_aio_opts_init(&o);
	o.use_gds = true;
	cr_assert_eq(nvs_aio_create(&o, &h), -ENODEV);
	cr_assert_null(h);
	cr_assert(strstr(nvs_last_error(), "use_gds"), "%s", nvs_last_error());
	cr_assert_eq(nvs_gpu_info(&info), 0);
	cr_assert_eq(info.device_count, 0);
	cr_assert_not_null(strstr(info.status, "libcuda.so.1"), "%s",
			   info.status);
	cr_assert_eq(nvs_gpu_info(NULL), -EINVAL);
}

Test(gpu, nvswap_gpu_off_turns_it_all_off)
{
	setenv("NVSWAP_GPU", "off", 1);
	cr_assert_eq(nvs_gpu_open(), -ENODEV);
	cr_assert(strstr(nvs_last_error(), "NVSWAP_GPU=off"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_gpu_pointer(&(int){0}, NULL), 0);
}

Test(gpu, without_cufile_a_gds_handle_is_refused_naming_it)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = (void *)1;

	need_gpu();
	setenv("NVSWAP_CUFILE", "/nonexistent/libcufile.so.0", 1);
	cr_assert_eq(nvs_gds_open(), -ENODEV);
	cr_assert(strstr(nvs_last_error(), "/nonexistent/libcufile.so.0"), "%s",
		  nvs_last_error());
	nvs_aio_opts_init(&o);
	o.use_gds = true;
	cr_assert_eq(nvs_aio_create(&o, &h), -ENODEV);
	cr_assert_null(h);
}

/* ------------------------------------------------------ cuFile (GDS) */

static void need_gds(void)
{
	need_gpu();
	if (nvs_gds_open() < 0)
		cr_skip_test("no usable cuFile here: %s", nvs_last_error());
}

Test(gpu, gds_handles_move_device_memory_with_cufile)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	struct nvs_aio_stats st;
	char *reg;

	need_gds();
	nvs_aio_opts_init(&o);
	o.use_gds = true;
	o.intra_op_parallelism = 2;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	roundtrip(h, tu_path("g.bin"), 8u << 20, 0, 0);
	roundtrip(h, tu_path("g.bin"), 4096 + 13, 8192, 0);
	/* A registered buffer, used at an offset inside it. */
	reg = dev_alloc(4u << 20);
	cr_assert_eq(nvs_gds_register(reg, 4u << 20), 0, "%s",
		     nvs_last_error());
	cr_assert(nvs_gds_registered(reg + 4096, 1u << 20));
	cr_assert_eq(nvs_gds_register(reg + 4096, 4096), -EINVAL);
	{
		char *src = tu_alloc(1u << 20, 0),
		     *back = tu_alloc(1u << 20, 0);
		tu_fill(src, 1u << 20, 99);
		cr_assert_eq(nvs_gpu_memcpy(reg + 4096, src, 1u << 20), 0);
		cr_assert_geq(nvs_aio_pwrite(h, reg + 4096, 1u << 20,
					     tu_path("r.bin"), 0, false),
			      0, "%s", nvs_last_error());
		cr_assert_eq(nvs_gpu_memset(reg, 0, 4u << 20), 0);
		cr_assert_geq(nvs_aio_pread(h, reg + 8192, 1u << 20,
					    tu_path("r.bin"), 0, false),
			      0, "%s", nvs_last_error());
		cr_assert_eq(nvs_gpu_memcpy(back, reg + 8192, 1u << 20), 0);
		cr_assert_eq(memcmp(back, src, 1u << 20), 0);
		tu_free(src);
		tu_free(back);
	}
	cr_assert_eq(nvs_gds_deregister(reg), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_gds_deregister(reg), -ENOENT);
	cr_assert_eq(nvs_gpu_free(reg), 0);
	st = tu_aio_stats(h);
	cr_assert_eq(st.device_bytes, 0);
	cr_assert_eq(st.gds_bytes, 2 * ((8u << 20) + 4096 + 13 + (1u << 20)));
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(gpu, info_describes_the_driver_and_cufile)
{
	struct nvs_gpu_info info;

	need_gpu();
	cr_assert_eq(nvs_gpu_info(&info), 0);
	cr_assert_gt(info.device_count, 0);
	cr_assert_gt(info.driver_version, 0);
	cr_assert_neq(info.device0[0], 0);
	cr_assert_gt(info.device0_bytes, 0);
	if (info.cufile)
		cr_assert_neq(info.cufile_mode[0], 0);
	else
		cr_assert_neq(info.cufile_status[0], 0);
}

/*
 * Ops in flight together on one file share its cuFile handle (cuFile
 * refuses to register a descriptor twice), and the last one to end
 * deregisters it. Against the stand-in cuFile, which enforces that rule.
 */
Test(gpu, gds_ops_in_flight_on_one_file_share_its_cufile_handle)
{
	const size_t n = 4u << 20;
	char *src = tu_alloc(n, 0), *back = tu_alloc(n, 0), *d, *d2;
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	need_fake();
	need_gds();
	d = dev_alloc(n);
	d2 = dev_alloc(n);
	tu_fill(src, n, 31);
	cr_assert_eq(nvs_gpu_memcpy(d, src, n), 0);
	nvs_aio_opts_init(&o);
	o.use_gds = true;
	o.intra_op_parallelism = 2;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	for (size_t i = 0; i < 4; i++)
		cr_assert_eq(nvs_aio_async_pwrite(h, d + i * (n / 4), n / 4,
						  tu_path("s.bin"),
						  (int64_t)(i * (n / 4))),
			     0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_wait(h), 4, "%s", nvs_last_error());
	cr_assert_eq(fake_count_in("NVSWAP_CUFILE", "fake_cufile_live_handles"),
		     0, "the last op deregistered the handle");
	cr_assert_eq(
		fake_count_in("NVSWAP_CUFILE", "fake_cufile_max_live_handles"),
		1, "one handle for the file, shared");
	cr_assert_geq(nvs_aio_pread(h, d2, n, tu_path("s.bin"), 0, false), 0,
		      "%s", nvs_last_error());
	cr_assert_eq(nvs_gpu_memcpy(back, d2, n), 0);
	cr_assert_eq(memcmp(back, src, n), 0);
	cr_assert_eq(tu_aio_stats(h).gds_bytes, 2 * n);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
	cr_assert_eq(nvs_gpu_free(d2), 0);
	tu_free(src);
	tu_free(back);
}

Test(gpu, a_refused_cufile_handle_or_read_fails_the_op_naming_cufiles_error)
{
	const size_t n = 1u << 20;
	char *src = tu_alloc(n, 0), *d;
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	need_fake();
	need_gds();
	d = dev_alloc(n);
	tu_fill(src, n, 5);
	tu_write_file(tu_path("r.bin"), src, n);
	nvs_aio_opts_init(&o);
	o.use_gds = true;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	/* Refused at submit, as cuFile did in a VM without udev. */
	setenv("FAKE_CUFILE_FAIL_REGISTER", "1", 1);
	cr_assert_eq(nvs_aio_pread(h, d, n, tu_path("r.bin"), 0, false), -EIO);
	cr_assert(strstr(nvs_last_error(),
			 "cuFileHandleRegister failed: cuFile error 5027 "
			 "(CU_FILE_HANDLE_NOT_REGISTERED)"),
		  "%s", nvs_last_error());
	unsetenv("FAKE_CUFILE_FAIL_REGISTER");
	setenv("FAKE_CUFILE_FAIL_IO", "1", 1);
	cr_assert_eq(nvs_aio_pread(h, d, n, tu_path("r.bin"), 0, false), -EIO);
	cr_assert(strstr(nvs_last_error(), "cuFileRead: cuFile error 5011 "
					   "(CU_FILE_CUDA_DRIVER_ERROR)"),
		  "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), tu_path("r.bin")), "%s",
		  nvs_last_error());
	unsetenv("FAKE_CUFILE_FAIL_IO");
	cr_assert_geq(nvs_aio_pread(h, d, n, tu_path("r.bin"), 0, false), 0,
		      "%s", nvs_last_error());
	cr_assert_eq(tu_aio_stats(h).gds_bytes, n);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_gpu_free(d), 0);
	tu_free(src);
}
