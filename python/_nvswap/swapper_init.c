/* SPDX-License-Identifier: MIT */
/*
 * nvswap.Swapper's creation: the keywords (over a Config's section when
 * one is given) turned into nvs_swapper_opts, then nvs_swapper_create()
 * with the GIL released.
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SW(o) ((struct ext_swapper *)(o))

PyObject *ext_swapper_new(PyTypeObject *type, PyObject *Py_UNUSED(a),
			  PyObject *Py_UNUSED(k))
{
	struct ext_swapper *self =
		(struct ext_swapper *)type->tp_alloc(type, 0);

	if (!self)
		return NULL;
	self->held = PyDict_New();
	if (!self->held) {
		Py_DECREF(self);
		return NULL;
	}
	ext_gate_init(&self->gate);
	return (PyObject *)self;
}

/* nvme_path: one path, or a list or tuple of them; new bytes in @keep. */
static int paths_arg(PyObject *v, struct nvs_swapper_opts *o, PyObject **keep)
{
	Py_ssize_t n;
	bool one = PyUnicode_Check(v) || PyBytes_Check(v) ||
		   !(PyList_Check(v) || PyTuple_Check(v));

	n = one ? 1 : PySequence_Size(v);
	if (n < 1 || n > NVS_SWAPPER_MAX_PATHS) {
		PyErr_Format(PyExc_ValueError,
			     "nvswap: nvme_path lists 1 to %d paths, not %zd",
			     NVS_SWAPPER_MAX_PATHS, n);
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *item = one ? v : PySequence_GetItem(v, i);
		int ok = item && PyUnicode_FSConverter(item, &keep[i]);

		if (!one)
			Py_XDECREF(item);
		if (!ok)
			return -1;
		o->nvme_paths[i] = PyBytes_AS_STRING(keep[i]);
	}
	o->npaths = (unsigned)n;
	return 0;
}

static int size_arg(PyObject *v, const char *what, size_t *out)
{
	uint64_t x = *out;

	if (ext_arg_bytes(v, what, &x))
		return -1;
	*out = (size_t)x;
	return 0;
}

static int opt_bool(PyObject *v, bool *out)
{
	return v && v != Py_None ? ext_arg_bool(v, *out, out) : 0;
}

static int opt_uint(PyObject *v, const char *what, uint64_t max, uint64_t *out)
{
	return v && v != Py_None ? ext_arg_u64(v, what, max, out) : 0;
}

/* persist: "scratch", "persistent", "resume" or "readonly" (None: as
 * configured). */
static int persist_arg(PyObject *v, uint8_t *out)
{
	const char *s, *name;

	if (!v || v == Py_None)
		return 0;
	s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
	for (unsigned i = 0; s && (name = nvs_persist_name(i)); i++)
		if (!strcmp(s, name)) {
			*out = (uint8_t)i;
			return 0;
		}
	if (!PyErr_Occurred())
		PyErr_Format(PyExc_ValueError,
			     "Swapper: persist must be 'scratch', "
			     "'persistent', 'resume' or 'readonly', not %R",
			     v);
	return -1;
}

/* keep_generations: an int from 1 to NVS_KEEP_GENERATIONS_MAX, the
 * config's rule (None: as configured). The C struct's 0 means the
 * default, but 0 kept generations would keep none of what checkpoint()
 * commits, so it is refused here as in the config; a bool is no count.
 * Every refusal quotes the whole range. */
static int keep_arg(PyObject *v, uint32_t *out)
{
	PyObject *n;
	long long x;
	int overflow = 0;

	if (!v || v == Py_None)
		return 0;
	if (PyBool_Check(v) || !PyIndex_Check(v)) {
		PyErr_Format(PyExc_TypeError,
			     "Swapper: keep_generations must be an int from 1 "
			     "to %u (None: the default, 2), not %.100s",
			     NVS_KEEP_GENERATIONS_MAX, Py_TYPE(v)->tp_name);
		return -1;
	}
	n = PyNumber_Index(v);
	if (!n)
		return -1;
	x = PyLong_AsLongLongAndOverflow(n, &overflow);
	if (x == -1 && PyErr_Occurred()) {
		Py_DECREF(n);
		return -1;
	}
	if (overflow || x < 1 || x > NVS_KEEP_GENERATIONS_MAX) {
		PyErr_Format(PyExc_ValueError,
			     "Swapper: keep_generations must be from 1 to %u "
			     "(None: the default, 2), not %S",
			     NVS_KEEP_GENERATIONS_MAX, n);
		Py_DECREF(n);
		return -1;
	}
	Py_DECREF(n);
	*out = (uint32_t)x;
	return 0;
}

int ext_swapper_tp_init(PyObject *o, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {
		"config",	    "kind",	  "rank",
		"nvme_path",	    "name",	  "buffer_size",
		"buffer_count",	    "elem_size",  "stripe_size",
		"pin_memory",	    "auto_evict", "checksum",
		"wait_ms",	    "backend",	  "persist",
		"keep_generations", "generation", "page_cache",
		"keep_blocks",	    NULL};
	struct ext_swapper *self = SW(o);
	PyObject *config = Py_None, *kind = NULL, *rank = NULL, *paths = NULL,
		 *name = NULL, *bsize = NULL, *bcount = NULL, *esize = NULL,
		 *ssize = NULL, *pin = NULL, *autoev = NULL, *csum = NULL,
		 *wait = NULL, *backend = NULL, *persist = NULL, *keep = NULL,
		 *gen = NULL, *pcache = NULL, *kblocks = NULL;
	PyObject *bpaths[NVS_SWAPPER_MAX_PATHS] = {NULL};
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_swapper_opts opts;
	enum nvs_offload_kind k = NVS_OFFLOAD_PARAM;
	struct nvs_swapper *s = NULL;
	uint64_t r = 0, count, elem = 0, wms;
	int rc = -1, rk;

	if (!PyArg_ParseTupleAndKeywords(
		    args, kwds, "|OOO$OOOOOOOOOOOOOOOO", kwlist, &config, &kind,
		    &rank, &paths, &name, &bsize, &bcount, &esize, &ssize, &pin,
		    &autoev, &csum, &wait, &backend, &persist, &keep, &gen,
		    &pcache, &kblocks))
		return -1;
	if (self->s || self->gate.closing) {
		PyErr_SetString(PyExc_RuntimeError,
				"nvswap: Swapper.__init__ called twice");
		return -1;
	}
	nvs_swapper_opts_init(&opts);
	if ((kind && ext_offload_kind(kind, &k)) ||
	    opt_uint(rank, "rank", INT32_MAX, &r) ||
	    opt_uint(esize, "elem_size", SIZE_MAX, &elem))
		return -1;
	/* No rank given: the config's nvswap.rank, else the launcher's. */
	rk = rank && rank != Py_None ? (int)r : NVS_RANK_AUTO;
	opts.elem_size = (size_t)elem;
	if (config != Py_None) {
		if (!PyObject_TypeCheck(config, &ext_ConfigType)) {
			PyErr_Format(PyExc_TypeError,
				     "Swapper: config must be an nvswap.Config "
				     "or None, not %.100s",
				     Py_TYPE(config)->tp_name);
			return -1;
		}
		rc = nvs_config_swapper_opts(((struct ext_config *)config)->cfg,
					     k, rk, &opts);
		if (rc < 0) {
			ext_raise_config(rc, nvs_last_error());
			return -1;
		}
		rc = -1;
	} else if (rk == NVS_RANK_AUTO) {
		struct nvs_launch l;
		int lrc = nvs_launch_detect(&l);
		if (lrc < 0) {
			ext_raise_last(lrc);
			return -1;
		}
		opts.rank = l.rank;
	} else {
		opts.rank = rk;
	}
	/* Without a config, a node's ranks share the default depth, as a
	 * config's do unless nvswap.split_queue_depth is false. */
	if (config == Py_None)
		opts.aio.queue_depth =
			nvs_launch_share_queue(opts.aio.queue_depth);
	count = opts.buffer_count;
	wms = opts.wait_ms;
	if (paths && paths != Py_None && paths_arg(paths, &opts, bpaths))
		goto out;
	if (name && name != Py_None) {
		opts.name =
			PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
		if (!opts.name) {
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_TypeError,
					     "Swapper: name must be a str, not "
					     "%.100s",
					     Py_TYPE(name)->tp_name);
			goto out;
		}
		if (!*opts.name) {
			PyErr_SetString(PyExc_ValueError,
					"Swapper: name must not be empty "
					"(None: <nvme_path>/nvswap/rank<R>/; "
					"a name: <nvme_path>/nvswap/<name>/"
					"rank<R>/)");
			goto out;
		}
	}
	if (size_arg(bsize, "buffer_size", &opts.buffer_size) ||
	    opt_uint(bcount, "buffer_count", UINT32_MAX, &count) ||
	    ext_arg_bytes(ssize, "stripe_size", &opts.stripe_size) ||
	    opt_bool(pin, &opts.pin_memory) ||
	    opt_bool(autoev, &opts.auto_evict) ||
	    opt_bool(csum, &opts.checksum) ||
	    opt_bool(pcache, &opts.page_cache) ||
	    opt_bool(kblocks, &opts.keep_blocks) ||
	    opt_uint(wait, "wait_ms", UINT32_MAX, &wms) ||
	    ext_parse_backend(backend, &opts.aio.backend) ||
	    persist_arg(persist, &opts.persist) ||
	    keep_arg(keep, &opts.keep_generations) ||
	    opt_uint(gen, "generation", UINT64_MAX, &opts.generation))
		goto out;
	opts.buffer_count = (unsigned)count;
	opts.wait_ms = (uint32_t)wms;
	EXT_NOGIL(rc, msg, nvs_swapper_create(&opts, &s));
	if (rc < 0) {
		ext_raise(rc, msg);
		rc = -1;
		goto out;
	}
	self->s = s;
	rc = 0;
out:
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++)
		Py_XDECREF(bpaths[i]);
	return rc;
}
