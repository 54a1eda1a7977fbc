// SPDX-License-Identifier: MIT
/*
 * nvswap-fsck: verify a persistent swap set (nvs_swapset_check()) that no
 * process has open: every manifest parses and matches the paths, every
 * extent is inside its data file and overlaps no other, every tensor's
 * CRC32C matches; one line per tensor and a verdict per generation.
 * --repair removes the manifests of generations that do not verify,
 * never a good one; the set then reopens at the newest good generation.
 *
 *   nvswap-fsck --path DIR [--path DIR2 ...] [--name NAME] [--rank R]
 *               [--repair] [--no-data] [--quiet]
 *
 * Exit status, as e2fsck's: 0 the set verifies, 1 bad generations were
 * removed (--repair), 4 bad generations are left, 8 the check could not
 * run (no set, in use, other paths), 16 usage.
 */
#include "tool.h"

#include <nvswap/nvswap.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool quiet;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nvswap-fsck --path DIR [--path DIR ...] [--name NAME] "
		"[--rank R]\n"
		"                   [--repair] [--no-data] [--quiet]\n"
		"  --path DIR   an nvme_path of the set, in the set's order\n"
		"  --name NAME  the set's name (nvs_swapper_opts.name; the "
		"role swappers\n"
		"               use \"param\" and \"optimizer\")\n"
		"  --rank R     the set's rank (default 0)\n"
		"  --repair     remove the manifests of generations that do "
		"not verify\n"
		"  --no-data    check manifests and extents, not the data's "
		"checksums\n"
		"  --quiet      print only what does not verify, and the "
		"verdicts\n"
		"exit: 0 sound, 1 repaired, 4 bad generations left, 8 could "
		"not check, 16 usage\n");
}

static void line(const struct nvs_check_item *it, void *arg)
{
	(void)arg;
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

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"path", required_argument, NULL, 'p'},
		{"name", required_argument, NULL, 'n'},
		{"rank", required_argument, NULL, 'r'},
		{"repair", no_argument, NULL, 'R'},
		{"no-data", no_argument, NULL, 'D'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	unsigned flags = NVS_CHECK_DATA, rank = 0;
	struct nvs_swapper_opts o;
	int c, ret;

	tool_name = "nvswap-fsck";
	nvs_swapper_opts_init(&o);
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (o.npaths == NVS_SWAPPER_MAX_PATHS)
				tool_die(16, "at most %u --path",
					 NVS_SWAPPER_MAX_PATHS);
			o.nvme_paths[o.npaths++] = optarg;
			break;
		case 'n':
			o.name = optarg;
			break;
		case 'r':
			if (tool_parse_uint(optarg, 0, &rank) < 0)
				tool_die(16, "--rank: a whole number, not '%s'",
					 optarg);
			break;
		case 'R':
			flags |= NVS_CHECK_REPAIR;
			break;
		case 'D':
			flags &= ~(unsigned)NVS_CHECK_DATA;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 16;
		}
	}
	if (optind < argc || !o.npaths) {
		fprintf(stderr, "nvswap-fsck: %s\n",
			optind < argc ? "unexpected argument" : "no --path");
		usage(stderr);
		return 16;
	}
	o.rank = (int)rank;
	ret = nvs_swapset_check(&o, flags, line, NULL);
	fflush(stdout);
	if (ret < 0) {
		fprintf(stderr, "nvswap-fsck: %s\n", nvs_last_error());
		return 8;
	}
	if (ret == 0) {
		printf("the set verifies\n");
		return 0;
	}
	printf("%d generation(s) do not verify%s\n", ret,
	       (flags & NVS_CHECK_REPAIR) ? ": their manifests were removed"
					  : "; --repair removes them");
	return (flags & NVS_CHECK_REPAIR) ? 1 : 4;
}
