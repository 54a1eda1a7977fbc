/* SPDX-License-Identifier: MIT */
/* Helpers shared by the test suites: scratch directories, patterns, files. */
#ifndef NVS_TESTUTIL_H
#define NVS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "testutil_child.h"

/* A fresh directory for this test process on the real filesystem
 * ($NVSWAP_TEST_DIR, else the current directory; /var/tmp when user nobody
 * could not reach that), removed by tu_cleanup. */
const char *tu_dir(void);
/* "<tu_dir>/<name>" in a static rotating buffer. */
const char *tu_path(const char *name);
/* Remove tu_dir and everything below it. */
void tu_cleanup(void);

/* Deterministic pseudo-random bytes. */
void tu_fill(void *buf, size_t n, uint64_t seed);
/* Memory at a chosen misalignment from a page boundary, with 64 guard
 * bytes (0xEE) either side; tu_guards_ok checks them. */
void *tu_alloc(size_t n, size_t misalign);
bool tu_guards_ok(const void *p, size_t n);
void tu_free(void *p);

off_t tu_file_size(const char *path);
/* Buffered whole-file helpers; abort the test (cr_assert) on failure. */
void tu_write_file(const char *path, const void *buf, size_t n);
void *tu_read_file(const char *path, size_t *n);

/* Mount a @type filesystem (@flags, @opts) on @dir (created if missing)
 * in a private mount namespace of this test process, so that a small or
 * read-only disk is real and nothing outside sees it. False (errno set)
 * when this machine will not let us: the caller skips, saying why. */
bool tu_mount_private(const char *dir, const char *type, unsigned long flags,
		      const char *opts);

/* Bind @src read-only at @dir (created if missing) in a private mount
 * namespace, as tu_mount_private(): false (errno set) when this machine
 * will not let us. */
bool tu_bind_ro(const char *src, const char *dir);

/* What a command printed and how it ended. */
struct tu_out {
	int status; /* exit status, or -1 */
	char *out;
	char *err;
};
/* Run shell command @cmd (its own redirections are not needed: stdout and
 * stderr are collected through files in tu_dir). */
struct tu_out tu_run(const char *cmd);
/* Frees what tu_run collected. What a test that failed before this leaves
 * is freed at exit, so LeakSanitizer reports only real leaks. */
void tu_out_free(struct tu_out *o);

/* A shell command prefix that runs what follows as user nobody (65534),
 * under a memlock limit of @memlock bytes unless it is negative; NULL
 * when this machine cannot (it needs root, setpriv, and prlimit for the
 * limit): the caller skips, saying why. A static buffer. The program
 * path must follow it as the next word: when nobody cannot reach the
 * build tree, the prefix runs a copy of it (and of libnvswap). */
const char *tu_nobody_prefix(long memlock);

/* Drop to user nobody (65534) if root; false when that is impossible. */
bool tu_drop_root(void);

/*
 * Run case @name of tests/common/nobody.c as user nobody: fork, set
 * RLIMIT_MEMLOCK to @memlock bytes when @memlock >= 0, drop root (the test
 * process keeps it, to clean up), exec the helper ($NVSWAP_TEST_NOBODY)
 * with tu_dir(). The case fills @out (zeroed first). Returns false when
 * the child could not set the limit or drop root: the caller skips,
 * saying why. A fresh process, not the fork: a forked child of a
 * threaded process can hang on its first malloc under ASan.
 */
bool tu_as_nobody(const char *name, long memlock, struct tu_child *out);

#endif
