// SPDX-License-Identifier: MIT
/*
 * nvswap-tune: the ds_nvme_tune of nvswap. Sweeps the aio handle's
 * settings in-process on one or more swap paths with O_DIRECT (--workload
 * seq), or the swap pool's shape and the aio settings together on the
 * parameter swapper's layer walk (--workload swap, tune_swap*.c),
 * measures the finalists again, interleaved with the default settings,
 * and prints (or merges into a config file) the winner as exactly the
 * keys nvs_config_load() reads. Public API only. Run with -h for every
 * option.
 *
 * This file: main() and the sequential sweep's results, the state the
 * steps share, the temporary files and the cleanup on any exit; the
 * steps are in tune_*.c (see tune.h).
 */
#include "tune.h"

#include <stdlib.h>
#include <unistd.h>

const char *const crit_name[NCRIT] = {"read", "write", "combined"};
const char *const round_name[NROUNDS] = {"sweep", "narrow", "final"};

struct args A;
struct space S;
struct point *P;
unsigned np;
enum nvs_backend auto_be;      /* what NVS_BACKEND_AUTO picks here */
struct setting dflt;	       /* nvs_config_aio_opts() of "{}" */
char real[MAXPATHS][PATH_MAX]; /* the paths, resolved */
int fds[MAXPATHS];
struct nvs_aio *checker; /* default settings: reads written data back */
unsigned char *wbuf[MAXPATHS], *rbuf[MAXPATHS];
const char *backend_env; /* NVSWAP_BACKEND, when it was set */

/* ------------------------------------------------- temporary files */

/* Files to remove on any exit, Ctrl-C included. The signal handler only
 * reads this table; an entry is cleared by writing its first byte. */
#define MAXTMP (40 + MAXRANKS * MAXPATHS)
static char tmp[MAXTMP][PATH_MAX];
static volatile sig_atomic_t ntmp;

/* Registers and returns "<base><mid><pid><ext>" (one rank), or this
 * rank's "<base><mid><parent pid>.r<rank><ext>" (--ranks > 1). */
const char *tune_tmp_add(const char *base, const char *mid, const char *ext)
{
	if (A.ranks > 1)
		return tune_tmp_add_rank(base, mid, ext, tune_rank);
	if (ntmp == MAXTMP)
		tool_die(1, "too many temporary files");
	snprintf(tmp[ntmp], PATH_MAX, "%s%s%ld%s", base, mid, (long)getpid(),
		 ext);
	return tmp[ntmp++];
}

const char *tune_tmp_add_rank(const char *base, const char *mid,
			      const char *ext, unsigned rank)
{
	if (ntmp == MAXTMP)
		tool_die(1, "too many temporary files");
	snprintf(tmp[ntmp], PATH_MAX, "%s%s%ld.r%u%s", base, mid,
		 tune_base_pid ? tune_base_pid : (long)getpid(), rank, ext);
	return tmp[ntmp++];
}

void tune_tmp_forget(const char *path)
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

bool progress_shown;

void tune_progress_end(void)
{
	if (progress_shown)
		fputs("\r\033[K", stderr);
	progress_shown = false;
}

/* The sweep config's text and parsed tree while tune_load_sweep() judges
 * them: a refusal exits from deep inside, and cleanup() frees them then. */
json_t *sweep_root;
/* main()'s point lists and config snippet, for cleanup() when a later
 * step (a failing gnuplot, the config write) dies. */
static struct point **held_all, **held_fin;
static json_t *held_snip;
json_t *tune_held;
char *sweep_text;

static void cleanup(void)
{
	tune_progress_end();
	tune_ranks_stop(); /* before the files: no child writes them then */
	tmp_remove();
	json_decref(sweep_root);
	sweep_root = NULL;
	free(held_all);
	free(held_fin);
	json_decref(held_snip);
	held_all = held_fin = NULL;
	held_snip = NULL;
	json_decref(tune_held);
	tune_held = NULL;
	free(sweep_text);
	sweep_text = NULL;
	tune_swap_cleanup();
	nvs_config_free(ucfg);
	ucfg = NULL;
}

static void on_signal(int sig)
{
	static const char msg[] = "\nnvswap-tune: interrupted; temporary "
				  "files removed\n";

	tune_ranks_kill();
	tmp_remove();
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing left to tell */
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ------------------------------------------------------------ text */

const char *tune_bname(enum nvs_backend b)
{
	return nvs_backend_name(b);
}

/* "io_uring 1M qd 128 par 2 overlap batch" */
const char *tune_setting_str(const struct setting *s, char *buf, size_t len)
{
	char bs[32];

	tool_size_str(s->bs, bs, sizeof(bs));
	snprintf(buf, len, "%s %s qd %u par %u %s %s", tune_bname(s->be), bs,
		 s->qd, s->par, s->ov ? "overlap" : "sequential",
		 s->ss ? "single-submit" : "batch-submit");
	return buf;
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
	nvs_config_free(ucfg);
	ucfg = NULL;
}

static const struct point *winner(struct point **fin, unsigned n, int c,
				  const struct point **second)
{
	tune_sort_points(fin, n, FINAL, c);
	*second = n > 1 && tune_score(fin[1], FINAL, c) > 0 ? fin[1] : NULL;
	return n && tune_score(fin[0], FINAL, c) > 0 ? fin[0] : NULL;
}

static void print_setting_long(const struct setting *s)
{
	char bs[32];

	printf("%s, block_size %s, queue_depth %u, intra_op_parallelism %u, "
	       "overlap_events %s, single_submit %s",
	       tune_bname(s->be), tool_size_str(s->bs, bs, sizeof(bs)), s->qd,
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
	tune_parse(argc, argv);
	tune_load_config();
	tune_probe();
	tune_default_space();
	if (A.sweep)
		tune_load_sweep();
	tune_check_args();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	rnd_state = A.seed;
	if (A.workload == WL_SWAP) {
		tune_swap_setup();
		return tune_swap_main();
	}
	tune_make_points();

	if (!A.json) {
		printf("nvswap-tune %s: %u path%s, %s per op and path, "
		       "O_DIRECT, %s buffers\n",
		       nvs_version(), A.npaths, A.npaths > 1 ? "s" : "",
		       tool_size_str(A.io_size, io, sizeof(io)),
		       A.unpinned ? "pageable" : "page-locked");
		for (unsigned i = 0; i < A.npaths; i++)
			printf("  %s\n", real[i]);
		if (A.ranks > 1)
			printf("--ranks %u: every point run by %u processes at "
			       "once, each with its own file per path, "
			       "buffers and aio handle; GB/s are the node's "
			       "(all ranks' bytes from the first start to the "
			       "last end), fairness the fastest rank's GB/s "
			       "over the slowest's, queue_depth per rank\n",
			       A.ranks, A.ranks);
		tune_print_space();
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
	tune_ranks_start();
	tune_prepare();

	all = held_all = tune_all_points();
	fin = held_fin = tune_all_points();
	prog.t0 = tool_now();
	est = tune_round_bytes(all, np, SWEEP, A.quick ? 1 : A.loops);
	if (A.quick)
		est += (double)(NCRIT * NARROW + 1) * (double)(A.io_size / 4) *
		       A.npaths * (A.dir[RD] + A.dir[WR]) * A.ranks;
	est += (double)(NCRIT * FINALISTS + 1) * (double)A.io_size * A.npaths *
	       A.loops * (A.dir[RD] + A.dir[WR]) * A.ranks;
	prog.total = est;
	t0 = tool_now();
	tune_run_round(all, np, SWEEP, A.quick ? 1 : A.loops);
	for (unsigned i = 0; i < np; i++)
		skipped += P[i].skip != NULL;
	if (skipped == np)
		tool_die(1, "no point of the search space could run here: %s",
			 P[0].skip);
	if (A.quick) {
		nfin = tune_promote(SWEEP, NARROWED, NARROW, fin);
		tune_run_round(fin, nfin, NARROWED, 1);
	}
	sweep_s = tool_now() - t0;
	nfin = tune_promote(A.quick ? NARROWED : SWEEP, FINAL, FINALISTS, fin);
	prog.total = prog.done + tune_round_bytes(fin, nfin, FINAL, A.loops);
	t0 = tool_now();
	tune_run_round(fin, nfin, FINAL, A.loops);
	final_s = tool_now() - t0;
	tune_progress_end();
	tune_ranks_end();
	for (unsigned i = 0; i < A.npaths; i++)
		close(fds[i]);
	tmp_remove();
	ntmp = 0;

	for (int c = 0; c < NCRIT; c++)
		if (tune_crit_on(c))
			best[c] = winner(fin, nfin, c, &second[c]);
	for (unsigned i = 0; i < nfin; i++)
		if (fin[i]->is_default)
			def = fin[i];
	{
		int c = tune_crit_on(CRIT_COMBINED) ? CRIT_COMBINED
						    : (A.dir[RD] ? RD : WR);
		if (!best[c])
			tool_die(1, "the final round measured nothing");
		snip = held_snip = tune_snippet(&best[c]->s);
		if (A.write_config)
			merged = tune_write_config(snip, best[c]->s.be);
	}
	if (A.plot)
		engine = tune_plot();

	if (A.json) {
		json_t *pts = json_array(), *b = json_object(),
		       *vs = json_object();
		for (unsigned i = 0; i < np; i++) {
			json_t *o = tune_setting_json(&P[i].s);
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
						tune_round_json(&P[i], k));
			json_array_append_new(pts, o);
		}
		for (int c = 0; c < NCRIT; c++) {
			if (!best[c])
				continue;
			json_t *o = tune_setting_json(&best[c]->s);
			json_object_set_new(
				o, "gbs",
				tune_num(tune_score(best[c], FINAL, c)));
			json_object_set_new(b, crit_name[c], o);
			if (def && tune_score(def, FINAL, c) > 0)
				json_object_set_new(
					vs, crit_name[c],
					tune_num(tune_score(best[c], FINAL, c) /
						 tune_score(def, FINAL, c)));
		}
		json_t *paths = json_array();
		for (unsigned i = 0; i < A.npaths; i++)
			json_array_append_new(paths, json_string(real[i]));
		out = json_pack(
			"{s:s, s:s, s:o, s:I, s:I, s:b, s:b, s:b, s:o, s:o, "
			"s:I, s:I, s:o, s:o, s:o, s:I}",
			"version", nvs_version(), "workload", "seq",
			"nvme_paths", paths, "io_size", (json_int_t)A.io_size,
			"loops", (json_int_t)A.loops, "quick", A.quick,
			"direct", 1, "pinned", !A.unpinned, "sweep_seconds",
			tune_num(sweep_s), "final_seconds", tune_num(final_s),
			"points", (json_int_t)np, "skipped",
			(json_int_t)skipped, "results", pts, "best", b,
			"vs_default", vs, "ranks", (json_int_t)A.ranks);
		if (def) {
			json_t *o = tune_setting_json(&def->s);
			json_object_set_new(o, "final",
					    tune_round_json(def, FINAL));
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
		tune_sort_points(all, np, SWEEP,
				 tune_crit_on(CRIT_COMBINED)
					 ? CRIT_COMBINED
					 : (A.dir[RD] ? RD : WR));
		tune_print_header();
		for (unsigned i = 0; i < np; i++)
			tune_print_row(all[i], SWEEP,
				       all[i]->is_default ? "  <- default"
							  : "");
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
	tune_sort_points(fin, nfin, FINAL,
			 tune_crit_on(CRIT_COMBINED) ? CRIT_COMBINED
						     : (A.dir[RD] ? RD : WR));
	tune_print_header();
	for (unsigned i = 0; i < nfin; i++)
		tune_print_row(fin[i], FINAL,
			       fin[i]->is_default ? "  <- default" : "");
	printf("\n");
	for (int c = 0; c < NCRIT; c++) {
		if (!best[c])
			continue;
		printf("best %-9s %5.2f GB/s  ", crit_name[c],
		       tune_score(best[c], FINAL, c));
		print_setting_long(&best[c]->s);
		printf("\n");
		if (second[c])
			printf("  runner-up at %.2fx: %s\n",
			       tune_score(second[c], FINAL, c) /
				       tune_score(best[c], FINAL, c),
			       tune_setting_str(&second[c]->s, s, sizeof(s)));
	}
	if (def) {
		printf("tuned vs default (a config without \"aio\": %s):",
		       tune_setting_str(&def->s, s, sizeof(s)));
		for (int c = 0; c < NCRIT; c++)
			if (best[c] && tune_score(def, FINAL, c) > 0)
				printf(" %s %.2fx", crit_name[c],
				       tune_score(best[c], FINAL, c) /
					       tune_score(def, FINAL, c));
		printf("\n");
		int c = tune_crit_on(CRIT_COMBINED) ? CRIT_COMBINED
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
	if (A.ranks > 1) {
		int c = tune_crit_on(CRIT_COMBINED) ? CRIT_COMBINED
						    : (A.dir[RD] ? RD : WR);
		const struct point *b = best[c];

		printf("%u ranks at once: aggregate %.2f GB/s (%s), fairness",
		       A.ranks, tune_score(b, FINAL, c), crit_name[c]);
		for (int d = 0; d < NDIR; d++)
			if (b->fst[FINAL][d].n)
				printf(" %s %.2f", crit_name[d],
				       b->fst[FINAL][d].med);
		printf(" (max/min rank GB/s)\n"
		       "each rank: queue_depth %u; the node: "
		       "nvswap.node_queue_depth %u (= %u x %u, split evenly "
		       "over the launcher's local ranks)\n",
		       b->s.qd, b->s.qd * A.ranks, A.ranks, b->s.qd);
	}
	{
		char *text = json_dumps(snip, JSON_INDENT(2));
		printf("\nconfig (the best %s settings; every key is one "
		       "nvs_config_load reads):\n%s\n",
		       tune_crit_on(CRIT_COMBINED)
			       ? "combined"
			       : crit_name[A.dir[RD] ? RD : WR],
		       text);
		free(text);
	}
	if (!json_object_get(snip, "nvswap") ||
	    !json_object_get(json_object_get(snip, "nvswap"), "backend"))
		printf("(no \"backend\": auto picks %s here, the winner)\n",
		       tune_bname(auto_be));
	if (A.write_config)
		tune_print_written(merged);
	else
		printf("paste it into your DeepSpeed config, or pass "
		       "--write-config FILE\n");
	if (engine)
		printf("plot: %s (%s)\n", A.plot, engine);
	release(all, fin, snip);
	return 0;
}
