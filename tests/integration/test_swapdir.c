// SPDX-License-Identifier: MIT
/*
 * The swapper's rank directory: created 0700 under <nvme_path>/nvswap/,
 * locked against a second owner, swap files 0600 and never through a
 * symlink, scratch files removed on close, and the files of a process
 * killed with SIGKILL found stale and removed at the next open.
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
#include "swapper/swapdir.h"
#include "testutil.h"

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
