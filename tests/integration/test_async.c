// SPDX-License-Identifier: MIT
/*
 * Asynchronous use: DeepNVMe's N-async-then-wait pattern, partitioned
 * writes, offset reads, per-op tickets, descriptors, backpressure, and no
 * allocation on the I/O path. Several threads sharing a handle are in
 * tests/threads/test_threads.c, which also runs under TSan.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/aio.h"
#include "testutil.h"

static struct nvs_aio *mk(unsigned par, unsigned qd, unsigned bs,
			  unsigned max_ops)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = par;
	o.queue_depth = qd;
	o.block_size = bs;
	o.max_ops = max_ops;
	o.overlap_events = true;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	return h;
}

static void fini(void)
{
	tu_cleanup();
}

TestSuite(async, .fini = fini);

Test(async, n_async_writes_then_one_wait_returns_n)
{
	struct nvs_aio *h = mk(2, 8, 64 << 10, 0);
	enum { N = 24, SZ = 300001 };
	unsigned char *bufs[N];
	char name[32];

	for (int i = 0; i < N; i++) {
		bufs[i] = tu_alloc(SZ, (size_t)i);
		tu_fill(bufs[i], SZ, (uint64_t)i);
		snprintf(name, sizeof(name), "t%d", i);
		cr_assert_eq(
			nvs_aio_async_pwrite(h, bufs[i], SZ, tu_path(name), i),
			0);
	}
	cr_assert_eq(nvs_aio_wait(h), N);
	cr_assert_eq(nvs_aio_wait(h), 0);
	for (int i = 0; i < N; i++) {
		memset(bufs[i], 0, SZ);
		snprintf(name, sizeof(name), "t%d", i);
		cr_assert_eq(
			nvs_aio_async_pread(h, bufs[i], SZ, tu_path(name), i),
			0);
	}
	cr_assert_eq(nvs_aio_wait(h), N);
	for (int i = 0; i < N; i++) {
		unsigned char *want = malloc(SZ);
		tu_fill(want, SZ, (uint64_t)i);
		cr_assert(memcmp(bufs[i], want, SZ) == 0, "file %d", i);
		free(want);
		tu_free(bufs[i]);
	}
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, sync_call_counts_pending_async_ops)
{
	struct nvs_aio *h = mk(1, 4, 4096, 0);
	char buf[8192];

	tu_fill(buf, sizeof(buf), 1);
	cr_assert_eq(nvs_aio_async_pwrite(h, buf, 4096, tu_path("a"), 0), 0);
	cr_assert_eq(nvs_aio_async_pwrite(h, buf, 4096, tu_path("b"), 0), 0);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 8192, tu_path("c"), 0), 3);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 8192, tu_path("c"), 0), 1);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, partitions_at_increasing_offsets_equal_one_write)
{
	struct nvs_aio *h = mk(3, 16, 64 << 10, 0);
	enum { SZ = 5 * 1000003 };
	unsigned char *src = tu_alloc(SZ, 0);
	size_t n1, n2, part = 1000003;
	void *a, *b;

	tu_fill(src, SZ, 42);
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, SZ, tu_path("whole"), 0), 1);
	for (size_t off = 0; off < SZ; off += part)
		cr_assert_eq(nvs_aio_async_pwrite(h, src + off, part,
						  tu_path("parts"),
						  (int64_t)off),
			     0);
	cr_assert_eq(nvs_aio_wait(h), 5);
	a = tu_read_file(tu_path("whole"), &n1);
	b = tu_read_file(tu_path("parts"), &n2);
	cr_assert_eq(n1, (size_t)SZ);
	cr_assert_eq(n2, (size_t)SZ);
	cr_assert(memcmp(a, b, SZ) == 0);
	free(a);
	free(b);
	tu_free(src);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, offset_reads_return_the_right_bytes)
{
	struct nvs_aio *h = mk(2, 8, 4096, 0);
	enum { SZ = 3 << 20 };
	unsigned char *src = malloc(SZ), *dst = tu_alloc(SZ, 0);
	static const int64_t offs[] = {
		0, 1, 511, 4096, 65537, (1 << 20) + 3, SZ - 4097};

	tu_fill(src, SZ, 8);
	tu_write_file(tu_path("f"), src, SZ);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		size_t n = (size_t)(SZ - offs[i]) / 2 + 1;
		cr_assert_eq(
			nvs_aio_sync_pread(h, dst, n, tu_path("f"), offs[i]),
			1);
		cr_assert(memcmp(dst, src + offs[i], n) == 0, "offset %ld",
			  (long)offs[i]);
	}
	free(src);
	tu_free(dst);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, tickets_wait_poll_and_collect_once)
{
	struct nvs_aio *h = mk(2, 8, 64 << 10, 0);
	enum { SZ = 1 << 20 };
	unsigned char *buf = tu_alloc(SZ, 0);
	struct nvs_aio_io io = {NVS_AIO_WRITE, buf, SZ, tu_path("t"), -1, 0};
	uint64_t id, id2;
	int r;

	tu_fill(buf, SZ, 3);
	cr_assert_eq(nvs_aio_submit(h, &io, &id), 0);
	r = nvs_aio_poll_op(h, id);
	cr_assert(r == -EINPROGRESS || r == 0, "poll gave %d", r);
	if (r == -EINPROGRESS)
		cr_assert_eq(nvs_aio_wait_op(h, id), 0);
	cr_assert_eq(nvs_aio_wait_op(h, id), -ENOENT, "collected once");
	cr_assert_eq(nvs_aio_poll_op(h, id), -ENOENT);
	cr_assert_eq(nvs_aio_wait(h), 0, "a collected ticket is not recounted");

	/* A ticket nvs_aio_wait() collects. */
	io.opcode = NVS_AIO_READ;
	cr_assert_eq(nvs_aio_submit(h, &io, &id2), 0);
	cr_assert_neq(id, id2);
	cr_assert_eq(nvs_aio_wait(h), 1);
	cr_assert_eq(nvs_aio_wait_op(h, id2), -ENOENT);
	cr_assert_eq(nvs_aio_wait_op(h, 0xdeadbeef), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "ticket"));
	tu_free(buf);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, few_op_slots_give_backpressure_not_failure)
{
	struct nvs_aio *h = mk(1, 2, 4096, 2);
	char buf[4096];

	tu_fill(buf, sizeof(buf), 1);
	for (int i = 0; i < 50; i++)
		cr_assert_eq(nvs_aio_async_pwrite(h, buf, sizeof(buf),
						  tu_path("bp"), i * 4096),
			     0);
	cr_assert_eq(nvs_aio_wait(h), 50);
	cr_assert_eq(tu_file_size(tu_path("bp")), 50 * 4096);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, uncollected_tickets_filling_every_slot_give_eagain)
{
	struct nvs_aio *h = mk(1, 2, 4096, 2);
	char buf[512] = {0};
	struct nvs_aio_io io = {NVS_AIO_WRITE, buf, 512, tu_path("x"), -1, 0};
	uint64_t a, b, c;

	cr_assert_eq(nvs_aio_submit(h, &io, &a), 0);
	cr_assert_eq(nvs_aio_submit(h, &io, &b), 0);
	cr_assert_eq(nvs_aio_wait_op(h, a), 0);
	cr_assert_eq(nvs_aio_submit(h, &io, &a), 0);
	/* Both slots now hold tickets; once they finish nobody frees them. */
	struct nvs_aio_stats st;
	do {
		nvs_aio_get_stats(h, &st);
	} while (st.ops_completed < 3);
	cr_assert_eq(nvs_aio_submit(h, &io, &c), -EAGAIN);
	cr_assert_eq(nvs_aio_wait(h), 2);
	cr_assert_eq(nvs_aio_submit(h, &io, &c), 0);
	cr_assert_eq(nvs_aio_wait_op(h, c), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, destroy_with_ops_in_flight_completes_them)
{
	struct nvs_aio *h = mk(2, 4, 64 << 10, 0);
	enum { SZ = 4 << 20, N = 6 };
	unsigned char *buf = tu_alloc(SZ, 0);
	char name[16];

	tu_fill(buf, SZ, 77);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		cr_assert_eq(nvs_aio_async_pwrite(h, buf, SZ, tu_path(name), 0),
			     0);
	}
	cr_assert_eq(nvs_aio_destroy(h), 0);
	for (int i = 0; i < N; i++) {
		size_t n;
		void *f;
		snprintf(name, sizeof(name), "d%d", i);
		f = tu_read_file(tu_path(name), &n);
		cr_assert_eq(n, (size_t)SZ);
		cr_assert(memcmp(f, buf, SZ) == 0);
		free(f);
	}
	tu_free(buf);
}

Test(async, descriptor_calls_with_and_without_odirect)
{
	struct nvs_aio *h = mk(2, 4, 4096, 0);
	enum { SZ = 200003 };
	unsigned char *src = tu_alloc(SZ, 5), *dst = tu_alloc(SZ, 0);
	int flags[] = {O_RDWR | O_CREAT, O_RDWR | O_CREAT | O_DIRECT};

	tu_fill(src, SZ, 21);
	for (int i = 0; i < 2; i++) {
		int fd = open(tu_path("fd"), flags[i], 0600);
		cr_assert_geq(fd, 0);
		cr_assert_eq(nvs_aio_pwrite_fd(h, src, SZ, fd, 4093, false), 1,
			     "%s", nvs_last_error());
		memset(dst, 0, SZ);
		cr_assert_eq(nvs_aio_pread_fd(h, dst, SZ, fd, 4093, true), 0);
		cr_assert_eq(nvs_aio_wait(h), 1);
		cr_assert(memcmp(src, dst, SZ) == 0, "flags %#x", flags[i]);
		cr_assert_eq(tu_file_size(tu_path("fd")), 4093 + SZ);
		close(fd);
	}
	tu_free(src);
	tu_free(dst);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, submit_and_complete_allocate_nothing_even_when_bouncing)
{
	struct nvs_aio *h = mk(3, 8, 64 << 10, 0);
	enum { SZ = (2 << 20) + 4097 };
	unsigned char *src = tu_alloc(SZ, 13), *dst = tu_alloc(SZ, 7);
	struct nvs_aio_stats st;
	uint64_t id;

	tu_fill(src, SZ, 5);
	tu_dir();
	nvs__alloc_fail_at(0); /* start counting */
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, SZ, tu_path("na"), 4093), 1);
	struct nvs_aio_io io = {NVS_AIO_READ, dst, SZ, tu_path("na"), -1, 4093};
	cr_assert_eq(nvs_aio_submit(h, &io, &id), 0);
	cr_assert_eq(nvs_aio_wait_op(h, id), 0);
	cr_assert_eq(nvs__alloc_fail_at(0), 0,
		     "the library allocated on the I/O path");
	cr_assert(memcmp(src, dst, SZ) == 0);
	nvs_aio_get_stats(h, &st);
	cr_assert_gt(st.bounced_requests, 0, "misaligned buffers bounced");
	cr_assert_gt(st.edge_bytes, 0);
	tu_free(src);
	tu_free(dst);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, new_files_are_created_private)
{
	struct nvs_aio *h = mk(1, 2, 4096, 0);
	struct stat st;
	char b[10] = "0123456789";

	cr_assert_eq(nvs_aio_sync_pwrite(h, b, 10, tu_path("mode"), 0), 1);
	cr_assert_eq(stat(tu_path("mode"), &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(async, zero_byte_write_past_the_end_sets_the_size_to_the_offset)
{
	struct nvs_aio *h = mk(1, 2, 4096, 0);
	char b[100] = {7};

	cr_assert_eq(nvs_aio_sync_pwrite(h, b, 100, tu_path("z"), 0), 1);
	cr_assert_eq(nvs_aio_sync_pwrite(h, b, 0, tu_path("z"), 10000), 1);
	cr_assert_eq(tu_file_size(tu_path("z")), 10000);
	cr_assert_eq(nvs_aio_sync_pwrite(h, NULL, 0, tu_path("z"), 50), 1);
	cr_assert_eq(tu_file_size(tu_path("z")), 10000, "never truncates");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}
