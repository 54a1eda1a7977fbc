// SPDX-License-Identifier: MIT
/*
 * nvswap-tune: the ds_nvme_tune of nvswap. Sweeps the aio handle's
 * settings in-process on one or more swap paths with O_DIRECT, measures
 * the finalists again, interleaved with the default settings, and prints
 * (or merges into a config file) the winner as exactly the keys
 * nvs_config_load() reads. Public API only. Run with -h for every option.
 */
#include "tool.h"

#include <nvswap/nvswap.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXV 16	     /* values per dimension of the search space */
#define MAXPATHS 16  /* NVS_CONFIG_MAX_PATHS */
#define MAXLOOPS 100 /* timed ops per point and direction */
#define FINALISTS 3  /* per criterion, into the final round */
#define NARROW 8     /* --quick: per criterion, into the narrowing round */
#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

extern char **environ;

enum { RD = 0, WR = 1, NDIR = 2 };
/* Criteria: read, write, and combined (the harmonic mean of the two: the
 * rate of a swap that reads and writes the same bytes). */
enum { CRIT_COMBINED = 2, NCRIT = 3 };
static const char *const crit_name[NCRIT] = {"read", "write", "combined"};
/* Rounds: every point; (--quick) the best few dozen at a quarter size;
 * the finalists and the defaults at full size, interleaved. */
enum { SWEEP = 0, NARROWED = 1, FINAL = 2, NROUNDS = 3 };
static const char *const round_name[NROUNDS] = {"sweep", "narrow", "final"};
enum { PLOT_AUTO, PLOT_GNUPLOT, PLOT_SVG };

struct space {
	uint32_t bs[MAXV], qd[MAXV], par[MAXV];
	bool ov[2], ss[2];
	enum nvs_backend be[3];
	unsigned nbs, nqd, npar, nov, nss, nbe;
};

struct setting {
	enum nvs_backend be; /* never AUTO */
	uint32_t bs, qd, par;
	bool ov, ss;
};

struct dstat {
	double med, lo, hi;
	unsigned n;
};

struct point {
	struct setting s;
	bool is_default; /* what a config without an "aio" section gives */
	int reached;	 /* the last round it is measured in */
	char *skip;	 /* why no handle could be made; NULL = measured */
	double samp[NDIR][MAXLOOPS];
	unsigned nsamp[NDIR];
	struct dstat st[NROUNDS][NDIR];
};

static struct args {
	const char *paths[MAXPATHS];
	unsigned npaths;
	size_t io_size;
	unsigned loops;
	bool dir[NDIR]; /* measure reads, writes */
	bool quick, json, verbose, unpinned;
	int progress; /* -1 when stderr is a terminal, 0 off, 1 on */
	const char *sweep, *plot, *write_config;
	int engine;
	unsigned seed;
} A;

static struct space S;
static struct point *P;
static unsigned np;
static enum nvs_backend auto_be;      /* what NVS_BACKEND_AUTO picks here */
static struct setting dflt;	      /* nvs_config_aio_opts() of "{}" */
static char real[MAXPATHS][PATH_MAX]; /* the paths, resolved */
static int fds[MAXPATHS];
static struct nvs_aio *checker; /* default settings: reads written data back */
static unsigned char *wbuf[MAXPATHS], *rbuf[MAXPATHS];
static const char *backend_env; /* NVSWAP_BACKEND, when it was set */

/* ------------------------------------------------- temporary files */

/* Files to remove on any exit, Ctrl-C included. The signal handler only
 * reads this table; an entry is cleared by writing its first byte. */
#define MAXTMP 40
static char tmp[MAXTMP][PATH_MAX];
static volatile sig_atomic_t ntmp;

/* Registers and returns "<base><mid><pid><ext>". */
static const char *tmp_add(const char *base, const char *mid, const char *ext)
{
	if (ntmp == MAXTMP)
		tool_die(1, "too many temporary files");
	snprintf(tmp[ntmp], PATH_MAX, "%s%s%ld%s", base, mid, (long)getpid(),
		 ext);
	return tmp[ntmp++];
}

static void tmp_forget(const char *path)
{
	for (int i = 0; i < ntmp; i++)
		if (tmp[i] == path)
			tmp[i][0] = 0;
}

static void tmp_remove(void)
{
	for (int i = 0; i < ntmp; i++)
		if (tmp[i][0])
			unlink(tmp[i]);
}

static bool progress_shown;

static void progress_end(void)
{
	if (progress_shown)
		fputs("\r\033[K", stderr);
	progress_shown = false;
}

/* The sweep config's text and parsed tree while load_sweep judges them:
 * a refusal exits from deep inside, and cleanup() frees them then. */
static json_t *sweep_root;
/* main()'s point lists and config snippet, for cleanup() when a later
 * step (a failing gnuplot, the config write) dies. */
static struct point **held_all, **held_fin;
static json_t *held_snip;
static char *sweep_text;

static void cleanup(void)
{
	progress_end();
	tmp_remove();
	json_decref(sweep_root);
	sweep_root = NULL;
	free(held_all);
	free(held_fin);
	json_decref(held_snip);
	held_all = held_fin = NULL;
	held_snip = NULL;
	free(sweep_text);
	sweep_text = NULL;
}

static void on_signal(int sig)
{
	static const char msg[] = "\nnvswap-tune: interrupted; temporary "
				  "files removed\n";

	tmp_remove();
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing left to tell */
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ------------------------------------------------------------ text */

static const char *bname(enum nvs_backend b)
{
	return nvs_backend_name(b);
}

/* "io_uring 1M qd 128 par 2 overlap batch" */
static const char *setting_str(const struct setting *s, char *buf, size_t len)
{
	char bs[32];

	tool_size_str(s->bs, bs, sizeof(bs));
	snprintf(buf, len, "%s %s qd %u par %u %s %s", bname(s->be), bs, s->qd,
		 s->par, s->ov ? "overlap" : "sequential",
		 s->ss ? "single-submit" : "batch-submit");
	return buf;
}

/* ------------------------------------------------------- arguments */

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

static void parse(int argc, char **argv)
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

/* ---------------------------------------------------- search space */

/* Line and column of the first "key" in @text, for messages. */
static void locate(const char *text, const char *key, int *line, int *col)
{
	char quoted[80];
	const char *hit;

	*line = 1;
	*col = 1;
	snprintf(quoted, sizeof(quoted), "\"%s\"", key);
	hit = strstr(text, quoted);
	if (!hit)
		return;
	for (const char *c = text; c < hit; c++) {
		if (*c == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

static void bad_key(const char *key, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
static void bad_key(const char *key, const char *fmt, ...)
{
	char msg[512], full[PATH_MAX + 1024];
	va_list ap;
	int line, col;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	locate(sweep_text, key, &line, &col);
	/* @key lives in the tree cleanup() frees before printing. */
	snprintf(full, sizeof(full), "%s:%d:%d: %s: %s", A.sweep, line, col,
		 key, msg);
	tool_die(2, "%s", full);
}

/* The values of @key as an array (one value becomes a list of one). */
static json_t *values(json_t *v, const char *key, size_t *n)
{
	if (json_is_array(v)) {
		*n = json_array_size(v);
		if (!*n)
			bad_key(key, "an empty list: give at least one value");
		if (*n > MAXV)
			bad_key(key, "%zu values; at most %d", *n, MAXV);
		return v;
	}
	*n = 1;
	return NULL;
}

static json_t *nth(json_t *arr, json_t *v, size_t i)
{
	return arr ? json_array_get(arr, i) : v;
}

static uint32_t u32_value(const char *key, json_t *e, uint64_t lo, uint64_t hi,
			  bool size)
{
	uint64_t n = 0;

	if (json_is_integer(e) && json_integer_value(e) >= 0)
		n = (uint64_t)json_integer_value(e);
	else if (size && json_is_string(e) &&
		 nvs_parse_size(json_string_value(e), &n) == 0)
		;
	else
		bad_key(key, "%s",
			size ? "each value is a byte count or "
			       "a size such as \"1M\""
			     : "each value is a whole number");
	if (n < lo || n > hi)
		bad_key(key, "%llu is not from %llu to %llu",
			(unsigned long long)n, (unsigned long long)lo,
			(unsigned long long)hi);
	if (size && n % 512)
		bad_key(key, "%llu is not a multiple of 512",
			(unsigned long long)n);
	return (uint32_t)n;
}

/* @key's values, each from @lo to @hi, into @list without repeats. */
static void u32_list(const char *key, json_t *v, uint32_t *list, unsigned *n,
		     uint64_t lo, uint64_t hi, bool size)
{
	size_t cnt;
	json_t *arr = values(v, key, &cnt);

	*n = 0;
	for (size_t i = 0; i < cnt; i++) {
		uint32_t x = u32_value(key, nth(arr, v, i), lo, hi, size);
		unsigned k = 0;
		while (k < *n && list[k] != x)
			k++;
		if (k == *n)
			list[(*n)++] = x;
	}
}

static void add_bool(bool *list, unsigned *n, bool v)
{
	for (unsigned i = 0; i < *n; i++)
		if (list[i] == v)
			return;
	list[(*n)++] = v;
}

static bool be_ok[4];	    /* probed: this backend makes a handle */
static char be_why[4][256]; /* else why not */

static void add_backend(enum nvs_backend b)
{
	for (unsigned i = 0; i < S.nbe; i++)
		if (S.be[i] == b)
			return;
	S.be[S.nbe++] = b;
}

static void add_available_backends(void)
{
	for (int b = NVS_BACKEND_IO_URING; b <= NVS_BACKEND_PSYNC; b++)
		if (be_ok[b])
			add_backend((enum nvs_backend)b);
}

static void bool_list(const char *key, json_t *v, bool *list, unsigned *n,
		      bool invert)
{
	size_t cnt;
	json_t *arr = values(v, key, &cnt);

	*n = 0;
	for (size_t i = 0; i < cnt; i++) {
		json_t *e = nth(arr, v, i);
		if (!json_is_boolean(e))
			bad_key(key, "each value is true or false");
		add_bool(list, n, json_is_true(e) != invert);
	}
}

static void load_sweep(void)
{
	static const char *const known =
		"block_size, queue_depth, intra_op_parallelism (io_parallel), "
		"overlap_events, sequential_requests, single_submit, backend";
	json_error_t err;
	json_t *root, *v;
	const char *key;
	bool have_ov = false, have_par = false;
	FILE *f;
	long len;
	char *text;

	f = fopen(A.sweep, "r");
	if (!f)
		tool_die(1, "--sweep_config %s: %s", A.sweep, strerror(errno));
	if (fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) < 0 || len > (1 << 20))
		tool_die(1, "--sweep_config %s: not a small regular file",
			 A.sweep);
	sweep_text = text = calloc(1, (size_t)len + 1);
	if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
		fclose(f);
		tool_die(1, "--sweep_config %s: cannot read it", A.sweep);
	}
	fclose(f);
	sweep_root = root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		tool_die(2, "%s:%d:%d: %s", A.sweep, err.line, err.column,
			 err.text);
	if (!json_is_object(root))
		tool_die(2,
			 "%s:1:1: the sweep config is a JSON object, e.g. "
			 "{\"block_size\": [\"1M\", \"8M\"]}",
			 A.sweep);
	json_object_foreach(root, key, v)
	{
		size_t cnt;
		json_t *arr = values(v, key, &cnt);

		if (!strcmp(key, "block_size")) {
			u32_list(key, v, S.bs, &S.nbs, 512,
				 NVS_AIO_MAX_BLOCK_SIZE, true);
		} else if (!strcmp(key, "queue_depth")) {
			u32_list(key, v, S.qd, &S.nqd, 1,
				 NVS_AIO_MAX_QUEUE_DEPTH, false);
		} else if (!strcmp(key, "intra_op_parallelism") ||
			   !strcmp(key, "io_parallel")) {
			if (have_par)
				bad_key(key, "intra_op_parallelism and "
					     "io_parallel are one key: give "
					     "one");
			have_par = true;
			u32_list(key, v, S.par, &S.npar, 1,
				 NVS_AIO_MAX_PARALLELISM, false);
		} else if (!strcmp(key, "overlap_events") ||
			   !strcmp(key, "sequential_requests")) {
			if (have_ov)
				bad_key(key, "overlap_events and "
					     "sequential_requests say the "
					     "same thing: give one");
			have_ov = true;
			bool_list(key, v, S.ov, &S.nov,
				  key[0] == 's'); /* sequential = !overlap */
		} else if (!strcmp(key, "single_submit")) {
			bool_list(key, v, S.ss, &S.nss, false);
		} else if (!strcmp(key, "backend")) {
			S.nbe = 0;
			for (size_t i = 0; i < cnt; i++) {
				json_t *e = nth(arr, v, i);
				int b = json_is_string(e)
						? tool_backend(
							  json_string_value(e))
						: -1;
				if (b < 0)
					bad_key(key, "each value is one of "
						     "\"auto\", \"io_uring\", "
						     "\"libaio\", \"psync\"");
				if (b == NVS_BACKEND_AUTO)
					add_available_backends();
				else if (!be_ok[b])
					bad_key(key,
						"%s does not work here: %s",
						bname((enum nvs_backend)b),
						be_why[b]);
				else
					add_backend((enum nvs_backend)b);
			}
		} else {
			bad_key(key, "not a sweep key; the keys are %s", known);
		}
	}
	json_decref(root);
	sweep_root = NULL;
	sweep_text = NULL;
	free(text);
}

static void default_space(void)
{
	static const uint32_t bs[] = {1u << 20, 8u << 20};
	static const uint32_t qd[] = {32, 128};
	static const uint32_t par[] = {1, 2, 4, 8};

	memcpy(S.bs, bs, sizeof(bs));
	S.nbs = 2;
	memcpy(S.qd, qd, sizeof(qd));
	S.nqd = 2;
	memcpy(S.par, par, sizeof(par));
	S.npar = 4;
	S.ov[0] = true;
	S.ov[1] = false;
	S.nov = 2;
	S.ss[0] = false;
	S.ss[1] = true;
	S.nss = 2;
	S.nbe = 0;
	if (backend_env) {
		int b = tool_backend(backend_env);
		if (b > 0 && be_ok[b])
			add_backend((enum nvs_backend)b);
	}
	if (!S.nbe)
		add_available_backends();
}

/* Which backends work, and what AUTO and an empty config give. */
static void probe(void)
{
	struct nvs_config *cfg;
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;
	int ret;

	backend_env = getenv("NVSWAP_BACKEND");
	if (backend_env && (!*backend_env || !strcmp(backend_env, "auto")))
		backend_env = NULL;
	if (backend_env)
		backend_env = strdup(backend_env);
	/* The environment variable overrides every handle's backend: the
	 * tuner names backends itself, so it honours the variable by
	 * tuning only that backend (unless --sweep_config lists them). */
	unsetenv("NVSWAP_BACKEND");
	for (int b = NVS_BACKEND_IO_URING; b <= NVS_BACKEND_PSYNC; b++) {
		nvs_aio_opts_init(&o);
		o.backend = (enum nvs_backend)b;
		o.intra_op_parallelism = 1;
		ret = nvs_aio_create(&o, &h);
		be_ok[b] = ret == 0;
		if (ret < 0)
			snprintf(be_why[b], sizeof(be_why[b]), "%s",
				 nvs_last_error());
		nvs_aio_destroy(h);
	}
	ret = nvs_config_load_string("{}", "<defaults>", &cfg);
	if (ret < 0 || nvs_config_aio_opts(cfg, &o) < 0)
		tool_die(1, "default config: %s", nvs_last_error());
	nvs_config_free(cfg);
	ret = nvs_aio_create(&o, &h);
	if (ret < 0 || nvs_aio_get_stats(h, &st) < 0)
		tool_die(1, "no backend works here: %s (see nvswap-report)",
			 nvs_last_error());
	nvs_aio_destroy(h);
	auto_be = st.backend;
	dflt = (struct setting){.be = auto_be,
				.bs = o.block_size,
				.qd = o.queue_depth,
				.par = o.intra_op_parallelism,
				.ov = o.overlap_events,
				.ss = o.single_submit};
}

static bool same(const struct setting *a, const struct setting *b)
{
	return a->be == b->be && a->bs == b->bs && a->qd == b->qd &&
	       a->par == b->par && a->ov == b->ov && a->ss == b->ss;
}

static struct point *add_point(const struct setting *s)
{
	struct point *p;

	for (unsigned i = 0; i < np; i++)
		if (same(&P[i].s, s))
			return &P[i];
	p = realloc(P, (np + 1) * sizeof(*P));
	if (!p)
		tool_die(1, "out of memory");
	P = p;
	p = &P[np++];
	memset(p, 0, sizeof(*p));
	p->s = *s;
	return p;
}

static void make_points(void)
{
	for (unsigned b = 0; b < S.nbe; b++)
		for (unsigned i = 0; i < S.nbs; i++)
			for (unsigned q = 0; q < S.nqd; q++)
				for (unsigned t = 0; t < S.npar; t++)
					for (unsigned o = 0; o < S.nov; o++)
						for (unsigned m = 0; m < S.nss;
						     m++) {
							/* psync ignores the
							 * queue settings */
							if (S.be[b] ==
								    NVS_BACKEND_PSYNC &&
							    (q || o || m))
								continue;
							add_point(&(
								struct setting){
								.be = S.be[b],
								.bs = S.bs[i],
								.qd = S.qd[q],
								.par = S.par[t],
								.ov = S.ov[o],
								.ss = S.ss[m]});
						}
	add_point(&dflt)->is_default = true;
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

static char *merged_config_or_die(const struct setting *best);

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

static void check_args(void)
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
		free(merged_config_or_die(&dflt));
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

/* One file per path, written in full (the reads' data, the writes'
 * target: every point overwrites the same blocks), and synced. */
static void prepare(void)
{
	struct nvs_aio *h;
	int ret, err;

	ret = nvs_aio_create(NULL, &h);
	if (ret < 0)
		tool_die(1, "%s", nvs_last_error());
	checker = h;
	for (unsigned i = 0; i < A.npaths; i++) {
		const char *f = tmp_add(A.paths[i], "/nvswap-tune.", ".tmp");

		if (A.unpinned) {
			if (posix_memalign((void **)&wbuf[i], 4096,
					   A.io_size) ||
			    posix_memalign((void **)&rbuf[i], 4096, A.io_size))
				tool_die(1, "out of memory for 2 x %zu bytes",
					 A.io_size);
		} else {
			wbuf[i] = nvs_pinned_alloc(A.io_size, &err);
			rbuf[i] = wbuf[i] ? nvs_pinned_alloc(A.io_size, &err)
					  : NULL;
			if (!rbuf[i])
				tool_die(1,
					 "page-locked buffers (2 x %.0f MiB "
					 "per path): %s; raise the memlock "
					 "limit (ulimit -l), lower --io_size, "
					 "or pass --unpinned",
					 (double)A.io_size / MIB,
					 nvs_last_error());
		}
		tool_pattern(wbuf[i], A.io_size, 1000 + i);
		fds[i] = open(f, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
		if (fds[i] < 0 && errno == EINVAL)
			tool_die(1,
				 "--nvme_path %s: the filesystem refuses "
				 "O_DIRECT, so every figure would measure the "
				 "page cache, not the disk (ramfs, or tmpfs "
				 "before Linux 6.6?); tune a path on the disk "
				 "itself",
				 A.paths[i]);
		if (fds[i] < 0)
			tool_die(1, "%s: %s", f, strerror(errno));
		ret = nvs_aio_pwrite_fd(h, wbuf[i], A.io_size, fds[i], 0,
					false);
		if (ret < 0)
			tool_die(1, "writing the test file %s: %s", f,
				 nvs_last_error());
		if (fsync(fds[i]) < 0)
			tool_die(1, "syncing %s: %s", f, strerror(errno));
	}
}

/* ------------------------------------------------------ measuring */

static struct {
	double t0, total, done, last;
	const char *what;
	unsigned pts, npts;
} prog;

static void progress_draw(bool force)
{
	double now = tool_now(), el = now - prog.t0, frac;
	char eta[48] = "estimating";
	int bar = 24, fill;

	if (!A.progress || (!force && now - prog.last < 0.1))
		return;
	prog.last = now;
	frac = prog.total > 0 ? prog.done / prog.total : 0;
	if (frac > 1)
		frac = 1;
	if (prog.done > 0 && el > 0.5)
		snprintf(eta, sizeof(eta), "~%.0f s left",
			 el / prog.done * (prog.total - prog.done));
	fill = (int)(frac * bar + 0.5);
	fprintf(stderr,
		"\r[%.*s%.*s] %s %u/%u points, %.0f s elapsed, %s\033[K", fill,
		"########################", bar - fill,
		"........................", prog.what, prog.pts, prog.npts, el,
		eta);
	fflush(stderr);
	progress_shown = true;
}

static size_t op_size(const struct point *p, int round)
{
	size_t n, min;

	if (round == FINAL || !A.quick)
		return A.io_size;
	/* --quick: a sixteenth of the op in the sweep, a quarter in the
	 * narrowing round, but at least two requests per worker. */
	n = A.io_size / (round == SWEEP ? 16 : 4);
	min = 2 * (size_t)p->s.bs * p->s.par;
	if (n < min)
		n = min;
	n &= ~(size_t)4095;
	if (n == 0 || n > A.io_size)
		n = A.io_size;
	return n;
}

/* Every path's file, @n bytes from offset 0, queued at once and waited
 * for. Returns the seconds it took. */
static double one_op(struct nvs_aio *h, const struct point *p, int d, size_t n)
{
	double t0 = tool_now();
	char s[96];
	int ret;

	for (unsigned i = 0; i < A.npaths; i++) {
		struct nvs_aio_io io = {
			.opcode = d == RD ? NVS_AIO_READ : NVS_AIO_WRITE,
			.buf = d == RD ? rbuf[i] : wbuf[i],
			.nbytes = n,
			.fd = fds[i],
		};
		ret = nvs_aio_submit(h, &io, NULL);
		if (ret < 0)
			tool_die(1, "%s with %s: %s", crit_name[d],
				 setting_str(&p->s, s, sizeof(s)),
				 nvs_last_error());
	}
	ret = nvs_aio_wait(h);
	if (ret < 0)
		tool_die(1, "%s with %s: %s", crit_name[d],
			 setting_str(&p->s, s, sizeof(s)), nvs_last_error());
	return tool_now() - t0;
}

/* Reads land on a buffer whose every 512-byte sector was spoiled first,
 * so a request that moved nothing cannot pass for one that worked. */
static void spoil(size_t n)
{
	for (unsigned i = 0; i < A.npaths; i++)
		for (size_t off = 0; off < n; off += 512)
			rbuf[i][off] = (unsigned char)~wbuf[i][off];
}

static void verify(const struct point *p, int d, size_t n)
{
	char s[96];

	for (unsigned i = 0; i < A.npaths; i++) {
		if (!memcmp(rbuf[i], wbuf[i], n))
			continue;
		size_t off = 0;
		while (rbuf[i][off] == wbuf[i][off])
			off++;
		tool_die(1,
			 "%s with %s: wrong data at byte %zu of the file in "
			 "%s: a bug in nvswap; please report it with this line",
			 d == RD ? "reading" : "writing",
			 setting_str(&p->s, s, sizeof(s)), off, A.paths[i]);
	}
}

/* What @p's writes left in the files, read back (untimed) with the
 * default settings and checked. */
static void verify_written(const struct point *p, size_t n)
{
	int ret;

	spoil(n);
	for (unsigned i = 0; i < A.npaths; i++) {
		ret = nvs_aio_pread_fd(checker, rbuf[i], n, fds[i], 0, true);
		if (ret < 0)
			tool_die(1, "reading back: %s", nvs_last_error());
	}
	if ((ret = nvs_aio_wait(checker)) < 0)
		tool_die(1, "reading back: %s", nvs_last_error());
	verify(p, WR, n);
}

/* @loops timed ops in direction @d with @p's settings, after one
 * untimed op (workers started, buffers registered). */
static void measure(struct point *p, int d, size_t n, unsigned loops)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	size_t warm = (size_t)p->s.bs * p->s.par;
	char s[96];
	int ret;

	if (p->skip)
		return;
	nvs_aio_opts_init(&o);
	o.backend = p->s.be;
	o.block_size = p->s.bs;
	o.queue_depth = p->s.qd;
	o.intra_op_parallelism = p->s.par;
	o.overlap_events = p->s.ov;
	o.single_submit = p->s.ss;
	/* Page-locked, aligned buffers never touch the bounce memory: keep
	 * it small (as the swapper does) so that a point's set-up is not
	 * mostly mlock. Pageable ones may be staged through it. */
	o.bounce_bytes = A.unpinned ? 0 : 256u << 10;
	ret = nvs_aio_create(&o, &h);
	if (ret < 0) {
		/* A kernel limit (aio-max-nr for libaio, memlock for the
		 * rings): the point cannot run here; the sweep goes on. */
		p->skip = strdup(nvs_last_error());
		if (!p->skip)
			tool_die(1, "out of memory");
		return;
	}
	one_op(h, p, d, warm < n ? warm : n);
	for (unsigned l = 0; l < loops; l++) {
		double t;

		if (d == RD)
			spoil(n);
		t = one_op(h, p, d, n);
		if (d == RD)
			verify(p, RD, n);
		if (p->nsamp[d] < MAXLOOPS)
			p->samp[d][p->nsamp[d]++] =
				(double)n * A.npaths / t / GIB;
		prog.done += (double)n * A.npaths;
		progress_draw(false);
	}
	ret = nvs_aio_destroy(h);
	if (ret < 0)
		tool_die(1, "%s with %s: %s", crit_name[d],
			 setting_str(&p->s, s, sizeof(s)), nvs_last_error());
	if (d == WR)
		verify_written(p, n);
}

static struct dstat summarize(const double *samp, unsigned n)
{
	double v[MAXLOOPS];
	struct dstat st = {.n = n};

	if (!n)
		return st;
	memcpy(v, samp, n * sizeof(*v));
	qsort(v, n, sizeof(*v), tool_cmp_double);
	st.lo = v[0];
	st.hi = v[n - 1];
	st.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return st;
}

static unsigned rnd_state;

static unsigned rnd(void)
{
	rnd_state = rnd_state * 1103515245u + 12345u;
	return rnd_state >> 8;
}

static void shuffle(struct point **set, unsigned n)
{
	for (unsigned i = n; i > 1; i--) {
		unsigned j = rnd() % i;
		struct point *t = set[i - 1];
		set[i - 1] = set[j];
		set[j] = t;
	}
}

/* Bytes a round will move (for the progress bar's estimate). */
static double round_bytes(struct point **set, unsigned n, int round,
			  unsigned loops)
{
	double b = 0;

	for (unsigned i = 0; i < n; i++)
		b += (double)op_size(set[i], round) * A.npaths * loops *
		     (A.dir[RD] + A.dir[WR]);
	return b;
}

/* All reads of the round, then all writes: reading right after a large
 * write races the disk's (or the host's) write-back. The sweep takes a
 * point's ops back to back; the final round interleaves them, one op of
 * each point in turn, so drift hits every point alike. */
static void run_round(struct point **set, unsigned n, int round, unsigned loops)
{
	bool interleave = round == FINAL;

	prog.what = round_name[round];
	prog.pts = 0;
	prog.npts = n;
	progress_draw(true);
	for (int d = 0; d < NDIR; d++) {
		if (!A.dir[d])
			continue;
		for (unsigned i = 0; i < n; i++)
			set[i]->nsamp[d] = 0;
		for (unsigned l = 0; l < (interleave ? loops : 1); l++) {
			shuffle(set, n);
			for (unsigned i = 0; i < n; i++) {
				prog.pts = i + 1;
				prog.npts = n;
				measure(set[i], d, op_size(set[i], round),
					interleave ? 1 : loops);
			}
		}
		for (unsigned i = 0; i < n; i++)
			set[i]->st[round][d] =
				summarize(set[i]->samp[d], set[i]->nsamp[d]);
	}
	progress_draw(true);
}

/* ------------------------------------------------------- results */

static bool crit_on(int c)
{
	return c == CRIT_COMBINED ? A.dir[RD] && A.dir[WR] : A.dir[c];
}

/* The criterion's GB/s in @round; -1 when not measured. With one
 * direction only, "combined" is that direction. */
static double score(const struct point *p, int round, int c)
{
	const struct dstat *r = &p->st[round][RD], *w = &p->st[round][WR];

	if (p->skip)
		return -1;
	if (c == RD || (c == CRIT_COMBINED && !A.dir[WR]))
		return r->n ? r->med : -1;
	if (c == WR || !A.dir[RD])
		return w->n ? w->med : -1;
	if (!r->n || !w->n || r->med <= 0 || w->med <= 0)
		return -1;
	return 2 / (1 / r->med + 1 / w->med);
}

static int sort_round, sort_crit;

static int by_score(const void *x, const void *y)
{
	double a = score(*(struct point *const *)x, sort_round, sort_crit);
	double b = score(*(struct point *const *)y, sort_round, sort_crit);

	return (a < b) - (a > b);
}

static void sort_points(struct point **set, unsigned n, int round, int c)
{
	sort_round = round;
	sort_crit = c;
	qsort(set, n, sizeof(*set), by_score);
}

static struct point **all_points(void)
{
	struct point **set = malloc((np ? np : 1) * sizeof(*set));

	if (!set)
		tool_die(1, "out of memory");
	for (unsigned i = 0; i < np; i++)
		set[i] = &P[i];
	return set;
}

/* Of the points measured in round @from, the best @k of each criterion
 * and the default settings go on to round @to, listed in @next. The
 * rest are pruned. */
static unsigned promote(int from, int to, unsigned k, struct point **next)
{
	unsigned n = 0, m = 0;
	struct point **set = all_points();

	for (unsigned i = 0; i < np; i++)
		if (P[i].reached == from && !P[i].skip)
			set[m++] = &P[i];
	for (int c = 0; c < NCRIT; c++) {
		if (!crit_on(c))
			continue;
		sort_points(set, m, from, c);
		for (unsigned i = 0; i < k && i < m; i++)
			if (score(set[i], from, c) > 0)
				set[i]->reached = to;
	}
	free(set);
	for (unsigned i = 0; i < np; i++) {
		if (P[i].is_default && !P[i].skip)
			P[i].reached = to;
		if (P[i].reached == to)
			next[n++] = &P[i];
	}
	return n;
}

static json_t *setting_json(const struct setting *s)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:b, s:b}", "backend",
			 bname(s->be), "block_size", (json_int_t)s->bs,
			 "queue_depth", (json_int_t)s->qd,
			 "intra_op_parallelism", (json_int_t)s->par,
			 "overlap_events", s->ov, "single_submit", s->ss);
}

static json_t *num(double v)
{
	return json_real(round(v * 1000) / 1000);
}

static json_t *round_json(const struct point *p, int round)
{
	json_t *o = json_object();

	for (int d = 0; d < NDIR; d++) {
		const struct dstat *st = &p->st[round][d];
		if (st->n)
			json_object_set_new(o, crit_name[d],
					    json_pack("{s:o, s:o, s:o, s:I}",
						      "median", num(st->med),
						      "min", num(st->lo), "max",
						      num(st->hi), "ops",
						      (json_int_t)st->n));
	}
	if (score(p, round, CRIT_COMBINED) > 0)
		json_object_set_new(o, "combined",
				    num(score(p, round, CRIT_COMBINED)));
	return o;
}

/* The config keys for @s: exactly what nvs_config_load() reads. */
static json_t *snippet(const struct setting *s)
{
	json_t *c = json_object(), *nv = json_object();

	json_object_set_new(c, "aio",
			    json_pack("{s:I, s:I, s:I, s:b, s:b}", "block_size",
				      (json_int_t)s->bs, "queue_depth",
				      (json_int_t)s->qd, "intra_op_parallelism",
				      (json_int_t)s->par, "single_submit",
				      s->ss, "overlap_events", s->ov));
	if (s->be != auto_be)
		json_object_set_new(nv, "backend", json_string(bname(s->be)));
	if (A.npaths > 1) {
		json_t *arr = json_array();
		for (unsigned i = 0; i < A.npaths; i++)
			json_array_append_new(arr, json_string(real[i]));
		json_object_set_new(nv, "nvme_paths", arr);
	}
	if (json_object_size(nv))
		json_object_set_new(c, "nvswap", nv);
	else
		json_decref(nv);
	return c;
}

/* The config file A.write_config with @best's keys merged in (or just
 * them when it does not exist), checked to load. NULL, with the reason in
 * @why, when it cannot be done; else the text, for the caller to free. */
static char *merged_config(const struct setting *best, char *why, size_t len)
{
	const char *path = A.write_config, *key;
	json_t *root, *aio, *nv, *v, *snip;
	struct nvs_config *cfg = NULL;
	json_error_t err;
	char *text;

	if (access(path, F_OK) == 0) {
		/* The config loader names whatever is wrong with the file
		 * (JSON, types, keys) at its own line and column; after
		 * that, root is an object and so are aio and nvswap. */
		if (nvs_config_load(path, &cfg) < 0) {
			snprintf(why, len, "%s", nvs_last_error());
			return NULL;
		}
		nvs_config_free(cfg);
		root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
		if (!root) {
			snprintf(why, len, "%s:%d:%d: %s", path, err.line,
				 err.column, err.text);
			return NULL;
		}
	} else {
		root = json_object();
	}
	aio = json_object_get(root, "aio");
	nv = json_object_get(root, "nvswap");
	snip = snippet(best);
	if (!aio) {
		aio = json_object();
		json_object_set_new(root, "aio", aio);
	}
	/* The older spellings of intra_op_parallelism would now say it
	 * twice. */
	json_object_del(aio, "thread_count");
	json_object_del(aio, "num_threads");
	json_object_update(aio, json_object_get(snip, "aio"));
	json_object_foreach(json_object_get(snip, "nvswap"), key, v)
	{
		if (!nv) {
			nv = json_object();
			json_object_set_new(root, "nvswap", nv);
		}
		json_object_set(nv, key, v);
	}
	/* A backend the file names explicitly becomes the tuned one. */
	if (nv && json_object_get(nv, "backend"))
		json_object_set_new(nv, "backend",
				    json_string(bname(best->be)));
	text = json_dumps(root, JSON_INDENT(2));
	if (!text) {
		snprintf(why, len, "%s: out of memory", path);
	} else if (nvs_config_load_string(text, path, &cfg) < 0) {
		/* A safety net: what we add is valid by construction. */
		snprintf(why, len, "%s: the result would not load: %s", path,
			 nvs_last_error());
		free(text);
		text = NULL;
	} else {
		nvs_config_free(cfg);
	}
	json_decref(snip);
	json_decref(root);
	return text;
}

/* merged_config() or a fatal error naming the file. */
static char *merged_config_or_die(const struct setting *best)
{
	char why[1024];
	char *text = merged_config(best, why, sizeof(why));

	if (!text)
		tool_die(1, "--write-config %s (file not changed)", why);
	return text;
}

/* Replace (or create) A.write_config with @best's keys merged in, in one
 * rename. True when it merged into an existing file. */
static bool write_config(const struct setting *best)
{
	const char *path = A.write_config, *t;
	bool merged = access(path, F_OK) == 0;
	char *text = merged_config_or_die(best);
	FILE *f;

	t = tmp_add(path, ".nvswap-tune.", ".tmp");
	f = fopen(t, "w");
	if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0 ||
	    fsync(fileno(f)) < 0 || fclose(f) != 0)
		tool_die(1, "--write-config: writing %s: %s", t,
			 strerror(errno));
	if (rename(t, path) < 0)
		tool_die(1, "--write-config: renaming %s to %s: %s", t, path,
			 strerror(errno));
	tmp_forget(t);
	free(text);
	return merged;
}

static void print_row(const struct point *p, int round, const char *mark)
{
	char bs[32], col[NDIR][48];

	for (int d = 0; d < NDIR; d++) {
		const struct dstat *st = &p->st[round][d];
		if (st->n > 1)
			snprintf(col[d], sizeof(col[d]), "%5.2f (%.2f-%.2f)",
				 st->med, st->lo, st->hi);
		else if (st->n)
			snprintf(col[d], sizeof(col[d]), "%5.2f", st->med);
		else
			snprintf(col[d], sizeof(col[d]), "    -");
	}
	printf("  %-8s %5s %5u %4u  %-10s %-6s  %-18s %-18s", bname(p->s.be),
	       tool_size_str(p->s.bs, bs, sizeof(bs)), p->s.qd, p->s.par,
	       p->s.ov ? "overlap" : "sequential", p->s.ss ? "single" : "batch",
	       col[RD], col[WR]);
	if (p->skip)
		printf("  skipped: %s", p->skip);
	else if (crit_on(CRIT_COMBINED))
		printf("  %5.2f", score(p, round, CRIT_COMBINED));
	printf("%s\n", mark);
}

static void print_header(void)
{
	printf("  %-8s %5s %5s %4s  %-10s %-6s  %-18s %-18s  %s\n", "backend",
	       "block", "qd", "par", "events", "submit", "read GB/s",
	       "write GB/s", crit_on(CRIT_COMBINED) ? "combined" : "");
}

static void print_space(void)
{
	char b[32];

	printf("search space: %u points:", np);
	printf(" block_size");
	for (unsigned i = 0; i < S.nbs; i++)
		printf(" %s", tool_size_str(S.bs[i], b, sizeof(b)));
	printf("; queue_depth");
	for (unsigned i = 0; i < S.nqd; i++)
		printf(" %u", S.qd[i]);
	printf("; intra_op_parallelism");
	for (unsigned i = 0; i < S.npar; i++)
		printf(" %u", S.par[i]);
	printf("; overlap_events");
	for (unsigned i = 0; i < S.nov; i++)
		printf(" %s", S.ov[i] ? "true" : "false");
	printf("; single_submit");
	for (unsigned i = 0; i < S.nss; i++)
		printf(" %s", S.ss[i] ? "true" : "false");
	printf("; backend");
	for (unsigned i = 0; i < S.nbe; i++)
		printf(" %s", bname(S.be[i]));
	printf("; plus the default settings\n");
	for (int k = NVS_BACKEND_IO_URING; k <= NVS_BACKEND_PSYNC; k++)
		if (!be_ok[k])
			printf("  %s is not tuned: %s\n",
			       bname((enum nvs_backend)k), be_why[k]);
	if (backend_env)
		printf("  NVSWAP_BACKEND=%s is set: %s\n", backend_env,
		       A.sweep ? "the sweep config's backends are tuned"
			       : "only that backend is tuned");
	for (unsigned i = 0; i < S.nbe; i++)
		if (S.be[i] == NVS_BACKEND_PSYNC &&
		    (S.nqd > 1 || S.nov > 1 || S.nss > 1))
			printf("  psync runs each request on its worker "
			       "thread: only block_size and "
			       "intra_op_parallelism vary for it\n");
}

/* ----------------------------------------------------------- plot */

/* One panel per direction: a cell per block size x queue depth holding
 * the best sweep median among the points there (parallelism, events,
 * submit mode and backend vary inside a cell; the label names the
 * winner's parallelism and backend). */
struct grid {
	uint32_t x[MAXV], y[MAXV]; /* block sizes, queue depths, ascending */
	unsigned nx, ny, nd;
	int dir[NDIR];
	const struct point *best[NDIR][MAXV][MAXV];
	double vmin, vmax; /* the colour scale: lowest and highest cell */
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static int index_of(const uint32_t *v, unsigned n, uint32_t x)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i] == x)
			return (int)i;
	return -1;
}

static void make_grid(struct grid *g)
{
	memset(g, 0, sizeof(*g));
	memcpy(g->x, S.bs, S.nbs * sizeof(*g->x));
	memcpy(g->y, S.qd, S.nqd * sizeof(*g->y));
	g->nx = S.nbs;
	g->ny = S.nqd;
	qsort(g->x, g->nx, sizeof(*g->x), cmp_u32);
	qsort(g->y, g->ny, sizeof(*g->y), cmp_u32);
	for (int d = 0; d < NDIR; d++)
		if (A.dir[d])
			g->dir[g->nd++] = d;
	for (unsigned i = 0; i < np; i++) {
		const struct point *p = &P[i];
		int x = index_of(g->x, g->nx, p->s.bs);
		int y = index_of(g->y, g->ny, p->s.qd);
		if (x < 0 || y < 0 || p->skip)
			continue;
		for (unsigned k = 0; k < g->nd; k++) {
			int d = g->dir[k];
			const struct point **b = &g->best[k][x][y];
			if (!p->st[SWEEP][d].n)
				continue;
			if (!*b || p->st[SWEEP][d].med > (*b)->st[SWEEP][d].med)
				*b = p;
		}
	}
	for (unsigned k = 0; k < g->nd; k++)
		for (unsigned x = 0; x < g->nx; x++)
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				double v;
				if (!p)
					continue;
				v = p->st[SWEEP][g->dir[k]].med;
				if (v > g->vmax)
					g->vmax = v;
				if (!g->vmin || v < g->vmin)
					g->vmin = v;
			}
	/* From the lowest cell to the highest: differences of a few percent
	 * are what tuning is about, and a scale from 0 hides them. */
	if (g->vmax <= g->vmin)
		g->vmin = 0;
	if (g->vmax <= 0)
		g->vmax = 1;
}

static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '&')
			fputs("&amp;", f);
		else if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '"')
			fputs("&quot;", f);
		else
			fputc(*s, f);
	}
}

/* viridis, from 0 (dark) to 1 (light) */
static void colour(double t, char *buf, size_t len)
{
	static const unsigned char stops[5][3] = {{0x44, 0x01, 0x54},
						  {0x3b, 0x52, 0x8b},
						  {0x21, 0x91, 0x8c},
						  {0x5e, 0xc9, 0x62},
						  {0xfd, 0xe7, 0x25}};
	double s = (t < 0 ? 0 : t > 1 ? 1 : t) * 4;
	int i = s >= 4 ? 3 : (int)s;
	double f = s - i;
	int c[3];

	for (int k = 0; k < 3; k++)
		c[k] = (int)(stops[i][k] + f * (stops[i + 1][k] - stops[i][k]) +
			     0.5);
	snprintf(buf, len, "#%02x%02x%02x", c[0], c[1], c[2]);
}

static void plot_title(char *buf, size_t len)
{
	char io[32];
	size_t o;

	o = (size_t)snprintf(buf, len,
			     "nvswap-tune: GB/s by block size and "
			     "queue depth, %s per op, on",
			     tool_size_str(A.io_size, io, sizeof(io)));
	for (unsigned i = 0; i < A.npaths && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " %s", real[i]);
}

static void plot_svg(const char *out, const struct grid *g)
{
	int cw = g->nx > 4 ? 80 : 120, ch = g->ny > 4 ? 50 : 80;
	int left = 80, top = 70, gap = 70;
	int pw = (int)g->nx * cw, ph = (int)g->ny * ch;
	int w = left + (int)g->nd * (pw + gap) + 90, h = top + ph + 85;
	char title[PATH_MAX + 128], c[16], b[32];
	FILE *f = fopen(out, "w");

	if (!f)
		tool_die(1, "--plot %s: %s", out, strerror(errno));
	plot_title(title, sizeof(title));
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"sans-serif\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"24\" font-size=\"15\">",
		w, h, w, h, left);
	xml_text(f, title);
	fprintf(f,
		"</text>\n<text x=\"%d\" y=\"44\" font-size=\"11\" "
		"fill=\"#555\">each cell: the best sweep median there; "
		"label: GB/s, then the winner's parallelism and "
		"backend</text>\n",
		left);
	for (unsigned k = 0; k < g->nd; k++) {
		int x0 = left + (int)k * (pw + gap), d = g->dir[k];
		const struct point *top1 = NULL;

		for (unsigned x = 0; x < g->nx; x++)
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				if (p &&
				    (!top1 || p->st[SWEEP][d].med >
						      top1->st[SWEEP][d].med))
					top1 = p;
			}
		fprintf(f,
			"<g>\n<text x=\"%d\" y=\"%d\" font-size=\"14\" "
			"font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
			x0 + pw / 2, top - 8, crit_name[d]);
		for (unsigned x = 0; x < g->nx; x++) {
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				/* queue depth grows upwards */
				int cx = x0 + (int)x * cw;
				int cy = top + (int)(g->ny - 1 - y) * ch;
				double v, t;

				if (!p) {
					fprintf(f,
						"<rect x=\"%d\" y=\"%d\" "
						"width=\"%d\" height=\"%d\" "
						"fill=\"#ddd\" "
						"stroke=\"white\"/>\n",
						cx, cy, cw, ch);
					continue;
				}
				v = p->st[SWEEP][d].med;
				t = (v - g->vmin) / (g->vmax - g->vmin);
				colour(t, c, sizeof(c));
				fprintf(f,
					"<rect x=\"%d\" y=\"%d\" width=\"%d\" "
					"height=\"%d\" fill=\"%s\" "
					"stroke=\"%s\" stroke-width=\"%d\"/>\n",
					cx, cy, cw, ch, c,
					p == top1 ? "#d62728" : "white",
					p == top1 ? 3 : 1);
				fprintf(f,
					"<text x=\"%d\" y=\"%d\" "
					"font-size=\"15\" font-weight=\"bold\" "
					"text-anchor=\"middle\" "
					"fill=\"%s\">%.2f</text>\n"
					"<text x=\"%d\" y=\"%d\" "
					"font-size=\"10\" "
					"text-anchor=\"middle\" "
					"fill=\"%s\">par %u, %s</text>\n",
					cx + cw / 2, cy + ch / 2,
					t < 0.6 ? "white" : "black", v,
					cx + cw / 2, cy + ch / 2 + 15,
					t < 0.6 ? "white" : "black", p->s.par,
					bname(p->s.be));
			}
		}
		for (unsigned x = 0; x < g->nx; x++)
			fprintf(f,
				"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
				"text-anchor=\"middle\">%s</text>\n",
				x0 + (int)x * cw + cw / 2, top + ph + 18,
				tool_size_str(g->x[x], b, sizeof(b)));
		for (unsigned y = 0; y < g->ny; y++)
			fprintf(f,
				"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
				"text-anchor=\"end\">%u</text>\n",
				x0 - 6,
				top + (int)(g->ny - 1 - y) * ch + ch / 2 + 4,
				g->y[y]);
		fprintf(f,
			"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
			"text-anchor=\"middle\">block size</text>\n"
			"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
			"text-anchor=\"middle\" transform=\"rotate(-90 %d "
			"%d)\">queue depth</text>\n</g>\n",
			x0 + pw / 2, top + ph + 38, x0 - 40, top + ph / 2,
			x0 - 40, top + ph / 2);
	}
	/* colour scale */
	int lx = left + (int)g->nd * (pw + gap) - gap + 30;
	fprintf(f, "<g>\n");
	for (int i = 0; i < 20; i++) {
		colour(1 - i / 19.0, c, sizeof(c));
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"%d\" "
			"fill=\"%s\"/>\n",
			lx, top + i * ph / 20, ph / 20 + 1, c);
	}
	fprintf(f,
		"<text x=\"%d\" y=\"%d\" font-size=\"11\">%.2f GB/s</text>\n"
		"<text x=\"%d\" y=\"%d\" font-size=\"11\">%.2f GB/s</text>\n</g>\n"
		"<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\">red "
		"border: the panel's best cell. Grey: not measured.</text>\n"
		"</svg>\n",
		lx + 20, top + 10, g->vmax, lx + 20, top + ph, g->vmin, left,
		top + ph + 70);
	if (fclose(f) != 0)
		tool_die(1, "--plot %s: %s", out, strerror(errno));
}

static const char *find_gnuplot(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("PATH");
	char *dirs, *save, *d;

	if (!env || !(dirs = strdup(env)))
		return NULL;
	for (d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof(path), "%s/gnuplot", *d ? d : ".");
		if (access(path, X_OK) == 0) {
			free(dirs);
			return path;
		}
	}
	free(dirs);
	return NULL;
}

/* gnuplot's single-quoted string: a quote is written twice. */
static void gp_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/* Returns false (with a note) when gnuplot ran and failed. */
static bool plot_gnuplot(const char *gp, const char *out, const struct grid *g)
{
	const char *data = tmp_add("/tmp", "/nvswap-tune.", ".dat");
	const char *script = tmp_add("/tmp", "/nvswap-tune.", ".gp");
	char title[PATH_MAX + 128], b[32];
	char arg0[] = "gnuplot", arg1[PATH_MAX];
	char *argv[] = {arg0, arg1, NULL};
	posix_spawn_file_actions_t fa;
	struct stat st;
	FILE *f;
	pid_t pid;
	int status, ret;

	f = fopen(data, "w");
	if (!f)
		tool_die(1, "%s: %s", data, strerror(errno));
	for (unsigned k = 0; k < g->nd; k++) {
		fprintf(f, "# %s\n", crit_name[g->dir[k]]);
		for (unsigned x = 0; x < g->nx; x++)
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				if (p)
					fprintf(f,
						"%u %u %.4f \"par %u, %s\"\n",
						x, y,
						p->st[SWEEP][g->dir[k]].med,
						p->s.par, bname(p->s.be));
			}
		fputs("\n\n", f);
	}
	fclose(f);
	f = fopen(script, "w");
	if (!f)
		tool_die(1, "%s: %s", script, strerror(errno));
	plot_title(title, sizeof(title));
	fprintf(f,
		"set terminal svg size %u,%u dynamic noenhanced "
		"font 'sans,12' background rgb 'white'\n"
		"set output ",
		160 + g->nd * (g->nx * 120 + 160), 200 + g->ny * 80);
	gp_quoted(f, out);
	fprintf(f,
		"\nset palette defined (0 '#440154', 1 '#3b528b', "
		"2 '#21918c', 3 '#5ec962', 4 '#fde725')\n"
		"set cbrange [%.3f:%.3f]\nset cblabel 'GB/s'\n"
		"set xrange [-0.5:%u.5]\nset yrange [-0.5:%u.5]\n"
		"set xlabel 'block size'\nset ylabel 'queue depth'\n"
		"set style fill solid 1.0 noborder\n"
		"set style textbox opaque fc rgb 'white' noborder\n"
		"set xtics (",
		g->vmin, g->vmax, g->nx - 1, g->ny - 1);
	for (unsigned x = 0; x < g->nx; x++)
		fprintf(f, "%s'%s' %u", x ? ", " : "",
			tool_size_str(g->x[x], b, sizeof(b)), x);
	fputs(")\nset ytics (", f);
	for (unsigned y = 0; y < g->ny; y++)
		fprintf(f, "%s'%u' %u", y ? ", " : "", g->y[y], y);
	fprintf(f, ")\nset multiplot layout 1,%u title ", g->nd);
	gp_quoted(f, title);
	fputc('\n', f);
	for (unsigned k = 0; k < g->nd; k++) {
		fprintf(f, "set title '%s'\nplot ", crit_name[g->dir[k]]);
		gp_quoted(f, data);
		fprintf(f,
			" index %u using 1:2:(0.5):(0.5):3 with boxxyerror "
			"fc palette notitle, '' index %u using "
			"1:2:(sprintf(\"%%.2f\\n%%s\", $3, strcol(4))) with "
			"labels boxed notitle\n",
			k, k);
	}
	fputs("unset multiplot\n", f);
	fclose(f);
	snprintf(arg1, sizeof(arg1), "%s", script);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	ret = posix_spawn(&pid, gp, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (ret != 0)
		tool_die(1, "running %s: %s", gp, strerror(ret));
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	unlink(data);
	unlink(script);
	tmp_forget(data);
	tmp_forget(script);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
	       stat(out, &st) == 0 && st.st_size > 0;
}

/* Returns the engine that drew it. */
static const char *plot(void)
{
	const char *gp = A.engine == PLOT_SVG ? NULL : find_gnuplot();
	struct grid g;

	make_grid(&g);
	if (A.engine == PLOT_GNUPLOT && !gp)
		tool_die(1, "--plot-engine gnuplot: gnuplot is not installed "
			    "(apt-get install gnuplot-nox), or use "
			    "--plot-engine svg");
	if (gp) {
		if (plot_gnuplot(gp, A.plot, &g))
			return "gnuplot";
		if (A.engine == PLOT_GNUPLOT)
			tool_die(1,
				 "--plot %s: gnuplot failed (its message "
				 "is above)",
				 A.plot);
		fprintf(stderr, "nvswap-tune: gnuplot failed; drawing the "
				"SVG without it\n");
	}
	plot_svg(A.plot, &g);
	return "svg";
}

/* ----------------------------------------------------------- main */

/* Everything main() took, for a clean exit (leak checkers). */
static void release(struct point **all, struct point **fin, json_t *snip)
{
	for (unsigned i = 0; i < A.npaths; i++) {
		if (A.unpinned) {
			free(wbuf[i]);
			free(rbuf[i]);
		} else {
			nvs_pinned_free(wbuf[i]);
			nvs_pinned_free(rbuf[i]);
		}
	}
	for (unsigned i = 0; i < np; i++)
		free(P[i].skip);
	free(P);
	nvs_aio_destroy(checker);
	free(all);
	free(fin);
	json_decref(snip);
	held_all = held_fin = NULL;
	held_snip = NULL;
}

static const struct point *winner(struct point **fin, unsigned n, int c,
				  const struct point **second)
{
	sort_points(fin, n, FINAL, c);
	*second = n > 1 && score(fin[1], FINAL, c) > 0 ? fin[1] : NULL;
	return n && score(fin[0], FINAL, c) > 0 ? fin[0] : NULL;
}

static void print_setting_long(const struct setting *s)
{
	char bs[32];

	printf("%s, block_size %s, queue_depth %u, intra_op_parallelism %u, "
	       "overlap_events %s, single_submit %s",
	       bname(s->be), tool_size_str(s->bs, bs, sizeof(bs)), s->qd,
	       s->par, s->ov ? "true" : "false", s->ss ? "true" : "false");
}

int main(int argc, char **argv)
{
	const struct point *best[NCRIT] = {0}, *second[NCRIT] = {0};
	const struct point *def = NULL;
	struct point **all, **fin;
	unsigned nfin, skipped = 0;
	double t0, sweep_s, final_s, est;
	json_t *snip, *out;
	bool merged = false;
	const char *engine = NULL;
	char io[32], s[96];

	tool_name = "nvswap-tune";
	tool_cleanup = cleanup;
	parse(argc, argv);
	probe();
	default_space();
	if (A.sweep)
		load_sweep();
	check_args();
	make_points();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	rnd_state = A.seed;

	if (!A.json) {
		printf("nvswap-tune %s: %u path%s, %s per op and path, "
		       "O_DIRECT, %s buffers\n",
		       nvs_version(), A.npaths, A.npaths > 1 ? "s" : "",
		       tool_size_str(A.io_size, io, sizeof(io)),
		       A.unpinned ? "pageable" : "page-locked");
		for (unsigned i = 0; i < A.npaths; i++)
			printf("  %s\n", real[i]);
		print_space();
		if (A.quick)
			printf("--quick: one op of about a sixteenth of %s per "
			       "point and direction; the best %d of each "
			       "criterion again at a quarter; the best %d of "
			       "those at full size\n",
			       io, NARROW, FINALISTS);
		else
			printf("sweep: %u timed ops per point and direction, "
			       "then the best %d of each criterion again\n",
			       A.loops, FINALISTS);
		fflush(stdout);
	}
	prepare();

	all = held_all = all_points();
	fin = held_fin = all_points();
	prog.t0 = tool_now();
	est = round_bytes(all, np, SWEEP, A.quick ? 1 : A.loops);
	if (A.quick)
		est += (double)(NCRIT * NARROW + 1) * (double)(A.io_size / 4) *
		       A.npaths * (A.dir[RD] + A.dir[WR]);
	est += (double)(NCRIT * FINALISTS + 1) * (double)A.io_size * A.npaths *
	       A.loops * (A.dir[RD] + A.dir[WR]);
	prog.total = est;
	t0 = tool_now();
	run_round(all, np, SWEEP, A.quick ? 1 : A.loops);
	for (unsigned i = 0; i < np; i++)
		skipped += P[i].skip != NULL;
	if (skipped == np)
		tool_die(1, "no point of the search space could run here: %s",
			 P[0].skip);
	if (A.quick) {
		nfin = promote(SWEEP, NARROWED, NARROW, fin);
		run_round(fin, nfin, NARROWED, 1);
	}
	sweep_s = tool_now() - t0;
	nfin = promote(A.quick ? NARROWED : SWEEP, FINAL, FINALISTS, fin);
	prog.total = prog.done + round_bytes(fin, nfin, FINAL, A.loops);
	t0 = tool_now();
	run_round(fin, nfin, FINAL, A.loops);
	final_s = tool_now() - t0;
	progress_end();
	for (unsigned i = 0; i < A.npaths; i++)
		close(fds[i]);
	tmp_remove();
	ntmp = 0;

	for (int c = 0; c < NCRIT; c++)
		if (crit_on(c))
			best[c] = winner(fin, nfin, c, &second[c]);
	for (unsigned i = 0; i < nfin; i++)
		if (fin[i]->is_default)
			def = fin[i];
	{
		int c = crit_on(CRIT_COMBINED) ? CRIT_COMBINED
					       : (A.dir[RD] ? RD : WR);
		if (!best[c])
			tool_die(1, "the final round measured nothing");
		snip = held_snip = snippet(&best[c]->s);
		if (A.write_config)
			merged = write_config(&best[c]->s);
	}
	if (A.plot)
		engine = plot();

	if (A.json) {
		json_t *pts = json_array(), *b = json_object(),
		       *vs = json_object();
		for (unsigned i = 0; i < np; i++) {
			json_t *o = setting_json(&P[i].s);
			json_object_set_new(o, "default",
					    json_boolean(P[i].is_default));
			json_object_set_new(
				o, "finalist",
				json_boolean(P[i].reached == FINAL &&
					     !P[i].is_default));
			if (P[i].skip)
				json_object_set_new(o, "skipped",
						    json_string(P[i].skip));
			for (int k = SWEEP; k <= P[i].reached; k++)
				if (k != NARROWED || A.quick)
					json_object_set_new(
						o, round_name[k],
						round_json(&P[i], k));
			json_array_append_new(pts, o);
		}
		for (int c = 0; c < NCRIT; c++) {
			if (!best[c])
				continue;
			json_t *o = setting_json(&best[c]->s);
			json_object_set_new(o, "gbs",
					    num(score(best[c], FINAL, c)));
			json_object_set_new(b, crit_name[c], o);
			if (def && score(def, FINAL, c) > 0)
				json_object_set_new(
					vs, crit_name[c],
					num(score(best[c], FINAL, c) /
					    score(def, FINAL, c)));
		}
		json_t *paths = json_array();
		for (unsigned i = 0; i < A.npaths; i++)
			json_array_append_new(paths, json_string(real[i]));
		out = json_pack(
			"{s:s, s:o, s:I, s:I, s:b, s:b, s:b, s:o, s:o, s:I, "
			"s:I, s:o, s:o, s:o}",
			"version", nvs_version(), "nvme_paths", paths,
			"io_size", (json_int_t)A.io_size, "loops",
			(json_int_t)A.loops, "quick", A.quick, "direct", 1,
			"pinned", !A.unpinned, "sweep_seconds", num(sweep_s),
			"final_seconds", num(final_s), "points", (json_int_t)np,
			"skipped", (json_int_t)skipped, "results", pts, "best",
			b, "vs_default", vs);
		if (def) {
			json_t *o = setting_json(&def->s);
			json_object_set_new(o, "final", round_json(def, FINAL));
			json_object_set_new(out, "default", o);
		}
		json_object_set(out, "config", snip);
		if (A.write_config)
			json_object_set_new(out, "config_file",
					    json_string(A.write_config));
		if (engine)
			json_object_set_new(out, "plot",
					    json_pack("{s:s, s:s}", "file",
						      A.plot, "engine",
						      engine));
		char *text = json_dumps(out, JSON_INDENT(2));
		puts(text);
		free(text);
		json_decref(out);
		release(all, fin, snip);
		return 0;
	}

	printf("sweep: %u points in %.1f s", np, sweep_s);
	if (skipped)
		printf(", %u could not run here (first: %s)", skipped,
		       P[0].skip ? P[0].skip : "");
	printf("\n");
	if (A.verbose) {
		sort_points(all, np, SWEEP,
			    crit_on(CRIT_COMBINED) ? CRIT_COMBINED
						   : (A.dir[RD] ? RD : WR));
		print_header();
		for (unsigned i = 0; i < np; i++)
			print_row(all[i], SWEEP,
				  all[i]->is_default ? "  <- default" : "");
	}
	if (A.quick) {
		unsigned nn = 0;
		for (unsigned i = 0; i < np; i++)
			nn += P[i].reached >= NARROWED;
		printf("narrowed to %u points at a quarter size\n", nn);
	}
	printf("\nfinal round: %u finalists%s, %u op%s each, interleaved, "
	       "in %.1f s (median (min-max))\n",
	       def ? nfin - 1 : nfin, def ? " and the default settings" : "",
	       A.loops, A.loops > 1 ? "s" : "", final_s);
	sort_points(fin, nfin, FINAL,
		    crit_on(CRIT_COMBINED) ? CRIT_COMBINED
					   : (A.dir[RD] ? RD : WR));
	print_header();
	for (unsigned i = 0; i < nfin; i++)
		print_row(fin[i], FINAL,
			  fin[i]->is_default ? "  <- default" : "");
	printf("\n");
	for (int c = 0; c < NCRIT; c++) {
		if (!best[c])
			continue;
		printf("best %-9s %5.2f GB/s  ", crit_name[c],
		       score(best[c], FINAL, c));
		print_setting_long(&best[c]->s);
		printf("\n");
		if (second[c])
			printf("  runner-up at %.2fx: %s\n",
			       score(second[c], FINAL, c) /
				       score(best[c], FINAL, c),
			       setting_str(&second[c]->s, s, sizeof(s)));
	}
	if (def) {
		printf("tuned vs default (a config without \"aio\": %s):",
		       setting_str(&def->s, s, sizeof(s)));
		for (int c = 0; c < NCRIT; c++)
			if (best[c] && score(def, FINAL, c) > 0)
				printf(" %s %.2fx", crit_name[c],
				       score(best[c], FINAL, c) /
					       score(def, FINAL, c));
		printf("\n");
		int c = crit_on(CRIT_COMBINED) ? CRIT_COMBINED
					       : (A.dir[RD] ? RD : WR);
		bool overlap = best[c] != def;
		for (int d = 0; d < NDIR && best[c]; d++)
			if (A.dir[d] &&
			    def->st[FINAL][d].hi < best[c]->st[FINAL][d].lo)
				overlap = false;
		if (overlap)
			printf("  (the default's range overlaps the winner's "
			       "in every direction: here the defaults do "
			       "about as well)\n");
	}
	{
		char *text = json_dumps(snip, JSON_INDENT(2));
		printf("\nconfig (the best %s settings; every key is one "
		       "nvs_config_load reads):\n%s\n",
		       crit_on(CRIT_COMBINED) ? "combined"
					      : crit_name[A.dir[RD] ? RD : WR],
		       text);
		free(text);
	}
	if (!json_object_get(snip, "nvswap") ||
	    !json_object_get(json_object_get(snip, "nvswap"), "backend"))
		printf("(no \"backend\": auto picks %s here, the winner)\n",
		       bname(auto_be));
	if (A.write_config)
		printf("%s %s\n", merged ? "merged into" : "written to",
		       A.write_config);
	else
		printf("paste it into your DeepSpeed config, or pass "
		       "--write-config FILE\n");
	if (engine)
		printf("plot: %s (%s)\n", A.plot, engine);
	release(all, fin, snip);
	return 0;
}
