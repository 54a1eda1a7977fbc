/* SPDX-License-Identifier: MIT */
/*
 * nvswap.Op: one submitted read or write, a future over a ticket of the C
 * handle. Also the handle's list of ops not yet collected, which gives
 * DeepNVMe's wait() its count and keeps every buffer alive until its op
 * is complete.
 */
#include "ext.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ext_handle_enter(struct ext_handle *h)
{
	if (!h->h || h->closing) {
		PyErr_SetString(PyExc_ValueError,
				"nvswap: I/O on a closed aio_handle");
		return -1;
	}
	ext_handle_hold(h);
	return 0;
}

void ext_handle_hold(struct ext_handle *h)
{
	pthread_mutex_lock(&h->mu);
	h->busy++;
	pthread_mutex_unlock(&h->mu);
}

void ext_handle_leave(struct ext_handle *h)
{
	pthread_mutex_lock(&h->mu);
	if (--h->busy == 0)
		pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

void ext_handle_quiesce(struct ext_handle *h)
{
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&h->mu);
	while (h->busy)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
	Py_END_ALLOW_THREADS
}

static void list_append(struct ext_handle *h, struct ext_op *op)
{
	op->on_list = true;
	op->prev = h->tail;
	op->next = NULL;
	if (h->tail)
		h->tail->next = op;
	else
		h->head = op;
	h->tail = op;
	h->npending++;
}

static void list_remove(struct ext_handle *h, struct ext_op *op)
{
	if (op->prev)
		op->prev->next = op->next;
	else
		h->head = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		h->tail = op->prev;
	op->prev = op->next = NULL;
	op->on_list = false;
	h->npending--;
}

/*
 * The buffered re-read behind validate=True (DeepNVMe's validate): the
 * file range must hold exactly the op's bytes. Runs without the GIL; the
 * op holds its buffer. Device memory is compared through a host copy of
 * each chunk (nvs_gpu_memcpy: the driver copies, the host never reads
 * device memory). Returns 0 or -errno with @msg written.
 */
static int validate_op(struct ext_op *op, const char *path, char *msg,
		       size_t msglen)
{
	char procfd[64], *chunk, *mine = NULL;
	const char *have;
	size_t done = 0, len = 1 << 20;
	bool dev = op->buf.device >= 0;
	int fd, rc = 0;

	if (!path) {
		/* The caller's fd may have O_DIRECT: reopen it buffered. */
		snprintf(procfd, sizeof(procfd), "/proc/self/fd/%d", op->fd);
		path = procfd;
	}
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(msg, msglen, "validate: open %s: %s", path,
			 nvs_strerror(rc));
		return rc;
	}
	chunk = malloc(len);
	if (dev)
		mine = malloc(len);
	if (!chunk || (dev && !mine)) {
		free(chunk);
		free(mine);
		close(fd);
		snprintf(msg, msglen, "validate: out of memory");
		return -ENOMEM;
	}
	while (done < op->nbytes) {
		size_t want = op->nbytes - done < len ? op->nbytes - done : len;
		ssize_t n = pread(fd, chunk, want, op->offset + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EBADMSG;
			snprintf(msg, msglen,
				 "validate: re-reading %s at offset %lld: %s",
				 path, (long long)(op->offset + (off_t)done),
				 n < 0 ? nvs_strerror(errno) : "end of file");
			break;
		}
		have = (const char *)op->buf.ptr + done;
		if (dev) {
			rc = nvs_gpu_memcpy(mine, have, (size_t)n);
			if (rc < 0) {
				snprintf(msg, msglen,
					 "validate: copying the device buffer "
					 "to the host: %s",
					 nvs_last_error());
				break;
			}
			have = mine;
		}
		if (memcmp(chunk, have, (size_t)n)) {
			size_t i = 0;

			while (chunk[i] == have[i])
				i++;
			rc = -EBADMSG;
			snprintf(msg, msglen,
				 "validate: %s differs from the buffer at "
				 "file offset %lld (%s of %zu bytes at offset "
				 "%lld)",
				 path,
				 (long long)(op->offset + (off_t)(done + i)),
				 op->opcode == NVS_AIO_READ ? "read" : "write",
				 op->nbytes, (long long)op->offset);
			break;
		}
		done += (size_t)n;
	}
	free(chunk);
	free(mine);
	close(fd);
	return rc;
}

/*
 * Record @op's outcome (GIL held): result, sentence, buffer released,
 * state DONE under the handle's mutex (waiters on other threads wake).
 */
void ext_op_describe(char *out, size_t len, int opcode, size_t nbytes,
		     const char *path, int fd, int64_t offset)
{
	char fdname[32];

	if (!path)
		snprintf(fdname, sizeof(fdname), "fd %d", fd);
	snprintf(out, len, "%s of %zu bytes %s %s at offset %lld",
		 opcode == NVS_AIO_READ ? "read" : "write", nbytes,
		 opcode == NVS_AIO_READ ? "from" : "to", path ? path : fdname,
		 (long long)offset);
}

static void finish(struct ext_handle *h, struct ext_op *op, int rc,
		   const char *msg)
{
	char smsg[NVS_ERRMSG_MAX], what[NVS_ERRMSG_MAX / 2];

	if (rc >= 0 && op->buf.storage) {
		ext_op_describe(what, sizeof(what), op->opcode, op->nbytes,
				op->path ? PyBytes_AS_STRING(op->path) : NULL,
				op->fd, op->offset);
		rc = ext_buf_settle(&op->buf, op->opcode == NVS_AIO_READ, true,
				    what, smsg, sizeof(smsg));
		if (rc < 0)
			msg = smsg;
	}
	op->result = rc;
	if (rc < 0)
		op->errmsg = strdup(msg && *msg ? msg : nvs_strerror(rc));
	ext_buf_release(&op->buf);
	Py_CLEAR(op->path);
	pthread_mutex_lock(&h->mu);
	op->state = EXT_OP_DONE;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

/*
 * Wait for @op (PENDING, GIL held) and finish it. The GIL is released for
 * the wait and the validation; meanwhile the op is CLAIMED, so no other
 * thread collects it twice.
 */
static int collect(struct ext_handle *h, struct ext_op *op)
{
	char msg[NVS_ERRMSG_MAX] = "";
	const char *path = op->path ? PyBytes_AS_STRING(op->path) : NULL;
	int rc;

	pthread_mutex_lock(&h->mu);
	op->state = EXT_OP_CLAIMED;
	pthread_mutex_unlock(&h->mu);
	Py_BEGIN_ALLOW_THREADS
	rc = nvs_aio_wait_op(h->h, op->ticket);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	else if (op->validate)
		rc = validate_op(op, path, msg, sizeof(msg));
	Py_END_ALLOW_THREADS
	finish(h, op, rc, msg);
	return op->result; /* finish() may fail a read whose tensor moved */
}

/* Sleep until @op, claimed by another thread, is DONE (GIL held). */
static void await_claimed(struct ext_handle *h, struct ext_op *op)
{
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&h->mu);
	while (op->state != EXT_OP_DONE)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
	Py_END_ALLOW_THREADS
}

/*
 * Every op slot holds a ticket nobody collected: collect the finished
 * ones now (their outcome stays in the op, which stays on the list so
 * that wait() still counts it and raises its failure). Returns how many.
 */
static unsigned reap_finished(struct ext_handle *h)
{
	unsigned n = 0;

	for (struct ext_op *op = h->head; op; op = op->next) {
		const char *path;
		char msg[NVS_ERRMSG_MAX] = "";
		int rc;

		if (op->state != EXT_OP_PENDING)
			continue;
		rc = nvs_aio_poll_op(h->h, op->ticket);
		if (rc == -EINPROGRESS)
			continue;
		if (rc < 0)
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		path = op->path ? PyBytes_AS_STRING(op->path) : NULL;
		if (rc == 0 && op->validate)
			rc = validate_op(op, path, msg, sizeof(msg));
		finish(h, op, rc, msg);
		n++;
	}
	return n;
}

struct ext_op *ext_op_submit(struct ext_handle *self, int opcode,
			     struct ext_buf *buf, PyObject *path, int fd,
			     int64_t offset, bool validate)
{
	char msg[NVS_ERRMSG_MAX] = "";
	struct nvs_aio_io io;
	struct ext_op *op;
	int rc;

	op = PyObject_New(struct ext_op, &ext_OpType);
	if (!op)
		return NULL;
	op->handle = self;
	op->prev = op->next = NULL;
	op->ticket = 0;
	op->opcode = opcode;
	op->state = EXT_OP_PENDING;
	op->result = 0;
	op->nbytes = buf->nbytes;
	op->offset = offset;
	op->buf = *buf;
	op->path = Py_XNewRef(path);
	op->fd = path ? -1 : fd;
	op->validate = validate;
	op->errmsg = NULL;
	op->on_list = false;

	io.opcode = (enum nvs_aio_opcode)opcode;
	io.buf = buf->ptr;
	io.nbytes = buf->nbytes;
	io.path = path ? PyBytes_AS_STRING(path) : NULL;
	io.fd = fd;
	io.offset = offset;
	Py_BEGIN_ALLOW_THREADS
	rc = nvs_aio_submit(self->h, &io, &op->ticket);
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	Py_END_ALLOW_THREADS
	if (rc == -EAGAIN && reap_finished(self)) {
		Py_BEGIN_ALLOW_THREADS
		rc = nvs_aio_submit(self->h, &io, &op->ticket);
		if (rc < 0)
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		Py_END_ALLOW_THREADS
	}
	if (rc < 0) {
		/* Never queued: the caller keeps its buffer. */
		memset(&op->buf, 0, sizeof(op->buf));
		op->state = EXT_OP_DONE;
		op->handle = NULL;
		Py_DECREF(op);
		return (struct ext_op *)ext_raise(rc, msg);
	}
	memset(buf, 0, sizeof(*buf));
	Py_INCREF(op); /* the list's reference */
	list_append(self, op);
	return op;
}

Py_ssize_t ext_handle_wait_all(struct ext_handle *self)
{
	Py_ssize_t count = 0;
	char *first_msg = NULL;
	int first = 0;

	while (self->head) {
		struct ext_op *op = self->head;
		int rc;

		list_remove(self, op);
		rc = op->state == EXT_OP_DONE ? op->result : collect(self, op);
		op->handle = NULL;
		count++;
		if (rc < 0 && !first) {
			first = rc;
			first_msg = op->errmsg ? strdup(op->errmsg) : NULL;
		}
		Py_DECREF(op); /* the list's reference */
	}
	if (first) {
		ext_raise(first, first_msg);
		free(first_msg);
		return -1;
	}
	return count;
}

int ext_op_wait(struct ext_op *op)
{
	struct ext_handle *h = op->handle;

	/* Not while a wait elsewhere collects it: that frees nothing of h
	 * before this call leaves. */
	if (h)
		ext_handle_hold(h);
	if (op->on_list) {
		list_remove(h, op);
		if (op->state == EXT_OP_PENDING)
			collect(h, op);
		op->handle = NULL;
		Py_DECREF(op); /* the list's reference; the caller has one */
	} else if (op->state == EXT_OP_CLAIMED && h) {
		await_claimed(h, op);
	}
	if (h)
		ext_handle_leave(h);
	if (op->result < 0) {
		ext_raise(op->result, op->errmsg);
		return -1;
	}
	return 0;
}

/* ---- the Python type ------------------------------------------------- */

static void op_dealloc(struct ext_op *op)
{
	/* Only reached once the op is off every list, i.e. complete. */
	ext_buf_release(&op->buf);
	Py_CLEAR(op->path);
	free(op->errmsg);
	PyObject_Free(op);
}

static PyObject *op_wait(struct ext_op *op, PyObject *Py_UNUSED(ignored))
{
	if (ext_op_wait(op))
		return NULL;
	return PyLong_FromSize_t(op->nbytes);
}

static PyObject *op_done(struct ext_op *op, PyObject *Py_UNUSED(ignored))
{
	struct ext_handle *h = op->handle;
	char msg[NVS_ERRMSG_MAX] = "";
	const char *path;
	int rc;

	if (op->state != EXT_OP_PENDING || !h)
		return PyBool_FromLong(op->state == EXT_OP_DONE);
	/* PENDING implies on the handle's list. */
	rc = nvs_aio_poll_op(h->h, op->ticket);
	if (rc == -EINPROGRESS)
		Py_RETURN_FALSE;
	if (rc < 0)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	list_remove(h, op);
	pthread_mutex_lock(&h->mu);
	op->state = EXT_OP_CLAIMED;
	pthread_mutex_unlock(&h->mu);
	path = op->path ? PyBytes_AS_STRING(op->path) : NULL;
	/* The op is off the list: a close on another thread while the GIL
	 * is released must not free h (its mutex) before finish(). */
	ext_handle_hold(h);
	if (rc == 0 && op->validate) {
		Py_BEGIN_ALLOW_THREADS
		rc = validate_op(op, path, msg, sizeof(msg));
		Py_END_ALLOW_THREADS
	}
	finish(h, op, rc, msg);
	op->handle = NULL;
	ext_handle_leave(h);
	Py_DECREF(op); /* the list's reference */
	Py_RETURN_TRUE;
}

static PyObject *op_repr(struct ext_op *op)
{
	static const char *states[] = {"pending", "pending", "done"};

	if (op->state == EXT_OP_DONE && op->result < 0)
		return PyUnicode_FromFormat(
			"<nvswap.Op %s of %zu bytes at offset %lld: failed "
			"(%s)>",
			op->opcode == NVS_AIO_READ ? "read" : "write",
			op->nbytes, (long long)op->offset,
			nvs_strerror(op->result));
	return PyUnicode_FromFormat(
		"<nvswap.Op %s of %zu bytes at offset %lld: %s>",
		op->opcode == NVS_AIO_READ ? "read" : "write", op->nbytes,
		(long long)op->offset, states[op->state]);
}

static PyObject *op_get_nbytes(struct ext_op *op, void *Py_UNUSED(c))
{
	return PyLong_FromSize_t(op->nbytes);
}

static PyObject *op_get_offset(struct ext_op *op, void *Py_UNUSED(c))
{
	return PyLong_FromLongLong(op->offset);
}

static PyObject *op_get_kind(struct ext_op *op, void *Py_UNUSED(c))
{
	return PyUnicode_FromString(op->opcode == NVS_AIO_READ ? "read"
							       : "write");
}

static PyMethodDef op_methods[] = {
	{"wait", (PyCFunction)op_wait, METH_NOARGS,
	 "wait() -> int\n\n"
	 "Block (without the GIL) until the op is complete; return the\n"
	 "bytes it moved. Raises nvswap.Error with the errno and sentence\n"
	 "of the failure (also when another call collected it first: the\n"
	 "outcome is kept). Calling it again returns the same outcome."},
	{"result", (PyCFunction)op_wait, METH_NOARGS,
	 "result() -> int\n\n"
	 "The same as wait(), named as concurrent.futures names it."},
	{"done", (PyCFunction)op_done, METH_NOARGS,
	 "done() -> bool\n\n"
	 "True once the op has finished (successfully or not); never\n"
	 "blocks. A finished op is collected: its buffer is released."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef op_getset[] = {
	{"nbytes", (getter)op_get_nbytes, NULL, "bytes the op moves", NULL},
	{"offset", (getter)op_get_offset, NULL, "file offset of the op", NULL},
	{"kind", (getter)op_get_kind, NULL, "'read' or 'write'", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ext_OpType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nvswap.Op",
	.tp_basicsize = sizeof(struct ext_op),
	.tp_dealloc = (destructor)op_dealloc,
	.tp_repr = (reprfunc)op_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "One submitted read or write (aio_handle.submit_read,\n"
		  "submit_write): a future. The op holds its buffer (a\n"
		  "tensor's storage too) until it is complete, so the buffer\n"
		  "may be dropped meanwhile; a read whose tensor was resized\n"
		  "or set_() elsewhere meanwhile fails with EFAULT.\n"
		  "aio_handle.wait() also collects it; its outcome stays here.",
	.tp_methods = op_methods,
	.tp_getset = op_getset,
};

int ext_op_init(PyObject *module)
{
	if (PyType_Ready(&ext_OpType) < 0)
		return -1;
	return PyModule_AddObjectRef(module, "Op", (PyObject *)&ext_OpType);
}
