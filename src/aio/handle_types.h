/* SPDX-License-Identifier: MIT */
/*
 * The aio handle's private state: the handle, its op slots, the slices an
 * op is cut into, the requests a slice is cut into, and the workers. Shared
 * by the files that implement the handle (handle.c, ticket.c, worker.c,
 * target.c, stats.c); nothing outside src/aio includes it.
 */
#ifndef NVS_AIO_HANDLE_TYPES_H
#define NVS_AIO_HANDLE_TYPES_H

#include "aio/engine.h"
#include "aio/stats.h"
#include "gpu/stage.h"
#include "internal/util.h"
#include "nvswap/aio.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define NVS_OP_SLOT_BITS 20u
#define NVS_OP_SLOT_MASK ((1u << NVS_OP_SLOT_BITS) - 1)
#define NVS_OP_PATH_KEEP 256 /* path bytes kept for error messages */

enum nvs_op_state { NVS_OP_FREE = 0, NVS_OP_RUNNING, NVS_OP_DONE };

struct nvs_op;
struct nvs_file;

/* What an op runs on (aio/target.h resolves and releases it). */
struct nvs_target {
	int fd, bfd;
	bool own_fd, own_bfd, direct;
	bool edges; /* unaligned head or tail: bfd is open for them */
	struct nvs_dio_align al;
	unsigned max_segments; /* of the disk's queue, 0 = unknown */
	struct nvs_file *file; /* from the cache: fd and bfd belong to it */
	unsigned closed;       /* idle cached files this op closed */
};

struct nvs_edge {
	char *buf;
	int64_t off;
	size_t len;
};

/* The part of an op one worker does. Owned by that worker while queued. */
struct nvs_slice {
	struct nvs_op *op;
	struct nvs_slice *next;	 /* worker queue, then active list */
	struct nvs_slice *prev;	 /* active list */
	char *buf;		 /* user memory at the body's start */
	int64_t off;		 /* file offset of the body */
	size_t len;		 /* body bytes (aligned when direct) */
	size_t issued;		 /* body bytes cut into requests so far */
	unsigned outstanding;	 /* requests in flight */
	bool started;		 /* edges done, body may be issued */
	int err;		 /* first failure, stops issuing */
	struct nvs_edge edge[2]; /* unaligned head and tail, buffered I/O */
};

struct nvs_op {
	/* Protected by h->lock. */
	enum nvs_op_state state;
	bool ticket;
	bool owned;   /* a ticket nvs_aio_wait leaves to its owner */
	uint32_t gen; /* bumped on every reuse: stale tickets miss */
	uint64_t seq; /* submission order, for "first failed op" */
	int err;
	char msg[NVS_ERRMSG_MAX];
	struct nvs_op *next_free;
	/* Written by the submitter before dispatch, then read-only. */
	bool write;
	bool stage_all;		/* bounce every request, aligned or not */
	struct nvs_gpu_mem mem; /* device memory: staged (or cuFile) */
	bool gds;		/* moved by cuFile (use_gds handle) */
	void *gds_fh;		/* its cuFile handle, closed at the end */
	struct nvs_target t;	/* descriptors, released when the op ends */
	uint32_t mem_align;
	uint32_t grain; /* body boundaries: edges never share a page */
	size_t chunk;	/* request size for this file */
	int64_t offset;
	size_t nbytes;
	char path[NVS_OP_PATH_KEEP];
	/* Slices not finished; the worker that takes it to 0 finishes. */
	atomic_uint slices_left;
	struct nvs_slice *slices; /* nworkers of them */
};

struct nvs_req {
	struct nvs_ioreq io; /* first: engine hands back &io */
	struct nvs_slice *s;
	char *user; /* bounce reads: where the bytes go */
	int slot;   /* bounce slot, or -1 */
	struct nvs_req *next_free;
};

struct nvs_worker {
	struct nvs_aio *h;
	pthread_t thread;
	bool running;
	/* lock protects qhead, qtail and stop; cond wakes the worker. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct nvs_slice *qhead, *qtail;
	bool stop;
	/* Worker thread only. */
	struct nvs_engine *eng;
	struct nvs_req *reqs, *free_reqs;
	struct nvs_ioreq **batch;
	struct nvs_ioreq **done;
	struct nvs_slice *ahead, *atail; /* active slices */
	char *bounce;
	size_t slot_size;
	unsigned nslots, nfree_slots;
	int *free_slots;
	bool bounce_locked;
	struct nvs_gpu_lane *lane; /* device copies, made at first use */
	char *edge_scratch;	   /* device ops' edges, pinned, at first use */
	uint64_t retries_seen;	   /* engine retries already counted */
	uint64_t closes_seen;	   /* file-cache closes already acted on */
	/* Start-up, under lock: the worker creates its own engine (an
	 * io_uring ring is then single-issuer) and reports here. */
	bool ready;
	int init_ret;
	char init_msg[NVS_ERRMSG_MAX];
};

struct nvs_aio {
	struct nvs_aio_opts opts;
	unsigned long born; /* fork generation: see internal/fork.h */
	enum nvs_backend backend;
	enum nvs_backend_reason backend_reason;
	char backend_name[32];
	char backend_notes[240];
	unsigned nworkers;
	struct nvs_worker *workers;
	const struct nvs_fault_plan *plan; /* &fault, or NULL */
	struct nvs_fault_plan fault;	   /* the tests' plan, copied */
	atomic_ulong submits; /* nvs_aio_submit calls, for REFUSE rules */
	/* nvs_aio_set_queue_limit()'s depth; 0: opts.queue_depth */
	_Atomic uint32_t queue_limit;
	_Atomic uint32_t req_high; /* nvs_aio_stats.requests_high_water */
	/* lock protects the op slots' state/err/msg, the free list and every
	 * field up to first_msg; cond signals op completion and free slots. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct nvs_op *ops;
	unsigned nops;
	struct nvs_op *free_ops;
	unsigned inflight;     /* ops submitted and not finished */
	uint64_t busy_since;   /* when inflight last left 0 (ns) */
	uint64_t busy_ns;      /* time with inflight above 0, closed spans */
	unsigned finished;     /* untracked ops finished since last wait */
	unsigned tickets_done; /* finished ticketed ops not yet collected */
	unsigned owned_done;   /* the same for owned ones (their owner will) */
	uint64_t next_seq;
	unsigned rr;   /* first worker of the next op */
	int first_err; /* first failed untracked op since last wait */
	uint64_t first_seq;
	char first_msg[NVS_ERRMSG_MAX];
	struct nvs_aio_counters c;
	struct nvs_slice *slices;
	struct nvs_files *files; /* NULL when caching is off */
};

/* The requests in flight a worker keeps to now (nvs_aio_set_queue_limit). */
static inline unsigned nvs__aio_queue_limit(const struct nvs_aio *h)
{
	uint32_t lim =
		atomic_load_explicit(&h->queue_limit, memory_order_relaxed);

	return lim ? lim : h->opts.queue_depth;
}

/* An op goes in flight / finishes: the busy time (nvs_aio_stats.busy_ns)
 * opens when the first goes in and closes when the last is done. Called
 * with h->lock held. */
static inline void nvs__aio_inflight_add(struct nvs_aio *h)
{
	if (h->inflight++ == 0)
		h->busy_since = nvs__now_ns();
}

static inline void nvs__aio_inflight_done(struct nvs_aio *h)
{
	if (--h->inflight == 0)
		h->busy_ns += nvs__now_ns() - h->busy_since;
}

static inline const char *nvs__aio_opname(bool write)
{
	return write ? "write" : "read";
}

#endif
