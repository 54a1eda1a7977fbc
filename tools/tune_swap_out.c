// SPDX-License-Identifier: MIT
/*
 * nvswap-tune --workload swap, what it says: the plan, each stage's
 * table, the final round, the winner against the config's own settings
 * (as text or one JSON object), and the config keys it chose, written
 * into the DeepSpeed sections nvs_config_load() reads them from.
 */
#include "tune_swap.h"

#include <stdlib.h>
#include <string.h>

/* The keys for @p: the aio section (and nvswap backend / nvme_paths)
 * as the sequential sweep writes them, plus offload_param's buffer_count
 * and buffer_size (2-byte elements, as nvs_config_swapper_opts() reads
 * parameters) and nvswap.lookahead. device and nvme_path only when the
 * file written from does not swap parameters to NVMe already. */
json_t *tune_swap_snippet(const struct swap_point *p)
{
	json_t *aio = tune_snippet(&p->s), *c = json_object(), *op, *nv;

	op = json_pack("{s:I, s:I}", "buffer_count", (json_int_t)p->bufs,
		       "buffer_size", (json_int_t)J.elems);
	if (!J.base_nvme) {
		json_object_set_new(op, "device", json_string("nvme"));
		json_object_set_new(op, "nvme_path", json_string(real[0]));
	}
	json_object_set_new(c, "zero_optimization",
			    json_pack("{s:o}", "offload_param", op));
	json_object_update(c, aio);
	json_decref(aio);
	nv = json_object_get(c, "nvswap");
	if (!nv) {
		nv = json_object();
		json_object_set_new(c, "nvswap", nv);
	}
	json_object_set_new(nv, "lookahead", json_integer(p->look));
	return c;
}

static const char *base_name(void)
{
	return A.config ? "your config" : "the defaults";
}

void tune_swap_print_intro(unsigned nshapes, unsigned naio)
{
	char a[32], b[32], c[32], s[96];

	if (A.json)
		return;
	printf("nvswap-tune %s: swap workload: %u layers x %s, forward then "
	       "backward, a read and a write-back per visit, I/O only; %u "
	       "path%s, %s pool\n",
	       nvs_version(), A.layers,
	       tool_size_str(A.tensor_size, a, sizeof(a)), A.npaths,
	       A.npaths > 1 ? "s" : "",
	       A.unpinned ? "pageable" : "page-locked");
	for (unsigned i = 0; i < A.npaths; i++)
		printf("  %s\n", real[i]);
	printf("%s: %u buffers, lookahead %u, %s\n", base_name(), J.base_bufs,
	       J.base_look, tune_setting_str(&J.base, s, sizeof(s)));
	if (A.config)
		printf("  (%s)\n", A.config);
	printf("pool: buffer_size %llu (2-byte elements: %s, one layer); at "
	       "most %s pinned (%s): buffer_count 2 to %u; %u shapes "
	       "(buffer_count x lookahead)\n",
	       (unsigned long long)J.elems, tool_human(J.buf, b, sizeof(b)),
	       tool_human(J.budget, c, sizeof(c)), J.budget_from, J.maxbufs,
	       nshapes);
	printf("aio space: %u points:", naio);
	tune_print_lists();
	printf("\n");
	if (A.quick)
		printf("--quick: one step per point, then one more for the "
		       "faster half, down to %d; then the best %d shapes x "
		       "the best %d aio settings and %s, %u steps each, "
		       "interleaved\n",
		       FINALISTS, FINALISTS, FINALISTS, base_name(), A.loops);
	else
		printf("stages: the shapes with the aio settings of %s, then "
		       "the aio settings with the best shape, %u steps a "
		       "point; then the best %d x %d and %s again, %u steps "
		       "each, interleaved\n",
		       base_name(), A.loops, FINALISTS, FINALISTS, base_name(),
		       A.loops);
	fflush(stdout);
}

static void print_header(void)
{
	printf("  %4s %5s  %-8s %5s %5s %4s  %-10s %-6s  %s\n", "bufs", "ahead",
	       "backend", "block", "qd", "par", "events", "submit",
	       "s/step (min-max)");
}

static void print_row(const struct swap_point *p, int stage)
{
	const struct dstat *st = &p->st[stage];
	char bs[32], t[64];

	if (p->skip)
		snprintf(t, sizeof(t), "skipped: %s", p->skip);
	else if (st->n > 1)
		snprintf(t, sizeof(t), "%.3f (%.3f-%.3f)", st->med, st->lo,
			 st->hi);
	else if (st->n)
		snprintf(t, sizeof(t), "%.3f", st->med);
	else
		snprintf(t, sizeof(t), "-");
	printf("  %4u %5u  %-8s %5s %5u %4u  %-10s %-6s  %-*s%s%s\n", p->bufs,
	       p->look, tune_bname(p->s.be),
	       tool_size_str(p->s.bs, bs, sizeof(bs)), p->s.qd, p->s.par,
	       p->s.ov ? "overlap" : "sequential", p->s.ss ? "single" : "batch",
	       p->is_base ? 22 : 0, t, p->is_base ? "  <- " : "",
	       p->is_base ? base_name() : "");
}

/* After a stage: its fastest point (@set is sorted), all with
 * --verbose. */
void tune_swap_print_stage(struct swap_point **set, unsigned n, int stage)
{
	char s[160];

	if (A.json)
		return;
	printf("%s: %u point%s in %.1f s; fastest: %s, %.3f s a step\n",
	       stage_name[stage], n, n > 1 ? "s" : "", J.secs[stage],
	       tune_swap_str(set[0], s, sizeof(s)),
	       tune_swap_score(set[0], stage));
	if (!A.verbose)
		return;
	print_header();
	for (unsigned i = 0; i < n; i++)
		print_row(set[i], stage);
	fflush(stdout);
}

static json_t *stage_json(const struct swap_point *p, int stage)
{
	const struct dstat *st = &p->st[stage];

	return json_pack("{s:o, s:o, s:o, s:I}", "median", tune_num(st->med),
			 "min", tune_num(st->lo), "max", tune_num(st->hi),
			 "steps", (json_int_t)st->n);
}

static json_t *point_json(const struct swap_point *p, bool stats)
{
	json_t *o = tune_setting_json(&p->s);

	json_object_set_new(o, "buffer_count", json_integer(p->bufs));
	json_object_set_new(o, "lookahead", json_integer(p->look));
	json_object_set_new(
		o, "pinned_bytes",
		json_integer((json_int_t)(p->bufs * (uint64_t)J.buf)));
	for (int k = 0; stats && k < NSTAGES; k++)
		if (p->in[k] && p->st[k].n)
			json_object_set_new(o, stage_name[k], stage_json(p, k));
	return o;
}

static void print_json(const struct swap_point *best,
		       const struct swap_point *base, json_t *snip)
{
	json_t *pts = json_array(), *paths = json_array(), *out, *o;
	unsigned skipped = 0;

	for (unsigned i = 0; i < nsp; i++) {
		o = point_json(SP[i], true);
		json_object_set_new(o, "baseline",
				    json_boolean(SP[i]->is_base));
		json_object_set_new(o, "fits", json_boolean(SP[i]->fits));
		if (SP[i]->skip)
			json_object_set_new(o, "skipped",
					    json_string(SP[i]->skip));
		skipped += SP[i]->skip != NULL;
		json_array_append_new(pts, o);
	}
	for (unsigned i = 0; i < A.npaths; i++)
		json_array_append_new(paths, json_string(real[i]));
	o = point_json(best, false);
	json_object_set_new(o, "step_seconds",
			    tune_num(tune_swap_score(best, ST_FINAL)));
	out = json_pack(
		"{s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, "
		"s:{s:o, s:o, s:o}, s:I, s:I, s:o, s:o}",
		"version", nvs_version(), "workload", "swap", "nvme_paths",
		paths, "layers", (json_int_t)A.layers, "tensor_size",
		(json_int_t)A.tensor_size, "buffer_size", (json_int_t)J.elems,
		"buffer_bytes", (json_int_t)J.buf, "max_pinned",
		(json_int_t)J.budget, "loops", (json_int_t)A.loops, "quick",
		A.quick, "pinned", !A.unpinned, "stage_seconds", "pool",
		tune_num(J.secs[ST_POOL]), "aio", tune_num(J.secs[ST_AIO]),
		"final", tune_num(J.secs[ST_FINAL]), "points", (json_int_t)nsp,
		"skipped", (json_int_t)skipped, "results", pts, "best", o);
	if (base) {
		o = point_json(base, false);
		if (base->st[ST_FINAL].n)
			json_object_set_new(o, "final",
					    stage_json(base, ST_FINAL));
		if (base->skip)
			json_object_set_new(o, "skipped",
					    json_string(base->skip));
		json_object_set_new(out, "baseline", o);
		if (tune_swap_score(base, ST_FINAL) > 0)
			json_object_set_new(
				out, "vs_baseline",
				tune_num(tune_swap_score(base, ST_FINAL) /
					 tune_swap_score(best, ST_FINAL)));
	}
	json_object_set(out, "config", snip);
	if (A.write_config)
		json_object_set_new(out, "config_file",
				    json_string(A.write_config));
	char *text = json_dumps(out, JSON_INDENT(2));
	puts(text);
	free(text);
	json_decref(out);
}

static void print_text(struct swap_point **fin, unsigned n,
		       const struct swap_point *best,
		       const struct swap_point *base, json_t *snip)
{
	char s[160], bs[32], h[32];

	printf("\nfinal round: %u combination%s%s%s, %u step%s each, "
	       "interleaved, in %.1f s (seconds a step, median (min-max))\n",
	       base ? n - 1 : n, n - !!base > 1 ? "s" : "", base ? " and " : "",
	       base ? base_name() : "", A.loops, A.loops > 1 ? "s" : "",
	       J.secs[ST_FINAL]);
	print_header();
	for (unsigned i = 0; i < n; i++)
		print_row(fin[i], ST_FINAL);
	printf("\nbest: %u buffers, lookahead %u, %s, block_size %s, "
	       "queue_depth %u, intra_op_parallelism %u, overlap_events "
	       "%s, single_submit %s: %.3f s a step, %s pinned\n",
	       best->bufs, best->look, tune_bname(best->s.be),
	       tool_size_str(best->s.bs, bs, sizeof(bs)), best->s.qd,
	       best->s.par, best->s.ov ? "true" : "false",
	       best->s.ss ? "true" : "false", tune_swap_score(best, ST_FINAL),
	       tool_human(best->bufs * (uint64_t)J.buf, h, sizeof(h)));
	if (base && tune_swap_score(base, ST_FINAL) > 0) {
		printf("tuned vs %s (%s, %s pinned): %.2fx the speed\n",
		       base_name(), tune_swap_str(base, s, sizeof(s)),
		       tool_human(base->bufs * (uint64_t)J.buf, h, sizeof(h)),
		       tune_swap_score(base, ST_FINAL) /
			       tune_swap_score(best, ST_FINAL));
		if (best != base &&
		    base->st[ST_FINAL].lo <= best->st[ST_FINAL].hi)
			printf("  (the ranges overlap: here %s do about as "
			       "well)\n",
			       A.config ? "your settings" : "the defaults");
		if (!base->fits)
			printf("  (%s is over the pinned budget, so it could "
			       "not be chosen)\n",
			       base_name());
	} else if (base) {
		printf("%s could not run here: %s\n", base_name(),
		       base->skip ? base->skip : "not measured");
	}
	char *text = json_dumps(snip, JSON_INDENT(2));
	printf("\nconfig (every key is one nvs_config_load reads; "
	       "buffer_size counts 2-byte elements):\n%s\n",
	       text);
	free(text);
}

/* The results, and the config written when asked. 0. */
int tune_swap_report(struct swap_point **fin, unsigned n,
		     const struct swap_point *best,
		     const struct swap_point *base)
{
	json_t *snip = tune_held = tune_swap_snippet(best);
	bool merged = false;

	if (A.write_config)
		merged = tune_write_config(snip, best->s.be);
	if (A.json) {
		print_json(best, base, snip);
	} else {
		print_text(fin, n, best, base, snip);
		if (A.write_config)
			tune_print_written(merged);
		else
			printf("paste it into your DeepSpeed config, or pass "
			       "--write-config FILE\n");
	}
	tune_held = NULL;
	json_decref(snip);
	return 0;
}
