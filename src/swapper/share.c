// SPDX-License-Identifier: MIT
/*
 * Sharing the disks (see share.h and nvs_swapper_share_disk()). Several
 * processes reading one model at the full queue depth each share a disk
 * unevenly; the holders of one flock (a read-only set's lock, the
 * directory of weights served in place) say how many there are, and each
 * keeps to nvs_aio_queue_share() of its depth. A process that comes or
 * goes changes the others' shares at their next read a second later:
 * /proc/locks is read at most once a second per swapper (a few tens of
 * microseconds for a few hundred locks).
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

/* Holders of the flocks on (dev, ino): those on the device when any is
 * (a device /proc/locks numbers differently matches by inode alone);
 * 1 when /proc/locks cannot be read or lists none. */
static unsigned holders(dev_t dev, ino_t ino)
{
	struct nvs__flock f[MAX_COUNTED];
	int n = nvs__flocks_on(dev, ino, f, MAX_COUNTED);
	unsigned exact = 0;

	if (n <= 0)
		return 1;
	for (unsigned i = 0; i < NVS_MIN((unsigned)n, MAX_COUNTED); i++)
		exact += f[i].same_dev;
	if (exact == 0 || (exact == MAX_COUNTED && (unsigned)n > exact))
		return (unsigned)n;
	return exact;
}

void nvs__share_apply(struct nvs_swapper *s)
{
	struct nvs_aio *h[2] = {s->aio, s->faio};

	if (!s->share.on)
		return;
	for (unsigned i = 0; i < 2; i++)
		if (h[i])
			(void)nvs_aio_set_queue_limit(
				h[i], nvs_aio_queue_share(
					      nvs_aio_get_queue_depth(h[i]),
					      s->share.procs));
}

static void count(struct nvs_swapper *s, uint64_t now)
{
	unsigned n = holders(s->share.dev, s->share.ino);

	s->share.next_ns = now + RECOUNT_NS;
	if (n != s->share.procs) {
		s->share.procs = n;
		nvs__share_apply(s);
	}
}

void nvs__share_start(struct nvs_swapper *s, dev_t dev, ino_t ino)
{
	s->share.on = true;
	s->share.dev = dev;
	s->share.ino = ino;
	s->share.procs = 1;
	count(s, nvs__now_ns());
	nvs__share_apply(s);
}

void nvs__share_tick(struct nvs_swapper *s)
{
	uint64_t now;

	if (!s->share.on)
		return;
	now = nvs__now_ns();
	if (now >= s->share.next_ns)
		count(s, now);
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
	pthread_mutex_lock(&s->lock);
	nvs__share_start(s, st.st_dev, st.st_ino);
	ret = (int)s->share.procs;
	pthread_mutex_unlock(&s->lock);
	return ret;
}
