// SPDX-License-Identifier: MIT
/*
 * nvswap-io's command line: the usage text, the options into struct args
 * with their defaults and the combinations refused, and the check of
 * --nvme-path (ds_io's --folder).
 */
#include "io.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fputs("usage: nvswap-io --nvme-path DIR [options]\n"
	      "\n"
	      "Reads or writes one file of --io-size bytes in DIR through an "
	      "nvswap aio\n"
	      "handle, --loops times, and prints ds_io's lines:\n"
	      "  Task Read Latency = S sec     the timed I/O calls\n"
	      "  Task Read Speed = X GB/sec    bytes / task latency (GB = "
	      "2^30 bytes)\n"
	      "  E2E Read Latency = S sec      plus handle creation and "
	      "buffer set-up\n"
	      "  E2E Read Speed = X GB/sec\n"
	      "then the latency of one op (one --io-size transfer): min, "
	      "median, p99.\n"
	      "\n"
	      "  --nvme-path DIR         where the test file goes (required); "
	      "removed after\n"
	      "  --io-size N             bytes per op, K/M/G suffixes "
	      "(default 1G)\n"
	      "  --read                  read (the file is written first, "
	      "untimed); else write\n"
	      "  --block-size N          bytes per request (default 1M)\n"
	      "  --queue-depth N         requests in flight per worker "
	      "(default 128)\n"
	      "  --single-submit         one submit call per request\n"
	      "  --sequential-requests   no overlapped events: "
	      "batch-and-drain\n"
	      "                          (default: overlapped, a sliding "
	      "window)\n"
	      "  --io-parallel N         worker threads, intra-op parallelism "
	      "(default 1)\n"
	      "  --loops N               timed ops (default 1)\n"
	      "  --warmup-loops N        untimed ops first (default 0)\n"
	      "  --start-at T            start the timed ops at wall-clock "
	      "second T\n"
	      "                          (since the epoch, fractions allowed): "
	      "several\n"
	      "                          processes measure the same window\n"
	      "  --validate              check every byte after the timed "
	      "ops\n"
	      "  --backend B             auto|io_uring|libaio|psync (default "
	      "auto)\n"
	      "  --pinned                page-locked buffer (the default)\n"
	      "  --unpinned              ordinary pageable memory\n"
	      "  --misalign N            offset the buffer N bytes from page "
	      "alignment\n"
	      "  --sqpoll, --iopoll, --no-fixed   io_uring options (see "
	      "nvswap/aio.h)\n"
	      "  --bounce-bytes N        pinned staging memory per worker "
	      "(default: the\n"
	      "                          handle's, see nvs_aio_opts)\n"
	      "  --staging M             auto|misaligned|unpinned: which "
	      "buffers go through\n"
	      "                          the pinned staging memory (see "
	      "enum nvs_staging)\n"
	      "  --different-file-each-iteration  a new file for every op\n"
	      "  --json                  one JSON object on stdout, no "
	      "progress line\n"
	      "  --compare-fio           run fio on the same file with the "
	      "same settings,\n"
	      "                          interleaved with nvswap, --repeats "
	      "times each\n"
	      "  --repeats N             repeats for --compare-fio (default 5)\n"
	      "  --no-fio-default        --compare-fio: skip fio with its "
	      "default buffers\n"
	      "                          when it has huge-page ones\n"
	      "  --keep                  keep the test file(s)\n"
	      "  -h, --help              this text\n"
	      "  --version               print the version and exit\n"
	      "\n"
	      "ds_io's spellings work too: --folder, --io_size, --block_size, "
	      "--queue_depth,\n"
	      "--single_submit, --sequential_requests, --io_parallel, "
	      "--warmup_loops,\n"
	      "--different_file_each_iteration.\n"
	      "\n"
	      "--compare-fio runs fio with --direct=1, the same --bs and "
	      "--iodepth, the\n"
	      "engine of the backend (io_uring with fixed buffers and "
	      "registered files,\n"
	      "libaio, psync), --numjobs = --io-parallel each on its slice of "
	      "the file,\n"
	      "and huge-page buffers (--iomem=shmhuge): scattered 4 KiB pages "
	      "split each\n"
	      "1 MiB request past the disk's segment limit, so fio's default "
	      "buffers\n"
	      "are a weaker reference (their figure is printed too). As root "
	      "it adds the\n"
	      "huge pages fio needs to " HUGEPAGES
	      " and takes them back after.\n"
	      "fio runs with --scramble_buffers=0 (no data generation in its "
	      "CPU time).\n"
	      "CPU time is the whole process's (every thread) during the I/O "
	      "on both\n"
	      "sides: fio's is read from its process CPU clock by its "
	      "--exec_prerun and\n"
	      "--exec_postrun hooks (their own cost measured and taken off); "
	      "fio's own\n"
	      "usr+sys (its job threads only) is printed beside it;\n"
	      "each nvswap repeat does one untimed op first, as fio's set-up "
	      "(buffers\n"
	      "are registered with the ring on first use).\n"
	      "Exit status: 0, 1 on an I/O or validation failure, 2 on bad "
	      "usage.\n",
	      f);
}

void io_parse(int argc, char **argv, struct args *a)
{
	enum {
		O_FOLDER = 256,
		O_IOSIZE,
		O_READ,
		O_BS,
		O_QD,
		O_SINGLE,
		O_SEQ,
		O_PAR,
		O_LOOPS,
		O_WARM,
		O_START,
		O_VALIDATE,
		O_BACKEND,
		O_PINNED,
		O_UNPINNED,
		O_MISALIGN,
		O_DIFF,
		O_JSON,
		O_FIO,
		O_REPEATS,
		O_KEEP,
		O_SQPOLL,
		O_IOPOLL,
		O_NOFIXED,
		O_BOUNCE,
		O_STAGE,
		O_NOFIODEF,
		O_VERSION,
	};
	static const struct option opts[] = {
		{"nvme-path", required_argument, NULL, O_FOLDER},
		{"io-size", required_argument, NULL, O_IOSIZE},
		{"read", no_argument, NULL, O_READ},
		{"block-size", required_argument, NULL, O_BS},
		{"queue-depth", required_argument, NULL, O_QD},
		{"single-submit", no_argument, NULL, O_SINGLE},
		{"sequential-requests", no_argument, NULL, O_SEQ},
		{"io-parallel", required_argument, NULL, O_PAR},
		{"loops", required_argument, NULL, O_LOOPS},
		{"warmup-loops", required_argument, NULL, O_WARM},
		{"start-at", required_argument, NULL, O_START},
		{"validate", no_argument, NULL, O_VALIDATE},
		{"backend", required_argument, NULL, O_BACKEND},
		{"pinned", no_argument, NULL, O_PINNED},
		{"unpinned", no_argument, NULL, O_UNPINNED},
		{"misalign", required_argument, NULL, O_MISALIGN},
		{"different-file-each-iteration", no_argument, NULL, O_DIFF},
		{"json", no_argument, NULL, O_JSON},
		{"compare-fio", no_argument, NULL, O_FIO},
		{"repeats", required_argument, NULL, O_REPEATS},
		{"keep", no_argument, NULL, O_KEEP},
		{"sqpoll", no_argument, NULL, O_SQPOLL},
		{"iopoll", no_argument, NULL, O_IOPOLL},
		{"no-fixed", no_argument, NULL, O_NOFIXED},
		{"bounce-bytes", required_argument, NULL, O_BOUNCE},
		{"staging", required_argument, NULL, O_STAGE},
		{"no-fio-default", no_argument, NULL, O_NOFIODEF},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, O_VERSION},
		/* ds_io's spellings (and the other tools': --nvme_path) */
		{"folder", required_argument, NULL, O_FOLDER},
		{"nvme_path", required_argument, NULL, O_FOLDER},
		{"io_size", required_argument, NULL, O_IOSIZE},
		{"block_size", required_argument, NULL, O_BS},
		{"queue_depth", required_argument, NULL, O_QD},
		{"single_submit", no_argument, NULL, O_SINGLE},
		{"sequential_requests", no_argument, NULL, O_SEQ},
		{"io_parallel", required_argument, NULL, O_PAR},
		{"warmup_loops", required_argument, NULL, O_WARM},
		{"different_file_each_iteration", no_argument, NULL, O_DIFF},
		{0},
	};
	int c;

	*a = (struct args){.io_size = 1u << 30,
			   .block_size = 1u << 20,
			   .queue_depth = 128,
			   .parallel = 1,
			   .loops = 1,
			   .pinned = true,
			   .repeats = 5};
	while ((c = tool_getopt(argc, argv, "h", opts, 2)) != -1) {
		switch (c) {
		case O_FOLDER:
			a->folder = optarg;
			break;
		case O_IOSIZE:
			a->io_size = tool_size_arg("--io-size", optarg);
			break;
		case O_READ:
			a->read = true;
			break;
		case O_BS:
			a->block_size = tool_size_arg("--block-size", optarg);
			break;
		case O_QD:
			a->queue_depth =
				tool_uint_arg("--queue-depth", optarg, 1);
			break;
		case O_SINGLE:
			a->single_submit = true;
			break;
		case O_SEQ:
			a->sequential = true;
			break;
		case O_PAR:
			a->parallel = tool_uint_arg("--io-parallel", optarg, 1);
			break;
		case O_LOOPS:
			a->loops = tool_uint_arg("--loops", optarg, 1);
			break;
		case O_WARM:
			a->warmup = tool_uint_arg("--warmup-loops", optarg, 0);
			break;
		case O_START: {
			char *end;
			a->start_at = strtod(optarg, &end);
			if (end == optarg || *end || a->start_at <= 0)
				tool_die(2, "--start-at: not a time: %s",
					 optarg);
			break;
		}
		case O_VALIDATE:
			a->validate = true;
			break;
		case O_BACKEND:
			if (tool_backend(optarg) < 0)
				tool_die(2,
					 "--backend: '%s' is not one of auto, "
					 "io_uring, libaio, psync",
					 optarg);
			a->backend = (enum nvs_backend)tool_backend(optarg);
			break;
		case O_PINNED:
			a->pinned = true;
			break;
		case O_UNPINNED:
			a->pinned = false;
			break;
		case O_MISALIGN:
			a->misalign = tool_uint_arg("--misalign", optarg, 0);
			break;
		case O_DIFF:
			a->diff_file = true;
			break;
		case O_JSON:
			a->json = true;
			break;
		case O_FIO:
			a->compare_fio = true;
			break;
		case O_REPEATS:
			a->repeats = tool_uint_arg("--repeats", optarg, 1);
			break;
		case O_KEEP:
			a->keep = true;
			break;
		case O_NOFIODEF:
			a->fio_huge_only = true;
			break;
		case O_SQPOLL:
			a->uring_flags |= NVS_URING_SQPOLL;
			break;
		case O_IOPOLL:
			a->uring_flags |= NVS_URING_IOPOLL;
			break;
		case O_NOFIXED:
			a->uring_flags |= NVS_URING_NO_FIXED;
			break;
		case O_BOUNCE:
			a->bounce = tool_size_arg("--bounce-bytes", optarg);
			if (a->bounce > UINT32_MAX)
				tool_die(2, "--bounce-bytes: at most 4G");
			break;
		case O_STAGE:
			if (!strcmp(optarg, "auto"))
				a->staging = NVS_STAGE_AUTO;
			else if (!strcmp(optarg, "misaligned"))
				a->staging = NVS_STAGE_MISALIGNED;
			else if (!strcmp(optarg, "unpinned"))
				a->staging = NVS_STAGE_UNPINNED;
			else
				tool_die(2,
					 "--staging: '%s' is not one of auto, "
					 "misaligned, unpinned",
					 optarg);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case O_VERSION:
			exit(tool_version());
		}
	}
	if (optind < argc)
		tool_die(2, "unexpected argument '%s' (see nvswap-io --help)",
			 argv[optind]);
	if (!a->folder)
		tool_die(
			2,
			"--nvme-path DIR is required: the directory to test (see "
			"nvswap-io --help)");
	if (a->compare_fio && a->diff_file)
		tool_die(2,
			 "--compare-fio and --different-file-each-iteration "
			 "cannot be combined: fio reads and writes one file");
	if (a->compare_fio && a->io_size % a->parallel)
		tool_die(2,
			 "--compare-fio needs --io-size divisible by "
			 "--io-parallel (fio's jobs each take an equal slice)");
	/* No memory setting (--unpinned included) helps past the RAM. */
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) *
		       (uint64_t)sysconf(_SC_PAGESIZE);
	if (a->io_size > ram - a->misalign)
		tool_die(2,
			 "--io-size %zu bytes (with --misalign) is larger than "
			 "this machine's memory (%.1f GiB): lower --io-size",
			 a->io_size, (double)ram / (1u << 30));
}

void io_check_folder(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		tool_die(1, "--nvme-path %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		tool_die(1, "--nvme-path %s: not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		tool_die(1, "--nvme-path %s: cannot write there: %s", dir,
			 strerror(errno));
}
