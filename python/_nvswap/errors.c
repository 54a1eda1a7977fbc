/* SPDX-License-Identifier: MIT */
/*
 * The exceptions of nvswap: Error (an OSError with the errno and the
 * sentence of nvs_last_error()), its subclasses that are also Python's
 * own OSError subclasses (FileNotFoundError...), and ConfigError.
 */
#include "ext.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

PyObject *ext_Error;
PyObject *ext_ConfigError;

/* errno -> the built-in OSError subclass Python itself would pick. */
static const struct {
	int err;
	const char *name;    /* nvswap.<name> */
	const char *builtin; /* in builtins */
} sub_table[] = {
	{ENOENT, "FileNotFoundError", "FileNotFoundError"},
	{EEXIST, "FileExistsError", "FileExistsError"},
	{EACCES, "PermissionError", "PermissionError"},
	{EPERM, "PermissionError", "PermissionError"},
	{EISDIR, "IsADirectoryError", "IsADirectoryError"},
	{ENOTDIR, "NotADirectoryError", "NotADirectoryError"},
	{ETIMEDOUT, "TimeoutError", "TimeoutError"},
	{EINTR, "InterruptedError", "InterruptedError"},
	{EAGAIN, "BlockingIOError", "BlockingIOError"},
	{ECHILD, "ChildProcessError", "ChildProcessError"},
};
#define NSUB (sizeof(sub_table) / sizeof(sub_table[0]))
static PyObject *sub_types[NSUB];

static const char error_doc[] =
	"An nvswap call failed.\n\n"
	"An OSError: .errno is the error number the C library returned\n"
	"(as a positive number), .strerror the sentence nvs_last_error()\n"
	"gave: the call, the path, the offset and length, the cause.\n"
	"Where Python has a subclass of OSError for that errno, the\n"
	"exception is also an instance of it (nvswap.FileNotFoundError is\n"
	"both nvswap.Error and FileNotFoundError).";

static const char config_doc[] =
	"A DeepSpeed-style config was refused (nvswap.Config).\n\n"
	"An nvswap.Error and a ValueError. .file, .line, .column and .key\n"
	"say where (None when the error has no position, such as a missing\n"
	"file); .strerror is the whole sentence.";

int ext_errors_init(PyObject *module)
{
	PyObject *bases;

	ext_Error = PyErr_NewExceptionWithDoc("nvswap.Error", error_doc,
					      PyExc_OSError, NULL);
	if (!ext_Error || PyModule_AddObjectRef(module, "Error", ext_Error))
		return -1;
	bases = PyTuple_Pack(2, ext_Error, PyExc_ValueError);
	if (!bases)
		return -1;
	ext_ConfigError = PyErr_NewExceptionWithDoc("nvswap.ConfigError",
						    config_doc, bases, NULL);
	Py_DECREF(bases);
	if (!ext_ConfigError ||
	    PyModule_AddObjectRef(module, "ConfigError", ext_ConfigError))
		return -1;
	for (size_t i = 0; i < NSUB; i++) {
		char qual[64];
		PyObject *builtin;

		/* EPERM shares EACCES's class, as in Python. */
		for (size_t j = 0; j < i; j++)
			if (!strcmp(sub_table[j].name, sub_table[i].name))
				sub_types[i] = Py_NewRef(sub_types[j]);
		if (sub_types[i])
			continue;
		builtin = PyDict_GetItemString(PyEval_GetBuiltins(),
					       sub_table[i].builtin);
		if (!builtin)
			return -1;
		bases = PyTuple_Pack(2, ext_Error, builtin);
		if (!bases)
			return -1;
		snprintf(qual, sizeof(qual), "nvswap.%s", sub_table[i].name);
		sub_types[i] = PyErr_NewException(qual, bases, NULL);
		Py_DECREF(bases);
		if (!sub_types[i] ||
		    PyModule_AddObjectRef(module, sub_table[i].name,
					  sub_types[i]))
			return -1;
	}
	return 0;
}

static PyObject *type_for(int err)
{
	for (size_t i = 0; i < NSUB; i++)
		if (sub_table[i].err == err)
			return sub_types[i];
	return ext_Error;
}

PyObject *ext_raise(int err, const char *msg)
{
	PyObject *exc;

	if (err < 0)
		err = -err;
	/*
	 * A call cut short by a signal: Python's handler has only set a flag
	 * so far. Run it now, so that what it raises (KeyboardInterrupt for
	 * Ctrl-C) is what the caller gets, not an nvswap error an
	 * "except Exception:" would swallow; only a handler that raises
	 * nothing leaves InterruptedError, as os.read() would after PEP 475
	 * gave up retrying.
	 */
	if (err == EINTR && PyErr_CheckSignals() < 0)
		return NULL;
	if (!msg || !*msg)
		msg = nvs_strerror(err);
	exc = PyObject_CallFunction(type_for(err), "is", err, msg);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

PyObject *ext_raise_last(int err)
{
	return ext_raise(err, nvs_last_error());
}

/*
 * A loader sentence reads "FILE:LINE:COLUMN: KEY: what": find the first
 * ":<digits>:<digits>: " and split around it.
 */
static int set_position(PyObject *exc, const char *msg)
{
	const char *p = msg, *file_end = NULL, *key, *key_end;
	long line = 0, col = 0;
	PyObject *v;
	int rc = 0;

	for (; (p = strchr(p, ':')); p++) {
		char *end;

		line = strtol(p + 1, &end, 10);
		if (end == p + 1 || *end != ':')
			continue;
		col = strtol(end + 1, &end, 10);
		if (*end != ':' || end[1] != ' ')
			continue;
		file_end = p;
		p = end + 2;
		break;
	}
	if (!file_end)
		return 0;
	key = p;
	key_end = strstr(key, ": ");
	v = PyUnicode_DecodeFSDefaultAndSize(msg, file_end - msg);
	rc |= !v || PyObject_SetAttrString(exc, "file", v);
	Py_XDECREF(v);
	v = PyLong_FromLong(line);
	rc |= !v || PyObject_SetAttrString(exc, "line", v);
	Py_XDECREF(v);
	v = PyLong_FromLong(col);
	rc |= !v || PyObject_SetAttrString(exc, "column", v);
	Py_XDECREF(v);
	if (key_end) {
		v = PyUnicode_DecodeUTF8(key, key_end - key, "replace");
		rc |= !v || PyObject_SetAttrString(exc, "key", v);
		Py_XDECREF(v);
	}
	return rc ? -1 : 0;
}

PyObject *ext_raise_config(int err, const char *msg)
{
	PyObject *exc;

	if (err < 0)
		err = -err;
	if (!msg || !*msg)
		msg = nvs_strerror(err);
	exc = PyObject_CallFunction(ext_ConfigError, "is", err, msg);
	if (!exc)
		return NULL;
	if (PyObject_SetAttrString(exc, "file", Py_None) ||
	    PyObject_SetAttrString(exc, "line", Py_None) ||
	    PyObject_SetAttrString(exc, "column", Py_None) ||
	    PyObject_SetAttrString(exc, "key", Py_None) ||
	    set_position(exc, msg)) {
		Py_DECREF(exc);
		return NULL;
	}
	PyErr_SetObject(ext_ConfigError, exc);
	Py_DECREF(exc);
	return NULL;
}
