// SPDX-License-Identifier: MIT
/*
 * nvs_swapset_check() (nvswap-fsck): verify a persistent swap set that no
 * process has open, generation by generation, and with NVS_CHECK_REPAIR
 * remove the manifests of the generations that do not verify. A
 * placement shared by several generations is read once.
 */
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/hash.h"
#include "internal/util.h"
#include "swapper/crc32c.h"
#include "swapper/manifest.h"
#include "swapper/paths.h"
#include "swapper/space.h"
#include "swapper/swapdir.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/swapper.h"

#define CHUNK ((size_t)4 << 20)

/* A placement seen in some generation, and its data's verdict. */
struct seen {
	UT_hash_handle hh;
	uint64_t key;
	size_t nexts;
	const struct nvs_extent *ext; /* the first manifest's */
	bool read;		      /* data checked */
	int status;		      /* of that check */
	uint32_t crc;		      /* computed */
};

struct check {
	const struct nvs_swapper_opts *o;
	unsigned npaths, flags;
	struct nvs_swapdir dir[NVS_SWAPPER_MAX_PATHS];
	int fd[NVS_SWAPPER_MAX_PATHS];
	uint64_t size[NVS_SWAPPER_MAX_PATHS];
	char *real[NVS_SWAPPER_MAX_PATHS];
	struct nvs_space space[NVS_SWAPPER_MAX_PATHS];
	bool spaces;
	struct seen *seen;
	struct nvs_manifest *m; /* decoded manifests, oldest first */
	int *verdict;		/* per manifest */
	char **why;
	uint64_t *gens;
	size_t ngens;
	unsigned char *buf;
	nvs_check_fn fn;
	void *arg;
};

static void report(struct check *c, uint64_t gen, uint64_t id, uint64_t nbytes,
		   int status, bool removed, const char *what)
{
	struct nvs_check_item it = {
		.generation = gen,
		.id = id,
		.nbytes = nbytes,
		.status = status,
		.removed = removed,
		.what = what,
	};

	if (c->fn)
		c->fn(&it, c->arg);
}

/* Read @t's extents and compare their CRC32C. */
static int check_data(struct check *c, const struct nvs_mf_tensor *t,
		      uint32_t *crc, char *why, size_t cap)
{
	*crc = 0;
	for (uint32_t j = 0; j < t->nexts; j++) {
		const struct nvs_extent *e = &t->ext[j];
		for (uint64_t done = 0; done < e->len;) {
			size_t n = (size_t)NVS_MIN(CHUNK, e->len - done);
			ssize_t r =
				nvs__pio_full(c->fd[e->path], c->buf, n,
					      (off_t)(e->off + done), false);
			if (r != (ssize_t)n) {
				snprintf(why, cap,
					 "reading %" PRIu64 " bytes at %" PRIu64
					 " of %s/set.data: %s",
					 (uint64_t)n, e->off + done,
					 c->dir[e->path].path,
					 r < 0 ? nvs_strerror((int)-r)
					       : "end of file");
				return -EIO;
			}
			*crc = nvs__crc32c(*crc, c->buf, n);
			done += n;
		}
	}
	if (*crc != t->crc) {
		snprintf(why, cap,
			 "checksum mismatch (crc32c %08x, recorded %08x)", *crc,
			 t->crc);
		return -EBADMSG;
	}
	snprintf(why, cap, "ok (crc32c %08x)", *crc);
	return 0;
}

/* One tensor of generation @m: 0 or why it does not verify. */
static int check_tensor(struct check *c, const struct nvs_manifest *m,
			const struct nvs_mf_tensor *t, char *why, size_t cap)
{
	uint64_t key = t->ext[0].off | t->ext[0].path;
	struct seen *s;
	uint32_t crc;

	for (uint32_t j = 0; j < t->nexts; j++) {
		const struct nvs_extent *e = &t->ext[j];
		uint64_t end = e->off + nvs__round_up(e->len, m->align);
		if (end > c->size[e->path]) {
			snprintf(why, cap,
				 "extent %u ends at byte %" PRIu64
				 " of %s/set.data, which has %" PRIu64
				 " bytes (truncated?)",
				 j, end, c->dir[e->path].path,
				 c->size[e->path]);
			return -ERANGE;
		}
	}
	HASH_FIND(hh, c->seen, &key, sizeof(key), s);
	if (s && (s->nexts != t->nexts ||
		  memcmp(s->ext, t->ext, t->nexts * sizeof(*t->ext)))) {
		snprintf(why, cap, "its extents clash with another tensor's");
		return -EBADMSG;
	}
	if (!s) {
		if (!c->spaces) {
			for (unsigned i = 0; i < c->npaths; i++)
				nvs__space_init(&c->space[i], m->align);
			c->spaces = true;
		}
		if (nvs__space_claim(c->space, t->ext, t->nexts) < 0) {
			snprintf(why, cap,
				 "its extents overlap another tensor's");
			return -EBADMSG;
		}
		s = nvs__calloc(1, sizeof(*s));
		if (!s)
			return nvs__err(-ENOMEM,
					"nvs_swapset_check: out of memory");
		s->key = key;
		s->nexts = t->nexts;
		s->ext = t->ext;
		HASH_ADD(hh, c->seen, key, sizeof(s->key), s);
	}
	if (!t->on_disk) {
		snprintf(why, cap, "ok (never written: zeros)");
		return 0;
	}
	if (!(c->flags & NVS_CHECK_DATA)) {
		snprintf(why, cap, "extents ok (data not read)");
		return 0;
	}
	if (!s->read) {
		s->status = check_data(c, t, &crc, why, cap);
		s->crc = crc;
		s->read = true;
		return s->status;
	}
	if (s->status == 0 && s->crc != t->crc) {
		snprintf(why, cap,
			 "checksum mismatch (crc32c %08x, recorded %08x)",
			 s->crc, t->crc);
		return -EBADMSG;
	}
	if (s->status == 0)
		snprintf(why, cap, "ok (crc32c %08x, shared)", s->crc);
	else
		snprintf(why, cap, "its data failed in an older generation");
	return s->status;
}

/* Generation @k: its manifest read and every tensor checked. */
static int check_gen(struct check *c, size_t k, char *why, size_t cap)
{
	struct nvs_manifest *m = &c->m[k];
	char msg[512], where[4200];
	unsigned bad = 0;
	int ret, first = 0;

	ret = nvs__manifest_read(c->dir[0].dirfd, c->dir[0].path, c->gens[k],
				 m);
	if (ret < 0) {
		snprintf(why, cap, "%s", nvs_last_error());
		return ret;
	}
	if (m->npaths != c->npaths)
		return nvs__err(-EINVAL,
				"nvs_swapset_check: the set has %u paths, %u "
				"given",
				m->npaths, c->npaths);
	snprintf(where, sizeof(where), "%s/manifest.%020" PRIu64,
		 c->dir[0].path, c->gens[k]);
	ret = nvs__paths_match("nvs_swapset_check", where,
			       (const char *const *)m->paths,
			       (const char *const *)c->real, c->npaths);
	if (ret < 0)
		return ret;
	if (m->rank != (unsigned)c->o->rank)
		return nvs__err(-EINVAL,
				"nvs_swapset_check: %s holds a manifest of "
				"rank %u",
				c->dir[0].path, m->rank);
	for (size_t i = 0; i < m->ntensors; i++) {
		ret = check_tensor(c, m, &m->t[i], msg, sizeof(msg));
		if (ret == -ENOMEM)
			return ret;
		report(c, m->generation, m->t[i].id, m->t[i].nbytes, ret, false,
		       msg);
		if (ret < 0 && !bad++)
			first = ret;
	}
	if (bad)
		snprintf(why, cap, "%u of %zu tensors do not verify", bad,
			 m->ntensors);
	else
		snprintf(why, cap, "verifies (%zu tensors)", m->ntensors);
	return first;
}

static int open_dirs(struct check *c)
{
	const struct nvs_swapper_opts *o = c->o;
	const char *name = o->name && *o->name ? o->name : NULL;
	char p[4200];
	struct stat st;
	int ret;

	for (unsigned i = 0; i < c->npaths; i++) {
		snprintf(p, sizeof(p), "%s/nvswap/%s%srank%d", o->nvme_paths[i],
			 name ? name : "", name ? "/" : "", o->rank);
		if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
			return nvs__err(-ENOENT,
					"nvs_swapset_check: no swap set in %s",
					p);
		c->real[i] = realpath(o->nvme_paths[i], NULL);
		if (!c->real[i])
			return nvs__err(-errno, "nvs_swapset_check: %s: %s",
					o->nvme_paths[i], nvs_strerror(errno));
	}
	for (unsigned i = 0; i < c->npaths; i++) {
		ret = nvs__swapdir_open(o->nvme_paths[i], name, o->rank,
					&c->dir[i]);
		if (ret < 0)
			return ret;
		/* A FIFO planted as the data file must not block. */
		c->fd[i] = nvs__open_file(c->dir[i].dirfd, "set.data",
					  O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0,
					  &st);
		/* A missing data file (a partly copied set) judges nothing:
		 * every generation would fail, and a repair would remove
		 * the set, the intact paths' data with it. */
		if (c->fd[i] < 0 && errno == ENOENT)
			return nvs__err(-ENOENT,
					"nvs_swapset_check: %s/set.data is "
					"missing: nothing is judged (copy "
					"all of the set's paths)",
					c->dir[i].path);
		if (c->fd[i] >= 0 && !S_ISREG(st.st_mode)) {
			close(c->fd[i]);
			c->fd[i] = -1;
			return nvs__err(-EINVAL,
					"nvs_swapset_check: %s/set.data is "
					"%s, not a regular file: nothing is "
					"judged",
					c->dir[i].path,
					nvs__file_type(st.st_mode));
		}
		if (c->fd[i] >= 0)
			c->size[i] = (uint64_t)st.st_size;
	}
	ret = nvs__manifest_list(c->dir[0].dirfd, &c->gens, &c->ngens);
	if (ret < 0)
		return nvs__err(ret, "nvs_swapset_check: listing %s: %s",
				c->dir[0].path, nvs_strerror(-ret));
	if (!c->ngens)
		return nvs__err(-ENOENT,
				"nvs_swapset_check: %s holds no manifest",
				c->dir[0].path);
	/* Oldest first: shared placements are judged where they began. */
	for (size_t i = 0; i < c->ngens / 2; i++) {
		uint64_t g = c->gens[i];
		c->gens[i] = c->gens[c->ngens - 1 - i];
		c->gens[c->ngens - 1 - i] = g;
	}
	c->m = nvs__calloc(c->ngens, sizeof(*c->m));
	c->verdict = nvs__calloc(c->ngens, sizeof(*c->verdict));
	c->why = nvs__calloc(c->ngens, sizeof(*c->why));
	c->buf = nvs__malloc(CHUNK);
	if (!c->m || !c->verdict || !c->why || !c->buf)
		return nvs__err(-ENOMEM, "nvs_swapset_check: out of memory");
	return 0;
}

static void close_all(struct check *c)
{
	struct seen *s, *tmp;

	HASH_ITER(hh, c->seen, s, tmp)
	{
		HASH_DEL(c->seen, s);
		nvs__free(s);
	}
	for (size_t k = 0; c->m && k < c->ngens; k++)
		nvs__manifest_fini(&c->m[k]);
	for (size_t k = 0; c->why && k < c->ngens; k++)
		nvs__free(c->why[k]);
	nvs__free(c->m);
	nvs__free(c->verdict);
	nvs__free(c->why);
	nvs__free(c->gens);
	nvs__free(c->buf);
	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++) {
		if (c->fd[i] >= 0)
			close(c->fd[i]);
		if (c->spaces)
			nvs__space_fini(&c->space[i]);
		nvs__swapdir_close(&c->dir[i], false);
		free(c->real[i]);
	}
}

/* The repair removed every generation: what is left belongs to nothing
 * (a bare set.data would look like a set to the next listing). The
 * directories go when empty; <path>/nvswap too. */
static void remove_set(struct check *c)
{
	char top[4200];

	for (unsigned i = 0; i < c->npaths; i++) {
		if (c->dir[i].dirfd < 0)
			continue;
		unlinkat(c->dir[i].dirfd, "set.data", 0);
		nvs__swapdir_close(&c->dir[i], true);
		snprintf(top, sizeof(top), "%s/nvswap", c->o->nvme_paths[i]);
		rmdir(top);
	}
}

int nvs_swapset_check(const struct nvs_swapper_opts *o, unsigned flags,
		      nvs_check_fn fn, void *arg)
{
	struct check c = {.o = o, .flags = flags, .fn = fn, .arg = arg};
	char why[512];
	int ret = 0, bad = 0;

	for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++) {
		c.fd[i] = -1;
		c.dir[i].dirfd = c.dir[i].lockfd = -1;
	}
	if (!o || o->size != sizeof(*o) || !o->npaths ||
	    o->npaths > NVS_SWAPPER_MAX_PATHS || o->rank < 0 ||
	    (flags & ~(unsigned)(NVS_CHECK_DATA | NVS_CHECK_REPAIR)))
		return nvs__err(-EINVAL,
				"nvs_swapset_check: NULL or bad options "
				"(paths, rank) or unknown flags %#x",
				flags);
	for (unsigned i = 0; i < o->npaths; i++)
		if (!o->nvme_paths[i] || !*o->nvme_paths[i])
			return nvs__err(-EINVAL,
					"nvs_swapset_check: nvme_paths[%u] "
					"is empty",
					i);
	c.npaths = o->npaths;
	ret = open_dirs(&c);
	for (size_t k = 0; ret == 0 && k < c.ngens; k++) {
		c.verdict[k] = check_gen(&c, k, why, sizeof(why));
		if (c.verdict[k] == -EINVAL || c.verdict[k] == -ENOMEM) {
			ret = c.verdict[k];
			break;
		}
		c.why[k] = nvs__malloc(strlen(why) + 1);
		if (c.why[k])
			strcpy(c.why[k], why);
		bad += c.verdict[k] < 0;
	}
	if (ret == 0 && bad && (flags & NVS_CHECK_REPAIR)) {
		for (size_t k = 0; k < c.ngens && ret == 0; k++)
			if (c.verdict[k] < 0)
				ret = nvs__manifest_remove(c.dir[0].dirfd,
							   c.dir[0].path,
							   c.gens[k], false);
		unlinkat(c.dir[0].dirfd, NVS_MANIFEST_TMP, 0);
		if (ret == 0 && fsync(c.dir[0].dirfd) < 0)
			ret = nvs__err(-errno,
				       "nvs_swapset_check: syncing %s: %s",
				       c.dir[0].path, nvs_strerror(errno));
	}
	for (size_t k = 0; ret == 0 && k < c.ngens; k++)
		report(&c, c.gens[k], NVS_CHECK_NO_TENSOR, 0, c.verdict[k],
		       c.verdict[k] < 0 && (flags & NVS_CHECK_REPAIR),
		       c.why[k] ? c.why[k] : "");
	if (ret == 0 && bad && (size_t)bad == c.ngens &&
	    (flags & NVS_CHECK_REPAIR)) {
		remove_set(&c);
		report(&c, 0, NVS_CHECK_NO_TENSOR, 0, 0, true,
		       "no generation is left: the set's data files, locks "
		       "and empty directories were removed");
	}
	{
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		close_all(&c);
		if (ret < 0)
			nvs__err_set(ret, msg);
	}
	return ret < 0 ? ret : bad;
}
