/* SPDX-License-Identifier: MIT */
/*
 * Memory a swapper lends between an acquire and its release: handed out
 * as a torch tensor or a memoryview over a View, and revoked at the
 * release so that the Python object stops aliasing a pool buffer the
 * swapper may give to another tensor.
 */
#include "ext.h"

#include <string.h>

/*
 * torch, imported on first use (a new reference), or NULL with no error
 * when it cannot be imported; that answer is kept, so a process without
 * torch pays for the failed import once.
 */
static PyObject *torch_or_none(void)
{
	static bool missing;
	PyObject *torch = ext_torch();

	if (torch)
		return Py_NewRef(torch);
	if (PyErr_Occurred() || missing)
		return NULL;
	torch = PyImport_ImportModule("torch");
	if (!torch && PyErr_ExceptionMatches(PyExc_ImportError)) {
		PyErr_Clear();
		missing = true;
	}
	return torch;
}

static PyObject *make_tensor(PyObject *torch, PyObject *view, PyObject *dtype,
			     PyObject *shape)
{
	PyObject *u8 = NULL, *t;

	if (!dtype || dtype == Py_None) {
		u8 = PyObject_GetAttrString(torch, "uint8");
		if (!u8)
			return NULL;
		dtype = u8;
	}
	t = ext_tensor_from(view, dtype, shape);
	Py_XDECREF(u8);
	return t;
}

static PyObject *make_memoryview(PyObject *view, PyObject *fmt, PyObject *shape)
{
	PyObject *mv, *cast;

	if (fmt && fmt != Py_None && !PyUnicode_Check(fmt)) {
		PyErr_Format(PyExc_TypeError,
			     "nvswap: without torch, dtype must be a struct "
			     "format for memoryview.cast() ('B', 'f', ...), "
			     "not %.100s",
			     Py_TYPE(fmt)->tp_name);
		return NULL;
	}
	mv = PyMemoryView_FromObject(view);
	if (!mv || ((!fmt || fmt == Py_None) && (!shape || shape == Py_None)))
		return mv;
	if (!fmt || fmt == Py_None)
		fmt = NULL;
	if (shape && shape != Py_None)
		cast = PyObject_CallMethod(mv, "cast", "(sO)",
					   fmt ? PyUnicode_AsUTF8(fmt) : "B",
					   shape);
	else
		cast = PyObject_CallMethod(mv, "cast", "(O)", fmt);
	/* The cast shares mv's export of the View; mv can go. */
	Py_DECREF(mv);
	return cast;
}

PyObject *ext_lend(PyObject *owner, void *ptr, size_t nbytes, bool readonly,
		   PyObject *dtype, PyObject *shape, bool want_mv,
		   PyObject *records)
{
	PyObject *torch = NULL, *view, *obj = NULL, *rec = NULL;
	PyObject *wview = NULL, *wobj = NULL;

	if (!want_mv) {
		torch = torch_or_none();
		if (!torch && PyErr_Occurred())
			return NULL;
	}
	/* torch has no read-only tensors (frombuffer warns): a tensor is
	 * lent writable even where the C call lends const memory. */
	view = ext_view_new(owner, ptr, nbytes, torch ? false : readonly);
	if (!view)
		goto out;
	if (torch)
		obj = make_tensor(torch, view, dtype, shape);
	else
		obj = make_memoryview(view, dtype, shape);
	if (!obj)
		goto out;
	wview = PyWeakref_NewRef(view, NULL);
	wobj = wview ? PyWeakref_NewRef(obj, NULL) : NULL;
	rec = wobj ? PyTuple_Pack(2, wview, wobj) : NULL;
	if (!rec || PyList_Append(records, rec) < 0) {
		ext_view_invalidate(view);
		Py_CLEAR(obj);
	}
out:
	Py_XDECREF(rec);
	Py_XDECREF(wobj);
	Py_XDECREF(wview);
	Py_XDECREF(view);
	Py_XDECREF(torch);
	return obj;
}

/* t.set_() under torch.no_grad(): t no longer uses the lent memory. */
static int empty_tensor(PyObject *t)
{
	PyObject *torch = ext_torch(), *ng, *v, *r;

	if (!torch)
		return PyErr_Occurred() ? -1 : 0;
	ng = PyObject_CallMethod(torch, "no_grad", NULL);
	if (!ng)
		return -1;
	v = PyObject_CallMethod(ng, "__enter__", NULL);
	if (!v) {
		Py_DECREF(ng);
		return -1;
	}
	Py_DECREF(v);
	r = PyObject_CallMethod(t, "set_", NULL);
	v = PyObject_CallMethod(ng, "__exit__", "OOO", Py_None, Py_None,
				Py_None);
	Py_DECREF(ng);
	Py_XDECREF(v);
	Py_XDECREF(r);
	return r && v ? 0 : -1;
}

/* The referent of weakref @w (a new reference) or NULL when it is dead. */
static PyObject *deref(PyObject *w)
{
#if PY_VERSION_HEX >= 0x030D0000
	PyObject *o = NULL;

	if (PyWeakref_GetRef(w, &o) < 0)
		PyErr_Clear();
	return o;
#else
	PyObject *o = PyWeakref_GetObject(w);

	return o == Py_None ? NULL : Py_NewRef(o);
#endif
}

static void revoke_one(PyObject *rec)
{
	PyObject *view = deref(PyTuple_GET_ITEM(rec, 0));
	PyObject *obj = deref(PyTuple_GET_ITEM(rec, 1));
	int rc = 0;

	if (view) {
		ext_view_invalidate(view);
		Py_DECREF(view);
	}
	if (!obj)
		return;
	if (PyMemoryView_Check(obj)) {
		PyObject *r = PyObject_CallMethod(obj, "release", NULL);

		/* BufferError: something exported from the memoryview
		 * (numpy.frombuffer) still uses it; documented as not
		 * covered. */
		if (!r && PyErr_ExceptionMatches(PyExc_BufferError))
			PyErr_Clear();
		else if (!r)
			rc = -1;
		Py_XDECREF(r);
	} else {
		rc = empty_tensor(obj);
	}
	if (rc < 0)
		PyErr_WriteUnraisable(obj);
	Py_DECREF(obj);
}

void ext_revoke_all(PyObject *records)
{
	PyObject *type, *value, *tb, *copy;
	Py_ssize_t n;

	if (!records)
		return;
	PyErr_Fetch(&type, &value, &tb);
	n = PyList_GET_SIZE(records);
	/* Emptied first: what revoking runs (destructors) sees no record. */
	copy = PyList_GetSlice(records, 0, n);
	if (!copy || PyList_SetSlice(records, 0, n, NULL) < 0) {
		PyErr_WriteUnraisable(records);
		Py_XDECREF(copy);
		PyErr_Restore(type, value, tb);
		return;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *rec = PyList_GET_ITEM(copy, i);

		if (PyTuple_Check(rec))
			revoke_one(rec);
	}
	Py_DECREF(copy);
	PyErr_Restore(type, value, tb);
}

/* Revoke every list of records in the dict @held, and empty it. */
void ext_revoke_held(PyObject *held)
{
	PyObject *lists = PyDict_Values(held);

	/* emptied first: revoking runs Python code (tensor.set_()) */
	PyDict_Clear(held);
	if (!lists) {
		PyErr_WriteUnraisable(held);
		return;
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lists); i++)
		ext_revoke_all(PyList_GET_ITEM(lists, i));
	Py_DECREF(lists);
}
