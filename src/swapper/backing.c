// SPDX-License-Identifier: MIT
/*
 * File-backed tensors (see backing.h and nvswap/backing.h): adding the
 * caller's files with their identity, registering a tensor as pieces of
 * them, reading the pieces into a buffer, and telling a file changed
 * since it was added from the one added before any byte is handed out.
 */
#include "swapper/backing.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"
#include "swapper/crc32c.h"
#include "swapper/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "nvswap/offload.h"

/* The CRC32C of @f's first f->head bytes, read through the swapper's
 * handle (which stages what O_DIRECT cannot take). 0 or -errno. */
static int head_crc(struct nvs_swapper *s, const struct nvs_wfile *f,
		    uint32_t *crc)
{
	struct nvs_aio_io io = {
		.opcode = NVS_AIO_READ, .nbytes = f->head, .fd = f->fd};
	uint64_t op;
	int ret;

	*crc = 0;
	if (!f->head)
		return 0;
	io.buf = nvs__malloc(f->head);
	if (!io.buf)
		return -ENOMEM;
	ret = nvs_aio_submit(s->faio, &io, &op);
	if (ret == 0)
		ret = nvs_aio_wait_op(s->faio, op);
	if (ret >= 0) {
		*crc = nvs__crc32c(0, io.buf, f->head);
		ret = 0;
	}
	nvs__free(io.buf);
	return ret;
}

static void wfile_free(struct nvs_wfile *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	nvs__free(f->path);
	free(f->real); /* realpath()'s */
	nvs__free(f);
}

/* What both calls refuse: a NULL argument, a read-only set, a
 * persistent one. */
static int refuse(const struct nvs_swapper *s, const void *arg,
		  const char *call)
{
	if (!s || !arg)
		return nvs__err(-EINVAL, "%s: NULL argument", call);
	if (nvs__refuse_readonly(s, call) < 0)
		return -EROFS;
	if (s->pers)
		return nvs__err(-EOPNOTSUPP,
				"%s: a persistent set's manifests name no file "
				"outside it; read tensors from files in a "
				"scratch swapper",
				call);
	return 0;
}

int nvs_swapper_add_file(struct nvs_swapper *s, const char *path, uint64_t head)
{
	static const char call[] = "nvs_swapper_add_file";
	struct nvs_wfile *f;
	struct stat st;
	int ret;

	NVS__PARENT_ONLY(s, call, "swapper");
	if ((ret = refuse(s, path, call)) < 0)
		return ret;
	f = nvs__calloc(1, sizeof(*f));
	if (!f || !(f->path = nvs__malloc(strlen(path) + 1))) {
		nvs__free(f);
		return nvs__err(-ENOMEM, "%s: out of memory", call);
	}
	strcpy(f->path, path);
	f->fd = nvs__open_file(
		AT_FDCWD, path,
		O_RDONLY | O_CLOEXEC | (s->page_cache ? 0 : O_DIRECT), 0, &st);
	if (f->fd < 0 && errno == EINVAL && !s->page_cache)
		/* The filesystem refuses O_DIRECT (tmpfs): the page cache. */
		f->fd = nvs__open_file(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0,
				       &st);
	if (f->fd < 0) {
		ret = -errno;
		wfile_free(f);
		return nvs__err(ret, "%s: %s: %s", call, path,
				nvs_strerror(-ret));
	}
	if (!S_ISREG(st.st_mode)) {
		wfile_free(f);
		return nvs__err(-EINVAL, "%s: %s is %s, not a regular file",
				call, path, nvs__file_type(st.st_mode));
	}
	f->direct = (fcntl(f->fd, F_GETFL) & O_DIRECT) != 0;
	f->real = realpath(path, NULL);
	if (!f->real) {
		ret = -errno;
		wfile_free(f);
		return nvs__err(ret, "%s: %s: %s", call, path,
				nvs_strerror(-ret));
	}
	pthread_mutex_lock(&s->lock);
	if (!s->faio) {
		struct nvs_aio_opts ao = s->aio_opts;
		/* An op slot a piece, up to 64 a layer, for every buffer's
		 * read in flight (and tickets not yet collected). */
		ao.max_ops = (uint32_t)NVS_MIN(
			NVS_MAX((uint64_t)ao.max_ops,
				((uint64_t)nvs_pool_buffer_count(s->pool) + 4) *
					NVS_OFFLOAD_MAX_TENSORS),
			65536u);
		/* Half the pool, 8 to 32 MiB: what the files' unaligned
		 * tensors keep in flight. */
		uint64_t half = (uint64_t)s->buf_size *
				nvs_pool_buffer_count(s->pool) / 2;
		ao.bounce_bytes = (uint32_t)NVS_MIN(
			NVS_MAX(half, (uint64_t)8 << 20), (uint64_t)32 << 20);
		ret = nvs_aio_create(&ao, &s->faio);
		if (ret == 0)
			nvs__share_apply(s); /* its share of the disks too */
	} else {
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	if (ret < 0) {
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		wfile_free(f);
		return nvs__err(ret, "%s: %s: its reads' aio handle: %s", call,
				path, msg);
	}
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->size = (uint64_t)st.st_size;
	f->mtime = st.st_mtim;
	f->head = head;
	if (head > f->size) {
		wfile_free(f);
		return nvs__err(-EINVAL,
				"%s: %s: a head of %" PRIu64
				" bytes, beyond its %" PRIu64,
				call, path, head, (uint64_t)st.st_size);
	}
	if ((ret = head_crc(s, f, &f->head_crc)) < 0) {
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		wfile_free(f);
		return nvs__err(
			ret, "%s: %s: reading its first %" PRIu64 " bytes: %s",
			call, path, head,
			ret == -ENOMEM ? "out of memory" : msg);
	}
	pthread_mutex_lock(&s->lock);
	if (!s->files)
		/* Fixed once made: readers index it without the lock. */
		s->files =
			nvs__calloc(NVS_SWAPPER_MAX_FILES, sizeof(*s->files));
	if (!s->files || s->nfiles == NVS_SWAPPER_MAX_FILES) {
		ret = s->files ? -EMFILE : -ENOMEM;
		pthread_mutex_unlock(&s->lock);
		wfile_free(f);
		return nvs__err(ret, "%s: %s: %s", call, path,
				ret == -ENOMEM ? "out of memory"
					       : "NVS_SWAPPER_MAX_FILES files "
						 "added already");
	}
	s->files[s->nfiles] = f;
	ret = (int)s->nfiles++;
	pthread_mutex_unlock(&s->lock);
	return ret;
}

static int by_at(const void *a, const void *b)
{
	const struct nvs_file_piece *x = a, *y = b;

	return x->at < y->at ? -1 : x->at > y->at;
}

/* Each piece of @p (the caller's order) against the files and @nbytes.
 * Lock held (the files). */
static int check_pieces(const struct nvs_swapper *s, uint64_t id, size_t nbytes,
			const struct nvs_file_piece *p, size_t n)
{
	static const char call[] = "nvs_swapper_register_file";

	for (size_t i = 0; i < n; i++) {
		const char *why = NULL;
		if (p[i].file >= s->nfiles)
			why = "names no added file";
		else if (p[i].reserved)
			why = "has a non-zero reserved field";
		else if (!p[i].length)
			why = "is empty";
		else if (p[i].at > nbytes || p[i].length > nbytes - p[i].at)
			why = "ends beyond the tensor";
		else if (p[i].offset > s->files[p[i].file]->size ||
			 p[i].length > s->files[p[i].file]->size - p[i].offset)
			why = "ends beyond its file";
		if (why)
			return nvs__err(-EINVAL,
					"%s: tensor %" PRIu64 " (%zu bytes): "
					"piece %zu (file %u, offset %" PRIu64
					", %" PRIu64 " bytes, at %" PRIu64
					") %s",
					call, id, nbytes, i, p[i].file,
					p[i].offset, p[i].length, p[i].at, why);
	}
	return 0;
}

int nvs_swapper_register_file(struct nvs_swapper *s, uint64_t id, size_t nbytes,
			      const struct nvs_file_piece *pieces, size_t n)
{
	static const char call[] = "nvs_swapper_register_file";
	struct nvs_backing *bk;
	struct tensor *t;
	int ret;

	NVS__PARENT_ONLY(s, call, "swapper");
	if ((ret = refuse(s, pieces, call)) < 0)
		return ret;
	if (!n || n > NVS_FILE_PIECES_MAX)
		return nvs__err(-EINVAL,
				"%s: tensor %" PRIu64 ": %zu pieces "
				"(1 to %u)",
				call, id, n, NVS_FILE_PIECES_MAX);
	bk = nvs__calloc(1, sizeof(*bk) + n * sizeof(*bk->p));
	if (!bk || !(bk->tickets = nvs__calloc(n, sizeof(*bk->tickets)))) {
		nvs__free(bk);
		return nvs__err(-ENOMEM, "%s: out of memory", call);
	}
	bk->n = n;
	memcpy(bk->p, pieces, n * sizeof(*pieces));
	for (size_t i = 0; i < n; i++)
		bk->bytes += pieces[i].length;
	qsort(bk->p, n, sizeof(*bk->p), by_at);
	pthread_mutex_lock(&s->lock);
	ret = check_pieces(s, id, nbytes, pieces, n);
	for (size_t i = 1; ret == 0 && i < n; i++)
		if (bk->p[i].at < bk->p[i - 1].at + bk->p[i - 1].length)
			ret = nvs__err(-EINVAL,
				       "%s: tensor %" PRIu64 ": the pieces at "
				       "%" PRIu64 " and %" PRIu64 " overlap",
				       call, id, bk->p[i - 1].at, bk->p[i].at);
	if (ret == 0)
		ret = nvs__tensor_add(s, id, nbytes, call, &t);
	if (ret == 0) {
		t->bk = bk;
		t->backed = true;
		bk = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	nvs__backing_free(bk);
	return ret;
}

int nvs__backing_submit(struct nvs_swapper *s, struct tensor *t, void *buf,
			size_t *n)
{
	struct nvs_backing *bk = t->bk;
	uint64_t end = 0;
	int ret = 0;

	for (size_t i = 0; i < bk->n; i++) {
		if (bk->p[i].at > end)
			memset((char *)buf + end, 0, bk->p[i].at - end);
		end = bk->p[i].at + bk->p[i].length;
	}
	if (end < t->nbytes)
		memset((char *)buf + end, 0, t->nbytes - end);
	bk->saved = t->tickets;
	t->tickets = bk->tickets;
	t->from_file = true;
	*n = 0;
	for (size_t i = 0; i < bk->n; i++) {
		const struct nvs_file_piece *p = &bk->p[i];
		const struct nvs_wfile *f = s->files[p->file];
		struct nvs_aio_io io = {
			.opcode = NVS_AIO_READ,
			.buf = (char *)buf + p->at,
			.nbytes = p->length,
			.fd = f->fd,
			.offset = (int64_t)p->offset,
		};
		ret = nvs_aio_submit(s->faio, &io, &bk->tickets[i]);
		if (ret < 0) {
			nvs__backing_failed(s, t, i, ret);
			break;
		}
		(*n)++;
	}
	s->st.io_ops += *n;
	return ret;
}

int nvs__backing_failed(const struct nvs_swapper *s, const struct tensor *t,
			size_t i, int err)
{
	const struct nvs_file_piece *p = &t->bk->p[i];

	return nvs__err(err,
			"nvswap: tensor %" PRIu64 ": reading %" PRIu64
			" bytes from %s at offset %" PRIu64 " failed: %s",
			t->id, p->length, s->files[p->file]->path, p->offset,
			nvs_strerror(-err));
}

/* How @f differs from what it was when added, into @why; false when it
 * does not (as far as its metadata tells). */
static bool changed(const struct nvs_wfile *f, char *why, size_t len)
{
	struct stat now, named;
	int gone = stat(f->real, &named) < 0 ? errno : 0;

	if (fstat(f->fd, &now) < 0)
		snprintf(why, len, "fstat: %s", nvs_strerror(errno));
	else if (gone == ENOENT)
		snprintf(why, len, "deleted");
	else if (gone)
		snprintf(why, len, "its path: %s", nvs_strerror(gone));
	else if (named.st_dev != f->dev || named.st_ino != f->ino)
		snprintf(why, len, "replaced by another file");
	else if ((uint64_t)now.st_size != f->size)
		snprintf(why, len,
			 "%" PRIu64 " bytes when added, %" PRIu64 " now",
			 f->size, (uint64_t)now.st_size);
	else if (now.st_mtim.tv_sec != f->mtime.tv_sec ||
		 now.st_mtim.tv_nsec != f->mtime.tv_nsec)
		snprintf(why, len, "modified since it was added (mtime)");
	else
		return false;
	return true;
}

int nvs__backing_check(struct nvs_swapper *s, struct tensor *t, int err)
{
	const struct nvs_backing *bk = t->bk;
	char why[160], msg[NVS_ERRMSG_MAX] = "";
	uint32_t crc;

	if (err)
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	for (size_t i = 0; i < bk->n; i++) {
		const struct nvs_wfile *f = s->files[bk->p[i].file];
		bool seen = false, moved;
		/* Each file once. */
		for (size_t j = 0; j < i; j++)
			seen |= bk->p[j].file == bk->p[i].file;
		if (seen)
			continue;
		moved = changed(f, why, sizeof(why));
		if (!moved && err && f->head && head_crc(s, f, &crc) == 0 &&
		    crc != f->head_crc) {
			snprintf(why, sizeof(why),
				 "its first %" PRIu64 " bytes differ", f->head);
			moved = true;
		}
		if (moved)
			return nvs__err(-ESTALE,
					"nvswap: tensor %" PRIu64
					": %s changed "
					"(%s): its bytes were not handed out",
					t->id, f->path, why);
	}
	if (err)
		nvs__err_set(err, msg);
	return err;
}

void nvs__backing_done(struct tensor *t)
{
	if (!t->from_file)
		return;
	t->tickets = t->bk->saved;
	t->from_file = false;
}

void nvs__backing_free(struct nvs_backing *bk)
{
	if (!bk)
		return;
	nvs__free(bk->tickets);
	nvs__free(bk);
}

void nvs__files_close(struct nvs_swapper *s)
{
	for (unsigned i = 0; i < s->nfiles; i++)
		wfile_free(s->files[i]);
	nvs__free(s->files);
	s->files = NULL;
	s->nfiles = 0;
}
