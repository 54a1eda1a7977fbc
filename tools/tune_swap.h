// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's swap workload, shared by its two files: tune_swap.c (the
 * job, the candidate pools and aio settings, the layer walk through the
 * parameter swapper and the three stages) and tune_swap_out.c (tables,
 * JSON and the config keys it writes). Not installed.
 */
#ifndef NVSWAP_TUNE_SWAP_H
#define NVSWAP_TUNE_SWAP_H

#include "tune.h"

/* Stages: the pool shapes with the config's aio settings; the aio
 * settings with the best shape; the best of both, crossed, and the
 * config's own settings, interleaved. */
enum { ST_POOL = 0, ST_AIO = 1, ST_FINAL = 2, NSTAGES = 3 };
extern const char *const stage_name[NSTAGES];

struct swap_point {
	struct setting s;
	unsigned bufs, look; /* buffer_count, nvswap.lookahead */
	bool is_base;	     /* the config's own settings */
	bool fits;	     /* within the pinned budget: may win */
	bool in[NSTAGES];    /* measured in that stage */
	char *skip;	     /* why no swapper could be made; NULL = ran */
	double samp[NSTAGES][MAXLOOPS]; /* seconds per step */
	unsigned nsamp[NSTAGES];
	struct dstat st[NSTAGES];
};

/* The job: what is walked, and within what memory. */
struct swap_job {
	uint64_t elems;	 /* buffer_size written: a layer's 2-byte
				 elements, rounded up */
	size_t buf;	 /* bytes per pool buffer (elems x 2) */
	uint64_t budget; /* pinned bytes the pool may take */
	char budget_from[PATH_MAX + 128]; /* where the budget comes from */
	unsigned maxbufs;		  /* the largest buffer_count tried */
	struct setting base;		  /* the config's aio settings */
	unsigned base_bufs;		  /* the config's buffer_count */
	unsigned base_look;		  /* the config's nvswap.lookahead */
	bool base_nvme;			  /* the file written from has
				 offload_param.device "nvme" */
	double secs[NSTAGES];		  /* each stage's wall time */
};
extern struct swap_job J;
extern struct swap_point **SP;
extern unsigned nsp;

/* tune_swap.c */
double tune_swap_score(const struct swap_point *p, int stage);
const char *tune_swap_str(const struct swap_point *p, char *buf, size_t len);

/* tune_swap_out.c */
json_t *tune_swap_snippet(const struct swap_point *p);
void tune_swap_print_intro(unsigned nshapes, unsigned naio);
void tune_swap_print_stage(struct swap_point **set, unsigned n, int stage);
int tune_swap_report(struct swap_point **fin, unsigned n,
		     const struct swap_point *best,
		     const struct swap_point *base);

#endif /* NVSWAP_TUNE_SWAP_H */
