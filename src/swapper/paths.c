// SPDX-License-Identifier: MIT
/*
 * One directory given twice in nvme_paths would have the swapper lock it
 * twice and refuse itself as "in use by process <own pid>": find it first,
 * by device and inode, whatever the spelling. And a swap file the handle
 * refuses to read (cut short behind the swapper's back) is the swapper's
 * I/O error, with its own sentence.
 */
#include "swapper/paths.h"
#include "internal/errors.h"
#include "nvswap/swapper.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
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
