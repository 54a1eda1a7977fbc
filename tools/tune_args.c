// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's command line: the usage text, parsing every option into
 * A, and the checks made before the sweep (the paths, the --write-config
 * and --plot targets, --io_size against the search space).
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
	fputs("usage: nvswap-tune --nvme_path DIR [--nvme_path DIR ...] "
	      "[options]\n"
	      "\n"
	      "Finds the aio settings that move data fastest between memory "
	      "and the disk(s)\n"
	      "under DIR: sweeps block_size x queue_depth x "
	      "intra_op_parallelism x\n"
	      "overlap_events x single_submit x backend through the library, "
	      "in this\n"
	      "process, with O_DIRECT and page-locked buffers, reading and "
	      "writing one\n"
	      "file per path (all paths at once, as the swapper stripes "
	      "them). The best\n"
	      "points, and the settings a config without an \"aio\" section "
	      "gets, are then\n"
	      "measured again, interleaved; the winners come from that "
	      "round. GB = 2^30\n"
	      "bytes, as in ds_io and nvswap-io.\n"
	      "\n"
	      "  --nvme_path DIR       a directory on the disk to tune "
	      "(required; repeat\n"
	      "                        for several disks; also "
	      "--nvme_dir)\n"
	      "  --io_size N           bytes per op and path, K/M/G suffixes "
	      "(default 256M)\n"
	      "  --loops N             timed ops per point and direction "
	      "(default 3)\n"
	      "  --no_read, --no_write measure one direction only\n"
	      "  --sweep_config FILE   the search space as JSON (see below)\n"
	      "  --quick               prune as it goes: one op of 1/16 "
	      "--io_size per point,\n"
	      "                        the best 8 of each criterion again "
	      "at 1/4, the best 3\n"
	      "                        of those at full size: well under a "
	      "minute\n"
	      "  --plot FILE.svg       GB/s over block size x queue depth, "
	      "one panel per\n"
	      "                        direction\n"
	      "  --plot-engine E       auto|gnuplot|svg (default auto: "
	      "gnuplot when installed,\n"
	      "                        else a self-contained SVG)\n"
	      "  --write-config FILE   put the best combined settings into "
	      "FILE: merged into\n"
	      "                        its \"aio\" section when it exists, "
	      "created otherwise\n"
	      "  --json                results as one JSON object on stdout\n"
	      "  --verbose             also print every point of the sweep\n"
	      "  --unpinned            ordinary memory instead of page-locked "
	      "buffers\n"
	      "  --progress, --no-progress  the progress bar on stderr "
	      "(default: when\n"
	      "                        stderr is a terminal)\n"
	      "  --seed N              order of the points (shuffled; "
	      "default 1)\n"
	      "  -h, --help            this text\n"
	      "\n"
	      "Default search space (ds_nvme_tune's): block_size 1M 8M, "
	      "queue_depth 32 128,\n"
	      "intra_op_parallelism 1 2 4 8, overlap_events true false, "
	      "single_submit false\n"
	      "true, backend: every one that works here (psync runs each "
	      "request on its\n"
	      "worker, so only block size and parallelism vary for it). A "
	      "--sweep_config\n"
	      "file replaces any of these lists, e.g.\n"
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
	      "(several paths).\n"
	      "Ctrl-C removes the test files. Exit status: 0, 1 when the run "
	      "fails, 2 on\n"
	      "bad usage.\n",
	      f);
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
	};
	static const struct option lo[] = {
		{"nvme_path", required_argument, NULL, OPT_PATH},
		{"nvme_dir", required_argument, NULL, OPT_PATH},
		{"io_size", required_argument, NULL, OPT_IOSIZE},
		{"loops", required_argument, NULL, OPT_LOOPS},
		{"no_read", no_argument, NULL, OPT_NOREAD},
		{"no_write", no_argument, NULL, OPT_NOWRITE},
		{"sweep_config", required_argument, NULL, OPT_SWEEP},
		{"quick", no_argument, NULL, OPT_QUICK},
		{"plot", required_argument, NULL, OPT_PLOT},
		{"plot-engine", required_argument, NULL, OPT_ENGINE},
		{"write-config", required_argument, NULL, OPT_WRITECFG},
		{"write_config", required_argument, NULL, OPT_WRITECFG},
		{"json", no_argument, NULL, OPT_JSON},
		{"verbose", no_argument, NULL, OPT_VERBOSE},
		{"unpinned", no_argument, NULL, OPT_UNPINNED},
		{"progress", no_argument, NULL, OPT_PROGRESS},
		{"no-progress", no_argument, NULL, OPT_NOPROGRESS},
		{"seed", required_argument, NULL, OPT_SEED},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool engine_set = false;
	int c;

	A = (struct args){.io_size = 256u << 20,
			  .loops = 3,
			  .dir = {true, true},
			  .progress = -1,
			  .seed = 1};
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case OPT_PATH:
			if (A.npaths == MAXPATHS)
				tool_die(2, "--nvme_path: at most %d paths",
					 MAXPATHS);
			A.paths[A.npaths++] = optarg;
			break;
		case OPT_IOSIZE:
			A.io_size = tool_size_arg("--io_size", optarg);
			break;
		case OPT_LOOPS:
			A.loops = tool_uint_arg("--loops", optarg, 1);
			if (A.loops > MAXLOOPS)
				tool_die(2, "--loops: at most %d", MAXLOOPS);
			break;
		case OPT_NOREAD:
			A.dir[RD] = false;
			break;
		case OPT_NOWRITE:
			A.dir[WR] = false;
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
			if (!strcmp(optarg, "auto"))
				A.engine = PLOT_AUTO;
			else if (!strcmp(optarg, "gnuplot"))
				A.engine = PLOT_GNUPLOT;
			else if (!strcmp(optarg, "svg"))
				A.engine = PLOT_SVG;
			else
				tool_die(2,
					 "--plot-engine: '%s' is not one of "
					 "auto, gnuplot, svg",
					 optarg);
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
		case OPT_SEED:
			A.seed = tool_uint_arg("--seed", optarg, 0);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc)
		tool_die(2, "unexpected argument '%s' (see -h)", argv[optind]);
	if (!A.npaths)
		tool_die(2, "--nvme_path is required: a directory on the disk "
			    "to tune (see -h)");
	if (!A.dir[RD] && !A.dir[WR])
		tool_die(2, "--no_read and --no_write together leave nothing "
			    "to measure");
	if (engine_set && !A.plot)
		tool_die(2, "--plot-engine without --plot: say where the "
			    "picture goes");
	if (A.progress < 0)
		A.progress = isatty(STDERR_FILENO) && !A.json;
}
/* ---------------------------------------------------------- set-up */

static void check_path(const char *dir)
{
	struct statvfs vfs;
	struct stat st;
	uint64_t avail;
	char need[32];

	if (stat(dir, &st) < 0)
		tool_die(1, "--nvme_path %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		tool_die(1, "--nvme_path %s: not a directory", dir);
	if (statvfs(dir, &vfs) < 0)
		tool_die(1, "--nvme_path %s: %s", dir, strerror(errno));
	if (vfs.f_flag & ST_RDONLY)
		tool_die(1, "--nvme_path %s: on a read-only filesystem", dir);
	if (access(dir, W_OK | X_OK) < 0)
		tool_die(1, "--nvme_path %s: cannot write there: %s", dir,
			 strerror(errno));
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	/* f_blocks 0: a filesystem with no size to report (ramfs) */
	if (vfs.f_blocks && avail < A.io_size + (A.io_size >> 6))
		tool_die(1,
			 "--nvme_path %s: %.1f MiB free, not enough for "
			 "--io_size %s (and 2%% slack); lower --io_size or "
			 "free some space",
			 dir, (double)avail / MIB,
			 tool_size_str(A.io_size, need, sizeof(need)));
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

void tune_check_args(void)
{
	uint32_t maxbs = 0;

	for (unsigned i = 0; i < A.npaths; i++) {
		check_path(A.paths[i]);
		if (!realpath(A.paths[i], real[i]))
			tool_die(1, "--nvme_path %s: %s", A.paths[i],
				 strerror(errno));
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(real[i], real[j]))
				tool_die(2, "--nvme_path %s is given twice",
					 A.paths[i]);
	}
	/* A config file or plot that cannot be written is found now, not
	 * after the sweep. */
	if (A.write_config) {
		free(tune_merged_config_or_die(&dflt));
		check_target("--write-config", A.write_config, true);
	}
	if (A.plot)
		check_target("--plot", A.plot, false);
	for (unsigned i = 0; i < S.nbs; i++)
		if (S.bs[i] > maxbs)
			maxbs = S.bs[i];
	if (A.io_size < maxbs) {
		char a[32], b[32];
		tool_die(2,
			 "--io_size %s is smaller than block_size %s in the "
			 "search space: raise --io_size or drop that block "
			 "size",
			 tool_size_str(A.io_size, a, sizeof(a)),
			 tool_size_str(maxbs, b, sizeof(b)));
	}
}
