// SPDX-License-Identifier: MIT
/*
 * The checkpoint writer's deferred copies (nvs_ckpt_write_async): exact
 * bytes in call order when deferred and synchronous writes mix (queue and
 * side ring wrapping many times), tickets and nvs_ckpt_async_done(), a
 * source reused once its ticket is done, a full disk met by the copy
 * thread (sticky, reported by the next call; no file, no temp), abort
 * with copies queued, and the caller-side fallback when the copy thread's
 * side buffer cannot be allocated.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/nvswap.h"
#include "testutil.h"
#include "tu_ckpt.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(ckpt_async, .fini = fini);

/*
 * Write @n bytes of a misaligned source: pieces cycling through @splits,
 * each piece deferred when its entry is odd and synchronous when even
 * (sizes are the entries rounded down to even), tickets checked; close
 * and compare.
 */
static void mixed(const struct nvs_ckpt_opts *o, size_t n, size_t mis,
		  const size_t *splits)
{
	const char *path = tu_path("async.bin");
	unsigned char *src = tu_alloc(n ? n : 1, mis);
	struct nvs_ckpt_writer *w;
	uint64_t last = 0, t;
	size_t done = 0, k = 0;

	tu_fill(src, n, n * 7 + mis);
	cr_assert_eq(nvs_ckpt_writer_open(path, o, &w), 0, "%s",
		     nvs_last_error());
	while (done < n) {
		bool defer = splits[k] & 1;
		size_t c = splits[k] & ~(size_t)1;

		c = c && c < n - done ? c : n - done;
		if (defer) {
			cr_assert_eq(nvs_ckpt_write_async(w, src + done, c, &t),
				     0, "%s", nvs_last_error());
			cr_assert_gt(t, last, "tickets grow");
			last = t;
		} else {
			cr_assert_eq(nvs_ckpt_write(w, src + done, c), 0, "%s",
				     nvs_last_error());
		}
		done += c;
		cr_assert_eq(nvs_ckpt_offset(w), done);
		cr_assert_leq(nvs_ckpt_async_done(w), last + 1024);
		if (!splits[++k])
			k = 0;
	}
	cr_assert_eq(nvs_ckpt_wait(w), 0, "%s", nvs_last_error());
	cr_assert_geq(nvs_ckpt_async_done(w), last);
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	tu_assert_file(path, src, n);
	cr_assert(tu_guards_ok(src, n ? n : 1), "source changed");
	cr_assert_eq(tu_temps_in(tu_dir()), 0, "a temp file was left behind");
	tu_free(src);
}

Test(ckpt_async, many_deferred_writes_read_back_exactly)
{
	/* Odd: deferred; even: synchronous (small ones join the queue
	 * through the side ring, large ones wait for it). */
	static const size_t big[] = {(1 << 20) + 1, 30,	   4095,    200000,
				     (3 << 20) + 1, 65537, 1 << 20, 0};
	static const size_t tiny[] = {3, 24, 101, 2, 4097, 0};
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 3);

	mixed(&o, (20 << 20) + 3, 1, big);
	mixed(&o, (9 << 20) + 4097, 4095, big);
	/* Thousands of jobs: the queue and the side ring wrap. */
	mixed(&o, (3 << 20) + 11, 3, tiny);
	mixed(NULL, (40 << 20) + 5, 64, big);
	o.direct = NVS_DIRECT_NEVER;
	mixed(&o, (2 << 20) + 9, 7, big);
}

Test(ckpt_async, only_deferred_and_empty_writes)
{
	static const size_t all[] = {(1 << 20) + 1, 0};
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	struct nvs_ckpt_writer *w;
	uint64_t t = 99;

	mixed(&o, (8 << 20) + 5, 0, all);
	mixed(&o, 5, 0, all);
	cr_assert_eq(nvs_ckpt_writer_open(tu_path("e.bin"), &o, &w), 0);
	cr_assert_eq(nvs_ckpt_write_async(w, NULL, 0, &t), 0);
	cr_assert_eq(t, 0, "an empty write is done at once");
	cr_assert_eq(nvs_ckpt_write_async(w, NULL, 1, &t), -EINVAL);
	cr_assert_eq(nvs_ckpt_write_async(NULL, "x", 1, &t), -EINVAL);
	cr_assert_eq(nvs_ckpt_wait(NULL), -EINVAL);
	cr_assert_eq(nvs_ckpt_async_done(NULL), 0);
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	tu_assert_file(tu_path("e.bin"), "", 0);
}

Test(ckpt_async, a_source_is_reusable_once_its_ticket_is_done)
{
	const size_t n = 4 << 20;
	const char *path = tu_path("reuse.bin");
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	unsigned char *a = malloc(n), *ref = malloc(2 * n);
	struct nvs_ckpt_writer *w;
	uint64_t t1, t2;

	tu_fill(a, n, 11);
	memcpy(ref, a, n);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	cr_assert_eq(nvs_ckpt_write_async(w, a, n, &t1), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_ckpt_wait(w), 0, "%s", nvs_last_error());
	cr_assert_geq(nvs_ckpt_async_done(w), t1);
	tu_fill(a, n, 12); /* the first copy is done: change the source */
	memcpy(ref + n, a, n);
	cr_assert_eq(nvs_ckpt_write_async(w, a, n, &t2), 0);
	cr_assert_eq(t2, t1 + 1);
	while (nvs_ckpt_async_done(w) < t2)
		usleep(1000);
	memset(a, 0, n); /* done: the writer no longer reads it */
	free(a);
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	tu_assert_file(path, ref, 2 * n);
	free(ref);
}

Test(ckpt_async, abort_with_copies_queued_leaves_nothing)
{
	const size_t n = 1 << 20;
	const char *path = tu_path("abort.bin");
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	unsigned char *a = malloc(n);
	struct nvs_ckpt_writer *w;

	tu_fill(a, n, 13);
	tu_write_file(path, "old", 3);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	for (int i = 0; i < 200; i++) {
		cr_assert_eq(nvs_ckpt_write_async(w, a, n, NULL), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_ckpt_write(w, "hdr", 3), 0);
	}
	cr_assert_eq(nvs_ckpt_abort(w), 0, "%s", nvs_last_error());
	free(a);
	tu_assert_file(path, "old", 3);
	cr_assert_eq(tu_temps_in(tu_dir()), 0, "a temp file was left behind");
}

Test(ckpt_async, failed_side_buffer_copies_on_the_caller)
{
	const char *path = tu_path("fallback.bin");
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	unsigned char buf[300000];
	struct nvs_ckpt_writer *w;
	uint64_t t = 99;

	tu_fill(buf, sizeof(buf), 14);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	nvs__alloc_fail_at(1); /* the side ring, the copy thread's first */
	cr_assert_eq(nvs_ckpt_write_async(w, buf, sizeof(buf), &t), 0, "%s",
		     nvs_last_error());
	nvs__alloc_fail_at(0);
	cr_assert_eq(t, 0, "copied on the caller: done at once");
	cr_assert_eq(nvs_ckpt_async_done(w), 0);
	cr_assert_eq(nvs_ckpt_write_async(w, buf, 10, &t), 0);
	cr_assert_eq(t, 1, "the thread starts at the next deferred write");
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	memcpy(buf + sizeof(buf) - 10, buf, 10);
	{
		size_t got;
		unsigned char *back = tu_read_file(path, &got);
		cr_assert_eq(got, sizeof(buf) + 10);
		cr_assert(!memcmp(back, buf, sizeof(buf) - 10));
		cr_assert(!memcmp(back + sizeof(buf), buf, 10));
		free(back);
	}
}

/* A private small tmpfs: a real full disk. */
static const char *small_tmpfs(void)
{
	const char *mnt = tu_path("mnt");

	return tu_mount_private(mnt, "tmpfs", 0, "size=1m") ? mnt : NULL;
}

Test(ckpt_async, full_disk_in_the_copy_thread_is_sticky_and_leaves_nothing)
{
	const char *mnt = small_tmpfs();
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	const size_t n = 256 << 10;
	unsigned char old[5000], *big;
	struct nvs_ckpt_writer *w;
	char path[512];
	int r = 0, i;

	if (!mnt)
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	snprintf(path, sizeof(path), "%s/ckpt.pt", mnt);
	tu_fill(old, sizeof(old), 15);
	tu_write_file(path, old, sizeof(old));
	big = malloc(2 * n);
	tu_fill(big, 2 * n, 16);
	for (int how = 0; how < 3; how++) {
		cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0, "%s",
			     nvs_last_error());
		/* 8 MiB into 1 MiB: the copy thread meets ENOSPC; a later
		 * call reports it. */
		for (i = 0, r = 0; i < 32 && r == 0; i++) {
			r = nvs_ckpt_write_async(w, big, n, NULL);
			if (r == 0)
				r = nvs_ckpt_write(w, "x", 1);
		}
		/* Reported by wait, by a large (waiting) write, by close. */
		if (how == 0 && r == 0)
			r = nvs_ckpt_wait(w);
		if (how == 1 && r == 0)
			r = nvs_ckpt_write(w, big, 2 * n);
		if (how == 2 && r == 0)
			r = nvs_ckpt_close(w);
		else if (how == 2)
			cr_assert_eq(nvs_ckpt_close(w), -ENOSPC, "sticky");
		cr_assert_eq(r, -ENOSPC, "how %d: %s", how, nvs_last_error());
		cr_assert(strstr(nvs_last_error(), "ckpt.pt.tmp."), "%s",
			  nvs_last_error());
		if (how < 2) {
			cr_assert_eq(nvs_ckpt_write_async(w, big, 1, NULL),
				     -ENOSPC, "sticky");
			cr_assert_eq(nvs_ckpt_wait(w), -ENOSPC, "sticky");
			if (how == 0)
				cr_assert_eq(nvs_ckpt_close(w), -ENOSPC);
			else
				cr_assert_eq(nvs_ckpt_abort(w), 0);
		}
		tu_assert_file(path, old, sizeof(old));
		cr_assert_eq(tu_temps_in(mnt), 0,
			     "a temp file was left behind");
	}
	umount2(mnt, MNT_DETACH);
	free(big);
}
