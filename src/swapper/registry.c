// SPDX-License-Identifier: MIT
/*
 * The tensor registry: register (place a tensor in the swap space, grow
 * the files, write its initial data) and unregister (give its space and
 * disk blocks back), lookup by id, and a tensor's kept failure.
 */
#include "swapper/registry.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/hash.h"
#include "internal/util.h"
#include "swapper/backing.h"
#include "swapper/crc32c.h"
#include "swapper/io.h"
#include "swapper/persist.h"
#include "swapper/room.h"
#include "swapper/space.h"
#include "swapper/step.h"
#include "swapper/swapper.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int nvs__no_tensor(uint64_t id, const char *call)
{
	return nvs__err(-ENOENT, "%s: no tensor %" PRIu64 " is registered",
			call, id);
}

int nvs__refuse_readonly(const struct nvs_swapper *s, const char *call)
{
	if (!s->readonly)
		return 0;
	return nvs__err(-EROFS,
			"%s: the set in %s was opened read-only (persist "
			"readonly): nothing in it can change; open it "
			"persistent to write",
			call, s->path[0].dir.path);
}

int nvs__tensor_idle(struct nvs_swapper *s, uint64_t id, const char *call,
		     struct tensor **out, bool *waited)
{
	for (;;) {
		struct tensor *t = nvs__tensor_find(s, id);
		if (!t)
			return nvs__no_tensor(id, call);
		if (!t->busy) {
			*out = t;
			return 0;
		}
		nvs__wait_change(s);
		if (waited)
			*waited = true;
	}
}

void nvs__keep_msg(char **dst, const char *msg)
{
	size_t n = strlen(msg) + 1;

	nvs__free(*dst);
	*dst = nvs__malloc(n);
	if (*dst)
		memcpy(*dst, msg, n);
}

void nvs__keep_error(struct tensor *t, int err, const char *msg)
{
	t->err = err;
	nvs__keep_msg(&t->errmsg, msg);
}

int nvs__take_error(struct tensor *t)
{
	int err = t->err;

	if (!err)
		return 0;
	if (t->errmsg)
		nvs__err_set(err, t->errmsg);
	else
		nvs__err(err, "nvswap: tensor %" PRIu64 ": I/O failed: %s",
			 t->id, nvs_strerror(-err));
	t->err = 0;
	nvs__free(t->errmsg);
	t->errmsg = NULL;
	return err;
}

static size_t extent_count(const struct nvs_swapper *s, size_t nbytes)
{
	if (s->npaths == 1 || nbytes < s->stripe)
		return 1;
	return (nbytes + s->stripe - 1) / s->stripe;
}

struct tensor *nvs__tensor_alloc(const struct nvs_swapper *s, uint64_t id,
				 size_t nbytes)
{
	size_t n = extent_count(s, nbytes), arrays = s->pers ? 2 : 1;
	struct tensor *t;

	t = nvs__calloc(1, sizeof(*t) + n * (arrays * sizeof(*t->ext) +
					     sizeof(*t->tickets)));
	if (!t)
		return NULL;
	t->id = id;
	t->nbytes = nbytes;
	t->state = NVS_TENSOR_ON_NVME;
	t->nexts = n;
	t->ext = (struct nvs_extent *)(t + 1);
	t->alt = s->pers ? t->ext + n : NULL;
	t->tickets = (uint64_t *)(t->ext + arrays * n);
	return t;
}

void nvs__tensor_free(struct tensor *t)
{
	if (!t)
		return;
	nvs__free(t->errmsg);
	nvs__free(t->io_msg);
	nvs__free(t->tag);
	nvs__free(t->kept);
	nvs__backing_free(t->bk);
	nvs__free(t);
}

int nvs__grow_files(struct nvs_swapper *s)
{
	for (unsigned i = 0; i < s->npaths; i++) {
		struct path *p = &s->path[i];
		uint64_t end = s->space[i].end;
		if (end <= p->file_size)
			continue;
		if (ftruncate(p->fd, (off_t)end) < 0)
			return nvs__err(-errno,
					"nvswap: growing %s to %" PRIu64
					" bytes: %s",
					p->file, end, nvs_strerror(errno));
		p->file_size = end;
	}
	return 0;
}

static void unplace(struct nvs_swapper *s, struct tensor *t)
{
	nvs__space_release(s->space, t->ext, t->nexts);
}

void nvs__punch_extents(struct nvs_swapper *s, const struct nvs_extent *ext,
			size_t n)
{
	if (s->keep_blocks)
		return; /* kept for the next tensor placed there */
	for (size_t i = 0; i < n; i++) {
		const struct nvs_extent *e = &ext[i];
		fallocate(s->path[e->path].fd,
			  FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)e->off, (off_t)nvs__io_len(s, e));
	}
}

/* A written tensor's blocks back to the filesystem (see
 * nvs__punch_extents(): not with opts.keep_blocks). */
static void punch(struct nvs_swapper *s, const struct tensor *t)
{
	if (t->on_disk || t->stale)
		nvs__punch_extents(s, t->ext, t->nexts);
}

int nvs__swapper_clear(struct nvs_swapper *s, uint64_t id, const char *call)
{
	struct tensor *t = NULL;
	int ret;

	NVS__PARENT_ONLY(s, call, "swapper");
	pthread_mutex_lock(&s->lock);
	for (;;) {
		ret = nvs__tensor_idle(s, id, call, &t, NULL);
		if (ret < 0)
			goto out;
		if (t->pins) {
			ret = nvs__err(-EBUSY,
				       "%s: tensor %" PRIu64
				       " is acquired %u time(s)",
				       call, id, t->pins);
			goto out;
		}
		if (t->on != &s->flight)
			break;
		nvs__collect(s, t);
	}
	/* An undoable step keeps the value at its open. */
	if (nvs__step_covers(s, t) && (ret = nvs__step_diverge(s, t)) < 0)
		goto out;
	ret = 0;
	nvs__tlist_remove(t);
	if (t->buf)
		nvs__buffer_put(s, t);
	t->state = NVS_TENSOR_ON_NVME;
	t->dirty = false;
	if (t->on_disk)
		t->stale = true; /* punched at unregister all the same */
	t->on_disk = false;	 /* reads as zeros; its blocks stay its own */
	t->backed = false;	 /* (not its file's bytes either) */
	t->err = 0;
	nvs__free(t->errmsg);
	t->errmsg = NULL;
	pthread_cond_broadcast(&s->cond);
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs__tensor_add(struct nvs_swapper *s, uint64_t id, size_t nbytes,
		    const char *call, struct tensor **out)
{
	struct tensor *t;
	size_t placed;
	int ret;

	if (!nbytes)
		return nvs__err(-EINVAL, "%s: tensor %" PRIu64 " has 0 bytes",
				call, id);
	if (nbytes > s->max_bytes)
		return nvs__err(-EFBIG,
				"%s: tensor %" PRIu64
				" is %zu bytes, larger than the pool's "
				"buffer_size of %zu bytes",
				call, id, nbytes, s->max_bytes);
	if (nvs__tensor_find(s, id))
		return nvs__err(-EEXIST,
				"%s: tensor %" PRIu64 " is already registered",
				call, id);
	t = nvs__tensor_alloc(s, id, nbytes);
	if (!t)
		return nvs__err(-ENOMEM, "%s: out of memory", call);
	ret = nvs__space_place(s->space, s->npaths, s->stripe, nbytes, t->ext,
			       t->nexts, &placed);
	if (ret < 0) {
		nvs__free(t);
		return nvs__err(ret,
				"%s: no room for tensor %" PRIu64
				" (%zu bytes): %s",
				call, id, nbytes, nvs_strerror(-ret));
	}
	t->nexts = placed;
	ret = nvs__grow_files(s);
	if (ret < 0)
		goto out_unplace;
	if (s->pers) {
		if ((ret = nvs__persist_placed(s, t)) < 0)
			goto out_unplace;
		s->pers->changed = true; /* a new tensor */
	}
	nvs__hash_oom = 0;
	HASH_ADD(hh, s->table, id, sizeof(t->id), t);
	if (nvs__hash_oom) {
		ret = nvs__err(-ENOMEM, "%s: out of memory", call);
		goto out_unplace;
	}
	s->st.tensors++;
	s->st.tensor_bytes += nbytes;
	*out = t;
	return 0;
out_unplace:
	if (s->pers)
		nvs__xref_forget(s->pers, t);
	unplace(s, t);
	nvs__free(t);
	return ret;
}

void nvs__tensor_unadd(struct nvs_swapper *s, struct tensor *t)
{
	HASH_DEL(s->table, t);
	s->st.tensors--;
	s->st.tensor_bytes -= t->nbytes;
	pthread_cond_broadcast(&s->cond);
	if (s->pers)
		nvs__persist_unplace(s, t); /* gives the space back */
	else
		unplace(s, t);
	nvs__tensor_free(t);
}

int nvs_swapper_register(struct nvs_swapper *s, uint64_t id, size_t nbytes,
			 const void *init)
{
	struct tensor *t;
	size_t queued;
	int ret;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_register: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_register", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_register") < 0)
		return -EROFS;
	pthread_mutex_lock(&s->lock);
	ret = nvs__tensor_add(s, id, nbytes, "nvs_swapper_register", &t);
	if (ret < 0 || !init) {
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	/* Write the initial data straight from the caller's memory (the
	 * handle stages what is unaligned); others wait while busy. */
	t->busy = true;
	ret = nvs__submit_extents(s, t, NVS_AIO_WRITE, (void *)(uintptr_t)init,
				  false, &queued);
	if (ret < 0)
		ret = nvs__drain_failed_submit(s, t, queued, true, ret);
	pthread_mutex_unlock(&s->lock);
	if (ret == 0)
		ret = nvs__wait_tickets(s, t, 0, queued, true);
	t->crc = s->checksum ? nvs__crc32c(0, init, nbytes) : 0;
	pthread_mutex_lock(&s->lock);
	t->busy = false;
	if (ret < 0) {
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		s->st.io_errors++;
		nvs__tensor_unadd(s, t);
		nvs__err(ret,
			 "nvs_swapper_register: writing tensor %" PRIu64
			 " failed, it is not registered: %s",
			 id, msg);
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	t->on_disk = true;
	s->st.writes++;
	s->st.bytes_written += nbytes;
	nvs__count_path_bytes(s, t, true);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int nvs_swapper_unregister(struct nvs_swapper *s, uint64_t id)
{
	struct tensor *t = NULL;

	if (!s)
		return nvs__err(-EINVAL,
				"nvs_swapper_unregister: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_unregister", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_unregister") < 0)
		return -EROFS;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		int ret = nvs__tensor_idle(s, id, "nvs_swapper_unregister", &t,
					   NULL);
		if (ret < 0) {
			pthread_mutex_unlock(&s->lock);
			return ret;
		}
		if (t->pins) {
			pthread_mutex_unlock(&s->lock);
			return nvs__err(-EBUSY,
					"nvs_swapper_unregister: tensor "
					"%" PRIu64 " is acquired %u time(s)",
					id, t->pins);
		}
		if (t->on == &s->flight) {
			nvs__collect(s, t);
			continue;
		}
		break;
	}
	nvs__tlist_remove(t);
	if (t->buf)
		nvs__buffer_put(s, t);
	nvs__step_forget(s, t);
	if (s->pers) {
		nvs__persist_unplace(s, t);
	} else {
		punch(s, t);
		unplace(s, t);
	}
	HASH_DEL(s->table, t);
	s->st.tensors--;
	s->st.tensor_bytes -= t->nbytes;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	nvs__tensor_free(t);
	return 0;
}

int nvs_swapper_set_tag(struct nvs_swapper *s, uint64_t id, const void *tag,
			size_t len)
{
	uint8_t *copy = NULL;
	struct tensor *t;

	if (!s || (!tag && len))
		return nvs__err(-EINVAL, "nvs_swapper_set_tag: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_set_tag", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_set_tag") < 0)
		return -EROFS;
	if (len > NVS_SWAPPER_TAG_MAX)
		return nvs__err(-EINVAL,
				"nvs_swapper_set_tag: a %zu-byte tag for "
				"tensor %" PRIu64 " (at most %u)",
				len, id, NVS_SWAPPER_TAG_MAX);
	if (len && !(copy = nvs__malloc(len)))
		return nvs__err(-ENOMEM, "nvs_swapper_set_tag: out of memory");
	if (len)
		memcpy(copy, tag, len);
	pthread_mutex_lock(&s->lock);
	t = nvs__tensor_find(s, id);
	if (t) {
		nvs__free(t->tag);
		t->tag = copy;
		t->taglen = (uint16_t)len;
		if (s->pers)
			s->pers->changed = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (!t) {
		nvs__free(copy);
		return nvs__no_tensor(id, "nvs_swapper_set_tag");
	}
	return 0;
}

int nvs_swapper_get_tag(const struct nvs_swapper *cs, uint64_t id, void *buf,
			size_t cap)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct tensor *t;
	int len = 0;

	if (!s || (!buf && cap))
		return nvs__err(-EINVAL, "nvs_swapper_get_tag: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_get_tag", "swapper");
	pthread_mutex_lock(&s->lock);
	t = nvs__tensor_find(s, id);
	if (t) {
		len = t->taglen;
		if (len && cap)
			memcpy(buf, t->tag, NVS_MIN((size_t)len, cap));
	}
	pthread_mutex_unlock(&s->lock);
	return t ? len : nvs__no_tensor(id, "nvs_swapper_get_tag");
}

static int by_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int nvs_swapper_list(const struct nvs_swapper *cs, uint64_t *ids, size_t cap)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct tensor *t, *tmp;
	uint64_t *all;
	size_t n = 0;

	if (!s || (!ids && cap))
		return nvs__err(-EINVAL, "nvs_swapper_list: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_list", "swapper");
	pthread_mutex_lock(&s->lock);
	all = nvs__malloc((HASH_COUNT(s->table) + 1) * sizeof(*all));
	if (all) {
		HASH_ITER(hh, s->table, t, tmp)
		{
			all[n++] = t->id;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (!all)
		return nvs__err(-ENOMEM, "nvs_swapper_list: out of memory");
	qsort(all, n, sizeof(*all), by_id);
	if (n && cap)
		memcpy(ids, all, NVS_MIN(n, cap) * sizeof(*all));
	nvs__free(all);
	return (int)n;
}
