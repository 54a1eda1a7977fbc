// SPDX-License-Identifier: MIT
/*
 * nvswap-tune --ranks N (seq workload): the N-1 child processes that run
 * every point alongside this one, each with its own test files, buffers
 * and aio handles, and the pipes that start their ops together and bring
 * their times back. The measuring itself is in tune_measure.c.
 *
 * Children never outlive the parent: each asks the kernel for SIGTERM
 * when the parent dies (its handler removes the child's files), a child
 * whose parent is already gone exits, and the parent kills and reaps
 * them on any exit (signal handler and tool_die() included).
 */
#include "tune.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

unsigned tune_rank;
long tune_base_pid;

/* The parent's view of child r (1..A.ranks-1); the signal handler only
 * reads kids[] and nkids. */
static pid_t kids[MAXRANKS];
static int to_kid[MAXRANKS], from_kid[MAXRANKS];
static volatile sig_atomic_t nkids;
/* A child's two pipe ends. */
static int to_parent = -1, from_parent = -1;

/* The whole of @len bytes, or false at EOF or on an error. */
static bool get_all(int fd, void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* Messages are under PIPE_BUF bytes: one write moves them whole. */
static bool put_all(int fd, const void *buf, size_t len)
{
	ssize_t n;

	do
		n = write(fd, buf, len);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)len;
}

static _Noreturn void serve(void)
{
	struct rank_cmd c;

	tune_prepare();
	for (;;) {
		/* EOF: the parent is gone (its death signal is on its
		 * way); nothing is left to do. */
		if (!get_all(from_parent, &c, sizeof(c)) || c.kind == RC_QUIT)
			break;
		tune_rank_measure(&c);
	}
	for (unsigned i = 0; i < A.npaths; i++)
		close(fds[i]);
	/* its own files; no leak check of what the parent built */
	tool_cleanup();
	_exit(0);
}

void tune_ranks_start(void)
{
	pid_t parent = getpid();

	tune_base_pid = (long)parent;
	if (A.ranks < 2)
		return;
	/* a dead child is an EPIPE on its pipe, not a signal */
	signal(SIGPIPE, SIG_IGN);
	fflush(stdout);
	fflush(stderr);
	for (unsigned r = 1; r < A.ranks; r++) {
		int down[2], up[2];
		pid_t pid;

		if (pipe2(down, O_CLOEXEC) < 0)
			tool_die(1, "pipe: %s", strerror(errno));
		if (pipe2(up, O_CLOEXEC) < 0) {
			close(down[0]);
			close(down[1]);
			tool_die(1, "pipe: %s", strerror(errno));
		}
		pid = fork();
		if (pid < 0) {
			int e = errno;
			close(down[0]);
			close(down[1]);
			close(up[0]);
			close(up[1]);
			tool_die(1, "starting rank %u: %s", r, strerror(e));
		}
		if (pid == 0) {
			if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 ||
			    getppid() != parent)
				_exit(1);
			for (unsigned k = 1; k < r; k++) {
				close(to_kid[k]);
				close(from_kid[k]);
			}
			nkids = 0;
			close(down[1]);
			close(up[0]);
			from_parent = down[0];
			to_parent = up[1];
			/* Ctrl-C reaches the whole process group: the
			 * parent's handler kills the ranks and removes
			 * every rank's files, and says so once. */
			signal(SIGINT, SIG_IGN);
			signal(SIGHUP, SIG_IGN);
			tune_rank = r;
			A.progress = 0;
			serve();
		}
		close(down[0]);
		close(up[1]);
		to_kid[r] = down[1];
		from_kid[r] = up[0];
		kids[r] = pid;
		nkids = (sig_atomic_t)r;
	}
	/* The children's files, removed by this process on any exit too
	 * (a killed child cannot remove its own). Registered after the
	 * last fork: a child's table holds only its own files. */
	for (unsigned r = 1; r < A.ranks; r++)
		for (unsigned i = 0; i < A.npaths; i++)
			tune_tmp_add_rank(A.paths[i], "/nvswap-tune.", ".tmp",
					  r);
}

/* Only kill() and waitpid(): async-signal-safe. Reaped before the
 * handler removes the files, so no child is left to write one. */
void tune_ranks_kill(void)
{
	for (sig_atomic_t r = 1; r <= nkids; r++)
		if (kids[r] > 0)
			kill(kids[r], SIGKILL);
	for (sig_atomic_t r = 1; r <= nkids; r++)
		if (kids[r] > 0)
			while (waitpid(kids[r], NULL, 0) < 0 && errno == EINTR)
				;
}

/* Kills (@force) or asks to quit, then reaps every child; true when
 * each ended with status 0. */
static bool reap(bool force)
{
	struct rank_cmd q = {.kind = RC_QUIT};
	bool ok = true;
	int st;

	for (sig_atomic_t r = 1; r <= nkids; r++)
		if (kids[r] > 0 &&
		    (force || !put_all(to_kid[r], &q, sizeof(q))))
			kill(kids[r], SIGKILL);
	for (sig_atomic_t r = 1; r <= nkids; r++) {
		if (kids[r] > 0) {
			while (waitpid(kids[r], &st, 0) < 0 && errno == EINTR)
				;
			ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
		}
		close(to_kid[r]);
		close(from_kid[r]);
		kids[r] = 0;
	}
	nkids = 0;
	return ok;
}

void tune_ranks_stop(void)
{
	if (nkids)
		reap(true);
}

void tune_ranks_end(void)
{
	if (nkids && !reap(false))
		tool_die(1, "a rank failed as it ended (see above)");
}

/* Rank @r's pipe broke: it ended (or is ending); says how, and dies
 * (the cleanup kills and reaps the others). */
static _Noreturn void lost(unsigned r)
{
	pid_t pid = kids[r];
	int st;

	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	kids[r] = 0; /* reaped */
	if (WIFSIGNALED(st))
		tool_die(1, "rank %u (pid %ld) was killed by signal %d (%s)", r,
			 (long)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
	tool_die(1,
		 "rank %u (pid %ld) ended with status %d (see its message "
		 "above)",
		 r, (long)pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

void tune_ranks_bcast(const struct rank_cmd *c)
{
	for (sig_atomic_t r = 1; r <= nkids; r++)
		if (!put_all(to_kid[r], c, sizeof(*c)))
			lost((unsigned)r);
}

void tune_ranks_recv(unsigned r, struct rank_msg *m)
{
	if (!get_all(from_kid[r], m, sizeof(*m)))
		lost(r);
}

void tune_rank_get(struct rank_cmd *c)
{
	if (!get_all(from_parent, c, sizeof(*c)))
		tool_die(1, "rank %u: the parent is gone", tune_rank);
}

void tune_rank_put(const struct rank_msg *m)
{
	if (!put_all(to_parent, m, sizeof(*m)))
		tool_die(1, "rank %u: the parent is gone", tune_rank);
}
