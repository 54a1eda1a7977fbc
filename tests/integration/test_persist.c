// SPDX-License-Identifier: MIT
/*
 * Persistent swap sets on real files: a set reopened with its tensors,
 * tags and bytes; checkpoints kept and dropped; copy on write keeping a
 * generation's bytes through later writes and a crash; every damaged or
 * mismatched piece refused with its own error (torn, flipped or newer
 * manifest, truncated data, flipped data, other rank, other paths, other
 * stripe; a manifest under another generation's name, naming the one
 * inside); a full disk during a checkpoint; and kill -9 at random moments
 * of swapping and checkpointing, each reopen matching a whole generation.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(persist, .fini = fini);

enum { BUF = 64 << 10, SZ = 40000, NT = 6 };

static void opts(struct nvs_swapper_opts *o, const char *path, int persist)
{
	tu_swapper_opts(o, BUF, 3);
	o->nvme_paths[0] = path;
	o->persist = (uint8_t)persist;
	o->name = "set";
}

static struct nvs_swapper *open_set(const char *path, int persist)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	opts(&o, path, persist);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* Tensor @id's bytes at step @k. */
static void pattern(void *buf, uint64_t id, unsigned k)
{
	tu_fill(buf, SZ, id * 1000003u + k);
}

static void set_step(struct nvs_swapper *s, uint64_t id, unsigned k)
{
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	pattern(p, id, k);
	cr_assert_eq(nvs_swapper_release(s, id, true), 0);
}

static void expect_step(struct nvs_swapper *s, uint64_t id, unsigned k)
{
	char want[SZ];
	void *p;

	cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s", nvs_last_error());
	pattern(want, id, k);
	cr_assert(memcmp(p, want, SZ) == 0, "tensor %llu is not step %u",
		  (unsigned long long)id, k);
	cr_assert_eq(nvs_swapper_release(s, id, false), 0);
	cr_assert_eq(nvs_swapper_evict(s, id), 0);
}

static const char *manifest(const char *root, uint64_t gen)
{
	static char p[4200];

	snprintf(p, sizeof(p), "%s/nvswap/set/rank0/manifest.%020llu", root,
		 (unsigned long long)gen);
	return p;
}

static const char *data_file(const char *root)
{
	static char p[4200];

	snprintf(p, sizeof(p), "%s/nvswap/set/rank0/set.data", root);
	return p;
}

static int try_open(const struct nvs_swapper_opts *o)
{
	struct nvs_swapper *s = NULL;
	int ret = nvs_swapper_create(o, &s);

	if (ret == 0)
		nvs_swapper_destroy(s);
	return ret;
}

/* A set with NT tensors at step 1 (tensor 0 never written), checkpointed
 * as generation 1 ("one") and closed (no change since: no generation
 * more). */
static void make_set(const char *root)
{
	struct nvs_swapper *s = open_set(root, NVS_PERSIST_PERSISTENT);
	char buf[SZ];

	cr_assert_eq(nvs_swapper_register(s, 0, SZ, NULL), 0);
	for (uint64_t id = 1; id < NT; id++) {
		pattern(buf, id, 1);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_swapper_set_tag(s, id, "f32[100]", 8), 0);
	}
	cr_assert_eq(nvs_swapper_checkpoint(s, "one"), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(persist, reopen_restores_tensors_tags_and_bytes)
{
	struct nvs_generation_info g[4];
	uint64_t ids[NT + 1];
	struct nvs_tensor_info info;
	struct nvs_swapper *s;
	char tag[16];
	void *p;

	make_set(tu_dir());
	s = open_set(tu_dir(), NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_list(s, ids, NT + 1), NT);
	for (uint64_t id = 0; id < NT; id++) {
		cr_assert_eq(ids[id], id);
		cr_assert_eq(nvs_swapper_info(s, id, &info), 0);
		cr_assert_eq(info.nbytes, SZ);
		cr_assert_eq(info.state, NVS_TENSOR_ON_NVME);
		cr_assert_eq(info.on_disk, id != 0);
	}
	cr_assert_eq(nvs_swapper_get_tag(s, 3, tag, sizeof(tag)), 8);
	cr_assert(memcmp(tag, "f32[100]", 8) == 0);
	cr_assert_eq(nvs_swapper_get_tag(s, 0, tag, sizeof(tag)), 0);
	cr_assert_eq(nvs_swapper_get_tag(s, 3, tag, 3), 8); /* length */
	for (uint64_t id = 1; id < NT; id++)
		expect_step(s, id, 1);
	cr_assert_eq(nvs_swapper_acquire(s, 0, &p), 0);
	for (size_t i = 0; i < SZ; i++)
		cr_assert_eq(((unsigned char *)p)[i], 0);
	cr_assert_eq(nvs_swapper_release(s, 0, false), 0);
	cr_assert_eq(nvs_swapper_generations(s, g, 4), 1);
	cr_assert_eq(g[0].generation, 1);
	cr_assert_str_eq(g[0].tag, "one");
	cr_assert_eq(g[0].tensors, NT);
	cr_assert_eq(g[0].tensor_bytes, (uint64_t)NT * SZ);
	/* Read, not changed: closing adds no generation. */
	cr_assert_eq(nvs_swapper_unsaved(s), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	s = open_set(tu_dir(), NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_generations(s, g, 4), 1);
	/* A change (a tag counts): closing saves it as "destroy". */
	cr_assert_eq(nvs_swapper_set_tag(s, 0, "bf16", 4), 0);
	cr_assert_eq(nvs_swapper_unsaved(s), 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	s = open_set(tu_dir(), NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_generations(s, g, 4), 2);
	cr_assert_eq(g[0].generation, 2);
	cr_assert_str_eq(g[0].tag, "destroy");
	cr_assert_eq(nvs_swapper_get_tag(s, 0, tag, sizeof(tag)), 4);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* Changes after a checkpoint are written elsewhere: a process that dies
 * without checkpointing leaves the checkpoint's bytes. */
Test(persist, writes_after_a_checkpoint_do_not_touch_it)
{
	const char *root = tu_dir();
	struct nvs_swapper *s;
	int status;
	pid_t pid;

	make_set(root);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		s = open_set(root, NVS_PERSIST_RESUME);
		for (uint64_t id = 0; id < NT; id++) {
			set_step(s, id, 2);
			if (nvs_swapper_evict(s, id) < 0)
				_exit(10);
		}
		if (nvs_swapper_unregister(s, 4) < 0 ||
		    nvs_swapper_wait_all(s) < 0)
			_exit(11);
		_exit(0); /* a crash: no destroy, no checkpoint */
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d",
		  status);
	s = open_set(root, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_list(s, NULL, 0), NT);
	for (uint64_t id = 1; id < NT; id++)
		expect_step(s, id, 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(persist, keeps_the_last_generations_and_reuses_space)
{
	const char *root = tu_dir();
	struct nvs_generation_info g[8];
	struct nvs_swapper_opts o;
	struct nvs_swap_stats st;
	struct nvs_swapper *s = NULL;

	make_set(root);
	opts(&o, root, NVS_PERSIST_RESUME);
	o.keep_generations = 3;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (unsigned k = 2; k < 12; k++) {
		for (uint64_t id = 1; id < NT; id++)
			set_step(s, id, k);
		cr_assert_gt(nvs_swapper_checkpoint(s, NULL), 0, "%s",
			     nvs_last_error());
	}
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 11, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_generations(s, g, 8), 3);
	cr_assert_eq(g[0].generation, 11);
	cr_assert_eq(g[2].generation, 9);
	cr_assert_eq(access(manifest(root, 8), F_OK), -1);
	cr_assert_eq(access(manifest(root, 9), F_OK), 0);
	/* Three generations of five written tensors (and one in flight
	 * between), at most: never one placement per checkpoint. */
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_leq(st.path_space_used[0], 4ull * NT * 40960,
		      "%llu bytes used",
		      (unsigned long long)st.path_space_used[0]);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	/* Generation g holds step g; an older one opens on request. */
	opts(&o, root, NVS_PERSIST_RESUME);
	o.generation = 10;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (uint64_t id = 1; id < NT; id++)
		expect_step(s, id, 10);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	o.generation = 5;
	cr_assert_eq(try_open(&o), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "generation 5 is not kept"), "%s",
		  nvs_last_error());
}

Test(persist, checkpoint_refuses_a_changed_tensor_in_the_callers_hands)
{
	struct nvs_swapper *s;
	void *p;

	make_set(tu_dir());
	s = open_set(tu_dir(), NVS_PERSIST_RESUME);
	set_step(s, 2, 5);
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	cr_assert_eq(nvs_swapper_checkpoint(s, "x"), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "tensor 2 is acquired"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	/* Acquired but unchanged: the checkpoint takes the disk's bytes. */
	cr_assert_eq(nvs_swapper_acquire(s, 3, &p), 0);
	cr_assert_eq(nvs_swapper_checkpoint(s, "x"), 2, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 2, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_release(s, 3, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	s = open_set(tu_dir(), NVS_PERSIST_RESUME);
	expect_step(s, 2, 5);
	expect_step(s, 3, 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(persist, scratch_space_and_checkpoints_do_not_mix)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	s = open_set(tu_dir(), NVS_PERSIST_SCRATCH);
	cr_assert_eq(nvs_swapper_checkpoint(s, "x"), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "scratch"), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 0);
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	cr_assert_eq(nvs_swapper_unsaved(s), 0, "scratch: nothing to save");
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	make_set(tu_dir());
	opts(&o, tu_dir(), NVS_PERSIST_SCRATCH);
	cr_assert_eq(try_open(&o), -EEXIST);
	cr_assert(strstr(nvs_last_error(), "holds a persistent swap set"), "%s",
		  nvs_last_error());
	/* ...and the set is untouched by the refusal. */
	s = open_set(tu_dir(), NVS_PERSIST_RESUME);
	expect_step(s, 5, 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(persist, resume_needs_a_set_and_names_the_ranks_that_have_one)
{
	struct nvs_swapper_opts o;

	opts(&o, tu_dir(), NVS_PERSIST_RESUME);
	cr_assert_eq(try_open(&o), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "no persistent swap set to "
					   "resume"),
		  "%s", nvs_last_error());
	make_set(tu_dir());
	o.rank = 1;
	cr_assert_eq(try_open(&o), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "held by: rank0"), "%s",
		  nvs_last_error());
}

Test(persist, another_layout_is_refused_naming_the_difference)
{
	char a[4200], b[4200], c[4200], cmd[9000];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	snprintf(a, sizeof(a), "%s/a", tu_dir());
	snprintf(b, sizeof(b), "%s/b", tu_dir());
	snprintf(c, sizeof(c), "%s/c", tu_dir());
	mkdir(a, 0700);
	mkdir(b, 0700);
	mkdir(c, 0700);
	opts(&o, a, NVS_PERSIST_PERSISTENT);
	o.npaths = 2;
	o.nvme_paths[1] = b;
	o.stripe_size = 16384;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	o.stripe_size = 32768;
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "stripe_size 16384, opened with "
					   "32768"),
		  "%s", nvs_last_error());
	o.stripe_size = 16384;
	o.nvme_paths[1] = c;
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "has path 1"), "%s",
		  nvs_last_error());
	o.nvme_paths[0] = b;
	o.nvme_paths[1] = a;
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "original order"), "%s",
		  nvs_last_error());
	o.nvme_paths[0] = a;
	o.npaths = 1;
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "has 2 paths, opened with 1"), "%s",
		  nvs_last_error());
	/* A rank directory copied under another rank. */
	snprintf(cmd, sizeof(cmd),
		 "cp -r %s/nvswap/set/rank0 %s/nvswap/set/rank3", a, a);
	cr_assert_eq(system(cmd), 0);
	o.npaths = 2;
	o.nvme_paths[1] = b;
	o.rank = 3;
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "a manifest of rank 0, opened as "
					   "rank 3"),
		  "%s", nvs_last_error());
	/* The original still opens. */
	o.rank = 0;
	cr_assert_eq(try_open(&o), 0, "%s", nvs_last_error());
}

/* Overwrite one byte of @path at @off with its complement. */
static void flip(const char *path, off_t off)
{
	unsigned char c;
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(pread(fd, &c, 1, off), 1);
	c = (unsigned char)~c;
	cr_assert_eq(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

Test(persist, a_damaged_manifest_is_refused_and_nothing_changes)
{
	const char *root = tu_dir();
	struct nvs_swapper_opts o;
	off_t size;
	size_t n;
	void *keep;

	make_set(root);
	opts(&o, root, NVS_PERSIST_RESUME);
	size = tu_file_size(manifest(root, 1));
	keep = tu_read_file(manifest(root, 1), &n);

	flip(manifest(root, 1), size / 2);
	cr_assert_eq(try_open(&o), -EBADMSG);
	cr_assert(strstr(nvs_last_error(), "checksum mismatch"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "manifest.00000000000000000001"),
		  "%s", nvs_last_error());

	cr_assert_eq(truncate(manifest(root, 1), size / 3), 0);
	cr_assert_eq(try_open(&o), -EBADMSG);
	cr_assert_eq(tu_file_size(manifest(root, 1)), size / 3);

	tu_write_file(manifest(root, 1), keep, n);
	flip(manifest(root, 1), 8); /* the format version: 2 -> 253 */
	cr_assert_eq(try_open(&o), -ENOTSUP);
	cr_assert(strstr(nvs_last_error(), "format version 253"), "%s",
		  nvs_last_error());

	tu_write_file(manifest(root, 1), keep, n);
	cr_assert_eq(try_open(&o), 0, "%s", nvs_last_error());
	free(keep);
}

Test(persist, a_renamed_manifest_names_the_generation_inside)
{
	const char *root = tu_dir();
	struct nvs_swapper_opts o;
	char to[4400];

	make_set(root);
	opts(&o, root, NVS_PERSIST_RESUME);
	snprintf(to, sizeof(to), "%.4300s", manifest(root, 7));
	cr_assert_eq(rename(manifest(root, 1), to), 0);
	cr_assert_eq(try_open(&o), -EBADMSG);
	cr_assert(strstr(nvs_last_error(), "manifest.00000000000000000007: "
					   "names generation 1 inside"),
		  "%s", nvs_last_error());
}

/* Every written tensor read (acquired and released, or copied into @dst
 * by nvs_swapper_read() when given): how many its checksum refused. */
static int checksum_refusals(struct nvs_swapper *s, char *dst)
{
	int bad = 0;
	void *p;

	for (uint64_t id = 1; id < NT; id++) {
		int r = dst ? nvs_swapper_read(s, id, dst, SZ)
			    : nvs_swapper_acquire(s, id, &p);
		if (r == -EBADMSG) {
			bad++;
			cr_assert(strstr(nvs_last_error(), "checksum mismatch"),
				  "%s", nvs_last_error());
			continue;
		}
		cr_assert_eq(r, 0, "%s", nvs_last_error());
		if (!dst)
			cr_assert_eq(nvs_swapper_release(s, id, false), 0);
	}
	return bad;
}

Test(persist, damaged_data_is_caught_at_open_or_at_read)
{
	const char *root = tu_dir();
	struct nvs_swapper *s;

	make_set(root);
	/* Tensor 1 is the first written: at offset 0 (tensor 0 never was,
	 * but was placed first: find tensor 1 by reading). */
	flip(data_file(root), 40960 + 100);
	s = open_set(root, NVS_PERSIST_RESUME);
	cr_assert_eq(checksum_refusals(s, NULL), 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0);

	cr_assert_eq(truncate(data_file(root), 3 * 40960), 0);
	struct nvs_swapper_opts o;
	opts(&o, root, NVS_PERSIST_RESUME);
	cr_assert_eq(try_open(&o), -EBADMSG);
	cr_assert(strstr(nvs_last_error(), "the data file was truncated"), "%s",
		  nvs_last_error());
}

/* The set made with 64 KiB buffers, opened with 8 KiB ones: it opens; no
 * buffer holds a 40000-byte tensor, so acquire refuses it, and
 * nvs_swapper_read() copies each out (into unaligned memory here), its
 * checksum checked, nothing changed in the set. */
Test(persist, a_set_opened_with_smaller_buffers_copies_its_tensors_out)
{
	const char *root = tu_dir();
	struct nvs_swapper_opts o;
	struct nvs_swap_stats st;
	struct nvs_swapper *s = NULL;
	char *mem = malloc(SZ + 1), *dst = mem + 1, want[SZ];
	void *p;

	cr_assert_not_null(mem);
	make_set(root);
	opts(&o, root, NVS_PERSIST_RESUME);
	o.buffer_size = 8192;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), -EFBIG);
	cr_assert(strstr(nvs_last_error(), "tensor 1 is 40000 bytes, larger "
					   "than buffer_size 8192"),
		  "%s", nvs_last_error());
	for (uint64_t id = 1; id < NT; id++) {
		cr_assert_eq(nvs_swapper_read(s, id, dst, SZ), 0, "%s",
			     nvs_last_error());
		pattern(want, id, 1);
		cr_assert(memcmp(dst, want, SZ) == 0, "tensor %llu",
			  (unsigned long long)id);
	}
	memset(dst, 0xab, SZ); /* never written: zeros, no I/O */
	cr_assert_eq(nvs_swapper_read(s, 0, dst, SZ), 0);
	for (size_t i = 0; i < SZ; i++)
		cr_assert_eq(dst[i], 0);
	cr_assert_eq(nvs_swapper_read(s, 1, dst, SZ - 1), -ERANGE);
	cr_assert(strstr(nvs_last_error(), "tensor 1 is 40000 bytes, more "
					   "than the 39999 given"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_read(s, 99, dst, SZ), -ENOENT);
	cr_assert_eq(nvs_swapper_read(s, 1, NULL, SZ), -EINVAL);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_eq(st.reads, NT - 1);
	cr_assert_eq(st.bytes_read, (uint64_t)(NT - 1) * SZ);
	cr_assert_eq(nvs_swapper_unsaved(s), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());

	/* a flipped byte: exactly one tensor's read is refused */
	flip(data_file(root), 40960 + 100);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(checksum_refusals(s, dst), 1);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_eq(st.checksum_errors, 1);
	cr_assert_eq(nvs_swapper_generations(s, NULL, 0), 1);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	free(mem);
}

Test(persist, a_full_disk_during_a_checkpoint_keeps_the_previous_one)
{
	char mnt[4200];
	struct nvs_swapper *s;
	int ret;

	snprintf(mnt, sizeof(mnt), "%s/small", tu_dir());
	if (!tu_mount_private(mnt, "tmpfs", 0, "size=512k"))
		cr_skip_test("cannot mount a 512 KiB tmpfs here (%s): needs "
			     "root and mount namespaces",
			     strerror(errno));
	make_set(mnt); /* 6 x 40 KiB = 240 KiB used */
	s = open_set(mnt, NVS_PERSIST_RESUME);
	/* Rewriting everything needs another 200 KiB per generation: the
	 * second rewrite runs out (two generations are kept). */
	for (unsigned k = 2; k < 6; k++) {
		for (uint64_t id = 1; id < NT; id++)
			set_step(s, id, k);
		ret = nvs_swapper_checkpoint(s, "k");
		if (ret > 0)
			ret = nvs_swapper_checkpoint_wait(s);
		if (ret < 0)
			break;
	}
	cr_assert_eq(ret, -ENOSPC, "%d %s", ret, nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "set.data"), "%s", nvs_last_error());
	/* The next destroy tries again and fails the same way: the set
	 * reopens at the last good generation. */
	cr_assert_eq(nvs_swapper_destroy(s), -ENOSPC);
	s = open_set(mnt, NVS_PERSIST_RESUME);
	struct nvs_generation_info g;
	cr_assert_geq(nvs_swapper_generations(s, &g, 1), 1);
	unsigned good = (unsigned)g.generation; /* generation k: step k */
	for (uint64_t id = 1; id < NT; id++)
		expect_step(s, id, good);
	nvs_swapper_destroy(s);
	umount(mnt);
}

/* The crash test: a child swaps and checkpoints step after step (tag =
 * the step) until killed at a random moment; every reopen must show the
 * newest committed step's bytes in every tensor. */
static void child_loop(const char *root)
{
	struct nvs_generation_info g;
	struct nvs_swapper *s = NULL;
	struct nvs_swapper_opts o;
	unsigned k = 1;

	opts(&o, root, NVS_PERSIST_PERSISTENT);
	if (nvs_swapper_create(&o, &s) < 0)
		_exit(20);
	if (nvs_swapper_generations(s, &g, 1) >= 1)
		k = (unsigned)atoi(g.tag) + 1;
	else
		for (uint64_t id = 0; id < NT; id++)
			if (nvs_swapper_register(s, id, SZ, NULL) < 0)
				_exit(21);
	for (;; k++) {
		for (uint64_t id = 0; id < NT; id++) {
			void *p;
			if (nvs_swapper_acquire(s, id, &p) < 0)
				_exit(22);
			pattern(p, id, k);
			nvs_swapper_release(s, id, true);
			if ((id + k) % 2 && nvs_swapper_evict(s, id) < 0)
				_exit(23);
		}
		char tag[16];
		snprintf(tag, sizeof(tag), "%u", k);
		if (nvs_swapper_checkpoint(s, tag) < 0)
			_exit(24);
	}
}

/* In a child (so that no destroy checkpoints): reopen and check every
 * tensor against the newest generation's step. Exit 0 and the step on
 * @fd (0: no generation yet), else an exit code saying what failed. */
static void verify_child(const char *root, int fd)
{
	struct nvs_generation_info g;
	struct nvs_swapper *s = NULL;
	struct nvs_swapper_opts o;
	char want[SZ];
	unsigned k = 0;

	opts(&o, root, NVS_PERSIST_PERSISTENT);
	if (nvs_swapper_create(&o, &s) < 0) {
		fprintf(stderr, "reopen: %s\n", nvs_last_error());
		_exit(30);
	}
	if (nvs_swapper_generations(s, &g, 1) >= 1) {
		k = (unsigned)atoi(g.tag);
		if (nvs_swapper_list(s, NULL, 0) != NT)
			_exit(31);
		for (uint64_t id = 0; id < NT; id++) {
			void *p;
			if (nvs_swapper_acquire(s, id, &p) < 0) {
				fprintf(stderr, "acquire %llu: %s\n",
					(unsigned long long)id,
					nvs_last_error());
				_exit(32);
			}
			pattern(want, id, k);
			if (memcmp(p, want, SZ)) {
				fprintf(stderr, "tensor %llu is not step %u\n",
					(unsigned long long)id, k);
				_exit(33);
			}
			nvs_swapper_release(s, id, false);
			nvs_swapper_evict(s, id);
		}
	} else if (nvs_swapper_list(s, NULL, 0) != 0) {
		_exit(34); /* no generation, but tensors */
	}
	if (write(fd, &k, sizeof(k)) != sizeof(k))
		_exit(35);
	_exit(0);
}

Test(persist, kill_9_at_random_moments_leaves_a_whole_generation,
     .timeout = 300)
{
	const char *root = tu_dir();
	const char *env = getenv("NVSWAP_PERSIST_TRIALS");
	unsigned trials = env ? (unsigned)atoi(env) : 20, last = 0;

	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	for (unsigned i = 0; i < trials; i++) {
		int status, fds[2];
		unsigned k = 0;
		pid_t pid = fork();

		cr_assert_geq(pid, 0);
		if (pid == 0)
			child_loop(root);
		usleep((useconds_t)(20000 + rand() % 150000));
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status), "the child ended by itself: %d",
			  status);
		cr_assert_eq(pipe(fds), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0)
			verify_child(root, fds[1]);
		close(fds[1]);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "trial %u: the reopened set is wrong (status %d)", i,
			  status);
		cr_assert_eq(read(fds[0], &k, sizeof(k)), (ssize_t)sizeof(k));
		close(fds[0]);
		cr_assert_geq(k, last, "trial %u: step %u after step %u", i, k,
			      last);
		last = k;
	}
	cr_assert_gt(last, 0, "no trial got past its first checkpoint");
}

Test(persist, bad_arguments_are_refused_with_a_sentence)
{
	char big[NVS_SWAPPER_TAG_MAX + 2], tag[NVS_CHECKPOINT_TAG_MAX + 2];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	opts(&o, tu_dir(), 7);
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "persist 7"), "%s",
		  nvs_last_error());
	opts(&o, tu_dir(), NVS_PERSIST_PERSISTENT);
	o.keep_generations = NVS_KEEP_GENERATIONS_MAX + 1;
	cr_assert_eq(try_open(&o), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "keep_generations 65"), "%s",
		  nvs_last_error());

	s = open_set(tu_dir(), NVS_PERSIST_PERSISTENT);
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, NULL), 0);
	memset(big, 'x', sizeof(big));
	cr_assert_eq(nvs_swapper_set_tag(s, 1, big, sizeof(big) - 1), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "at most 1024"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_set_tag(s, 1, big, NVS_SWAPPER_TAG_MAX), 0);
	cr_assert_eq(nvs_swapper_get_tag(s, 1, NULL, 0), NVS_SWAPPER_TAG_MAX);
	cr_assert_eq(nvs_swapper_set_tag(s, 1, NULL, 3), -EINVAL);
	cr_assert_eq(nvs_swapper_set_tag(s, 1, NULL, 0), 0); /* cleared */
	cr_assert_eq(nvs_swapper_get_tag(s, 1, NULL, 0), 0);
	cr_assert_eq(nvs_swapper_set_tag(s, 9, "a", 1), -ENOENT);
	cr_assert_eq(nvs_swapper_get_tag(s, 9, big, 4), -ENOENT);
	cr_assert_eq(nvs_swapper_get_tag(s, 1, NULL, 4), -EINVAL);
	cr_assert_eq(nvs_swapper_list(s, NULL, 2), -EINVAL);
	cr_assert_eq(nvs_swapper_generations(s, NULL, 2), -EINVAL);
	cr_assert_eq(nvs_swapper_unsaved(NULL), -EINVAL);
	cr_assert_eq(nvs_swapper_unsaved(s), 1, "no generation yet");
	memset(tag, 't', sizeof(tag));
	tag[sizeof(tag) - 1] = '\0';
	cr_assert_eq(nvs_swapper_checkpoint(s, tag), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "at most 255"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 0, "none started");
	tag[NVS_CHECKPOINT_TAG_MAX] = '\0';
	cr_assert_eq(nvs_swapper_checkpoint(s, tag), 1, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1);
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1, "asked again");
	cr_assert_eq(nvs_swapper_unsaved(s), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
