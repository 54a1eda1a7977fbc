/* SPDX-License-Identifier: MIT */
/*
 * An engine: one I/O backend instance driven by one thread. submit() queues
 * requests, reap() hands back finished ones on the calling thread. Short
 * transfers and EAGAIN/EINTR are resubmitted inside, so a reaped request is
 * final: res is the bytes moved (less than len only at end of file) or
 * -errno. Threading: an engine belongs to one thread at a time.
 */
#ifndef NVS_AIO_ENGINE_H
#define NVS_AIO_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/aio.h"

enum nvs_ioreq_opcode {
	NVS_IOREQ_READ = 0,
	NVS_IOREQ_WRITE = 1,
};

struct nvs_ioreq {
	/* Set by the submitter; borrowed by the engine until reaped. */
	char *buf;
	size_t len;
	int64_t off;
	int fd;
	int opcode;
	/* Nonzero: @fd belongs to a file-cache entry with this id (never
	 * reused), so an engine may keep it registered; 0: a caller's fd. */
	uint64_t file_key;
	/* Engine-owned while in flight. */
	size_t cap;	/* nonzero: move at most this much per attempt */
	size_t done;	/* bytes finished by earlier attempts */
	int64_t res;	/* raw result of the last attempt, then final */
	unsigned tries; /* EAGAIN/EINTR retries so far */
};

/* Fault injection for tests (the "fault" backend, psync underneath). */
enum nvs_fault_kind {
	NVS_FAULT_EIO = 1,
	NVS_FAULT_ENOSPC,
	NVS_FAULT_EAGAIN,
	NVS_FAULT_EINTR,
	NVS_FAULT_SHORT, /* move at most short_bytes (default half) */
	/* Not an engine fault: the handle refuses its nth op (counting the
	 * handle's nvs_aio_submit calls, 1-based) at submit time with
	 * -refuse_err, before anything is queued, as a submit refused for
	 * want of slots or space would be. */
	NVS_FAULT_REFUSE,
};

struct nvs_fault_rule {
	enum nvs_fault_kind kind;
	unsigned long nth;   /* first attempt hit, 1-based, per engine */
	unsigned long count; /* attempts hit from nth on; 0 = all after */
	int opcode;	     /* NVS_IOREQ_READ/WRITE, or -1 for both */
	size_t short_bytes;
	int refuse_err; /* NVS_FAULT_REFUSE: a positive errno */
};

#define NVS_FAULT_MAX_RULES 8
struct nvs_fault_plan {
	struct nvs_fault_rule rules[NVS_FAULT_MAX_RULES];
	unsigned nrules;
};

/* Engine set-up flags (the io_uring backend reads them; others ignore). */
enum nvs_engine_flag {
	NVS_ENGINE_SQPOLL = 1u << 0,   /* kernel thread polls submissions */
	NVS_ENGINE_IOPOLL = 1u << 1,   /* busy-poll completions */
	NVS_ENGINE_NO_FIXED = 1u << 2, /* no registered buffers or files */
	NVS_ENGINE_EAGER = 1u << 3,    /* hand every submit to the kernel at
					  once (single_submit); otherwise
					  io_uring may carry it into the
					  next reap's wait: one syscall */
};

struct nvs_engine_cfg {
	unsigned depth; /* requests in flight, at least 1 */
	unsigned flags; /* enum nvs_engine_flag */
	/* Non-NULL: wrap the backend in the fault backend following this
	 * plan (copied). */
	const struct nvs_fault_plan *plan;
};

/*
 * Counters of one engine, readable from any thread (relaxed atomics in
 * the engine; this is a snapshot).
 */
struct nvs_engine_stats {
	uint64_t retries;     /* short transfers, EAGAIN/EINTR resubmitted */
	uint64_t fixed_bufs;  /* attempts on registered buffers */
	uint64_t fixed_files; /* attempts on registered files */
	uint64_t registered;  /* bytes of memory registered */
	int register_error;   /* first refused registration, -errno */
	unsigned setup_flags; /* io_uring setup flags in effect */
};

/* How many EAGAIN/EINTR retries of one request before giving up. */
#define NVS_ENGINE_MAX_TRIES 1000u

struct nvs_engine;

/*
 * Create an engine over @backend (not AUTO) as @cfg says (borrowed for the
 * call). The io_uring backend must then be used only by the creating
 * thread (its ring may be SINGLE_ISSUER). Returns 0 or -errno
 * (-EOPNOTSUPP/-ENOSYS/-EPERM when the backend is unavailable here).
 */
int nvs__engine_create(enum nvs_backend backend,
		       const struct nvs_engine_cfg *cfg,
		       struct nvs_engine **out);
/*
 * Can @backend run here with @depth requests in flight? 0, or -errno with
 * a sentence saying why not (and how to fix it) in @why.
 */
int nvs__engine_probe(enum nvs_backend backend, unsigned depth, char *why,
		      size_t n);
/* The kernel's fs.aio-max-nr (65536 when unreadable). */
unsigned long nvs__aio_max_nr(void);
/* Free; nothing may be in flight. NULL is a no-op. */
void nvs__engine_destroy(struct nvs_engine *e);
/* Queue up to @n requests; returns how many were accepted (0..n). */
unsigned nvs__engine_submit(struct nvs_engine *e, struct nvs_ioreq **reqs,
			    unsigned n);
/* Start what submit queued now (io_uring may otherwise hold it until the
 * next reap, to submit and wait in one system call). */
void nvs__engine_kick(struct nvs_engine *e);
/* Hand back at least @min (at most @max) final requests; blocks. */
unsigned nvs__engine_reap(struct nvs_engine *e, unsigned min,
			  struct nvs_ioreq **out, unsigned max);
unsigned nvs__engine_inflight(const struct nvs_engine *e);
const char *nvs__engine_name(const struct nvs_engine *e);
/* Resubmissions so far: short transfers, EAGAIN and EINTR. */
uint64_t nvs__engine_retries(const struct nvs_engine *e);
/* Counters; any thread. */
void nvs__engine_stats(const struct nvs_engine *e, struct nvs_engine_stats *st);
/* Drop registered files (their descriptors were closed meanwhile). */
void nvs__engine_forget_files(struct nvs_engine *e);

#endif
