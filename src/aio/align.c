// SPDX-License-Identifier: MIT
/*
 * Per-file O_DIRECT alignment. statx(STATX_DIOALIGN) is the truth where the
 * kernel and filesystem report it (Linux 6.1+); otherwise the logical block
 * size of the device under the file, read from sysfs; otherwise 4096.
 */
#include "aio/align.h"
#include "config.h"
#include "internal/errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static unsigned read_sysfs_uint(const char *path)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return (unsigned)strtoul(buf, NULL, 10);
}

/* A queue attribute of the device holding a file (partitions included). */
static unsigned queue_attr(dev_t dev, const char *name)
{
	char path[128];
	unsigned v;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/queue/%s",
		 major(dev), minor(dev), name);
	v = read_sysfs_uint(path);
	if (v)
		return v;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/../queue/%s",
		 major(dev), minor(dev), name);
	return read_sysfs_uint(path);
}

static unsigned device_lbs(dev_t dev)
{
	return queue_attr(dev, "logical_block_size");
}

unsigned nvs__dio_max_segments(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return 0;
	return queue_attr(S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev,
			  "max_segments");
}

static bool pow2(unsigned v)
{
	return v && !(v & (v - 1));
}

int nvs_dio_alignment(int fd, struct nvs_dio_align *out)
{
	struct stat st;
	unsigned lbs;

	if (!out)
		return nvs__err(-EINVAL, "nvs_dio_alignment: out is NULL");
#if HAVE_STATX_DIOALIGN
	struct statx stx;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align &&
	    pow2(stx.stx_dio_mem_align) && pow2(stx.stx_dio_offset_align)) {
		out->mem_align = stx.stx_dio_mem_align;
		out->offset_align = stx.stx_dio_offset_align;
		out->from_statx = true;
		return 0;
	}
#endif
	if (fstat(fd, &st) < 0)
		return nvs__err(-errno, "nvs_dio_alignment: fstat(%d): %s", fd,
				nvs_strerror(errno));
	lbs = device_lbs(S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev);
	if (!pow2(lbs) || lbs > 65536)
		lbs = NVS_DEFAULT_DIO_ALIGN;
	out->mem_align = lbs;
	out->offset_align = lbs;
	out->from_statx = false;
	return 0;
}
