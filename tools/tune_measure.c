// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's measuring: the test files and buffers, the progress line,
 * timed reads and writes of one point, the read-back checks, and a round
 * run over a set of points in shuffled order.
 */
#include "tune.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* @f on path @i, created with O_DIRECT, or a refusal that names the
 * path when its filesystem does not take O_DIRECT. */
static int open_direct(unsigned i, const char *f)
{
	int fd = open(f, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);

	if (fd < 0 && errno == EINVAL)
		tool_die(1,
			 "--nvme_path %s: the filesystem refuses "
			 "O_DIRECT, so every figure would measure the "
			 "page cache, not the disk (ramfs, or tmpfs "
			 "before Linux 6.6?); tune a path on the disk "
			 "itself",
			 A.paths[i]);
	if (fd < 0)
		tool_die(1, "%s: %s", f, strerror(errno));
	return fd;
}

/* Path @i takes O_DIRECT (the swap workload's files are the swapper's,
 * which would fall back to the page cache): tried on a file of its own,
 * removed at once. */
void tune_check_direct(unsigned i)
{
	const char *f = tune_tmp_add(A.paths[i], "/nvswap-tune.", ".probe");

	close(open_direct(i, f));
	unlink(f);
	tune_tmp_forget(f);
}

/* One file per path, written in full (the reads' data, the writes'
 * target: every point overwrites the same blocks), and synced. */
void tune_prepare(void)
{
	struct nvs_aio *h;
	int ret, err;

	ret = nvs_aio_create(NULL, &h);
	if (ret < 0)
		tool_die(1, "%s", nvs_last_error());
	checker = h;
	for (unsigned i = 0; i < A.npaths; i++) {
		const char *f =
			tune_tmp_add(A.paths[i], "/nvswap-tune.", ".tmp");

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
		fds[i] = open_direct(i, f);
		ret = nvs_aio_pwrite_fd(h, wbuf[i], A.io_size, fds[i], 0,
					false);
		if (ret < 0)
			tool_die(1, "writing the test file %s: %s", f,
				 nvs_last_error());
		if (fsync(fds[i]) < 0)
			tool_die(1, "syncing %s: %s", f, strerror(errno));
	}
}

struct progress prog;

void tune_progress(bool force)
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
				 tune_setting_str(&p->s, s, sizeof(s)),
				 nvs_last_error());
	}
	ret = nvs_aio_wait(h);
	if (ret < 0)
		tool_die(1, "%s with %s: %s", crit_name[d],
			 tune_setting_str(&p->s, s, sizeof(s)),
			 nvs_last_error());
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
			 tune_setting_str(&p->s, s, sizeof(s)), off,
			 A.paths[i]);
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

char *tune_skip_reason(void)
{
	char *why = strdup(nvs_last_error());

	if (!why)
		tool_die(1, "out of memory");
	return why;
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
		p->skip = tune_skip_reason();
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
		tune_progress(false);
	}
	ret = nvs_aio_destroy(h);
	if (ret < 0)
		tool_die(1, "%s with %s: %s", crit_name[d],
			 tune_setting_str(&p->s, s, sizeof(s)),
			 nvs_last_error());
	if (d == WR)
		verify_written(p, n);
}

struct dstat tune_summarize(const double *samp, unsigned n)
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

unsigned rnd_state;

unsigned tune_rnd(void)
{
	rnd_state = rnd_state * 1103515245u + 12345u;
	return rnd_state >> 8;
}

/* @n elements of @size bytes (at most a pointer's: the sets of
 * points), in a random order from --seed. */
void tune_shuffle(void *set, unsigned n, size_t size)
{
	unsigned char *e = set, t[sizeof(void *)];

	for (unsigned i = n; i > 1; i--) {
		unsigned j = tune_rnd() % i;
		memcpy(t, e + (i - 1) * size, size);
		memcpy(e + (i - 1) * size, e + j * size, size);
		memcpy(e + j * size, t, size);
	}
}

/* Bytes a round will move (for the progress bar's estimate). */
double tune_round_bytes(struct point **set, unsigned n, int round,
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
void tune_run_round(struct point **set, unsigned n, int round, unsigned loops)
{
	bool interleave = round == FINAL;

	prog.what = round_name[round];
	prog.pts = 0;
	prog.npts = n;
	tune_progress(true);
	for (int d = 0; d < NDIR; d++) {
		if (!A.dir[d])
			continue;
		for (unsigned i = 0; i < n; i++)
			set[i]->nsamp[d] = 0;
		for (unsigned l = 0; l < (interleave ? loops : 1); l++) {
			tune_shuffle(set, n, sizeof(*set));
			for (unsigned i = 0; i < n; i++) {
				prog.pts = i + 1;
				prog.npts = n;
				measure(set[i], d, op_size(set[i], round),
					interleave ? 1 : loops);
			}
		}
		for (unsigned i = 0; i < n; i++)
			set[i]->st[round][d] = tune_summarize(set[i]->samp[d],
							      set[i]->nsamp[d]);
	}
	tune_progress(true);
}
