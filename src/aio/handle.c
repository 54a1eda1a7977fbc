// SPDX-License-Identifier: MIT
/*
 * The aio handle (DeepNVMe's aio_handle): create and destroy, the backend
 * probe that starts its workers, and submission: an op is checked and its
 * target opened on the caller's thread (target.c), given a slot (ticket.c)
 * and cut into slices queued to the workers (worker.c). Also the DeepNVMe
 * pread/pwrite forms and its locked-buffer calls.
 */
#include "aio/handle.h"
#include "aio/handle_types.h"
#include "aio/inline.h"
#include "aio/opts.h"
#include "aio/target.h"
#include "aio/ticket.h"
#include "aio/worker.h"
#include "aio/engine.h"
#include "aio/files.h"
#include "buffers/pinned.h"
#include "gpu/driver.h"
#include "gpu/gds.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- create */

static void handle_free(struct nvs_aio *h)
{
	nvs__workers_teardown(h);
	nvs__pinned_users(-1); /* and the bounce memory goes back */
	nvs__files_destroy(h->files);
	nvs__free(h->workers);
	nvs__free(h->slices);
	nvs__free(h->ops);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	nvs__free(h);
}

static void note(struct nvs_aio *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct nvs_aio *h, const char *fmt, ...)
{
	size_t len = strlen(h->backend_notes);
	va_list ap;

	if (len >= sizeof(h->backend_notes) - 1)
		return;
	va_start(ap, fmt);
	vsnprintf(h->backend_notes + len, sizeof(h->backend_notes) - len, fmt,
		  ap);
	va_end(ap);
}

/*
 * Pick and start the backend. AUTO walks io_uring -> libaio -> psync and
 * takes the first that probes well and starts; an explicit one must work
 * (-EOPNOTSUPP with the reason when the kernel refuses it).
 */
static int start_backend(struct nvs_aio *h)
{
	static const enum nvs_backend chain[] = {
		NVS_BACKEND_IO_URING, NVS_BACKEND_LIBAIO, NVS_BACKEND_PSYNC};
	enum nvs_backend want = h->opts.backend;
	char why[200];
	int ret = -EOPNOTSUPP;

	for (size_t i = 0; i < NVS_ARRAY_SIZE(chain); i++) {
		enum nvs_backend b = chain[i];
		const char *name = nvs_backend_name(b);

		if (want != NVS_BACKEND_AUTO && b != want)
			continue;
		why[0] = 0;
		ret = nvs__engine_probe(b, h->opts.queue_depth, why,
					sizeof(why));
		if (ret < 0) {
			note(h, "%s: %s; ", name, why);
			if (want != NVS_BACKEND_AUTO)
				return nvs__err(
					ret == -EINVAL ? -EINVAL : -EOPNOTSUPP,
					"nvs_aio_create: the %s backend cannot "
					"run here: %s",
					name, why);
			continue;
		}
		ret = nvs__workers_create(h, b);
		if (ret == 0) {
			note(h, "%s: chosen%s%s%s", name, want ? " (" : "",
			     want ? nvs_backend_reason_name(h->backend_reason)
				  : "",
			     want ? ")" : "");
			return 0;
		}
		if (ret == -ENOMEM || want != NVS_BACKEND_AUTO)
			return ret;
		note(h, "%s: %s; ", name, nvs_last_error());
		nvs__workers_teardown(h);
	}
	return ret;
}

static int create(const struct nvs_aio_opts *opts,
		  const struct nvs_fault_plan *plan, struct nvs_aio **out)
{
	struct nvs_aio *h;
	int ret;

	if (!out)
		return nvs__err(-EINVAL, "nvs_aio_create: out is NULL");
	*out = NULL;
	h = nvs__calloc(1, sizeof(*h));
	if (!h)
		return nvs__err(-ENOMEM, "nvs_aio_create: out of memory");
	nvs__pinned_users(1); /* until handle_free */
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	h->born = nvs__fork_gen();
	ret = nvs__aio_opts_check(&h->opts, opts, &h->backend_reason);
	if (ret == 0 && h->opts.use_gds)
		ret = nvs__gds_load("nvs_aio_create (use_gds)");
	if (ret < 0)
		goto fail;
	if (plan) {
		h->fault = *plan;
		h->plan = &h->fault;
	}
	h->nworkers = h->opts.intra_op_parallelism;
	h->nops = h->opts.max_ops;
	h->ops = nvs__calloc(h->nops, sizeof(*h->ops));
	h->slices =
		nvs__calloc((size_t)h->nops * h->nworkers, sizeof(*h->slices));
	h->workers = nvs__calloc(h->nworkers, sizeof(*h->workers));
	if (nvs__files_create(h->opts.open_files, &h->files) < 0 || !h->ops ||
	    !h->slices || !h->workers) {
		ret = nvs__err(-ENOMEM,
			       "nvs_aio_create: out of memory for "
			       "%u op slots",
			       h->nops);
		goto fail;
	}
	for (unsigned i = h->nops; i-- > 0;) {
		struct nvs_op *op = &h->ops[i];
		op->gen = 1;
		op->t.fd = op->t.bfd = -1;
		op->slices = &h->slices[(size_t)i * h->nworkers];
		op->next_free = h->free_ops;
		h->free_ops = op;
	}
	ret = start_backend(h);
	if (ret < 0)
		goto fail;
	*out = h;
	return 0;
fail:
	handle_free(h);
	return ret;
}

int nvs_aio_create(const struct nvs_aio_opts *opts, struct nvs_aio **out)
{
	return create(opts, NULL, out);
}

int nvs__aio_create_fault(const struct nvs_aio_opts *opts,
			  const struct nvs_fault_plan *plan,
			  struct nvs_aio **out)
{
	static const struct nvs_fault_plan none;
	return create(opts, plan ? plan : &none, out);
}

int nvs_aio_destroy(struct nvs_aio *h)
{
	int ret;

	if (!h)
		return 0;
	NVS__PARENT_ONLY(h, "nvs_aio_destroy", "handle");
	ret = nvs_aio_wait(h);
	handle_free(h);
	return ret < 0 ? ret : 0;
}

/* ------------------------------------------------------------- submit */

static int check_io(const struct nvs_aio *h, const struct nvs_aio_io *io,
		    const char *path)
{
	if (!h || !io)
		return nvs__err(-EINVAL, "nvs_aio_submit: %s is NULL",
				h ? "io" : "handle");
	NVS__PARENT_ONLY(h, "nvs_aio_submit", "handle");
	if (io->opcode != NVS_AIO_READ && io->opcode != NVS_AIO_WRITE)
		return nvs__err(-EINVAL, "nvs_aio_submit: unknown opcode %d",
				(int)io->opcode);
	if (!io->buf && io->nbytes > 0)
		return NVS__SUBMIT_ERR(-EINVAL, io, "%s", "buffer is NULL");
	if (!io->path && io->fd < 0)
		return NVS__SUBMIT_ERR(-EINVAL, io, "%s",
				       "path is NULL and no descriptor given");
	if (io->offset < 0)
		return NVS__SUBMIT_ERR(-EINVAL, io, "%s", "negative offset");
	if (io->nbytes > (uint64_t)INT64_MAX - (uint64_t)io->offset)
		return NVS__SUBMIT_ERR(-EINVAL, io, "%s",
				       "offset + length overflows");
	return 0;
}

/* A REFUSE rule of the tests' fault plan matching this submit: its
 * errno, else 0. */
static int refused(struct nvs_aio *h, const struct nvs_aio_io *io)
{
	unsigned long n;

	if (!h->plan)
		return 0;
	n = atomic_fetch_add_explicit(&h->submits, 1, memory_order_relaxed) + 1;
	for (unsigned i = 0; i < h->plan->nrules; i++) {
		const struct nvs_fault_rule *ru = &h->plan->rules[i];
		if (ru->kind != NVS_FAULT_REFUSE || n < ru->nth ||
		    (ru->count && n >= ru->nth + ru->count))
			continue;
		if (ru->opcode >= 0 &&
		    ru->opcode != (io->opcode == NVS_AIO_WRITE
					   ? NVS_IOREQ_WRITE
					   : NVS_IOREQ_READ))
			continue;
		return ru->refuse_err;
	}
	return 0;
}

enum submit_mode {
	QUEUE,	    /* the caller waits later, or never */
	SYNC_ALONE, /* the caller waits for this op alone, now */
	SYNC_ALL,   /* the caller waits for every op, now (DeepNVMe sync) */
};

/*
 * The submit path, top to bottom: check the op, resolve its target (one
 * call: descriptors, O_DIRECT, alignment, edges), then either run it here
 * (a small synchronous op on an idle handle: *ran is set and the result
 * returned) or take a slot and cut it into slices for the workers.
 */
static int submit(struct nvs_aio *h, const struct nvs_aio_io *io,
		  uint64_t *op_id, enum submit_mode mode, bool *ran)
{
	char fdname[32];
	const char *path;
	struct nvs_target t = {.fd = -1, .bfd = -1};
	struct nvs_gpu_mem mem = {.device = -1};
	struct nvs_op *op = NULL;
	void *gds_fh = NULL;
	unsigned k, start;
	int ret;

	if (io && !io->path)
		snprintf(fdname, sizeof(fdname), "fd %d", io->fd);
	path = io ? (io->path ? io->path : fdname) : "";
	ret = check_io(h, io, path);
	if (ret < 0)
		return ret;
	ret = refused(h, io);
	if (ret)
		return NVS__SUBMIT_ERR(-ret, io,
				       "refused by the fault plan (%s)",
				       nvs_strerror(ret));
	ret = nvs__gpu_ptr(io->buf, &mem.device, &mem.ctx);
	if (ret < 0) {
		char why[NVS_ERRMSG_MAX];
		snprintf(why, sizeof(why), "%s", nvs_last_error());
		return NVS__SUBMIT_ERR(ret, io, "%s", why);
	}
	if (ret == 0)
		mem.device = -1;
	ret = nvs__target_open(h, io, path, &t);
	if (ret == 0 && mem.device >= 0 && h->opts.use_gds)
		ret = nvs__gds_handle_open(t.fd, &gds_fh, "nvs_aio_submit");
	if (ret == 0 && mode != QUEUE && mem.device < 0 &&
	    nvs__inline_fits(h, io, &t) &&
	    nvs__inline_begin(h, mode == SYNC_ALONE)) {
		*ran = true;
		ret = nvs__inline_run(h, io, path, &t);
		nvs__target_close(h, &t);
		return ret;
	}
	if (ret == 0)
		ret = nvs__op_get_slot(h,
				       mode == SYNC_ALONE ? NVS_OP_OWNED
				       : op_id		  ? NVS_OP_TICKET
							  : NVS_OP_UNTRACKED,
				       &op);
	if (ret < 0) {
		nvs__gds_handle_close(gds_fh);
		nvs__target_close(h, &t);
		return ret;
	}
	op->write = io->opcode == NVS_AIO_WRITE;
	op->t = t; /* the op releases it when it ends */
	op->mem = mem;
	op->gds = gds_fh != NULL;
	op->gds_fh = gds_fh; /* likewise */
	op->stage_all = t.direct && nvs__target_stage_unpinned(h, &t) &&
			!nvs_pinned_contains(io->buf, io->nbytes);
	op->offset = io->offset;
	op->nbytes = io->nbytes;
	snprintf(op->path, sizeof(op->path), "%s", path);
	if (t.direct) {
		uint64_t a = t.al.offset_align;
		op->mem_align = t.al.mem_align;
		op->grain = nvs__target_edge_grain(&t);
		op->chunk = (size_t)NVS_MAX(
			a, nvs__round_down(h->opts.block_size, a));
	} else {
		op->mem_align = 1;
		op->grain = 4096;
		op->chunk = h->opts.block_size;
	}
	if (op_id)
		*op_id = ((uint64_t)op->gen << NVS_OP_SLOT_BITS) |
			 (uint64_t)(op - h->ops);
	if (io->nbytes == 0) {
		atomic_store_explicit(&op->slices_left, 1,
				      memory_order_relaxed);
		nvs__op_slice_done(h, op);
		return 0;
	}
	k = nvs__slices_plan(h, op, io->buf);
	atomic_store_explicit(&op->slices_left, k, memory_order_relaxed);
	pthread_mutex_lock(&h->lock);
	start = h->rr;
	h->rr = (h->rr + k) % h->nworkers;
	pthread_mutex_unlock(&h->lock);
	for (unsigned i = 0; i < k; i++)
		nvs__worker_enqueue(&h->workers[(start + i) % h->nworkers],
				    &op->slices[i]);
	return 0;
}

int nvs_aio_submit(struct nvs_aio *h, const struct nvs_aio_io *io,
		   uint64_t *op_id)
{
	bool ran = false;

	return submit(h, io, op_id, QUEUE, &ran);
}

int nvs_aio_submit_wait(struct nvs_aio *h, const struct nvs_aio_io *io)
{
	uint64_t id;
	bool ran = false;
	int ret = submit(h, io, &id, SYNC_ALONE, &ran);

	if (ret < 0 || ran)
		return ret;
	return nvs_aio_wait_op(h, id);
}

/* ------------------------------------------------------ DeepNVMe calls */

static int do_io(struct nvs_aio *h, enum nvs_aio_opcode opc, void *buf,
		 size_t nbytes, const char *path, int fd, int64_t off,
		 bool async)
{
	struct nvs_aio_io io = {
		.opcode = opc,
		.buf = buf,
		.nbytes = nbytes,
		.path = path,
		.fd = path ? -1 : fd,
		.offset = off,
	};
	bool ran = false;
	int ret = submit(h, &io, NULL, async ? QUEUE : SYNC_ALL, &ran);

	if (ran)
		return ret < 0 ? ret : 1; /* what nvs_aio_wait would say */
	if (ret < 0 || async)
		return ret;
	return nvs_aio_wait(h);
}

int nvs_aio_pread(struct nvs_aio *h, void *buf, size_t nbytes, const char *path,
		  int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_READ, buf, nbytes, path, -1, file_offset,
		     async);
}

int nvs_aio_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
		   const char *path, int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_WRITE, (void *)(uintptr_t)buf, nbytes, path, -1,
		     file_offset, async);
}

int nvs_aio_sync_pread(struct nvs_aio *h, void *buf, size_t nbytes,
		       const char *path, int64_t file_offset)
{
	return nvs_aio_pread(h, buf, nbytes, path, file_offset, false);
}

int nvs_aio_sync_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
			const char *path, int64_t file_offset)
{
	return nvs_aio_pwrite(h, buf, nbytes, path, file_offset, false);
}

int nvs_aio_async_pread(struct nvs_aio *h, void *buf, size_t nbytes,
			const char *path, int64_t file_offset)
{
	return nvs_aio_pread(h, buf, nbytes, path, file_offset, true);
}

int nvs_aio_async_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
			 const char *path, int64_t file_offset)
{
	return nvs_aio_pwrite(h, buf, nbytes, path, file_offset, true);
}

int nvs_aio_pread_fd(struct nvs_aio *h, void *buf, size_t nbytes, int fd,
		     int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_READ, buf, nbytes, NULL, fd, file_offset,
		     async);
}

int nvs_aio_pwrite_fd(struct nvs_aio *h, const void *buf, size_t nbytes, int fd,
		      int64_t file_offset, bool async)
{
	return do_io(h, NVS_AIO_WRITE, (void *)(uintptr_t)buf, nbytes, NULL, fd,
		     file_offset, async);
}

/* ------------------------------------------- pinned buffers (DeepNVMe) */

void *nvs_aio_new_cpu_locked_buffer(struct nvs_aio *h, size_t nbytes)
{
	int err;
	void *p;

	if (!h) {
		nvs__err(-EINVAL, "nvs_aio_new_cpu_locked_buffer: handle is "
				  "NULL");
		errno = EINVAL;
		return NULL;
	}
	p = nvs__pinned_alloc(nbytes, NVS_PINNED_ALIGN, false,
			      "nvs_aio_new_cpu_locked_buffer", NULL, &err);
	if (!p)
		errno = -err;
	return p;
}

int nvs_aio_free_cpu_locked_buffer(struct nvs_aio *h, void *ptr)
{
	if (!h || !ptr)
		return nvs__err(-EINVAL,
				"nvs_aio_free_cpu_locked_buffer: %s is NULL",
				h ? "ptr" : "handle");
	return nvs__pinned_free(ptr, "nvs_aio_free_cpu_locked_buffer");
}

bool nvs_aio_is_pinned(const struct nvs_aio *h, const void *ptr, size_t nbytes)
{
	return h && nvs_pinned_contains(ptr, nbytes);
}
