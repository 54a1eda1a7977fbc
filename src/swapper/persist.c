// SPDX-License-Identifier: MIT
/*
 * Persistent swap sets at run time (see persist.h): the placement
 * records, copy on write, checkpoints and their commit thread, the kept
 * generations and what is freed when one is dropped.
 */
#include "swapper/persist.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"
#include "swapper/io.h"
#include "swapper/registry.h"
#include "swapper/space.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- placement records ---- */

struct nvs_xref *nvs__xref_find(struct nvs_pset *p, const struct nvs_extent *e)
{
	uint64_t key = nvs__xref_key(e);
	struct nvs_xref *x;

	HASH_FIND(hh, p->xref, &key, sizeof(key), x);
	return x;
}

struct nvs_xref *nvs__xref_get(struct nvs_pset *p, const struct nvs_extent *ext,
			       size_t n, bool *clash)
{
	struct nvs_xref *x = nvs__xref_find(p, &ext[0]);

	*clash = false;
	if (x) {
		if (x->nexts != n || memcmp(x->ext, ext, n * sizeof(*ext))) {
			*clash = true;
			return NULL;
		}
		return x;
	}
	x = nvs__calloc(1, sizeof(*x) + n * sizeof(*ext));
	if (!x)
		return NULL;
	x->key = nvs__xref_key(&ext[0]);
	x->nexts = n;
	memcpy(x->ext, ext, n * sizeof(*ext));
	nvs__hash_oom = 0;
	HASH_ADD(hh, p->xref, key, sizeof(x->key), x);
	if (nvs__hash_oom) {
		nvs__free(x);
		return NULL;
	}
	return x;
}

void nvs__xref_forget(struct nvs_pset *p, const struct tensor *t)
{
	struct nvs_xref *x = nvs__xref_find(p, &t->ext[0]);

	if (x && !x->gens) {
		HASH_DEL(p->xref, x);
		nvs__free(x);
	}
}

/* Nobody uses @x any more: give its space and disk blocks back. */
static void release(struct nvs_swapper *s, struct nvs_xref *x)
{
	nvs__punch_extents(s, x->ext, x->nexts);
	nvs__space_release(s->space, x->ext, x->nexts);
	HASH_DEL(s->pers->xref, x);
	nvs__free(x);
}

void nvs__persist_uncurrent(struct nvs_swapper *s, const struct nvs_extent *ext)
{
	struct nvs_xref *x = nvs__xref_find(s->pers, ext);

	if (!x)
		return;
	x->cur = false;
	if (!x->gens)
		release(s, x);
}

int nvs__persist_placed(struct nvs_swapper *s, struct tensor *t)
{
	bool clash;
	struct nvs_xref *x = nvs__xref_get(s->pers, t->ext, t->nexts, &clash);

	if (!x)
		return nvs__err(clash ? -EEXIST : -ENOMEM,
				"nvswap: tensor %" PRIu64 ": %s", t->id,
				clash ? "its placement is recorded already"
				      : "out of memory");
	x->cur = true;
	return 0;
}

void nvs__persist_unplace(struct nvs_swapper *s, struct tensor *t)
{
	s->pers->changed = true;
	nvs__persist_uncurrent(s, t->ext);
}

/* ---- copy on write ---- */

int nvs__persist_cow_begin(struct nvs_swapper *s, struct tensor *t)
{
	struct nvs_xref *x = nvs__xref_find(s->pers, t->ext);
	struct nvs_extent *old = t->ext;
	size_t placed;
	int ret;

	if (!x || !x->gens)
		return 0; /* no generation keeps it: written in place */
	ret = nvs__space_place(s->space, s->npaths, s->stripe, t->nbytes,
			       t->alt, t->nexts, &placed);
	if (ret < 0)
		return nvs__err(ret,
				"nvswap: tensor %" PRIu64 ": no room for its "
				"copy-on-write placement: %s",
				t->id, nvs_strerror(-ret));
	ret = nvs__grow_files(s);
	if (ret == 0)
		ret = nvs__persist_placed(s, &(struct tensor){
						     .id = t->id,
						     .ext = t->alt,
						     .nexts = t->nexts,
					     });
	if (ret < 0) {
		nvs__space_release(s->space, t->alt, t->nexts);
		return ret;
	}
	t->ext = t->alt;
	t->alt = old;
	t->old_ext = old;
	return 0;
}

void nvs__persist_cow_end(struct nvs_swapper *s, struct tensor *t, bool ok)
{
	struct nvs_extent *old = t->old_ext;

	if (!old)
		return;
	t->old_ext = NULL;
	if (ok) {
		nvs__persist_uncurrent(s, old);
		return;
	}
	nvs__persist_uncurrent(s, t->ext);
	t->alt = t->ext;
	t->ext = old;
}

/* ---- generations ---- */

/* Generation @m no longer points at its placements. */
static void unref(struct nvs_swapper *s, const struct nvs_manifest *m)
{
	for (size_t i = 0; i < m->ntensors; i++) {
		struct nvs_xref *x = nvs__xref_find(s->pers, m->t[i].ext);
		if (x && x->gens && --x->gens == 0 && !x->cur)
			release(s, x);
	}
}

void nvs__persist_fence_done(struct nvs_swapper *s, struct tensor *t, int err)
{
	struct nvs_pset *p = s->pers;

	t->fence = false;
	if (p->pend_left)
		p->pend_left--;
	if (err && !p->pend_err) {
		p->pend_err = err;
		nvs__keep_msg(&p->pend_msg, nvs_last_error());
	}
}

static int sync_data(struct nvs_swapper *s)
{
	for (unsigned i = 0; i < s->npaths; i++)
		if (fdatasync(s->path[i].fd) < 0)
			return nvs__err(-errno, "nvswap: syncing %s: %s",
					s->path[i].file, nvs_strerror(errno));
	return 0;
}

/* The commit: wait for the checkpoint's writes, sync, write the
 * manifest, adopt it, drop what keep_generations no longer keeps. */
static void *commit(void *arg)
{
	struct nvs_swapper *s = arg;
	struct nvs_pset *p = s->pers;
	char msg[NVS_ERRMSG_MAX] = "";
	size_t drop = 0;
	int err;

	pthread_mutex_lock(&s->lock);
	while (p->pend_left) {
		struct tensor *t;
		for (t = s->flight.head; t && (!t->fence || t->busy);
		     t = t->next)
			;
		if (t)
			nvs__collect(s, t);
		else
			nvs__wait_change(s);
	}
	err = p->pend_err;
	if (err)
		snprintf(msg, sizeof(msg), "%s",
			 p->pend_msg ? p->pend_msg : "a write failed");
	pthread_mutex_unlock(&s->lock);
	if (!err)
		err = sync_data(s);
	if (!err)
		err = nvs__manifest_write(s->path[0].dir.dirfd,
					  s->path[0].dir.path, &p->pend);
	if (err && !*msg)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());

	pthread_mutex_lock(&s->lock);
	if (err || !nvs__reserve(&p->gens, &p->capgens, p->ngens, p->ngens + 1,
				 sizeof(*p->gens))) {
		p->changed = true; /* what it held is not saved */
		if (!err) {
			/* Durable, but not adoptable: the next open finds
			 * it; forget it here (its extents stay kept). */
			err = -ENOMEM;
			snprintf(msg, sizeof(msg),
				 "nvswap: checkpoint: out of memory");
		}
		unref(s, &p->pend);
		nvs__manifest_fini(&p->pend);
	} else {
		p->gens[p->ngens++] = p->pend;
		memset(&p->pend, 0, sizeof(p->pend));
		if (p->ngens > p->keep)
			drop = p->ngens - p->keep;
	}
	p->result = err ? err : (int)p->gens[p->ngens - 1].generation;
	nvs__free(p->result_msg);
	p->result_msg = NULL;
	if (err)
		nvs__keep_msg(&p->result_msg, msg);
	p->result_new = true;
	p->pending = false;
	p->pend_err = 0;
	nvs__free(p->pend_msg);
	p->pend_msg = NULL;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);

	/* Oldest first; a manifest that cannot be removed keeps its
	 * generation (and extents) until the next checkpoint tries. */
	size_t gone = 0;
	for (; gone < drop; gone++)
		if (nvs__manifest_remove(s->path[0].dir.dirfd,
					 s->path[0].dir.path,
					 p->gens[gone].generation, false) < 0)
			break;
	if (gone && fsync(s->path[0].dir.dirfd) < 0)
		gone = 0; /* not durably gone: keep their extents */
	if (gone) {
		pthread_mutex_lock(&s->lock);
		for (size_t g = 0; g < gone; g++) {
			unref(s, &p->gens[g]);
			nvs__manifest_fini(&p->gens[g]);
		}
		memmove(p->gens, p->gens + gone,
			(p->ngens - gone) * sizeof(*p->gens));
		p->ngens -= gone;
		pthread_mutex_unlock(&s->lock);
	}
	return NULL;
}

/* Collect the previous checkpoint's thread. Holding p->ckpt. */
static void join(struct nvs_pset *p)
{
	if (p->thread) {
		pthread_join(p->thr, NULL);
		p->thread = false;
	}
}

/* Wait until no tensor is busy or being written. Lock held. */
static void quiesce(struct nvs_swapper *s)
{
	for (;;) {
		struct tensor *t, *tmp, *busy = NULL, *writing = NULL;
		HASH_ITER(hh, s->table, t, tmp)
		{
			if (t->busy)
				busy = t;
			else if (t->state == NVS_TENSOR_WRITING)
				writing = t;
		}
		if (writing)
			nvs__collect(s, writing);
		else if (busy)
			nvs__wait_change(s);
		else
			return;
	}
}

static int by_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Fill entry @e from @t's placement; the generation now points at it. */
static int take_entry(struct nvs_swapper *s, struct nvs_mf_tensor *e,
		      const struct tensor *t, uint32_t crc)
{
	struct nvs_xref *x = nvs__xref_find(s->pers, t->ext);

	e->id = t->id;
	e->nbytes = t->nbytes;
	e->crc = crc;
	e->on_disk = t->on_disk || t->fence;
	e->nexts = (uint32_t)t->nexts;
	e->ext = nvs__malloc(t->nexts * sizeof(*e->ext));
	if (t->taglen)
		e->tag = nvs__malloc(t->taglen);
	if (!e->ext || (t->taglen && !e->tag) || !x)
		return -ENOMEM;
	memcpy(e->ext, t->ext, t->nexts * sizeof(*e->ext));
	if (t->taglen)
		memcpy(e->tag, t->tag, t->taglen);
	e->taglen = t->taglen;
	x->gens++;
	return 0;
}

/* Make the pending manifest's snapshot and start the writes. Lock held.
 * On failure the entries taken so far stay referenced: the commit
 * releases them. */
static int snapshot(struct nvs_swapper *s, const char *tag)
{
	struct nvs_pset *p = s->pers;
	struct nvs_manifest *m = &p->pend;
	struct tensor *t, *tmp;
	struct timespec now;
	uint64_t *ids;
	size_t n = 0;
	int ret = 0;

	quiesce(s);
	HASH_ITER(hh, s->table, t, tmp)
	{
		if (t->pins && t->dirty)
			return nvs__err(-EBUSY,
					"nvs_swapper_checkpoint: tensor "
					"%" PRIu64 " is acquired and changed "
					"since it was last written; release "
					"it first",
					t->id);
	}
	memset(m, 0, sizeof(*m));
	m->version = NVS_MANIFEST_VERSION;
	m->generation = p->next_gen;
	clock_gettime(CLOCK_REALTIME, &now);
	m->time_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	memcpy(m->set_id, p->set_id, sizeof(m->set_id));
	m->rank = p->rank;
	m->npaths = s->npaths;
	m->stripe = s->stripe;
	m->align = s->align;
	m->name = nvs__malloc(strlen(p->name) + 1);
	m->tag = nvs__malloc(strlen(tag) + 1);
	ids = nvs__malloc((HASH_COUNT(s->table) + 1) * sizeof(*ids));
	m->t = nvs__calloc(HASH_COUNT(s->table) + 1, sizeof(*m->t));
	for (unsigned i = 0; i < s->npaths; i++) {
		m->paths[i] = nvs__malloc(strlen(p->rec[i]) + 1);
		if (m->paths[i])
			strcpy(m->paths[i], p->rec[i]);
		else
			ret = -ENOMEM;
		m->file_size[i] = s->path[i].file_size;
	}
	if (!m->name || !m->tag || !ids || !m->t || ret < 0) {
		nvs__free(ids);
		nvs__manifest_fini(m);
		return nvs__err(-ENOMEM, "nvs_swapper_checkpoint: out of "
					 "memory");
	}
	strcpy(m->name, p->name);
	strcpy(m->tag, tag);
	p->next_gen++;
	p->pending = true;
	p->changed = false;
	HASH_ITER(hh, s->table, t, tmp)
	{
		ids[n++] = t->id;
	}
	qsort(ids, n, sizeof(*ids), by_id);
	/* The lock is dropped while a write starts: look each tensor up
	 * again; ones unregistered meanwhile are left out. */
	for (size_t i = 0; i < n && ret == 0; i++) {
		uint32_t crc;
		t = nvs__tensor_find(s, ids[i]);
		if (!t)
			continue;
		crc = t->crc;
		if (t->state == NVS_TENSOR_RESIDENT && !t->pins && t->dirty) {
			t->fence = true;
			t->revive = true;
			ret = nvs__start_write(s, t);
			if (ret < 0) {
				t->fence = false;
				break;
			}
			p->pend_left++;
			crc = t->wcrc;
		}
		ret = take_entry(s, &m->t[m->ntensors++], t, crc);
		if (ret < 0)
			ret = nvs__err(ret, "nvs_swapper_checkpoint: out of "
					    "memory");
	}
	nvs__free(ids);
	if (ret < 0 && !p->pend_err) {
		p->pend_err = ret;
		nvs__keep_msg(&p->pend_msg, nvs_last_error());
	}
	return ret;
}

/* -EBUSY for the open step @name (a copy). */
static int step_refusal(const char *call, const char *name)
{
	return nvs__err(-EBUSY,
			"%s: %s is open (nvs_swapper_step_begin without "
			"step_end): a checkpoint now would save part of it",
			call, name);
}

/* -EBUSY while a step is open (nvs_swapper_step_begin()), else 0. */
static int refuse_in_step(struct nvs_swapper *s, const char *call)
{
	char name[sizeof(s->step)];

	pthread_mutex_lock(&s->lock);
	memcpy(name, s->step, sizeof(name));
	pthread_mutex_unlock(&s->lock);
	return name[0] ? step_refusal(call, name) : 0;
}

int nvs_swapper_checkpoint(struct nvs_swapper *s, const char *tag)
{
	struct nvs_pset *p;
	int ret, gen;

	if (!s)
		return nvs__err(-EINVAL,
				"nvs_swapper_checkpoint: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_checkpoint", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_checkpoint") < 0)
		return -EROFS;
	p = s->pers;
	if (!p)
		return nvs__err(-EINVAL,
				"nvs_swapper_checkpoint: the swapper is "
				"scratch space (persist \"scratch\"): only a "
				"persistent set has generations");
	if (!tag)
		tag = "";
	if (strlen(tag) > NVS_CHECKPOINT_TAG_MAX)
		return nvs__err(-EINVAL,
				"nvs_swapper_checkpoint: tag of %zu bytes "
				"(at most %u)",
				strlen(tag), NVS_CHECKPOINT_TAG_MAX);
	ret = refuse_in_step(s, "nvs_swapper_checkpoint");
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&p->ckpt);
	join(p);
	if (p->result_new && p->result < 0) {
		ret = p->result;
		p->result_new = false;
		nvs__err(ret,
			 "nvs_swapper_checkpoint: the previous checkpoint "
			 "failed (nothing new was started): %s",
			 p->result_msg ? p->result_msg : nvs_strerror(-ret));
		pthread_mutex_unlock(&p->ckpt);
		return ret;
	}
	pthread_mutex_lock(&s->lock);
	if (s->step[0]) {
		/* Opened while this call waited for the last commit: the
		 * check above is only the early answer. */
		char name[sizeof(s->step)];

		memcpy(name, s->step, sizeof(name));
		pthread_mutex_unlock(&s->lock);
		pthread_mutex_unlock(&p->ckpt);
		return step_refusal("nvs_swapper_checkpoint", name);
	}
	ret = snapshot(s, tag);
	if (ret < 0 && !p->pending) {
		/* Nothing was taken: nothing to commit. */
		pthread_mutex_unlock(&s->lock);
		pthread_mutex_unlock(&p->ckpt);
		return ret;
	}
	gen = (int)p->pend.generation;
	pthread_mutex_unlock(&s->lock);
	if (pthread_create(&p->thr, NULL, commit, s) == 0)
		p->thread = true;
	else
		commit(s); /* no thread to be had: commit here */
	if (ret < 0) {
		/* The commit gave up on it; its failure is this call's. */
		join(p);
		p->result_new = false;
		nvs__err_set(ret, p->result_msg ? p->result_msg
						: nvs_strerror(-ret));
		pthread_mutex_unlock(&p->ckpt);
		return ret;
	}
	pthread_mutex_unlock(&p->ckpt);
	return gen;
}

int nvs_swapper_checkpoint_wait(struct nvs_swapper *s)
{
	struct nvs_pset *p;
	int ret;

	if (!s)
		return nvs__err(-EINVAL,
				"nvs_swapper_checkpoint_wait: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_checkpoint_wait", "swapper");
	p = s->pers;
	if (!p)
		return 0;
	pthread_mutex_lock(&p->ckpt);
	join(p);
	ret = p->result;
	if (ret < 0) {
		if (p->result_new)
			nvs__err_set(ret, p->result_msg ? p->result_msg
							: nvs_strerror(-ret));
		else
			ret = 0; /* reported already */
	}
	p->result_new = false;
	pthread_mutex_unlock(&p->ckpt);
	return ret;
}

int nvs_swapper_generations(const struct nvs_swapper *cs,
			    struct nvs_generation_info *out, size_t cap)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct nvs_pset *p;
	size_t n;

	if (!s || (!out && cap))
		return nvs__err(-EINVAL,
				"nvs_swapper_generations: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_generations", "swapper");
	p = s->pers;
	if (!p)
		return 0;
	pthread_mutex_lock(&s->lock);
	n = p->ngens;
	for (size_t i = 0; i < n && i < cap; i++) {
		const struct nvs_manifest *m = &p->gens[n - 1 - i];
		struct nvs_generation_info *g = &out[i];
		memset(g, 0, sizeof(*g));
		g->generation = m->generation;
		g->time_ns = m->time_ns;
		g->tensors = m->ntensors;
		for (size_t k = 0; k < m->ntensors; k++)
			g->tensor_bytes += m->t[k].nbytes;
		snprintf(g->tag, sizeof(g->tag), "%s", m->tag);
	}
	pthread_mutex_unlock(&s->lock);
	return (int)n;
}

int nvs_swapper_unsaved(const struct nvs_swapper *cs)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct tensor *t, *tmp;
	bool need;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_unsaved: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_unsaved", "swapper");
	if (!s->pers)
		return 0;
	pthread_mutex_lock(&s->lock);
	need = !s->pers->ngens || s->pers->changed;
	HASH_ITER(hh, s->table, t, tmp)
	{
		need |= t->dirty;
	}
	pthread_mutex_unlock(&s->lock);
	return need;
}

int nvs__persist_close(struct nvs_swapper *s)
{
	int ret;

	nvs_swapper_checkpoint_wait(s); /* an old failure is moot now */
	if (!nvs_swapper_unsaved(s))
		return 0; /* the newest generation is the state */
	if (s->step[0])
		return 0; /* a step in part is not saved: as after a crash */
	ret = nvs_swapper_checkpoint(s, "destroy");
	if (ret > 0)
		ret = nvs_swapper_checkpoint_wait(s);
	return ret < 0 ? ret : 0;
}

void nvs__persist_free(struct nvs_swapper *s)
{
	struct nvs_pset *p = s->pers;
	struct nvs_xref *x, *tmp;

	if (!p)
		return;
	join(p);
	for (size_t g = 0; g < p->ngens; g++)
		nvs__manifest_fini(&p->gens[g]);
	nvs__free(p->gens);
	nvs__manifest_fini(&p->pend);
	HASH_ITER(hh, p->xref, x, tmp)
	{
		HASH_DEL(p->xref, x);
		nvs__free(x);
	}
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++) {
		free(p->real[i]); /* from realpath() */
		nvs__free(p->rec[i]);
	}
	nvs__free(p->name);
	nvs__free(p->pend_msg);
	nvs__free(p->result_msg);
	pthread_mutex_destroy(&p->ckpt);
	nvs__free(p);
	s->pers = NULL;
}

/* The manifests (and a torn manifest.tmp) of one directory. */
static int unlink_manifests(int dirfd, const char *where)
{
	int fd = dup(dirfd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	int ret = 0;

	if (!dir) {
		ret = -errno;
		if (fd >= 0)
			close(fd);
		return nvs__err(ret, "nvs_swapper_discard: %s: %s", where,
				nvs_strerror(-ret));
	}
	rewinddir(dir);
	while ((e = readdir(dir))) {
		if (strncmp(e->d_name, NVS_MANIFEST_PREFIX,
			    strlen(NVS_MANIFEST_PREFIX)))
			continue;
		if (unlinkat(dirfd, e->d_name, 0) < 0 && errno != ENOENT &&
		    !ret)
			ret = nvs__err(-errno, "nvs_swapper_discard: %s/%s: %s",
				       where, e->d_name, nvs_strerror(errno));
	}
	closedir(dir);
	return ret;
}

int nvs__persist_unlink(struct nvs_swapper *s)
{
	int ret = 0, r;

	for (unsigned i = 0; i < s->npaths; i++) {
		struct nvs_swapdir *d = &s->path[i].dir;
		if (d->dirfd < 0)
			continue;
		/* Manifests first: a set without them is no set (the next
		 * create there starts afresh), whatever else stays. */
		r = unlink_manifests(d->dirfd, d->path);
		if (!ret)
			ret = r;
		if (unlinkat(d->dirfd, DATA_FILE, 0) < 0 && errno != ENOENT &&
		    !ret)
			ret = nvs__err(-errno, "nvs_swapper_discard: %s/%s: %s",
				       d->path, DATA_FILE, nvs_strerror(errno));
	}
	return ret;
}
