// SPDX-License-Identifier: MIT
/*
 * nvswap-tune as users run it, on tiny sizes: the config it writes loads
 * with nvs_config_load() and gives back exactly the settings it chose
 * (new file, or merged into a DeepSpeed config); the plot is well-formed
 * SVG from both engines; bad input (paths, space, sweep JSON, flags,
 * memlock) is a clear error with a non-zero exit; Ctrl-C removes the
 * test files.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <nvswap/nvswap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tuneutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nvswap_tune, .fini = fini);

Test(nvswap_tune, the_chosen_config_loads_and_round_trips)
{
	const char *out = tt_keep("tuned.json");
	struct tu_out o;
	json_t *r, *pts, *best, *p;
	size_t i;
	unsigned finalists = 0, io_uring = 0, psync = 0;

	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 2 "
		    "--json --write-config %s",
		    tu_dir(), tt_small_sweep(), out);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	cr_assert_eq(tt_int(r, "io_size"), 1 << 20);
	cr_assert_eq(tt_int(r, "loops"), 2);
	cr_assert(json_is_true(json_object_get(r, "direct")));
	cr_assert_str_eq(json_string_value(json_object_get(r, "config_file")),
			 out);
	/* 8 io_uring points, 4 psync ones (block size x parallelism), and
	 * the default settings (io_uring 1M qd 8 par 1: not in the grid). */
	pts = json_object_get(r, "results");
	cr_assert_eq(json_array_size(pts), 13);
	cr_assert_eq(tt_int(r, "points"), 13);
	cr_assert_eq(tt_int(r, "skipped"), 0);
	json_array_foreach(pts, i, p)
	{
		const char *be =
			json_string_value(json_object_get(p, "backend"));
		json_t *sw = json_object_get(p, "sweep");

		io_uring += !strcmp(be, "io_uring");
		psync += !strcmp(be, "psync");
		cr_assert_eq(tt_int(json_object_get(sw, "read"), "ops"), 2);
		cr_assert_eq(tt_int(json_object_get(sw, "write"), "ops"), 2);
		cr_assert_gt(json_real_value(json_object_get(
				     json_object_get(sw, "read"), "median")),
			     0);
		cr_assert_gt(json_real_value(json_object_get(sw, "combined")),
			     0);
		if (json_is_true(json_object_get(p, "finalist")) ||
		    json_is_true(json_object_get(p, "default"))) {
			json_t *fi = json_object_get(p, "final");
			cr_assert_eq(tt_int(json_object_get(fi, "read"), "ops"),
				     2);
			finalists++;
		}
	}
	cr_assert_eq(io_uring, 9);
	cr_assert_eq(psync, 4);
	cr_assert_geq(finalists, 2);
	cr_assert_leq(finalists, 3 * 3 + 1);
	best = json_object_get(json_object_get(r, "best"), "combined");
	cr_assert_not_null(best);
	cr_assert_not_null(json_object_get(json_object_get(r, "best"), "read"));
	cr_assert_not_null(
		json_object_get(json_object_get(r, "vs_default"), "combined"));
	tt_config_is(out, best);
	/* The file is the printed snippet, nothing more. */
	json_t *file = json_load_file(out, 0, NULL);
	cr_assert(json_equal(file, json_object_get(r, "config")));
	json_decref(file);
	json_decref(r);
	tu_out_free(&o);
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune, write_config_merges_into_a_deepspeed_config)
{
	const char *cfg = tt_ds_config("ds_config.json", 5, 100000000);
	struct tu_out o;
	json_t *r, *file, *aio;

	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--json --write-config %s",
		    tu_dir(), tt_small_sweep(), cfg);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	tt_config_is(cfg,
		     json_object_get(json_object_get(r, "best"), "combined"));
	file = json_load_file(cfg, 0, NULL);
	cr_assert_not_null(file);
	/* Everything else is kept; the old spelling of
	 * intra_op_parallelism is gone (it would say it twice). */
	cr_assert_eq(tt_int(file, "train_batch_size"), 8);
	cr_assert_str_eq(
		json_string_value(json_object_get(
			json_object_get(
				json_object_get(file, "zero_optimization"),
				"offload_param"),
			"nvme_path")),
		tu_dir());
	aio = json_object_get(file, "aio");
	cr_assert_null(json_object_get(aio, "thread_count"));
	cr_assert(json_is_false(json_object_get(aio, "use_gds")));
	cr_assert_not_null(json_object_get(aio, "intra_op_parallelism"));
	json_decref(file);
	json_decref(r);
	tu_out_free(&o);
	/* The human form says where it went. */
	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--write-config %s",
		    tu_dir(), tt_small_sweep(), cfg);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "merged into"), "%s", o.out);
	cr_assert(strstr(o.out, "best combined"), "%s", o.out);
	cr_assert(strstr(o.out, "tuned vs default"), "%s", o.out);
	tu_out_free(&o);
	tt_no_leftovers(tu_dir());
}

/* A config file holding @text cannot take the result: the tuner says
 * @what before it sweeps, and the file is left as it was. */
static void config_refused(const char *text, const char *what)
{
	const char *cfg = tt_keep("broken.json");
	struct tu_out o;
	char *after;

	tt_write_text(cfg, text);
	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M "
		    "--write-config %s",
		    tu_dir(), tt_small_sweep(), cfg);
	cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, what), "'%s' in %s", what, o.err);
	cr_assert(strstr(o.err, "not changed"), "%s", o.err);
	cr_assert_null(strstr(o.out, "sweep:"), "no sweep ran: %s", o.out);
	after = tt_read_text(cfg);
	cr_assert_str_eq(after, text);
	free(after);
	tu_out_free(&o);
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune, a_broken_config_file_is_refused_before_the_sweep)
{
	config_refused("{\n  \"aio\": {\"block_size\": 1048576,}\n}\n",
		       "broken.json:2:");
	config_refused("[1, 2]\n",
		       "broken.json:1:1: the top level must be an object");
	config_refused("{\"aio\": 5}\n",
		       "broken.json:1:2: aio: must be an object");
	config_refused("{\"nvswap\": [\"io_uring\"]}\n",
		       "broken.json:1:2: nvswap: must be an object");
	/* Valid JSON, but not a config nvs_config_load takes: its error, at
	 * the file's own line and column. */
	config_refused("{\"aio\": {\"blocksize\": 4096}}\n",
		       "broken.json:1:10: aio.blocksize: unknown key");
}

static void svg_ok(const char *path)
{
	char cmd[4200], *text;
	struct tu_out o;

	snprintf(cmd, sizeof(cmd), "xmllint --noout %s", path);
	o = tu_run(cmd);
	cr_assert_eq(o.status, 0, "not well-formed XML: %s", o.err);
	tu_out_free(&o);
	text = tt_read_text(path);
	cr_assert(strstr(text, "<svg"), "an SVG document");
	cr_assert(strstr(text, ">read<"), "a read panel");
	cr_assert(strstr(text, ">write<"), "a write panel");
	cr_assert(strstr(text, "block size"), "an axis label");
	free(text);
}

Test(nvswap_tune, the_plot_is_well_formed_svg_from_either_engine)
{
	const char *own = tt_keep("own.svg"), *gp = tt_keep("gnuplot.svg");
	struct tu_out o;
	json_t *r;

	if (system("command -v xmllint >/dev/null") != 0)
		cr_skip_test("xmllint (libxml2-utils) is not installed; "
			     "make test installs it");
	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--plot %s --plot-engine svg --json",
		    tu_dir(), tt_small_sweep(), own);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	cr_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(r, "plot"), "engine")),
			 "svg");
	json_decref(r);
	tu_out_free(&o);
	svg_ok(own);

	if (system("command -v gnuplot >/dev/null") != 0)
		cr_skip_test("gnuplot is not installed (make test installs "
			     "gnuplot-nox); the SVG engine passed");
	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--plot %s --plot-engine gnuplot",
		    tu_dir(), tt_small_sweep(), gp);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "(gnuplot)"), "%s", o.out);
	tu_out_free(&o);
	svg_ok(gp);
}

Test(nvswap_tune, a_failing_or_missing_gnuplot_is_handled)
{
	const char *bin = tt_keep("fakebin"), *out = tt_keep("fallback.svg");
	char fake[4200], prefix[4300];
	struct tu_out o;
	json_t *r;

	if (system("command -v xmllint >/dev/null") != 0)
		cr_skip_test("xmllint (libxml2-utils) is not installed; "
			     "make test installs it");
	/* A stand-in gnuplot that fails: the fault to inject. */
	cr_assert_eq(mkdir(bin, 0755), 0);
	snprintf(fake, sizeof(fake), "%s/gnuplot", bin);
	tt_write_text(fake, "#!/bin/sh\necho 'fake gnuplot: no' >&2\nexit 1\n");
	cr_assert_eq(chmod(fake, 0755), 0);
	snprintf(prefix, sizeof(prefix), "PATH=%s:$PATH", bin);
	/* auto: falls back to its own SVG, and says so. */
	o = tt_tune(prefix,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--plot %s --json",
		    tu_dir(), tt_small_sweep(), out);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "gnuplot failed; drawing the SVG without it"),
		  "%s", o.err);
	r = tt_parse(o.out);
	cr_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(r, "plot"), "engine")),
			 "svg");
	json_decref(r);
	tu_out_free(&o);
	svg_ok(out);
	/* Asked for by name, its failure is the run's. */
	tt_refused(
		tt_tune(prefix,
			"--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
			"--plot %s --plot-engine gnuplot",
			tu_dir(), tt_small_sweep(), out),
		1, "gnuplot failed");
	/* And with none on the PATH, it says how to get one. */
	snprintf(prefix, sizeof(prefix), "PATH=%s", bin);
	cr_assert_eq(unlink(fake), 0);
	tt_refused(
		tt_tune(prefix,
			"--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
			"--plot %s --plot-engine gnuplot",
			tu_dir(), tt_small_sweep(), out),
		1, "gnuplot is not installed (apt-get install gnuplot-nox)");
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune, one_direction_and_quick_mode)
{
	struct tu_out o;
	json_t *r, *best;

	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 2M --loops 3 "
		    "--no-write --quick --json",
		    tu_dir(), tt_small_sweep());
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	best = json_object_get(r, "best");
	cr_assert_not_null(json_object_get(best, "read"));
	cr_assert_null(json_object_get(best, "write"));
	cr_assert_null(json_object_get(best, "combined"));
	cr_assert(json_is_true(json_object_get(r, "quick")));
	/* --quick: one short op per point in the sweep, the full count in
	 * the final round. */
	json_t *p = json_array_get(json_object_get(r, "results"), 0);
	cr_assert_eq(
		tt_int(json_object_get(json_object_get(p, "sweep"), "read"),
		       "ops"),
		1);
	cr_assert_null(json_object_get(json_object_get(p, "sweep"), "write"));
	/* It prunes: one criterion here (reads), so the best 8 and the
	 * defaults are narrowed, at a quarter size, and the best 3 of those
	 * and the defaults reach the final round. */
	size_t i, narrowed = 0, final = 0;
	json_array_foreach(json_object_get(r, "results"), i, p)
	{
		json_t *nr = json_object_get(p, "narrow");
		if (nr) {
			narrowed++;
			cr_assert_eq(tt_int(json_object_get(nr, "read"), "ops"),
				     1);
		}
		if (json_object_get(p, "final")) {
			final++;
			cr_assert_not_null(nr, "a finalist was narrowed first");
			cr_assert_eq(tt_int(json_object_get(
						    json_object_get(p, "final"),
						    "read"),
					    "ops"),
				     3);
		}
	}
	/* (The defaults may be among the best themselves.) */
	cr_assert(narrowed == 8 || narrowed == 9, "8 and the defaults: %zu",
		  narrowed);
	cr_assert(final == 3 || final == 4, "3 and the defaults: %zu", final);
	json_array_foreach(json_object_get(r, "results"), i, p)
	{
		if (json_is_true(json_object_get(p, "default")))
			cr_assert_not_null(json_object_get(p, "final"));
	}
	/* The config carries the best read settings. */
	json_t *aio = json_object_get(json_object_get(r, "config"), "aio");
	cr_assert_eq(tt_int(aio, "block_size"),
		     tt_int(json_object_get(best, "read"), "block_size"));
	json_decref(r);
	tu_out_free(&o);
}

Test(nvswap_tune, several_paths_are_tuned_together_and_named_in_the_config)
{
	const char *a = tt_keep("a"), *b = tt_keep("b");
	const char *out = tt_keep("two.json");
	char ra[4096], rb[4096];
	struct tu_out o;
	json_t *r, *paths;

	cr_assert_eq(mkdir(a, 0755), 0);
	cr_assert_eq(mkdir(b, 0755), 0);
	cr_assert_not_null(realpath(a, ra));
	cr_assert_not_null(realpath(b, rb));
	o = tt_tune(NULL,
		    "--nvme-path %s --nvme-path %s --sweep-config %s "
		    "--io-size 1M --loops 1 --json --write-config %s",
		    a, b, tt_small_sweep(), out);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	paths = json_object_get(
		json_object_get(json_object_get(r, "config"), "nvswap"),
		"nvme_paths");
	cr_assert_eq(json_array_size(paths), 2);
	cr_assert_str_eq(json_string_value(json_array_get(paths, 0)), ra);
	cr_assert_str_eq(json_string_value(json_array_get(paths, 1)), rb);
	tt_config_is(out,
		     json_object_get(json_object_get(r, "best"), "combined"));
	json_decref(r);
	tu_out_free(&o);
	tt_no_leftovers(a);
	tt_no_leftovers(b);
}

Test(nvswap_tune, nvswap_backend_in_the_environment_tunes_that_backend)
{
	struct tu_out o;
	json_t *r, *p;
	size_t i;

	o = tt_tune("NVSWAP_BACKEND=psync",
		    "--nvme-path %s --io-size 8M --loops 1 --json --quick",
		    tu_dir());
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	/* psync: 2 block sizes x 4 parallelisms, plus the default. */
	cr_assert_eq(tt_int(r, "points"), 9);
	json_array_foreach(json_object_get(r, "results"), i, p)
	{
		if (!json_is_true(json_object_get(p, "default")))
			cr_assert_str_eq(json_string_value(
						 json_object_get(p, "backend")),
					 "psync");
	}
	json_decref(r);
	tu_out_free(&o);
}

Test(nvswap_tune, the_progress_bar_shows_points_elapsed_and_time_left)
{
	struct tu_out o;

	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--progress",
		    tu_dir(), tt_small_sweep());
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "sweep "), "%s", o.err);
	cr_assert(strstr(o.err, "/13 points,"), "%s", o.err);
	cr_assert(strstr(o.err, "s elapsed"), "%s", o.err);
	cr_assert(strstr(o.err, "final "), "%s", o.err);
	tu_out_free(&o);
}

/* ------------------------------------------------------ bad input */

Test(nvswap_tune, a_missing_or_unusable_path_is_refused)
{
	const char *mnt = tt_keep("mnt");

	tt_refused(tt_tune(NULL, "--nvme-path /nonexistent/nvme --io-size 1M"),
		   1,
		   "--nvme-path /nonexistent/nvme: No such file or directory");
	tt_refused(tt_tune(NULL, "--io-size 1M"), 2, "--nvme-path is required");
	if (!tu_mount_private(mnt, "tmpfs", MS_RDONLY, "size=1m"))
		cr_skip_test("cannot mount a tmpfs here (%s): needs root and "
			     "mount namespaces",
			     strerror(errno));
	tt_refused(tt_tune(NULL, "--nvme-path %s --io-size 1M", mnt), 1,
		   "on a read-only filesystem");
	umount2(mnt, MNT_DETACH);
	cr_assert(tu_mount_private(mnt, "tmpfs", 0, "size=2m"));
	tt_refused(tt_tune(NULL, "--nvme-path %s --io-size 4M", mnt), 1,
		   "MiB free, not enough for --io-size 4M");
	umount2(mnt, MNT_DETACH);
	/* ramfs refuses O_DIRECT: tuning there would time the page cache. */
	cr_assert(tu_mount_private(mnt, "ramfs", 0, NULL));
	tt_refused(tt_tune(NULL,
			   "--nvme-path %s --sweep-config %s --io-size 1M", mnt,
			   tt_small_sweep()),
		   1, "the filesystem refuses O_DIRECT");
	tt_no_leftovers(mnt);
	umount2(mnt, MNT_DETACH);
}

static struct tu_out with_sweep(const char *text)
{
	tt_write_text(tu_path("bad.json"), text);
	return tt_tune(NULL, "--nvme-path %s --io-size 1M --sweep-config %s",
		       tu_dir(), tu_path("bad.json"));
}

Test(nvswap_tune, an_invalid_sweep_config_names_line_and_column)
{
	tt_refused(with_sweep("{\n  \"block_size\": [1M]\n}\n"), 2,
		   "bad.json:2:");
	tt_refused(with_sweep("{\n  \"queue_depth\": [8],\n  \"blocksize\": "
			      "[4096]\n}\n"),
		   2, "bad.json:3:3: blocksize: not a sweep key");
	tt_refused(with_sweep("{\"queue_depth\": [8, 0]}"), 2,
		   "bad.json:1:2: queue_depth: 0 is not from 1 to 32768");
	tt_refused(with_sweep("{\"block_size\": [\"1000\"]}"), 2,
		   "block_size: 1000 is not a multiple of 512");
	tt_refused(with_sweep("{\"backend\": [\"spdk\"]}"), 2,
		   "backend: each value is one of");
	tt_refused(with_sweep("{\"overlap_events\": [true], "
			      "\"sequential_requests\": [true]}"),
		   2, "say the same thing");
	tt_refused(with_sweep("{\"io_parallel\": [1], "
			      "\"intra_op_parallelism\": [2]}"),
		   2, "are one key");
	tt_refused(with_sweep("{\"queue_depth\": []}"), 2, "an empty list");
	tt_refused(with_sweep("[1, 2]"), 2, "is a JSON object");
	tt_refused(tt_tune(NULL,
			   "--nvme-path %s --sweep-config /nonexistent.json",
			   tu_dir()),
		   1, "/nonexistent.json: No such file");
	tt_no_leftovers(tu_dir());
}

/* Hostile input 14: a --write-config or --plot target that cannot be
 * written is refused before the sweep (no sweep output), naming it, and
 * the check leaves no file behind. */
Test(nvswap_tune, an_unwritable_target_is_refused_before_the_sweep)
{
	static const char *const opts[] = {"--write-config", "--plot"};
	char mnt[4200], target[4300];
	struct tu_out o;

	for (int i = 0; i < 2; i++) {
		o = tt_tune(NULL,
			    "--nvme-path %s --sweep-config %s --io-size 1M %s "
			    "/nonexistent/dir/out",
			    tu_dir(), tt_small_sweep(), opts[i]);
		cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
		cr_assert(strstr(o.err, "/nonexistent/dir/out: cannot create "
					"files in /nonexistent/dir"),
			  "%s", o.err);
		cr_assert(strstr(o.err, opts[i]), "%s", o.err);
		cr_assert_null(strstr(o.out, "sweep:"), "%s", o.out);
		tu_out_free(&o);
	}
	/* An existing directory is no file to write. */
	tt_refused(tt_tune(NULL, "--nvme-path %s --io-size 1M --plot %s",
			   tu_dir(), tu_dir()),
		   1, "a directory, not a file");
	snprintf(mnt, sizeof(mnt), "%s", tu_path("ro"));
	if (!tu_mount_private(mnt, "tmpfs", MS_RDONLY, "size=1m"))
		cr_skip_test("cannot mount a read-only tmpfs here (%s)",
			     strerror(errno));
	snprintf(target, sizeof(target), "%s/plot.svg", mnt);
	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 1M --plot %s",
		    tu_dir(), tt_small_sweep(), target);
	umount2(mnt, MNT_DETACH);
	cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, target), "%s", o.err);
	cr_assert(strstr(o.err, "Read-only file system"), "%s", o.err);
	cr_assert_null(strstr(o.out, "sweep:"), "%s", o.out);
	tu_out_free(&o);
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune, contradictory_flags_are_refused)
{
	tt_refused(
		tt_tune(NULL, "--nvme-path %s --no-read --no-write", tu_dir()),
		2, "leave nothing to measure");
	tt_refused(tt_tune(NULL, "--nvme-path %s --plot-engine svg", tu_dir()),
		   2, "--plot-engine without --plot");
	tt_refused(tt_tune(NULL, "--nvme-path %s --io-size 4M", tu_dir()), 2,
		   "--io-size 4M is smaller than block_size 8M");
	tt_refused(tt_tune(NULL, "--nvme-path %s --nvme-path %s/.", tu_dir(),
			   tu_dir()),
		   2, "is given twice");
	tt_refused(tt_tune(NULL, "--nvme-path %s --loops 0", tu_dir()), 2,
		   "--loops: '0' is out of range (from 1 to 1048576)");
	tt_refused(tt_tune(NULL,
			   "--nvme-path %s --plot-engine pdf --plot x.svg",
			   tu_dir()),
		   2, "not one of auto, gnuplot, svg");
	tt_refused(tt_tune(NULL, "--bogus"), 2,
		   "nvswap-tune: unknown option '--bogus'\n"
		   "see nvswap-tune --help\n");
	/* Aliases only where ds_nvme_tune spells so: --nvme_path is not
	 * one (its --nvme_dir is), and is pointed at --nvme-path. */
	tt_refused(tt_tune(NULL, "--nvme_path %s", tu_dir()), 2,
		   "nvswap-tune: unknown option '--nvme_path'; did you mean "
		   "'--nvme-path'?\nsee nvswap-tune --help\n");
	/* ds_nvme_tune's spellings reach the same checks. */
	tt_refused(tt_tune(NULL, "--nvme_dir %s --io_size 4M", tu_dir()), 2,
		   "--io-size 4M is smaller than block_size 8M");
	tt_refused(
		tt_tune(NULL, "--nvme_dir %s --no_read --no_write", tu_dir()),
		2, "--no-read and --no-write together leave nothing");
	tt_refused(tt_tune(NULL, "--nvme_dir %s --sweep_config /nonexistent",
			   tu_dir()),
		   1, "--sweep-config /nonexistent: No such file");
	tt_refused(tt_tune(NULL, "--write_config x.json"), 2,
		   "did you mean '--write-config'?");
	tt_no_leftovers(tu_dir());
}

/* One option style: every option in the help has dashes, and
 * ds_nvme_tune's underscore spellings are named once, as aliases. */
Test(nvswap_tune, help_lists_dash_options_and_names_the_aliases_once)
{
	struct tu_out o = tt_tune(NULL, "--help");
	const char *line;

	cr_assert_eq(o.status, 0, "%s", o.err);
	cr_assert_str_empty(o.err);
	cr_assert(
		!strncmp(o.out, "usage: nvswap-tune [--nvme-path DIR ...]", 40),
		"%s", o.out);
	for (line = o.out; line; line = strchr(line + 1, '\n')) {
		const char *p = line + (*line == '\n');
		size_t n = strspn(p, " ");

		if (n >= 2 && !strncmp(p + n, "--", 2))
			cr_assert_eq(strcspn(p + n, " _\n"),
				     strcspn(p + n, " \n"),
				     "an option with '_' in: %.60s", p);
	}
	cr_assert(strstr(o.out,
			 "ds_nvme_tune's spellings work too: --nvme_dir, "
			 "--io_size, --no_read,\n--no_write, "
			 "--sweep_config.\n"),
		  "%s", o.out);
	cr_assert_null(
		strstr(strstr(o.out, "--sweep_config") + 1, "--sweep_config"),
		"%s", o.out);
	tu_out_free(&o);
}

Test(nvswap_tune, too_little_memlock_is_named_with_the_fix)
{
	struct tu_out o;

	if (!tu_nobody_prefix(4 << 20))
		cr_skip_test("needs root, setpriv and prlimit to run as "
			     "nobody under a small memlock limit");
	cr_assert_eq(chmod(tu_dir(), 0777), 0);
	cr_assert_eq(chmod(tt_small_sweep(), 0644), 0);
	tt_refused(tt_tune(tu_nobody_prefix(4 << 20),
			   "--nvme-path %s --sweep-config %s --io-size 4M",
			   tu_dir(), tt_small_sweep()),
		   1, "raise the memlock limit (ulimit -l)");
	/* ... and --unpinned is the way around it. */
	o = tt_tune(tu_nobody_prefix(4 << 20),
		    "--nvme-path %s --sweep-config %s --io-size 1M --loops 1 "
		    "--unpinned",
		    tu_dir(), tt_small_sweep());
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "pageable buffers"), "%s", o.out);
	tu_out_free(&o);
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune, ctrl_c_removes_the_test_files)
{
	char a0[] = "nvswap-tune", a1[] = "--nvme-path", a2[4096],
	     a3[] = "--io-size", a4[] = "64M", a5[] = "--loops", a6[] = "5",
	     a7[] = "--json";
	char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, NULL};

	snprintf(a2, sizeof(a2), "%s", tu_dir());
	tt_interrupt(argv, "nvswap-tune.");
	tt_no_leftovers(tu_dir());
}
