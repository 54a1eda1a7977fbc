/* SPDX-License-Identifier: MIT */
/*
 * The pinned arenas: two arenas of nvswap's private jemalloc whose extent
 * hooks map anonymous, huge-page-hinted memory and never give it back,
 * one mlocking it (pinned), one leaving it pageable (the unpinned opt-in).
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_BUFFERS_ARENA_H
#define NVS_BUFFERS_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum nvs__arena_kind {
	NVS__ARENA_LOCKED = 0,
	NVS__ARENA_PAGEABLE = 1,
};

struct nvs__arena_totals {
	uint64_t locked;   /* bytes mapped and mlocked */
	uint64_t pageable; /* bytes mapped without lock */
	uint64_t cuda;	   /* of locked, registered with CUDA */
	uint64_t limit;	   /* cap on locked, 0 = none */
	unsigned mappings;
	unsigned free_ranges;	     /* freed big ranges kept for reuse */
	unsigned allocator_warnings; /* jemalloc messages swallowed */
};

/* From this size on, allocations get exact mappings, not jemalloc's. */
#define NVS__ARENA_BIG (2u << 20)

/*
 * Zeroed memory of @n bytes (at least 1) aligned to @align (a power of
 * two, >= 4096) from the arena of @kind. Returns 0 or -errno with
 * nvs_last_error() set, naming @call: -ENOMEM (address space, the cap, or
 * the memlock limit) or -EPERM (memlock limit 0).
 */
int nvs__arena_alloc(enum nvs__arena_kind kind, size_t n, size_t align,
		     const char *call, void **out);
/* Give back @n bytes at @p from nvs__arena_alloc (the caller knows). */
void nvs__arena_free(void *p, size_t n);
/* Return to the OS (CUDA unregister, munmap: unlocked and no longer
 * resident) every big-allocation mapping with nothing live in it; returns
 * the bytes given back. Does nothing while an aio handle lives: io_uring
 * engines cache registered mappings by address, and a new mapping at an
 * unmapped one's address would meet a stale registration. */
uint64_t nvs__arena_trim(void);
/* An aio handle begins (+1) or ends (-1) (see nvs__arena_trim). */
void nvs__arena_users(int delta);
/* Arena setup once per process (also done by the first alloc): 0 or
 * -errno with nvs_last_error() set. */
int nvs__arena_init(void);
/* RLIMIT_MEMLOCK now; UINT64_MAX when unlimited or CAP_IPC_LOCK. */
uint64_t nvs__memlock_limit(void);
void nvs__arena_set_limit(uint64_t bytes);
void nvs__arena_totals(struct nvs__arena_totals *t);
/*
 * The locked mapping holding all of [@p, @p + @n): true with its start and
 * length. Mappings are never unmapped, so the answer stays true for the
 * process's life (io_uring registers them as fixed buffers).
 */
bool nvs__arena_mapping(const void *p, size_t n, uintptr_t *start, size_t *len);

#endif
