// SPDX-License-Identifier: MIT
/*
 * The checkpoint writer (nvswap/ckpt.h): exact bytes back for every shape
 * of file and of write, misaligned sources; the file appears under its
 * final name only at close; abort, a full disk and every failed
 * allocation leave the previous file intact and no temp file behind.
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

TestSuite(ckpt, .fini = fini);

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Write @n pattern bytes from a source misaligned by @mis, in pieces
 * cycling through @splits (0-terminated), then close and compare. */
static void roundtrip(const struct nvs_ckpt_opts *o, size_t n, size_t mis,
		      const size_t *splits)
{
	const char *path = tu_path("ckpt.bin");
	struct nvs_ckpt_writer *w;
	unsigned char *src = tu_alloc(n ? n : 1, mis);
	size_t done = 0, k = 0;

	tu_fill(src, n, n * 31 + mis);
	cr_assert_eq(nvs_ckpt_writer_open(path, o, &w), 0, "%s",
		     nvs_last_error());
	while (done < n) {
		size_t c = splits && splits[k] ? splits[k] : n - done;
		c = c < n - done ? c : n - done;
		cr_assert_eq(nvs_ckpt_write(w, src + done, c), 0, "%s",
			     nvs_last_error());
		done += c;
		cr_assert_eq(nvs_ckpt_offset(w), done);
		if (splits && !splits[++k])
			k = 0;
	}
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	tu_assert_file(path, src, n);
	cr_assert(tu_guards_ok(src, n ? n : 1), "source changed");
	cr_assert_eq(tu_temps_in(tu_dir()), 0, "a temp file was left behind");
	tu_free(src);
}

Test(ckpt, every_size_reads_back_exactly)
{
	static const size_t sizes[] = {0,
				       1,
				       4095,
				       4096,
				       4097,
				       65535,
				       65536,
				       65537,
				       (3 << 20) + 123,
				       8u << 20,
				       (9 << 20) + 4097};
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 3);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		roundtrip(&o, sizes[i], 0, NULL);
}

Test(ckpt, odd_splits_from_misaligned_sources_read_back_exactly)
{
	static const size_t splits[] = {1, 7, 4093, 65537, 3, 200000, 4096, 0};
	static const size_t mis[] = {1, 3, 64, 511, 4095};
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);

	for (size_t i = 0; i < sizeof(mis) / sizeof(mis[0]); i++) {
		roundtrip(&o, (5 << 20) + 17 * i, mis[i], splits);
		roundtrip(&o, 4097 + i, mis[i], splits);
	}
}

Test(ckpt, defaults_and_many_buffers_read_back_exactly)
{
	static const size_t splits[] = {(1 << 20) + 1, 13, (17 << 20) - 5, 0};
	struct nvs_ckpt_opts o = tu_ckpt_opts(4096, 64);

	roundtrip(NULL, (40 << 20) + 4095, 5, splits);
	roundtrip(&o, (1 << 20) + 100, 7, splits);
}

Test(ckpt, buffered_and_unsynced_modes_read_back_exactly)
{
	static const size_t splits[] = {999, 0};
	struct nvs_ckpt_opts o = tu_ckpt_opts(16 << 10, 2);

	o.direct = NVS_DIRECT_NEVER;
	roundtrip(&o, (1 << 20) + 3, 1, splits);
	o.direct = NVS_DIRECT_AUTO;
	o.fsync = false;
	roundtrip(&o, (1 << 20) + 5, 2, splits);
}

Test(ckpt, size_hint_above_or_below_the_bytes_written_gives_exact_size)
{
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);

	o.size_hint = 10 << 20;
	roundtrip(&o, (1 << 20) + 1, 0, NULL);
	o.size_hint = 4096;
	roundtrip(&o, (2 << 20) + 7, 0, NULL);
}

Test(ckpt, borrowed_aio_handle_is_used_and_left_alive)
{
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	cr_assert_eq(nvs_aio_create(NULL, &h), 0, "%s", nvs_last_error());
	o.aio = h;
	roundtrip(&o, (1 << 20) + 9, 3, NULL);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.bytes_written, (1 << 20) + 9);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(ckpt, file_appears_under_its_final_name_only_at_close)
{
	const char *path = tu_path("final.pt");
	unsigned char buf[10000];
	struct nvs_ckpt_writer *w;
	char tmp[4096];

	tu_fill(buf, sizeof(buf), 1);
	cr_assert_eq(nvs_ckpt_writer_open(path, NULL, &w), 0, "%s",
		     nvs_last_error());
	snprintf(tmp, sizeof(tmp), "%s", nvs_ckpt_temp_path(w));
	cr_assert(!strncmp(tmp, path, strlen(path)) &&
			  strstr(tmp + strlen(path), ".tmp."),
		  "temp name %s", tmp);
	cr_assert(exists(tmp));
	cr_assert_eq(nvs_ckpt_write(w, buf, sizeof(buf)), 0);
	cr_assert(!exists(path), "visible before close");
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	cr_assert(!exists(tmp));
	tu_assert_file(path, buf, sizeof(buf));
}

Test(ckpt, close_replaces_and_abort_keeps_the_previous_file)
{
	const char *path = tu_path("prev.pt");
	unsigned char old[5000], neu[300000];
	struct nvs_ckpt_writer *w;
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);

	tu_fill(old, sizeof(old), 2);
	tu_fill(neu, sizeof(neu), 3);
	tu_write_file(path, old, sizeof(old));
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	cr_assert_eq(nvs_ckpt_write(w, neu, sizeof(neu)), 0);
	cr_assert_eq(nvs_ckpt_abort(w), 0, "%s", nvs_last_error());
	tu_assert_file(path, old, sizeof(old));
	cr_assert_eq(tu_temps_in(tu_dir()), 0);
	cr_assert_eq(nvs_ckpt_abort(NULL), 0);

	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	cr_assert_eq(nvs_ckpt_write(w, neu, sizeof(neu)), 0);
	tu_assert_file(path, old, sizeof(old));
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	tu_assert_file(path, neu, sizeof(neu));
	cr_assert_eq(tu_temps_in(tu_dir()), 0);
}

Test(ckpt, two_writers_of_one_path_get_two_temp_names)
{
	const char *path = tu_path("twice.pt");
	struct nvs_ckpt_writer *a, *b;

	cr_assert_eq(nvs_ckpt_writer_open(path, NULL, &a), 0);
	cr_assert_eq(nvs_ckpt_writer_open(path, NULL, &b), 0);
	cr_assert_str_neq(nvs_ckpt_temp_path(a), nvs_ckpt_temp_path(b));
	cr_assert_eq(nvs_ckpt_write(a, "a", 1), 0);
	cr_assert_eq(nvs_ckpt_write(b, "bb", 2), 0);
	cr_assert_eq(nvs_ckpt_close(a), 0);
	cr_assert_eq(nvs_ckpt_close(b), 0);
	tu_assert_file(path, "bb", 2);
}

Test(ckpt, bad_arguments_are_einval_and_leave_nothing)
{
	const char *path = tu_path("bad.pt");
	struct nvs_ckpt_writer *w = (void *)1;
	struct nvs_ckpt_opts o;

	cr_assert_eq(nvs_ckpt_writer_open(NULL, NULL, &w), -EINVAL);
	cr_assert_null(w, "a failed open leaves *out NULL");
	cr_assert_eq(nvs_ckpt_writer_open("", NULL, &w), -EINVAL);
	cr_assert_eq(nvs_ckpt_writer_open(path, NULL, NULL), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "nvs_ckpt_writer_open"), "%s",
		  nvs_last_error());
	o = tu_ckpt_opts(1000, 2);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "buffer_size 1000"), "%s",
		  nvs_last_error());
	o = tu_ckpt_opts(0, 2);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	o = tu_ckpt_opts(4096, 1);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	o = tu_ckpt_opts(4096, NVS_CKPT_MAX_BUFFERS + 1);
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	o = tu_ckpt_opts(4096, 2);
	o.direct = (enum nvs_direct)99;
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	o = tu_ckpt_opts(4096, 2);
	o.mode = 010000;
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	o = tu_ckpt_opts(4096, 2);
	o.size = 8;
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -EINVAL);
	cr_assert_eq(tu_temps_in(tu_dir()), 0);
	cr_assert(!exists(path));

	cr_assert_eq(nvs_ckpt_write(NULL, "x", 1), -EINVAL);
	cr_assert_eq(nvs_ckpt_close(NULL), -EINVAL);
	cr_assert_eq(nvs_ckpt_offset(NULL), 0);
	cr_assert_str_eq(nvs_ckpt_temp_path(NULL), "");
	cr_assert_eq(nvs_ckpt_writer_open(path, NULL, &w), 0);
	cr_assert_eq(nvs_ckpt_write(w, NULL, 1), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "nvs_ckpt_write"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_ckpt_write(w, NULL, 0), 0);
	cr_assert_eq(nvs_ckpt_close(w), 0, "a refused write is not sticky");
	tu_assert_file(path, "", 0);
}

Test(ckpt, missing_directory_is_enoent_naming_the_path)
{
	const char *path = tu_path("no/such/dir/x.pt");
	struct nvs_ckpt_writer *w;

	cr_assert_eq(nvs_ckpt_writer_open(path, NULL, &w), -ENOENT);
	cr_assert_null(w);
	cr_assert(strstr(nvs_last_error(), "no/such/dir/x.pt"), "%s",
		  nvs_last_error());
}

/* A private small tmpfs: a real full disk. */
static const char *small_tmpfs(void)
{
	const char *mnt = tu_path("mnt");

	return tu_mount_private(mnt, "tmpfs", 0, "size=1m") ? mnt : NULL;
}

Test(ckpt, full_disk_is_enospc_and_the_previous_file_survives)
{
	const char *mnt = small_tmpfs();
	unsigned char old[100000], *big;
	struct nvs_ckpt_writer *w;
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	char path[512];
	int r = 0;

	if (!mnt)
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	snprintf(path, sizeof(path), "%s/ckpt.pt", mnt);
	tu_fill(old, sizeof(old), 4);
	tu_write_file(path, old, sizeof(old));
	big = malloc(2 << 20);
	tu_fill(big, 2 << 20, 5);

	/* O_DIRECT (preallocation finds it at submit) and buffered (the
	 * write finds it, reported by a later write or by close). */
	for (int buffered = 0; buffered < 2; buffered++) {
		o.direct = buffered ? NVS_DIRECT_NEVER : NVS_DIRECT_AUTO;
		cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0, "%s",
			     nvs_last_error());
		r = 0;
		for (int i = 0; i < 32 && r == 0; i++)
			r = nvs_ckpt_write(w, big + i * 65536, 65536);
		if (r == 0)
			r = nvs_ckpt_close(w);
		else
			cr_assert_eq(nvs_ckpt_close(w), -ENOSPC, "sticky");
		cr_assert_eq(r, -ENOSPC, "%s", nvs_last_error());
		cr_assert(strstr(nvs_last_error(), "ckpt.pt.tmp."), "%s",
			  nvs_last_error());
		tu_assert_file(path, old, sizeof(old));
		cr_assert_eq(tu_temps_in(mnt), 0,
			     "a temp file was left behind");
	}
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	r = 0;
	for (int i = 0; i < 32 && r == 0; i++)
		r = nvs_ckpt_write(w, big, 65536);
	cr_assert_eq(r, -ENOSPC, "%s", nvs_last_error());
	cr_assert_eq(nvs_ckpt_write(w, big, 1), -ENOSPC, "sticky");
	cr_assert_eq(nvs_ckpt_abort(w), 0);
	tu_assert_file(path, old, sizeof(old));
	cr_assert_eq(tu_temps_in(mnt), 0);

	/* The size hint finds the full disk at open. */
	o.size_hint = 2 << 20;
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "size_hint"), "%s",
		  nvs_last_error());
	cr_assert_eq(tu_temps_in(mnt), 0);
	tu_assert_file(path, old, sizeof(old));

	/* And the space freed by both failures is usable again. */
	o.size_hint = 0;
	cr_assert_eq(nvs_ckpt_writer_open(path, &o, &w), 0);
	cr_assert_eq(nvs_ckpt_write(w, big, 300000), 0);
	cr_assert_eq(nvs_ckpt_close(w), 0, "%s", nvs_last_error());
	tu_assert_file(path, big, 300000);
	umount2(mnt, MNT_DETACH);
	free(big);
}

Test(ckpt, each_failed_allocation_is_enomem_and_leaves_nothing)
{
	const char *path = tu_path("oom.pt");
	struct nvs_ckpt_opts o = tu_ckpt_opts(64 << 10, 2);
	unsigned failures = 0;

	for (unsigned long i = 1;; i++) {
		struct nvs_ckpt_writer *w;
		nvs__alloc_fail_at(i);
		int r = nvs_ckpt_writer_open(path, &o, &w);
		unsigned long used = nvs__alloc_fail_at(0);
		if (r == 0) {
			cr_assert_eq(nvs_ckpt_write(w, "abc", 3), 0);
			cr_assert_eq(nvs_ckpt_close(w), 0, "%s",
				     nvs_last_error());
			tu_assert_file(path, "abc", 3);
			if (used < i)
				break;
		} else {
			cr_assert_eq(r, -ENOMEM, "allocation %lu: %s", i,
				     nvs_last_error());
			cr_assert_null(w);
			failures++;
		}
		cr_assert_eq(tu_temps_in(tu_dir()), 0, "allocation %lu", i);
		cr_assert_lt(i, 200);
	}
	cr_assert_gt(failures, 2);
}
