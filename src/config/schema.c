// SPDX-License-Identifier: MIT
/*
 * The config's checked sections: a table per section says each key's type
 * and where its value goes; each value is checked (directories included)
 * and refused with its position, unknown keys get a "did you mean".
 */
#include "config/schema.h"
#include "config/config_impl.h"
#include "config/positions.h"
#include "internal/errors.h"
#include "nvswap/swapper.h"
#include "swapper/swapdir.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum vkind {
	V_BOOL,	   /* bool */
	V_COUNT,   /* uint64_t, whole number >= 1 (1e8 accepted) */
	V_COUNT0,  /* uint64_t, whole number >= 0 */
	V_U32,	   /* uint32_t, whole number >= 1, at most max, of multiple */
	V_U32_0,   /* as V_U32, 0 allowed */
	V_STRING,  /* const char *, non-empty, borrowed from the tree */
	V_DEVICE,  /* enum nvs_offload_device */
	V_BACKEND, /* enum nvs_backend */
	V_PERSIST, /* enum nvs_persist, as a uint8_t */
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
	{"page_cache", V_BOOL, OFF(page_cache), 0, 0, NULL},
	{"nvme_paths", V_PATHS, 0, 0, 0, NULL}, /* the whole struct */
	{"auto_evict", V_BOOL, OFF(auto_evict), 0, 0, NULL},
	{"wait_ms", V_U32, OFF(wait_ms), NVS_WAIT_FOREVER - 1, 0, NULL},
	{"lookahead", V_U32_0, OFF(lookahead), NVS_CONFIG_MAX_LOOKAHEAD, 0,
	 NULL},
	{"persist", V_PERSIST, OFF(persist), 0, 0, NULL},
	{"keep_generations", V_U32, OFF(keep_generations),
	 NVS_KEEP_GENERATIONS_MAX, 0, NULL},
	/* an int read as a uint32 up to INT_MAX: the same object */
	{"rank", V_U32_0, OFF(rank), 0x7fffffffu, 0, NULL},
	{"node_queue_depth", V_U32, OFF(node_queue_depth), 1u << 20, 0, NULL},
	{"split_queue_depth", V_BOOL, OFF(split_queue_depth), 0, 0, NULL},
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
		return nvs__config_bad(c, -EINVAL, path,
				       "unknown key (did you mean '%s'?)",
				       best);
	return nvs__config_bad(c, -EINVAL, path, "unknown key");
}

static int get_bool(const struct nvs_config *c, const char *path,
		    const json_t *v, bool *out)
{
	if (!json_is_boolean(v))
		return nvs__config_bad(c, -EINVAL, path,
				       "must be true or false");
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
			return nvs__config_bad(
				c, -EINVAL, path,
				"must be a whole number of at least %llu "
				"(got %lld)",
				(unsigned long long)min, (long long)i);
		*out = (uint64_t)i;
		return 0;
	}
	if (!json_is_real(v))
		return nvs__config_bad(c, -EINVAL, path, "must be a number");
	d = json_real_value(v);
	if (!isfinite(d) || d != floor(d) || d < (double)min ||
	    d > 9007199254740992.0)
		return nvs__config_bad(
			c, -EINVAL, path,
			"must be a whole number of at least %llu (got %g)",
			(unsigned long long)min, d);
	*out = (uint64_t)d;
	return 0;
}

/* A directory nvswap may create swap files in, or make (mkdir -p) when
 * the swapper is created. */
static int check_dir(const struct nvs_config *c, const char *path,
		     const char *dir)
{
	char level[4096];
	struct stat st;
	int ret;

	if (stat(dir, &st) < 0) {
		ret = nvs__swapdir_mkpath(dir, true, level, sizeof(level));
		if (ret == -ENOTDIR)
			return nvs__config_bad(c, ret, path,
					       "'%s': '%s' is not a directory",
					       dir, level);
		if (ret < 0 && stat(level, &st) < 0 && errno == ENOENT)
			return nvs__config_bad(c, ret, path,
					       "'%s': cannot create '%s': %s",
					       dir, level, nvs_strerror(-ret));
		if (ret < 0)
			return nvs__config_bad(c, ret, path, "'%s': %s", dir,
					       nvs_strerror(-ret));
		return 0; /* missing: the swapper makes it */
	}
	if (!S_ISDIR(st.st_mode))
		return nvs__config_bad(c, -ENOTDIR, path,
				       "'%s' is not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return nvs__config_bad(c, -errno, path,
				       "'%s': cannot create files there: %s",
				       dir, nvs_strerror(errno));
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
			return nvs__config_bad(
				c, -EINVAL, path,
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
		return nvs__config_bad(c, -EINVAL, path,
				       "must be a list of 1 to %d directories",
				       NVS_CONFIG_MAX_PATHS);
	for (size_t i = 0; i < json_array_size(v); i++) {
		const char *p = json_string_value(json_array_get(v, i));
		if (!p || !*p)
			return nvs__config_bad(
				c, -EINVAL, path,
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
			return nvs__config_bad(
				c, -EINVAL, path,
				"must be a positive multiple of %u (got "
				"%" PRIu64 ")",
				d->multiple, *(uint64_t *)field);
		return ret;
	case V_U32:
	case V_U32_0:
		ret = get_count(c, path, v, d->kind == V_U32, &n);
		if (ret < 0)
			return ret;
		if (d->multiple && (n % d->multiple || n > d->max))
			return nvs__config_bad(
				c, -EINVAL, path,
				"must be a multiple of %u up to %u",
				d->multiple, d->max);
		if (n > d->max)
			return nvs__config_bad(c, -EINVAL, path, "at most %u",
					       d->max);
		*(uint32_t *)field = (uint32_t)n;
		return 0;
	case V_STRING:
		if (!s || !*s)
			return nvs__config_bad(c, -EINVAL, path,
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
			return nvs__config_bad(
				c, -EINVAL, path,
				"must be \"none\", \"cpu\" or \"nvme\"");
		return 0;
	case V_BACKEND:
		for (enum nvs_backend b = NVS_BACKEND_AUTO;
		     b <= NVS_BACKEND_PSYNC; b++)
			if (s && !strcmp(s, nvs_backend_name(b))) {
				*(enum nvs_backend *)field = b;
				return 0;
			}
		return nvs__config_bad(
			c, -EINVAL, path,
			"must be \"auto\", \"io_uring\", \"libaio\" or "
			"\"psync\"");
	case V_PERSIST: {
		const char *name;
		for (uint8_t i = 0; (name = nvs_persist_name(i)); i++)
			if (s && !strcmp(s, name)) {
				*(uint8_t *)field = i;
				return 0;
			}
		return nvs__config_bad(c, -EINVAL, path,
				       "must be \"scratch\", \"persistent\", "
				       "\"resume\" or \"readonly\"");
	}
	case V_PATHS:
		return set_paths(c, path, v, field);
	default: /* V_UNUSED */
		nvs__config_warn(c, path, "accepted, unused by nvswap");
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
		return nvs__config_bad(c, -EINVAL, path, "must be an object");
	json_object_foreach(sec, k, v)
	{
		const struct keydef *d = find_key(defs, k);
		int ret;

		snprintf(kp, sizeof(kp), "%s.%s", path, k);
		if (!d)
			return unknown_key(c, defs, kp, k);
		if (d->kind == V_ALIAS) {
			nvs__config_warn(c, kp, "deprecated spelling of %s.%s",
					 path, d->alias_of);
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
		return nvs__config_bad(c, -EINVAL, path,
				       "device \"nvme\" needs an nvme_path");
	snprintf(kp, sizeof(kp), "%s.nvme_path", path);
	return check_dir(c, kp, o->nvme_path);
}

/* Every checked section of @c->root, into @c over its defaults. */
int nvs__config_load_sections(struct nvs_config *c)
{
	json_t *zo, *sec;
	int ret;

	zo = json_object_get(c->root, "zero_optimization");
	if (zo && !json_is_object(zo)) /* as aio: null is, not "no offload" */
		return nvs__config_bad(c, -EINVAL, "zero_optimization",
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
			nvs__config_warn(
				c, "zero_optimization.aio",
				"ignored, as DeepSpeed ignores it: aio is a "
				"top-level section; move it out of "
				"zero_optimization for its settings to apply");
	}
	sec = json_object_get(c->root, "aio");
	if (sec && (ret = load_section(c, sec, "aio", aio_keys, c)) < 0)
		return ret;
	/* DeepSpeed would take GPUDirect Storage for the swappers' buffers;
	 * nvswap's swappers hold host memory (pinned pool buffers), where
	 * cuFile has nothing to do, and a user who asked for it should not
	 * find out from the throughput. */
	if (c->use_gds)
		nvs__config_warn(
			c, "aio.use_gds",
			"true, but the swap manager's buffers are pinned host "
			"memory: cuFile (GPUDirect Storage) moves device "
			"memory only, on handles made with use_gds "
			"(nvs_aio_opts.use_gds, nvswap.gds_handle)");
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
