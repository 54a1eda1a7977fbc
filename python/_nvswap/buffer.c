/* SPDX-License-Identifier: MIT */
/*
 * Turning a Python object into memory an op can use: a CPU torch tensor
 * (through its Python attributes: no torch headers, any torch >= 1.13),
 * any object with the buffer protocol, and for the calls whose C side
 * takes device memory a CUDA torch tensor. Contiguous only. Device memory
 * is only ever handed to the C library: nothing here reads or writes it.
 */
#include "ext.h"

#include <errno.h>
#include <string.h>

/* Interned attribute names, made at first use. */
static PyObject *s_device, *s_type, *s_layout, *s_is_contiguous, *s_data_ptr,
	*s_nbytes, *s_numel, *s_element_size, *s_strided, *s_cpu, *s_torch,
	*s_is_conj, *s_is_neg, *s_is_cpu, *s_cuda, *s_current_stream,
	*s_synchronize;
/* torch.Tensor and torch.strided once torch is imported; strong refs. */
static PyObject *tensor_type, *strided;
/*
 * Whether torch.Tensor has is_cpu and nbytes (Debian's torch 1.13 lacks
 * nbytes). Looked up once: a failed attribute lookup per op would raise
 * and clear an AttributeError every time, and t.device.type makes a
 * device object and a string; together they were most of a 4 KiB
 * sync_pread's cost in the binding (bench/RESULTS.md, issue 17).
 */
static bool has_is_cpu, has_nbytes;

static int intern_names(void)
{
	if (s_device)
		return 0;
#define IN(var, text)                                                          \
	do {                                                                   \
		var = PyUnicode_InternFromString(text);                        \
		if (!var)                                                      \
			return -1;                                             \
	} while (0)
	IN(s_type, "type");
	IN(s_layout, "layout");
	IN(s_is_contiguous, "is_contiguous");
	IN(s_data_ptr, "data_ptr");
	IN(s_nbytes, "nbytes");
	IN(s_numel, "numel");
	IN(s_element_size, "element_size");
	IN(s_strided, "strided");
	IN(s_cpu, "cpu");
	IN(s_torch, "torch");
	IN(s_is_conj, "is_conj");
	IN(s_is_neg, "is_neg");
	IN(s_is_cpu, "is_cpu");
	IN(s_cuda, "cuda");
	IN(s_current_stream, "current_stream");
	IN(s_synchronize, "synchronize");
	IN(s_device, "device"); /* last: it marks the set as complete */
#undef IN
	return 0;
}

PyObject *ext_torch(void)
{
	PyObject *modules = PyImport_GetModuleDict(), *torch;

	if (intern_names())
		return NULL;
	torch = PyDict_GetItemWithError(modules, s_torch);
	/* sys.modules["torch"] = None is how an import is blocked */
	return torch == Py_None ? NULL : torch;
}

/* Cache torch.Tensor and torch.strided; 1 when torch is imported. */
static int load_torch(void)
{
	PyObject *torch;

	if (tensor_type)
		return 1;
	torch = ext_torch();
	if (!torch)
		return PyErr_Occurred() ? -1 : 0;
	tensor_type = PyObject_GetAttrString(torch, "Tensor");
	if (!tensor_type)
		return -1;
	strided = PyObject_GetAttr(torch, s_strided);
	if (!strided) {
		Py_CLEAR(tensor_type);
		return -1;
	}
	has_is_cpu = PyObject_HasAttr(tensor_type, s_is_cpu);
	has_nbytes = PyObject_HasAttr(tensor_type, s_nbytes);
	return 1;
}

bool ext_is_tensor(PyObject *obj)
{
	int rc = load_torch();

	if (rc <= 0) {
		PyErr_Clear();
		return false;
	}
	return PyObject_TypeCheck(obj, (PyTypeObject *)tensor_type);
}

static size_t as_size(PyObject *v, bool *bad)
{
	size_t n;

	if (!v) {
		*bad = true;
		return 0;
	}
	n = PyLong_AsSize_t(v);
	Py_DECREF(v);
	if (n == (size_t)-1 && PyErr_Occurred())
		*bad = true;
	return n;
}

/*
 * A lazily conjugated or negated view (x.conj() of a complex tensor, torch
 * >= 1.10) shares its memory with x and only carries a flag: its memory
 * holds x's values, not the view's. Writing it would store x, reading into
 * it would hand the caller the conjugate of the file. Refused (ValueError,
 * -1); 0 for a plain tensor or a torch without these flags.
 */
static int lazy_view(PyObject *t, PyObject *method, const char *what,
		     const char *holds, const char *fix)
{
	PyObject *v = PyObject_CallMethodNoArgs(t, method);
	int set;

	if (!v) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
		return 0;
	}
	set = PyObject_IsTrue(v);
	Py_DECREF(v);
	if (set > 0)
		PyErr_Format(PyExc_ValueError,
			     "nvswap: the tensor is a lazily %s view: its "
			     "memory holds the %s values (call .%s() first)",
			     what, holds, fix);
	return set ? -1 : 0;
}

/*
 * 0 when @t is a CPU tensor. A CUDA tensor: 1 with *@device set to its
 * torch.device (a new reference) when @dev_ok, else TypeError. Any other
 * device: TypeError naming it. -1 with the exception.
 */
static int tensor_device(PyObject *t, bool dev_ok, PyObject **device)
{
	PyObject *type_name, *v;
	int cmp;

	/* The CPU test first and alone: the per-op cost of a CPU tensor
	 * (bench/RESULTS.md, issue 17) must not grow for CUDA's sake. */
	if (has_is_cpu) {
		v = PyObject_GetAttr(t, s_is_cpu);
		if (!v)
			return -1;
		cmp = PyObject_IsTrue(v);
		Py_DECREF(v);
		if (cmp)
			return cmp < 0 ? -1 : 0;
	}
	*device = PyObject_GetAttr(t, s_device);
	if (!*device)
		return -1;
	type_name = PyObject_GetAttr(*device, s_type);
	if (!type_name)
		goto fail;
	cmp = PyUnicode_Compare(type_name, s_cpu);
	if (cmp == 0) {
		Py_DECREF(type_name);
		Py_CLEAR(*device);
		return 0;
	}
	if (!PyErr_Occurred() && dev_ok &&
	    PyUnicode_Compare(type_name, s_cuda) == 0) {
		Py_DECREF(type_name);
		return 1;
	}
	if (!PyErr_Occurred() && !dev_ok &&
	    PyUnicode_Compare(type_name, s_cuda) == 0)
		PyErr_Format(PyExc_TypeError,
			     "nvswap: the tensor is on device '%U'; this call "
			     "takes CPU memory only (aio_handle reads and "
			     "writes take CUDA tensors; copy it with .cpu(), "
			     "or use a pinned CPU tensor)",
			     type_name);
	else if (!PyErr_Occurred())
		PyErr_Format(PyExc_TypeError,
			     "nvswap: the tensor is on device '%U'; "
			     "nvswap reads and writes CPU memory and CUDA "
			     "device memory (copy it with .cpu(), or use a "
			     "pinned CPU tensor)",
			     type_name);
	Py_DECREF(type_name);
fail:
	Py_CLEAR(*device);
	return -1;
}

/* Why the CUDA driver cannot be used (-errno, nvs_last_error()), or 0. */
static int driver_error(void)
{
	int n = nvs_gpu_open();

	return n < 0 ? n : 0;
}

/*
 * @b holds a CUDA tensor's data_ptr() and nbytes: make sure the CUDA
 * driver, as nvswap sees it, calls that memory device memory (else the C
 * library would take it for host memory and touch it), and wait for the
 * work torch queued on the tensor's device (its current stream) so the
 * op sees the bytes the kernels before it wrote and does not overwrite
 * bytes they still read: nvswap copies on streams of its own. 0, or -1
 * with nvswap.Error (the errno and the C library's sentence).
 */
static int device_memory(PyObject *device, struct ext_buf *b)
{
	char msg[NVS_ERRMSG_MAX + 160] = "", why[NVS_ERRMSG_MAX] = "";
	PyObject *torch, *cuda, *stream, *v;
	int dev = -1, rc;

	if (b->nbytes == 0)
		return 0; /* nothing is moved: no memory to recognise */
	EXT_NOGIL(rc, why, nvs_gpu_pointer(b->ptr, &dev));
	if (rc == 0)
		/* Host memory to the driver: no driver (why?), or memory
		 * the host can use (managed), never handed on as such. */
		EXT_NOGIL(rc, why, driver_error());
	if (rc <= 0) {
		snprintf(msg, sizeof(msg),
			 "nvswap: a CUDA tensor (%zu bytes at %p), but %s",
			 b->nbytes, b->ptr,
			 rc < 0 ? why
				: "the CUDA driver does not report its memory "
				  "as device memory (CUDA managed memory is "
				  "not taken)");
		ext_raise(rc < 0 ? rc : -EINVAL, msg);
		return -1;
	}
	b->device = dev;
	torch = ext_torch();
	cuda = torch ? PyObject_GetAttr(torch, s_cuda) : NULL;
	if (!cuda)
		return PyErr_Occurred() ? -1 : 0;
	stream = PyObject_CallMethodOneArg(cuda, s_current_stream, device);
	Py_DECREF(cuda);
	if (!stream)
		return -1;
	v = PyObject_CallMethodNoArgs(stream, s_synchronize);
	Py_DECREF(stream);
	Py_XDECREF(v);
	return v ? 0 : -1;
}

static int tensor_get(PyObject *t, bool dev_ok, struct ext_buf *b)
{
	PyObject *layout, *v, *device = NULL;
	bool bad = false;
	size_t ptr;
	int cmp, on_dev;

	on_dev = tensor_device(t, dev_ok, &device);
	if (on_dev < 0)
		return -1;
	layout = PyObject_GetAttr(t, s_layout);
	if (!layout)
		goto fail;
	cmp = layout != strided;
	if (cmp) {
		PyErr_Format(PyExc_TypeError,
			     "nvswap: the tensor's layout is %R; only dense "
			     "(torch.strided) tensors have one block of "
			     "memory to read or write",
			     layout);
		Py_DECREF(layout);
		goto fail;
	}
	Py_DECREF(layout);
	v = PyObject_CallMethodNoArgs(t, s_is_contiguous);
	if (!v)
		goto fail;
	cmp = PyObject_IsTrue(v);
	Py_DECREF(v);
	if (cmp < 0)
		goto fail;
	if (!cmp) {
		PyErr_SetString(PyExc_ValueError,
				"nvswap: the tensor is not contiguous; "
				"nvswap moves one block of memory (call "
				".contiguous() first)");
		goto fail;
	}
	if (lazy_view(t, s_is_conj, "conjugated", "unconjugated",
		      "resolve_conj") ||
	    lazy_view(t, s_is_neg, "negated", "unnegated", "resolve_neg"))
		goto fail;
	ptr = as_size(PyObject_CallMethodNoArgs(t, s_data_ptr), &bad);
	/* Tensor.nbytes is newer than torch 1.13 on some builds. */
	if (has_nbytes) {
		b->nbytes = as_size(PyObject_GetAttr(t, s_nbytes), &bad);
	} else {
		size_t numel, esize;

		numel = as_size(PyObject_CallMethodNoArgs(t, s_numel), &bad);
		esize = as_size(PyObject_CallMethodNoArgs(t, s_element_size),
				&bad);
		b->nbytes = numel * esize;
	}
	if (bad)
		goto fail;
	b->ptr = (void *)ptr;
	if (on_dev && device_memory(device, b))
		goto fail;
	Py_XDECREF(device);
	b->obj = Py_NewRef(t);
	b->has_view = false;
	return 0;
fail:
	Py_XDECREF(device);
	b->ptr = NULL;
	b->nbytes = 0;
	b->device = -1;
	return -1;
}

static int buffer_get(PyObject *obj, bool writable, struct ext_buf *b)
{
	if (PyObject_GetBuffer(obj, &b->view, PyBUF_FULL_RO) < 0) {
		/* Exporters without strides/format support (rare). */
		PyErr_Clear();
		if (PyObject_GetBuffer(obj, &b->view, PyBUF_SIMPLE) < 0) {
			PyErr_Format(PyExc_ValueError,
				     "nvswap: the %.100s object cannot "
				     "export its memory as one contiguous "
				     "block",
				     Py_TYPE(obj)->tp_name);
			return -1;
		}
	}
	/* 'O': Python object pointers (a numpy object array, a ctypes
	 * py_object array). A read would overwrite the pointers (freeing
	 * the array then crashes the process), a write would store
	 * addresses: neither is data. */
	if (b->view.format && strchr(b->view.format, 'O')) {
		PyBuffer_Release(&b->view);
		PyErr_Format(PyExc_TypeError,
			     "nvswap: the %.100s buffer holds Python object "
			     "pointers (format '%s'), not data to read or "
			     "write",
			     Py_TYPE(obj)->tp_name, "O");
		return -1;
	}
	if (!PyBuffer_IsContiguous(&b->view, 'A')) {
		PyBuffer_Release(&b->view);
		PyErr_Format(PyExc_ValueError,
			     "nvswap: the %.100s buffer is not contiguous; "
			     "nvswap moves one block of memory (make a "
			     "contiguous copy first)",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	if (writable && b->view.readonly) {
		PyBuffer_Release(&b->view);
		PyErr_Format(PyExc_ValueError,
			     "nvswap: cannot read into a read-only %.100s "
			     "buffer",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	b->ptr = b->view.buf;
	b->nbytes = (size_t)b->view.len;
	b->obj = Py_NewRef(obj);
	b->has_view = true;
	return 0;
}

static int buf_get(PyObject *obj, bool writable, bool dev_ok, struct ext_buf *b)
{
	int rc;

	memset(b, 0, sizeof(*b));
	b->device = -1;
	if (intern_names())
		return -1;
	if (PyObject_CheckBuffer(obj))
		return buffer_get(obj, writable, b);
	rc = load_torch();
	if (rc < 0)
		return -1;
	if (rc > 0 && PyObject_TypeCheck(obj, (PyTypeObject *)tensor_type))
		return tensor_get(obj, dev_ok, b);
	PyErr_Format(PyExc_TypeError,
		     "nvswap: a buffer must be a CPU torch.Tensor, %sa numpy "
		     "array or an object with the buffer protocol, not "
		     "%.100s",
		     dev_ok ? "a CUDA torch.Tensor, " : "",
		     Py_TYPE(obj)->tp_name);
	return -1;
}

int ext_buf_get(PyObject *obj, bool writable, struct ext_buf *b)
{
	return buf_get(obj, writable, false, b);
}

int ext_buf_get_io(PyObject *obj, bool writable, struct ext_buf *b)
{
	return buf_get(obj, writable, true, b);
}

void ext_buf_release(struct ext_buf *b)
{
	ext_buf_unguard(b);
	if (b->has_view)
		PyBuffer_Release(&b->view);
	b->has_view = false;
	Py_CLEAR(b->obj);
	b->ptr = NULL;
	b->nbytes = 0;
	b->device = -1;
}
