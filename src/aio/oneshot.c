// SPDX-License-Identifier: MIT
/*
 * One-shot nvs_aio_read/nvs_aio_write (DeepNVMe aio_read/aio_write): a
 * temporary handle, one op, optional validation by a plain buffered
 * re-read, and timings. Nothing is printed.
 */
#include "aio/oneshot.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/util.h"
#include "nvswap/aio.h"
#include "nvswap/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define VALIDATE_CHUNK (1u << 20)

/* Compare the first @n bytes of @path, read buffered, with @buf. */
int nvs__validate_file(const char *call, const char *path, const void *buf,
		       size_t n)
{
	char *tmp, *mine = NULL;
	const char *have;
	struct stat st;
	size_t pos = 0;
	int fd, ret = 0;
	bool dev = nvs_gpu_pointer(buf, NULL) == 1;

	/* The op checked the path's type, but it may have been replaced
	 * by a FIFO since: its open must not block. */
	fd = nvs__open_file(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0, &st);
	if (fd < 0)
		return nvs__err(-errno, "%s %s: validate: open: %s", call, path,
				nvs_strerror(errno));
	if (!nvs__file_io_ok(st.st_mode)) {
		close(fd);
		return nvs__err(-EINVAL,
				"%s %s: validate: is %s, not a regular file "
				"or a block device",
				call, path, nvs__file_type(st.st_mode));
	}
	tmp = nvs__malloc(VALIDATE_CHUNK);
	if (dev) /* device memory: compared through a host copy */
		mine = nvs__malloc(VALIDATE_CHUNK);
	if (!tmp || (dev && !mine)) {
		nvs__free(tmp);
		nvs__free(mine);
		close(fd);
		return nvs__err(-ENOMEM, "%s %s: validate: out of memory", call,
				path);
	}
	while (pos < n) {
		size_t len = NVS_MIN((size_t)VALIDATE_CHUNK, n - pos);
		ssize_t r = nvs__pio_full(fd, tmp, len, (off_t)pos, false);
		if (r < 0) {
			ret = nvs__err((int)r,
				       "%s %s: validate: read at %zu: %s", call,
				       path, pos, nvs_strerror((int)r));
			break;
		}
		if ((size_t)r < len) {
			ret = nvs__err(-EBADMSG,
				       "%s %s: validate: file ends at %zu, "
				       "expected at least %zu bytes",
				       call, path, pos + (size_t)r, n);
			break;
		}
		have = (const char *)buf + pos;
		if (dev) {
			ret = nvs_gpu_memcpy(mine, have, len);
			if (ret < 0)
				break;
			have = mine;
		}
		if (memcmp(tmp, have, len)) {
			size_t i = 0;
			while (tmp[i] == have[i])
				i++;
			ret = nvs__err(-EBADMSG,
				       "%s %s: validate: first difference at "
				       "byte %zu",
				       call, path, pos + i);
			break;
		}
		pos += len;
	}
	nvs__free(tmp);
	nvs__free(mine);
	close(fd);
	return ret;
}

/* The handle's sentence, led by the one-shot call the caller made. */
static int name_call(int err, const char *call)
{
	char cause[NVS_ERRMSG_MAX];

	snprintf(cause, sizeof(cause), "%s", nvs_last_error());
	return nvs__err(err, "%s: %s", call, cause);
}

static int oneshot(bool write, void *buf, size_t nbytes, const char *path,
		   const struct nvs_aio_opts *opts, bool check,
		   struct nvs_io_stats *stats)
{
	const char *call = write ? "nvs_aio_write" : "nvs_aio_read";
	uint64_t t0 = nvs__now_ns(), t1, t2;
	struct nvs_aio *h;
	int ret, dret;

	/* A one-shot has no descriptor form: say so before making a handle. */
	if (!path)
		return nvs__err(-EINVAL, "%s: path is NULL", call);
	ret = nvs_aio_create(opts, &h);
	if (ret < 0)
		return name_call(ret, call);
	t1 = nvs__now_ns();
	ret = write ? nvs_aio_sync_pwrite(h, buf, nbytes, path, 0)
		    : nvs_aio_sync_pread(h, buf, nbytes, path, 0);
	t2 = nvs__now_ns();
	dret = nvs_aio_destroy(h);
	if (ret >= 0)
		ret = dret;
	if (ret < 0)
		return name_call(ret, call);
	if (check)
		ret = nvs__validate_file(call, path, buf, nbytes);
	if (stats && ret >= 0) {
		memset(stats, 0, sizeof(*stats));
		stats->bytes = nbytes;
		stats->io_ns = t2 - t1;
		stats->total_ns = nvs__now_ns() - t0;
	}
	return ret < 0 ? ret : 0;
}

int nvs_aio_read(void *buf, size_t nbytes, const char *path,
		 const struct nvs_aio_opts *opts, bool validate_,
		 struct nvs_io_stats *stats)
{
	return oneshot(false, buf, nbytes, path, opts, validate_, stats);
}

int nvs_aio_write(const void *buf, size_t nbytes, const char *path,
		  const struct nvs_aio_opts *opts, bool validate_,
		  struct nvs_io_stats *stats)
{
	return oneshot(true, (void *)(uintptr_t)buf, nbytes, path, opts,
		       validate_, stats);
}
