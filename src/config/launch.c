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
	const char *local_size_alt; /* read when local_size is unset */
	bool slurm;		    /* local sizes in Slurm's "4(x2),3" form */
};

static const struct family families[] = {
	{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL,
	 false},
	/* torchrun sets LOCAL_WORLD_SIZE; DeepSpeed's own launcher
	 * (deepspeed/launcher/launch.py) LOCAL_SIZE instead */
	{"torch.distributed", "RANK", "WORLD_SIZE", "LOCAL_RANK",
	 "LOCAL_WORLD_SIZE", "LOCAL_SIZE", false},
	{"MPICH/PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
	 "MPI_LOCALNRANKS", NULL, false},
	/* srun sets SLURM_TASKS_PER_NODE always, SLURM_NTASKS_PER_NODE
	 * only with --ntasks-per-node */
	{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
	 "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", true},
};

/* One value: the variable it was read from (NULL: unset) and the number. */
struct val {
	const char *var;
	int v;
};

/* @s for a sentence: at most 40 bytes, quotes and non-printables as
 * \xNN, "..." when cut. */
static const char *quoted(const char *s, char *buf, size_t len)
{
	size_t o = 0, i = 0;

	for (; s[i] && i < 40 && o + 5 < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	if (s[i] && o + 4 < len)
		snprintf(buf + o, len - o, "...");
	return buf;
}

/*
 * Variable @name as a number from @min to INT_MAX into @out: 1 read, 0
 * unset, or -EINVAL naming it, its value and why. Slurm's per-node
 * counts look like "4(x2),3" (@lead_only): the first number is this
 * node's when the job is homogeneous, and always a count of this
 * launch's tasks on some node.
 */
static int number(const char *name, int min, bool lead_only, struct val *out)
{
	const char *s = getenv(name);
	char q[200];
	char *end;
	long n;

	if (!s)
		return 0;
	errno = 0;
	n = strtol(s, &end, 10);
	if (end == s || (*end && !(lead_only && (*end == '(' || *end == ','))))
		return nvs__err(-EINVAL,
				"nvs_launch_detect: %s=\"%s\" is not a whole "
				"number (from %d to %d)%s",
				name, quoted(s, q, sizeof(q)), min, INT_MAX,
				lead_only ? ", nor Slurm's \"N(xM),...\"" : "");
	if (errno == ERANGE || n < min || n > INT_MAX)
		return nvs__err(-EINVAL,
				"nvs_launch_detect: %s=\"%s\" is out of range: "
				"from %d to %d",
				name, quoted(s, q, sizeof(q)), min, INT_MAX);
	out->var = name;
	out->v = (int)n;
	return 1;
}

/* "NAME V" for a value read, or "V (NAME unset: what it defaults to)". */
static const char *said(const struct val *x, const char *name, const char *alt,
			const char *dflt, char *buf, size_t len)
{
	if (x->var)
		snprintf(buf, len, "%s %d", x->var, x->v);
	else if (alt)
		snprintf(buf, len, "%d (%s and %s unset: %s)", x->v, name, alt,
			 dflt);
	else
		snprintf(buf, len, "%d (%s unset: %s)", x->v, name, dflt);
	return buf;
}

static int detect(struct nvs_launch *out, bool *size_read);

uint32_t nvs_launch_share_queue(uint32_t queue_depth)
{
	struct nvs_launch l;
	bool said = false;

	/* Only a local size the launcher gave: one taken as the local rank
	 * + 1 differs from rank to rank, and so would the shares. */
	if (detect(&l, &said) < 0 || !said || l.local_size <= 1)
		return queue_depth;
	return nvs_aio_queue_share(queue_depth, (unsigned)l.local_size);
}

int nvs_launch_detect(struct nvs_launch *out)
{
	return detect(out, NULL);
}

/* nvs_launch_detect(), and whether the local size was read from a
 * variable (@size_read, when not NULL). */
static int detect(struct nvs_launch *out, bool *size_read)
{
	const struct family *f = NULL;
	struct nvs_launch l = {0, 1, 0, 1, "none"};
	struct val rank = {0}, size, lrank = {0}, lsize;
	char a[160], b[160], c[160];
	int ret;

	if (!out)
		return nvs__err(-EINVAL, "nvs_launch_detect: out is NULL");
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (getenv(families[i].rank)) {
			f = &families[i];
			break;
		}
	if (f) {
		bool slurm = f->slurm;

		snprintf(l.source, sizeof(l.source), "%s", f->name);
		if ((ret = number(f->rank, 0, false, &rank)) < 0)
			return ret;
		size = (struct val){NULL, rank.v + 1};
		if ((ret = number(f->size, 1, false, &size)) < 0 ||
		    (ret = number(f->local_rank, 0, false, &lrank)) < 0)
			return ret;
		lsize = (struct val){NULL, lrank.v + 1};
		ret = number(f->local_size, 1, slurm, &lsize);
		if (ret == 0 && f->local_size_alt)
			ret = number(f->local_size_alt, 1, slurm, &lsize);
		if (ret < 0)
			return ret;
		if (size_read)
			*size_read = ret == 1;
		if (rank.v >= size.v)
			return nvs__err(-EINVAL,
					"nvs_launch_detect: %s %d is not "
					"below the world size %s (%s)",
					f->rank, rank.v,
					said(&size, f->size, NULL,
					     "the rank + 1", a, sizeof(a)),
					f->name);
		if (lrank.v >= lsize.v || lsize.v > size.v)
			return nvs__err(
				-EINVAL,
				"nvs_launch_detect: local rank %s, local "
				"size %s and world size %s do not fit "
				"together (%s)",
				said(&lrank, f->local_rank, NULL, "0", a,
				     sizeof(a)),
				said(&lsize, f->local_size, f->local_size_alt,
				     "the local rank + 1", b, sizeof(b)),
				said(&size, f->size, NULL, "the rank + 1", c,
				     sizeof(c)),
				f->name);
		l.rank = rank.v;
		l.world_size = size.v;
		l.local_rank = lrank.v;
		l.local_size = lsize.v;
	}
	*out = l;
	return 0;
}
