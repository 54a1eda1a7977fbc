// SPDX-License-Identifier: MIT
/*
 * nvs_swapset_relocate() (nvswap-fsck --relocate OLD=NEW): rewrite the
 * paths a persistent set's manifests record after the set was moved.
 * Every manifest is read and rewritten in memory first; nothing is
 * written unless all of them then name the paths the set is opened with.
 * Each is then replaced as a commit replaces one (temporary file, fsync,
 * rename, fsync of the directory), so a crash leaves each manifest old
 * or new, and running it again finishes the job.
 */
#include "internal/alloc.h"
#include "internal/errors.h"
#include "swapper/manifest.h"
#include "swapper/paths.h"
#include "swapper/swapdir.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nvswap/swapper.h"

#define WHO "nvs_swapset_relocate"

/* @p with @old (a path prefix, whole components) replaced by @new_ into
 * @out; false when @p is not @old or under it. */
static bool swap_prefix(const char *p, const char *old, const char *new_,
			char *out, size_t cap)
{
	size_t n = strlen(old);

	while (n > 1 && old[n - 1] == '/')
		n--;
	if (n == 1) /* "/": every path */
		return (size_t)snprintf(out, cap, "%s%s%s", new_,
					new_[1] ? "/" : "", p + 1) < cap;
	if (strncmp(p, old, n) || (p[n] && p[n] != '/'))
		return false;
	return (size_t)snprintf(out, cap, "%s%s", new_, p + n) < cap;
}

/* Manifest @m with its paths moved (@real: where the set is now) and
 * recorded as nvs__paths_record() does. *@changed: it differs from what
 * is on disk. 0, or -EINVAL (a path still differs), -ENOMEM. */
static int move_paths(struct nvs_manifest *m, const char *where,
		      const char *old, const char *new_,
		      const char *const *real, unsigned n, bool *changed)
{
	char abs[4096], moved[4096];
	char *rec[NVS_SWAPPER_MAX_PATHS] = {0};
	int ret = 0;

	*changed = m->version != NVS_MANIFEST_VERSION;
	for (unsigned i = 0; i < n && ret == 0; i++) {
		if (nvs__paths_resolve(m->paths[i], real[0], abs, sizeof(abs)) <
		    0)
			ret = -ENAMETOOLONG;
		else if (*m->paths[i] == '/' && /* relative: already moved */
			 swap_prefix(abs, old, new_, moved, sizeof(moved)))
			snprintf(abs, sizeof(abs), "%s", moved);
		if (ret == 0 && strcmp(abs, real[i]))
			ret = nvs__err(-EINVAL,
				       WHO
				       ": %s: path %u is '%s' after "
				       "replacing '%s' by '%s', but the set "
				       "is opened with '%s' (nothing was "
				       "rewritten)",
				       where, i, abs, old, new_, real[i]);
		if (ret == 0)
			ret = nvs__paths_record(real, i, &rec[i]);
	}
	for (unsigned i = 0; i < n; i++) {
		if (ret == 0) {
			*changed |= strcmp(rec[i], m->paths[i]) != 0;
			nvs__free(m->paths[i]);
			m->paths[i] = rec[i];
		} else {
			nvs__free(rec[i]);
		}
	}
	if (ret == -ENOMEM || ret == -ENAMETOOLONG)
		return nvs__err(ret, WHO ": %s: %s", where, nvs_strerror(-ret));
	m->version = NVS_MANIFEST_VERSION;
	return ret;
}

int nvs_swapset_relocate(const struct nvs_swapper_opts *o, const char *old,
			 const char *new_)
{
	struct nvs_swapdir dir[NVS_SWAPPER_MAX_PATHS];
	char *real[NVS_SWAPPER_MAX_PATHS] = {0};
	struct nvs_manifest *m = NULL;
	char where[4200], *newreal = NULL;
	const char *name;
	uint64_t *gens = NULL;
	bool *changed = NULL;
	size_t ngens = 0;
	unsigned opened = 0;
	int ret = 0, done = 0;

	if (!o || o->size != sizeof(*o) || !o->npaths ||
	    o->npaths > NVS_SWAPPER_MAX_PATHS || o->rank < 0 || !old || !new_ ||
	    *old != '/' || *new_ != '/')
		return nvs__err(-EINVAL,
				WHO ": NULL or bad options (paths, rank), or "
				    "OLD and NEW not both absolute paths");
	name = o->name && *o->name ? o->name : NULL;
	/* NEW as the set is opened: its real path, when it exists. */
	newreal = realpath(new_, NULL);
	if (!newreal && (newreal = malloc(strlen(new_) + 1)) != NULL) {
		size_t n = strlen(new_);

		while (n > 1 && new_[n - 1] == '/')
			n--;
		memcpy(newreal, new_, n);
		newreal[n] = '\0';
	}
	if (!newreal)
		return nvs__err(-ENOMEM, WHO ": out of memory");
	new_ = newreal;
	for (unsigned i = 0; i < o->npaths && ret == 0; i++) {
		if (!o->nvme_paths[i] ||
		    !(real[i] = realpath(o->nvme_paths[i], NULL)))
			ret = nvs__err(o->nvme_paths[i] ? -errno : -EINVAL,
				       WHO ": nvme_paths[%u] %s: %s", i,
				       o->nvme_paths[i] ? o->nvme_paths[i]
							: "NULL",
				       o->nvme_paths[i] ? nvs_strerror(errno)
							: "missing");
	}
	for (unsigned i = 0; i < o->npaths && ret == 0; i++) {
		struct stat st;
		char p[4200];

		/* Never create what is not there: swapdir_open would. */
		snprintf(p, sizeof(p), "%s/nvswap/%s%srank%d", o->nvme_paths[i],
			 name ? name : "", name ? "/" : "", o->rank);
		if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
			ret = nvs__err(-ENOENT, WHO ": no swap set in %s", p);
	}
	for (; opened < o->npaths && ret == 0; opened++)
		ret = nvs__swapdir_open(o->nvme_paths[opened], name, o->rank,
					&dir[opened]);
	if (ret == 0) {
		ret = nvs__manifest_list(dir[0].dirfd, &gens, &ngens);
		if (ret < 0)
			nvs__err(ret, WHO ": listing %s: %s", dir[0].path,
				 nvs_strerror(-ret));
		else if (!ngens)
			ret = nvs__err(-ENOENT, WHO ": no swap set in %s",
				       dir[0].path);
	}
	if (ret == 0) {
		m = nvs__calloc(ngens, sizeof(*m));
		changed = nvs__calloc(ngens, sizeof(*changed));
		if (!m || !changed)
			ret = nvs__err(-ENOMEM, WHO ": out of memory");
	}
	for (size_t k = 0; k < ngens && ret == 0; k++) {
		ret = nvs__manifest_read(dir[0].dirfd, dir[0].path, gens[k],
					 &m[k]);
		/* Unreadable (torn): left as it is for the check to judge
		 * (--repair removes it), so the rest can still move. */
		if (ret == -EBADMSG || ret == -ENOTSUP) {
			ret = 0;
			continue;
		}
		if (ret < 0)
			break;
		snprintf(where, sizeof(where), "%s/manifest.%020" PRIu64,
			 dir[0].path, gens[k]);
		if (m[k].npaths != o->npaths)
			ret = nvs__err(-EINVAL,
				       WHO ": %s records %u paths, %u given",
				       where, m[k].npaths, o->npaths);
		else
			ret = move_paths(&m[k], where, old, new_,
					 (const char *const *)real, o->npaths,
					 &changed[k]);
	}
	for (size_t k = 0; k < ngens && ret == 0; k++) {
		if (!changed[k])
			continue;
		ret = nvs__manifest_write(dir[0].dirfd, dir[0].path, &m[k]);
		done += ret == 0;
	}
	for (size_t k = 0; m && k < ngens; k++)
		nvs__manifest_fini(&m[k]);
	nvs__free(m);
	nvs__free(changed);
	nvs__free(gens);
	{
		char msg[NVS_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		for (unsigned i = 0; i < opened; i++)
			if (dir[i].dirfd >= 0)
				nvs__swapdir_close(&dir[i], false);
		for (unsigned i = 0; i < NVS_SWAPPER_MAX_PATHS; i++)
			free(real[i]);
		free(newreal);
		if (ret < 0)
			nvs__err_set(ret, msg);
	}
	return ret < 0 ? ret : done;
}
