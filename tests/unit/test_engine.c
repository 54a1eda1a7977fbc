// SPDX-License-Identifier: MIT
/*
 * Engines on their own: every io_event result is read (a request the
 * kernel rejects comes back with its -errno, not as success), short
 * transfers are finished inside, and a reaped request is final.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aio/engine.h"
#include "nvswap/buffers.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(engine, .fini = fini);

static int direct_file(size_t n)
{
	char *buf = malloc(n);
	int fd;

	tu_fill(buf, n, 1);
	tu_write_file(tu_path("e"), buf, n);
	free(buf);
	fd = open(tu_path("e"), O_RDWR | O_DIRECT);
	if (fd < 0)
		cr_skip_test("no O_DIRECT on this filesystem");
	return fd;
}

Test(engine, libaio_reports_each_rejected_request_with_its_errno)
{
	struct nvs_engine *e;
	char *mem = aligned_alloc(4096, 3 * 4096);
	struct nvs_ioreq good = {mem, 4096, 0, -1, NVS_IOREQ_READ};
	struct nvs_ioreq bad = {mem + 4096 + 1, 4096, 4096, -1,
				NVS_IOREQ_READ}; /* misaligned buffer */
	struct nvs_ioreq *v[2] = {&good, &bad}, *out[2];
	int fd = direct_file(8192);
	unsigned n = 0;

	good.fd = bad.fd = fd;
	cr_assert_eq(nvs__engine_create(NVS_BACKEND_LIBAIO,
					&(struct nvs_engine_cfg){.depth = 4},
					&e),
		     0);
	cr_assert_str_eq(nvs__engine_name(e), "libaio");
	cr_assert_eq(nvs__engine_submit(e, v, 2), 2);
	while (n < 2)
		n += nvs__engine_reap(e, 1, out + n, 2 - n);
	cr_assert_eq(good.res, 4096);
	cr_assert_eq(bad.res, -EINVAL);
	cr_assert_eq(nvs__engine_inflight(e), 0);
	nvs__engine_destroy(e);
	close(fd);
	free(mem);
}

Test(engine, submit_beyond_depth_accepts_only_what_fits)
{
	struct nvs_engine *e;
	char buf[4][512];
	struct nvs_ioreq r[4], *v[4], *out[4];
	int fd = open(tu_path("d"), O_RDWR | O_CREAT, 0600);

	cr_assert_eq(nvs__engine_create(NVS_BACKEND_PSYNC,
					&(struct nvs_engine_cfg){.depth = 2},
					&e),
		     0);
	for (int i = 0; i < 4; i++) {
		r[i] = (struct nvs_ioreq){buf[i], 512, i * 512, fd,
					  NVS_IOREQ_WRITE};
		v[i] = &r[i];
	}
	cr_assert_eq(nvs__engine_submit(e, v, 4), 2);
	cr_assert_eq(nvs__engine_submit(e, v + 2, 2), 0);
	cr_assert_eq(nvs__engine_reap(e, 2, out, 4), 2);
	cr_assert_eq(nvs__engine_submit(e, v + 2, 2), 2);
	cr_assert_eq(nvs__engine_reap(e, 2, out, 4), 2);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(r[i].res, 512);
	cr_assert_eq(tu_file_size(tu_path("d")), 2048);
	nvs__engine_destroy(e);
	close(fd);
}

Test(engine, short_transfers_finish_inside_the_engine)
{
	struct nvs_fault_plan p = {.rules = {{NVS_FAULT_SHORT, 1, 0, -1, 100}},
				   .nrules = 1};
	struct nvs_engine *e;
	char src[1000], dst[1000];
	struct nvs_ioreq w = {src, 1000, 7, -1, NVS_IOREQ_WRITE};
	struct nvs_ioreq rd = {dst, 1000, 7, -1, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &w, *out;
	int fd = open(tu_path("s"), O_RDWR | O_CREAT, 0600);

	tu_fill(src, sizeof(src), 3);
	w.fd = rd.fd = fd;
	cr_assert_eq(nvs__engine_create(
			     NVS_BACKEND_PSYNC,
			     &(struct nvs_engine_cfg){.depth = 1, .plan = &p},
			     &e),
		     0);
	cr_assert_str_eq(nvs__engine_name(e), "fault(psync)");
	cr_assert_eq(nvs__engine_submit(e, &v, 1), 1);
	cr_assert_eq(nvs__engine_reap(e, 1, &out, 1), 1);
	cr_assert_eq(out, &w);
	cr_assert_eq(w.res, 1000);
	v = &rd;
	cr_assert_eq(nvs__engine_submit(e, &v, 1), 1);
	cr_assert_eq(nvs__engine_reap(e, 1, &out, 1), 1);
	cr_assert_eq(rd.res, 1000);
	cr_assert(memcmp(src, dst, 1000) == 0);
	cr_assert_eq(nvs__engine_retries(e), 18, "9 resubmits each way");
	nvs__engine_destroy(e);
	close(fd);
}

Test(engine, read_at_end_of_file_is_final_with_the_bytes_there)
{
	struct nvs_engine *e;
	char buf[4096];
	struct nvs_ioreq r = {buf, 4096, 0, -1, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &r, *out;

	tu_write_file(tu_path("x"), "hello", 5);
	r.fd = open(tu_path("x"), O_RDONLY);
	cr_assert_eq(nvs__engine_create(NVS_BACKEND_LIBAIO,
					&(struct nvs_engine_cfg){.depth = 1},
					&e),
		     0);
	cr_assert_eq(nvs__engine_submit(e, &v, 1), 1);
	cr_assert_eq(nvs__engine_reap(e, 1, &out, 1), 1);
	cr_assert_eq(r.res, 5);
	nvs__engine_destroy(e);
	close(r.fd);
}

/* ------------------------------------------------------------ io_uring */

static struct nvs_engine *uring(unsigned depth, unsigned flags,
				const struct nvs_fault_plan *plan)
{
	struct nvs_engine_cfg cfg = {
		.depth = depth, .flags = flags, .plan = plan};
	struct nvs_engine *e;
	char why[200];
	int ret = nvs__engine_probe(NVS_BACKEND_IO_URING, depth, why,
				    sizeof(why));

	if (ret < 0)
		cr_skip_test("io_uring unavailable here: %s", why);
	ret = nvs__engine_create(NVS_BACKEND_IO_URING, &cfg, &e);
	cr_assert_eq(ret, 0, "io_uring engine: %s", strerror(-ret));
	return e;
}

/* Submit @n requests and reap them all; returns when every one is final. */
static void run(struct nvs_engine *e, struct nvs_ioreq **v, unsigned n)
{
	struct nvs_ioreq *out[16];
	unsigned sub = 0, got = 0;

	cr_assert_leq(n, 16);
	while (got < n) {
		sub += nvs__engine_submit(e, v + sub, n - sub);
		got += nvs__engine_reap(e, 1, out + got, n - got);
	}
	cr_assert_eq(nvs__engine_inflight(e), 0);
}

Test(engine, io_uring_reports_each_rejected_request_with_its_errno)
{
	char *mem = aligned_alloc(4096, 3 * 4096);
	struct nvs_ioreq good = {mem, 4096, 0, -1, NVS_IOREQ_READ};
	struct nvs_ioreq bad = {mem + 4096 + 1, 4096, 4096, -1,
				NVS_IOREQ_READ}; /* misaligned buffer */
	struct nvs_ioreq *v[2] = {&good, &bad};
	int fd = direct_file(8192);
	struct nvs_engine *e = uring(4, 0, NULL);

	good.fd = bad.fd = fd;
	cr_assert_str_eq(nvs__engine_name(e), "io_uring");
	run(e, v, 2);
	cr_assert_eq(good.res, 4096);
	cr_assert_eq(bad.res, -EINVAL);
	nvs__engine_destroy(e);
	close(fd);
	free(mem);
}

Test(engine, io_uring_short_read_at_end_of_file_is_final)
{
	char buf[4096];
	struct nvs_ioreq r = {buf, 4096, 0, -1, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &r;
	struct nvs_engine *e = uring(1, 0, NULL);

	tu_write_file(tu_path("x"), "hello", 5);
	r.fd = open(tu_path("x"), O_RDONLY);
	run(e, &v, 1);
	cr_assert_eq(r.res, 5);
	cr_assert_eq(memcmp(buf, "hello", 5), 0);
	nvs__engine_destroy(e);
	close(r.fd);
}

Test(engine, io_uring_ring_full_is_backpressure_not_failure)
{
	char buf[6][512];
	struct nvs_ioreq r[6], *v[6], *out[6];
	int fd = open(tu_path("d"), O_RDWR | O_CREAT, 0600);
	struct nvs_engine *e = uring(2, 0, NULL);
	unsigned got = 0;

	for (int i = 0; i < 6; i++) {
		memset(buf[i], 'a' + i, 512);
		r[i] = (struct nvs_ioreq){buf[i], 512, i * 512, fd,
					  NVS_IOREQ_WRITE};
		v[i] = &r[i];
	}
	cr_assert_eq(nvs__engine_submit(e, v, 6), 2);
	cr_assert_eq(nvs__engine_submit(e, v + 2, 4), 0, "ring is full");
	cr_assert_eq(nvs__engine_inflight(e), 2);
	while (got < 2)
		got += nvs__engine_reap(e, 1, out + got, 2 - got);
	cr_assert_eq(nvs__engine_submit(e, v + 2, 4), 2);
	cr_assert_eq(nvs__engine_reap(e, 2, out, 6), 2);
	cr_assert_eq(nvs__engine_submit(e, v + 4, 2), 2);
	cr_assert_eq(nvs__engine_reap(e, 2, out, 6), 2);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(r[i].res, 512);
	cr_assert_eq(tu_file_size(tu_path("d")), 6 * 512);
	nvs__engine_destroy(e);
	close(fd);
}

Test(engine, io_uring_pinned_memory_goes_out_as_fixed_buffers)
{
	int err, fd = direct_file(1 << 20);
	char *pinned = nvs_pinned_alloc(1 << 20, &err);
	char *plain = aligned_alloc(4096, 1 << 20);
	struct nvs_ioreq a = {pinned, 1 << 20, 0, fd, NVS_IOREQ_READ};
	struct nvs_ioreq b = {plain, 1 << 20, 0, fd, NVS_IOREQ_READ};
	struct nvs_ioreq c = {pinned + 4096, 8192, 4096, fd, NVS_IOREQ_READ};
	struct nvs_ioreq *v[3] = {&a, &b, &c};
	struct nvs_engine *e = uring(4, 0, NULL);
	struct nvs_engine_stats st;

	cr_assert_not_null(pinned, "%s", nvs_last_error());
	run(e, v, 3);
	cr_assert_eq(a.res, 1 << 20);
	cr_assert_eq(b.res, 1 << 20);
	cr_assert_eq(c.res, 8192);
	cr_assert(memcmp(pinned, plain, 1 << 20) == 0);
	nvs__engine_stats(e, &st);
	cr_assert_eq(st.register_error, 0, "%s", strerror(-st.register_error));
	cr_assert_eq(st.fixed_bufs, 2, "the pinned requests, not malloc's");
	cr_assert_geq(st.registered, 1 << 20);
	nvs__engine_destroy(e);
	nvs_pinned_free(pinned);
	free(plain);
	close(fd);
}

Test(engine, io_uring_no_fixed_registers_nothing)
{
	int err, fd = direct_file(1 << 16);
	char *pinned = nvs_pinned_alloc(1 << 16, &err);
	struct nvs_ioreq a = {pinned, 1 << 16, 0, fd, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &a;
	struct nvs_engine *e = uring(4, NVS_ENGINE_NO_FIXED, NULL);
	struct nvs_engine_stats st;

	a.file_key = 42;
	run(e, &v, 1);
	cr_assert_eq(a.res, 1 << 16);
	nvs__engine_stats(e, &st);
	cr_assert_eq(st.fixed_bufs, 0);
	cr_assert_eq(st.fixed_files, 0);
	cr_assert_eq(st.registered, 0);
	nvs__engine_destroy(e);
	nvs_pinned_free(pinned);
	close(fd);
}

Test(engine, io_uring_cached_files_are_registered_until_forgotten)
{
	char src[4096], dst[4096];
	int fd = open(tu_path("f"), O_RDWR | O_CREAT, 0600);
	struct nvs_ioreq w = {src, 4096, 0, fd, NVS_IOREQ_WRITE};
	struct nvs_ioreq r = {dst, 4096, 0, fd, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &w;
	struct nvs_engine *e = uring(2, 0, NULL);
	struct nvs_engine_stats st;

	tu_fill(src, sizeof(src), 5);
	w.file_key = r.file_key = 7;
	run(e, &v, 1);
	cr_assert_eq(w.res, 4096);
	nvs__engine_forget_files(e);
	/* The slot is empty now: the descriptor is registered again. */
	v = &r;
	run(e, &v, 1);
	cr_assert_eq(r.res, 4096);
	cr_assert(memcmp(src, dst, sizeof(src)) == 0);
	nvs__engine_stats(e, &st);
	cr_assert_eq(st.fixed_files, 2);
	nvs__engine_destroy(e);
	close(fd);
}

Test(engine, every_injected_fault_reaches_through_io_uring)
{
	struct nvs_fault_plan p = {.rules = {{NVS_FAULT_EIO, 1, 1, -1, 0},
					     {NVS_FAULT_ENOSPC, 2, 1, -1, 0},
					     {NVS_FAULT_EAGAIN, 3, 2, -1, 0},
					     {NVS_FAULT_EINTR, 5, 2, -1, 0},
					     {NVS_FAULT_SHORT, 7, 3, -1, 100}},
				   .nrules = 5};
	char a[512], b[512], c[1000];
	int fd = open(tu_path("q"), O_RDWR | O_CREAT, 0600);
	struct nvs_ioreq ra = {a, 512, 0, fd, NVS_IOREQ_WRITE};
	struct nvs_ioreq rb = {b, 512, 512, fd, NVS_IOREQ_WRITE};
	struct nvs_ioreq rc = {c, 1000, 1024, fd, NVS_IOREQ_WRITE};
	struct nvs_ioreq *v;
	struct nvs_engine *e = uring(4, 0, &p);

	cr_assert_str_eq(nvs__engine_name(e), "fault(io_uring)");
	tu_fill(c, sizeof(c), 9);
	v = &ra;
	run(e, &v, 1); /* attempt 1 */
	cr_assert_eq(ra.res, -EIO);
	v = &rb;
	run(e, &v, 1); /* attempt 2 */
	cr_assert_eq(rb.res, -ENOSPC);
	cr_assert_eq(tu_file_size(tu_path("q")), 0, "nothing was written");
	/* Attempts 3-4 EAGAIN, 5-6 EINTR, 7-9 cut to 100 bytes, 10 the
	 * remaining 700: one request, finished inside. */
	v = &rc;
	run(e, &v, 1);
	cr_assert_eq(rc.res, 1000);
	cr_assert_eq(nvs__engine_retries(e), 7);
	cr_assert_eq(tu_file_size(tu_path("q")), 2024);
	nvs__engine_destroy(e);
	close(fd);
}

Test(engine, io_uring_sqpoll_moves_the_bytes)
{
	struct nvs_engine_cfg cfg = {.depth = 4, .flags = NVS_ENGINE_SQPOLL};
	char src[8192], dst[8192];
	int fd = open(tu_path("p"), O_RDWR | O_CREAT, 0600);
	struct nvs_ioreq w = {src, 8192, 0, fd, NVS_IOREQ_WRITE};
	struct nvs_ioreq r = {dst, 8192, 0, fd, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &w;
	struct nvs_engine_stats st;
	struct nvs_engine *e;
	char why[200];
	int ret;

	if (nvs__engine_probe(NVS_BACKEND_IO_URING, 4, why, sizeof(why)) < 0)
		cr_skip_test("io_uring unavailable here: %s", why);
	ret = nvs__engine_create(NVS_BACKEND_IO_URING, &cfg, &e);
	if (ret == -EPERM)
		cr_skip_test("SQPOLL needs privileges on this kernel");
	cr_assert_eq(ret, 0, "%s", strerror(-ret));
	nvs__engine_stats(e, &st);
	cr_assert(st.setup_flags & 2u /* IORING_SETUP_SQPOLL */);
	tu_fill(src, sizeof(src), 4);
	run(e, &v, 1);
	v = &r;
	run(e, &v, 1);
	cr_assert_eq(w.res, 8192);
	cr_assert_eq(r.res, 8192);
	cr_assert(memcmp(src, dst, sizeof(src)) == 0);
	nvs__engine_destroy(e);
	close(fd);
}

Test(engine, io_uring_iopoll_reads_or_says_the_device_cannot)
{
	int fd = direct_file(8192);
	char *mem = aligned_alloc(4096, 8192), *ref;
	struct nvs_ioreq r = {mem, 8192, 0, fd, NVS_IOREQ_READ};
	struct nvs_ioreq *v = &r;
	struct nvs_engine *e = uring(4, NVS_ENGINE_IOPOLL, NULL);
	size_t n;

	run(e, &v, 1);
	if (r.res == -EOPNOTSUPP)
		cr_skip_test("IOPOLL: this disk has no poll queues "
			     "(EOPNOTSUPP; NVMe needs nvme.poll_queues > 0)");
	cr_assert_eq(r.res, 8192, "%s", strerror((int)-r.res));
	ref = tu_read_file(tu_path("e"), &n);
	cr_assert(memcmp(mem, ref, 8192) == 0);
	free(ref);
	nvs__engine_destroy(e);
	close(fd);
	free(mem);
}
