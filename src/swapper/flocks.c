// SPDX-License-Identifier: MIT
/*
 * Reading /proc/locks for the holders of one lock file (see flocks.h).
 * Only FLOCK entries count: the swapper's locks are flocks, and an fcntl
 * lock someone else took on the file means nothing to it.
 */
#include "swapper/flocks.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>

int nvs__flocks_on(dev_t dev, ino_t ino, struct nvs__flock *out, unsigned cap)
{
	char line[256];
	unsigned n = 0, exact = 0;
	FILE *f = fopen("/proc/locks", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char kind[16], mode[16];
		unsigned maj, min;
		unsigned long i;
		long pid;

		/* "1: FLOCK  ADVISORY  WRITE 123 08:01:4567 0 EOF"; a waiter
		 * reads "1: -> FLOCK ..." and fails the match. */
		if (sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%lu", kind, mode,
			   &pid, &maj, &min, &i) != 6 ||
		    strcmp(kind, "FLOCK") || i != (unsigned long)ino)
			continue;
		struct nvs__flock e = {
			.pid = pid,
			.write = !strcmp(mode, "WRITE"),
			.same_dev = maj == major(dev) && min == minor(dev),
		};
		if (e.same_dev && exact < cap) {
			/* Those on the device first: move an inode-only one
			 * out of the way. */
			if (n < cap && n > exact)
				out[n] = out[exact];
			out[exact++] = e;
		} else if (n < cap) {
			out[n] = e;
		}
		n++;
	}
	fclose(f);
	return (int)n;
}

void nvs__flocks_name(const struct nvs__flock *f, unsigned n, unsigned total,
		      char *buf, size_t len)
{
	size_t used;

	used = (size_t)snprintf(buf, len, "process%s", total > 1 ? "es" : "");
	for (unsigned i = 0; i < n && used < len; i++) {
		const char *sep = i == 0	   ? " "
				  : i + 1 == total ? " and "
						   : ", ";
		/* pid 0: a holder /proc/locks could not translate (older
		 * kernels listed another PID namespace's so; newer ones
		 * leave those out) */
		if (f[i].pid > 0)
			used += (size_t)snprintf(buf + used, len - used,
						 "%s%ld", sep, f[i].pid);
		else
			used += (size_t)snprintf(buf + used, len - used,
						 "%sof another PID namespace",
						 sep);
	}
	if (total > n && used < len)
		snprintf(buf + used, len - used, " and %u more", total - n);
}
