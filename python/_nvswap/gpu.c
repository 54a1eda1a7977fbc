/* SPDX-License-Identifier: MIT */
/*
 * GPUs from Python: nvswap.gds_handle, DeepNVMe's gds_handle (an
 * aio_handle whose C handle has use_gds, plus cuFile registration of CUDA
 * tensors), and nvswap.gpu_info(). Device memory is only ever handed to
 * the C library by address: nothing here reads or writes it.
 */
#include "args.h"
#include "ext.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/*
 * data_ptr -> tensor, for every tensor pinned through a gds_handle.
 * cuFile's registrations belong to the process (as DeepSpeed's registry
 * does), not to a handle; the strong reference keeps the memory from
 * being freed and handed to another tensor while it is registered.
 * Changed with the GIL held.
 */
static PyObject *pinned;

static int gds_init(PyObject *o, PyObject *args, PyObject *kwds)
{
	return ext_handle_tp_init(o, args, kwds, true);
}

/*
 * The device memory of the CUDA tensor @t in @b: 1; 0 for an empty one
 * (nothing to register, @b released); -1 with TypeError for anything
 * else, or the error of ext_buf_get_io().
 */
static int device_tensor(const char *fname, PyObject *t, struct ext_buf *b)
{
	if (!ext_is_tensor(t)) {
		PyErr_Format(PyExc_TypeError,
			     "%s: expected a CUDA torch.Tensor, not %.100s",
			     fname, Py_TYPE(t)->tp_name);
		return -1;
	}
	if (ext_buf_get_io(t, false, b))
		return -1;
	if (b->nbytes == 0) {
		ext_buf_release(b);
		return 0;
	}
	if (b->device < 0) {
		ext_buf_release(b);
		PyErr_Format(PyExc_TypeError,
			     "%s: the tensor is in host memory; cuFile "
			     "registers CUDA device memory",
			     fname);
		return -1;
	}
	return 1;
}

static PyObject *pin(PyObject *t, const char *fname)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct ext_buf b;
	PyObject *key;
	int rc;

	rc = device_tensor(fname, t, &b);
	if (rc <= 0)
		return rc < 0 ? NULL : Py_NewRef(Py_True);
	EXT_NOGIL(rc, msg, nvs_gds_register(b.ptr, b.nbytes));
	if (rc < 0) {
		ext_buf_release(&b);
		return ext_raise(rc, msg);
	}
	key = PyLong_FromVoidPtr(b.ptr);
	if (!key || PyDict_SetItem(pinned, key, t)) {
		nvs_gds_deregister(b.ptr);
		Py_XDECREF(key);
		ext_buf_release(&b);
		return NULL;
	}
	Py_DECREF(key);
	ext_buf_release(&b);
	Py_RETURN_TRUE;
}

static PyObject *unpin(PyObject *t, const char *fname)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct ext_buf b;
	PyObject *key;
	int rc;

	rc = device_tensor(fname, t, &b);
	if (rc <= 0)
		return rc < 0 ? NULL : Py_NewRef(Py_True);
	EXT_NOGIL(rc, msg, nvs_gds_deregister(b.ptr));
	key = PyLong_FromVoidPtr(b.ptr);
	ext_buf_release(&b);
	if (!key)
		return NULL;
	/* Dropped even when cuFile refused: it is no longer ours to keep. */
	if (PyDict_DelItem(pinned, key) &&
	    PyErr_ExceptionMatches(PyExc_KeyError))
		PyErr_Clear();
	Py_DECREF(key);
	if (rc < 0)
		return ext_raise(rc, msg);
	return PyErr_Occurred() ? NULL : Py_NewRef(Py_True);
}

static const char *const tensor_names[] = {"tensor|buffer", NULL};

static PyObject *gds_pin_device_tensor(PyObject *o, PyObject *const *args,
				       Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[1];

	if (ext_bind("pin_device_tensor", args, nargs, kw, tensor_names, 1, 1,
		     a) ||
	    ext_handle_enter((struct ext_handle *)o))
		return NULL;
	ext_handle_leave((struct ext_handle *)o);
	return pin(a[0], "pin_device_tensor");
}

static PyObject *gds_unpin_device_tensor(PyObject *o, PyObject *const *args,
					 Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[1];

	(void)o;
	if (ext_bind("unpin_device_tensor", args, nargs, kw, tensor_names, 1, 1,
		     a))
		return NULL;
	return unpin(a[0], "unpin_device_tensor");
}

static PyObject *gds_free_pinned_device_tensor(PyObject *o,
					       PyObject *const *args,
					       Py_ssize_t nargs, PyObject *kw)
{
	PyObject *a[1];

	(void)o;
	if (ext_bind("free_pinned_device_tensor", args, nargs, kw, tensor_names,
		     1, 1, a))
		return NULL;
	return unpin(a[0], "free_pinned_device_tensor");
}

/* torch.empty(@num_elem, dtype=@example.dtype, device=...): @example's
 * CUDA device, or the current one for a tensor elsewhere (DeepSpeed
 * allocates on the current device). */
static PyObject *empty_like_on_device(PyObject *num_elem, PyObject *example)
{
	PyObject *torch, *dtype = NULL, *device = NULL, *is_cuda, *kw = NULL,
			 *r = NULL;
	int cuda;

	torch = ext_torch();
	if (!torch)
		return PyErr_Occurred() ? NULL
					: PyErr_Format(PyExc_RuntimeError,
						       "nvswap: torch is not "
						       "imported");
	is_cuda = PyObject_GetAttrString(example, "is_cuda");
	if (!is_cuda)
		return NULL;
	cuda = PyObject_IsTrue(is_cuda);
	Py_DECREF(is_cuda);
	if (cuda < 0)
		return NULL;
	dtype = PyObject_GetAttrString(example, "dtype");
	device = cuda ? PyObject_GetAttrString(example, "device")
		      : PyUnicode_FromString("cuda");
	kw = Py_BuildValue("{sOsO}", "dtype", dtype, "device", device);
	if (dtype && device && kw) {
		PyObject *empty = PyObject_GetAttrString(torch, "empty"), *args;

		args = Py_BuildValue("(O)", num_elem);
		if (empty && args)
			r = PyObject_Call(empty, args, kw);
		Py_XDECREF(empty);
		Py_XDECREF(args);
	}
	Py_XDECREF(dtype);
	Py_XDECREF(device);
	Py_XDECREF(kw);
	return r;
}

static PyObject *gds_new_pinned_device_tensor(PyObject *o,
					      PyObject *const *args,
					      Py_ssize_t nargs, PyObject *kw)
{
	/* DeepSpeed spells the keyword "example_tenosr"; take both. */
	static const char *const names[] = {
		"num_elem", "example_tenosr|example_tensor", NULL};
	PyObject *a[2], *t, *r;

	if (ext_bind("new_pinned_device_tensor", args, nargs, kw, names, 2, 2,
		     a) ||
	    ext_handle_enter((struct ext_handle *)o))
		return NULL;
	ext_handle_leave((struct ext_handle *)o);
	if (!ext_is_tensor(a[1]))
		return PyErr_Format(PyExc_TypeError,
				    "new_pinned_device_tensor: example_tenosr "
				    "must be a torch.Tensor (its dtype is "
				    "used), not %.100s",
				    Py_TYPE(a[1])->tp_name);
	t = empty_like_on_device(a[0], a[1]);
	if (!t)
		return NULL;
	r = pin(t, "new_pinned_device_tensor");
	if (!r) {
		Py_DECREF(t);
		return NULL;
	}
	Py_DECREF(r);
	return t;
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define M(name, doc)                                                           \
	{                                                                      \
#name, (PyCFunction)(void (*)(void))gds_##name, FAST, doc      \
	}

static PyMethodDef gds_methods[] = {
	M(pin_device_tensor,
	  "pin_device_tensor(tensor) -> bool\n\n"
	  "Register the CUDA tensor's memory with cuFile\n"
	  "(nvs_gds_register): later reads and writes on it skip cuFile's\n"
	  "own bounce buffers. The registration belongs to the process and\n"
	  "holds a reference to the tensor until unpin_device_tensor().\n"
	  "Returns True (also for an empty tensor, which needs none).\n"
	  "Raises TypeError for a tensor not on a CUDA device, nvswap.Error\n"
	  "(EINVAL: overlaps a registered range; ENODEV: no cuFile; EIO)."),
	M(unpin_device_tensor,
	  "unpin_device_tensor(tensor) -> bool\n\n"
	  "Undo pin_device_tensor(tensor); no I/O on it may be in flight.\n"
	  "Returns True; nvswap.Error ENOENT when it was not pinned."),
	M(new_pinned_device_tensor,
	  "new_pinned_device_tensor(num_elem, example_tenosr) -> Tensor\n\n"
	  "torch.empty(num_elem) of example_tenosr's dtype on its CUDA\n"
	  "device (the current device when it is not a CUDA tensor),\n"
	  "pinned as by pin_device_tensor(). (The keyword is spelled as\n"
	  "DeepSpeed spells it; example_tensor is accepted too.)"),
	M(free_pinned_device_tensor,
	  "free_pinned_device_tensor(tensor) -> bool\n\n"
	  "unpin_device_tensor(tensor): the tensor's memory is torch's\n"
	  "again, freed when the last reference to it goes."),
	{NULL, NULL, 0, NULL},
};
#undef M
#undef FAST

static PyTypeObject ext_GdsHandleType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.gds_handle",
	.tp_basicsize = sizeof(struct ext_handle),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc =
		"gds_handle(block_size=1048576, queue_depth=128,\n"
		"           single_submit=False, overlap_events=False,\n"
		"           intra_op_parallelism=1, *, backend='auto',\n"
		"           direct=None, max_ops=0)\n\n"
		"DeepNVMe's gds_handle: an aio_handle whose reads and writes\n"
		"of CUDA tensors go through cuFile (GPUDirect Storage, or its\n"
		"POSIX compatibility mode where the nvidia-fs driver is\n"
		"absent) instead of nvswap's pinned bounce memory; CPU\n"
		"buffers are read and written as by aio_handle. Adds\n"
		"pin_device_tensor, unpin_device_tensor,\n"
		"new_pinned_device_tensor and free_pinned_device_tensor.\n"
		"Creating one raises nvswap.Error (ENODEV, with the reason:\n"
		"no CUDA driver, no device, no cuFile) where cuFile cannot be\n"
		"used; nvswap.gpu_info() says what is there.",
	.tp_methods = gds_methods,
	.tp_init = gds_init,
};

#define PUT_INT(d, k, v) ext_dict_put(&(d), k, PyLong_FromLong(v))
#define PUT_STR(d, k, v)                                                       \
	ext_dict_put(                                                          \
		&(d), k,                                                       \
		PyUnicode_DecodeUTF8((v), strnlen((v), sizeof(v)), "replace"))

static PyObject *mod_gpu_info(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	struct nvs_gpu_info gi;
	PyObject *d;
	int rc;

	memset(&gi, 0, sizeof(gi));
	Py_BEGIN_ALLOW_THREADS
	rc = nvs_gpu_info(&gi);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return ext_raise_last(rc);
	d = PyDict_New();
	if (!d || PUT_INT(d, "device_count", gi.device_count) ||
	    PUT_INT(d, "driver_version", gi.driver_version) ||
	    PUT_STR(d, "driver_lib", gi.driver_lib) ||
	    PUT_STR(d, "device0", gi.device0) ||
	    ext_dict_put(&d, "device0_bytes",
			 PyLong_FromUnsignedLongLong(gi.device0_bytes)) ||
	    PUT_INT(d, "device0_pcie_gen", gi.device0_pcie_gen) ||
	    PUT_INT(d, "device0_pcie_width", gi.device0_pcie_width) ||
	    ext_dict_put(&d, "cufile", PyBool_FromLong(gi.cufile)) ||
	    ext_dict_put(&d, "nvfs", PyBool_FromLong(gi.nvfs)) ||
	    PUT_STR(d, "cufile_lib", gi.cufile_lib) ||
	    PUT_STR(d, "cufile_mode", gi.cufile_mode) ||
	    PUT_STR(d, "status", gi.status) ||
	    PUT_STR(d, "cufile_status", gi.cufile_status))
		return NULL;
	return d;
}
#undef PUT_INT
#undef PUT_STR

static PyMethodDef gpu_functions[] = {
	{"gpu_info", mod_gpu_info, METH_NOARGS,
	 "gpu_info() -> dict\n\n"
	 "The GPU environment as nvswap finds it (nvs_gpu_info): \n"
	 "device_count (0 without a driver or device), driver_version,\n"
	 "driver_lib, device0, device0_bytes, device0_pcie_gen,\n"
	 "device0_pcie_width, cufile, nvfs, cufile_lib, cufile_mode,\n"
	 "status (one sentence: what works, or why not) and\n"
	 "cufile_status. Loads the CUDA driver and cuFile to answer;\n"
	 "never raises for their absence."},
	{NULL, NULL, 0, NULL},
};

int ext_gpu_init(PyObject *module)
{
	ext_GdsHandleType.tp_base = &ext_HandleType;
	if (PyType_Ready(&ext_GdsHandleType) < 0)
		return -1;
	pinned = PyDict_New();
	if (!pinned)
		return -1;
	if (PyModule_AddObjectRef(module, "gds_handle",
				  (PyObject *)&ext_GdsHandleType))
		return -1;
	return PyModule_AddFunctions(module, gpu_functions);
}
