// SPDX-License-Identifier: MIT
/*
 * What already held when nvswap was tried as a hostile user would, kept
 * under test: a storm of signals whose handler has no SA_RESTART while
 * tensors swap, and fork() with write-backs in flight. Neither may cost an
 * error or a byte.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "testutil.h"

enum { BUF = 256 << 10, NT = 8 };

static void fini(void)
{
	tu_cleanup();
}

TestSuite(keep, .fini = fini);

static struct nvs_swapper *make(void)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = tu_dir();
	o.buffer_size = BUF;
	o.buffer_count = 3;
	o.checksum = true;
	o.aio.block_size = 64 << 10;
	o.aio.intra_op_parallelism = 2;
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* Every tensor reads back as @ref; frees @ref's copies. */
static void read_back_and_free(struct nvs_swapper *s, unsigned char **ref)
{
	for (int i = 0; i < NT; i++) {
		void *p;

		cr_assert_eq(nvs_swapper_acquire(s, (uint64_t)i, &p), 0, "%s",
			     nvs_last_error());
		cr_assert(!memcmp(p, ref[i], BUF), "tensor %d differs", i);
		cr_assert_eq(nvs_swapper_release(s, (uint64_t)i, false), 0);
		free(ref[i]);
	}
}

static atomic_ulong delivered;
static atomic_bool stop;

static void on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add_explicit(&delivered, 1, memory_order_relaxed);
}

/* Sends SIGUSR1 to the process (any thread may take it: the caller's, a
 * worker inside io_uring_enter, io_getevents or pread) until told to
 * stop. */
static void *storm(void *arg)
{
	sigset_t me;

	(void)arg;
	sigemptyset(&me);
	sigaddset(&me, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &me, NULL);
	while (!atomic_load(&stop)) {
		kill(getpid(), SIGUSR1);
		for (volatile int i = 0; i < 2000; i++)
			;
	}
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(keep, signals_without_sa_restart_during_swapping_cost_no_error_or_byte)
{
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART */
	struct nvs_swapper *s = make();
	unsigned char *ref[NT];
	unsigned long rounds = 0;
	pthread_t t;
	double t0;

	alarm(120); /* a hang fails the test (no .timeout: its runner
		    * leaks under LeakSanitizer when it fires) */
	for (int i = 0; i < NT; i++) {
		cr_assert_not_null(ref[i] = malloc(BUF));
		tu_fill(ref[i], BUF, (uint64_t)i);
		cr_assert_eq(nvs_swapper_register(s, (uint64_t)i, BUF, ref[i]),
			     0, "%s", nvs_last_error());
	}
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	cr_assert_eq(pthread_create(&t, NULL, storm, NULL), 0);
	t0 = now();
	/* Swap until at least 30,000 signals have landed (or 60 s). */
	while (atomic_load(&delivered) < 30000 && now() - t0 < 60) {
		int id = (int)(rounds++ % NT);
		void *p;

		cr_assert_eq(nvs_swapper_prefetch(s, (uint64_t)(id + 1) % NT),
			     0, "%s", nvs_last_error());
		cr_assert_eq(nvs_swapper_acquire(s, (uint64_t)id, &p), 0,
			     "round %lu: %s", rounds, nvs_last_error());
		cr_assert(!memcmp(p, ref[id], BUF), "tensor %d differs", id);
		tu_fill(ref[id], BUF, rounds);
		memcpy(p, ref[id], BUF);
		cr_assert_eq(nvs_swapper_release(s, (uint64_t)id, true), 0);
		cr_assert_eq(nvs_swapper_evict(s, (uint64_t)id), 0, "%s",
			     nvs_last_error());
	}
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	cr_assert_eq(nvs_swapper_wait_all(s), 0, "%s", nvs_last_error());
	read_back_and_free(s, ref);
	cr_assert_geq(atomic_load(&delivered), 30000,
		      "only %lu signals landed in 60 s",
		      (unsigned long)atomic_load(&delivered));
	cr_log_info("%lu signals during %lu swap rounds",
		    (unsigned long)atomic_load(&delivered), rounds);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(keep, fork_with_write_backs_in_flight_leaves_the_parent_correct)
{
	struct nvs_swapper *s = make();
	unsigned char *ref[NT];
	int status;

	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < NT; i++) {
			void *p;

			if (round == 0) {
				cr_assert_not_null(ref[i] = malloc(BUF));
				cr_assert_eq(nvs_swapper_register(
						     s, (uint64_t)i, BUF, NULL),
					     0);
			}
			cr_assert_eq(nvs_swapper_acquire(s, (uint64_t)i, &p), 0,
				     "%s", nvs_last_error());
			tu_fill(ref[i], BUF, (uint64_t)(round * NT + i));
			memcpy(p, ref[i], BUF);
			cr_assert_eq(nvs_swapper_release(s, (uint64_t)i, true),
				     0);
			/* The write-back starts and is in flight at fork. */
			cr_assert_eq(nvs_swapper_evict(s, (uint64_t)i), 0);
		}
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0)
			_exit(0);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		cr_assert_eq(nvs_swapper_wait_all(s), 0, "%s",
			     nvs_last_error());
	}
	read_back_and_free(s, ref);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

/* Two threads each make and destroy a named swapper in one nvme_path,
 * over and over: the last one out removes <nvme_path>/nvswap while the
 * other may be walking into it. Every create must still succeed. */
static void *churn(void *arg)
{
	const char *name = arg;
	uintptr_t failures = 0;

	for (int i = 0; i < 300; i++) {
		struct nvs_swapper_opts o;
		struct nvs_swapper *s = NULL;

		nvs_swapper_opts_init(&o);
		o.npaths = 1;
		o.nvme_paths[0] = tu_dir();
		o.name = name;
		o.buffer_size = 4096;
		o.buffer_count = 1;
		if (nvs_swapper_create(&o, &s) < 0) {
			cr_log_error("%s: %s", name, nvs_last_error());
			failures++;
			continue;
		}
		if (nvs_swapper_destroy(s) < 0)
			failures++;
	}
	return (void *)failures;
}

Test(keep, swappers_made_and_destroyed_on_two_threads_share_the_nvswap_dir)
{
	pthread_t a, b;
	void *fa, *fb;

	(void)tu_dir();
	cr_assert_eq(pthread_create(&a, NULL, churn, "a"), 0);
	cr_assert_eq(pthread_create(&b, NULL, churn, "b"), 0);
	pthread_join(a, &fa);
	pthread_join(b, &fb);
	cr_assert_eq((uintptr_t)fa + (uintptr_t)fb, 0,
		     "%lu creates or destroys failed",
		     (unsigned long)((uintptr_t)fa + (uintptr_t)fb));
}
