// SPDX-License-Identifier: MIT
/*
 * Rank and world size from the launcher's environment (nvs_launch_detect)
 * and how a config's rank and node_queue_depth use them. Each test is a
 * fresh process, so each sets the environment it means.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "testutil.h"

static const char *const vars[] = {
	"OMPI_COMM_WORLD_RANK",
	"OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE",
	"RANK",
	"WORLD_SIZE",
	"LOCAL_RANK",
	"LOCAL_WORLD_SIZE",
	"PMI_RANK",
	"PMI_SIZE",
	"MPI_LOCALRANKID",
	"MPI_LOCALNRANKS",
	"SLURM_PROCID",
	"SLURM_NTASKS",
	"SLURM_LOCALID",
	"SLURM_NTASKS_PER_NODE",
	"SLURM_TASKS_PER_NODE",
};

/* No launcher variable from the machine running the tests leaks in. */
static void clean(void)
{
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

static void fini(void)
{
	tu_cleanup();
}

TestSuite(launch, .init = clean, .fini = fini);

static struct nvs_launch detect(void)
{
	struct nvs_launch l;

	memset(&l, 0x5a, sizeof(l));
	cr_assert_eq(nvs_launch_detect(&l), 0, "%s", nvs_last_error());
	return l;
}

static void is(struct nvs_launch l, int r, int w, int lr, int ls,
	       const char *src)
{
	cr_assert_eq(l.rank, r);
	cr_assert_eq(l.world_size, w);
	cr_assert_eq(l.local_rank, lr);
	cr_assert_eq(l.local_size, ls);
	cr_assert_str_eq(l.source, src);
}

Test(launch, without_a_launcher_this_is_rank_0_of_1)
{
	is(detect(), 0, 1, 0, 1, "none");
}

Test(launch, open_mpi_comes_first)
{
	setenv("RANK", "7", 1); /* a stale torchrun variable: Open MPI wins */
	setenv("OMPI_COMM_WORLD_RANK", "5", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
	is(detect(), 5, 8, 1, 4, "Open MPI");
}

Test(launch, torchrun_and_deepspeed)
{
	setenv("RANK", "3", 1);
	setenv("WORLD_SIZE", "4", 1);
	setenv("LOCAL_RANK", "3", 1);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	is(detect(), 3, 4, 3, 4, "torch.distributed");
}

Test(launch, mpich_and_slurm)
{
	setenv("PMI_RANK", "2", 1);
	setenv("PMI_SIZE", "3", 1);
	is(detect(), 2, 3, 0, 1, "MPICH/PMI");
	unsetenv("PMI_RANK");
	setenv("SLURM_PROCID", "6", 1);
	setenv("SLURM_NTASKS", "8", 1);
	setenv("SLURM_LOCALID", "2", 1);
	setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
	is(detect(), 6, 8, 2, 4, "Slurm");
}

Test(launch, missing_sizes_are_the_least_that_fits)
{
	setenv("RANK", "2", 1);
	setenv("LOCAL_RANK", "1", 1);
	is(detect(), 2, 3, 1, 2, "torch.distributed");
}

static void refused(const char *name, const char *want)
{
	struct nvs_launch l;

	cr_assert_eq(nvs_launch_detect(&l), -EINVAL, "%s", name);
	cr_assert(strstr(nvs_last_error(), want), "%s", nvs_last_error());
}

Test(launch, a_bad_value_is_refused_naming_the_variable)
{
	setenv("RANK", "two", 1);
	refused("RANK", "RANK=\"two\" is not a whole number (from 0 to "
			"2147483647)");
	setenv("RANK", "-1", 1);
	refused("RANK", "RANK=\"-1\" is out of range: from 0 to 2147483647");
	setenv("RANK", "1x", 1);
	refused("RANK", "RANK=\"1x\" is not a whole number");
	setenv("RANK", "4", 1);
	setenv("WORLD_SIZE", "4", 1);
	refused("RANK", "RANK 4 is not below the world size WORLD_SIZE 4");
	unsetenv("WORLD_SIZE");
	setenv("RANK", "1", 1);
	setenv("LOCAL_RANK", "2", 1);
	setenv("LOCAL_WORLD_SIZE", "2", 1);
	refused("LOCAL_RANK", "local rank LOCAL_RANK 2, local size "
			      "LOCAL_WORLD_SIZE 2 and world size 2 "
			      "(WORLD_SIZE unset: the rank + 1) do not fit");
	setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
	setenv("LOCAL_WORLD_SIZE", "4(x2)", 1); /* Slurm's form only there */
	refused("LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE=\"4(x2)\"");
	cr_assert_eq(nvs_launch_detect(NULL), -EINVAL);
}

/* ------------------------------------------------------------ configs */

static struct nvs_swapper_opts opts_of(const char *nvswap, int rank, int want)
{
	char json[1024];
	struct nvs_config *c;
	struct nvs_swapper_opts o;

	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}, \"aio\": "
		 "{\"queue_depth\": 64}, \"nvswap\": {%s}}",
		 tu_dir(), nvswap);
	cr_assert_eq(nvs_config_load_string(json, "t.json", &c), 0, "%s",
		     nvs_last_error());
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, rank, &o),
		     want, "%s", nvs_last_error());
	nvs_config_free(c);
	return o;
}

Test(launch, the_rank_is_the_callers_then_the_configs_then_the_launchers)
{
	setenv("RANK", "2", 1);
	setenv("WORLD_SIZE", "4", 1);
	cr_assert_eq(opts_of("", NVS_RANK_AUTO, 0).rank, 2);
	cr_assert_eq(opts_of("\"rank\": 3", NVS_RANK_AUTO, 0).rank, 3);
	cr_assert_eq(opts_of("\"rank\": 3", 5, 0).rank, 5);
	cr_assert_eq(opts_of("", 0, 0).rank, 0);
	/* Queue depth as the aio section says without a split. */
	cr_assert_eq(opts_of("", 0, 0).aio.queue_depth, 64);
}

Test(launch, node_queue_depth_is_split_over_the_nodes_ranks)
{
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	cr_assert_eq(opts_of("\"node_queue_depth\": 128", 0, 0).aio.queue_depth,
		     32);
	cr_assert_eq(opts_of("\"node_queue_depth\": 2", 0, 0).aio.queue_depth,
		     1, "at least one request each");
}

/* Issue 49, item 4: several ranks of a node at the full depth each share
 * the disk unevenly; by default each takes its share of the depth. */
Test(launch, a_nodes_ranks_share_the_queue_depth_by_default)
{
	setenv("RANK", "5", 1);
	setenv("WORLD_SIZE", "8", 1);
	setenv("LOCAL_RANK", "1", 1);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	cr_assert_eq(opts_of("", 0, 0).aio.queue_depth, 16, "64 / 4");
	cr_assert_eq(
		opts_of("\"split_queue_depth\": true", 0, 0).aio.queue_depth,
		16);
	cr_assert_eq(
		opts_of("\"split_queue_depth\": false", 0, 0).aio.queue_depth,
		64, "each rank the whole depth, as DeepSpeed's");
	cr_assert_eq(opts_of("\"node_queue_depth\": 256", 0, 0).aio.queue_depth,
		     64, "an explicit node depth is split, not the aio one");
	cr_assert_eq(nvs_launch_share_queue(128), 32);
	cr_assert_eq(nvs_launch_share_queue(24), 8, "never below 8");
	cr_assert_eq(nvs_launch_share_queue(8), 8, "DeepSpeed's 8: whole");
	cr_assert_eq(nvs_launch_share_queue(3), 3);
	/* DeepSpeed's launcher says LOCAL_SIZE, not LOCAL_WORLD_SIZE. */
	unsetenv("LOCAL_WORLD_SIZE");
	setenv("LOCAL_SIZE", "4", 1);
	cr_assert_eq(nvs_launch_share_queue(128), 32);
	struct nvs_launch l;
	cr_assert_eq(nvs_launch_detect(&l), 0);
	cr_assert_eq(l.local_size, 4);
	/* No local size given: rank 1 would take 2, rank 3 4: nothing. */
	unsetenv("LOCAL_SIZE");
	cr_assert_eq(nvs_launch_share_queue(128), 128);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	/* One process on the node, or no launcher: the whole depth. */
	setenv("LOCAL_RANK", "0", 1);
	setenv("LOCAL_WORLD_SIZE", "1", 1);
	cr_assert_eq(nvs_launch_share_queue(128), 128);
	cr_assert_eq(opts_of("", 0, 0).aio.queue_depth, 64);
	/* A launcher variable that cannot be read leaves it whole, and fails
	 * no config that does not need the launcher. */
	setenv("LOCAL_WORLD_SIZE", "four", 1);
	cr_assert_eq(nvs_launch_share_queue(128), 128);
	cr_assert_eq(opts_of("", 0, 0).aio.queue_depth, 64);
}

Test(launch, a_bad_launcher_variable_fails_only_configs_that_need_it)
{
	setenv("RANK", "x", 1);
	opts_of("", NVS_RANK_AUTO, -EINVAL);
	cr_assert(strstr(nvs_last_error(), "RANK=\"x\""), "%s",
		  nvs_last_error());
	opts_of("\"node_queue_depth\": 8", 0, -EINVAL);
	cr_assert_eq(opts_of("", 1, 0).rank, 1, "an explicit rank needs none");
	cr_assert_eq(opts_of("\"rank\": 2", NVS_RANK_AUTO, 0).rank, 2);
	opts_of("", -2, -EINVAL);
}

Test(launch, bad_config_values_are_refused)
{
	struct nvs_config *c;

	cr_assert_eq(nvs_config_load_string("{\"nvswap\": {\"rank\": -1}}",
					    "t.json", &c),
		     -EINVAL);
	cr_assert_eq(nvs_config_load_string(
			     "{\"nvswap\": {\"node_queue_depth\": 0}}",
			     "t.json", &c),
		     -EINVAL);
	cr_assert(strstr(nvs_last_error(), "node_queue_depth"), "%s",
		  nvs_last_error());
}

/* Issue 34, finding 7: RANK=2147483648 was "not a number of at least 0",
 * and a Slurm layout named SLURM_NTASKS_PER_NODE when it was unset. */
Test(launch, round3_out_of_range_says_so_with_the_range)
{
	setenv("RANK", "2147483648", 1);
	refused("RANK", "RANK=\"2147483648\" is out of range: from 0 to "
			"2147483647");
	setenv("RANK", "99999999999999999999999", 1);
	refused("RANK", "is out of range: from 0 to 2147483647");
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "0", 1);
	refused("WORLD_SIZE", "WORLD_SIZE=\"0\" is out of range: from 1 to "
			      "2147483647");
	/* a long value with a quote and a control byte: cut, escaped */
	setenv("WORLD_SIZE",
	       "\"\x01 0123456789012345678901234567890123456789tail", 1);
	refused("WORLD_SIZE", "WORLD_SIZE=\"\\x22\\x01 012345678901234567890"
			      "1234567890123456...\" is not a whole number");
}

Test(launch, round3_a_slurm_layout_names_the_variables_it_read)
{
	setenv("SLURM_PROCID", "1", 1);
	setenv("SLURM_NTASKS", "4", 1);
	setenv("SLURM_LOCALID", "2", 1);
	setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1); /* srun sets this one */
	refused("SLURM_TASKS_PER_NODE",
		"local rank SLURM_LOCALID 2, local size SLURM_TASKS_PER_NODE "
		"2 and world size SLURM_NTASKS 4 do not fit together (Slurm)");
	cr_assert_null(strstr(nvs_last_error(), "SLURM_NTASKS_PER_NODE"), "%s",
		       nvs_last_error());
	setenv("SLURM_TASKS_PER_NODE", "4(x1)", 1);
	is(detect(), 1, 4, 2, 4, "Slurm");
	unsetenv("SLURM_TASKS_PER_NODE");
	setenv("SLURM_LOCALID", "5", 1);
	refused("SLURM_LOCALID",
		"local size 6 (SLURM_NTASKS_PER_NODE and SLURM_TASKS_PER_NODE "
		"unset: the local rank + 1)");
	setenv("SLURM_NTASKS_PER_NODE", "x", 1);
	refused("SLURM_NTASKS_PER_NODE", "SLURM_NTASKS_PER_NODE=\"x\" is not a "
					 "whole number (from 1 to 2147483647), "
					 "nor Slurm's \"N(xM),...\"");
}
