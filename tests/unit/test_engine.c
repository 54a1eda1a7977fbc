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
	cr_assert_eq(nvs__engine_create(NVS_BACKEND_LIBAIO, 4, NULL, &e), 0);
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

	cr_assert_eq(nvs__engine_create(NVS_BACKEND_PSYNC, 2, NULL, &e), 0);
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
	cr_assert_eq(nvs__engine_create(NVS_BACKEND_PSYNC, 1, &p, &e), 0);
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
	cr_assert_eq(nvs__engine_create(NVS_BACKEND_LIBAIO, 1, NULL, &e), 0);
	cr_assert_eq(nvs__engine_submit(e, &v, 1), 1);
	cr_assert_eq(nvs__engine_reap(e, 1, &out, 1), 1);
	cr_assert_eq(r.res, 5);
	nvs__engine_destroy(e);
	close(r.fd);
}
