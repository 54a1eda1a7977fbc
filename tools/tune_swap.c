// SPDX-License-Identifier: MIT
/*
 * nvswap-tune --workload swap: the job (layers, the pool buffer, the
 * pinned budget), the candidates (pool shapes, aio settings), the layer
 * walk timed through the parameter swapper of the public API, and the
 * three stages that pick buffer_count, lookahead and the aio keys
 * together. The output is in tune_swap_out.c.
 */
#include "tune_swap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const stage_name[NSTAGES] = {"pool", "aio", "final"};

struct swap_job J;
struct swap_point **SP;
unsigned nsp;

/* The swapper being timed, the stamps its layers carry and the walk's
 * order: globals, so that the cleanup on any exit finds them. */
static struct nvs_swapper *cur_sw;
static struct nvs_param_swapper *cur_ps;
static uint64_t *stamp;
static unsigned *order;
static volatile sig_atomic_t stop_sig;
/* Each stage's points, and the aio settings of the space: held for the
 * cleanup. */
static struct swap_point **sets[NSTAGES];
static struct setting *aios;

#define MAXBUFS 64 /* the largest buffer_count tried */

void tune_swap_cleanup(void)
{
	for (int k = 0; k < NSTAGES; k++) {
		free(sets[k]);
		sets[k] = NULL;
	}
	free(aios);
	aios = NULL;
	nvs_param_swapper_destroy(cur_ps);
	nvs_swapper_destroy(cur_sw);
	cur_ps = NULL;
	cur_sw = NULL;
	for (unsigned i = 0; i < nsp; i++) {
		free(SP[i]->skip);
		free(SP[i]);
	}
	free(SP);
	SP = NULL;
	nsp = 0;
	free(stamp);
	free(order);
	stamp = NULL;
	order = NULL;
}

/* ------------------------------------------------------------ points */

static bool same(const struct setting *a, const struct setting *b)
{
	return a->be == b->be && a->bs == b->bs && a->qd == b->qd &&
	       a->par == b->par && a->ov == b->ov && a->ss == b->ss;
}

static struct swap_point *add_point(unsigned bufs, unsigned look,
				    const struct setting *s)
{
	struct swap_point **grown, *p;

	for (unsigned i = 0; i < nsp; i++)
		if (SP[i]->bufs == bufs && SP[i]->look == look &&
		    same(&SP[i]->s, s))
			return SP[i];
	grown = realloc(SP, (nsp + 1) * sizeof(*SP));
	if (!grown)
		tool_die(1, "out of memory");
	SP = grown;
	p = calloc(1, sizeof(*p));
	if (!p)
		tool_die(1, "out of memory");
	SP[nsp++] = p;
	p->s = *s;
	p->bufs = bufs;
	p->look = look;
	p->fits = (uint64_t)bufs * J.buf <= J.budget;
	return p;
}

/* Median seconds per step in @stage; -1 when not measured. */
double tune_swap_score(const struct swap_point *p, int stage)
{
	return p->skip || !p->st[stage].n ? -1 : p->st[stage].med;
}

static int sort_stage;

/* Fastest first; unmeasured last. */
static int by_time(const void *x, const void *y)
{
	double a = tune_swap_score(*(struct swap_point *const *)x, sort_stage);
	double b = tune_swap_score(*(struct swap_point *const *)y, sort_stage);

	if (a < 0 || b < 0)
		return (a < 0) - (b < 0);
	return (a > b) - (a < b);
}

static void sort_set(struct swap_point **set, unsigned n, int stage)
{
	sort_stage = stage;
	qsort(set, n, sizeof(*set), by_time);
}

/* "8 buffers, lookahead 6, io_uring 1M qd 32 par 2 overlap
 * batch-submit" */
const char *tune_swap_str(const struct swap_point *p, char *buf, size_t len)
{
	char s[96];

	snprintf(buf, len, "%u buffers, lookahead %u, %s", p->bufs, p->look,
		 tune_setting_str(&p->s, s, sizeof(s)));
	return buf;
}

/* ------------------------------------------------------------- set-up */

/* The config's offload_param: the budget and the base pool. */
static void job_from_config(void)
{
	struct nvs_offload_config off;
	struct nvs_nvswap_config nv;
	struct nvs_aio_opts o;
	char a[32];

	if (nvs_config_offload(ucfg, NVS_OFFLOAD_PARAM, &off) < 0 ||
	    nvs_config_nvswap(ucfg, &nv) < 0 ||
	    nvs_config_aio_opts(ucfg, &o) < 0)
		tool_die(1, "config: %s", tool_last_error());
	/* (nvs_config_swapper_opts() refuses more than 65536) */
	J.base_bufs =
		off.buffer_count > 65536 ? 65536 : (unsigned)off.buffer_count;
	J.base_look = nv.lookahead;
	J.base = (struct setting){
		.be = o.backend == NVS_BACKEND_AUTO ? auto_be : o.backend,
		.bs = o.block_size,
		.qd = o.queue_depth,
		.par = o.intra_op_parallelism,
		.ov = o.overlap_events,
		.ss = o.single_submit};
	if (A.max_pinned) {
		J.budget = A.max_pinned;
		snprintf(J.budget_from, sizeof(J.budget_from),
			 "--max-pinned %s",
			 tool_size_str(A.max_pinned, a, sizeof(a)));
		return;
	}
	J.budget = off.buffer_size > UINT64_MAX / 2 / off.buffer_count
			   ? UINT64_MAX
			   : off.buffer_count * off.buffer_size * 2;
	snprintf(J.budget_from, sizeof(J.budget_from),
		 "offload_param.buffer_count %llu x buffer_size %llu x 2 "
		 "bytes, %s",
		 (unsigned long long)off.buffer_count,
		 (unsigned long long)off.buffer_size,
		 A.config ? A.config : "DeepSpeed's defaults");
}

/* Whether the file the config is written from swaps parameters to NVMe
 * already (else the keys written add device and nvme_path). */
static bool base_swaps_to_nvme(void)
{
	struct nvs_offload_config off;
	struct nvs_config *c = NULL;
	bool yes;

	if (A.config)
		return nvs_config_offload(ucfg, NVS_OFFLOAD_PARAM, &off) == 0 &&
		       off.device == NVS_DEVICE_NVME;
	if (!A.write_config || access(A.write_config, F_OK) < 0 ||
	    nvs_config_load(A.write_config, &c) < 0)
		return false; /* a broken file is refused by the check */
	yes = nvs_config_offload(c, NVS_OFFLOAD_PARAM, &off) == 0 &&
	      off.device == NVS_DEVICE_NVME;
	nvs_config_free(c);
	return yes;
}

/* The pool shapes: buffer_count from 2 up to what the budget (and the
 * layers: more than layers + 1 buffers cannot all be used) allow, each
 * with lookahead 1, about half, buffers - 2 (bench/overlap.c's) and
 * buffers - 1 (every free buffer). A pool buffer holds one layer
 * whatever its size, so buffer_size is the layer's: larger would only
 * cost pinned memory that could be another buffer. */
static void add_shapes(void)
{
	static const unsigned counts[] = {2,  3,  4,  5,  6,  8, 10,
					  12, 16, 24, 32, 48, 64};
	unsigned b, last = 0;

	for (unsigned i = 0; i <= sizeof(counts) / sizeof(counts[0]); i++) {
		b = i < sizeof(counts) / sizeof(counts[0]) ? counts[i]
							   : J.maxbufs;
		if (b > J.maxbufs || b <= last)
			continue;
		last = b;
		unsigned looks[] = {1, b / 2, b - 2, b - 1};
		for (unsigned k = 0; k < 4; k++) {
			unsigned l = looks[k];
			if (l < 1 || l > b - 1 || l > A.layers - 1)
				continue;
			add_point(b, l, &J.base)->in[ST_POOL] = true;
		}
	}
}

/* Block sizes above a layer would only repeat the layer's size: dropped
 * (the smallest stays when every one is). */
static void trim_block_sizes(void)
{
	unsigned n = 0, min = 0;

	for (unsigned i = 0; i < S.nbs; i++) {
		if (S.bs[i] < S.bs[min])
			min = i;
	}
	uint32_t keep = S.bs[min];
	for (unsigned i = 0; i < S.nbs; i++)
		if (S.bs[i] <= J.buf)
			S.bs[n++] = S.bs[i];
	if (!n)
		S.bs[n++] = keep;
	S.nbs = n;
}

void tune_swap_setup(void)
{
	char what[96], a[32], b[32], c[32], d[32];
	uint64_t need;

	if (A.tensor_size > SIZE_MAX / 4 / A.layers)
		tool_die(2, "--layers %u x --tensor-size %zu: too large",
			 A.layers, A.tensor_size);
	J.elems = ((uint64_t)A.tensor_size + 1) / 2;
	J.buf = (size_t)(J.elems * 2);
	job_from_config();
	J.base_nvme = base_swaps_to_nvme();
	J.maxbufs = (unsigned)(J.budget / J.buf < MAXBUFS ? J.budget / J.buf
							  : MAXBUFS);
	if (J.maxbufs > A.layers + 1)
		J.maxbufs = A.layers + 1;
	if (J.budget / J.buf < 2)
		tool_die(2,
			 "--tensor-size %s: no pool fits: the walk needs at "
			 "least 2 buffers of a layer (%s), and the pinned "
			 "memory allowed is %s (%s); raise it with "
			 "--max-pinned (at least %s) or give smaller layers",
			 tool_size_str(A.tensor_size, a, sizeof(a)),
			 tool_human(J.buf, b, sizeof(b)),
			 tool_human(J.budget, c, sizeof(c)), J.budget_from,
			 tool_size_str(2 * J.buf, d, sizeof(d)));
	/* The swap files: every layer, spread over the paths (a layer
	 * larger than a stripe is striped, a smaller one goes whole to the
	 * least used path), and one layer of slack. */
	need = (uint64_t)A.layers * J.buf / A.npaths + J.buf;
	snprintf(what, sizeof(what), "%u layers of %s", A.layers,
		 tool_size_str(A.tensor_size, a, sizeof(a)));
	for (unsigned i = 0; i < A.npaths; i++) {
		tune_check_path(real[i], need, what);
		tune_check_direct(i);
	}
	stamp = calloc(A.layers, sizeof(*stamp));
	order = malloc(A.layers * sizeof(*order));
	if (!stamp || !order)
		tool_die(1, "out of memory");
	for (unsigned l = 0; l < A.layers; l++)
		order[l] = l;
	trim_block_sizes();
	add_point(J.base_bufs, J.base_look, &J.base)->is_base = true;
	if (A.write_config) {
		struct swap_point base = {
			.s = J.base, .bufs = J.base_bufs, .look = J.base_look};
		tune_check_write_config(tune_swap_snippet(&base), J.base.be);
	}
}

/* ------------------------------------------------------------ the walk */

/* Ctrl-C during the walk: the swapper is destroyed (its files removed)
 * by the cleanup, then the signal ends the process as it would have. */
static void on_swap_signal(int sig)
{
	stop_sig = sig;
}

static void stop_now(void)
{
	static const char msg[] = "\nnvswap-tune: interrupted; temporary "
				  "files removed\n";
	int sig = stop_sig;

	if (tool_cleanup)
		tool_cleanup();
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing left to tell */
	}
	signal(sig, SIG_DFL);
	raise(sig);
	exit(1); /* not reached */
}

/* One visit of layer @l: acquire it (its read, then read-ahead along the
 * walk), check the stamp it was last written with, bump it, release it
 * dirty and evict it (its write-back). */
static void visit(const struct swap_point *p, unsigned l)
{
	char s[160];
	void *ptr;
	uint64_t v;
	int ret;

	if (stop_sig)
		stop_now();
	ret = nvs_param_acquire_layer(cur_ps, l, &ptr);
	if (ret == 0) {
		memcpy(&v, ptr, sizeof(v));
		if (v != stamp[l])
			tool_die(1,
				 "layer %u read back as written %llu times, "
				 "not %llu, with %s: a bug in nvswap; please "
				 "report it with this line",
				 l, (unsigned long long)v,
				 (unsigned long long)stamp[l],
				 tune_swap_str(p, s, sizeof(s)));
		stamp[l] = ++v;
		memcpy(ptr, &v, sizeof(v));
		ret = nvs_param_release_layer(cur_ps, l, true);
	}
	if (ret == 0)
		ret = nvs_param_evict_layer(cur_ps, l);
	if (ret < 0)
		tool_die(1, "layer %u with %s: %s", l,
			 tune_swap_str(p, s, sizeof(s)), tool_last_error());
}

/* A training step's walk: forward up the layers, then (@both) backward
 * down again, and every write-back drained. Seconds. */
static double step(const struct swap_point *p, bool both)
{
	double t0 = tool_now();
	char s[160];

	for (unsigned l = 0; l < A.layers; l++)
		visit(p, l);
	for (unsigned l = A.layers; both && l-- > 0;)
		visit(p, l);
	if (nvs_swapper_wait_all(cur_sw) < 0)
		tool_die(1, "write-back with %s: %s",
			 tune_swap_str(p, s, sizeof(s)), tool_last_error());
	return tool_now() - t0;
}

static void swapper_opts(const struct swap_point *p, struct nvs_swapper_opts *o)
{
	nvs_swapper_opts_init(o);
	/* The config's swapper options (pin_memory, stripe_size,
	 * checksum...) when it swaps parameters to NVMe; the pool, paths and
	 * aio settings are the point's. */
	if (A.config &&
	    nvs_config_swapper_opts(ucfg, NVS_OFFLOAD_PARAM, 0, o) < 0)
		nvs_swapper_opts_init(o);
	o->npaths = A.npaths;
	for (unsigned i = 0; i < A.npaths; i++)
		o->nvme_paths[i] = real[i];
	o->name = "nvswap-tune";
	o->buffer_size = J.buf;
	o->buffer_count = p->bufs;
	if (A.unpinned)
		o->pin_memory = false;
	o->aio.backend = p->s.be;
	o->aio.block_size = p->s.bs;
	o->aio.queue_depth = p->s.qd;
	o->aio.intra_op_parallelism = p->s.par;
	o->aio.overlap_events = p->s.ov;
	o->aio.single_submit = p->s.ss;
}

static void teardown(const struct swap_point *p)
{
	char s[160];
	int r1 = nvs_param_swapper_destroy(cur_ps);

	cur_ps = NULL;
	int r2 = nvs_swapper_destroy(cur_sw);
	cur_sw = NULL;
	if (r1 < 0 || r2 < 0)
		tool_die(1, "closing the swapper of %s: %s",
			 tune_swap_str(p, s, sizeof(s)), tool_last_error());
}

/* A fresh swapper with @p's settings, every layer written once (so the
 * reads are real), then @steps timed steps, each a sample of @stage. */
static void measure(struct swap_point *p, int stage, unsigned steps)
{
	struct nvs_param_swapper_opts po;
	struct nvs_swapper_opts o;
	double per = (double)A.layers * J.buf;
	char s[160];
	int ret;

	if (p->skip)
		return;
	swapper_opts(p, &o);
	ret = nvs_swapper_create(&o, &cur_sw);
	if (ret < 0) {
		/* The pool (memlock) or a kernel limit: this point cannot
		 * run here; the others go on. */
		p->skip = tune_skip_reason();
		return;
	}
	nvs_param_swapper_opts_init(&po);
	po.lookahead = p->look;
	ret = nvs_param_swapper_create(cur_sw, &po, &cur_ps);
	for (unsigned l = 0; ret == 0 && l < A.layers; l++)
		ret = nvs_param_add_layer(cur_ps, l, 1, &A.tensor_size, NULL);
	if (ret == 0)
		ret = nvs_param_set_walk(cur_ps, A.layers, order);
	if (ret < 0)
		tool_die(1, "setting up %s: %s", tune_swap_str(p, s, sizeof(s)),
			 tool_last_error());
	memset(stamp, 0, A.layers * sizeof(*stamp));
	step(p, false);
	prog.done += per;
	for (unsigned k = 0; k < steps; k++) {
		double t = step(p, true);
		if (p->nsamp[stage] < MAXLOOPS)
			p->samp[stage][p->nsamp[stage]++] = t;
		prog.done += 4 * per;
		tune_progress(false);
	}
	teardown(p);
}

/* ------------------------------------------------------------- stages */

static void summarize(struct swap_point **set, unsigned n, int stage)
{
	for (unsigned i = 0; i < n; i++)
		set[i]->st[stage] = tune_summarize(set[i]->samp[stage],
						   set[i]->nsamp[stage]);
}

/* Bytes a stage of @n points moves, for the progress bar. */
static double stage_bytes(unsigned n, int stage)
{
	double per = (double)A.layers * J.buf;
	unsigned steps = stage == ST_FINAL ? A.loops : A.quick ? 2 : A.loops;

	return n * (per + 4 * per * steps);
}

/* Every point of @set in @stage, sorted fastest first on return. The
 * final stage takes one step of each point in turn, @loops times, so
 * that drift hits every point alike; the others take a point's steps
 * back to back, or (--quick) one step each, then one more for the
 * faster half, and so on down to FINALISTS. */
static void run_stage(struct swap_point **set, unsigned n, int stage)
{
	unsigned live = n;

	prog.what = stage_name[stage];
	prog.npts = n;
	for (unsigned i = 0; i < n; i++) {
		set[i]->in[stage] = true;
		set[i]->nsamp[stage] = 0;
	}
	tune_progress(true);
	if (stage == ST_FINAL || !A.quick) {
		unsigned rounds = stage == ST_FINAL ? A.loops : 1;
		for (unsigned r = 0; r < rounds; r++) {
			tune_shuffle(set, n, sizeof(*set));
			for (unsigned i = 0; i < n; i++) {
				prog.pts = i + 1;
				measure(set[i], stage,
					stage == ST_FINAL ? 1 : A.loops);
			}
		}
	} else {
		for (;;) {
			tune_shuffle(set, live, sizeof(*set));
			for (unsigned i = 0; i < live; i++) {
				prog.pts = i + 1;
				measure(set[i], stage, 1);
			}
			summarize(set, n, stage);
			sort_set(set, n, stage);
			if (live <= FINALISTS)
				break;
			live = (live + 1) / 2;
			if (live < FINALISTS)
				live = FINALISTS;
		}
	}
	summarize(set, n, stage);
	sort_set(set, n, stage);
	tune_progress(true);
}

/* The points of @set that may go on: measured, and within the budget. */
static unsigned usable(struct swap_point **set, unsigned n, int stage)
{
	unsigned m = 0;

	for (unsigned i = 0; i < n; i++)
		if (tune_swap_score(set[i], stage) > 0 && set[i]->fits)
			set[m++] = set[i];
	return m;
}

static struct swap_point **new_set(unsigned n)
{
	struct swap_point **set = calloc(n ? n : 1, sizeof(*set));

	if (!set)
		tool_die(1, "out of memory");
	return set;
}

/* @p into @set of *@n unless it is there. */
static void add_once(struct swap_point **set, unsigned *n, struct swap_point *p)
{
	for (unsigned i = 0; i < *n; i++)
		if (set[i] == p)
			return;
	set[(*n)++] = p;
}

/* run_stage(), timed and said; fatal when no point could run. */
static void timed_stage(struct swap_point **set, unsigned n, int stage)
{
	double t0 = tool_now();

	run_stage(set, n, stage);
	J.secs[stage] = tool_now() - t0;
	if (stage != ST_FINAL && tune_swap_score(set[0], stage) < 0)
		tool_die(1, "no %s point could run here: %s", stage_name[stage],
			 set[0]->skip ? set[0]->skip : "nothing measured");
	tune_progress_end();
	if (stage != ST_FINAL) /* tune_swap_report() shows that one */
		tune_swap_print_stage(set, n, stage);
}

int tune_swap_main(void)
{
	struct swap_point **pool, **aio, **fin, *base = NULL, *best = NULL;
	unsigned npool = 0, naio = 0, nfin = 0, nset;
	int ret;

	signal(SIGINT, on_swap_signal);
	signal(SIGTERM, on_swap_signal);
	signal(SIGHUP, on_swap_signal);
	for (unsigned i = 0; i < nsp; i++)
		if (SP[i]->is_base)
			base = SP[i];
	add_shapes();
	pool = sets[ST_POOL] = new_set(nsp);
	for (unsigned i = 0; i < nsp; i++)
		if (SP[i]->in[ST_POOL])
			pool[npool++] = SP[i];
	aios = tune_space_settings(&nset);
	tune_swap_print_intro(npool, nset);
	prog.t0 = tool_now();
	prog.total = stage_bytes(npool, ST_POOL) + stage_bytes(nset, ST_AIO) +
		     stage_bytes(FINALISTS * FINALISTS + 1, ST_FINAL);

	/* 1: the pool shapes, with the config's aio settings. */
	timed_stage(pool, npool, ST_POOL);

	/* 2: the aio settings with the best shape, which is timed again
	 * alongside with the config's. */
	aio = sets[ST_AIO] = new_set(nset + 1);
	for (unsigned i = 0; i < nset; i++)
		add_once(aio, &naio,
			 add_point(pool[0]->bufs, pool[0]->look, &aios[i]));
	add_once(aio, &naio, add_point(pool[0]->bufs, pool[0]->look, &J.base));
	timed_stage(aio, naio, ST_AIO);

	/* 3: the best shapes x the best aio settings, and the config's
	 * own, interleaved. */
	npool = usable(pool, npool, ST_POOL);
	naio = usable(aio, naio, ST_AIO);
	fin = sets[ST_FINAL] = new_set(FINALISTS * FINALISTS + 1);
	for (unsigned i = 0; i < npool && i < FINALISTS; i++)
		for (unsigned k = 0; k < naio && k < FINALISTS; k++)
			add_once(fin, &nfin,
				 add_point(pool[i]->bufs, pool[i]->look,
					   &aio[k]->s));
	if (base && !base->skip)
		add_once(fin, &nfin, base);
	prog.total = prog.done + stage_bytes(nfin, ST_FINAL);
	timed_stage(fin, nfin, ST_FINAL);
	for (unsigned i = 0; i < nfin && !best; i++)
		if (fin[i]->fits && tune_swap_score(fin[i], ST_FINAL) > 0)
			best = fin[i];
	if (!best)
		tool_die(1, "the final round measured nothing");
	ret = tune_swap_report(fin, nfin, best, base);
	tune_swap_cleanup();
	nvs_config_free(ucfg);
	ucfg = NULL;
	return ret;
}
