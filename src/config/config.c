// SPDX-License-Identifier: MIT
/*
 * The DeepSpeed-style config's public calls: loading (jansson parses and
 * refuses duplicate keys; positions.c indexes where keys stand, schema.c
 * checks the sections), freeing, and the accessors. A loaded config owns
 * the jansson tree: strings handed out are borrowed from it.
 */
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "config/config_impl.h"
#include "config/positions.h"
#include "config/schema.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE (16u << 20) /* a config larger than this is a mistake */

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
	c->nv.auto_evict = true;	/* no default that can hang */
	c->nv.split_queue_depth = true; /* a node's ranks share the disk */
	c->nv.wait_ms = NVS_SWAPPER_WAIT_MS_DEFAULT;
	c->nv.lookahead = 1; /* as nvs_param_swapper_opts_init() */
	c->nv.keep_generations = 2;
	c->nv.rank = NVS_RANK_AUTO;
}

static int load_text(struct nvs_config *c, const char *text, size_t len)
{
	json_error_t e;

	c->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
	if (!c->root)
		return nvs__err(-EINVAL, "%s:%d:%d: malformed JSON: %s",
				c->name, e.line, e.column, e.text);
	if (!json_is_object(c->root))
		return nvs__err(-EINVAL,
				"%s:1:1: the top level must be an "
				"object",
				c->name);
	nvs__config_index_positions(c, text);
	if (c->oom)
		return nvs__err(-ENOMEM, "nvs_config_load: out of memory");
	defaults(c);
	return nvs__config_load_sections(c);
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
	/* A FIFO must not block the open: refused by its type. */
	fd = nvs__open_file(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0, &st);
	if (fd < 0)
		return nvs__err(-errno, "nvs_config_load: %s: %s", path,
				nvs_strerror(errno));
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size > MAX_FILE) {
		close(fd);
		if (!S_ISREG(st.st_mode))
			return nvs__err(-EINVAL,
					"nvs_config_load: %s: is %s, not a "
					"regular file of at most %u bytes",
					path, nvs__file_type(st.st_mode),
					MAX_FILE);
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

	struct nvs_launch launch;
	int ret;

	if (!cfg || !opts || opts->size != sizeof(*opts) ||
	    (rank < 0 && rank != NVS_RANK_AUTO) ||
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
	/* The launcher is read only when the rank or the split needs it:
	 * a refused variable should not fail a config that does not. */
	if ((rank == NVS_RANK_AUTO && cfg->nv.rank == NVS_RANK_AUTO) ||
	    cfg->nv.node_queue_depth) {
		ret = nvs_launch_detect(&launch);
		if (ret < 0)
			return ret;
	} else {
		launch = (struct nvs_launch){0, 1, 0, 1, "none"};
	}
	if (rank == NVS_RANK_AUTO)
		rank = cfg->nv.rank != NVS_RANK_AUTO ? cfg->nv.rank
						     : launch.rank;
	opts->name = which == NVS_OFFLOAD_PARAM ? "param" : "optimizer";
	opts->rank = rank;
	opts->elem_size = (size_t)elem;
	opts->buffer_size = (size_t)bytes;
	opts->buffer_count = (unsigned)off->buffer_count;
	opts->pin_memory = off->pin_memory;
	opts->stripe_size = cfg->nv.stripe_size;
	opts->checksum = cfg->nv.checksum;
	opts->page_cache = cfg->nv.page_cache;
	opts->auto_evict = cfg->nv.auto_evict;
	opts->wait_ms = cfg->nv.wait_ms;
	opts->persist = cfg->nv.persist;
	opts->keep_generations = cfg->nv.keep_generations;
	opts->aio = cfg->aio;
	if (cfg->nv.node_queue_depth) {
		uint32_t qd =
			cfg->nv.node_queue_depth / (uint32_t)launch.local_size;
		opts->aio.queue_depth = qd ? qd : 1;
	} else if (cfg->nv.split_queue_depth) {
		/* The node's ranks share the depth by default (issue 49):
		 * a launcher that cannot be read leaves it whole. */
		opts->aio.queue_depth =
			nvs_launch_share_queue(opts->aio.queue_depth);
	}
	return 0;
}
