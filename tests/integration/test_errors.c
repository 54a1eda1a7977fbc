// SPDX-License-Identifier: MIT
/*
 * Bad input and hostile environments: each gets its exact -errno, a
 * sentence in nvs_last_error(), and leaves buffers and other files as they
 * were.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "testutil.h"

static struct nvs_aio *h;

static void setup(void)
{
	struct nvs_aio_opts o;

	nvs_aio_opts_init(&o);
	o.block_size = 64 << 10;
	o.intra_op_parallelism = 2;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
}

static void teardown(void)
{
	cr_assert_eq(nvs_aio_destroy(h), 0);
	tu_cleanup();
}

TestSuite(errors, .init = setup, .fini = teardown);

Test(errors, read_of_missing_file_is_enoent)
{
	char buf[16];
	const char *p = tu_path("missing");

	cr_assert_eq(nvs_aio_sync_pread(h, buf, sizeof(buf), p, 0), -ENOENT);
	cr_assert(strstr(nvs_last_error(), p), "message names the path: %s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "No such file"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_aio_async_pread(h, buf, 16, p, 0), -ENOENT);
	cr_assert_eq(nvs_aio_wait(h), 0, "a failed submit never completes");
}

Test(errors, write_into_missing_directory_is_enoent)
{
	char buf[16] = "x";

	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 16, tu_path("no/such/f"), 0),
		     -ENOENT);
}

Test(errors, read_past_end_of_file_is_einval_and_buffer_untouched)
{
	unsigned char data[5000], buf[8192];
	const char *p = tu_path("short");

	tu_fill(data, sizeof(data), 3);
	tu_write_file(p, data, sizeof(data));
	memset(buf, 0xAB, sizeof(buf));
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 5001, p, 0), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "beyond the end"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 1, p, 5000), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 4096, p, 4096), -EINVAL);
	for (size_t i = 0; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xAB);
	/* The exact end is fine. */
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 904, p, 4096), 1);
	cr_assert(memcmp(buf, data + 4096, 904) == 0);
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 0, p, 5000), 1);
}

Test(errors, bad_arguments_are_einval)
{
	char buf[16];
	const char *p = tu_path("f");

	tu_write_file(p, "0123456789abcdef", 16);
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 16, p, -1), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "negative offset"));
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 16, p, -4096), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pread(h, NULL, 16, p, 0), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pwrite(h, NULL, 1, p, 0), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pread(h, buf, 16, NULL, 0), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 16, NULL, 0), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, SIZE_MAX, p, 1), -EINVAL);
	cr_assert_eq(nvs_aio_sync_pread(NULL, buf, 16, p, 0), -EINVAL);
	cr_assert_eq(nvs_aio_submit(h, NULL, NULL), -EINVAL);
	struct nvs_aio_io io = {
		.opcode = 7, .buf = buf, .nbytes = 1, .path = p};
	cr_assert_eq(nvs_aio_submit(h, &io, NULL), -EINVAL);
	cr_assert_eq(tu_file_size(p), 16, "nothing was written");
	cr_assert_eq(nvs_aio_wait(h), 0);
}

Test(errors, directory_is_eisdir)
{
	char buf[16] = {0};

	cr_assert_eq(nvs_aio_sync_pread(h, buf, 1, tu_dir(), 0), -EISDIR);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 1, tu_dir(), 0), -EISDIR);
}

Test(errors, unreadable_and_unwritable_files_are_eacces)
{
	char buf[4096] = {1};
	struct tu_child c;
	int *res = c.res;

	tu_write_file(tu_path("locked"), buf, sizeof(buf));
	chmod(tu_path("locked"), 0000);
	if (!tu_as_nobody("eacces", -1, &c))
		cr_skip_test("cannot drop root privileges to test EACCES");
	cr_assert_eq(res[0], -EACCES);
	cr_assert_eq(res[1], -EACCES);
	cr_assert_eq(res[2], -EACCES);
}

Test(errors, wait_with_nothing_pending_returns_zero)
{
	cr_assert_eq(nvs_aio_wait(h), 0);
	cr_assert_eq(nvs_aio_wait(h), 0);
}

Test(errors, wrong_descriptor_mode_is_ebadf)
{
	char buf[4096];
	const char *p = tu_path("fd");
	int fd;

	tu_write_file(p, buf, sizeof(buf));
	fd = open(p, O_RDONLY);
	cr_assert_eq(nvs_aio_pwrite_fd(h, buf, 16, fd, 0, false), -EBADF);
	close(fd);
	cr_assert_eq(nvs_aio_pread_fd(h, buf, 16, fd, 0, false), -EBADF);
	cr_assert_eq(nvs_aio_pread_fd(h, buf, 16, -1, 0, false), -EINVAL);
}

/* A private mount namespace with a small tmpfs: a real full disk. */
static const char *small_fs(const char *type, const char *opts)
{
	const char *mnt = tu_path("mnt");

	return tu_mount_private(mnt, type, 0, opts) ? mnt : NULL;
}

Test(errors, full_disk_is_enospc_and_other_files_survive)
{
	const char *mnt = small_fs("tmpfs", "size=1m");
	char other[256], big[512], keep[100000];
	unsigned char *buf;
	size_t n;
	void *back;

	if (!mnt)
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	snprintf(other, sizeof(other), "%s/other", mnt);
	snprintf(big, sizeof(big), "%s/big", mnt);
	tu_fill(keep, sizeof(keep), 11);
	cr_assert_eq(nvs_aio_sync_pwrite(h, keep, sizeof(keep), other, 0), 1);
	buf = tu_alloc(2 << 20, 0);
	tu_fill(buf, 2 << 20, 5);
	unsigned char *copy = malloc(2 << 20);
	memcpy(copy, buf, 2 << 20);
	/* O_DIRECT: preallocation finds the full disk before any I/O. */
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 2 << 20, big, 0), -ENOSPC,
		     "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "space"), "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_async_pwrite(h, buf, 2 << 20, big, 0), -ENOSPC);
	cr_assert_eq(nvs_aio_wait(h), 0, "a failed submit never completes");
	cr_assert_eq(tu_file_size(big), 0, "nothing was written");
	/* Buffered: the disk fills during the I/O; the error comes from the
	 * op and from wait. */
	struct nvs_aio_opts o;
	struct nvs_aio *b;
	nvs_aio_opts_init(&o);
	o.direct = NVS_DIRECT_NEVER;
	o.block_size = 64 << 10;
	cr_assert_eq(nvs_aio_create(&o, &b), 0);
	cr_assert_eq(nvs_aio_sync_pwrite(b, buf, 2 << 20, big, 0), -ENOSPC,
		     "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_async_pwrite(b, buf, 2 << 20, big, 4096), 0);
	cr_assert_eq(nvs_aio_wait(b), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "space"), "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_wait(b), 0, "the error was collected");
	cr_assert_eq(nvs_aio_destroy(b), 0);
	back = tu_read_file(other, &n);
	cr_assert_eq(n, sizeof(keep));
	cr_assert(memcmp(back, keep, n) == 0, "other file changed");
	free(back);
	cr_assert(memcmp(buf, copy, 2 << 20) == 0,
		  "a failed write changed its source buffer");
	umount2(mnt, MNT_DETACH);
	free(copy);
	tu_free(buf);
}

Test(errors, odirect_refused_falls_back_in_auto_and_fails_in_always)
{
	const char *mnt = small_fs("ramfs", NULL);
	struct nvs_aio_opts o;
	struct nvs_aio *a;
	struct nvs_aio_stats st;
	char path[512], data[10000], back[10000];

	if (!mnt)
		cr_skip_test("cannot mount ramfs here (%s): needs root and "
			     "CAP_SYS_ADMIN",
			     strerror(errno));
	snprintf(path, sizeof(path), "%s/f", mnt);
	int probe = open(path, O_WRONLY | O_CREAT | O_DIRECT, 0600);
	if (probe >= 0) {
		close(probe);
		cr_skip_test("ramfs accepts O_DIRECT on this kernel");
	}
	unlink(path);
	tu_fill(data, sizeof(data), 9);
	cr_assert_eq(nvs_aio_sync_pwrite(h, data, sizeof(data), path, 3), 1,
		     "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back), path, 3), 1);
	cr_assert(memcmp(data, back, sizeof(data)) == 0);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.direct_fallbacks, 2);

	nvs_aio_opts_init(&o);
	o.direct = NVS_DIRECT_ALWAYS;
	cr_assert_eq(nvs_aio_create(&o, &a), 0);
	cr_assert_eq(nvs_aio_sync_pread(a, back, 16, path, 0), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "O_DIRECT"), "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_destroy(a), 0);
	umount2(mnt, MNT_DETACH);
}

Test(errors, unprivileged_user_with_small_memlock_limit_still_works)
{
	struct tu_child c;
	int *res = c.res;

	/* As a real user: 64 KiB of memlock, less than the bounce memory
	 * (8 MiB a worker), so locking fails; I/O must not. (The library
	 * calls mlock through syscall(2), so this holds under ASan too.) */
	if (!tu_as_nobody("memlock", 64 << 10, &c))
		cr_skip_test("cannot lower the memlock limit and drop root");
	cr_assert_eq(res[0], 0, "create works without locked memory");
	cr_assert_eq(res[1], 1, "write");
	cr_assert_eq(res[2], 1, "read back equal");
	cr_assert_eq(res[3], 0, "bounce memory reported as not locked");
}
