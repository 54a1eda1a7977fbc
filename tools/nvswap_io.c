// SPDX-License-Identifier: MIT
/*
 * nvswap-io: the ds_io of nvswap. Times sequential reads or writes of one
 * file through an aio handle with DeepNVMe's settings and prints ds_io's
 * lines (so existing log parsers work), per-op latency, and with
 * --compare-fio the same job run by fio, interleaved, with the ratios.
 * Uses only the public API. Run with -h for every option.
 */
#include "tool.h"

#include <nvswap/nvswap.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define HUGEPAGES "/proc/sys/vm/nr_hugepages"
#define HUGE_SIZE (2u << 20)

struct args {
	const char *folder;
	size_t io_size;
	bool read;
	size_t block_size;
	unsigned queue_depth;
	bool single_submit;
	bool sequential; /* --sequential_requests: no overlapped events */
	unsigned parallel;
	unsigned loops;
	unsigned warmup;
	bool validate;
	enum nvs_backend backend;
	bool pinned;
	size_t misalign;
	bool diff_file;
	bool json;
	bool compare_fio;
	unsigned repeats;
	bool keep;
	uint32_t uring_flags;
	size_t bounce;
	int staging;
	bool prepared;	  /* --read: the file is already there and synced */
	bool warmup_read; /* warm-up ops read, whatever the timed ones do */
};

struct run {
	double task_s;	/* timed loops: the I/O calls only */
	double e2e_s;	/* plus handle creation and buffer set-up */
	double cpu_s;	/* user + system CPU of the timed loops */
	double *lat;	/* per-op seconds, loops of them */
	uint64_t bytes; /* moved by the timed loops */
	int validated;	/* 1 ok, 0 not asked, -1 mismatch */
	struct nvs_aio_stats st;
};

static bool quiet;
static bool keep_files; /* --keep: even on a fatal error */
static bool progress_on;

/* Before a fatal message: finish the progress line. */
static void end_progress_line(void)
{
	if (progress_on)
		fputc('\n', stderr);
	progress_on = false;
}

static void remove_files(void);

/* Every fatal exit (a full disk, a refused --iopoll...) removes the test
 * files, as a successful run does. */
/* What one_run() holds while it runs, for on_fatal(): a fatal exit
 * destroys the handle (its I/O drained) and frees the memory. */
static struct {
	struct nvs_aio *h;
	unsigned char *mem;
	bool pinned;
	double *lat;
} live;

static void on_fatal(void)
{
	end_progress_line();
	nvs_aio_destroy(live.h);
	if (live.pinned)
		nvs_pinned_free(live.mem);
	else
		free(live.mem);
	free(live.lat);
	memset(&live, 0, sizeof(live));
	if (!keep_files)
		remove_files();
}

static double cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
	fputs("usage: nvswap-io --folder DIR [options]\n"
	      "\n"
	      "Reads or writes one file of --io_size bytes in DIR through an "
	      "nvswap aio\n"
	      "handle, --loops times, and prints ds_io's lines:\n"
	      "  Task Read Latency = S sec     the timed I/O calls\n"
	      "  Task Read Speed = X GB/sec    bytes / task latency (GB = "
	      "2^30 bytes)\n"
	      "  E2E Read Latency = S sec      plus handle creation and "
	      "buffer set-up\n"
	      "  E2E Read Speed = X GB/sec\n"
	      "then the latency of one op (one --io_size transfer): min, "
	      "median, p99.\n"
	      "\n"
	      "  --folder DIR            where the test file goes (required); "
	      "removed after\n"
	      "  --io_size N             bytes per op, K/M/G suffixes "
	      "(default 1G)\n"
	      "  --read                  read (the file is written first, "
	      "untimed); else write\n"
	      "  --block_size N          bytes per request (default 1M)\n"
	      "  --queue_depth N         requests in flight per worker "
	      "(default 128)\n"
	      "  --single_submit         one submit call per request\n"
	      "  --sequential_requests   no overlapped events: "
	      "batch-and-drain\n"
	      "                          (default: overlapped, a sliding "
	      "window)\n"
	      "  --io_parallel N         worker threads, intra-op parallelism "
	      "(default 1)\n"
	      "  --loops N               timed ops (default 1)\n"
	      "  --warmup_loops N        untimed ops first (default 0)\n"
	      "  --validate              check every byte after the timed "
	      "ops\n"
	      "  --backend B             auto|io_uring|libaio|psync (default "
	      "auto)\n"
	      "  --pinned                page-locked buffer (the default)\n"
	      "  --unpinned              ordinary pageable memory\n"
	      "  --misalign N            offset the buffer N bytes from page "
	      "alignment\n"
	      "  --sqpoll, --iopoll, --no-fixed   io_uring options (see "
	      "nvswap/aio.h)\n"
	      "  --bounce_bytes N        pinned staging memory per worker "
	      "(default: the\n"
	      "                          handle's, see nvs_aio_opts)\n"
	      "  --staging M             auto|misaligned|unpinned: which "
	      "buffers go through\n"
	      "                          the pinned staging memory (see "
	      "enum nvs_staging)\n"
	      "  --different_file_each_iteration  a new file for every op\n"
	      "  --json                  one JSON object on stdout, no "
	      "progress line\n"
	      "  --compare-fio           run fio on the same file with the "
	      "same settings,\n"
	      "                          interleaved with nvswap, --repeats "
	      "times each\n"
	      "  --repeats N             repeats for --compare-fio (default 5)\n"
	      "  --keep                  keep the test file(s)\n"
	      "  -h, --help              this text\n"
	      "\n"
	      "--compare-fio runs fio with --direct=1, the same --bs and "
	      "--iodepth, the\n"
	      "engine of the backend (io_uring with fixed buffers and "
	      "registered files,\n"
	      "libaio, psync), --numjobs = --io_parallel each on its slice of "
	      "the file,\n"
	      "and huge-page buffers (--iomem=shmhuge): scattered 4 KiB pages "
	      "split each\n"
	      "1 MiB request past the disk's segment limit, so fio's default "
	      "buffers\n"
	      "are a weaker reference (their figure is printed too). As root "
	      "it reserves\n"
	      "the huge pages in " HUGEPAGES
	      " and restores the old value after.\n"
	      "fio runs with --scramble_buffers=0 (no data generation in its "
	      "CPU time);\n"
	      "each nvswap repeat does one untimed op first, as fio's set-up "
	      "(buffers\n"
	      "are registered with the ring on first use).\n"
	      "Exit status: 0, 1 on an I/O or validation failure, 2 on bad "
	      "usage.\n",
	      f);
}

static void parse(int argc, char **argv, struct args *a)
{
	enum {
		O_FOLDER = 256,
		O_IOSIZE,
		O_READ,
		O_BS,
		O_QD,
		O_SINGLE,
		O_SEQ,
		O_PAR,
		O_LOOPS,
		O_WARM,
		O_VALIDATE,
		O_BACKEND,
		O_PINNED,
		O_UNPINNED,
		O_MISALIGN,
		O_DIFF,
		O_JSON,
		O_FIO,
		O_REPEATS,
		O_KEEP,
		O_SQPOLL,
		O_IOPOLL,
		O_NOFIXED,
		O_BOUNCE,
		O_STAGE,
	};
	static const struct option opts[] = {
		{"folder", required_argument, NULL, O_FOLDER},
		{"io_size", required_argument, NULL, O_IOSIZE},
		{"read", no_argument, NULL, O_READ},
		{"block_size", required_argument, NULL, O_BS},
		{"queue_depth", required_argument, NULL, O_QD},
		{"single_submit", no_argument, NULL, O_SINGLE},
		{"sequential_requests", no_argument, NULL, O_SEQ},
		{"io_parallel", required_argument, NULL, O_PAR},
		{"loops", required_argument, NULL, O_LOOPS},
		{"warmup_loops", required_argument, NULL, O_WARM},
		{"validate", no_argument, NULL, O_VALIDATE},
		{"backend", required_argument, NULL, O_BACKEND},
		{"pinned", no_argument, NULL, O_PINNED},
		{"unpinned", no_argument, NULL, O_UNPINNED},
		{"misalign", required_argument, NULL, O_MISALIGN},
		{"different_file_each_iteration", no_argument, NULL, O_DIFF},
		{"json", no_argument, NULL, O_JSON},
		{"compare-fio", no_argument, NULL, O_FIO},
		{"repeats", required_argument, NULL, O_REPEATS},
		{"keep", no_argument, NULL, O_KEEP},
		{"sqpoll", no_argument, NULL, O_SQPOLL},
		{"iopoll", no_argument, NULL, O_IOPOLL},
		{"no-fixed", no_argument, NULL, O_NOFIXED},
		{"bounce_bytes", required_argument, NULL, O_BOUNCE},
		{"staging", required_argument, NULL, O_STAGE},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c;

	*a = (struct args){.io_size = 1u << 30,
			   .block_size = 1u << 20,
			   .queue_depth = 128,
			   .parallel = 1,
			   .loops = 1,
			   .pinned = true,
			   .repeats = 5};
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_FOLDER:
			a->folder = optarg;
			break;
		case O_IOSIZE:
			a->io_size = tool_size_arg("--io_size", optarg);
			break;
		case O_READ:
			a->read = true;
			break;
		case O_BS:
			a->block_size = tool_size_arg("--block_size", optarg);
			break;
		case O_QD:
			a->queue_depth =
				tool_uint_arg("--queue_depth", optarg, 1);
			break;
		case O_SINGLE:
			a->single_submit = true;
			break;
		case O_SEQ:
			a->sequential = true;
			break;
		case O_PAR:
			a->parallel = tool_uint_arg("--io_parallel", optarg, 1);
			break;
		case O_LOOPS:
			a->loops = tool_uint_arg("--loops", optarg, 1);
			break;
		case O_WARM:
			a->warmup = tool_uint_arg("--warmup_loops", optarg, 0);
			break;
		case O_VALIDATE:
			a->validate = true;
			break;
		case O_BACKEND:
			if (tool_backend(optarg) < 0)
				tool_die(2,
					 "--backend: '%s' is not one of auto, "
					 "io_uring, libaio, psync",
					 optarg);
			a->backend = (enum nvs_backend)tool_backend(optarg);
			break;
		case O_PINNED:
			a->pinned = true;
			break;
		case O_UNPINNED:
			a->pinned = false;
			break;
		case O_MISALIGN:
			a->misalign = tool_uint_arg("--misalign", optarg, 0);
			break;
		case O_DIFF:
			a->diff_file = true;
			break;
		case O_JSON:
			a->json = true;
			break;
		case O_FIO:
			a->compare_fio = true;
			break;
		case O_REPEATS:
			a->repeats = tool_uint_arg("--repeats", optarg, 1);
			break;
		case O_KEEP:
			a->keep = true;
			break;
		case O_SQPOLL:
			a->uring_flags |= NVS_URING_SQPOLL;
			break;
		case O_IOPOLL:
			a->uring_flags |= NVS_URING_IOPOLL;
			break;
		case O_NOFIXED:
			a->uring_flags |= NVS_URING_NO_FIXED;
			break;
		case O_BOUNCE:
			a->bounce = tool_size_arg("--bounce_bytes", optarg);
			if (a->bounce > UINT32_MAX)
				tool_die(2, "--bounce_bytes: at most 4G");
			break;
		case O_STAGE:
			if (!strcmp(optarg, "auto"))
				a->staging = NVS_STAGE_AUTO;
			else if (!strcmp(optarg, "misaligned"))
				a->staging = NVS_STAGE_MISALIGNED;
			else if (!strcmp(optarg, "unpinned"))
				a->staging = NVS_STAGE_UNPINNED;
			else
				tool_die(2,
					 "--staging: '%s' is not one of auto, "
					 "misaligned, unpinned",
					 optarg);
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
	if (!a->folder)
		tool_die(
			2,
			"--folder is required: the directory to test (see -h)");
	if (a->compare_fio && a->diff_file)
		tool_die(2,
			 "--compare-fio and --different_file_each_iteration "
			 "cannot be combined: fio reads and writes one file");
	if (a->compare_fio && a->io_size % a->parallel)
		tool_die(2,
			 "--compare-fio needs --io_size divisible by "
			 "--io_parallel (fio's jobs each take an equal slice)");
	/* No memory setting (--unpinned included) helps past the RAM. */
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) *
		       (uint64_t)sysconf(_SC_PAGESIZE);
	if (a->io_size > ram - a->misalign)
		tool_die(2,
			 "--io_size %zu bytes (with --misalign) is larger than "
			 "this machine's memory (%.1f GiB): lower --io_size",
			 a->io_size, (double)ram / (1u << 30));
}

static void check_folder(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		tool_die(1, "--folder %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		tool_die(1, "--folder %s: not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		tool_die(1, "--folder %s: cannot write there: %s", dir,
			 strerror(errno));
}

/* ------------------------------------------------------------ the run */

static char files[64][4096];
static unsigned nfiles;
static unsigned next_name; /* names tried so far */

/*
 * Create the test file exclusively, never through a symlink: the name is
 * predictable, and in a directory others can write a link planted there
 * would have the test pattern written over its target. A taken name
 * (anything at all there) is skipped, never opened. In a sticky directory
 * such as /tmp nobody else can then replace the file we made.
 */
static void create_file(const struct args *a, char *path, size_t n)
{
	for (unsigned tries = 0; tries < 1000; tries++) {
		snprintf(path, n, "%s/nvswap-io.%ld.%u.dat", a->folder,
			 (long)getpid(), next_name++);
		int fd = open(path,
			      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
				      O_CLOEXEC,
			      0600);
		if (fd >= 0) {
			close(fd);
			return;
		}
		if (errno != EEXIST)
			tool_die(1, "creating %s: %s", path, strerror(errno));
	}
	tool_die(1, "%s/nvswap-io.%ld.*.dat: 1000 names taken already",
		 a->folder, (long)getpid());
}

static const char *file_for(const struct args *a, unsigned loop)
{
	unsigned i = a->diff_file ? loop : 0;

	while (nfiles <= i) {
		if (nfiles == 64)
			tool_die(2,
				 "--different_file_each_iteration: at most 64 "
				 "files (lower --loops)");
		create_file(a, files[nfiles], sizeof(files[0]));
		nfiles++;
	}
	return files[i];
}

static void remove_files(void)
{
	for (unsigned i = 0; i < nfiles; i++)
		unlink(files[i]);
	nfiles = 0;
}

static void restore_huge(void);

static void on_signal(int sig)
{
	remove_files();
	restore_huge();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void progress(const struct args *a, double t0, unsigned done,
		     unsigned total, const char *what)
{
	double el = tool_now() - t0;

	if (a->json || !isatty(STDERR_FILENO) || el < 2.0)
		return;
	progress_on = true;
	fprintf(stderr, "\r%s: op %u/%u, %.1f s elapsed  ", what, done, total,
		el);
	fflush(stderr);
}

static void progress_end(void)
{
	if (progress_on)
		fputs("\r\033[K", stderr);
	progress_on = false;
}

static double pct(const double *sorted, unsigned n, double p)
{
	double idx = p / 100.0 * (n - 1);
	unsigned lo = (unsigned)idx;

	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (idx - lo) * (sorted[lo + 1] - sorted[lo]);
}

/* The file every read loop will read: written through a handle of its
 * own and synced, so the timed reads find it on the disk. */
static void prepare(const struct args *a, const char *path, unsigned char *buf)
{
	struct nvs_aio *h;
	int fd, ret;

	tool_pattern(buf, a->io_size, 1);
	ret = nvs_aio_create(NULL, &h);
	if (ret < 0)
		tool_die(1, "%s", nvs_last_error());
	ret = nvs_aio_sync_pwrite(h, buf, a->io_size, path, 0);
	if (ret < 0)
		tool_die(1, "preparing %s: %s", path, nvs_last_error());
	nvs_aio_destroy(h);
	fd = open(path, O_RDONLY);
	if (fd < 0 || fsync(fd) < 0)
		tool_die(1, "syncing %s: %s", path, strerror(errno));
	close(fd);
}

static bool check_file(const char *path, size_t n, const unsigned char *want)
{
	unsigned char *got = malloc(1 << 20);
	int fd = open(path, O_RDONLY);
	bool ok = fd >= 0 && got;
	struct stat st;

	if (ok && (fstat(fd, &st) < 0 || (size_t)st.st_size != n))
		ok = false;
	for (size_t off = 0; ok && off < n; off += 1 << 20) {
		size_t len = n - off < (1u << 20) ? n - off : 1u << 20;
		if (pread(fd, got, len, (off_t)off) != (ssize_t)len ||
		    memcmp(got, want + off, len))
			ok = false;
	}
	if (fd >= 0)
		close(fd);
	free(got);
	return ok;
}

static void one_run(const struct args *a, struct run *r)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned char *mem = NULL, *buf;
	double t0 = tool_now(), setup_s, cpu0;
	const char *what = a->read ? "read" : "write";
	int ret;

	memset(r, 0, sizeof(*r));
	r->lat = live.lat = calloc(a->loops, sizeof(*r->lat));
	if (!r->lat)
		tool_die(1, "out of memory for %u latencies", a->loops);
	nvs_aio_opts_init(&o);
	o.block_size = (uint32_t)a->block_size;
	o.queue_depth = a->queue_depth;
	o.single_submit = a->single_submit;
	o.overlap_events = !a->sequential;
	o.intra_op_parallelism = a->parallel;
	o.backend = a->backend;
	o.uring_flags = a->uring_flags;
	o.bounce_bytes = (uint32_t)a->bounce;
	o.staging = (enum nvs_staging)a->staging;
	if (a->block_size > UINT32_MAX)
		tool_die(2, "--block_size %zu is too large", a->block_size);
	ret = nvs_aio_create(&o, &h);
	if (ret < 0)
		tool_die(ret == -EINVAL ? 2 : 1, "%s", nvs_last_error());
	live.h = h;
	live.pinned = a->pinned;
	if (a->pinned) {
		mem = nvs_aio_new_cpu_locked_buffer(h,
						    a->io_size + a->misalign);
		if (!mem)
			tool_die(1, "%s (or run with --unpinned)",
				 nvs_last_error());
	} else {
		if (posix_memalign((void **)&mem, 4096,
				   a->io_size + a->misalign))
			tool_die(1, "out of memory for a %zu-byte buffer",
				 a->io_size);
	}
	live.mem = mem;
	buf = mem + a->misalign;
	/* E2E counts this set-up once: the handle and the buffer. The read
	 * file's preparation is in neither figure. */
	setup_s = tool_now() - t0;
	if (a->read) {
		for (unsigned i = 0; i < (a->diff_file ? a->loops : 1); i++)
			if (!a->prepared)
				prepare(a, file_for(a, i), buf);
		memset(buf, 0, a->io_size);
	} else {
		tool_pattern(buf, a->io_size, 1);
	}
	for (unsigned i = 0; i < a->warmup; i++) {
		ret = a->read || a->warmup_read
			      ? nvs_aio_sync_pread(h, buf, a->io_size,
						   file_for(a, 0), 0)
			      : nvs_aio_sync_pwrite(h, buf, a->io_size,
						    file_for(a, 0), 0);
		if (ret < 0)
			tool_die(1, "warm-up %s: %s", what, nvs_last_error());
	}
	cpu0 = cpu_now();
	t0 = tool_now();
	for (unsigned i = 0; i < a->loops; i++) {
		double s = tool_now();
		const char *path = file_for(a, i);

		ret = a->read ? nvs_aio_sync_pread(h, buf, a->io_size, path, 0)
			      : nvs_aio_sync_pwrite(h, buf, a->io_size, path,
						    0);
		if (ret < 0)
			tool_die(1, "%s: %s", what, nvs_last_error());
		r->lat[i] = tool_now() - s;
		r->task_s += r->lat[i];
		progress(a, t0, i + 1, a->loops, what);
	}
	r->cpu_s = cpu_now() - cpu0;
	progress_end();
	r->bytes = (uint64_t)a->io_size * a->loops;
	r->e2e_s = setup_s + r->task_s;
	nvs_aio_get_stats(h, &r->st);
	if (a->validate) {
		r->validated = 1;
		if (a->read) {
			unsigned char *want = malloc(a->io_size);
			if (!want)
				tool_die(1, "out of memory for validation");
			tool_pattern(want, a->io_size, 1);
			if (memcmp(want, buf, a->io_size))
				r->validated = -1;
			free(want);
		} else {
			for (unsigned i = 0; i < (a->diff_file ? a->loops : 1);
			     i++)
				if (!check_file(file_for(a, i), a->io_size,
						buf))
					r->validated = -1;
		}
	}
	live.h = NULL;
	ret = nvs_aio_destroy(h);
	if (ret < 0)
		tool_die(1, "%s", nvs_last_error());
	live.mem = NULL;
	if (a->pinned)
		nvs_pinned_free(mem);
	else
		free(mem);
	live.lat = NULL; /* the caller's now */
}

/* ---------------------------------------------------------------- fio */

struct fio_res {
	double gbs;
	double cpu_s;
	bool ok;
};

static long read_long(const char *path)
{
	char buf[32] = "";
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fgets(buf, sizeof(buf), f))
			v = strtol(buf, NULL, 10);
		fclose(f);
	}
	return v;
}

static long meminfo(const char *key)
{
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = strlen(key);
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static long saved_huge = -1;

/* Also called from the signal handler: only async-signal-safe calls. */
static void restore_huge(void)
{
	char buf[32];
	int fd, n;

	if (saved_huge < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%ld\n", saved_huge);
	fd = open(HUGEPAGES, O_WRONLY);
	if (fd >= 0) {
		if (write(fd, buf, (size_t)n) != n)
			saved_huge = -1; /* nothing more we can do */
		close(fd);
	}
	saved_huge = -1;
}

/* Huge pages for fio's buffers: true when there are enough. */
static bool reserve_huge(const struct args *a, char *why, size_t n)
{
	/* fio's shm segment for iodepth x bs was measured to need about
	 * twice that in huge pages (fio-3.33): reserve 2x plus 2 per job. */
	long need = (long)(2 * (((size_t)a->queue_depth * a->block_size +
				 HUGE_SIZE - 1) /
				HUGE_SIZE) +
			   2) *
		    (long)a->parallel;
	long have = meminfo("HugePages_Free");
	long total = read_long(HUGEPAGES);
	FILE *f;

	if (have >= need)
		return true;
	if (geteuid() != 0) {
		snprintf(why, n,
			 "fio needs %ld free huge pages for --iomem=shmhuge "
			 "and has %ld; as root run: echo %ld > " HUGEPAGES,
			 need, have < 0 ? 0 : have,
			 (total < 0 ? 0 : total) + need -
				 (have < 0 ? 0 : have));
		return false;
	}
	f = fopen(HUGEPAGES, "w");
	if (!f) {
		snprintf(why, n, "cannot write " HUGEPAGES ": %s",
			 strerror(errno));
		return false;
	}
	saved_huge = total;
	atexit(restore_huge);
	fprintf(f, "%ld\n", total + need - have);
	fclose(f);
	if (meminfo("HugePages_Free") < need) {
		snprintf(why, n,
			 "the kernel found only %ld of %ld huge pages (memory "
			 "too fragmented)",
			 meminfo("HugePages_Free"), need);
		return false;
	}
	return true;
}

/* Run fio with @huge or default buffers; parse its JSON with jansson. */
static struct fio_res run_fio(const struct args *a, enum nvs_backend eng,
			      const char *path, bool huge)
{
	struct fio_res res = {0};
	char cmd[4096], *out = NULL;
	size_t len = 0, cap = 0;
	const char *rw = a->read ? "read" : "write";
	json_error_t jerr;
	json_t *root, *jobs;
	double max_rt = 0, bytes = 0;
	char batch[128] = "";
	FILE *p;
	int n;

	if (a->sequential) /* batch-and-drain, as --sequential_requests */
		snprintf(batch, sizeof(batch),
			 "--iodepth_batch_submit=%u "
			 "--iodepth_batch_complete_min=%u ",
			 a->queue_depth, a->queue_depth);
	n = snprintf(
		cmd, sizeof(cmd),
		"fio --name=nvswap-io --filename=%s --rw=%s --bs=%zu "
		"--iodepth=%u --ioengine=%s --direct=1 --thread "
		"--numjobs=%u --size=%zu --offset_increment=%zu "
		"--loops=%u --iomem=%s --scramble_buffers=0 %s%s"
		"--output-format=json 2>&1",
		path, rw, a->block_size, a->queue_depth, nvs_backend_name(eng),
		a->parallel, a->io_size / a->parallel, a->io_size / a->parallel,
		a->loops, huge ? "shmhuge" : "malloc",
		eng == NVS_BACKEND_IO_URING ? "--fixedbufs=1 --registerfiles=1 "
					    : "",
		batch);
	if (n < 0 || (size_t)n >= sizeof(cmd))
		tool_die(2, "--folder path too long for the fio command line");
	p = popen(cmd, "r");
	if (!p)
		tool_die(1, "running fio: %s", strerror(errno));
	for (;;) {
		if (len + 4096 > cap) {
			cap = cap ? cap * 2 : 65536;
			out = realloc(out, cap);
			if (!out)
				tool_die(1,
					 "out of memory reading fio's output");
		}
		size_t got = fread(out + len, 1, cap - len - 1, p);
		if (got == 0)
			break;
		len += got;
	}
	out[len] = 0;
	if (pclose(p) != 0) {
		fprintf(stderr, "nvswap-io: fio failed:\n  %s\n%s\n", cmd, out);
		free(out);
		return res;
	}
	/* fio may print notes before the JSON object. */
	root = json_loads(strchr(out, '{') ? strchr(out, '{') : out,
			  JSON_DISABLE_EOF_CHECK, &jerr);
	free(out);
	if (!root) {
		fprintf(stderr, "nvswap-io: fio's JSON: %s (line %d)\n",
			jerr.text, jerr.line);
		return res;
	}
	jobs = json_object_get(root, "jobs");
	for (size_t i = 0; i < json_array_size(jobs); i++) {
		json_t *j = json_array_get(jobs, i);
		json_t *d = json_object_get(j, rw);
		double rt =
			json_number_value(json_object_get(j, "job_runtime"));
		double usr = json_number_value(json_object_get(j, "usr_cpu"));
		double sys = json_number_value(json_object_get(j, "sys_cpu"));

		bytes += json_number_value(json_object_get(d, "io_bytes"));
		res.cpu_s += (usr + sys) / 100.0 * rt / 1000.0;
		if (rt > max_rt)
			max_rt = rt;
	}
	json_decref(root);
	if (max_rt > 0 && bytes > 0) {
		res.gbs = bytes / (max_rt / 1000.0) / GIB;
		res.ok = true;
	}
	return res;
}

static bool have_fio(void)
{
	return system("fio --version >/dev/null 2>&1") == 0;
}

/* ------------------------------------------------------------- output */

static void print_run(const struct args *a, const struct run *r)
{
	const char *io = a->read ? "Read" : "Write";
	double e2e = r->e2e_s;
	double *lat = r->lat;

	qsort(lat, a->loops, sizeof(*lat), tool_cmp_double);
	printf("Task %s Latency = %.6f sec\n", io, r->task_s);
	printf("Task %s Speed = %.6f GB/sec\n", io, r->bytes / r->task_s / GIB);
	printf("E2E %s Latency = %.6f sec\n", io, e2e);
	printf("E2E %s Speed = %.6f GB/sec\n", io, r->bytes / e2e / GIB);
	printf("Op %s Latency: min %.3f ms, median %.3f ms, p99 %.3f ms "
	       "(%u ops of %zu bytes)\n",
	       io, lat[0] * 1e3, pct(lat, a->loops, 50) * 1e3,
	       pct(lat, a->loops, 99) * 1e3, a->loops, a->io_size);
	printf("CPU time: %.3f s per GiB (user + system)\n",
	       r->cpu_s / (r->bytes / GIB));
	printf("Backend: %s; fixed-buffer requests %llu of %llu; %s\n",
	       nvs_backend_name(r->st.backend),
	       (unsigned long long)r->st.fixed_buffer_requests,
	       (unsigned long long)r->st.requests, r->st.backend_notes);
	if (r->validated)
		printf("Validation: %s\n",
		       r->validated > 0 ? "ok, every byte" : "FAILED");
}

static json_t *run_json(const struct args *a, const struct run *r)
{
	double *lat = r->lat;

	qsort(lat, a->loops, sizeof(*lat), tool_cmp_double);
	return json_pack(
		"{s:f, s:f, s:f, s:f, s:{s:f, s:f, s:f}, s:f, s:s, s:I, s:I, "
		"s:I, s:s, s:o}",
		"task_latency_sec", r->task_s, "task_gbs",
		r->bytes / r->task_s / GIB, "e2e_latency_sec", r->e2e_s,
		"e2e_gbs", r->bytes / r->e2e_s / GIB, "op_latency_ms", "min",
		lat[0] * 1e3, "median", pct(lat, a->loops, 50) * 1e3, "p99",
		pct(lat, a->loops, 99) * 1e3, "cpu_sec_per_gib",
		r->cpu_s / (r->bytes / GIB), "backend",
		nvs_backend_name(r->st.backend), "requests",
		(json_int_t)r->st.requests, "fixed_buffer_requests",
		(json_int_t)r->st.fixed_buffer_requests, "retries",
		(json_int_t)r->st.retries, "backend_notes", r->st.backend_notes,
		"validated",
		r->validated == 0 ? json_null()
				  : json_boolean(r->validated > 0));
}

static json_t *config_json(const struct args *a)
{
	return json_pack("{s:s, s:I, s:s, s:I, s:i, s:b, s:b, s:i, s:i, s:i, "
			 "s:b, s:I}",
			 "folder", a->folder, "io_size", (json_int_t)a->io_size,
			 "op", a->read ? "read" : "write", "block_size",
			 (json_int_t)a->block_size, "queue_depth",
			 (int)a->queue_depth, "single_submit", a->single_submit,
			 "overlap_events", !a->sequential, "io_parallel",
			 (int)a->parallel, "loops", (int)a->loops,
			 "warmup_loops", (int)a->warmup, "pinned", a->pinned,
			 "misalign", (json_int_t)a->misalign);
}

static void summarize(const char *label, double *v, unsigned n, json_t *j,
		      const char *key)
{
	double s[256];

	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), tool_cmp_double);
	if (!quiet)
		printf("  %-26s median %.3f  min %.3f  max %.3f\n", label,
		       pct(s, n, 50), s[0], s[n - 1]);
	if (j)
		json_object_set_new(j, key,
				    json_pack("{s:f, s:f, s:f}", "median",
					      pct(s, n, 50), "min", s[0], "max",
					      s[n - 1]));
}

static int compare_fio(const struct args *a)
{
	double nv[256], fh[256], fd[256], ratio[256], nvc[256], fhc[256],
		cpur[256];
	unsigned reps = a->repeats > 256 ? 256 : a->repeats;
	char why[512] = "";
	bool huge;
	json_t *j = a->json ? json_object() : NULL;
	const char *path = file_for(a, 0);
	enum nvs_backend eng;
	struct run r;
	int rc = 0;

	if (!have_fio())
		tool_die(2, "--compare-fio needs fio: apt-get install fio");
	huge = reserve_huge(a, why, sizeof(why));
	if (!huge && !quiet)
		printf("note: %s; comparing against fio's default buffers "
		       "only\n",
		       why);
	/* Both read (or overwrite) the same file, written and synced once
	 * here, untimed. */
	one_run(&(struct args){.folder = a->folder,
			       .read = true,
			       .backend = a->backend,
			       .io_size = a->io_size,
			       .block_size = a->block_size,
			       .queue_depth = a->queue_depth,
			       .parallel = 1,
			       .loops = 1,
			       .pinned = true},
		&r);
	free(r.lat);
	eng = r.st.backend; /* fio runs the engine nvswap runs */
	if (!quiet)
		printf("nvswap vs fio: %s, %zu bytes, bs %zu, qd %u, "
		       "parallelism %u, %s, %u interleaved repeats\n",
		       a->read ? "read" : "write", a->io_size, a->block_size,
		       a->queue_depth, a->parallel, nvs_backend_name(eng),
		       reps);
	/* One untimed op first, as fio's set-up: buffers are registered
	 * with the ring on first use, fio registers its before timing. It
	 * reads, also before a timed write: the host throttles sustained
	 * writes, and an extra 1 GiB write right before the timed one would
	 * put nvswap deeper into that than fio. */
	struct args warm = *a;
	if (warm.warmup == 0)
		warm.warmup = 1;
	warm.prepared = true;
	warm.warmup_read = true;
	for (unsigned i = 0; i < reps; i++) {
		struct fio_res f1 = {0}, f2;

		one_run(&warm, &r);
		nv[i] = r.bytes / r.task_s / GIB;
		nvc[i] = r.cpu_s / (r.bytes / GIB);
		if (r.validated < 0)
			rc = 1;
		free(r.lat);
		if (huge) {
			f1 = run_fio(a, eng, path, true);
			if (!f1.ok)
				tool_die(1,
					 "fio with huge-page buffers failed");
			fh[i] = f1.gbs;
			fhc[i] = f1.cpu_s /
				 ((double)a->io_size * a->loops / GIB);
		}
		f2 = run_fio(a, eng, path, false);
		if (!f2.ok)
			tool_die(1, "fio with default buffers failed");
		fd[i] = f2.gbs;
		if (!huge) {
			fh[i] = fd[i];
			fhc[i] = f2.cpu_s /
				 ((double)a->io_size * a->loops / GIB);
		}
		ratio[i] = fh[i] > 0 ? nv[i] / fh[i] : 0;
		/* getrusage counts in ticks: a tiny run may show 0. */
		cpur[i] = fhc[i] > 0 ? nvc[i] / fhc[i] : 0;
		if (!quiet)
			printf("  repeat %u: nvswap %.3f GB/s, fio%s %.3f GB/s "
			       "(ratio %.3f), fio default buffers %.3f GB/s\n",
			       i + 1, nv[i], huge ? " huge-page" : "", fh[i],
			       ratio[i], fd[i]);
	}
	if (!quiet)
		printf("summary over %u repeats (GB/s; GB = 2^30 bytes):\n",
		       reps);
	summarize("nvswap", nv, reps, j, "nvswap_gbs");
	summarize(huge ? "fio huge-page buffers" : "fio default buffers", fh,
		  reps, j, "fio_gbs");
	summarize("fio default buffers", fd, reps, j, "fio_default_gbs");
	summarize("ratio nvswap/fio", ratio, reps, j, "ratio");
	summarize("CPU s/GiB nvswap", nvc, reps, j, "nvswap_cpu_sec_per_gib");
	summarize("CPU s/GiB fio", fhc, reps, j, "fio_cpu_sec_per_gib");
	summarize("CPU ratio nvswap/fio", cpur, reps, j, "cpu_ratio");
	if (j) {
		json_object_set_new(j, "config", config_json(a));
		json_object_set_new(j, "fio_huge_pages", json_boolean(huge));
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
	}
	restore_huge();
	return rc;
}

int main(int argc, char **argv)
{
	struct args a;
	struct run r;
	int rc = 0;

	tool_name = "nvswap-io";
	tool_cleanup = on_fatal;
	parse(argc, argv, &a);
	keep_files = a.keep;
	quiet = a.json;
	check_folder(a.folder);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (a.compare_fio) {
		rc = compare_fio(&a);
	} else {
		one_run(&a, &r);
		if (r.validated < 0)
			rc = 1;
		if (a.json) {
			json_t *j = run_json(&a, &r);
			json_object_set_new(j, "config", config_json(&a));
			json_dumpf(j, stdout, JSON_INDENT(2));
			putchar('\n');
			json_decref(j);
		} else {
			print_run(&a, &r);
		}
		free(r.lat);
	}
	if (!a.keep)
		remove_files();
	return rc;
}
