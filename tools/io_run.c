// SPDX-License-Identifier: MIT
/*
 * One nvswap-io run: the test files (created exclusively, removed on every
 * exit), the file a read run reads, the timed loops with their progress
 * line, validation, and what a fatal exit must release (on_fatal).
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char files[64][4096];
static unsigned nfiles;
static unsigned next_name; /* names tried so far */

/*
 * Create the test file exclusively, never through a symlink: the name is
 * predictable, and in a directory others can write a link planted there
 * would have the test pattern written over its target. A taken name
 * (anything at all there) is skipped, never opened. In a sticky directory
 * such as /tmp nobody else can then replace the file we made.
 */
static void create_file(const struct args *a, char *path, size_t n)
{
	for (unsigned tries = 0; tries < 1000; tries++) {
		snprintf(path, n, "%s/nvswap-io.%ld.%u.dat", a->folder,
			 (long)getpid(), next_name++);
		int fd = open(path,
			      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
				      O_CLOEXEC,
			      0600);
		if (fd >= 0) {
			close(fd);
			return;
		}
		if (errno != EEXIST)
			tool_die(1, "creating %s: %s", path, strerror(errno));
	}
	tool_die(1, "%s/nvswap-io.%ld.*.dat: 1000 names taken already",
		 a->folder, (long)getpid());
}

const char *io_file_for(const struct args *a, unsigned loop)
{
	unsigned i = a->diff_file ? loop : 0;

	while (nfiles <= i) {
		if (nfiles == 64)
			tool_die(2,
				 "--different-file-each-iteration: at most 64 "
				 "files (lower --loops)");
		create_file(a, files[nfiles], sizeof(files[0]));
		nfiles++;
	}
	return files[i];
}

void io_remove_files(void)
{
	for (unsigned i = 0; i < nfiles; i++)
		unlink(files[i]);
	nfiles = 0;
}

static bool progress_on;

/* Before a fatal message: finish the progress line. */
static void end_progress_line(void)
{
	if (progress_on)
		fputc('\n', stderr);
	progress_on = false;
}

/* What io_one_run() holds while it runs, for io_on_fatal(): a fatal exit
 * destroys the handle (its I/O drained) and frees the memory. */
static struct {
	struct nvs_aio *h;
	unsigned char *mem;
	bool pinned;
	double *lat;
} live;

/* Every fatal exit (a full disk, a refused --iopoll...) removes the test
 * files, as a successful run does. */
void io_on_fatal(void)
{
	end_progress_line();
	nvs_aio_destroy(live.h);
	if (live.pinned)
		nvs_pinned_free(live.mem);
	else
		free(live.mem);
	free(live.lat);
	memset(&live, 0, sizeof(live));
	io_fio_cleanup();
	if (!io_keep_files)
		io_remove_files();
}

/* The process's CPU time, every thread (the handle's workers, io_uring's
 * io-wq workers), in nanoseconds: the clock --compare-fio reads for fio. */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --start-at: sleep until the wall clock reaches @t. */
static void wait_until(double t)
{
	struct timespec ts = {.tv_sec = (time_t)t,
			      .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};

	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

static void progress(const struct args *a, double t0, unsigned done,
		     unsigned total, const char *what)
{
	double el = tool_now() - t0;

	if (a->json || !isatty(STDERR_FILENO) || el < 2.0)
		return;
	progress_on = true;
	fprintf(stderr, "\r%s: op %u/%u, %.1f s elapsed  ", what, done, total,
		el);
	fflush(stderr);
}

static void progress_end(void)
{
	if (progress_on)
		fputs("\r\033[K", stderr);
	progress_on = false;
}

/* The file every read loop will read: written through a handle of its
 * own and synced, so the timed reads find it on the disk. */
static void prepare(const struct args *a, const char *path, unsigned char *buf)
{
	struct nvs_aio *h;
	int fd, ret;

	tool_pattern(buf, a->io_size, 1);
	ret = nvs_aio_create(NULL, &h);
	if (ret < 0)
		tool_die(1, "%s", tool_last_error());
	ret = nvs_aio_sync_pwrite(h, buf, a->io_size, path, 0);
	if (ret < 0)
		tool_die(1, "preparing %s: %s", path, tool_last_error());
	nvs_aio_destroy(h);
	/* O_NONBLOCK: whatever may have replaced the file since (a FIFO)
	 * must fail, not block; fsync of a file ignores it. */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		tool_die(1, "syncing %s: %s", path, strerror(errno));
	close(fd);
}

static bool check_file(const char *path, size_t n, const unsigned char *want)
{
	unsigned char *got = malloc(1 << 20);
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	bool ok = fd >= 0 && got;
	struct stat st;

	if (ok && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		   (size_t)st.st_size != n))
		ok = false;
	for (size_t off = 0; ok && off < n; off += 1 << 20) {
		size_t len = n - off < (1u << 20) ? n - off : 1u << 20;
		if (pread(fd, got, len, (off_t)off) != (ssize_t)len ||
		    memcmp(got, want + off, len))
			ok = false;
	}
	if (fd >= 0)
		close(fd);
	free(got);
	return ok;
}

void io_one_run(const struct args *a, struct run *r)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned char *mem = NULL, *buf;
	double t0 = tool_now(), setup_s, cpu0;
	const char *what = a->read ? "read" : "write";
	int ret;

	memset(r, 0, sizeof(*r));
	r->lat = live.lat = calloc(a->loops, sizeof(*r->lat));
	if (!r->lat)
		tool_die(1, "out of memory for %u latencies", a->loops);
	nvs_aio_opts_init(&o);
	o.block_size = (uint32_t)a->block_size;
	o.queue_depth = a->queue_depth;
	o.single_submit = a->single_submit;
	o.overlap_events = !a->sequential;
	o.intra_op_parallelism = a->parallel;
	o.backend = a->backend;
	o.uring_flags = a->uring_flags;
	o.bounce_bytes = (uint32_t)a->bounce;
	o.staging = (enum nvs_staging)a->staging;
	if (a->block_size > UINT32_MAX)
		tool_die(2, "--block-size %zu is too large", a->block_size);
	ret = nvs_aio_create(&o, &h);
	if (ret < 0)
		tool_die(ret == -EINVAL ? 2 : 1, "%s", tool_last_error());
	live.h = h;
	live.pinned = a->pinned;
	if (a->pinned) {
		mem = nvs_aio_new_cpu_locked_buffer(h,
						    a->io_size + a->misalign);
		if (!mem)
			tool_die(1, "%s (or run with --unpinned)",
				 tool_last_error());
	} else {
		if (posix_memalign((void **)&mem, 4096,
				   a->io_size + a->misalign))
			tool_die(1, "out of memory for a %zu-byte buffer",
				 a->io_size);
	}
	live.mem = mem;
	buf = mem + a->misalign;
	/* E2E counts this set-up once: the handle and the buffer. The read
	 * file's preparation is in neither figure. */
	setup_s = tool_now() - t0;
	if (a->read) {
		for (unsigned i = 0; i < (a->diff_file ? a->loops : 1); i++)
			if (!a->prepared)
				prepare(a, io_file_for(a, i), buf);
		memset(buf, 0, a->io_size);
	} else {
		tool_pattern(buf, a->io_size, 1);
	}
	for (unsigned i = 0; i < a->warmup; i++) {
		ret = a->read || a->warmup_read
			      ? nvs_aio_sync_pread(h, buf, a->io_size,
						   io_file_for(a, 0), 0)
			      : nvs_aio_sync_pwrite(h, buf, a->io_size,
						    io_file_for(a, 0), 0);
		if (ret < 0)
			tool_die(1, "warm-up %s: %s", what, tool_last_error());
	}
	if (a->start_at > 0)
		wait_until(a->start_at);
	r->win_start = wall_now();
	cpu0 = cpu_now();
	t0 = tool_now();
	for (unsigned i = 0; i < a->loops; i++) {
		double s = tool_now();
		const char *path = io_file_for(a, i);

		ret = a->read ? nvs_aio_sync_pread(h, buf, a->io_size, path, 0)
			      : nvs_aio_sync_pwrite(h, buf, a->io_size, path,
						    0);
		if (ret < 0)
			tool_die(1, "%s: %s", what, tool_last_error());
		r->lat[i] = tool_now() - s;
		r->task_s += r->lat[i];
		progress(a, t0, i + 1, a->loops, what);
	}
	r->cpu_s = cpu_now() - cpu0;
	r->win_end = wall_now();
	progress_end();
	r->bytes = (uint64_t)a->io_size * a->loops;
	r->e2e_s = setup_s + r->task_s;
	nvs_aio_get_stats(h, &r->st);
	if (a->validate) {
		r->validated = 1;
		if (a->read) {
			unsigned char *want = malloc(a->io_size);
			if (!want)
				tool_die(1, "out of memory for validation");
			tool_pattern(want, a->io_size, 1);
			if (memcmp(want, buf, a->io_size))
				r->validated = -1;
			free(want);
		} else {
			for (unsigned i = 0; i < (a->diff_file ? a->loops : 1);
			     i++)
				if (!check_file(io_file_for(a, i), a->io_size,
						buf))
					r->validated = -1;
		}
	}
	live.h = NULL;
	ret = nvs_aio_destroy(h);
	if (ret < 0)
		tool_die(1, "%s", tool_last_error());
	live.mem = NULL;
	if (a->pinned)
		nvs_pinned_free(mem);
	else
		free(mem);
	live.lat = NULL; /* the caller's now */
}
