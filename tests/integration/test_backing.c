// SPDX-License-Identifier: MIT
/*
 * File-backed tensors (nvswap/backing.h): pieces of a file read back as
 * the file holds them at aligned and unaligned offsets, the gaps as
 * zeros, by acquire, prefetch and nvs_swapper_read, with nothing
 * written; a tensor written back leaves its file and an undo puts it
 * back; a file truncated, rewritten, replaced or deleted is -ESTALE
 * naming it; bad pieces and files are refused naming them; a file on
 * tmpfs reads back.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/offload.h"
#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(backing, .fini = fini);

enum { FILE_SZ = (3 << 20) + 123, TSZ = (1 << 20) + 100, BUF = 2 << 20 };

static unsigned char *data; /* the file's bytes */

/* "w.bin" under tu_dir(), FILE_SZ bytes of pattern @seed. */
static const char *weights(uint64_t seed)
{
	const char *path = tu_path("w.bin");

	free(data);
	data = malloc(FILE_SZ);
	cr_assert_not_null(data);
	tu_fill(data, FILE_SZ, seed);
	tu_write_file(path, data, FILE_SZ);
	return path;
}

static struct nvs_swapper *swapper(void)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	tu_swapper_opts(&o, BUF, 3);
	o.nvme_paths[0] = tu_path("swap");
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* Tensor 1: an aligned piece, an unaligned one, one at an odd place in
 * the tensor and the file's last bytes; gaps between and after. */
static const struct nvs_file_piece P[] = {
	{.file = 0, .offset = 0, .length = 4096, .at = 0},
	{.file = 0, .offset = 12345, .length = 70000, .at = 8192},
	{.file = 0, .offset = 1 << 20, .length = 1000, .at = 8192 + 70013},
	{.file = 0, .offset = FILE_SZ - 777, .length = 777, .at = 900000},
};

/* What tensor 1 holds when read from the file. */
static void expected(unsigned char *want)
{
	memset(want, 0, TSZ);
	for (size_t i = 0; i < sizeof(P) / sizeof(*P); i++)
		memcpy(want + P[i].at, data + P[i].offset, P[i].length);
}

static struct nvs_swapper *backed(uint64_t seed)
{
	const char *path = weights(seed);
	struct nvs_swapper *s = swapper();

	cr_assert_eq(nvs_swapper_add_file(s, path, 8), 0, "%s",
		     nvs_last_error());
	/* Given out of order: they are sorted. */
	const struct nvs_file_piece q[] = {P[2], P[0], P[3], P[1]};
	cr_assert_eq(nvs_swapper_register_file(s, 1, TSZ, q, 4), 0, "%s",
		     nvs_last_error());
	return s;
}

Test(backing, pieces_read_back_as_the_file_holds_them_and_nothing_is_written)
{
	struct nvs_swapper *s = backed(3);
	unsigned char *want = malloc(TSZ), *got = malloc(TSZ);
	struct nvs_tensor_info ti;
	struct nvs_swap_stats st;
	struct stat sw;
	char swapfile[4200];
	void *p;

	expected(want);
	cr_assert_eq(nvs_swapper_info(s, 1, &ti), 0);
	cr_assert(ti.backed && !ti.on_disk);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(memcmp(p, want, TSZ), 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	memset(got, 0xee, TSZ);
	cr_assert_eq(nvs_swapper_read(s, 1, got, TSZ), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(memcmp(got, want, TSZ), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(memcmp(p, want, TSZ), 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_eq(st.file_reads, 3);
	cr_assert_eq(st.file_bytes_read, 3ull * (4096 + 70000 + 1000 + 777),
		     "the pieces' bytes, not the gaps'");
	cr_assert_eq(st.bytes_written, 0);
	cr_assert_eq(st.bytes_read, 0, "nothing came from the swap file");
	cr_assert_eq(st.files_buffered, 0, "ext4 takes O_DIRECT");
	snprintf(swapfile, sizeof(swapfile), "%s/nvswap/rank0/swap.0",
		 tu_path("swap"));
	cr_assert_eq(stat(swapfile, &sw), 0);
	cr_assert_eq(sw.st_blocks, 0, "no block of the swap file is used");
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	free(want);
	free(got);
}

Test(backing, a_written_tensor_leaves_its_file_and_an_undo_puts_it_back)
{
	struct nvs_swapper *s = backed(5);
	unsigned char *want = malloc(TSZ);
	struct nvs_tensor_info ti;
	void *p;

	expected(want);
	/* An undoable step: changed and written, then undone. */
	cr_assert_eq(
		nvs_swapper_step_open(s, "s", NVS_STEP_UNDOABLE, 0, UINT64_MAX),
		0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0);
	memset(p, 0x11, TSZ);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &ti), 0);
	cr_assert(ti.on_disk && !ti.backed);
	cr_assert_eq(nvs_swapper_step_undo(s), 1, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &ti), 0);
	cr_assert(ti.backed && !ti.on_disk, "back on its file");
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(memcmp(p, want, TSZ), 0, "the file's bytes again");
	/* Now for good: changed, written; the file is read no more. */
	memset(p, 0x22, TSZ);
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0);
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(unlink(tu_path("w.bin")), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	for (size_t i = 0; i < TSZ; i += 4099)
		cr_assert_eq(((unsigned char *)p)[i], 0x22);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	free(want);
}

/* Tensor 1's acquire after @change: -ESTALE naming the file, the tensor
 * and @why; nothing handed out. */
static void refused(struct nvs_swapper *s, const char *why)
{
	char want[4400];
	void *p = NULL;

	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), -ESTALE, "%s",
		     nvs_last_error());
	cr_assert_null(p);
	snprintf(want, sizeof(want), "nvswap: tensor 1: %s changed (%s",
		 tu_path("w.bin"), why);
	cr_assert(strstr(nvs_last_error(), want), "want '%s' in: %s", want,
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "not handed out"));
	cr_assert_eq(nvs_swapper_read(s, 1, data, TSZ), -ESTALE);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(backing, a_truncated_file_is_estale)
{
	struct nvs_swapper *s = backed(7);

	cr_assert_eq(truncate(tu_path("w.bin"), 1 << 20), 0);
	refused(s, "3145851 bytes when added, 1048576 now");
}

Test(backing, a_file_rewritten_in_place_is_estale)
{
	struct nvs_swapper *s = backed(7);
	int fd = open(tu_path("w.bin"), O_WRONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "x", 1, 12345), 1);
	close(fd);
	refused(s, "modified since it was added");
}

Test(backing, a_file_replaced_by_rename_is_estale)
{
	struct nvs_swapper *s = backed(7);
	unsigned char b[64] = {0};
	char tmp[4200];

	snprintf(tmp, sizeof(tmp), "%s.new", tu_path("w.bin"));
	tu_write_file(tmp, b, sizeof(b));
	cr_assert_eq(rename(tmp, tu_path("w.bin")), 0);
	refused(s, "replaced by another file");
}

Test(backing, a_deleted_file_is_estale)
{
	struct nvs_swapper *s = backed(7);

	cr_assert_eq(unlink(tu_path("w.bin")), 0);
	refused(s, "deleted");
}

/* nvs_swapper_register_file() of tensor 9 with one piece @p: -EINVAL
 * naming @why. */
static void bad_piece(struct nvs_swapper *s, struct nvs_file_piece p,
		      const char *why)
{
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, &p, 1), -EINVAL);
	cr_assert(strstr(nvs_last_error(), why), "want '%s' in: %s", why,
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "tensor 9"), "%s", nvs_last_error());
}

Test(backing, bad_files_and_pieces_are_refused_naming_them)
{
	struct nvs_swapper *s = swapper();
	const char *path = weights(1);
	struct nvs_file_piece two[2] = {{.length = 100, .at = 0},
					{.length = 100, .at = 50}};

	cr_assert_eq(nvs_swapper_add_file(s, tu_path("none"), 0), -ENOENT);
	cr_assert(strstr(nvs_last_error(), tu_path("none")));
	cr_assert_eq(nvs_swapper_add_file(s, tu_dir(), 0), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "not a regular file"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_add_file(s, path, FILE_SZ + 1ull), -EINVAL);
	cr_assert_eq(nvs_swapper_add_file(s, NULL, 0), -EINVAL);
	cr_assert_eq(nvs_swapper_add_file(s, path, FILE_SZ), 0, "%s",
		     nvs_last_error());
	bad_piece(s, (struct nvs_file_piece){.file = 1, .length = 1},
		  "names no added file");
	bad_piece(s, (struct nvs_file_piece){.length = 0}, "is empty");
	bad_piece(s, (struct nvs_file_piece){.length = 1, .reserved = 1},
		  "reserved");
	bad_piece(s, (struct nvs_file_piece){.length = 10, .at = 4090},
		  "ends beyond the tensor");
	bad_piece(s,
		  (struct nvs_file_piece){.offset = FILE_SZ - 5, .length = 6},
		  "ends beyond its file");
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, two, 2), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "the pieces at 0 and 50 overlap"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, two, 0), -EINVAL);
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, NULL, 1), -EINVAL);
	cr_assert_eq(nvs_swapper_register_file(s, 9, BUF + 1ull, two, 1),
		     -EFBIG);
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, two, 1), 0);
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, two, 1), -EEXIST);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	/* A persistent set names no outside file. */
	struct nvs_swapper_opts o;
	tu_swapper_opts(&o, BUF, 2);
	o.nvme_paths[0] = tu_path("set");
	o.persist = NVS_PERSIST_PERSISTENT;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_add_file(s, path, 0), -EOPNOTSUPP);
	cr_assert_eq(nvs_swapper_register_file(s, 9, 4096, two, 1),
		     -EOPNOTSUPP);
	cr_assert_eq(nvs_swapper_discard(s), 0);
}

/* Older kernels' tmpfs refuses O_DIRECT (6.6 and later take it): either
 * way the file reads back, and the stats say which. */
Test(backing, a_file_on_tmpfs_reads_back_direct_or_through_the_page_cache)
{
	const char *mnt = tu_path("tmpfs");
	unsigned char buf[5000], got[5000];
	char path[4200];
	struct nvs_swap_stats st;
	struct nvs_swapper *s = swapper();

	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a tmpfs here: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/w.bin", mnt);
	tu_fill(buf, sizeof(buf), 9);
	tu_write_file(path, buf, sizeof(buf));
	cr_assert_eq(nvs_swapper_add_file(s, path, 0), 0, "%s",
		     nvs_last_error());
	struct nvs_file_piece p = {.offset = 3, .length = 4997, .at = 0};
	cr_assert_eq(nvs_swapper_register_file(s, 2, 4997, &p, 1), 0);
	cr_assert_eq(nvs_swapper_read(s, 2, got, sizeof(got)), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(memcmp(got, buf + 3, 4997), 0);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	int fd = open(path, O_RDONLY | O_DIRECT);
	cr_assert_eq(st.files_buffered, fd < 0 ? 1u : 0u);
	if (fd >= 0)
		close(fd);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* The parameter swapper's layers from a file: each tensor where its
 * file offset falls modulo the page (one that would then outgrow a
 * buffer: packed), one of zeros, the max_in_cpu budget untouched (the
 * layer streams), read-ahead by the walk reading from the file too. */
Test(backing, parameter_layers_stream_from_the_file)
{
	struct nvs_param_swapper_opts po;
	struct nvs_param_swapper *p = NULL;
	struct nvs_swap_stats st;
	struct nvs_swapper *s;
	const char *path = weights(11);
	void *ptr[3];

	s = swapper();
	cr_assert_eq(nvs_swapper_add_file(s, path, 0), 0);
	nvs_param_swapper_opts_init(&po);
	po.max_in_cpu = 1 << 30;
	cr_assert_eq(nvs_param_swapper_create(s, &po, &p), 0);
	for (unsigned l = 0; l < 3; l++) {
		const size_t nb[3] = {1000 + l, 5000, 777};
		const struct nvs_layer_source src[3] = {
			{.file = 0, .offset = 64 + 10048 * l},
			{.file = NVS_LAYER_ZEROS},
			{.file = 0, .offset = (2 << 20) + 8},
		};
		cr_assert_eq(nvs_param_add_layer_file(p, l, 3, nb, src), 0,
			     "%s", nvs_last_error());
		cr_assert(!nvs_param_layer_in_cpu(p, l), "streamed");
	}
	for (unsigned l = 0; l < 3; l++) {
		static const unsigned char zero[5000];
		cr_assert_eq(nvs_param_acquire_layer(p, l, ptr), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(memcmp(ptr[0], data + 64 + 10048 * l, 1000 + l),
			     0);
		cr_assert_eq(memcmp(ptr[1], zero, 5000), 0);
		cr_assert_eq(memcmp(ptr[2], data + (2 << 20) + 8, 777), 0);
		/* Where the file has them modulo the page (read straight)
		 * when that keeps them 64-byte aligned, else packed. */
		cr_assert_eq((uintptr_t)ptr[0] % 4096, (64 + 10048 * l) % 4096);
		for (int i = 0; i < 3; i++)
			cr_assert_eq((uintptr_t)ptr[i] % 64, 0);
		cr_assert_eq(nvs_param_release_layer(p, l, false), 0);
	}
	/* A layer that aligned would outgrow a buffer is packed instead. */
	const size_t big_nb[2] = {1 << 20, (1 << 20) - 100};
	const struct nvs_layer_source big[2] = {
		{.file = 0, .offset = 4032},
		{.file = 0, .offset = (1 << 20) + 5056},
	};
	cr_assert_eq(nvs_param_add_layer_file(p, 5, 2, big_nb, big), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_param_acquire_layer(p, 5, ptr), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(memcmp(ptr[0], data + 4032, big_nb[0]), 0);
	cr_assert_eq(memcmp(ptr[1], data + (1 << 20) + 5056, big_nb[1]), 0);
	cr_assert_eq((char *)ptr[1] - (char *)ptr[0], 1 << 20, "packed");
	cr_assert_eq(nvs_param_release_layer(p, 5, false), 0);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_eq(st.bytes_written, 0);
	cr_assert_geq(st.file_reads, 3);
	const size_t bad_nb[1] = {10};
	const struct nvs_layer_source bad[1] = {{.file = 4}};
	cr_assert_eq(nvs_param_add_layer_file(p, 9, 1, bad_nb, bad), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "names no added file"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "nvs_param_add_layer_file: layer 9"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* A relative path is resolved at the add: a chdir afterwards does not
 * make the file look replaced. */
Test(backing, a_relative_path_survives_a_chdir)
{
	const char *path = weights(13);
	struct nvs_swapper *s = swapper();
	struct nvs_file_piece p = {.offset = 100, .length = 4000, .at = 0};
	unsigned char got[4000];

	(void)path;
	cr_assert_eq(chdir(tu_dir()), 0);
	cr_assert_eq(nvs_swapper_add_file(s, "w.bin", 0), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_register_file(s, 1, 4000, &p, 1), 0);
	cr_assert_eq(chdir("/"), 0);
	cr_assert_eq(nvs_swapper_read(s, 1, got, sizeof(got)), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(memcmp(got, data + 100, 4000), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
