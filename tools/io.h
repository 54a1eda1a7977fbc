/* SPDX-License-Identifier: MIT */
/*
 * What nvswap-io's files share: its options, one run's results, and the
 * calls between argument parsing (io_args.c), the run (io_run.c), the fio
 * comparison (io_fio.c) and the output (io_output.c).
 */
#ifndef NVSWAP_IO_H
#define NVSWAP_IO_H

#include "tool.h"

#include <nvswap/nvswap.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define HUGEPAGES "/proc/sys/vm/nr_hugepages"
#define HUGE_SIZE (2u << 20)

struct args {
	const char *folder;
	size_t io_size;
	bool read;
	size_t block_size;
	unsigned queue_depth;
	bool single_submit;
	bool sequential; /* --sequential-requests: no overlapped events */
	unsigned parallel;
	unsigned loops;
	unsigned warmup;
	bool validate;
	enum nvs_backend backend;
	bool pinned;
	size_t misalign;
	bool diff_file;
	bool json;
	bool compare_fio;
	unsigned repeats;
	bool keep;
	uint32_t uring_flags;
	size_t bounce;
	int staging;
	bool prepared;	    /* --read: the file is already there and synced */
	bool warmup_read;   /* warm-up ops read, whatever the timed ones do */
	bool fio_huge_only; /* --no-fio-default: skip fio's default buffers */
	double start_at;    /* --start-at: wall-clock second (epoch) the timed
			       ops start at, after set-up and warm-up; 0 */
};

struct run {
	double task_s;	/* timed loops: the I/O calls only */
	double e2e_s;	/* plus handle creation and buffer set-up */
	double cpu_s;	/* process CPU (all threads) of the timed loops */
	double *lat;	/* per-op seconds, loops of them */
	uint64_t bytes; /* moved by the timed loops */
	double win_start, win_end; /* wall clock (epoch s) of the timed ops */
	int validated;		   /* 1 ok, 0 not asked, -1 mismatch */
	struct nvs_aio_stats st;
};

/* --json: no progress line, no text besides the JSON (nvswap_io.c). */
extern bool io_quiet;
/* --keep: the test files stay, even on a fatal error (nvswap_io.c). */
extern bool io_keep_files;

/* io_args.c: the options into @a, dying (2) on bad usage; -h exits 0. */
void io_parse(int argc, char **argv, struct args *a);
/* io_args.c: @dir is a directory we can create files in, else die (1). */
void io_check_folder(const char *dir);

/* io_run.c: tool_cleanup: destroys what io_one_run() holds, ends the
 * progress line, removes the test files unless --keep. */
void io_on_fatal(void);
/* io_run.c: the test file of op @loop, created on first use. */
const char *io_file_for(const struct args *a, unsigned loop);
/* io_run.c: unlink every test file; async-signal-safe. */
void io_remove_files(void);
/* io_run.c: one handle, --warmup-loops then --loops timed ops into @r;
 * the caller frees r->lat. Dies on any failure. */
void io_one_run(const struct args *a, struct run *r);

/* io_fio.c: take back the huge pages reserve_huge() added; called
 * from the signal handler, so async-signal-safe. */
void io_restore_huge(void);
/* io_fio.c: remove fio's hook directory (FIFOs, hook logs); called from
 * the signal handler, so async-signal-safe. */
void io_fio_cleanup(void);
/* io_fio.c: --compare-fio: nvswap and fio interleaved, --repeats times.
 * Return: the exit status (1 on a validation failure). */
int io_compare_fio(const struct args *a);

/* io_output.c: ds_io's lines for @r (sorts r->lat). */
void io_print_run(const struct args *a, const struct run *r);
/* io_output.c: @r as a JSON object (sorts r->lat). */
json_t *io_run_json(const struct args *a, const struct run *r);
/* io_output.c: the settings of @a as a JSON object. */
json_t *io_config_json(const struct args *a);
/* io_output.c: median, min and max of @v (@n at most 256) printed under
 * @label unless io_quiet, and set at @key of @j when @j. */
void io_summarize(const char *label, double *v, unsigned n, json_t *j,
		  const char *key);

#endif /* NVSWAP_IO_H */
