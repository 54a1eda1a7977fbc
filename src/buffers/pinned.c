// SPDX-License-Identifier: MIT
/*
 * The public pinned-memory calls over the arenas, and the process-wide
 * registry of live allocations behind nvs_pinned_contains(), safe frees
 * and the stats: a sorted array, searched in O(log n). The registry, not
 * jemalloc, decides whether a pointer may be freed, so a foreign or
 * repeated free never reaches the allocator.
 */
#include "buffers/pinned.h"
#include "buffers/arena.h"
#include "buffers/cuda.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct pin {
	uintptr_t start;
	size_t len; /* bytes asked for */
	bool locked;
};

/* lock protects every field of reg. Taken after jemalloc returns and
 * before memory goes back to it, so the hand-over of reused memory from
 * one thread's free to another's alloc is ordered by this lock. */
static struct {
	pthread_rwlock_t lock;
	struct pin *v; /* sorted by start */
	size_t n, cap;
	uint64_t in_use, high_water, unpinned_live;
} reg = {.lock = PTHREAD_RWLOCK_INITIALIZER};

/* Relaxed atomics: statistics only. */
static atomic_uint_fast64_t n_allocs, n_frees, n_failed, n_bad_frees;
/* -1: not set through the API, the environment decides. */
static atomic_int allow_api = -1;
static bool allow_env;
/* -EINVAL when NVSWAP_ALLOW_UNPINNED holds no on/off value (allow_msg
 * says so): every allocation is refused, naming it. */
static int allow_err;
static char allow_msg[NVS_ERRMSG_MAX / 2];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* fork(): hold the registry across it, so the child's copy is consistent.
 * The child re-initializes the lock instead of unlocking it: glibc's
 * rwlock remembers the writer's thread id, which the child's thread does
 * not have, and would take the unlock for a reader's. */
static void fork_prepare(void)
{
	pthread_rwlock_wrlock(&reg.lock);
}

static void fork_parent(void)
{
	pthread_rwlock_unlock(&reg.lock);
}

static void fork_child(void)
{
	pthread_rwlock_init(&reg.lock, NULL);
}

static void init_once(void)
{
	allow_err = nvs__env_switch("NVSWAP_ALLOW_UNPINNED", false, &allow_env,
				    allow_msg, sizeof(allow_msg));
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static bool unpinned_allowed(void)
{
	int api = atomic_load_explicit(&allow_api, memory_order_relaxed);

	return api < 0 ? allow_env : api != 0;
}

static void count(atomic_uint_fast64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static uint64_t load(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Index of the last allocation starting at or below @p, or -1. */
static long find_locked(uintptr_t p)
{
	return nvs__find_le(reg.v, reg.n, sizeof(*reg.v),
			    offsetof(struct pin, start), p);
}

static int reg_insert(const struct pin *pin, const char *call)
{
	long i;

	pthread_rwlock_wrlock(&reg.lock);
	if (!nvs__reserve(&reg.v, &reg.cap, reg.n, reg.n + 1, sizeof(*reg.v))) {
		pthread_rwlock_unlock(&reg.lock);
		return nvs__err(-ENOMEM,
				"%s: out of memory for the registry of "
				"pinned allocations",
				call);
	}
	i = find_locked(pin->start) + 1;
	memmove(&reg.v[i + 1], &reg.v[i], (reg.n - (size_t)i) * sizeof(*pin));
	reg.v[i] = *pin;
	reg.n++;
	reg.in_use += pin->len;
	if (reg.in_use > reg.high_water)
		reg.high_water = reg.in_use;
	if (!pin->locked)
		reg.unpinned_live++;
	pthread_rwlock_unlock(&reg.lock);
	return 0;
}

void *nvs__pinned_alloc(size_t n, size_t align, bool fallback, const char *call,
			bool *locked, int *err)
{
	struct pin pin = {.len = n, .locked = true};
	void *p = NULL;
	int ret;

	/* Before the first allocation: the fork handler and the opt-in.
	 * The on/off variables are checked on every allocation, so that a
	 * bad value is never taken for a default. */
	pthread_once(&once, init_once);
	if (allow_err) {
		ret = nvs__err(allow_err, "%s: %s", call, allow_msg);
	} else if ((ret = nvs__cuda_env(call)) < 0) {
		/* nvs_last_error() names NVSWAP_CUDA */
	} else if (n == 0) {
		ret = nvs__err(-EINVAL, "%s: zero bytes asked for", call);
	} else if (n > (size_t)PTRDIFF_MAX - align) {
		ret = nvs__err(-ENOMEM,
			       "%s: %zu bytes is more than any allocation "
			       "can be",
			       call, n);
	} else {
		ret = nvs__arena_alloc(NVS__ARENA_LOCKED, n, align, call, &p);
		if (ret < 0 && ret != -EINVAL &&
		    (fallback || unpinned_allowed())) {
			/* The reason pinning failed stays in
			 * nvs_last_error() for whoever wonders why. */
			pin.locked = false;
			ret = nvs__arena_alloc(NVS__ARENA_PAGEABLE, n, align,
					       call, &p);
		}
	}
	if (ret == 0) {
		pin.start = (uintptr_t)p;
		ret = reg_insert(&pin, call);
		if (ret < 0)
			nvs__arena_free(p, n);
	}
	if (err)
		*err = ret;
	if (ret < 0) {
		count(&n_failed);
		return NULL;
	}
	count(&n_allocs);
	if (locked)
		*locked = pin.locked;
	return p;
}

int nvs__pinned_free(void *p, const char *call)
{
	uintptr_t a = (uintptr_t)p;
	struct pin pin;
	long i;

	pthread_rwlock_wrlock(&reg.lock);
	i = find_locked(a);
	if (i < 0 || reg.v[i].start != a) {
		pthread_rwlock_unlock(&reg.lock);
		count(&n_bad_frees);
		return nvs__err(-EINVAL,
				"%s: %p is not a live pinned allocation "
				"(foreign memory, a pointer inside one, or "
				"freed already); ignored",
				call, p);
	}
	pin = reg.v[i];
	memmove(&reg.v[i], &reg.v[i + 1],
		(reg.n - (size_t)i - 1) * sizeof(pin));
	reg.n--;
	reg.in_use -= pin.len;
	if (!pin.locked)
		reg.unpinned_live--;
	pthread_rwlock_unlock(&reg.lock);
	nvs__arena_free(p, pin.len);
	count(&n_frees);
	return 0;
}

void *nvs_pinned_alloc(size_t nbytes, int *err)
{
	return nvs__pinned_alloc(nbytes, NVS_PINNED_ALIGN, false,
				 "nvs_pinned_alloc", NULL, err);
}

void nvs_pinned_free(void *ptr)
{
	if (ptr)
		nvs__pinned_free(ptr, "nvs_pinned_free");
}

bool nvs_pinned_contains(const void *ptr, size_t nbytes)
{
	uintptr_t a = (uintptr_t)ptr;
	bool ok = false;
	long i;

	if (!ptr)
		return false;
	pthread_rwlock_rdlock(&reg.lock);
	i = find_locked(a);
	if (i >= 0) {
		const struct pin *p = &reg.v[i];
		size_t off = a - p->start;
		ok = p->locked && off < p->len && nbytes <= p->len - off;
	}
	pthread_rwlock_unlock(&reg.lock);
	return ok;
}

int nvs_pinned_stats(struct nvs_pinned_stats *st)
{
	struct nvs__arena_totals t;

	if (!st)
		return nvs__err(-EINVAL, "nvs_pinned_stats: st is NULL");
	memset(st, 0, sizeof(*st));
	pthread_rwlock_rdlock(&reg.lock);
	st->bytes_in_use = reg.in_use;
	st->high_water = reg.high_water;
	st->live_allocations = reg.n;
	st->unpinned_allocations = reg.unpinned_live;
	pthread_rwlock_unlock(&reg.lock);
	nvs__arena_totals(&t);
	st->bytes_locked = t.locked;
	st->limit = t.limit;
	st->unpinned_bytes = t.pageable;
	st->cuda_registered_bytes = t.cuda;
	st->memlock_limit = nvs__memlock_limit();
	st->allocs = load(&n_allocs);
	st->frees = load(&n_frees);
	st->failed_allocs = load(&n_failed);
	st->bad_frees = load(&n_bad_frees);
	st->cuda = nvs__cuda_state();
	return 0;
}

int nvs_pinned_set_limit(uint64_t bytes)
{
	nvs__arena_set_limit(bytes);
	return 0;
}

void nvs_pinned_allow_unpinned(bool allow)
{
	atomic_store_explicit(&allow_api, allow ? 1 : 0, memory_order_relaxed);
}

const char *nvs_pinned_cuda_status(void)
{
	return nvs__cuda_status();
}

void nvs__pinned_trim(void)
{
	nvs__arena_trim();
}

void nvs__pinned_users(int delta)
{
	nvs__arena_users(delta);
	if (delta < 0)
		nvs__arena_trim();
}
