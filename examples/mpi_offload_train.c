// SPDX-License-Identifier: MIT
/*
 * Data-parallel offloaded training over MPI: offload_train's model
 * (train_model.c) on every rank, each rank's parameters, gradients and
 * optimizer state on NVMe through its own swappers (the config's
 * nvme_path, in nvswap/param/rank<R>/ and nvswap/optimizer/rank<R>/),
 * each rank training on its own shard of the data (micro-batches
 * R*MB .. R*MB + MB - 1 of every step), the gradients averaged over the
 * ranks before each layer's Adam step. Rank 0 also trains a
 * single-process reference in memory, and at the end every rank's
 * weights must equal the reference's bit for bit, and each other's
 * (rank 0 broadcasts its weights, every rank compares them byte for
 * byte); the verdict line says so, and the exit status is 1 on every
 * rank when they do not.
 *
 * Why not MPI_Allreduce: a float sum depends on its order, and
 * MPI_Allreduce promises none (Open MPI picks the algorithm by message
 * size and rank count; a ring reduces each chunk in a different order,
 * and the order may differ between runs). So each layer's gradient is
 * gathered whole from every rank (MPI_Allgather) and every rank sums the
 * copies itself, in rank order from rank 0 (sum_in_rank_order()), then
 * divides by the rank count: every rank computes the same bits, and the
 * reference does exactly that with the per-shard gradients it computes
 * one after another. The price is traffic: each rank receives R
 * gradients (R x N) where a reduce-scatter/allgather moves about 2N;
 * MPI_Alltoall of slices (each rank summing one slice in rank order)
 * then MPI_Allgather of the sums would keep the fixed order at that
 * cost, which matters on a network, not here.
 *
 * Run it under mpirun (make demo-mpi: 4 ranks):
 *   mpirun -np 4 mpi_offload_train [--config F] [--layers N]
 *          [--hidden N] [--steps N] [--micro-batches N]
 *          [--corrupt-rank R]
 * --micro-batches: per rank (2). --corrupt-rank R flips one bit of rank
 * R's weights before the comparison, a check of the check: the verdict
 * must then be FAIL, and the exit status 1.
 * As root, Open MPI also wants --allow-run-as-root; on one machine with
 * fewer cores than ranks, --oversubscribe. The swap sets are scratch
 * (removed at the end), whatever the config's persist says.
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nvswap/nvswap.h>

#include "train_model.h"

static unsigned STEPS = 4, MB = 2;
static int RANK, NRANKS, CORRUPT_RANK = -1;

/* The combine, the same on every rank and in the reference: @acc is the
 * sum of rank 0's gradient, then rank 1's, ... (@r: whose is @g). */
static void sum_in_rank_order(float *acc, const float *g, int r)
{
	if (r == 0)
		memcpy(acc, g, PN * sizeof(float));
	else
		for (size_t i = 0; i < PN; i++)
			acc[i] += g[i];
}

static void average(float *acc)
{
	for (size_t i = 0; i < PN; i++)
		acc[i] /= (float)NRANKS;
}

/* off_update()'s hook: @g becomes the mean of every rank's @g. */
static int allgather_mean(unsigned layer, float *g, void *ctx)
{
	float *all = ctx; /* NRANKS x PN */
	int rc = MPI_Allgather(g, (int)PN, MPI_FLOAT, all, (int)PN, MPI_FLOAT,
			       MPI_COMM_WORLD);

	if (rc != MPI_SUCCESS) {
		fprintf(stderr,
			"mpi_offload_train: rank %d: MPI_Allgather "
			"of layer %u's gradient failed (%d)\n",
			RANK, layer, rc);
		return -EIO;
	}
	for (int r = 0; r < NRANKS; r++)
		sum_in_rank_order(g, all + (size_t)r * PN, r);
	average(g);
	return 0;
}

/* The reference's step: every rank's shard in turn, combined as the
 * ranks combine them. @acc: L gradients of PN floats. Returns the loss
 * averaged the same way as the ranks' (rank order). */
static float ref_step(struct mem *r, float **acc, struct work *w, unsigned step)
{
	float loss = 0;

	for (int k = 0; k < NRANKS; k++) {
		loss += mem_grads(r, w, step, (unsigned)k * MB, MB);
		for (unsigned l = 0; l < L; l++)
			sum_in_rank_order(acc[l], r->g[l], k);
	}
	for (unsigned l = 0; l < L; l++)
		average(acc[l]);
	float **g = r->g;
	r->g = acc;
	mem_update(r, step);
	r->g = g;
	return loss / (float)NRANKS;
}

/* This rank's swappers: scratch sets in its own rank directories. */
static int setup(const char *config, struct off *o, float *init)
{
	struct nvs_swapper_opts so;
	struct nvs_config *cfg;
	int ret;

	TRY(nvs_config_load(config, &cfg));
	for (unsigned i = 0; RANK == 0 && nvs_config_warning(cfg, i); i++)
		fprintf(stderr, "note: %s\n", nvs_config_warning(cfg, i));
	for (int k = 0; k < 2; k++) {
		enum nvs_offload_kind kind =
			k ? NVS_OFFLOAD_OPTIMIZER : NVS_OFFLOAD_PARAM;
		nvs_swapper_opts_init(&so);
		so.elem_size = sizeof(float);
		ret = nvs_config_swapper_opts(cfg, kind, RANK, &so);
		if (ret == 0) {
			so.persist = NVS_PERSIST_SCRATCH;
			ret = nvs_swapper_create(&so,
						 k ? &o->ocore : &o->pcore);
		}
		if (ret < 0) {
			fprintf(stderr, "mpi_offload_train: rank %d: %s\n",
				RANK, nvs_last_error());
			nvs_config_free(cfg);
			return ret;
		}
	}
	ret = off_setup(cfg, o, init);
	nvs_config_free(cfg);
	return ret;
}

static int teardown(struct off *o)
{
	int r[5], ret = 0;

	r[0] = nvs_param_swapper_destroy(o->params);
	r[1] = nvs_optim_swapper_destroy(o->optim);
	r[2] = nvs_grad_swapper_destroy(o->grads);
	r[3] = nvs_swapper_destroy(o->pcore);
	r[4] = nvs_swapper_destroy(o->ocore);
	for (unsigned i = 0; i < 5; i++)
		if (r[i] < 0 && !ret) {
			ret = r[i];
			fprintf(stderr, "mpi_offload_train: rank %d: %s\n",
				RANK, nvs_last_error());
		}
	*o = (struct off){0};
	return ret;
}

/* A rank that fails cannot leave the others waiting in a collective:
 * its swap files removed, it takes the job down. */
static void fail(struct off *o)
{
	teardown(o);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static int rmdir_one(const char *path, const struct stat *st, int type,
		     struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		rmdir(path); /* only when empty: files are never touched */
	return 0;
}

/* @top and the directories below it, bottom up, each where empty. */
static void remove_empty(const char *top)
{
	nftw(top, rmdir_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* What the run will make for nvme_path @path: its highest missing level,
 * else its nvswap/ level when missing; "" when nothing. */
static void to_make(const char *path, char *out, size_t len)
{
	char up[4096];

	snprintf(out, len, "%s/nvswap", path);
	if (access(path, F_OK) == 0) {
		if (access(out, F_OK) == 0)
			*out = '\0';
		return;
	}
	snprintf(out, len, "%s", path);
	for (;;) {
		snprintf(up, sizeof(up), "%s", out);
		char *slash = strrchr(up, '/');
		if (!slash || slash == up)
			return;
		*slash = '\0';
		if (access(up, F_OK) == 0)
			return;
		snprintf(out, len, "%s", up);
	}
}

/*
 * The levels this run makes for the config's nvme_paths (rank 0, before
 * any rank's swappers): each process's library removes what it made
 * itself, but the nvswap/ level the ranks share, or a missing nvme_path,
 * is made by one rank and left by another, so rank 0 removes them at the
 * end, where empty.
 */
static unsigned plan_removal(const char *config, char made[][4096],
			     unsigned max)
{
	struct nvs_swapper_opts so;
	struct nvs_config *cfg;
	unsigned n = 0;

	if (nvs_config_load(config, &cfg) < 0)
		return 0; /* setup() says why */
	for (int k = 0; k < 2; k++) {
		nvs_swapper_opts_init(&so);
		if (nvs_config_swapper_opts(
			    cfg, k ? NVS_OFFLOAD_OPTIMIZER : NVS_OFFLOAD_PARAM,
			    0, &so) < 0)
			continue;
		for (unsigned i = 0; i < so.npaths && n < max; i++) {
			to_make(so.nvme_paths[i], made[n], sizeof(made[n]));
			bool dup = !*made[n];
			for (unsigned j = 0; j < n && !dup; j++)
				dup = !strcmp(made[j], made[n]);
			n += !dup;
		}
	}
	nvs_config_free(cfg);
	return n;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static void usage(void)
{
	if (RANK == 0)
		fprintf(stderr, "usage: mpirun -np N mpi_offload_train "
				"[--config F] [--layers N] [--hidden N] "
				"[--steps N] [--micro-batches N] "
				"[--corrupt-rank R]\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"config", required_argument, NULL, 'c'},
		{"layers", required_argument, NULL, 'l'},
		{"hidden", required_argument, NULL, 'h'},
		{"steps", required_argument, NULL, 's'},
		{"micro-batches", required_argument, NULL, 'm'},
		{"corrupt-rank", required_argument, NULL, 'x'},
		{NULL, 0, NULL, 0},
	};
	const char *config = "examples/ds_config.json";
	struct nvs_swap_stats a, b;
	struct off o = {0};
	struct mem ref = {0};
	struct work w = {0};
	float **acc = NULL, *all;
	static char made[32][4096];
	unsigned nmade = 0;
	int c;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &RANK);
	MPI_Comm_size(MPI_COMM_WORLD, &NRANKS);
	model_prog = "mpi_offload_train";
	L = 8;
	H = 512;
	/* each line as it is made, piped or not */
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned *dst = c == 'l'   ? &L
				: c == 'h' ? &H
				: c == 's' ? &STEPS
					   : &MB;
		if (c == 'c') {
			config = optarg;
			continue;
		}
		if (c == 'x') {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (!*end && v >= 0 && v < NRANKS) {
				CORRUPT_RANK = (int)v;
				continue;
			}
		}
		if (c == '?' || c == 'x' ||
		    !(*dst = arg_uint(optarg, 1, c == 'h' ? 4096 : 1u << 16))) {
			usage();
			MPI_Finalize();
			return 2;
		}
	}
	if ((unsigned)NRANKS * MB > MAX_MICRO_BATCHES) {
		if (RANK == 0)
			fprintf(stderr,
				"mpi_offload_train: %d ranks x %u micro-batches"
				": at most %u micro-batches a step in all\n",
				NRANKS, MB, MAX_MICRO_BATCHES);
		MPI_Finalize();
		return 2;
	}
	model_init();
	all = malloc((size_t)NRANKS * PN * sizeof(float));
	if (!all || work_alloc(&w) < 0) {
		fprintf(stderr, "mpi_offload_train: rank %d: out of memory\n",
			RANK);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (RANK == 0) {
		acc = calloc(L, sizeof(float *));
		if (!acc || mem_alloc(&ref) < 0)
			MPI_Abort(MPI_COMM_WORLD, 1);
		for (unsigned l = 0; l < L; l++)
			if (!(acc[l] = malloc(PN * sizeof(float))))
				MPI_Abort(MPI_COMM_WORLD, 1);
		nmade = plan_removal(config, made, 32);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (setup(config, &o, w.g) < 0)
		fail(&o);

	double model = (double)L * PN * sizeof(float);
	nvs_swapper_stats(o.pcore, &a);
	nvs_swapper_stats(o.ocore, &b);
	if (RANK == 0) {
		printf("mpi_offload_train: %d ranks x %u micro-batches of %u, "
		       "%u layers x %u hidden, Adam, %u steps; config %s\n",
		       NRANKS, MB, BATCH, L, H, STEPS, config);
		printf("each rank on NVMe (%s .. rank%d, %s): parameters %.1f "
		       "MiB, gradients %.1f MiB, optimizer state %.1f MiB; "
		       "gradients averaged by MPI_Allgather and a sum in rank "
		       "order\n",
		       nvs_swapper_dir(o.pcore, 0), NRANKS - 1,
		       nvs_backend_name(a.backend), model / 1048576,
		       model / 1048576, 2 * model / 1048576);
	}
	uint64_t rd0 = a.bytes_read + b.bytes_read;
	uint64_t wr0 = a.bytes_written + b.bytes_written;
	for (unsigned step = 1; step <= STEPS; step++) {
		float loss, losses[MAX_MICRO_BATCHES], ref_loss = 0;
		double t0 = now();
		if (off_grads(&o, &w, step, (unsigned)RANK * MB, MB, &loss) <
			    0 ||
		    off_update(&o, &w, step, allgather_mean, all) < 0)
			fail(&o);
		double t1 = now();
		MPI_Gather(&loss, 1, MPI_FLOAT, losses, 1, MPI_FLOAT, 0,
			   MPI_COMM_WORLD);
		if (RANK != 0)
			continue;
		ref_loss = ref_step(&ref, acc, &w, step);
		double t2 = now();
		loss = 0;
		for (int r = 0; r < NRANKS; r++)
			loss += losses[r];
		loss /= (float)NRANKS;
		nvs_swapper_stats(o.pcore, &a);
		nvs_swapper_stats(o.ocore, &b);
		uint64_t rd = a.bytes_read + b.bytes_read;
		uint64_t wr = a.bytes_written + b.bytes_written;
		printf("step %u: loss %.6f (reference %.6f)  %.2f s "
		       "offloaded, %.2f s reference  rank 0 read %.1f MiB, "
		       "written %.1f MiB\n",
		       step, (double)loss, (double)ref_loss, t1 - t0, t2 - t1,
		       (double)(rd - rd0) / 1048576,
		       (double)(wr - wr0) / 1048576);
		fflush(stdout);
		rd0 = rd;
		wr0 = wr;
	}

	/* The verdict: rank 0's weights against the reference, every
	 * rank's against rank 0's, byte for byte; a checksum on top. */
	int differ[2] = {0, 0}, total[2]; /* vs reference, vs rank 0 */
	uint64_t sum = 0xcbf29ce484222325ull, sums[MAX_MICRO_BATCHES];
	for (unsigned l = 0; l < L; l++) {
		void *pp[2];
		if (nvs_param_acquire_layer(o.params, l, pp) < 0) {
			fprintf(stderr, "mpi_offload_train: rank %d: %s\n",
				RANK, nvs_last_error());
			fail(&o);
		}
		memcpy(w.g, pp[0], WN * sizeof(float));
		memcpy(w.g + WN, pp[1], H * sizeof(float));
		nvs_param_release_layer(o.params, l, false);
		nvs_param_evict_layer(o.params, l);
		if (RANK == CORRUPT_RANK && l == L - 1)
			((unsigned char *)w.g)[0] ^= 1;
		sum = fnv1a(sum, w.g, PN * sizeof(float));
		if (RANK == 0) {
			differ[0] +=
				!!memcmp(w.g, ref.p[l], PN * sizeof(float));
			memcpy(all, w.g, PN * sizeof(float));
		}
		MPI_Bcast(all, (int)PN, MPI_FLOAT, 0, MPI_COMM_WORLD);
		differ[1] += !!memcmp(w.g, all, PN * sizeof(float));
	}
	MPI_Allreduce(differ, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Gather(&sum, 1, MPI_UINT64_T, sums, 1, MPI_UINT64_T, 0,
		   MPI_COMM_WORLD);
	int ret = teardown(&o) < 0 || total[0] || total[1];
	MPI_Barrier(MPI_COMM_WORLD); /* every rank's files gone */
	if (RANK == 0) {
		unsigned same = 0;
		for (int r = 0; r < NRANKS; r++)
			same += sums[r] == sums[0];
		for (unsigned i = 0; i < nmade; i++)
			remove_empty(made[i]);
		printf("checksums (FNV-1a of the weights): %u of %d ranks "
		       "%016" PRIx64 "\n",
		       same, NRANKS, sums[0]);
		if (total[0] || total[1])
			printf("verdict: FAIL, %d of %u layers on rank 0 "
			       "differ from the reference, %d (rank, layer) "
			       "pairs from rank 0's\n",
			       total[0], L, total[1]);
		else
			printf("verdict: the %d ranks' weights equal each "
			       "other and the single-process reference's bit "
			       "for bit (%u layers, %.1f MiB)\n",
			       NRANKS, L, model / 1048576);
	}
	work_free(&w);
	free(all);
	if (RANK == 0) {
		for (unsigned l = 0; l < L; l++)
			free(acc[l]);
		free(acc);
		mem_free(&ref);
	}
	MPI_Finalize();
	return ret;
}
