/* SPDX-License-Identifier: MIT */
/* A swapper's counters and a tensor's state as Python dicts. */
#include "ext.h"

/* d[key] = v, stealing v; -1 (and d freed) on failure. */
static int put(PyObject **d, const char *key, PyObject *v)
{
	if (*d && v && !PyDict_SetItemString(*d, key, v)) {
		Py_DECREF(v);
		return 0;
	}
	Py_XDECREF(v);
	Py_CLEAR(*d);
	return -1;
}

static PyObject *u64_list(const uint64_t *v, unsigned n)
{
	PyObject *l = PyList_New(n);

	for (unsigned i = 0; l && i < n; i++) {
		PyObject *x = PyLong_FromUnsignedLongLong(v[i]);

		if (!x) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, i, x);
	}
	return l;
}

#define U64(x) PyLong_FromUnsignedLongLong(x)

PyObject *ext_swap_stats_dict(const struct nvs_swap_stats *st)
{
	unsigned n;
	PyObject *d;

	n = st->npaths < NVS_SWAPPER_MAX_PATHS ? st->npaths
					       : NVS_SWAPPER_MAX_PATHS;
	d = PyDict_New();
	if (put(&d, "bytes_read", U64(st->bytes_read)) ||
	    put(&d, "bytes_written", U64(st->bytes_written)) ||
	    put(&d, "reads", U64(st->reads)) ||
	    put(&d, "writes", U64(st->writes)) ||
	    put(&d, "io_ops", U64(st->io_ops)) ||
	    put(&d, "io_errors", U64(st->io_errors)) ||
	    put(&d, "checksum_errors", U64(st->checksum_errors)) ||
	    put(&d, "prefetches", U64(st->prefetches)) ||
	    put(&d, "acquires", U64(st->acquires)) ||
	    put(&d, "acquire_hits", U64(st->acquire_hits)) ||
	    put(&d, "acquire_wait_ns", U64(st->acquire_wait_ns)) ||
	    put(&d, "clean_evictions", U64(st->clean_evictions)) ||
	    put(&d, "auto_evictions", U64(st->auto_evictions)) ||
	    put(&d, "zero_fills", U64(st->zero_fills)) ||
	    put(&d, "revived", U64(st->revived)) ||
	    put(&d, "buffer_waits", U64(st->buffer_waits)) ||
	    put(&d, "buffer_wait_ns", U64(st->buffer_wait_ns)) ||
	    put(&d, "buffer_count", U64(st->buffer_count)) ||
	    put(&d, "buffers_in_use", U64(st->buffers_in_use)) ||
	    put(&d, "pool_high_water", U64(st->pool_high_water)) ||
	    put(&d, "tensors", U64(st->tensors)) ||
	    put(&d, "buffer_size", U64(st->buffer_size)) ||
	    put(&d, "pinned", PyBool_FromLong(st->pinned)) ||
	    put(&d, "backend",
		PyUnicode_FromString(nvs_backend_name(st->backend))) ||
	    put(&d, "tensor_bytes", U64(st->tensor_bytes)) ||
	    put(&d, "npaths", U64(st->npaths)) ||
	    put(&d, "path_bytes_read", u64_list(st->path_bytes_read, n)) ||
	    put(&d, "path_bytes_written",
		u64_list(st->path_bytes_written, n)) ||
	    put(&d, "path_space_used", u64_list(st->path_space_used, n)) ||
	    put(&d, "path_file_size", u64_list(st->path_file_size, n)))
		return NULL;
	return d;
}

PyObject *ext_tensor_info_dict(const struct nvs_tensor_info *ti)
{
	static const char *const states[] = {"on_nvme", "reading", "resident",
					     "writing"};
	PyObject *d;

	d = PyDict_New();
	if (put(&d, "state",
		PyUnicode_FromString((unsigned)ti->state < 4 ? states[ti->state]
							     : "unknown")) ||
	    put(&d, "nbytes", U64(ti->nbytes)) ||
	    put(&d, "acquired", U64(ti->acquired)) ||
	    put(&d, "dirty", PyBool_FromLong(ti->dirty)) ||
	    put(&d, "on_disk", PyBool_FromLong(ti->on_disk)) ||
	    put(&d, "extents", U64(ti->extents)))
		return NULL;
	return d;
}
#undef U64
