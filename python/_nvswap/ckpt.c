/* SPDX-License-Identifier: MIT */
/*
 * nvswap.CkptWriter: the checkpoint writer (nvswap/ckpt.h) as a
 * write-only file object: write() any buffer or contiguous CPU tensor,
 * close() publishes the file under its final name, abort drops it.
 * With defer=True, a write of DEFER_MIN bytes or more whose memory is
 * known to stay alive is queued (nvs_ckpt_write_async) and returns at
 * once: the memory of an object that owns it (the writer holds its
 * buffer until the copy is done), or memory inside a range registered
 * with _hold() (torch.save passes each storage as a memoryview over raw
 * memory, which owns nothing; nvswap.save registers the storages).
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Smallest write that defer=True queues. */
#define DEFER_MIN ((size_t)1 << 20)

/* Memory kept alive by @owner (a strong reference) until close. */
struct range {
	uintptr_t lo, hi;
	PyObject *owner;
};

/* A queued write's buffer, released once its copy is done. */
struct pend {
	uint64_t ticket;
	struct ext_buf b;
};

struct ext_ckpt {
	PyObject ob_base;
	/* The C writer; NULL once closed or aborted. Read and changed only
	 * with @mu held, which is always taken with the GIL released (a
	 * write may block on the disk), so nobody waits for it holding the
	 * GIL. */
	struct nvs_ckpt_writer *w;
	pthread_mutex_t mu;
	PyObject *path;	     /* the final name, as given (str or bytes) */
	uint64_t final_size; /* nvs_ckpt_offset() at close */
	/* Deferred writes; all of these are used with @mu and the GIL held
	 * (or from dealloc). */
	bool defer;
	struct range *ranges; /* sorted by lo when @sorted */
	size_t nranges, cap_ranges;
	bool sorted;
	struct pend *pend; /* FIFO: [phead, npend) are queued */
	size_t phead, npend, cap_pend;
};

#define CKPT(o) ((struct ext_ckpt *)(o))

static PyObject *ckpt_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = {"path",	  "buffer_size", "buffer_count",
				"fsync",  "size_hint",	 "mode",
				"direct", "defer",	 NULL};
	PyObject *path = NULL, *bs = NULL, *bc = NULL, *hint = NULL;
	PyObject *pathb = NULL;
	const char *direct = "auto";
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_ckpt_opts o;
	struct ext_ckpt *self;
	int fsync = 1, defer = 0, rc;
	unsigned mode = 0666;
	uint64_t x;

	nvs_ckpt_opts_init(&o);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOpOIsp:CkptWriter",
					 names, &path, &bs, &bc, &fsync, &hint,
					 &mode, &direct, &defer))
		return NULL;
	x = o.buffer_size;
	if (ext_arg_bytes(bs, "buffer_size", &x))
		return NULL;
	o.buffer_size = (size_t)x;
	if (bc && bc != Py_None) {
		if (ext_arg_u64(bc, "buffer_count", UINT32_MAX, &x))
			return NULL;
		o.buffer_count = (unsigned)x;
	}
	if (ext_arg_bytes(hint, "size_hint", &o.size_hint))
		return NULL;
	o.fsync = fsync;
	o.mode = mode;
	if (!strcmp(direct, "auto")) {
		o.direct = NVS_DIRECT_AUTO;
	} else if (!strcmp(direct, "always")) {
		o.direct = NVS_DIRECT_ALWAYS;
	} else if (!strcmp(direct, "never")) {
		o.direct = NVS_DIRECT_NEVER;
	} else {
		PyErr_Format(PyExc_ValueError,
			     "nvswap.CkptWriter: direct must be 'auto', "
			     "'always' or 'never', not '%s'",
			     direct);
		return NULL;
	}
	if (!PyUnicode_FSConverter(path, &pathb))
		return NULL;
	self = (struct ext_ckpt *)type->tp_alloc(type, 0);
	if (!self) {
		Py_DECREF(pathb);
		return NULL;
	}
	pthread_mutex_init(&self->mu, NULL);
	self->path = Py_NewRef(path);
	self->defer = defer;
	EXT_NOGIL(rc, msg,
		  nvs_ckpt_writer_open(PyBytes_AS_STRING(pathb), &o, &self->w));
	Py_DECREF(pathb);
	if (rc < 0) {
		Py_DECREF(self);
		return ext_raise(rc, msg);
	}
	return (PyObject *)self;
}

/* Take @mu without the GIL; the writer, or NULL with ValueError raised
 * (and @mu released) when it is closed. */
static struct nvs_ckpt_writer *lock(struct ext_ckpt *self, const char *what)
{
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	Py_END_ALLOW_THREADS
	if (self->w)
		return self->w;
	pthread_mutex_unlock(&self->mu);
	PyErr_Format(PyExc_ValueError,
		     "nvswap.CkptWriter.%s: the writer is "
		     "closed",
		     what);
	return NULL;
}

/* Release the buffers of queued writes whose copy is done (@all: every
 * one, the writer being closed). GIL and @mu held. */
static void reap(struct ext_ckpt *self, bool all)
{
	uint64_t done = self->w ? nvs_ckpt_async_done(self->w) : 0;

	while (self->phead < self->npend &&
	       (all || self->pend[self->phead].ticket <= done))
		ext_buf_release(&self->pend[self->phead++].b);
	if (self->phead == self->npend)
		self->phead = self->npend = 0;
}

static int cmp_range(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Is [p, p + n) inside a range registered with _hold()? */
static bool held(struct ext_ckpt *self, const void *p, size_t n)
{
	uintptr_t lo = (uintptr_t)p;
	size_t a = 0, b = self->nranges;

	if (b == 0)
		return false; /* and qsort() must not get a NULL array */
	if (!self->sorted) {
		qsort(self->ranges, self->nranges, sizeof(*self->ranges),
		      cmp_range);
		self->sorted = true;
	}
	while (a < b) { /* the first range with lo > p */
		size_t m = a + (b - a) / 2;
		if (self->ranges[m].lo <= lo)
			a = m + 1;
		else
			b = m;
	}
	return a > 0 && lo + n >= lo && lo + n <= self->ranges[a - 1].hi;
}

/* Does the buffer's object own its memory, so holding the buffer keeps
 * it valid? A memoryview without a base (PyMemoryView_FromMemory, as
 * torch.save makes) owns nothing. */
static bool owns_memory(const struct ext_buf *b)
{
	PyObject *o = b->view.obj;

	if (!b->has_view)
		return b->obj != NULL; /* a tensor, referenced */
	return o && !(PyMemoryView_Check(o) && !PyMemoryView_GET_BASE(o));
}

static PyObject *ckpt_write(PyObject *o, PyObject *data)
{
	struct ext_ckpt *self = CKPT(o);
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_ckpt_writer *w;
	bool defer, keep = false;
	uint64_t ticket = 0;
	struct ext_buf b;
	size_t n;
	int rc;

	if (ext_buf_get(data, false, &b))
		return NULL;
	w = lock(self, "write");
	if (!w) {
		ext_buf_release(&b);
		return NULL;
	}
	reap(self, false);
	n = b.nbytes;
	defer = self->defer && n >= DEFER_MIN;
	if (defer && !held(self, b.ptr, n)) {
		keep = owns_memory(&b);
		defer = keep;
	}
	if (keep && self->npend == self->cap_pend) {
		size_t cap = self->cap_pend ? 2 * self->cap_pend : 16;
		struct pend *np = PyMem_Realloc(self->pend, cap * sizeof(*np));
		if (!np) {
			pthread_mutex_unlock(&self->mu);
			ext_buf_release(&b);
			return PyErr_NoMemory();
		}
		self->pend = np;
		self->cap_pend = cap;
	}
	if (defer)
		EXT_NOGIL(rc, msg, nvs_ckpt_write_async(w, b.ptr, n, &ticket));
	else
		EXT_NOGIL(rc, msg, nvs_ckpt_write(w, b.ptr, n));
	if (rc == 0 && keep && ticket) {
		self->pend[self->npend++] = (struct pend){ticket, b};
		memset(&b, 0, sizeof(b)); /* moved */
	}
	pthread_mutex_unlock(&self->mu);
	ext_buf_release(&b);
	if (rc < 0)
		return ext_raise(rc, msg);
	return PyLong_FromSize_t(n);
}

/* _hold(owner, ptr, nbytes): keep @owner until close; queue writes that
 * lie inside [ptr, ptr + nbytes). */
static PyObject *ckpt_hold(PyObject *o, PyObject *args)
{
	struct ext_ckpt *self = CKPT(o);
	unsigned long long ptr, nbytes;
	PyObject *owner;

	if (!PyArg_ParseTuple(args, "OKK:_hold", &owner, &ptr, &nbytes))
		return NULL;
	if (!ptr || ptr + nbytes < ptr) {
		PyErr_SetString(PyExc_ValueError,
				"nvswap.CkptWriter._hold: bad range");
		return NULL;
	}
	if (!lock(self, "_hold"))
		return NULL;
	if (self->nranges == self->cap_ranges) {
		size_t cap = self->cap_ranges ? 2 * self->cap_ranges : 64;
		struct range *nr =
			PyMem_Realloc(self->ranges, cap * sizeof(*nr));
		if (!nr) {
			pthread_mutex_unlock(&self->mu);
			return PyErr_NoMemory();
		}
		self->ranges = nr;
		self->cap_ranges = cap;
	}
	self->ranges[self->nranges++] = (struct range){
		(uintptr_t)ptr, (uintptr_t)(ptr + nbytes), Py_NewRef(owner)};
	self->sorted = false;
	pthread_mutex_unlock(&self->mu);
	Py_RETURN_NONE;
}

/* Drop every queued buffer and held range: the writer is closed. GIL
 * held; @mu held or the object dying. */
static void release_all(struct ext_ckpt *self)
{
	reap(self, true);
	for (size_t i = 0; i < self->nranges; i++)
		Py_CLEAR(self->ranges[i].owner);
	self->nranges = 0;
}

/* close (@abort false) or abort: the writer is gone either way. */
static PyObject *finish(struct ext_ckpt *self, bool abort)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_ckpt_writer *w;
	int rc;

	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	Py_END_ALLOW_THREADS
	w = self->w;
	self->w = NULL;
	if (!w) { /* again: a no-op, as for Python's files */
		pthread_mutex_unlock(&self->mu);
		Py_RETURN_NONE;
	}
	self->final_size = nvs_ckpt_offset(w);
	EXT_NOGIL(rc, msg, abort ? nvs_ckpt_abort(w) : nvs_ckpt_close(w));
	release_all(self); /* the copies are done or skipped */
	pthread_mutex_unlock(&self->mu);
	if (rc < 0)
		return ext_raise(rc, msg);
	Py_RETURN_NONE;
}

static PyObject *ckpt_close(PyObject *o, PyObject *Py_UNUSED(a))
{
	return finish(CKPT(o), false);
}

static PyObject *ckpt_abort(PyObject *o, PyObject *Py_UNUSED(a))
{
	return finish(CKPT(o), true);
}

static PyObject *ckpt_enter(PyObject *o, PyObject *Py_UNUSED(a))
{
	return Py_NewRef(o);
}

/* __exit__: close, or abort when the block raised. */
static PyObject *ckpt_exit(PyObject *o, PyObject *const *args, Py_ssize_t nargs)
{
	bool raised = nargs > 0 && args[0] != Py_None;
	PyObject *r = finish(CKPT(o), raised);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *ckpt_flush(PyObject *Py_UNUSED(o), PyObject *Py_UNUSED(a))
{
	Py_RETURN_NONE; /* data is durable at close, not before */
}

static PyObject *ckpt_true(PyObject *Py_UNUSED(o), PyObject *Py_UNUSED(a))
{
	Py_RETURN_TRUE;
}

static PyObject *ckpt_false(PyObject *Py_UNUSED(o), PyObject *Py_UNUSED(a))
{
	Py_RETURN_FALSE;
}

/* Bytes written so far (the file's size once closed). */
static PyObject *ckpt_tell(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_ckpt *self = CKPT(o);
	uint64_t n;

	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	Py_END_ALLOW_THREADS
	n = self->w ? nvs_ckpt_offset(self->w) : self->final_size;
	pthread_mutex_unlock(&self->mu);
	return PyLong_FromUnsignedLongLong(n);
}

static PyObject *ckpt_get_closed(PyObject *o, void *Py_UNUSED(c))
{
	/* A racy read is fine for a flag; close() itself is serialized. */
	return PyBool_FromLong(CKPT(o)->w == NULL);
}

static PyObject *ckpt_get_name(PyObject *o, void *Py_UNUSED(c))
{
	return Py_NewRef(CKPT(o)->path);
}

static PyObject *ckpt_get_temp_path(PyObject *o, void *Py_UNUSED(c))
{
	struct ext_ckpt *self = CKPT(o);
	PyObject *r;

	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->mu);
	Py_END_ALLOW_THREADS
	if (self->w)
		r = PyUnicode_DecodeFSDefault(nvs_ckpt_temp_path(self->w));
	else
		r = Py_NewRef(Py_None);
	pthread_mutex_unlock(&self->mu);
	return r;
}

static void ckpt_dealloc(PyObject *o)
{
	struct ext_ckpt *self = CKPT(o);

	/* Never published implicitly: an unclosed writer is dropped. */
	if (self->w) {
		Py_BEGIN_ALLOW_THREADS
		nvs_ckpt_abort(self->w);
		Py_END_ALLOW_THREADS
		self->w = NULL;
	}
	release_all(self);
	PyMem_Free(self->pend);
	PyMem_Free(self->ranges);
	pthread_mutex_destroy(&self->mu);
	Py_CLEAR(self->path);
	Py_TYPE(o)->tp_free(o);
}

static PyMethodDef ckpt_methods[] = {
	{"write", ckpt_write, METH_O,
	 "write(data) -> int: append data (bytes, bytearray, memoryview,\n"
	 "a numpy array, a contiguous CPU tensor: any contiguous buffer)\n"
	 "and return its length in bytes. The bytes are copied before it\n"
	 "returns (with defer=True, a buffer of 1 MiB or more that owns\n"
	 "its memory, or lies in a _hold() range, is copied later by the\n"
	 "writer's thread: it must not change until close()); the GIL is\n"
	 "released meanwhile. Raises nvswap.Error (errno ENOSPC...) when a\n"
	 "write failed: sticky, later writes and close() raise it too and\n"
	 "the file never appears."},
	{"_hold", ckpt_hold, METH_VARARGS,
	 "_hold(owner, ptr, nbytes): keep a reference to owner until\n"
	 "close() and let defer=True queue writes of memory inside\n"
	 "[ptr, ptr + nbytes) even from buffers that own nothing (the raw\n"
	 "memoryviews torch.save passes). The caller vouches that owner\n"
	 "keeps that memory valid and unchanged until close()."},
	{"close", ckpt_close, METH_NOARGS,
	 "close(): write the rest, fsync, rename the temp file to the\n"
	 "final name, fsync the directory. On failure raises nvswap.Error\n"
	 "and removes the temp file (a file already at the final name is\n"
	 "untouched). A second close is a no-op."},
	{"abort", ckpt_abort, METH_NOARGS,
	 "abort: wait for writes in flight, remove the temp file. The\n"
	 "final name is never touched."},
	{"flush", ckpt_flush, METH_NOARGS,
	 "flush(): a no-op (file-object protocol; close() makes the data\n"
	 "durable)."},
	{"tell", ckpt_tell, METH_NOARGS,
	 "tell() -> int: bytes written so far."},
	{"writable", ckpt_true, METH_NOARGS, "writable() -> True"},
	{"readable", ckpt_false, METH_NOARGS, "readable() -> False"},
	{"seekable", ckpt_false, METH_NOARGS, "seekable() -> False"},
	{"__enter__", ckpt_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)(void (*)(void))ckpt_exit, METH_FASTCALL,
	 "close() on a clean exit, abort when the block raised."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef ckpt_getset[] = {
	{"closed", ckpt_get_closed, NULL, "True after close or abort", NULL},
	{"name", ckpt_get_name, NULL, "the final path, as given", NULL},
	{"temp_path", ckpt_get_temp_path, NULL,
	 "where the data goes until close(); None once closed", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ext_CkptWriterType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.CkptWriter",
	.tp_basicsize = sizeof(struct ext_ckpt),
	.tp_dealloc = ckpt_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc =
		"CkptWriter(path, *, buffer_size=None, buffer_count=None,\n"
		"           fsync=True, size_hint=None, mode=0o666,\n"
		"           direct='auto', defer=False)\n\n"
		"A new file written with O_DIRECT through pinned staging\n"
		"buffers (nvs_ckpt_writer): the copy of one buffer overlaps\n"
		"the write of the previous one. The data goes to\n"
		"'<path>.tmp.<pid>.<n>' and appears under path only at\n"
		"close(). buffer_size (bytes, an int or a str such as '16M';\n"
		"a multiple of 4096, default 16 MiB) and buffer_count (2..64,\n"
		"default 4) size the staging; size_hint preallocates;\n"
		"fsync=False skips the fsyncs; direct is 'auto' (buffered\n"
		"where the filesystem refuses O_DIRECT), 'always' or 'never'.\n"
		"defer=True copies large writes on the writer's own thread\n"
		"(see write()), so the caller's next step overlaps the copy.\n"
		"Raises nvswap.Error (FileNotFoundError for a missing\n"
		"directory, errno EINVAL for bad options). A context manager:\n"
		"close() on exit, abort when the block raised; a writer\n"
		"that is dropped unclosed is aborted. Calls from several\n"
		"threads are serialized.",
	.tp_methods = ckpt_methods,
	.tp_getset = ckpt_getset,
	.tp_new = ckpt_new,
};

int ext_ckpt_init(PyObject *module)
{
	if (PyType_Ready(&ext_CkptWriterType) < 0)
		return -1;
	return PyModule_AddObjectRef(module, "CkptWriter",
				     (PyObject *)&ext_CkptWriterType);
}
