// SPDX-License-Identifier: MIT
/*
 * The open-file cache: path-based ops reuse descriptors, and a path that
 * now names another file (replaced, deleted, recreated) is reopened, never
 * read or written through the old descriptor.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "testutil.h"
#include "tu_aio.h"

static struct nvs_aio *mk(uint32_t open_files)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.block_size = 64 << 10;
	o.open_files = open_files;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	return h;
}

static void fini(void)
{
	tu_cleanup();
}

TestSuite(files, .fini = fini);

Test(files, repeated_ops_on_a_path_open_it_once_per_direction)
{
	struct nvs_aio *h = mk(0);
	char buf[10000], back[10000];

	tu_fill(buf, sizeof(buf), 1);
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf),
						 tu_path("c"), i * 3),
			     1);
		cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back),
						tu_path("c"), i * 3),
			     1);
		cr_assert(memcmp(buf, back, sizeof(buf)) == 0);
	}
	cr_assert_eq(tu_aio_stats(h).files_opened, 2);
	cr_assert_eq(tu_aio_stats(h).files_reused, 18);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(files, a_replaced_file_is_reopened)
{
	struct nvs_aio *h = mk(0);
	char a[8192], b[8192], back[8192];

	tu_fill(a, sizeof(a), 1);
	tu_fill(b, sizeof(b), 2);
	tu_write_file(tu_path("r"), a, sizeof(a));
	cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back), tu_path("r"), 0),
		     1);
	cr_assert(memcmp(back, a, sizeof(a)) == 0);
	/* Atomically replace the file, as a checkpoint writer would. */
	tu_write_file(tu_path("r.new"), b, sizeof(b));
	cr_assert_eq(rename(tu_path("r.new"), tu_path("r")), 0);
	cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back), tu_path("r"), 0),
		     1);
	cr_assert(memcmp(back, b, sizeof(b)) == 0, "read the old inode");
	cr_assert_eq(tu_aio_stats(h).files_opened, 2);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(files, a_deleted_file_is_recreated_not_written_through_the_old_fd)
{
	struct nvs_aio *h = mk(0);
	char a[5000], back[8];
	size_t n;
	char *f;

	tu_fill(a, sizeof(a), 3);
	cr_assert_eq(nvs_aio_sync_pwrite(h, a, sizeof(a), tu_path("d"), 0), 1);
	cr_assert_eq(unlink(tu_path("d")), 0);
	cr_assert_eq(nvs_aio_sync_pread(h, back, 8, tu_path("d"), 0), -ENOENT);
	cr_assert_eq(nvs_aio_sync_pwrite(h, a, 100, tu_path("d"), 0), 1);
	f = tu_read_file(tu_path("d"), &n);
	cr_assert_eq(n, 100);
	cr_assert(memcmp(f, a, 100) == 0);
	free(f);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(files, more_files_than_slots_all_round_trip)
{
	struct nvs_aio *h = mk(4);
	char buf[4096], back[4096], name[16];

	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 10; i++) {
			snprintf(name, sizeof(name), "m%d", i);
			tu_fill(buf, sizeof(buf), (uint64_t)(round * 10 + i));
			cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf),
							 tu_path(name), 0),
				     1);
		}
		for (int i = 0; i < 10; i++) {
			snprintf(name, sizeof(name), "m%d", i);
			tu_fill(buf, sizeof(buf), (uint64_t)(round * 10 + i));
			cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back),
							tu_path(name), 0),
				     1);
			cr_assert(memcmp(buf, back, sizeof(buf)) == 0);
		}
	}
	cr_assert_eq(tu_aio_stats(h).files_opened, 60,
		     "LRU of 4 over 10 files");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(files, cache_off_opens_on_every_op)
{
	struct nvs_aio *h = mk(NVS_AIO_FILES_OFF);
	char buf[4096] = {0};

	for (int i = 0; i < 5; i++)
		cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf),
						 tu_path("o"), 0),
			     1);
	cr_assert_eq(tu_aio_stats(h).files_opened, 5);
	cr_assert_eq(tu_aio_stats(h).files_reused, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(files, too_many_open_files_is_einval)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.open_files = 5000;
	cr_assert_eq(nvs_aio_create(&o, &h), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "open_files"));
}
