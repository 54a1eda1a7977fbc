/* SPDX-License-Identifier: MIT */
/* Argument binding and conversion shared by the extension's methods. */
#include "args.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static bool name_matches(const char *spec, const char *kw, size_t kwlen)
{
	while (*spec) {
		const char *bar = strchr(spec, '|');
		size_t len = bar ? (size_t)(bar - spec) : strlen(spec);

		if (len == kwlen && !memcmp(spec, kw, len))
			return true;
		if (!bar)
			break;
		spec = bar + 1;
	}
	return false;
}

static int first_len(const char *spec)
{
	const char *bar = strchr(spec, '|');

	return bar ? (int)(bar - spec) : (int)strlen(spec);
}

int ext_bind(const char *fname, PyObject *const *args, Py_ssize_t nargs,
	     PyObject *kwnames, const char *const *names, int npos, int nreq,
	     PyObject **out)
{
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	int n = 0;

	while (names[n])
		n++;
	memset(out, 0, sizeof(*out) * (size_t)n);
	if (nargs > npos) {
		PyErr_Format(PyExc_TypeError,
			     "%s() takes at most %d positional arguments "
			     "(%zd given)",
			     fname, npos, nargs);
		return -1;
	}
	for (Py_ssize_t i = 0; i < nargs; i++)
		out[i] = args[i];
	for (Py_ssize_t k = 0; k < nkw; k++) {
		PyObject *key = PyTuple_GET_ITEM(kwnames, k);
		Py_ssize_t len;
		const char *kw = PyUnicode_AsUTF8AndSize(key, &len);
		int i;

		if (!kw)
			return -1;
		for (i = 0; i < n; i++)
			if (name_matches(names[i], kw, (size_t)len))
				break;
		if (i == n) {
			PyErr_Format(PyExc_TypeError,
				     "%s() got an unexpected keyword argument "
				     "'%s'",
				     fname, kw);
			return -1;
		}
		if (out[i]) {
			PyErr_Format(PyExc_TypeError,
				     "%s() got multiple values for argument "
				     "'%s'",
				     fname, kw);
			return -1;
		}
		out[i] = args[nargs + k];
	}
	for (int i = 0; i < nreq; i++) {
		if (!out[i]) {
			/* PyErr_Format has no "%.*s": cut the name here. */
			char name[64];

			snprintf(name, sizeof(name), "%.*s",
				 first_len(names[i]), names[i]);
			PyErr_Format(PyExc_TypeError,
				     "%s() missing required argument '%s' "
				     "(pos %d)",
				     fname, name, i + 1);
			return -1;
		}
	}
	return 0;
}

int ext_arg_bool(PyObject *v, bool dflt, bool *out)
{
	int t;

	if (!v) {
		*out = dflt;
		return 0;
	}
	t = PyObject_IsTrue(v);
	if (t < 0)
		return -1;
	*out = t;
	return 0;
}

int ext_arg_i64(PyObject *v, const char *what, int64_t dflt, int64_t *out)
{
	long long x;

	if (!v) {
		*out = dflt;
		return 0;
	}
	if (!PyIndex_Check(v)) {
		PyErr_Format(PyExc_TypeError,
			     "%s must be an integer, not %.100s", what,
			     Py_TYPE(v)->tp_name);
		return -1;
	}
	x = PyLong_AsLongLong(v);
	if (x == -1 && PyErr_Occurred())
		return -1;
	*out = x;
	return 0;
}

int ext_arg_u64(PyObject *v, const char *what, uint64_t max, uint64_t *out)
{
	unsigned long long x;
	bool bad = false;
	PyObject *n;

	if (!PyIndex_Check(v)) {
		PyErr_Format(PyExc_TypeError,
			     "nvswap: %s must be an integer, not %.100s", what,
			     Py_TYPE(v)->tp_name);
		return -1;
	}
	n = PyNumber_Index(v);
	if (!n)
		return -1;
	/* OverflowError for negative numbers too */
	x = PyLong_AsUnsignedLongLong(n);
	if (x == (unsigned long long)-1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
			Py_DECREF(n);
			return -1;
		}
		PyErr_Clear();
		bad = true;
	}
	if (bad || x > max) {
		PyErr_Format(PyExc_ValueError,
			     "nvswap: %s %S is out of range (0 to %llu)", what,
			     n, (unsigned long long)max);
		Py_DECREF(n);
		return -1;
	}
	Py_DECREF(n);
	*out = x;
	return 0;
}

int ext_arg_bytes(PyObject *v, const char *what, uint64_t *out)
{
	const char *s;
	int rc;

	if (!v || v == Py_None)
		return 0;
	if (!PyUnicode_Check(v))
		return ext_arg_u64(v, what, UINT64_MAX, out);
	s = PyUnicode_AsUTF8(v);
	if (!s)
		return -1;
	rc = nvs_parse_size(s, out);
	if (rc < 0) {
		/* nvs_last_error() says why and states the size rule */
		PyErr_Format(PyExc_ValueError,
			     "nvswap: %s %R is not a byte count: %s", what, v,
			     nvs_last_error());
		return -1;
	}
	return 0;
}

int ext_arg_file(PyObject *v, PyObject **path, int *fd)
{
	*path = NULL;
	*fd = -1;
	if (PyBool_Check(v)) {
		/* An int, but True as "fd 1" would write to stdout. */
		PyErr_SetString(PyExc_TypeError,
				"nvswap: a file is a path or a file "
				"descriptor, not a bool");
		return -1;
	}
	if (PyLong_Check(v)) {
		long x = PyLong_AsLong(v);

		if (x == -1 && PyErr_Occurred())
			return -1;
		if (x < 0 || x > INT_MAX) {
			PyErr_Format(PyExc_ValueError,
				     "nvswap: %ld is not a file descriptor", x);
			return -1;
		}
		*fd = (int)x;
		return 0;
	}
	if (!PyUnicode_FSConverter(v, path))
		return -1;
	return 0;
}

int ext_dict_put(PyObject **d, const char *key, PyObject *v)
{
	if (*d && v && !PyDict_SetItemString(*d, key, v)) {
		Py_DECREF(v);
		return 0;
	}
	Py_XDECREF(v);
	Py_CLEAR(*d);
	return -1;
}
