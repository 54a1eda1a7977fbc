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
#include "swapper/crc32c.h"
#include "swapper/io.h"
#include "swapper/room.h"
#include "swapper/space.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int nvs__no_tensor(uint64_t id, const char *call)
{
	return nvs__err(-ENOENT, "%s: no tensor %" PRIu64 " is registered",
			call, id);
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

/* Grow the swap files to cover their spaces, so padded reads of a file's
 * last tensor stay inside it. Lock held. */
static int grow_files(struct nvs_swapper *s)
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

/* Give a written tensor's blocks back to the filesystem, so that freeing
 * tensors frees disk space (a full disk recovers). Best effort: a
 * filesystem without hole punching keeps them until destroy. */
static void punch(struct nvs_swapper *s, const struct tensor *t)
{
	if (!t->on_disk)
		return;
	for (size_t i = 0; i < t->nexts; i++) {
		const struct nvs_extent *e = &t->ext[i];
		fallocate(s->path[e->path].fd,
			  FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)e->off, (off_t)nvs__io_len(s, e));
	}
}

int nvs_swapper_register(struct nvs_swapper *s, uint64_t id, size_t nbytes,
			 const void *init)
{
	struct tensor *t;
	size_t n, placed, queued;
	int ret;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_register: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_register", "swapper");
	if (!nbytes)
		return nvs__err(-EINVAL,
				"nvs_swapper_register: tensor %" PRIu64
				" has 0 bytes",
				id);
	if (nbytes > s->max_bytes)
		return nvs__err(-EFBIG,
				"nvs_swapper_register: tensor %" PRIu64
				" is %zu bytes, larger than the pool's "
				"buffer_size of %zu bytes",
				id, nbytes, s->max_bytes);
	n = extent_count(s, nbytes);
	t = nvs__calloc(1, sizeof(*t) +
				   n * (sizeof(*t->ext) + sizeof(*t->tickets)));
	if (!t)
		return nvs__err(-ENOMEM, "nvs_swapper_register: out of memory");
	t->id = id;
	t->nbytes = nbytes;
	t->state = NVS_TENSOR_ON_NVME;
	t->ext = (struct nvs_extent *)(t + 1);
	t->tickets = (uint64_t *)(t->ext + n);

	pthread_mutex_lock(&s->lock);
	if (nvs__tensor_find(s, id)) {
		ret = nvs__err(-EEXIST,
			       "nvs_swapper_register: tensor %" PRIu64
			       " is already registered",
			       id);
		goto out_free;
	}
	ret = nvs__space_place(s->space, s->npaths, s->stripe, nbytes, t->ext,
			       n, &placed);
	if (ret < 0) {
		ret = nvs__err(ret,
			       "nvs_swapper_register: no room for tensor "
			       "%" PRIu64 " (%zu bytes): %s",
			       id, nbytes, nvs_strerror(-ret));
		goto out_free;
	}
	t->nexts = placed;
	ret = grow_files(s);
	if (ret < 0)
		goto out_unplace;
	nvs__hash_oom = 0;
	HASH_ADD(hh, s->table, id, sizeof(t->id), t);
	if (nvs__hash_oom) {
		ret = nvs__err(-ENOMEM, "nvs_swapper_register: out of memory");
		goto out_unplace;
	}
	s->st.tensors++;
	s->st.tensor_bytes += nbytes;
	if (!init) {
		pthread_mutex_unlock(&s->lock);
		return 0;
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
		HASH_DEL(s->table, t);
		s->st.tensors--;
		s->st.tensor_bytes -= nbytes;
		s->st.io_errors++;
		pthread_cond_broadcast(&s->cond);
		nvs__err(ret,
			 "nvs_swapper_register: writing tensor %" PRIu64
			 " failed, it is not registered: %s",
			 id, msg);
		goto out_unplace;
	}
	t->on_disk = true;
	s->st.writes++;
	s->st.bytes_written += nbytes;
	nvs__count_path_bytes(s, t, true);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;

out_unplace:
	unplace(s, t);
out_free:
	pthread_mutex_unlock(&s->lock);
	nvs__free(t);
	return ret;
}

int nvs_swapper_unregister(struct nvs_swapper *s, uint64_t id)
{
	struct tensor *t = NULL;

	if (!s)
		return nvs__err(-EINVAL,
				"nvs_swapper_unregister: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_unregister", "swapper");
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
	punch(s, t);
	unplace(s, t);
	HASH_DEL(s->table, t);
	s->st.tensors--;
	s->st.tensor_bytes -= t->nbytes;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	nvs__free(t->errmsg);
	nvs__free(t->io_msg);
	nvs__free(t);
	return 0;
}
