/* SPDX-License-Identifier: MIT */
/*
 * The life of a role swapper (ParamSwapper, OptimizerSwapper,
 * GradSwapper) over its Swapper: it holds the Swapper, which closes it
 * first when it closes (offload.h: the core must outlive the role), and
 * what its acquires lend is revoked at release and close, as the
 * Swapper's own.
 */
#include "role.h"

#include "args.h"

#include <errno.h>
#include <string.h>

#define ROLE(o) ((struct ext_role *)(o))

const char *role_name(const struct ext_role *r)
{
	static const char *const names[] = {"ParamSwapper", "OptimizerSwapper",
					    "GradSwapper"};

	return names[r->kind];
}

PyObject *role_new(PyTypeObject *type, PyObject *Py_UNUSED(a),
		   PyObject *Py_UNUSED(k))
{
	struct ext_role *r = (struct ext_role *)type->tp_alloc(type, 0);

	if (!r)
		return NULL;
	pthread_mutex_init(&r->mu, NULL);
	ext_gate_init(&r->gate);
	r->specs = PyDict_New();
	r->held = PyDict_New();
	if (!r->specs || !r->held) {
		Py_DECREF(r);
		return NULL;
	}
	return (PyObject *)r;
}

int role_attach(struct ext_role *r, PyObject *core, int kind)
{
	struct ext_swapper *s;

	r->kind = kind;
	if (!PyObject_TypeCheck(core, &ext_SwapperType)) {
		PyErr_Format(PyExc_TypeError,
			     "%s: swapper must be an nvswap.Swapper, not "
			     "%.100s",
			     role_name(r), Py_TYPE(core)->tp_name);
		return -1;
	}
	if (r->core) {
		PyErr_Format(PyExc_RuntimeError,
			     "nvswap: %s.__init__ called twice", role_name(r));
		return -1;
	}
	s = (struct ext_swapper *)core;
	r->core = (struct ext_swapper *)Py_NewRef(core);
	r->prev = NULL;
	r->next = s->roles;
	if (s->roles)
		s->roles->prev = r;
	s->roles = r;
	return 0;
}

static void detach(struct ext_role *r)
{
	struct ext_swapper *s = r->core;

	if (!s)
		return;
	if (r->prev)
		r->prev->next = r->next;
	else if (s->roles == r)
		s->roles = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	Py_CLEAR(r->core);
}

int role_enter(struct ext_role *r)
{
	PyThreadState *ts;

	if (!r->p || ext_gate_enter(&r->gate, false)) {
		ext_raise_closed(role_name(r));
		return -1;
	}
	if (!r->core->s || ext_gate_enter(&r->core->gate, false)) {
		ext_gate_leave(&r->gate);
		ext_raise_closed("Swapper");
		return -1;
	}
	/* Taken without the GIL: nobody waits for @mu holding the GIL, so
	 * holding @mu while taking the GIL back cannot deadlock. */
	ts = PyEval_SaveThread();
	pthread_mutex_lock(&r->mu);
	PyEval_RestoreThread(ts);
	return 0;
}

void role_leave(struct ext_role *r)
{
	pthread_mutex_unlock(&r->mu);
	ext_gate_leave(&r->core->gate);
	ext_gate_leave(&r->gate);
}

PyObject *role_raise(struct ext_role *r, int rc, const char *msg)
{
	if (rc == ROLE_GONE)
		return ext_raise_closed(role_name(r));
	return ext_raise(rc, msg);
}

int role_group_arg(PyObject *v, unsigned *out)
{
	uint64_t x;

	if (ext_arg_u64(v, "layer or group", UINT_MAX, &x))
		return -1;
	*out = (unsigned)x;
	return 0;
}

/* ---- adding tensors --------------------------------------------------- */

static PyObject *spec_of(PyObject *item, size_t nbytes)
{
	PyObject *dtype = NULL, *shape = NULL, *size, *spec;

	if (ext_is_tensor(item)) {
		dtype = PyObject_GetAttrString(item, "dtype");
		size = dtype ? PyObject_GetAttrString(item, "shape") : NULL;
		shape = size ? PySequence_Tuple(size) : NULL;
		Py_XDECREF(size);
		if (!shape) {
			Py_XDECREF(dtype);
			return NULL;
		}
	}
	spec = Py_BuildValue("(nOO)", (Py_ssize_t)nbytes,
			     dtype ? dtype : Py_None, shape ? shape : Py_None);
	Py_XDECREF(dtype);
	Py_XDECREF(shape);
	return spec;
}

/* 1 with *nbytes set when @item is a torch tensor on the meta device;
 * 0 when it is anything else; -1 with an exception set. */
static int meta_nbytes(PyObject *item, uint64_t *nbytes)
{
	PyObject *is_meta, *n;
	int meta;

	if (!ext_is_tensor(item))
		return 0;
	is_meta = PyObject_GetAttrString(item, "is_meta");
	if (!is_meta)
		return -1;
	meta = PyObject_IsTrue(is_meta);
	Py_DECREF(is_meta);
	if (meta <= 0)
		return meta;
	/* numel() x element_size(): torch 1.13 has no Tensor.nbytes */
	n = PyObject_CallMethod(item, "numel", NULL);
	if (!n)
		return -1;
	*nbytes = PyLong_AsUnsignedLongLong(n);
	Py_DECREF(n);
	n = PyErr_Occurred() ? NULL
			     : PyObject_CallMethod(item, "element_size", NULL);
	if (!n)
		return -1;
	*nbytes *= PyLong_AsUnsignedLongLong(n);
	Py_DECREF(n);
	return PyErr_Occurred() ? -1 : 1;
}

void role_tensors_free(struct ext_buf *bufs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		ext_buf_release(&bufs[i]);
}

PyObject *role_tensors(PyObject *seq, unsigned *n, size_t *nbytes,
		       const void **init, struct ext_buf *bufs)
{
	PyObject *fast, *spec = NULL;
	Py_ssize_t len;
	unsigned i = 0;

	*n = 0;
	fast = PySequence_Fast(seq, "nvswap: tensors must be a list or tuple "
				    "of ints, tensors (meta ones too) or "
				    "buffers");
	if (!fast)
		return NULL;
	len = PySequence_Fast_GET_SIZE(fast);
	if (len > NVS_OFFLOAD_MAX_TENSORS) {
		PyErr_Format(PyExc_ValueError,
			     "nvswap: %zd tensors; a layer or group holds at "
			     "most %d",
			     len, NVS_OFFLOAD_MAX_TENSORS);
		goto out;
	}
	spec = PyTuple_New(len);
	for (; spec && i < (unsigned)len; i++) {
		PyObject *item = PySequence_Fast_GET_ITEM(fast, i), *s;
		uint64_t x;

		memset(&bufs[i], 0, sizeof(bufs[i]));
		if (PyLong_Check(item)) {
			if (ext_arg_u64(item, "nbytes", SIZE_MAX, &x))
				break;
			nbytes[i] = (size_t)x;
			init[i] = NULL;
		} else if (meta_nbytes(item, &x) != 0) {
			if (PyErr_Occurred())
				break;
			/* A meta tensor: its dtype and shape, zeros (no
			 * I/O until it is written). */
			nbytes[i] = (size_t)x;
			init[i] = NULL;
		} else {
			if (ext_buf_get(item, false, &bufs[i]))
				break;
			nbytes[i] = bufs[i].nbytes;
			init[i] = bufs[i].ptr;
		}
		s = spec_of(item, nbytes[i]);
		if (!s)
			break;
		PyTuple_SET_ITEM(spec, i, s);
	}
	if (spec && i < (unsigned)len) {
		role_tensors_free(bufs, i + 1);
		Py_CLEAR(spec);
	}
	*n = spec ? (unsigned)len : 0;
out:
	Py_DECREF(fast);
	return spec;
}

int role_set_spec(struct ext_role *r, unsigned group, PyObject *spec)
{
	PyObject *key = PyLong_FromUnsignedLong(group);
	int rc = key ? PyDict_SetItem(r->specs, key, spec) : -1;

	Py_XDECREF(key);
	return rc;
}

/* ---- lending ---------------------------------------------------------- */

static PyObject *pick(PyObject *given, PyObject *spec, bool want_mv)
{
	if (given && given != Py_None)
		return given;
	return want_mv ? NULL : spec;
}

PyObject *role_lend(struct ext_role *r, unsigned group, void **ptrs,
		    bool want_mv, PyObject *dtype, PyObject *shape)
{
	PyObject *key, *spec, *records = NULL, *out = NULL;

	key = PyLong_FromUnsignedLong(group);
	spec = key ? PyDict_GetItemWithError(r->specs, key) : NULL;
	if (!spec) {
		if (key && !PyErr_Occurred())
			PyErr_Format(PyExc_RuntimeError,
				     "nvswap: %s has no record of %u",
				     role_name(r), group);
		goto fail;
	}
	records = PyList_New(0);
	out = records ? PyList_New(PyTuple_GET_SIZE(spec)) : NULL;
	for (Py_ssize_t i = 0; out && i < PyTuple_GET_SIZE(spec); i++) {
		PyObject *s = PyTuple_GET_ITEM(spec, i), *obj;
		size_t nbytes = PyLong_AsSize_t(PyTuple_GET_ITEM(s, 0));

		obj = ext_lend((PyObject *)r, ptrs[i], nbytes,
			       r->kind == ROLE_GRAD,
			       pick(dtype, PyTuple_GET_ITEM(s, 1), want_mv),
			       pick(shape, PyTuple_GET_ITEM(s, 2), want_mv),
			       want_mv, records);
		if (!obj)
			goto fail;
		PyList_SET_ITEM(out, i, obj);
	}
	if (!out || PyDict_SetItem(r->held, key, records) < 0)
		goto fail;
	Py_DECREF(records);
	Py_DECREF(key);
	return out;
fail:
	if (records)
		ext_revoke_all(records);
	Py_XDECREF(records);
	Py_XDECREF(out);
	Py_XDECREF(key);
	return NULL;
}

void role_revoke(struct ext_role *r, unsigned group)
{
	PyObject *key = PyLong_FromUnsignedLong(group), *records;

	records = key ? PyDict_GetItemWithError(r->held, key) : NULL;
	if (records) {
		Py_INCREF(records);
		if (PyDict_DelItem(r->held, key) < 0)
			PyErr_Clear();
		ext_revoke_all(records);
		Py_DECREF(records);
	}
	if (PyErr_Occurred())
		PyErr_WriteUnraisable((PyObject *)r);
	Py_XDECREF(key);
}

/* ---- the end ---------------------------------------------------------- */

static int destroy_c(int kind, void *p)
{
	switch (kind) {
	case ROLE_PARAM:
		return nvs_param_swapper_destroy(p);
	case ROLE_OPTIM:
		return nvs_optim_swapper_destroy(p);
	default:
		return nvs_grad_swapper_destroy(p);
	}
}

int ext_role_destroy(struct ext_role *r, char *msg)
{
	PyThreadState *ts;
	int rc = 0;

	/* From Swapper.close: the core is drained, so nobody is inside
	 * the role either; from close(): drained already. */
	ext_gate_drain(&r->gate);
	ext_revoke_held(r->held);
	ts = PyEval_SaveThread();
	pthread_mutex_lock(&r->mu);
	if (r->p) {
		rc = destroy_c(r->kind, r->p);
		if (rc < 0)
			snprintf(msg, NVS_ERRMSG_MAX, "%s", nvs_last_error());
		r->p = NULL;
	}
	pthread_mutex_unlock(&r->mu);
	PyEval_RestoreThread(ts);
	return rc;
}

PyObject *role_close(PyObject *o, PyObject *Py_UNUSED(unused))
{
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	int rc;

	/* Closed, or the Swapper is closing and destroys it itself. */
	if (!r->p || !r->core || ext_gate_enter(&r->core->gate, false))
		Py_RETURN_NONE;
	/* Wait for the calls in progress (they lend memory the destroy
	 * frees); false: another close() is at it. */
	if (!ext_gate_drain(&r->gate)) {
		ext_gate_leave(&r->core->gate);
		Py_RETURN_NONE;
	}
	rc = ext_role_destroy(r, msg);
	ext_gate_leave(&r->core->gate);
	if (rc < 0)
		return ext_raise(rc, msg);
	Py_RETURN_NONE;
}

void role_finalize(PyObject *o)
{
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *type, *value, *tb;
	int rc;

	/* force: the Swapper may be draining; it waits for this. */
	if (!r->p || !r->core || ext_gate_enter(&r->core->gate, true))
		return;
	PyErr_Fetch(&type, &value, &tb);
	rc = ext_role_destroy(r, msg);
	ext_gate_leave(&r->core->gate);
	if (rc < 0) {
		ext_raise(rc, msg);
		PyErr_WriteUnraisable(o);
	}
	PyErr_Restore(type, value, tb);
}

void role_dealloc(PyObject *o)
{
	struct ext_role *r = ROLE(o);

	if (PyObject_CallFinalizerFromDealloc(o) < 0)
		return; /* resurrected */
	if (r->weakrefs)
		PyObject_ClearWeakRefs(o);
	detach(r);
	Py_CLEAR(r->specs);
	Py_CLEAR(r->held);
	ext_gate_fini(&r->gate);
	pthread_mutex_destroy(&r->mu);
	Py_TYPE(o)->tp_free(o);
}

PyObject *role_ctx_enter(PyObject *o, PyObject *Py_UNUSED(unused))
{
	if (ROLE(o)->gate.closing || !ROLE(o)->p)
		return ext_raise_closed(role_name(ROLE(o)));
	return Py_NewRef(o);
}

PyObject *role_ctx_exit(PyObject *o, PyObject *Py_UNUSED(args))
{
	return role_close(o, NULL);
}

PyObject *role_get_closed(PyObject *o, void *Py_UNUSED(unused))
{
	return PyBool_FromLong(ROLE(o)->gate.closing || !ROLE(o)->p);
}

PyObject *role_get_swapper(PyObject *o, void *Py_UNUSED(unused))
{
	return Py_NewRef(ROLE(o)->core ? (PyObject *)ROLE(o)->core : Py_None);
}
