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
	/* Engine-owned while in flight. */
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
};

struct nvs_fault_rule {
	enum nvs_fault_kind kind;
	unsigned long nth;   /* first attempt hit, 1-based, per engine */
	unsigned long count; /* attempts hit from nth on; 0 = all after */
	int opcode;	     /* NVS_IOREQ_READ/WRITE, or -1 for both */
	size_t short_bytes;
};

#define NVS_FAULT_MAX_RULES 8
struct nvs_fault_plan {
	struct nvs_fault_rule rules[NVS_FAULT_MAX_RULES];
	unsigned nrules;
};

/* How many EAGAIN/EINTR retries of one request before giving up. */
#define NVS_ENGINE_MAX_TRIES 1000u

struct nvs_engine;

/*
 * Create an engine over @backend (not AUTO) for @depth requests in flight.
 * @plan is read only by the fault backend and copied. Returns 0 or -errno
 * (-EOPNOTSUPP/-ENOSYS when the backend is unavailable here).
 */
int nvs__engine_create(enum nvs_backend backend, unsigned depth,
		       const struct nvs_fault_plan *plan,
		       struct nvs_engine **out);
/* Free; nothing may be in flight. NULL is a no-op. */
void nvs__engine_destroy(struct nvs_engine *e);
/* Queue up to @n requests; returns how many were accepted (0..n). */
unsigned nvs__engine_submit(struct nvs_engine *e, struct nvs_ioreq **reqs,
			    unsigned n);
/* Hand back at least @min (at most @max) final requests; blocks. */
unsigned nvs__engine_reap(struct nvs_engine *e, unsigned min,
			  struct nvs_ioreq **out, unsigned max);
unsigned nvs__engine_inflight(const struct nvs_engine *e);
const char *nvs__engine_name(const struct nvs_engine *e);
/* Resubmissions so far: short transfers, EAGAIN and EINTR. */
uint64_t nvs__engine_retries(const struct nvs_engine *e);

#endif
