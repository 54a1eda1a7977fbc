// SPDX-License-Identifier: MIT
/*
 * Bad input through every public entry point, the cases no other suite
 * covers: NULL pointers, zero sizes, unaligned buffers and offsets, offsets
 * past the end, files shorter than the request, symlinks, directories,
 * read-only and full filesystems. Each call gets its exact -errno (or, where
 * the header promises success, the exact bytes) and a failure names the
 * call in nvs_last_error(). docs/bad-input-table.md lists every row. The
 * swap manager, config and role swappers are in test_bad_input_swap.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "nvswap/buffers.h"
#include "nvswap/config.h"
#include "nvswap/offload.h"
#include "nvswap/swapper.h"
#include "bad_input.h"
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

TestSuite(bad_input, .init = setup, .fini = teardown);

/* ------------------------------------------------------ aio: NULL, zero */

Test(bad_input, null_buffer_with_zero_bytes_is_a_successful_no_op)
{
	unsigned char *d;
	const char *p = data_file("f", 100, 1, &d);

	cr_assert_eq(nvs_aio_sync_pread(h, NULL, 0, p, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pwrite(h, NULL, 0, p, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(tu_file_size(p), 100, "a zero-byte write changes nothing");
	free(d);
}

Test(bad_input, zero_byte_read_of_a_missing_file_is_enoent)
{
	FAILS(nvs_aio_sync_pread(h, NULL, 0, tu_path("none"), 0), -ENOENT,
	      "none");
}

Test(bad_input, zero_byte_read_past_the_end_is_einval)
{
	unsigned char *d;
	const char *p = data_file("f", 100, 1, &d);
	char b;

	FAILS(nvs_aio_sync_pread(h, &b, 0, p, 101), -EINVAL, "beyond the end");
	free(d);
}

Test(bad_input, null_handle_is_einval_for_every_op_call)
{
	char buf[16];
	const char *p = tu_path("f");
	uint64_t id;
	struct nvs_aio_io io = {
		.opcode = NVS_AIO_READ, .buf = buf, .nbytes = 1, .path = p};

	FAILS(nvs_aio_async_pread(NULL, buf, 16, p, 0), -EINVAL,
	      "nvs_aio_submit: handle is NULL");
	FAILS(nvs_aio_async_pwrite(NULL, buf, 16, p, 0), -EINVAL,
	      "nvs_aio_submit: handle is NULL");
	FAILS(nvs_aio_sync_pwrite(NULL, buf, 16, p, 0), -EINVAL,
	      "nvs_aio_submit: handle is NULL");
	FAILS(nvs_aio_pread_fd(NULL, buf, 16, 0, 0, false), -EINVAL,
	      "nvs_aio_submit: handle is NULL");
	FAILS(nvs_aio_pwrite_fd(NULL, buf, 16, 1, 0, true), -EINVAL,
	      "nvs_aio_submit: handle is NULL");
	FAILS(nvs_aio_submit(NULL, &io, &id), -EINVAL, "nvs_aio_submit");
	FAILS(nvs_aio_wait_op(NULL, 1), -EINVAL, "nvs_aio_wait_op");
	FAILS(nvs_aio_poll_op(NULL, 1), -EINVAL, "nvs_aio_poll_op");
	FAILS(nvs_aio_wait(NULL), -EINVAL, "nvs_aio_wait");
	cr_assert_eq(tu_file_size(p), -1, "nothing was created");
}

Test(bad_input, submit_without_path_or_descriptor_is_einval)
{
	char buf[16];
	struct nvs_aio_io io = {.opcode = NVS_AIO_WRITE,
				.buf = buf,
				.nbytes = sizeof(buf),
				.path = NULL,
				.fd = -1};

	FAILS(nvs_aio_submit(h, &io, NULL), -EINVAL,
	      "nvs_aio write fd -1 offset 0 length 16: path is NULL and no "
	      "descriptor given");
	io.opcode = NVS_AIO_READ;
	FAILS(nvs_aio_submit(h, &io, NULL), -EINVAL, "nvs_aio read fd -1");
	cr_assert_eq(nvs_aio_wait(h), 0, "a failed submit never completes");
}

Test(bad_input, unknown_and_collected_tickets_are_enoent)
{
	char buf[16] = "abc";
	uint64_t id;
	struct nvs_aio_io io = {.opcode = NVS_AIO_WRITE,
				.buf = buf,
				.nbytes = sizeof(buf),
				.path = tu_path("t")};

	FAILS(nvs_aio_wait_op(h, 12345), -ENOENT, "nvs_aio_wait_op");
	FAILS(nvs_aio_poll_op(h, 12345), -ENOENT, "nvs_aio_poll_op");
	cr_assert_eq(nvs_aio_submit(h, &io, &id), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_wait_op(h, id), 0, "%s", nvs_last_error());
	FAILS(nvs_aio_wait_op(h, id), -ENOENT, "nvs_aio_wait_op");
	FAILS(nvs_aio_poll_op(h, id), -ENOENT, "nvs_aio_poll_op");
}

Test(bad_input, offset_plus_size_overflowing_is_einval)
{
	char buf[16] = {0};
	const char *p = tu_path("f");

	tu_write_file(p, buf, sizeof(buf));
	FAILS(nvs_aio_sync_pread(h, buf, 2, p, INT64_MAX), -EINVAL, p);
	FAILS(nvs_aio_sync_pwrite(h, buf, 2, p, INT64_MAX), -EINVAL, p);
	cr_assert_eq(tu_file_size(p), 16);
}

/* ------------------------------------------ aio: unaligned, short, EOF */

/* Any address, offset and size work (struct nvs_aio_io): the bytes read
 * back are exactly the bytes written. */
Test(bad_input, unaligned_buffer_offset_and_size_round_trip_exactly)
{
	enum { N = 12345, OFF = 4097 };
	unsigned char *w = tu_alloc(N, 1), *r = tu_alloc(N, 3);
	const char *p = tu_path("u");
	unsigned char *back;
	size_t n;

	tu_fill(w, N, 7);
	cr_assert_eq(nvs_aio_sync_pwrite(h, w, N, p, OFF), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(tu_file_size(p), OFF + N);
	cr_assert_eq(nvs_aio_sync_pread(h, r, N, p, OFF), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(w, r, N) == 0);
	back = tu_read_file(p, &n);
	for (size_t i = 0; i < OFF; i++)
		cr_assert_eq(back[i], 0, "the hole before the offset is zeros");
	cr_assert(memcmp(back + OFF, w, N) == 0);
	cr_assert(tu_guards_ok(w, N) && tu_guards_ok(r, N));
	free(back);
	tu_free(w);
	tu_free(r);
}

Test(bad_input, unaligned_ops_on_an_odirect_descriptor_round_trip_exactly)
{
	enum { N = 5000, OFF = 777 };
	unsigned char *w = tu_alloc(N, 5), *r = tu_alloc(N, 9);
	const char *p = tu_path("d");
	int fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);

	if (fd < 0)
		cr_skip_test("O_DIRECT refused in the test directory: %s",
			     strerror(errno));
	tu_fill(w, N, 8);
	cr_assert_eq(nvs_aio_pwrite_fd(h, w, N, fd, OFF, false), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_aio_pread_fd(h, r, N, fd, OFF, false), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(w, r, N) == 0);
	cr_assert_eq(tu_file_size(p), OFF + N);
	close(fd);
	tu_free(w);
	tu_free(r);
}

Test(bad_input, descriptor_read_past_the_end_is_einval_buffer_untouched)
{
	unsigned char *d, buf[256];
	const char *p = data_file("f", 100, 2, &d);
	int fd = open(p, O_RDONLY);

	memset(buf, 0xAB, sizeof(buf));
	FAILS(nvs_aio_pread_fd(h, buf, 101, fd, 0, false), -EINVAL,
	      "beyond the end");
	FAILS(nvs_aio_pread_fd(h, buf, 1, fd, 4096, false), -EINVAL,
	      "beyond the end");
	for (size_t i = 0; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xAB);
	cr_assert_eq(nvs_aio_pread_fd(h, buf, 100, fd, 0, false), 1);
	cr_assert(memcmp(buf, d, 100) == 0);
	close(fd);
	free(d);
}

Test(bad_input, descriptor_null_buffer_and_negative_offset_are_einval)
{
	char buf[16] = {0};
	int fd = open(tu_path("f"), O_RDWR | O_CREAT, 0600);

	FAILS(nvs_aio_pwrite_fd(h, NULL, 16, fd, 0, false), -EINVAL,
	      "nvs_aio write");
	FAILS(nvs_aio_pread_fd(h, NULL, 16, fd, 0, false), -EINVAL,
	      "nvs_aio read");
	FAILS(nvs_aio_pwrite_fd(h, buf, 16, fd, -1, false), -EINVAL,
	      "negative offset");
	FAILS(nvs_aio_pwrite_fd(h, buf, 16, -5, 0, false), -EINVAL,
	      "nvs_aio write fd -5");
	cr_assert_eq(tu_file_size(tu_path("f")), 0);
	close(fd);
}

Test(bad_input, directory_descriptor_is_eisdir)
{
	char buf[16] = {0};
	int fd = open(tu_dir(), O_RDONLY | O_DIRECTORY);

	FAILS(nvs_aio_pread_fd(h, buf, 16, fd, 0, false), -EISDIR,
	      "nvs_aio read");
	close(fd);
}

Test(bad_input, write_far_past_the_end_leaves_a_hole_of_zeros)
{
	unsigned char *d;
	const char *p = data_file("f", 10, 3, &d);
	char x[3] = "xyz", back[3];

	cr_assert_eq(nvs_aio_sync_pwrite(h, x, 3, p, 1 << 20), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(tu_file_size(p), (1 << 20) + 3);
	cr_assert_eq(nvs_aio_sync_pread(h, back, 3, p, 1 << 20), 1);
	cr_assert(memcmp(back, x, 3) == 0);
	cr_assert_eq(nvs_aio_sync_pread(h, back, 3, p, 500000), 1);
	cr_assert(back[0] == 0 && back[1] == 0 && back[2] == 0);
	free(d);
}

/* ---------------------------------------------------- aio: file kinds */

/*
 * Today a user path that is a symlink to a regular file is followed, for
 * reads and writes alike: the target is read and written, the link stays.
 * (nvswap's own swap files are another matter: see swapdir.) Update this
 * one test if user paths ever refuse symlinks.
 */
Test(bad_input, user_path_symlink_to_a_regular_file_is_followed_today)
{
	unsigned char *d;
	const char *t = data_file("target", 100, 4, &d);
	const char *l = tu_path("link");
	unsigned char back[100], w[10];
	struct stat st;

	cr_assert_eq(symlink(t, l), 0);
	cr_assert_eq(nvs_aio_sync_pread(h, back, 100, l, 0), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(back, d, 100) == 0);
	tu_fill(w, 10, 5);
	cr_assert_eq(nvs_aio_sync_pwrite(h, w, 10, l, 95), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(tu_file_size(t), 105, "the target grew");
	cr_assert_eq(lstat(l, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link is still a link");
	free(d);
}

Test(bad_input, dangling_symlink_read_is_enoent)
{
	char b[4];
	const char *l = tu_path("dangling");

	cr_assert_eq(symlink(tu_path("nowhere"), l), 0);
	FAILS(nvs_aio_sync_pread(h, b, 4, l, 0), -ENOENT, l);
}

Test(bad_input, path_through_a_regular_file_is_enotdir)
{
	unsigned char *d;
	char b[4] = {0}, p[4200];

	data_file("plain", 10, 1, &d);
	snprintf(p, sizeof(p), "%s/x", tu_path("plain"));
	FAILS(nvs_aio_sync_pread(h, b, 4, p, 0), -ENOTDIR, p);
	FAILS(nvs_aio_sync_pwrite(h, b, 4, p, 0), -ENOTDIR, p);
	free(d);
}

/* A file on a filesystem mounted read-only: reads work, writes are EROFS
 * and change nothing. */
Test(bad_input, read_only_filesystem_reads_work_and_writes_are_erofs)
{
	const char *mnt = tu_path("ro");
	char f[4200], g[4200], data[5000], back[5000];

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a tmpfs here (%s): needs root and "
			     "CAP_SYS_ADMIN",
			     strerror(errno));
	snprintf(f, sizeof(f), "%s/f", mnt);
	snprintf(g, sizeof(g), "%s/new", mnt);
	tu_fill(data, sizeof(data), 6);
	tu_write_file(f, data, sizeof(data));
	cr_assert_eq(mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0,
		     "%s", strerror(errno));
	cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back), f, 0), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(back, data, sizeof(data)) == 0);
	FAILS(nvs_aio_sync_pwrite(h, data, 10, f, 0), -EROFS, f);
	FAILS(nvs_aio_sync_pwrite(h, data, 10, g, 0), -EROFS, g);
	FAILS(nvs_aio_write(data, 10, g, NULL, false, NULL), -EROFS, g);
	cr_assert_eq(tu_file_size(g), -1, "nothing was created");
	umount2(mnt, MNT_DETACH);
}

/* ----------------------------------------------------------- one-shot */

Test(bad_input, oneshot_null_arguments_are_einval)
{
	char buf[16] = {0};
	const char *p = tu_path("f");

	tu_write_file(p, buf, sizeof(buf));
	FAILS(nvs_aio_read(NULL, 16, p, NULL, false, NULL), -EINVAL,
	      "buffer is NULL");
	FAILS(nvs_aio_write(NULL, 16, p, NULL, false, NULL), -EINVAL,
	      "buffer is NULL");
	cr_assert_eq(tu_file_size(p), 16);
}

/* Found here: a NULL path made a whole handle, then failed with "fd -1 ...
 * path is NULL and no descriptor given" (a one-shot takes no descriptor). */
Test(bad_input, oneshot_null_path_is_einval_naming_the_call)
{
	char buf[16] = {0};

	FAILS(nvs_aio_read(buf, 16, NULL, NULL, false, NULL), -EINVAL,
	      "nvs_aio_read: path is NULL");
	FAILS(nvs_aio_write(buf, 16, NULL, NULL, false, NULL), -EINVAL,
	      "nvs_aio_write: path is NULL");
}

Test(bad_input, oneshot_file_shorter_than_the_request_is_einval)
{
	unsigned char *d, buf[200];
	const char *p = data_file("short", 100, 3, &d);

	memset(buf, 0xAB, sizeof(buf));
	FAILS(nvs_aio_read(buf, 200, p, NULL, true, NULL), -EINVAL,
	      "beyond the end");
	for (size_t i = 0; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xAB);
	free(d);
}

Test(bad_input, oneshot_unaligned_buffer_round_trips_with_validation)
{
	enum { N = 70001 };
	unsigned char *w = tu_alloc(N, 3), *r = tu_alloc(N, 1);
	const char *p = tu_path("o");
	struct nvs_io_stats st;

	tu_fill(w, N, 12);
	cr_assert_eq(nvs_aio_write(w, N, p, NULL, true, &st), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(st.bytes, N);
	cr_assert_eq(nvs_aio_read(r, N, p, NULL, true, NULL), 0, "%s",
		     nvs_last_error());
	cr_assert(memcmp(w, r, N) == 0);
	tu_free(w);
	tu_free(r);
}

Test(bad_input, oneshot_directory_is_eisdir)
{
	char buf[16] = {0};

	FAILS(nvs_aio_read(buf, 16, tu_dir(), NULL, false, NULL), -EISDIR,
	      tu_dir());
	FAILS(nvs_aio_write(buf, 16, tu_dir(), NULL, false, NULL), -EISDIR,
	      tu_dir());
}

Test(bad_input, oneshot_write_on_a_full_filesystem_is_enospc)
{
	const char *mnt = tu_path("full");
	char f[4200];
	unsigned char *buf;

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	snprintf(f, sizeof(f), "%s/big", mnt);
	buf = tu_alloc(2 << 20, 0);
	tu_fill(buf, 2 << 20, 1);
	FAILS(nvs_aio_write(buf, 2 << 20, f, NULL, false, NULL), -ENOSPC, f);
	tu_free(buf);
	umount2(mnt, MNT_DETACH);
}

/* ------------------------------------------- aio: create, small calls */

Test(bad_input, create_with_null_out_is_einval_and_null_opts_is_defaults)
{
	struct nvs_aio *a = NULL;
	struct nvs_aio_opts o;

	nvs_aio_opts_init(&o);
	FAILS(nvs_aio_create(&o, NULL), -EINVAL, "nvs_aio_create");
	cr_assert_eq(nvs_aio_create(NULL, &a), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_get_block_size(a), 1 << 20);
	cr_assert_eq(nvs_aio_destroy(a), 0);
	o.size = 0;
	a = (struct nvs_aio *)&o;
	FAILS(nvs_aio_create(&o, &a), -EINVAL, "nvs_aio_create");
	cr_assert_null(a);
}

Test(bad_input, stats_and_alignment_with_null_arguments)
{
	struct nvs_dio_align al;
	int fd = open(tu_dir(), O_RDONLY | O_DIRECTORY);

	FAILS(nvs_aio_get_stats(h, NULL), -EINVAL, "nvs_aio_get_stats");
	cr_assert_not(nvs_aio_is_pinned(NULL, &al, 1));
	FAILS(nvs_dio_alignment(-1, &al), -EBADF, "nvs_dio_alignment");
	FAILS(nvs_dio_alignment(fd, NULL), -EINVAL, "nvs_dio_alignment");
	close(fd);
}

/* Found here: nvs_aio_get_alignment(NULL) gave 4096, though every getter
 * is documented to give 0 for a NULL handle. */
Test(bad_input, alignment_getter_with_a_null_handle_is_zero_like_the_others)
{
	cr_assert_eq(nvs_aio_get_alignment(NULL), 0);
	cr_assert_eq(nvs_aio_get_alignment(h) % 4096, 0);
	cr_assert_neq(nvs_aio_get_alignment(h), 0);
}

Test(bad_input, locked_buffer_calls_with_null_zero_and_foreign_pointers)
{
	int x;
	void *p;

	errno = 0;
	cr_assert_null(nvs_aio_new_cpu_locked_buffer(NULL, 4096));
	cr_assert_eq(errno, EINVAL);
	cr_assert(strstr(nvs_last_error(), "nvs_aio_new_cpu_locked_buffer"),
		  "%s", nvs_last_error());
	errno = 0;
	cr_assert_null(nvs_aio_new_cpu_locked_buffer(h, 0));
	cr_assert_eq(errno, EINVAL);
	FAILS(nvs_aio_free_cpu_locked_buffer(h, NULL), -EINVAL,
	      "nvs_aio_free_cpu_locked_buffer");
	FAILS(nvs_aio_free_cpu_locked_buffer(h, &x), -EINVAL,
	      "nvs_aio_free_cpu_locked_buffer");
	p = nvs_aio_new_cpu_locked_buffer(h, 4096);
	cr_assert_not_null(p, "%s", nvs_last_error());
	FAILS(nvs_aio_free_cpu_locked_buffer(NULL, p), -EINVAL,
	      "nvs_aio_free_cpu_locked_buffer");
	FAILS(nvs_aio_free_cpu_locked_buffer(h, (char *)p + 64), -EINVAL,
	      "nvs_aio_free_cpu_locked_buffer");
	cr_assert(nvs_aio_is_pinned(h, p, 4096), "nothing was freed");
	cr_assert_eq(nvs_aio_free_cpu_locked_buffer(h, p), 0);
	FAILS(nvs_aio_free_cpu_locked_buffer(h, p), -EINVAL,
	      "nvs_aio_free_cpu_locked_buffer");
}

/* ------------------------------------------------------------ buffers */

Test(bad_input, pinned_null_and_out_of_range_queries)
{
	struct nvs_pinned_stats st, st2;
	void *p;
	int err = 1;

	cr_assert_not(nvs_pinned_contains(NULL, 0));
	cr_assert_not(nvs_pinned_contains(NULL, 16));
	FAILS(nvs_pinned_stats(NULL), -EINVAL, "nvs_pinned_stats");
	cr_assert_eq(nvs_pinned_stats(&st), 0);
	nvs_pinned_free(NULL);
	cr_assert_eq(nvs_pinned_stats(&st2), 0);
	cr_assert_eq(st2.bad_frees, st.bad_frees, "free(NULL) is a no-op");
	cr_assert_eq(st2.frees, st.frees);
	p = nvs_pinned_alloc(100, &err);
	cr_assert_not_null(p);
	cr_assert_eq(err, 0);
	cr_assert(nvs_pinned_contains((char *)p + 1, 0), "a view");
	cr_assert_not(nvs_pinned_contains(p, SIZE_MAX), "runs past the end");
	cr_assert_not(nvs_pinned_contains((char *)p + 1, SIZE_MAX - 4),
		      "wraps around");
	nvs_pinned_free(p);
	cr_assert_not(nvs_pinned_contains(p, 1), "freed");
}

Test(bad_input, pool_null_arguments_are_einval)
{
	struct nvs_pool_opts o;
	struct nvs_pool *pool;
	void *b;

	nvs_pool_opts_init(&o);
	o.buffer_size = 4096;
	o.buffer_count = 1;
	cr_assert_eq(nvs_pool_create(&o, &pool), 0, "%s", nvs_last_error());
	FAILS(nvs_pool_get(pool, NULL), -EINVAL, "nvs_pool_get");
	FAILS(nvs_pool_try_get(pool, NULL), -EINVAL, "nvs_pool_try_get");
	FAILS(nvs_pool_get_timeout(pool, NULL, 1), -EINVAL,
	      "nvs_pool_get_timeout");
	FAILS(nvs_pool_get_timeout(NULL, &b, 1), -EINVAL,
	      "nvs_pool_get_timeout");
	FAILS(nvs_pool_stats(pool, NULL), -EINVAL, "nvs_pool_stats");
	cr_assert_eq(nvs_pool_get(pool, &b), 0);
	FAILS(nvs_pool_put(pool, NULL), -EINVAL, "nvs_pool_put");
	FAILS(nvs_pool_put(NULL, b), -EINVAL, "nvs_pool_put");
	cr_assert_eq(nvs_pool_put(pool, b), 0, "the buffer was still out");
	cr_assert_eq(nvs_pool_buffer_size(NULL), 0);
	cr_assert_eq(nvs_pool_buffer_count(NULL), 0);
	cr_assert_eq(nvs_pool_destroy(NULL), 0);
	cr_assert_eq(nvs_pool_destroy(pool), 0);
}

Test(bad_input, pool_get_timeout_zero_on_an_empty_pool_is_etimedout)
{
	struct nvs_pool_opts o;
	struct nvs_pool *pool;
	void *b, *c = &c;

	nvs_pool_opts_init(&o);
	o.buffer_size = 4096;
	o.buffer_count = 1;
	cr_assert_eq(nvs_pool_create(&o, &pool), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_pool_get(pool, &b), 0);
	FAILS(nvs_pool_get_timeout(pool, &c, 0), -ETIMEDOUT,
	      "nvs_pool_get_timeout");
	cr_assert_eq(nvs_pool_put(pool, b), 0);
	cr_assert_eq(nvs_pool_destroy(pool), 0);
}

Test(bad_input, copy_of_zero_bytes_and_unaligned_copies)
{
	unsigned char src[300], dst[300];

	tu_fill(src, sizeof(src), 3);
	memset(dst, 0xAB, sizeof(dst));
	nvs_copy(dst, src, 0);
	nvs_copy_mt(dst, src, 0, 4);
	for (size_t i = 0; i < sizeof(dst); i++)
		cr_assert_eq(dst[i], 0xAB, "a zero-byte copy wrote");
	nvs_copy(dst + 3, src + 1, 257);
	cr_assert(memcmp(dst + 3, src + 1, 257) == 0);
	cr_assert_eq(dst[2], 0xAB);
	cr_assert_eq(dst[260], 0xAB);
}

/* ------------------------------------------------------ common: errors */

Test(bad_input, strerror_never_returns_null)
{
	cr_assert_str_eq(nvs_strerror(-EIO), nvs_strerror(EIO));
	cr_assert_not_null(nvs_strerror(INT32_MAX));
	cr_assert_not_null(nvs_strerror(-4095));
}
