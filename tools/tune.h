// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's internals, shared by its files (nvswap_tune.c: main and
 * the state; tune_args.c, tune_space.c, tune_measure.c, tune_results.c,
 * tune_plot.c; --ranks N's other processes in tune_ranks.c; the swap
 * workload in tune_swap*.c, see tune_swap.h): the search space, settings
 * and points, the arguments, and the functions one file calls in
 * another. Not installed.
 */
#ifndef NVSWAP_TUNE_H
#define NVSWAP_TUNE_H

#include "tool.h"

#include <nvswap/nvswap.h>

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MAXV 16	     /* values per dimension of the search space */
#define MAXPATHS 16  /* NVS_CONFIG_MAX_PATHS */
#define MAXLOOPS 100 /* timed ops per point and direction */
#define FINALISTS 3  /* per criterion, into the final round */
#define NARROW 8     /* --quick: per criterion, into the narrowing round */
#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)
#define MAXRANKS 64 /* --ranks */

enum { RD = 0, WR = 1, NDIR = 2 };
/* Criteria: read, write, and combined (the harmonic mean of the two: the
 * rate of a swap that reads and writes the same bytes). */
enum { CRIT_COMBINED = 2, NCRIT = 3 };
extern const char *const crit_name[NCRIT];
/* Rounds: every point; (--quick) the best few dozen at a quarter size;
 * the finalists and the defaults at full size, interleaved. */
enum { SWEEP = 0, NARROWED = 1, FINAL = 2, NROUNDS = 3 };
extern const char *const round_name[NROUNDS];
enum { PLOT_AUTO, PLOT_GNUPLOT, PLOT_SVG };
/* --workload: unset until the arguments are checked (then swap when a
 * --config was given, else seq). */
enum { WL_UNSET = 0, WL_SEQ, WL_SWAP };

struct space {
	uint32_t bs[MAXV], qd[MAXV], par[MAXV];
	bool ov[2], ss[2];
	enum nvs_backend be[3];
	unsigned nbs, nqd, npar, nov, nss, nbe;
};

struct setting {
	enum nvs_backend be; /* never AUTO */
	uint32_t bs, qd, par;
	bool ov, ss;
};

struct dstat {
	double med, lo, hi;
	unsigned n;
};

struct point {
	struct setting s;
	bool is_default; /* what a config without an "aio" section gives */
	int reached;	 /* the last round it is measured in */
	char *skip;	 /* why no handle could be made; NULL = measured */
	double samp[NDIR][MAXLOOPS];
	unsigned nsamp[NDIR];
	struct dstat st[NROUNDS][NDIR];
	/* --ranks > 1: per op, the fastest rank's GB/s over the slowest's */
	double fsamp[NDIR][MAXLOOPS];
	struct dstat fst[NROUNDS][NDIR];
};

struct args {
	const char *paths[MAXPATHS];
	unsigned npaths;
	size_t io_size;
	unsigned loops;
	bool dir[NDIR]; /* measure reads, writes */
	bool quick, json, verbose, unpinned;
	int progress; /* -1 when stderr is a terminal, 0 off, 1 on */
	const char *sweep, *plot, *write_config;
	int engine;
	unsigned seed;
	unsigned ranks;	    /* --ranks: processes per point (seq), default 1 */
	int workload;	    /* WL_* */
	const char *config; /* --config: the DeepSpeed config tuned for */
	unsigned layers;    /* --layers (swap), 0 = not given */
	size_t tensor_size; /* --tensor-size (swap), 0 = not given */
	size_t max_pinned;  /* --max-pinned (swap), 0 = the config's */
	/* given on the command line (some belong to one workload only) */
	bool io_size_set, dir_set;
};

/* The progress line's state (tune_measure.c draws it). */
struct progress {
	double t0, total, done, last;
	const char *what;
	unsigned pts, npts;
};

/* nvswap_tune.c: the state every step shares. */
extern struct args A;
extern struct space S;
extern struct point *P;
extern unsigned np;
extern enum nvs_backend auto_be;      /* what NVS_BACKEND_AUTO picks here */
extern struct setting dflt;	      /* nvs_config_aio_opts() of "{}" */
extern char real[MAXPATHS][PATH_MAX]; /* the paths, resolved */
extern int fds[MAXPATHS];
extern struct nvs_aio *checker; /* default settings: reads written data back */
extern unsigned char *wbuf[MAXPATHS], *rbuf[MAXPATHS];
extern const char *backend_env; /* NVSWAP_BACKEND, when it was set */
extern bool progress_shown;
/* The sweep config's text and parsed tree while tune_load_sweep() judges
 * them: a refusal exits from deep inside, and cleanup() frees them then. */
extern json_t *sweep_root;
extern char *sweep_text;
/* --config loaded (or "{}" without one): what the swap workload starts
 * from; the nvme paths in A.paths may point into it. */
extern struct nvs_config *ucfg;
/* A config snippet being checked or written, for the cleanup when that
 * dies. */
extern json_t *tune_held;

/* tune_space.c: the backends probed here. */
extern bool be_ok[4];	    /* probed: this backend makes a handle */
extern char be_why[4][256]; /* else why not */

/* tune_measure.c */
extern struct progress prog;
extern unsigned rnd_state;

/* nvswap_tune.c: temporary files and text. */
const char *tune_tmp_add(const char *base, const char *mid, const char *ext);
/* --ranks > 1: "<base><mid><parent pid>.r<rank><ext>", any rank's. */
const char *tune_tmp_add_rank(const char *base, const char *mid,
			      const char *ext, unsigned rank);
void tune_tmp_forget(const char *path);
const char *tune_bname(enum nvs_backend b);
const char *tune_setting_str(const struct setting *s, char *buf, size_t len);
void tune_progress_end(void); /* clears the progress line */

/* tune_args.c: command line and checks. */
void tune_parse(int argc, char **argv);
void tune_load_config(void);
void tune_check_args(void);
void tune_check_path(const char *dir, uint64_t need, const char *what);
/* (consumes @snip) */
void tune_check_write_config(json_t *snip, enum nvs_backend be);

/* tune_space.c: the search space. */
void tune_load_sweep(void);
void tune_default_space(void);
void tune_probe(void);
struct setting *tune_space_settings(unsigned *n);
void tune_make_points(void);

/* tune_measure.c: measuring. */
void tune_check_direct(unsigned i);
void tune_progress(bool force);
struct dstat tune_summarize(const double *samp, unsigned n);
unsigned tune_rnd(void);
void tune_shuffle(void *set, unsigned n, size_t size);
void tune_prepare(void);
/* nvs_last_error(), copied: why a point was skipped. */
char *tune_skip_reason(void);
double tune_round_bytes(struct point **set, unsigned n, int round,
			unsigned loops);
void tune_run_round(struct point **set, unsigned n, int round, unsigned loops);

/* tune_ranks.c: --ranks N, the other N-1 processes (children). The
 * parent sends a point (RC_MEASURE), then per op each child answers
 * ready (ok, or why its handle failed), gets RC_GO or RC_STOP, and after
 * GO answers its op's start and end. */
enum { RC_MEASURE = 1, RC_GO, RC_STOP, RC_QUIT };
struct rank_cmd {
	int kind, d;
	unsigned point, loops;
	size_t n;
};
struct rank_msg {
	int ok;
	double t0, t1; /* tool_now() of the op's start and end */
	char err[240];
};
extern unsigned tune_rank;   /* 0: the parent (or the only rank) */
extern long tune_base_pid;   /* the parent's pid: the files' names */
void tune_ranks_start(void); /* forks ranks 1..N-1 (each tune_prepare()s) */
void tune_ranks_kill(void);  /* async-signal-safe: SIGKILL, reap all */
void tune_ranks_stop(void);  /* kills and reaps them (cleanup) */
void tune_ranks_end(void);   /* asks them to quit, reaps, dies if one failed */
void tune_ranks_bcast(const struct rank_cmd *c);
void tune_ranks_recv(unsigned r, struct rank_msg *m);
void tune_rank_get(struct rank_cmd *c);	      /* in a child */
void tune_rank_put(const struct rank_msg *m); /* in a child */
/* tune_measure.c: a child's side of one RC_MEASURE. */
void tune_rank_measure(const struct rank_cmd *c);

/* tune_results.c: results. */
bool tune_crit_on(int c);
double tune_score(const struct point *p, int round, int c);
void tune_sort_points(struct point **set, unsigned n, int round, int c);
struct point **tune_all_points(void);
unsigned tune_promote(int from, int to, unsigned k, struct point **next);
json_t *tune_setting_json(const struct setting *s);
json_t *tune_num(double v);
json_t *tune_round_json(const struct point *p, int round);
json_t *tune_snippet(const struct setting *s);
char *tune_merged_config_or_die(json_t *snip, enum nvs_backend be);
bool tune_write_config(json_t *snip, enum nvs_backend be);
void tune_print_written(bool merged);
void tune_print_row(const struct point *p, int round, const char *mark);
void tune_print_header(void);
void tune_print_lists(void);
void tune_print_space(void);

/* tune_plot.c: the plot. */
const char *tune_plot(void);

/* tune_swap.c: the swap workload, from its checks to its output. */
void tune_swap_setup(void);
int tune_swap_main(void);
void tune_swap_cleanup(void);

#endif /* NVSWAP_TUNE_H */
