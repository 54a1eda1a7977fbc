/* SPDX-License-Identifier: MIT */
/*
 * The CPython extension nvswap._nvswap: what its files share. It is built
 * on the public C API (include/nvswap/) only, and on the CPython C API; no
 * torch headers: tensors are reached through their Python attributes.
 */
#ifndef NVSWAP_PY_EXT_H
#define NVSWAP_PY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "nvswap/nvswap.h"

/*
 * Run the int-valued nvswap call @expr with the GIL released, storing
 * its result in @rc and, on failure, the thread's nvs_last_error() in
 * the char array @msg, copied right after the call on the same thread.
 */
#define EXT_NOGIL(rc, msg, expr)                                               \
	do {                                                                   \
		PyThreadState *ts_ = PyEval_SaveThread();                      \
		(rc) = (expr);                                                 \
		if ((rc) < 0)                                                  \
			snprintf((msg), sizeof(msg), "%s", nvs_last_error());  \
		PyEval_RestoreThread(ts_);                                     \
	} while (0)

/* ---- errors (errors.c) ------------------------------------------------ */

/* nvswap.Error (OSError), nvswap.ConfigError (Error, ValueError). */
extern PyObject *ext_Error;
extern PyObject *ext_ConfigError;

int ext_errors_init(PyObject *module);

/*
 * Raise nvswap.Error (or its subclass for @err: FileNotFoundError...) for
 * the -errno @err with the sentence @msg (nvs_last_error() of the failing
 * thread, copied right after the call). Returns NULL for `return`.
 */
PyObject *ext_raise(int err, const char *msg);
/* ext_raise(err, nvs_last_error()): for calls made on this thread. */
PyObject *ext_raise_last(int err);
/* ConfigError from a config loader's -errno and sentence. */
PyObject *ext_raise_config(int err, const char *msg);

/* ---- buffers (buffer.c) ----------------------------------------------- */

/*
 * What an op reads into or writes from: the memory of a contiguous CPU
 * torch tensor, or of an object with the buffer protocol (numpy arrays,
 * bytearray, memoryview, mmap...), and for ext_buf_get_io() that of a
 * CUDA tensor. Holds a reference to @obj, and for the buffer protocol
 * the exported view, until ext_buf_release(): an async op keeps it until
 * it completes, so the memory cannot be freed or resized under the kernel.
 */
struct ext_buf {
	void *ptr;
	size_t nbytes;
	PyObject *obj; /* strong reference; NULL when empty */
	int device;    /* CUDA device ordinal of device memory (never read
			  or written from the host: only handed to calls
			  that take it), or -1 for host memory */
	bool has_view;
	Py_buffer view;
	/*
	 * A CPU torch tensor's memory, held and checked by ext_buf_guard()
	 * (guard.c): its untyped storage (a strong reference, so a set_()
	 * cannot free the memory an op was given), the storage's data_ptr
	 * and nbytes and the tensor's data_ptr and nbytes when the op was
	 * made, and, for a storage that can be resized, the staging block
	 * @ptr points into instead of the tensor's memory (@user).
	 */
	PyObject *storage;
	uintptr_t st_ptr;
	size_t st_nbytes;
	uintptr_t t_ptr;
	void *user;
	void *stage;
	size_t stage_size;
};

/*
 * Fill @b from @obj, host memory only. @writable: the op writes into it
 * (a read), so a read-only buffer is refused. Raises TypeError (not a
 * buffer, a CUDA or other non-CPU tensor, a sparse tensor) or ValueError
 * (not contiguous, read-only, a lazily conjugated or negated tensor view)
 * naming the problem and returns -1; 0 on success.
 */
int ext_buf_get(PyObject *obj, bool writable, struct ext_buf *b);
/*
 * ext_buf_get() for calls whose C side takes device memory (the aio
 * handle's reads and writes, aio_read/aio_write): a dense contiguous
 * CUDA tensor is taken too, by data_ptr() and nbytes, once the driver
 * confirms it is device memory (nvs_gpu_pointer() == 1; else
 * nvswap.Error with ENODEV and the C library's sentence when the driver
 * cannot be used, EINVAL when it calls the memory host memory) and the
 * tensor's current CUDA stream has been synchronized. @b->device is then
 * its device. A CPU tensor costs what it costs in ext_buf_get().
 */
int ext_buf_get_io(PyObject *obj, bool writable, struct ext_buf *b);
void ext_buf_release(struct ext_buf *b);
/*
 * After ext_buf_get_io() of a CPU tensor for an op the C library runs
 * with the GIL released: hold the tensor's storage and note where its
 * memory is. A storage that can be resized (torch >= 2 says so; on torch
 * 1.13, any but nvswap's own pinned memory) is staged: @b->ptr then
 * points at an aligned block of nvswap's, holding the tensor's bytes for
 * a write (@read false), and copied into the tensor by ext_buf_settle()
 * for a read. No-op for other buffers. 0, or -1 with an exception.
 */
int ext_buf_guard(struct ext_buf *b, bool read);
/*
 * When the op is complete (GIL held): check that the tensor still uses
 * the memory the op was given; if so, and @ok, copy a staged read into
 * it. -EFAULT with @msg ("@what: the tensor ... was resized or replaced
 * while the op ran ...") when it moved, else 0. -1 never; a Python error
 * raised by the check is cleared into the sentence.
 */
int ext_buf_settle(struct ext_buf *b, bool read, bool ok, const char *what,
		   char *msg, size_t msglen);
/* Let go of what ext_buf_guard() took (ext_buf_release() calls it). */
void ext_buf_unguard(struct ext_buf *b);

/* The torch module if it is imported (borrowed), else NULL; no import. */
PyObject *ext_torch(void);
/* Is @obj a torch.Tensor (torch imported and isinstance)? */
bool ext_is_tensor(PyObject *obj);

/* ---- pinned memory (pinned.c) ----------------------------------------- */

/*
 * nvswap._nvswap.PinnedBuffer: page-locked memory from the process's
 * pinned registry, exported with the buffer protocol (writable bytes).
 * Freed (nvs_pinned_free) when the object dies: torch.frombuffer() keeps a
 * reference for as long as a tensor uses its storage.
 */
extern PyTypeObject ext_PinnedBufferType;
int ext_pinned_init(PyObject *module);
PyObject *ext_pinned_new(size_t nbytes);

/*
 * nvswap._nvswap.View: borrowed memory exported with the buffer protocol
 * (a swapper's pool buffer while a tensor is acquired). Holds @owner.
 */
extern PyTypeObject ext_ViewType;
PyObject *ext_view_new(PyObject *owner, void *ptr, size_t nbytes,
		       bool readonly);
/* Refuse new exports from now on (the memory is no longer the caller's). */
void ext_view_invalidate(PyObject *view);

/* DeepNVMe's locked tensors on nvswap's pinned pool (pinned.c). */
PyObject *ext_locked_tensor_new(struct nvs_aio *h, PyObject *num_elem,
				PyObject *example);
PyObject *ext_locked_tensor_free(PyObject *tensor);
PyObject *ext_is_pinned(PyObject *buffer);
/* torch.frombuffer(@exporter, dtype=@dtype), shaped by @shape or NULL. */
PyObject *ext_tensor_from(PyObject *exporter, PyObject *dtype, PyObject *shape);

/* ---- the aio handle and its ops (handle.c, op.c) ---------------------- */

struct ext_op;

struct ext_handle {
	PyObject ob_base;
	struct nvs_aio *h;
	PyObject *weakrefs;
	/*
	 * Ops submitted and not yet collected, oldest first; each holds a
	 * strong reference from this list. Changed only with the GIL held.
	 */
	struct ext_op *head, *tail;
	unsigned npending;
	/* Pairs with ext_op.state: waiters for an op another thread is
	 * collecting sleep on @cv (GIL released); @mu protects state
	 * changes to DONE. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/*
	 * Calls that use the C handle, or @mu and @cv, with the GIL released
	 * (changed under @mu with the GIL held); close and dealloc wait for
	 * 0 before freeing anything. @closing: close has begun, new calls
	 * are refused.
	 */
	unsigned busy;
	bool closing;
	pid_t pid; /* the process that made @h (a forked child's copy
		      frees nothing) */
};

enum ext_op_state {
	EXT_OP_PENDING = 0, /* in flight or finished, not collected */
	EXT_OP_CLAIMED,	    /* a thread is collecting it (GIL released) */
	EXT_OP_DONE,	    /* collected: result and error are final (it may
			       still be on the list, reaped early, until a
			       wait counts it) */
};

struct ext_op {
	PyObject ob_base;
	struct ext_handle *handle;  /* borrowed; NULL once done */
	struct ext_op *prev, *next; /* the handle's pending list */
	uint64_t ticket;
	int opcode; /* NVS_AIO_READ / NVS_AIO_WRITE */
	int state;  /* enum ext_op_state; written under handle->mu */
	int result; /* 0 or -errno, once DONE */
	size_t nbytes;
	int64_t offset;
	struct ext_buf buf;
	PyObject *path; /* str/bytes of the file, or NULL for an fd op */
	int fd;		/* the fd for an fd op, else -1 */
	bool validate;	/* compare with a buffered re-read on completion */
	bool on_list;	/* on handle's pending list (holding a reference) */
	char *errmsg;	/* the failure's sentence (malloc), once DONE */
};

extern PyTypeObject ext_HandleType;
extern PyTypeObject ext_OpType;
/* "read of N bytes from PATH at offset O" (or "fd N"), for sentences. */
void ext_op_describe(char *out, size_t len, int opcode, size_t nbytes,
		     const char *path, int fd, int64_t offset);
int ext_handle_init(PyObject *module);
int ext_op_init(PyObject *module);

/*
 * Submit one op on @self (GIL held on entry and exit; released around the
 * submit). @path: a str or bytes (filesystem encoding), or NULL with @fd.
 * Steals nothing: on success the new op holds @buf's references (moved out
 * of @buf). Returns the new op (a new reference, also on the pending
 * list), or NULL with an exception set and @buf untouched.
 */
struct ext_op *ext_op_submit(struct ext_handle *self, int opcode,
			     struct ext_buf *buf, PyObject *path, int fd,
			     int64_t offset, bool validate);
/*
 * Collect every pending op of @self, oldest first, until none is left
 * (ops other threads submit meanwhile included). Returns how many were
 * collected, or -1 with nvswap.Error raised for the first that failed
 * (all of them are collected even then).
 */
Py_ssize_t ext_handle_wait_all(struct ext_handle *self);
/*
 * Mark a call that will release the GIL while using @h: refused with
 * ValueError (returns -1) when the handle is closed or closing.
 * ext_handle_hold() never refuses (for an op whose handle is closing: the
 * closer collects it). Each is paired with ext_handle_leave().
 */
int ext_handle_enter(struct ext_handle *h);
void ext_handle_hold(struct ext_handle *h);
void ext_handle_leave(struct ext_handle *h);
/* Wait without the GIL until no call holds @h (close, dealloc). */
void ext_handle_quiesce(struct ext_handle *h);

/* Wait for @op alone (it stays on no list); 0 or -1 with Error raised. */
int ext_op_wait(struct ext_op *op);

/*
 * aio_handle.__init__ (block_size, queue_depth, ..., max_ops), the C
 * handle made with nvs_aio_opts.use_gds = @use_gds (gds_handle's).
 */
int ext_handle_tp_init(PyObject *o, PyObject *args, PyObject *kwds,
		       bool use_gds);

/*
 * A new nvswap.aio_handle over a C handle made from @opts (borrowed for
 * the call; GIL released around the create). NULL with Error raised.
 */
PyObject *ext_handle_from_opts(const struct nvs_aio_opts *opts);
/* A backend name ('auto', 'io_uring', 'libaio', 'psync'); NULL and None
 * leave @out alone. ValueError otherwise. */
int ext_parse_backend(PyObject *v, enum nvs_backend *out);

/* ---- GPUs (gpu.c) ----------------------------------------------------- */

/* nvswap.gds_handle (an aio_handle subtype with use_gds) and gpu_info(). */
int ext_gpu_init(PyObject *module);

/* ---- the config (config.c) -------------------------------------------- */

struct ext_config {
	PyObject ob_base;
	struct nvs_config *cfg; /* never NULL once made; read-only */
	PyObject *source;	/* the path or the name given, or None */
};

extern PyTypeObject ext_ConfigType;
int ext_config_init(PyObject *module);
/* "param" or "optimizer"; ValueError otherwise. */
int ext_offload_kind(PyObject *v, enum nvs_offload_kind *out);

/* ---- lent memory (lend.c) --------------------------------------------- */

/*
 * What an acquire hands out for @nbytes at @ptr, memory @owner lends
 * until a release: a torch tensor (torch.frombuffer() of a View, of
 * @dtype or torch.uint8, viewed as @shape) or, when @want_mv or torch
 * cannot be imported, a memoryview (cast to the struct format @dtype and
 * @shape when given). The View holds @owner. A record to revoke it is
 * appended to the list @records. New reference, or NULL with an error.
 */
PyObject *ext_lend(PyObject *owner, void *ptr, size_t nbytes, bool readonly,
		   PyObject *dtype, PyObject *shape, bool want_mv,
		   PyObject *records);
/*
 * Revoke every record of the list @records and empty it: the View
 * refuses new exports, a tensor still alive is set_() to an empty one, a
 * memoryview is released. Never raises (a failure is reported as
 * unraisable); keeps any exception already set.
 */
void ext_revoke_all(PyObject *records);
/* ext_revoke_all() on every list of records in the dict @held, which is
 * emptied first. */
void ext_revoke_held(PyObject *held);

/* ---- the swapper (swapper.c) and its roles (offload.c) ----------------- */

/*
 * Calls in progress with the GIL released on an object that close() must
 * not destroy under them. Fields under @mu (entered and left with the
 * GIL held; drained with it released).
 */
struct ext_gate {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* signalled when users drops to 0 */
	unsigned users;
	bool closing; /* close() started: enter() refuses */
	bool closed;  /* drained: nothing may enter any more */
};

void ext_gate_init(struct ext_gate *g);
void ext_gate_fini(struct ext_gate *g);
/*
 * Count a call in (GIL held). 0, or -1 (no exception set) when the
 * object is closing or closed; @force: also while it is closing (still
 * refused once closed).
 */
int ext_gate_enter(struct ext_gate *g, bool force);
void ext_gate_leave(struct ext_gate *g);
/* Refuse new calls and wait (GIL released) until none is in progress;
 * false when it was already closing or closed (another close). */
bool ext_gate_drain(struct ext_gate *g);

struct ext_role;

struct ext_swapper {
	PyObject ob_base;
	struct nvs_swapper *s; /* NULL once destroyed */
	PyObject *weakrefs;
	/* id -> [count, record...]: what acquire() lent, revoked by the
	 * release that brings count to 0, by close and dealloc. GIL. */
	PyObject *held;
	struct ext_role *roles; /* role swappers over this one, each
				   unlinked by its own dealloc. GIL. */
	struct ext_gate gate;
};

extern PyTypeObject ext_SwapperType;
int ext_swapper_init(PyObject *module);
/* Swapper() and Swapper.__init__: the options and the C swapper
 * (swapper_init.c). */
PyObject *ext_swapper_new(PyTypeObject *type, PyObject *args, PyObject *kwds);
int ext_swapper_tp_init(PyObject *o, PyObject *args, PyObject *kwds);
/* A persistent swap set's methods: checkpoint, generations, tags, ids
 * (swapset.c); ext_swapper_init() adds them to the type's. */
extern PyMethodDef ext_swapset_methods[];
/* Swapper.add_file() and register_file() (backing.c). */
extern PyMethodDef ext_backing_methods[];
/* ParamSwapper.add_layer(sources=): @n (file, offset) tuples or None
 * (zeros) into @out; -1 with TypeError/ValueError set (backing.c). */
int ext_layer_sources(PyObject *v, unsigned n, struct nvs_layer_source *out);
/* Count a call in; ValueError when the swapper is closed or closing. */
int ext_swapper_enter(struct ext_swapper *self);
/* An int-valued call on the swapper with the GIL released, the call
 * counted out; nvswap.Error raised when @rc < 0. */
#define EXT_SWAPPER_CALL(self, rc, expr)                                       \
	do {                                                                   \
		char msg_[NVS_ERRMSG_MAX] = "";                                \
		EXT_NOGIL(rc, msg_, expr);                                     \
		ext_gate_leave(&(self)->gate);                                 \
		if ((rc) < 0)                                                  \
			ext_raise((rc), msg_);                                 \
	} while (0)
/* nvs_swap_stats and nvs_tensor_info as dicts (swapinfo.c). */
PyObject *ext_swap_stats_dict(const struct nvs_swap_stats *st);
/* aio_handle.stats(): nvs_aio_stats as a dict (swapinfo.c). */
PyObject *ext_aio_stats_dict(const struct nvs_aio_stats *st);
PyObject *ext_tensor_info_dict(const struct nvs_tensor_info *ti);
/* ValueError for a closed swapper; "nvswap: <what> is closed". */
PyObject *ext_raise_closed(const char *what);

/* A parameter, optimizer or gradient swapper (offload.c, role.c). */
struct ext_role {
	PyObject ob_base;
	struct ext_swapper *core;     /* strong */
	struct ext_role *prev, *next; /* core->roles */
	int kind;		      /* enum role_kind (role.h) */
	void *p;		      /* the C role swapper; NULL once
					 destroyed (under @mu) */
	PyObject *specs; /* group -> tuple of (nbytes, dtype, shape) */
	PyObject *held;	 /* group -> list of records (GIL) */
	PyObject *weakrefs;
	/* Calls in progress: close() waits for them (a call lends memory
	 * after its C call returned), then destroys. Each call is also in
	 * the core's gate. */
	struct ext_gate gate;
	/* offload.h: a role swapper is used by one thread at a time: held
	 * for a whole method (role_enter..role_leave). Always taken with
	 * the GIL released; may be held while taking the GIL back. */
	pthread_mutex_t mu;
};

int ext_offload_init(PyObject *module);
/*
 * Destroy @r's C swapper (the core is drained: nobody else is in it).
 * Revokes what it lent. Returns 0 or the -errno of the destroy with @msg
 * (NVS_ERRMSG_MAX bytes) written.
 */
int ext_role_destroy(struct ext_role *r, char *msg);

/* ---- the checkpoint writer (ckpt.c) ----------------------------------- */

/* nvswap._nvswap.CkptWriter over nvs_ckpt_writer. */
int ext_ckpt_init(PyObject *module);

#endif
