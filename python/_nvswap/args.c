/* SPDX-License-Identifier: MIT */
/* Argument binding and conversion shared by the extension's methods. */
#include "args.h"

#include <limits.h>
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
			PyErr_Format(PyExc_TypeError,
				     "%s() missing required argument '%.*s' "
				     "(pos %d)",
				     fname, first_len(names[i]), names[i],
				     i + 1);
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

int ext_arg_file(PyObject *v, PyObject **path, int *fd)
{
	*path = NULL;
	*fd = -1;
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
