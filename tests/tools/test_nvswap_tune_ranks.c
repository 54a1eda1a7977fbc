// SPDX-License-Identifier: MIT
/*
 * nvswap-tune --ranks N (seq workload), on tiny sizes: N processes run
 * every point; the report gives the aggregate, the fairness and the
 * node_queue_depth for N ranks of the chosen per-rank queue depth, the
 * written config holds it, and no test file is left; a bad N (and N > 1
 * with the swap workload) is refused naming the option; a parent
 * stopped by Ctrl-C or killed leaves no rank running and no rank's file;
 * a rank killed mid-run is named, and the run ends cleanly with 1.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <nvswap/nvswap.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tuneutil.h"

extern char **environ;

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nvswap_tune_ranks, .fini = fini);

Test(nvswap_tune_ranks, two_ranks_report_aggregate_fairness_and_node_depth)
{
	struct tu_out o;
	unsigned qd = 0, node = 0, n = 0, per = 0;
	const char *line;

	o = tt_tune(NULL,
		    "--nvme-path %s --sweep-config %s --io-size 2M --ranks 2 "
		    "--quick",
		    tu_dir(), tt_small_sweep());
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "--ranks 2: every point run by 2 processes"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "fairness (max/min rank)"), "%s", o.out);
	line = strstr(o.out, "2 ranks at once: aggregate ");
	cr_assert_not_null(line, "%s", o.out);
	cr_assert(strstr(line, "fairness read "), "%s", line);
	line = strstr(o.out, "each rank: queue_depth ");
	cr_assert_not_null(line, "%s", o.out);
	cr_assert_eq(sscanf(line,
			    "each rank: queue_depth %u; the node: "
			    "nvswap.node_queue_depth %u (= %u x %u",
			    &qd, &node, &n, &per),
		     4, "%s", line);
	cr_assert_eq(n, 2);
	cr_assert_eq(per, qd);
	cr_assert_eq(node, 2 * qd);
	cr_assert(strstr(o.out, "\"node_queue_depth\":"), "%s", o.out);
	tu_out_free(&o);
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune_ranks, the_json_and_the_written_config_hold_the_node_depth)
{
	const char *out = tt_keep("ranks.json");
	struct nvs_config *cfg;
	struct nvs_nvswap_config nv;
	json_t *r, *best, *pts, *p, *snip;
	size_t i;
	unsigned fair = 0;

	r = tt_tune_json("--nvme-path %s --sweep-config %s --io-size 2M "
			 "--ranks 3 --quick --json --write-config %s",
			 tu_dir(), tt_small_sweep(), out);
	cr_assert_eq(tt_int(r, "ranks"), 3);
	best = json_object_get(json_object_get(r, "best"), "combined");
	cr_assert_not_null(best);
	snip = json_object_get(json_object_get(r, "config"), "nvswap");
	cr_assert_eq(tt_int(snip, "node_queue_depth"),
		     3 * tt_int(best, "queue_depth"));
	/* Every op of the final round has a fairness per direction: the
	 * fastest rank's GB/s over the slowest's, so at least 1. */
	pts = json_object_get(r, "results");
	json_array_foreach(pts, i, p)
	{
		json_t *f = json_object_get(json_object_get(p, "final"),
					    "fairness");
		if (!f)
			continue;
		cr_assert_geq(json_real_value(json_object_get(f, "read")), 1);
		cr_assert_geq(json_real_value(json_object_get(f, "write")), 1);
		fair++;
	}
	cr_assert_geq(fair, 2, "the finalists and the default");
	tt_config_is(out, best);
	cr_assert_eq(nvs_config_load(out, &cfg), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_config_nvswap(cfg, &nv), 0);
	cr_assert_eq(nv.node_queue_depth, 3 * tt_int(best, "queue_depth"));
	nvs_config_free(cfg);
	json_decref(r);
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune_ranks, a_bad_rank_count_is_refused_naming_the_option)
{
	tt_refused(tt_tune(NULL, "--nvme-path %s --ranks 0", tu_dir()), 2,
		   "--ranks: '0' is not a number of ranks from 1 to 64");
	tt_refused(tt_tune(NULL, "--nvme-path %s --ranks 65", tu_dir()), 2,
		   "--ranks: '65' is not a number of ranks from 1 to 64");
	tt_refused(tt_tune(NULL,
			   "--nvme-path %s --workload swap --layers 2 "
			   "--tensor-size 1M --ranks 2",
			   tu_dir()),
		   2, "--ranks 2: only the sequential sweep");
	tt_no_leftovers(tu_dir());
}

Test(nvswap_tune_ranks, ctrl_c_stops_every_rank_and_removes_their_files)
{
	char a0[] = "nvswap-tune", a1[] = "--nvme-path", a2[4096],
	     a3[] = "--io-size", a4[] = "32M", a5[] = "--loops", a6[] = "5",
	     a7[] = "--json", a8[] = "--ranks", a9[] = "3";
	char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, NULL};

	snprintf(a2, sizeof(a2), "%s", tu_dir());
	tt_interrupt(argv, ".r2.tmp");
	tt_no_leftovers(tu_dir());
}

/* Up to @max children of process @pid (its main thread's
 * /proc/PID/task/PID/children) into @out; how many there were. */
static unsigned kids_of(pid_t pid, pid_t *out, unsigned max)
{
	char path[64];
	unsigned n = 0;
	long k;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid,
		 (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fscanf(f, "%ld", &k) == 1) {
		if (n < max)
			out[n] = (pid_t)k;
		n++;
	}
	fclose(f);
	return n;
}

/* SIGKILL leaves the parent no handler: the ranks end by the death
 * signal they asked the kernel for, and remove their own files. This
 * test process adopts them (a subreaper) to see them end. The ranks
 * loop far longer than the test waits (100 loops, the most): with 5,
 * rank 1 (started first) sometimes finished in the 300 ms after rank
 * 2's file showed, was reaped by the parent, and only one rank was left
 * to adopt (fresh CI, ASan, 86afc37). */
Test(nvswap_tune_ranks, a_killed_parent_leaves_no_rank_running)
{
	const char *bin = getenv("NVSWAP_TUNE");
	char dir[4096],
		*argv[] = {"nvswap-tune", "--nvme-path", dir,	"--io-size",
			   "32M",	  "--loops",	 "100", "--json",
			   "--ranks",	  "3",		 NULL};
	struct timespec ms = {0, 10 * 1000 * 1000};
	posix_spawn_file_actions_t fa;
	unsigned others = 0, nranks;
	int status, i;
	pid_t pid, w, ranks[2] = {0, 0};

	snprintf(dir, sizeof(dir), "%s", tu_dir());
	cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null",
					 O_WRONLY, 0);
	cr_assert_eq(posix_spawn(&pid, bin, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	for (i = 0; i < 1000 && !tt_holds(tu_dir(), ".r2.tmp"); i++)
		nanosleep(&ms, NULL);
	cr_assert(tt_holds(tu_dir(), ".r2.tmp"), "rank 2 made its file");
	nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
	/* Its ranks, by pid: the parent's children now. Under ASan this
	 * subreaper also adopted processes named nvswap-tune made after the
	 * ranks, ended by SIGKILL or SIGTERM (most likely LeakSanitizer's
	 * exit check of a process the kill caught): reaped, not counted. */
	nranks = kids_of(pid, ranks, 2);
	cr_assert_eq(nranks, 2, "the parent has its 2 ranks (%u)", nranks);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* Its two ranks, now ours: each ends (within 10 s) by SIGTERM. */
	for (i = 0; i < 1000; i++) {
		w = waitpid(-1, &status, WNOHANG);
		if (w < 0 && errno == ECHILD)
			break;
		cr_assert_geq(w, 0, "%s", strerror(errno));
		if (w == 0) {
			nanosleep(&ms, NULL);
			continue;
		}
		if (w != ranks[0] && w != ranks[1])
			continue; /* not a rank (see above): reaped */
		/*
		 * The death signal, SIGTERM, as a rule. A rank that wrote
		 * to its dead parent's pipe first ends with exit 1 (seen on
		 * the base of issue 34 too); one waiting for its next point
		 * reads EOF from that pipe and ends with exit 0, its files
		 * removed (tune_ranks.c's serve()), when that comes before
		 * the signal (under ASan about once in 16 runs); and under
		 * ASan one ended by SIGKILL about once in six runs, cause
		 * not found (issue 34 note). What the tool promises is that
		 * no rank outlives the parent and no file stays: checked
		 * below.
		 */
		cr_assert((WIFSIGNALED(status) &&
			   (WTERMSIG(status) == SIGTERM ||
			    WTERMSIG(status) == SIGKILL)) ||
				  (WIFEXITED(status) &&
				   (WEXITSTATUS(status) == 1 ||
				    WEXITSTATUS(status) == 0)),
			  "rank pid %d: status %#x", (int)w, status);
		others++;
	}
	cr_assert_eq(others, 2, "both ranks ended (%u seen ending)", others);
	cr_assert(!tt_holds(tu_dir(), ".r1.tmp") &&
			  !tt_holds(tu_dir(), ".r2.tmp"),
		  "the ranks removed their files");
}

/* A rank that dies mid-run: the parent names it and how it ended, ends
 * the other ranks, removes every rank's files and exits 1. */
Test(nvswap_tune_ranks, a_killed_rank_is_named_and_the_others_end)
{
	const char *bin = getenv("NVSWAP_TUNE"), *err = tt_keep("tune.err");
	char dir[4096], path[64], kids[256] = "", want[96], *said;
	char *argv[] = {"nvswap-tune", "--nvme-path", dir, "--io-size",
			"32M",	       "--loops",     "5", "--json",
			"--ranks",     "3",	      NULL};
	struct timespec ms = {0, 10 * 1000 * 1000};
	posix_spawn_file_actions_t fa;
	long r1 = 0, r2 = 0;
	int status, i;
	FILE *f;
	pid_t pid;

	snprintf(dir, sizeof(dir), "%s", tu_dir());
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err,
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(posix_spawn(&pid, bin, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	for (i = 0; i < 1000 && !tt_holds(tu_dir(), ".r2.tmp"); i++)
		nanosleep(&ms, NULL);
	cr_assert(tt_holds(tu_dir(), ".r2.tmp"), "rank 2 made its file");
	nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid,
		 (int)pid);
	f = fopen(path, "r");
	if (!f) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_skip_test("%s: %s (a kernel without "
			     "CONFIG_PROC_CHILDREN)",
			     path, strerror(errno));
	}
	cr_assert_not_null(fgets(kids, sizeof(kids), f));
	fclose(f);
	cr_assert_eq(sscanf(kids, "%ld %ld", &r1, &r2), 2, "%s", kids);
	cr_assert_eq(kill((pid_t)r1, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %#x",
		  status);
	said = tt_read_text(err);
	/* (which rank it was depends on the order /proc lists them) */
	snprintf(want, sizeof(want),
		 " (pid %ld) was killed by signal 9 (Killed)", r1);
	cr_assert(strstr(said, want), "'%s' in: %s", want, said);
	free(said);
	cr_assert_eq(unlink(err), 0);
	/* rank 2 was the parent's to reap: gone, not a zombie */
	cr_assert_eq(kill((pid_t)r2, 0), -1);
	cr_assert_eq(errno, ESRCH);
	tt_no_leftovers(tu_dir());
}
