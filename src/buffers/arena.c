// SPDX-License-Identifier: MIT
/*
 * Where pinned memory comes from. Allocations below NVS__ARENA_BIG come from two
 * arenas of nvswap's private jemalloc (nvs__je_*, Debian's jemalloc built
 * without initial-exec TLS by scripts/jemalloc-source.sh, renamed by
 * scripts/jemalloc-private.sh) running on our extent
 * hooks: LOCKED maps, huge-page hints and mlocks; PAGEABLE only maps.
 * Neither gives memory back: dalloc and decommit opt out and no purge is
 * offered, so freed memory stays mapped and locked for the next allocation.
 *
 * Allocations of NVS__ARENA_BIG and more get exact, page-rounded mappings of
 * their own, reused best-fit from a cache of freed ranges (coalesced
 * within a mapping). jemalloc would round them up to its size classes (up
 * to 25% more) and, in Debian's build, add a page that pushes the extent
 * into the next class: 2.0 GiB asked locked 2.45 GiB. Locked memory is
 * the scarce resource, so big allocations lock what they use.
 *
 * Every mapping is kept in a table: jemalloc merges across mappings are
 * refused (each may be registered with CUDA on its own), freed big ranges
 * coalesce only within their mapping, and the totals feed the stats.
 */
#include "buffers/arena.h"
#include "buffers/cuda.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <jemalloc/jemalloc.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The private jemalloc (scripts/jemalloc-private.sh renamed them). */
void *nvs__je_mallocx(size_t size, int flags);
void nvs__je_dallocx(void *ptr, int flags);
int nvs__je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
		    size_t newlen);
extern void (*nvs__je_malloc_message)(void *opaque, const char *s);

/*
 * jemalloc reads this conf string last, after MALLOC_CONF, so settings an
 * application meant for its own jemalloc cannot change ours. No sbrk
 * (glibc owns the heap), no background threads, no thread caches, never
 * decay (purge) freed memory, never abort. Every key must exist in
 * Debian's build: an unknown one is a warning (tested to be none).
 */
extern const char *nvs__je_malloc_conf_2_conf_harder;
const char *nvs__je_malloc_conf_2_conf_harder =
	"abort:false,abort_conf:false,dss:disabled,narenas:1,"
	"percpu_arena:disabled,background_thread:false,tcache:false,"
	"dirty_decay_ms:-1,muzzy_decay_ms:-1,retain:true,"
	"metadata_thp:disabled,stats_print:false";

/*
 * Debian's jemalloc 5.3 is built cache-oblivious: every large allocation
 * carries one extra page, and no conf key turns it off. Cleared before
 * jemalloc initializes (it is read once, at boot), which is what
 * --disable-cache-oblivious would do; weak, so a jemalloc without the
 * variable still links. Safe because every allocation asks for page
 * alignment, which skips the random in-page offset the page is for.
 */
extern bool nvs__je_je_opt_cache_oblivious __attribute__((weak));

/* jemalloc 5.3's arena_config_t, for experimental.arenas_create_ext. */
struct je_arena_config {
	extent_hooks_t *hooks;
	bool metadata_use_hooks;
};

#define MAP_ALIGN (2u << 20) /* huge-page size: mappings can be THP */
#define PAGE 4096u

struct mapping {
	uintptr_t start;
	size_t len;
	enum nvs__arena_kind kind;
	bool cuda;
};

/* A freed range of a big allocation's mapping, ready for reuse. */
struct range {
	uintptr_t start;
	size_t len;
	uintptr_t map; /* start of its mapping: coalesce only within one */
	enum nvs__arena_kind kind;
};

/* lock protects every field of maps. The hooks take it inside jemalloc's
 * own locks, so it is never held while calling into jemalloc. */
static struct {
	pthread_mutex_t lock;
	struct mapping *v; /* sorted by start */
	size_t n, cap;
	struct range *free; /* big ranges free for reuse, sorted by start */
	size_t nfree, capfree;
	size_t live_big;   /* big allocations out: each may add a range */
	uint64_t bytes[2]; /* mapped, per kind; includes reservations */
	uint64_t cuda;
	uint64_t limit;
	unsigned users; /* live aio handles: no trim meanwhile */
} maps = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Why the hooks failed, for the allocating thread's error message. */
struct hook_fail {
	int map_errno;	 /* mmap */
	int mlock_errno; /* mlock */
	bool cap;	 /* nvs_pinned_set_limit() cap */
	size_t size;	 /* extent asked for */
};
static _Thread_local struct hook_fail tl_fail;
/* Set while creating an arena on a jemalloc without arenas_create_ext:
 * its metadata then comes through our hooks and is not locked. */
static _Thread_local bool tl_creating;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_err;
static char init_msg[NVS_ERRMSG_MAX];
static unsigned arena_ind[2];
static atomic_uint warnings; /* relaxed: a counter */

/* ------------------------------------------------------ mapping table */

/* Index of the last mapping starting at or below @p, or -1. Locked. */
static long find_locked(uintptr_t p)
{
	return nvs__find_le(maps.v, maps.n, sizeof(*maps.v),
			    offsetof(struct mapping, start), p);
}

bool nvs__arena_mapping(const void *p, size_t n, uintptr_t *start, size_t *len)
{
	uintptr_t a = (uintptr_t)p;
	bool ok = false;
	long i;

	pthread_mutex_lock(&maps.lock);
	i = find_locked(a);
	if (i >= 0) {
		const struct mapping *m = &maps.v[i];
		if (m->kind == NVS__ARENA_LOCKED && a - m->start <= m->len &&
		    n <= m->len - (a - m->start)) {
			*start = m->start;
			*len = m->len;
			ok = true;
		}
	}
	pthread_mutex_unlock(&maps.lock);
	return ok;
}

static bool insert_locked(const struct mapping *m)
{
	long i;

	if (!nvs__reserve(&maps.v, &maps.cap, maps.n, maps.n + 1,
			  sizeof(*maps.v)))
		return false;
	i = find_locked(m->start) + 1;
	memmove(&maps.v[i + 1], &maps.v[i], (maps.n - (size_t)i) * sizeof(*m));
	maps.v[i] = *m;
	maps.n++;
	return true;
}

/* Count @size against @kind; false when the cap forbids it. */
static bool reserve(enum nvs__arena_kind kind, size_t size)
{
	bool ok = true;

	pthread_mutex_lock(&maps.lock);
	if (kind == NVS__ARENA_LOCKED && maps.limit &&
	    maps.bytes[kind] + size > maps.limit)
		ok = false;
	else
		maps.bytes[kind] += size;
	pthread_mutex_unlock(&maps.lock);
	return ok;
}

static void unreserve(enum nvs__arena_kind kind, size_t size)
{
	pthread_mutex_lock(&maps.lock);
	maps.bytes[kind] -= size;
	pthread_mutex_unlock(&maps.lock);
}

/* ------------------------------------------------------- extent hooks */

static extent_hooks_t hooks[2];

static enum nvs__arena_kind kind_of(const extent_hooks_t *eh)
{
	return eh == &hooks[NVS__ARENA_LOCKED] ? NVS__ARENA_LOCKED
					       : NVS__ARENA_PAGEABLE;
}

/* @size bytes at a multiple of @align, or NULL with errno set. */
static char *map_aligned(size_t size, size_t align)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t span, head, tail;
	char *m, *p;

	if (size > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	span = size + align - page;
	m = mmap(NULL, span, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	p = (char *)nvs__round_up((uintptr_t)m, align);
	head = (size_t)(p - m);
	tail = span - head - size;
	if (head)
		munmap(m, head);
	if (tail)
		munmap(p + size, tail);
	return p;
}

/*
 * mlock straight through the system call: the sanitizers replace mlock()
 * with a no-op that reports success, and the tests check real locking.
 */
static int lock_pages(void *p, size_t n)
{
	return syscall(SYS_mlock, p, n) == 0 ? 0 : -1;
}

/*
 * A new mapping of @size bytes for @kind at a multiple of @align: counted
 * against the cap, huge-page hinted, mlocked when @lock, registered with
 * CUDA when locked and CUDA is in use, and entered in the table. NULL with
 * tl_fail set on failure.
 */
static char *new_mapping(enum nvs__arena_kind kind, size_t size, size_t align,
			 bool lock)
{
	struct mapping m = {.len = size, .kind = kind};
	char *p;

	tl_fail.size = size;
	if (!reserve(kind, size)) {
		tl_fail.cap = true;
		return NULL;
	}
	p = map_aligned(size, NVS_MAX(align, (size_t)MAP_ALIGN));
	if (!p) {
		tl_fail.map_errno = errno;
		unreserve(kind, size);
		return NULL;
	}
	/* Before mlock faults the pages in, so they come as huge pages:
	 * fewer, larger segments per disk request. EINVAL without THP. */
	madvise(p, size, MADV_HUGEPAGE);
	if (lock && lock_pages(p, size) < 0) {
		tl_fail.mlock_errno = errno;
		munmap(p, size);
		unreserve(kind, size);
		return NULL;
	}
	m.start = (uintptr_t)p;
	m.cuda = lock && nvs__cuda_register(p, size);
	pthread_mutex_lock(&maps.lock);
	if (!insert_locked(&m)) {
		pthread_mutex_unlock(&maps.lock);
		if (m.cuda)
			nvs__cuda_unregister(p);
		munmap(p, size);
		unreserve(kind, size);
		tl_fail.map_errno = ENOMEM;
		return NULL;
	}
	if (m.cuda)
		maps.cuda += size;
	pthread_mutex_unlock(&maps.lock);
	return p;
}

static void *hook_alloc(extent_hooks_t *eh, void *new_addr, size_t size,
			size_t alignment, bool *zero, bool *commit,
			unsigned ind)
{
	enum nvs__arena_kind kind = kind_of(eh);
	char *p;

	(void)ind;
	if (new_addr)
		return NULL; /* no placement promises: jemalloc copes */
	p = new_mapping(kind, size, alignment,
			kind == NVS__ARENA_LOCKED && !tl_creating);
	if (!p)
		return NULL;
	*zero = true;
	*commit = true;
	return p;
}

/* Keep the memory (true = opt out): it stays locked for reuse. */
static bool hook_dalloc(extent_hooks_t *eh, void *addr, size_t size,
			bool committed, unsigned ind)
{
	(void)eh, (void)addr, (void)size, (void)committed, (void)ind;
	return true;
}

/* Memory is always committed (false = success). */
static bool hook_commit(extent_hooks_t *eh, void *addr, size_t size,
			size_t offset, size_t length, unsigned ind)
{
	(void)eh, (void)addr, (void)size, (void)offset, (void)length, (void)ind;
	return false;
}

/* Never decommit (true = opt out): locked pages stay locked. */
static bool hook_decommit(extent_hooks_t *eh, void *addr, size_t size,
			  size_t offset, size_t length, unsigned ind)
{
	(void)eh, (void)addr, (void)size, (void)offset, (void)length, (void)ind;
	return true;
}

static bool hook_split(extent_hooks_t *eh, void *addr, size_t size,
		       size_t size_a, size_t size_b, bool committed,
		       unsigned ind)
{
	(void)eh, (void)addr, (void)size, (void)size_a, (void)size_b,
		(void)committed, (void)ind;
	return false;
}

/* Merge only within one mapping (false = success). */
static bool hook_merge(extent_hooks_t *eh, void *addr_a, size_t size_a,
		       void *addr_b, size_t size_b, bool committed,
		       unsigned ind)
{
	long a, b;

	(void)eh, (void)size_a, (void)size_b, (void)committed, (void)ind;
	pthread_mutex_lock(&maps.lock);
	a = find_locked((uintptr_t)addr_a);
	b = find_locked((uintptr_t)addr_b);
	pthread_mutex_unlock(&maps.lock);
	return a < 0 || a != b;
}

/* No destroy hook: the arenas live as long as the process. No purge
 * hooks: freed memory is never given back. The same hooks twice:
 * kind_of() tells the arenas apart by the table's address. */
#define HOOKS                                                                  \
	{                                                                      \
		.alloc = hook_alloc, .dalloc = hook_dalloc,                    \
		.commit = hook_commit, .decommit = hook_decommit,              \
		.split = hook_split, .merge = hook_merge,                      \
	}
static extent_hooks_t hooks[2] = {
	[NVS__ARENA_LOCKED] = HOOKS, [NVS__ARENA_PAGEABLE] = HOOKS};
#undef HOOKS

/* -------------------------------------------------------------- setup */

/* The library never prints: jemalloc's messages are counted, not shown. */
static void swallow(void *opaque, const char *s)
{
	(void)opaque, (void)s;
	atomic_fetch_add_explicit(&warnings, 1, memory_order_relaxed);
}

/* fork(): the child must not inherit the table's lock held by a thread
 * that does not exist there. Registered before jemalloc initializes, so
 * this prepare handler runs after jemalloc's (handlers run in reverse):
 * jemalloc's locks are taken first, as the hooks do. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&maps.lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&maps.lock);
}

/* A fresh lock, not an unlock: the child's thread is not the owner. */
static void fork_child(void)
{
	pthread_mutex_init(&maps.lock, NULL);
}

static int create_arena(enum nvs__arena_kind kind)
{
	struct je_arena_config cfg = {&hooks[kind], false};
	extent_hooks_t *hp = &hooks[kind];
	size_t sz = sizeof(unsigned), grow = MAP_ALIGN;
	char name[64];
	int rc;

	/* Metadata from jemalloc's default hooks: only data is locked. */
	rc = nvs__je_mallctl("experimental.arenas_create_ext", &arena_ind[kind],
			     &sz, &cfg, sizeof(cfg));
	if (rc == ENOENT || rc == EINVAL) {
		/* A jemalloc without it, or with another arena_config_t. */
		tl_creating = true;
		rc = nvs__je_mallctl("arenas.create", &arena_ind[kind], &sz,
				     &hp, sizeof(hp));
		tl_creating = false;
	}
	if (rc)
		return -rc;
	/* Grow by what is needed, at least 2 MiB: no geometric over-growth
	 * of locked memory. */
	snprintf(name, sizeof(name), "arena.%u.retain_grow_limit",
		 arena_ind[kind]);
	nvs__je_mallctl(name, NULL, NULL, &grow, sizeof(grow));
	return 0;
}

static void init_once(void)
{
	const char *env = getenv("NVSWAP_PINNED_LIMIT");
	uint64_t limit = 0;
	int rc;

	if (env && *env && nvs_parse_size(env, &limit) < 0) {
		init_err = -EINVAL;
		snprintf(init_msg, sizeof(init_msg),
			 "NVSWAP_PINNED_LIMIT=%s is not a size such as "
			 "4294967296, 4096M or 4G",
			 env);
		return;
	}
	maps.limit = limit;
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	nvs__je_malloc_message = swallow;
	if (&nvs__je_je_opt_cache_oblivious)
		nvs__je_je_opt_cache_oblivious = false;
	nvs__cuda_init();
	for (int k = 0; k < 2; k++) {
		rc = create_arena((enum nvs__arena_kind)k);
		if (rc < 0) {
			init_err = rc == -EAGAIN ? -ENOMEM : rc;
			snprintf(init_msg, sizeof(init_msg),
				 "creating the pinned jemalloc arena: %s",
				 nvs_strerror(rc));
			return;
		}
	}
}

int nvs__arena_init(void)
{
	pthread_once(&once, init_once);
	if (init_err)
		return nvs__err(init_err, "%s", init_msg);
	return 0;
}

/* ------------------------------------------------------------- allocs */

uint64_t nvs__memlock_limit(void)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct caps[2];
	struct rlimit rl;

	/* CAP_IPC_LOCK (root) locks without limit. */
	if (syscall(SYS_capget, &hdr, caps) == 0 &&
	    (caps[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))))
		return UINT64_MAX;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return rl.rlim_cur;
}

static int alloc_error(enum nvs__arena_kind kind, size_t n, const char *call)
{
	struct hook_fail f = tl_fail;
	struct nvs__arena_totals t;
	char lim[64];
	uint64_t ml;

	nvs__arena_totals(&t);
	if (f.cap)
		return nvs__err(-ENOMEM,
				"%s: %zu bytes: the pinned-memory cap of "
				"%" PRIu64 " bytes would be exceeded (%" PRIu64
				" locked already); raise it with "
				"nvs_pinned_set_limit() or NVSWAP_PINNED_LIMIT",
				call, n, t.limit, t.locked);
	if (f.mlock_errno) {
		ml = nvs__memlock_limit();
		if (ml == UINT64_MAX)
			snprintf(lim, sizeof(lim), "unlimited");
		else
			snprintf(lim, sizeof(lim), "%" PRIu64 " KiB", ml >> 10);
		return nvs__err(
			f.mlock_errno == EPERM ? -EPERM : -ENOMEM,
			"%s: cannot lock %zu bytes of memory for a %zu-byte "
			"pinned allocation (mlock: %s): the memlock limit "
			"(RLIMIT_MEMLOCK) is %s and nvswap already holds "
			"%" PRIu64 " KiB locked. Raise it (`ulimit -l "
			"unlimited`, a memlock line in "
			"/etc/security/limits.conf, LimitMEMLOCK= for a "
			"systemd service, --ulimit memlock=-1 for docker) or "
			"allow unpinned memory (NVSWAP_ALLOW_UNPINNED=1 or "
			"nvs_pinned_allow_unpinned(true))",
			call, f.size, n, nvs_strerror(f.mlock_errno), lim,
			t.locked >> 10);
	}
	if (f.map_errno)
		return nvs__err(
			-ENOMEM,
			"%s: cannot map %zu bytes for %s %zu-byte allocation: %s",
			call, f.size,
			kind == NVS__ARENA_LOCKED ? "a pinned" : "an unpinned",
			n, nvs_strerror(f.map_errno));
	return nvs__err(-ENOMEM,
			"%s: jemalloc cannot allocate %zu bytes (above its "
			"largest size class, or out of memory for metadata)",
			call, n);
}

/* ---------------------------------------------------- big allocations */

/* Room for @extra more free ranges. Locked. */
static bool reserve_ranges_locked(size_t extra)
{
	return nvs__reserve(&maps.free, &maps.capfree, maps.nfree,
			    maps.nfree + extra, sizeof(*maps.free));
}

/*
 * Carve @size bytes at a multiple of @align from the best-fitting free
 * range of @kind (the smallest that holds it), or NULL. Locked; the caller
 * made room for one more range.
 */
static char *take_range_locked(enum nvs__arena_kind kind, size_t size,
			       size_t align)
{
	long best = -1;
	uintptr_t a = 0;
	struct range *r;
	size_t head, tail;

	for (size_t i = 0; i < maps.nfree; i++) {
		struct range *c = &maps.free[i];
		uintptr_t ca = nvs__round_up(c->start, align);
		if (c->kind != kind || ca - c->start > c->len ||
		    c->len - (ca - c->start) < size)
			continue;
		if (best < 0 || c->len < maps.free[best].len) {
			best = (long)i;
			a = ca;
		}
	}
	if (best < 0)
		return NULL;
	r = &maps.free[best];
	head = a - r->start;
	tail = r->len - head - size;
	if (head && tail) {
		/* Split in two: the tail becomes a range of its own. */
		memmove(r + 2, r + 1,
			(maps.nfree - (size_t)best - 1) * sizeof(*r));
		r[1] = (struct range){a + size, tail, r->map, kind};
		r->len = head;
		maps.nfree++;
	} else if (head) {
		r->len = head;
	} else if (tail) {
		r->start += size;
		r->len = tail;
	} else {
		memmove(r, r + 1, (maps.nfree - (size_t)best - 1) * sizeof(*r));
		maps.nfree--;
	}
	return (char *)a;
}

/* Return [p, p + size) to the free ranges, coalescing within its
 * mapping. Never allocates: room was made when it was handed out. */
static void put_range_locked(uintptr_t p, size_t size)
{
	long m = find_locked(p);
	struct range nr = {p, size, maps.v[m].start, maps.v[m].kind};
	/* The first range after @p (none starts at @p: it was in use). */
	size_t i =
		(size_t)(nvs__find_le(maps.free, maps.nfree, sizeof(*maps.free),
				      offsetof(struct range, start), p) +
			 1);
	struct range *prev, *next;

	prev = i > 0 ? &maps.free[i - 1] : NULL;
	next = i < maps.nfree ? &maps.free[i] : NULL;
	if (prev && prev->map == nr.map && prev->start + prev->len == p) {
		prev->len += size;
		if (next && next->map == nr.map &&
		    prev->start + prev->len == next->start) {
			prev->len += next->len;
			memmove(next, next + 1,
				(maps.nfree - i - 1) * sizeof(*next));
			maps.nfree--;
		}
		return;
	}
	if (next && next->map == nr.map && p + size == next->start) {
		next->start = p;
		next->len += size;
		return;
	}
	memmove(&maps.free[i + 1], &maps.free[i],
		(maps.nfree - i) * sizeof(nr));
	maps.free[i] = nr;
	maps.nfree++;
}

static int big_alloc(enum nvs__arena_kind kind, size_t n, size_t align,
		     const char *call, void **out)
{
	size_t size = nvs__round_up(n, PAGE);
	char *p;

	pthread_mutex_lock(&maps.lock);
	/* Room for the split a take may need now and for the range this
	 * allocation becomes when freed: frees never allocate. */
	if (!reserve_ranges_locked(maps.live_big + 2)) {
		pthread_mutex_unlock(&maps.lock);
		return nvs__err(-ENOMEM,
				"%s: out of memory for the free-range "
				"table of pinned memory",
				call);
	}
	p = take_range_locked(kind, size, align);
	maps.live_big++; /* now, so concurrent reservations count it */
	pthread_mutex_unlock(&maps.lock);
	if (p) {
		memset(p, 0, n); /* reused memory: zero what is handed out */
	} else {
		p = new_mapping(kind, size, align, kind == NVS__ARENA_LOCKED);
		if (!p) {
			pthread_mutex_lock(&maps.lock);
			maps.live_big--;
			pthread_mutex_unlock(&maps.lock);
			return alloc_error(kind, n, call);
		}
	}
	*out = p;
	return 0;
}

static void big_free(void *p, size_t n)
{
	pthread_mutex_lock(&maps.lock);
	put_range_locked((uintptr_t)p, nvs__round_up(n, PAGE));
	maps.live_big--;
	pthread_mutex_unlock(&maps.lock);
}

int nvs__arena_alloc(enum nvs__arena_kind kind, size_t n, size_t align,
		     const char *call, void **out)
{
	void *p;
	int ret;

	*out = NULL;
	ret = nvs__arena_init();
	if (ret < 0)
		return nvs__err(ret, "%s: %s", call, init_msg);
	memset(&tl_fail, 0, sizeof(tl_fail));
	if (n >= NVS__ARENA_BIG)
		return big_alloc(kind, n, align, call, out);
	p = nvs__je_mallocx(n, MALLOCX_ALIGN(align) | MALLOCX_ZERO |
				       MALLOCX_ARENA(arena_ind[kind]) |
				       MALLOCX_TCACHE_NONE);
	if (!p)
		return alloc_error(kind, n, call);
	*out = p;
	return 0;
}

void nvs__arena_free(void *p, size_t n)
{
	if (n >= NVS__ARENA_BIG)
		big_free(p, n);
	else
		nvs__je_dallocx(p, MALLOCX_TCACHE_NONE);
}

/* Drop mapping @i from the table. Locked. */
static void remove_mapping_locked(size_t i)
{
	memmove(&maps.v[i], &maps.v[i + 1], (maps.n - i - 1) * sizeof(*maps.v));
	maps.n--;
}

uint64_t nvs__arena_trim(void)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&maps.lock);
	for (size_t i = maps.users ? 0 : maps.nfree; i-- > 0;) {
		struct range r = maps.free[i];
		long m = find_locked(r.start);
		if (m < 0 || maps.v[m].start != r.start ||
		    maps.v[m].len != r.len)
			continue; /* part of its mapping is still in use */
		struct mapping mp = maps.v[m];
		if (mp.cuda) {
			nvs__cuda_unregister((void *)mp.start);
			maps.cuda -= mp.len;
		}
		munmap((void *)mp.start, mp.len);
		maps.bytes[mp.kind] -= mp.len;
		remove_mapping_locked((size_t)m);
		memmove(&maps.free[i], &maps.free[i + 1],
			(maps.nfree - i - 1) * sizeof(*maps.free));
		maps.nfree--;
		freed += mp.len;
	}
	pthread_mutex_unlock(&maps.lock);
	return freed;
}

void nvs__arena_users(int delta)
{
	pthread_mutex_lock(&maps.lock);
	maps.users = (unsigned)((int)maps.users + delta);
	pthread_mutex_unlock(&maps.lock);
}

void nvs__arena_set_limit(uint64_t bytes)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&maps.lock);
	maps.limit = bytes;
	pthread_mutex_unlock(&maps.lock);
}

void nvs__arena_totals(struct nvs__arena_totals *t)
{
	pthread_mutex_lock(&maps.lock);
	t->locked = maps.bytes[NVS__ARENA_LOCKED];
	t->pageable = maps.bytes[NVS__ARENA_PAGEABLE];
	t->cuda = maps.cuda;
	t->limit = maps.limit;
	t->mappings = (unsigned)maps.n;
	t->free_ranges = (unsigned)maps.nfree;
	pthread_mutex_unlock(&maps.lock);
	t->allocator_warnings =
		atomic_load_explicit(&warnings, memory_order_relaxed);
}
