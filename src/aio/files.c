// SPDX-License-Identifier: MIT
/*
 * Open-file cache: a fixed array of entries with hashed keys, LRU among
 * the unreferenced ones. Small by design (tens of files): a linear scan of
 * 64-bit hashes beats any allocation on the submit path.
 */
#include "aio/files.h"
#include "aio/align.h"
#include "internal/alloc.h"
#include "internal/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_MAX 1024 /* longer paths are not cached */
#define MEMO 8	     /* inodes whose O_DIRECT description is remembered */

struct entry {
	struct nvs_file f; /* first: handed out */
	uint64_t hash;	   /* 0 = free */
	uint64_t last_use;
	dev_t dev;
	ino_t ino;
	unsigned refs;
	bool write;
	bool stale; /* replaced: close when refs reach 0 */
	char path[KEY_MAX];
};

/* What O_DIRECT needs for one inode: the same through every descriptor. */
struct memo {
	dev_t dev, rdev;
	ino_t ino;
	struct nvs_dio_align al;
	unsigned max_segments;
};

struct nvs_files {
	pthread_mutex_t lock; /* protects everything below */
	struct entry *e;
	unsigned cap;
	uint64_t clock;
	struct memo memo[MEMO];
	unsigned nmemo, memo_next;
	/* Bumped under lock, read by workers without it: relaxed, since a
	 * worker only needs to see it before the op that follows a close,
	 * and that op reaches it through the worker queue's mutex. */
	atomic_uint_fast64_t closes;
};

static atomic_uint_fast64_t next_id = 1; /* relaxed: uniqueness only */

static uint64_t key_hash(const char *path, bool write)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)write;

	for (const unsigned char *p = (const unsigned char *)path; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return h ? h : 1;
}

/*
 * At most an eighth of the descriptor limit (each entry may hold two):
 * the cache is an optimization and must never be what makes the
 * application's own open() fail with EMFILE.
 */
static unsigned fit_limit(unsigned cap)
{
	struct rlimit rl;
	rlim_t most;

	if (cap == 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0 ||
	    rl.rlim_cur == RLIM_INFINITY)
		return cap;
	most = rl.rlim_cur / 8 ? rl.rlim_cur / 8 : 1;
	return most < cap ? (unsigned)most : cap;
}

int nvs__files_create(unsigned cap, struct nvs_files **out)
{
	struct nvs_files *c;

	*out = NULL;
	cap = fit_limit(cap);
	if (cap == 0)
		return 0;
	c = nvs__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->e = nvs__calloc(cap, sizeof(*c->e));
	if (!c->e) {
		nvs__free(c);
		return -ENOMEM;
	}
	c->cap = cap;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;
}

static void entry_close(struct nvs_files *c, struct entry *e)
{
	atomic_fetch_add_explicit(&c->closes, 1, memory_order_relaxed);
	if (e->f.bfd >= 0)
		close(e->f.bfd);
	close(e->f.fd);
	e->hash = 0;
	e->stale = false;
}

void nvs__files_destroy(struct nvs_files *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < c->cap; i++)
		if (c->e[i].hash)
			entry_close(c, &c->e[i]);
	pthread_mutex_destroy(&c->lock);
	nvs__free(c->e);
	nvs__free(c);
}

static struct entry *find(struct nvs_files *c, uint64_t h, const char *path,
			  bool write)
{
	for (unsigned i = 0; i < c->cap; i++) {
		struct entry *e = &c->e[i];
		if (e->hash == h && !e->stale && e->write == write &&
		    !strcmp(e->path, path))
			return e;
	}
	return NULL;
}

struct nvs_file *nvs__files_get(struct nvs_files *c, const char *path,
				bool write, const struct stat *st)
{
	uint64_t h = key_hash(path, write);
	struct entry *e;

	if (!c)
		return NULL;
	pthread_mutex_lock(&c->lock);
	e = find(c, h, path, write);
	if (e && (e->dev != st->st_dev || e->ino != st->st_ino)) {
		/* The path names another file now. */
		if (e->refs == 0)
			entry_close(c, e);
		else
			e->stale = true;
		e = NULL;
	}
	if (e) {
		e->refs++;
		e->last_use = ++c->clock;
	}
	pthread_mutex_unlock(&c->lock);
	return e ? &e->f : NULL;
}

struct nvs_file *nvs__files_add(struct nvs_files *c, const char *path,
				bool write, const struct stat *st, int fd,
				bool direct, const struct nvs_dio_align *al,
				unsigned max_segments)
{
	struct entry *slot = NULL, *old;
	uint64_t h = key_hash(path, write);

	if (!c || strlen(path) >= KEY_MAX)
		return NULL;
	pthread_mutex_lock(&c->lock);
	/* Another thread may have cached the same path meanwhile: ours
	 * replaces it for new users. */
	old = find(c, h, path, write);
	if (old) {
		if (old->refs == 0)
			entry_close(c, old);
		else
			old->stale = true;
	}
	for (unsigned i = 0; i < c->cap; i++) {
		struct entry *e = &c->e[i];
		if (!e->hash) {
			slot = e;
			break;
		}
		if (e->refs == 0 && (!slot || e->last_use < slot->last_use))
			slot = e;
	}
	if (slot) {
		if (slot->hash)
			entry_close(c, slot);
		slot->hash = h;
		slot->write = write;
		slot->dev = st->st_dev;
		slot->ino = st->st_ino;
		slot->refs = 1;
		slot->last_use = ++c->clock;
		slot->f = (struct nvs_file){
			.id = atomic_fetch_add_explicit(&next_id, 1,
							memory_order_relaxed),
			.fd = fd,
			.bfd = -1,
			.direct = direct,
			.al = *al,
			.max_segments = max_segments};
		strcpy(slot->path, path);
	}
	pthread_mutex_unlock(&c->lock);
	return slot ? &slot->f : NULL;
}

/*
 * The buffered descriptor of @f for unaligned edges: the cached one, else
 * @path opened with @flags here, outside the lock, and kept (when another
 * thread installed one meanwhile, ours is closed and theirs returned).
 */
int nvs__files_bfd(struct nvs_files *c, struct nvs_file *f, const char *path,
		   int flags)
{
	int bfd;

	pthread_mutex_lock(&c->lock);
	bfd = f->bfd;
	pthread_mutex_unlock(&c->lock);
	if (bfd >= 0)
		return bfd;
	bfd = nvs__files_open(c, path, flags, 0);
	if (bfd < 0)
		return -1;
	pthread_mutex_lock(&c->lock);
	if (f->bfd < 0)
		f->bfd = bfd;
	else
		close(bfd);
	bfd = f->bfd;
	pthread_mutex_unlock(&c->lock);
	return bfd;
}

void nvs__files_release(struct nvs_files *c, struct nvs_file *f)
{
	struct entry *e = (struct entry *)f;

	pthread_mutex_lock(&c->lock);
	if (--e->refs == 0 && e->stale)
		entry_close(c, e);
	pthread_mutex_unlock(&c->lock);
}

uint64_t nvs__files_closes(const struct nvs_files *c)
{
	return atomic_load_explicit(&c->closes, memory_order_relaxed);
}

/* Close the idle entries, or only those whose file is deleted (its link
 * count is 0): their descriptors are all that keeps its blocks. */
static unsigned close_idle(struct nvs_files *c, bool deleted_only)
{
	struct stat st;
	unsigned n = 0;

	if (!c)
		return 0;
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->cap; i++) {
		struct entry *e = &c->e[i];
		if (!e->hash || e->refs != 0)
			continue;
		if (deleted_only &&
		    (fstat(e->f.fd, &st) != 0 || st.st_nlink != 0))
			continue;
		entry_close(c, e);
		n++;
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

static bool memo_is(const struct memo *m, const struct stat *st)
{
	return m->dev == st->st_dev && m->ino == st->st_ino &&
	       m->rdev == st->st_rdev;
}

int nvs__files_describe(struct nvs_files *c, int fd, const struct stat *st,
			struct nvs_dio_align *al, unsigned *max_segments)
{
	struct memo m = {st->st_dev, st->st_rdev, st->st_ino, {0}, 0};
	int ret;

	if (c) {
		pthread_mutex_lock(&c->lock);
		for (unsigned i = 0; i < c->nmemo; i++) {
			if (memo_is(&c->memo[i], st)) {
				*al = c->memo[i].al;
				*max_segments = c->memo[i].max_segments;
				pthread_mutex_unlock(&c->lock);
				return 0;
			}
		}
		pthread_mutex_unlock(&c->lock);
	}
	ret = nvs_dio_alignment(fd, &m.al);
	if (ret < 0)
		return ret;
	m.max_segments = nvs__dio_max_segments(fd);
	*al = m.al;
	*max_segments = m.max_segments;
	if (c) {
		pthread_mutex_lock(&c->lock);
		c->memo[c->memo_next] = m;
		c->memo_next = (c->memo_next + 1) % MEMO;
		if (c->nmemo < MEMO)
			c->nmemo++;
		pthread_mutex_unlock(&c->lock);
	}
	return 0;
}

unsigned nvs__files_close_idle(struct nvs_files *c)
{
	return close_idle(c, false);
}

unsigned nvs__files_prune(struct nvs_files *c)
{
	return close_idle(c, true);
}

int nvs__files_open(struct nvs_files *c, const char *path, int flags,
		    mode_t mode)
{
	struct stat st;
	int fd;

	fd = nvs__open_file(AT_FDCWD, path, flags, mode, &st);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) &&
	    nvs__files_close_idle(c))
		fd = nvs__open_file(AT_FDCWD, path, flags, mode, &st);
	return fd;
}
