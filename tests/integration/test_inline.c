// SPDX-License-Identifier: MIT
/*
 * Small synchronous ops on the caller's thread (nvs_aio_opts.inline_max):
 * which ops take it (counted in inline_ops, never in requests), which go
 * to the workers (misaligned memory, unaligned edges, larger ops, other
 * ops in flight), the counts the sync calls return either way, a full
 * disk met on the caller's thread, and threads sharing a handle.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "testutil.h"
#include "tu_aio.h"

#define KB4 4096

static struct nvs_aio *mk(uint32_t inline_max, enum nvs_direct direct)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.block_size = 64 << 10;
	o.inline_max = inline_max;
	o.direct = direct;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	return h;
}

/* O_DIRECT on the test directory, or skip saying why. */
static void need_direct(struct nvs_aio *h)
{
	if (tu_aio_stats(h).direct_fallbacks)
		cr_skip_test("the test directory's filesystem refuses "
			     "O_DIRECT; the aligned fast path is not reached");
}

static void fini(void)
{
	tu_cleanup();
}

TestSuite(inline_ops, .fini = fini);

static void round_trip_inline(enum nvs_direct direct)
{
	struct nvs_aio *h = mk(0, direct);
	char *buf = nvs_aio_new_cpu_locked_buffer(h, KB4);
	char *back = nvs_aio_new_cpu_locked_buffer(h, KB4);
	struct nvs_aio_stats st;

	cr_assert(buf && back);
	tu_fill(buf, KB4, 3);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, KB4, tu_path("f"), 8192), 1,
		     "%s", nvs_last_error());
	if (direct != NVS_DIRECT_NEVER)
		need_direct(h);
	cr_assert_eq(nvs_aio_sync_pread(h, back, KB4, tu_path("f"), 8192), 1,
		     "%s", nvs_last_error());
	cr_assert(memcmp(buf, back, KB4) == 0);
	st = tu_aio_stats(h);
	cr_assert_eq(st.inline_ops, 2);
	cr_assert_eq(st.requests, 0, "no worker request for either op");
	cr_assert_eq(st.ops_completed, 2);
	cr_assert_eq(st.ops_failed, 0);
	cr_assert_eq(st.bytes_written, KB4);
	cr_assert_eq(st.bytes_read, KB4);
	cr_assert_eq(tu_file_size(tu_path("f")), 8192 + KB4);
	cr_assert_eq(nvs_aio_wait(h), 0, "nothing left to collect");
	nvs_aio_free_cpu_locked_buffer(h, buf);
	nvs_aio_free_cpu_locked_buffer(h, back);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(inline_ops, small_direct_sync_ops_run_on_the_callers_thread)
{
	round_trip_inline(NVS_DIRECT_AUTO);
}

Test(inline_ops, small_buffered_sync_ops_run_on_the_callers_thread)
{
	round_trip_inline(NVS_DIRECT_NEVER);
}

Test(inline_ops, a_callers_descriptor_runs_inline_and_is_described_once)
{
	struct nvs_aio *h = mk(0, NVS_DIRECT_AUTO);
	char *buf = nvs_aio_new_cpu_locked_buffer(h, KB4);
	char *back = nvs_aio_new_cpu_locked_buffer(h, KB4);
	int fd;

	cr_assert(buf && back);
	tu_fill(buf, KB4, 10);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, KB4, tu_path("f"), 0), 1);
	need_direct(h);
	fd = open(tu_path("f"), O_RDWR | O_DIRECT);
	cr_assert_geq(fd, 0, "%s", strerror(errno));
	for (int i = 0; i < 3; i++) {
		memset(back, 0, KB4);
		cr_assert_eq(nvs_aio_pread_fd(h, back, KB4, fd, 0, false), 1,
			     "%s", nvs_last_error());
		cr_assert(memcmp(buf, back, KB4) == 0);
	}
	/* Its alignment still holds it to O_DIRECT's rules. */
	cr_assert_eq(nvs_aio_pread_fd(h, back + 512, 512, fd, 0, false), 1);
	cr_assert(memcmp(buf, back + 512, 512) == 0);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 4);
	cr_assert_eq(nvs_aio_pwrite_fd(h, buf, KB4, fd, 100, false), 1);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 4,
		     "unaligned edges: a worker");
	close(fd);
	nvs_aio_free_cpu_locked_buffer(h, buf);
	nvs_aio_free_cpu_locked_buffer(h, back);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(inline_ops, inline_off_sends_every_op_to_a_worker)
{
	struct nvs_aio *h = mk(NVS_AIO_INLINE_OFF, NVS_DIRECT_AUTO);
	char buf[KB4], back[KB4];

	tu_fill(buf, KB4, 4);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, KB4, tu_path("f"), 0), 1);
	cr_assert_eq(nvs_aio_sync_pread(h, back, KB4, tu_path("f"), 0), 1);
	cr_assert(memcmp(buf, back, KB4) == 0);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 0);
	cr_assert_geq(tu_aio_stats(h).requests, 2);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(inline_ops, ops_a_worker_must_shape_go_to_the_workers)
{
	struct nvs_aio *h = mk(0, NVS_DIRECT_AUTO);
	char *pinned = nvs_aio_new_cpu_locked_buffer(h, 256 << 10);
	char *back = tu_alloc(256 << 10, 1);
	struct nvs_aio_stats st;

	cr_assert(pinned);
	tu_fill(pinned, 256 << 10, 5);
	/* Larger than inline_max (64 KiB, the block size here). */
	cr_assert_eq(nvs_aio_sync_pwrite(h, pinned, 256 << 10, tu_path("f"), 0),
		     1);
	need_direct(h);
	st = tu_aio_stats(h);
	cr_assert_eq(st.inline_ops, 0);
	cr_assert_eq(st.requests, 4);
	/* Misaligned memory: a worker bounces it. */
	cr_assert_eq(nvs_aio_sync_pread(h, back, KB4, tu_path("f"), 0), 1);
	cr_assert(memcmp(back, pinned, KB4) == 0);
	st = tu_aio_stats(h);
	cr_assert_eq(st.inline_ops, 0);
	cr_assert_eq(st.bounced_requests, 1);
	/* Unaligned edges: buffered beside the direct body. */
	cr_assert_eq(
		nvs_aio_sync_pread(h, pinned + KB4, 3 * KB4, tu_path("f"), 100),
		1);
	st = tu_aio_stats(h);
	cr_assert_eq(st.inline_ops, 0);
	cr_assert_gt(st.edge_bytes, 0);
	cr_assert_eq(nvs_aio_sync_pread(h, back, 3 * KB4, tu_path("f"), 100),
		     1);
	cr_assert(memcmp(back, pinned + KB4, 3 * KB4) == 0);
	/* Aligned and small: inline. */
	cr_assert_eq(nvs_aio_sync_pread(h, pinned, 2 * KB4, tu_path("f"), KB4),
		     1);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 1);
	tu_free(back);
	nvs_aio_free_cpu_locked_buffer(h, pinned);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

/* Spin until @n ops have finished (the ticket stays uncollected). */
static void until_completed(struct nvs_aio *h, uint64_t n)
{
	while (tu_aio_stats(h).ops_completed < n)
		sched_yield();
}

/*
 * A handle with a finished, uncollected ticket @t for a KB4 write of @a
 * (pattern @seed) to "a"; @b is a second pinned buffer.
 */
static struct nvs_aio *ticket_done(char **a, char **b, uint64_t *t,
				   unsigned seed)
{
	struct nvs_aio *h = mk(0, NVS_DIRECT_AUTO);
	struct nvs_aio_io io = {NVS_AIO_WRITE, NULL, KB4, NULL, -1, 0};

	*a = nvs_aio_new_cpu_locked_buffer(h, KB4);
	*b = nvs_aio_new_cpu_locked_buffer(h, KB4);
	cr_assert(*a && *b);
	tu_fill(*a, KB4, seed);
	io.buf = *a;
	io.path = tu_path("a");
	cr_assert_eq(nvs_aio_submit(h, &io, t), 0);
	until_completed(h, 1);
	return h;
}

Test(inline_ops, a_sync_call_collects_what_is_pending_through_the_workers)
{
	char *a, *b;
	uint64_t t;
	struct nvs_aio *h = ticket_done(&a, &b, &t, 6);

	/* DeepNVMe's sync call returns what wait collects: both ops. */
	cr_assert_eq(nvs_aio_sync_pwrite(h, a, KB4, tu_path("b"), 0), 2);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 0);
	cr_assert_eq(nvs_aio_wait_op(h, t), -ENOENT, "collected by the wait");
	/* An untracked op still in flight or uncollected: the same. */
	cr_assert_eq(nvs_aio_async_pread(h, b, KB4, tu_path("a"), 0), 0);
	cr_assert_eq(nvs_aio_sync_pread(h, b, KB4, tu_path("b"), 0), 2);
	cr_assert(memcmp(a, b, KB4) == 0);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 0);
	nvs_aio_free_cpu_locked_buffer(h, a);
	nvs_aio_free_cpu_locked_buffer(h, b);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(inline_ops, submit_wait_runs_inline_beside_an_uncollected_ticket)
{
	char *a, *b;
	uint64_t t;
	struct nvs_aio *h = ticket_done(&a, &b, &t, 7);
	struct nvs_aio_io io;

	need_direct(h);
	io = (struct nvs_aio_io){NVS_AIO_READ, b, KB4, tu_path("a"), -1, 0};
	cr_assert_eq(nvs_aio_submit_wait(h, &io), 0, "%s", nvs_last_error());
	cr_assert(memcmp(a, b, KB4) == 0);
	cr_assert_eq(tu_aio_stats(h).inline_ops, 1);
	cr_assert_eq(nvs_aio_wait_op(h, t), 0, "the ticket is still there");
	/* Errors come back as from a submit. */
	io.offset = 1 << 20;
	cr_assert_eq(nvs_aio_submit_wait(h, &io), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "beyond the end"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_aio_submit_wait(NULL, &io), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "handle is NULL"), "%s",
		  nvs_last_error());
	nvs_aio_free_cpu_locked_buffer(h, a);
	nvs_aio_free_cpu_locked_buffer(h, b);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(inline_ops, a_full_disk_on_the_callers_thread_is_enospc)
{
	const char *mnt = tu_path("mnt");
	char path[512], keep[KB4], back[KB4], chunk[64 << 10];
	struct nvs_aio *h;
	struct nvs_aio_stats st;
	int ret = 1, i;

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=256k"))
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	h = mk(0, NVS_DIRECT_NEVER);
	snprintf(path, sizeof(path), "%s/f", mnt);
	tu_fill(keep, sizeof(keep), 8);
	cr_assert_eq(nvs_aio_sync_pwrite(h, keep, sizeof(keep), path, 0), 1);
	tu_fill(chunk, sizeof(chunk), 9);
	for (i = 1; i < 64 && ret == 1; i++)
		ret = nvs_aio_sync_pwrite(h, chunk, sizeof(chunk), path,
					  (int64_t)i * (int64_t)sizeof(chunk));
	cr_assert_eq(ret, -ENOSPC, "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "on the caller's thread"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "space"), "%s", nvs_last_error());
	st = tu_aio_stats(h);
	cr_assert_eq(st.inline_ops, (uint64_t)i);
	cr_assert_eq(st.ops_failed, 1);
	cr_assert_eq(st.requests, 0);
	cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back), path, 0), 1);
	cr_assert(memcmp(back, keep, sizeof(keep)) == 0, "earlier data lost");
	cr_assert_eq(nvs_aio_wait(h), 0, "the failure was returned, not kept");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	umount2(mnt, MNT_DETACH);
}

struct worker_arg {
	struct nvs_aio *h;
	const char *path;
	int id;
	int bad;
	char msg[NVS_ERRMSG_MAX];
};

static void *hammer(void *p)
{
	struct worker_arg *w = p;
	char *buf = tu_alloc(KB4, 0), *back = tu_alloc(KB4, 0);

	for (int i = 0; i < 200 && !w->bad; i++) {
		int64_t off = (int64_t)(w->id * 200 + i) * KB4;
		struct nvs_aio_io io = {NVS_AIO_WRITE, buf, KB4,
					w->path,       -1,  off};

		tu_fill(buf, KB4, (unsigned)(w->id * 1000 + i));
		if (w->id % 2) {
			if (nvs_aio_submit_wait(w->h, &io) != 0)
				w->bad = 1;
			io.opcode = NVS_AIO_READ;
			io.buf = back;
			if (nvs_aio_submit_wait(w->h, &io) != 0)
				w->bad = 2;
		} else {
			/* DeepNVMe's sync calls wait for the whole handle:
			 * another thread's wait may collect this op (count
			 * 0), but it has finished when the call returns. */
			if (nvs_aio_pwrite(w->h, buf, KB4, w->path, off,
					   false) < 0)
				w->bad = 3;
			if (nvs_aio_pread(w->h, back, KB4, w->path, off,
					  false) < 0)
				w->bad = 4;
		}
		if (w->bad)
			snprintf(w->msg, sizeof(w->msg), "%s",
				 nvs_last_error());
		else if (memcmp(buf, back, KB4))
			w->bad = 5;
	}
	tu_free(buf);
	tu_free(back);
	return NULL;
}

Test(inline_ops, threads_sharing_a_handle_each_get_their_own_bytes)
{
	struct nvs_aio *h = mk(0, NVS_DIRECT_AUTO);
	struct worker_arg w[4];
	pthread_t th[4];
	struct nvs_aio_stats st;
	char path[512];

	snprintf(path, sizeof(path), "%s", tu_path("shared")); /* static */
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker_arg){h, path, i, 0, ""};
		cr_assert_eq(pthread_create(&th[i], NULL, hammer, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(w[i].bad, 0, "thread %d failed at step %d: %s", i,
			     w[i].bad, w[i].msg);
	}
	cr_assert_geq(nvs_aio_wait(h), 0);
	st = tu_aio_stats(h);
	cr_assert_eq(st.ops_completed, 4 * 400);
	cr_assert_eq(st.ops_failed, 0);
	cr_assert_eq(st.bytes_read, 4 * 200 * KB4);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}
