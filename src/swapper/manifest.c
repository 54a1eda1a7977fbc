// SPDX-License-Identifier: MIT
/*
 * The manifest of a persistent swap set (see manifest.h): encoding,
 * decoding with every field checked, and writing it so that a crash at any
 * point leaves the previous file or the new one, never a mix.
 *
 * Layout, little-endian:
 *   "NVSWAPMF" u32 version u32 flags(0) u64 generation i64 time_ns
 *   u8[16] set id, u32 rank, u32 npaths, u64 stripe, u64 align,
 *   str name, str tag, npaths x (str path, u64 file size),
 *   u64 ntensors, ntensors x (u64 id, u64 nbytes, u32 crc, u8 on_disk,
 *   u16 taglen, tag bytes, u32 nexts, nexts x (u32 path, u64 tensor_off,
 *   u64 off, u64 len)),
 *   u32 CRC32C of everything before it.
 * str = u16 length + bytes (no NUL).
 */
#include "swapper/manifest.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"
#include "swapper/crc32c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'N', 'V', 'S', 'W', 'A', 'P', 'M', 'F'};

void nvs__manifest_fini(struct nvs_manifest *m)
{
	for (size_t i = 0; i < m->ntensors; i++) {
		nvs__free(m->t[i].tag);
		nvs__free(m->t[i].ext);
	}
	nvs__free(m->t);
	nvs__free(m->name);
	nvs__free(m->tag);
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++)
		nvs__free(m->paths[i]);
	memset(m, 0, sizeof(*m));
}

void nvs__manifest_name(uint64_t gen, char *buf, size_t cap)
{
	snprintf(buf, cap, NVS_MANIFEST_PREFIX "%020" PRIu64, gen);
}

/* ---- encoding ---- */

struct wbuf {
	uint8_t *p;
	size_t n, cap;
	bool oom;
};

static void put(struct wbuf *w, const void *src, size_t n)
{
	if (w->oom || !n)
		return;
	if (!nvs__reserve(&w->p, &w->cap, w->n, w->n + n, 1)) {
		w->oom = true;
		return;
	}
	memcpy(w->p + w->n, src, n);
	w->n += n;
}

static void put_le(struct wbuf *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];

	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, bytes);
}

static void put_str(struct wbuf *w, const char *s)
{
	size_t n = s ? strnlen(s, UINT16_MAX) : 0;

	put_le(w, n, 2);
	put(w, s, n);
}

int nvs__manifest_encode(const struct nvs_manifest *m, uint8_t **out,
			 size_t *len)
{
	struct wbuf w = {0};

	put(&w, MAGIC, sizeof(MAGIC));
	put_le(&w, m->version, 4);
	put_le(&w, 0, 4);
	put_le(&w, m->generation, 8);
	put_le(&w, (uint64_t)m->time_ns, 8);
	put(&w, m->set_id, sizeof(m->set_id));
	put_le(&w, m->rank, 4);
	put_le(&w, m->npaths, 4);
	put_le(&w, m->stripe, 8);
	put_le(&w, m->align, 8);
	put_str(&w, m->name);
	put_str(&w, m->tag);
	for (unsigned i = 0; i < m->npaths; i++) {
		put_str(&w, m->paths[i]);
		put_le(&w, m->file_size[i], 8);
	}
	put_le(&w, m->ntensors, 8);
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nvs_mf_tensor *t = &m->t[i];
		put_le(&w, t->id, 8);
		put_le(&w, t->nbytes, 8);
		put_le(&w, t->crc, 4);
		put_le(&w, t->on_disk, 1);
		put_le(&w, t->taglen, 2);
		put(&w, t->tag, t->taglen);
		put_le(&w, t->nexts, 4);
		for (uint32_t j = 0; j < t->nexts; j++) {
			put_le(&w, t->ext[j].path, 4);
			put_le(&w, t->ext[j].tensor_off, 8);
			put_le(&w, t->ext[j].off, 8);
			put_le(&w, t->ext[j].len, 8);
		}
	}
	if (!w.oom)
		put_le(&w, nvs__crc32c(0, w.p, w.n), 4);
	if (w.oom) {
		nvs__free(w.p);
		return nvs__err(-ENOMEM, "nvswap: manifest: out of memory");
	}
	*out = w.p;
	*len = w.n;
	return 0;
}

/* ---- decoding ---- */

struct rbuf {
	const uint8_t *p;
	size_t n, at;
	bool short_;
};

static const uint8_t *take(struct rbuf *r, size_t n)
{
	const uint8_t *p;

	if (r->short_ || n > r->n - r->at) {
		r->short_ = true;
		return NULL;
	}
	p = r->p + r->at;
	r->at += n;
	return p;
}

static uint64_t get_le(struct rbuf *r, unsigned bytes)
{
	const uint8_t *b = take(r, bytes);
	uint64_t v = 0;

	if (!b)
		return 0;
	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

/* A new NUL-terminated copy of a str field; NULL when short or OOM
 * (*@oom then says which). */
static char *get_str(struct rbuf *r, bool *oom)
{
	size_t n = (size_t)get_le(r, 2);
	const uint8_t *b = take(r, n);
	char *s;

	if (!b)
		return NULL;
	if (memchr(b, '\0', n)) {
		r->short_ = true; /* not a string: corrupt */
		return NULL;
	}
	s = nvs__malloc(n + 1);
	if (!s) {
		*oom = true;
		return NULL;
	}
	memcpy(s, b, n);
	s[n] = '\0';
	return s;
}

static int bad(struct nvs_manifest *m, const char *what, const char *why)
{
	nvs__manifest_fini(m);
	return nvs__err(-EBADMSG, "nvswap: manifest %s: %s", what, why);
}

static int decode_tensor(struct rbuf *r, struct nvs_mf_tensor *t,
			 const struct nvs_manifest *m, bool *oom,
			 const char **why)
{
	uint64_t covered = 0;

	t->id = get_le(r, 8);
	t->nbytes = get_le(r, 8);
	t->crc = (uint32_t)get_le(r, 4);
	t->on_disk = get_le(r, 1) != 0;
	t->taglen = (uint16_t)get_le(r, 2);
	if (t->taglen) {
		const uint8_t *b = take(r, t->taglen);
		if (!b)
			return -1;
		t->tag = nvs__malloc(t->taglen);
		if (!t->tag) {
			*oom = true;
			return -1;
		}
		memcpy(t->tag, b, t->taglen);
	}
	t->nexts = (uint32_t)get_le(r, 4);
	if (r->short_)
		return -1;
	if (!t->nbytes || t->nbytes > (1ull << 62) || !t->nexts ||
	    t->nexts > (1u << 20) || (size_t)t->nexts * 28 > r->n - r->at) {
		*why = "a tensor with no bytes or a bad extent count";
		return -1;
	}
	t->ext = nvs__calloc(t->nexts, sizeof(*t->ext));
	if (!t->ext) {
		*oom = true;
		return -1;
	}
	for (uint32_t j = 0; j < t->nexts; j++) {
		struct nvs_extent *e = &t->ext[j];
		e->path = (unsigned)get_le(r, 4);
		e->tensor_off = get_le(r, 8);
		e->off = get_le(r, 8);
		e->len = get_le(r, 8);
		if (e->path >= m->npaths || !e->len || e->off % m->align ||
		    e->tensor_off != covered || e->len > t->nbytes - covered ||
		    e->off > (1ull << 62) - e->len) {
			*why = "an extent out of range (path, offset, length "
			       "or order)";
			return -1;
		}
		covered += e->len;
	}
	if (covered != t->nbytes) {
		*why = "a tensor whose extents do not cover its bytes";
		return -1;
	}
	return 0;
}

int nvs__manifest_decode(const uint8_t *buf, size_t len, const char *what,
			 struct nvs_manifest *m)
{
	struct rbuf r = {.p = buf, .n = len};
	const char *why = NULL;
	uint32_t crc, want;
	bool oom = false;
	char msg[160];

	memset(m, 0, sizeof(*m));
	if (len < sizeof(MAGIC) + 8 + 4 || memcmp(buf, MAGIC, sizeof(MAGIC)))
		return bad(m, what,
			   "not an nvswap manifest (bad magic or "
			   "too short)");
	r.at = sizeof(MAGIC);
	m->version = (uint32_t)get_le(&r, 4);
	if (m->version == 0 || m->version > NVS_MANIFEST_VERSION)
		return nvs__err(-ENOTSUP,
				"nvswap: manifest %s: format version %u; this "
				"nvswap reads versions 1 to %u (written by a "
				"newer nvswap?)",
				what, m->version, NVS_MANIFEST_VERSION);
	want = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 |
	       (uint32_t)buf[len - 2] << 16 | (uint32_t)buf[len - 1] << 24;
	crc = nvs__crc32c(0, buf, len - 4);
	if (crc != want) {
		snprintf(msg, sizeof(msg),
			 "checksum mismatch (crc32c %08x, recorded %08x): torn "
			 "or corrupted",
			 crc, want);
		return bad(m, what, msg);
	}
	r.n = len - 4;
	(void)get_le(&r, 4); /* flags */
	m->generation = get_le(&r, 8);
	m->time_ns = (int64_t)get_le(&r, 8);
	{
		const uint8_t *id = take(&r, sizeof(m->set_id));
		if (id)
			memcpy(m->set_id, id, sizeof(m->set_id));
	}
	m->rank = (uint32_t)get_le(&r, 4);
	m->npaths = (uint32_t)get_le(&r, 4);
	m->stripe = get_le(&r, 8);
	m->align = get_le(&r, 8);
	if (r.short_)
		return bad(m, what, "truncated header");
	if (!m->npaths || m->npaths > NVS_SWAPPER_MAX_PATHS || !m->align ||
	    (m->align & (m->align - 1)) || !m->stripe || m->stripe % m->align ||
	    !m->generation)
		return bad(m, what,
			   "a header field out of range (paths, alignment, "
			   "stripe or generation)");
	m->name = get_str(&r, &oom);
	m->tag = m->name ? get_str(&r, &oom) : NULL;
	for (unsigned i = 0; m->tag && i < m->npaths; i++) {
		m->paths[i] = get_str(&r, &oom);
		if (!m->paths[i])
			break;
		m->file_size[i] = get_le(&r, 8);
	}
	m->ntensors = (size_t)get_le(&r, 8);
	if (oom)
		goto oom;
	if (r.short_)
		return bad(m, what, "truncated header");
	/* Each tensor takes at least 27 + 28 bytes. */
	if (m->ntensors > (r.n - r.at) / 55)
		return bad(m, what, "more tensors than the file can hold");
	if (m->ntensors) {
		m->t = nvs__calloc(m->ntensors, sizeof(*m->t));
		if (!m->t)
			goto oom;
	}
	for (size_t i = 0; i < m->ntensors; i++) {
		if (decode_tensor(&r, &m->t[i], m, &oom, &why) < 0) {
			if (oom)
				goto oom;
			if (!why)
				why = "truncated tensor table";
			snprintf(msg, sizeof(msg), "tensor #%zu: %s", i, why);
			return bad(m, what, msg);
		}
		for (size_t j = 0; j < i; j++)
			if (m->t[j].id == m->t[i].id) {
				snprintf(msg, sizeof(msg),
					 "tensor %" PRIu64 " listed twice",
					 m->t[i].id);
				return bad(m, what, msg);
			}
	}
	if (r.at != r.n)
		return bad(m, what, "bytes after the tensor table");
	return 0;
oom:
	nvs__manifest_fini(m);
	return nvs__err(-ENOMEM, "nvswap: manifest %s: out of memory", what);
}

/* ---- files ---- */

int nvs__manifest_write(int dirfd, const char *dir,
			const struct nvs_manifest *m)
{
	char name[64];
	struct stat st;
	uint8_t *buf;
	size_t len;
	int fd, ret;

	ret = nvs__manifest_encode(m, &buf, &len);
	if (ret < 0)
		return ret;
	nvs__manifest_name(m->generation, name, sizeof(name));
	/* A FIFO planted at the temporary name must neither block the
	 * open (no reader) nor take the manifest (a reader). */
	fd = nvs__open_file(dirfd, NVS_MANIFEST_TMP,
			    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
				    O_CLOEXEC,
			    0600, &st);
	if (fd < 0 && !st.st_mode) {
		ret = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		nvs__free(buf);
		return nvs__err(-EINVAL,
				"nvswap: writing manifest %s/%s: "
				"%s/" NVS_MANIFEST_TMP " is %s, not a "
				"regular file",
				dir, name, dir, nvs__file_type(st.st_mode));
	}
	{
		ssize_t w = nvs__pio_full(fd, buf, len, 0, true);
		ret = w < 0 ? (int)w : fsync(fd) < 0 ? -errno : 0;
	}
	if (ret < 0) {
		close(fd);
		unlinkat(dirfd, NVS_MANIFEST_TMP, 0);
		goto out;
	}
	close(fd);
	if (renameat(dirfd, NVS_MANIFEST_TMP, dirfd, name) < 0) {
		ret = -errno;
		unlinkat(dirfd, NVS_MANIFEST_TMP, 0);
		goto out;
	}
	if (fsync(dirfd) < 0)
		ret = -errno;
out:
	nvs__free(buf);
	if (ret < 0)
		return nvs__err(ret, "nvswap: writing manifest %s/%s: %s", dir,
				name, nvs_strerror(-ret));
	return 0;
}

int nvs__manifest_read(int dirfd, const char *dir, uint64_t gen,
		       struct nvs_manifest *m)
{
	char name[64], what[4200];
	struct stat st;
	uint8_t *buf;
	int fd, ret;

	memset(m, 0, sizeof(*m));
	nvs__manifest_name(gen, name, sizeof(name));
	snprintf(what, sizeof(what), "%s/%s", dir, name);
	/* A FIFO planted as a manifest must not block the open. */
	fd = nvs__open_file(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0,
			    &st);
	if (fd < 0)
		return nvs__err(-errno, "nvswap: manifest %s: %s", what,
				nvs_strerror(errno));
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return nvs__err(-EBADMSG,
				"nvswap: manifest %s: is %s, not a regular "
				"file",
				what, nvs__file_type(st.st_mode));
	}
	if ((uint64_t)st.st_size > NVS_MANIFEST_MAX) {
		close(fd);
		return nvs__err(-EFBIG, "nvswap: manifest %s: too large", what);
	}
	buf = nvs__malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return nvs__err(-ENOMEM, "nvswap: manifest %s: out of memory",
				what);
	}
	{
		ssize_t r =
			nvs__pio_full(fd, buf, (size_t)st.st_size, 0, false);
		ret = r < 0 ? (int)r : r != st.st_size ? -EIO : 0;
	}
	if (ret < 0) {
		close(fd);
		nvs__free(buf);
		return nvs__err(ret, "nvswap: reading manifest %s: %s", what,
				nvs_strerror(-ret));
	}
	close(fd);
	ret = nvs__manifest_decode(buf, (size_t)st.st_size, what, m);
	nvs__free(buf);
	if (ret == 0 && m->generation != gen) {
		uint64_t inside = m->generation; /* fini clears it */

		nvs__manifest_fini(m);
		return nvs__err(-EBADMSG,
				"nvswap: manifest %s: names generation "
				"%" PRIu64 " inside",
				what, inside);
	}
	return ret;
}

static int newest_first(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

int nvs__manifest_list(int dirfd, uint64_t **gens, size_t *n)
{
	size_t cap = 0;
	struct dirent *e;
	int fd;
	DIR *d;

	*gens = NULL;
	*n = 0;
	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((e = readdir(d))) {
		const char *p = e->d_name + strlen(NVS_MANIFEST_PREFIX);
		char *end;
		uint64_t g;

		if (strncmp(e->d_name, NVS_MANIFEST_PREFIX,
			    strlen(NVS_MANIFEST_PREFIX)) ||
		    strlen(p) != 20 || *p < '0' || *p > '9')
			continue;
		errno = 0;
		g = strtoull(p, &end, 10);
		if (*end || errno || !g)
			continue;
		if (!nvs__reserve(gens, &cap, *n, *n + 1, sizeof(**gens))) {
			closedir(d);
			nvs__free(*gens);
			*gens = NULL;
			*n = 0;
			return -ENOMEM;
		}
		(*gens)[(*n)++] = g;
	}
	closedir(d);
	if (*n)
		qsort(*gens, *n, sizeof(**gens), newest_first);
	return 0;
}

int nvs__manifest_remove(int dirfd, const char *dir, uint64_t gen, bool sync)
{
	char name[64];

	nvs__manifest_name(gen, name, sizeof(name));
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
		return nvs__err(-errno, "nvswap: removing %s/%s: %s", dir, name,
				nvs_strerror(errno));
	if (sync && fsync(dirfd) < 0)
		return nvs__err(-errno, "nvswap: syncing %s: %s", dir,
				nvs_strerror(errno));
	return 0;
}
