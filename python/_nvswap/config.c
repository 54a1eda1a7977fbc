/* SPDX-License-Identifier: MIT */
/*
 * nvswap.Config: a loaded DeepSpeed-style JSON config (nvs_config_load,
 * nvs_config_load_string), its sections as dicts, and the aio handle and
 * swapper options it describes.
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CONFIG(o) ((struct ext_config *)(o))

int ext_offload_kind(PyObject *v, enum nvs_offload_kind *out)
{
	const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;

	if (s && !strcmp(s, "param")) {
		*out = NVS_OFFLOAD_PARAM;
		return 0;
	}
	if (s && !strcmp(s, "optimizer")) {
		*out = NVS_OFFLOAD_OPTIMIZER;
		return 0;
	}
	if (!PyErr_Occurred())
		PyErr_Format(PyExc_ValueError,
			     "nvswap: kind must be 'param' or 'optimizer', "
			     "not %R",
			     v);
	return -1;
}

/* A Config around @cfg (freed on failure). */
static PyObject *wrap(PyTypeObject *type, struct nvs_config *cfg,
		      PyObject *source)
{
	struct ext_config *self = (struct ext_config *)type->tp_alloc(type, 0);

	if (!self) {
		nvs_config_free(cfg);
		return NULL;
	}
	self->cfg = cfg;
	self->source = Py_NewRef(source ? source : Py_None);
	return (PyObject *)self;
}

static void config_dealloc(PyObject *o)
{
	nvs_config_free(CONFIG(o)->cfg);
	Py_CLEAR(CONFIG(o)->source);
	Py_TYPE(o)->tp_free(o);
}

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyz0123456789_"

/* A config error in the user's words: without the library function's
 * name it starts with ("nvs_config_load: "), which names where in the
 * library, not what was given. */
static const char *user_words(const char *e)
{
	size_t n = strncmp(e, "nvs_", 4) ? 0 : 4 + strspn(e + 4, NAME_CHARS);

	return n && !strncmp(e + n, ": ", 2) ? e + n + 2 : e;
}

static PyObject *config_load(PyObject *cls, PyObject *arg)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_config *cfg = NULL;
	PyObject *path = NULL, *source, *r;
	PyThreadState *ts;
	int rc;

	if (!PyUnicode_FSConverter(arg, &path))
		return NULL;
	ts = PyEval_SaveThread();
	rc = nvs_config_load(PyBytes_AS_STRING(path), &cfg);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", user_words(nvs_last_error()));
	PyEval_RestoreThread(ts);
	if (rc < 0) {
		Py_DECREF(path);
		return ext_raise_config(rc, msg);
	}
	source = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(path),
						  PyBytes_GET_SIZE(path));
	Py_DECREF(path);
	if (!source) {
		nvs_config_free(cfg);
		return NULL;
	}
	r = wrap((PyTypeObject *)cls, cfg, source);
	Py_DECREF(source);
	return r;
}

static PyObject *config_from_str(PyObject *cls, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"text", "name", NULL};
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_config *cfg = NULL;
	const char *text, *name = NULL;
	PyObject *a[2];
	Py_ssize_t len;
	PyThreadState *ts;
	int rc;

	if (ext_bind("from_str", args, nargs, kw, names, 2, 1, a))
		return NULL;
	if (!PyUnicode_Check(a[0])) {
		PyErr_Format(PyExc_TypeError,
			     "from_str: text must be a str, not %.100s",
			     Py_TYPE(a[0])->tp_name);
		return NULL;
	}
	text = PyUnicode_AsUTF8AndSize(a[0], &len);
	if (!text)
		return NULL;
	if (strlen(text) != (size_t)len) {
		PyErr_SetString(PyExc_ValueError,
				"from_str: text contains a NUL character");
		return NULL;
	}
	if (a[1] && a[1] != Py_None) {
		if (!PyUnicode_Check(a[1])) {
			PyErr_Format(PyExc_TypeError,
				     "from_str: name must be a str, not "
				     "%.100s",
				     Py_TYPE(a[1])->tp_name);
			return NULL;
		}
		name = PyUnicode_AsUTF8(a[1]);
		if (!name)
			return NULL;
	}
	/* The config may stat nvme_paths: the GIL goes. */
	ts = PyEval_SaveThread();
	rc = nvs_config_load_string(text, name, &cfg);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", user_words(nvs_last_error()));
	PyEval_RestoreThread(ts);
	if (rc < 0)
		return ext_raise_config(rc, msg);
	return wrap((PyTypeObject *)cls, cfg, a[1]);
}

static PyObject *str_or_none(const char *s)
{
	return s ? PyUnicode_DecodeFSDefault(s) : Py_NewRef(Py_None);
}

static PyObject *config_offload(PyObject *o, PyObject *arg)
{
	static const char *const devices[] = {"none", "cpu", "nvme"};
	struct nvs_offload_config oc;
	enum nvs_offload_kind kind;
	PyObject *d;
	int rc;

	if (ext_offload_kind(arg, &kind))
		return NULL;
	rc = nvs_config_offload(CONFIG(o)->cfg, kind, &oc);
	if (rc < 0)
		return ext_raise_last(rc);
	d = PyDict_New();
	if (ext_dict_put(&d, "present", PyBool_FromLong(oc.present)) ||
	    ext_dict_put(&d, "device",
			 PyUnicode_FromString((unsigned)oc.device < 3
						      ? devices[oc.device]
						      : "unknown")) ||
	    ext_dict_put(&d, "nvme_path", str_or_none(oc.nvme_path)) ||
	    ext_dict_put(&d, "buffer_count",
			 PyLong_FromUnsignedLongLong(oc.buffer_count)) ||
	    ext_dict_put(&d, "buffer_size",
			 PyLong_FromUnsignedLongLong(oc.buffer_size)) ||
	    ext_dict_put(&d, "max_in_cpu",
			 PyLong_FromUnsignedLongLong(oc.max_in_cpu)) ||
	    ext_dict_put(&d, "pin_memory", PyBool_FromLong(oc.pin_memory)) ||
	    ext_dict_put(&d, "pipeline_read",
			 PyBool_FromLong(oc.pipeline_read)) ||
	    ext_dict_put(&d, "pipeline_write",
			 PyBool_FromLong(oc.pipeline_write)))
		return NULL;
	return d;
}

static PyObject *config_aio_options(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct nvs_aio_opts ao;
	PyObject *d;
	int rc;

	nvs_aio_opts_init(&ao);
	rc = nvs_config_aio_opts(CONFIG(o)->cfg, &ao);
	if (rc < 0)
		return ext_raise_last(rc);
	d = PyDict_New();
	if (ext_dict_put(&d, "block_size",
			 PyLong_FromUnsignedLong(ao.block_size)) ||
	    ext_dict_put(&d, "queue_depth",
			 PyLong_FromUnsignedLong(ao.queue_depth)) ||
	    ext_dict_put(&d, "single_submit",
			 PyBool_FromLong(ao.single_submit)) ||
	    ext_dict_put(&d, "overlap_events",
			 PyBool_FromLong(ao.overlap_events)) ||
	    ext_dict_put(&d, "intra_op_parallelism",
			 PyLong_FromUnsignedLong(ao.intra_op_parallelism)) ||
	    ext_dict_put(&d, "backend",
			 PyUnicode_FromString(nvs_backend_name(ao.backend))))
		return NULL;
	return d;
}

static PyObject *config_nvswap_options(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct nvs_nvswap_config nv;
	PyObject *d, *paths;
	int rc;

	rc = nvs_config_nvswap(CONFIG(o)->cfg, &nv);
	if (rc < 0)
		return ext_raise_last(rc);
	paths = PyList_New(0);
	for (unsigned i = 0; paths && i < nv.npaths; i++) {
		PyObject *p = str_or_none(nv.nvme_paths[i]);

		if (!p || PyList_Append(paths, p) < 0)
			Py_CLEAR(paths);
		Py_XDECREF(p);
	}
	d = PyDict_New();
	if (ext_dict_put(&d, "backend",
			 PyUnicode_FromString(nvs_backend_name(nv.backend))) ||
	    ext_dict_put(&d, "stripe_size",
			 PyLong_FromUnsignedLongLong(nv.stripe_size)) ||
	    ext_dict_put(&d, "checksum", PyBool_FromLong(nv.checksum)) ||
	    ext_dict_put(&d, "page_cache", PyBool_FromLong(nv.page_cache)) ||
	    ext_dict_put(&d, "auto_evict", PyBool_FromLong(nv.auto_evict)) ||
	    ext_dict_put(&d, "nvme_paths", paths) ||
	    ext_dict_put(&d, "wait_ms", PyLong_FromUnsignedLong(nv.wait_ms)) ||
	    ext_dict_put(&d, "lookahead",
			 PyLong_FromUnsignedLong(nv.lookahead)) ||
	    ext_dict_put(&d, "persist",
			 PyUnicode_FromString(nvs_persist_name(nv.persist))) ||
	    ext_dict_put(&d, "keep_generations",
			 PyLong_FromUnsignedLong(nv.keep_generations)) ||
	    ext_dict_put(&d, "rank",
			 nv.rank == NVS_RANK_AUTO ? Py_NewRef(Py_None)
						  : PyLong_FromLong(nv.rank)) ||
	    ext_dict_put(&d, "node_queue_depth",
			 PyLong_FromUnsignedLong(nv.node_queue_depth)) ||
	    ext_dict_put(&d, "split_queue_depth",
			 PyBool_FromLong(nv.split_queue_depth)))
		return NULL;
	return d;
}

static PyObject *config_aio_handle(PyObject *o, PyObject *Py_UNUSED(a))
{
	struct nvs_aio_opts ao;
	int rc;

	nvs_aio_opts_init(&ao);
	rc = nvs_config_aio_opts(CONFIG(o)->cfg, &ao);
	if (rc < 0)
		return ext_raise_last(rc);
	return ext_handle_from_opts(&ao);
}

static PyObject *config_get_use_gds(PyObject *o, void *Py_UNUSED(c))
{
	return PyBool_FromLong(nvs_config_use_gds(CONFIG(o)->cfg));
}

static PyObject *config_get_warnings(PyObject *o, void *Py_UNUSED(c))
{
	PyObject *l = PyList_New(0);
	const char *w;

	for (unsigned i = 0; l && (w = nvs_config_warning(CONFIG(o)->cfg, i));
	     i++) {
		PyObject *s = PyUnicode_DecodeUTF8(w, (Py_ssize_t)strlen(w),
						   "replace");

		if (!s || PyList_Append(l, s) < 0)
			Py_CLEAR(l);
		Py_XDECREF(s);
	}
	return l;
}

static PyObject *config_get_source(PyObject *o, void *Py_UNUSED(c))
{
	return Py_NewRef(CONFIG(o)->source);
}

static PyObject *config_repr(PyObject *o)
{
	return PyUnicode_FromFormat("<nvswap.Config %R>", CONFIG(o)->source);
}

static PyMethodDef config_methods[] = {
	{"load", (PyCFunction)config_load, METH_O | METH_CLASS,
	 "load(path) -> Config\n\n"
	 "Read and check a DeepSpeed-style JSON file (nvs_config_load):\n"
	 "zero_optimization.offload_param / offload_optimizer, the aio\n"
	 "section and the nvswap section. Keys elsewhere are ignored;\n"
	 "inside them an unknown key or a wrong type is an error.\n"
	 "Raises nvswap.ConfigError (errno EINVAL, with .file .line\n"
	 ".column .key) for a bad key or malformed JSON; ConfigError with\n"
	 "errno ENOENT, EACCES, ENOTDIR or EROFS (no position) when the\n"
	 "file, or the nvme_path of an \"nvme\" section, is missing, not\n"
	 "readable or not a writable directory. Reads the file and stats\n"
	 "the paths with the GIL released."},
	{"from_str", (PyCFunction)(void (*)(void))config_from_str,
	 METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
	 "from_str(text, name=None) -> Config\n\n"
	 "As load(), from the JSON text. name is what error messages (and\n"
	 "ConfigError.file) call the text; None: '<string>'."},
	{"offload", (PyCFunction)config_offload, METH_O,
	 "offload(kind) -> dict\n\n"
	 "The section zero_optimization.offload_<kind> (kind 'param' or\n"
	 "'optimizer'; ValueError otherwise), DeepSpeed's defaults where a\n"
	 "key is absent: present, device ('none', 'cpu', 'nvme'),\n"
	 "nvme_path (None when absent), buffer_count, buffer_size and\n"
	 "max_in_cpu (elements, as in DeepSpeed), pin_memory,\n"
	 "pipeline_read, pipeline_write."},
	{"aio_options", config_aio_options, METH_NOARGS,
	 "aio_options() -> dict\n\n"
	 "The aio handle settings of the aio section (and\n"
	 "nvswap.backend), DeepSpeed's defaults where absent: block_size,\n"
	 "queue_depth, single_submit, overlap_events,\n"
	 "intra_op_parallelism, backend (a name)."},
	{"nvswap_options", config_nvswap_options, METH_NOARGS,
	 "nvswap_options() -> dict\n\n"
	 "The nvswap section, defaults filled in: backend, stripe_size\n"
	 "(bytes), checksum, page_cache, auto_evict, nvme_paths (a list,\n"
	 "empty when\n"
	 "absent), wait_ms, lookahead (ParamSwapper's), persist\n"
	 "('scratch', 'persistent' or 'resume'), keep_generations, rank\n"
	 "(None: the launcher's, see nvswap.launch()), node_queue_depth\n"
	 "(0: none; else split over the node's ranks), split_queue_depth\n"
	 "(True: without node_queue_depth, the node's ranks share\n"
	 "aio.queue_depth)."},
	{"aio_handle", config_aio_handle, METH_NOARGS,
	 "aio_handle() -> aio_handle\n\n"
	 "A new nvswap.aio_handle with aio_options(). Raises nvswap.Error\n"
	 "when the handle cannot be made (nvs_aio_create's errors)."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef config_getset[] = {
	{"use_gds", config_get_use_gds, NULL,
	 "aio.use_gds (default False). The swappers hold pinned host\n"
	 "memory, which cuFile does not move: when True, warnings says so\n"
	 "and their I/O goes through pinned host memory. Device memory\n"
	 "goes through cuFile on an nvswap.gds_handle.",
	 NULL},
	{"warnings", config_get_warnings, NULL,
	 "Notes about the file, a list of str: DeepSpeed keys accepted but\n"
	 "unused, deprecated spellings, an aio section where DeepSpeed\n"
	 "ignores it, use_gds.",
	 NULL},
	{"source", config_get_source, NULL,
	 "The path given to load(), the name given to from_str(), or None.",
	 NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ext_ConfigType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.Config",
	.tp_basicsize = sizeof(struct ext_config),
	.tp_dealloc = config_dealloc,
	.tp_repr = config_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A checked DeepSpeed-style JSON config; made with\n"
		  "Config.load(path) or Config.from_str(text), read-only\n"
		  "afterwards (safe to share between threads). Pass it to\n"
		  "nvswap.Swapper(config, kind) for the swapper it describes.",
	.tp_methods = config_methods,
	.tp_getset = config_getset,
};

int ext_config_init(PyObject *module)
{
	if (PyType_Ready(&ext_ConfigType) < 0)
		return -1;
	return PyModule_AddObjectRef(module, "Config",
				     (PyObject *)&ext_ConfigType);
}
