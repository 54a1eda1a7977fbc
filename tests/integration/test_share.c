// SPDX-License-Identifier: MIT
/*
 * Sharing the disks (issue 49, item 4): nvs_aio_queue_share()'s split, a
 * handle's queue limit (nvs_aio_set_queue_limit(): no worker has more
 * requests in flight, the bytes are the file's), the readers of one
 * read-only set each keeping to their share (counted from the set's
 * shared lock, again when one comes or goes), and
 * nvs_swapper_share_disk() on a directory others flock.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(share, .fini = fini);

enum { SZ = 64 << 10, FILE_MB = 8 };

Test(share, the_queue_split_never_goes_below_eight)
{
	cr_assert_eq(nvs_aio_queue_share(128, 0), 128);
	cr_assert_eq(nvs_aio_queue_share(128, 1), 128);
	cr_assert_eq(nvs_aio_queue_share(128, 2), 64);
	cr_assert_eq(nvs_aio_queue_share(128, 3), 42);
	cr_assert_eq(nvs_aio_queue_share(128, 64), 8, "never below 8");
	cr_assert_eq(nvs_aio_queue_share(8, 4), 8, "DeepSpeed's 8: whole");
	cr_assert_eq(nvs_aio_queue_share(3, 4), 3, "nor above the depth");
}

/* Reads a FILE_MB MiB file of pattern 7 in 64 KiB requests through a
 * handle of depth 16 limited to @limit (0: none); returns the most
 * requests a worker had in flight. */
static unsigned read_limited(const char *path, uint32_t limit)
{
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;
	size_t n = (size_t)FILE_MB << 20;
	void *buf = NULL, *want = malloc(n);

	nvs_aio_opts_init(&o);
	o.block_size = 64 << 10;
	o.queue_depth = 16;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_get_queue_limit(h), 16);
	if (limit) {
		cr_assert_eq(nvs_aio_set_queue_limit(h, limit), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_aio_get_queue_limit(h), limit);
		cr_assert_eq(nvs_aio_get_queue_depth(h), 16);
	}
	cr_assert_eq(posix_memalign(&buf, 4096, n), 0);
	memset(buf, 0, n);
	cr_assert_geq(nvs_aio_sync_pread(h, buf, n, path, 0), 0, "%s",
		      nvs_last_error());
	tu_fill(want, n, 7);
	cr_assert_eq(memcmp(buf, want, n), 0, "the bytes are the file's");
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	free(buf);
	free(want);
	return st.requests_high_water;
}

Test(share, a_queue_limit_caps_the_requests_in_flight)
{
	const char *path = tu_path("data");
	size_t n = (size_t)FILE_MB << 20;
	void *data = malloc(n);
	struct nvs_aio *h;
	unsigned whole, two;

	tu_fill(data, n, 7);
	tu_write_file(path, data, n);
	free(data);
	whole = read_limited(path, 0);
	two = read_limited(path, 2);
	cr_assert(two >= 1 && two <= 2, "limit 2: %u in flight", two);
	cr_assert_gt(whole, 2, "without the limit: %u in flight", whole);
	cr_assert_leq(whole, 16);

	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_eq(nvs_aio_set_queue_limit(h, 129), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "depth 129 is above the handle's "
					   "queue_depth 128"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_set_queue_limit(h, 8), 0);
	cr_assert_eq(nvs_aio_set_queue_limit(h, 0), 0, "0: the depth again");
	cr_assert_eq(nvs_aio_get_queue_limit(h), 128);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

static void opts(struct nvs_swapper_opts *o, const char *path, int persist)
{
	tu_swapper_opts(o, SZ, 4);
	o->nvme_paths[0] = path;
	o->persist = (uint8_t)persist;
	o->name = "r";
	o->aio.queue_depth = 128;
}

/* Set "r" in @path holding tensor 1 (pattern 11). */
static void make_set(const char *path)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	static char buf[SZ];

	mkdir(path, 0700);
	opts(&o, path, NVS_PERSIST_PERSISTENT);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	tu_fill(buf, SZ, 11);
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, buf), 0, "%s",
		     nvs_last_error());
	tu_swapper_commit_close(s, "made");
}

static struct nvs_swapper *open_ro(const char *path)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	opts(&o, path, NVS_PERSIST_READONLY);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* A child that opens the set read-only (or flocks @lock shared when
 * @lock is set), says so on a pipe and holds it until killed. */
static pid_t holder(const char *path, const char *lock)
{
	int p[2];
	char c;
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct nvs_swapper_opts o;
		struct nvs_swapper *s;
		int fd;

		if (lock) {
			fd = open(lock, O_RDONLY | O_DIRECTORY);
			if (fd < 0 || flock(fd, LOCK_SH) < 0)
				_exit(2);
		} else {
			opts(&o, path, NVS_PERSIST_READONLY);
			if (nvs_swapper_create(&o, &s) < 0)
				_exit(3);
		}
		if (write(p[1], "r", 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &c, 1), 1, "the holder failed");
	close(p[0]);
	return pid;
}

static void stop(pid_t pid)
{
	int status;

	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
}

/* After the recount's second: a read, then the stats. */
static struct nvs_swap_stats after_a_read(struct nvs_swapper *s)
{
	static char buf[SZ], want[SZ];
	struct nvs_swap_stats st;
	struct timespec ts = {1, 100 * 1000 * 1000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	cr_assert_eq(nvs_swapper_read(s, 1, buf, SZ), 0, "%s",
		     nvs_last_error());
	tu_fill(want, SZ, 11);
	cr_assert_eq(memcmp(buf, want, SZ), 0);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	return st;
}

static void shares(struct nvs_swapper *s, unsigned procs, unsigned depth)
{
	struct nvs_swap_stats st;

	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert_eq(st.disk_sharers, procs, "%u sharers", st.disk_sharers);
	cr_assert_eq(st.queue_depth, depth, "depth %u", st.queue_depth);
}

Test(share, the_readers_of_a_set_share_its_disk_as_they_come_and_go)
{
	const char *path = tu_path("set");
	struct nvs_swapper *s;
	struct nvs_swap_stats st;
	pid_t a, b;

	make_set(path);
	a = holder(path, NULL);
	s = open_ro(path); /* counted at the open */
	shares(s, 2, 64);
	stop(a);
	st = after_a_read(s); /* counted again a second later */
	cr_assert_eq(st.disk_sharers, 1);
	cr_assert_eq(st.queue_depth, 128);
	a = holder(path, NULL);
	b = holder(path, NULL);
	st = after_a_read(s);
	cr_assert_eq(st.disk_sharers, 3);
	cr_assert_eq(st.queue_depth, 42);
	stop(a);
	stop(b);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(share, a_writer_and_a_scratch_swapper_share_nothing_by_themselves)
{
	const char *path = tu_path("set");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	make_set(path);
	opts(&o, path, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	shares(s, 0, 128);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	opts(&o, tu_path("scratch"), NVS_PERSIST_SCRATCH);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	shares(s, 0, 128);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(share, share_disk_counts_the_holders_of_a_directory_s_flock)
{
	const char *weights = tu_path("weights");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	static char buf[SZ];
	pid_t a;
	int fd, fd2;

	mkdir(weights, 0700);
	opts(&o, tu_path("scratch"), NVS_PERSIST_SCRATCH);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	tu_fill(buf, SZ, 11);
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, buf), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_share_disk(s, weights), 1, "%s",
		     "nobody holds it: 1, not 0");
	shares(s, 1, 128);
	fd = open(weights, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(flock(fd, LOCK_SH), 0); /* as nvswap.torch does */
	fd2 = open(weights, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(flock(fd2, LOCK_SH), 0); /* twice: one process still */
	cr_assert_eq(nvs_swapper_share_disk(s, weights), 1, "%s",
		     nvs_last_error());
	a = holder(NULL, weights);
	cr_assert_eq(nvs_swapper_share_disk(s, weights), 2, "%s",
		     nvs_last_error());
	shares(s, 2, 64);
	stop(a);
	cr_assert_eq(after_a_read(s).queue_depth, 128);
	close(fd);
	close(fd2);
	cr_assert_eq(nvs_swapper_share_disk(s, tu_path("none")), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_share_disk: ") &&
			  strstr(nvs_last_error(), "/none: "),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}
