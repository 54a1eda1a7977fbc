// SPDX-License-Identifier: MIT
/*
 * The swapper's rank directory: created 0700 under <nvme_path>/nvswap/,
 * locked against a second owner, swap files 0600 and never through a
 * symlink, scratch files removed on close, and the files of a process
 * killed with SIGKILL found stale and removed at the next open. A missing
 * nvme_path is made (mkdir -p, 0700) by the swapper, or refused at create
 * naming the level at fault, and what was made goes with a scratch set.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvswap/common.h"
#include "nvswap/swapper.h"
#include "swapper/swapdir.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(swapdir, .fini = fini);

static const char *rank_dir(int r)
{
	static char p[4200];

	snprintf(p, sizeof(p), "%s/nvswap/rank%d", tu_dir(), r);
	return p;
}

Test(swapdir, creates_a_private_locked_rank_directory)
{
	struct nvs_swapdir d;
	struct stat st;
	char lock[4300];
	int fd;

	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 3, &d), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(stat(rank_dir(3), &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	fd = nvs__swapdir_create(&d, "0", 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	cr_assert_eq(nvs__swapdir_create(&d, "0", 0), -EEXIST);
	close(fd);
	snprintf(lock, sizeof(lock), "%s/lock", rank_dir(3));
	cr_assert_eq(stat(lock, &st), 0);
	cr_assert_eq(d.stale, 0);
	nvs__swapdir_close(&d, true);
	cr_assert_eq(stat(rank_dir(3), &st), -1, "scratch mode removes it");
	cr_assert_eq(errno, ENOENT);
}

Test(swapdir, a_second_owner_is_refused_with_the_holders_pid)
{
	struct nvs_swapdir a, b;
	char pid[32];

	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 0, &a), 0);
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 0, &b), -EBUSY);
	snprintf(pid, sizeof(pid), "process %ld", (long)getpid());
	cr_assert(strstr(nvs_last_error(), pid), "%s", nvs_last_error());
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 1, &b), 0, "other rank");
	nvs__swapdir_close(&b, true);
	nvs__swapdir_close(&a, true);
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 0, &b), 0, "free again");
	nvs__swapdir_close(&b, true);
}

Test(swapdir, files_of_a_killed_owner_are_reclaimed_at_the_next_open)
{
	struct nvs_swapdir d;
	char file[4300];
	int status;
	const char *dir = tu_dir(); /* before fork: the child shares it */
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct nvs_swapdir c;
		if (nvs__swapdir_open(dir, NULL, 2, &c) < 0 ||
		    nvs__swapdir_create(&c, "a", 0) < 0 ||
		    nvs__swapdir_create(&c, "b", 0) < 0)
			_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	snprintf(file, sizeof(file), "%s/swap.a", rank_dir(2));
	cr_assert_eq(access(file, F_OK), 0, "left behind");
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 2, &d), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(d.stale, 2);
	cr_assert_eq(access(file, F_OK), -1, "reclaimed");
	nvs__swapdir_close(&d, true);
	/* The dead owner's nvswap/ level goes with the set that took it
	 * over: nothing of the killed run stays. */
	cr_assert_eq(access(tu_path("nvswap"), F_OK), -1, "nvswap/ stays");
}

Test(swapdir, symlinks_are_never_followed)
{
	struct nvs_swapdir d;
	char target[4200], link[4200], file[4300];

	/* The rank directory replaced by a symlink to elsewhere. */
	snprintf(target, sizeof(target), "%s/elsewhere", tu_dir());
	cr_assert_eq(mkdir(target, 0700), 0);
	snprintf(link, sizeof(link), "%s/nvswap", tu_dir());
	cr_assert_eq(mkdir(link, 0700), 0);
	cr_assert_eq(symlink(target, rank_dir(5)), 0);
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 5, &d), -ENOTDIR);
	/* A swap file name taken by a symlink. */
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, 6, &d), 0);
	snprintf(file, sizeof(file), "%s/swap.x", rank_dir(6));
	cr_assert_eq(symlink(target, file), 0);
	cr_assert_lt(nvs__swapdir_create(&d, "x", 0), 0);
	nvs__swapdir_close(&d, true);
	cr_assert_eq(access(target, F_OK), 0, "nothing outside is touched");
}

Test(swapdir, a_missing_nvme_path_is_named)
{
	struct nvs_swapdir d;

	cr_assert_eq(nvs__swapdir_open("/nonexistent/nvme", NULL, 0, &d),
		     -ENOENT);
	cr_assert(strstr(nvs_last_error(), "/nonexistent/nvme"));
	cr_assert_eq(d.dirfd, -1);
	cr_assert_eq(d.lockfd, -1);
}

Test(swapdir, named_swappers_share_a_path_and_clean_up_their_level)
{
	struct nvs_swapdir p, o, again;
	char dir[4200];
	struct stat st;

	cr_assert_eq(nvs__swapdir_open(tu_dir(), "param", 0, &p), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs__swapdir_open(tu_dir(), "optimizer", 0, &o), 0, "%s",
		     nvs_last_error());
	snprintf(dir, sizeof(dir), "%s/nvswap/param/rank0", tu_dir());
	cr_assert_str_eq(p.path, dir);
	cr_assert_eq(stat(dir, &st), 0);
	cr_assert_eq(nvs__swapdir_open(tu_dir(), "param", 0, &again), -EBUSY);
	nvs__swapdir_close(&p, true);
	cr_assert_eq(stat(dir, &st), -1, "rank directory removed");
	snprintf(dir, sizeof(dir), "%s/nvswap/param", tu_dir());
	cr_assert_eq(stat(dir, &st), -1, "empty name level removed");
	snprintf(dir, sizeof(dir), "%s/nvswap/optimizer/rank0", tu_dir());
	cr_assert_eq(stat(dir, &st), 0, "the other swapper's is untouched");
	nvs__swapdir_close(&o, true);
}

Test(swapdir, a_name_must_be_one_path_component)
{
	struct nvs_swapdir d;
	const char *bad[] = {"..", ".", "a/b", "x\n"};

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(nvs__swapdir_open(tu_dir(), bad[i], 0, &d),
			     -EINVAL, "%s", bad[i]);
		cr_assert_eq(d.dirfd, -1);
	}
	cr_assert_eq(nvs__swapdir_open(tu_dir(), NULL, -1, &d), -EINVAL);
}

static mode_t mode_of(const char *p)
{
	struct stat st;

	cr_assert_eq(stat(p, &st), 0, "%s: %s", p, strerror(errno));
	return st.st_mode & 07777;
}

static bool gone(const char *p)
{
	struct stat st;

	return lstat(p, &st) < 0 && errno == ENOENT;
}

static struct nvs_swapper *swapper_on(const char *path, const char *name,
				      uint8_t persist)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	tu_swapper_opts(&o, 1 << 16, 2);
	o.nvme_paths[0] = path;
	o.name = name;
	o.persist = persist;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

Test(swapdir, a_missing_nvme_path_is_made_0700_and_removed_with_the_set)
{
	char path[4200], swap[4300];
	struct nvs_swapper *s;

	cr_assert_eq(chmod(tu_dir(), 0755), 0);
	snprintf(path, sizeof(path), "%s/a/b/c", tu_dir());
	s = swapper_on(path, NULL, NVS_PERSIST_SCRATCH);
	cr_assert_eq(mode_of(tu_path("a")), 0700);
	cr_assert_eq(mode_of(tu_path("a/b")), 0700);
	cr_assert_eq(mode_of(path), 0700);
	cr_assert_eq(mode_of(tu_dir()), 0755, "an existing level is kept");
	snprintf(swap, sizeof(swap), "%s/nvswap/rank0/swap.0", path);
	cr_assert_eq(access(swap, F_OK), 0, "%s", swap);
	nvs_swapper_destroy(s);
	cr_assert(gone(tu_path("a")), "every level it made is removed");
	cr_assert_eq(mode_of(tu_dir()), 0755);
}

Test(swapdir, an_existing_nvme_path_is_left_as_it_is)
{
	const char *path = tu_path("mine");
	struct nvs_swapper *s;

	cr_assert_eq(mkdir(path, 0750), 0);
	s = swapper_on(path, NULL, NVS_PERSIST_SCRATCH);
	cr_assert_eq(mode_of(path), 0750);
	nvs_swapper_destroy(s);
	cr_assert_eq(mode_of(path), 0750, "the user's directory stays");
	cr_assert(gone(tu_path("mine/nvswap")));
}

Test(swapdir, a_made_path_stays_until_the_last_swapper_there_leaves)
{
	char path[4200];
	struct nvs_swapper *p, *o;

	snprintf(path, sizeof(path), "%s/x/y", tu_dir());
	p = swapper_on(path, "param", NVS_PERSIST_SCRATCH);
	o = swapper_on(path, "optimizer", NVS_PERSIST_SCRATCH);
	nvs_swapper_destroy(p);
	cr_assert_eq(mode_of(path), 0700, "the other swapper is still in");
	cr_assert(gone(tu_path("x/y/nvswap/param")));
	nvs_swapper_destroy(o);
	cr_assert(gone(tu_path("x")), "the last one removes what was made");
}

Test(swapdir, a_persistent_set_keeps_the_path_it_made)
{
	char path[4200], lock[4300];
	struct nvs_swapper *s;

	snprintf(path, sizeof(path), "%s/p/q", tu_dir());
	s = swapper_on(path, "set", NVS_PERSIST_PERSISTENT);
	nvs_swapper_destroy(s);
	snprintf(lock, sizeof(lock), "%s/nvswap/set/rank0/lock", path);
	cr_assert_eq(access(lock, F_OK), 0, "the set stays where it was made");
	cr_assert_eq(mode_of(path), 0700);
	s = swapper_on(path, "set", NVS_PERSIST_RESUME);
	nvs_swapper_destroy(s);
}

/* A level made for a kept set is forgotten: once the user has removed
 * it and made a directory of their own at its place (ext4 and tmpfs
 * hand the freed inode number straight out again), a scratch swapper
 * under that directory removes only what it made itself. */
Test(swapdir, a_users_directory_at_a_kept_sets_old_place_is_never_removed)
{
	char path[4200], cmd[4400];
	struct nvs_swapper *s;

	snprintf(path, sizeof(path), "%s/r/run", tu_dir());
	s = swapper_on(path, "set", NVS_PERSIST_PERSISTENT);
	nvs_swapper_destroy(s);
	snprintf(cmd, sizeof(cmd), "rm -r '%s'", tu_path("r"));
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(mkdir(tu_path("r"), 0750), 0);
	snprintf(path, sizeof(path), "%s/r/swap", tu_dir());
	s = swapper_on(path, NULL, NVS_PERSIST_SCRATCH);
	nvs_swapper_destroy(s);
	cr_assert(gone(path), "the level it made goes");
	cr_assert_eq(mode_of(tu_path("r")), 0750, "the user's stays");
}

Test(swapdir, a_file_in_the_way_is_refused_at_create_naming_it)
{
	char path[4200], want[8500];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (struct nvs_swapper *)&o;

	tu_write_file(tu_path("f"), "x", 1);
	snprintf(path, sizeof(path), "%s/f/swap/here", tu_dir());
	tu_swapper_opts(&o, 1 << 16, 2);
	o.nvme_paths[0] = path;
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOTDIR);
	cr_assert_null(s);
	snprintf(want, sizeof(want),
		 "nvswap: nvme_path %s: %s is not a directory", path,
		 tu_path("f"));
	cr_assert_str_eq(nvs_last_error(), want);
	/* The file itself as nvme_path. */
	o.nvme_paths[0] = tu_path("f");
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOTDIR);
	cr_assert(strstr(nvs_last_error(), tu_path("f")), "%s",
		  nvs_last_error());
}

Test(swapdir, a_failed_create_takes_back_the_levels_it_made)
{
	char ok[4200], bad[4200];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	tu_write_file(tu_path("f"), "x", 1);
	snprintf(ok, sizeof(ok), "%s/new/d0", tu_dir());
	snprintf(bad, sizeof(bad), "%s/f/d1", tu_dir());
	tu_swapper_opts(&o, 1 << 16, 2);
	o.npaths = 2;
	o.nvme_paths[0] = ok;
	o.nvme_paths[1] = bad;
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOTDIR);
	cr_assert(strstr(nvs_last_error(), bad), "%s", nvs_last_error());
	cr_assert(gone(tu_path("new")), "made for path 0, then removed");
	/* Two spellings of one new directory: found to be one, refused,
	 * and taken back. */
	snprintf(bad, sizeof(bad), "%s/new/d0/", tu_dir());
	o.nvme_paths[1] = bad;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "are the same directory"), "%s",
		  nvs_last_error());
	cr_assert(gone(tu_path("new")));
	/* A create failing later (a zero stripe size is checked first, so:
	 * a set to resume that is not there) takes them back too. */
	o.npaths = 1;
	o.persist = NVS_PERSIST_RESUME;
	o.name = "none";
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOENT);
	cr_assert(gone(tu_path("new/d0/nvswap/none/rank0/swap.0")));
}

/* nvs__swapdir_mkpath(@path, @check) as user nobody (when root): its
 * return, and the level it names in @level. */
static int mkpath_unprivileged(const char *path, bool check, char *level,
			       size_t len)
{
	int fds[2], status, ret = 0;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char buf[4200] = "";
		int r = tu_drop_root()
				? nvs__swapdir_mkpath(path, check, buf + 8,
						      sizeof(buf) - 8)
				: 1;
		memcpy(buf, &r, sizeof(r));
		(void)!write(fds[1], buf, sizeof(buf));
		_exit(0);
	}
	close(fds[1]);
	char buf[4200];
	cr_assert_eq(read(fds[0], buf, sizeof(buf)), (ssize_t)sizeof(buf));
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	memcpy(&ret, buf, sizeof(ret));
	snprintf(level, len, "%s", buf + 8);
	return ret;
}

Test(swapdir, a_level_that_cannot_be_made_is_named_checked_or_made)
{
	char path[4200], level[4200];
	const char *ro = tu_path("ro");

	cr_assert_eq(mkdir(ro, 0755), 0);
	cr_assert_eq(chmod(tu_dir(), 0755), 0);
	snprintf(path, sizeof(path), "%s/a/b", ro);
	for (int check = 0; check < 2; check++) {
		int ret =
			mkpath_unprivileged(path, check, level, sizeof(level));
		if (ret == 1)
			cr_skip_test("cannot drop root to user nobody here");
		cr_assert_eq(ret, -EACCES, "check %d: %d %s", check, ret,
			     level);
		cr_assert_str_eq(level, tu_path("ro/a"));
	}
	cr_assert(gone(tu_path("ro/a")), "nothing made");
	/* The check makes nothing; the real one makes both levels. */
	cr_assert_eq(nvs__swapdir_mkpath(path, true, level, sizeof(level)), 0);
	cr_assert(gone(tu_path("ro/a")));
	cr_assert_eq(nvs__swapdir_mkpath(path, false, level, sizeof(level)), 0);
	cr_assert_eq(mode_of(path), 0700);
	nvs__swapdir_rmpath(path);
	cr_assert(gone(tu_path("ro/a")), "rmpath takes back what was made");
	cr_assert_eq(mode_of(ro), 0755, "and only that");
	cr_assert_eq(mkpath_unprivileged(ro, false, level, sizeof(level)), 0,
		     "an existing level needs no write permission");
}
