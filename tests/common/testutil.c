// SPDX-License-Identifier: MIT
/* Helpers shared by the test suites. */
#include "testutil.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];
/* Copies of what user nobody runs, when the build tree is out of its
 * reach (see tu_nobody_prefix); removed by tu_cleanup. */
static char stage[4096];

/*
 * Whether user nobody can reach @path: every directory on the way must be
 * searchable by others. A clone under a 0700 directory (as mktemp -d
 * makes) is not; the tests that drop root then work from copies.
 */
static bool others_reach(const char *path)
{
	char real[4096], *slash;
	struct stat st;

	if (!realpath(path, real))
		return false;
	for (;;) {
		if (stat(real, &st) < 0 ||
		    (S_ISDIR(st.st_mode) && !(st.st_mode & S_IXOTH)))
			return false;
		slash = strrchr(real, '/');
		if (!slash || slash == real)
			break;
		*slash = 0;
	}
	return true;
}

/* The scratch base: $NVSWAP_TEST_DIR (the build tree, on the real disk)
 * when user nobody can reach it, else /var/tmp (on disk too, unlike a
 * tmpfs /tmp), so that the tests that drop root find their files. */
static const char *scratch_base(void)
{
	const char *base = getenv("NVSWAP_TEST_DIR");

	if (!base)
		base = ".";
	if (!others_reach(base) && others_reach("/var/tmp"))
		return "/var/tmp";
	return base;
}

/* The process that made dir: only it removes dir at exit, not a forked
 * child that calls exit(). */
static pid_t dir_owner;

static void cleanup_at_exit(void)
{
	if (getpid() == dir_owner)
		tu_cleanup();
}

const char *tu_dir(void)
{
	static bool registered;

	if (dir[0])
		return dir;
	/* A skipped test does not reach its suite's .fini. */
	if (!registered)
		registered = atexit(cleanup_at_exit) == 0;
	dir_owner = getpid();
	snprintf(dir, sizeof(dir), "%s/nvs-test-XXXXXX", scratch_base());
	cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %s", dir,
			   strerror(errno));
	chmod(dir, 0755);
	return dir;
}

/* A copy of @file in the stage directory as @name (NULL: its own name),
 * mode 0755; its path. */
static const char *staged(const char *file, const char *name)
{
	static char to[4][4096];
	static int next;
	char *p = to[next++ % 4];
	size_t n;
	void *bytes;

	if (!stage[0]) {
		snprintf(stage, sizeof(stage), "%s/nvs-stage-XXXXXX",
			 others_reach("/var/tmp") ? "/var/tmp" : "/tmp");
		cr_assert_not_null(mkdtemp(stage), "mkdtemp %s: %s", stage,
				   strerror(errno));
		chmod(stage, 0755);
	}
	if (!name)
		name = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	cr_assert_lt((size_t)snprintf(p, 4096, "%s/%s", stage, name), 4096);
	bytes = tu_read_file(file, &n);
	tu_write_file(p, bytes, n);
	free(bytes);
	chmod(p, 0755);
	return p;
}

const char *tu_path(const char *name)
{
	static char bufs[8][4096];
	static int next;
	char *p = bufs[next++ % 8];

	snprintf(p, 4096, "%s/%s", tu_dir(), name);
	return p;
}

static int rm_one(const char *p, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void tu_cleanup(void)
{
	if (dir[0])
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	if (stage[0])
		nftw(stage, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	dir[0] = stage[0] = '\0';
}

void tu_fill(void *buf, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	unsigned char *p = buf;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)x;
	}
}

#define GUARD 64
struct hdr {
	void *base;
	size_t maplen;
	size_t n;
};

void *tu_alloc(size_t n, size_t misalign)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t maplen = pg + GUARD + misalign + n + GUARD + pg;
	char *base = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;
	struct hdr *h;

	cr_assert_neq(base, MAP_FAILED);
	p = base + pg * 2 + misalign; /* page aligned + misalign */
	memset(p - GUARD, 0xEE, GUARD);
	memset(p + n, 0xEE, GUARD);
	h = (struct hdr *)base;
	h->base = base;
	h->maplen = maplen;
	h->n = n;
	/* keep the header where tu_free finds it: just before the guard */
	memcpy(p - GUARD - sizeof(*h), h, sizeof(*h));
	return p;
}

bool tu_guards_ok(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 1; i <= GUARD; i++)
		if (c[-(long)i] != 0xEE)
			return false;
	for (size_t i = 0; i < GUARD; i++)
		if (c[n + i] != 0xEE)
			return false;
	return true;
}

void tu_free(void *p)
{
	struct hdr h;

	if (!p)
		return;
	memcpy(&h, (char *)p - GUARD - sizeof(h), sizeof(h));
	munmap(h.base, h.maplen);
}

off_t tu_file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return -1;
	return st.st_size;
}

void tu_write_file(const char *path, const void *buf, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	size_t done = 0;

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	while (done < n) {
		ssize_t r = write(fd, (const char *)buf + done, n - done);
		cr_assert_gt(r, 0, "write %s: %s", path, strerror(errno));
		done += (size_t)r;
	}
	close(fd);
}

void *tu_read_file(const char *path, size_t *n)
{
	off_t sz = tu_file_size(path);
	int fd = open(path, O_RDONLY);
	char *buf;
	size_t done = 0;

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	buf = malloc((size_t)sz + 1);
	while (done < (size_t)sz) {
		ssize_t r = read(fd, buf + done, (size_t)sz - done);
		cr_assert_gt(r, 0, "read %s", path);
		done += (size_t)r;
	}
	close(fd);
	*n = done;
	return buf;
}

bool tu_drop_root(void)
{
	if (geteuid() != 0)
		return true;
	if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
	    setresuid(65534, 65534, 65534) < 0)
		return false;
	return geteuid() == 65534;
}

const char *tu_nobody_prefix(long memlock)
{
	static char prefix[8192];
	char limits[64] = "";
	const char *lib = getenv("NVSWAP_TEST_LIB");

	if (geteuid() != 0 || system("command -v setpriv >/dev/null") != 0 ||
	    (memlock >= 0 && system("command -v prlimit >/dev/null") != 0))
		return NULL;
	if (memlock >= 0)
		snprintf(limits, sizeof(limits), "prlimit --memlock=%ld ",
			 memlock);
	if (!lib || others_reach(lib)) {
		snprintf(prefix, sizeof(prefix),
			 "%ssetpriv --reuid=65534 --regid=65534 "
			 "--clear-groups",
			 limits);
		return prefix;
	}
	/* The build tree is out of nobody's reach: a shell function copies
	 * the program that follows the prefix, beside a copy of the shared
	 * library, and runs that copy. */
	lib = staged(lib, "libnvswap.so.0"); /* its soname */
	snprintf(prefix, sizeof(prefix),
		 "nvs_staged() { t=$1; shift; cp -f \"$t\" %.*s/ && "
		 "exec %ssetpriv --reuid=65534 --regid=65534 --clear-groups "
		 "env LD_LIBRARY_PATH=%.*s %.*s/\"${t##*/}\" \"$@\"; }; "
		 "nvs_staged",
		 (int)(strrchr(lib, '/') - lib), lib, limits,
		 (int)(strrchr(lib, '/') - lib), lib,
		 (int)(strrchr(lib, '/') - lib), lib);
	return prefix;
}

/* Exit status of a child that could not become nobody. */
#define CANNOT_DROP 3

bool tu_as_nobody(const char *name, long memlock, struct tu_child *out)
{
	const char *helper = getenv("NVSWAP_TEST_NOBODY");
	const char *d = tu_dir();
	size_t got = 0;
	int fds[2], status = -1;
	pid_t pid;

	cr_assert_not_null(helper, "meson sets NVSWAP_TEST_NOBODY");
	if (!others_reach(helper))
		helper = staged(helper,
				NULL); /* statically linked with nvswap */
	memset(out, 0, sizeof(*out));
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* Only system calls until exec: this is a fork of a
		 * threaded process. */
		struct rlimit rl = {(rlim_t)memlock, (rlim_t)memlock};
		if ((memlock >= 0 && setrlimit(RLIMIT_MEMLOCK, &rl) < 0) ||
		    !tu_drop_root())
			_exit(CANNOT_DROP);
		if (dup2(fds[1], STDOUT_FILENO) < 0)
			_exit(127);
		execl(helper, helper, name, d, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	while (got < sizeof(*out)) {
		ssize_t r = read(fds[0], (char *)out + got, sizeof(*out) - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == CANNOT_DROP)
		return false;
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "%s %s exited with status %#x", helper, name, status);
	cr_assert_eq(got, sizeof(*out), "%s %s reported back", helper, name);
	return true;
}

static char *slurp(const char *path)
{
	size_t n;
	char *p = tu_read_file(path, &n);
	char *s = malloc(n + 1);

	cr_assert_not_null(s);
	memcpy(s, p, n);
	s[n] = 0;
	free(p);
	return s;
}

/*
 * The strings of every tu_out not yet given to tu_out_free. A failed
 * assertion ends the test before its tu_out_free: freeing what is left at
 * exit keeps LeakSanitizer's report for the library's and the tools' own
 * leaks, not the harness's.
 */
static char *outstanding[64];

static void free_outstanding(void)
{
	for (size_t i = 0; i < sizeof(outstanding) / sizeof(*outstanding);
	     i++) {
		free(outstanding[i]);
		outstanding[i] = NULL;
	}
}

static void hold(char *s)
{
	static bool registered;

	if (!registered)
		registered = atexit(free_outstanding) == 0;
	for (size_t i = 0; i < sizeof(outstanding) / sizeof(*outstanding); i++)
		if (!outstanding[i]) {
			outstanding[i] = s;
			return;
		}
}

static void release(char *s)
{
	for (size_t i = 0; s && i < sizeof(outstanding) / sizeof(*outstanding);
	     i++)
		if (outstanding[i] == s)
			outstanding[i] = NULL;
	free(s);
}

struct tu_out tu_run(const char *cmd)
{
	char full[16384];
	struct tu_out o;
	int st;

	/* Under LeakSanitizer, a program that exits from deep inside keeps
	 * what it leaked reachable from its live stack frames: checked
	 * without stack and register roots, each leak is reported however
	 * the frames happen to lie (tests/meson.build sets this for the
	 * tools under ASan). */
	snprintf(full, sizeof(full), "%s%s%s%s >%s 2>%s",
		 getenv("NVSWAP_TOOL_LSAN") ? "export LSAN_OPTIONS=" : "",
		 getenv("NVSWAP_TOOL_LSAN") ? getenv("NVSWAP_TOOL_LSAN") : "",
		 getenv("NVSWAP_TOOL_LSAN") ? "; " : "", cmd, tu_path("stdout"),
		 tu_path("stderr"));
	st = system(full);
	o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	o.out = slurp(tu_path("stdout"));
	o.err = slurp(tu_path("stderr"));
	hold(o.out);
	hold(o.err);
	unlink(tu_path("stdout"));
	unlink(tu_path("stderr"));
	return o;
}

void tu_out_free(struct tu_out *o)
{
	release(o->out);
	release(o->err);
	o->out = o->err = NULL;
}

bool tu_bind_ro(const char *src, const char *where)
{
	if (mkdir(where, 0755) < 0 && errno != EEXIST)
		return false;
	return unshare(CLONE_NEWNS) == 0 &&
	       mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
	       mount(src, where, NULL, MS_BIND, NULL) == 0 &&
	       mount(NULL, where, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY,
		     NULL) == 0;
}

bool tu_mount_private(const char *where, const char *type, unsigned long flags,
		      const char *opts)
{
	if (mkdir(where, 0755) < 0 && errno != EEXIST)
		return false;
	return unshare(CLONE_NEWNS) == 0 &&
	       mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
	       mount("nvswap-test", where, type, flags, opts) == 0;
}
