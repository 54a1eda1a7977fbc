// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's search space: the backends that work here, the default
 * space, a --sweep JSON file loaded over it (with refusals that name the
 * key, line and column), and the points it expands to.
 */
#include "tune.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Line and column of the first "key" in @text, for messages. */
static void locate(const char *text, const char *key, int *line, int *col)
{
	char quoted[80];
	const char *hit;

	*line = 1;
	*col = 1;
	snprintf(quoted, sizeof(quoted), "\"%s\"", key);
	hit = strstr(text, quoted);
	if (!hit)
		return;
	for (const char *c = text; c < hit; c++) {
		if (*c == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

static void bad_key(const char *key, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
static void bad_key(const char *key, const char *fmt, ...)
{
	char msg[512], full[PATH_MAX + 1024];
	va_list ap;
	int line, col;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	locate(sweep_text, key, &line, &col);
	/* @key lives in the tree cleanup() frees before printing. */
	snprintf(full, sizeof(full), "%s:%d:%d: %s: %s", A.sweep, line, col,
		 key, msg);
	tool_die(2, "%s", full);
}

/* The values of @key as an array (one value becomes a list of one). */
static json_t *values(json_t *v, const char *key, size_t *n)
{
	if (json_is_array(v)) {
		*n = json_array_size(v);
		if (!*n)
			bad_key(key, "an empty list: give at least one value");
		if (*n > MAXV)
			bad_key(key, "%zu values; at most %d", *n, MAXV);
		return v;
	}
	*n = 1;
	return NULL;
}

static json_t *nth(json_t *arr, json_t *v, size_t i)
{
	return arr ? json_array_get(arr, i) : v;
}

static uint32_t u32_value(const char *key, json_t *e, uint64_t lo, uint64_t hi,
			  bool size)
{
	uint64_t n = 0;

	if (json_is_integer(e) && json_integer_value(e) >= 0)
		n = (uint64_t)json_integer_value(e);
	else if (size && json_is_string(e) &&
		 nvs_parse_size(json_string_value(e), &n) == 0)
		;
	else
		bad_key(key, "%s",
			size ? "each value is a byte count or "
			       "a size such as \"1M\""
			     : "each value is a whole number");
	if (n < lo || n > hi)
		bad_key(key, "%llu is not from %llu to %llu",
			(unsigned long long)n, (unsigned long long)lo,
			(unsigned long long)hi);
	if (size && n % 512)
		bad_key(key, "%llu is not a multiple of 512",
			(unsigned long long)n);
	return (uint32_t)n;
}

/* @key's values, each from @lo to @hi, into @list without repeats. */
static void u32_list(const char *key, json_t *v, uint32_t *list, unsigned *n,
		     uint64_t lo, uint64_t hi, bool size)
{
	size_t cnt;
	json_t *arr = values(v, key, &cnt);

	*n = 0;
	for (size_t i = 0; i < cnt; i++) {
		uint32_t x = u32_value(key, nth(arr, v, i), lo, hi, size);
		unsigned k = 0;
		while (k < *n && list[k] != x)
			k++;
		if (k == *n)
			list[(*n)++] = x;
	}
}

static void add_bool(bool *list, unsigned *n, bool v)
{
	for (unsigned i = 0; i < *n; i++)
		if (list[i] == v)
			return;
	list[(*n)++] = v;
}

bool be_ok[4];	     /* probed: this backend makes a handle */
char be_why[4][256]; /* else why not */

static void add_backend(enum nvs_backend b)
{
	for (unsigned i = 0; i < S.nbe; i++)
		if (S.be[i] == b)
			return;
	S.be[S.nbe++] = b;
}

static void add_available_backends(void)
{
	for (int b = NVS_BACKEND_IO_URING; b <= NVS_BACKEND_PSYNC; b++)
		if (be_ok[b])
			add_backend((enum nvs_backend)b);
}

static void bool_list(const char *key, json_t *v, bool *list, unsigned *n,
		      bool invert)
{
	size_t cnt;
	json_t *arr = values(v, key, &cnt);

	*n = 0;
	for (size_t i = 0; i < cnt; i++) {
		json_t *e = nth(arr, v, i);
		if (!json_is_boolean(e))
			bad_key(key, "each value is true or false");
		add_bool(list, n, json_is_true(e) != invert);
	}
}

void tune_load_sweep(void)
{
	static const char *const known =
		"block_size, queue_depth, intra_op_parallelism (io_parallel), "
		"overlap_events, sequential_requests, single_submit, backend";
	json_error_t err;
	json_t *root, *v;
	const char *key;
	bool have_ov = false, have_par = false;
	FILE *f;
	long len;
	char *text;

	f = fopen(A.sweep, "r");
	if (!f)
		tool_die(1, "--sweep-config %s: %s", A.sweep, strerror(errno));
	if (fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) < 0 || len > (1 << 20))
		tool_die(1, "--sweep-config %s: not a small regular file",
			 A.sweep);
	sweep_text = text = calloc(1, (size_t)len + 1);
	if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
		fclose(f);
		tool_die(1, "--sweep-config %s: cannot read it", A.sweep);
	}
	fclose(f);
	sweep_root = root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		tool_die(2, "%s:%d:%d: %s", A.sweep, err.line, err.column,
			 err.text);
	if (!json_is_object(root))
		tool_die(2,
			 "%s:1:1: the sweep config is a JSON object, e.g. "
			 "{\"block_size\": [\"1M\", \"8M\"]}",
			 A.sweep);
	json_object_foreach(root, key, v)
	{
		size_t cnt;
		json_t *arr = values(v, key, &cnt);

		if (!strcmp(key, "block_size")) {
			u32_list(key, v, S.bs, &S.nbs, 512,
				 NVS_AIO_MAX_BLOCK_SIZE, true);
		} else if (!strcmp(key, "queue_depth")) {
			u32_list(key, v, S.qd, &S.nqd, 1,
				 NVS_AIO_MAX_QUEUE_DEPTH, false);
		} else if (!strcmp(key, "intra_op_parallelism") ||
			   !strcmp(key, "io_parallel")) {
			if (have_par)
				bad_key(key, "intra_op_parallelism and "
					     "io_parallel are one key: give "
					     "one");
			have_par = true;
			u32_list(key, v, S.par, &S.npar, 1,
				 NVS_AIO_MAX_PARALLELISM, false);
		} else if (!strcmp(key, "overlap_events") ||
			   !strcmp(key, "sequential_requests")) {
			if (have_ov)
				bad_key(key, "overlap_events and "
					     "sequential_requests say the "
					     "same thing: give one");
			have_ov = true;
			bool_list(key, v, S.ov, &S.nov,
				  key[0] == 's'); /* sequential = !overlap */
		} else if (!strcmp(key, "single_submit")) {
			bool_list(key, v, S.ss, &S.nss, false);
		} else if (!strcmp(key, "backend")) {
			S.nbe = 0;
			for (size_t i = 0; i < cnt; i++) {
				json_t *e = nth(arr, v, i);
				int b = json_is_string(e)
						? tool_backend(
							  json_string_value(e))
						: -1;
				if (b < 0)
					bad_key(key, "each value is one of "
						     "\"auto\", \"io_uring\", "
						     "\"libaio\", \"psync\"");
				if (b == NVS_BACKEND_AUTO)
					add_available_backends();
				else if (!be_ok[b])
					bad_key(key,
						"%s does not work here: %s",
						tune_bname((enum nvs_backend)b),
						be_why[b]);
				else
					add_backend((enum nvs_backend)b);
			}
		} else {
			bad_key(key, "not a sweep key; the keys are %s", known);
		}
	}
	json_decref(root);
	sweep_root = NULL;
	sweep_text = NULL;
	free(text);
}

/* seq: ds_nvme_tune's space. swap: each point is a swapper and whole
 * walks (seconds, where a seq point takes a fraction), so a smaller one
 * that keeps the aio stage near a minute: queue depths down to
 * DeepSpeed's 8, parallelism up to 4, single_submit false and the
 * backend auto picks only (--sweep-config widens any of it). */
void tune_default_space(void)
{
	static const uint32_t bs[] = {1u << 20, 8u << 20};
	static const uint32_t qd[] = {32, 128}, sqd[] = {8, 32, 128};
	static const uint32_t par[] = {1, 2, 4, 8};
	bool swap = A.workload == WL_SWAP;

	memcpy(S.bs, bs, sizeof(bs));
	S.nbs = 2;
	if (swap) {
		memcpy(S.qd, sqd, sizeof(sqd));
		S.nqd = 3;
	} else {
		memcpy(S.qd, qd, sizeof(qd));
		S.nqd = 2;
	}
	memcpy(S.par, par, sizeof(par));
	S.npar = swap ? 3 : 4;
	S.ov[0] = true;
	S.ov[1] = false;
	S.nov = 2;
	S.ss[0] = false;
	S.ss[1] = true;
	S.nss = swap ? 1 : 2;
	S.nbe = 0;
	if (backend_env) {
		int b = tool_backend(backend_env);
		if (b > 0 && be_ok[b])
			add_backend((enum nvs_backend)b);
	}
	if (!S.nbe && swap)
		add_backend(auto_be);
	if (!S.nbe)
		add_available_backends();
}

/* Which backends work, and what AUTO and an empty config give. */
void tune_probe(void)
{
	struct nvs_config *cfg;
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;
	int ret;

	backend_env = getenv("NVSWAP_BACKEND");
	if (backend_env && (!*backend_env || !strcmp(backend_env, "auto")))
		backend_env = NULL;
	if (backend_env)
		backend_env = strdup(backend_env);
	/* The environment variable overrides every handle's backend: the
	 * tuner names backends itself, so it honours the variable by
	 * tuning only that backend (unless --sweep-config lists them). */
	unsetenv("NVSWAP_BACKEND");
	for (int b = NVS_BACKEND_IO_URING; b <= NVS_BACKEND_PSYNC; b++) {
		nvs_aio_opts_init(&o);
		o.backend = (enum nvs_backend)b;
		o.intra_op_parallelism = 1;
		ret = nvs_aio_create(&o, &h);
		be_ok[b] = ret == 0;
		if (ret < 0)
			snprintf(be_why[b], sizeof(be_why[b]), "%s",
				 tool_last_error());
		nvs_aio_destroy(h);
	}
	ret = nvs_config_load_string("{}", "<defaults>", &cfg);
	if (ret < 0 || nvs_config_aio_opts(cfg, &o) < 0)
		tool_die(1, "default config: %s", tool_last_error());
	nvs_config_free(cfg);
	ret = nvs_aio_create(&o, &h);
	if (ret < 0 || nvs_aio_get_stats(h, &st) < 0)
		tool_die(1, "no backend works here: %s (see nvswap-report)",
			 tool_last_error());
	nvs_aio_destroy(h);
	auto_be = st.backend;
	dflt = (struct setting){.be = auto_be,
				.bs = o.block_size,
				.qd = o.queue_depth,
				.par = o.intra_op_parallelism,
				.ov = o.overlap_events,
				.ss = o.single_submit};
}

static bool same(const struct setting *a, const struct setting *b)
{
	return a->be == b->be && a->bs == b->bs && a->qd == b->qd &&
	       a->par == b->par && a->ov == b->ov && a->ss == b->ss;
}

static struct point *add_point(const struct setting *s)
{
	struct point *p;

	for (unsigned i = 0; i < np; i++)
		if (same(&P[i].s, s))
			return &P[i];
	p = realloc(P, (np + 1) * sizeof(*P));
	if (!p)
		tool_die(1, "out of memory");
	P = p;
	p = &P[np++];
	memset(p, 0, sizeof(*p));
	p->s = *s;
	return p;
}

/* Every setting of the space S, in order (backend, block size, queue
 * depth, parallelism, events, submit; the last varies fastest), but
 * psync's only once per block size and parallelism: it ignores the
 * queue settings. A new array of *@n, for the caller to free. */
struct setting *tune_space_settings(unsigned *n)
{
	unsigned total = S.nbe * S.nbs * S.nqd * S.npar * S.nov * S.nss;
	struct setting *all = malloc((total ? total : 1) * sizeof(*all));

	if (!all)
		tool_die(1, "out of memory");
	*n = 0;
	for (unsigned i = 0; i < total; i++) {
		unsigned r = i, m, o, t, q, b;

		m = r % S.nss;
		r /= S.nss;
		o = r % S.nov;
		r /= S.nov;
		t = r % S.npar;
		r /= S.npar;
		q = r % S.nqd;
		r /= S.nqd;
		b = r % S.nbs;
		r /= S.nbs;
		if (S.be[r] == NVS_BACKEND_PSYNC && (q || o || m))
			continue;
		all[(*n)++] = (struct setting){.be = S.be[r],
					       .bs = S.bs[b],
					       .qd = S.qd[q],
					       .par = S.par[t],
					       .ov = S.ov[o],
					       .ss = S.ss[m]};
	}
	return all;
}

void tune_make_points(void)
{
	unsigned n;
	struct setting *all = tune_space_settings(&n);

	for (unsigned i = 0; i < n; i++)
		add_point(&all[i]);
	free(all);
	add_point(&dflt)->is_default = true;
}
