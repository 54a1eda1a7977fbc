/* SPDX-License-Identifier: MIT */
/* Counters as Python dicts: an aio handle's, a swapper's, a tensor's state. */
#include "args.h"
#include "ext.h"

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
	if (ext_dict_put(&d, "bytes_read", U64(st->bytes_read)) ||
	    ext_dict_put(&d, "bytes_written", U64(st->bytes_written)) ||
	    ext_dict_put(&d, "reads", U64(st->reads)) ||
	    ext_dict_put(&d, "writes", U64(st->writes)) ||
	    ext_dict_put(&d, "io_ops", U64(st->io_ops)) ||
	    ext_dict_put(&d, "io_errors", U64(st->io_errors)) ||
	    ext_dict_put(&d, "checksum_errors", U64(st->checksum_errors)) ||
	    ext_dict_put(&d, "prefetches", U64(st->prefetches)) ||
	    ext_dict_put(&d, "acquires", U64(st->acquires)) ||
	    ext_dict_put(&d, "acquire_hits", U64(st->acquire_hits)) ||
	    ext_dict_put(&d, "acquire_wait_ns", U64(st->acquire_wait_ns)) ||
	    ext_dict_put(&d, "io_busy_ns", U64(st->io_busy_ns)) ||
	    ext_dict_put(&d, "queue_depth", U64(st->queue_depth)) ||
	    ext_dict_put(&d, "clean_evictions", U64(st->clean_evictions)) ||
	    ext_dict_put(&d, "auto_evictions", U64(st->auto_evictions)) ||
	    ext_dict_put(&d, "zero_fills", U64(st->zero_fills)) ||
	    ext_dict_put(&d, "revived", U64(st->revived)) ||
	    ext_dict_put(&d, "write_hits", U64(st->write_hits)) ||
	    ext_dict_put(&d, "buffer_waits", U64(st->buffer_waits)) ||
	    ext_dict_put(&d, "buffer_wait_ns", U64(st->buffer_wait_ns)) ||
	    ext_dict_put(&d, "buffer_count", U64(st->buffer_count)) ||
	    ext_dict_put(&d, "buffers_in_use", U64(st->buffers_in_use)) ||
	    ext_dict_put(&d, "pool_high_water", U64(st->pool_high_water)) ||
	    ext_dict_put(&d, "tensors", U64(st->tensors)) ||
	    ext_dict_put(&d, "buffer_size", U64(st->buffer_size)) ||
	    ext_dict_put(&d, "pinned", PyBool_FromLong(st->pinned)) ||
	    ext_dict_put(&d, "checksum", PyBool_FromLong(st->checksum)) ||
	    ext_dict_put(&d, "readonly", PyBool_FromLong(st->readonly)) ||
	    ext_dict_put(&d, "disk_sharers", U64(st->disk_sharers)) ||
	    ext_dict_put(&d, "files_buffered", U64(st->files_buffered)) ||
	    ext_dict_put(&d, "file_reads", U64(st->file_reads)) ||
	    ext_dict_put(&d, "file_bytes_read", U64(st->file_bytes_read)) ||
	    ext_dict_put(&d, "backend",
			 PyUnicode_FromString(nvs_backend_name(st->backend))) ||
	    ext_dict_put(&d, "tensor_bytes", U64(st->tensor_bytes)) ||
	    ext_dict_put(&d, "npaths", U64(st->npaths)) ||
	    ext_dict_put(&d, "path_bytes_read",
			 u64_list(st->path_bytes_read, n)) ||
	    ext_dict_put(&d, "path_bytes_written",
			 u64_list(st->path_bytes_written, n)) ||
	    ext_dict_put(&d, "path_space_used",
			 u64_list(st->path_space_used, n)) ||
	    ext_dict_put(&d, "path_file_size", u64_list(st->path_file_size, n)))
		return NULL;
	return d;
}

PyObject *ext_tensor_info_dict(const struct nvs_tensor_info *ti)
{
	static const char *const states[] = {"on_nvme", "reading", "resident",
					     "writing"};
	PyObject *d;

	d = PyDict_New();
	if (ext_dict_put(&d, "state",
			 PyUnicode_FromString((unsigned)ti->state < 4
						      ? states[ti->state]
						      : "unknown")) ||
	    ext_dict_put(&d, "nbytes", U64(ti->nbytes)) ||
	    ext_dict_put(&d, "acquired", U64(ti->acquired)) ||
	    ext_dict_put(&d, "dirty", PyBool_FromLong(ti->dirty)) ||
	    ext_dict_put(&d, "on_disk", PyBool_FromLong(ti->on_disk)) ||
	    ext_dict_put(&d, "backed", PyBool_FromLong(ti->backed)) ||
	    ext_dict_put(&d, "extents", U64(ti->extents)))
		return NULL;
	return d;
}

PyObject *ext_aio_stats_dict(const struct nvs_aio_stats *st)
{
	PyObject *d = PyDict_New();

	if (ext_dict_put(&d, "ops_completed", U64(st->ops_completed)) ||
	    ext_dict_put(&d, "ops_failed", U64(st->ops_failed)) ||
	    ext_dict_put(&d, "bytes_read", U64(st->bytes_read)) ||
	    ext_dict_put(&d, "bytes_written", U64(st->bytes_written)) ||
	    ext_dict_put(&d, "requests", U64(st->requests)) ||
	    ext_dict_put(&d, "bounced_requests", U64(st->bounced_requests)) ||
	    ext_dict_put(&d, "edge_bytes", U64(st->edge_bytes)) ||
	    ext_dict_put(&d, "retries", U64(st->retries)) ||
	    ext_dict_put(&d, "direct_fallbacks", U64(st->direct_fallbacks)) ||
	    ext_dict_put(&d, "bounce_bytes_total",
			 U64(st->bounce_bytes_total)) ||
	    ext_dict_put(&d, "bounce_locked",
			 PyBool_FromLong(st->bounce_locked)) ||
	    ext_dict_put(&d, "files_opened", U64(st->files_opened)) ||
	    ext_dict_put(&d, "files_reused", U64(st->files_reused)) ||
	    ext_dict_put(&d, "inline_ops", U64(st->inline_ops)) ||
	    ext_dict_put(&d, "backend",
			 PyUnicode_FromString(nvs_backend_name(st->backend))) ||
	    ext_dict_put(&d, "backend_reason",
			 PyUnicode_FromString(nvs_backend_reason_name(
				 st->backend_reason))) ||
	    ext_dict_put(&d, "backend_notes",
			 PyUnicode_FromString(st->backend_notes)) ||
	    ext_dict_put(&d, "fixed_buffer_requests",
			 U64(st->fixed_buffer_requests)) ||
	    ext_dict_put(&d, "fixed_file_requests",
			 U64(st->fixed_file_requests)) ||
	    ext_dict_put(&d, "registered_bytes", U64(st->registered_bytes)) ||
	    ext_dict_put(&d, "register_error",
			 PyLong_FromLong(st->register_error)) ||
	    ext_dict_put(&d, "device_bytes", U64(st->device_bytes)) ||
	    ext_dict_put(&d, "gds_bytes", U64(st->gds_bytes)) ||
	    ext_dict_put(&d, "busy_ns", U64(st->busy_ns)))
		return NULL;
	return d;
}

#undef U64
