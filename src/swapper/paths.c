// SPDX-License-Identifier: MIT
/*
 * One directory given twice in nvme_paths would have the swapper lock it
 * twice and refuse itself as "in use by process <own pid>": find it first,
 * by device and inode, whatever the spelling. A persistent set records
 * its paths relative to its first one, so that the tree can be copied or
 * restored elsewhere; only a path on another filesystem is recorded whole
 * (and moved with nvswap-fsck --relocate). And a swap file the handle
 * refuses to read (cut short behind the swapper's back) is the swapper's
 * I/O error, with its own sentence.
 */
#include "swapper/paths.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "nvswap/swapper.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int nvs__paths_distinct(const char *const *paths, unsigned n)
{
	struct stat st[NVS_SWAPPER_MAX_PATHS];
	bool ok[NVS_SWAPPER_MAX_PATHS];

	if (n > NVS_SWAPPER_MAX_PATHS)
		return -EINVAL; /* create said so before calling */
	for (unsigned i = 0; i < n; i++) {
		ok[i] = stat(paths[i], &st[i]) == 0;
		for (unsigned j = 0; ok[i] && j < i; j++)
			if (ok[j] && st[j].st_dev == st[i].st_dev &&
			    st[j].st_ino == st[i].st_ino)
				return nvs__err(-EINVAL,
						"nvs_swapper_create: "
						"nvme_paths[%u] '%s' and "
						"nvme_paths[%u] '%s' are the "
						"same directory: give each "
						"directory once",
						j, paths[j], i, paths[i]);
	}
	return 0;
}

/* Length of the longest common leading part of @a and @b that ends at a
 * component boundary ("/a/b" and "/a/bc" share "/a"). */
static size_t common_len(const char *a, const char *b)
{
	size_t n = 0;

	for (size_t i = 0;; i++) {
		bool ea = a[i] == '\0' || a[i] == '/';
		bool eb = b[i] == '\0' || b[i] == '/';

		if (ea && eb) {
			n = i;
			if (!a[i] || !b[i])
				break;
		} else if (a[i] != b[i]) {
			break;
		}
	}
	return n;
}

/* Components of @p ("/x/y" has two, "" and "/" none). */
static unsigned components(const char *p)
{
	unsigned n = 0;

	for (; *p; p++)
		if (*p != '/' && (p[1] == '/' || p[1] == '\0'))
			n++;
	return n;
}

int nvs__paths_record(const char *const *real, unsigned i, char **out)
{
	struct stat s0, si;
	size_t common, len;
	unsigned up;
	char *r;

	*out = NULL;
	if (i == 0) {
		r = nvs__malloc(2);
		if (!r)
			return -ENOMEM;
		strcpy(r, ".");
		*out = r;
		return 0;
	}
	if (stat(real[0], &s0) < 0)
		return nvs__err(-errno, "nvswap: %s: %s", real[0],
				nvs_strerror(errno));
	if (stat(real[i], &si) < 0)
		return nvs__err(-errno, "nvswap: %s: %s", real[i],
				nvs_strerror(errno));
	if (s0.st_dev != si.st_dev) {
		r = nvs__malloc(strlen(real[i]) + 1);
		if (!r)
			return -ENOMEM;
		strcpy(r, real[i]);
		*out = r;
		return 0;
	}
	common = common_len(real[0], real[i]);
	up = components(real[0] + common);
	len = 3 * (size_t)up + strlen(real[i] + common) + 2;
	r = nvs__malloc(len);
	if (!r)
		return -ENOMEM;
	*r = '\0';
	for (unsigned k = 0; k < up; k++)
		strcat(r, k ? "/.." : "..");
	{
		const char *rest = real[i] + common;
		while (*rest == '/')
			rest++;
		if (*rest && *r)
			strcat(r, "/");
		strcat(r, rest);
	}
	if (!*r)
		strcpy(r, "."); /* the same directory: distinct() refused it */
	*out = r;
	return 0;
}

int nvs__paths_resolve(const char *rec, const char *root, char *out, size_t cap)
{
	size_t n = 0;
	const char *p;

	if (*rec == '/') {
		if (strlen(rec) >= cap)
			return -ENAMETOOLONG;
		strcpy(out, rec);
		return 0;
	}
	if (strlen(root) >= cap)
		return -ENAMETOOLONG;
	strcpy(out, root);
	n = strlen(out);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	for (p = rec; *p;) {
		size_t k = strcspn(p, "/");

		if ((k == 1 && p[0] == '.') || k == 0) {
			/* nothing */
		} else if (k == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(out, '/');
			n = slash && slash != out ? (size_t)(slash - out) : 1;
			out[n] = '\0';
		} else {
			if (n + (n > 1) + k >= cap)
				return -ENAMETOOLONG;
			if (n > 1)
				out[n++] = '/';
			memcpy(out + n, p, k);
			n += k;
			out[n] = '\0';
		}
		p += k;
		while (*p == '/')
			p++;
	}
	return 0;
}

int nvs__paths_match(const char *who, const char *where, const char *const *rec,
		     const char *const *real, unsigned n)
{
	char abs[4096];

	for (unsigned i = 0; i < n; i++) {
		if (nvs__paths_resolve(rec[i], real[0], abs, sizeof(abs)) < 0)
			return nvs__err(-EINVAL,
					"%s: the set in %s has path %u "
					"'%.200s...': too long",
					who, where, i, rec[i]);
		if (!strcmp(abs, real[i]))
			continue;
		/* The command first: paths may be long, and what does not
		 * fit NVS_ERRMSG_MAX is cut from the end. */
		if (*rec[i] != '/')
			return nvs__err(-EINVAL,
					"%s: run nvswap-fsck --relocate "
					"'%s=%s' on the set once if it was "
					"moved: it has path %u '%s' (relative "
					"to path 0: '%s'), opened with '%s' "
					"(copy or move a set's paths "
					"together); manifest %s",
					who, abs, real[i], i, rec[i], abs,
					real[i], where);
		return nvs__err(-EINVAL,
				"%s: run nvswap-fsck --relocate '%s=%s' on "
				"the set once if it was moved: it has path "
				"%u '%s', opened with '%s' (%s); manifest %s",
				who, rec[i], real[i], i, rec[i], real[i],
				i == 0 ? "its manifest was written by an older "
					 "nvswap, which recorded absolute paths"
				       : "that path is on another filesystem "
					 "than path 0, so the set records it "
					 "whole",
				where);
	}
	return 0;
}

int nvs__swapfile_refused(int fd, const char *file, uint64_t id, bool write,
			  uint64_t off, uint64_t len, int err)
{
	char cause[NVS_ERRMSG_MAX / 2];
	struct stat st;

	snprintf(cause, sizeof(cause), "%s", nvs_last_error());
	if (!write && fstat(fd, &st) == 0 && (uint64_t)st.st_size < off + len)
		return nvs__err(-EIO,
				"nvswap: tensor %" PRIu64 ": reading %" PRIu64
				" bytes from %s at offset %" PRIu64
				" failed: the swap file ends at %lld bytes "
				"(truncated behind nvswap's back?) (%s)",
				id, len, file, off, (long long)st.st_size,
				cause);
	return nvs__err(err,
			"nvswap: tensor %" PRIu64 ": %s %" PRIu64
			" bytes %s %s at offset %" PRIu64 " refused: %s",
			id, write ? "writing" : "reading", len,
			write ? "to" : "from", file, off, cause);
}
