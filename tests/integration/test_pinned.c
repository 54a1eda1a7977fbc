// SPDX-License-Identifier: MIT
/*
 * Pinned memory: alignment, zero fill, real page locking (VmLck, mincore),
 * nvs_pinned_contains for whole buffers, views and foreign memory, the
 * stats, reuse of freed memory, the cap, the memlock limit as an
 * unprivileged user, bad input, allocation failures, and that jemalloc
 * never becomes the process's malloc. Each Criterion test runs in a fresh
 * process, so each starts with an empty arena.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffers/arena.h"
#include "internal/alloc.h"
#include "nvswap/aio.h"
#include "nvswap/buffers.h"
#include "nvswap/swapper.h"
#include "testutil.h"

#define MiB (1u << 20)

static struct nvs_pinned_stats stats(void)
{
	struct nvs_pinned_stats st;

	cr_assert_eq(nvs_pinned_stats(&st), 0);
	return st;
}

/* Field @key ("VmLck:", "VmRSS:") of @file, in bytes (kB lines). */
static uint64_t kb_field(const char *file, const char *key)
{
	FILE *f = fopen(file, "re");
	char line[256];
	unsigned long long kb = 0;
	size_t n = strlen(key);

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) &&
		    sscanf(line + n, "%llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb << 10;
}

/* Locked memory of this process, from the kernel. */
static uint64_t vm_locked(void)
{
	return kb_field("/proc/self/status", "VmLck:");
}

static bool resident(const void *p, size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(pg - 1);
	size_t len = (uintptr_t)p + n - a, np = (len + pg - 1) / pg;
	unsigned char *v = malloc(np);
	bool all = true;

	cr_assert_eq(mincore((void *)a, len, v), 0);
	for (size_t i = 0; i < np; i++)
		all = all && (v[i] & 1);
	free(v);
	return all;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static bool privileged(void)
{
	return stats().memlock_limit == UINT64_MAX;
}

TestSuite(pinned, .fini = tu_cleanup);

Test(pinned, every_size_is_aligned_zeroed_locked_and_resident)
{
	static const size_t sizes[] = {
		1,   4095,	  4096,	   4097,	65536,	 MiB - 1,
		MiB, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 8 * MiB, 100 * MiB + 3,
	};
	uint64_t lck0 = vm_locked();
	unsigned char *p[sizeof(sizes) / sizeof(sizes[0])];
	uint64_t asked = 0;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int err = 1;
		p[i] = nvs_pinned_alloc(sizes[i], &err);
		cr_assert_not_null(p[i], "%zu bytes: %s", sizes[i],
				   nvs_last_error());
		cr_assert_eq(err, 0);
		cr_assert_eq((uintptr_t)p[i] % NVS_PINNED_ALIGN, 0,
			     "%zu bytes at %p", sizes[i], (void *)p[i]);
		cr_assert(all_zero(p[i], sizes[i]), "%zu bytes zeroed",
			  sizes[i]);
		cr_assert(resident(p[i], sizes[i]));
		cr_assert(nvs_pinned_contains(p[i], sizes[i]));
		memset(p[i], 0x5A, sizes[i]);
		asked += sizes[i];
	}
	struct nvs_pinned_stats st = stats();
	cr_assert_eq(st.bytes_in_use, asked);
	cr_assert_eq(st.live_allocations, sizeof(sizes) / sizeof(sizes[0]));
	cr_assert_geq(st.bytes_locked, asked);
	cr_assert_eq(st.unpinned_bytes, 0);
	if (privileged() || st.memlock_limit >= st.bytes_locked)
		cr_assert_geq(vm_locked() - lck0, st.bytes_locked,
			      "the kernel counts the locked memory");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		nvs_pinned_free(p[i]);
	st = stats();
	cr_assert_eq(st.bytes_in_use, 0);
	cr_assert_eq(st.live_allocations, 0);
	cr_assert_eq(st.high_water, asked);
}

Test(pinned, big_allocations_lock_what_they_use)
{
	size_t n = 100 * MiB + 3;
	struct nvs_pinned_stats st0 = stats(), st;
	void *p = nvs_pinned_alloc(n, NULL);

	cr_assert_not_null(p, "%s", nvs_last_error());
	st = stats();
	/* Exact to the page: no size-class rounding for big allocations. */
	cr_assert_eq(st.bytes_locked - st0.bytes_locked, 100 * MiB + 4096);
	nvs_pinned_free(p);
}

Test(pinned, small_allocations_share_locked_extents)
{
	void *a = nvs_pinned_alloc(MiB, NULL), *b = nvs_pinned_alloc(MiB, NULL);

	cr_assert_not_null(a);
	cr_assert_not_null(b);
	/* Two 1 MiB allocations fit one 2 MiB extent: jemalloc's extra
	 * cache-oblivious page per large allocation is off. */
	cr_assert_eq(stats().bytes_locked, 2 * MiB);
	nvs_pinned_free(a);
	nvs_pinned_free(b);
}

static void free_alloc_cycle(size_t n)
{
	unsigned char *p = nvs_pinned_alloc(n, NULL), *q;
	uint64_t locked, lck;

	cr_assert_not_null(p);
	memset(p, 0xAB, n);
	locked = stats().bytes_locked;
	lck = vm_locked();
	nvs_pinned_free(p);
	/* Freed memory stays mapped, locked and resident. */
	cr_assert(resident(p, n), "%zu bytes resident after free", n);
	cr_assert_eq(stats().bytes_locked, locked);
	cr_assert_eq(vm_locked(), lck);
	cr_assert_not(nvs_pinned_contains(p, 1), "freed memory is not live");
	q = nvs_pinned_alloc(n, NULL);
	cr_assert_eq(q, p, "%zu bytes: the same memory comes back", n);
	cr_assert(all_zero(q, n), "and zeroed again");
	cr_assert_eq(stats().bytes_locked, locked, "nothing new locked");
	nvs_pinned_free(q);
}

Test(pinned, freed_memory_stays_locked_for_reuse)
{
	free_alloc_cycle(256 << 10); /* jemalloc arena */
	free_alloc_cycle(64 * MiB);  /* own mapping */
}

Test(pinned, freed_big_ranges_coalesce_within_their_mapping_only)
{
	char *m1 = nvs_pinned_alloc(8 * MiB, NULL), *m2, *a, *b;
	uint64_t locked;

	cr_assert_not_null(m1);
	nvs_pinned_free(m1);
	locked = stats().bytes_locked;
	/* Two pieces of m1, side by side, then freed: they merge back. */
	a = nvs_pinned_alloc(3 * MiB, NULL);
	b = nvs_pinned_alloc(3 * MiB, NULL);
	cr_assert_eq(a, m1);
	cr_assert_eq(b, m1 + 3 * MiB);
	nvs_pinned_free(a);
	nvs_pinned_free(b);
	cr_assert_eq(nvs_pinned_alloc(8 * MiB, NULL), m1);
	cr_assert_eq(stats().bytes_locked, locked);
	/* A second mapping while m1 is out: free ranges of two mappings
	 * never join, even if adjacent, so 16 MiB needs a new mapping. */
	m2 = nvs_pinned_alloc(8 * MiB, NULL);
	cr_assert_not_null(m2);
	cr_assert_neq(m2, m1);
	nvs_pinned_free(m1);
	nvs_pinned_free(m2);
	locked = stats().bytes_locked;
	a = nvs_pinned_alloc(16 * MiB, NULL);
	cr_assert_not_null(a);
	cr_assert_eq(stats().bytes_locked, locked + 16 * MiB);
	nvs_pinned_free(a);
}

Test(pinned, contains_whole_buffers_views_and_nothing_else)
{
	size_t n = 3 * MiB + 5;
	char *p = nvs_pinned_alloc(n, NULL), *s = nvs_pinned_alloc(100, NULL);
	char stack[64];
	char *heap = malloc(4096);

	cr_assert_not_null(p);
	cr_assert_not_null(s);
	cr_assert(nvs_pinned_contains(p, n));
	cr_assert(nvs_pinned_contains(p, 0));
	cr_assert(nvs_pinned_contains(p + 12345, 1000), "interior view");
	cr_assert(nvs_pinned_contains(p + n - 1, 1), "last byte");
	cr_assert(nvs_pinned_contains(p + n - 1, 0));
	cr_assert_not(nvs_pinned_contains(p, n + 1), "runs past the end");
	cr_assert_not(nvs_pinned_contains(p + n - 10, 11));
	cr_assert_not(nvs_pinned_contains(p + n, 0), "one past the end");
	cr_assert_not(nvs_pinned_contains(p + 1, SIZE_MAX), "overflow");
	cr_assert(nvs_pinned_contains(s, 100));
	cr_assert_not(nvs_pinned_contains(s, 101),
		      "the size asked, not jemalloc's size class");
	cr_assert_not(nvs_pinned_contains(p - 1, 2), "starts before");
	cr_assert_not(nvs_pinned_contains(stack, sizeof(stack)));
	cr_assert_not(nvs_pinned_contains(heap, 4096));
	cr_assert_not(nvs_pinned_contains(NULL, 0));
	cr_assert_not(nvs_pinned_contains(NULL, 1));
	nvs_pinned_free(p);
	cr_assert_not(nvs_pinned_contains(p, 1), "freed");
	nvs_pinned_free(s);
	free(heap);
}

Test(pinned, bad_frees_are_ignored_and_counted)
{
	char *p = nvs_pinned_alloc(10000, NULL);
	char *heap = malloc(64);
	struct nvs_pinned_stats st;

	cr_assert_not_null(p);
	nvs_pinned_free(NULL); /* a no-op, not a bad free */
	cr_assert_eq(stats().bad_frees, 0);
	nvs_pinned_free(heap);
	cr_assert(strstr(nvs_last_error(), "not a live pinned allocation"),
		  "%s", nvs_last_error());
	nvs_pinned_free(p + 4096); /* a view */
	st = stats();
	cr_assert_eq(st.bad_frees, 2);
	cr_assert_eq(st.live_allocations, 1, "nothing was freed");
	cr_assert(nvs_pinned_contains(p, 10000));
	nvs_pinned_free(p);
	nvs_pinned_free(p); /* double free */
	st = stats();
	cr_assert_eq(st.bad_frees, 3);
	cr_assert_eq(st.frees, 1);
	cr_assert_eq(st.live_allocations, 0);
	free(heap);
}

Test(pinned, zero_and_impossible_sizes_are_errors)
{
	int err = 0;

	cr_assert_null(nvs_pinned_alloc(0, &err));
	cr_assert_eq(err, -EINVAL);
	cr_assert(strstr(nvs_last_error(), "zero bytes"), "%s",
		  nvs_last_error());
	cr_assert_null(nvs_pinned_alloc(SIZE_MAX, &err));
	cr_assert_eq(err, -ENOMEM);
	cr_assert(strstr(nvs_last_error(), "more than any allocation"));
	cr_assert_null(nvs_pinned_alloc(SIZE_MAX / 2 - 4095, &err));
	cr_assert_eq(err, -ENOMEM);
	/* Larger than the address space can map: the kernel says no. */
	cr_assert_null(nvs_pinned_alloc((size_t)1 << 60, &err));
	cr_assert_eq(err, -ENOMEM, "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "cannot map"), "%s",
		  nvs_last_error());
	cr_assert_null(nvs_pinned_alloc(0, NULL), "err may be NULL");
	struct nvs_pinned_stats st = stats();
	cr_assert_eq(st.failed_allocs, 5);
	cr_assert_eq(st.live_allocations, 0);
	cr_assert_eq(nvs_pinned_stats(NULL), -EINVAL);
}

Test(pinned, cap_on_locked_bytes_is_enomem_beyond_it)
{
	void *keep = nvs_pinned_alloc(4 * MiB, NULL), *p;
	int err = 0;

	cr_assert_not_null(keep);
	cr_assert_eq(nvs_pinned_set_limit(stats().bytes_locked + 6 * MiB), 0);
	cr_assert_null(nvs_pinned_alloc(8 * MiB, &err));
	cr_assert_eq(err, -ENOMEM);
	cr_assert(strstr(nvs_last_error(), "cap"), "%s", nvs_last_error());
	cr_assert_eq(stats().limit, stats().bytes_locked + 6 * MiB);
	p = nvs_pinned_alloc(5 * MiB, &err);
	cr_assert_not_null(p, "under the cap: %s", nvs_last_error());
	nvs_pinned_free(p);
	/* Reuse needs no new locked memory, so the cap does not matter. */
	p = nvs_pinned_alloc(5 * MiB, &err);
	cr_assert_not_null(p);
	nvs_pinned_free(p);
	cr_assert_eq(nvs_pinned_set_limit(0), 0);
	p = nvs_pinned_alloc(8 * MiB, &err);
	cr_assert_not_null(p, "no cap: %s", nvs_last_error());
	nvs_pinned_free(p);
	nvs_pinned_free(keep);
}

Test(pinned, cap_from_the_environment)
{
	int err = 0;

	setenv("NVSWAP_PINNED_LIMIT", "4M", 1);
	cr_assert_null(nvs_pinned_alloc(5 * MiB, &err));
	cr_assert_eq(err, -ENOMEM);
	cr_assert_eq(stats().limit, 4 * MiB);
}

Test(pinned, bad_cap_in_the_environment_is_einval)
{
	int err = 0;

	setenv("NVSWAP_PINNED_LIMIT", "lots", 1);
	cr_assert_null(nvs_pinned_alloc(4096, &err));
	cr_assert_eq(err, -EINVAL);
	cr_assert(strstr(nvs_last_error(), "NVSWAP_PINNED_LIMIT=lots"), "%s",
		  nvs_last_error());
}

/* ----------------------------------------------- memlock, unprivileged */

Test(pinned, small_memlock_limit_is_enomem_with_advice_then_opt_in)
{
	struct tu_child c;

	if (!tu_as_nobody("small_memlock", 64 << 10, &c))
		cr_skip_test("cannot lower RLIMIT_MEMLOCK and drop root here");
	cr_assert_eq(c.res[0], 0, "1 MiB cannot be locked under 64 KiB");
	cr_assert_eq(c.res[1], -ENOMEM);
	cr_assert(strstr(c.msg, "1048576-byte"), "asked size: %s", c.msg);
	cr_assert(strstr(c.msg, "64 KiB"), "the limit: %s", c.msg);
	cr_assert(strstr(c.msg, "ulimit -l"), "how to raise it: %s", c.msg);
	cr_assert(strstr(c.msg, "limits.conf"), "%s", c.msg);
	cr_assert(strstr(c.msg, "NVSWAP_ALLOW_UNPINNED=1"), "%s", c.msg);
	cr_assert_eq(c.res[2], 1, "opted in: unpinned memory, zeroed");
	cr_assert_eq(c.res[3], 0, "and not reported as pinned");
	cr_assert_eq(c.res[4], 1, "counted as unpinned");
	cr_assert_eq(c.res[5], 1);
	cr_assert_eq(c.res[6], 1, "stats report the limit");
	cr_assert_eq(c.res[7], 0);
}

Test(pinned, unpinned_opt_in_from_the_environment)
{
	struct tu_child c;

	if (!tu_as_nobody("env_optin", 64 << 10, &c))
		cr_skip_test("cannot lower RLIMIT_MEMLOCK and drop root here");
	cr_assert_eq(c.res[0], 1);
	cr_assert_eq(c.res[1], 0);
	cr_assert_eq(c.res[2], 0);
}

Test(pinned, zero_memlock_limit_is_eperm)
{
	struct tu_child c;

	if (!tu_as_nobody("zero_memlock", 0, &c))
		cr_skip_test("cannot lower RLIMIT_MEMLOCK and drop root here");
	cr_assert_eq(c.res[0], 0);
	cr_assert_eq(c.res[1], -EPERM, "%s", c.msg);
	cr_assert(strstr(c.msg, "memlock limit"), "%s", c.msg);
}

/* The private jemalloc's mallctl (see src/buffers/arena.c). */
int nvs__je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
		    size_t newlen);

Test(pinned, our_jemalloc_settings_win_over_malloc_conf_and_warn_nothing)
{
	struct nvs__arena_totals t;
	const char *dss = NULL;
	ssize_t decay = 0;
	size_t sz;

	/* Meant for an application's own jemalloc; must not change ours. */
	setenv("MALLOC_CONF", "dss:primary,dirty_decay_ms:1000", 1);
	void *p = nvs_pinned_alloc(4096, NULL);
	cr_assert_not_null(p);
	sz = sizeof(dss);
	cr_assert_eq(nvs__je_mallctl("opt.dss", &dss, &sz, NULL, 0), 0);
	cr_assert_str_eq(dss, "disabled", "no sbrk beside glibc's heap");
	sz = sizeof(decay);
	cr_assert_eq(
		nvs__je_mallctl("opt.dirty_decay_ms", &decay, &sz, NULL, 0), 0);
	cr_assert_eq(decay, -1, "freed memory is never purged");
	nvs__arena_totals(&t);
	cr_assert_eq(t.allocator_warnings, 0,
		     "every conf key exists in this jemalloc");
	nvs_pinned_free(p);
}

/* ------------------------------------------------------ process malloc */

/* The file name of the object that defines @sym for the process. */
static const char *owner(const char *sym)
{
	Dl_info info;
	void *p = dlsym(RTLD_DEFAULT, sym);

	cr_assert_not_null(p, "%s", sym);
	cr_assert_neq(dladdr(p, &info), 0);
	return info.dli_fname;
}

Test(pinned, jemalloc_is_not_the_process_malloc)
{
	void *p = nvs_pinned_alloc(1000, NULL);
	const char *m = owner("malloc"), *f = owner("free");
	char *heap;

	cr_assert_not_null(p);
	/* glibc's, or the sanitizer's that wraps it; never jemalloc's. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	cr_assert(strstr(m, "libasan") || strstr(m, "libtsan"), "%s", m);
#else
	cr_assert(strstr(m, "libc.so"), "malloc comes from %s", m);
#endif
	cr_assert_str_eq(m, f);
	cr_assert_null(strstr(m, "jemalloc"));
	cr_assert_null(dlsym(RTLD_DEFAULT, "mallocx"),
		       "no unprefixed jemalloc API anywhere in the process");
	cr_assert_null(dlsym(RTLD_DEFAULT, "mallctl"));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	/* glibc's own accounting sees malloc, so glibc serves it. */
	struct mallinfo2 before = mallinfo2(), after;
	heap = malloc(50000);
	after = mallinfo2();
	cr_assert_geq(after.uordblks - before.uordblks, 50000);
#else
	heap = malloc(50000);
#endif
	cr_assert_not(nvs_pinned_contains(heap, 1));
	free(heap);
	nvs_pinned_free(p);
}

/* ------------------------------------------------ allocation failures */

/*
 * In a fresh process the first allocation grows the registry and the
 * mapping (and, for big ones, range) tables: fail each internal allocation
 * in turn. Each either fails the call with -ENOMEM, leaving nothing
 * behind, or is absorbed (jemalloc retries a failed extent hook); the
 * loop ends once the injected failure lies past what the call needs.
 */
static unsigned first_alloc_fails_cleanly(size_t n)
{
	unsigned failures = 0;

	for (unsigned long i = 1;; i++) {
		int err = 0;
		nvs__alloc_fail_at(i);
		void *p = nvs_pinned_alloc(n, &err);
		unsigned long used = nvs__alloc_fail_at(0);
		if (p) {
			cr_assert_eq(err, 0);
			nvs_pinned_free(p);
			if (used < i)
				break;
		} else {
			cr_assert_eq(err, -ENOMEM, "allocation %lu: %s", i,
				     nvs_last_error());
			failures++;
		}
		cr_assert_eq(stats().live_allocations, 0);
		cr_assert_lt(i, 64);
	}
	return failures;
}

Test(pinned, first_small_allocation_fails_cleanly_at_each_step)
{
	/* The mapping table's first growth fails inside jemalloc's extent
	 * hook, which jemalloc retries: the call may well succeed. */
	first_alloc_fails_cleanly(4096);
}

Test(pinned, first_big_allocation_fails_cleanly_at_each_step)
{
	cr_assert_gt(first_alloc_fails_cleanly(4 * MiB), 0,
		     "table failures reach the caller as -ENOMEM");
}

Test(pinned, registry_growth_failure_is_enomem_and_loses_nothing)
{
	enum { N = 200 };
	void *many[N];

	for (unsigned long i = 1;; i++) {
		int err = 0, n;
		nvs__alloc_fail_at(i);
		for (n = 0; n < N; n++) {
			many[n] = nvs_pinned_alloc(4096, &err);
			if (!many[n])
				break;
		}
		unsigned long used = nvs__alloc_fail_at(0);
		for (int j = 0; j < n; j++)
			nvs_pinned_free(many[j]);
		cr_assert_eq(stats().live_allocations, 0);
		if (n == N && used < i)
			break; /* the injected failure was past the end */
		if (n < N)
			cr_assert_eq(err, -ENOMEM, "allocation %lu", i);
		cr_assert_lt(i, 64);
	}
}

/* ------------------------------------------------------------- fork */

static void *hold_and_free(void *arg)
{
	void **v = arg;

	/* Keep the registry and arena locks busy while the main thread
	 * forks: a lock held at fork must not stay held in the child. */
	for (int i = 0; i < 2000; i++) {
		void *p = nvs_pinned_alloc(i % 2 ? 4096 : (3u << 20), NULL);
		nvs_pinned_free(p);
	}
	*v = NULL;
	return NULL;
}

Test(pinned, fork_while_another_thread_allocates)
{
	pthread_t th;
	void *done = (void *)1;

#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("ASan's allocator (GCC 12) takes no lock around fork(): "
		     "a child of a threaded process can hang in its first "
		     "malloc, whatever nvswap does; the plain build runs this");
#endif
	cr_assert_not_null(nvs_pinned_alloc(100, NULL));
	cr_assert_eq(pthread_create(&th, NULL, hold_and_free, &done), 0);
	for (int i = 0; i < 20; i++) {
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			/* The child allocates and frees: no lock is stuck. */
			void *p = nvs_pinned_alloc(8192, NULL);
			void *q = nvs_pinned_alloc(4u << 20, NULL);
			bool ok = p && q && nvs_pinned_contains(q, 4u << 20);
			nvs_pinned_free(p);
			nvs_pinned_free(q);
			_exit(ok ? 0 : 1);
		}
		int status = -1;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "child %d", i);
	}
	pthread_join(th, NULL);
}

/* Issue 16: libnvswap never holds memory it does not need. A 4 GiB pool,
 * every page touched, and a handle: once the swapper and the handle are
 * destroyed, resident and locked memory fall back to where they were. */
Test(pinned, a_destroyed_swapper_and_handle_give_a_4_gib_pool_back_to_the_os)
{
	const size_t bufsz = 256 * MiB;
	const unsigned count = 16; /* 4 GiB */
	uint64_t rss0, lck0, rss, lck;
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	struct nvs_aio *h = NULL;
	void *p;

	if (kb_field("/proc/meminfo", "MemAvailable:") < 6ull * 1024 * MiB)
		cr_skip_test("needs 6 GiB of available memory for a 4 GiB "
			     "pool; %llu MiB here",
			     (unsigned long long)(kb_field("/proc/meminfo",
							   "MemAvailable:") /
						  MiB));
	rss0 = kb_field("/proc/self/status", "VmRSS:");
	lck0 = vm_locked();
	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = tu_dir();
	o.buffer_size = bufsz;
	o.buffer_count = count;
	o.pin_memory = privileged(); /* else locked where the limit allows */
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_create(NULL, &h), 0, "%s", nvs_last_error());
	/* Never-written tensors read as zeros: acquiring each one writes
	 * every byte of its buffer. */
	for (unsigned i = 0; i < count; i++) {
		cr_assert_eq(nvs_swapper_register(s, i, bufsz, NULL), 0);
		cr_assert_eq(nvs_swapper_acquire(s, i, &p), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_swapper_release(s, i, false), 0);
	}
	rss = kb_field("/proc/self/status", "VmRSS:");
	cr_assert_geq(rss, rss0 + count * bufsz - 64 * MiB,
		      "the pool is resident: %llu MiB over %llu",
		      (unsigned long long)((rss - rss0) / MiB),
		      (unsigned long long)(rss0 / MiB));
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	rss = kb_field("/proc/self/status", "VmRSS:");
	lck = vm_locked();
	cr_log_info("RSS %llu -> %llu MiB, locked %llu -> %llu MiB",
		    (unsigned long long)(rss0 / MiB),
		    (unsigned long long)(rss / MiB),
		    (unsigned long long)(lck0 / MiB),
		    (unsigned long long)(lck / MiB));
	cr_assert_lt(rss, rss0 + 64 * MiB, "RSS %llu MiB, was %llu MiB",
		     (unsigned long long)(rss / MiB),
		     (unsigned long long)(rss0 / MiB));
	cr_assert_lt(lck, lck0 + 64 * MiB, "locked %llu MiB, was %llu MiB",
		     (unsigned long long)(lck / MiB),
		     (unsigned long long)(lck0 / MiB));
	cr_assert_lt(stats().bytes_locked, 64 * MiB);
}
