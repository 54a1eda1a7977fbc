// SPDX-License-Identifier: MIT
/*
 * The swap manager when the disk or the data fails: checksums against a
 * corrupted swap file, a truncated one, injected -EIO and -ENOSPC and a
 * really full disk (nothing lost, retryable), submits refused midway
 * through a striped tensor, and a pool held by failed write-backs.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "swapper/swapper.h"
#include "tu_swapper_cases.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(swapper, .fini = fini);

/* ----------------------------------------------------- integrity, faults */

Test(swapper, a_corrupted_swap_file_is_ebadmsg_and_never_handed_out)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	unsigned char *a = malloc(BUF), *junk = malloc(BUF), *keep;
	char file[4300];
	void *p = &p;
	int fd;

	opts(&o, 2);
	o.checksum = true;
	s = mk_with(&o);
	tu_fill(a, BUF, 11);
	cr_assert_eq(nvs_swapper_register(s, 42, BUF, a), 0);
	expect(s, 42, a, BUF);
	cr_assert_eq(nvs_swapper_evict(s, 42), 0);
	snprintf(file, sizeof(file), "%s/swap.0", nvs_swapper_dir(s, 0));
	fd = open(file, O_RDWR);
	cr_assert_geq(fd, 0);
	keep = malloc(BUF);
	cr_assert_eq(pread(fd, keep, BUF, 0), BUF);
	memcpy(junk, keep, BUF);
	junk[12345] ^= 0x01; /* one bit */
	cr_assert_eq(pwrite(fd, junk, BUF, 0), BUF);
	fsync(fd);
	cr_assert_eq(nvs_swapper_acquire(s, 42, &p), -EBADMSG);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "tensor 42"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), file), "%s", nvs_last_error());
	cr_assert_eq(state(s, 42), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).checksum_errors, 1);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	/* Repaired, it reads again. */
	cr_assert_eq(pwrite(fd, keep, BUF, 0), BUF);
	fsync(fd);
	close(fd);
	expect(s, 42, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(junk);
	free(keep);
}

/* Hostile input 12: a swap file truncated behind the swapper's back is an
 * I/O error of the swapper's, naming the tensor and the file, not a bare
 * -EINVAL about a file end; the tensor stays on disk, readable once the
 * file is whole again. */
Test(swapper, a_truncated_swap_file_is_eio_naming_the_tensor_and_the_file)
{
	struct nvs_swapper *s = mk(2);
	unsigned char *a = malloc(BUF), *keep = malloc(BUF);
	char file[4300];
	void *p = &p;
	int fd;

	tu_fill(a, BUF, 12);
	cr_assert_eq(nvs_swapper_register(s, 7, BUF, a), 0);
	cr_assert_eq(nvs_swapper_evict(s, 7), 0);
	cr_assert_eq(nvs_swapper_wait(s, 7), 0);
	snprintf(file, sizeof(file), "%s/swap.0", nvs_swapper_dir(s, 0));
	fd = open(file, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, keep, BUF, 0), BUF);
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 7, &p), -EIO, "%s",
		     nvs_last_error());
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "tensor 7"), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), file), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "truncated"), "%s",
		  nvs_last_error());
	cr_assert_eq(state(s, 7), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	cr_assert_eq(pwrite(fd, keep, BUF, 0), BUF);
	close(fd);
	expect(s, 7, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
	free(keep);
}

/* A swapper whose @nth I/O attempt (reads and writes counted together)
 * fails with @kind when it is an @opcode. */
/* A swapper (auto_evict as given) whose first @nth-th @opcode request
 * fails with @kind. */
static struct nvs_swapper *mk_fault_evict(enum nvs_fault_kind kind, int opcode,
					  unsigned long nth, bool auto_evict)
{
	struct nvs_fault_plan plan = {
		.rules = {{.kind = kind,
			   .nth = nth,
			   .count = 1,
			   .opcode = opcode}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	opts(&o, 2);
	o.checksum = true;
	o.auto_evict = auto_evict;
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0, "%s",
		     nvs_last_error());
	return s;
}

static struct nvs_swapper *mk_fault(enum nvs_fault_kind kind, int opcode,
				    unsigned long nth)
{
	return mk_fault_evict(kind, opcode, nth, true);
}

Test(swapper, a_full_disk_on_write_back_keeps_the_tensor_resident_and_dirty)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_ENOSPC, NVS_IOREQ_WRITE, 1);
	unsigned char *a = malloc(BUF);
	struct nvs_tensor_info info;

	cr_assert_eq(nvs_swapper_register(s, 3, BUF, NULL), 0);
	modify(s, 3, a, BUF, 12);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0, "queued");
	cr_assert_eq(nvs_swapper_wait(s, 3), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "swap.0"), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 3), 0, "reported once");
	cr_assert_eq(nvs_swapper_info(s, 3, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty);
	cr_assert_eq(stats(s).io_errors, 1);
	/* Nothing lost: the data is still there, and a retry writes it. */
	expect(s, 3, a, BUF);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_wait(s, 3), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 3), NVS_TENSOR_ON_NVME);
	expect(s, 3, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* A private mount namespace with a 1 MiB tmpfs: a real full disk. */
static const char *small_fs(void)
{
	const char *mnt = tu_path("mnt");

	return tu_mount_private(mnt, "tmpfs", 0, "size=1m") ? mnt : NULL;
}

Test(swapper, a_really_full_disk_loses_nothing_and_unregistering_frees_it)
{
	enum { T = 6, SZ = 256 << 10 };
	const char *mnt = small_fs();
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	struct nvs_tensor_info info;
	unsigned char *ref[T];
	int ret = 0;
	unsigned i;

	if (!mnt)
		cr_skip_test("cannot mount a small tmpfs here (%s): needs root "
			     "and CAP_SYS_ADMIN",
			     strerror(errno));
	opts(&o, 2);
	o.nvme_paths[0] = mnt;
	o.buffer_size = SZ;
	s = mk_with(&o);
	/* 6 x 256 KiB on a 1 MiB disk: placing is free (the file is
	 * sparse), writing them is not. */
	for (i = 0; i < T; i++) {
		ref[i] = malloc(SZ);
		cr_assert_eq(nvs_swapper_register(s, i, SZ, NULL), 0);
	}
	for (i = 0; i < T; i++) {
		modify(s, i, ref[i], SZ, 200 + i);
		cr_assert_eq(nvs_swapper_evict(s, i), 0, "%s",
			     nvs_last_error());
		ret = nvs_swapper_wait(s, i);
		if (ret < 0)
			break;
	}
	cr_assert_eq(ret, -ENOSPC, "tensor %u: %d %s", i, ret,
		     nvs_last_error());
	cr_assert_lt(i, T);
	cr_assert(strstr(nvs_last_error(), mnt), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, i, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty, "nothing lost: still resident, still dirty");
	expect(s, i, ref[i], SZ);
	/* Freeing an earlier tensor gives its blocks back to the disk; the
	 * retry then succeeds and every byte reads back. */
	cr_assert_eq(nvs_swapper_unregister(s, 0), 0);
	cr_assert_eq(nvs_swapper_evict(s, i), 0);
	cr_assert_eq(nvs_swapper_wait(s, i), 0, "%s", nvs_last_error());
	for (unsigned k = 1; k <= i; k++) {
		expect(s, k, ref[k], SZ);
		cr_assert_eq(nvs_swapper_evict(s, k), 0);
	}
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	for (i = 0; i < T; i++)
		free(ref[i]);
}

Test(swapper, a_failed_write_back_is_reported_by_wait_all_and_destroy)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_WRITE, 1);
	unsigned char *a = malloc(BUF);

	cr_assert_eq(nvs_swapper_register(s, 3, BUF, NULL), 0);
	modify(s, 3, a, BUF, 13);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_wait_all(s), -EIO);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	cr_assert_eq(state(s, 3), NVS_TENSOR_RESIDENT);
	free(a);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_WRITE, 1);
	cr_assert_eq(nvs_swapper_register(s, 3, 100, NULL), 0);
	a = malloc(100);
	modify(s, 3, a, 100, 14);
	cr_assert_eq(nvs_swapper_evict(s, 3), 0);
	cr_assert_eq(nvs_swapper_destroy(s), -EIO, "never silent");
	free(a);
}

Test(swapper, a_failed_register_write_leaves_nothing_registered)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_ENOSPC, NVS_IOREQ_WRITE, 1);
	unsigned char *a = malloc(BUF);
	struct nvs_tensor_info info;

	tu_fill(a, BUF, 15);
	cr_assert_eq(nvs_swapper_register(s, 5, BUF, a), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "not registered"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 5, &info), -ENOENT);
	cr_assert_eq(stats(s).path_space_used[0], 0);
	cr_assert_eq(nvs_swapper_register(s, 5, BUF, a), 0);
	expect(s, 5, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_failed_read_leaves_the_tensor_on_nvme_and_retryable)
{
	struct nvs_swapper *s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_READ, 2);
	unsigned char *a = malloc(BUF);
	void *p = &p;

	tu_fill(a, BUF, 16);
	cr_assert_eq(nvs_swapper_register(s, 8, BUF, a), 0);
	int r = nvs_swapper_acquire(s, 8, &p);
	cr_assert_eq(r, -EIO, "%d %s", r, nvs_last_error());
	cr_assert_null(p);
	cr_assert_eq(state(s, 8), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	expect(s, 8, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	s = mk_fault(NVS_FAULT_EIO, NVS_IOREQ_READ, 2);
	cr_assert_eq(nvs_swapper_register(s, 8, BUF, a), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 8), 0, "fails later");
	cr_assert_eq(nvs_swapper_wait(s, 8), -EIO);
	cr_assert_eq(state(s, 8), NVS_TENSOR_ON_NVME);
	cr_assert_eq(nvs_swapper_prefetch(s, 8), 0, "retry");
	expect(s, 8, a, BUF);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

/* A swapper over two paths, a tensor of 5 x BUF + 1000 bytes striped in
 * 6 extents, whose handle refuses its @nth submit (counting every
 * nvs_aio_submit of the swapper, reads and writes) with -@err: the
 * submit-time failures (no op slot, no space to preallocate) that
 * happen after some extents of a tensor were queued. */
enum { BIG = 5 * BUF + 1000 };

static struct nvs_swapper *mk_refusing(unsigned long nth, int opcode, int err)
{
	struct nvs_fault_plan plan = {
		.rules = {{.kind = NVS_FAULT_REFUSE,
			   .nth = nth,
			   .count = 1,
			   .opcode = opcode,
			   .refuse_err = err}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	striped_opts(&o);
	o.checksum = true;
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0, "%s",
		     nvs_last_error());
	return s;
}

/* The extents queued before the refusal were waited for and collected
 * before the call returned: the buffer (or the caller's memory) is free
 * to change and the space to reuse. */
static void all_collected(struct nvs_swapper *s)
{
	cr_assert_eq(nvs_aio_wait(nvs__swapper_aio(s)), 0,
		     "the swapper left ops of the failed call in the handle");
}

Test(swapper,
     a_register_refused_midway_waits_for_the_rest_and_registers_nothing)
{
	struct nvs_swapper *s = mk_refusing(3, NVS_IOREQ_WRITE, ENOSPC);
	unsigned char *a = malloc(BIG);
	struct nvs_tensor_info info;

	tu_fill(a, BIG, 31);
	/* Extents 1 and 2 are queued, the third is refused. */
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "not registered"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &info), -ENOENT);
	cr_assert_eq(stats(s).path_space_used[0], 0);
	cr_assert_eq(stats(s).path_space_used[1], 0);
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(nvs_swapper_wait_all(s), 0, "nothing left in flight");
	/* The retry (submits 7-12) writes all of it. */
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert_eq(info.extents, 6);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_write_back_refused_midway_keeps_the_tensor_resident_and_dirty)
{
	struct nvs_swapper *s = mk_refusing(4, NVS_IOREQ_WRITE, EAGAIN);
	unsigned char *a = malloc(BIG);
	struct nvs_tensor_info info;

	cr_assert_eq(nvs_swapper_register(s, 1, BIG, NULL), 0);
	modify(s, 1, a, BIG, 32);
	/* Extents 1-3 are queued, the fourth is refused: evict says so at
	 * once, after the three queued ones have finished. */
	cr_assert_eq(nvs_swapper_evict(s, 1), -EAGAIN);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert_eq(nvs_swapper_info(s, 1, &info), 0);
	cr_assert_eq(info.state, NVS_TENSOR_RESIDENT);
	cr_assert(info.dirty, "nothing lost: resident and dirty");
	cr_assert_eq(info.acquired, 0);
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(stats(s).buffers_in_use, 1, "the data keeps its buffer");
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	expect(s, 1, a, BIG);
	/* The retry writes it; it reads back after a real round trip. */
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_wait(s, 1), 0, "%s", nvs_last_error());
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(a);
}

Test(swapper, a_read_refused_midway_leaves_the_tensor_on_nvme_and_retryable)
{
	/* Submits 1-6 register it; 7 and 8 are queued reads, 9 refused. */
	struct nvs_swapper *s = mk_refusing(9, NVS_IOREQ_READ, EAGAIN);
	unsigned char *a = malloc(BIG);
	void *p = &p;

	tu_fill(a, BIG, 33);
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0);
	cr_assert_eq(nvs_swapper_prefetch(s, 1), -EAGAIN);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).buffers_in_use, 0, "the buffer went back");
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(nvs_swapper_wait_all(s), 0);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	/* The same through acquire: the error, no pointer. */
	s = mk_refusing(9, NVS_IOREQ_READ, ENOMEM);
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), -ENOMEM);
	cr_assert_null(p);
	all_collected(s);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	expect(s, 1, a, BIG);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	/* And through nvs_swapper_read(), straight into the caller's
	 * memory: the error, its queued extents collected before it
	 * returns (the memory is the caller's again), nothing counted as
	 * read, and the next copy whole. */
	unsigned char *out = malloc(BIG);
	s = mk_refusing(9, NVS_IOREQ_READ, EAGAIN);
	cr_assert_eq(nvs_swapper_register(s, 1, BIG, a), 0);
	cr_assert_eq(nvs_swapper_read(s, 1, out, BIG), -EAGAIN);
	cr_assert(strstr(nvs_last_error(), "refused by the fault plan"), "%s",
		  nvs_last_error());
	all_collected(s);
	cr_assert_eq(state(s, 1), NVS_TENSOR_ON_NVME);
	cr_assert_eq(stats(s).io_errors, 1);
	cr_assert_eq(stats(s).reads, 0);
	cr_assert_eq(stats(s).buffers_in_use, 0);
	memset(out, 0, BIG);
	cr_assert_eq(nvs_swapper_read(s, 1, out, BIG), 0, "%s",
		     nvs_last_error());
	cr_assert(!memcmp(out, a, BIG));
	cr_assert_eq(stats(s).reads, 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	free(out);
	free(a);
}

Test(swapper, a_buffer_held_by_a_failed_write_back_is_an_error_not_a_wait)
{
	/* Without auto_evict (with it, tensor 1 would be written back). */
	struct nvs_swapper *s =
		mk_fault_evict(NVS_FAULT_ENOSPC, NVS_IOREQ_WRITE, 1, false);
	void *p = &p;

	/* Both buffers (mk_fault's pool) held by dirty tensors, one of them
	 * after a failed write-back: only the caller can free it, and a
	 * single-threaded caller must hear why instead of waiting forever. */
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	touch(s, 0);
	touch(s, 1);
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -ENOSPC);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "tensor 0 holds one"), "%s",
		  nvs_last_error());
	cr_assert_eq(state(s, 0), NVS_TENSOR_RESIDENT, "nothing lost");
	cr_assert_eq(nvs_swapper_wait(s, 0), -ENOSPC, "still reported");
	/* The disk has room again (the fault was one write): evict, go on. */
	cr_assert_eq(nvs_swapper_evict(s, 0), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(swapper,
     auto_evict_on_a_disk_that_refuses_every_write_stops_with_the_error)
{
	struct nvs_fault_plan plan = {
		.rules = {{.kind = NVS_FAULT_ENOSPC,
			   .nth = 1,
			   .count = 0,
			   .opcode = NVS_IOREQ_WRITE}},
		.nrules = 1,
	};
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	void *p;

	opts(&o, 2);
	o.auto_evict = true;
	cr_assert_eq(nvs__swapper_create_fault(&o, &plan, &s), 0);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(nvs_swapper_register(s, i, 100, NULL), 0);
	touch(s, 0);
	touch(s, 1);
	/* Each dirty tensor is tried once, then the error comes back:
	 * no endless rewriting of the same tensors. */
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), -ENOSPC);
	cr_assert(strstr(nvs_last_error(), "write-back failed"), "%s",
		  nvs_last_error());
	cr_assert_eq(stats(s).io_errors, 2);
	cr_assert_eq(state(s, 0), NVS_TENSOR_RESIDENT);
	cr_assert_eq(state(s, 1), NVS_TENSOR_RESIDENT);
	cr_assert_eq(nvs_swapper_destroy(s), -ENOSPC, "never silent");
}
