/* SPDX-License-Identifier: MIT */
/*
 * nvswap.aio_handle: DeepNVMe's aio_handle (DeepSpeed's method names,
 * argument names and order, defaults and return values) on the C handle,
 * plus per-op futures and file descriptors. Where DeepSpeed asserts,
 * aborts or ignores a failed completion, this raises nvswap.Error.
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define HANDLE(o) ((struct ext_handle *)(o))

static int check_open(struct ext_handle *self)
{
	if (self->h && !self->closing)
		return 0;
	PyErr_SetString(PyExc_ValueError, "nvswap: I/O on a closed aio_handle");
	return -1;
}

int ext_parse_backend(PyObject *v, enum nvs_backend *out)
{
	static const enum nvs_backend all[] = {
		NVS_BACKEND_AUTO, NVS_BACKEND_IO_URING, NVS_BACKEND_LIBAIO,
		NVS_BACKEND_PSYNC};
	const char *s;

	if (!v || v == Py_None)
		return 0;
	s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
	for (size_t i = 0; s && i < sizeof(all) / sizeof(all[0]); i++) {
		if (!strcmp(s, nvs_backend_name(all[i]))) {
			*out = all[i];
			return 0;
		}
	}
	if (!PyErr_Occurred())
		PyErr_Format(PyExc_ValueError,
			     "nvswap: backend must be 'auto', 'io_uring', "
			     "'libaio' or 'psync', not %R",
			     v);
	return -1;
}

static int parse_direct(PyObject *v, enum nvs_direct *out)
{
	int t;

	if (!v || v == Py_None) {
		*out = NVS_DIRECT_AUTO;
		return 0;
	}
	t = PyObject_IsTrue(v);
	if (t < 0)
		return -1;
	*out = t ? NVS_DIRECT_ALWAYS : NVS_DIRECT_NEVER;
	return 0;
}

static int u32_arg(PyObject *v, const char *what, uint32_t *out)
{
	int64_t x;

	if (ext_arg_i64(v, what, *out, &x))
		return -1;
	if (x < 0 || x > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError,
			     "nvswap: %s %lld is out of range", what,
			     (long long)x);
		return -1;
	}
	*out = (uint32_t)x;
	return 0;
}

int ext_handle_tp_init(PyObject *o, PyObject *args, PyObject *kwds,
		       bool use_gds)
{
	static char *kwlist[] = {"block_size",
				 "queue_depth",
				 "single_submit",
				 "overlap_events",
				 "intra_op_parallelism",
				 "backend",
				 "direct",
				 "max_ops",
				 NULL};
	struct ext_handle *self = HANDLE(o);
	PyObject *bs = NULL, *qd = NULL, *ss = NULL, *oe = NULL, *par = NULL,
		 *backend = NULL, *direct = NULL, *max_ops = NULL;
	struct nvs_aio_opts opts;
	struct nvs_aio *h;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOOOO$OOO", kwlist, &bs,
					 &qd, &ss, &oe, &par, &backend, &direct,
					 &max_ops))
		return -1;
	if (self->h) {
		PyErr_SetString(PyExc_RuntimeError,
				"nvswap: aio_handle.__init__ called twice");
		return -1;
	}
	nvs_aio_opts_init(&opts);
	if (u32_arg(bs, "block_size", &opts.block_size) ||
	    u32_arg(qd, "queue_depth", &opts.queue_depth) ||
	    ext_arg_bool(ss, false, &opts.single_submit) ||
	    ext_arg_bool(oe, false, &opts.overlap_events) ||
	    u32_arg(par, "intra_op_parallelism", &opts.intra_op_parallelism) ||
	    ext_parse_backend(backend, &opts.backend) ||
	    parse_direct(direct, &opts.direct) ||
	    u32_arg(max_ops, "max_ops", &opts.max_ops))
		return -1;
	opts.use_gds = use_gds;
	Py_BEGIN_ALLOW_THREADS
	rc = nvs_aio_create(&opts, &h);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		ext_raise_last(rc);
		return -1;
	}
	self->h = h;
	self->pid = getpid();
	return 0;
}

static int handle_init(PyObject *o, PyObject *args, PyObject *kwds)
{
	return ext_handle_tp_init(o, args, kwds, false);
}

static PyObject *handle_new(PyTypeObject *type, PyObject *Py_UNUSED(a),
			    PyObject *Py_UNUSED(k))
{
	struct ext_handle *self = (struct ext_handle *)type->tp_alloc(type, 0);

	if (!self)
		return NULL;
	pthread_mutex_init(&self->mu, NULL);
	pthread_cond_init(&self->cv, NULL);
	return (PyObject *)self;
}

PyObject *ext_handle_from_opts(const struct nvs_aio_opts *opts)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct ext_handle *self;
	PyThreadState *ts;
	struct nvs_aio *h;
	int rc;

	self = (struct ext_handle *)handle_new(&ext_HandleType, NULL, NULL);
	if (!self)
		return NULL;
	ts = PyEval_SaveThread();
	rc = nvs_aio_create(opts, &h);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	PyEval_RestoreThread(ts);
	if (rc < 0) {
		Py_DECREF(self);
		return ext_raise(rc, msg);
	}
	self->h = h;
	self->pid = getpid();
	return (PyObject *)self;
}

/*
 * Drain and free the C handle. @report: failures of ops nobody waited for
 * become an exception (close) rather than an unraisable warning (GC).
 */
static int handle_shutdown(struct ext_handle *self, bool report)
{
	PyObject *exc = NULL, *tb = NULL, *type = NULL;
	bool child;
	int rc;

	if (!self->h || self->closing)
		return 0;
	self->closing = true;
	/*
	 * In a child forked after the handle was made, the threads counted
	 * in busy were the parent's (they never leave here), and every C
	 * call fails with -ECHILD, freeing nothing: collecting the listed
	 * ops just marks them failed. Only close() says so; a child that
	 * merely drops its copy has nothing to report.
	 */
	child = self->pid != getpid();
	/* Calls of other threads first: a sync read may be in the C handle
	 * with the GIL released, or about to put an op on the list. */
	if (!child)
		ext_handle_quiesce(self);
	if (ext_handle_wait_all(self) < 0) {
		if (report)
			PyErr_Fetch(&type, &exc, &tb);
		else if (child)
			PyErr_Clear();
		else
			PyErr_WriteUnraisable((PyObject *)self);
	}
	/* Then Op.wait() calls that were waiting for what we collected. */
	if (!child)
		ext_handle_quiesce(self);
	Py_BEGIN_ALLOW_THREADS
	rc = nvs_aio_destroy(self->h);
	Py_END_ALLOW_THREADS
	self->h = NULL;
	if (exc) {
		PyErr_Restore(type, exc, tb);
		return -1;
	}
	if (rc < 0) {
		ext_raise_last(rc);
		if (!report && child) {
			PyErr_Clear();
			return 0;
		}
		if (!report) {
			PyErr_WriteUnraisable((PyObject *)self);
			return 0;
		}
		return -1;
	}
	return 0;
}

/*
 * Drain and free the C handle when the object dies. In tp_finalize, not
 * dealloc: the object is alive here, so reporting a failure with
 * PyErr_WriteUnraisable(self) (which takes a reference) is safe.
 */
static void handle_finalize(PyObject *o)
{
	PyObject *type, *value, *tb;

	/* Freed perhaps while an exception propagates: keep it. */
	PyErr_Fetch(&type, &value, &tb);
	handle_shutdown(HANDLE(o), false);
	PyErr_Restore(type, value, tb);
}

static void handle_dealloc(PyObject *o)
{
	struct ext_handle *self = HANDLE(o);

	if (PyObject_CallFinalizerFromDealloc(o) < 0)
		return; /* resurrected by the unraisable hook */
	if (self->weakrefs)
		PyObject_ClearWeakRefs(o);
	pthread_cond_destroy(&self->cv);
	pthread_mutex_destroy(&self->mu);
	Py_TYPE(o)->tp_free(o);
}

/* ---- getters ---------------------------------------------------------- */

#define GETTER(name, conv)                                                     \
	static PyObject *handle_##name(PyObject *o,                            \
				       PyObject *Py_UNUSED(ignored))           \
	{                                                                      \
		if (check_open(HANDLE(o)))                                     \
			return NULL;                                           \
		return conv(nvs_aio_##name(HANDLE(o)->h));                     \
	}
GETTER(get_block_size, PyLong_FromUnsignedLong)
GETTER(get_queue_depth, PyLong_FromUnsignedLong)
GETTER(get_single_submit, PyBool_FromLong)
GETTER(get_overlap_events, PyBool_FromLong)
GETTER(get_intra_op_parallelism, PyLong_FromUnsignedLong)
GETTER(get_alignment, PyLong_FromUnsignedLong)
#undef GETTER

/* ---- reads and writes ------------------------------------------------- */

/*
 * The arguments every op takes, checked and converted; on success the
 * handle is entered (ext_handle_leave() when done), @buf holds the
 * buffer and @path a new reference (or NULL with @fd). -1 with an
 * exception and nothing held otherwise.
 */
static int prepare(struct ext_handle *self, int opcode, PyObject *bufobj,
		   PyObject *file, PyObject *offobj, struct ext_buf *buf,
		   PyObject **path, int *fd, int64_t *off)
{
	if (check_open(self) || ext_arg_i64(offobj, "file_offset", 0, off))
		return -1;
	if (*off < 0) {
		PyErr_Format(PyExc_ValueError,
			     "nvswap: file_offset %lld is negative",
			     (long long)*off);
		return -1;
	}
	if (ext_arg_file(file, path, fd))
		return -1;
	if (ext_buf_get_io(bufobj, opcode == NVS_AIO_READ, buf)) {
		Py_CLEAR(*path);
		return -1;
	}
	if (ext_buf_guard(buf, opcode == NVS_AIO_READ) ||
	    ext_handle_enter(self)) {
		ext_buf_release(buf);
		Py_CLEAR(*path);
		return -1;
	}
	return 0;
}

/*
 * One op from already-bound arguments. @async_: return 0 once queued (the
 * op is collected by wait()); else wait for it, with every op pending
 * before it, and return the count (DeepNVMe's sync return). @want_op:
 * return the nvswap.Op instead (submit_read/submit_write).
 */
static PyObject *do_op(struct ext_handle *self, int opcode, PyObject *bufobj,
		       PyObject *file, bool validate, bool async_,
		       PyObject *offobj, bool want_op)
{
	struct ext_buf buf;
	struct ext_op *op;
	PyObject *path = NULL;
	Py_ssize_t n;
	int64_t off;
	int fd;

	if (prepare(self, opcode, bufobj, file, offobj, &buf, &path, &fd, &off))
		return NULL;
	op = ext_op_submit(self, opcode, &buf, path, fd, off, validate);
	Py_XDECREF(path);
	if (!op) {
		ext_buf_release(&buf);
		ext_handle_leave(self);
		return NULL;
	}
	if (want_op || async_) {
		ext_handle_leave(self);
		if (want_op)
			return (PyObject *)op;
		Py_DECREF(op); /* the pending list keeps it */
		return PyLong_FromLong(0);
	}
	Py_DECREF(op);
	n = ext_handle_wait_all(self);
	ext_handle_leave(self);
	return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

/*
 * sync_pread/sync_pwrite with nothing else pending: submit and wait in one
 * GIL release, with no Op object (a small op then runs on this thread, see
 * nvs_aio_submit_wait). Returns 1 (DeepNVMe's count).
 */
static PyObject *fast_sync(struct ext_handle *self, int opcode,
			   PyObject *bufobj, PyObject *file, PyObject *offobj)
{
	char msg[NVS_ERRMSG_MAX];
	struct nvs_aio_io io;
	struct ext_buf buf;
	PyObject *path = NULL;
	int64_t off;
	int fd, rc;

	if (prepare(self, opcode, bufobj, file, offobj, &buf, &path, &fd, &off))
		return NULL;
	io.opcode = (enum nvs_aio_opcode)opcode;
	io.buf = buf.ptr;
	io.nbytes = buf.nbytes;
	io.path = path ? PyBytes_AS_STRING(path) : NULL;
	io.fd = fd;
	io.offset = off;
	Py_BEGIN_ALLOW_THREADS
	rc = nvs_aio_submit_wait(self->h, &io);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	Py_END_ALLOW_THREADS
	ext_handle_leave(self);
	/* A staged read is copied in here. A tensor read in place is not
	 * checked: only another thread could have moved it during this
	 * call, a race on the tensor itself, and the held storage kept
	 * the memory the read used (bench/RESULTS.md, "Tensors that can
	 * be resized": the check cost 0.7 us of a 4 KiB read's 3). */
	if (rc >= 0 && buf.stage) {
		char what[NVS_ERRMSG_MAX / 2];

		ext_op_describe(what, sizeof(what), opcode, buf.nbytes,
				path ? PyBytes_AS_STRING(path) : NULL, fd, off);
		rc = ext_buf_settle(&buf, opcode == NVS_AIO_READ, true, what,
				    msg, sizeof(msg));
	}
	ext_buf_release(&buf);
	Py_XDECREF(path);
	if (rc < 0)
		return ext_raise(rc, msg);
	return PyLong_FromLong(1);
}

static const char *const rw_names[] = {"buffer", "filename|fd", "validate",
				       "file_offset", NULL};
static const char *const prw_names[] = {"buffer", "filename|fd", "validate",
					"async",  "file_offset", NULL};
static const char *const sync_names[] = {"buffer", "filename|fd", "file_offset",
					 NULL};
static const char *const submit_names[] = {"buffer", "file", "offset",
					   "validate", NULL};

/* read/write: synchronous, returns 0 (DeepNVMe's read/write). */
static PyObject *rw(PyObject *o, int opcode, const char *fname,
		    PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[4], *r;
	bool validate;

	if (ext_bind(fname, args, nargs, kw, rw_names, 4, 3, a) ||
	    ext_arg_bool(a[2], false, &validate))
		return NULL;
	r = do_op(HANDLE(o), opcode, a[0], a[1], validate, false, a[3], false);
	if (!r)
		return NULL;
	Py_DECREF(r);
	return PyLong_FromLong(0);
}

static PyObject *handle_read(PyObject *o, PyObject *const *args,
			     Py_ssize_t nargs, PyObject *kw)
{
	return rw(o, NVS_AIO_READ, "read", args, nargs, kw);
}

static PyObject *handle_write(PyObject *o, PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kw)
{
	return rw(o, NVS_AIO_WRITE, "write", args, nargs, kw);
}

static PyObject *prw(PyObject *o, int opcode, const char *fname,
		     PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[5];
	bool validate, async_;

	if (ext_bind(fname, args, nargs, kw, prw_names, 5, 4, a) ||
	    ext_arg_bool(a[2], false, &validate) ||
	    ext_arg_bool(a[3], false, &async_))
		return NULL;
	return do_op(HANDLE(o), opcode, a[0], a[1], validate, async_, a[4],
		     false);
}

static PyObject *handle_pread(PyObject *o, PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kw)
{
	return prw(o, NVS_AIO_READ, "pread", args, nargs, kw);
}

static PyObject *handle_pwrite(PyObject *o, PyObject *const *args,
			       Py_ssize_t nargs, PyObject *kw)
{
	return prw(o, NVS_AIO_WRITE, "pwrite", args, nargs, kw);
}

static PyObject *sync_or_async(PyObject *o, int opcode, bool async_,
			       const char *fname, PyObject *const *args,
			       Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[3];

	if (ext_bind(fname, args, nargs, kw, sync_names, 3, 2, a))
		return NULL;
	if (!async_ && !HANDLE(o)->head)
		return fast_sync(HANDLE(o), opcode, a[0], a[1], a[2]);
	return do_op(HANDLE(o), opcode, a[0], a[1], false, async_, a[2], false);
}

#define SYNC_ASYNC(name, opcode, async_)                                       \
	static PyObject *handle_##name(PyObject *o, PyObject *const *args,     \
				       Py_ssize_t nargs, PyObject *kw)         \
	{                                                                      \
		return sync_or_async(o, opcode, async_, #name, args, nargs,    \
				     kw);                                      \
	}
SYNC_ASYNC(sync_pread, NVS_AIO_READ, false)
SYNC_ASYNC(sync_pwrite, NVS_AIO_WRITE, false)
SYNC_ASYNC(async_pread, NVS_AIO_READ, true)
SYNC_ASYNC(async_pwrite, NVS_AIO_WRITE, true)
#undef SYNC_ASYNC

static PyObject *submit(PyObject *o, int opcode, const char *fname,
			PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[4];
	bool validate;

	if (ext_bind(fname, args, nargs, kw, submit_names, 3, 2, a) ||
	    ext_arg_bool(a[3], false, &validate))
		return NULL;
	return do_op(HANDLE(o), opcode, a[0], a[1], validate, true, a[2], true);
}

static PyObject *handle_submit_read(PyObject *o, PyObject *const *args,
				    Py_ssize_t nargs, PyObject *kw)
{
	return submit(o, NVS_AIO_READ, "submit_read", args, nargs, kw);
}

static PyObject *handle_submit_write(PyObject *o, PyObject *const *args,
				     Py_ssize_t nargs, PyObject *kw)
{
	return submit(o, NVS_AIO_WRITE, "submit_write", args, nargs, kw);
}

static PyObject *handle_wait(PyObject *o, PyObject *Py_UNUSED(ignored))
{
	Py_ssize_t n;

	if (ext_handle_enter(HANDLE(o)))
		return NULL;
	n = ext_handle_wait_all(HANDLE(o));
	ext_handle_leave(HANDLE(o));
	return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

static PyObject *handle_close(PyObject *o, PyObject *Py_UNUSED(ignored))
{
	if (handle_shutdown(HANDLE(o), true))
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *handle_enter(PyObject *o, PyObject *Py_UNUSED(ignored))
{
	if (check_open(HANDLE(o)))
		return NULL;
	return Py_NewRef(o);
}

static PyObject *handle_exit(PyObject *o, PyObject *Py_UNUSED(args))
{
	return handle_close(o, NULL);
}

static PyObject *handle_new_cpu_locked_tensor(PyObject *o,
					      PyObject *const *args,
					      Py_ssize_t nargs, PyObject *kw)
{
	/* DeepSpeed spells the keyword "example_tenosr"; take both. */
	static const char *const names[] = {
		"num_elem", "example_tenosr|example_tensor", NULL};
	PyObject *a[2];

	PyObject *t;

	if (ext_bind("new_cpu_locked_tensor", args, nargs, kw, names, 2, 2,
		     a) ||
	    ext_handle_enter(HANDLE(o)))
		return NULL;
	t = ext_locked_tensor_new(HANDLE(o)->h, a[0], a[1]);
	ext_handle_leave(HANDLE(o));
	return t;
}

/* DeepSpeed names these arguments (tensor=, buffer=): keywords too. */
static PyObject *handle_free_cpu_locked_tensor(PyObject *o,
					       PyObject *const *args,
					       Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"tensor", NULL};
	PyObject *a[1];

	if (ext_bind("free_cpu_locked_tensor", args, nargs, kw, names, 1, 1,
		     a) ||
	    check_open(HANDLE(o)))
		return NULL;
	return ext_locked_tensor_free(a[0]);
}

static PyObject *handle_is_pinned(PyObject *o, PyObject *const *args,
				  Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"buffer", NULL};
	PyObject *a[1];

	if (ext_bind("is_pinned", args, nargs, kw, names, 1, 1, a) ||
	    check_open(HANDLE(o)))
		return NULL;
	return ext_is_pinned(a[0]);
}

static PyObject *handle_stats(PyObject *o, PyObject *Py_UNUSED(ignored))
{
	struct nvs_aio_stats st;
	int rc;

	if (check_open(HANDLE(o)))
		return NULL;
	rc = nvs_aio_get_stats(HANDLE(o)->h, &st);
	if (rc < 0)
		return ext_raise_last(rc);
	return ext_aio_stats_dict(&st);
}

static PyObject *handle_get_backend(PyObject *o, void *Py_UNUSED(c))
{
	if (check_open(HANDLE(o)))
		return NULL;
	return PyUnicode_FromString(nvs_aio_backend_name(HANDLE(o)->h));
}

static PyObject *handle_get_pending(PyObject *o, void *Py_UNUSED(c))
{
	return PyLong_FromUnsignedLong(HANDLE(o)->npending);
}

static PyObject *handle_get_closed(PyObject *o, void *Py_UNUSED(c))
{
	return PyBool_FromLong(!HANDLE(o)->h);
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define M(name, flags, doc)                                                    \
	{                                                                      \
#name, (PyCFunction)(void (*)(void))handle_##name, flags, doc  \
	}

static PyMethodDef handle_methods[] = {
	M(get_block_size, METH_NOARGS,
	  "get_block_size() -> int\n\nBytes per request."),
	M(get_queue_depth, METH_NOARGS,
	  "get_queue_depth() -> int\n\nRequests in flight per worker."),
	M(get_single_submit, METH_NOARGS,
	  "get_single_submit() -> bool\n\n"
	  "One submit call per request."),
	M(get_overlap_events, METH_NOARGS,
	  "get_overlap_events() -> bool\n\n"
	  "Sliding window instead of batch-and-drain."),
	M(get_intra_op_parallelism, METH_NOARGS,
	  "get_intra_op_parallelism() -> int\n\n"
	  "Worker threads: each op is cut into this many slices."),
	M(get_alignment, METH_NOARGS,
	  "get_alignment() -> int\n\n"
	  "Buffer, offset and size alignment that lets an op go to the\n"
	  "disk without bouncing (4096, or the page size when larger).\n"
	  "Any other value works too, through bounce memory."),
	M(read, FAST,
	  "read(buffer, filename, validate, file_offset=0) -> int\n\n"
	  "Read len(buffer) bytes at file_offset of filename into buffer;\n"
	  "return 0 (DeepNVMe). validate=True re-reads the file with\n"
	  "buffered I/O and compares (nvswap.Error EBADMSG on a mismatch).\n"
	  "Unlike DeepNVMe, the file may be longer than the buffer; a read\n"
	  "past its end raises nvswap.Error (EINVAL) instead of asserting."),
	M(write, FAST,
	  "write(buffer, filename, validate, file_offset=0) -> int\n\n"
	  "Write buffer at file_offset of filename (created 0600 when\n"
	  "missing, never truncated); return 0. validate as read()."),
	M(pread, FAST,
	  "pread(buffer, filename, validate, async, file_offset=0) -> int\n"
	  "\n"
	  "async=True: queue the read and return 0; wait() collects it.\n"
	  "Otherwise read now and return how many ops completed, this one\n"
	  "and every one pending before it (1 when none was).\n"
	  "filename may also be an open file descriptor (an int).\n"
	  "Failures raise nvswap.Error (DeepNVMe returns -1 or asserts)."),
	M(pwrite, FAST,
	  "pwrite(buffer, filename, validate, async, file_offset=0) -> int\n"
	  "\nAs pread(), writing."),
	M(sync_pread, FAST,
	  "sync_pread(buffer, filename, file_offset=0) -> int\n\n"
	  "pread(buffer, filename, False, False, file_offset): the count\n"
	  "of completed ops (1 when nothing else was pending)."),
	M(sync_pwrite, FAST,
	  "sync_pwrite(buffer, filename, file_offset=0) -> int\n\n"
	  "pwrite(buffer, filename, False, False, file_offset)."),
	M(async_pread, FAST,
	  "async_pread(buffer, filename, file_offset=0) -> int\n\n"
	  "Queue a read and return 0; wait() collects it. The op holds\n"
	  "buffer (a tensor's storage too) until then, so dropping it\n"
	  "meanwhile is safe; a tensor resized or set_() elsewhere\n"
	  "meanwhile fails the read at wait() with EFAULT, its new memory\n"
	  "untouched (docs/python.md, \"Threads and lifetime\")."),
	M(async_pwrite, FAST,
	  "async_pwrite(buffer, filename, file_offset=0) -> int\n"
	  "async_pwrite(buffer, fd, file_offset=0) -> int\n\n"
	  "Queue a write to a path or an open file descriptor; return 0."),
	M(wait, METH_NOARGS,
	  "wait() -> int\n\n"
	  "Block (without the GIL) until every queued op is complete;\n"
	  "return how many completed (0 when none was pending: DeepNVMe\n"
	  "asserts there). If any failed, all are still collected, then\n"
	  "nvswap.Error is raised for the first failure."),
	M(submit_read, FAST,
	  "submit_read(buffer, file, offset=0, validate=False) -> Op\n\n"
	  "Queue a read of len(buffer) bytes at offset of file (a path or\n"
	  "an open file descriptor) and return its nvswap.Op future."),
	M(submit_write, FAST,
	  "submit_write(buffer, file, offset=0, validate=False) -> Op\n\n"
	  "Queue a write and return its nvswap.Op future."),
	M(new_cpu_locked_tensor, FAST,
	  "new_cpu_locked_tensor(num_elem, example_tenosr) -> torch.Tensor\n"
	  "\n"
	  "A 1-D tensor of num_elem elements of example_tenosr's dtype in\n"
	  "page-locked, zero-filled memory aligned for O_DIRECT (nvswap's\n"
	  "pinned pool), so I/O on it never bounces. The memory returns to\n"
	  "the pool when free_cpu_locked_tensor() is called or when the\n"
	  "last tensor using it dies. (The keyword is spelled as DeepSpeed\n"
	  "spells it; example_tensor is accepted too.)"),
	M(free_cpu_locked_tensor, FAST,
	  "free_cpu_locked_tensor(tensor) -> bool\n\n"
	  "Release a tensor from new_cpu_locked_tensor(): it becomes empty\n"
	  "and its memory returns to the pool once no view of it remains.\n"
	  "False (nothing changed) for a tensor not in pinned memory."),
	M(is_pinned, FAST,
	  "is_pinned(buffer) -> bool\n\n"
	  "Whether I/O on buffer goes to the disk without a bounce copy:\n"
	  "it lies in nvswap's pinned memory or torch pinned it."),
	M(stats, METH_NOARGS,
	  "stats() -> dict\n\n"
	  "The handle's counters since creation (nvs_aio_stats): ops,\n"
	  "bytes, bounced requests, the backend and why it was chosen;\n"
	  "device_bytes and gds_bytes: bytes of ops on CUDA memory staged\n"
	  "through pinned memory, and moved by cuFile (gds_handle);\n"
	  "busy_ns: time with at least one op in flight."),
	M(close, METH_NOARGS,
	  "close() -> None\n\n"
	  "Wait for every queued op, then free the handle and its threads.\n"
	  "Raises nvswap.Error for a failed op nobody waited for (a\n"
	  "write-behind failure is never silent). Idempotent."),
	{"__enter__", (PyCFunction)handle_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)handle_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};
#undef M
#undef FAST

static PyGetSetDef handle_getset[] = {
	{"backend", handle_get_backend, NULL,
	 "the backend in use: 'io_uring', 'libaio' or 'psync'", NULL},
	{"pending", handle_get_pending, NULL,
	 "ops queued and not yet collected by a wait", NULL},
	{"closed", handle_get_closed, NULL, "True after close()", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ext_HandleType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.aio_handle",
	.tp_basicsize = sizeof(struct ext_handle),
	.tp_dealloc = handle_dealloc,
	.tp_finalize = handle_finalize,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc =
		"aio_handle(block_size=1048576, queue_depth=128,\n"
		"           single_submit=False, overlap_events=False,\n"
		"           intra_op_parallelism=1, *, backend='auto',\n"
		"           direct=None, max_ops=0)\n\n"
		"DeepNVMe's aio_handle on nvswap: the same methods, argument\n"
		"names, defaults and return values, so DeepSpeed runs on it\n"
		"(nvswap.deepspeed.install()). Buffers are CPU torch tensors,\n"
		"numpy arrays or any writable (for reads) buffer, contiguous,\n"
		"pinned or not, at any alignment, or contiguous CUDA tensors\n"
		"(staged through pinned memory; the tensor's current stream is\n"
		"synchronized before the op). Every blocking call releases\n"
		"the GIL. Failures raise nvswap.Error (an OSError with the\n"
		"errno and nvswap's sentence) where DeepNVMe returns -1,\n"
		"asserts or drops the error.\n\n"
		"Keyword-only extras: backend ('auto', 'io_uring', 'libaio',\n"
		"'psync'), direct (None: O_DIRECT where the filesystem allows;\n"
		"True: always; False: page cache), max_ops (op slots, 0 =\n"
		"1024). Usable as a context manager (close() on exit).",
	.tp_weaklistoffset = offsetof(struct ext_handle, weakrefs),
	.tp_methods = handle_methods,
	.tp_getset = handle_getset,
	.tp_init = handle_init,
	.tp_new = handle_new,
};

int ext_handle_init(PyObject *module)
{
	if (PyType_Ready(&ext_HandleType) < 0)
		return -1;
	return PyModule_AddObjectRef(module, "aio_handle",
				     (PyObject *)&ext_HandleType);
}
