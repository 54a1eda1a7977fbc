// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's results: scores, ranking and promotion between rounds,
 * the JSON of settings and rounds, the config snippet and its merge into
 * --write-config, and the text tables.
 */
#include "tune.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool tune_crit_on(int c)
{
	return c == CRIT_COMBINED ? A.dir[RD] && A.dir[WR] : A.dir[c];
}

/* The criterion's GB/s in @round; -1 when not measured. With one
 * direction only, "combined" is that direction. */
double tune_score(const struct point *p, int round, int c)
{
	const struct dstat *r = &p->st[round][RD], *w = &p->st[round][WR];

	if (p->skip)
		return -1;
	if (c == RD || (c == CRIT_COMBINED && !A.dir[WR]))
		return r->n ? r->med : -1;
	if (c == WR || !A.dir[RD])
		return w->n ? w->med : -1;
	if (!r->n || !w->n || r->med <= 0 || w->med <= 0)
		return -1;
	return 2 / (1 / r->med + 1 / w->med);
}

static int sort_round, sort_crit;

static int by_score(const void *x, const void *y)
{
	double a = tune_score(*(struct point *const *)x, sort_round, sort_crit);
	double b = tune_score(*(struct point *const *)y, sort_round, sort_crit);

	return (a < b) - (a > b);
}

void tune_sort_points(struct point **set, unsigned n, int round, int c)
{
	sort_round = round;
	sort_crit = c;
	qsort(set, n, sizeof(*set), by_score);
}

struct point **tune_all_points(void)
{
	struct point **set = malloc((np ? np : 1) * sizeof(*set));

	if (!set)
		tool_die(1, "out of memory");
	for (unsigned i = 0; i < np; i++)
		set[i] = &P[i];
	return set;
}

/* Of the points measured in round @from, the best @k of each criterion
 * and the default settings go on to round @to, listed in @next. The
 * rest are pruned. */
unsigned tune_promote(int from, int to, unsigned k, struct point **next)
{
	unsigned n = 0, m = 0;
	struct point **set = tune_all_points();

	for (unsigned i = 0; i < np; i++)
		if (P[i].reached == from && !P[i].skip)
			set[m++] = &P[i];
	for (int c = 0; c < NCRIT; c++) {
		if (!tune_crit_on(c))
			continue;
		tune_sort_points(set, m, from, c);
		for (unsigned i = 0; i < k && i < m; i++)
			if (tune_score(set[i], from, c) > 0)
				set[i]->reached = to;
	}
	free(set);
	for (unsigned i = 0; i < np; i++) {
		if (P[i].is_default && !P[i].skip)
			P[i].reached = to;
		if (P[i].reached == to)
			next[n++] = &P[i];
	}
	return n;
}

json_t *tune_setting_json(const struct setting *s)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:b, s:b}", "backend",
			 tune_bname(s->be), "block_size", (json_int_t)s->bs,
			 "queue_depth", (json_int_t)s->qd,
			 "intra_op_parallelism", (json_int_t)s->par,
			 "overlap_events", s->ov, "single_submit", s->ss);
}

json_t *tune_num(double v)
{
	return json_real(round(v * 1000) / 1000);
}

json_t *tune_round_json(const struct point *p, int round)
{
	json_t *o = json_object();

	for (int d = 0; d < NDIR; d++) {
		const struct dstat *st = &p->st[round][d];
		if (st->n)
			json_object_set_new(o, crit_name[d],
					    json_pack("{s:o, s:o, s:o, s:I}",
						      "median",
						      tune_num(st->med), "min",
						      tune_num(st->lo), "max",
						      tune_num(st->hi), "ops",
						      (json_int_t)st->n));
	}
	if (tune_score(p, round, CRIT_COMBINED) > 0)
		json_object_set_new(
			o, "combined",
			tune_num(tune_score(p, round, CRIT_COMBINED)));
	if (A.ranks > 1) {
		json_t *f = json_object();
		for (int d = 0; d < NDIR; d++)
			if (p->fst[round][d].n)
				json_object_set_new(
					f, crit_name[d],
					tune_num(p->fst[round][d].med));
		json_object_set_new(o, "fairness", f);
	}
	return o;
}

/* The config keys for @s: exactly what nvs_config_load() reads. */
json_t *tune_snippet(const struct setting *s)
{
	json_t *c = json_object(), *nv = json_object();

	json_object_set_new(c, "aio",
			    json_pack("{s:I, s:I, s:I, s:b, s:b}", "block_size",
				      (json_int_t)s->bs, "queue_depth",
				      (json_int_t)s->qd, "intra_op_parallelism",
				      (json_int_t)s->par, "single_submit",
				      s->ss, "overlap_events", s->ov));
	if (s->be != auto_be)
		json_object_set_new(nv, "backend",
				    json_string(tune_bname(s->be)));
	/* --ranks: queue_depth was each rank's; the node's total, which
	 * nvs_config_swapper_opts() splits over the launcher's local
	 * ranks, gives each that depth again with N ranks a node. */
	if (A.ranks > 1)
		json_object_set_new(nv, "node_queue_depth",
				    json_integer((json_int_t)s->qd * A.ranks));
	if (A.npaths > 1) {
		json_t *arr = json_array();
		for (unsigned i = 0; i < A.npaths; i++)
			json_array_append_new(arr, json_string(real[i]));
		json_object_set_new(nv, "nvme_paths", arr);
	}
	if (json_object_size(nv))
		json_object_set_new(c, "nvswap", nv);
	else
		json_decref(nv);
	return c;
}

/* @snip's keys into @root: an object into an object key by key, any
 * other value replaces what was there (a copy: @snip stays the
 * caller's). */
static void merge(json_t *root, json_t *snip)
{
	const char *key;
	json_t *v;

	json_object_foreach(snip, key, v)
	{
		json_t *old = json_object_get(root, key);

		if (json_is_object(v) && json_is_object(old))
			merge(old, v);
		else
			json_object_set_new(root, key, json_deep_copy(v));
	}
}

/* The file the config is written from: --config when given, else
 * --write-config itself when it exists; NULL: none, a new file. */
static const char *base_file(void)
{
	if (A.config)
		return A.config;
	return access(A.write_config, F_OK) == 0 ? A.write_config : NULL;
}

/* The base file with @snip merged in (or just @snip without one),
 * checked to load; @be is the tuned backend. NULL, with the reason in
 * @why, when it cannot be done; else the text, for the caller to free. */
static char *merged_config(json_t *snip, enum nvs_backend be, char *why,
			   size_t len)
{
	const char *path = base_file();
	struct nvs_config *cfg = NULL;
	json_error_t err;
	json_t *root, *aio, *nv;
	char *text;

	if (path) {
		/* The config loader names whatever is wrong with the file
		 * (JSON, types, keys) at its own line and column; after
		 * that, root is an object and so are its sections. */
		if (nvs_config_load(path, &cfg) < 0) {
			snprintf(why, len, "%s", tool_last_error());
			return NULL;
		}
		nvs_config_free(cfg);
		root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
		if (!root) {
			snprintf(why, len, "%s:%d:%d: %s", path, err.line,
				 err.column, err.text);
			return NULL;
		}
	} else {
		root = json_object();
	}
	/* The older spellings of intra_op_parallelism would now say it
	 * twice. */
	aio = json_object_get(root, "aio");
	if (aio && json_object_get(snip, "aio")) {
		json_object_del(aio, "thread_count");
		json_object_del(aio, "num_threads");
	}
	merge(root, snip);
	/* A backend the file names explicitly becomes the tuned one. */
	nv = json_object_get(root, "nvswap");
	if (nv && json_object_get(nv, "backend"))
		json_object_set_new(nv, "backend", json_string(tune_bname(be)));
	text = json_dumps(root, JSON_INDENT(2));
	if (!text) {
		snprintf(why, len, "%s: out of memory", A.write_config);
	} else if (nvs_config_load_string(text, A.write_config, &cfg) < 0) {
		/* A safety net: what we add is valid by construction. */
		snprintf(why, len, "%s: the result would not load: %s",
			 A.write_config, tool_last_error());
		free(text);
		text = NULL;
	} else {
		nvs_config_free(cfg);
	}
	json_decref(root);
	return text;
}

/* merged_config() or a fatal error naming the file. */
char *tune_merged_config_or_die(json_t *snip, enum nvs_backend be)
{
	char why[1024];
	char *text = merged_config(snip, be, why, sizeof(why));

	if (!text)
		tool_die(1, "--write-config %s (file not changed)", why);
	return text;
}

/* Replace (or create) A.write_config with the base file and @snip merged
 * in, in one rename. True when it merged into a file that existed. */
bool tune_write_config(json_t *snip, enum nvs_backend be)
{
	const char *path = A.write_config, *t;
	bool merged = base_file() != NULL;
	char *text = tune_merged_config_or_die(snip, be);
	FILE *f;

	t = tune_tmp_add(path, ".nvswap-tune.", ".tmp");
	f = fopen(t, "w");
	if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0 ||
	    fsync(fileno(f)) < 0 || fclose(f) != 0)
		tool_die(1, "--write-config: writing %s: %s", t,
			 strerror(errno));
	if (rename(t, path) < 0)
		tool_die(1, "--write-config: renaming %s to %s: %s", t, path,
			 strerror(errno));
	tune_tmp_forget(t);
	free(text);
	return merged;
}

/* Where tune_write_config() put it. */
void tune_print_written(bool merged)
{
	if (A.config && strcmp(A.config, A.write_config))
		printf("written to %s: %s with the chosen keys\n",
		       A.write_config, A.config);
	else
		printf("%s %s\n", merged ? "merged into" : "written to",
		       A.write_config);
}

void tune_print_row(const struct point *p, int round, const char *mark)
{
	char bs[32], col[NDIR][48];

	for (int d = 0; d < NDIR; d++) {
		const struct dstat *st = &p->st[round][d];
		if (st->n > 1)
			snprintf(col[d], sizeof(col[d]), "%5.2f (%.2f-%.2f)",
				 st->med, st->lo, st->hi);
		else if (st->n)
			snprintf(col[d], sizeof(col[d]), "%5.2f", st->med);
		else
			snprintf(col[d], sizeof(col[d]), "    -");
	}
	printf("  %-8s %5s %5u %4u  %-10s %-6s  %-18s %-18s",
	       tune_bname(p->s.be), tool_size_str(p->s.bs, bs, sizeof(bs)),
	       p->s.qd, p->s.par, p->s.ov ? "overlap" : "sequential",
	       p->s.ss ? "single" : "batch", col[RD], col[WR]);
	if (p->skip)
		printf("  skipped: %s", p->skip);
	else if (tune_crit_on(CRIT_COMBINED))
		printf("  %5.2f%s", tune_score(p, round, CRIT_COMBINED),
		       A.ranks > 1 ? "   " : "");
	if (!p->skip && A.ranks > 1)
		for (int d = 0; d < NDIR; d++)
			if (p->fst[round][d].n)
				printf("  %c %.2f", crit_name[d][0],
				       p->fst[round][d].med);
	printf("%s\n", mark);
}

void tune_print_header(void)
{
	printf("  %-8s %5s %5s %4s  %-10s %-6s  %-18s %-18s  %s%s\n", "backend",
	       "block", "qd", "par", "events", "submit", "read GB/s",
	       "write GB/s", tune_crit_on(CRIT_COMBINED) ? "combined" : "",
	       A.ranks > 1 ? "  fairness (max/min rank)" : "");
}

/* " block_size 1M 8M; queue_depth 32 128; ...; backend io_uring": the
 * lists of the search space. */
void tune_print_lists(void)
{
	char b[32];

	printf(" block_size");
	for (unsigned i = 0; i < S.nbs; i++)
		printf(" %s", tool_size_str(S.bs[i], b, sizeof(b)));
	printf("; queue_depth");
	for (unsigned i = 0; i < S.nqd; i++)
		printf(" %u", S.qd[i]);
	printf("; intra_op_parallelism");
	for (unsigned i = 0; i < S.npar; i++)
		printf(" %u", S.par[i]);
	printf("; overlap_events");
	for (unsigned i = 0; i < S.nov; i++)
		printf(" %s", S.ov[i] ? "true" : "false");
	printf("; single_submit");
	for (unsigned i = 0; i < S.nss; i++)
		printf(" %s", S.ss[i] ? "true" : "false");
	printf("; backend");
	for (unsigned i = 0; i < S.nbe; i++)
		printf(" %s", tune_bname(S.be[i]));
}

void tune_print_space(void)
{
	printf("search space: %u points:", np);
	tune_print_lists();
	printf("; plus the default settings\n");
	for (int k = NVS_BACKEND_IO_URING; k <= NVS_BACKEND_PSYNC; k++)
		if (!be_ok[k])
			printf("  %s is not tuned: %s\n",
			       tune_bname((enum nvs_backend)k), be_why[k]);
	if (backend_env)
		printf("  NVSWAP_BACKEND=%s is set: %s\n", backend_env,
		       A.sweep ? "the sweep config's backends are tuned"
			       : "only that backend is tuned");
	for (unsigned i = 0; i < S.nbe; i++)
		if (S.be[i] == NVS_BACKEND_PSYNC &&
		    (S.nqd > 1 || S.nov > 1 || S.nss > 1))
			printf("  psync runs each request on its worker "
			       "thread: only block_size and "
			       "intra_op_parallelism vary for it\n");
}
