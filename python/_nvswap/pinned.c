/* SPDX-License-Identifier: MIT */
/*
 * Memory exporters: PinnedBuffer (owns page-locked memory from nvswap's
 * pinned registry) and View (borrows memory another object owns), both
 * with the buffer protocol, and the torch tensors made on them with
 * torch.frombuffer(), which keeps the exporter alive as long as its
 * storage lives.
 */
#include "ext.h"

#include <errno.h>
#include <string.h>

struct pinned_buffer {
	PyObject ob_base;
	void *ptr;
	size_t nbytes;
};

static void pinned_dealloc(PyObject *o)
{
	struct pinned_buffer *self = (struct pinned_buffer *)o;

	nvs_pinned_free(self->ptr);
	Py_TYPE(o)->tp_free(o);
}

static int pinned_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
	struct pinned_buffer *self = (struct pinned_buffer *)o;

	return PyBuffer_FillInfo(view, o, self->ptr, (Py_ssize_t)self->nbytes,
				 0, flags);
}

static PyBufferProcs pinned_as_buffer = {
	.bf_getbuffer = pinned_getbuffer,
};

static PyObject *pinned_repr(PyObject *o)
{
	struct pinned_buffer *self = (struct pinned_buffer *)o;

	return PyUnicode_FromFormat("<nvswap.PinnedBuffer %zu bytes at %p>",
				    self->nbytes, self->ptr);
}

static Py_ssize_t pinned_len(PyObject *o)
{
	return (Py_ssize_t)((struct pinned_buffer *)o)->nbytes;
}

static PySequenceMethods pinned_as_sequence = {
	.sq_length = pinned_len,
};

PyTypeObject ext_PinnedBufferType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.PinnedBuffer",
	.tp_basicsize = sizeof(struct pinned_buffer),
	.tp_dealloc = pinned_dealloc,
	.tp_repr = pinned_repr,
	.tp_as_sequence = &pinned_as_sequence,
	.tp_as_buffer = &pinned_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Page-locked memory from nvswap's pinned pool, exported\n"
		  "with the buffer protocol (memoryview, numpy.frombuffer,\n"
		  "torch.frombuffer). Returned to the pool when the object\n"
		  "and every export of it are gone.",
};

/* Wrap @ptr (from the pinned registry) in a PinnedBuffer; frees on error. */
static PyObject *wrap(void *ptr, size_t nbytes)
{
	struct pinned_buffer *self;

	self = PyObject_New(struct pinned_buffer, &ext_PinnedBufferType);
	if (!self) {
		nvs_pinned_free(ptr);
		return NULL;
	}
	self->ptr = ptr;
	self->nbytes = nbytes;
	return (PyObject *)self;
}

PyObject *ext_pinned_new(size_t nbytes)
{
	void *ptr;
	int err = 0;

	Py_BEGIN_ALLOW_THREADS
	ptr = nvs_pinned_alloc(nbytes, &err);
	Py_END_ALLOW_THREADS
	if (!ptr)
		return ext_raise_last(err ? err : -ENOMEM);
	return wrap(ptr, nbytes);
}

/* ---- View ------------------------------------------------------------- */

struct view {
	PyObject ob_base;
	PyObject *owner;
	PyObject *weakrefs; /* lenders keep weak references (lend.c) */
	void *ptr;
	size_t nbytes;
	bool readonly;
	bool valid;
};

static void view_dealloc(PyObject *o)
{
	if (((struct view *)o)->weakrefs)
		PyObject_ClearWeakRefs(o);
	Py_CLEAR(((struct view *)o)->owner);
	Py_TYPE(o)->tp_free(o);
}

static int view_getbuffer(PyObject *o, Py_buffer *pv, int flags)
{
	struct view *self = (struct view *)o;

	if (!self->valid) {
		PyErr_SetString(PyExc_BufferError,
				"nvswap: this memory was released (the "
				"swapper may reuse it)");
		pv->obj = NULL;
		return -1;
	}
	return PyBuffer_FillInfo(pv, o, self->ptr, (Py_ssize_t)self->nbytes,
				 self->readonly, flags);
}

static PyBufferProcs view_as_buffer = {
	.bf_getbuffer = view_getbuffer,
};

PyTypeObject ext_ViewType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.View",
	.tp_basicsize = sizeof(struct view),
	.tp_dealloc = view_dealloc,
	.tp_as_buffer = &view_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_weaklistoffset = offsetof(struct view, weakrefs),
	.tp_doc = "Memory nvswap lends (an acquired tensor's pool buffer),\n"
		  "exported with the buffer protocol until it is released.",
};

PyObject *ext_view_new(PyObject *owner, void *ptr, size_t nbytes, bool readonly)
{
	struct view *self = PyObject_New(struct view, &ext_ViewType);

	if (!self)
		return NULL;
	self->owner = Py_XNewRef(owner);
	self->weakrefs = NULL;
	self->ptr = ptr;
	self->nbytes = nbytes;
	self->readonly = readonly;
	self->valid = true;
	return (PyObject *)self;
}

void ext_view_invalidate(PyObject *o)
{
	if (o && Py_IS_TYPE(o, &ext_ViewType))
		((struct view *)o)->valid = false;
}

/* ---- torch tensors on exporters ---------------------------------------- */

static PyObject *import_torch(void)
{
	PyObject *torch = ext_torch();

	if (torch)
		return Py_NewRef(torch);
	if (PyErr_Occurred())
		return NULL;
	return PyImport_ImportModule("torch");
}

PyObject *ext_tensor_from(PyObject *exporter, PyObject *dtype, PyObject *shape)
{
	PyObject *torch, *fn, *args = NULL, *kw = NULL, *t = NULL;
	Py_buffer probe;
	Py_ssize_t len;

	torch = import_torch();
	if (!torch)
		return NULL;
	if (PyObject_GetBuffer(exporter, &probe, PyBUF_SIMPLE) < 0)
		goto out;
	len = probe.len;
	PyBuffer_Release(&probe);
	kw = Py_BuildValue("{s:O}", "dtype", dtype);
	if (!kw)
		goto out;
	if (len == 0) {
		/* frombuffer refuses an empty buffer */
		fn = PyObject_GetAttrString(torch, "empty");
		args = fn ? Py_BuildValue("(i)", 0) : NULL;
	} else {
		fn = PyObject_GetAttrString(torch, "frombuffer");
		args = fn ? PyTuple_Pack(1, exporter) : NULL;
	}
	if (args)
		t = PyObject_Call(fn, args, kw);
	Py_XDECREF(fn);
	if (t && shape && shape != Py_None) {
		PyObject *v = PyObject_CallMethod(t, "view", "(O)", shape);

		Py_SETREF(t, v);
	}
out:
	Py_XDECREF(args);
	Py_XDECREF(kw);
	Py_DECREF(torch);
	return t;
}

PyObject *ext_locked_tensor_new(struct nvs_aio *h, PyObject *num_elem,
				PyObject *example)
{
	PyObject *dtype, *esize_obj, *pb, *t;
	long long n;
	size_t esize, nbytes;
	void *ptr;

	if (!ext_is_tensor(example)) {
		PyErr_Format(PyExc_TypeError,
			     "new_cpu_locked_tensor: example_tenosr must be "
			     "a torch.Tensor (its dtype is used), not %.100s",
			     Py_TYPE(example)->tp_name);
		return NULL;
	}
	n = PyLong_AsLongLong(num_elem);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (n < 0) {
		PyErr_Format(PyExc_ValueError,
			     "new_cpu_locked_tensor: num_elem %lld is negative",
			     n);
		return NULL;
	}
	esize_obj = PyObject_CallMethod(example, "element_size", NULL);
	if (!esize_obj)
		return NULL;
	esize = PyLong_AsSize_t(esize_obj);
	Py_DECREF(esize_obj);
	if (esize == (size_t)-1 && PyErr_Occurred())
		return NULL;
	if (__builtin_mul_overflow((size_t)n, esize, &nbytes)) {
		PyErr_Format(PyExc_OverflowError,
			     "new_cpu_locked_tensor: %lld elements of %zu "
			     "bytes overflow",
			     n, esize);
		return NULL;
	}
	dtype = PyObject_GetAttrString(example, "dtype");
	if (!dtype)
		return NULL;
	if (nbytes == 0) {
		pb = ext_view_new(NULL, NULL, 0, false);
	} else {
		Py_BEGIN_ALLOW_THREADS
		ptr = nvs_aio_new_cpu_locked_buffer(h, nbytes);
		Py_END_ALLOW_THREADS
		pb = ptr ? wrap(ptr, nbytes)
			 : ext_raise_last(errno ? -errno : -ENOMEM);
	}
	if (!pb) {
		Py_DECREF(dtype);
		return NULL;
	}
	t = ext_tensor_from(pb, dtype, NULL);
	Py_DECREF(pb);
	Py_DECREF(dtype);
	return t;
}

PyObject *ext_locked_tensor_free(PyObject *t)
{
	PyObject *torch, *ng = NULL, *r = NULL, *v;
	struct ext_buf b;
	bool ours;

	if (!ext_is_tensor(t)) {
		PyErr_Format(PyExc_TypeError,
			     "free_cpu_locked_tensor: expected a torch.Tensor, "
			     "not %.100s",
			     Py_TYPE(t)->tp_name);
		return NULL;
	}
	if (ext_buf_get(t, false, &b))
		return NULL;
	ours = b.nbytes && nvs_pinned_contains(b.ptr, b.nbytes);
	ext_buf_release(&b);
	if (!ours)
		Py_RETURN_FALSE;
	/* set_() is in-place: allowed on a leaf that requires grad only
	 * under no_grad. */
	torch = ext_torch();
	if (!torch) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError,
					"nvswap: torch is not imported");
		return NULL;
	}
	ng = PyObject_CallMethod(torch, "no_grad", NULL);
	if (!ng)
		return NULL;
	v = PyObject_CallMethod(ng, "__enter__", NULL);
	if (!v)
		goto out;
	Py_DECREF(v);
	r = PyObject_CallMethod(t, "set_", NULL);
	v = PyObject_CallMethod(ng, "__exit__", "OOO", Py_None, Py_None,
				Py_None);
	Py_XDECREF(v);
	if (!r || !v) {
		Py_CLEAR(r);
		goto out;
	}
	Py_SETREF(r, Py_NewRef(Py_True));
out:
	Py_XDECREF(ng);
	return r;
}

PyObject *ext_is_pinned(PyObject *buffer)
{
	struct ext_buf b;
	bool pinned;
	PyObject *r;

	if (ext_buf_get(buffer, false, &b))
		return NULL;
	pinned = b.nbytes && nvs_pinned_contains(b.ptr, b.nbytes);
	ext_buf_release(&b);
	if (pinned || !ext_is_tensor(buffer))
		return PyBool_FromLong(pinned);
	r = PyObject_CallMethod(buffer, "is_pinned", NULL);
	if (!r) {
		/* CPU-only builds of old torch may refuse to answer. */
		PyErr_Clear();
		Py_RETURN_FALSE;
	}
	return r;
}

int ext_pinned_init(PyObject *module)
{
	if (PyType_Ready(&ext_PinnedBufferType) < 0 ||
	    PyType_Ready(&ext_ViewType) < 0)
		return -1;
	if (PyModule_AddObjectRef(module, "PinnedBuffer",
				  (PyObject *)&ext_PinnedBufferType))
		return -1;
	return PyModule_AddObjectRef(module, "View", (PyObject *)&ext_ViewType);
}
