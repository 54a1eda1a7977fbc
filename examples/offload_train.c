// SPDX-License-Identifier: MIT
/*
 * The main job: train a small MLP (ReLU layers, mean squared error, Adam)
 * with its parameters, gradients and optimizer state all on NVMe through
 * the role swappers, configured by a DeepSpeed JSON file, with pinned
 * pools much smaller than the model. The same training runs in memory
 * beside it, and at the end the offloaded weights must equal the
 * in-memory ones bit for bit.
 *
 * --checkpoint-every N saves the offloaded state as persistent swap sets
 * (a checkpoint tagged "step N" of each role's set) before step 1 and
 * after every N-th step; --stop-after N saves it after step N and stops.
 * --resume reopens both sets at the newest step they share (a run killed
 * at any moment, even between the two sets' commits, has one) and trains
 * on from there, the in-memory run replaying the saved steps for its
 * reference: the step number is the whole of the rest of the state, as
 * a step's data comes from its number. The final weights must still
 * equal an uninterrupted run's bit for bit. A persistent run (these
 * flags, or "nvswap": {"persist": "persistent"} in the config) saves its
 * last step too, and a run that completes its last step removes its sets
 * unless --keep is given. A saved run is only ever resumed, never
 * trained over; a scratch run (make demo) that finds one says how to
 * finish or remove it.
 *
 * Ctrl-C (SIGINT) or SIGTERM stops the run at the next step: a scratch
 * run removes its swap files, a persistent one keeps its sets for
 * --resume, and the signal then ends the process as it would have.
 * Output is line-buffered, so a piped run (| tee log) shows each step as
 * it ends and keeps what it printed when it is interrupted.
 *
 *   offload_train [--config F] [--layers N] [--hidden N] [--steps N]
 *                 [--micro-batches N] [--checkpoint-every N]
 *                 [--stop-after N] [--resume] [--keep] [--help]
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nvswap/nvswap.h>

#include "train_model.h"

static unsigned STEPS = 8, MB = 2, STOP_AFTER, EVERY;
static bool RESUME, PERSISTENT, KEEP;

/* One step in memory: the reference. */
static float mem_step(struct mem *r, struct work *w, unsigned step)
{
	float loss = mem_grads(r, w, step, 0, MB);

	mem_update(r, step);
	return loss;
}

static int open_left(struct nvs_config *cfg);
static int saved_steps(struct nvs_swapper *s, unsigned *step, uint64_t *gen);

/* A role's swapper. With @persist (an enum nvs_persist, 0: as the config
 * says) over the config, at generation @gen (0: the newest); a saved run
 * is refused unless resuming. */
static int open_core(struct nvs_config *cfg, enum nvs_offload_kind kind,
		     int persist, uint64_t gen, struct nvs_swapper **out)
{
	struct nvs_swapper_opts so;
	int n;

	nvs_swapper_opts_init(&so);
	so.elem_size = sizeof(float);
	TRY(nvs_config_swapper_opts(cfg, kind, 0, &so));
	if (persist)
		so.persist = (uint8_t)persist;
	so.generation = gen;
	n = nvs_swapper_create(&so, out);
	if (n == -EEXIST && so.persist == NVS_PERSIST_SCRATCH)
		return open_left(cfg);
	TRY(n);
	PERSISTENT = so.persist != NVS_PERSIST_SCRATCH;
	if (!PERSISTENT || RESUME)
		return 0;
	n = nvs_swapper_generations(*out, NULL, 0);
	if (n > 0 && kind == NVS_OFFLOAD_OPTIMIZER) {
		/* The parameter set holds none (it was checked first). One
		 * generation: a run stopped in its first save, after the
		 * optimizer's commit. The last step saved: a complete run
		 * stopped while removing its sets (the parameters' first).
		 * Else that set was moved or deleted (its nvme_path
		 * changed): never delete these saved steps, say how. */
		static unsigned st[NVS_KEEP_GENERATIONS_MAX];
		static uint64_t sg[NVS_KEEP_GENERATIONS_MAX];
		int k = saved_steps(*out, st, sg);

		if (n > 1 && !(k > 0 && st[0] == STEPS)) {
			nvs_swapper_destroy(*out);
			*out = NULL;
			return open_left(cfg);
		}
		/* They belong to no run. */
		printf("%s: %d generation(s) without a parameter set, left "
		       "by a stopped run: removed\n",
		       nvs_swapper_dir(*out, 0), n);
		n = nvs_swapper_discard(*out);
		*out = NULL;
		TRY(n);
		TRY(nvs_swapper_create(&so, out));
		return 0;
	}
	if (n > 0) {
		fprintf(stderr,
			"offload_train: %s holds a saved run (%d generation(s))"
			": --resume it, or remove that directory to start "
			"again\n",
			nvs_swapper_dir(*out, 0), n);
		return -EEXIST;
	}
	return n;
}

/* The steps of @s's generations tagged "step N" (this example's
 * checkpoints; a "destroy" one is not), newest first, and their
 * numbers: how many, or -EINVAL. */
static int saved_steps(struct nvs_swapper *s, unsigned *step, uint64_t *gen)
{
	static struct nvs_generation_info g[NVS_KEEP_GENERATIONS_MAX];
	int n = nvs_swapper_generations(s, g, NVS_KEEP_GENERATIONS_MAX), k = 0;

	for (int i = 0; i < n && i < (int)NVS_KEEP_GENERATIONS_MAX; i++) {
		int used = 0;
		if (sscanf(g[i].tag, "step %u%n", &step[k], &used) == 1 &&
		    !g[i].tag[used])
			gen[k++] = g[i].generation;
	}
	if (k == 0)
		fprintf(stderr,
			"offload_train: %s holds no step this example saved "
			"(%d generation(s), the newest tagged \"%s\")\n",
			nvs_swapper_dir(s, 0), n, n > 0 ? g[0].tag : "");
	return k ? k : -EINVAL;
}

/* The newest generation of @s. */
static uint64_t newest(struct nvs_swapper *s)
{
	struct nvs_generation_info g;

	return nvs_swapper_generations(s, &g, 1) > 0 ? g.generation : 0;
}

/* The newest step both sets hold (*step) and its generation in each
 * (gen[0] parameters, gen[1] optimizer). The two commit one after the
 * other, so a kill between them leaves one set a checkpoint ahead; both
 * keep the one before (keep_generations >= 2, and see recommit()). */
static int resume_step(struct off *o, unsigned *step, uint64_t gen[2])
{
	unsigned sp[NVS_KEEP_GENERATIONS_MAX], so[NVS_KEEP_GENERATIONS_MAX];
	uint64_t gp[NVS_KEEP_GENERATIONS_MAX], go[NVS_KEEP_GENERATIONS_MAX];
	int np = saved_steps(o->pcore, sp, gp), no;

	if (np < 0 || (no = saved_steps(o->ocore, so, go)) < 0)
		return -EINVAL;
	for (int i = 0; i < np; i++)
		for (int k = 0; k < no; k++) {
			if (sp[i] != so[k])
				continue;
			if (sp[i] > STEPS) {
				fprintf(stderr,
					"offload_train: saved at step %u, "
					"beyond --steps %u\n",
					sp[i], STEPS);
				return -EINVAL;
			}
			*step = sp[i];
			gen[0] = gp[i];
			gen[1] = go[k];
			return 0;
		}
	fprintf(stderr,
		"offload_train: the parameters were saved at step %u, the "
		"optimizer state at step %u, and no step in common: not one "
		"run\n",
		sp[0], so[0]);
	return -EINVAL;
}

/* Save both sets at @step, as one checkpoint each tagged "step N": the
 * optimizer's first, so a step the parameter set holds is one the
 * optimizer set holds too (or held, before a newer commit of its own). A
 * run therefore exists exactly when its parameter set holds a
 * generation: teardown() discards that set first, and a new run
 * clears what an optimizer set holds without them (open_core()). */
static int save(struct off *o, unsigned step)
{
	char tag[32];
	int gp, go;

	snprintf(tag, sizeof(tag), "step %u", step);
	TRY(nvs_swapper_checkpoint(o->ocore, tag));
	TRY(go = nvs_swapper_checkpoint_wait(o->ocore));
	TRY(nvs_swapper_checkpoint(o->pcore, tag));
	TRY(gp = nvs_swapper_checkpoint_wait(o->pcore));
	printf("saved step %u: generation %d of %s, %d of %s\n", step, gp,
	       nvs_swapper_dir(o->pcore, 0), go, nvs_swapper_dir(o->ocore, 0));
	fflush(stdout);
	return 0;
}

/* A set reopened behind its newest generation (the one a kill between
 * the two commits left ahead) commits the step it resumed at again at
 * once: the generation ahead then counts as the older of the two kept,
 * and the next checkpoint drops it, never the step both sets share. */
static int recommit(struct nvs_swapper *s, unsigned step)
{
	char tag[32];
	int g;

	snprintf(tag, sizeof(tag), "step %u", step);
	TRY(nvs_swapper_checkpoint(s, tag));
	TRY(g = nvs_swapper_checkpoint_wait(s));
	printf("%s was a checkpoint ahead (a run stopped between the two "
	       "commits): step %u saved again as its generation %d\n",
	       nvs_swapper_dir(s, 0), step, g);
	return 0;
}

/* A persistent set where a scratch run wants its swap space: what an
 * interrupted --stop-after, --checkpoint-every or persistent run left.
 * Say what to do with it. Returns -EEXIST. */
static int open_left(struct nvs_config *cfg)
{
	static const enum nvs_offload_kind kinds[2] = {NVS_OFFLOAD_PARAM,
						       NVS_OFFLOAD_OPTIMIZER};
	char dirs[2 * 4096 + 2] = "";
	unsigned step = 0;
	bool stepped = false;

	for (unsigned i = 0; i < 2; i++) {
		struct nvs_swapper_opts so;
		struct nvs_swapper *s;
		unsigned st[NVS_KEEP_GENERATIONS_MAX];
		uint64_t g[NVS_KEEP_GENERATIONS_MAX];

		nvs_swapper_opts_init(&so);
		so.elem_size = sizeof(float);
		if (nvs_config_swapper_opts(cfg, kinds[i], 0, &so) < 0)
			continue;
		so.persist = NVS_PERSIST_RESUME;
		if (nvs_swapper_create(&so, &s) < 0)
			continue;
		snprintf(dirs + strlen(dirs), sizeof(dirs) - strlen(dirs),
			 " %.4000s", nvs_swapper_dir(s, 0));
		for (unsigned p = 1; nvs_swapper_dir(s, p); p++)
			snprintf(dirs + strlen(dirs),
				 sizeof(dirs) - strlen(dirs), " %.4000s",
				 nvs_swapper_dir(s, p));
		if (i == 0 && saved_steps(s, st, g) > 0) {
			step = st[0];
			stepped = true;
		}
		nvs_swapper_destroy(s); /* unchanged: its files stay as
					 * they are */
	}
	fprintf(stderr, "offload_train: the persistent swap set of an "
			"interrupted run is in the way (");
	if (stepped)
		fprintf(stderr, "saved at step %u", step);
	else
		fprintf(stderr, "no step saved");
	fprintf(stderr,
		"). Finish that run: offload_train --resume, with the "
		"options it ran with; or remove it: rm -r%s\n",
		*dirs ? dirs
		      : " <nvme_path>/nvswap/param/rank0 "
			"<nvme_path>/nvswap/optimizer/rank0");
	return -EEXIST;
}

/* Open both sets (resuming: at the newest step both hold, *first the
 * step after it) and the role swappers over them. */
static int setup(const char *config, struct off *o, float *init, int persist,
		 unsigned *first)
{
	struct nvs_swapper **core[2] = {&o->pcore, &o->ocore};
	static const enum nvs_offload_kind kinds[2] = {NVS_OFFLOAD_PARAM,
						       NVS_OFFLOAD_OPTIMIZER};
	bool behind[2] = {false, false};
	uint64_t gen[2] = {0, 0};
	struct nvs_config *cfg;
	unsigned sp = 0;
	int ret = -1;

	TRY(nvs_config_load(config, &cfg));
	for (unsigned i = 0; nvs_config_warning(cfg, i); i++)
		fprintf(stderr, "note: %s\n", nvs_config_warning(cfg, i));
	for (unsigned i = 0; i < 2; i++)
		if (open_core(cfg, kinds[i], persist, 0, core[i]) < 0)
			goto out;
	if (RESUME) {
		if (resume_step(o, &sp, gen) < 0)
			goto out;
		for (unsigned i = 0; i < 2; i++) {
			if (gen[i] == newest(*core[i]))
				continue;
			behind[i] = true;
			if (nvs_swapper_destroy(*core[i]) < 0 ||
			    open_core(cfg, kinds[i], persist, gen[i],
				      (*core[i] = NULL, core[i])) < 0)
				goto out;
		}
		*first = sp + 1;
	}
	if (off_setup(cfg, o, init) < 0)
		goto out;
	for (unsigned i = 0; i < 2; i++)
		if (behind[i] && recommit(*core[i], sp) < 0)
			goto out;
	ret = 0;
out:
	nvs_config_free(cfg);
	return ret;
}

static bool made_sample_dir;
/* The persistent sets' directories, as teardown() found them. */
static char set_list[2 * NVS_SWAPPER_MAX_PATHS * 64];

/* Destroy whatever setup made, first error kept: every exit path runs
 * this, so a run stopped by a full disk leaves no swap files behind.
 * @remove: a complete run's persistent sets go too (unless --keep), so
 * the next run starts afresh and nothing is left behind: discarded
 * while still locked, the parameter set first (a run exists exactly
 * when its parameter set holds a generation: see save()). */
static int teardown(struct off *o, bool remove)
{
	char *said = set_list;
	int r[5], ret = 0;

	*said = '\0';
	for (unsigned c = 0; PERSISTENT && c < 2; c++) {
		struct nvs_swapper *s = c ? o->ocore : o->pcore;
		for (unsigned i = 0; s && nvs_swapper_dir(s, i); i++)
			snprintf(said + strlen(said),
				 sizeof(set_list) - strlen(said), "%s%s",
				 *said ? ", " : "", nvs_swapper_dir(s, i));
	}
	r[0] = nvs_param_swapper_destroy(o->params);
	r[1] = nvs_optim_swapper_destroy(o->optim);
	r[2] = nvs_grad_swapper_destroy(o->grads);
	remove = remove && PERSISTENT && *said && r[0] >= 0 && r[1] >= 0 &&
		 r[2] >= 0;
	r[3] = remove ? nvs_swapper_discard(o->pcore)
		      : nvs_swapper_destroy(o->pcore);
	r[4] = remove ? nvs_swapper_discard(o->ocore)
		      : nvs_swapper_destroy(o->ocore);
	for (unsigned i = 0; i < 5; i++)
		if (r[i] < 0 && !ret) {
			ret = r[i];
			fprintf(stderr, "offload_train: %s\n",
				nvs_last_error());
		}
	*o = (struct off){0};
	if (remove && !ret)
		printf("removed the persistent swap sets (%s): the run is "
		       "complete (--keep keeps them)\n",
		       said);
	if (made_sample_dir)
		rmdir("nvme_swap"); /* only when empty: never the user's */
	made_sample_dir = false;
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: offload_train [--config F] [--layers N] "
		   "[--hidden N] [--steps N] [--micro-batches N]\n"
		   "                     [--checkpoint-every N] "
		   "[--stop-after N] [--resume] [--keep]\n");
}

static void help(void)
{
	usage(stdout);
	printf("\nTrains an MLP with its parameters, gradients and Adam state "
	       "on NVMe\n(the config's nvme_path) beside the same run in "
	       "memory; the verdict\nsays whether the final weights are "
	       "equal bit for bit.\n\n"
	       "  --config F            DeepSpeed JSON config "
	       "(examples/ds_config.json)\n"
	       "  --layers N, --hidden N, --steps N, --micro-batches N\n"
	       "                        the model and the run (16, 768, 8, "
	       "2)\n"
	       "  --checkpoint-every N  save the state every N steps (and "
	       "before step 1)\n"
	       "                        as persistent swap sets: a run killed "
	       "at any moment\n"
	       "                        goes on with --resume from its last "
	       "checkpoint\n"
	       "  --stop-after N        save the state after step N and "
	       "stop\n"
	       "  --resume              train on from the last step both sets "
	       "saved\n"
	       "  --keep                keep the persistent sets when the last "
	       "step is done\n"
	       "                        (by default a complete run removes "
	       "them)\n");
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	stop_signal = sig;
}

/* The run was asked to stop (stop_signal) at step @step: tear down
 * as a failure does (a scratch run's files removed, a persistent run's
 * sets kept), say so, and end by the signal itself, so that the shell
 * and any caller see what happened. */
static int interrupted(struct off *o, unsigned step)
{
	int sig = stop_signal;
	bool kept = PERSISTENT;

	teardown(o, false);
	fprintf(stderr, "\noffload_train: %s at step %u: %s\n", strsignal(sig),
		step,
		kept ? "its sets are kept: run again with --resume to go "
		       "on from its last checkpoint"
		     : "its swap files are removed");
	signal(sig, SIG_DFL);
	raise(sig);
	return 128 + sig;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"config", required_argument, NULL, 'c'},
		{"layers", required_argument, NULL, 'l'},
		{"hidden", required_argument, NULL, 'h'},
		{"steps", required_argument, NULL, 's'},
		{"micro-batches", required_argument, NULL, 'm'},
		{"stop-after", required_argument, NULL, 'a'},
		{"resume", no_argument, NULL, 'r'},
		{"checkpoint-every", required_argument, NULL, 'e'},
		{"keep", no_argument, NULL, 'k'},
		{"help", no_argument, NULL, 'H'},
		{NULL, 0, NULL, 0},
	};
	const char *config = "examples/ds_config.json";
	struct nvs_swap_stats a, b;
	struct off o = {0};
	/* Static: reachable until exit on every path, so LeakSanitizer
	 * sees the process's working memory, not leaks. */
	static struct mem r;
	static struct work w;
	unsigned first = 1, last;
	int c, persist = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned *dst = c == 'l'   ? &L
				: c == 'h' ? &H
				: c == 's' ? &STEPS
				: c == 'a' ? &STOP_AFTER
				: c == 'e' ? &EVERY
					   : &MB;
		if (c == 'H') {
			help();
			return 0;
		}
		if (c == 'c' || c == 'r' || c == 'k') {
			config = c == 'c' ? optarg : config;
			RESUME |= c == 'r';
			KEEP |= c == 'k';
			continue;
		}
		if (c == '?' || !(*dst = arg_uint(optarg, 1, 1u << 16))) {
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc || (STOP_AFTER && STOP_AFTER >= STEPS)) {
		if (optind < argc)
			fprintf(stderr, "offload_train: %s: not an option\n",
				argv[optind]);
		else
			fprintf(stderr, "offload_train: --stop-after takes a "
					"step before the last (--steps)\n");
		usage(stderr);
		return 2;
	}
	if (STOP_AFTER || EVERY || RESUME)
		persist = RESUME ? NVS_PERSIST_RESUME : NVS_PERSIST_PERSISTENT;
	last = STOP_AFTER ? STOP_AFTER : STEPS;
	model_prog = "offload_train";
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* SA_RESETHAND: a second Ctrl-C ends the run at once. */
	struct sigaction sa = {.sa_handler = on_stop_signal,
			       .sa_flags = SA_RESTART | SA_RESETHAND};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	model_init();
	if (mem_alloc(&r) < 0 || work_alloc(&w) < 0)
		return 1;
	/* The sample config's nvme_path; removed again, when empty, by
	 * teardown if this run made it. */
	made_sample_dir = mkdir("nvme_swap", 0700) == 0;
	if (setup(config, &o, w.g, persist, &first) < 0) {
		teardown(&o, false);
		return 1;
	}
	if (STOP_AFTER && first > STOP_AFTER) {
		fprintf(stderr,
			"offload_train: resumed after step %u: --stop-after "
			"%u is behind it\n",
			first - 1, STOP_AFTER);
		teardown(&o, false);
		return 2;
	}
	/* The reference replays the saved steps in memory. */
	for (unsigned step = 1; step < first; step++)
		mem_step(&r, &w, step);

	double model = (double)L * PN * sizeof(float);
	nvs_swapper_stats(o.pcore, &a);
	nvs_swapper_stats(o.ocore, &b);
	printf("offload_train: %u layers x %u hidden, batch %u x %u "
	       "micro-batches, Adam, %u steps; config %s\n",
	       L, H, BATCH, MB, STEPS, config);
	printf("on NVMe (%s, %s): parameters %.1f MiB, gradients %.1f MiB, "
	       "optimizer state %.1f MiB; pinned pools %.1f + %.1f MiB\n",
	       nvs_swapper_dir(o.pcore, 0), nvs_backend_name(a.backend),
	       model / 1048576, model / 1048576, 2 * model / 1048576,
	       (double)a.buffer_count * a.buffer_size / 1048576,
	       (double)b.buffer_count * b.buffer_size / 1048576);
	if (RESUME)
		printf("resumed after step %u (saved in %s and %s); the "
		       "in-memory run replayed steps 1-%u\n",
		       first - 1, nvs_swapper_dir(o.pcore, 0),
		       nvs_swapper_dir(o.ocore, 0), first - 1);
	/* --checkpoint-every: the initial state is the first checkpoint, so
	 * a kill in step 1 resumes too. */
	if (EVERY && !RESUME && save(&o, 0) < 0) {
		teardown(&o, false);
		return 1;
	}
	uint64_t rd0 = a.bytes_read + b.bytes_read;
	uint64_t wr0 = a.bytes_written + b.bytes_written;
	uint64_t wait0 = a.acquire_wait_ns + b.acquire_wait_ns;
	for (unsigned step = first; step <= last; step++) {
		float loss, ref_loss;
		if (stop_signal)
			return interrupted(&o, step);
		if (isatty(2))
			fprintf(stderr, "\rstep %u/%u ...", step, STEPS);
		double t0 = now();
		if (off_grads(&o, &w, step, 0, MB, &loss) < 0 ||
		    off_update(&o, &w, step, NULL, NULL) < 0) {
			teardown(&o, false);
			return 1;
		}
		double t1 = now();
		if (stop_signal)
			return interrupted(&o, step);
		ref_loss = mem_step(&r, &w, step);
		double t2 = now();
		nvs_swapper_stats(o.pcore, &a);
		nvs_swapper_stats(o.ocore, &b);
		uint64_t rd = a.bytes_read + b.bytes_read;
		uint64_t wr = a.bytes_written + b.bytes_written;
		uint64_t wt = a.acquire_wait_ns + b.acquire_wait_ns;
		if (isatty(2))
			fprintf(stderr, "\r");
		printf("step %u: loss %.6f (in memory %.6f)  %.2f s offloaded, "
		       "%.2f s in memory  read %.1f MiB  written %.1f MiB  "
		       "I/O exposed %.0f ms\n",
		       step, (double)loss, (double)ref_loss, t1 - t0, t2 - t1,
		       (double)(rd - rd0) / 1048576,
		       (double)(wr - wr0) / 1048576,
		       (double)(wt - wait0) / 1e6);
		rd0 = rd;
		wr0 = wr;
		wait0 = wt;
		if (EVERY && step % EVERY == 0 && step < last &&
		    save(&o, step) < 0) {
			teardown(&o, false);
			return 1;
		}
	}
	if (PERSISTENT && first <= last && save(&o, last) < 0) {
		teardown(&o, false);
		return 1;
	}

	/* Pinned memory against the pools (the aio handles' bounce memory
	 * is pinned too, and counted). */
	struct nvs_pinned_stats ps;
	struct rusage ru;
	nvs_pinned_stats(&ps);
	getrusage(RUSAGE_SELF, &ru);
	double pools = (double)a.buffer_count * a.buffer_size +
		       (double)b.buffer_count * b.buffer_size;
	printf("memory: pinned high water %.1f MiB, locked %.1f MiB, for "
	       "pools of %.1f MiB (%.2fx); peak RSS %.1f MiB (the in-memory "
	       "run included)\n",
	       (double)ps.high_water / 1048576,
	       (double)ps.bytes_locked / 1048576, pools / 1048576,
	       (double)ps.high_water / pools, (double)ru.ru_maxrss / 1024);

	/* The verdict: every weight, bit for bit. */
	size_t differ = 0;
	for (unsigned l = 0; l < L; l++) {
		void *pp[2];
		if (nvs_param_acquire_layer(o.params, l, pp) < 0) {
			fprintf(stderr, "offload_train: %s\n",
				nvs_last_error());
			teardown(&o, false);
			return 1;
		}
		if (memcmp(pp[0], r.p[l], WN * sizeof(float)) ||
		    memcmp(pp[1], r.p[l] + WN, H * sizeof(float)))
			differ++;
		nvs_param_release_layer(o.params, l, false);
		nvs_param_evict_layer(o.params, l);
	}
	/* A failing run keeps its sets: they are its evidence. */
	if (teardown(&o, PERSISTENT && !STOP_AFTER && !KEEP && !differ) < 0)
		return 1;
	if (differ) {
		if (PERSISTENT && *set_list)
			printf("kept for a look: %s\n", set_list);
		printf("verdict: FAIL, %zu of %u layers differ from the "
		       "in-memory run\n",
		       differ, L);
		return 1;
	}
	printf("verdict: the offloaded weights equal the in-memory run's bit "
	       "for bit (%u layers, %.1f MiB%s)\n",
	       L, model / 1048576, RESUME ? ", resumed" : "");
	if (STOP_AFTER)
		printf("stopped after step %u of %u: run again with --resume "
		       "to finish\n",
		       last, STEPS);
	if (stop_signal) { /* asked to stop after the last step: say so */
		signal(stop_signal, SIG_DFL);
		raise(stop_signal);
	}
	return 0;
}
