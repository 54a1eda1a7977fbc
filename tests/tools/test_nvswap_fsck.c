// SPDX-License-Identifier: MIT
/*
 * nvswap-fsck as users run it, on sets made through the library: a sound
 * set verifies (exit 0); a flipped data byte fails the generations that
 * use the tensor (exit 4) and --repair removes exactly those (exit 1), so
 * the set reopens at the good one; a torn manifest is a bad generation;
 * a set in use, a missing set and bad usage are refused (8, 8, 16).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nvswap_fsck, .fini = fini);

enum { BUF = 64 << 10, SZ = 30000, NT = 4 };

static void opts(struct nvs_swapper_opts *o)
{
	nvs_swapper_opts_init(o);
	o->npaths = 1;
	o->nvme_paths[0] = tu_dir();
	o->buffer_size = BUF;
	o->buffer_count = 2;
	o->name = "param";
	o->persist = NVS_PERSIST_PERSISTENT;
	o->keep_generations = 3;
}

static void pattern(void *p, uint64_t id, unsigned k)
{
	tu_fill(p, SZ, id * 7919u + k);
}

/* Generation 1: all tensors at step 1; generation 2: tensor 2 at step 2;
 * closing adds nothing (nothing changed since). */
static void make_set(void)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	char buf[SZ];
	void *p;

	opts(&o);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (uint64_t id = 0; id < NT; id++) {
		pattern(buf, id, 1);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0);
	}
	cr_assert_eq(nvs_swapper_checkpoint(s, "a"), 1, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0);
	pattern(p, 2, 2);
	cr_assert_eq(nvs_swapper_release(s, 2, true), 0);
	cr_assert_eq(nvs_swapper_checkpoint(s, "b"), 2, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

static struct tu_out fsck(const char *args)
{
	const char *bin = getenv("NVSWAP_FSCK");
	char cmd[8192];

	cr_assert_not_null(bin, "NVSWAP_FSCK is set by tests/meson.build");
	snprintf(cmd, sizeof(cmd), "%s --nvme-path %s --name param %s", bin,
		 tu_dir(), args);
	return tu_run(cmd);
}

static const char *data(void)
{
	return tu_path("nvswap/param/rank0/set.data");
}

/* Flip the byte @at bytes into where tensor @id's step @k bytes lie. */
static void flip_tensor(uint64_t id, unsigned k, size_t at)
{
	char want[SZ];
	size_t n;
	unsigned char *file = tu_read_file(data(), &n);
	unsigned char *hit;
	int fd;

	pattern(want, id, k);
	hit = memmem(file, n, want, 256);
	cr_assert_not_null(hit, "tensor %llu's bytes are in the file",
			   (unsigned long long)id);
	fd = open(data(), O_WRONLY);
	unsigned char c = (unsigned char)~hit[at];
	cr_assert_eq(pwrite(fd, &c, 1, (off_t)(hit - file) + (off_t)at), 1);
	close(fd);
	free(file);
}

Test(nvswap_fsck, a_sound_set_verifies)
{
	struct tu_out o;

	make_set();
	o = fsck("");
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "generation 1: verifies (4 tensors)"), "%s",
		  o.out);
	cr_assert(strstr(o.out, "generation 2: verifies (4 tensors)"), "%s",
		  o.out);
	cr_assert_null(strstr(o.out, "generation 3"), "%s", o.out);
	cr_assert(strstr(o.out, "generation 2 tensor 2 (30000 bytes): ok "
				"(crc32c"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "generation 2 tensor 1 (30000 bytes): ok "
				"(crc32c"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "the set verifies"), "%s", o.out);
	tu_out_free(&o);
}

Test(nvswap_fsck, a_flipped_byte_fails_its_generations_and_repair_drops_them)
{
	struct nvs_swapper_opts opt;
	struct nvs_swapper *s = NULL;
	struct tu_out o;
	char want[SZ];
	void *p;

	make_set();
	flip_tensor(2, 2, 1000); /* the copy generation 2 uses */
	o = fsck("--quiet");
	cr_assert_eq(o.status, 4, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "generation 2 tensor 2 (30000 bytes): BAD: "
				"checksum mismatch"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "generation 1: verifies"), "%s", o.out);
	cr_assert(strstr(o.out, "generation 2: BAD: 1 of 4 tensors do not "
				"verify"),
		  "%s", o.out);
	cr_assert_null(strstr(o.out, "tensor 1 "), "--quiet: %s", o.out);
	cr_assert(strstr(o.out, "1 generation(s) do not verify; --repair"),
		  "%s", o.out);
	tu_out_free(&o);

	o = fsck("--repair");
	cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "(manifest removed)"), "%s", o.out);
	tu_out_free(&o);
	cr_assert_eq(access(tu_path("nvswap/param/rank0/"
				    "manifest.00000000000000000001"),
			    F_OK),
		     0);
	cr_assert_eq(access(tu_path("nvswap/param/rank0/"
				    "manifest.00000000000000000002"),
			    F_OK),
		     -1);
	o = fsck("");
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	tu_out_free(&o);

	/* The set reopens at generation 1: tensor 2 at step 1. */
	opts(&opt);
	opt.persist = NVS_PERSIST_RESUME;
	cr_assert_eq(nvs_swapper_create(&opt, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	pattern(want, 2, 1);
	cr_assert(memcmp(p, want, SZ) == 0);
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(nvswap_fsck, a_torn_manifest_is_a_bad_generation)
{
	const char *m = tu_path("nvswap/param/rank0/"
				"manifest.00000000000000000002");
	struct tu_out o;

	make_set();
	cr_assert_eq(truncate(m, tu_file_size(m) - 7), 0);
	o = fsck("--no-data");
	cr_assert_eq(o.status, 4, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "generation 2: BAD: nvswap: manifest"), "%s",
		  o.out);
	cr_assert(strstr(o.out, "generation 1: verifies"), "%s", o.out);
	cr_assert(strstr(o.out, "extents ok (data not read)"), "%s", o.out);
	tu_out_free(&o);
}

Test(nvswap_fsck, refusals)
{
	struct nvs_swapper_opts opt;
	struct nvs_swapper *s = NULL;
	struct tu_out o;

	o = fsck("");
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "no swap set in"), "%s", o.err);
	tu_out_free(&o);
	make_set();
	opts(&opt);
	cr_assert_eq(nvs_swapper_create(&opt, &s), 0, "%s", nvs_last_error());
	o = fsck("");
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "is in use by process"), "%s", o.err);
	tu_out_free(&o);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	o = fsck("--rank x");
	cr_assert_eq(o.status, 16, "%s%s", o.out, o.err);
	tu_out_free(&o);
	o = fsck("extra");
	cr_assert_eq(o.status, 16, "%s%s", o.out, o.err);
	tu_out_free(&o);
}

/* nvswap-fsck with the arguments @fmt makes of up to three strings. */
static struct tu_out fsck_raw(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static struct tu_out fsck_raw(const char *fmt, ...)
{
	const char *bin = getenv("NVSWAP_FSCK");
	char args[8192], cmd[8400];
	va_list ap;

	cr_assert_not_null(bin, "NVSWAP_FSCK is set by tests/meson.build");
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
	return tu_run(cmd);
}

/* A set of @n tensors named @name over @a (and @b), one generation. */
static void make_named(const char *name, const char *a, const char *b,
		       unsigned n)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	char buf[SZ];

	opts(&o);
	o.name = name;
	o.nvme_paths[0] = a;
	o.npaths = b ? 2 : 1;
	o.nvme_paths[1] = b;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (uint64_t id = 0; id < n; id++) {
		pattern(buf, id, 1);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0);
	}
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(nvswap_fsck, without_a_name_every_set_under_the_path_is_listed_and_checked)
{
	char want[8400];
	struct tu_out o;

	o = fsck_raw("--path %s", tu_dir());
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	snprintf(want, sizeof(want), "nvswap-fsck: no swap set under %s",
		 tu_dir());
	cr_assert(strstr(o.err, want), "%s", o.err);
	tu_out_free(&o);

	make_set();
	make_named("optimizer", tu_dir(), NULL, 1);
	o = fsck_raw("--path %s", tu_dir());
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	snprintf(
		want, sizeof(want),
		"set \"param\" rank 0 in %s/nvswap/param/rank0: 2 "
		"generation(s) 1..2, newest: 4 tensors (117.2 KiB), 1 path(s), "
		"set.data ",
		tu_dir());
	cr_assert(strstr(o.out, want), "%s", o.out);
	snprintf(want, sizeof(want),
		 "set \"optimizer\" rank 0 in %s/nvswap/optimizer/rank0: 1 "
		 "generation(s) 1..1, newest: 1 tensors (29.3 KiB)",
		 tu_dir());
	cr_assert(strstr(o.out, want), "%s", o.out);
	cr_assert(strstr(o.out, "checking set \"param\" rank 0\n"), "%s",
		  o.out);
	cr_assert(strstr(o.out, "checking set \"optimizer\" rank 0\n"
				"generation 1 tensor 0 (30000 bytes): ok"),
		  "%s", o.out);
	cr_assert(strstr(strstr(o.out, "the set verifies"), "the set verifies"),
		  "%s", o.out);
	tu_out_free(&o);

	/* Open: listed as held by this process, and not checked; a copy
	 * made meanwhile (its lock file names this process) is not held. */
	{
		struct nvs_swapper_opts opt;
		struct nvs_swapper *s = NULL;
		char cp[9000];

		opts(&opt);
		cr_assert_eq(nvs_swapper_create(&opt, &s), 0, "%s",
			     nvs_last_error());
		o = fsck_raw("--path %s", tu_dir());
		cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
		snprintf(want, sizeof(want), ", in use by process %ld\n",
			 (long)getpid());
		cr_assert(strstr(o.out, want), "%s", o.out);
		cr_assert(strstr(o.err, "is in use by process"), "%s", o.err);
		tu_out_free(&o);
		snprintf(cp, sizeof(cp), "cp -a %s/nvswap %s/copy", tu_dir(),
			 tu_dir());
		cr_assert_eq(system(cp), 0);
		snprintf(cp, sizeof(cp), "mkdir %s/c && mv %s/copy %s/c/nvswap",
			 tu_dir(), tu_dir(), tu_dir());
		cr_assert_eq(system(cp), 0);
		snprintf(cp, sizeof(cp), "%s/c", tu_dir());
		o = fsck_raw("--path %s --quiet", cp);
		cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
		cr_assert_null(strstr(o.out, "in use"), "%s", o.out);
		tu_out_free(&o);
		cr_assert_eq(nvs_swapper_destroy(s), 0);
	}

	/* --rank picks: no set of rank 3. */
	o = fsck_raw("--path %s --rank 3", tu_dir());
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "no swap set under"), "%s", o.err);
	cr_assert_null(strstr(o.err, "nvswap-fsck: nvswap-fsck"), "%s", o.err);
	tu_out_free(&o);
}

Test(nvswap_fsck, repairing_the_only_generation_leaves_nothing_behind)
{
	struct tu_out o;

	make_named("param", tu_dir(), NULL, 2);
	flip_tensor(1, 1, 10);
	o = fsck("--repair");
	cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "generation 1: BAD: 1 of 2 tensors do not "
				"verify (manifest removed)\n"
				"set: no generation is left: the set's data "
				"files, locks and empty directories were "
				"removed"),
		  "%s", o.out);
	tu_out_free(&o);
	cr_assert_eq(access(data(), F_OK), -1, "no bare set.data");
	cr_assert_eq(access(tu_path("nvswap"), F_OK), -1, "nothing at all");
	o = fsck("");
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	/* in the user's words: no library function's name */
	cr_assert(strstr(o.err, "nvswap-fsck: no swap set in"), "%s", o.err);
	cr_assert_null(strstr(o.err, "nvs_"), "%s", o.err);
	tu_out_free(&o);
}

/* A tmpfs at <test dir>/mnt, private to this test: a second filesystem
 * for a set's path 1 (the test is skipped, saying why, where no mount
 * can be made). */
static void second_fs(char *mnt, size_t len)
{
	snprintf(mnt, len, "%.4000s/mnt", tu_dir());
	if (!tu_mount_private(mnt, "tmpfs", 0, "size=8m,mode=0700"))
		cr_skip_test("cannot mount a tmpfs here (%s): a second "
			     "filesystem is needed",
			     strerror(errno));
}

Test(nvswap_fsck, a_copy_verifies_and_relocate_moves_a_path_on_another_fs)
{
	char a[4200], a2[4200], mnt[4100], b[4200], b2[4200], want[40000];
	char rb[PATH_MAX], rb2[PATH_MAX];
	struct tu_out o;

	snprintf(a, sizeof(a), "%s/a", tu_dir());
	snprintf(a2, sizeof(a2), "%s/a2", tu_dir());
	cr_assert_eq(mkdir(a, 0700), 0);
	make_named("param", a, NULL, 2);
	snprintf(want, sizeof(want), "cp -a %s %s", a, a2);
	cr_assert_eq(system(want), 0);
	o = fsck_raw("--path %s --name param", a2);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "the set verifies"), "%s", o.out);
	tu_out_free(&o);

	second_fs(mnt, sizeof(mnt));
	snprintf(b, sizeof(b), "%s/b", mnt);
	snprintf(b2, sizeof(b2), "%s/b2", mnt);
	cr_assert_eq(mkdir(b, 0700), 0);
	make_named("two", a, b, 2);
	snprintf(want, sizeof(want), "rm -rf %s && cp -a %s %s && cp -a %s %s",
		 a2, a, a2, b, b2);
	cr_assert_eq(system(want), 0);
	cr_assert_not_null(realpath(b, rb));
	cr_assert_not_null(realpath(b2, rb2));
	o = fsck_raw("--path %s --path %s --name two", a2, b2);
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	snprintf(want, sizeof(want), "--relocate '%s=%s'", rb, rb2);
	cr_assert(strstr(o.err, want), "%s", o.err);
	tu_out_free(&o);
	/* Without --name, one --path: each set listed is relocated (path 1
	 * read from its manifest, moved by --relocate) and checked. */
	snprintf(want, sizeof(want), "--relocate %s=%s", rb, rb2);
	o = fsck_raw("--path %s %s", a2, want);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "checking set \"param\" rank 0\n"
				"relocated: 0 manifest(s) rewritten\n"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "checking set \"two\" rank 0\n"
				"relocated: 1 manifest(s) rewritten\n"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "2 path(s)"), "%s", o.out);
	tu_out_free(&o);
	o = fsck_raw("--path %s --path %s --name two %s", a2, b2, want);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "relocated: 0 manifest(s) rewritten\n"), "%s",
		  o.out);
	cr_assert(strstr(o.out, "the set verifies"), "%s", o.out);
	tu_out_free(&o);
	/* The original, in place, is untouched. */
	o = fsck_raw("--path %s --path %s --name two", a, b);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	tu_out_free(&o);
	umount2(mnt, MNT_DETACH);
}

Test(nvswap_fsck, a_missing_path_or_a_stray_argument_is_one_line)
{
	struct tu_out o = fsck_raw("--name param");

	cr_assert_eq(o.status, 16, "%s%s", o.out, o.err);
	cr_assert_str_eq(o.err, "nvswap-fsck: --nvme-path DIR is required: a "
				"directory of the set to check (see "
				"nvswap-fsck --help)\n");
	cr_assert_str_empty(o.out);
	tu_out_free(&o);
	o = fsck_raw("--path %s extra", tu_dir());
	cr_assert_eq(o.status, 16, "%s%s", o.out, o.err);
	cr_assert_str_eq(o.err, "nvswap-fsck: unexpected argument 'extra' "
				"(see nvswap-fsck --help)\n");
	tu_out_free(&o);
}

Test(nvswap_fsck, an_unknown_option_is_named_without_the_whole_help)
{
	struct tu_out o = fsck_raw("--path %s --no_data", tu_dir());

	cr_assert_eq(o.status, 16, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "nvswap-fsck: unknown option '--no_data'; "
				"did you mean '--no-data'?\n"
				"see nvswap-fsck --help\n"),
		  "%s", o.err);
	cr_assert_null(strstr(o.err, "usage:"), "%s", o.err);
	tu_out_free(&o);
	o = fsck_raw("--path %s --relocate nonsense", tu_dir());
	cr_assert_eq(o.status, 16, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "--relocate: OLD=NEW, both absolute paths"),
		  "%s", o.err);
	tu_out_free(&o);
}

/* A set over two paths whose second set.data is missing (a partly
 * copied set): nothing can be judged, so nothing is repaired; the
 * intact path's data stays. */
Test(nvswap_fsck, a_missing_data_file_is_not_checked_nor_repaired)
{
	char a[4200], b[4200], bd[4300];
	struct tu_out o;

	snprintf(a, sizeof(a), "%s/a", tu_dir());
	snprintf(b, sizeof(b), "%s/b", tu_dir());
	cr_assert_eq(mkdir(a, 0700), 0);
	cr_assert_eq(mkdir(b, 0700), 0);
	make_named("two", a, b, 2);
	snprintf(bd, sizeof(bd), "%s/nvswap/two/rank0/set.data", b);
	cr_assert_eq(unlink(bd), 0);
	o = fsck_raw("--path %s --path %s --name two --repair", a, b);
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, bd), "%s", o.err);
	cr_assert_null(strstr(o.out, "removed"), "%s", o.out);
	tu_out_free(&o);
	snprintf(bd, sizeof(bd), "%s/nvswap/two/rank0/set.data", a);
	cr_assert_eq(access(bd, F_OK), 0, "path 0's data is kept");
}

/* The holder's flock listed in /proc/locks under another device than
 * stat gives (btrfs): faked by a /proc/locks bound over the real one.
 * The live pid the lock file names holds an flock on that inode number,
 * and the listing says where the pid came from. */
Test(nvswap_fsck, a_holder_not_in_proc_locks_is_taken_from_the_lock_file)
{
	struct nvs_swapper_opts opt;
	struct nvs_swapper *s = NULL;
	char want[128], mnt[4200];
	struct tu_out o;
	struct stat st;
	FILE *f;

	make_set();
	opts(&opt);
	cr_assert_eq(nvs_swapper_create(&opt, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(stat(tu_path("nvswap/param/rank0/lock"), &st), 0);
	f = fopen(tu_path("locks"), "w");
	cr_assert_not_null(f);
	fprintf(f, "1: FLOCK  ADVISORY  WRITE %ld 00:99:%lu 0 EOF\n",
		(long)getpid(), (unsigned long)st.st_ino);
	fclose(f);
	snprintf(mnt, sizeof(mnt), "%.4000s/mnt", tu_dir());
	if (!tu_mount_private(mnt, "tmpfs", 0, "size=1m") ||
	    mount(tu_path("locks"), "/proc/locks", NULL, MS_BIND, NULL) < 0)
		cr_skip_test("cannot fake /proc/locks here (%s)",
			     strerror(errno));
	o = fsck_raw("--path %s", tu_dir());
	snprintf(want, sizeof(want),
		 ", in use: held by pid %ld (from the lock file)\n",
		 (long)getpid());
	cr_assert(strstr(o.out, want), "%s%s", o.out, o.err);
	tu_out_free(&o);
	umount2("/proc/locks", MNT_DETACH);
	umount2(mnt, MNT_DETACH);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* Without --name, one --path: a path recorded relative is taken as it
 * resolves there; one recorded whole (another filesystem) names the
 * original's directory, so a copy is not checked (nor repaired) against
 * it: a --path per path is asked for. */
Test(nvswap_fsck, a_path_recorded_whole_is_not_inferred_for_a_copy)
{
	char a[4200], a2[4200], a3[4200], ab[4300], mnt[4100], b[4200];
	char cmd[9000];
	struct tu_out o;

	snprintf(a, sizeof(a), "%s/a", tu_dir());
	snprintf(a2, sizeof(a2), "%s/a2", tu_dir());
	snprintf(a3, sizeof(a3), "%s/a3", tu_dir());
	snprintf(ab, sizeof(ab), "%s/a/b", tu_dir());
	cr_assert_eq(mkdir(a, 0700), 0);
	cr_assert_eq(mkdir(ab, 0700), 0);
	make_named("rel", a, ab, 2);
	snprintf(cmd, sizeof(cmd), "cp -a %s %s", a, a3);
	cr_assert_eq(system(cmd), 0);
	o = fsck_raw("--path %s", a3);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	tu_out_free(&o);

	second_fs(mnt, sizeof(mnt));
	snprintf(b, sizeof(b), "%s/b", mnt);
	cr_assert_eq(mkdir(b, 0700), 0);
	make_named("two", a, b, 2);
	snprintf(cmd, sizeof(cmd), "cp -a %s %s", a, a2);
	cr_assert_eq(system(cmd), 0);
	o = fsck_raw("--path %s --repair", a2);
	cr_assert_eq(o.status, 8, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "not checked: path 1"), "%s", o.err);
	cr_assert(strstr(o.err, "with --nvme-path"), "%s", o.err);
	tu_out_free(&o);
	umount2(mnt, MNT_DETACH);
}

/* One directory given twice, in any spelling (as is, with a trailing
 * slash, through a symlink, as ./X from its parent): refused naming both
 * --path options and the rule, never checked against itself ("in use by
 * process <fsck's own pid>"). */
Test(nvswap_fsck, the_same_directory_twice_is_refused_naming_both)
{
	char link[4200], parent[4200], cmd[8800];
	const char *base;
	struct tu_out o;

	make_set();
	snprintf(link, sizeof(link), "%s/link", tu_dir());
	cr_assert_eq(symlink(tu_dir(), link), 0);
	snprintf(parent, sizeof(parent), "%s", tu_dir());
	base = strrchr(tu_dir(), '/') + 1;
	*strrchr(parent, '/') = '\0';
	const char *twice[][2] = {
		{tu_dir(), tu_dir()},
		{tu_dir(), NULL}, /* with a trailing slash */
		{tu_dir(), link},
	};
	for (unsigned k = 0; k < 4; k++) {
		for (unsigned named = 0; named < 2; named++) {
			char second[4300];
			const char *first = tu_dir();

			if (k == 1)
				snprintf(second, sizeof(second), "%s/",
					 tu_dir());
			else if (k == 3) /* ./X, run from X's parent */
				snprintf(second, sizeof(second), "./%s", base);
			else
				snprintf(second, sizeof(second), "%s",
					 twice[k][1]);
			snprintf(cmd, sizeof(cmd),
				 "cd %s && %s --path %s --path %s%s", parent,
				 getenv("NVSWAP_FSCK"), first, second,
				 named ? " --name param" : "");
			o = tu_run(cmd);
			cr_assert_eq(o.status, 16, "%s: %s%s", cmd, o.out,
				     o.err);
			char want[9000];
			snprintf(
				want, sizeof(want),
				"nvswap-fsck: --nvme-path '%s' and --nvme-path '%s' "
				"are the same directory: give each of the "
				"set's directories once\n",
				first, second);
			cr_assert(strstr(o.err, want), "%s: %s", cmd, o.err);
			cr_assert_null(strstr(o.err, "in use"), "%s", o.err);
			cr_assert_null(strstr(o.out, "in use"), "%s", o.out);
			tu_out_free(&o);
		}
	}
}
