/* SPDX-License-Identifier: MIT */
/*
 * nvswap.Swapper: the swap manager (nvswap/swapper.h) one to one, with
 * what acquire() lends tracked so that release, close and dealloc revoke
 * it, and a gate so that close never destroys the C swapper under a call
 * another thread is making.
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SW(o) ((struct ext_swapper *)(o))

PyObject *ext_raise_closed(const char *what)
{
	PyErr_Format(PyExc_ValueError, "nvswap: the %s is closed", what);
	return NULL;
}

int ext_swapper_enter(struct ext_swapper *self)
{
	if (self->s && !ext_gate_enter(&self->gate, false))
		return 0;
	ext_raise_closed("Swapper");
	return -1;
}

static int id_arg(PyObject *v, uint64_t *id)
{
	return ext_arg_u64(v, "id", UINT64_MAX, id);
}

/* ---- destruction ------------------------------------------------------ */

/*
 * Drained already: revoke, destroy the roles over the swapper, then the
 * swapper. Returns 0 or the first -errno, its sentence in @msg.
 */
static int shutdown(struct ext_swapper *self, char *msg, bool discard)
{
	char m[NVS_ERRMSG_MAX];
	int first = 0, rc;

	ext_revoke_held(self->held);
	for (;;) {
		struct ext_role *r = self->roles;

		while (r && !r->p)
			r = r->next;
		if (!r)
			break;
		Py_INCREF(r);
		rc = ext_role_destroy(r, m);
		if (rc < 0 && !first) {
			first = rc;
			memcpy(msg, m, NVS_ERRMSG_MAX);
		}
		Py_DECREF(r);
	}
	if (discard)
		EXT_NOGIL(rc, m, nvs_swapper_discard(self->s));
	else
		EXT_NOGIL(rc, m, nvs_swapper_destroy(self->s));
	self->s = NULL;
	if (rc < 0 && !first) {
		first = rc;
		memcpy(msg, m, NVS_ERRMSG_MAX);
	}
	return first;
}

static PyObject *end(PyObject *o, bool discard)
{
	char msg[NVS_ERRMSG_MAX] = "";
	int rc;

	if (!SW(o)->s || !ext_gate_drain(&SW(o)->gate))
		Py_RETURN_NONE;
	rc = shutdown(SW(o), msg, discard);
	if (rc < 0)
		return ext_raise(rc, msg);
	Py_RETURN_NONE;
}

static PyObject *swapper_close(PyObject *o, PyObject *Py_UNUSED(a))
{
	return end(o, false);
}

/* A set opened read-only: nvs_swapper_discard()'s -EROFS, which leaves it
 * as it was; else 0. */
static int refuse_readonly(struct nvs_swapper *s)
{
	struct nvs_swap_stats st;
	int rc = nvs_swapper_stats(s, &st);

	return rc < 0 ? rc : st.readonly ? nvs_swapper_discard(s) : 0;
}

static PyObject *swapper_discard(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	int rc;

	/* Refused before anything is torn down: the Swapper stays open. */
	if (self->s) {
		if (ext_swapper_enter(self))
			return NULL;
		EXT_SWAPPER_CALL(self, rc, refuse_readonly(self->s));
		if (rc < 0)
			return NULL;
	}
	return end(o, true);
}

/* Made a finalizer so that an error can name the swapper safely. */
static void swapper_finalize(PyObject *o)
{
	struct ext_swapper *self = SW(o);
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *type, *value, *tb;
	int rc;

	/* Nobody is inside: calls and roles hold references. */
	if (!self->s || !ext_gate_drain(&self->gate))
		return;
	PyErr_Fetch(&type, &value, &tb);
	rc = shutdown(self, msg, false);
	if (rc < 0) {
		ext_raise(rc, msg);
		PyErr_WriteUnraisable(o);
	}
	PyErr_Restore(type, value, tb);
}

static void swapper_dealloc(PyObject *o)
{
	struct ext_swapper *self = SW(o);

	if (PyObject_CallFinalizerFromDealloc(o) < 0)
		return; /* resurrected */
	if (self->weakrefs)
		PyObject_ClearWeakRefs(o);
	Py_CLEAR(self->held);
	ext_gate_fini(&self->gate);
	Py_TYPE(o)->tp_free(o);
}

/* ---- the calls -------------------------------------------------------- */

static PyObject *swapper_register(PyObject *o, PyObject *const *args,
				  Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"id", "tensor_or_nbytes", NULL};
	struct ext_swapper *self = SW(o);
	struct ext_buf buf = {0};
	PyObject *a[2];
	uint64_t id, n = 0;
	int rc;

	if (ext_bind("register", args, nargs, kw, names, 2, 2, a) ||
	    id_arg(a[0], &id))
		return NULL;
	if (PyLong_Check(a[1])) {
		if (ext_arg_u64(a[1], "nbytes", SIZE_MAX, &n))
			return NULL;
	} else if (ext_buf_get(a[1], false, &buf)) {
		return NULL;
	}
	if (ext_swapper_enter(self)) {
		ext_buf_release(&buf);
		return NULL;
	}
	EXT_SWAPPER_CALL(self, rc,
			 nvs_swapper_register(self->s, id,
					      buf.obj ? buf.nbytes : n,
					      buf.obj ? buf.ptr : NULL));
	ext_buf_release(&buf);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *swapper_read(PyObject *o, PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"id", "buffer", NULL};
	struct ext_swapper *self = SW(o);
	char msg[NVS_ERRMSG_MAX] = "";
	struct ext_buf buf = {0};
	PyObject *a[2];
	uint64_t id;
	int rc;

	if (ext_bind("read", args, nargs, kw, names, 2, 2, a) ||
	    id_arg(a[0], &id) || ext_buf_get(a[1], true, &buf))
		return NULL;
	if (ext_buf_guard(&buf, true) || ext_swapper_enter(self)) {
		ext_buf_release(&buf);
		return NULL;
	}
	EXT_NOGIL(rc, msg, nvs_swapper_read(self->s, id, buf.ptr, buf.nbytes));
	ext_gate_leave(&self->gate);
	if (rc >= 0) {
		char what[64];

		snprintf(what, sizeof(what), "Swapper.read(%llu)",
			 (unsigned long long)id);
		rc = ext_buf_settle(&buf, true, true, what, msg, sizeof(msg));
	}
	ext_buf_release(&buf);
	if (rc < 0)
		return ext_raise(rc, msg);
	Py_RETURN_NONE;
}

/* The calls that take an id and return 0 or -errno. */
#define ID_CALL(pyname, cfn)                                                   \
	static PyObject *swapper_##pyname(PyObject *o, PyObject *arg)          \
	{                                                                      \
		struct ext_swapper *self = SW(o);                              \
		uint64_t id;                                                   \
		int rc;                                                        \
                                                                               \
		if (id_arg(arg, &id) || ext_swapper_enter(self))               \
			return NULL;                                           \
		EXT_SWAPPER_CALL(self, rc, cfn(self->s, id));                  \
		if (rc < 0)                                                    \
			return NULL;                                           \
		Py_RETURN_NONE;                                                \
	}
ID_CALL(unregister, nvs_swapper_unregister)
ID_CALL(prefetch, nvs_swapper_prefetch)
ID_CALL(evict, nvs_swapper_evict)
ID_CALL(wait, nvs_swapper_wait)
#undef ID_CALL

static PyObject *swapper_try_prefetch(PyObject *o, PyObject *arg)
{
	struct ext_swapper *self = SW(o);
	char msg[NVS_ERRMSG_MAX] = "";
	uint64_t id;
	int rc;

	if (id_arg(arg, &id) || ext_swapper_enter(self))
		return NULL;
	EXT_NOGIL(rc, msg, nvs_swapper_try_prefetch(self->s, id));
	ext_gate_leave(&self->gate);
	if (rc == -EAGAIN)
		Py_RETURN_FALSE;
	if (rc < 0)
		return ext_raise(rc, msg);
	Py_RETURN_TRUE;
}

static PyObject *swapper_wait_all(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	int rc;

	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_wait_all(self->s));
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* held[id]: [count, record...], made when absent. Borrowed. */
static PyObject *held_entry(struct ext_swapper *self, PyObject *key)
{
	PyObject *e = PyDict_GetItemWithError(self->held, key), *zero;

	if (e || PyErr_Occurred())
		return e;
	zero = PyLong_FromLong(0);
	e = zero ? PyList_New(1) : NULL;
	if (!e) {
		Py_XDECREF(zero);
		return NULL;
	}
	PyList_SET_ITEM(e, 0, zero);
	if (PyDict_SetItem(self->held, key, e) < 0) {
		Py_DECREF(e);
		return NULL;
	}
	Py_DECREF(e);
	return e;
}

static int held_count(PyObject *e)
{
	return (int)PyLong_AsLong(PyList_GET_ITEM(e, 0));
}

static int held_set(PyObject *e, long count)
{
	PyObject *v = PyLong_FromLong(count);

	if (!v)
		return -1;
	return PyList_SetItem(e, 0, v);
}

static PyObject *swapper_acquire(PyObject *o, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"id",	  "dtype", "shape",
					    "memoryview", "blank", NULL};
	struct ext_swapper *self = SW(o);
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_tensor_info info;
	PyObject *a[5], *key, *e, *tmp, *obj = NULL;
	PyThreadState *ts;
	void *ptr = NULL;
	uint64_t id;
	bool mv, blank;
	int rc;

	if (ext_bind("acquire", args, nargs, kw, names, 3, 1, a) ||
	    id_arg(a[0], &id) || ext_arg_bool(a[3], false, &mv) ||
	    ext_arg_bool(a[4], false, &blank) || ext_swapper_enter(self))
		return NULL;
	ts = PyEval_SaveThread();
	rc = blank ? nvs_swapper_acquire_blank(self->s, id, &ptr)
		   : nvs_swapper_acquire(self->s, id, &ptr);
	if (rc == 0) {
		/* Acquired: cannot be unregistered, so info succeeds. */
		rc = nvs_swapper_info(self->s, id, &info);
		if (rc < 0)
			nvs_swapper_release(self->s, id, false);
	}
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	PyEval_RestoreThread(ts);
	if (rc < 0) {
		ext_gate_leave(&self->gate);
		return ext_raise(rc, msg);
	}
	/* Made first, recorded after: making runs Python code (torch),
	 * during which other threads may change held. */
	tmp = PyList_New(0);
	if (tmp)
		obj = ext_lend(o, ptr, info.nbytes, false, a[1], a[2], mv, tmp);
	key = obj ? PyLong_FromUnsignedLongLong(id) : NULL;
	e = key ? held_entry(self, key) : NULL;
	if (e && (PyList_Append(e, PyList_GET_ITEM(tmp, 0)) < 0 ||
		  held_set(e, held_count(e) + 1) < 0))
		e = NULL;
	if (!e) {
		/* Not handed out (a bad dtype or shape...): undo the
		 * acquire, keep the error. */
		PyObject *type, *value, *tb;

		PyErr_Fetch(&type, &value, &tb);
		if (tmp)
			ext_revoke_all(tmp);
		Py_CLEAR(obj);
		ts = PyEval_SaveThread();
		nvs_swapper_release(self->s, id, false);
		PyEval_RestoreThread(ts);
		PyErr_Restore(type, value, tb);
	}
	Py_XDECREF(tmp);
	Py_XDECREF(key);
	ext_gate_leave(&self->gate);
	return obj;
}

static PyObject *swapper_release(PyObject *o, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"id", "dirty", NULL};
	struct ext_swapper *self = SW(o);
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *a[2], *key, *e;
	uint64_t id;
	bool dirty;
	long count;
	int rc;

	if (ext_bind("release", args, nargs, kw, names, 2, 2, a) ||
	    id_arg(a[0], &id) || ext_arg_bool(a[1], false, &dirty) ||
	    ext_swapper_enter(self))
		return NULL;
	key = PyLong_FromUnsignedLongLong(id);
	e = key ? PyDict_GetItemWithError(self->held, key) : NULL;
	if (!key || (!e && PyErr_Occurred()))
		goto fail;
	count = e ? held_count(e) : 0;
	if (count > 1 && held_set(e, count - 1) < 0)
		goto fail;
	if (count == 1) {
		/* The last release revokes before the C release: the
		 * buffer may be reused as soon as it returns. */
		Py_INCREF(e);
		if (PyDict_DelItem(self->held, key) < 0) {
			Py_DECREF(e);
			goto fail;
		}
		ext_revoke_all(e);
		Py_DECREF(e);
	}
	EXT_NOGIL(rc, msg, nvs_swapper_release(self->s, id, dirty));
	if (rc < 0 && count > 0) {
		/* Still acquired as far as C knows (-ECHILD in a forked
		 * child): count it again; what was revoked stays so. */
		e = held_entry(self, key);
		if (!e || held_set(e, held_count(e) + 1) < 0)
			PyErr_Clear();
	}
	Py_DECREF(key);
	ext_gate_leave(&self->gate);
	if (rc < 0)
		return ext_raise(rc, msg);
	Py_RETURN_NONE;
fail:
	Py_XDECREF(key);
	ext_gate_leave(&self->gate);
	return NULL;
}

static PyObject *swapper_stats(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	struct nvs_swap_stats st;
	int rc;

	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_stats(self->s, &st));
	return rc < 0 ? NULL : ext_swap_stats_dict(&st);
}

static PyObject *swapper_info(PyObject *o, PyObject *arg)
{
	struct ext_swapper *self = SW(o);
	struct nvs_tensor_info ti;
	uint64_t id;
	int rc;

	if (id_arg(arg, &id) || ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_info(self->s, id, &ti));
	return rc < 0 ? NULL : ext_tensor_info_dict(&ti);
}

static PyObject *swapper_get_dirs(PyObject *o, void *Py_UNUSED(c))
{
	struct ext_swapper *self = SW(o);
	PyObject *l;
	const char *d;

	if (ext_swapper_enter(self))
		return NULL;
	l = PyList_New(0);
	for (unsigned i = 0; l && (d = nvs_swapper_dir(self->s, i)); i++) {
		PyObject *s = PyUnicode_DecodeFSDefault(d);

		if (!s || PyList_Append(l, s) < 0)
			Py_CLEAR(l);
		Py_XDECREF(s);
	}
	ext_gate_leave(&self->gate);
	return l;
}

static PyObject *swapper_get_closed(PyObject *o, void *Py_UNUSED(c))
{
	return PyBool_FromLong(!SW(o)->s || SW(o)->gate.closing);
}

static PyObject *swapper_enter(PyObject *o, PyObject *Py_UNUSED(a))
{
	if (!SW(o)->s)
		return ext_raise_closed("Swapper");
	return Py_NewRef(o);
}

static PyObject *swapper_exit(PyObject *o, PyObject *Py_UNUSED(args))
{
	return swapper_close(o, NULL);
}

static PyObject *swapper_repr(PyObject *o)
{
	struct ext_swapper *self = SW(o);
	PyObject *r;

	/* the gate: a close in another thread may be destroying it */
	if (!self->s || ext_gate_enter(&self->gate, false))
		return PyUnicode_FromString("<nvswap.Swapper closed>");
	r = PyUnicode_FromFormat("<nvswap.Swapper %s>",
				 nvs_swapper_dir(self->s, 0));
	ext_gate_leave(&self->gate);
	return r;
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define M(name, flags, doc)                                                    \
	{                                                                      \
#name, (PyCFunction)(void (*)(void))swapper_##name, flags, doc \
	}

static PyMethodDef swapper_methods[] = {
	M(register, FAST,
	  "register(id, tensor_or_nbytes) -> None\n\n"
	  "Add tensor id (an int, 0 to 2**64-1, chosen by the caller).\n"
	  "An int is a byte count: the tensor reads as zeros and costs no\n"
	  "I/O until it is first written back. A CPU torch tensor or a\n"
	  "buffer (numpy array, bytearray...; contiguous) gives both the\n"
	  "size (its nbytes) and the initial value: its current contents\n"
	  "are written to the swap file now, before this returns (the GIL\n"
	  "released), and the object is not used afterwards. The tensor is\n"
	  "then on NVMe, not resident. Raises nvswap.Error: EEXIST (id is\n"
	  "registered), EINVAL (0 bytes), EFBIG (larger than buffer_size),\n"
	  "ENOSPC or EIO (the write failed; nothing is registered)."),
	M(unregister, METH_O,
	  "unregister(id) -> None\n\n"
	  "Forget tensor id, its space and buffer; waits for its I/O in\n"
	  "flight (GIL released); unwritten changes are dropped. Raises\n"
	  "nvswap.Error ENOENT (unknown id) or EBUSY (acquired)."),
	M(prefetch, METH_O,
	  "prefetch(id) -> None\n\n"
	  "Start reading tensor id into a pool buffer and return; nothing\n"
	  "when it is resident or being read. When the pool is empty it\n"
	  "may block (GIL released) until a buffer is free: a write-back\n"
	  "ends, auto_evict evicts, or another thread evicts or releases,\n"
	  "at most wait_ms. Raises nvswap.Error: ENOENT, EDEADLK (every\n"
	  "buffer is acquired by this thread), ETIMEDOUT (nvswap.\n"
	  "TimeoutError), ENOSPC/EIO (a failed write-back holds the only\n"
	  "buffer), or the submit error. A read that fails later is raised\n"
	  "by the next acquire() or wait() of id."),
	M(try_prefetch, METH_O,
	  "try_prefetch(id) -> bool\n\n"
	  "prefetch() that never waits for a buffer: True when the read\n"
	  "started (or id is resident or being read), False when no buffer\n"
	  "was free (nothing changed). Raises nvswap.Error ENOENT or a\n"
	  "submit error."),
	M(acquire, FAST,
	  "acquire(id, dtype=None, shape=None, *, memoryview=False,\n"
	  "        blank=False)\n"
	  "    -> torch.Tensor | memoryview\n\n"
	  "Tensor id's data in its pinned pool buffer, the caller's until\n"
	  "release(id, dirty). Reads it first when it is on NVMe and waits\n"
	  "for what is in flight for it (GIL released; a buffer is waited\n"
	  "for at most wait_ms). Acquires nest: each needs a release.\n\n"
	  "Returns a torch tensor on that memory (no copy): 1-D uint8 of\n"
	  "the tensor's bytes, or of dtype, viewed as shape. When torch\n"
	  "cannot be imported, or memoryview=True, a memoryview instead\n"
	  "(writable; dtype is then a struct format such as 'f', and shape\n"
	  "goes to memoryview.cast()). Write into it and release with\n"
	  "dirty=True to keep the change.\n\n"
	  "blank=True: the caller overwrites every byte, so a tensor on\n"
	  "NVMe gets its buffer as it is, neither read nor zero-filled\n"
	  "(nvs_swapper_acquire_blank()); release it dirty to keep the\n"
	  "bytes written, without dirty to give the buffer back and leave\n"
	  "the tensor as it was. EROFS on a read-only set.\n\n"
	  "Raises nvswap.Error: ENOENT (nvswap.FileNotFoundError; unknown\n"
	  "id), EDEADLK, ETIMEDOUT as prefetch(), EIO (the read failed; a\n"
	  "later acquire retries), EBADMSG (checksum mismatch). A bad\n"
	  "dtype or shape raises torch's error (or TypeError/ValueError)\n"
	  "and nothing stays acquired."),
	M(release, FAST,
	  "release(id, dirty) -> None\n\n"
	  "End one acquire of id. dirty: the data was changed; it is\n"
	  "written back at eviction. The release that ends the last\n"
	  "acquire() of id made through this object revokes what those\n"
	  "returned, before the buffer can be reused: each tensor still\n"
	  "alive becomes empty (tensor.set_()), each memoryview is\n"
	  "released, and no new export of the memory is possible. Views\n"
	  "derived from them (t[2:], t.view(...), numpy.frombuffer(mv))\n"
	  "are not covered: drop them first. Raises nvswap.Error ENOENT\n"
	  "or EBUSY (id is not acquired)."),
	M(read, FAST,
	  "read(id, buffer) -> None\n\n"
	  "Copy tensor id's bytes into buffer (a writable CPU tensor or\n"
	  "buffer of at least its nbytes; contiguous) without taking a\n"
	  "pool buffer: from its buffer when resident, zeros when never\n"
	  "written, else read from NVMe straight into it (GIL released),\n"
	  "its checksum checked when kept. Any size: a tensor of a\n"
	  "persistent set larger than buffer_size, which acquire()\n"
	  "refuses (EFBIG), is read so. Raises nvswap.Error ENOENT,\n"
	  "ERANGE (buffer too small), EBADMSG (checksum), or the read's."),
	M(evict, METH_O,
	  "evict(id) -> None\n\n"
	  "Free tensor id's buffer: start its write-back when it is dirty\n"
	  "(the buffer returns when the write ends; wait(id) for it), else\n"
	  "give it back at once. Nothing for tensors on NVMe or being\n"
	  "written; a read in flight is waited for (GIL released). Raises\n"
	  "nvswap.Error ENOENT, EBUSY (acquired), or the write's submit\n"
	  "error (the tensor stays resident and dirty)."),
	M(wait, METH_O,
	  "wait(id) -> None\n\n"
	  "Block (GIL released) until tensor id has no I/O in flight.\n"
	  "Raises nvswap.Error ENOENT, or the error of its last read or\n"
	  "write if that failed and was not reported yet (once). After a\n"
	  "failed write the tensor is resident and dirty: evict again."),
	M(wait_all, METH_NOARGS,
	  "wait_all() -> None\n\n"
	  "Block (GIL released) until no I/O is in flight; raises\n"
	  "nvswap.Error for the first unreported failure of any tensor\n"
	  "(all are reported by this call)."),
	M(stats, METH_NOARGS,
	  "stats() -> dict\n\n"
	  "The counters since creation (nvs_swap_stats): bytes_read,\n"
	  "bytes_written, reads, writes, io_ops, io_errors,\n"
	  "checksum_errors, prefetches, acquires, acquire_hits,\n"
	  "acquire_wait_ns, io_busy_ns (time with I/O in flight),\n"
	  "queue_depth (the aio handle's, a node's share),\n"
	  "clean_evictions, auto_evictions, zero_fills,\n"
	  "revived, write_hits, buffer_waits, buffer_wait_ns, buffer_count,\n"
	  "buffers_in_use, pool_high_water, tensors, buffer_size, pinned,\n"
	  "checksum (every read checked: checksum=True, or a persistent\n"
	  "set), backend, tensor_bytes, npaths, and per path (lists of\n"
	  "npaths):\n"
	  "path_bytes_read, path_bytes_written, path_space_used,\n"
	  "path_file_size."),
	M(info, METH_O,
	  "info(id) -> dict\n\n"
	  "Tensor id's state: state ('on_nvme', 'reading', 'resident',\n"
	  "'writing'), nbytes, acquired (acquires not released), dirty,\n"
	  "on_disk (written at least once), extents. Raises nvswap.Error\n"
	  "ENOENT for an unknown id."),
	M(close, METH_NOARGS,
	  "close() -> None\n\n"
	  "Destroy the swapper: wait for calls other threads are making\n"
	  "on it, revoke everything acquire() lent (released or not, as\n"
	  "release() does), close the role swappers made over it\n"
	  "(ParamSwapper...), finish the I/O in flight, then remove the\n"
	  "swap files and directories. Dirty resident tensors are not\n"
	  "written. A persistent set instead checkpoints (tag 'destroy')\n"
	  "when anything changed since its newest generation, and keeps\n"
	  "its files. Raises nvswap.Error for an I/O failure no call\n"
	  "reported yet (a failed write-behind is never silent). A second\n"
	  "close() does nothing; any other call afterwards raises\n"
	  "ValueError."),
	M(discard, METH_NOARGS,
	  "discard() -> None\n\n"
	  "close(), but a persistent set is removed instead of kept:\n"
	  "every generation, then its lock and the directories made for\n"
	  "it, the set locked until its files are gone. Unsaved changes\n"
	  "are not checkpointed and I/O failures are moot. Raises\n"
	  "nvswap.Error naming a file that could not be unlinked (the\n"
	  "swapper is closed anyway). A scratch swapper: as close()."),
	{"__enter__", (PyCFunction)swapper_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)swapper_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};
#undef M
#undef FAST

static PyGetSetDef swapper_getset[] = {
	{"dirs", swapper_get_dirs, NULL,
	 "The rank directories holding the swap files, one per path (a\n"
	 "list of str).",
	 NULL},
	{"closed", swapper_get_closed, NULL, "True once close() started.",
	 NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ext_SwapperType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.Swapper",
	.tp_basicsize = sizeof(struct ext_swapper),
	.tp_dealloc = swapper_dealloc,
	.tp_finalize = swapper_finalize,
	.tp_repr = swapper_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc =
		"Swapper(config=None, kind='param', rank=None, *, nvme_path=None,\n"
		"        name=None, buffer_size=None, buffer_count=None,\n"
		"        elem_size=None, stripe_size=None, pin_memory=None,\n"
		"        auto_evict=None, checksum=None, wait_ms=None,\n"
		"        backend=None, persist=None, keep_generations=None,\n"
		"        generation=None, page_cache=None, keep_blocks=None)\n\n"
		"The swap manager: tensors registered under caller-chosen ids,\n"
		"kept in swap files on one or more NVMe paths and brought\n"
		"into a fixed pool of pinned buffers on demand.\n\n"
		"From a Config: the section zero_optimization.offload_<kind>\n"
		"(kind 'param' or 'optimizer') with device 'nvme' gives the\n"
		"paths, buffer_count, buffer_size (elements x elem_size: 2\n"
		"bytes for parameters, 4 for optimizer state unless\n"
		"elem_size says otherwise) and the aio options; swap files go\n"
		"to <path>/nvswap/<kind>/rank<rank>/ (rank None: the\n"
		"config's nvswap.rank, else the launcher's, nvswap.launch()).\n"
		"Keywords given override\n"
		"the config. Without a config, nvme_path (a directory, or a\n"
		"list of up to 16, one per device), buffer_size (bytes; an\n"
		"int or a str such as '64M') and buffer_count are needed.\n"
		"name (not empty) puts the files in\n"
		"<path>/nvswap/<name>/rank<rank>/;\n"
		"stripe_size (bytes, a multiple of 4096), pin_memory,\n"
		"auto_evict, checksum (CRC32C per tensor), wait_ms (how long\n"
		"a buffer is waited for; default 60000, WAIT_FOREVER for no\n"
		"limit), backend ('auto', 'io_uring', 'libaio', 'psync'),\n"
		"page_cache (True: swap files without O_DIRECT, so the\n"
		"kernel may cache them beside the pool; default False),\n"
		"keep_blocks (True: unregister leaves a tensor's disk blocks\n"
		"allocated for the next tensor placed there to overwrite, no\n"
		"hole punched: for tensors that come and go every step; the\n"
		"file keeps its high-water mark until close; scratch only;\n"
		"default False).\n"
		"kind is ignored without a config.\n\n"
		"persist ('scratch', the default: files removed at close;\n"
		"'persistent': a swap set kept across runs, reopened when\n"
		"its directory holds one; 'resume': it must exist;\n"
		"'readonly': an existing set read, shared with other readers,\n"
		"nothing written, every call that would change it raising\n"
		"nvswap.Error(EROFS)) makes the\n"
		"tensors outlive the process: checkpoint() saves generations,\n"
		"keep_generations (1 to 64, default 2: the config's rule;\n"
		"0 is refused) of them are kept, generation\n"
		"opens an older one; ids(), get_tag() and generations() say\n"
		"what a reopened set holds. The config's nvswap.persist and\n"
		"nvswap.keep_generations set them too.\n\n"
		"Raises nvswap.ConfigError when the config's section cannot\n"
		"make a swapper (device not 'nvme', no nvme_path), and\n"
		"nvswap.Error for nvs_swapper_create's errors (EINVAL for\n"
		"missing or bad options, EBUSY when another live swapper holds\n"
		"the directory (the message names its pid: the readers' ones\n"
		"when readers hold a set a writer wants), ENOTDIR/EACCES/EROFS naming a level of a\n"
		"path that is not a directory or cannot be made (a missing\n"
		"path is made, 0700, and a scratch swapper removes what it\n"
		"made at close), ENOENT for a set to resume or read that is\n"
		"not there, EBADMSG/ENOTSUP for a damaged\n"
		"or newer set, ENOMEM/EPERM for the pinned pool).\n\n"
		"Thread-safe: several Python threads may call it at once; the\n"
		"blocking calls release the GIL. An acquire belongs to the\n"
		"thread that made it (it counts for EDEADLK). A context\n"
		"manager: close() on exit.",
	.tp_weaklistoffset = offsetof(struct ext_swapper, weakrefs),
	.tp_getset = swapper_getset,
	.tp_init = ext_swapper_tp_init,
	.tp_new = ext_swapper_new,
};

int ext_swapper_init(PyObject *module)
{
	/* The type's methods: the calls here, then a swap set's (swapset.c)
	 * and the file-backed tensors' (backing.c). */
	static PyMethodDef all[64]; /* the last entry stays the sentinel */
	const PyMethodDef *parts[] = {swapper_methods, ext_swapset_methods,
				      ext_backing_methods};
	size_t n = 0;

	for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++)
		for (const PyMethodDef *m = parts[k]; m->ml_name; m++) {
			if (n + 1 >= sizeof(all) / sizeof(all[0])) {
				PyErr_SetString(PyExc_SystemError,
						"nvswap: too many methods");
				return -1;
			}
			all[n++] = *m;
		}
	ext_SwapperType.tp_methods = all;
	if (PyType_Ready(&ext_SwapperType) < 0)
		return -1;
	if (PyModule_AddIntConstant(module, "WAIT_FOREVER", NVS_WAIT_FOREVER))
		return -1;
	return PyModule_AddObjectRef(module, "Swapper",
				     (PyObject *)&ext_SwapperType);
}
