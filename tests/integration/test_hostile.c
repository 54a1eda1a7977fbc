// SPDX-License-Identifier: MIT
/*
 * Hostile and careless input (issue 24): files planted where nvswap
 * creates its own, directories another user controls, a FIFO for a
 * config, a forked child using its parent's objects, a low descriptor
 * limit, a deleted file's blocks, and the directories left behind. Each
 * test is named after the finding it guards; where the old code hung,
 * alarm() turns a hang into a failure.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "testutil.h"

#define BUF (64u << 10)

static void fini(void)
{
	tu_cleanup();
}

TestSuite(hostile, .fini = fini);

static void opts_at(struct nvs_swapper_opts *o, const char *dir)
{
	nvs_swapper_opts_init(o);
	o->nvme_paths[0] = dir;
	o->npaths = 1;
	o->buffer_size = BUF;
	o->buffer_count = 4;
}

static struct nvs_swapper *mk_at(const char *dir)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	opts_at(&o, dir);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

static const char *sub(const char *rel)
{
	return tu_path(rel);
}

/* ------------------------------------------- 2: foreign swap directory */

Test(hostile, finding2_a_swap_directory_owned_by_another_user_is_refused)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (void *)1;
	char want[64];

	if (geteuid() != 0)
		cr_skip_test("needs root to chown a directory to nobody");
	cr_assert_eq(mkdir(sub("nvswap"), 0700), 0);
	cr_assert_eq(chown(sub("nvswap"), 65534, 65534), 0);
	opts_at(&o, tu_dir());
	cr_assert_eq(nvs_swapper_create(&o, &s), -EPERM);
	cr_assert_null(s);
	snprintf(want, sizeof(want), "owned by uid 65534 (mode 0700)");
	cr_assert(strstr(nvs_last_error(), want), "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), sub("nvswap")), "%s",
		  nvs_last_error());
	/* A rank directory of another user's, under our own nvswap/. */
	cr_assert_eq(chown(sub("nvswap"), 0, 0), 0);
	cr_assert_eq(mkdir(sub("nvswap/rank0"), 0700), 0);
	cr_assert_eq(chown(sub("nvswap/rank0"), 65534, 65534), 0);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EPERM);
	cr_assert(strstr(nvs_last_error(), "rank0 is owned by uid 65534"), "%s",
		  nvs_last_error());
	cr_assert_eq(access(sub("nvswap/rank0/lock"), F_OK), -1,
		     "nothing created in it");
}

Test(hostile, finding2_a_world_writable_swap_directory_is_refused)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	cr_assert_eq(mkdir(sub("nvswap"), 0700), 0);
	cr_assert_eq(chmod(sub("nvswap"), 0777), 0);
	opts_at(&o, tu_dir());
	cr_assert_eq(nvs_swapper_create(&o, &s), -EPERM);
	cr_assert(strstr(nvs_last_error(), "has mode 0777"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "without the sticky bit"), "%s",
		  nvs_last_error());
	/* Group-writable rank directory: refused the same way. */
	cr_assert_eq(chmod(sub("nvswap"), 0700), 0);
	cr_assert_eq(mkdir(sub("nvswap/rank0"), 0700), 0);
	cr_assert_eq(chmod(sub("nvswap/rank0"), 0770), 0);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EPERM);
	cr_assert(strstr(nvs_last_error(), "has mode 0770"), "%s",
		  nvs_last_error());
	/* With the sticky bit nobody else can replace our files: fine. */
	cr_assert_eq(chmod(sub("nvswap/rank0"), 0700), 0);
	cr_assert_eq(chmod(sub("nvswap"), 01777), 0);
	s = mk_at(tu_dir());
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* ------------------------------------------------ 4: a FIFO as config */

Test(hostile, finding4_config_load_of_a_fifo_fails_at_once)
{
	struct nvs_config *c = (void *)1;

	cr_assert_eq(mkfifo(sub("cfg.fifo"), 0600), 0);
	alarm(5); /* the old code blocked in open() forever */
	cr_assert_eq(nvs_config_load(sub("cfg.fifo"), &c), -EINVAL);
	alarm(0);
	cr_assert_null(c);
	cr_assert(strstr(nvs_last_error(), "not a regular file"), "%s",
		  nvs_last_error());
}

/* ------------------------------------------ 5: fork with the objects */

/* In a child: each call on the parent's objects; exit 0 when every one
 * returned -ECHILD with the sentence, else the index of the first that
 * did not (or a signal: alarm, when one blocked). */
static int child_calls(struct nvs_aio *h, struct nvs_swapper *s, void *buf)
{
	struct nvs_swap_stats st;
	struct nvs_tensor_info ti;
	void *p;
	int r[11];

	alarm(10);
	r[0] = nvs_aio_sync_pwrite(h, buf, BUF, tu_path("child.dat"), 0);
	if (r[0] == -ECHILD &&
	    !strstr(nvs_last_error(), "made by the parent process before fork"))
		return 100;
	r[1] = nvs_aio_async_pwrite(h, buf, BUF, tu_path("child.dat"), 0);
	r[2] = nvs_aio_wait(h);
	r[3] = nvs_swapper_acquire(s, 1, &p);
	if (r[3] == -ECHILD && !strstr(nvs_last_error(), "nvs_swapper_acquire"))
		return 101;
	r[4] = nvs_swapper_evict(s, 1);
	r[5] = nvs_swapper_wait_all(s);
	r[6] = nvs_swapper_stats(s, &st);
	r[7] = nvs_swapper_info(s, 1, &ti);
	r[10] = nvs_swapper_read(s, 1, buf, BUF);
	r[8] = nvs_swapper_destroy(s);
	r[9] = nvs_aio_destroy(h);
	for (int i = 0; i < 11; i++)
		if (r[i] != -ECHILD)
			return 10 + i;
	return 0;
}

Test(hostile,
     finding5_a_forked_child_gets_echild_at_once_and_the_parent_goes_on)
{
	struct nvs_aio *h;
	struct nvs_swapper *s = mk_at(tu_dir());
	char buf[BUF], back[BUF];
	void *p;
	int status;
	pid_t pid;

	tu_fill(buf, sizeof(buf), 5);
	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, buf), 0);
	cr_assert_eq(nvs_swapper_register(s, 2, BUF, buf), 0);
	(void)tu_path("child.dat"); /* the scratch dir exists before fork */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(child_calls(h, s, buf));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status),
		  "the child was killed by signal %d "
		  "(blocked until the alarm)",
		  WTERMSIG(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "child check %d failed",
		     WEXITSTATUS(status));
	cr_assert_eq(access(tu_path("child.dat"), F_OK), -1,
		     "the child wrote nothing");
	/* The parent's objects are intact and work. */
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, BUF, tu_path("p.dat"), 0), 1);
	cr_assert_eq(nvs_aio_sync_pread(h, back, BUF, tu_path("p.dat"), 0), 1);
	cr_assert(memcmp(buf, back, BUF) == 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert(memcmp(p, buf, BUF) == 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* A child forked after the swapper was made, that outlives the process
 * that made it (a data-loader worker, say), holds no lock on the swap
 * set: the next process reclaims it at once. */
Test(hostile, finding5_a_forked_child_outliving_its_parent_keeps_no_lock)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	pid_t parent, child = 0;
	int fds[2], status, ret;

	alarm(30);
	(void)tu_dir();
	cr_assert_eq(pipe(fds), 0);
	parent = fork();
	cr_assert_geq(parent, 0);
	if (parent == 0) {
		struct nvs_swapper *mine;
		char buf[BUF] = {1};
		pid_t c;

		opts_at(&o, tu_dir());
		if (nvs_swapper_create(&o, &mine) < 0 ||
		    nvs_swapper_register(mine, 1, BUF, buf) < 0)
			_exit(1);
		c = fork();
		if (c == 0) {
			sleep(20); /* outlives its parent */
			_exit(0);
		}
		if (write(fds[1], &c, sizeof(c)) != sizeof(c))
			_exit(2);
		_exit(0); /* dies holding the swapper, as if killed */
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], &child, sizeof(child)), sizeof(child));
	close(fds[0]);
	cr_assert_eq(waitpid(parent, &status, 0), parent);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The grandchild lives on; the swap set must be free. */
	cr_assert_eq(kill(child, 0), 0, "the child still runs");
	opts_at(&o, tu_dir());
	ret = nvs_swapper_create(&o, &s);
	kill(child, SIGKILL);
	cr_assert_eq(ret, 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/* --------------------------------------------- 6: descriptor limit 16 */

Test(hostile, finding6_path_writes_to_100_files_under_a_descriptor_limit_of_16)
{
	const char *dir = tu_dir();
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rlimit rl = {16, 16};
		struct nvs_aio_opts o;
		struct nvs_aio *h;
		static char buf[1 << 20];
		char path[4300];
		int failed = 0;

		/* Criterion's own descriptors stay below 16 or are closed
		 * on the way: the child reports only through its status. */
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(200);
		nvs_aio_opts_init(&o);
		o.intra_op_parallelism = 1;
		if (nvs_aio_create(&o, &h) < 0)
			_exit(201);
		memset(buf, 7, sizeof(buf));
		for (int i = 0; i < 100; i++) {
			snprintf(path, sizeof(path), "%s/f%d", dir, i);
			if (nvs_aio_sync_pwrite(h, buf, sizeof(buf), path, 0) !=
			    1)
				failed++;
		}
		if (nvs_aio_destroy(h) < 0)
			_exit(202);
		_exit(failed > 199 ? 199 : failed);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_neq(WEXITSTATUS(status), 200, "setrlimit failed");
	cr_assert_neq(WEXITSTATUS(status), 201, "create under 16 failed");
	cr_assert_eq(WEXITSTATUS(status), 0, "%d of 100 writes failed",
		     WEXITSTATUS(status));
	cr_assert_eq(tu_file_size(tu_path("f99")), 1 << 20);
}

/* ------------------------------------------ 7: a deleted file's space */

static const char *small_tmpfs(const char *size)
{
	static char opts[64];
	const char *mnt = tu_path("mnt");

	snprintf(opts, sizeof(opts), "size=%s", size);
	return tu_mount_private(mnt, "tmpfs", 0, opts) ? mnt : NULL;
}

Test(hostile, finding7_deleting_a_file_written_through_a_handle_frees_its_space)
{
	const char *mnt = small_tmpfs("4m");
	static char buf[3 << 20];
	char a[4200], b[4200];
	struct nvs_aio *h;

	if (!mnt)
		cr_skip_test("cannot mount a private tmpfs here (%s): needs "
			     "root and mount namespaces",
			     strerror(errno));
	snprintf(a, sizeof(a), "%s/a", mnt);
	snprintf(b, sizeof(b), "%s/b", mnt);
	tu_fill(buf, sizeof(buf), 7);
	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), a, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(unlink(a), 0);
	/* 3 MiB more on a 4 MiB disk: fits only if a's blocks came back. */
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), b, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(unlink(b), 0);
	/* A cached file deleted while another, cached too, is the one that
	 * grows: the full disk makes the handle close its idle files. */
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 4096, a, 0), 1);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), b, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(unlink(b), 0);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), a, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_aio_destroy(h), 0);
	umount2(mnt, MNT_DETACH);
}

/* The same through the page cache (no O_DIRECT, no preallocation): a
 * cached file grows into space a deleted, cached file still holds. The
 * write fails, closes the deleted file's descriptor, and says a retry may
 * find space; the retry does. */
Test(hostile, finding7_buffered_a_full_disk_closes_deleted_files_for_the_retry)
{
	const char *mnt = small_tmpfs("4m");
	static char buf[3 << 20], back[3 << 20];
	char a[4200], b[4200];
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	int ret;

	if (!mnt)
		cr_skip_test("cannot mount a private tmpfs here (%s): needs "
			     "root and mount namespaces",
			     strerror(errno));
	snprintf(a, sizeof(a), "%s/a", mnt);
	snprintf(b, sizeof(b), "%s/b", mnt);
	tu_fill(buf, sizeof(buf), 9);
	nvs_aio_opts_init(&o);
	o.direct = NVS_DIRECT_NEVER;
	cr_assert_eq(nvs_aio_create(&o, &h), 0);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, 4096, b, 0), 1); /* cached */
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), a, 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(unlink(a), 0);
	ret = nvs_aio_sync_pwrite(h, buf, sizeof(buf), b, 0);
	if (ret != 1) {
		cr_assert_eq(ret, -ENOSPC, "%s", nvs_last_error());
		cr_assert(strstr(nvs_last_error(), "a retry may find space"),
			  "%s", nvs_last_error());
		ret = nvs_aio_sync_pwrite(h, buf, sizeof(buf), b, 0);
	}
	cr_assert_eq(ret, 1, "the retry: %s", nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pread(h, back, sizeof(back), b, 0), 1);
	cr_assert(!memcmp(buf, back, sizeof(buf)));
	cr_assert_eq(nvs_aio_destroy(h), 0);
	umount2(mnt, MNT_DETACH);
}

/* ---------------------------------------------------- 8: leftovers */

Test(hostile, finding8_swapper_destroy_leaves_no_empty_nvswap_directory)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *a, *b;
	const char *names[2] = {"param", "optimizer"};

	cr_assert_eq(mkdir(sub("p"), 0700), 0);
	a = mk_at(sub("p"));
	cr_assert_eq(nvs_swapper_register(a, 1, BUF, NULL), 0);
	cr_assert_eq(nvs_swapper_destroy(a), 0);
	cr_assert_eq(access(sub("p/nvswap"), F_OK), -1, "removed when ours");
	/* Two named swappers: whichever goes last removes it. */
	opts_at(&o, sub("p"));
	o.name = names[0];
	cr_assert_eq(nvs_swapper_create(&o, &a), 0, "%s", nvs_last_error());
	o.name = names[1];
	cr_assert_eq(nvs_swapper_create(&o, &b), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(a), 0);
	cr_assert_eq(access(sub("p/nvswap/optimizer"), F_OK), 0);
	cr_assert_eq(nvs_swapper_destroy(b), 0);
	cr_assert_eq(access(sub("p/nvswap"), F_OK), -1, "removed at the last");
	/* One the user made, or with something else in it, stays. */
	cr_assert_eq(mkdir(sub("p/nvswap"), 0700), 0);
	a = mk_at(sub("p"));
	cr_assert_eq(nvs_swapper_destroy(a), 0);
	cr_assert_eq(access(sub("p/nvswap"), F_OK), 0, "the user's stays");
	cr_assert_eq(rmdir(sub("p/nvswap")), 0);
	a = mk_at(sub("p"));
	tu_write_file(sub("p/nvswap/notes"), "x", 1);
	cr_assert_eq(nvs_swapper_destroy(a), 0);
	cr_assert_eq(tu_file_size(sub("p/nvswap/notes")), 1, "kept");
}

/* ----------------------------------------------- keep what works */

Test(hostile,
     keep_planted_links_and_fifos_at_swap_rank_and_lock_are_never_followed)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	char victim[4200];

	alarm(20);
	snprintf(victim, sizeof(victim), "%s", sub("victim"));
	tu_write_file(victim, "precious", 8);
	cr_assert_eq(mkdir(sub("nvswap"), 0700), 0);
	opts_at(&o, tu_dir());
	/* rank0 a symlink to a directory of ours. */
	cr_assert_eq(mkdir(sub("elsewhere"), 0700), 0);
	cr_assert_eq(symlink(sub("elsewhere"), sub("nvswap/rank0")), 0);
	cr_assert_lt(nvs_swapper_create(&o, &s), 0);
	cr_assert_eq(unlink(sub("nvswap/rank0")), 0);
	/* lock a symlink to the victim, then a FIFO. */
	cr_assert_eq(mkdir(sub("nvswap/rank0"), 0700), 0);
	cr_assert_eq(symlink(victim, sub("nvswap/rank0/lock")), 0);
	cr_assert_eq(nvs_swapper_create(&o, &s), -ELOOP);
	cr_assert_eq(unlink(sub("nvswap/rank0/lock")), 0);
	cr_assert_eq(mkfifo(sub("nvswap/rank0/lock"), 0600), 0);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "not a regular file"), "%s",
		  nvs_last_error());
	cr_assert_eq(unlink(sub("nvswap/rank0/lock")), 0);
	/* swap.0 a symlink and swap.1 a FIFO: removed as stale, not
	 * followed; the swap file is made fresh. */
	cr_assert_eq(symlink(victim, sub("nvswap/rank0/swap.0")), 0);
	cr_assert_eq(mkfifo(sub("nvswap/rank0/swap.1"), 0600), 0);
	s = mk_at(tu_dir());
	char buf[BUF];
	tu_fill(buf, sizeof(buf), 3);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, buf), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	size_t n;
	char *got = tu_read_file(victim, &n);
	cr_assert_eq(n, 8);
	cr_assert(memcmp(got, "precious", 8) == 0, "the victim is untouched");
	free(got);
}

Test(hostile, keep_a_swap_file_or_rank_directory_deleted_mid_run_is_harmless)
{
	struct nvs_swapper *s = mk_at(tu_dir());
	char buf[BUF];
	void *p;

	tu_fill(buf, sizeof(buf), 9);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, buf), 0);
	cr_assert_eq(nvs_swapper_register(s, 2, BUF, NULL), 0);
	cr_assert_eq(unlink(sub("nvswap/rank0/swap.0")), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert(memcmp(p, buf, BUF) == 0, "read through the open file");
	cr_assert_eq(nvs_swapper_release(s, 1, true), 0);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "%s", nvs_last_error());
	/* Now the whole rank directory. */
	cr_assert_eq(unlink(sub("nvswap/rank0/lock")), 0);
	cr_assert_eq(rmdir(sub("nvswap/rank0")), 0);
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert(memcmp(p, buf, BUF) == 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

/*
 * Issue 34, finding 3: an op on a FIFO with no writer blocked for ever in
 * open() (an async read blocked its caller), and Ctrl-C then surfaced as
 * EINTR. Anything but a regular file or a block device is refused at
 * once, by path and by descriptor, naming what it is.
 */
static void refused_as(struct nvs_aio *h, const char *p, int fd,
		       const char *type)
{
	char buf[4096] = {0}, want[96];

	snprintf(want, sizeof(want),
		 "is %s, not a regular file or a block "
		 "device",
		 type);
	if (p) {
		cr_assert_eq(nvs_aio_sync_pread(h, buf, sizeof(buf), p, 0),
			     -EINVAL, "%s", nvs_last_error());
		cr_assert(strstr(nvs_last_error(), want) &&
				  strstr(nvs_last_error(), p),
			  "%s", nvs_last_error());
		cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), p, 0),
			     -EINVAL, "%s", nvs_last_error());
		cr_assert(strstr(nvs_last_error(), want), "%s",
			  nvs_last_error());
	} else {
		cr_assert_eq(
			nvs_aio_pread_fd(h, buf, sizeof(buf), fd, 0, false),
			-EINVAL, "%s", nvs_last_error());
		cr_assert(strstr(nvs_last_error(), want), "%s",
			  nvs_last_error());
	}
}

Test(hostile, round3_a_fifo_socket_or_character_device_is_refused_at_once,
     .timeout = 30)
{
	const char *fifo = tu_path("fifo"), *sock = tu_path("sock");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	char buf[4096];
	int fd, s;

	nvs_aio_opts_init(&o);
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	refused_as(h, fifo, -1, "a FIFO");
	/* the one-shot read too */
	cr_assert_eq(nvs_aio_read(buf, sizeof(buf), fifo, &o, false, NULL),
		     -EINVAL, "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "is a FIFO"), "%s",
		  nvs_last_error());
	fd = open(fifo, O_RDWR); /* a descriptor of one: never blocks */
	cr_assert_geq(fd, 0);
	refused_as(h, NULL, fd, "a FIFO");
	close(fd);
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s",
		     sock);
	refused_as(h, sock, -1, "a socket");
	close(s);
	refused_as(h, "/dev/null", -1, "a character device");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

/* Issue 34, finding 8: an empty name was taken as none, so a persistent
 * set took the directory every scratch swapper on the path uses. */
Test(hostile, round3_an_empty_swapper_name_is_refused)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (void *)1;

	opts_at(&o, tu_dir());
	o.name = "";
	o.persist = NVS_PERSIST_PERSISTENT;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert_null(s);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_create: name is empty"),
		  "%s", nvs_last_error());
	s = mk_at(tu_dir()); /* the unnamed directory is still free */
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
