// SPDX-License-Identifier: MIT
/*
 * Sharing the disks (see share.h and nvs_swapper_share_disk()). Several
 * processes reading one model at the full queue depth each share a disk
 * unevenly; the holders of one flock (a read-only set's lock, the
 * directory of weights served in place) say how many there are, and each
 * keeps to nvs_aio_queue_share() of its depth. A process that comes or
 * goes changes the others' shares at their next read a second later:
 * /proc/locks is read at most once a second per swapper, by the thread
 * that claims the count, with the swapper's lock dropped (its length is
 * the whole system's lock table).
 */
#include "swapper/share.h"

#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"
#include "nvswap/swapper.h"
#include "swapper/flocks.h"
#include "swapper/swapper_impl.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#define RECOUNT_NS 1000000000ull
#define MAX_COUNTED 256u

/* The processes holding a flock on (dev, ino), 1 at least (call it
 * without the swapper's lock). */
static unsigned count(dev_t dev, ino_t ino)
{
	struct nvs__flock f[MAX_COUNTED];
	int n = nvs__flocks_on(dev, ino, f, MAX_COUNTED);
	unsigned seen = NVS_MIN((unsigned)NVS_MAX(n, 0), MAX_COUNTED);
	unsigned procs = 0;
	bool exact = seen && f[0].same_dev;

	/* Entries on the device come first; without any, a device that
	 * /proc/locks numbers differently (overlayfs, btrfs) matches by
	 * inode alone. A process holding it twice (two open file
	 * descriptions) counts once; every pid 0 (untranslatable) counts. */
	for (unsigned i = 0; i < seen; i++) {
		bool again = false;
		if (exact && !f[i].same_dev)
			break;
		for (unsigned j = 0; j < i && f[i].pid > 0; j++)
			again |= f[j].pid == f[i].pid;
		procs += !again;
	}
	if (n > (int)MAX_COUNTED)
		procs += (unsigned)n - MAX_COUNTED; /* not seen: each one */
	return procs ? procs : 1;
}

void nvs__share_apply(struct nvs_swapper *s)
{
	struct nvs_aio *h[2] = {s->aio, s->faio};

	if (!atomic_load(&s->share.on))
		return;
	for (unsigned i = 0; i < 2; i++)
		if (h[i])
			(void)nvs_aio_set_queue_limit(
				h[i], nvs_aio_queue_share(
					      nvs_aio_get_queue_depth(h[i]),
					      s->share.procs));
}

unsigned nvs__share_file(struct nvs_swapper *s, dev_t dev, ino_t ino)
{
	unsigned procs = count(dev, ino);

	pthread_mutex_lock(&s->lock);
	s->share.dev = dev;
	s->share.ino = ino;
	s->share.procs = procs;
	atomic_store(&s->share.due_ns, nvs__now_ns() + RECOUNT_NS);
	atomic_store(&s->share.on, true);
	nvs__share_apply(s);
	pthread_mutex_unlock(&s->lock);
	return procs;
}

void nvs__share_tick(struct nvs_swapper *s)
{
	uint64_t now, due;
	unsigned n;
	dev_t dev;
	ino_t ino;

	if (!atomic_load_explicit(&s->share.on, memory_order_acquire))
		return;
	now = nvs__now_ns();
	due = atomic_load_explicit(&s->share.due_ns, memory_order_relaxed);
	if (now < due || !atomic_compare_exchange_strong(&s->share.due_ns, &due,
							 now + RECOUNT_NS))
		return; /* not due, or another thread counts */
	pthread_mutex_lock(&s->lock);
	dev = s->share.dev;
	ino = s->share.ino;
	pthread_mutex_unlock(&s->lock);
	n = count(dev, ino);
	pthread_mutex_lock(&s->lock);
	if (s->share.dev == dev && s->share.ino == ino && n != s->share.procs) {
		s->share.procs = n;
		nvs__share_apply(s);
	}
	pthread_mutex_unlock(&s->lock);
}

int nvs_swapper_share_disk(struct nvs_swapper *s, const char *path)
{
	struct stat st;
	int ret;

	if (!s || !path)
		return nvs__err(-EINVAL, "nvs_swapper_share_disk: %s is NULL",
				s ? "path" : "s");
	NVS__PARENT_ONLY(s, "nvs_swapper_share_disk", "swapper");
	if (stat(path, &st) < 0) {
		ret = -errno;
		return nvs__err(ret, "nvs_swapper_share_disk: %s: %s", path,
				nvs_strerror(-ret));
	}
	return (int)nvs__share_file(s, st.st_dev, st.st_ino);
}
