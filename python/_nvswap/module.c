/* SPDX-License-Identifier: MIT */
/*
 * nvswap._nvswap: the module. Its types live in their own files (handle.c,
 * op.c, pinned.c, config.c, swapper.c); here are the module-level
 * functions: DeepNVMe's aio_read/aio_write/deepspeed_memcpy, pinned
 * memory, version and build information.
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdio.h>

/* DeepNVMe aio_read/aio_write: a one-shot op with a temporary handle. */
static PyObject *oneshot(int opcode, const char *fname, PyObject *const *args,
			 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {
		"buffer",	 "filename",	   "block_size", "queue_depth",
		"single_submit", "overlap_events", "validate",	 NULL};
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_aio_opts opts;
	PyObject *a[7], *path = NULL;
	struct ext_buf buf;
	int64_t bs, qd;
	bool ss, oe, validate;
	int fd, rc;

	nvs_aio_opts_init(&opts);
	if (ext_bind(fname, args, nargs, kw, names, 7, 7, a) ||
	    ext_arg_i64(a[2], "block_size", 0, &bs) ||
	    ext_arg_i64(a[3], "queue_depth", 0, &qd) ||
	    ext_arg_bool(a[4], false, &ss) || ext_arg_bool(a[5], false, &oe) ||
	    ext_arg_bool(a[6], false, &validate))
		return NULL;
	if (bs <= 0 || bs > UINT32_MAX || qd <= 0 || qd > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError,
			     "%s: block_size %lld and queue_depth %lld must "
			     "be positive",
			     fname, (long long)bs, (long long)qd);
		return NULL;
	}
	opts.block_size = (uint32_t)bs;
	opts.queue_depth = (uint32_t)qd;
	opts.single_submit = ss;
	opts.overlap_events = oe;
	if (ext_arg_file(a[1], &path, &fd))
		return NULL;
	if (!path) {
		PyErr_Format(PyExc_TypeError, "%s: filename must be a path",
			     fname);
		return NULL;
	}
	if (ext_buf_get_io(a[0], opcode == NVS_AIO_READ, &buf)) {
		Py_DECREF(path);
		return NULL;
	}
	if (ext_buf_guard(&buf, opcode == NVS_AIO_READ)) {
		ext_buf_release(&buf);
		Py_DECREF(path);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	if (opcode == NVS_AIO_READ)
		rc = nvs_aio_read(buf.ptr, buf.nbytes, PyBytes_AS_STRING(path),
				  &opts, validate, NULL);
	else
		rc = nvs_aio_write(buf.ptr, buf.nbytes, PyBytes_AS_STRING(path),
				   &opts, validate, NULL);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	Py_END_ALLOW_THREADS
	if (rc >= 0) {
		char what[NVS_ERRMSG_MAX / 2];

		ext_op_describe(what, sizeof(what), opcode, buf.nbytes,
				PyBytes_AS_STRING(path), -1, 0);
		rc = ext_buf_settle(&buf, opcode == NVS_AIO_READ, true, what,
				    msg, sizeof(msg));
	}
	ext_buf_release(&buf);
	Py_DECREF(path);
	if (rc < 0)
		return ext_raise(rc, msg);
	return PyLong_FromLong(0);
}

static PyObject *mod_aio_read(PyObject *Py_UNUSED(m), PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kw)
{
	return oneshot(NVS_AIO_READ, "aio_read", args, nargs, kw);
}

static PyObject *mod_aio_write(PyObject *Py_UNUSED(m), PyObject *const *args,
			       Py_ssize_t nargs, PyObject *kw)
{
	return oneshot(NVS_AIO_WRITE, "aio_write", args, nargs, kw);
}

static PyObject *mod_deepspeed_memcpy(PyObject *Py_UNUSED(m),
				      PyObject *const *args, Py_ssize_t nargs,
				      PyObject *kw)
{
	static const char *const names[] = {"dest", "src", NULL};
	char msg[NVS_ERRMSG_MAX] = "";
	struct ext_buf d, s;
	PyObject *a[2];
	int rc = 0;

	if (ext_bind("deepspeed_memcpy", args, nargs, kw, names, 2, 2, a) ||
	    ext_buf_get_io(a[0], true, &d))
		return NULL;
	if (ext_buf_get_io(a[1], false, &s)) {
		ext_buf_release(&d);
		return NULL;
	}
	if (d.nbytes != s.nbytes) {
		PyErr_Format(PyExc_ValueError,
			     "deepspeed_memcpy: dest has %zu bytes, src %zu",
			     d.nbytes, s.nbytes);
	} else if (d.device >= 0 || s.device >= 0) {
		/* The driver copies device memory (synchronously). */
		EXT_NOGIL(rc, msg, nvs_gpu_memcpy(d.ptr, s.ptr, d.nbytes));
	} else {
		Py_BEGIN_ALLOW_THREADS
		nvs_copy(d.ptr, s.ptr, d.nbytes);
		Py_END_ALLOW_THREADS
	}
	ext_buf_release(&d);
	ext_buf_release(&s);
	if (rc < 0)
		return ext_raise(rc, msg);
	return PyErr_Occurred() ? NULL : PyLong_FromLong(0);
}

static PyObject *mod_pinned_buffer(PyObject *Py_UNUSED(m), PyObject *arg)
{
	Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);

	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (n <= 0) {
		PyErr_Format(PyExc_ValueError,
			     "pinned_buffer: nbytes must be positive, not %zd",
			     n);
		return NULL;
	}
	return ext_pinned_new((size_t)n);
}

static PyObject *mod_tensor_from(PyObject *Py_UNUSED(m), PyObject *args)
{
	PyObject *exporter, *dtype, *shape = Py_None;

	if (!PyArg_ParseTuple(args, "OO|O:_tensor_from", &exporter, &dtype,
			      &shape))
		return NULL;
	return ext_tensor_from(exporter, dtype, shape);
}

static PyObject *mod_launch(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	struct nvs_launch l;
	int rc = nvs_launch_detect(&l);

	if (rc < 0)
		return ext_raise_last(rc);
	return Py_BuildValue("{s:i, s:i, s:i, s:i, s:s}", "rank", l.rank,
			     "world_size", l.world_size, "local_rank",
			     l.local_rank, "local_size", l.local_size, "source",
			     l.source);
}

static PyObject *mod_is_pinned(PyObject *Py_UNUSED(m), PyObject *buffer)
{
	return ext_is_pinned(buffer);
}

static PyObject *mod_free_locked_tensor(PyObject *Py_UNUSED(m), PyObject *t)
{
	return ext_locked_tensor_free(t);
}

static PyObject *mod_pinned_stats(PyObject *Py_UNUSED(m),
				  PyObject *Py_UNUSED(a))
{
	struct nvs_pinned_stats st;
	int rc = nvs_pinned_stats(&st);

	if (rc < 0)
		return ext_raise_last(rc);
	return Py_BuildValue(
		"{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
		"bytes_in_use", st.bytes_in_use, "high_water", st.high_water,
		"live_allocations", st.live_allocations, "bytes_locked",
		st.bytes_locked, "limit", st.limit, "memlock_limit",
		st.memlock_limit, "unpinned_bytes", st.unpinned_bytes,
		"unpinned_allocations", st.unpinned_allocations, "allocs",
		st.allocs, "frees", st.frees, "failed_allocs", st.failed_allocs,
		"bad_frees", st.bad_frees);
}

static PyObject *mod_parse_size(PyObject *Py_UNUSED(m), PyObject *v)
{
	uint64_t n = 0;

	if (v == Py_None) {
		PyErr_SetString(
			PyExc_TypeError,
			"parse_size: a size is an int or a str, not None");
		return NULL;
	}
	if (ext_arg_bytes(v, "size", &n))
		return NULL;
	return PyLong_FromUnsignedLongLong(n);
}

static PyObject *mod_version(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	return PyUnicode_FromString(nvs_version());
}

static PyObject *mod_build_features(PyObject *Py_UNUSED(m),
				    PyObject *Py_UNUSED(a))
{
	return PyUnicode_FromString(nvs_build_features());
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef mod_methods[] = {
	{"aio_read", (PyCFunction)(void (*)(void))mod_aio_read, FAST,
	 "aio_read(buffer, filename, block_size, queue_depth, single_submit,\n"
	 "         overlap_events, validate) -> int\n\n"
	 "DeepNVMe's one-shot read: len(buffer) bytes from the start of\n"
	 "filename, with a temporary handle. Returns 0; raises\n"
	 "nvswap.Error on failure (DeepNVMe returns -1), EBADMSG when\n"
	 "validate finds a difference. Prints nothing. buffer may be a\n"
	 "CUDA tensor, as for aio_handle."},
	{"aio_write", (PyCFunction)(void (*)(void))mod_aio_write, FAST,
	 "aio_write(buffer, filename, block_size, queue_depth, single_submit,\n"
	 "          overlap_events, validate) -> int\n\n"
	 "DeepNVMe's one-shot write of buffer to the start of filename."},
	{"deepspeed_memcpy", (PyCFunction)(void (*)(void))mod_deepspeed_memcpy,
	 FAST,
	 "deepspeed_memcpy(dest, src) -> int\n\n"
	 "Copy src into dest (contiguous, the same size in bytes) with\n"
	 "nvswap's copy (the GIL released); return 0. Either may be a\n"
	 "CUDA tensor: the CUDA driver copies then (cuMemcpy)."},
	{"pinned_buffer", mod_pinned_buffer, METH_O,
	 "pinned_buffer(nbytes) -> PinnedBuffer\n\n"
	 "nbytes of page-locked memory from nvswap's pinned pool."},
	{"_tensor_from", mod_tensor_from, METH_VARARGS,
	 "_tensor_from(exporter, dtype, shape=None) -> torch.Tensor\n\n"
	 "torch.frombuffer() of exporter, viewed as shape."},
	{"is_pinned", mod_is_pinned, METH_O,
	 "is_pinned(buffer) -> bool\n\n"
	 "Whether buffer lies in nvswap's pinned memory (or torch pinned\n"
	 "it): I/O on it never bounces. aio_handle.is_pinned without a\n"
	 "handle."},
	{"free_locked_tensor", mod_free_locked_tensor, METH_O,
	 "free_locked_tensor(tensor) -> bool\n\n"
	 "aio_handle.free_cpu_locked_tensor without a handle: the tensor\n"
	 "becomes empty and its pinned memory returns to the pool once no\n"
	 "view of it remains; False for a tensor not in pinned memory."},
	{"pinned_stats", mod_pinned_stats, METH_NOARGS,
	 "pinned_stats() -> dict\n\n"
	 "The pinned registry's counters (nvs_pinned_stats)."},
	{"launch", mod_launch, METH_NOARGS,
	 "launch() -> dict\n\n"
	 "Where this process sits in a job, from its launcher's environment\n"
	 "(nvs_launch_detect: Open MPI, then torch.distributed, MPICH/PMI,\n"
	 "Slurm): rank, world_size, local_rank, local_size and source (who\n"
	 "said so, 'none' outside a job). nvswap.Error (EINVAL) names a\n"
	 "variable that is not a valid number."},
	{"parse_size", mod_parse_size, METH_O,
	 "parse_size(size) -> int\n\n"
	 "Bytes of a size as every nvswap size keyword reads it\n"
	 "(nvs_parse_size()): an int is bytes; a str is digits with an\n"
	 "optional unit, K, M, G, T and KiB..TiB binary, KB..TB decimal as\n"
	 "transformers reads them; a lowercase b after the unit is refused\n"
	 "as ambiguous. ValueError stating that rule, TypeError for\n"
	 "another type."},
	{"version", mod_version, METH_NOARGS,
	 "version() -> str\n\nThe C library's version."},
	{"build_features", mod_build_features, METH_NOARGS,
	 "build_features() -> str\n\n"
	 "How the C library was built (liburing, jemalloc, sanitizers)."},
	{NULL, NULL, 0, NULL},
};
#undef FAST

static struct PyModuleDef mod_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "nvswap._nvswap",
	.m_doc = "The C extension behind nvswap; import nvswap instead.",
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__nvswap(void);

PyMODINIT_FUNC PyInit__nvswap(void)
{
	PyObject *m = PyModule_Create(&mod_def);

	if (!m)
		return NULL;
	if (ext_errors_init(m) || ext_pinned_init(m) || ext_op_init(m) ||
	    ext_handle_init(m) || ext_config_init(m) || ext_swapper_init(m) ||
	    ext_offload_init(m) || ext_ckpt_init(m) || ext_gpu_init(m)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
