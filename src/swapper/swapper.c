// SPDX-License-Identifier: MIT
/*
 * The swap manager: the tensor registry and its state machine over the
 * swap space (space.c), the rank directories (swapdir.c), a pinned pool
 * and one aio handle. Each tensor read or write is one ticketed aio op per
 * extent, so a wait is per tensor, never per handle.
 */
#include "swapper/swapper.h"
#include "aio/handle.h"
#include "buffers/pool.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/hash.h"
#include "internal/util.h"
#include "swapper/crc32c.h"
#include "swapper/paths.h"
#include "swapper/room.h"
#include "swapper/space.h"
#include "swapper/swapdir.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/buffers.h"

struct tensor;

/* A list of tensors through their prev/next links. */
struct tlist {
	struct tensor *head, *tail;
	unsigned n;
};

struct tensor {
	UT_hash_handle hh;
	uint64_t id;
	size_t nbytes;
	enum nvs_tensor_state state;
	void *buf;	  /* pool buffer: RESIDENT, READING, WRITING */
	unsigned pins;	  /* acquires not released */
	pthread_t holder; /* made the first of them; shared: others too */
	bool shared;
	bool dirty;   /* RESIDENT data differs from the disk's */
	bool on_disk; /* written at least once; else reads as zeros */
	bool revive;  /* WRITING: keep the buffer when the write ends */
	/* A thread works on this tensor with the lock dropped (collects its
	 * tickets, checksums, writes its init data); others wait on cond and
	 * look the tensor up again. */
	bool busy;
	struct tlist *on; /* s->lru (RESIDENT, unpinned) or s->flight
			     (READING, WRITING), or NULL */
	struct tensor *prev, *next;
	int err;	    /* a failed read or write nobody reported yet */
	char *errmsg;	    /* its sentence (NULL when it could not be kept) */
	uint32_t crc;	    /* CRC32C of what is on disk (checksum mode) */
	uint32_t wcrc;	    /* of the write in flight */
	int io_err;	    /* first failure among tickets already collected */
	char *io_msg;	    /* its sentence */
	size_t next_ticket; /* tickets collected so far */
	size_t ntickets;    /* tickets of the I/O in flight */
	size_t nexts;	    /* extents */
	struct nvs_extent *ext;
	uint64_t *tickets; /* one per extent */
};

struct path {
	struct nvs_swapdir dir;
	int fd;
	bool direct;
	uint64_t file_size;
	char file[4200];
};

struct nvs_swapper {
	unsigned long born; /* fork generation: see internal/fork.h */
	/* Protects everything below that is not set at create. I/O waits,
	 * checksums and zero fills run with it dropped (see tensor.busy). */
	pthread_mutex_t lock;
	/* Broadcast when a tensor stops being busy or in flight, is
	 * released, evicted or removed, and when a buffer goes back. */
	pthread_cond_t cond;
	struct nvs_aio *aio;
	struct nvs_pool *pool;
	unsigned npaths;
	struct path path[NVS_SWAPPER_MAX_PATHS];
	struct nvs_space space[NVS_SWAPPER_MAX_PATHS]; /* one per path */
	uint64_t align;	  /* file offsets and I/O lengths */
	uint64_t stripe;  /* stripe unit */
	size_t max_bytes; /* largest tensor (opts.buffer_size) */
	size_t buf_size;  /* pool buffer: max_bytes rounded to align */
	bool auto_evict, checksum;
	uint32_t wait_ms;
	struct tensor *table;
	struct tlist lru;    /* least recently released first */
	struct tlist flight; /* oldest submission first */
	unsigned in_use;
	struct nvs_swap_stats st;
};

/* ------------------------------------------------------------ lists */

static void list_push(struct tlist *l, struct tensor *t)
{
	t->on = l;
	t->next = NULL;
	t->prev = l->tail;
	if (l->tail)
		l->tail->next = t;
	else
		l->head = t;
	l->tail = t;
	l->n++;
}

static void list_remove(struct tensor *t)
{
	struct tlist *l = t->on;

	if (!l)
		return;
	if (t->prev)
		t->prev->next = t->next;
	else
		l->head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	else
		l->tail = t->prev;
	l->n--;
	t->on = NULL;
	t->prev = t->next = NULL;
}

/* ---------------------------------------------------------- helpers */

static struct tensor *find(const struct nvs_swapper *s, uint64_t id)
{
	struct tensor *t;

	HASH_FIND(hh, s->table, &id, sizeof(id), t);
	return t;
}

static int no_tensor(uint64_t id, const char *call)
{
	return nvs__err(-ENOENT, "%s: no tensor %" PRIu64 " is registered",
			call, id);
}

static void wait_change(struct nvs_swapper *s)
{
	pthread_cond_wait(&s->cond, &s->lock);
}

/* Tensor @id once no other thread works on it (see tensor.busy): 0 and
 * *@out, or -ENOENT. Lock held, dropped while waiting; @waited (or NULL)
 * is set when it waited. */
static int idle(struct nvs_swapper *s, uint64_t id, const char *call,
		struct tensor **out, bool *waited)
{
	for (;;) {
		struct tensor *t = find(s, id);
		if (!t)
			return no_tensor(id, call);
		if (!t->busy) {
			*out = t;
			return 0;
		}
		wait_change(s);
		if (waited)
			*waited = true;
	}
}

/* Keep @err with the calling thread's last error as @t's unreported
 * failure. */
/* *@dst = a copy of @msg (NULL when it cannot be allocated: callers
 * then say less, never fail). */
static void keep_msg(char **dst, const char *msg)
{
	size_t n = strlen(msg) + 1;

	nvs__free(*dst);
	*dst = nvs__malloc(n);
	if (*dst)
		memcpy(*dst, msg, n);
}

static void keep_error(struct tensor *t, int err, const char *msg)
{
	t->err = err;
	keep_msg(&t->errmsg, msg);
}

/* Report (once) and clear @t's kept failure; 0 when there is none. */
static int take_error(struct tensor *t)
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

static void *buffer_get(struct nvs_swapper *s)
{
	void *buf;

	if (nvs__pool_try_get(s->pool, &buf) < 0)
		return NULL;
	s->in_use++;
	if (s->in_use > s->st.pool_high_water)
		s->st.pool_high_water = s->in_use;
	return buf;
}

static void buffer_put(struct nvs_swapper *s, struct tensor *t)
{
	nvs_pool_put(s->pool, t->buf);
	t->buf = NULL;
	s->in_use--;
	pthread_cond_broadcast(&s->cond);
}

static uint64_t io_len(const struct nvs_swapper *s, const struct nvs_extent *e)
{
	return nvs__round_up(e->len, s->align);
}

/* Queue one op per extent of @t, reading into or writing from @base
 * (@padded: whole aligned blocks; else exact lengths). Returns how many
 * were queued in *n; 0 or the first submit error. */
static int submit_extents(struct nvs_swapper *s, struct tensor *t,
			  enum nvs_aio_opcode op, void *base, bool padded,
			  size_t *n)
{
	int ret = 0;

	*n = 0;
	for (size_t i = 0; i < t->nexts; i++) {
		const struct nvs_extent *e = &t->ext[i];
		struct nvs_aio_io io = {
			.opcode = op,
			.buf = (char *)base + e->tensor_off,
			.nbytes = padded ? io_len(s, e) : e->len,
			.fd = s->path[e->path].fd,
			.offset = (int64_t)e->off,
		};
		ret = nvs_aio_submit(s->aio, &io, &t->tickets[i]);
		if (ret < 0) {
			ret = nvs__swapfile_refused(
				io.fd, s->path[e->path].file, t->id,
				op == NVS_AIO_WRITE, e->off, io.nbytes, ret);
			break;
		}
		(*n)++;
	}
	s->st.io_ops += *n;
	return ret;
}

/* Say which extent of @t failed and how; returns @err. */
static int io_failed(const struct nvs_swapper *s, const struct tensor *t,
		     size_t i, int err, bool write)
{
	const struct nvs_extent *e = &t->ext[i];

	return nvs__err(err,
			"nvswap: tensor %" PRIu64 ": %s %" PRIu64
			" bytes %s %s at offset %" PRIu64 " failed: %s",
			t->id, write ? "writing" : "reading", e->len,
			write ? "to" : "from", s->path[e->path].file, e->off,
			nvs_strerror(-err));
}

/* Wait for tickets [from, to) of @t; the first failure, with its
 * sentence in this thread's last error. No lock needed: @t is busy. */
static int wait_tickets(struct nvs_swapper *s, struct tensor *t, size_t from,
			size_t to, bool write)
{
	char msg[NVS_ERRMSG_MAX];
	int err = 0;

	for (size_t i = from; i < to; i++) {
		int r = nvs_aio_wait_op(s->aio, t->tickets[i]);
		if (r < 0 && !err) {
			err = io_failed(s, t, i, r, write);
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		}
	}
	if (err)
		nvs__err_set(err, msg);
	return err;
}

/* A submit of @t's extents failed with @ret (its sentence in the last
 * error) after @n were queued: wait for those with the lock dropped (@t
 * must be busy) and return @ret, its sentence intact. Lock held. */
static int drain_failed_submit(struct nvs_swapper *s, struct tensor *t,
			       size_t n, bool write, int ret)
{
	char msg[NVS_ERRMSG_MAX];

	snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	pthread_mutex_unlock(&s->lock);
	wait_tickets(s, t, 0, n, write);
	pthread_mutex_lock(&s->lock);
	return nvs__err_set(ret, msg);
}

static void count_path_bytes(struct nvs_swapper *s, const struct tensor *t,
			     bool write)
{
	for (size_t i = 0; i < t->nexts; i++) {
		uint64_t *c = write ? s->st.path_bytes_written
				    : s->st.path_bytes_read;
		c[t->ext[i].path] += t->ext[i].len;
	}
}

/* The in-flight read or write of @t ended with @err (its sentence in this
 * thread's last error). Lock held. */
static void finish(struct nvs_swapper *s, struct tensor *t, int err)
{
	if (!err && t->io_err)
		err = nvs__err_set(t->io_err, t->io_msg ? t->io_msg
							: "nvswap: I/O failed");
	t->io_err = 0;
	nvs__free(t->io_msg);
	t->io_msg = NULL;
	list_remove(t);
	t->next_ticket = t->ntickets = 0;
	if (t->state == NVS_TENSOR_READING) {
		if (err) {
			buffer_put(s, t);
			t->state = NVS_TENSOR_ON_NVME;
			s->st.io_errors++;
			if (err == -EBADMSG)
				s->st.checksum_errors++;
			keep_error(t, err, nvs_last_error());
		} else {
			t->state = NVS_TENSOR_RESIDENT;
			t->dirty = false;
			if (t->on_disk) {
				s->st.reads++;
				s->st.bytes_read += t->nbytes;
				count_path_bytes(s, t, false);
			}
			list_push(&s->lru, t);
		}
	} else {
		if (err) {
			/* Nothing is lost: the data stays, still dirty. */
			t->state = NVS_TENSOR_RESIDENT;
			s->st.io_errors++;
			keep_error(t, err, nvs_last_error());
			list_push(&s->lru, t);
		} else {
			t->dirty = false;
			t->on_disk = true;
			t->crc = t->wcrc;
			s->st.writes++;
			s->st.bytes_written += t->nbytes;
			count_path_bytes(s, t, true);
			if (t->revive) {
				t->state = NVS_TENSOR_RESIDENT;
				s->st.revived++;
				list_push(&s->lru, t);
			} else {
				t->state = NVS_TENSOR_ON_NVME;
				buffer_put(s, t);
			}
		}
		t->revive = false;
	}
	pthread_cond_broadcast(&s->cond);
}

/* Wait for @t's I/O in flight with the lock dropped, check a read, and
 * finish it. Lock held on entry and return; @t is in flight, not busy. */
static void collect(struct nvs_swapper *s, struct tensor *t)
{
	bool reading = t->state == NVS_TENSOR_READING;
	int err;

	t->busy = true;
	pthread_mutex_unlock(&s->lock);
	err = wait_tickets(s, t, t->next_ticket, t->ntickets, !reading);
	if (!err && reading && !t->on_disk) {
		memset(t->buf, 0, t->nbytes);
	} else if (!err && reading && s->checksum) {
		uint32_t crc = nvs__crc32c(0, t->buf, t->nbytes);
		if (crc != t->crc)
			err = nvs__err(-EBADMSG,
				       "nvswap: tensor %" PRIu64
				       ": checksum mismatch reading %s at "
				       "offset %" PRIu64
				       " (crc32c %08x, written %08x); the "
				       "data was not handed out",
				       t->id, s->path[t->ext[0].path].file,
				       t->ext[0].off, crc, t->crc);
	}
	pthread_mutex_lock(&s->lock);
	t->busy = false;
	finish(s, t, err);
}

/* Collect the write-backs that have ended, without waiting; whether any
 * gave a buffer back. Lock held. */
static bool reap_writes(struct nvs_swapper *s)
{
	unsigned before = s->in_use;
	struct tensor *t, *next;

	for (t = s->flight.head; t; t = next) {
		next = t->next;
		if (t->busy || t->state != NVS_TENSOR_WRITING)
			continue;
		while (t->next_ticket < t->ntickets) {
			int r = nvs_aio_poll_op(s->aio,
						t->tickets[t->next_ticket]);
			if (r == -EINPROGRESS)
				break;
			if (r < 0 && !t->io_err) {
				/* The ticket is gone: keep its failure
				 * until the tensor's last one is in. */
				io_failed(s, t, t->next_ticket, r, true);
				t->io_err = r;
				keep_msg(&t->io_msg, nvs_last_error());
			}
			t->next_ticket++;
		}
		if (t->next_ticket == t->ntickets)
			finish(s, t, 0);
	}
	return s->in_use < before;
}

/* Start the write-back of resident, unpinned, dirty @t. Lock held (it is
 * dropped meanwhile). Returns 0 when queued; a submit failure leaves @t
 * resident and dirty and is returned, not kept. */
static int start_write(struct nvs_swapper *s, struct tensor *t)
{
	uint64_t padded = nvs__round_up(t->nbytes, s->align);
	size_t n;
	int ret;

	list_remove(t);
	t->state = NVS_TENSOR_WRITING;
	list_push(&s->flight, t);
	t->busy = true;
	pthread_mutex_unlock(&s->lock);
	/* The padding goes to disk too: make it zeros, not another
	 * tensor's leftovers. */
	memset((char *)t->buf + t->nbytes, 0, padded - t->nbytes);
	t->wcrc = s->checksum ? nvs__crc32c(0, t->buf, t->nbytes) : 0;
	pthread_mutex_lock(&s->lock);
	ret = submit_extents(s, t, NVS_AIO_WRITE, t->buf, true, &n);
	t->ntickets = n;
	if (ret < 0) {
		ret = drain_failed_submit(s, t, n, true, ret);
		list_remove(t);
		t->ntickets = 0;
		t->state = NVS_TENSOR_RESIDENT;
		t->revive = false;
		list_push(&s->lru, t);
		s->st.io_errors++;
	}
	t->busy = false;
	pthread_cond_broadcast(&s->cond);
	return ret;
}

/* Start reading ON_NVME @t into @buf (a never-written tensor is zero
 * filled by whoever collects it). Lock held. 0, or a submit failure:
 * @t is ON_NVME again and @buf back in the pool. */
static int start_read(struct nvs_swapper *s, struct tensor *t, void *buf)
{
	size_t n = 0;
	int ret = 0;

	t->buf = buf;
	t->state = NVS_TENSOR_READING;
	list_push(&s->flight, t);
	if (!t->on_disk) {
		s->st.zero_fills++;
		return 0;
	}
	ret = submit_extents(s, t, NVS_AIO_READ, buf, true, &n);
	t->ntickets = n;
	if (ret < 0) {
		t->busy = true;
		ret = drain_failed_submit(s, t, n, false, ret);
		t->busy = false;
		list_remove(t);
		t->ntickets = 0;
		t->state = NVS_TENSOR_ON_NVME;
		buffer_put(s, t);
		s->st.io_errors++;
	}
	return ret;
}

/* Evict clean, unpinned, resident @t: no I/O. Lock held. */
static void drop(struct nvs_swapper *s, struct tensor *t)
{
	list_remove(t);
	t->state = NVS_TENSOR_ON_NVME;
	buffer_put(s, t);
	s->st.clean_evictions++;
}

/* The victim for automatic eviction: the least recently released clean
 * tensor, else the least recently released dirty one. */
static struct tensor *victim(struct nvs_swapper *s)
{
	struct tensor *t, *dirty = NULL;

	for (t = s->lru.head; t; t = t->next) {
		if (!t->dirty)
			return t;
		/* Not one whose write-back just failed: writing it again
		 * and again would spin on a full disk (make_room reports
		 * it instead). */
		if (!dirty && !t->err)
			dirty = t;
	}
	return dirty;
}

/* Where the pool's buffers are. Lock held. */
static void census(struct nvs_swapper *s, struct nvs__census *c)
{
	struct tensor *t, *tmp;

	*c = (struct nvs__census){.total = nvs_pool_buffer_count(s->pool)};
	for (t = s->lru.head; t; t = t->next)
		*(t->dirty ? &c->dirty : &c->clean) += 1;
	for (t = s->flight.head; t; t = t->next)
		*(t->state == NVS_TENSOR_READING ? &c->reading : &c->writing) +=
			1;
	HASH_ITER(hh, s->table, t, tmp)
	if (t->pins && t->buf) {
		c->held++;
		c->held_mine +=
			!t->shared && pthread_equal(t->holder, pthread_self());
	}
}

/* The pool is empty: do one thing that may give a buffer back, or wait
 * for another thread to. Lock held (dropped meanwhile). 0 to try again,
 * -EDEADLK, -ETIMEDOUT, or a write-back that could not start. */
static int make_room(struct nvs_swapper *s, uint64_t deadline, const char *call,
		     uint64_t id)
{
	struct nvs__census c;
	struct tensor *t;

	if (reap_writes(s))
		return 0;
	for (t = s->flight.head; t; t = t->next)
		if (!t->busy && t->state == NVS_TENSOR_WRITING) {
			collect(s, t);
			return 0;
		}
	if (s->auto_evict) {
		t = victim(s);
		if (t && !t->dirty) {
			drop(s, t);
			s->st.auto_evictions++;
			return 0;
		}
		if (t) {
			int ret = start_write(s, t);
			if (ret < 0)
				return nvs__err(ret,
						"nvswap: no free buffer, and "
						"evicting tensor %" PRIu64
						" failed: %s",
						t->id, nvs_last_error());
			s->st.auto_evictions++;
			return 0;
		}
		/* Only reads in flight: one becomes evictable when done. */
		for (t = s->flight.head; t; t = t->next)
			if (!t->busy) {
				collect(s, t);
				return 0;
			}
	}
	/* A buffer held by data whose write-back failed comes back only
	 * when the caller acts (frees space, evicts again): say so now
	 * instead of waiting for it. */
	for (t = s->lru.head; t; t = t->next)
		if (t->err && t->dirty)
			return nvs__err(t->err,
					"nvswap: no free pool buffer: tensor "
					"%" PRIu64
					" holds one and its write-back failed "
					"(%s); free space and evict it again",
					t->id,
					t->errmsg ? t->errmsg
						  : nvs_strerror(-t->err));
	census(s, &c);
	if (nvs__census_deadlock(&c))
		return nvs__room_err(-EDEADLK, call, id, s->wait_ms, &c);
	/* Buffers are held by resident or arriving tensors that only the
	 * caller may evict, or by other threads' acquires: wait for another
	 * thread to give one back. */
	if (deadline && nvs__now_ns() >= deadline)
		return nvs__room_err(-ETIMEDOUT, call, id, s->wait_ms, &c);
	nvs__room_wait(&s->cond, &s->lock, deadline);
	return 0;
}

/* ------------------------------------------------------------- create */

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

static int open_path(struct nvs_swapper *s, unsigned i, const char *nvme_path,
		     const struct nvs_swapper_opts *o)
{
	struct path *p = &s->path[i];
	struct nvs_dio_align a;
	int ret;

	ret = nvs__swapdir_open(nvme_path, o->name, o->rank, &p->dir);
	if (ret < 0)
		return ret;
	p->fd = nvs__swapdir_create(&p->dir, "0", O_DIRECT);
	if (p->fd < 0)
		return nvs__err(p->fd, "nvswap: %s/swap.0: %s", p->dir.path,
				nvs_strerror(-p->fd));
	/* (dir.path is shorter than file by more than the suffix.) */
	size_t n = strnlen(p->dir.path, sizeof(p->dir.path) - 1);
	memcpy(p->file, p->dir.path, n);
	memcpy(p->file + n, "/swap.0", sizeof("/swap.0"));
	p->direct = (fcntl(p->fd, F_GETFL) & O_DIRECT) != 0;
	if (nvs_dio_alignment(p->fd, &a) == 0)
		s->align =
			NVS_MAX(s->align, NVS_MAX(a.offset_align, a.mem_align));
	return 0;
}

static void destroy_all(struct nvs_swapper *s)
{
	struct tensor *t, *tmp;

	HASH_ITER(hh, s->table, t, tmp)
	{
		HASH_DEL(s->table, t);
		if (t->buf)
			nvs_pool_put(s->pool, t->buf);
		nvs__free(t->errmsg);
		nvs__free(t->io_msg);
		nvs__free(t);
	}
	nvs_pool_destroy(s->pool);
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++) {
		struct path *p = &s->path[i];
		if (p->fd >= 0)
			close(p->fd);
		nvs__space_fini(&s->space[i]);
		nvs__swapdir_close(&p->dir, true);
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
	if ((ret = nvs__paths_distinct(o->nvme_paths, o->npaths)) < 0)
		return ret;
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
	s = nvs__calloc(1, sizeof(*s));
	if (!s)
		return nvs__err(-ENOMEM, "nvs_swapper_create: out of memory");
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
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
	s->wait_ms = o->wait_ms;
	for (unsigned i = 0; i < o->npaths; i++) {
		ret = open_path(s, i, o->nvme_paths[i], o);
		if (ret < 0)
			goto fail;
	}
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
	ret = plan ? nvs__aio_create_fault(&ao, plan, &s->aio)
		   : nvs_aio_create(&ao, &s->aio);
	if (ret < 0)
		goto fail;
	{
		struct nvs_pool_stats ps;
		nvs_pool_stats(s->pool, &ps);
		s->st.pinned = ps.pinned;
	}
	*out = s;
	return 0;
fail : {
	char msg[NVS_ERRMSG_MAX];
	snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	nvs_aio_destroy(s->aio);
	destroy_all(s);
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

struct nvs_aio *nvs__swapper_aio(struct nvs_swapper *s)
{
	return s->aio;
}

/* ------------------------------------------------------------ calls */

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
			collect(s, t);
		else
			wait_change(s);
	}
	HASH_ITER(hh, s->table, t, tmp)
	{
		if (!t->err)
			continue;
		if (!err) {
			err = take_error(t);
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		} else {
			take_error(t);
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
	ret = nvs_swapper_wait_all(s);
	r = nvs_aio_destroy(s->aio);
	if (!ret)
		ret = r;
	destroy_all(s);
	return ret;
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
			  (off_t)e->off, (off_t)io_len(s, e));
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
	if (find(s, id)) {
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
	ret = submit_extents(s, t, NVS_AIO_WRITE, (void *)(uintptr_t)init,
			     false, &queued);
	if (ret < 0)
		ret = drain_failed_submit(s, t, queued, true, ret);
	pthread_mutex_unlock(&s->lock);
	if (ret == 0)
		ret = wait_tickets(s, t, 0, queued, true);
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
	count_path_bytes(s, t, true);
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
		int ret = idle(s, id, "nvs_swapper_unregister", &t, NULL);
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
			collect(s, t);
			continue;
		}
		break;
	}
	list_remove(t);
	if (t->buf)
		buffer_put(s, t);
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

/* Bring ON_NVME @id toward residence. Lock held; loops until the tensor
 * is READING, RESIDENT or WRITING-with-revive, or fails. */
static int start_fetch(struct nvs_swapper *s, uint64_t id, const char *call,
		       bool *waited, bool prefetch, bool try)
{
	uint64_t deadline = nvs__room_deadline(s->wait_ms), t0 = 0;
	int ret;

	for (;;) {
		struct tensor *t = NULL;
		void *buf;
		if ((ret = idle(s, id, call, &t, waited)) < 0)
			break;
		if (t->state == NVS_TENSOR_WRITING)
			t->revive = true;
		if (t->state != NVS_TENSOR_ON_NVME)
			break;
		buf = buffer_get(s);
		if (buf) {
			t->err = 0; /* a new read: an old failure is moot */
			nvs__free(t->errmsg);
			t->errmsg = NULL;
			ret = start_read(s, t, buf);
			if (ret == 0 && prefetch)
				s->st.prefetches++;
			break;
		}
		if (try) {
			/* Finished write-backs only: never block. */
			if (reap_writes(s))
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
		ret = make_room(s, deadline, call, id);
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
	pthread_mutex_lock(&s->lock);
	ret = start_fetch(s, id, "nvs_swapper_prefetch", &waited, true, false);
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
	pthread_mutex_lock(&s->lock);
	ret = start_fetch(s, id, "nvs_swapper_try_prefetch", &waited, true,
			  true);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_acquire(struct nvs_swapper *s, uint64_t id, void **ptr)
{
	uint64_t t0 = nvs__now_ns();
	bool waited = false;
	int ret;

	if (ptr)
		*ptr = NULL;
	if (!s || !ptr)
		return nvs__err(-EINVAL, "nvs_swapper_acquire: NULL argument");
	NVS__PARENT_ONLY(s, "nvs_swapper_acquire", "swapper");
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct tensor *t = NULL;
		ret = idle(s, id, "nvs_swapper_acquire", &t, &waited);
		if (ret < 0)
			break;
		if (t->state == NVS_TENSOR_RESIDENT) {
			if (t->pins++ == 0) {
				list_remove(t);
				t->holder = pthread_self();
				t->shared = false;
			}
			t->shared |= !pthread_equal(t->holder, pthread_self());
			*ptr = t->buf;
			s->st.acquires++;
			if (!waited)
				s->st.acquire_hits++;
			ret = 0;
			break;
		}
		if (t->state == NVS_TENSOR_ON_NVME && t->err) {
			/* The failed prefetch is this acquire's answer; the
			 * next one retries. */
			ret = take_error(t);
			break;
		}
		if (t->state == NVS_TENSOR_ON_NVME) {
			ret = start_fetch(s, id, "nvs_swapper_acquire", &waited,
					  false, false);
			if (ret < 0)
				break;
			continue;
		}
		if (t->state == NVS_TENSOR_WRITING)
			t->revive = true;
		waited = true;
		collect(s, t);
		if (t->state == NVS_TENSOR_ON_NVME && t->err) {
			ret = take_error(t);
			break;
		}
	}
	if (waited)
		s->st.acquire_wait_ns += nvs__now_ns() - t0;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_release(struct nvs_swapper *s, uint64_t id, bool dirty)
{
	struct tensor *t = NULL;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_release: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_release", "swapper");
	pthread_mutex_lock(&s->lock);
	t = find(s, id);
	if (!t) {
		pthread_mutex_unlock(&s->lock);
		return no_tensor(id, "nvs_swapper_release");
	}
	if (!t->pins) {
		pthread_mutex_unlock(&s->lock);
		return nvs__err(-EBUSY,
				"nvs_swapper_release: tensor %" PRIu64
				" is not acquired",
				id);
	}
	t->dirty |= dirty;
	if (--t->pins == 0) {
		list_push(&s->lru, t);
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
	while ((ret = idle(s, id, "nvs_swapper_evict", &t, NULL)) == 0) {
		if (t->pins) {
			ret = nvs__err(-EBUSY,
				       "nvs_swapper_evict: tensor %" PRIu64
				       " is acquired %u time(s)",
				       id, t->pins);
			break;
		}
		if (t->state == NVS_TENSOR_READING) {
			collect(s, t);
			continue;
		}
		if (t->state == NVS_TENSOR_WRITING)
			t->revive = false; /* evicted after all */
		if (t->state != NVS_TENSOR_RESIDENT)
			break;
		if (t->dirty) {
			ret = start_write(s, t);
		} else {
			drop(s, t);
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
	while ((ret = idle(s, id, "nvs_swapper_wait", &t, NULL)) == 0) {
		if (t->on == &s->flight) {
			collect(s, t);
			continue;
		}
		ret = take_error(t);
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_stats(const struct nvs_swapper *cs, struct nvs_swap_stats *st)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct nvs_aio_stats as;

	if (!s || !st)
		return nvs__err(-EINVAL, "nvs_swapper_stats: NULL argument");
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	st->buffer_count = nvs_pool_buffer_count(s->pool);
	st->buffer_size = s->buf_size;
	st->buffers_in_use = s->in_use;
	st->npaths = s->npaths;
	for (unsigned i = 0; i < s->npaths; i++) {
		st->path_space_used[i] = s->space[i].used;
		st->path_file_size[i] = s->path[i].file_size;
	}
	pthread_mutex_unlock(&s->lock);
	if (nvs_aio_get_stats(s->aio, &as) == 0)
		st->backend = as.backend;
	return 0;
}

int nvs_swapper_info(const struct nvs_swapper *cs, uint64_t id,
		     struct nvs_tensor_info *info)
{
	struct nvs_swapper *s = (struct nvs_swapper *)(uintptr_t)cs;
	struct tensor *t = NULL;

	if (!s || !info)
		return nvs__err(-EINVAL, "nvs_swapper_info: NULL argument");
	pthread_mutex_lock(&s->lock);
	t = find(s, id);
	if (t) {
		memset(info, 0, sizeof(*info));
		info->state = t->state;
		info->nbytes = t->nbytes;
		info->acquired = t->pins;
		info->dirty = t->dirty;
		info->on_disk = t->on_disk;
		info->extents = (unsigned)t->nexts;
	}
	pthread_mutex_unlock(&s->lock);
	return t ? 0 : no_tensor(id, "nvs_swapper_info");
}

const char *nvs_swapper_dir(const struct nvs_swapper *s, unsigned i)
{
	return s && i < s->npaths ? s->path[i].dir.path : NULL;
}
