// SPDX-License-Identifier: MIT
/*
 * The checkpoint writer's copy thread, without Criterion so it runs under
 * ThreadSanitizer: deferred copies of large buffers reused as soon as
 * nvs_ckpt_async_done() passes their ticket, small writes joining the
 * queue through the side buffer, large plain writes draining it, another
 * thread polling nvs_ckpt_async_done(), then the file read back byte for
 * byte; and an abort with copies queued (no file, no temp left). Prints
 * "N passed, N failed".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/ckpt.h"
#include "check.h"

enum { NBUF = 3, BIG = 3 << 20, PIECES = 60 };

static char dir[4096];

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

struct poll {
	struct nvs_ckpt_writer *w;
	atomic_bool stop;
	int bad;
};

/* Another thread reads the done count while the writer runs: it never
 * goes back. */
static void *poller(void *p)
{
	struct poll *a = p;
	uint64_t last = 0;

	while (!atomic_load(&a->stop)) {
		uint64_t d = nvs_ckpt_async_done(a->w);
		if (d < last)
			a->bad++;
		last = d;
		sched_yield();
	}
	return NULL;
}

/* Write a random mix into @path, the same bytes into @want (returned
 * length); @abort_at: abort after that many pieces (0: close). */
static size_t write_mix(const char *path, unsigned char *want,
			unsigned abort_at, int *rc)
{
	static unsigned char buf[NBUF][BIG], small[300 << 10];
	uint64_t ticket[NBUF] = {0}, x = 0x1234567;
	struct nvs_ckpt_opts o;
	struct nvs_ckpt_writer *w = NULL;
	struct poll pa = {0};
	pthread_t th;
	size_t off = 0;

	nvs_ckpt_opts_init(&o);
	o.buffer_size = 1 << 20;
	CHECK(nvs_ckpt_writer_open(path, &o, &w) == 0, "open %s", path);
	if (!w)
		return 0;
	pa.w = w;
	pthread_create(&th, NULL, poller, &pa);
	for (unsigned i = 0; i < PIECES; i++) {
		unsigned kind = (unsigned)(next(&x) % 4);
		size_t n;
		if (abort_at && i == abort_at)
			break;
		if (kind < 2) { /* deferred, from a buffer reused once done */
			unsigned b = i % NBUF;
			while (nvs_ckpt_async_done(w) < ticket[b])
				sched_yield();
			n = (1 << 20) + next(&x) % (BIG - (1 << 20));
			memset(buf[b], (int)(i * 7 + 1), n);
			buf[b][n - 1] = (unsigned char)i;
			memcpy(want + off, buf[b], n);
			*rc = nvs_ckpt_write_async(w, buf[b], n, &ticket[b]);
		} else { /* plain: small (joins the queue) or large (drains) */
			n = kind == 2 ? 1 + next(&x) % 4000
				      : (256 << 10) + 1 + next(&x) % 40000;
			for (size_t k = 0; k < n; k++)
				small[k] = (unsigned char)(k * 13 + i);
			memcpy(want + off, small, n);
			*rc = nvs_ckpt_write(w, small, n);
		}
		CHECK(*rc == 0, "piece %u", i);
		off += n;
	}
	/* The count may be read while the writer is open: stop first. */
	atomic_store(&pa.stop, true);
	pthread_join(th, NULL);
	*rc = abort_at ? nvs_ckpt_abort(w) : nvs_ckpt_close(w);
	CHECK(pa.bad == 0, "async_done went back %d times", pa.bad);
	return off;
}

static void mixed_writes_read_back_exactly(void)
{
	char path[4200];
	unsigned char *want = malloc((size_t)PIECES * BIG);
	unsigned char *got = malloc((size_t)PIECES * BIG);
	size_t n, m = 0;
	ssize_t r;
	int rc = 0, fd;

	snprintf(path, sizeof(path), "%s/mix.bin", dir);
	n = write_mix(path, want, 0, &rc);
	CHECK(rc == 0, "close: %d", rc);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0, "the file is there");
	while (fd >= 0 && (r = read(fd, got + m, (size_t)PIECES * BIG - m)) > 0)
		m += (size_t)r;
	if (fd >= 0)
		close(fd);
	CHECK(m == n, "%zu bytes, wrote %zu", m, n);
	CHECK(m == n && memcmp(got, want, n) == 0, "the bytes");
	unlink(path);
	free(want);
	free(got);
}

static void an_abort_with_copies_queued_leaves_nothing(void)
{
	char path[4200];
	unsigned char *want = malloc((size_t)PIECES * BIG);
	int rc = 0;

	snprintf(path, sizeof(path), "%s/aborted.bin", dir);
	write_mix(path, want, 25, &rc);
	CHECK(rc == 0, "abort: %d", rc);
	CHECK(access(path, F_OK) < 0 && errno == ENOENT, "no file");
	CHECK(rmdir(dir) == 0, "no temp file left in %s", dir);
	free(want);
}

int main(void)
{
	const char *base = getenv("NVSWAP_TEST_DIR");

	snprintf(dir, sizeof(dir), "%s/nvs-ckpt-XXXXXX", base ? base : ".");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	mixed_writes_read_back_exactly();
	an_abort_with_copies_queued_leaves_nothing();
	return check_report();
}
