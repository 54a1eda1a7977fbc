/* SPDX-License-Identifier: MIT */
/*
 * ParamSwapper.set_walk(): the order a model uses its layers, copied out
 * of Python and handed to nvs_param_set_walk() in one call. Listed in the
 * type's methods by offload.c.
 */
#include "role.h"

#define ROLE(o) ((struct ext_role *)(o))

/* set_walk(layers): the ints copied out first, then one C call. */
PyObject *ext_param_set_walk(PyObject *o, PyObject *arg)
{
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	unsigned *layers = NULL;
	PyObject *seq;
	Py_ssize_t n;
	int rc = 0;

	seq = PySequence_Fast(arg, "ParamSwapper.set_walk: layers must be a "
				   "sequence of layer numbers");
	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n > (Py_ssize_t)NVS_OFFLOAD_MAX_WALK) {
		PyErr_Format(PyExc_ValueError,
			     "ParamSwapper.set_walk: %zd layers, at most %u", n,
			     NVS_OFFLOAD_MAX_WALK);
		rc = -1;
	} else if (n && !(layers = PyMem_Malloc(n * sizeof(*layers)))) {
		PyErr_NoMemory();
		rc = -1;
	}
	for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
		rc = role_group_arg(PySequence_Fast_GET_ITEM(seq, i),
				    &layers[i]);
	Py_DECREF(seq);
	if (rc < 0 || role_enter(r)) {
		PyMem_Free(layers);
		return NULL;
	}
	ROLE_RUN(r, rc, msg, nvs_param_set_walk(r->p, (unsigned)n, layers));
	role_leave(r);
	PyMem_Free(layers);
	if (rc < 0)
		return role_raise(r, rc, msg);
	Py_RETURN_NONE;
}
