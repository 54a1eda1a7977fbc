// SPDX-License-Identifier: MIT
/*
 * The DeepSpeed-style config: jansson parses (and refuses duplicate keys),
 * a table per checked section says each key's type, and a small scan of
 * the text finds where every key stands, since jansson keeps no positions
 * for values. A loaded config owns the jansson tree: strings handed out
 * are borrowed from it.
 */
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "config/unescape.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_WARNINGS 32
#define PATH_MAX_KEY 160
#define MAX_FILE (16u << 20) /* a config larger than this is a mistake */

struct keypos {
	char path[PATH_MAX_KEY]; /* "zero_optimization.offload_param" */
	int line, col;
};

struct nvs_config {
	json_t *root;
	char name[256];
	struct nvs_offload_config off[2];
	struct nvs_aio_opts aio;
	bool use_gds;
	struct nvs_nvswap_config nv;
	char *warn[MAX_WARNINGS];
	unsigned nwarn;
	/* Positions of every key, from the text. */
	struct keypos *pos;
	size_t npos, cappos;
	bool oom; /* an index entry or a warning could not be allocated */
};

/* ------------------------------------------------------- key positions */

struct scan {
	const char *p;
	int line, col;
	struct nvs_config *c;
};

static void adv(struct scan *s)
{
	if (*s->p == '\n') {
		s->line++;
		s->col = 1;
	} else {
		s->col++;
	}
	s->p++;
}

static void skip_ws(struct scan *s)
{
	while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')
		adv(s);
}

/* Copy a JSON string, escapes decoded as jansson decodes them, so that a
 * key written "\u0061io" is found as "aio". */
static void scan_string(struct scan *s, char *out, size_t n)
{
	size_t k = 0, len, skip;
	char u[4];

	adv(s); /* opening quote */
	while (*s->p && *s->p != '"') {
		if (*s->p == '\\') {
			adv(s);
			skip = nvs__json_unescape(s->p, u, &len);
			for (size_t i = 0; i < len && k + 1 < n; i++)
				out[k++] = u[i];
			while (skip-- && *s->p)
				adv(s);
			continue;
		}
		if (k + 1 < n)
			out[k++] = *s->p;
		adv(s);
	}
	if (*s->p)
		adv(s);
	if (out)
		out[k < n ? k : n - 1] = 0;
}

static void scan_value(struct scan *s, const char *path);

static void note_pos(struct scan *s, const char *path, int line, int col)
{
	struct nvs_config *c = s->c;

	if (!nvs__reserve(&c->pos, &c->cappos, c->npos, c->npos + 1,
			  sizeof(*c->pos))) {
		c->oom = true;
		return;
	}
	if (snprintf(c->pos[c->npos].path, PATH_MAX_KEY, "%s", path) >=
	    PATH_MAX_KEY)
		return;
	c->pos[c->npos].line = line;
	c->pos[c->npos].col = col;
	c->npos++;
}

static void scan_object(struct scan *s, const char *path)
{
	char key[PATH_MAX_KEY], sub[PATH_MAX_KEY];

	adv(s); /* { */
	for (;;) {
		int line, col;

		skip_ws(s);
		if (*s->p != '"')
			break;
		line = s->line;
		col = s->col;
		scan_string(s, key, sizeof(key));
		/* Paths longer than any key we check are not indexed. */
		if (snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "",
			     key) >= (int)sizeof(sub))
			sub[0] = 0;
		else
			note_pos(s, sub, line, col);
		skip_ws(s);
		if (*s->p == ':')
			adv(s);
		scan_value(s, sub);
		skip_ws(s);
		if (*s->p != ',')
			break;
		adv(s);
	}
	skip_ws(s);
	if (*s->p == '}')
		adv(s);
}

static void scan_value(struct scan *s, const char *path)
{
	skip_ws(s);
	if (*s->p == '{') {
		scan_object(s, path);
	} else if (*s->p == '[') {
		adv(s);
		for (;;) {
			skip_ws(s);
			if (*s->p == ']' || !*s->p)
				break;
			scan_value(s, path); /* elements share the key */
			skip_ws(s);
			if (*s->p != ',')
				break;
			adv(s);
		}
		if (*s->p == ']')
			adv(s);
	} else if (*s->p == '"') {
		scan_string(s, NULL, 0);
	} else {
		while (*s->p && !strchr(",}] \t\r\n", *s->p))
			adv(s);
	}
}

/* The text was accepted by jansson, so the scan can be lenient. */
static void index_positions(struct nvs_config *c, const char *text)
{
	struct scan s = {.p = text, .line = 1, .col = 1, .c = c};

	scan_value(&s, "");
}

static void where(const struct nvs_config *c, const char *path, int *line,
		  int *col)
{
	*line = *col = 0;
	for (size_t i = 0; i < c->npos; i++)
		if (!strcmp(c->pos[i].path, path)) {
			*line = c->pos[i].line;
			*col = c->pos[i].col;
			return;
		}
}

/* An error about @path: "NAME:LINE:COL: PATH: what". */
static int bad(const struct nvs_config *c, int err, const char *path,
	       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad(const struct nvs_config *c, int err, const char *path,
	       const char *fmt, ...)
{
	char what[NVS_ERRMSG_MAX / 2];
	int line, col;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	where(c, path, &line, &col);
	return nvs__err(err, "%s:%d:%d: %s: %s", c->name, line, col, path,
			what);
}

static void warn(struct nvs_config *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void warn(struct nvs_config *c, const char *path, const char *fmt, ...)
{
	char what[256], *w;
	int line, col, n;
	va_list ap;

	if (c->nwarn == MAX_WARNINGS)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	where(c, path, &line, &col);
	n = snprintf(NULL, 0, "%s:%d:%d: %s: %s", c->name, line, col, path,
		     what);
	w = nvs__malloc((size_t)n + 1);
	if (!w) {
		c->oom = true;
		return;
	}
	snprintf(w, (size_t)n + 1, "%s:%d:%d: %s: %s", c->name, line, col, path,
		 what);
	c->warn[c->nwarn++] = w;
}

/* ------------------------------------------------------------- schema */

enum vkind {
	V_BOOL,	   /* bool */
	V_COUNT,   /* uint64_t, whole number >= 1 (1e8 accepted) */
	V_COUNT0,  /* uint64_t, whole number >= 0 */
	V_U32,	   /* uint32_t, whole number >= 1, at most max, of multiple */
	V_STRING,  /* const char *, non-empty, borrowed from the tree */
	V_DEVICE,  /* enum nvs_offload_device */
	V_BACKEND, /* enum nvs_backend */
	V_PATHS,   /* struct nvs_nvswap_config's nvme_paths and npaths */
	V_UNUSED,  /* a DeepSpeed key nvswap does not use: any value */
	V_ALIAS,   /* an older name of another key: read as it, a warning */
};

/* One key of a section: where its value goes in the section's target. */
struct keydef {
	const char *name;
	enum vkind kind;
	size_t off;	      /* in the target struct */
	uint32_t max;	      /* V_U32: largest value */
	uint32_t multiple;    /* V_U32: the value must be a multiple, or 0 */
	const char *alias_of; /* V_ALIAS */
};

#define OFF(f) offsetof(struct nvs_offload_config, f)
static const struct keydef offload_keys[] = {
	{"device", V_DEVICE, OFF(device), 0, 0, NULL},
	{"nvme_path", V_STRING, OFF(nvme_path), 0, 0, NULL},
	{"buffer_count", V_COUNT, OFF(buffer_count), 0, 0, NULL},
	{"buffer_size", V_COUNT, OFF(buffer_size), 0, 0, NULL},
	{"max_in_cpu", V_COUNT0, OFF(max_in_cpu), 0, 0, NULL},
	{"pin_memory", V_BOOL, OFF(pin_memory), 0, 0, NULL},
	{"pipeline_read", V_BOOL, OFF(pipeline_read), 0, 0, NULL},
	{"pipeline_write", V_BOOL, OFF(pipeline_write), 0, 0, NULL},
	{"fast_init", V_UNUSED, 0, 0, 0, NULL},
	{"ratio", V_UNUSED, 0, 0, 0, NULL},
	{"super_offload", V_UNUSED, 0, 0, 0, NULL},
	{"cpuadam_cores_perc", V_UNUSED, 0, 0, 0, NULL},
	{NULL, 0, 0, 0, 0, NULL},
};
#undef OFF

/* The aio section's target is the whole config: use_gds is not an
 * option of the handle. */
#define OFF(f) offsetof(struct nvs_config, f)
static const struct keydef aio_keys[] = {
	{"block_size", V_U32, OFF(aio.block_size), NVS_AIO_MAX_BLOCK_SIZE, 512,
	 NULL},
	{"queue_depth", V_U32, OFF(aio.queue_depth), NVS_AIO_MAX_QUEUE_DEPTH, 0,
	 NULL},
	{"intra_op_parallelism", V_U32, OFF(aio.intra_op_parallelism),
	 NVS_AIO_MAX_PARALLELISM, 0, NULL},
	{"thread_count", V_ALIAS, 0, 0, 0, "intra_op_parallelism"},
	{"num_threads", V_ALIAS, 0, 0, 0, "intra_op_parallelism"},
	{"single_submit", V_BOOL, OFF(aio.single_submit), 0, 0, NULL},
	{"overlap_events", V_BOOL, OFF(aio.overlap_events), 0, 0, NULL},
	{"use_gds", V_BOOL, OFF(use_gds), 0, 0, NULL},
	{NULL, 0, 0, 0, 0, NULL},
};
#undef OFF

#define OFF(f) offsetof(struct nvs_nvswap_config, f)
static const struct keydef nvswap_keys[] = {
	{"backend", V_BACKEND, OFF(backend), 0, 0, NULL},
	/* multiple: nvs_swapper_create's rule, judged here at its position */
	{"stripe_size", V_COUNT, OFF(stripe_size), 0, 4096, NULL},
	{"checksum", V_BOOL, OFF(checksum), 0, 0, NULL},
	{"nvme_paths", V_PATHS, 0, 0, 0, NULL}, /* the whole struct */
	{"auto_evict", V_BOOL, OFF(auto_evict), 0, 0, NULL},
	{NULL, 0, 0, 0, 0, NULL},
};
#undef OFF

static unsigned edit_distance(const char *a, const char *b)
{
	unsigned row[64], la = (unsigned)strlen(a), lb = (unsigned)strlen(b);

	if (lb >= 64 || la >= 64)
		return 99;
	for (unsigned j = 0; j <= lb; j++)
		row[j] = j;
	for (unsigned i = 1; i <= la; i++) {
		unsigned diag = row[0];
		row[0] = i;
		for (unsigned j = 1; j <= lb; j++) {
			unsigned up = row[j];
			unsigned best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

static const struct keydef *find_key(const struct keydef *defs, const char *k)
{
	for (const struct keydef *d = defs; d->name; d++)
		if (!strcmp(d->name, k))
			return d;
	return NULL;
}

static int unknown_key(const struct nvs_config *c, const struct keydef *defs,
		       const char *path, const char *k)
{
	const char *best = NULL;
	unsigned bd = 3;

	for (const struct keydef *d = defs; d->name; d++) {
		unsigned e = edit_distance(k, d->name);
		if (e < bd) {
			bd = e;
			best = d->name;
		}
	}
	if (best)
		return bad(c, -EINVAL, path, "unknown key (did you mean '%s'?)",
			   best);
	return bad(c, -EINVAL, path, "unknown key");
}

static int get_bool(const struct nvs_config *c, const char *path,
		    const json_t *v, bool *out)
{
	if (!json_is_boolean(v))
		return bad(c, -EINVAL, path, "must be true or false");
	*out = json_is_true(v);
	return 0;
}

/* A whole number >= @min; DeepSpeed's 1e8 style is a JSON real. */
static int get_count(const struct nvs_config *c, const char *path,
		     const json_t *v, uint64_t min, uint64_t *out)
{
	double d;

	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0 || (uint64_t)i < min)
			return bad(c, -EINVAL, path,
				   "must be a whole number of at least %llu "
				   "(got %lld)",
				   (unsigned long long)min, (long long)i);
		*out = (uint64_t)i;
		return 0;
	}
	if (!json_is_real(v))
		return bad(c, -EINVAL, path, "must be a number");
	d = json_real_value(v);
	if (!isfinite(d) || d != floor(d) || d < (double)min ||
	    d > 9007199254740992.0)
		return bad(c, -EINVAL, path,
			   "must be a whole number of at least %llu (got %g)",
			   (unsigned long long)min, d);
	*out = (uint64_t)d;
	return 0;
}

/* A directory nvswap may create swap files in. */
static int check_dir(const struct nvs_config *c, const char *path,
		     const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		return bad(c, -errno, path, "'%s': %s", dir,
			   nvs_strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return bad(c, -ENOTDIR, path, "'%s' is not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return bad(c, -errno, path,
			   "'%s': cannot create files there: %s", dir,
			   nvs_strerror(errno));
	return 0;
}

/* ----------------------------------------------------------- sections */

/* @dir (checked by check_dir) is not already in @o under another
 * spelling: the swapper would lock it twice and refuse itself. */
static int same_dir_twice(const struct nvs_config *c, const char *path,
			  const struct nvs_nvswap_config *o, const char *dir)
{
	struct stat a, b;

	if (stat(dir, &a) < 0)
		return 0; /* check_dir just saw it; the swapper will say */
	for (unsigned i = 0; i < o->npaths; i++)
		if (stat(o->nvme_paths[i], &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino)
			return bad(c, -EINVAL, path,
				   "entries %u ('%s') and %u ('%s') are the "
				   "same directory: give each directory once",
				   i, o->nvme_paths[i], o->npaths, dir);
	return 0;
}

static int set_paths(const struct nvs_config *c, const char *path, json_t *v,
		     struct nvs_nvswap_config *o)
{
	int ret;

	if (!json_is_array(v) || json_array_size(v) == 0 ||
	    json_array_size(v) > NVS_CONFIG_MAX_PATHS)
		return bad(c, -EINVAL, path,
			   "must be a list of 1 to %d directories",
			   NVS_CONFIG_MAX_PATHS);
	for (size_t i = 0; i < json_array_size(v); i++) {
		const char *p = json_string_value(json_array_get(v, i));
		if (!p || !*p)
			return bad(c, -EINVAL, path,
				   "entry %zu is not a non-empty string", i);
		ret = check_dir(c, path, p);
		if (ret < 0)
			return ret;
		ret = same_dir_twice(c, path, o, p);
		if (ret < 0)
			return ret;
		o->nvme_paths[o->npaths++] = p;
	}
	return 0;
}

/* Check @v as @d says and store it at @field. */
static int set_value(struct nvs_config *c, const char *path,
		     const struct keydef *d, json_t *v, void *field)
{
	const char *s = json_string_value(v);
	uint64_t n;
	int ret;

	switch (d->kind) {
	case V_BOOL:
		return get_bool(c, path, v, field);
	case V_COUNT:
	case V_COUNT0:
		ret = get_count(c, path, v, d->kind == V_COUNT, field);
		if (ret == 0 && d->multiple && *(uint64_t *)field % d->multiple)
			return bad(c, -EINVAL, path,
				   "must be a positive multiple of %u (got "
				   "%" PRIu64 ")",
				   d->multiple, *(uint64_t *)field);
		return ret;
	case V_U32:
		ret = get_count(c, path, v, 1, &n);
		if (ret < 0)
			return ret;
		if (d->multiple && (n % d->multiple || n > d->max))
			return bad(c, -EINVAL, path,
				   "must be a multiple of %u up to %u",
				   d->multiple, d->max);
		if (n > d->max)
			return bad(c, -EINVAL, path, "at most %u", d->max);
		*(uint32_t *)field = (uint32_t)n;
		return 0;
	case V_STRING:
		if (!s || !*s)
			return bad(c, -EINVAL, path,
				   "must be a non-empty string");
		*(const char **)field = s;
		return 0;
	case V_DEVICE:
		if (s && !strcmp(s, "none"))
			*(enum nvs_offload_device *)field = NVS_DEVICE_NONE;
		else if (s && !strcmp(s, "cpu"))
			*(enum nvs_offload_device *)field = NVS_DEVICE_CPU;
		else if (s && !strcmp(s, "nvme"))
			*(enum nvs_offload_device *)field = NVS_DEVICE_NVME;
		else
			return bad(c, -EINVAL, path,
				   "must be \"none\", \"cpu\" or \"nvme\"");
		return 0;
	case V_BACKEND:
		for (enum nvs_backend b = NVS_BACKEND_AUTO;
		     b <= NVS_BACKEND_PSYNC; b++)
			if (s && !strcmp(s, nvs_backend_name(b))) {
				*(enum nvs_backend *)field = b;
				return 0;
			}
		return bad(c, -EINVAL, path,
			   "must be \"auto\", \"io_uring\", \"libaio\" or "
			   "\"psync\"");
	case V_PATHS:
		return set_paths(c, path, v, field);
	default: /* V_UNUSED */
		warn(c, path, "accepted, unused by nvswap");
		return 0;
	}
}

/* Check every key of the section at @path against @defs; values go into
 * @target. */
static int load_section(struct nvs_config *c, json_t *sec, const char *path,
			const struct keydef *defs, void *target)
{
	const char *k;
	json_t *v;
	char kp[PATH_MAX_KEY];

	if (!json_is_object(sec))
		return bad(c, -EINVAL, path, "must be an object");
	json_object_foreach(sec, k, v)
	{
		const struct keydef *d = find_key(defs, k);
		int ret;

		snprintf(kp, sizeof(kp), "%s.%s", path, k);
		if (!d)
			return unknown_key(c, defs, kp, k);
		if (d->kind == V_ALIAS) {
			warn(c, kp, "deprecated spelling of %s.%s", path,
			     d->alias_of);
			d = find_key(defs, d->alias_of);
		}
		ret = set_value(c, kp, d, v, (char *)target + d->off);
		if (ret < 0)
			return ret;
	}
	return 0;
}

static int load_offload(struct nvs_config *c, json_t *sec, const char *path,
			struct nvs_offload_config *o)
{
	char kp[PATH_MAX_KEY];
	int ret = load_section(c, sec, path, offload_keys, o);

	if (ret < 0)
		return ret;
	o->present = true;
	if (o->device != NVS_DEVICE_NVME)
		return 0;
	if (!o->nvme_path)
		return bad(c, -EINVAL, path,
			   "device \"nvme\" needs an nvme_path");
	snprintf(kp, sizeof(kp), "%s.nvme_path", path);
	return check_dir(c, kp, o->nvme_path);
}

/* ---------------------------------------------------------- load/free */

static void defaults(struct nvs_config *c)
{
	for (int i = 0; i < 2; i++) {
		struct nvs_offload_config *o = &c->off[i];
		*o = (struct nvs_offload_config){
			.buffer_count = i == NVS_OFFLOAD_PARAM ? 5 : 4,
			.buffer_size = 100000000ull,
			.max_in_cpu = 1000000000ull,
			.pin_memory = true,
		};
	}
	nvs_aio_opts_init(&c->aio);
	c->aio.queue_depth = 8; /* DeepSpeed's aio defaults */
	c->aio.overlap_events = true;
	c->nv.stripe_size = 1u << 20;
	c->nv.auto_evict = true; /* no default that can hang */
}

static int load_text(struct nvs_config *c, const char *text, size_t len)
{
	json_error_t e;
	json_t *zo, *sec;
	int ret;

	c->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
	if (!c->root)
		return nvs__err(-EINVAL, "%s:%d:%d: malformed JSON: %s",
				c->name, e.line, e.column, e.text);
	if (!json_is_object(c->root))
		return nvs__err(-EINVAL,
				"%s:1:1: the top level must be an "
				"object",
				c->name);
	index_positions(c, text);
	if (c->oom)
		return nvs__err(-ENOMEM, "nvs_config_load: out of memory");
	defaults(c);
	zo = json_object_get(c->root, "zero_optimization");
	if (zo && !json_is_object(zo)) /* as aio: null is, not "no offload" */
		return bad(c, -EINVAL, "zero_optimization",
			   "must be an object");
	if (zo) {
		sec = json_object_get(zo, "offload_param");
		if (sec) {
			ret = load_offload(c, sec,
					   "zero_optimization.offload_param",
					   &c->off[NVS_OFFLOAD_PARAM]);
			if (ret < 0)
				return ret;
		}
		sec = json_object_get(zo, "offload_optimizer");
		if (sec) {
			ret = load_offload(
				c, sec, "zero_optimization.offload_optimizer",
				&c->off[NVS_OFFLOAD_OPTIMIZER]);
			if (ret < 0)
				return ret;
		}
		/* A common mistake (it is in published examples): DeepSpeed
		 * reads aio only at the top level and drops this one
		 * silently. Say so. */
		if (json_object_get(zo, "aio"))
			warn(c, "zero_optimization.aio",
			     "ignored, as DeepSpeed ignores it: aio is a "
			     "top-level section; move it out of "
			     "zero_optimization for its settings to apply");
	}
	sec = json_object_get(c->root, "aio");
	if (sec && (ret = load_section(c, sec, "aio", aio_keys, c)) < 0)
		return ret;
	/* DeepSpeed would take GPUDirect Storage; nvswap has no such path
	 * yet, and a user who asked for it should not find out from the
	 * throughput. */
	if (c->use_gds)
		warn(c, "aio.use_gds",
		     "true, but nvswap has no GPUDirect Storage path yet: I/O "
		     "goes through pinned host memory");
	sec = json_object_get(c->root, "nvswap");
	if (sec &&
	    (ret = load_section(c, sec, "nvswap", nvswap_keys, &c->nv)) < 0)
		return ret;
	if (c->oom)
		return nvs__err(-ENOMEM, "nvs_config_load: out of memory");
	if (c->nv.backend != NVS_BACKEND_AUTO)
		c->aio.backend = c->nv.backend;
	return 0;
}

static int finish(struct nvs_config *c, int ret, struct nvs_config **out)
{
	if (ret < 0) {
		nvs_config_free(c);
		return ret;
	}
	*out = c;
	return 0;
}

int nvs_config_load_string(const char *json, const char *name,
			   struct nvs_config **out)
{
	struct nvs_config *c;

	if (!out)
		return nvs__err(-EINVAL, "nvs_config_load_string: out is NULL");
	*out = NULL;
	if (!json)
		return nvs__err(-EINVAL,
				"nvs_config_load_string: json is NULL");
	c = nvs__calloc(1, sizeof(*c));
	if (!c)
		return nvs__err(-ENOMEM, "nvs_config_load: out of memory");
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "<string>");
	return finish(c, load_text(c, json, strlen(json)), out);
}

int nvs_config_load(const char *path, struct nvs_config **out)
{
	struct nvs_config *c;
	struct stat st;
	char *text;
	ssize_t n;
	int fd, ret;

	if (!out)
		return nvs__err(-EINVAL, "nvs_config_load: out is NULL");
	*out = NULL;
	if (!path)
		return nvs__err(-EINVAL, "nvs_config_load: path is NULL");
	/* O_NONBLOCK: a FIFO must not block the open; fstat refuses it. */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return nvs__err(-errno, "nvs_config_load: %s: %s", path,
				nvs_strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size > MAX_FILE) {
		close(fd);
		return nvs__err(-EINVAL,
				"nvs_config_load: %s: not a regular file of "
				"at most %u bytes",
				path, MAX_FILE);
	}
	text = nvs__malloc((size_t)st.st_size + 1);
	c = nvs__calloc(1, sizeof(*c));
	if (!text || !c) {
		close(fd);
		nvs__free(text);
		nvs__free(c);
		return nvs__err(-ENOMEM, "nvs_config_load: out of memory");
	}
	n = read(fd, text, (size_t)st.st_size);
	ret = n < 0 ? -errno : 0;
	close(fd);
	if (ret < 0) {
		nvs__free(text);
		nvs__free(c);
		return nvs__err(ret, "nvs_config_load: %s: %s", path,
				nvs_strerror(-ret));
	}
	text[n] = 0;
	snprintf(c->name, sizeof(c->name), "%s", path);
	ret = load_text(c, text, (size_t)n);
	nvs__free(text);
	return finish(c, ret, out);
}

void nvs_config_free(struct nvs_config *cfg)
{
	if (!cfg)
		return;
	for (unsigned i = 0; i < cfg->nwarn; i++)
		nvs__free(cfg->warn[i]);
	if (cfg->root)
		json_decref(cfg->root);
	nvs__free(cfg->pos);
	nvs__free(cfg);
}

/* ---------------------------------------------------------- accessors */

int nvs_config_offload(const struct nvs_config *cfg,
		       enum nvs_offload_kind which,
		       struct nvs_offload_config *out)
{
	if (!cfg || !out ||
	    (which != NVS_OFFLOAD_PARAM && which != NVS_OFFLOAD_OPTIMIZER))
		return nvs__err(-EINVAL, "nvs_config_offload: bad argument");
	*out = cfg->off[which];
	return 0;
}

int nvs_config_aio_opts(const struct nvs_config *cfg, struct nvs_aio_opts *opts)
{
	if (!cfg || !opts)
		return nvs__err(-EINVAL, "nvs_config_aio_opts: NULL argument");
	*opts = cfg->aio;
	return 0;
}

bool nvs_config_use_gds(const struct nvs_config *cfg)
{
	return cfg && cfg->use_gds;
}

int nvs_config_nvswap(const struct nvs_config *cfg,
		      struct nvs_nvswap_config *out)
{
	if (!cfg || !out)
		return nvs__err(-EINVAL, "nvs_config_nvswap: NULL argument");
	*out = cfg->nv;
	return 0;
}

const char *nvs_config_warning(const struct nvs_config *cfg, unsigned i)
{
	return cfg && i < cfg->nwarn ? cfg->warn[i] : NULL;
}

int nvs_config_swapper_opts(const struct nvs_config *cfg,
			    enum nvs_offload_kind which, int rank,
			    struct nvs_swapper_opts *opts)
{
	static const char *const names[] = {"offload_param",
					    "offload_optimizer"};
	const struct nvs_offload_config *off;
	uint64_t elem, bytes;

	if (!cfg || !opts || opts->size != sizeof(*opts) || rank < 0 ||
	    (which != NVS_OFFLOAD_PARAM && which != NVS_OFFLOAD_OPTIMIZER))
		return nvs__err(-EINVAL, "nvs_config_swapper_opts: NULL "
					 "argument, opts not from "
					 "nvs_swapper_opts_init(), a negative "
					 "rank or an unknown section");
	off = &cfg->off[which];
	if (off->device != NVS_DEVICE_NVME)
		return nvs__err(-EINVAL,
				"%s: zero_optimization.%s.device is \"%s\", "
				"not \"nvme\": there is nothing to swap",
				cfg->name, names[which],
				off->device == NVS_DEVICE_CPU ? "cpu" : "none");
	elem = opts->elem_size ? opts->elem_size
			       : (which == NVS_OFFLOAD_PARAM ? 2 : 4);
	if (off->buffer_size > SIZE_MAX / elem)
		return nvs__err(-EINVAL,
				"%s: zero_optimization.%s.buffer_size %" PRIu64
				" x %" PRIu64 " bytes overflows",
				cfg->name, names[which], off->buffer_size,
				elem);
	bytes = off->buffer_size * elem;
	if (off->buffer_count > 65536)
		return nvs__err(-EINVAL,
				"%s: zero_optimization.%s.buffer_count %" PRIu64
				" is more than 65536 buffers",
				cfg->name, names[which], off->buffer_count);
	if (cfg->nv.npaths) {
		opts->npaths = cfg->nv.npaths;
		for (unsigned i = 0; i < cfg->nv.npaths; i++)
			opts->nvme_paths[i] = cfg->nv.nvme_paths[i];
	} else if (off->nvme_path) {
		opts->npaths = 1;
		opts->nvme_paths[0] = off->nvme_path;
	} else {
		return nvs__err(-EINVAL,
				"%s: zero_optimization.%s has device \"nvme\" "
				"but no nvme_path (nor nvswap.nvme_paths)",
				cfg->name, names[which]);
	}
	opts->name = which == NVS_OFFLOAD_PARAM ? "param" : "optimizer";
	opts->rank = rank;
	opts->elem_size = (size_t)elem;
	opts->buffer_size = (size_t)bytes;
	opts->buffer_count = (unsigned)off->buffer_count;
	opts->pin_memory = off->pin_memory;
	opts->stripe_size = cfg->nv.stripe_size;
	opts->checksum = cfg->nv.checksum;
	opts->auto_evict = cfg->nv.auto_evict;
	opts->aio = cfg->aio;
	return 0;
}
