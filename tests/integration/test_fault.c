// SPDX-License-Identifier: MIT
/*
 * Injected faults through the whole handle (the fault backend: the
 * handle's real backend underneath — io_uring, libaio or psync, as
 * NVSWAP_BACKEND says — with chosen attempts failing or cut short). Errors reach the caller as the
 * exact -errno with context; short transfers and EAGAIN/EINTR are finished
 * invisibly; a failed write never changes the caller's memory.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aio/handle.h"
#include "nvswap/aio.h"
#include "testutil.h"

enum { SZ = (1 << 20) + 12345 };

static struct nvs_aio *mk_mode(const struct nvs_fault_plan *plan, unsigned bs,
			       enum nvs_direct direct)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.direct = direct;
	o.block_size = bs;
	o.queue_depth = 4;
	cr_assert_eq(nvs__aio_create_fault(&o, plan, &h), 0, "%s",
		     nvs_last_error());
	/* The backend the suite runs on (make test runs it on each). */
	const char *want = getenv("NVSWAP_BACKEND");
	char name[64];
	if (want && *want && strcmp(want, "auto")) {
		snprintf(name, sizeof(name), "fault(%s)", want);
		cr_assert_str_eq(nvs_aio_backend_name(h), name);
	} else {
		cr_assert(!strncmp(nvs_aio_backend_name(h), "fault(", 6));
	}
	return h;
}

static struct nvs_aio *mk(const struct nvs_fault_plan *plan, unsigned bs)
{
	return mk_mode(plan, bs, NVS_DIRECT_AUTO);
}

static void fini(void)
{
	tu_cleanup();
}

TestSuite(fault, .fini = fini);

static void roundtrip_ok(struct nvs_aio *h, size_t misalign)
{
	unsigned char *src = tu_alloc(SZ, misalign), *dst = tu_alloc(SZ, 0);

	tu_fill(src, SZ, 99);
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, SZ, tu_path("f"), 3), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pread(h, dst, SZ, tu_path("f"), 3), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(src, dst, SZ) == 0);
	cr_assert_eq(tu_file_size(tu_path("f")), SZ + 3);
	tu_free(src);
	tu_free(dst);
}

Test(fault, eio_on_a_write_surfaces_with_offset_and_keeps_the_buffer)
{
	struct nvs_fault_plan p = {
		.rules = {{NVS_FAULT_EIO, 3, 1, NVS_IOREQ_WRITE, 0}},
		.nrules = 1};
	struct nvs_aio *h = mk(&p, 64 << 10);
	unsigned char *src = tu_alloc(SZ, 0), *copy = malloc(SZ);

	tu_fill(src, SZ, 1);
	memcpy(copy, src, SZ);
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, SZ, tu_path("f"), 0), -EIO);
	cr_assert(strstr(nvs_last_error(), "Input/output error"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "offset 131072"), "%s",
		  nvs_last_error());
	cr_assert(memcmp(src, copy, SZ) == 0);
	struct nvs_aio_stats st;
	nvs_aio_get_stats(h, &st);
	cr_assert_eq(st.ops_failed, 1);
	/* The handle stays usable. */
	roundtrip_ok(h, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	free(copy);
	tu_free(src);
}

Test(fault, eio_on_a_read_surfaces_through_a_ticket)
{
	struct nvs_fault_plan p = {
		.rules = {{NVS_FAULT_EIO, 1, 0, NVS_IOREQ_READ, 0}},
		.nrules = 1};
	struct nvs_aio *h = mk(&p, 64 << 10);
	char buf[65536];
	uint64_t id;

	tu_fill(buf, sizeof(buf), 2);
	tu_write_file(tu_path("r"), buf, sizeof(buf));
	struct nvs_aio_io io = {NVS_AIO_READ, buf, sizeof(buf),
				tu_path("r"), -1,  0};
	cr_assert_eq(nvs_aio_submit(h, &io, &id), 0);
	cr_assert_eq(nvs_aio_wait_op(h, id), -EIO);
	cr_assert_eq(nvs_aio_wait(h), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, enospc_comes_from_the_op_and_from_wait)
{
	struct nvs_fault_plan p = {
		.rules = {{NVS_FAULT_ENOSPC, 2, 0, NVS_IOREQ_WRITE, 0}},
		.nrules = 1};
	struct nvs_aio *h = mk(&p, 64 << 10);
	unsigned char *src = tu_alloc(SZ, 0);

	tu_fill(src, SZ, 1);
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, SZ, tu_path("f"), 0), -ENOSPC);
	cr_assert_eq(nvs_aio_async_pwrite(h, src, SZ, tu_path("g"), 0), 0);
	cr_assert_eq(nvs_aio_async_pwrite(h, src, SZ, tu_path("h"), 0), 0);
	cr_assert_eq(nvs_aio_wait(h), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "space"), "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_destroy(h), 0);
	tu_free(src);
}

Test(fault, first_failed_op_in_submission_order_is_reported)
{
	struct nvs_fault_plan p = {
		.rules = {{NVS_FAULT_EIO, 1, 1, NVS_IOREQ_WRITE, 0},
			  {NVS_FAULT_ENOSPC, 2, 1, NVS_IOREQ_WRITE, 0}},
		.nrules = 2};
	struct nvs_aio *h = mk(&p, 64 << 10);
	char buf[4096] = {0};

	cr_assert_eq(nvs_aio_async_pwrite(h, buf, 4096, tu_path("a"), 0), 0);
	cr_assert_eq(nvs_aio_async_pwrite(h, buf, 4096, tu_path("b"), 0), 0);
	cr_assert_eq(nvs_aio_wait(h), -EIO);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, a_refused_submit_queues_nothing_and_touches_nothing)
{
	struct nvs_fault_plan p = {.rules = {{.kind = NVS_FAULT_REFUSE,
					      .nth = 2,
					      .count = 1,
					      .opcode = NVS_IOREQ_WRITE,
					      .refuse_err = ENOSPC}},
				   .nrules = 1};
	struct nvs_aio *h = mk(&p, 64 << 10);
	unsigned char a[8192], b[8192];
	uint64_t id;

	tu_fill(a, sizeof(a), 3);
	tu_fill(b, sizeof(b), 4);
	/* Submit 1 is queued; 2 is refused before anything happens; 3 is
	 * queued again. */
	cr_assert_eq(nvs_aio_async_pwrite(h, a, sizeof(a), tu_path("a"), 0), 0);
	struct nvs_aio_io io = {NVS_AIO_WRITE, b,  sizeof(b),
				tu_path("b"),  -1, 0};
	cr_assert_eq(nvs_aio_submit(h, &io, &id), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), tu_path("b")), "%s",
		  nvs_last_error());
	cr_assert_eq(access(tu_path("b"), F_OK), -1, "not even created");
	cr_assert_eq(nvs_aio_async_pwrite(h, b, sizeof(b), tu_path("c"), 0), 0);
	cr_assert_eq(nvs_aio_wait(h), 2, "only the two queued ops");
	cr_assert_eq(tu_file_size(tu_path("a")), sizeof(a));
	cr_assert_eq(tu_file_size(tu_path("c")), sizeof(b));
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, eagain_and_eintr_are_retried_invisibly)
{
	struct nvs_fault_plan p = {.rules = {{NVS_FAULT_EAGAIN, 2, 5, -1, 0},
					     {NVS_FAULT_EINTR, 20, 3, -1, 0}},
				   .nrules = 2};
	struct nvs_aio *h = mk(&p, 64 << 10);
	struct nvs_aio_stats st;

	roundtrip_ok(h, 0);
	nvs_aio_get_stats(h, &st);
	cr_assert_eq(st.retries, 8);
	cr_assert_eq(st.ops_failed, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, endless_eagain_gives_up_with_eagain)
{
	struct nvs_fault_plan p = {
		.rules = {{NVS_FAULT_EAGAIN, 1, 0, NVS_IOREQ_WRITE, 0}},
		.nrules = 1};
	struct nvs_aio *h = mk(&p, 64 << 10);
	char buf[4096] = {0};

	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 4096, tu_path("a"), 0),
		     -EAGAIN);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, short_transfers_are_finished_for_reads_and_writes)
{
	/* O_DIRECT: the kernel cuts at block boundaries. */
	struct nvs_fault_plan p = {.rules = {{NVS_FAULT_SHORT, 1, 0, -1, 4096}},
				   .nrules = 1};
	struct nvs_aio *h = mk(&p, 64 << 10);
	struct nvs_aio_stats st;

	roundtrip_ok(h, 0);
	roundtrip_ok(h, 17);
	nvs_aio_get_stats(h, &st);
	/* Each op's aligned body is [4096, 1060864): 16 requests of 64 KiB
	 * in 16 pieces each, and one of 8 KiB in 2; 4 ops. */
	cr_assert_eq(st.retries, 4 * (16 * 15 + 1),
		     "every request was cut short: %llu retries",
		     (unsigned long long)st.retries);
	cr_assert_eq(st.ops_failed, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, byte_granular_short_transfers_are_finished_when_buffered)
{
	struct nvs_fault_plan p = {.rules = {{NVS_FAULT_SHORT, 1, 0, -1, 1000}},
				   .nrules = 1};
	struct nvs_aio *h = mk_mode(&p, 64 << 10, NVS_DIRECT_NEVER);
	struct nvs_aio_stats st;

	roundtrip_ok(h, 3);
	nvs_aio_get_stats(h, &st);
	cr_assert_gt(st.retries, 2000, "every request was cut short");
	cr_assert_eq(st.ops_failed, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(fault, half_transfers_are_finished)
{
	struct nvs_fault_plan p = {.rules = {{NVS_FAULT_SHORT, 1, 0, -1, 0}},
				   .nrules = 1};
	struct nvs_aio *h = mk(&p, 1 << 20);

	roundtrip_ok(h, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}
