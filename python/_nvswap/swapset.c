/* SPDX-License-Identifier: MIT */
/*
 * nvswap.Swapper's persistent swap set calls (nvswap/persist.h,
 * "Persistent swap sets"): checkpoint and its wait, the kept generations,
 * tensor tags and the registered ids. Added to the type's methods by
 * ext_swapper_init().
 */
#include "args.h"
#include "ext.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SW(o) ((struct ext_swapper *)(o))

/* A text argument @what of @call: a str without NUL (the C library
 * would cut it there), or None (NULL, 0). -1 with a TypeError or a
 * ValueError set. */
static int text_arg(const char *call, const char *what, PyObject *v,
		    const char **out)
{
	Py_ssize_t len;
	const char *t;

	*out = NULL;
	if (!v || v == Py_None)
		return 0;
	if (!PyUnicode_Check(v)) {
		PyErr_Format(PyExc_TypeError,
			     "%s: %s must be a str or None, "
			     "not %.100s",
			     call, what, Py_TYPE(v)->tp_name);
		return -1;
	}
	t = PyUnicode_AsUTF8AndSize(v, &len);
	if (!t)
		return -1;
	if (strlen(t) != (size_t)len) {
		PyErr_Format(PyExc_ValueError,
			     "%s: %s holds a NUL character at byte %zu: the "
			     "C library would cut it there (text without NUL)",
			     call, what, strlen(t));
		return -1;
	}
	*out = t;
	return 0;
}

static PyObject *swapset_checkpoint(PyObject *o, PyObject *const *args,
				    Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"tag", NULL};
	struct ext_swapper *self = SW(o);
	PyObject *a[1] = {NULL};
	const char *tag;
	int rc;

	if (ext_bind("checkpoint", args, nargs, kw, names, 1, 0, a) ||
	    text_arg("checkpoint", "tag", a[0], &tag))
		return NULL;
	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_checkpoint(self->s, tag));
	return rc < 0 ? NULL : PyLong_FromLong(rc);
}

/* A range attribute @name as an id; -1 with TypeError/ValueError set. */
static int range_id(PyObject *r, const char *name, unsigned long long *out)
{
	PyObject *v = PyObject_GetAttrString(r, name);

	if (!v)
		return -1;
	*out = PyLong_AsUnsignedLongLong(v);
	Py_DECREF(v);
	if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Format(PyExc_ValueError,
			     "step_begin: ids must be a range of tensor ids "
			     "(0 .. 2**64-1)");
		return -1;
	}
	return 0;
}

/* ids=range(a, b) (step 1, not empty) as [*lo, *hi]; None: all. */
static int ids_arg(PyObject *r, uint64_t *lo, uint64_t *hi)
{
	unsigned long long a, b, step;

	*lo = 0;
	*hi = UINT64_MAX;
	if (!r || r == Py_None)
		return 0;
	if (!PyObject_TypeCheck(r, &PyRange_Type)) {
		PyErr_Format(PyExc_TypeError,
			     "step_begin: ids must be a range, not %s",
			     Py_TYPE(r)->tp_name);
		return -1;
	}
	if (range_id(r, "start", &a) || range_id(r, "stop", &b) ||
	    range_id(r, "step", &step))
		return -1;
	if (step != 1 || b <= a) {
		PyErr_Format(PyExc_ValueError,
			     "step_begin: ids must be a non-empty range of "
			     "step 1, not range(%llu, %llu, %llu)",
			     a, b, step);
		return -1;
	}
	*lo = a;
	*hi = b - 1;
	return 0;
}

static PyObject *swapset_step_begin(PyObject *o, PyObject *const *args,
				    Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"name", "undoable", "ids", NULL};
	struct ext_swapper *self = SW(o);
	PyObject *a[3] = {NULL, NULL, NULL};
	const char *name;
	uint64_t lo, hi;
	bool undo;
	int rc;

	if (ext_bind("step_begin", args, nargs, kw, names, 1, 0, a) ||
	    text_arg("step_begin", "name", a[0], &name) ||
	    ext_arg_bool(a[1], false, &undo) || ids_arg(a[2], &lo, &hi))
		return NULL;
	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc,
			 nvs_swapper_step_open(self->s, name,
					       undo ? NVS_STEP_UNDOABLE : 0, lo,
					       hi));
	return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *swapset_step_end(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	int rc;

	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_step_end(self->s));
	return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *swapset_step_undo(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	int rc;

	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_step_undo(self->s));
	return rc < 0 ? NULL : PyLong_FromLong(rc);
}

static PyObject *swapset_checkpoint_wait(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	int rc;

	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_checkpoint_wait(self->s));
	return rc < 0 ? NULL : PyLong_FromLong(rc);
}

static PyObject *generation_dict(const struct nvs_generation_info *g)
{
	PyObject *d = PyDict_New();

	if (ext_dict_put(&d, "generation",
			 PyLong_FromUnsignedLongLong(g->generation)) ||
	    ext_dict_put(&d, "time_ns", PyLong_FromLongLong(g->time_ns)) ||
	    ext_dict_put(&d, "tensors",
			 PyLong_FromUnsignedLongLong(g->tensors)) ||
	    ext_dict_put(&d, "tensor_bytes",
			 PyLong_FromUnsignedLongLong(g->tensor_bytes)) ||
	    ext_dict_put(
		    &d, "tag",
		    PyUnicode_DecodeUTF8(g->tag, strlen(g->tag), "replace")))
		return NULL;
	return d;
}

/* A list call (the count, then up to that many @elem-byte items) as a
 * Python list of @item(each). A checkpoint or register meanwhile may add
 * one: ask again until they fit. */
static PyObject *list_call(struct ext_swapper *self, size_t elem,
			   int (*call)(struct nvs_swapper *, void *, size_t),
			   PyObject *(*item)(const void *))
{
	PyObject *l;
	char *v = NULL;
	int rc, n = 0;

	if (ext_swapper_enter(self))
		return NULL;
	while ((rc = call(self->s, v, (size_t)n)) > n) {
		free(v);
		n = rc;
		v = calloc((size_t)n, elem);
		if (!v) {
			ext_gate_leave(&self->gate);
			return PyErr_NoMemory();
		}
	}
	ext_gate_leave(&self->gate);
	if (rc < 0) {
		free(v);
		return ext_raise_last(rc);
	}
	l = PyList_New(rc);
	for (int i = 0; l && i < rc; i++) {
		PyObject *x = item(v + (size_t)i * elem);
		if (!x)
			Py_CLEAR(l);
		else
			PyList_SET_ITEM(l, i, x);
	}
	free(v);
	return l;
}

static int gens_call(struct nvs_swapper *s, void *v, size_t cap)
{
	return nvs_swapper_generations(s, v, cap);
}

static PyObject *gens_item(const void *v)
{
	return generation_dict(v);
}

static PyObject *swapset_generations(PyObject *o, PyObject *Py_UNUSED(a))
{
	return list_call(SW(o), sizeof(struct nvs_generation_info), gens_call,
			 gens_item);
}

static PyObject *swapset_set_tag(PyObject *o, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"id", "tag", NULL};
	struct ext_swapper *self = SW(o);
	PyObject *a[2] = {NULL, NULL};
	const char *tag = NULL;
	Py_ssize_t len = 0;
	uint64_t id;
	int rc;

	if (ext_bind("set_tag", args, nargs, kw, names, 2, 2, a) ||
	    ext_arg_u64(a[0], "id", UINT64_MAX, &id))
		return NULL;
	if (PyUnicode_Check(a[1]))
		tag = PyUnicode_AsUTF8AndSize(a[1], &len);
	else if (PyBytes_Check(a[1])) {
		tag = PyBytes_AS_STRING(a[1]);
		len = PyBytes_GET_SIZE(a[1]);
	} else if (a[1] != Py_None)
		PyErr_Format(PyExc_TypeError,
			     "set_tag: tag must be bytes, a str or None, not "
			     "%.100s",
			     Py_TYPE(a[1])->tp_name);
	if (PyErr_Occurred() || ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc,
			 nvs_swapper_set_tag(self->s, id, tag, (size_t)len));
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *swapset_get_tag(PyObject *o, PyObject *arg)
{
	struct ext_swapper *self = SW(o);
	char buf[NVS_SWAPPER_TAG_MAX];
	uint64_t id;
	int rc;

	if (ext_arg_u64(arg, "id", UINT64_MAX, &id) || ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc,
			 nvs_swapper_get_tag(self->s, id, buf, sizeof(buf)));
	return rc < 0 ? NULL : PyBytes_FromStringAndSize(buf, rc);
}

static int ids_call(struct nvs_swapper *s, void *v, size_t cap)
{
	return nvs_swapper_list(s, v, cap);
}

static PyObject *ids_item(const void *v)
{
	return PyLong_FromUnsignedLongLong(*(const uint64_t *)v);
}

static PyObject *swapset_ids(PyObject *o, PyObject *Py_UNUSED(a))
{
	return list_call(SW(o), sizeof(uint64_t), ids_call, ids_item);
}

static PyObject *swapset_unsaved(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct ext_swapper *self = SW(o);
	int rc;

	if (ext_swapper_enter(self))
		return NULL;
	EXT_SWAPPER_CALL(self, rc, nvs_swapper_unsaved(self->s));
	return rc < 0 ? NULL : PyBool_FromLong(rc);
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define M(name, flags, doc)                                                    \
	{                                                                      \
#name, (PyCFunction)(void (*)(void))swapset_##name, flags, doc \
	}

PyMethodDef ext_swapset_methods[] = {
	M(checkpoint, FAST,
	  "checkpoint(tag=None) -> int\n\n"
	  "A persistent set (persist='persistent' or 'resume'): make the\n"
	  "current state durable as a new generation named tag (a str of\n"
	  "at most 255 bytes). Starts the writes of dirty released tensors\n"
	  "and returns the new generation's number; a background thread\n"
	  "syncs the data and commits the manifest (checkpoint_wait()\n"
	  "waits for it), then drops generations beyond keep_generations.\n"
	  "Tensors already on disk cost nothing. Raises nvswap.Error:\n"
	  "EINVAL (not a persistent set, tag too long), EBUSY (a tensor is\n"
	  "acquired and was changed since its last write: release it\n"
	  "first; or a step is open, step_begin()), or the error of a\n"
	  "previous checkpoint nobody collected; ValueError for a tag\n"
	  "holding a NUL character."),
	M(step_begin, FAST,
	  "step_begin(name=None, undoable=False, ids=None) -> None\n\n"
	  "An update of several tensors (an optimizer step over many\n"
	  "layers) is under way and must not be saved in part: until\n"
	  "step_end(), checkpoint() raises nvswap.Error(EBUSY) naming it,\n"
	  "and close() makes no checkpoint: a persistent set then reopens\n"
	  "at its newest generation, which holds none of the step (as\n"
	  "after a crash). Reads, writes and evictions go on as usual.\n"
	  "undoable=True: step_undo() can put every tensor (ids=range(a,\n"
	  "b): those with such ids) back as it was here; the first write\n"
	  "of one in the step goes to a new place\n"
	  "and the old one is kept until the step ends (the disk holds\n"
	  "both). Raises nvswap.Error(EBUSY) when a step is open already\n"
	  "or a tensor is dirty or being written (its value here must be\n"
	  "on disk: evict and wait first)."),
	M(step_end, METH_NOARGS,
	  "step_end() -> None\n\n"
	  "The step step_begin() opened is whole: checkpoints are allowed\n"
	  "again, and an undoable step's old values are given back. A\n"
	  "no-op when no step is open."),
	M(step_undo, METH_NOARGS,
	  "step_undo() -> int\n\n"
	  "End the undoable step open, every tensor it changed back to its\n"
	  "value at step_begin(): what it wrote is given back, resident\n"
	  "copies changed in it are dropped, write failures kept for them\n"
	  "are forgotten. Waits for their I/O in flight. Returns how many\n"
	  "tensors it put back. Raises nvswap.Error: EINVAL (no undoable\n"
	  "step is open), EBUSY (a tensor it changed is acquired: nothing\n"
	  "is undone)."),
	M(checkpoint_wait, METH_NOARGS,
	  "checkpoint_wait() -> int\n\n"
	  "Block (GIL released) until the last checkpoint is committed:\n"
	  "its generation number, 0 when none was started. Raises\n"
	  "nvswap.Error ENOSPC/EIO when it failed (once): nothing is lost,\n"
	  "the previous generation stays the newest."),
	M(generations, METH_NOARGS,
	  "generations() -> list[dict]\n\n"
	  "The kept generations, newest first, each a dict: generation,\n"
	  "time_ns (when committed, CLOCK_REALTIME), tensors,\n"
	  "tensor_bytes, tag. Empty for a scratch set."),
	M(set_tag, FAST,
	  "set_tag(id, tag) -> None\n\n"
	  "Attach opaque bytes (or a str, stored as UTF-8; None or b''\n"
	  "clears it) to tensor id, at most 1024 bytes: kept in a\n"
	  "persistent set's manifest and restored at reopen (say its dtype\n"
	  "and shape). Raises nvswap.Error ENOENT or EINVAL (too long)."),
	M(get_tag, METH_O,
	  "get_tag(id) -> bytes\n\n"
	  "Tensor id's tag (b'' when none). Raises nvswap.Error ENOENT."),
	M(unsaved, METH_NOARGS,
	  "unsaved() -> bool\n\n"
	  "True when a persistent set holds changes its newest generation\n"
	  "does not (a tensor added, removed, retagged or written since,\n"
	  "a dirty resident one, or no generation yet): exactly when\n"
	  "close() would checkpoint first, unless a step is open\n"
	  "(step_begin()). False for scratch space."),
	M(ids, METH_NOARGS,
	  "ids() -> list[int]\n\n"
	  "The registered tensor ids in ascending order: after reopening a\n"
	  "persistent set, the tensors it holds."),
	{NULL, NULL, 0, NULL},
};
