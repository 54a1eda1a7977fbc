/* SPDX-License-Identifier: MIT */
/*
 * What the role swappers (ParamSwapper, OptimizerSwapper, GradSwapper)
 * share: their life over a Swapper (role.c) and their types (offload.c).
 */
#ifndef NVSWAP_PY_ROLE_H
#define NVSWAP_PY_ROLE_H

#include "ext.h"

#include <limits.h>

enum role_kind {
	ROLE_PARAM,
	ROLE_OPTIM,
	ROLE_GRAD,
};

/* A call on a role that close() destroyed meanwhile. */
#define ROLE_GONE INT_MIN

/*
 * Run the int-valued call @expr on @r's C swapper with the GIL released
 * (between role_enter and role_leave, so under the role's mutex);
 * ROLE_GONE when it was destroyed. @msg as EXT_NOGIL.
 */
#define ROLE_RUN(r, rc, msg, expr)                                             \
	EXT_NOGIL(rc, msg, (r)->p ? (expr) : ROLE_GONE)

/* Link a new role to @core (a Swapper; checked) and take a reference. */
int role_attach(struct ext_role *r, PyObject *core, int kind);
/*
 * Count a call in (role and swapper open; ValueError when closed) and
 * take the role's mutex until role_leave(): the C call and the Python
 * bookkeeping around it (what is lent) are one step for other threads.
 */
int role_enter(struct ext_role *r);
void role_leave(struct ext_role *r);
/* Raise for @rc from ROLE_RUN (ValueError for ROLE_GONE); NULL. */
PyObject *role_raise(struct ext_role *r, int rc, const char *msg);
/* The class name, for messages. */
const char *role_name(const struct ext_role *r);

/* A layer or group number: 0 to UINT_MAX (the C call judges the rest). */
int role_group_arg(PyObject *v, unsigned *out);

/* ParamSwapper.set_walk(layers) (walk.c). */
PyObject *ext_param_set_walk(PyObject *o, PyObject *arg);

/*
 * The tensors of an add_layer/add_group call: @seq of ints (byte counts,
 * zeros), CPU torch tensors or buffers (size and initial contents).
 * Fills nbytes/init (pointers into @bufs, released by role_tensors_free)
 * and returns the new spec tuple ((nbytes, dtype, shape) per tensor:
 * dtype and shape of a torch tensor, None otherwise), or NULL.
 */
PyObject *role_tensors(PyObject *seq, unsigned *n, size_t *nbytes,
		       const void **init, struct ext_buf *bufs);
void role_tensors_free(struct ext_buf *bufs, unsigned n);
/* specs[group] = spec (after a successful add). -1 on failure. */
int role_set_spec(struct ext_role *r, unsigned group, PyObject *spec);

/*
 * Hand out the pointers @ptrs of @group, one per tensor of its spec, as
 * tensors or memoryviews shaped by the spec (or by @dtype and @shape
 * when given), recorded in held[group]. A list, or NULL with nothing
 * recorded (the caller undoes the acquire).
 */
PyObject *role_lend(struct ext_role *r, unsigned group, void **ptrs,
		    bool want_mv, PyObject *dtype, PyObject *shape);
/* Revoke what was lent for @group (before its release). */
void role_revoke(struct ext_role *r, unsigned group);

/* The shared part of the types: close, dealloc, enter/exit, closed. */
void role_dealloc(PyObject *o);
void role_finalize(PyObject *o);
PyObject *role_close(PyObject *o, PyObject *unused);
PyObject *role_ctx_enter(PyObject *o, PyObject *unused);
PyObject *role_ctx_exit(PyObject *o, PyObject *args);
PyObject *role_get_closed(PyObject *o, void *unused);
PyObject *role_get_swapper(PyObject *o, void *unused);
PyObject *role_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

#endif
