// SPDX-License-Identifier: MIT
/*
 * nvswap-fsck: verify a persistent swap set (nvs_swapset_check()) that no
 * process has open: every manifest parses and matches the paths, every
 * extent is inside its data file and overlaps no other, every tensor's
 * CRC32C matches; one line per tensor and a verdict per generation.
 * --repair removes the manifests of generations that do not verify,
 * never a good one; the set then reopens at the newest good generation
 * (none left: the set's files go too). --relocate OLD=NEW rewrites the
 * paths a moved set records (nvs_swapset_relocate()) before the check.
 * Without --name it lists every set under the first --nvme-path
 * (nvs_swapset_list()) and checks each.
 *
 *   nvswap-fsck --nvme-path DIR [--nvme-path DIR2 ...] [--name NAME]
 *               [--rank R]
 *               [--relocate OLD=NEW] [--repair] [--no-data] [--quiet]
 *
 * Exit status, as e2fsck's: 0 the set verifies, 1 bad generations were
 * removed (--repair), 4 bad generations are left, 8 the check could not
 * run (no set, in use, other paths), 16 usage; several sets: the worst.
 */
#include "tool.h"

#include <nvswap/nvswap.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool quiet;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nvswap-fsck --nvme-path DIR [--nvme-path DIR ...] "
		"[--name NAME]\n"
		"                   [--rank R] [--relocate OLD=NEW] [--repair] "
		"[--no-data]\n"
		"                   [--quiet]\n"
		"  --nvme-path DIR     an nvme_path of the set, in the set's "
		"order (--path\n"
		"                      is the same)\n"
		"  --name NAME         the set's name (nvs_swapper_opts.name; "
		"the role\n"
		"                      swappers use \"param\" and "
		"\"optimizer\"); without it,\n"
		"                      every set under the first "
		"--nvme-path is listed and\n"
		"                      checked\n"
		"  --rank R            the set's rank (default 0; without "
		"--name: only rank R)\n"
		"  --relocate OLD=NEW  the set was moved: its recorded paths "
		"under OLD are\n"
		"                      under NEW now (rewrites its manifests, "
		"then checks)\n"
		"  --repair            remove the manifests of generations "
		"that do not verify\n"
		"  --no-data           check manifests and extents, not the "
		"data's checksums\n"
		"  --quiet             print only what does not verify, and "
		"the verdicts\n"
		"  -h, --help          this text\n"
		"  --version           print the version and exit\n"
		"exit: 0 sound, 1 repaired, 4 bad generations left, 8 could "
		"not check, 16 usage\n");
}

static void line(const struct nvs_check_item *it, void *arg)
{
	(void)arg;
	if (it->id == NVS_CHECK_NO_TENSOR && it->generation == 0) {
		printf("set: %s\n", it->what);
		return;
	}
	if (it->id == NVS_CHECK_NO_TENSOR) {
		printf("generation %" PRIu64 ": %s%s%s\n", it->generation,
		       it->status ? "BAD: " : "", it->what,
		       it->removed ? " (manifest removed)" : "");
		return;
	}
	if (quiet && it->status == 0)
		return;
	printf("generation %" PRIu64 " tensor %" PRIu64 " (%" PRIu64
	       " bytes): %s%s\n",
	       it->generation, it->id, it->nbytes, it->status ? "BAD: " : "",
	       it->what);
}

struct job {
	const char *old, *new_; /* --relocate, or NULL */
	unsigned flags;
};

/* Relocate (when asked) and check the set @o: its exit status. */
static int check_one(const struct nvs_swapper_opts *o, const struct job *j)
{
	int ret;

	if (j->old) {
		ret = nvs_swapset_relocate(o, j->old, j->new_);
		if (ret < 0) {
			fprintf(stderr, "nvswap-fsck: %s\n", tool_last_error());
			return 8;
		}
		printf("relocated: %d manifest(s) rewritten\n", ret);
	}
	ret = nvs_swapset_check(o, j->flags, line, NULL);
	fflush(stdout);
	if (ret < 0) {
		fprintf(stderr, "nvswap-fsck: %s\n", tool_last_error());
		return 8;
	}
	if (ret == 0) {
		printf("the set verifies\n");
		return 0;
	}
	printf("%d generation(s) do not verify%s\n", ret,
	       (j->flags & NVS_CHECK_REPAIR) ? ": their manifests were removed"
					     : "; --repair removes them");
	return (j->flags & NVS_CHECK_REPAIR) ? 1 : 4;
}

/* The sets nvs_swapset_list() found, copied out of its callback. */
struct found {
	char *name;
	int rank;
	unsigned generations, npaths, whole;
	char *paths[NVS_SWAPPER_MAX_PATHS];
};

struct listing {
	struct found *f;
	size_t n, cap;
	int rank; /* only this one, or -1 */
};

static char *dup_str(const char *s)
{
	char *d = strdup(s);

	if (!d)
		tool_die(8, "out of memory");
	return d;
}

static void listed(const struct nvs_swapset_info *in, void *arg)
{
	struct listing *l = arg;
	char size[32], bytes[32];
	struct found *f;

	if (l->rank >= 0 && in->rank != l->rank)
		return;
	if (*in->name)
		printf("set \"%s\"", in->name);
	else
		printf("set (no name)");
	printf(" rank %d in %s: ", in->rank, in->dir);
	if (!in->generations)
		printf("no manifest (a later path's data, or a set that "
		       "never committed)");
	else if (in->status < 0)
		printf("%u generation(s) %" PRIu64 "..%" PRIu64
		       ", the newest unreadable: %s",
		       in->generations, in->oldest, in->newest, in->what);
	else
		printf("%u generation(s) %" PRIu64 "..%" PRIu64
		       ", newest: %" PRIu64 " tensors (%s), %u path(s)",
		       in->generations, in->oldest, in->newest, in->tensors,
		       tool_human(in->tensor_bytes, bytes, sizeof(bytes)),
		       in->npaths);
	if (in->data_bytes != UINT64_MAX)
		printf(", set.data %s",
		       tool_human(in->data_bytes, size, sizeof(size)));
	if (in->pid && in->pid_hint)
		printf(", in use: held by pid %ld (from the lock file)",
		       in->pid);
	else if (in->pid)
		printf(", in use by process %ld", in->pid);
	printf("\n");
	if (!in->generations)
		return;
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 8;
		l->f = realloc(l->f, l->cap * sizeof(*l->f));
		if (!l->f)
			tool_die(8, "out of memory");
	}
	f = &l->f[l->n++];
	memset(f, 0, sizeof(*f));
	f->name = dup_str(in->name);
	f->rank = in->rank;
	f->generations = in->generations;
	f->npaths = in->status < 0 ? 0 : in->npaths;
	for (unsigned i = 0; i < f->npaths; i++)
		f->paths[i] = dup_str(in->paths[i]);
	f->whole = in->whole;
}

/* Whether @p is --relocate's OLD or lies under it. */
static bool maps(const char *p, const struct job *j)
{
	size_t n = j->old ? strlen(j->old) : 0;

	while (n > 1 && j->old[n - 1] == '/')
		n--;
	return n && !strncmp(p, j->old, n) && (!p[n] || p[n] == '/');
}

/* *@p with --relocate's OLD replaced by NEW when it is OLD or under it
 * (a path read from a manifest of a set that moved); *@p otherwise. */
static const char *moved(char **p, const struct job *j)
{
	size_t n = j->old ? strlen(j->old) : 0;
	char *m;

	while (n > 1 && j->old[n - 1] == '/')
		n--;
	if (!maps(*p, j))
		return *p;
	m = malloc(strlen(j->new_) + strlen(*p + n) + 1);
	if (!m)
		tool_die(8, "out of memory");
	strcpy(m, j->new_);
	strcat(m, *p + n);
	free(*p);
	*p = m;
	return m;
}

/* Without --name: list the sets under @o's first path, check each (its
 * other paths from @o when several were given, else from its newest
 * manifest: those recorded relative as they resolve here, those recorded
 * whole only when --relocate moves them, since they name where the set
 * was written, maybe not this copy). The worst exit status. */
static int check_all(const struct nvs_swapper_opts *given, int rank,
		     const struct job *j)
{
	struct listing l = {.rank = rank};
	int worst = 0, ret;

	ret = nvs_swapset_list(given->nvme_paths[0], listed, &l);
	if (ret < 0)
		tool_die(8, "%s", tool_last_error());
	if (!l.n) {
		fprintf(stderr,
			"nvswap-fsck: no swap set under %s (no manifest in "
			"%s/nvswap/[NAME/]rank%s)\n",
			given->nvme_paths[0], given->nvme_paths[0],
			rank >= 0 ? "R" : "<R>");
		return 8;
	}
	for (size_t k = 0; k < l.n; k++) {
		struct found *f = &l.f[k];
		struct nvs_swapper_opts o = *given;

		unsigned whole = 0;

		o.name = f->name;
		o.rank = f->rank;
		if (given->npaths == 1 && f->npaths > 1) {
			o.npaths = f->npaths;
			for (unsigned i = 1; i < f->npaths; i++) {
				if (f->whole & (1u << i) &&
				    !maps(f->paths[i], j))
					whole |= 1u << i;
				else if (f->whole & (1u << i))
					o.nvme_paths[i] =
						moved(&f->paths[i], j);
				else
					o.nvme_paths[i] = f->paths[i];
			}
		}
		if (*f->name)
			printf("\nchecking set \"%s\" rank %d\n", f->name,
			       f->rank);
		else
			printf("\nchecking set (no name) rank %d\n", f->rank);
		fflush(stdout);
		for (unsigned i = 1; i < f->npaths && whole; i++)
			if (whole & (1u << i))
				fprintf(stderr,
					"nvswap-fsck: not checked: path %u "
					"'%s' is recorded whole (another "
					"filesystem than path 0), so it "
					"names where the set was written, "
					"maybe not this copy: give each of "
					"the set's %u paths with --nvme-path and "
					"--name, or --relocate OLD=NEW\n",
					i, f->paths[i], f->npaths);
		ret = whole ? 8 : check_one(&o, j);
		worst = ret > worst ? ret : worst;
	}
	for (size_t k = 0; k < l.n; k++) {
		free(l.f[k].name);
		for (unsigned i = 0; i < l.f[k].npaths; i++)
			free(l.f[k].paths[i]);
	}
	free(l.f);
	return worst;
}

/* Refuse (16) one directory given twice, whatever the spelling (a
 * trailing slash, a symlink, ./X): the check would lock it twice and
 * report the set as in use by this very process. A path that does not
 * exist is left to the library, which names it. */
static void paths_distinct(const struct nvs_swapper_opts *o)
{
	struct stat st[NVS_SWAPPER_MAX_PATHS];
	bool ok[NVS_SWAPPER_MAX_PATHS];

	for (unsigned i = 0; i < o->npaths; i++) {
		ok[i] = stat(o->nvme_paths[i], &st[i]) == 0;
		for (unsigned k = 0; ok[i] && k < i; k++)
			if (ok[k] && st[k].st_dev == st[i].st_dev &&
			    st[k].st_ino == st[i].st_ino)
				tool_die(
					16,
					"--nvme-path '%s' and --nvme-path '%s' are the "
					"same directory: give each of the "
					"set's directories once",
					o->nvme_paths[k], o->nvme_paths[i]);
	}
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"nvme-path", required_argument, NULL, 'p'},
		{"name", required_argument, NULL, 'n'},
		{"rank", required_argument, NULL, 'r'},
		{"relocate", required_argument, NULL, 'L'},
		{"repair", no_argument, NULL, 'R'},
		{"no-data", no_argument, NULL, 'D'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		/* the first spelling, and the other tools' (ds_nvme_tune's) */
		{"path", required_argument, NULL, 'p'},
		{"nvme_path", required_argument, NULL, 'p'},
		{NULL, 0, NULL, 0},
	};
	struct job j = {.flags = NVS_CHECK_DATA};
	struct nvs_swapper_opts o;
	unsigned rank = 0;
	bool named = false, ranked = false;
	char *eq;
	int c;

	tool_name = "nvswap-fsck";
	nvs_swapper_opts_init(&o);
	while ((c = tool_getopt(argc, argv, "", longopts, 16)) != -1) {
		switch (c) {
		case 'p':
			if (o.npaths == NVS_SWAPPER_MAX_PATHS)
				tool_die(16, "at most %u --nvme-path",
					 NVS_SWAPPER_MAX_PATHS);
			o.nvme_paths[o.npaths++] = optarg;
			break;
		case 'n':
			o.name = optarg;
			named = true;
			break;
		case 'r':
			if (tool_parse_uint(optarg, 0, &rank) < 0)
				tool_die(16, "--rank: a whole number, not '%s'",
					 optarg);
			ranked = true;
			break;
		case 'L':
			eq = strchr(optarg, '=');
			if (!eq || eq == optarg || !eq[1] || *optarg != '/' ||
			    eq[1] != '/')
				tool_die(16,
					 "--relocate: OLD=NEW, both absolute "
					 "paths, not '%s'",
					 optarg);
			*eq = '\0';
			j.old = optarg;
			j.new_ = eq + 1;
			break;
		case 'R':
			j.flags |= NVS_CHECK_REPAIR;
			break;
		case 'D':
			j.flags &= ~(unsigned)NVS_CHECK_DATA;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			return tool_version();
		}
	}
	/* One line, as the other tools say it (exit 16: e2fsck's usage). */
	if (optind < argc) {
		fprintf(stderr,
			"nvswap-fsck: unexpected argument '%s' (see "
			"nvswap-fsck --help)\n",
			argv[optind]);
		return 16;
	}
	if (!o.npaths) {
		fprintf(stderr, "nvswap-fsck: --nvme-path DIR is required: a "
				"directory of the set to check (see "
				"nvswap-fsck --help)\n");
		return 16;
	}
	paths_distinct(&o);
	o.rank = (int)rank;
	if (!named)
		return check_all(&o, ranked ? (int)rank : -1, &j);
	return check_one(&o, &j);
}
