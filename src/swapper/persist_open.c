// SPDX-License-Identifier: MIT
/*
 * Opening a persistent swap set (see persist.h): the data files, the kept
 * manifests read and checked against the options (layout, rank, paths),
 * and the placements and registry rebuilt from them without reading any
 * tensor data. Also the scratch side's refusal to open a directory that
 * holds a persistent set.
 */
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"
#include "swapper/io.h"
#include "swapper/manifest.h"
#include "swapper/paths.h"
#include "swapper/persist.h"
#include "swapper/registry.h"
#include "swapper/space.h"
#include "swapper/swapper_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Append to @buf the ranks beside @dir (…/rank<R>) whose directories
 * hold manifests, for RESUME's -ENOENT. */
static void ranks_with_sets(const char *dir, char *buf, size_t cap)
{
	char parent[4096];
	struct dirent *e;
	size_t used = strlen(buf);
	char *slash;
	DIR *d;

	snprintf(parent, sizeof(parent), "%s", dir);
	slash = strrchr(parent, '/');
	if (!slash)
		return;
	*slash = '\0';
	d = opendir(parent);
	if (!d)
		return;
	while ((e = readdir(d)) && used + 40 < cap) {
		uint64_t *gens = NULL;
		size_t n = 0;
		int fd;

		if (strncmp(e->d_name, "rank", 4))
			continue;
		fd = openat(dirfd(d), e->d_name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (nvs__manifest_list(fd, &gens, &n) == 0 && n)
			used += (size_t)snprintf(buf + used, cap - used, " %s",
						 e->d_name);
		nvs__free(gens);
		close(fd);
	}
	closedir(d);
}

static int refuse_scratch(const struct nvs_swapper *s)
{
	for (unsigned i = 0; i < s->npaths; i++) {
		uint64_t *gens = NULL;
		size_t n = 0;

		nvs__manifest_list(s->path[i].dir.dirfd, &gens, &n);
		nvs__free(gens);
		if (n)
			return nvs__err(-EEXIST,
					"nvs_swapper_create: %s holds a "
					"persistent swap set (%zu manifests): "
					"open it with persist \"persistent\", "
					"or remove the directory to use it "
					"as scratch space",
					s->path[i].dir.path, n);
	}
	return 0;
}

/* Whether manifest @m fits the options; -EINVAL naming the difference. */
static int check_layout(const struct nvs_swapper *s, const struct nvs_pset *p,
			const struct nvs_manifest *m, const char *where)
{
	int ret;

	if (m->rank != p->rank)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: %s is a manifest of rank "
				"%u, opened as rank %u",
				where, m->rank, p->rank);
	if (strcmp(m->name, p->name))
		return nvs__err(-EINVAL,
				"nvs_swapper_create: %s is a manifest of set "
				"\"%s\", opened as \"%s\"",
				where, m->name, p->name);
	if (m->npaths != s->npaths)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: the set in %s has %u "
				"paths, opened with %u",
				where, m->npaths, s->npaths);
	ret = nvs__paths_match("nvs_swapper_create", where,
			       (const char *const *)m->paths,
			       (const char *const *)p->real, s->npaths);
	if (ret < 0)
		return ret;
	if (m->stripe != s->stripe)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: the set in %s has "
				"stripe_size %" PRIu64 ", opened with %" PRIu64,
				where, m->stripe, s->stripe);
	if (m->align < s->align)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: the set in %s was laid "
				"out for %" PRIu64 "-byte alignment; its "
				"paths now need %" PRIu64,
				where, m->align, s->align);
	return 0;
}

/* Read every kept manifest of path 0 into p->gens (oldest first). */
static int read_manifests(struct nvs_swapper *s, struct nvs_pset *p,
			  const uint64_t *gens, size_t n)
{
	const char *dir = s->path[0].dir.path;
	char where[4200];
	int ret;

	p->gens = nvs__calloc(n, sizeof(*p->gens));
	if (!p->gens)
		return nvs__err(-ENOMEM, "nvs_swapper_create: out of memory");
	p->capgens = n;
	for (size_t k = n; k-- > 0;) {
		struct nvs_manifest *m = &p->gens[p->ngens];
		char name[64];

		ret = nvs__manifest_read(s->path[0].dir.dirfd, dir, gens[k], m);
		if (ret < 0)
			return ret;
		p->ngens++;
		nvs__manifest_name(gens[k], name, sizeof(name));
		snprintf(where, sizeof(where), "%s/%s", dir, name);
		ret = check_layout(s, p, m, where);
		if (ret < 0)
			return ret;
		if (memcmp(m->set_id, p->gens[0].set_id, sizeof(m->set_id)))
			return nvs__err(
				-EBADMSG,
				"nvs_swapper_create: %s belongs to "
				"another set than %s/manifest.%020" PRIu64,
				where, dir, gens[n - 1]);
	}
	return 0;
}

int nvs__persist_open(struct nvs_swapper *s, const struct nvs_swapper_opts *o)
{
	uint64_t *gens = NULL;
	struct nvs_pset *p;
	size_t n = 0;
	int ret;

	if (o->persist > NVS_PERSIST_READONLY)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: persist %u (0 scratch, 1 "
				"persistent, 2 resume, 3 readonly)",
				o->persist);
	if (o->persist == NVS_PERSIST_SCRATCH)
		return refuse_scratch(s);
	if (o->keep_generations > NVS_KEEP_GENERATIONS_MAX)
		return nvs__err(-EINVAL,
				"nvs_swapper_create: keep_generations %u "
				"(1 to %u)",
				o->keep_generations, NVS_KEEP_GENERATIONS_MAX);
	p = nvs__calloc(1, sizeof(*p));
	if (!p)
		return nvs__err(-ENOMEM, "nvs_swapper_create: out of memory");
	pthread_mutex_init(&p->ckpt, NULL);
	s->pers = p;
	s->checksum = true;
	p->rank = (unsigned)o->rank;
	p->keep = o->keep_generations ? o->keep_generations : 2;
	p->name = nvs__malloc(strlen(o->name ? o->name : "") + 1);
	if (!p->name)
		return nvs__err(-ENOMEM, "nvs_swapper_create: out of memory");
	strcpy(p->name, o->name ? o->name : "");
	for (unsigned i = 0; i < s->npaths; i++) {
		p->real[i] = realpath(o->nvme_paths[i], NULL);
		if (!p->real[i])
			return nvs__err(-errno, "nvs_swapper_create: %s: %s",
					o->nvme_paths[i], nvs_strerror(errno));
	}
	for (unsigned i = 0; i < s->npaths; i++) {
		ret = nvs__paths_record((const char *const *)p->real, i,
					&p->rec[i]);
		if (ret < 0)
			return ret == -ENOMEM
				       ? nvs__err(ret, "nvs_swapper_create: "
						       "out of memory")
				       : ret;
	}
	for (unsigned i = 1; i < s->npaths; i++) {
		ret = nvs__manifest_list(s->path[i].dir.dirfd, &gens, &n);
		nvs__free(gens);
		if (ret == 0 && n)
			return nvs__err(-EINVAL,
					"nvs_swapper_create: %s holds the "
					"manifests of a persistent set, so it "
					"was that set's first path; opened as "
					"path %u (give the paths in their "
					"original order)",
					s->path[i].dir.path, i);
	}
	ret = nvs__manifest_list(s->path[0].dir.dirfd, &gens, &n);
	if (ret < 0)
		return nvs__err(ret, "nvs_swapper_create: listing %s: %s",
				s->path[0].dir.path, nvs_strerror(-ret));
	if (!s->readonly)
		unlinkat(s->path[0].dir.dirfd, NVS_MANIFEST_TMP, 0);
	if (n == 0) {
		nvs__free(gens);
		if (s->readonly)
			return nvs__err(-ENOENT,
					"nvs_swapper_create: no persistent "
					"swap set to open read-only in %s "
					"(no manifest there)",
					s->path[0].dir.path);
		p->empty = true;
		if (o->persist == NVS_PERSIST_RESUME) {
			char others[512] = "";
			ranks_with_sets(s->path[0].dir.path, others,
					sizeof(others));
			return nvs__err(-ENOENT,
					"nvs_swapper_create: no persistent "
					"swap set to resume in %s (sets of "
					"this name are held by:%s)",
					s->path[0].dir.path,
					*others ? others : " none");
		}
		if (getrandom(p->set_id, sizeof(p->set_id), 0) !=
		    (ssize_t)sizeof(p->set_id))
			for (size_t i = 0; i < sizeof(p->set_id); i++)
				p->set_id[i] = (uint8_t)(nvs__now_ns() >> i);
		p->next_gen = 1;
		/* A set that never committed a generation: what a crash
		 * left in its files is garbage. */
		for (unsigned i = 0; i < s->npaths; i++)
			if (ftruncate(s->path[i].fd, 0) == 0)
				s->path[i].file_size = 0;
		return 0;
	}
	ret = read_manifests(s, p, gens, n);
	for (unsigned i = 0; ret == 0 && i < s->npaths; i++)
		if (s->path[i].fd < 0)
			ret = nvs__err(-EBADMSG,
				       "nvs_swapper_create: %s/" DATA_FILE
				       " is missing: the data of path %u of "
				       "the set, which its %zu generation(s) "
				       "use (a copy of a set must take every "
				       "file along)",
				       s->path[i].dir.path, i, n);
	if (ret == 0) {
		p->open_gen = o->generation ? o->generation : gens[0];
		p->next_gen = gens[0] + 1;
		memcpy(p->set_id, p->gens[0].set_id, sizeof(p->set_id));
		s->align = p->gens[0].align;
		ret = -ENOENT;
		for (size_t k = 0; k < n; k++)
			if (gens[k] == p->open_gen)
				ret = 0;
		if (ret < 0)
			nvs__err(ret,
				 "nvs_swapper_create: generation %" PRIu64
				 " is not kept in %s (newest %" PRIu64
				 ", %zu kept)",
				 o->generation, s->path[0].dir.path, gens[0],
				 n);
	}
	nvs__free(gens);
	return ret;
}

int nvs__persist_data_file(struct nvs_swapper *s, unsigned i)
{
	struct path *path = &s->path[i];
	int flags = (s->readonly ? O_RDONLY : O_RDWR | O_CREAT) | O_NOFOLLOW |
		    O_CLOEXEC;
	uint64_t *gens = NULL;
	size_t n, ngens = 0;
	struct stat st;

	/* A set with generations has its data file: never make an empty
	 * one in its place (a copy that left it out would open as if
	 * truncated, and find out only at a read). */
	nvs__manifest_list(s->path[0].dir.dirfd, &gens, &ngens);
	nvs__free(gens);
	if (ngens)
		flags &= ~O_CREAT;
	/* Never blocks: a FIFO planted there is refused by type below. */
	path->fd = nvs__open_file(path->dir.dirfd, DATA_FILE,
				  flags | (s->page_cache ? 0 : O_DIRECT), 0600,
				  &st);
	if (path->fd < 0 && errno == EINVAL)
		path->fd = nvs__open_file(path->dir.dirfd, DATA_FILE, flags,
					  0600, &st);
	if (path->fd < 0 && errno == ENOENT && !(flags & O_CREAT))
		return 0; /* refused by nvs__persist_open(), after the
			     layout: another path given says so first */
	if (path->fd < 0)
		return nvs__err(-errno, "nvswap: %s/" DATA_FILE ": %s",
				path->dir.path, nvs_strerror(errno));
	if (!S_ISREG(st.st_mode)) {
		close(path->fd);
		path->fd = -1;
		return nvs__err(-EINVAL,
				"nvswap: %s/" DATA_FILE
				": is %s, not a regular file",
				path->dir.path, nvs__file_type(st.st_mode));
	}
	path->file_size = (uint64_t)st.st_size;
	n = strnlen(path->dir.path, sizeof(path->dir.path) - 1);
	memcpy(path->file, path->dir.path, n);
	memcpy(path->file + n, "/" DATA_FILE, sizeof("/" DATA_FILE));
	path->direct = (fcntl(path->fd, F_GETFL) & O_DIRECT) != 0;
	return 0;
}

/* Record generation @m's placements: claim their space once, count the
 * generation, check them against the data files. */
static int claim(struct nvs_swapper *s, const struct nvs_manifest *m)
{
	struct nvs_pset *p = s->pers;

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nvs_mf_tensor *mt = &m->t[i];
		bool clash = false, fresh;
		struct nvs_xref *x;

		for (uint32_t j = 0; j < mt->nexts; j++) {
			const struct nvs_extent *e = &mt->ext[j];
			uint64_t end = e->off + nvs__round_up(e->len, s->align);
			if (end > s->path[e->path].file_size)
				return nvs__err(
					-EBADMSG,
					"nvs_swapper_create: generation "
					"%" PRIu64 ": tensor %" PRIu64
					" ends at byte %" PRIu64
					" of %s, which has %" PRIu64
					" bytes: the data file was "
					"truncated",
					m->generation, mt->id, end,
					s->path[e->path].file,
					s->path[e->path].file_size);
		}
		x = nvs__xref_find(p, &mt->ext[0]);
		fresh = !x;
		x = nvs__xref_get(p, mt->ext, mt->nexts, &clash);
		if (!x && clash)
			return nvs__err(-EBADMSG,
					"nvs_swapper_create: generation "
					"%" PRIu64 ": tensor %" PRIu64
					"'s extents clash with another "
					"tensor's",
					m->generation, mt->id);
		if (!x)
			return nvs__err(-ENOMEM,
					"nvs_swapper_create: out of memory");
		if (fresh &&
		    nvs__space_claim(s->space, mt->ext, mt->nexts) < 0) {
			HASH_DEL(p->xref, x);
			nvs__free(x);
			return nvs__err(-EBADMSG,
					"nvs_swapper_create: generation "
					"%" PRIu64 ": tensor %" PRIu64
					"'s extents overlap another tensor's",
					m->generation, mt->id);
		}
		x->gens++;
	}
	return 0;
}

/* Register the tensors of generation @m, ON_NVME. */
static int rebuild(struct nvs_swapper *s, const struct nvs_manifest *m)
{
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nvs_mf_tensor *mt = &m->t[i];
		struct tensor *t;

		t = nvs__tensor_alloc(s, mt->id, mt->nbytes);
		if (!t || t->nexts != mt->nexts) {
			bool oom = !t;
			size_t want = t ? t->nexts : 0;
			nvs__free(t);
			return oom ? nvs__err(-ENOMEM, "nvs_swapper_create: "
						       "out of memory")
				   : nvs__err(-EBADMSG,
					      "nvs_swapper_create: tensor "
					      "%" PRIu64 " has %u extents "
					      "where its size and the stripe "
					      "make %zu",
					      mt->id, mt->nexts, want);
		}
		memcpy(t->ext, mt->ext, mt->nexts * sizeof(*t->ext));
		t->crc = mt->crc;
		t->on_disk = mt->on_disk;
		if (mt->taglen) {
			t->tag = nvs__malloc(mt->taglen);
			if (!t->tag) {
				nvs__free(t);
				return nvs__err(-ENOMEM, "nvs_swapper_create: "
							 "out of memory");
			}
			memcpy(t->tag, mt->tag, mt->taglen);
			t->taglen = mt->taglen;
		}
		nvs__hash_oom = 0;
		HASH_ADD(hh, s->table, id, sizeof(t->id), t);
		if (nvs__hash_oom) {
			nvs__free(t->tag);
			nvs__free(t);
			return nvs__err(-ENOMEM,
					"nvs_swapper_create: out of memory");
		}
		nvs__xref_find(s->pers, t->ext)->cur = true;
		s->st.tensors++;
		s->st.tensor_bytes += t->nbytes;
	}
	return 0;
}

int nvs__persist_restore(struct nvs_swapper *s)
{
	struct nvs_pset *p = s->pers;
	int ret;

	if (!p)
		return 0;
	for (size_t g = 0; g < p->ngens; g++) {
		ret = claim(s, &p->gens[g]);
		if (ret < 0)
			return ret;
	}
	for (size_t g = 0; g < p->ngens; g++)
		if (p->gens[g].generation == p->open_gen)
			return rebuild(s, &p->gens[g]);
	return 0;
}
