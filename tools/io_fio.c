// SPDX-License-Identifier: MIT
/*
 * nvswap-io --compare-fio: fio run on the same file with the same
 * settings, interleaved with nvswap runs, with huge-page buffers reserved
 * (and given back) when root, and the ratios summarized.
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct fio_res {
	double gbs;
	double cpu_s;	  /* the whole process over the I/O (see hook) */
	double own_cpu_s; /* fio's usr_cpu + sys_cpu: its job threads */
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

/* Every nvswap-io takes this lock around its change of nr_hugepages. */
#define HUGE_LOCK "/run/lock/nvswap-io-hugepages.lock"

static long added_huge; /* pages this process added to the pool */

/*
 * Add @delta (negative: take back) to nr_hugepages. Several nvswap-io may
 * run at once (the test suite runs its cases in parallel): each adds its
 * own pages and takes back just those, and the read-modify-write is done
 * under a lock they share. Restoring a saved absolute value instead would
 * take away pages another run is about to use. Async-signal-safe: open,
 * flock, read, write, close and digit loops only. Return: 0, or -1.
 */
static int huge_adjust(long delta)
{
	char buf[32], out[32];
	int lk = open(HUGE_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
		      0600);
	int fd, n = 0, rc = -1;
	ssize_t got = -1;
	long cur = 0;

	if (lk >= 0)
		flock(lk, LOCK_EX);
	fd = open(HUGEPAGES, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		got = read(fd, buf, sizeof(buf) - 1);
		close(fd);
	}
	for (ssize_t i = 0; i < got && buf[i] >= '0' && buf[i] <= '9'; i++)
		cur = cur * 10 + (buf[i] - '0');
	cur = cur + delta < 0 ? 0 : cur + delta;
	do { /* the digits backwards, then turned */
		buf[n++] = (char)('0' + cur % 10);
		cur /= 10;
	} while (cur > 0);
	for (int i = 0; i < n; i++)
		out[i] = buf[n - 1 - i];
	out[n++] = '\n';
	fd = got > 0 ? open(HUGEPAGES, O_WRONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		if (write(fd, out, (size_t)n) == n)
			rc = 0;
		close(fd);
	}
	if (lk >= 0)
		close(lk); /* and the lock with it */
	return rc;
}

/* Also called from the signal handler: only async-signal-safe calls. */
void io_restore_huge(void)
{
	long n = added_huge;

	added_huge = 0;
	if (n > 0)
		huge_adjust(-n);
}

/* Huge pages for fio's buffers: true when there are enough. As root, this
 * run's own, added to the pool (see huge_adjust). */
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

	if (geteuid() != 0) {
		if (have >= need)
			return true;
		snprintf(why, n,
			 "fio needs %ld free huge pages for --iomem=shmhuge "
			 "and has %ld; as root run: echo %ld > " HUGEPAGES,
			 need, have < 0 ? 0 : have,
			 (total < 0 ? 0 : total) + need -
				 (have < 0 ? 0 : have));
		return false;
	}
	if (huge_adjust(need) < 0) {
		if (have >= need) /* a read-only /proc: use what is free */
			return true;
		snprintf(why, n, "cannot change " HUGEPAGES ": %s",
			 strerror(errno));
		return false;
	}
	added_huge = need;
	atexit(io_restore_huge);
	if (meminfo("HugePages_Free") < need) {
		snprintf(why, n,
			 "the kernel found only %ld of %ld huge pages (memory "
			 "too fragmented)",
			 meminfo("HugePages_Free"), need);
		return false;
	}
	return true;
}

/*
 * fio's CPU time, counted as nvswap's is: the whole process (every thread,
 * io_uring's io-wq workers among them) over the I/O only, on the kernel's
 * process CPU clock. fio's own usr_cpu/sys_cpu counts its job thread alone
 * (getrusage RUSAGE_THREAD) in whole milliseconds, and so misses the
 * workers: on this machine about 40% of its CPU at 1 MiB blocks. So each
 * job's --exec_prerun and --exec_postrun, which fio runs right before and
 * right after the job's I/O, write fio's pid into a FIFO and wait for an
 * answer; we read fio's CPU clock in between. The hooks' own cost (a fork
 * of fio) is measured once with a one-block job and taken off.
 */
static struct {
	char dir[PATH_MAX]; /* private (0700): fio's cwd, FIFOs, hook logs */
	int pid_fd, ack_fd; /* both FIFOs, held O_RDWR: never EOF, no HUP */
	double overhead_s;  /* CPU of the hooks themselves */
	bool made;
} hook = {.pid_fd = -1, .ack_fd = -1};

static const char *const hook_files[] = {"pid", "ack", "fio.prerun.txt",
					 "fio.postrun.txt"};

/* Async-signal-safe: unlink, close and rmdir only. */
void io_fio_cleanup(void)
{
	char p[PATH_MAX + 32];

	if (!hook.made)
		return;
	for (size_t i = 0; i < sizeof(hook_files) / sizeof(hook_files[0]);
	     i++) {
		size_t n = strlen(hook.dir), m = strlen(hook_files[i]);

		memcpy(p, hook.dir, n);
		p[n] = '/';
		memcpy(p + n + 1, hook_files[i], m + 1);
		unlink(p);
	}
	if (hook.pid_fd >= 0)
		close(hook.pid_fd);
	if (hook.ack_fd >= 0)
		close(hook.ack_fd);
	rmdir(hook.dir);
	hook.pid_fd = hook.ack_fd = -1;
	hook.made = false;
}

static int hook_fifo(const char *name)
{
	char p[PATH_MAX + 32];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", hook.dir, name);
	if (mkfifo(p, 0600) < 0)
		tool_die(1, "mkfifo %s: %s", p, strerror(errno));
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		tool_die(1, "opening %s: %s", p, strerror(errno));
	return fd;
}

static void hook_setup(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(hook.dir, sizeof(hook.dir), "%s/nvswap-io-fio.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(hook.dir))
		tool_die(1, "mkdtemp %s: %s", hook.dir, strerror(errno));
	hook.made = true;
	hook.pid_fd = hook_fifo("pid");
	hook.ack_fd = hook_fifo("ack");
}

static double cpu_of(pid_t pid)
{
	struct timespec ts;
	clockid_t c;

	if (clock_getcpuclockid(pid, &c) || clock_gettime(c, &ts))
		tool_die(1, "reading fio's CPU clock: %s", strerror(errno));
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A hook line arrived: read fio's clock, then let the hook go on. */
static void hook_line(pid_t pid, unsigned *lines, double *t0, double *t1)
{
	char buf[64];
	ssize_t got = read(hook.pid_fd, buf, sizeof(buf) - 1);

	if (got <= 0)
		return;
	for (ssize_t i = 0; i < got; i++) {
		if (buf[i] != '\n')
			continue;
		if (++*lines == 1)
			*t0 = cpu_of(pid);
		else
			*t1 = cpu_of(pid);
		if (write(hook.ack_fd, "\n", 1) != 1)
			tool_die(1, "answering fio's hook: %s",
				 strerror(errno));
	}
}

/* Run fio's argv @argv in hook.dir, its output into *@out; the CPU of the
 * process between the first prerun and the last postrun into *@cpu_s (-1
 * when the hooks did not both run). Return: fio's exit status. */
static int spawn_fio(char *const *argv, unsigned jobs, char **out,
		     double *cpu_s)
{
	int pfd[2], status = 0;
	size_t len = 0, cap = 65536;
	unsigned lines = 0;
	double t0 = 0, t1 = 0;
	pid_t pid;

	*out = malloc(cap);
	if (!*out || pipe2(pfd, O_CLOEXEC) < 0)
		tool_die(1, "running fio: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		tool_die(1, "running fio: %s", strerror(errno));
	if (pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		dup2(pfd[1], STDERR_FILENO);
		if (chdir(hook.dir) == 0)
			execvp(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		struct pollfd pf[2] = {{.fd = pfd[0], .events = POLLIN},
				       {.fd = hook.pid_fd, .events = POLLIN}};
		ssize_t got;

		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			tool_die(1, "waiting for fio: %s", strerror(errno));
		}
		if (pf[1].revents & POLLIN)
			hook_line(pid, &lines, &t0, &t1);
		if (!(pf[0].revents & (POLLIN | POLLHUP)))
			continue;
		if (len + 4096 > cap) {
			cap *= 2;
			*out = realloc(*out, cap);
			if (!*out)
				tool_die(1,
					 "out of memory reading fio's output");
		}
		got = read(pfd[0], *out + len, cap - len - 1);
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	(*out)[len] = 0;
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	*cpu_s = lines == 2 * jobs ? t1 - t0 : -1;
	return status;
}

/* fio's command line, shell-quoted, for people and the JSON. */
static void join_argv(char *const *argv, char *buf, size_t n)
{
	size_t at = 0;

	buf[0] = 0;
	for (unsigned i = 0; argv[i] && at < n; i++) {
		bool q = strpbrk(argv[i], " ;<>$'") != NULL;
		at += (size_t)snprintf(buf + at, n - at, "%s%s%s%s",
				       i ? " " : "", q ? "'" : "", argv[i],
				       q ? "'" : "");
	}
}

static char fio_cmdline[8192];

/* Run fio with @huge or default buffers over @io_size bytes of the file
 * (per job); parse its JSON with jansson. */
static struct fio_res run_fio(const struct args *a, enum nvs_backend eng,
			      const char *path, bool huge, size_t io_size)
{
	struct fio_res res = {0};
	static char opt[24][PATH_MAX + 64];
	char *argv[25], *out;
	const char *rw = a->read ? "read" : "write";
	json_error_t jerr;
	json_t *root, *jobs;
	double max_rt = 0, bytes = 0, cpu_s;
	unsigned n = 0;
	int status;

#define FIO_ARG(...)                                                           \
	(snprintf(opt[n], sizeof(opt[n]), __VA_ARGS__), argv[n] = opt[n], n++)
	FIO_ARG("fio");
	FIO_ARG("--name=fio");
	FIO_ARG("--filename=%s", path);
	FIO_ARG("--rw=%s", rw);
	FIO_ARG("--bs=%zu", a->block_size);
	FIO_ARG("--iodepth=%u", a->queue_depth);
	FIO_ARG("--ioengine=%s", nvs_backend_name(eng));
	FIO_ARG("--direct=1");
	FIO_ARG("--thread");
	FIO_ARG("--numjobs=%u", a->parallel);
	FIO_ARG("--size=%zu", a->io_size / a->parallel);
	FIO_ARG("--offset_increment=%zu", a->io_size / a->parallel);
	FIO_ARG("--io_size=%zu", io_size);
	FIO_ARG("--loops=%u", a->loops);
	FIO_ARG("--iomem=%s", huge ? "shmhuge" : "malloc");
	FIO_ARG("--scramble_buffers=0");
	FIO_ARG("--output-format=json");
	FIO_ARG("--exec_prerun=echo $PPID >pid; read x <ack");
	FIO_ARG("--exec_postrun=echo $PPID >pid; read x <ack");
	if (eng == NVS_BACKEND_IO_URING) {
		FIO_ARG("--fixedbufs=1");
		FIO_ARG("--registerfiles=1");
	}
	if (a->sequential) { /* batch-and-drain, as --sequential-requests */
		FIO_ARG("--iodepth_batch_submit=%u", a->queue_depth);
		FIO_ARG("--iodepth_batch_complete_min=%u", a->queue_depth);
	}
#undef FIO_ARG
	argv[n] = NULL;
	if (strlen(path) >= PATH_MAX)
		tool_die(
			2,
			"--nvme-path: the path is too long for the fio command line");
	join_argv(argv, fio_cmdline, sizeof(fio_cmdline));
	status = spawn_fio(argv, a->parallel, &out, &cpu_s);
	if (status != 0 || cpu_s < 0) {
		fprintf(stderr, "nvswap-io: fio failed%s:\n  %s\n%s\n",
			status ? "" : " (its hooks did not run)", fio_cmdline,
			out);
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
		res.own_cpu_s += (usr + sys) / 100.0 * rt / 1000.0;
		if (rt > max_rt)
			max_rt = rt;
	}
	json_decref(root);
	res.cpu_s = cpu_s - hook.overhead_s;
	if (res.cpu_s < 0)
		res.cpu_s = 0;
	/* A one-block job (measure_hook_overhead) may take 0 ms. */
	if (max_rt > 0 && bytes > 0)
		res.gbs = bytes / (max_rt / 1000.0) / GIB;
	res.ok = bytes > 0;
	return res;
}

/* The hooks' own CPU: fio doing one block per job, twice, the smaller. */
static void measure_hook_overhead(const struct args *a, enum nvs_backend eng,
				  const char *path, bool huge)
{
	double best = -1;

	hook.overhead_s = 0;
	for (int i = 0; i < 2; i++) {
		struct fio_res f = run_fio(a, eng, path, huge, a->block_size);

		if (!f.ok)
			tool_die(1, "fio failed measuring its hooks' cost");
		if (best < 0 || f.cpu_s < best)
			best = f.cpu_s;
	}
	hook.overhead_s = best;
}

/* A fio run that has a rate, else exit saying why. fio times a job in
 * whole milliseconds: a run shorter than one moved its bytes with no
 * time to divide by (a small --io-size on a fast disk or a write cache),
 * which is no failure of fio's. */
static void fio_timed(struct fio_res f, const char *buffers)
{
	if (!f.ok)
		tool_die(1, "fio with %s buffers failed", buffers);
	if (f.gbs <= 0)
		tool_die(1,
			 "fio with %s buffers took under 1 ms, its timer's "
			 "resolution: give a larger --io-size (or --loops) to "
			 "compare",
			 buffers);
}

static bool have_fio(void)
{
	return system("fio --version >/dev/null 2>&1") == 0;
}
int io_compare_fio(const struct args *a)
{
	double nv[256], fh[256], fd[256], ratio[256], nvc[256], fhc[256],
		cpur[256], own[256];
	unsigned reps = a->repeats > 256 ? 256 : a->repeats;
	char why[512] = "", path[PATH_MAX];
	bool huge;
	json_t *j = NULL; /* made after the runs: a fatal one holds none */
	double gib = (double)a->io_size * a->loops / GIB;
	size_t per_job = a->io_size / a->parallel;
	enum nvs_backend eng;
	struct run r;
	uint64_t last_requests = 0;
	int rc = 0;

	if (!have_fio())
		tool_die(2, "--compare-fio needs fio: apt-get install fio");
	/* fio runs in the hooks' directory: it needs the absolute path. */
	if (!realpath(io_file_for(a, 0), path))
		tool_die(1, "%s: %s", io_file_for(a, 0), strerror(errno));
	huge = reserve_huge(a, why, sizeof(why));
	if (!huge && !io_quiet)
		printf("note: %s; comparing against fio's default buffers "
		       "only\n",
		       why);
	/* Both read (or overwrite) the same file, written and synced once
	 * here, untimed. */
	io_one_run(&(struct args){.folder = a->folder,
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
	hook_setup();
	measure_hook_overhead(a, eng, path, huge);
	if (!io_quiet)
		printf("nvswap vs fio: %s, %zu bytes, bs %zu, qd %u, "
		       "parallelism %u, %s, %u interleaved repeats; fio's "
		       "hooks cost %.2f ms of CPU, taken off\n",
		       a->read ? "read" : "write", a->io_size, a->block_size,
		       a->queue_depth, a->parallel, nvs_backend_name(eng), reps,
		       hook.overhead_s * 1e3);
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
		struct fio_res f1 = {0}, f2 = {0};

		io_one_run(&warm, &r);
		nv[i] = r.bytes / r.task_s / GIB;
		nvc[i] = r.cpu_s / (r.bytes / GIB);
		last_requests = r.st.requests;
		if (r.validated < 0)
			rc = 1;
		free(r.lat);
		if (huge) {
			f1 = run_fio(a, eng, path, true, per_job);
			fio_timed(f1, "huge-page");
		}
		if (!huge || !a->fio_huge_only) {
			f2 = run_fio(a, eng, path, false, per_job);
			fio_timed(f2, "default");
		}
		fd[i] = f2.gbs;
		if (!huge)
			f1 = f2;
		fh[i] = f1.gbs;
		fhc[i] = f1.cpu_s / gib;
		own[i] = f1.own_cpu_s / gib;
		ratio[i] = fh[i] > 0 ? nv[i] / fh[i] : 0;
		cpur[i] = fhc[i] > 0 ? nvc[i] / fhc[i] : 0;
		if (!io_quiet)
			printf("  repeat %u: nvswap %.3f GB/s, fio%s %.3f GB/s "
			       "(ratio %.3f)",
			       i + 1, nv[i], huge ? " huge-page" : "", fh[i],
			       ratio[i]);
		if (!io_quiet && huge && !a->fio_huge_only)
			printf(", fio default buffers %.3f GB/s", fd[i]);
		if (!io_quiet)
			putchar('\n');
	}
	if (!io_quiet)
		printf("summary over %u repeats (GB/s; GB = 2^30 bytes):\n",
		       reps);
	if (a->json)
		j = json_object();
	io_summarize("nvswap", nv, reps, j, "nvswap_gbs");
	io_summarize(huge ? "fio huge-page buffers" : "fio default buffers", fh,
		     reps, j, "fio_gbs");
	if (!huge || !a->fio_huge_only)
		io_summarize("fio default buffers", fd, reps, j,
			     "fio_default_gbs");
	io_summarize("ratio nvswap/fio", ratio, reps, j, "ratio");
	io_summarize("CPU s/GiB nvswap", nvc, reps, j,
		     "nvswap_cpu_sec_per_gib");
	io_summarize("CPU s/GiB fio", fhc, reps, j, "fio_cpu_sec_per_gib");
	io_summarize("CPU ratio nvswap/fio", cpur, reps, j, "cpu_ratio");
	io_summarize("fio's own usr+sys s/GiB", own, reps, j,
		     "fio_own_cpu_sec_per_gib");
	if (j) {
		json_object_set_new(j, "config", io_config_json(a));
		json_object_set_new(j, "fio_huge_pages", json_boolean(huge));
		json_object_set_new(j, "backend",
				    json_string(nvs_backend_name(eng)));
		/* The last repeat's handle: its warm-up and timed ops. */
		json_object_set_new(j, "nvswap_requests",
				    json_integer((json_int_t)last_requests));
		json_object_set_new(j, "nvswap_ops",
				    json_integer(warm.warmup + warm.loops));
		json_object_set_new(j, "fio_command", json_string(fio_cmdline));
		json_object_set_new(j, "fio_hook_cpu_sec",
				    json_real(hook.overhead_s));
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
	}
	io_fio_cleanup();
	io_restore_huge();
	return rc;
}
