// SPDX-License-Identifier: MIT
/*
 * Making and unmaking a swapper (see create.h): options' defaults, the
 * checks of create's options, one swap file per path, the pool and the
 * aio handle sized for every op in flight, and freeing them all.
 */
#include "swapper/create.h"
#include "aio/handle.h"
#include "buffers/pool.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/hash.h"
#include "internal/util.h"
#include "swapper/backing.h"
#include "swapper/paths.h"
#include "swapper/persist.h"
#include "swapper/registry.h"
#include "swapper/space.h"
#include "swapper/swapdir.h"
#include "swapper/swapper.h"
#include "swapper/swapper_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/buffers.h"

void nvs_swapper_opts_init(struct nvs_swapper_opts *opts)
{
	if (!opts)
		return;
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->stripe_size = 1u << 20;
	opts->pin_memory = true;
	opts->auto_evict = true;
	opts->wait_ms = NVS_SWAPPER_WAIT_MS_DEFAULT;
	nvs_aio_opts_init(&opts->aio);
}

const char *nvs_persist_name(unsigned persist)
{
	static const char *const names[] = {
		[NVS_PERSIST_SCRATCH] = "scratch",
		[NVS_PERSIST_PERSISTENT] = "persistent",
		[NVS_PERSIST_RESUME] = "resume",
		[NVS_PERSIST_READONLY] = "readonly",
	};

	return persist < NVS_ARRAY_SIZE(names) ? names[persist] : NULL;
}

static int open_path(struct nvs_swapper *s, unsigned i, const char *nvme_path,
		     const struct nvs_swapper_opts *o)
{
	struct path *p = &s->path[i];
	struct nvs_dio_align a;
	int ret;

	if (o->persist == NVS_PERSIST_READONLY)
		ret = nvs__swapdir_open_ro(nvme_path, o->name, o->rank,
					   &p->dir);
	else
		ret = nvs__swapdir_make(nvme_path, o->name, o->rank, &p->dir);
	if (ret < 0)
		return ret;
	if (o->persist) {
		ret = nvs__persist_data_file(s, i);
		if (ret < 0)
			return ret;
	} else {
		p->fd = nvs__swapdir_create(&p->dir, "0",
					    o->page_cache ? 0 : O_DIRECT);
		if (p->fd < 0)
			return nvs__err(p->fd, "nvswap: %s/swap.0: %s",
					p->dir.path, nvs_strerror(-p->fd));
		/* (dir.path is shorter than file by more than the
		 * suffix.) */
		size_t n = strnlen(p->dir.path, sizeof(p->dir.path) - 1);
		memcpy(p->file, p->dir.path, n);
		memcpy(p->file + n, "/swap.0", sizeof("/swap.0"));
		p->direct = (fcntl(p->fd, F_GETFL) & O_DIRECT) != 0;
	}
	if (nvs_dio_alignment(p->fd, &a) == 0)
		s->align =
			NVS_MAX(s->align, NVS_MAX(a.offset_align, a.mem_align));
	return 0;
}

/* The levels of a missing nvme_path, made before anything else (so that
 * two spellings of one new directory are found to be one), or the level
 * that cannot be made named in the error. */
static int make_paths(const struct nvs_swapper_opts *o)
{
	char level[4096];
	int ret;

	if (o->persist == NVS_PERSIST_READONLY)
		return 0; /* a reader makes nothing */
	for (unsigned i = 0; i < o->npaths; i++) {
		ret = nvs__swapdir_mkpath(o->nvme_paths[i], false, level,
					  sizeof(level));
		if (ret < 0) {
			nvs__swapdir_mkpath_err(ret, o->nvme_paths[i], level);
			for (unsigned j = 0; j < i; j++)
				nvs__swapdir_rmpath(o->nvme_paths[j]);
			return ret;
		}
	}
	return 0;
}

/* A failed create takes back the levels it made (those still empty). */
static void unmake_paths(const struct nvs_swapper_opts *o)
{
	if (o->persist == NVS_PERSIST_READONLY)
		return;
	for (unsigned i = o->npaths; i--;)
		nvs__swapdir_rmpath(o->nvme_paths[i]);
}

void nvs__swapper_free(struct nvs_swapper *s)
{
	struct tensor *t, *tmp;

	bool scratch = !s->pers || s->discard;

	nvs__persist_free(s);
	HASH_ITER(hh, s->table, t, tmp)
	{
		HASH_DEL(s->table, t);
		if (t->buf)
			nvs_pool_put(s->pool, t->buf);
		nvs__tensor_free(t);
	}
	nvs_pool_destroy(s->pool);
	nvs__files_close(s);
	nvs_aio_destroy(s->faio); /* drained: every read was collected */
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++) {
		struct path *p = &s->path[i];
		if (p->fd >= 0)
			close(p->fd);
		nvs__space_fini(&s->space[i]);
		/* A persistent set keeps its files. */
		nvs__swapdir_close(&p->dir, scratch);
	}
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	nvs__free(s);
}

static int create(const struct nvs_swapper_opts *o,
		  const struct nvs_fault_plan *plan, struct nvs_swapper **out)
{
	struct nvs_pool_opts po;
	struct nvs_aio_opts ao;
	struct nvs_swapper *s;
	size_t max_ext;
	int ret;

	if (out)
		*out = NULL;
	if (!o || !out || o->size != sizeof(*o))
		return nvs__err(-EINVAL, "nvs_swapper_create: NULL argument "
					 "or opts not from "
					 "nvs_swapper_opts_init()");
	if (o->npaths == 0 || o->npaths > NVS_SWAPPER_MAX_PATHS)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: %u NVMe paths (1 to %u)",
				o->npaths, NVS_SWAPPER_MAX_PATHS);
	for (unsigned i = 0; i < o->npaths; i++)
		if (!o->nvme_paths[i] || !*o->nvme_paths[i])
			return nvs__err(-EINVAL,
					"nvs_swapper_create: nvme_paths[%u] "
					"is empty",
					i);
	/* "" would be the unnamed directory: a persistent set there takes
	 * the place every later scratch swapper on the path needs. */
	if (o->name && !*o->name)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: name is empty (NULL: "
				"<path>/nvswap/rank<R>/; a name: "
				"<path>/nvswap/<name>/rank<R>/)");
	if (!o->buffer_size || !o->buffer_count)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: buffer_size %zu x "
				"buffer_count %u: both must be > 0",
				o->buffer_size, o->buffer_count);
	if (!o->stripe_size || o->stripe_size % 4096)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: stripe_size %" PRIu64
				" is not a positive multiple of 4096",
				o->stripe_size);
	if (o->keep_blocks && o->persist != NVS_PERSIST_SCRATCH)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: keep_blocks is for "
				"scratch swap files; a %s set gives blocks "
				"back when no kept generation uses them",
				nvs_persist_name(o->persist)
					? nvs_persist_name(o->persist)
					: "persistent");
	if ((ret = make_paths(o)) < 0)
		return ret;
	if ((ret = nvs__paths_distinct(o->nvme_paths, o->npaths)) < 0) {
		unmake_paths(o);
		return ret;
	}
	s = nvs__calloc(1, sizeof(*s));
	if (!s) {
		unmake_paths(o);
		return nvs__err(-ENOMEM, "nvs_swapper_create: out of memory");
	}
	pthread_mutex_init(&s->lock, NULL);
	/* Timed waits for room run on the monotonic clock: a step of the
	 * wall clock neither lengthens nor cuts them. */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->born = nvs__fork_gen();
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++) {
		s->path[i].fd = -1;
		s->path[i].dir.dirfd = s->path[i].dir.lockfd = -1;
	}
	s->npaths = o->npaths;
	s->align = 4096;
	s->stripe = o->stripe_size;
	s->max_bytes = o->buffer_size;
	s->auto_evict = o->auto_evict;
	s->checksum = o->checksum;
	s->page_cache = o->page_cache;
	s->keep_blocks = o->keep_blocks;
	s->readonly = o->persist == NVS_PERSIST_READONLY;
	s->wait_ms = o->wait_ms ? o->wait_ms : NVS_SWAPPER_WAIT_MS_DEFAULT;
	for (unsigned i = 0; i < o->npaths; i++) {
		ret = open_path(s, i, o->nvme_paths[i], o);
		if (ret < 0)
			goto fail;
	}
	ret = nvs__persist_open(s, o);
	if (ret < 0)
		goto fail;
	if (s->stripe % s->align) {
		ret = nvs__err(-EINVAL,
			       "nvs_swapper_create: stripe_size %" PRIu64
			       " is not a multiple of the paths' O_DIRECT "
			       "alignment %" PRIu64,
			       s->stripe, s->align);
		goto fail;
	}
	for (unsigned i = 0; i < o->npaths; i++)
		nvs__space_init(&s->space[i], s->align);
	s->buf_size = nvs__round_up(o->buffer_size, s->align);
	if (s->buf_size < o->buffer_size) {
		ret = nvs__err(-EINVAL, "nvs_swapper_create: buffer_size "
					"overflows");
		goto fail;
	}
	nvs_pool_opts_init(&po);
	po.buffer_size = s->buf_size;
	po.buffer_count = o->buffer_count;
	po.alignment = (uint32_t)NVS_MAX(s->align, NVS_PINNED_ALIGN);
	po.allow_unpinned = !o->pin_memory;
	ret = nvs_pool_create(&po, &s->pool);
	if (ret < 0)
		goto fail;
	ao = o->aio;
	max_ext = o->npaths > 1 ? (s->buf_size + s->stripe - 1) / s->stripe : 1;
	if (!ao.max_ops) {
		/* Every op in flight belongs to a tensor holding a buffer,
		 * plus register's writes from init data. */
		uint64_t ops = ((uint64_t)o->buffer_count + 4) * max_ext + 64;
		ao.max_ops = (uint32_t)NVS_MAX(NVS_MIN(ops, 65536u), 1024u);
	}
	if (!ao.bounce_bytes)
		/* The swapper's own I/O is aligned, from pinned buffers:
		 * bounce memory only stages register's data from unaligned
		 * memory. Keep the pinned total near the pool's. */
		ao.bounce_bytes = 256u << 10;
	s->aio_opts = ao;
	ret = plan ? nvs__aio_create_fault(&ao, plan, &s->aio)
		   : nvs_aio_create(&ao, &s->aio);
	if (ret < 0)
		goto fail;
	{
		struct nvs_pool_stats ps;
		nvs_pool_stats(s->pool, &ps);
		s->st.pinned = ps.pinned;
	}
	ret = nvs__persist_restore(s);
	if (ret < 0)
		goto fail;
	s->st.checksum = s->checksum; /* a persistent set turned it on */
	if (s->readonly && s->path[0].dir.lockfd >= 0) {
		/* Its readers share the disks: each a share of the depth,
		 * counted by the set's shared lock (share.c). */
		struct stat lst;
		if (fstat(s->path[0].dir.lockfd, &lst) == 0)
			(void)nvs__share_file(s, lst.st_dev, lst.st_ino);
	}
	*out = s;
	return 0;
fail : {
	char msg[NVS_ERRMSG_MAX];
	snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	nvs_aio_destroy(s->aio);
	/* A set that holds no generation (a resume that found none, or a
	 * new one) goes with its data file and lock: it saved nothing. */
	if (s->pers && s->pers->empty && !s->readonly &&
	    nvs__persist_unlink(s) == 0)
		s->discard = true;
	nvs__swapper_free(s);
	unmake_paths(o);
	nvs__err_set(ret, msg);
	return ret;
}
}

int nvs_swapper_create(const struct nvs_swapper_opts *opts,
		       struct nvs_swapper **out)
{
	return create(opts, NULL, out);
}

int nvs__swapper_create_fault(const struct nvs_swapper_opts *opts,
			      const struct nvs_fault_plan *plan,
			      struct nvs_swapper **out)
{
	return create(opts, plan, out);
}
