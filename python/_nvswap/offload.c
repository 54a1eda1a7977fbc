/* SPDX-License-Identifier: MIT */
/*
 * nvswap.ParamSwapper, OptimizerSwapper and GradSwapper: the role
 * swappers of nvswap/offload.h over a Swapper, one method per C
 * function. Their life and lending are in role.c.
 */
#include "role.h"

#include "args.h"

#include <errno.h>
#include <string.h>

#define ROLE(o) ((struct ext_role *)(o))
#define FAST (METH_FASTCALL | METH_KEYWORDS)

/* ---- construction ----------------------------------------------------- */

static int role_enter_core(struct ext_role *r)
{
	if (r->core->s && !ext_gate_enter(&r->core->gate, false))
		return 0;
	ext_raise_closed("Swapper");
	return -1;
}

/* Attach to @core and create the C role from @opts (GIL held: creating
 * only allocates). */
static int create(struct ext_role *r, PyObject *core, int kind,
		  const void *opts)
{
	struct nvs_param_swapper *pp = NULL;
	struct nvs_optim_swapper *op = NULL;
	struct nvs_grad_swapper *gp = NULL;
	int rc;

	if (role_attach(r, core, kind) || role_enter_core(r))
		return -1;
	if (kind == ROLE_PARAM)
		rc = nvs_param_swapper_create(r->core->s, opts, &pp);
	else if (kind == ROLE_OPTIM)
		rc = nvs_optim_swapper_create(r->core->s, opts, &op);
	else
		rc = nvs_grad_swapper_create(r->core->s, opts, &gp);
	if (rc < 0)
		ext_raise_last(rc);
	ext_gate_leave(&r->core->gate);
	if (rc < 0)
		return -1;
	r->p = pp ? (void *)pp : op ? (void *)op : (void *)gp;
	return 0;
}

static int param_init(PyObject *o, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"swapper", "lookahead", "max_in_cpu",
				 "id_base", NULL};
	struct ext_role *r = ROLE(o);
	PyObject *core, *la = NULL, *mic = NULL, *base = NULL;
	struct nvs_param_swapper_opts opts;
	uint64_t lookahead;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO", kwlist, &core,
					 &la, &mic, &base))
		return -1;
	nvs_param_swapper_opts_init(&opts);
	lookahead = opts.lookahead;
	if ((la && ext_arg_u64(la, "lookahead", UINT_MAX, &lookahead)) ||
	    ext_arg_bytes(mic, "max_in_cpu", &opts.max_in_cpu) ||
	    (base && ext_arg_u64(base, "id_base", UINT64_MAX, &opts.id_base)))
		return -1;
	opts.lookahead = (unsigned)lookahead;
	return create(r, core, ROLE_PARAM, &opts);
}

static int optim_init(PyObject *o, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"swapper", "pipeline_read", "pipeline_write",
				 "id_base", NULL};
	struct ext_role *r = ROLE(o);
	PyObject *core, *pr = NULL, *pw = NULL, *base = NULL;
	struct nvs_optim_swapper_opts opts;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO", kwlist, &core,
					 &pr, &pw, &base))
		return -1;
	nvs_optim_swapper_opts_init(&opts);
	if (ext_arg_bool(pr, false, &opts.pipeline_read) ||
	    ext_arg_bool(pw, false, &opts.pipeline_write) ||
	    (base && ext_arg_u64(base, "id_base", UINT64_MAX, &opts.id_base)))
		return -1;
	return create(r, core, ROLE_OPTIM, &opts);
}

static int grad_init(PyObject *o, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"swapper", "id_base", NULL};
	struct ext_role *r = ROLE(o);
	PyObject *core, *base = NULL;
	struct nvs_grad_swapper_opts opts;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &core,
					 &base))
		return -1;
	nvs_grad_swapper_opts_init(&opts);
	if (base && ext_arg_u64(base, "id_base", UINT64_MAX, &opts.id_base))
		return -1;
	return create(r, core, ROLE_GRAD, &opts);
}

/* ---- shared method bodies --------------------------------------------- */

typedef int (*add_cb)(void *p, unsigned group, unsigned n, const size_t *nbytes,
		      const void *const *init, bool in_cpu);

static int param_add(void *p, unsigned g, unsigned n, const size_t *nbytes,
		     const void *const *init, bool in_cpu)
{
	return nvs_param_add_layer_where(p, g, n, nbytes, init, in_cpu);
}

static int optim_add(void *p, unsigned g, unsigned n, const size_t *nbytes,
		     const void *const *init, bool in_cpu)
{
	(void)in_cpu;
	return nvs_optim_add_group(p, g, n, nbytes, init);
}

/* add_layer(layer, tensors, in_cpu=True) / add_group(group, tensors) */
static PyObject *add(PyObject *o, const char *fname, add_cb fn,
		     PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
	static const char *const pnames[] = {"group|layer", "tensors", "in_cpu",
					     "sources", NULL};
	static const char *const onames[] = {"group|layer", "tensors", NULL};
	struct ext_role *r = ROLE(o);
	struct ext_buf bufs[NVS_OFFLOAD_MAX_TENSORS];
	size_t nbytes[NVS_OFFLOAD_MAX_TENSORS];
	const void *init[NVS_OFFLOAD_MAX_TENSORS];
	struct nvs_layer_source src[NVS_OFFLOAD_MAX_TENSORS];
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *a[4] = {NULL, NULL, NULL, NULL}, *spec;
	bool param = fn == param_add;
	unsigned group, n;
	int in_cpu = 1, rc;

	if (ext_bind(fname, args, nargs, kw, param ? pnames : onames,
		     param ? 4 : 2, 2, a) ||
	    role_group_arg(a[0], &group))
		return NULL;
	if (a[2] && (in_cpu = PyObject_IsTrue(a[2])) < 0)
		return NULL;
	spec = role_tensors(a[1], &n, nbytes, init, bufs);
	if (!spec)
		return NULL;
	if (a[3] && a[3] != Py_None && ext_layer_sources(a[3], n, src) < 0) {
		role_tensors_free(bufs, n);
		Py_DECREF(spec);
		return NULL;
	}
	if (role_enter(r)) {
		role_tensors_free(bufs, n);
		Py_DECREF(spec);
		return NULL;
	}
	if (a[3] && a[3] != Py_None) /* streamed from files (backing.c) */
		ROLE_RUN(r, rc, msg,
			 nvs_param_add_layer_file(r->p, group, n, nbytes, src));
	else
		ROLE_RUN(r, rc, msg, fn(r->p, group, n, nbytes, init, in_cpu));
	role_tensors_free(bufs, n);
	if (rc == 0)
		rc = role_set_spec(r, group, spec) < 0 ? 1 : 0;
	role_leave(r);
	Py_DECREF(spec);
	if (rc < 0)
		return role_raise(r, rc, msg);
	if (rc > 0)
		return NULL; /* the spec's error (out of memory) */
	Py_RETURN_NONE;
}

typedef int (*acquire_cb)(void *p, unsigned group, void **ptrs);

static int param_acquire(void *p, unsigned g, void **ptrs)
{
	return nvs_param_acquire_layer(p, g, ptrs);
}

static int optim_acquire(void *p, unsigned g, void **ptrs)
{
	return nvs_optim_swap_in(p, g, ptrs);
}

typedef int (*release_cb)(void *p, unsigned group, bool dirty);

static int param_release(void *p, unsigned g, bool dirty)
{
	return nvs_param_release_layer(p, g, dirty);
}

static int optim_release(void *p, unsigned g, bool dirty)
{
	(void)dirty;
	return nvs_optim_swap_out(p, g);
}

static int grad_release(void *p, unsigned g, bool dirty)
{
	(void)dirty;
	return nvs_grad_release(p, g);
}

/* acquire_layer / swap_in(group, *, memoryview=False) -> list */
static PyObject *acquire(PyObject *o, const char *fname, acquire_cb fn,
			 release_cb undo, PyObject *const *args,
			 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"group|layer", "memoryview", NULL};
	struct ext_role *r = ROLE(o);
	void *ptrs[NVS_OFFLOAD_MAX_TENSORS] = {NULL};
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *a[2], *out;
	unsigned group;
	bool mv;
	int rc;

	if (ext_bind(fname, args, nargs, kw, names, 1, 1, a) ||
	    role_group_arg(a[0], &group) || ext_arg_bool(a[1], false, &mv) ||
	    role_enter(r))
		return NULL;
	ROLE_RUN(r, rc, msg, fn(r->p, group, ptrs));
	if (rc < 0) {
		role_leave(r);
		return role_raise(r, rc, msg);
	}
	out = role_lend(r, group, ptrs, mv, NULL, NULL);
	if (!out) {
		PyObject *type, *value, *tb;

		PyErr_Fetch(&type, &value, &tb);
		ROLE_RUN(r, rc, msg, undo(r->p, group, false));
		PyErr_Restore(type, value, tb);
	}
	role_leave(r);
	return out;
}

/* release_layer / swap_out / release: revoke, then the C call. */
static PyObject *release(PyObject *o, const char *fname, release_cb fn,
			 bool want_dirty, PyObject *const *args,
			 Py_ssize_t nargs, PyObject *kw)
{
	static const char *const with_dirty[] = {"group|layer", "dirty", NULL};
	static const char *const plain[] = {"group|layer", NULL};
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *a[2] = {NULL, NULL};
	int n = want_dirty ? 2 : 1;
	unsigned group;
	bool dirty;
	int rc;

	if (ext_bind(fname, args, nargs, kw, want_dirty ? with_dirty : plain, n,
		     n, a))
		return NULL;
	if (role_group_arg(a[0], &group) || ext_arg_bool(a[1], false, &dirty) ||
	    role_enter(r))
		return NULL;
	role_revoke(r, group);
	ROLE_RUN(r, rc, msg, fn(r->p, group, dirty));
	role_leave(r);
	if (rc < 0)
		return role_raise(r, rc, msg);
	Py_RETURN_NONE;
}

typedef int (*group_cb)(void *p, unsigned group);

/* A call taking a group and returning 0 or -errno. */
static PyObject *group_call(PyObject *o, PyObject *arg, group_cb fn)
{
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	unsigned group;
	int rc;

	if (role_group_arg(arg, &group) || role_enter(r))
		return NULL;
	ROLE_RUN(r, rc, msg, fn(r->p, group));
	role_leave(r);
	if (rc < 0)
		return role_raise(r, rc, msg);
	Py_RETURN_NONE;
}

/* ---- ParamSwapper ----------------------------------------------------- */

static PyObject *param_add_layer(PyObject *o, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kw)
{
	return add(o, "add_layer", param_add, args, nargs, kw);
}

static int param_prefetch(void *p, unsigned g)
{
	return nvs_param_prefetch_layer(p, g);
}

static PyObject *param_prefetch_layer(PyObject *o, PyObject *arg)
{
	return group_call(o, arg, param_prefetch);
}

static PyObject *param_acquire_layer(PyObject *o, PyObject *const *args,
				     Py_ssize_t nargs, PyObject *kw)
{
	return acquire(o, "acquire_layer", param_acquire, param_release, args,
		       nargs, kw);
}

static PyObject *param_release_layer(PyObject *o, PyObject *const *args,
				     Py_ssize_t nargs, PyObject *kw)
{
	return release(o, "release_layer", param_release, true, args, nargs,
		       kw);
}

static int param_evict(void *p, unsigned g)
{
	return nvs_param_evict_layer(p, g);
}

static PyObject *param_evict_layer(PyObject *o, PyObject *arg)
{
	return group_call(o, arg, param_evict);
}

static PyObject *param_layer_in_cpu(PyObject *o, PyObject *arg)
{
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	unsigned layer;
	int rc;

	if (role_group_arg(arg, &layer) || role_enter(r))
		return NULL;
	/* under the mutex: an add_layer may be growing the table */
	ROLE_RUN(r, rc, msg, nvs_param_layer_in_cpu(r->p, layer));
	role_leave(r);
	if (rc < 0)
		return role_raise(r, rc, msg);
	return PyBool_FromLong(rc);
}

#define M(prefix, name, flags, doc)                                            \
	{                                                                      \
#name, (PyCFunction)(void (*)(void))prefix##_##name, flags,    \
			doc                                                    \
	}
#define COMMON(cls)                                                            \
	{"close", role_close, METH_NOARGS,                                     \
	 "close() -> None\n\n"                                                 \
	 "Destroy the " cls ": what its acquires lent is revoked (as\n"        \
	 "by a release), every one of its tensors is unregistered from\n"      \
	 "the Swapper and freed. Waits for a call another thread is\n"         \
	 "making on it. Raises nvswap.Error (EBUSY) when a tensor could\n"     \
	 "not be unregistered (the role is freed anyway). Swapper.close()\n"   \
	 "closes it first. A second close() does nothing; other calls\n"       \
	 "afterwards raise ValueError."},                                      \
		{"__enter__", role_ctx_enter, METH_NOARGS, NULL},              \
		{"__exit__", role_ctx_exit, METH_VARARGS, NULL},               \
	{                                                                      \
		NULL, NULL, 0, NULL                                            \
	}

static PyMethodDef param_methods[] = {
	M(param, add_layer, FAST,
	  "add_layer(layer, tensors, in_cpu=True, sources=None) -> None\n\n"
	  "Add layer number layer (0 to 2**20-1) holding tensors: a list\n"
	  "of up to 64 items, each an int (a byte count; reads as zeros),\n"
	  "a torch tensor on the meta device (its dtype and shape; reads\n"
	  "as zeros) or a CPU torch tensor or buffer (its bytes are the\n"
	  "initial value, copied now). Zeros cost no I/O until written.\n"
	  "The layer is packed into one swapper tensor\n"
	  "(id_base + (layer << 20)), written now unless it is kept in CPU\n"
	  "memory (max_in_cpu). acquire_layer() returns tensors with the\n"
	  "dtypes and shapes of the torch tensors given (1-D uint8 for the\n"
	  "rest). Blocks for the write (GIL released). Raises\n"
	  "nvswap.Error: EEXIST (the layer exists), EINVAL (no tensor, a\n"
	  "zero size, layer too large), EFBIG (the packed layer is larger\n"
	  "than the Swapper's buffer_size), ENOSPC/EIO. Nothing is added\n"
	  "on failure. in_cpu=False: streamed from NVMe whatever\n"
	  "max_in_cpu has left (choose which layers stay: the largest).\n"
	  "sources: a (file, offset) per tensor (file a Swapper.add_file()\n"
	  "index; None: zeros): the layer streams from those files in\n"
	  "place (weights served without a copy), nothing read or written\n"
	  "now, in_cpu ignored; ESTALE at a read when a file changed."),
	M(param, prefetch_layer, METH_O,
	  "prefetch_layer(layer) -> None\n\n"
	  "Start reading layer into free pool buffers and return; never\n"
	  "waits for a buffer (a short pool is not an error). Raises\n"
	  "nvswap.Error ENOENT (no such layer) or a submit error."),
	M(ext_param, set_walk, METH_O,
	  "set_walk(layers) -> None\n\n"
	  "Read ahead in the order the model uses its layers: layers is\n"
	  "the forward pass's acquires in order, as its first step traced\n"
	  "them (repeats allowed: a tied embedding first and last, a\n"
	  "module called twice), copied. acquire_layer() then follows the\n"
	  "walk, turning at its ends (backward starts where forward ended,\n"
	  "the next step where backward ended), and reads ahead the next\n"
	  "lookahead distinct layers along it; a layer not in the walk\n"
	  "gets no read-ahead. [] goes back to read-ahead by number. Each\n"
	  "call starts at the walk's beginning. Raises nvswap.Error ENOENT\n"
	  "(a layer not added; nothing changes), ValueError (more than\n"
	  "4 * 2**20 entries), TypeError/OverflowError (not layer\n"
	  "numbers)."),
	M(param, acquire_layer, FAST,
	  "acquire_layer(layer, *, memoryview=False) -> list\n\n"
	  "The layer's tensors, resident: a list in add order of torch\n"
	  "tensors on the pool buffer (or memoryviews of their bytes when\n"
	  "torch cannot be imported or memoryview=True). Reads the layer\n"
	  "first when needed (blocks, GIL released), then reads the next\n"
	  "lookahead layers ahead into free buffers: along the walk given\n"
	  "to set_walk(), else by number in the walk's direction. Raises\n"
	  "nvswap.Error: ENOENT, EBUSY (already acquired), and\n"
	  "Swapper.acquire()'s errors (EDEADLK, ETIMEDOUT, EIO,\n"
	  "EBADMSG); nothing stays acquired then."),
	M(param, release_layer, FAST,
	  "release_layer(layer, dirty) -> None\n\n"
	  "End the acquire. dirty: the parameters changed (written back\n"
	  "at eviction; clean layers are dropped without I/O). Revokes\n"
	  "what acquire_layer() returned first, as Swapper.release() does\n"
	  "(tensors become empty, memoryviews are released; views derived\n"
	  "from them are not covered). Raises nvswap.Error ENOENT or EBUSY\n"
	  "(not acquired)."),
	M(param, evict_layer, METH_O,
	  "evict_layer(layer) -> None\n\n"
	  "Give the layer's buffer back; the write-back of a changed layer\n"
	  "starts now. Nothing for a layer kept in CPU memory. Raises\n"
	  "nvswap.Error ENOENT, EBUSY (acquired) or a submit error."),
	M(param, layer_in_cpu, METH_O,
	  "layer_in_cpu(layer) -> bool\n\n"
	  "Whether layer is kept in CPU memory (max_in_cpu), never\n"
	  "swapped. False for an unknown layer."),
	COMMON("ParamSwapper"),
};

/* ---- OptimizerSwapper ------------------------------------------------- */

static PyObject *optim_add_group(PyObject *o, PyObject *const *args,
				 Py_ssize_t nargs, PyObject *kw)
{
	return add(o, "add_group", optim_add, args, nargs, kw);
}

static PyObject *optim_swap_in(PyObject *o, PyObject *const *args,
			       Py_ssize_t nargs, PyObject *kw)
{
	return acquire(o, "swap_in", optim_acquire, optim_release, args, nargs,
		       kw);
}

static PyObject *optim_swap_out(PyObject *o, PyObject *const *args,
				Py_ssize_t nargs, PyObject *kw)
{
	return release(o, "swap_out", optim_release, false, args, nargs, kw);
}

static PyMethodDef optim_methods[] = {
	M(optim, add_group, FAST,
	  "add_group(group, tensors) -> None\n\n"
	  "Add sub-group group with its state tensors (fp32 master\n"
	  "weights, exp_avg, exp_avg_sq...), given as in\n"
	  "ParamSwapper.add_layer(). Groups are stepped in the order they\n"
	  "are added. Blocks for the write (GIL released). Raises\n"
	  "nvswap.Error as add_layer()."),
	M(optim, swap_in, FAST,
	  "swap_in(group, *, memoryview=False) -> list\n\n"
	  "The group's state tensors, resident, as\n"
	  "ParamSwapper.acquire_layer() returns them. With pipeline_read\n"
	  "the next group is then read ahead into free buffers. Blocks\n"
	  "(GIL released). Raises nvswap.Error as acquire_layer()."),
	M(optim, swap_out, FAST,
	  "swap_out(group) -> None\n\n"
	  "The step of group is done: revoke what swap_in() returned,\n"
	  "then write the state back. Without pipeline_write this blocks\n"
	  "until the write ends (GIL released); with it, the write\n"
	  "overlaps what comes next. Raises nvswap.Error ENOENT, EBUSY\n"
	  "(not swapped in) or the write's error (the state stays\n"
	  "resident and dirty)."),
	COMMON("OptimizerSwapper"),
};

/* ---- GradSwapper ------------------------------------------------------ */

static PyObject *grad_add_group(PyObject *o, PyObject *const *args,
				Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"group", "nbytes", NULL};
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	PyObject *a[2], *spec;
	uint64_t nbytes;
	unsigned group;
	int rc;

	if (ext_bind("add_group", args, nargs, kw, names, 2, 2, a) ||
	    role_group_arg(a[0], &group) ||
	    ext_arg_u64(a[1], "nbytes", SIZE_MAX, &nbytes))
		return NULL;
	spec = Py_BuildValue("((KOO))", (unsigned long long)nbytes, Py_None,
			     Py_None);
	if (!spec)
		return NULL;
	if (role_enter(r)) {
		Py_DECREF(spec);
		return NULL;
	}
	ROLE_RUN(r, rc, msg, nvs_grad_add_group(r->p, group, (size_t)nbytes));
	if (rc == 0)
		rc = role_set_spec(r, group, spec) < 0 ? 1 : 0;
	role_leave(r);
	Py_DECREF(spec);
	if (rc < 0)
		return role_raise(r, rc, msg);
	if (rc > 0)
		return NULL;
	Py_RETURN_NONE;
}

static int grad_mode(PyObject *v, enum nvs_grad_mode *out)
{
	const char *s;

	*out = NVS_GRAD_ASSIGN;
	if (!v || v == Py_None)
		return 0;
	s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
	if (s && !strcmp(s, "assign"))
		return 0;
	if (s && !strcmp(s, "accumulate_f32")) {
		*out = NVS_GRAD_ACCUMULATE_F32;
		return 0;
	}
	if (!PyErr_Occurred())
		PyErr_Format(PyExc_ValueError,
			     "GradSwapper.write: mode must be 'assign' or "
			     "'accumulate_f32', not %R",
			     v);
	return -1;
}

static PyObject *grad_write(PyObject *o, PyObject *const *args,
			    Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"group", "offset", "data", "mode",
					    NULL};
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	enum nvs_grad_mode mode;
	struct ext_buf buf;
	PyObject *a[4];
	uint64_t off;
	unsigned group;
	int rc;

	if (ext_bind("write", args, nargs, kw, names, 4, 3, a) ||
	    role_group_arg(a[0], &group) ||
	    ext_arg_u64(a[1], "offset", SIZE_MAX, &off) ||
	    grad_mode(a[3], &mode))
		return NULL;
	if (ext_buf_get(a[2], false, &buf))
		return NULL;
	if (role_enter(r)) {
		ext_buf_release(&buf);
		return NULL;
	}
	ROLE_RUN(r, rc, msg,
		 nvs_grad_write(r->p, group, (size_t)off, buf.ptr, buf.nbytes,
				mode));
	role_leave(r);
	ext_buf_release(&buf);
	if (rc < 0)
		return role_raise(r, rc, msg);
	Py_RETURN_NONE;
}

static int grad_flush_fn(void *p, unsigned g)
{
	return nvs_grad_flush(p, g);
}

static PyObject *grad_flush(PyObject *o, PyObject *arg)
{
	return group_call(o, arg, grad_flush_fn);
}

static PyObject *grad_acquire(PyObject *o, PyObject *const *args,
			      Py_ssize_t nargs, PyObject *kw)
{
	static const char *const names[] = {"group", "dtype", "shape",
					    "memoryview", NULL};
	struct ext_role *r = ROLE(o);
	char msg[NVS_ERRMSG_MAX] = "";
	const void *ptr = NULL;
	void *wptr;
	PyObject *a[4], *list, *out;
	unsigned group;
	bool mv;
	int rc;

	if (ext_bind("acquire", args, nargs, kw, names, 3, 1, a) ||
	    role_group_arg(a[0], &group) || ext_arg_bool(a[3], false, &mv) ||
	    role_enter(r))
		return NULL;
	ROLE_RUN(r, rc, msg, nvs_grad_acquire(r->p, group, &ptr));
	if (rc < 0) {
		role_leave(r);
		return role_raise(r, rc, msg);
	}
	/* lent writable only to torch, which has no read-only tensors */
	wptr = (void *)(uintptr_t)ptr;
	list = role_lend(r, group, &wptr, mv, a[1], a[2]);
	if (!list) {
		PyObject *type, *value, *tb;

		PyErr_Fetch(&type, &value, &tb);
		ROLE_RUN(r, rc, msg, nvs_grad_release(r->p, group));
		PyErr_Restore(type, value, tb);
	}
	role_leave(r);
	if (!list)
		return NULL;
	out = Py_NewRef(PyList_GET_ITEM(list, 0));
	Py_DECREF(list);
	return out;
}

static PyObject *grad_release_m(PyObject *o, PyObject *const *args,
				Py_ssize_t nargs, PyObject *kw)
{
	return release(o, "release", grad_release, false, args, nargs, kw);
}

static int grad_zero_fn(void *p, unsigned g)
{
	return nvs_grad_zero(p, g);
}

static PyObject *grad_zero(PyObject *o, PyObject *arg)
{
	return group_call(o, arg, grad_zero_fn);
}

static PyMethodDef grad_methods[] = {
	M(grad, add_group, FAST,
	  "add_group(group, nbytes) -> None\n\n"
	  "A gradient region of nbytes for group, reading as zeros until\n"
	  "written (no I/O). Raises nvswap.Error EEXIST, EINVAL (0 bytes,\n"
	  "group too large) or EFBIG (larger than buffer_size)."),
	M(grad, write, FAST,
	  "write(group, offset, data, mode='assign') -> None\n\n"
	  "Put data (a CPU torch tensor or buffer, any size and offset in\n"
	  "the region) at byte offset of group's region: mode 'assign'\n"
	  "copies, 'accumulate_f32' adds as float32 (offset and size\n"
	  "multiples of 4). The first write after a flush brings the\n"
	  "region in (read back, or zeros) and keeps it until flush();\n"
	  "that may block (GIL released). Raises nvswap.Error: ENOENT,\n"
	  "EINVAL (outside the region, unaligned accumulation), EBUSY\n"
	  "(acquired for reading), Swapper.acquire()'s errors (EDEADLK:\n"
	  "every buffer is held, e.g. by other open regions)."),
	M(grad, flush, METH_O,
	  "flush(group) -> None\n\n"
	  "Write group's region behind (returns at once; the write\n"
	  "overlaps what comes next). Nothing when nothing was written\n"
	  "since the last flush. Raises nvswap.Error ENOENT or a submit\n"
	  "error."),
	{"acquire", (PyCFunction)(void (*)(void))grad_acquire, FAST,
	 "acquire(group, dtype=None, shape=None, *, memoryview=False)\n"
	 "    -> torch.Tensor | memoryview\n\n"
	 "group's region for the optimizer step (pending writes flushed\n"
	 "first; blocks for its I/O, GIL released), as Swapper.acquire()\n"
	 "returns it. Read it only: the region is evicted clean at\n"
	 "release, so changes are dropped (a memoryview is read-only; a\n"
	 "tensor cannot be). Raises nvswap.Error as Swapper.acquire()\n"
	 "and EBUSY (already acquired)."},
	{"release", (PyCFunction)(void (*)(void))grad_release_m, FAST,
	 "release(group) -> None\n\n"
	 "End acquire(): revokes what it returned, then evicts the region.\n"
	 "Raises nvswap.Error ENOENT or EBUSY (not acquired)."},
	M(grad, zero, METH_O,
	  "zero(group) -> None\n\n"
	  "group's region reads as zeros again (a new step): no I/O, the\n"
	  "old contents are dropped. Raises nvswap.Error ENOENT or EBUSY\n"
	  "(open for writes or acquired)."),
	COMMON("GradSwapper"),
};
#undef M
#undef COMMON

/* ---- the types -------------------------------------------------------- */

static PyGetSetDef role_getset[] = {
	{"closed", role_get_closed, NULL, "True once closed.", NULL},
	{"swapper", role_get_swapper, NULL, "The Swapper under it.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

#define ROLE_TYPE(var, pyname, methods, init, doc)                             \
	static PyTypeObject var = {                                            \
		PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap." pyname,     \
		.tp_basicsize = sizeof(struct ext_role),                       \
		.tp_dealloc = role_dealloc,                                    \
		.tp_finalize = role_finalize,                                  \
		.tp_flags = Py_TPFLAGS_DEFAULT,                                \
		.tp_doc = doc,                                                 \
		.tp_weaklistoffset = offsetof(struct ext_role, weakrefs),      \
		.tp_methods = methods,                                         \
		.tp_getset = role_getset,                                      \
		.tp_init = init,                                               \
		.tp_new = role_new,                                            \
	}

#define ROLE_DOC_TAIL                                                          \
	"\n\nHolds a reference to swapper; Swapper.close() closes it\n"        \
	"first, so the C role never outlives the swapper. Its tensors\n"       \
	"are swapper ids id_base + (group << 20): roles sharing a\n"           \
	"swapper need different id_base (say 0 and 1 << 40). One call at\n"    \
	"a time: calls from several threads are serialized. A context\n"       \
	"manager: close() on exit."

ROLE_TYPE(param_type, "ParamSwapper", param_methods, param_init,
	  "ParamSwapper(swapper, lookahead=1, max_in_cpu=0, id_base=0)\n\n"
	  "Parameters walked layer by layer (nvs_param_swapper): each\n"
	  "acquire_layer() reads the next lookahead layers ahead, by\n"
	  "number in the walk's direction or along set_walk()'s order.\n"
	  "max_in_cpu: bytes of parameters (whole layers, in add order,\n"
	  "while they fit) kept in pinned CPU memory, never swapped; an\n"
	  "int or a str such as '1G'." ROLE_DOC_TAIL);
ROLE_TYPE(optim_type, "OptimizerSwapper", optim_methods, optim_init,
	  "OptimizerSwapper(swapper, pipeline_read=False,\n"
	  "                 pipeline_write=False, id_base=0)\n\n"
	  "Optimizer state per sub-group (nvs_optim_swapper):\n"
	  "swap_in(g), step, swap_out(g). pipeline_read reads group g+1\n"
	  "while g steps; pipeline_write lets g's write-back overlap the\n"
	  "next step. The full pipeline needs 3 pool buffers; fewer mean\n"
	  "less overlap, never a failure." ROLE_DOC_TAIL);
ROLE_TYPE(grad_type, "GradSwapper", grad_methods, grad_init,
	  "GradSwapper(swapper, id_base=0)\n\n"
	  "Gradients written behind during backward (write(), flush())\n"
	  "and read back for the optimizer step (acquire(), release()),\n"
	  "zeroed per step with zero() (nvs_grad_swapper)." ROLE_DOC_TAIL);

int ext_offload_init(PyObject *module)
{
	PyTypeObject *types[] = {&param_type, &optim_type, &grad_type};
	const char *names[] = {"ParamSwapper", "OptimizerSwapper",
			       "GradSwapper"};

	for (int i = 0; i < 3; i++)
		if (PyType_Ready(types[i]) < 0 ||
		    PyModule_AddObjectRef(module, names[i],
					  (PyObject *)types[i]))
			return -1;
	return 0;
}
