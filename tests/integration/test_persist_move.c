// SPDX-License-Identifier: MIT
/*
 * Persistent swap sets moved on disk: a copy made with cp -a opens where
 * it lands, verifies, and trains on bit-exact with the original going on
 * in place; two paths on one filesystem move together; a copy without
 * its data file is refused naming the file; a path on another filesystem
 * is recorded whole and moved with nvs_swapset_relocate(); a set of the
 * old format (absolute paths) opens in place, and moved is refused with
 * the exact relocate to run, after which it opens.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/swapper.h"
#include "swapper/manifest.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(persist_move, .fini = fini);

enum { BUF = 64 << 10, SZ = 40000, NT = 5 };

static const char *sub(const char *name)
{
	static char p[4][4200];
	static unsigned k;
	char *r = p[k++ % 4];

	snprintf(r, sizeof(p[0]), "%s/%s", tu_dir(), name);
	return r;
}

/* A directory @name in tu_dir(), made now; its real path, static. */
static const char *mkdir_real(const char *name)
{
	static char r[4][PATH_MAX];
	static unsigned k;
	char *out = r[k++ % 4];

	cr_assert(mkdir(sub(name), 0700) == 0 || errno == EEXIST);
	cr_assert_not_null(realpath(sub(name), out));
	return out;
}

static void opts(struct nvs_swapper_opts *o, const char *a, const char *b,
		 int persist)
{
	tu_swapper_opts(o, BUF, 3);
	o->nvme_paths[0] = a;
	o->npaths = b ? 2 : 1;
	o->nvme_paths[1] = b;
	o->stripe_size = 16384;
	o->persist = (uint8_t)persist;
	o->name = "set";
}

static struct nvs_swapper *open2(const char *a, const char *b, int persist)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	opts(&o, a, b, persist);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

static int try_open(const char *a, const char *b)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	int ret;

	opts(&o, a, b, NVS_PERSIST_RESUME);
	ret = nvs_swapper_create(&o, &s);
	if (ret == 0)
		nvs_swapper_destroy(s);
	return ret;
}

/* cp -a @from @to: the real command a user runs. */
static void cp_a(const char *from, const char *to)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", from, to);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* Tensors 0..NT-1 at their initial bytes, generation 1 committed. */
static void make_set(const char *a, const char *b)
{
	struct nvs_swapper *s = open2(a, b, NVS_PERSIST_PERSISTENT);
	char buf[SZ];

	for (uint64_t id = 0; id < NT; id++) {
		tu_fill(buf, SZ, id * 7919u + 1);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0, "%s",
			     nvs_last_error());
	}
	cr_assert_eq(nvs_swapper_checkpoint(s, "start"), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

/* One training step: every tensor updated from its bytes and @k, then a
 * checkpoint. Returns the generation committed. */
static int train(struct nvs_swapper *s, unsigned k)
{
	int gen;

	for (uint64_t id = 0; id < NT; id++) {
		uint32_t *w;
		cr_assert_eq(nvs_swapper_acquire(s, id, (void **)&w), 0, "%s",
			     nvs_last_error());
		for (size_t i = 0; i < SZ / 4; i++)
			w[i] = w[i] * 1664525u + 1013904223u + k * (id + 1);
		cr_assert_eq(nvs_swapper_release(s, id, true), 0);
		cr_assert_eq(nvs_swapper_evict(s, id), 0);
	}
	gen = nvs_swapper_checkpoint(s, "step");
	cr_assert_gt(gen, 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), gen, "%s",
		     nvs_last_error());
	return gen;
}

/* Every tensor of @x and @y holds the same bytes. */
static void same(struct nvs_swapper *x, struct nvs_swapper *y)
{
	for (uint64_t id = 0; id < NT; id++) {
		void *p, *q;
		cr_assert_eq(nvs_swapper_acquire(x, id, &p), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_swapper_acquire(y, id, &q), 0, "%s",
			     nvs_last_error());
		cr_assert(memcmp(p, q, SZ) == 0, "tensor %llu differs",
			  (unsigned long long)id);
		cr_assert_eq(nvs_swapper_release(x, id, false), 0);
		cr_assert_eq(nvs_swapper_release(y, id, false), 0);
		cr_assert_eq(nvs_swapper_evict(x, id), 0);
		cr_assert_eq(nvs_swapper_evict(y, id), 0);
	}
}

/* Tensors at their make_set() bytes. */
static void initial(struct nvs_swapper *s)
{
	char want[SZ];
	void *p;

	for (uint64_t id = 0; id < NT; id++) {
		tu_fill(want, SZ, id * 7919u + 1);
		cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s",
			     nvs_last_error());
		cr_assert(memcmp(p, want, SZ) == 0, "tensor %llu",
			  (unsigned long long)id);
		cr_assert_eq(nvs_swapper_release(s, id, false), 0);
	}
}

static const char *rankdir(const char *root)
{
	static char p[4200];

	snprintf(p, sizeof(p), "%s/nvswap/set/rank0", root);
	return p;
}

static const char *manifest(const char *root, unsigned gen)
{
	static char p[4300];

	snprintf(p, sizeof(p), "%.4200s/manifest.%020u", rankdir(root), gen);
	return p;
}

/* Whether file @path holds the bytes of @s. */
static bool file_has(const char *path, const char *s)
{
	size_t n;
	void *f = tu_read_file(path, &n);
	bool hit = memmem(f, n, s, strlen(s)) != NULL;

	free(f);
	return hit;
}

static int check(const char *a, const char *b)
{
	struct nvs_swapper_opts o;

	opts(&o, a, b, NVS_PERSIST_RESUME);
	return nvs_swapset_check(&o, NVS_CHECK_DATA, NULL, NULL);
}

Test(persist_move, a_copy_made_with_cp_a_trains_on_like_the_original)
{
	const char *orig = mkdir_real("orig");
	char copy[PATH_MAX];
	struct nvs_swapper *x, *y;

	make_set(orig, NULL);
	x = open2(orig, NULL, NVS_PERSIST_RESUME);
	cr_assert_eq(train(x, 1), 2);
	cr_assert_eq(nvs_swapper_destroy(x), 0, "%s", nvs_last_error());
	/* The manifests name no absolute path: a copy carries none. */
	cr_assert_not(file_has(manifest(orig, 2), orig));

	cp_a(orig, sub("copy"));
	cr_assert_not_null(realpath(sub("copy"), copy));
	cr_assert_eq(check(copy, NULL), 0, "%s", nvs_last_error());
	x = open2(orig, NULL, NVS_PERSIST_RESUME);
	y = open2(copy, NULL, NVS_PERSIST_RESUME);
	same(x, y);
	for (unsigned k = 2; k < 5; k++) {
		cr_assert_eq(train(x, k), (int)k + 1);
		cr_assert_eq(train(y, k), (int)k + 1);
		same(x, y);
	}
	cr_assert_eq(nvs_swapper_destroy(x), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(y), 0, "%s", nvs_last_error());
	cr_assert_eq(check(copy, NULL), 0, "%s", nvs_last_error());
	cr_assert_eq(check(orig, NULL), 0, "%s", nvs_last_error());
	x = open2(orig, NULL, NVS_PERSIST_RESUME);
	y = open2(copy, NULL, NVS_PERSIST_RESUME);
	same(x, y);
	cr_assert_eq(nvs_swapper_destroy(x), 0);
	cr_assert_eq(nvs_swapper_destroy(y), 0);
}

Test(persist_move, two_paths_on_one_filesystem_move_together)
{
	char a2[PATH_MAX], b2[PATH_MAX], want[200];
	const char *a, *b;
	struct nvs_swapper *s;

	mkdir_real("t1");
	a = mkdir_real("t1/a");
	b = mkdir_real("t1/b");
	make_set(a, b);
	cp_a(sub("t1"), sub("t2"));
	cr_assert_not_null(realpath(sub("t2/a"), a2));
	cr_assert_not_null(realpath(sub("t2/b"), b2));
	s = open2(a2, b2, NVS_PERSIST_RESUME);
	initial(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(check(a2, b2), 0, "%s", nvs_last_error());

	/* Half of it: path 1 is not where the set says. */
	cr_assert_eq(try_open(a2, b), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "has path 1 '../b' (relative to "
					   "path 0: '"),
		  "%s", nvs_last_error());
	snprintf(want, sizeof(want), "--relocate '%.90s=%.90s'", b2, b);
	cr_assert(strstr(nvs_last_error(), want), "%s", nvs_last_error());
}

Test(persist_move, a_copy_without_its_data_file_is_refused_naming_it)
{
	const char *orig = mkdir_real("orig");
	char copy[PATH_MAX], data[4300];

	make_set(orig, NULL);
	cp_a(orig, sub("copy"));
	cr_assert_not_null(realpath(sub("copy"), copy));
	snprintf(data, sizeof(data), "%.4200s/set.data", rankdir(copy));
	cr_assert_eq(unlink(data), 0);
	cr_assert_eq(try_open(copy, NULL), -EBADMSG);
	cr_assert(strstr(nvs_last_error(), data), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "is missing"), "%s",
		  nvs_last_error());
	cr_assert_eq(access(data, F_OK), -1, "nothing made in its place");
	cr_assert_eq(check(copy, NULL), -ENOENT, "nothing is judged");
	cr_assert(strstr(nvs_last_error(), "set.data is missing"), "%s",
		  nvs_last_error());
}

Test(persist_move, a_path_on_another_filesystem_is_recorded_whole)
{
	char mb[PATH_MAX], mb2[PATH_MAX], a2[PATH_MAX], want[PATH_MAX * 2 + 32];
	const char *a = mkdir_real("a");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	if (!tu_mount_private(sub("mnt"), "tmpfs", 0, "size=8m,mode=0700"))
		cr_skip_test("cannot mount a tmpfs here (%s): a second "
			     "filesystem is needed",
			     strerror(errno));
	cr_assert_eq(mkdir(sub("mnt/b"), 0700), 0);
	cr_assert_not_null(realpath(sub("mnt/b"), mb));
	make_set(a, mb);
	cr_assert(file_has(manifest(a, 1), mb), "recorded whole");
	cr_assert_not(file_has(manifest(a, 1), a));

	cp_a(a, sub("a2"));
	cp_a(mb, sub("mnt/b2"));
	cr_assert_not_null(realpath(sub("a2"), a2));
	cr_assert_not_null(realpath(sub("mnt/b2"), mb2));
	cr_assert_eq(try_open(a2, mb2), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "on another filesystem"), "%s",
		  nvs_last_error());
	snprintf(want, sizeof(want), "--relocate '%s=%s'", mb, mb2);
	cr_assert(strstr(nvs_last_error(), want), "%s", nvs_last_error());

	opts(&o, a2, mb2, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapset_relocate(&o, "/nowhere", "/else"), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "nothing was rewritten"), "%s",
		  nvs_last_error());
	cr_assert(file_has(manifest(a2, 1), mb), "unchanged");
	cr_assert_eq(nvs_swapset_relocate(&o, mb, mb2), 1, "%s",
		     nvs_last_error());
	cr_assert(file_has(manifest(a2, 1), mb2));
	cr_assert_eq(nvs_swapset_relocate(&o, mb, mb2), 0, "done already");
	s = open2(a2, mb2, NVS_PERSIST_RESUME);
	initial(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(check(a2, mb2), 0, "%s", nvs_last_error());
	/* The original is untouched. */
	s = open2(a, mb, NVS_PERSIST_RESUME);
	initial(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	umount2(sub("mnt"), MNT_DETACH);
}

/* Rewrite generation 1 of the set at @root as format 1 wrote it: version
 * 1, path 0 recorded whole. */
static void make_old_format(const char *root)
{
	struct nvs_manifest m;
	int fd = open(rankdir(root), O_RDONLY | O_DIRECTORY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(nvs__manifest_read(fd, rankdir(root), 1, &m), 0, "%s",
		     nvs_last_error());
	cr_assert_str_eq(m.paths[0], ".");
	nvs__free(m.paths[0]);
	m.paths[0] = nvs__malloc(strlen(root) + 1);
	strcpy(m.paths[0], root);
	m.version = 1;
	cr_assert_eq(nvs__manifest_write(fd, rankdir(root), &m), 0);
	nvs__manifest_fini(&m);
	close(fd);
}

Test(persist_move, an_old_format_set_opens_in_place_and_is_relocated)
{
	const char *old = mkdir_real("old");
	char moved[PATH_MAX], want[PATH_MAX * 2 + 32];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	make_set(old, NULL);
	make_old_format(old);
	cr_assert(file_has(manifest(old, 1), old));
	s = open2(old, NULL, NVS_PERSIST_RESUME);
	initial(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(check(old, NULL), 0, "%s", nvs_last_error());

	cp_a(old, sub("moved"));
	cr_assert_not_null(realpath(sub("moved"), moved));
	cr_assert_eq(try_open(moved, NULL), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "written by an older nvswap"), "%s",
		  nvs_last_error());
	snprintf(want, sizeof(want), "run nvswap-fsck --relocate '%s=%s'", old,
		 moved);
	cr_assert(strstr(nvs_last_error(), want), "%s", nvs_last_error());
	cr_assert_eq(check(moved, NULL), -EINVAL);

	opts(&o, moved, NULL, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapset_relocate(&o, old, moved), 1, "%s",
		     nvs_last_error());
	cr_assert_not(file_has(manifest(moved, 1), old));
	{
		size_t n;
		unsigned char *f = tu_read_file(manifest(moved, 1), &n);
		cr_assert_eq(f[8], NVS_MANIFEST_VERSION, "rewritten as new");
		free(f);
	}
	cr_assert_eq(check(moved, NULL), 0, "%s", nvs_last_error());
	s = open2(moved, NULL, NVS_PERSIST_RESUME);
	initial(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* NEW under OLD: the relative paths resolve against the new root and are
 * not moved a second time (OLD/moved/moved). */
Test(persist_move, relocating_into_a_subdirectory_of_the_old_root)
{
	const char *old = mkdir_real("o");
	char moved[PATH_MAX], cmd[PATH_MAX * 3 + 64];
	struct nvs_swapper_opts o;

	make_set(old, NULL);
	snprintf(cmd, sizeof(cmd),
		 "mkdir '%s/moved' && mv '%s/nvswap' "
		 "'%s/moved/'",
		 old, old, old);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	snprintf(moved, sizeof(moved), "%s/moved", old);
	opts(&o, moved, NULL, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapset_relocate(&o, old, moved), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(check(moved, NULL), 0, "%s", nvs_last_error());
}

/* A moved old-format set with one torn manifest: relocate leaves it for
 * the check, which judges it bad; the repair removes it and the set
 * opens at the generation that moved. */
Test(persist_move, relocate_leaves_a_torn_manifest_to_the_repair)
{
	const char *old = mkdir_real("old");
	char moved[PATH_MAX];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	make_set(old, NULL);
	s = open2(old, NULL, NVS_PERSIST_RESUME);
	cr_assert_eq(train(s, 1), 2);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	make_old_format(old);
	cp_a(old, sub("moved"));
	cr_assert_not_null(realpath(sub("moved"), moved));
	cr_assert_eq(truncate(manifest(moved, 2), 20), 0);
	opts(&o, moved, NULL, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapset_relocate(&o, old, moved), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapset_check(&o, NVS_CHECK_DATA | NVS_CHECK_REPAIR,
				       NULL, NULL),
		     1, "%s", nvs_last_error());
	cr_assert_eq(access(manifest(moved, 2), F_OK), -1);
	s = open2(moved, NULL, NVS_PERSIST_RESUME);
	initial(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
