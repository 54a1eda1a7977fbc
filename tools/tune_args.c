// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's command line: the usage text, parsing every option into
 * A, and the checks made before the sweep (the paths, the --write-config
 * and --plot targets, --io-size against the search space).
 */
#include "tune.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fputs("usage: nvswap-tune [--nvme-path DIR ...] [--config FILE] "
	      "[--workload seq|swap]\n"
	      "                   [options]\n"
	      "\n"
	      "Finds the settings that move data fastest between memory and "
	      "the disk(s)\n"
	      "under DIR, through the library, in this process, with "
	      "O_DIRECT and\n"
	      "page-locked buffers. Two workloads:\n"
	      "\n"
	      "seq (the default without --config): ds_nvme_tune's sweep. "
	      "Large sequential\n"
	      "reads and writes of one file per path (all paths at once, as "
	      "the swapper\n"
	      "stripes them), over block_size x queue_depth x "
	      "intra_op_parallelism x\n"
	      "overlap_events x single_submit x backend. The best points, "
	      "and the settings\n"
	      "a config without an \"aio\" section gets, are then measured "
	      "again,\n"
	      "interleaved; the winners come from that round. GB = 2^30 "
	      "bytes, as in ds_io\n"
	      "and nvswap-io.\n"
	      "\n"
	      "swap (the default with --config): the parameter swapper's "
	      "layer walk through\n"
	      "the swap manager (nvswap/offload.h), as bench/overlap.c runs "
	      "it: --layers\n"
	      "layers of --tensor-size bytes, forward then backward, each "
	      "visit an acquire\n"
	      "(its read; the next lookahead layers read ahead into free "
	      "buffers), a dirty\n"
	      "release and an evict (its write-back); I/O only, timed per "
	      "step. It times\n"
	      "the pool shapes (buffer_count x lookahead; buffer_size = the "
	      "layer) with\n"
	      "the config's aio settings, then the aio space with the best "
	      "shape, then the\n"
	      "best 3 shapes x the best 3 aio settings and the config's own "
	      "settings again,\n"
	      "interleaved; the fastest step wins. The pool never takes "
	      "more pinned memory\n"
	      "than the config's offload_param allows (buffer_count x "
	      "buffer_size x 2 bytes)\n"
	      "unless --max-pinned says so.\n"
	      "\n"
	      "  --nvme-path DIR       a directory on the disk to tune "
	      "(repeat for several\n"
	      "                        disks); default: the --config's\n"
	      "                        nvswap.nvme_paths or nvme_path\n"
	      "  --config FILE         the DeepSpeed config to tune for "
	      "(makes swap the\n"
	      "                        default workload); --write-config "
	      "writes it back\n"
	      "                        with the chosen keys\n"
	      "  --workload W          seq or swap (see above)\n"
	      "  --loops N             timed ops (seq) or steps (swap) per "
	      "point (default 3)\n"
	      "  --sweep-config FILE   the aio search space as JSON (see "
	      "below)\n"
	      "  --quick               prune as it goes. seq: one op of 1/16 "
	      "--io-size per\n"
	      "                        point, the best 8 of each criterion "
	      "again at 1/4, the\n"
	      "                        best 3 of those at full size. swap: "
	      "one step per\n"
	      "                        point, then the faster half again "
	      "until 3 are left\n"
	      "  --write-config FILE   put the best (combined) settings into "
	      "FILE: --config\n"
	      "                        with them merged in when given, else "
	      "merged into\n"
	      "                        FILE when it exists, else a new file\n"
	      "  --json                results as one JSON object on stdout\n"
	      "  --verbose             also print every point of the sweep\n"
	      "  --unpinned            ordinary memory instead of page-locked "
	      "buffers\n"
	      "  --progress, --no-progress  the progress bar on stderr "
	      "(default: when\n"
	      "                        stderr is a terminal)\n"
	      "  --seed N              order of the points (shuffled; "
	      "default 1)\n"
	      "  --ranks N             seq: N processes (1 to 64, default 1) "
	      "run every point\n"
	      "                        at once, as N ranks of a node swap "
	      "together: each its\n"
	      "                        own file per path, buffers and aio "
	      "handle; each op\n"
	      "                        starts on all ranks together. GB/s "
	      "are the node's\n"
	      "                        (all ranks' bytes over the first "
	      "start to the last\n"
	      "                        end), plus fairness (fastest rank's "
	      "GB/s over the\n"
	      "                        slowest's); queue_depth is per rank, "
	      "and the config\n"
	      "                        adds nvswap.node_queue_depth = N x "
	      "it. The swap\n"
	      "                        workload refuses N > 1\n"
	      "  -h, --help            this text\n"
	      "  --version             print the version and exit\n"
	      "seq only:\n"
	      "  --io-size N           bytes per op and path, K/M/G suffixes "
	      "(default 256M)\n"
	      "  --no-read, --no-write measure one direction only\n"
	      "  --plot FILE.svg       GB/s over block size x queue depth, "
	      "one panel per\n"
	      "                        direction\n"
	      "  --plot-engine E       auto|gnuplot|svg (default auto: "
	      "gnuplot when installed,\n"
	      "                        else a self-contained SVG)\n"
	      "swap only:\n"
	      "  --layers N            layers the model walks (at least 2; "
	      "required)\n"
	      "  --tensor-size N       parameter bytes per layer, K/M/G "
	      "suffixes (required)\n"
	      "  --max-pinned N        pinned memory the parameter pool may "
	      "take (default:\n"
	      "                        the config's offload_param buffer_count "
	      "x buffer_size\n"
	      "                        x 2 bytes; DeepSpeed's 5 x 1e8 x 2 "
	      "without --config)\n"
	      "\n"
	      "Default aio space, seq (ds_nvme_tune's): block_size 1M 8M, "
	      "queue_depth 32 128,\n"
	      "intra_op_parallelism 1 2 4 8, overlap_events true false, "
	      "single_submit false\n"
	      "true, backend: every one that works here (psync runs each "
	      "request on its\n"
	      "worker, so only block size and parallelism vary for it). "
	      "swap: block_size\n"
	      "1M 8M (none above the layer), queue_depth 8 32 128, "
	      "intra_op_parallelism\n"
	      "1 2 4, overlap_events true false, single_submit false, the "
	      "backend auto\n"
	      "picks. A --sweep-config file replaces any of these lists, "
	      "e.g.\n"
	      "  {\"block_size\": [\"256K\", \"1M\"], \"queue_depth\": [8, "
	      "32],\n"
	      "   \"intra_op_parallelism\": [1, 2], \"backend\": "
	      "[\"io_uring\"]}\n"
	      "Keys: block_size, queue_depth, intra_op_parallelism "
	      "(io_parallel),\n"
	      "overlap_events (or its opposite, sequential_requests), "
	      "single_submit, backend\n"
	      "(\"auto\" = every available one). A value may be a list or "
	      "one value.\n"
	      "\n"
	      "Combined = harmonic mean of read and write GB/s. The config "
	      "printed holds\n"
	      "only keys nvs_config_load() reads: \"aio\" block_size, "
	      "queue_depth,\n"
	      "intra_op_parallelism, single_submit, overlap_events, and "
	      "\"nvswap\" backend\n"
	      "(when it differs from what auto picks here) and nvme_paths "
	      "(several paths);\n"
	      "swap adds zero_optimization.offload_param buffer_count and "
	      "buffer_size\n"
	      "(elements of 2 bytes; device and nvme_path when the file has "
	      "none) and\n"
	      "nvswap.lookahead. Ctrl-C removes the test files. Exit status: "
	      "0, 1 when the\n"
	      "run fails, 2 on bad usage.\n"
	      "ds_nvme_tune's spellings work too: --nvme_dir, --io_size, "
	      "--no_read,\n"
	      "--no_write, --sweep_config.\n",
	      f);
}

/* The index of @v in @names (NULL-terminated), or a usage error that
 * lists them. */
static int one_of(const char *opt, const char *v, const char *const *names)
{
	char list[128] = "";

	for (int i = 0; names[i]; i++) {
		if (!strcmp(v, names[i]))
			return i;
		snprintf(list + strlen(list), sizeof(list) - strlen(list),
			 "%s%s", i ? ", " : "", names[i]);
	}
	tool_die(2, "%s: '%s' is not one of %s", opt, v, list);
}

void tune_parse(int argc, char **argv)
{
	enum {
		OPT_PATH = 256,
		OPT_IOSIZE,
		OPT_LOOPS,
		OPT_NOREAD,
		OPT_NOWRITE,
		OPT_SWEEP,
		OPT_QUICK,
		OPT_PLOT,
		OPT_ENGINE,
		OPT_WRITECFG,
		OPT_JSON,
		OPT_VERBOSE,
		OPT_UNPINNED,
		OPT_PROGRESS,
		OPT_NOPROGRESS,
		OPT_SEED,
		OPT_WORKLOAD,
		OPT_CONFIG,
		OPT_LAYERS,
		OPT_TSIZE,
		OPT_MAXPINNED,
		OPT_RANKS,
		OPT_VERSION,
	};
	static const struct option lo[] = {
		{"nvme-path", required_argument, NULL, OPT_PATH},
		{"io-size", required_argument, NULL, OPT_IOSIZE},
		{"loops", required_argument, NULL, OPT_LOOPS},
		{"no-read", no_argument, NULL, OPT_NOREAD},
		{"no-write", no_argument, NULL, OPT_NOWRITE},
		{"sweep-config", required_argument, NULL, OPT_SWEEP},
		{"quick", no_argument, NULL, OPT_QUICK},
		{"plot", required_argument, NULL, OPT_PLOT},
		{"plot-engine", required_argument, NULL, OPT_ENGINE},
		{"write-config", required_argument, NULL, OPT_WRITECFG},
		{"json", no_argument, NULL, OPT_JSON},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"unpinned", no_argument, NULL, OPT_UNPINNED},
		{"progress", no_argument, NULL, OPT_PROGRESS},
		{"no-progress", no_argument, NULL, OPT_NOPROGRESS},
		{"seed", required_argument, NULL, OPT_SEED},
		{"workload", required_argument, NULL, OPT_WORKLOAD},
		{"config", required_argument, NULL, OPT_CONFIG},
		{"layers", required_argument, NULL, OPT_LAYERS},
		{"tensor-size", required_argument, NULL, OPT_TSIZE},
		{"max-pinned", required_argument, NULL, OPT_MAXPINNED},
		{"ranks", required_argument, NULL, OPT_RANKS},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, OPT_VERSION},
		/* ds_nvme_tune's spellings */
		{"nvme_dir", required_argument, NULL, OPT_PATH},
		{"io_size", required_argument, NULL, OPT_IOSIZE},
		{"no_read", no_argument, NULL, OPT_NOREAD},
		{"no_write", no_argument, NULL, OPT_NOWRITE},
		{"sweep_config", required_argument, NULL, OPT_SWEEP},
		{NULL, 0, NULL, 0},
	};
	bool engine_set = false;
	int c;

	A = (struct args){.io_size = 256u << 20,
			  .loops = 3,
			  .dir = {true, true},
			  .progress = -1,
			  .seed = 1,
			  .ranks = 1};
	while ((c = tool_getopt(argc, argv, "h", lo, 2)) != -1) {
		switch (c) {
		case OPT_PATH:
			if (A.npaths == MAXPATHS)
				tool_die(2, "--nvme-path: at most %d paths",
					 MAXPATHS);
			A.paths[A.npaths++] = optarg;
			break;
		case OPT_IOSIZE:
			A.io_size = tool_size_arg("--io-size", optarg);
			A.io_size_set = true;
			break;
		case OPT_LOOPS:
			A.loops = tool_uint_arg("--loops", optarg, 1);
			if (A.loops > MAXLOOPS)
				tool_die(2, "--loops: at most %d", MAXLOOPS);
			break;
		case OPT_NOREAD:
			A.dir[RD] = false;
			A.dir_set = true;
			break;
		case OPT_NOWRITE:
			A.dir[WR] = false;
			A.dir_set = true;
			break;
		case OPT_WORKLOAD:
			/* WL_SEQ, WL_SWAP */
			A.workload = 1 + one_of("--workload", optarg,
						(const char *[]){"seq", "swap",
								 NULL});
			break;
		case OPT_CONFIG:
			A.config = optarg;
			break;
		case OPT_LAYERS:
			A.layers = tool_uint_arg("--layers", optarg, 2);
			break;
		case OPT_TSIZE:
			A.tensor_size = tool_size_arg("--tensor-size", optarg);
			break;
		case OPT_MAXPINNED:
			A.max_pinned = tool_size_arg("--max-pinned", optarg);
			break;
		case OPT_SWEEP:
			A.sweep = optarg;
			break;
		case OPT_QUICK:
			A.quick = true;
			break;
		case OPT_PLOT:
			A.plot = optarg;
			break;
		case OPT_ENGINE:
			engine_set = true;
			/* PLOT_AUTO, PLOT_GNUPLOT, PLOT_SVG */
			A.engine = one_of("--plot-engine", optarg,
					  (const char *[]){"auto", "gnuplot",
							   "svg", NULL});
			break;
		case OPT_WRITECFG:
			A.write_config = optarg;
			break;
		case OPT_JSON:
			A.json = true;
			break;
		case OPT_VERBOSE:
			A.verbose = true;
			break;
		case OPT_UNPINNED:
			A.unpinned = true;
			break;
		case OPT_PROGRESS:
			A.progress = 1;
			break;
		case OPT_NOPROGRESS:
			A.progress = 0;
			break;
		case OPT_RANKS:
			if (tool_parse_uint(optarg, 1, &A.ranks) < 0 ||
			    A.ranks > MAXRANKS)
				tool_die(2,
					 "--ranks: '%s' is not a number of "
					 "ranks from 1 to %d",
					 optarg, MAXRANKS);
			break;
		case OPT_SEED:
			A.seed = tool_uint_arg("--seed", optarg, 0);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case OPT_VERSION:
			exit(tool_version());
		}
	}
	if (optind < argc)
		tool_die(2, "unexpected argument '%s' (see nvswap-tune --help)",
			 argv[optind]);
	if (!A.dir[RD] && !A.dir[WR])
		tool_die(2, "--no-read and --no-write together leave nothing "
			    "to measure");
	if (engine_set && !A.plot)
		tool_die(2, "--plot-engine without --plot: say where the "
			    "picture goes");
	if (A.progress < 0)
		A.progress = isatty(STDERR_FILENO) && !A.json;
}
/* ---------------------------------------------------------- set-up */

struct nvs_config *ucfg;

/* Without --nvme-path: the paths the config swaps to. */
static void paths_from_config(void)
{
	struct nvs_nvswap_config nv;
	struct nvs_offload_config off;

	if (nvs_config_nvswap(ucfg, &nv) == 0 && nv.npaths) {
		for (unsigned i = 0; i < nv.npaths && i < MAXPATHS; i++)
			A.paths[A.npaths++] = nv.nvme_paths[i];
		return;
	}
	for (int k = NVS_OFFLOAD_PARAM; k <= NVS_OFFLOAD_OPTIMIZER; k++)
		if (nvs_config_offload(ucfg, (enum nvs_offload_kind)k, &off) ==
			    0 &&
		    off.device == NVS_DEVICE_NVME && off.nvme_path) {
			A.paths[A.npaths++] = off.nvme_path;
			return;
		}
}

/* --config (or "{}"), the workload it implies, the paths it names, and
 * the flags that belong to the other workload. */
void tune_load_config(void)
{
	struct nvs_offload_config off;
	bool by_default;
	int ret;

	if (A.config) {
		ret = nvs_config_load(A.config, &ucfg);
		if (ret < 0)
			tool_die(ret == -EINVAL ? 2 : 1, "--config: %s",
				 tool_last_error());
	} else if (nvs_config_load_string("{}", "<defaults>", &ucfg) < 0) {
		tool_die(1, "default config: %s", tool_last_error());
	}
	by_default = A.workload == WL_UNSET;
	if (by_default)
		A.workload = A.config ? WL_SWAP : WL_SEQ;
	if (!A.npaths && A.config)
		paths_from_config();
	if (!A.npaths)
		tool_die(2,
			 "--nvme-path is required: a directory on the disk "
			 "to tune%s (see nvswap-tune --help)",
			 A.config ? " (the --config names none)" : "");
	if (A.workload == WL_SEQ) {
		if (A.layers || A.tensor_size || A.max_pinned)
			tool_die(2, "--layers, --tensor-size and --max-pinned "
				    "describe the swap workload: drop them or "
				    "use --workload swap");
		return;
	}
	if (A.ranks > 1)
		tool_die(2,
			 "--ranks %u: only the sequential sweep (--workload "
			 "seq) runs several ranks; the swap workload runs "
			 "one",
			 A.ranks);
	if (A.io_size_set || A.dir_set || A.plot)
		tool_die(2, "--io-size, --no-read, --no-write and --plot "
			    "belong to the sequential sweep (--workload seq); "
			    "the swap workload reads and writes whole "
			    "layers");
	if (!A.layers || !A.tensor_size)
		tool_die(2,
			 "the swap workload%s needs the model's layers, which "
			 "%s: give --layers N and --tensor-size SIZE (bytes "
			 "of parameters per layer), or --workload seq for the "
			 "sequential sweep",
			 by_default ? " (the default with --config)" : "",
			 A.config ? "a DeepSpeed config does not hold"
				  : "were not given");
	if (A.tensor_size < 4096)
		tool_die(2, "--tensor-size: at least 4K (a layer smaller "
			    "than a page is no swap workload)");
	if (A.config &&
	    nvs_config_offload(ucfg, NVS_OFFLOAD_PARAM, &off) == 0 &&
	    off.device != NVS_DEVICE_NVME)
		tool_die(2,
			 "--config %s: zero_optimization.offload_param.device "
			 "is \"%s\", not \"nvme\": the parameter swapper the "
			 "swap workload replays is not used; tune the aio "
			 "settings with --workload seq",
			 A.config,
			 off.device == NVS_DEVICE_CPU ? "cpu" : "none");
}

void tune_check_path(const char *dir, uint64_t need, const char *what)
{
	struct statvfs vfs;
	struct stat st;
	uint64_t avail;

	if (stat(dir, &st) < 0)
		tool_die(1, "--nvme-path %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		tool_die(1, "--nvme-path %s: not a directory", dir);
	if (statvfs(dir, &vfs) < 0)
		tool_die(1, "--nvme-path %s: %s", dir, strerror(errno));
	if (vfs.f_flag & ST_RDONLY)
		tool_die(1, "--nvme-path %s: on a read-only filesystem", dir);
	if (access(dir, W_OK | X_OK) < 0)
		tool_die(1, "--nvme-path %s: cannot write there: %s", dir,
			 strerror(errno));
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	/* f_blocks 0: a filesystem with no size to report (ramfs) */
	if (vfs.f_blocks && avail < need + (need >> 6))
		tool_die(1,
			 "--nvme-path %s: %.1f MiB free, not enough for %s "
			 "(and 2%% slack); lower it or free some space",
			 dir, (double)avail / MIB, what);
}
/* Can @path be written when the sweep is done? Asked without creating
 * anything, so an interrupted sweep leaves no file behind: an existing
 * file must be writable, and its directory must take new files when the
 * file is new or (@by_rename: written to a temporary, renamed over) is
 * always replaced. */
static void check_target(const char *opt, const char *path, bool by_rename)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	bool exists = stat(path, &st) == 0;

	if (!exists && errno != ENOENT)
		tool_die(1, "%s %s: %s", opt, path, strerror(errno));
	if (exists && S_ISDIR(st.st_mode))
		tool_die(1, "%s %s: a directory, not a file", opt, path);
	if (exists && access(path, W_OK) < 0)
		tool_die(1, "%s %s: cannot write it: %s", opt, path,
			 strerror(errno));
	if (exists && !by_rename)
		return;
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (access(dir, W_OK | X_OK) < 0)
		tool_die(1, "%s %s: cannot create files in %s: %s", opt, path,
			 dir, strerror(errno));
}

/* The config --write-config will get (@snip merged in; the snippet is
 * consumed) loads, and the file can be written: found now, not after
 * the sweep. */
void tune_check_write_config(json_t *snip, enum nvs_backend be)
{
	tune_held = snip; /* freed by the cleanup when this dies */
	free(tune_merged_config_or_die(snip, be));
	tune_held = NULL;
	json_decref(snip);
	check_target("--write-config", A.write_config, true);
}

void tune_check_args(void)
{
	uint32_t maxbs = 0;
	char what[64], sz[32];

	snprintf(what, sizeof(what), "--io-size %s%s",
		 tool_size_str(A.io_size, sz, sizeof(sz)),
		 A.ranks > 1 ? " x --ranks" : "");
	for (unsigned i = 0; i < A.npaths; i++) {
		if (A.workload == WL_SEQ)
			tune_check_path(A.paths[i],
					(uint64_t)A.io_size * A.ranks, what);
		if (!realpath(A.paths[i], real[i]))
			tool_die(1, "--nvme-path %s: %s", A.paths[i],
				 strerror(errno));
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(real[i], real[j]))
				tool_die(2, "--nvme-path %s is given twice",
					 A.paths[i]);
	}
	if (A.workload == WL_SWAP)
		return; /* tune_swap_setup() goes on */
	/* A config file or plot that cannot be written is found now, not
	 * after the sweep. */
	if (A.write_config)
		tune_check_write_config(tune_snippet(&dflt), dflt.be);
	if (A.plot)
		check_target("--plot", A.plot, false);
	for (unsigned i = 0; i < S.nbs; i++)
		if (S.bs[i] > maxbs)
			maxbs = S.bs[i];
	if (A.io_size < maxbs) {
		char a[32], b[32];
		tool_die(2,
			 "--io-size %s is smaller than block_size %s in the "
			 "search space: raise --io-size or drop that block "
			 "size",
			 tool_size_str(A.io_size, a, sizeof(a)),
			 tool_size_str(maxbs, b, sizeof(b)));
	}
}
