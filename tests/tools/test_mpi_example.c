// SPDX-License-Identifier: MIT
/*
 * examples/mpi_offload_train under mpirun, as make demo-mpi runs it:
 * 4 and 2 ranks end with weights equal to each other and to the
 * single-process reference bit for bit, and a rank whose weights are
 * flipped by one bit fails the verdict with a non-zero exit status; the
 * run leaves no directory behind.
 * Skips (saying why) only when the example was not built (no MPI for C
 * at configure time, or -Dmpi=disabled) or mpirun is not on PATH.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(mpi_example, .fini = fini);

/* Root needs --allow-run-as-root; --oversubscribe lets 4 ranks share
 * fewer cores; the ranks are on one host, so shared memory (vader) and
 * self only, without the single-copy mechanism (CMA's
 * process_vm_readv, which containers often refuse). */
#define MPIRUN_ARGS                                                            \
	"--allow-run-as-root --oversubscribe --mca btl self,vader "            \
	"--mca btl_vader_single_copy_mechanism none"

static struct tu_out mpi_train(int np, const char *extra)
{
	const char *bin = getenv("NVSWAP_MPI_OFFLOAD_TRAIN");
	const char *cfg = tu_path("ds.json");
	char json[1024], cmd[8192];

	if (!bin || !*bin)
		cr_skip_test("examples/mpi_offload_train was not built: no "
			     "MPI for C at configure time (Debian: "
			     "libopenmpi-dev; make test installs it and "
			     "configures again), or -Dmpi=disabled");
	if (system("command -v mpirun >/dev/null 2>&1") != 0)
		cr_skip_test("mpirun is not on PATH (Debian: openmpi-bin)");
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 3, "
		 "\"buffer_size\": 1e5}, \"offload_optimizer\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\", \"buffer_size\": 2e5, "
		 "\"pipeline_read\": true, \"pipeline_write\": true}}}",
		 tu_dir(), tu_dir());
	tu_write_file(cfg, json, strlen(json));
	snprintf(cmd, sizeof(cmd),
		 "cd %s && mpirun " MPIRUN_ARGS " -np %d %s --config %s "
		 "--layers 3 --hidden 64 --steps 3 %s",
		 tu_dir(), np, bin, cfg, extra);
	return tu_run(cmd);
}

static void assert_bit_exact(int np)
{
	struct tu_out o = mpi_train(np, "");
	char want[128];

	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	snprintf(want, sizeof(want),
		 "verdict: the %d ranks' weights equal each other and the "
		 "single-process reference's bit for bit (3 layers",
		 np);
	cr_assert(strstr(o.out, want), "%s%s", o.out, o.err);
	snprintf(want, sizeof(want), "%d of %d ranks", np, np);
	cr_assert(strstr(o.out, want), "%s", o.out);
	/* the nvswap/ level the ranks shared goes too (made by one rank,
	 * left last by another) */
	cr_assert_eq(access(tu_path("nvswap"), F_OK), -1, "left behind");
	tu_out_free(&o);
}

Test(mpi_example, four_ranks_equal_each_other_and_the_reference, .timeout = 240)
{
	assert_bit_exact(4);
}

Test(mpi_example, two_ranks_equal_each_other_and_the_reference, .timeout = 240)
{
	assert_bit_exact(2);
}

Test(mpi_example, a_rank_one_bit_off_fails_the_verdict, .timeout = 240)
{
	struct tu_out o = mpi_train(4, "--corrupt-rank 3");

	cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "verdict: FAIL, 0 of 3 layers on rank 0 "
				"differ from the reference, 1 (rank, layer) "
				"pairs from rank 0's"),
		  "%s", o.out);
	cr_assert(strstr(o.out, "3 of 4 ranks"), "%s", o.out);
	tu_out_free(&o);
}
