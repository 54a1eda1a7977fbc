// SPDX-License-Identifier: MIT
/*
 * The swap manager's calls on registered tensors: prefetch, acquire,
 * release, evict, wait and wait_all, destroy, and what the swapper reports
 * (stats, a tensor's info, its directories). Each tensor read or write is
 * one ticketed aio op per extent (io.c), so a wait is per tensor.
 */
#include "swapper/swapper.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/hash.h"
#include "internal/util.h"
#include "swapper/backing.h"
#include "swapper/create.h"
#include "swapper/io.h"
#include "swapper/persist.h"
#include "swapper/registry.h"
#include "swapper/room.h"
#include "swapper/step.h"
#include "swapper/swapper_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nvswap/buffers.h"

struct nvs_aio *nvs__swapper_aio(struct nvs_swapper *s)
{
	return s->aio;
}

bool nvs__swapper_persistent(const struct nvs_swapper *s)
{
	return s && s->pers;
}

int nvs_swapper_wait_all(struct nvs_swapper *s)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct tensor *t, *tmp;
	unsigned more = 0;
	int err = 0;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_wait_all: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_wait_all", "swapper");
	pthread_mutex_lock(&s->lock);
	while (s->flight.n) {
		for (t = s->flight.head; t && t->busy; t = t->next)
			;
		if (t)
			nvs__collect(s, t);
		else
			nvs__wait_change(s);
	}
	HASH_ITER(hh, s->table, t, tmp)
	{
		if (!t->err)
			continue;
		if (!err) {
			err = nvs__take_error(t);
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		} else {
			nvs__take_error(t);
			more++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (err && more)
		nvs__err(err, "%s (and %u more tensors failed)", msg, more);
	else if (err)
		nvs__err_set(err, msg);
	return err;
}

int nvs_swapper_destroy(struct nvs_swapper *s)
{
	int ret, r;

	if (!s)
		return 0;
	NVS__PARENT_ONLY(s, "nvs_swapper_destroy", "swapper");
	/* A reader has nothing to save. */
	ret = s->pers && !s->readonly ? nvs__persist_close(s) : 0;
	r = nvs_swapper_wait_all(s);
	if (!ret)
		ret = r;
	r = nvs_aio_destroy(s->aio);
	if (!ret)
		ret = r;
	nvs__swapper_free(s);
	return ret;
}

int nvs_swapper_discard(struct nvs_swapper *s)
{
	int ret = 0;

	if (!s)
		return 0;
	NVS__PARENT_ONLY(s, "nvs_swapper_discard", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_discard") < 0)
		return -EROFS;
	/* The I/O in flight ends first (buffers are in it); its failures
	 * are moot, like a checkpoint's: nothing of the set stays. */
	if (s->pers)
		nvs_swapper_checkpoint_wait(s);
	nvs_swapper_wait_all(s);
	nvs_aio_destroy(s->aio);
	if (s->pers)
		ret = nvs__persist_unlink(s);
	if (ret < 0) {
		/* What stays is kept whole: the lock goes, the files stay
		 * for nvswap-fsck --repair. */
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		nvs__swapper_free(s);
		return nvs__err_set(ret, msg);
	}
	s->discard = true;
	for (unsigned i = 0; i < s->npaths; i++)
		s->path[i].dir.discard = true;
	nvs__swapper_free(s);
	return 0;
}

/* Bring ON_NVME @id toward residence. Lock held; loops until the tensor
 * is READING, RESIDENT or WRITING-with-revive, or fails. @brought (or
 * NULL) is set when this call started the read or kept the buffer of a
 * write-back. @blank: no read: the buffer as it is, RESIDENT and blank
 * (none of its bytes are the tensor's), for a caller that overwrites it. */
static int start_fetch(struct nvs_swapper *s, uint64_t id, const char *call,
		       bool *waited, bool prefetch, bool try, bool *brought,
		       bool blank)
{
	uint64_t deadline = nvs__room_deadline(s->wait_ms), t0 = 0;
	int ret;

	for (;;) {
		struct tensor *t = NULL;
		void *buf;
		if ((ret = nvs__tensor_idle(s, id, call, &t, waited)) < 0)
			break;
		if (t->state == NVS_TENSOR_WRITING && !t->revive) {
			t->revive = true;
			if (brought)
				*brought = true;
		}
		if (t->state != NVS_TENSOR_ON_NVME)
			break;
		if (t->nbytes > s->max_bytes) {
			/* a persistent set's, opened with smaller buffers */
			ret = nvs__err(-EFBIG,
				       "%s: tensor %" PRIu64 " is %zu bytes, "
				       "larger than buffer_size %zu (the set "
				       "was saved with larger buffers; "
				       "nvs_swapper_read() copies it out)",
				       call, id, t->nbytes, s->max_bytes);
			break;
		}
		buf = nvs__buffer_get(s);
		if (buf) {
			t->err = 0; /* a new read: an old failure is moot */
			nvs__free(t->errmsg);
			t->errmsg = NULL;
			if (blank) {
				t->buf = buf;
				t->state = NVS_TENSOR_RESIDENT;
				t->blank = true;
				nvs__tlist_push(&s->lru, t);
				ret = 0;
				break;
			}
			ret = nvs__start_read(s, t, buf);
			if (ret == 0 && prefetch)
				s->st.prefetches++;
			if (ret == 0 && brought)
				*brought = true;
			break;
		}
		if (try) {
			/* Finished write-backs only: never block. */
			if (nvs__reap_writes(s))
				continue;
			ret = nvs__err(-EAGAIN,
				       "%s: no free pool buffer for tensor "
				       "%" PRIu64,
				       call, id);
			break;
		}
		if (!t0) {
			s->st.buffer_waits++;
			t0 = nvs__now_ns();
		}
		*waited = true;
		ret = nvs__make_room(s, deadline, call, id);
		if (ret < 0)
			break;
	}
	if (t0)
		s->st.buffer_wait_ns += nvs__now_ns() - t0;
	return ret;
}

int nvs_swapper_prefetch(struct nvs_swapper *s, uint64_t id)
{
	bool waited = false;
	int ret;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_prefetch: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_prefetch", "swapper");
	nvs__share_tick(s);
	pthread_mutex_lock(&s->lock);
	ret = start_fetch(s, id, "nvs_swapper_prefetch", &waited, true, false,
			  NULL, false);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_try_prefetch(struct nvs_swapper *s, uint64_t id)
{
	bool waited = false;
	int ret;

	if (!s)
		return nvs__err(-EINVAL,
				"nvs_swapper_try_prefetch: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_try_prefetch", "swapper");
	nvs__share_tick(s);
	pthread_mutex_lock(&s->lock);
	ret = start_fetch(s, id, "nvs_swapper_try_prefetch", &waited, true,
			  true, NULL, false);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs__swapper_readahead(struct nvs_swapper *s, uint64_t id)
{
	bool waited = false, brought = false;
	int ret;

	NVS__PARENT_ONLY(s, "nvs_swapper_try_prefetch", "swapper");
	nvs__share_tick(s);
	pthread_mutex_lock(&s->lock);
	ret = start_fetch(s, id, "nvs_swapper_try_prefetch", &waited, true,
			  true, &brought, false);
	pthread_mutex_unlock(&s->lock);
	return ret < 0 ? ret : brought;
}

/* Count the acquire just made (pins already counts it) for its thread. */
static void pin_owner(struct tensor *t)
{
	unsigned others = t->pins - 1 - t->holder_pins;

	if (pthread_equal(t->holder, pthread_self())) {
		t->holder_pins++;
	} else if (others == 0) {
		t->other = pthread_self();
		t->other_multi = false;
	} else if (!pthread_equal(t->other, pthread_self())) {
		t->other_multi = true;
	}
}

/* Uncount a release (before pins drops). When the holder has none left
 * and one other thread holds the rest, that thread becomes the holder. */
static void unpin_owner(struct tensor *t)
{
	unsigned others = t->pins - t->holder_pins;

	if (t->holder_pins &&
	    (!others || pthread_equal(t->holder, pthread_self())))
		t->holder_pins--;
	if (t->holder_pins == 0 && others > 0 && !t->other_multi) {
		unsigned left = t->pins - 1;
		t->holder = t->other;
		t->holder_pins = left;
	}
}

/* Pin resident (or being written) @t for the calling thread; *@ptr its
 * buffer. */
static void hand_out(struct nvs_swapper *s, struct tensor *t, void **ptr,
		     bool waited)
{
	if (t->pins++ == 0) {
		if (t->state == NVS_TENSOR_RESIDENT)
			nvs__tlist_remove(t); /* off the lru */
		t->holder = pthread_self();
		t->holder_pins = 0;
	}
	pin_owner(t);
	*ptr = t->buf;
	s->st.acquires++;
	if (!waited)
		s->st.acquire_hits++;
}

/* nvs_swapper_acquire(), or with @blank nvs_swapper_acquire_blank(),
 * named @call. */
static int acquire(struct nvs_swapper *s, uint64_t id, void **ptr, bool blank,
		   const char *call)
{
	uint64_t t0 = nvs__now_ns();
	bool waited = false;
	int ret;

	if (ptr)
		*ptr = NULL;
	if (!s || !ptr)
		return nvs__err(-EINVAL, "%s: NULL argument", call);
	NVS__PARENT_ONLY(s, call, "swapper");
	if (blank && nvs__refuse_readonly(s, call) < 0)
		return -EROFS;
	nvs__share_tick(s); /* the disks' sharers counted again, each second */
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct tensor *t = NULL;
		ret = nvs__tensor_idle(s, id, call, &t, &waited);
		if (ret < 0)
			break;
		if (t->state == NVS_TENSOR_RESIDENT) {
			hand_out(s, t, ptr, waited);
			ret = 0;
			break;
		}
		if (t->state == NVS_TENSOR_WRITING && t->fence) {
			/* A checkpoint writes it: what it writes must be
			 * what was released. Wait for the write. */
			waited = true;
			nvs__collect(s, t);
			continue;
		}
		if (t->state == NVS_TENSOR_WRITING) {
			/* The buffer holds what is being written: hand it
			 * out now, not after the write (a step's last
			 * write-back is often the next step's first layer),
			 * and keep it when the write ends. */
			t->revive = true;
			hand_out(s, t, ptr, waited);
			s->st.write_hits++;
			ret = 0;
			break;
		}
		if (t->state == NVS_TENSOR_ON_NVME && t->err && !blank) {
			/* The failed prefetch is this acquire's answer; the
			 * next one retries. */
			ret = nvs__take_error(t);
			break;
		}
		if (t->state == NVS_TENSOR_ON_NVME) {
			ret = start_fetch(s, id, call, &waited, false, false,
					  NULL, blank);
			if (ret < 0)
				break;
			continue;
		}
		waited = true; /* READING */
		nvs__collect(s, t);
		if (t->state == NVS_TENSOR_ON_NVME && t->err && !blank) {
			ret = nvs__take_error(t);
			break;
		}
	}
	if (waited)
		s->st.acquire_wait_ns += nvs__now_ns() - t0;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_acquire(struct nvs_swapper *s, uint64_t id, void **ptr)
{
	return acquire(s, id, ptr, false, "nvs_swapper_acquire");
}

int nvs_swapper_acquire_blank(struct nvs_swapper *s, uint64_t id, void **ptr)
{
	return acquire(s, id, ptr, true, "nvs_swapper_acquire_blank");
}

int nvs_swapper_release(struct nvs_swapper *s, uint64_t id, bool dirty)
{
	struct tensor *t = NULL;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_release: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_release", "swapper");
	if (dirty && nvs__refuse_readonly(s, "nvs_swapper_release") < 0)
		return -EROFS;
	pthread_mutex_lock(&s->lock);
	t = nvs__tensor_find(s, id);
	if (!t) {
		pthread_mutex_unlock(&s->lock);
		return nvs__no_tensor(id, "nvs_swapper_release");
	}
	if (!t->pins) {
		pthread_mutex_unlock(&s->lock);
		return nvs__err(-EBUSY,
				"nvs_swapper_release: tensor %" PRIu64
				" is not acquired",
				id);
	}
	t->dirty |= dirty;
	t->blank &= !dirty;
	if (dirty && nvs__step_covers(s, t))
		nvs__step_touch(s, t);
	if (dirty && t->state == NVS_TENSOR_WRITING)
		t->redirty = true; /* the write in flight may miss it */
	unpin_owner(t);
	if (--t->pins == 0) {
		if (t->blank) {
			/* taken blank and not filled: as it was, on NVMe */
			t->blank = false;
			t->state = NVS_TENSOR_ON_NVME;
			nvs__buffer_put(s, t);
		} else if (t->state == NVS_TENSOR_RESIDENT) {
			nvs__tlist_push(&s->lru, t);
		}
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int nvs_swapper_evict(struct nvs_swapper *s, uint64_t id)
{
	struct tensor *t = NULL;
	int ret = 0;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_evict: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_evict", "swapper");
	pthread_mutex_lock(&s->lock);
	while ((ret = nvs__tensor_idle(s, id, "nvs_swapper_evict", &t, NULL)) ==
	       0) {
		if (t->pins) {
			ret = nvs__err(-EBUSY,
				       "nvs_swapper_evict: tensor %" PRIu64
				       " is acquired %u time(s)",
				       id, t->pins);
			break;
		}
		/* READING; or WRITING and changed since the write began
		 * (acquired meanwhile): what it writes may not be the
		 * data, so it is waited for and written again. */
		if (t->state == NVS_TENSOR_READING ||
		    (t->state == NVS_TENSOR_WRITING && t->redirty)) {
			nvs__collect(s, t);
			continue;
		}
		if (t->state == NVS_TENSOR_WRITING)
			t->revive = false; /* evicted after all */
		if (t->state != NVS_TENSOR_RESIDENT)
			break;
		if (t->dirty) {
			ret = nvs__start_write(s, t);
		} else {
			nvs__drop(s, t);
		}
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_wait(struct nvs_swapper *s, uint64_t id)
{
	struct tensor *t = NULL;
	int ret;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_wait: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_wait", "swapper");
	pthread_mutex_lock(&s->lock);
	while ((ret = nvs__tensor_idle(s, id, "nvs_swapper_wait", &t, NULL)) ==
	       0) {
		if (t->on == &s->flight) {
			nvs__collect(s, t);
			continue;
		}
		ret = nvs__take_error(t);
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_stats(const struct nvs_swapper *cs, struct nvs_swap_stats *st)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct nvs_aio *faio;
	struct nvs_aio_stats as;

	if (!s || !st)
		return nvs__err(-EINVAL, "nvs_swapper_stats: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_stats", "swapper");
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	st->buffer_count = nvs_pool_buffer_count(s->pool);
	st->buffer_size = s->buf_size;
	st->buffers_in_use = s->in_use;
	st->npaths = s->npaths;
	for (unsigned i = 0; i < s->nfiles; i++)
		st->files_buffered += !s->files[i]->direct;
	st->readonly = s->readonly;
	st->disk_sharers = atomic_load(&s->share.on) ? s->share.procs : 0;
	st->queue_depth = nvs_aio_get_queue_limit(s->aio); /* with it */
	faio = s->faio; /* set under the lock by nvs_swapper_add_file() */
	for (unsigned i = 0; i < s->npaths; i++) {
		st->path_space_used[i] = s->space[i].used;
		st->path_file_size[i] = s->path[i].file_size;
	}
	pthread_mutex_unlock(&s->lock);
	if (nvs_aio_get_stats(s->aio, &as) == 0) {
		st->backend = as.backend;
		st->io_busy_ns = as.busy_ns;
	}
	/* The added files' reads keep the disk busy too (the time both had
	 * I/O out is counted twice: an upper bound). */
	if (faio && nvs_aio_get_stats(faio, &as) == 0)
		st->io_busy_ns += as.busy_ns;
	return 0;
}

int nvs_swapper_info(const struct nvs_swapper *cs, uint64_t id,
		     struct nvs_tensor_info *info)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct tensor *t = NULL;

	if (!s || !info)
		return nvs__err(-EINVAL, "nvs_swapper_info: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_info", "swapper");
	pthread_mutex_lock(&s->lock);
	t = nvs__tensor_find(s, id);
	if (t) {
		memset(info, 0, sizeof(*info));
		info->state = t->state;
		info->nbytes = t->nbytes;
		info->acquired = t->pins;
		info->dirty = t->dirty;
		info->on_disk = t->on_disk;
		info->backed = t->backed && !t->on_disk;
		info->extents = (unsigned)t->nexts;
	}
	pthread_mutex_unlock(&s->lock);
	return t ? 0 : nvs__no_tensor(id, "nvs_swapper_info");
}

const char *nvs_swapper_dir(const struct nvs_swapper *s, unsigned i)
{
	return s && i < s->npaths ? s->path[i].dir.path : NULL;
}
