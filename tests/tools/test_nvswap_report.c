// SPDX-License-Identifier: MIT
/*
 * nvswap-report as users run it: the JSON report has every field, and an
 * unusable path (under a file, read-only), one in memory (tmpfs) or a
 * small memlock limit is a problem line with its fix (exit status 1 when
 * nothing usable is found); a missing path is judged where nvswap would
 * make it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nvswap_report, .fini = fini);

static struct tu_out report(const char *prefix, const char *args)
{
	const char *bin = getenv("NVSWAP_REPORT");
	char cmd[8192];

	cr_assert_not_null(bin, "NVSWAP_REPORT is set by tests/meson.build");
	snprintf(cmd, sizeof(cmd), "%s %s %s", prefix ? prefix : "", bin, args);
	return tu_run(cmd);
}

/* nvswap-report --nvme-path @path: exit @status, and what @fmt makes in
 * what it prints. */
static void report_says(const char *path, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void report_says(const char *path, int status, const char *fmt, ...)
{
	char args[4200], want[4400];
	struct tu_out o;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	snprintf(args, sizeof(args), "--nvme-path %s", path);
	o = report(NULL, args);
	cr_assert_eq(o.status, status, "%s", o.out);
	cr_assert(strstr(o.out, want), "no '%s' in:\n%s", want, o.out);
	tu_out_free(&o);
}

/* A private tmpfs at tu_path(@name) mounted with @flags and @opts; the
 * test is skipped, saying why, where mounting is not allowed. */
static const char *tmpfs_or_skip(const char *name, unsigned long flags,
				 const char *opts)
{
	const char *mnt = tu_path(name);

	if (!tu_mount_private(mnt, "tmpfs", flags, opts))
		cr_skip_test("cannot mount a tmpfs here (%s): needs root and "
			     "mount namespaces",
			     strerror(errno));
	return mnt;
}

static void has(json_t *o, const char *key, int type)
{
	json_t *v = json_object_get(o, key);

	cr_assert_not_null(v, "field %s", key);
	if (type >= 0)
		cr_assert_eq(json_typeof(v), type, "type of %s", key);
}

Test(nvswap_report, the_json_report_has_every_field)
{
	char args[4200];
	json_error_t err;
	struct tu_out o;
	json_t *r, *p, *b, *m;
	size_t i;

	snprintf(args, sizeof(args), "--nvme-path %s --json", tu_dir());
	o = report(NULL, args);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = json_loads(o.out, 0, &err);
	cr_assert_not_null(r, "%s: %s", err.text, o.out);
	has(r, "version", JSON_STRING);
	has(r, "build_features", JSON_STRING);
	cr_assert(
		strstr(json_string_value(json_object_get(r, "build_features")),
		       "liburing"));
	has(r, "copy_impl", JSON_STRING);
	has(r, "cuda", JSON_STRING);
	has(r, "gds", JSON_OBJECT);
	json_t *g = json_object_get(r, "gds");
	has(g, "cufile", -1);
	cr_assert(json_is_string(json_object_get(g, "cufile")) ||
		  json_is_null(json_object_get(g, "cufile")));
	cr_assert(json_is_boolean(json_object_get(g, "nvidia_fs")));
	cr_assert(json_is_boolean(json_object_get(g, "used_by_nvswap")));
	has(r, "gpu", JSON_OBJECT);
	has(json_object_get(r, "gpu"), "device_count", JSON_INTEGER);
	has(json_object_get(r, "gpu"), "status", JSON_STRING);
	has(r, "problems", JSON_ARRAY);
	cr_assert(json_is_true(json_object_get(r, "usable")));
	cr_assert_eq(json_array_size(json_object_get(r, "backends")), 3);
	json_array_foreach(json_object_get(r, "backends"), i, b)
	{
		has(b, "name", JSON_STRING);
		cr_assert(json_is_boolean(json_object_get(b, "available")));
		if (!json_is_true(json_object_get(b, "available")))
			has(b, "why", JSON_STRING);
	}
	cr_assert_str_eq(
		json_string_value(json_object_get(
			json_array_get(json_object_get(r, "backends"), 2),
			"name")),
		"psync");
	p = json_object_get(r, "nvme_path");
	cr_assert_str_eq(json_string_value(json_object_get(p, "path")),
			 tu_dir());
	has(p, "filesystem", JSON_STRING);
	has(p, "free_bytes", JSON_INTEGER);
	cr_assert_gt(json_integer_value(json_object_get(p, "free_bytes")), 0);
	cr_assert(json_is_boolean(json_object_get(p, "read_only")));
	has(p, "device", JSON_OBJECT);
	has(json_object_get(p, "device"), "name", -1);
	b = json_object_get(p, "direct_io");
	cr_assert(json_is_true(json_object_get(b, "writable")));
	if (json_is_true(json_object_get(b, "o_direct"))) {
		has(b, "memory_alignment", JSON_INTEGER);
		has(b, "offset_alignment", JSON_INTEGER);
		has(b, "alignment_from", JSON_STRING);
	}
	m = json_object_get(r, "memory");
	has(m, "memlock_limit", -1);
	has(m, "available_bytes", JSON_INTEGER);
	has(m, "pinnable_bytes", JSON_INTEGER);
	cr_assert_gt(json_integer_value(json_object_get(m, "pinnable_bytes")),
		     0);
	has(m, "pinned_probe", JSON_OBJECT);
	cr_assert(json_is_true(json_object_get(
			  json_object_get(m, "pinned_probe"), "ok")),
		  "a small buffer can be locked here");
	has(m, "huge_pages", JSON_OBJECT);
	has(json_object_get(m, "huge_pages"), "total", JSON_INTEGER);
	has(json_object_get(m, "huge_pages"), "transparent", JSON_STRING);
	json_decref(r);
	tu_out_free(&o);
	/* It leaves nothing behind in the path. */
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "ls -A %s | grep -q nvswap-report",
		 tu_dir());
	cr_assert_neq(system(cmd), 0, "its probe file was removed");
}

Test(nvswap_report, says_which_backend_auto_gets_and_why)
{
	char args[4200];
	json_error_t err;
	struct tu_out o;
	json_t *r, *d;

	snprintf(args, sizeof(args), "--nvme-path %s --json", tu_dir());
	o = report("NVSWAP_BACKEND=psync", args);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = json_loads(o.out, 0, &err);
	cr_assert_not_null(r, "%s: %s", err.text, o.out);
	d = json_object_get(r, "default_backend");
	cr_assert_not_null(d, "%s", o.out);
	cr_assert_str_eq(json_string_value(json_object_get(d, "name")),
			 "psync");
	cr_assert_str_eq(json_string_value(json_object_get(d, "reason")),
			 "NVSWAP_BACKEND");
	/* The explicit probes of each backend are not steered by it. */
	cr_assert_str_eq(
		json_string_value(json_object_get(
			json_array_get(json_object_get(r, "backends"), 0),
			"name")),
		"io_uring");
	json_decref(r);
	tu_out_free(&o);
	snprintf(args, sizeof(args), "--nvme-path %s", tu_dir());
	o = report("NVSWAP_BACKEND=psync", args);
	cr_assert(strstr(o.out, "default   psync, chosen by NVSWAP_BACKEND"),
		  "%s", o.out);
	tu_out_free(&o);
}

/* First contact 2, item 4: the library makes a missing nvme_path (and
 * removes it when done), so the report judges where it would be made,
 * says so, and makes nothing; a path under a file is the problem. */
Test(nvswap_report, a_missing_path_is_judged_where_nvswap_would_make_it)
{
	char args[4400], want[4600], file[4200];
	struct tu_out o;
	struct stat st;
	json_error_t err;
	json_t *r, *p;

	snprintf(args, sizeof(args), "--nvme-path %s/a/b", tu_dir());
	o = report(NULL, args);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	snprintf(want, sizeof(want),
		 "nvme_path %s/a/b:\n  (does not exist yet: nvswap makes it, "
		 "and removes it when done; checked %s)\n",
		 tu_dir(), tu_dir());
	cr_assert(strstr(o.out, want), "%s", o.out);
	cr_assert(strstr(o.out, "verdict: nvswap can run here"), "%s", o.out);
	cr_assert_null(strstr(o.out, "a/b: No such file"), "%s", o.out);
	tu_out_free(&o);
	snprintf(args, sizeof(args), "--nvme-path %s/a/b --json", tu_dir());
	o = report(NULL, args);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = json_loads(o.out, 0, &err);
	cr_assert_not_null(r, "%s: %s", err.text, o.out);
	p = json_object_get(r, "nvme_path");
	cr_assert(json_is_false(json_object_get(p, "exists")));
	cr_assert_str_eq(json_string_value(json_object_get(p, "checked")),
			 tu_dir());
	json_decref(r);
	tu_out_free(&o);
	snprintf(want, sizeof(want), "%s/a", tu_dir());
	cr_assert_eq(stat(want, &st), -1, "the report made %s", want);

	snprintf(file, sizeof(file), "%s/file", tu_dir());
	tu_write_file(file, "x", 1);
	snprintf(args, sizeof(args), "%s/sub", file);
	/* 1: not usable */
	report_says(args, 1,
		    "problem: nvme_path %s/sub: Not a directory\n  fix: give "
		    "--nvme-path a directory on the disk to swap to (nvswap "
		    "makes one that does not exist)\n",
		    file);
}

/* Swapping to memory defeats the purpose: a tmpfs path works, and is a
 * problem with its fix. */
Test(nvswap_report, a_path_in_memory_is_named_as_a_problem)
{
	const char *mnt = tmpfs_or_skip("shm", 0, "size=4m");

	report_says(mnt, 0, /* 0: it works */
		    "problem: %s is on tmpfs: swap files there live in memory, "
		    "which offloading is meant to spare\n  fix: choose a "
		    "directory on the NVMe disk (--nvme-path, nvme_path)\n",
		    mnt);
	umount2(mnt, MNT_DETACH);
}

Test(nvswap_report, a_read_only_filesystem_is_not_usable)
{
	const char *mnt = tmpfs_or_skip("ro", MS_RDONLY, "size=1m");
	char args[4200];
	struct tu_out o;

	snprintf(args, sizeof(args), "--nvme-path %s", mnt);
	o = report(NULL, args);
	umount2(mnt, MNT_DETACH);
	cr_assert_eq(o.status, 1, "%s", o.out);
	cr_assert(strstr(o.out, "Read-only file system"), "%s", o.out);
	cr_assert(strstr(o.out, "tmpfs"), "%s", o.out);
	tu_out_free(&o);
}

Test(nvswap_report, a_small_memlock_limit_is_named_with_the_fix)
{
	char args[4200];
	struct tu_out o;

	if (!tu_nobody_prefix(8 << 20))
		cr_skip_test("needs root, setpriv and prlimit to run as "
			     "nobody under a small memlock limit");
	cr_assert_eq(chmod(tu_dir(), 0777), 0);
	snprintf(args, sizeof(args), "--nvme-path %s", tu_dir());
	o = report(tu_nobody_prefix(8 << 20), args);
	cr_assert_eq(o.status, 0, "still usable: %s%s", o.out, o.err);
	cr_assert(strstr(o.out, "memlock     8.0 MiB"), "%s", o.out);
	cr_assert(strstr(o.out, "pinnable    up to 8.0 MiB"), "%s", o.out);
	cr_assert(strstr(o.out, "a 4.0 MiB probe locked fine"), "%s", o.out);
	cr_assert(strstr(o.out, "fix: raise it: ulimit -l"), "%s", o.out);
	tu_out_free(&o);
	/* One page of limit leaves no room for even the probe. */
	o = report(tu_nobody_prefix(4096), args);
	cr_assert(strstr(o.out, "no room left under the memlock limit"), "%s",
		  o.out);
	cr_assert(strstr(o.out, "problem: locking a small pinned buffer "
				"failed"),
		  "%s", o.out);
	tu_out_free(&o);
}

/* Hostile input 13: a full filesystem is not usable, and the fix is to
 * free space, not to fix permissions. */
Test(nvswap_report, a_full_filesystem_is_not_usable)
{
	const char *mnt = tmpfs_or_skip("full", 0, "size=1m");
	char args[4200], fill[4300];
	struct tu_out o;

	snprintf(fill, sizeof(fill),
		 "dd if=/dev/zero of=%s/fill bs=64k 2>/dev/null", mnt);
	cr_assert_neq(system(fill), 0, "dd stops at ENOSPC");
	snprintf(args, sizeof(args), "--nvme-path %s", mnt);
	o = report(NULL, args);
	umount2(mnt, MNT_DETACH);
	cr_assert_eq(o.status, 1, "%s", o.out);
	cr_assert(strstr(o.out, "is full: 0 bytes free"), "%s", o.out);
	cr_assert(strstr(o.out, "fix: free space on that filesystem"), "%s",
		  o.out);
	cr_assert(strstr(o.out, "verdict: NOT usable here"), "%s", o.out);
	tu_out_free(&o);
}

/* Hostile input 13: with memlock 0, io_uring's refusal (ENOMEM) is the
 * memlock limit's doing, not kernel.io_uring_disabled's (already 0). */
Test(nvswap_report, a_memlock_limit_of_0_blames_memlock_not_the_sysctl)
{
	char args[4200];
	struct tu_out o;

	if (!tu_nobody_prefix(0))
		cr_skip_test("needs root, setpriv and prlimit to run as "
			     "nobody with memlock 0");
	cr_assert_eq(chmod(tu_dir(), 0777), 0);
	snprintf(args, sizeof(args), "--nvme-path %s", tu_dir());
	o = report(tu_nobody_prefix(0), args);
	if (!strstr(o.out, "io_uring  NOT available")) {
		tu_out_free(&o);
		cr_skip_test("this kernel gives io_uring rings without "
			     "locked memory: nothing to blame");
	}
	cr_assert_null(strstr(o.out, "sysctl kernel.io_uring_disabled=0"), "%s",
		       o.out);
	cr_assert(strstr(o.out, "problem: io_uring is not available (the "
				"fast path): see its line above\n  fix: "
				"raise the memlock limit"),
		  "%s", o.out);
	tu_out_free(&o);
}

/* Hostile input 13: under ulimit -v the probe fails for want of address
 * space, not of locked memory: the fix names the address-space limit. */
Test(nvswap_report, an_address_space_limit_is_named_not_memlock)
{
	char args[4200];
	struct tu_out o;

	if (system("command -v prlimit >/dev/null") != 0)
		cr_skip_test("needs prlimit");
#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("AddressSanitizer cannot start under an address-space "
		     "limit (it reserves terabytes for its shadow): the plain "
		     "build runs this test");
#endif
	snprintf(args, sizeof(args), "--as=%d %s --nvme-path %s", 64 << 20,
		 getenv("NVSWAP_REPORT"), tu_dir());
	char cmd[8400];
	snprintf(cmd, sizeof(cmd), "prlimit %s", args);
	o = tu_run(cmd);
	cr_assert(strstr(o.out, "probe failed"), "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "problem: locking a small pinned buffer "
				"failed\n  fix: raise the address-space "
				"limit: ulimit -v unlimited"),
		  "%s", o.out);
	cr_assert_null(strstr(o.out, "fix: raise the memlock limit"), "%s",
		       o.out);
	tu_out_free(&o);
}

Test(nvswap_report, bad_arguments_are_refused)
{
	struct tu_out o = report(NULL, "--bogus");

	cr_assert_eq(o.status, 2);
	cr_assert_str_eq(o.err, "nvswap-report: unknown option '--bogus'\n"
				"see nvswap-report --help\n");
	tu_out_free(&o);
	/* The old spelling, and a typo, are pointed at the option. */
	o = report(NULL, "--nvme_path .");
	cr_assert_eq(o.status, 2);
	cr_assert_str_eq(o.err, "nvswap-report: unknown option '--nvme_path'; "
				"did you mean '--nvme-path'?\n"
				"see nvswap-report --help\n");
	tu_out_free(&o);
	o = report(NULL, "--jsno");
	cr_assert_eq(o.status, 2);
	cr_assert_str_eq(o.err, "nvswap-report: unknown option '--jsno'; did "
				"you mean '--json'?\n"
				"see nvswap-report --help\n");
	tu_out_free(&o);
	o = report(NULL, "extra");
	cr_assert_eq(o.status, 2);
	cr_assert_str_eq(o.err, "nvswap-report: unexpected argument 'extra' "
				"(see nvswap-report --help)\n");
	tu_out_free(&o);
}

/* Hostile input 13: -h is help, as for the other tools; a real one. */
Test(nvswap_report, help_says_what_it_checks_every_option_and_the_exit)
{
	static const char *const want[] = {
		"usage: nvswap-report [--nvme-path DIR] [--json]\n",
		"  --nvme-path DIR   the directory swap files will go to "
		"(default: .)\n",
		"  --json            one JSON object on stdout instead of text\n",
		"  -h, --help        this text\n",
		"O_DIRECT and its alignment",
		"Exit status: 0 nvswap can run here, 1 it cannot",
	};

	for (int h = 0; h < 2; h++) {
		struct tu_out o = report(NULL, h ? "--help" : "-h");

		cr_assert_eq(o.status, 0, "%s", o.err);
		cr_assert_str_empty(o.err);
		cr_assert(!strncmp(o.out, want[0], strlen(want[0])), "%s",
			  o.out);
		for (size_t i = 1; i < sizeof(want) / sizeof(want[0]); i++)
			cr_assert(strstr(o.out, want[i]), "no '%s' in:\n%s",
				  want[i], o.out);
		tu_out_free(&o);
	}
}
