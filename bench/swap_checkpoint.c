// SPDX-License-Identifier: MIT
/*
 * What a checkpoint of offloaded state costs: a persistent swap set of
 * --tensors tensors of --size bytes (all on NVMe), of which --dirty K are
 * resident and changed; nvs_swapper_checkpoint() then writes only those K
 * (plus a manifest). For each K in the list, --reps times: K tensors are
 * acquired, changed and released dirty, then the checkpoint is timed: the
 * call (what the training loop waits for) and the commit (until
 * nvs_swapper_checkpoint_wait() returns: durable). bench/swap_checkpoint.py
 * puts fio's time to write the whole state beside it.
 *
 *   nvswap-bench-swapckpt --dir D [--tensors 64] [--size 16M]
 *                         [--dirty 0,6,16] [--reps 3]
 *
 * Prints one line per K: "swapckpt: dirty K of N: call MED ms [MIN-MAX],
 * commit MED s [MIN-MAX], written B bytes".
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvswap/nvswap.h>

#include "bench.h"

#define MAX_LEVELS 8
#define MAX_REPS 64

static int fail(const char *what)
{
	fprintf(stderr, "nvswap-bench-swapckpt: %s: %s\n", what,
		nvs_last_error());
	return 1;
}

/* Change tensors [first, first + k) (mod n) and release them dirty. */
static int dirty(struct nvs_swapper *s, unsigned n, unsigned first, unsigned k,
		 unsigned char mark)
{
	for (unsigned i = 0; i < k; i++) {
		uint64_t id = (first + i) % n;
		void *p;
		if (nvs_swapper_acquire(s, id, &p) < 0)
			return fail("acquire");
		((unsigned char *)p)[0] = mark;
		((unsigned char *)p)[4096] = mark;
		if (nvs_swapper_release(s, id, true) < 0)
			return fail("release");
	}
	return 0;
}

static int parse_levels(char *arg, unsigned *lv, unsigned *nlv)
{
	*nlv = 0;
	for (char *t = strtok(arg, ","); t; t = strtok(NULL, ",")) {
		if (*nlv == MAX_LEVELS)
			return -1;
		lv[(*nlv)++] = (unsigned)strtoul(t, NULL, 10);
	}
	return *nlv ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dir", required_argument, NULL, 'd'},
		{"tensors", required_argument, NULL, 'n'},
		{"size", required_argument, NULL, 's'},
		{"dirty", required_argument, NULL, 'k'},
		{"reps", required_argument, NULL, 'r'},
		{NULL, 0, NULL, 0},
	};
	char levels[64] = "0,6,16";
	const char *dir = NULL;
	unsigned n = 64, reps = 3, lv[MAX_LEVELS], nlv, kmax = 0, at = 0;
	size_t size = 16u << 20;
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'd')
			dir = optarg;
		else if (c == 'n')
			n = (unsigned)strtoul(optarg, NULL, 10);
		else if (c == 's' && bench_parse_size(optarg, &size) == 0)
			continue;
		else if (c == 'k')
			snprintf(levels, sizeof(levels), "%s", optarg);
		else if (c == 'r')
			reps = (unsigned)strtoul(optarg, NULL, 10);
		else
			goto usage;
	}
	if (!dir || !n || !reps || reps > MAX_REPS ||
	    parse_levels(levels, lv, &nlv) < 0)
		goto usage;
	for (unsigned i = 0; i < nlv; i++) {
		if (lv[i] > n)
			goto usage;
		kmax = lv[i] > kmax ? lv[i] : kmax;
	}

	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = dir;
	o.name = "bench-ckpt";
	o.persist = NVS_PERSIST_PERSISTENT;
	o.buffer_size = size;
	o.buffer_count = kmax + 1; /* the dirty ones stay resident */
	o.auto_evict = true;
	if (nvs_swapper_create(&o, &s) < 0)
		return fail("nvs_swapper_create");
	if (nvs_swapper_generations(s, NULL, 0) > 0) {
		fprintf(stderr,
			"nvswap-bench-swapckpt: %s holds a set already: "
			"remove %s/nvswap/bench-ckpt\n",
			dir, dir);
		nvs_swapper_destroy(s);
		return 1;
	}
	unsigned char *init = malloc(size);
	if (!init)
		return 1;
	for (unsigned i = 0; i < n; i++) {
		memset(init, (int)(i + 1), size);
		if (nvs_swapper_register(s, i, size, init) < 0)
			return fail("register");
	}
	free(init);
	if (nvs_swapper_checkpoint(s, "base") < 0 ||
	    nvs_swapper_checkpoint_wait(s) < 0)
		return fail("first checkpoint");

	for (unsigned l = 0; l < nlv; l++) {
		double call[MAX_REPS], commit[MAX_REPS];
		struct nvs_swap_stats a, b;
		uint64_t written = 0;

		for (unsigned r = 0; r < reps; r++) {
			if (dirty(s, n, at, lv[l], (unsigned char)(r + l)))
				return 1;
			at = (at + lv[l]) % n;
			nvs_swapper_stats(s, &a);
			double t0 = bench_now();
			if (nvs_swapper_checkpoint(s, NULL) < 0)
				return fail("checkpoint");
			double t1 = bench_now();
			if (nvs_swapper_checkpoint_wait(s) < 0)
				return fail("checkpoint_wait");
			double t2 = bench_now();
			nvs_swapper_stats(s, &b);
			call[r] = (t1 - t0) * 1e3;
			commit[r] = t2 - t0;
			written = b.bytes_written - a.bytes_written;
		}
		double cm = bench_median(call, (int)reps);
		double mm = bench_median(commit, (int)reps);
		printf("swapckpt: dirty %u of %u: call %.3f ms [%.3f-%.3f], "
		       "commit %.4f s [%.4f-%.4f], written %llu bytes\n",
		       lv[l], n, cm, call[0], call[reps - 1], mm, commit[0],
		       commit[reps - 1], (unsigned long long)written);
	}
	if (nvs_swapper_destroy(s) < 0)
		return fail("destroy");
	return 0;
usage:
	fprintf(stderr, "usage: nvswap-bench-swapckpt --dir D [--tensors N] "
			"[--size S] [--dirty K,K,...] [--reps R]\n");
	return 2;
}
