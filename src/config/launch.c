// SPDX-License-Identifier: MIT
/*
 * nvs_launch_detect(): the rank, world size and node-local rank and size
 * of this process, from the environment its launcher set (config.h lists
 * the families and their order).
 */
#include "internal/errors.h"
#include "nvswap/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct family {
	const char *name;
	const char *rank, *size, *local_rank, *local_size;
};

static const struct family families[] = {
	{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"torch.distributed", "RANK", "WORLD_SIZE", "LOCAL_RANK",
	 "LOCAL_WORLD_SIZE"},
	{"MPICH/PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
	 "MPI_LOCALNRANKS"},
	{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
	 "SLURM_NTASKS_PER_NODE"},
};

/*
 * Variable @name as a number >= @min into *@v: 1 read, 0 unset, or
 * -EINVAL naming it. Slurm's per-node counts look like "4(x2),3": the
 * first number is this node's when the job is homogeneous, and always a
 * count of this launch's tasks on some node.
 */
static int number(const char *name, int min, bool lead_only, int *v)
{
	const char *s = getenv(name);
	char *end;
	long n;

	if (!s)
		return 0;
	errno = 0;
	n = strtol(s, &end, 10);
	if (end == s || errno || n < min || n > INT_MAX ||
	    (*end && !(lead_only && (*end == '(' || *end == ','))))
		return nvs__err(-EINVAL,
				"nvs_launch_detect: %s=\"%s\" is not a "
				"number of at least %d",
				name, s, min);
	*v = (int)n;
	return 1;
}

int nvs_launch_detect(struct nvs_launch *out)
{
	const struct family *f = NULL;
	struct nvs_launch l = {0, 1, 0, 1, "none"};
	int ret;

	if (!out)
		return nvs__err(-EINVAL, "nvs_launch_detect: out is NULL");
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (getenv(families[i].rank)) {
			f = &families[i];
			break;
		}
	if (f) {
		bool slurm = !strcmp(f->name, "Slurm");
		snprintf(l.source, sizeof(l.source), "%s", f->name);
		if ((ret = number(f->rank, 0, false, &l.rank)) < 0)
			return ret;
		l.world_size = l.rank + 1;
		if ((ret = number(f->size, 1, false, &l.world_size)) < 0 ||
		    (ret = number(f->local_rank, 0, false, &l.local_rank)) < 0)
			return ret;
		l.local_size = l.local_rank + 1;
		if ((ret = number(f->local_size, 1, slurm, &l.local_size)) < 0)
			return ret;
		if (l.rank >= l.world_size)
			return nvs__err(-EINVAL,
					"nvs_launch_detect: %s %d is not "
					"below %s %d (%s)",
					f->rank, l.rank, f->size, l.world_size,
					f->name);
		if (l.local_rank >= l.local_size || l.local_size > l.world_size)
			return nvs__err(-EINVAL,
					"nvs_launch_detect: %s %d, %s %d and "
					"world size %d do not fit together "
					"(%s)",
					f->local_rank, l.local_rank,
					f->local_size, l.local_size,
					l.world_size, f->name);
	}
	*out = l;
	return 0;
}
