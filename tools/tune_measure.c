// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's measuring: the test files and buffers, the progress line,
 * timed reads and writes of one point (by every rank at once with
 * --ranks N), the read-back checks, and a round run over a set of points
 * in shuffled order.
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
			 "--nvme-path %s: the filesystem refuses "
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
		tool_die(1, "%s", tool_last_error());
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
					 "limit (ulimit -l), lower --io-size, "
					 "or pass --unpinned",
					 (double)A.io_size / MIB,
					 tool_last_error());
		}
		tool_pattern(wbuf[i], A.io_size, 1000 + i + 100 * tune_rank);
		fds[i] = open_direct(i, f);
		ret = nvs_aio_pwrite_fd(h, wbuf[i], A.io_size, fds[i], 0,
					false);
		if (ret < 0)
			tool_die(1, "writing the test file %s: %s", f,
				 tool_last_error());
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
				 tool_last_error());
	}
	ret = nvs_aio_wait(h);
	if (ret < 0)
		tool_die(1, "%s with %s: %s", crit_name[d],
			 tune_setting_str(&p->s, s, sizeof(s)),
			 tool_last_error());
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
			tool_die(1, "reading back: %s", tool_last_error());
	}
	if ((ret = nvs_aio_wait(checker)) < 0)
		tool_die(1, "reading back: %s", tool_last_error());
	verify(p, WR, n);
}

char *tune_skip_reason(void)
{
	char *why = strdup(tool_last_error());

	if (!why)
		tool_die(1, "out of memory");
	return why;
}

/* A handle with @p's settings, and one untimed op (workers started,
 * buffers registered); nvs_aio_create()'s error, else 0. */
static int make_handle(const struct point *p, int d, size_t n,
		       struct nvs_aio **out)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	size_t warm = (size_t)p->s.bs * p->s.par;
	int ret;

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
	*out = h;
	if (ret < 0)
		return ret;
	one_op(h, p, d, warm < n ? warm : n);
	return 0;
}

static void end_handle(struct nvs_aio *h, const struct point *p, int d)
{
	char s[96];

	if (nvs_aio_destroy(h) < 0)
		tool_die(1, "%s with %s: %s", crit_name[d],
			 tune_setting_str(&p->s, s, sizeof(s)),
			 tool_last_error());
}

/* @loops timed ops in direction @d with @p's settings, after one
 * untimed op (workers started, buffers registered). */
static void measure(struct point *p, int d, size_t n, unsigned loops)
{
	struct nvs_aio *h;

	if (p->skip)
		return;
	if (make_handle(p, d, n, &h) < 0) {
		/* A kernel limit (aio-max-nr for libaio, memlock for the
		 * rings): the point cannot run here; the sweep goes on. */
		p->skip = tune_skip_reason();
		return;
	}
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
	end_handle(h, p, d);
	if (d == WR)
		verify_written(p, n);
}

/* --ranks > 1, the parent (rank 0): every op of @p run by all ranks at
 * once, each on its own files. An op starts when every rank is ready
 * (its handle made, its warm-up op done, its buffer spoilt) and the
 * parent says go; its sample is all ranks' bytes over the window from
 * the first start to the last end, and the fastest rank's GB/s over
 * the slowest's. A handle that cannot be made on any rank skips the
 * point for all. */
static void measure_ranks(struct point *p, int d, size_t n, unsigned loops)
{
	struct rank_cmd c = {.kind = RC_MEASURE,
			     .d = d,
			     .point = (unsigned)(p - P),
			     .loops = loops,
			     .n = n};
	struct rank_msg m;
	struct nvs_aio *h = NULL;
	double bytes = (double)n * A.npaths;
	unsigned l;

	if (p->skip)
		return;
	tune_ranks_bcast(&c);
	if (make_handle(p, d, n, &h) < 0)
		p->skip = tune_skip_reason();
	for (l = 0; l < loops; l++) {
		double first, last, t0, t1, fast, slow;

		if (h && d == RD)
			spoil(n);
		for (unsigned r = 1; r < A.ranks; r++) {
			tune_ranks_recv(r, &m);
			if (!m.ok && !p->skip) {
				if (asprintf(&p->skip, "rank %u: %s", r,
					     m.err) < 0)
					tool_die(1, "out of memory");
			}
		}
		c.kind = p->skip ? RC_STOP : RC_GO;
		tune_ranks_bcast(&c);
		if (p->skip)
			break;
		t0 = tool_now();
		one_op(h, p, d, n);
		t1 = tool_now();
		if (d == RD)
			verify(p, RD, n);
		first = t0;
		last = t1;
		fast = slow = bytes / (t1 - t0);
		for (unsigned r = 1; r < A.ranks; r++) {
			double v;

			tune_ranks_recv(r, &m);
			v = bytes / (m.t1 - m.t0);
			first = m.t0 < first ? m.t0 : first;
			last = m.t1 > last ? m.t1 : last;
			fast = v > fast ? v : fast;
			slow = v < slow ? v : slow;
		}
		if (p->nsamp[d] < MAXLOOPS) {
			p->fsamp[d][p->nsamp[d]] = fast / slow;
			p->samp[d][p->nsamp[d]++] =
				bytes * A.ranks / (last - first) / GIB;
		}
		prog.done += bytes * A.ranks;
		tune_progress(false);
	}
	if (h)
		end_handle(h, p, d);
	if (d == WR && l == loops)
		verify_written(p, n);
}

/* A child's side of measure_ranks(), in the same steps. */
void tune_rank_measure(const struct rank_cmd *c)
{
	const struct point *p = &P[c->point];
	struct rank_msg m = {.ok = 1};
	struct rank_cmd go;
	struct nvs_aio *h = NULL;
	unsigned l;

	if (make_handle(p, c->d, c->n, &h) < 0) {
		m.ok = 0;
		snprintf(m.err, sizeof(m.err), "%s", tool_last_error());
	}
	for (l = 0; l < c->loops; l++) {
		if (h && c->d == RD)
			spoil(c->n);
		tune_rank_put(&m);
		tune_rank_get(&go);
		if (go.kind != RC_GO)
			break;
		m.t0 = tool_now();
		one_op(h, p, c->d, c->n);
		m.t1 = tool_now();
		if (c->d == RD)
			verify(p, RD, c->n);
		tune_rank_put(&m);
	}
	if (h)
		end_handle(h, p, c->d);
	if (c->d == WR && l == c->loops)
		verify_written(p, c->n);
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
		     (A.dir[RD] + A.dir[WR]) * A.ranks;
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
				(A.ranks > 1 ? measure_ranks : measure)(
					set[i], d, op_size(set[i], round),
					interleave ? 1 : loops);
			}
		}
		for (unsigned i = 0; i < n; i++) {
			set[i]->st[round][d] = tune_summarize(set[i]->samp[d],
							      set[i]->nsamp[d]);
			set[i]->fst[round][d] = tune_summarize(
				set[i]->fsamp[d], set[i]->nsamp[d]);
		}
	}
	tune_progress(true);
}
