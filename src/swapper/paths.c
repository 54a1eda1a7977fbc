// SPDX-License-Identifier: MIT
/*
 * One directory given twice in nvme_paths would have the swapper lock it
 * twice and refuse itself as "in use by process <own pid>": find it first,
 * by device and inode, whatever the spelling.
 */
#include "swapper/paths.h"
#include "internal/errors.h"
#include "nvswap/swapper.h"

#include <errno.h>
#include <stdbool.h>
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
