// SPDX-License-Identifier: MIT
/*
 * Crashes, as users meet them: examples/offload_train killed with SIGKILL
 * at random moments, each time in the same nvme_path. The next run must
 * start cleanly (it reclaims the stale swap set the killed one left), a
 * last complete run must still train bit for bit, and nothing but the
 * empty directories may remain after it. While one run lives, a second in
 * the same path is refused (-EBUSY), naming the holder's pid.
 *
 * With --checkpoint-every, a run killed at any moment (at random, or
 * just as one of its sets commits a checkpoint) goes on with --resume
 * from its last checkpoint and ends with the uninterrupted run's weights
 * and losses, bit for bit; the run that completes removes its sets.
 *
 * Ctrl-C (SIGINT) stops a run at its next step with its swap files
 * removed, what it printed kept (stdout is line-buffered into a file or
 * a pipe), and its status that of the signal.
 *
 * NVSWAP_CRASH_RUNS sets the number of kills of each test (10 here; make
 * stress: 50), NVSWAP_CRASH_SEED the random seed (printed, to replay a
 * failure).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(crash, .fini = fini);

static const char *swap_dir(void)
{
	static char p[1024];

	snprintf(p, sizeof(p), "%.1000s/swap", tu_dir());
	mkdir(p, 0755);
	return p;
}

static const char *config(void)
{
	char json[8192];
	const char *file = tu_path("ds.json");

	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 3, "
		 "\"buffer_size\": 1e6}, \"offload_optimizer\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 4, "
		 "\"buffer_size\": 2e6, \"pipeline_read\": true, "
		 "\"pipeline_write\": true}}, \"aio\": {\"block_size\": "
		 "1048576, \"queue_depth\": 16, \"overlap_events\": true}}",
		 swap_dir(), swap_dir());
	tu_write_file(file, json, strlen(json));
	return file;
}

/* Start offload_train with @steps steps and options @a1, @a2 (each may
 * be NULL, and then the ones after it too); its output goes to files
 * named after @tag in tu_dir. */
static pid_t start_with(const char *tag, unsigned steps, const char *a1,
			const char *a2)
{
	const char *bin = getenv("NVSWAP_OFFLOAD_TRAIN");
	char out[4096], err[4096], st[16];
	const char *cfg = config();
	pid_t pid;

	cr_assert_not_null(bin, "set by tests/meson.build");
	snprintf(out, sizeof(out), "%s/%s.out", tu_dir(), tag);
	snprintf(err, sizeof(err), "%s/%s.err", tu_dir(), tag);
	snprintf(st, sizeof(st), "%u", steps);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 ||
		    chdir(tu_dir()) < 0)
			_exit(126);
		execl(bin, bin, "--config", cfg, "--layers", "4", "--hidden",
		      "256", "--steps", st, a1, a2, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static pid_t start(const char *tag, unsigned steps)
{
	return start_with(tag, steps, NULL, NULL);
}

static int finish(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return status;
}

static char *output(const char *tag, const char *ext)
{
	char p[4096], *s;
	size_t n;
	void *b;

	snprintf(p, sizeof(p), "%s/%s.%s", tu_dir(), tag, ext);
	b = tu_read_file(p, &n);
	cr_assert_not_null(s = malloc(n + 1));
	memcpy(s, b, n);
	s[n] = 0;
	free(b);
	return s;
}

/* A complete run that must train bit for bit. */
static void complete_run(const char *tag)
{
	int status = finish(start(tag, 3));
	char *out = output(tag, "out"), *err = output(tag, "err");

	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "%s: status %#x: %s%s", tag, status, out, err);
	cr_assert(strstr(out, "bit for bit"), "%s: %s", tag, out);
	free(out);
	free(err);
}

static unsigned files_found;

static int count_file(const char *p, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)p;
	(void)st;
	(void)ftw;
	if (flag != FTW_D && flag != FTW_DP)
		files_found++;
	return 0;
}

/* Files (not directories) below @dir. */
static unsigned files_below(const char *dir)
{
	files_found = 0;
	nftw(dir, count_file, 16, FTW_PHYS);
	return files_found;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(crash, killed_at_random_moments_the_next_run_starts_clean)
{
	const char *e = getenv("NVSWAP_CRASH_RUNS");
	const char *es = getenv("NVSWAP_CRASH_SEED");
	unsigned runs = e ? (unsigned)atoi(e) : 10;
	unsigned seed = es ? (unsigned)atoi(es) : (unsigned)time(NULL);
	unsigned stale = 0;
	double t0, span;

	alarm(300); /* a hang fails the test (no .timeout: its runner
		    * leaks under LeakSanitizer when it fires) */
	cr_log_info("crash: %u kills, NVSWAP_CRASH_SEED=%u", runs, seed);
	srand(seed);
	/* How long a run takes here: the kills fall within it. */
	t0 = now();
	complete_run("first");
	span = now() - t0;
	/* Its config names another nvme_path: the ./nvme_swap it makes for
	 * the sample config is not left behind (a killed run may leave it). */
	cr_assert_neq(access(tu_path("nvme_swap"), F_OK), 0,
		      "a complete run left ./nvme_swap behind");
	for (unsigned i = 0; i < runs; i++) {
		char tag[32];
		pid_t pid;
		int status;
		long us = (long)(span * 1e6 * rand() / ((double)RAND_MAX + 1));

		snprintf(tag, sizeof(tag), "killed%u", i);
		pid = start(tag, 3);
		usleep((useconds_t)us);
		kill(pid, SIGKILL);
		status = finish(pid);
		/* A run that ended before the kill must have succeeded. */
		if (!WIFSIGNALED(status)) {
			char *out = output(tag, "out");

			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
				  "%s: status %#x", tag, status);
			cr_assert(strstr(out, "bit for bit"), "%s", out);
			free(out);
		}
		if (files_below(swap_dir()))
			stale++;
	}
	/* Whatever the last kill left is reclaimed by the next run, and a
	 * complete run leaves no file behind. */
	complete_run("last");
	cr_assert_eq(files_below(swap_dir()), 0,
		     "files left in %s after a complete run", swap_dir());
	cr_log_info("crash: %u of %u kills left a stale swap set; each was "
		    "reclaimed by the next run",
		    stale, runs);
}

/* Whether the file at @path holds exactly @text. */
static bool holds(const char *path, const char *text)
{
	char buf[64] = "";
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return !strcmp(buf, text);
}

Test(crash, a_second_run_in_a_live_swap_set_is_refused_naming_the_holder)
{
	pid_t holder = start("holder", 60000);
	char lock[4096], want[64], *err;
	int status;

	alarm(120); /* a hang fails the test (no .timeout: its runner
		    * leaks under LeakSanitizer when it fires) */
	/* The holder owns its swap directory once its pid is in the lock. */
	snprintf(lock, sizeof(lock), "%s/nvswap/param/rank0/lock", swap_dir());
	snprintf(want, sizeof(want), "%ld\n", (long)holder);
	for (int i = 0; i < 3000 && !holds(lock, want); i++)
		usleep(10000);
	cr_assert(holds(lock, want), "%s never named %ld", lock, (long)holder);
	status = finish(start("second", 1));
	err = output("second", "err");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0,
		  "status %#x: %s", status, err);
	snprintf(want, sizeof(want), "in use by process %ld", (long)holder);
	cr_assert(strstr(err, want), "'%s' in: %s", want, err);
	free(err);
	kill(holder, SIGKILL);
	finish(holder);
	/* The holder's stale set is reclaimed by the next run. */
	complete_run("after");
	cr_assert_eq(files_below(swap_dir()), 0);
}

Test(crash, interrupted_by_sigint_it_removes_its_files_and_keeps_its_output)
{
	pid_t pid = start("sigint", 60000);
	char *out = NULL, *err;
	int status;

	alarm(120); /* a hang fails the test */
	/* A step printed into a file (not a terminal) while the run lives:
	 * line-buffered, not held until exit. */
	char path[4096];
	snprintf(path, sizeof(path), "%s/sigint.out", tu_dir());
	for (int i = 0; i < 3000; i++) {
		free(out);
		out = access(path, R_OK) == 0 ? output("sigint", "out") : NULL;
		if (out && strstr(out, "step 1: loss"))
			break;
		usleep(10000);
	}
	if (!out || !strstr(out, "step 1: loss")) {
		kill(pid, SIGKILL); /* not left running with its files */
		finish(pid);
		cr_assert_fail("no step printed: %s", out ? out : "(no file)");
	}
	free(out);
	cr_assert_eq(kill(pid, SIGINT), 0);
	status = finish(pid);
	err = output("sigint", "err");
	out = output("sigint", "out");
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
		  "status %#x: %s", status, err);
	cr_assert(strstr(err, "offload_train: Interrupt at step ") &&
			  strstr(err, "its swap files are removed"),
		  "%s", err);
	cr_assert(strstr(out, "step 1: loss"), "%s", out);
	cr_assert_null(strstr(out, "verdict"), "%s", out);
	/* Nothing is left: no swap file, no lock. */
	cr_assert_eq(files_below(swap_dir()), 0);
	free(out);
	free(err);
}

/* The text of "step @step: loss X" in @out (X), or "". */
static const char *loss_of(const char *out, unsigned step)
{
	static char v[64];
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), "\nstep %u: loss ", step);
	v[0] = 0;
	p = strstr(out, key);
	if (p)
		sscanf(p + strlen(key), "%63s", v);
	return v;
}

/* Kill @pid just after its @n-th manifest commit (a rename into @dir,
 * watched by inotify) or when it ends; false if it ended first. */
static bool kill_at_commit(pid_t pid, const char *dir, unsigned n)
{
	int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), seen = 0;
	char buf[4096] __attribute__((aligned(8)));

	cr_assert_geq(fd, 0);
	cr_assert_geq(inotify_add_watch(fd, dir, IN_MOVED_TO), 0, "%s", dir);
	while ((unsigned)seen < n) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t len;

		siginfo_t si = {0};

		if (waitid(P_PID, (id_t)pid, &si,
			   WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == pid) {
			close(fd);
			return false;
		}
		if (poll(&pf, 1, 20) < 1)
			continue;
		len = read(fd, buf, sizeof(buf));
		for (char *p = buf; len > 0 && p < buf + len;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			if (ev->len && !strncmp(ev->name, "manifest.0", 10))
				seen++;
			p += sizeof(*ev) + ev->len;
		}
	}
	kill(pid, SIGKILL);
	close(fd);
	return true;
}

/* The sets' rank directories, @dirs[0] the parameters', made (0700, as
 * the library makes them) to be watched before a run starts. */
static void rank_dirs(char dirs[2][1024])
{
	snprintf(dirs[0], sizeof(dirs[0]), "%.900s/nvswap", swap_dir());
	mkdir(dirs[0], 0700);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%.900s/nvswap/%s",
			 swap_dir(), i ? "optimizer" : "param");
		mkdir(dirs[i], 0700);
		strcat(dirs[i], "/rank0");
		mkdir(dirs[i], 0700);
	}
}

Test(crash, killed_anywhere_with_checkpoints_it_resumes_bit_exact)
{
	const char *e = getenv("NVSWAP_CRASH_RUNS");
	const char *es = getenv("NVSWAP_CRASH_SEED");
	unsigned runs = e ? (unsigned)atoi(e) : 10;
	unsigned seed = es ? (unsigned)atoi(es) : (unsigned)time(NULL);
	unsigned resumed = 0, restarted = 0, at_commit = 0;
	char dirs[2][1024], want[64], *out, *err;
	bool pending = false; /* a killed run's sets wait to be resumed */
	char killed_out[8192] = "";
	double t0, span;
	int status;

	alarm(300); /* a hang fails the test (no .timeout: its runner
		    * leaks under LeakSanitizer when it fires) */
	cr_log_info("crash: %u kills with checkpoints, NVSWAP_CRASH_SEED=%u",
		    runs, seed);
	srand(seed);
	/* The uninterrupted run, scratch: its losses are the reference. */
	t0 = now();
	status = finish(start_with("whole6", 6, NULL, NULL));
	span = now() - t0;
	out = output("whole6", "out");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
			  strstr(out, "bit for bit"),
		  "status %#x: %s", status, out);
	snprintf(want, sizeof(want), "%s", loss_of(out, 6));
	cr_assert(*want, "%s", out);
	free(out);
	for (unsigned i = 0; i <= runs; i++) {
		char tag[32];
		pid_t pid;
		bool killed = i < runs;

		snprintf(tag, sizeof(tag), "ck%u", i);
		rank_dirs(dirs);
		pid = start_with(tag, 6, "--checkpoint-every=1",
				 pending ? "--resume" : NULL);
		if (killed && rand() % 2) {
			/* Just after the k-th commit of either set (the
			 * optimizer's: before the parameters' of the same
			 * step). A resumed run commits fewer than 3 times
			 * when it resumes after step 4 or later. */
			unsigned k = 1 + (unsigned)rand() % 3;
			killed = kill_at_commit(pid, dirs[rand() % 2], k);
			at_commit += killed;
		} else if (killed) {
			usleep((useconds_t)(span * 1.5e6 * rand() /
					    ((double)RAND_MAX + 1)));
			kill(pid, SIGKILL);
		}
		status = finish(pid);
		out = output(tag, "out");
		err = output(tag, "err");
		if (WIFSIGNALED(status)) {
			snprintf(killed_out, sizeof(killed_out), "%s", out);
			pending = true;
			free(out);
			free(err);
			continue;
		}
		if (pending && WIFEXITED(status) && WEXITSTATUS(status) == 1 &&
		    strstr(err, "no persistent swap set to resume")) {
			/* Only a run killed before its first commit, or
			 * while removing its complete sets, leaves nothing
			 * to resume. */
			cr_assert(!strstr(killed_out, "saved step") ||
					  strstr(killed_out, "saved step 6:"),
				  "%s: nothing to resume after: %s", tag,
				  killed_out);
			cr_assert_lt(restarted++, runs, "seed %u", seed);
			pending = false;
			i--; /* the same kill again, from scratch */
			free(out);
			free(err);
			continue;
		}
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "%s (seed %u): status %#x: %s%s", tag, seed, status,
			  out, err);
		cr_assert(strstr(out, "bit for bit"), "%s (seed %u): %s", tag,
			  seed, out);
		/* A run that trained step 6 had the same loss there. */
		if (*loss_of(out, 6))
			cr_assert_str_eq(loss_of(out, 6), want,
					 "%s (seed %u): %s", tag, seed, out);
		/* Complete: its sets are gone, and the next run starts
		 * afresh. */
		cr_assert(strstr(out, "removed the persistent swap sets"),
			  "%s: %s", tag, out);
		cr_assert_eq(files_below(swap_dir()), 0,
			     "%s (seed %u) left files", tag, seed);
		resumed += pending;
		pending = false;
		free(out);
		free(err);
	}
	cr_log_info("crash: %u kills (%u just after a commit), %u resumed, "
		    "%u before any commit (started again)",
		    runs, at_commit, resumed, restarted);
}
