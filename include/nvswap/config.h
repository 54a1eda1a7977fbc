/* SPDX-License-Identifier: MIT */
/*
 * DeepSpeed-style JSON configuration: the zero_optimization.offload_param
 * and offload_optimizer sections, the top-level aio section, and an nvswap
 * section for our own keys. Parsed with jansson; every error names the key
 * and its line and column.
 */
#ifndef NVSWAP_CONFIG_H
#define NVSWAP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/aio.h"
#include "nvswap/common.h"
#include "nvswap/swapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Which offload section. */
enum nvs_offload_kind {
	NVS_OFFLOAD_PARAM = 0,	   /* zero_optimization.offload_param */
	NVS_OFFLOAD_OPTIMIZER = 1, /* zero_optimization.offload_optimizer */
};

/** An offload section's "device". */
enum nvs_offload_device {
	NVS_DEVICE_NONE = 0, /* "none", also when the section is absent */
	NVS_DEVICE_CPU,	     /* "cpu" */
	NVS_DEVICE_NVME,     /* "nvme" */
};

/**
 * struct nvs_offload_config - one offload section, DeepSpeed's defaults
 * where a key is absent. Sizes count elements, as in DeepSpeed; nvswap's
 * swappers take the element size from the caller (2 for fp16/bf16, 4 for
 * fp32).
 */
struct nvs_offload_config {
	bool present;			/* the section is in the file */
	enum nvs_offload_device device; /* default none */
	const char *nvme_path;		/* borrowed from the config; NULL
					   when absent */
	uint64_t buffer_count;		/* param 5, optimizer 4 */
	uint64_t buffer_size;		/* elements, default 1e8 */
	uint64_t max_in_cpu;		/* elements, default 1e9 */
	bool pin_memory;		/* default true */
	bool pipeline_read;		/* default false */
	bool pipeline_write;		/* default false */
};

/** Most paths the nvswap section's "nvme_paths" may list. */
#define NVS_CONFIG_MAX_PATHS 16
/** Largest "lookahead" of the nvswap section. */
#define NVS_CONFIG_MAX_LOOKAHEAD 1024

/**
 * struct nvs_nvswap_config - the "nvswap" section (our own keys).
 */
struct nvs_nvswap_config {
	enum nvs_backend backend; /* "backend": auto|io_uring|libaio|psync */
	uint64_t stripe_size;	  /* bytes, default 1 MiB; a multiple of 4096 */
	bool checksum;		  /* default false */
	bool auto_evict;	  /* default true (nvs_swapper_opts) */
	unsigned npaths;	  /* entries of "nvme_paths", 0 = none */
	const char *nvme_paths[NVS_CONFIG_MAX_PATHS]; /* borrowed */
	uint32_t wait_ms;   /* "wait_ms": how long an acquire waits for a
			     buffer with auto_evict off, 1 ms up to
			     NVS_WAIT_FOREVER - 1; default
			     NVS_SWAPPER_WAIT_MS_DEFAULT (60 s). No config
			     value waits forever. */
	uint32_t lookahead; /* "lookahead": layers the parameter swapper
			       reads ahead (nvs_param_swapper_opts), 0 to
			       1024; default 1 */
	uint8_t persist;    /* "persist": "scratch" (default), "persistent",
			       "resume" or "readonly" (enum nvs_persist: a
			       swap set that outlives the process, see
			       swapper.h) */
	uint32_t keep_generations; /* "keep_generations": checkpoints a
				      persistent set keeps, 1 to 64;
				      default 2 */
	int rank;		   /* "rank": the swap directories' rank,
				      default NVS_RANK_AUTO: the launcher's
				      (nvs_launch_detect()) */
	uint32_t node_queue_depth; /* "node_queue_depth": requests in
				      flight per worker for all the ranks of
				      a node together, split evenly (each
				      rank's aio queue_depth becomes
				      max(1, this / local_size)); default 0:
				      aio.queue_depth, split as below */
	bool page_cache;	   /* "page_cache": swap files through the
				      page cache (nvs_swapper_opts); default
				      false */
	bool split_queue_depth;	   /* "split_queue_depth": without
				      node_queue_depth, the ranks of a node
				      share aio.queue_depth evenly
				      (nvs_launch_share_queue()); default
				      true; false: each rank the whole depth,
				      as DeepSpeed's per-handle depth */
};

/* ------------------------------------------------------------ launchers */

/** nvs_config_swapper_opts() rank: the config's nvswap.rank, else the
 *  launcher's (nvs_launch_detect()). */
#define NVS_RANK_AUTO (-1)

/**
 * struct nvs_launch - where this process sits in a job, from the
 * launcher's environment (nvs_launch_detect()).
 */
struct nvs_launch {
	int rank;	 /* global rank, 0 when not launched as a job */
	int world_size;	 /* ranks in the job, 1 */
	int local_rank;	 /* rank on this node, 0 */
	int local_size;	 /* ranks on this node, 1 */
	char source[24]; /* who said so: "Open MPI", "torch.distributed",
			    "MPICH/PMI", "Slurm" or "none" */
};

/**
 * nvs_launch_detect() - read the launcher's environment variables, first
 * family found wins:
 *   Open MPI (mpirun):   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
 *                        _LOCAL_SIZE;
 *   torch.distributed (torchrun, deepspeed): RANK, WORLD_SIZE,
 *                        LOCAL_RANK, LOCAL_WORLD_SIZE (else
 *                        LOCAL_SIZE, as DeepSpeed's launcher sets);
 *   MPICH/Hydra (PMI):   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
 *                        MPI_LOCALNRANKS;
 *   Slurm (srun):        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
 *                        SLURM_NTASKS_PER_NODE, else (srun sets it
 *                        always) SLURM_TASKS_PER_NODE (the first number
 *                        of either);
 * else rank 0 of 1 ("none"). A family is found by its rank variable; its
 * others may be missing: the world size is then rank + 1, the local rank
 * 0 and the local size local rank + 1.
 *
 * Return: 0, or -EINVAL for @out NULL or a value that is not a whole
 * number, out of range (0 or 1 to INT_MAX; the message gives the range),
 * or inconsistent (rank >= world size, local rank >= local size): the
 * message names the variables read and their values (up to 40 bytes,
 * escaped), and says what an unset one was taken as.
 * Threading: reads the environment; any thread.
 */
NVS_API int nvs_launch_detect(struct nvs_launch *out);

/**
 * nvs_launch_share_queue() - one process's share of a node's queue depth.
 * @queue_depth: the depth one process alone would use.
 *
 * Several processes on one node swapping to the same disks at the full
 * depth each share it unevenly (bench/RESULTS.md: a rank can get half
 * what another gets); their shares of one depth do not. The launcher
 * says how many share the node (nvs_launch_detect()'s local_size).
 *
 * Return: nvs_aio_queue_share(@queue_depth, local_size): @queue_depth /
 * local_size, but never below NVS_LAUNCH_SHARE_MIN (nor above
 * @queue_depth: a depth of 8, DeepSpeed's default, is not split at all);
 * @queue_depth itself for one process on
 * the node, where the launcher does not say the local size (a size taken
 * as the local rank + 1 would differ from rank to rank), and where its
 * variables are refused (nvs_launch_detect() fails; nvs_last_error() then
 * says why, nothing else is changed).
 * Threading: reads the environment; any thread.
 */
NVS_API uint32_t nvs_launch_share_queue(uint32_t queue_depth);
/* The least depth nvs_launch_share_queue() leaves a process
 * (nvs_aio_queue_share()'s). */
#define NVS_LAUNCH_SHARE_MIN NVS_AIO_SHARE_MIN

struct nvs_config;

/**
 * nvs_config_load() - read and check a DeepSpeed-style JSON file.
 * @path: borrowed for the call.
 * @out:  receives the config (free with nvs_config_free()); NULL on error.
 *
 * Keys outside the checked sections (optimizer, fp16, ...) are ignored;
 * inside them, unknown keys are errors (with a "did you mean"), and the
 * DeepSpeed keys nvswap does not use are accepted and listed by
 * nvs_config_warning(). Numbers such as 1e8 are accepted for counts.
 * Return: 0, or
 *   -EINVAL   malformed JSON, an unknown key, a wrong type, a zero or
 *             negative size, an unknown device/backend: nvs_last_error()
 *             says "FILE:LINE:COLUMN: KEY: what"; or the file is not
 *             a regular file of at most 16 MiB (a FIFO or device is
 *             refused at once, never waited on, and the sentence names
 *             what it is: "is a FIFO, not a regular file...");
 *   -ENOENT   the file does not exist;
 *   -EACCES   the file is not readable, or an nvme_path (of a section
 *             with device "nvme", or one of nvswap.nvme_paths) not
 *             writable; a missing nvme_path is fine when it can be made
 *             (the swapper makes it), else this names the level that
 *             cannot;
 *   -EROFS    an nvme_path is on a read-only filesystem;
 *   -ENOTDIR  an nvme_path, or a level of it, is not a directory;
 *   -ENAMETOOLONG, -ELOOP  an nvme_path too long or looping, as stat(2)
 *             says;
 *   -ENOMEM.
 * The offload sections become swapper options with
 * nvs_config_swapper_opts() (below).
 * Threading: any thread; a loaded config is read-only and may be shared.
 */
NVS_API int nvs_config_load(const char *path, struct nvs_config **out);

/**
 * nvs_config_load_string() - as nvs_config_load(), from @json.
 * @name: what error messages call the text (e.g. "<inline>"), or NULL.
 */
NVS_API int nvs_config_load_string(const char *json, const char *name,
				   struct nvs_config **out);

/** nvs_config_free() - free @cfg; NULL is a no-op. */
NVS_API void nvs_config_free(struct nvs_config *cfg);

/**
 * nvs_config_offload() - one offload section, defaults filled in.
 * Return: 0, or -EINVAL for a NULL argument or an unknown @which.
 */
NVS_API int nvs_config_offload(const struct nvs_config *cfg,
			       enum nvs_offload_kind which,
			       struct nvs_offload_config *out);

/**
 * nvs_config_aio_opts() - handle options from the "aio" section (and
 * nvswap.backend), on top of nvs_aio_opts_init(): block_size (1048576),
 * queue_depth (8), intra_op_parallelism (1; the older thread_count and
 * num_threads are accepted with a warning), single_submit (false),
 * overlap_events (true). DeepSpeed's defaults, which differ from the
 * handle's own (queue depth 128, batch-and-drain).
 * Return: 0, or -EINVAL for a NULL argument.
 */
NVS_API int nvs_config_aio_opts(const struct nvs_config *cfg,
				struct nvs_aio_opts *opts);

/**
 * aio.use_gds (default false); false for NULL. The swap manager's buffers
 * are pinned host memory, which cuFile does not move: when it is true,
 * nvs_config_warning() says so and the swappers' I/O goes through pinned
 * host memory as usual. Device memory goes through cuFile on a handle
 * made with nvs_aio_opts.use_gds (nvswap/gpu.h).
 */
NVS_API bool nvs_config_use_gds(const struct nvs_config *cfg);

/** The "nvswap" section, defaults filled in. 0 or -EINVAL for NULLs. */
NVS_API int nvs_config_nvswap(const struct nvs_config *cfg,
			      struct nvs_nvswap_config *out);

/**
 * nvs_config_warning() - the @i-th note about the file (0-based): keys
 * accepted but unused by nvswap, deprecated spellings, an "aio" section
 * inside zero_optimization (ignored there, as by DeepSpeed), aio.use_gds
 * true (the swappers hold host memory, see nvs_config_use_gds()). NULL
 * past the end.
 */
NVS_API const char *nvs_config_warning(const struct nvs_config *cfg,
				       unsigned i);

/**
 * nvs_config_swapper_opts() - swapper options from a loaded config.
 * @which: NVS_OFFLOAD_PARAM or NVS_OFFLOAD_OPTIMIZER.
 * @rank:  the rank directory's number, or NVS_RANK_AUTO: nvswap.rank
 *         when the config sets it, else the launcher's
 *         (nvs_launch_detect()).
 * With nvswap.node_queue_depth set, the aio queue_depth is that divided
 * by the launcher's local_size (at least 1): the ranks of a node share
 * the devices' queue evenly. Without it, and unless
 * nvswap.split_queue_depth is false, the aio queue_depth is the
 * process's share of itself (nvs_launch_share_queue()).
 * @opts:  from nvs_swapper_opts_init(); set elem_size first to override
 *         the element size (0: 2 bytes for parameters, fp16/bf16; 4 for
 *         optimizer state, fp32).
 *
 * Fills: nvme_paths (nvswap.nvme_paths when given, else the section's
 * nvme_path), name ("param" or "optimizer"), rank, buffer_count,
 * buffer_size (the section's buffer_size elements x elem_size),
 * pin_memory, stripe_size, checksum, auto_evict and the aio options.
 * Return: 0, or -EINVAL: a NULL argument, an unknown @which, a negative
 * @rank other than NVS_RANK_AUTO, a launcher variable nvs_launch_detect()
 * refuses, or a section whose device is not "nvme" or that has no path
 * (the message says which).
 */
NVS_API int nvs_config_swapper_opts(const struct nvs_config *cfg,
				    enum nvs_offload_kind which, int rank,
				    struct nvs_swapper_opts *opts);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_CONFIG_H */
