/* SPDX-License-Identifier: MIT */
/*
 * nvswap.Swapper's file-backed tensors (nvswap/backing.h): add_file() and
 * register_file(), a tensor whose clean contents are pieces of files of
 * the caller's (weights served in place), and share_disk(), the queue
 * depth split with the other processes serving them. Added to the type's
 * methods by ext_swapper_init().
 */
#include "args.h"
#include "ext.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SW(o) ((struct ext_swapper *)(o))

/* A call on a path with its int result: @arg made a path (bytes), the
 * swapper entered, @fn run with the GIL released. */
static PyObject *
path_call(struct ext_swapper *self, PyObject *arg,
	  int (*fn)(struct nvs_swapper *, const char *, uint64_t), uint64_t x)
{
	PyObject *path = NULL;
	int rc;

	if (!PyUnicode_FSConverter(arg, &path))
		return NULL;
	if (ext_swapper_enter(self)) {
		Py_DECREF(path);
		return NULL;
	}
	EXT_SWAPPER_CALL(self, rc, fn(self->s, PyBytes_AS_STRING(path), x));
	Py_DECREF(path);
	return rc < 0 ? NULL : PyLong_FromLong(rc);
}

static int add_file(struct nvs_swapper *s, const char *path, uint64_t head)
{
	return nvs_swapper_add_file(s, path, head);
}

static int share_disk(struct nvs_swapper *s, const char *path, uint64_t x)
{
	(void)x;
	return nvs_swapper_share_disk(s, path);
}

static PyObject *backing_add_file(PyObject *o, PyObject *const *args,
				  Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"path", "head", NULL};
	PyObject *a[2] = {NULL, NULL};
	uint64_t head = 0;

	if (ext_bind("add_file", args, nargs, kw, names, 2, 1, a))
		return NULL;
	if (a[1] && ext_arg_u64(a[1], "head", UINT64_MAX, &head))
		return NULL;
	return path_call(SW(o), a[0], add_file, head);
}

static PyObject *backing_share_disk(PyObject *o, PyObject *const *args,
				    Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"path", NULL};
	PyObject *a[1] = {NULL};

	if (ext_bind("share_disk", args, nargs, kw, names, 1, 1, a))
		return NULL;
	return path_call(SW(o), a[0], share_disk, 0);
}

/* One piece: a 4-sequence of ints (file, offset, length, at). */
static int piece_arg(PyObject *v, Py_ssize_t i, struct nvs_file_piece *p)
{
	static const char *const what[] = {"file", "offset", "length", "at"};
	uint64_t x[4];
	PyObject *seq = PySequence_Fast(v, "");

	if (!seq || PySequence_Fast_GET_SIZE(seq) != 4) {
		Py_XDECREF(seq);
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "Swapper.register_file: piece %zd must be a "
			     "(file, offset, length, at) tuple of ints",
			     i);
		return -1;
	}
	for (int k = 0; k < 4; k++)
		if (ext_arg_u64(PySequence_Fast_GET_ITEM(seq, k), what[k],
				k == 0 ? UINT32_MAX : UINT64_MAX, &x[k])) {
			Py_DECREF(seq);
			return -1;
		}
	Py_DECREF(seq);
	*p = (struct nvs_file_piece){.file = (uint32_t)x[0],
				     .offset = x[1],
				     .length = x[2],
				     .at = x[3]};
	return 0;
}

static PyObject *backing_register_file(PyObject *o, PyObject *const *args,
				       Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"id", "nbytes", "pieces", NULL};
	struct ext_swapper *self = SW(o);
	struct nvs_file_piece *p = NULL;
	PyObject *a[3], *seq;
	uint64_t id, nbytes;
	Py_ssize_t n;
	int rc;

	if (ext_bind("register_file", args, nargs, kw, names, 3, 3, a) ||
	    ext_arg_u64(a[0], "id", UINT64_MAX, &id) ||
	    ext_arg_u64(a[1], "nbytes", SIZE_MAX, &nbytes))
		return NULL;
	seq = PySequence_Fast(a[2], "Swapper.register_file: pieces must be a "
				    "sequence of (file, offset, length, at)");
	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	p = calloc(n ? (size_t)n : 1, sizeof(*p));
	if (!p) {
		Py_DECREF(seq);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (piece_arg(PySequence_Fast_GET_ITEM(seq, i), i, &p[i])) {
			Py_DECREF(seq);
			free(p);
			return NULL;
		}
	Py_DECREF(seq);
	if (ext_swapper_enter(self)) {
		free(p);
		return NULL;
	}
	EXT_SWAPPER_CALL(self, rc,
			 nvs_swapper_register_file(self->s, id, (size_t)nbytes,
						   p, (size_t)n));
	free(p);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

int ext_layer_sources(PyObject *v, unsigned n, struct nvs_layer_source *out)
{
	PyObject *seq = PySequence_Fast(v, "ParamSwapper.add_layer: sources "
					   "must be a sequence");
	int rc = 0;

	if (!seq)
		return -1;
	if (PySequence_Fast_GET_SIZE(seq) != (Py_ssize_t)n) {
		PyErr_Format(PyExc_ValueError,
			     "ParamSwapper.add_layer: %zd sources for %u "
			     "tensors",
			     PySequence_Fast_GET_SIZE(seq), n);
		rc = -1;
	}
	for (unsigned i = 0; rc == 0 && i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
		uint64_t f, off;

		out[i] = (struct nvs_layer_source){.file = NVS_LAYER_ZEROS};
		if (it == Py_None)
			continue;
		if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 2) {
			PyErr_Format(PyExc_TypeError,
				     "ParamSwapper.add_layer: source %u must "
				     "be a (file, offset) tuple or None",
				     i);
			rc = -1;
		} else if (ext_arg_u64(PyTuple_GET_ITEM(it, 0), "file",
				       UINT32_MAX - 1, &f) ||
			   ext_arg_u64(PyTuple_GET_ITEM(it, 1), "offset",
				       UINT64_MAX, &off)) {
			rc = -1;
		} else {
			out[i].file = (uint32_t)f;
			out[i].offset = off;
		}
	}
	Py_DECREF(seq);
	return rc;
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define M(name, flags, doc)                                                    \
	{                                                                      \
#name, (PyCFunction)(void (*)(void))backing_##name, flags, doc \
	}

PyMethodDef ext_backing_methods[] = {
	M(add_file, FAST,
	  "add_file(path, head=0) -> int\n\n"
	  "A file tensors read their clean contents from (register_file),\n"
	  "weights served in place: opened read-only (O_DIRECT where its\n"
	  "filesystem allows; stats()['files_buffered'] counts the others)\n"
	  "and kept open until close(); never written. head: bytes at its\n"
	  "start (a safetensors file's 8 + header length) whose CRC32C is\n"
	  "kept beside its size, mtime and inode, to tell a changed file\n"
	  "from the one added. Returns the file's index. A scratch\n"
	  "Swapper only (EOPNOTSUPP for a persistent set, EROFS for a\n"
	  "read-only one); EINVAL for a file that is not a regular one or\n"
	  "a head beyond its size, open(2)'s errno naming the path."),
	M(register_file, FAST,
	  "register_file(id, nbytes, pieces) -> None\n\n"
	  "Add tensor id of nbytes whose clean contents are pieces of added\n"
	  "files: a sequence of (file, offset, length, at) tuples, file an\n"
	  "add_file() index, at where the bytes go in the tensor; what no\n"
	  "piece covers reads as zeros. Nothing is read or written now. A\n"
	  "read (acquire, prefetch, read) reads the pieces, then checks\n"
	  "every file it read against its identity at add_file(): a file\n"
	  "truncated, rewritten, replaced or deleted since raises\n"
	  "nvswap.Error(ESTALE) naming it and the tensor, and no byte of\n"
	  "it is handed out. Released dirty and written back, the tensor\n"
	  "lives in the swap file like any other; a step_undo() puts it\n"
	  "back on its file. Its place in the swap file stays sparse (no\n"
	  "block used) until then. Raises EINVAL naming a bad piece (an\n"
	  "unknown file, empty, beyond the tensor or its file, overlapping\n"
	  "another), EEXIST, EFBIG (above buffer_size), TypeError for a\n"
	  "piece that is not four ints."),
	M(share_disk, FAST,
	  "share_disk(path) -> int\n\n"
	  "Share the disks with the processes holding a flock on path (a\n"
	  "file or directory each of them locks, shared or exclusive): the\n"
	  "aio handles keep to their share of queue_depth for N processes\n"
	  "(depth / N, never below 8), N counted from /proc/locks now and\n"
	  "again at a read at most once a second. Returns N; stats()\n"
	  "['queue_depth'] is the share in use, ['disk_sharers'] N. A\n"
	  "read-only set does it on its lock by itself; nvswap.torch on\n"
	  "the directory of weights it serves in place. stat(2)'s errno\n"
	  "naming path."),
	{NULL, NULL, 0, NULL},
};
