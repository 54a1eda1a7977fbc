/* SPDX-License-Identifier: MIT */
/*
 * A small argument binder for METH_FASTCALL | METH_KEYWORDS methods: maps
 * positional and keyword arguments onto named slots, cheaper than
 * PyArg_ParseTupleAndKeywords on the per-op path.
 */
#ifndef NVSWAP_PY_ARGS_H
#define NVSWAP_PY_ARGS_H

#include "ext.h"

/*
 * Fill @out[i] (borrowed, NULL when not given) from @args/@kwnames by the
 * names in @names (NULL-terminated; an entry "a|b" accepts either
 * spelling as a keyword). The first @npos names may be positional; the
 * first @nreq are required. Raises TypeError as CPython would and returns
 * -1; 0 on success.
 */
int ext_bind(const char *fname, PyObject *const *args, Py_ssize_t nargs,
	     PyObject *kwnames, const char *const *names, int npos, int nreq,
	     PyObject **out);

/* Conversions of an optional slot; -1 with an exception on bad input. */
int ext_arg_bool(PyObject *v, bool dflt, bool *out);
int ext_arg_i64(PyObject *v, const char *what, int64_t dflt, int64_t *out);
/* An integer in 0..@max (ValueError outside, TypeError for a non-int). */
int ext_arg_u64(PyObject *v, const char *what, uint64_t max, uint64_t *out);
/*
 * A byte count: an int, or a str as nvs_parse_size() reads it ("64M",
 * "2GiB", "5GB" = 5 * 10^9); a refused str is a ValueError stating its
 * rule. Unchanged when @v is NULL or None.
 */
int ext_arg_bytes(PyObject *v, const char *what, uint64_t *out);
/*
 * A file argument: an int is a file descriptor (*fd), anything else a
 * path (str, bytes, os.PathLike) made into a new bytes reference (*path).
 */
int ext_arg_file(PyObject *v, PyObject **path, int *fd);

/* d[key] = v, stealing v; -1 (and *d freed) on failure, so a dict can
 * be filled by a chain of calls joined with ||. */
int ext_dict_put(PyObject **d, const char *key, PyObject *v);

#endif
