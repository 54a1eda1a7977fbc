// SPDX-License-Identifier: MIT
/*
 * nvswap-io as users run it: the real binary on small sizes. Its ds_io
 * lines, --validate, --json (parsed with jansson), the files it leaves,
 * --compare-fio against the real fio, and its messages for bad input.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* Run nvswap-io with @args (a shell word list), optionally through
 * @prefix (e.g. setpriv), collecting stdout and stderr. */
static struct tu_out nio(const char *prefix, const char *args)
{
	const char *bin = getenv("NVSWAP_IO");
	char cmd[8192];

	cr_assert_not_null(bin, "NVSWAP_IO is set by tests/meson.build");
	snprintf(cmd, sizeof(cmd), "%s %s %s", prefix ? prefix : "", bin, args);
	return tu_run(cmd);
}

static bool matches(const char *text, const char *re)
{
	regex_t r;
	bool ok;

	cr_assert_eq(regcomp(&r, re, REG_EXTENDED | REG_NEWLINE), 0);
	ok = regexec(&r, text, 0, NULL, 0) == 0;
	regfree(&r);
	return ok;
}

/* A folder of its own for the tool's files. */
static const char *folder(void)
{
	const char *d = tu_path("io");

	mkdir(d, 0755);
	return d;
}

static unsigned entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nvswap_io, .fini = fini, .timeout = 300);

Test(nvswap_io, write_prints_ds_io_lines_validates_and_cleans_up)
{
	char args[4096];
	struct tu_out o;

	snprintf(args, sizeof(args), "--nvme-path %s --io-size 8M --validate",
		 folder());
	o = nio(NULL, args);
	cr_assert_eq(o.status, 0, "%s", o.err);
	cr_assert(matches(o.out, "^Task Write Latency = [0-9]+\\.[0-9]+ sec$"),
		  "%s", o.out);
	cr_assert(matches(o.out, "^Task Write Speed = [0-9]+\\.[0-9]+ GB/sec$"),
		  "%s", o.out);
	cr_assert(matches(o.out, "^E2E Write Latency = [0-9]+\\.[0-9]+ sec$"));
	cr_assert(matches(o.out, "^E2E Write Speed = [0-9]+\\.[0-9]+ GB/sec$"));
	cr_assert(matches(o.out, "^Op Write Latency: min [0-9.]+ ms, median "
				 "[0-9.]+ ms, p99 [0-9.]+ ms \\(1 ops of "
				 "8388608 bytes\\)$"),
		  "%s", o.out);
	cr_assert(matches(o.out, "^Validation: ok, every byte$"), "%s", o.out);
	cr_assert_eq(entries(folder()), 0, "the test file is removed");
	tu_out_free(&o);
}

Test(nvswap_io, read_with_parallelism_loops_and_warmup_validates)
{
	char args[4096];
	struct tu_out o;

	snprintf(args, sizeof(args),
		 "--folder %s --io-size 8M --read --io-parallel 2 --loops 3 "
		 "--warmup-loops 1 --block-size 256K --queue-depth 4 "
		 "--validate",
		 folder());
	o = nio(NULL, args);
	cr_assert_eq(o.status, 0, "%s", o.err);
	cr_assert(matches(o.out, "^Task Read Speed = [0-9.]+ GB/sec$"), "%s",
		  o.out);
	cr_assert(matches(o.out, "\\(3 ops of 8388608 bytes\\)"), "%s", o.out);
	cr_assert(matches(o.out, "^Validation: ok, every byte$"), "%s", o.out);
	tu_out_free(&o);
}

static json_t *parse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	cr_assert_not_null(j, "not JSON: %s at line %d: %s", e.text, e.line,
			   text);
	return j;
}

Test(nvswap_io, json_has_every_figure_and_the_config)
{
	char args[4096];
	struct tu_out o;
	json_t *j, *lat;

	snprintf(args, sizeof(args),
		 "--folder %s --io-size 8M --loops 2 --validate --json",
		 folder());
	o = nio(NULL, args);
	cr_assert_eq(o.status, 0, "%s", o.err);
	cr_assert_str_eq(o.err, "", "quiet with --json");
	j = parse(o.out);
	cr_assert_gt(json_real_value(json_object_get(j, "task_gbs")), 0);
	cr_assert_gt(json_real_value(json_object_get(j, "e2e_gbs")), 0);
	cr_assert_gt(json_real_value(json_object_get(j, "task_latency_sec")),
		     0);
	lat = json_object_get(j, "op_latency_ms");
	cr_assert_gt(json_real_value(json_object_get(lat, "min")), 0);
	cr_assert_geq(json_real_value(json_object_get(lat, "p99")),
		      json_real_value(json_object_get(lat, "median")));
	cr_assert(json_is_true(json_object_get(j, "validated")));
	cr_assert_eq(json_integer_value(json_object_get(j, "requests")), 16);
	cr_assert_not_null(json_string_value(json_object_get(j, "backend")));
	cr_assert_eq(json_integer_value(json_object_get(
			     json_object_get(j, "config"), "io_size")),
		     8 << 20);
	cr_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(j, "config"), "op")),
			 "write");
	json_decref(j);
	tu_out_free(&o);
}

/* Under io_uring, fixed buffers are the pinned ones: staged user memory
 * goes through the pinned bounce slots (registered), direct pageable
 * memory is not registered. */
static void unpinned(const char *extra, bool bounced)
{
	char args[4096];
	struct tu_out o;
	json_t *j;
	json_int_t fixed, reqs;

	snprintf(args, sizeof(args),
		 "--folder %s --io-size 8M --read --unpinned %s --validate "
		 "--json",
		 folder(), extra);
	o = nio(NULL, args);
	cr_assert_eq(o.status, 0, "%s", o.err);
	j = parse(o.out);
	cr_assert(json_is_true(json_object_get(j, "validated")));
	fixed = json_integer_value(json_object_get(j, "fixed_buffer_requests"));
	reqs = json_integer_value(json_object_get(j, "requests"));
	if (strcmp(json_string_value(json_object_get(j, "backend")),
		   "io_uring"))
		cr_assert_eq(fixed, 0, "only io_uring registers buffers");
	else
		cr_assert_eq(fixed, bounced ? reqs : 0);
	json_decref(j);
	tu_out_free(&o);
}

Test(nvswap_io, unpinned_misaligned_buffers_validate_through_pinned_slots)
{
	unpinned("--misalign 3", true);
}

Test(nvswap_io, unpinned_aligned_buffers_validate_unregistered)
{
	/* Direct, not staged (AUTO may stage them on a disk with a small
	 * segment limit, see enum nvs_staging). */
	unpinned("--staging misaligned", false);
}

Test(nvswap_io, staged_unpinned_buffers_validate_registered)
{
	unpinned("--staging unpinned", true);
}

Test(nvswap_io, different_file_each_iteration_keeps_one_file_per_op)
{
	char args[4096];
	struct tu_out o;

	snprintf(args, sizeof(args),
		 "--folder %s --io-size 1M --loops 3 "
		 "--different-file-each-iteration --keep",
		 folder());
	o = nio(NULL, args);
	cr_assert_eq(o.status, 0, "%s", o.err);
	cr_assert_eq(entries(folder()), 3);
	tu_out_free(&o);
}

Test(nvswap_io, help_documents_every_option)
{
	static const char *const opts[] = {"--folder",
					   "--io-size",
					   "--read",
					   "--block-size",
					   "--queue-depth",
					   "--single-submit",
					   "--sequential-requests",
					   "--io-parallel",
					   "--loops",
					   "--warmup-loops",
					   "--validate",
					   "--backend",
					   "--pinned",
					   "--unpinned",
					   "--misalign",
					   "--different-file-each-iteration",
					   "--json",
					   "--compare-fio",
					   "--repeats",
					   "--no-fio-default",
					   "--keep",
					   "--sqpoll",
					   "--iopoll",
					   "--no-fixed"};
	struct tu_out o = nio(NULL, "-h");

	cr_assert_eq(o.status, 0);
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		cr_assert(strstr(o.out, opts[i]), "-h lacks %s", opts[i]);
	tu_out_free(&o);
}

/* One option style: the help lists every option with dashes and names
 * ds_io's underscore spellings once, as aliases. */
Test(nvswap_io, help_lists_dash_options_and_names_the_aliases_once)
{
	struct tu_out o = nio(NULL, "--help");
	const char *p = o.out;
	unsigned n = 0;

	cr_assert_eq(o.status, 0, "%s", o.err);
	cr_assert_str_empty(o.err);
	cr_assert_not(matches(o.out, "^  --[a-z-]*_"), "%s", o.out);
	while ((p = strstr(p, "--io_size"))) {
		n++;
		p++;
	}
	cr_assert_eq(n, 1, "%s", o.out);
	cr_assert(strstr(o.out, "ds_io's spellings work too: --folder, "
				"--io_size, --block_size, --queue_depth,\n"
				"--single_submit, --sequential_requests, "
				"--io_parallel, --warmup_loops,\n"
				"--different_file_each_iteration.\n"),
		  "%s", o.out);
	tu_out_free(&o);
}

/* ds_io's command line runs as it does under DeepSpeed: the same run as
 * with the dash spellings. */
Test(nvswap_io, ds_io_spellings_are_aliases_of_the_dash_ones)
{
	static const char *const forms[] = {
		"--io_size 1M --block_size 256K --queue_depth 4 "
		"--single_submit --sequential_requests --io_parallel 2 "
		"--warmup_loops 1 --different_file_each_iteration",
		"--io-size 1M --block-size 256K --queue-depth 4 "
		"--single-submit --sequential-requests --io-parallel 2 "
		"--warmup-loops 1 --different-file-each-iteration",
	};
	json_t *cfg[2];
	char args[4096];

	for (int i = 0; i < 2; i++) {
		struct tu_out o;
		json_t *j;

		snprintf(args, sizeof(args), "--folder %s %s --json", folder(),
			 forms[i]);
		o = nio(NULL, args);
		cr_assert_eq(o.status, 0, "%s: %s", forms[i], o.err);
		j = parse(o.out);
		cfg[i] = json_incref(json_object_get(j, "config"));
		json_decref(j);
		tu_out_free(&o);
	}
	cr_assert_eq(json_integer_value(json_object_get(cfg[0], "io_size")),
		     1 << 20);
	cr_assert_eq(json_integer_value(json_object_get(cfg[0], "block_size")),
		     256 << 10);
	cr_assert_eq(json_integer_value(json_object_get(cfg[0], "io_parallel")),
		     2);
	cr_assert(json_is_false(json_object_get(cfg[0], "overlap_events")));
	cr_assert(json_is_true(json_object_get(cfg[0], "single_submit")));
	cr_assert(json_equal(cfg[0], cfg[1]), "%s\nvs\n%s",
		  json_dumps(cfg[0], 0), json_dumps(cfg[1], 0));
	json_decref(cfg[0]);
	json_decref(cfg[1]);
	cr_assert_eq(entries(folder()), 0);
}

/* A bad option is one line and a pointer to --help, never the help. */
Test(nvswap_io, bad_options_say_what_was_meant_in_two_lines)
{
	static const char *const cases[][2] = {
		{"--io-sise 4M", "nvswap-io: unknown option '--io-sise'; "
				 "did you mean '--io-size'?\n"},
		{"--io_sise=4M", "nvswap-io: unknown option '--io_sise'; "
				 "did you mean '--io-size'?\n"},
		{"--start_at 5", "nvswap-io: unknown option '--start_at'; "
				 "did you mean '--start-at'?\n"},
		{"--valdiate", "nvswap-io: unknown option '--valdiate'; "
			       "did you mean '--validate'?\n"},
		{"--frobnicate", "nvswap-io: unknown option "
				 "'--frobnicate'\n"},
		{"--re", "nvswap-io: option '--re' is ambiguous: '--read', "
			 "'--repeats'\n"},
		{"--io_", "nvswap-io: option '--io_' is ambiguous: "
			  "'--io-size', '--io-parallel'\n"},
		{"--read=yes", "nvswap-io: option '--read' takes no value\n"},
		{"--nvme-path", "nvswap-io: option '--nvme-path' needs a "
				"value\n"},
		{"--folder", "nvswap-io: option '--nvme-path' needs a value\n"},
		{"--io_si", "nvswap-io: option '--io-size' needs a value\n"},
		{"-x", "nvswap-io: unknown option '-x'\n"},
	};
	char want[512];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tu_out o = nio(NULL, cases[i][0]);

		snprintf(want, sizeof(want), "%ssee nvswap-io --help\n",
			 cases[i][1]);
		cr_expect_eq(o.status, 2, "%s", cases[i][0]);
		cr_expect_str_eq(o.err, want, "%s", cases[i][0]);
		cr_expect_str_empty(o.out, "%s", cases[i][0]);
		tu_out_free(&o);
	}
}

Test(nvswap_io, missing_folder_is_named_with_the_cause)
{
	struct tu_out o =
		nio(NULL, "--folder /nonexistent/nvswap --io-size 8M");

	cr_assert_eq(o.status, 1);
	/* ds_io's --folder, named as every tool names it */
	cr_assert(strstr(o.err, "nvswap-io: --nvme-path /nonexistent/nvswap: "
				"No such file or directory"),
		  "%s", o.err);
	tu_out_free(&o);
}

Test(nvswap_io, bad_size_suffix_is_a_usage_error)
{
	char args[4096];
	struct tu_out o;

	snprintf(args, sizeof(args), "--folder %s --io-size 8Q", folder());
	o = nio(NULL, args);
	cr_assert_eq(o.status, 2);
	cr_assert(strstr(o.err, "--io-size: bad size '8Q'"), "%s", o.err);
	cr_assert(strstr(o.err, "K, M or G"), "%s", o.err);
	tu_out_free(&o);
}

/* Hostile input 16: numbers out of range are not "not a whole number",
 * and a buffer larger than the machine's memory is not a memlock matter. */
Test(nvswap_io, out_of_range_numbers_and_sizes_say_so)
{
	static const char *const cases[][2] = {
		{"--misalign 99999999",
		 "--misalign: '99999999' is out of range (from 0 to 1048576)"},
		{"--loops 4294967296",
		 "--loops: '4294967296' is out of range (from 1 to 1048576)"},
		{"--loops 99999999999999999999999",
		 "is out of range (from 1 to 1048576)"},
		{"--loops -1", "--loops: '-1' is out of range"},
		{"--loops 1x",
		 "--loops: '1x' is not a whole number (from 1 to"},
		{"--io-size 16777215T", "larger than this machine's memory"},
	};
	char args[4096];
	struct tu_out o;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(args, sizeof(args), "--folder %s %s", folder(),
			 cases[i][0]);
		o = nio(NULL, args);
		cr_assert_eq(o.status, 2, "%s: %s", cases[i][0], o.err);
		cr_assert(strstr(o.err, cases[i][1]), "%s: %s", cases[i][0],
			  o.err);
		cr_assert_null(strstr(o.err, "--unpinned"), "%s", o.err);
		tu_out_free(&o);
	}
	cr_assert_eq(entries(folder()), 0);
}

Test(nvswap_io, unwritable_folder_is_refused_before_any_io)
{
	char args[4096];
	struct tu_out o;

	if (!tu_nobody_prefix(-1))
		cr_skip_test("needs root and setpriv to run as nobody");
	/* nobody may enter the scratch tree but not write the folder. */
	cr_assert_eq(chmod(tu_dir(), 0755), 0);
	cr_assert_eq(chmod(folder(), 0555), 0);
	snprintf(args, sizeof(args), "--folder %s --io-size 8M", folder());
	o = nio(tu_nobody_prefix(-1), args);
	cr_assert_eq(o.status, 1, "%s", o.err);
	cr_assert(strstr(o.err, "cannot write there: Permission denied"), "%s",
		  o.err);
	tu_out_free(&o);
}

Test(nvswap_io, folder_on_a_read_only_filesystem_is_refused)
{
	char args[4096];
	struct tu_out o;

	/* A read-only tmpfs in a private mount namespace; the tool, run
	 * from here, inherits it. */
	if (!tu_mount_private(folder(), "tmpfs", MS_RDONLY, "size=1m"))
		cr_skip_test("cannot mount a read-only tmpfs here (%s): needs "
			     "root and mount namespaces",
			     strerror(errno));
	snprintf(args, sizeof(args), "--folder %s --io-size 8M", folder());
	o = nio(NULL, args);
	umount2(folder(), MNT_DETACH);
	cr_assert_eq(o.status, 1, "%s", o.err);
	cr_assert(strstr(o.err, "cannot write there: Read-only file system"),
		  "%s", o.err);
	tu_out_free(&o);
}

/* nvswap-io --compare-fio --json @opts on the test folder, which must
 * succeed: its JSON. NULL (the test skips) when fio is not installed.
 * The callers move 64 MiB: fio times a job in whole milliseconds, and a
 * 4 MiB write into this VM's cache once took under one (no rate). */
static json_t *compare_fio(const char *opts)
{
	char args[4096];
	struct tu_out o;
	json_t *j;

	if (system("fio --version >/dev/null 2>&1") != 0)
		return NULL;
	snprintf(args, sizeof(args), "--folder %s --compare-fio --json %s",
		 folder(), opts);
	o = nio(NULL, args);
	cr_assert_eq(o.status, 0, "%s", o.err);
	j = parse(o.out);
	tu_out_free(&o);
	return j;
}

Test(nvswap_io, compare_fio_prints_both_and_their_ratio)
{
	json_t *j = compare_fio("--io-size 64M --read --queue-depth 4 "
				"--repeats 2"),
	       *r;
	const char *cmd;
	char eng[64];

	if (!j)
		cr_skip_test("fio is not installed (apt-get install fio)");
	r = json_object_get(j, "ratio");
	cr_assert_gt(json_real_value(json_object_get(r, "median")), 0);
	cr_assert_leq(json_real_value(json_object_get(r, "min")),
		      json_real_value(json_object_get(r, "max")));
	cr_assert_gt(json_real_value(json_object_get(
			     json_object_get(j, "fio_default_gbs"), "median")),
		     0);
	cr_assert(json_is_real(
		json_object_get(json_object_get(j, "cpu_ratio"), "median")));
	/* fio ran nvswap's job: same engine, O_DIRECT, bs, qd, file. */
	cmd = json_string_value(json_object_get(j, "fio_command"));
	snprintf(eng, sizeof(eng), "--ioengine=%s ",
		 json_string_value(json_object_get(j, "backend")));
	cr_assert(cmd && strstr(cmd, eng), "%s", cmd);
	cr_assert(strstr(cmd, " --direct=1 "), "%s", cmd);
	cr_assert(strstr(cmd, " --bs=1048576 "), "%s", cmd);
	cr_assert(strstr(cmd, " --iodepth=4 "), "%s", cmd);
	cr_assert(strstr(cmd, " --size=67108864 "), "%s", cmd);
	/* 64 MiB in 1 MiB requests, warm-up op and timed op. */
	cr_assert_eq(json_integer_value(json_object_get(j, "nvswap_requests")),
		     128);
	json_decref(j);
}

/* --no-fio-default: only the huge-page fio, or only the default one when
 * there are no huge pages; either way one fio figure. */
Test(nvswap_io, no_fio_default_runs_one_fio_per_repeat)
{
	json_t *j = compare_fio("--io-size 64M --queue-depth 4 --repeats 1 "
				"--no-fio-default");

	if (!j)
		cr_skip_test("fio is not installed (apt-get install fio)");
	cr_assert_gt(json_real_value(json_object_get(
			     json_object_get(j, "fio_gbs"), "median")),
		     0);
	cr_assert_eq(json_object_get(j, "fio_default_gbs") != NULL,
		     !json_is_true(json_object_get(j, "fio_huge_pages")));
	json_decref(j);
}

/* Issue 24 finding 1: the test file's name is predictable; a symlink
 * planted there (here at the exact name the tool's pid gives) is never
 * followed: the tool takes the next free name, the victim is untouched
 * and the link is left as it was. */
Test(nvswap_io, finding1_a_symlink_at_the_test_file_name_is_never_followed)
{
	const char *bin = getenv("NVSWAP_IO");
	char victim[4200], link[4300], dir[4200], got[16] = "";
	int go[2], status, fd;
	struct stat st;
	pid_t pid;

	cr_assert_not_null(bin);
	snprintf(dir, sizeof(dir), "%s", folder());
	snprintf(victim, sizeof(victim), "%s", tu_path("victim"));
	tu_write_file(victim, "precious", 8);
	cr_assert_eq(pipe(go), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char c;
		int null = open("/dev/null", O_WRONLY);
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(120);
		dup2(null, 1);
		dup2(null, 2);
		execl(bin, "nvswap-io", "--folder", dir, "--io-size", "64K",
		      "--validate", (char *)NULL);
		_exit(121);
	}
	close(go[0]);
	for (int i = 0; i < 2; i++) {
		snprintf(link, sizeof(link), "%s/nvswap-io.%ld.%d.dat", dir,
			 (long)pid, i);
		cr_assert_eq(symlink(victim, link), 0);
	}
	cr_assert_eq(write(go[1], "g", 1), 1);
	close(go[1]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0);
	fd = open(victim, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(read(fd, got, sizeof(got)), 8,
		     "the victim keeps its size");
	close(fd);
	cr_assert_str_eq(got, "precious");
	cr_assert_eq(lstat(link, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the planted link is left alone");
	cr_assert_eq(entries(dir), 2, "only the two planted links remain");
}

/* Issue 24 finding 8: every error exit removes the tool's files: a full
 * disk (one file, and one file per loop) and an --iopoll the filesystem
 * refuses. */
Test(nvswap_io, finding8_error_exits_leave_no_test_files)
{
	const char *runs[] = {
		"--io-size 8M",
		"--io-size 256K --loops 8 --different-file-each-iteration",
		"--io-size 256K --iopoll",
	};
	char args[4096];
	struct tu_out o;

	if (!tu_mount_private(folder(), "tmpfs", 0, "size=1m"))
		cr_skip_test("cannot mount a small tmpfs here (%s): needs "
			     "root and mount namespaces",
			     strerror(errno));
	for (unsigned i = 0; i < 3; i++) {
		snprintf(args, sizeof(args), "--folder %s %s", folder(),
			 runs[i]);
		o = nio(NULL, args);
		if (i < 2)
			cr_assert_eq(o.status, 1, "%s: %s", runs[i], o.err);
		cr_assert_eq(entries(folder()), 0, "%s left files: %s", runs[i],
			     o.err);
		tu_out_free(&o);
	}
	umount2(folder(), MNT_DETACH);
}
