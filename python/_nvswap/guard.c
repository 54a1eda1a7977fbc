/* SPDX-License-Identifier: MIT */
/*
 * A CPU tensor's memory for the length of an op (issue 34, finding 1).
 *
 * Holding the tensor is not enough: t.set_(other) points it at other
 * memory and, if nothing else holds its old storage, frees the memory
 * the op was given; t.resize_() and t.untyped_storage().resize_() free
 * it even though the storage lives on. Python cannot make a storage
 * refuse resizing (torch only lets it be asked, storage.resizable()), so:
 *
 *  - the op holds the tensor's untyped storage, which keeps its memory
 *    alive across set_();
 *  - a storage that can be resized is staged: the C library reads into
 *    (or writes from) an aligned block of nvswap's, and a read is
 *    copied into the tensor at completion, with the GIL held, once the
 *    tensor is seen to be where it was;
 *  - at completion a read whose tensor moved fails with EFAULT and puts
 *    nothing into the tensor's new memory.
 *
 * Storages that cannot be resized (nvswap's pinned tensors, frombuffer,
 * from_numpy, shared memory) are used in place: resizing them raises
 * torch's own error. Ordinary torch tensors sit 64 bytes into a page, so
 * the C handle bounced them through its own memory before this anyway:
 * staging moves that copy, it does not add one.
 *
 * The staging blocks are reused (fresh pages fault on first touch);
 * every call here runs with the GIL held, which guards the cache.
 */
#include "ext.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_ALIGN 4096
#define STAGE_ROUND ((size_t)64 << 10)
#define CACHE_BLOCKS 8
/* Up to 8 blocks, 1 GiB in all: a block of a read larger than that is
 * made for each op (its pages fault in as the disk fills them). */
#define CACHE_BYTES ((size_t)1 << 30)

static struct {
	void *p;
	size_t size;
} cache[CACHE_BLOCKS];
static unsigned ncached;
static size_t cached_bytes;

static PyObject *s_untyped_storage, *s_storage_old, *s_resizable, *s_data_ptr,
	*s_nbytes;
static int has_untyped = -1; /* torch >= 2: Tensor.untyped_storage() */

static int names(void)
{
	if (s_nbytes)
		return 0;
#define IN(var, text)                                                          \
	do {                                                                   \
		if (!var && !(var = PyUnicode_InternFromString(text)))         \
			return -1;                                             \
	} while (0)
	IN(s_untyped_storage, "untyped_storage");
	IN(s_storage_old, "_storage");
	IN(s_resizable, "resizable");
	IN(s_data_ptr, "data_ptr");
	IN(s_nbytes, "nbytes"); /* last: the set is complete */
#undef IN
	return 0;
}

static void *stage_get(size_t need, size_t *size)
{
	size_t want = (need + STAGE_ROUND - 1) / STAGE_ROUND * STAGE_ROUND;
	unsigned best = ncached;
	void *p = NULL;

	for (unsigned i = 0; i < ncached; i++)
		if (cache[i].size >= want && cache[i].size / 2 <= want &&
		    (best == ncached || cache[i].size < cache[best].size))
			best = i;
	if (best < ncached) {
		p = cache[best].p;
		*size = cache[best].size;
		cached_bytes -= cache[best].size;
		cache[best] = cache[--ncached];
		return p;
	}
	if (posix_memalign(&p, STAGE_ALIGN, want))
		return NULL;
	*size = want;
	return p;
}

static void stage_put(void *p, size_t size)
{
	if (size > CACHE_BYTES) {
		free(p);
		return;
	}
	/* Oldest first out until the block fits. */
	while (ncached == CACHE_BLOCKS || cached_bytes + size > CACHE_BYTES) {
		free(cache[0].p);
		cached_bytes -= cache[0].size;
		memmove(cache, cache + 1, --ncached * sizeof(cache[0]));
	}
	cache[ncached].p = p;
	cache[ncached++].size = size;
	cached_bytes += size;
}

/* The untyped storage of @t (new reference), or NULL with an error. */
static PyObject *storage_of(PyObject *t)
{
	if (has_untyped < 0)
		has_untyped = PyObject_HasAttr((PyObject *)Py_TYPE(t),
					       s_untyped_storage);
	return PyObject_CallMethodNoArgs(t, has_untyped ? s_untyped_storage
							: s_storage_old);
}

/* @obj.@name() as a size_t; false with an error set on failure. */
static bool call_size(PyObject *obj, PyObject *name, size_t *out)
{
	PyObject *v = PyObject_CallMethodNoArgs(obj, name);

	if (!v)
		return false;
	*out = PyLong_AsSize_t(v);
	Py_DECREF(v);
	return !(*out == (size_t)-1 && PyErr_Occurred());
}

/*
 * 1 if @b's storage can be resized, 0 if not, -1 with an error. torch
 * 1.13 cannot say (no resizable()): there only nvswap's pinned memory is
 * known to be frombuffer's, which cannot be resized; the storage's
 * data_ptr and nbytes, needed to tell, are noted in @b.
 */
static int resizable(struct ext_buf *b)
{
	PyObject *v = NULL;
	int r;

	if (has_untyped)
		v = PyObject_CallMethodNoArgs(b->storage, s_resizable);
	if (!v) {
		if (has_untyped &&
		    !PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
		if (!call_size(b->storage, s_data_ptr, &b->st_ptr) ||
		    !call_size(b->storage, s_nbytes, &b->st_nbytes))
			return -1;
		return !nvs_pinned_contains((void *)b->st_ptr, b->st_nbytes);
	}
	r = PyObject_IsTrue(v);
	Py_DECREF(v);
	return r;
}

int ext_buf_guard(struct ext_buf *b, bool read)
{
	size_t size;
	int r;

	if (!b->obj || b->has_view || b->device >= 0 || b->storage ||
	    !ext_is_tensor(b->obj))
		return 0;
	if (names())
		return -1;
	b->storage = storage_of(b->obj);
	if (!b->storage)
		return -1;
	b->t_ptr = (uintptr_t)b->ptr;
	if (b->nbytes == 0)
		return 0;
	r = resizable(b);
	if (r < 0)
		goto fail;
	if (!r)
		return 0;
	if (!b->st_nbytes && (!call_size(b->storage, s_data_ptr, &b->st_ptr) ||
			      !call_size(b->storage, s_nbytes, &b->st_nbytes)))
		goto fail;
	b->stage = stage_get(b->nbytes, &size);
	if (!b->stage) {
		PyErr_Format(PyExc_MemoryError,
			     "nvswap: no memory to stage %zu bytes for a "
			     "tensor whose storage can be resized",
			     b->nbytes);
		goto fail;
	}
	b->stage_size = size;
	b->user = b->ptr;
	if (!read) /* the write's bytes, as they are now */
		nvs_copy_mt(b->stage, b->user, b->nbytes, 0);
	b->ptr = b->stage;
	return 0;
fail:
	Py_CLEAR(b->storage);
	return -1;
}

/*
 * Does @b's tensor still use the memory it had? 1 yes, 0 no, -1 error.
 * The memory, not the shape: [t_ptr, t_ptr + nbytes) lay in the storage
 * at submit, and the same storage with the same memory and size still
 * holds it. A shape changed in place (resize_ to fewer elements, or a
 * resize_ torch refused after setting the sizes) leaves the bytes where
 * the op put them.
 */
static int in_place(const struct ext_buf *b)
{
	size_t ptr, n, hptr, hn, t_ptr;
	PyObject *cur = storage_of(b->obj);
	bool ok;

	if (!cur)
		return -1;
	/* torch >= 2.1 keeps one Python object per storage, so the held
	 * object is the common answer; another object may still be the
	 * same storage (older torch makes a new one each time). */
	if (cur != b->storage) {
		ok = call_size(cur, s_data_ptr, &ptr) &&
		     call_size(cur, s_nbytes, &n) &&
		     call_size(b->storage, s_data_ptr, &hptr) &&
		     call_size(b->storage, s_nbytes, &hn);
		Py_DECREF(cur);
		if (!ok)
			return -1;
		if (ptr != hptr || n != hn)
			return 0; /* set_() to another storage */
	} else {
		Py_DECREF(cur);
	}
	/* Only a storage that can be resized can have other memory now. */
	if (b->stage && (!call_size(b->storage, s_data_ptr, &ptr) ||
			 !call_size(b->storage, s_nbytes, &n)))
		return -1;
	if (b->stage && (ptr != b->st_ptr || n != b->st_nbytes))
		return 0;
	if (!call_size(b->obj, s_data_ptr, &t_ptr))
		return -1;
	return t_ptr == b->t_ptr;
}

int ext_buf_settle(struct ext_buf *b, bool read, bool ok, const char *what,
		   char *msg, size_t msglen)
{
	PyObject *type, *value, *tb;
	int r;

	/* A write wrote the bytes it was given: its staged copy, or the
	 * held storage's memory. Only a read has to land somewhere. */
	if (!b->storage || !read || !ok)
		return 0;
	PyErr_Fetch(&type, &value, &tb);
	r = in_place(b);
	PyErr_Clear();
	PyErr_Restore(type, value, tb);
	if (r == 1) {
		if (b->stage)
			nvs_copy_mt(b->user, b->stage, b->nbytes, 0);
		return 0;
	}
	snprintf(msg, msglen,
		 "%s: the tensor read into was resized or replaced while the "
		 "op ran (resize_(), set_() or its storage's resize_()); %s",
		 what,
		 r < 0	    ? "it could not be checked, so nothing was copied "
			      "into it"
		 : b->stage ? "the file's bytes were not copied into it"
			    : "the bytes went to the memory it had, which "
			      "the op kept alive");
	return -EFAULT;
}

void ext_buf_unguard(struct ext_buf *b)
{
	if (b->stage)
		stage_put(b->stage, b->stage_size);
	b->stage = NULL;
	b->user = NULL;
	Py_CLEAR(b->storage);
}
