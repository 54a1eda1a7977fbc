// SPDX-License-Identifier: MIT
/*
 * What the swap manager costs over hand-written aio: a layer walk (read
 * layer l+1 ahead, use layer l, write it back) over LAYERS tensors with a
 * pool of BUFFERS, done (a) through nvs_swapper prefetch/acquire/release/
 * evict and (b) by hand with the same aio handle settings, tickets and the
 * same buffer discipline, interleaved repeat by repeat in one run. Prints
 * GB/s (read + written bytes per second) medians with min-max and the
 * ratio swapper / hand-written. Public API only.
 *
 *   nvswap-bench-swap [--dir D] [--layers N] [--tensor-size N[K|M|G]]
 *                     [--buffers N] [--reps N] [--queue-depth N]
 *                     [--block-size N] [--checksum-cost]
 *
 * --checksum-cost compares the swapper with checksums on (CRC32C of each
 * tensor written, verified when read) against the same swapper with them
 * off, in place of the hand-written twin.
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_REPS 64
#define MAX_LAYERS 4096

static struct {
	const char *dir;
	unsigned layers, buffers, reps, qd, bs;
	size_t size;
	bool crc; /* --checksum-cost: checksum on against off, not hand */
} cfg = {"nvme_swap", 16, 4, 5, 32, 1u << 20, 64u << 20, false};

/* Touch a layer as compute would: one byte per page changes. */
static void use(unsigned char *p, size_t n, unsigned pass)
{
	for (size_t i = 0; i < n; i += 4096)
		p[i] = (unsigned char)(p[i] + pass);
}

static struct nvs_swapper *swapper_make(const char *name, bool checksum)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;

	nvs_swapper_opts_init(&o);
	o.npaths = 1;
	o.nvme_paths[0] = cfg.dir;
	o.name = name;
	o.checksum = checksum;
	o.buffer_size = cfg.size;
	o.buffer_count = cfg.buffers;
	o.aio.queue_depth = cfg.qd;
	o.aio.block_size = cfg.bs;
	o.aio.overlap_events = true;
	if (nvs_swapper_create(&o, &s) < 0)
		return NULL;
	for (unsigned l = 0; l < cfg.layers; l++)
		if (nvs_swapper_register(s, l, cfg.size, NULL) < 0)
			return NULL;
	return s;
}

static int swapper_pass(struct nvs_swapper *s, unsigned pass)
{
	int ret = nvs_swapper_prefetch(s, 0);

	for (unsigned l = 0; l < cfg.layers && ret == 0; l++) {
		void *p;
		if (l + 1 < cfg.layers &&
		    (ret = nvs_swapper_prefetch(s, l + 1)) < 0)
			break;
		if ((ret = nvs_swapper_acquire(s, l, &p)) < 0)
			break;
		use(p, cfg.size, pass);
		if ((ret = nvs_swapper_release(s, l, true)) < 0)
			break;
		ret = nvs_swapper_evict(s, l);
	}
	return ret < 0 ? ret : nvs_swapper_wait_all(s);
}

/* The hand-written twin: same handle settings, one file, layer l at
 * l * size, a ring of pinned buffers; a buffer is free again when its
 * write-back's ticket is collected. */
struct hand {
	struct nvs_aio *h;
	int fd;
	void *buf[64];
	uint64_t rd[MAX_LAYERS], wr[MAX_LAYERS];
	int owner[64]; /* layer in the buffer, -1 free */
	int writing[64];
};

static struct hand *hand_make(void)
{
	struct hand *x = calloc(1, sizeof(*x));
	struct nvs_aio_opts o;
	char path[4200];

	if (!x)
		return NULL;
	nvs_aio_opts_init(&o);
	o.queue_depth = cfg.qd;
	o.block_size = cfg.bs;
	o.overlap_events = true;
	o.max_ops = 4096;
	snprintf(path, sizeof(path), "%s/bench-hand.swap", cfg.dir);
	x->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	unlink(path);
	if (x->fd < 0 || nvs_aio_create(&o, &x->h) < 0 ||
	    ftruncate(x->fd, (off_t)(cfg.size * cfg.layers)) < 0)
		return NULL;
	for (unsigned i = 0; i < cfg.buffers; i++) {
		x->buf[i] = nvs_pinned_alloc(cfg.size, NULL);
		if (!x->buf[i])
			return NULL;
		x->owner[i] = x->writing[i] = -1;
	}
	return x;
}

static int op(struct hand *x, enum nvs_aio_opcode opc, unsigned b, unsigned l,
	      uint64_t *ticket)
{
	struct nvs_aio_io io = {
		.opcode = opc,
		.buf = x->buf[b],
		.nbytes = cfg.size,
		.fd = x->fd,
		.offset = (int64_t)(cfg.size * l),
	};
	return nvs_aio_submit(x->h, &io, ticket);
}

/* A free buffer for a read: collect the oldest write-back if none. */
static int take(struct hand *x)
{
	for (;;) {
		int oldest = -1;
		for (unsigned i = 0; i < cfg.buffers; i++) {
			if (x->owner[i] < 0 && x->writing[i] < 0)
				return (int)i;
			if (x->writing[i] >= 0 &&
			    (oldest < 0 || x->writing[i] < x->writing[oldest]))
				oldest = (int)i;
		}
		if (oldest < 0)
			return -EDEADLK;
		int ret = nvs_aio_wait_op(x->h, x->wr[x->writing[oldest]]);
		x->writing[oldest] = -1;
		if (ret < 0)
			return ret;
	}
}

static int hand_pass(struct hand *x, unsigned pass)
{
	int slot[MAX_LAYERS];
	int b, ret;

	if ((b = take(x)) < 0)
		return b;
	x->owner[b] = 0;
	slot[0] = b;
	if ((ret = op(x, NVS_AIO_READ, (unsigned)b, 0, &x->rd[0])) < 0)
		return ret;
	for (unsigned l = 0; l < cfg.layers; l++) {
		if (l + 1 < cfg.layers) {
			if ((b = take(x)) < 0)
				return b;
			x->owner[b] = (int)l + 1;
			slot[l + 1] = b;
			ret = op(x, NVS_AIO_READ, (unsigned)b, l + 1,
				 &x->rd[l + 1]);
			if (ret < 0)
				return ret;
		}
		if ((ret = nvs_aio_wait_op(x->h, x->rd[l])) < 0)
			return ret;
		b = slot[l];
		use(x->buf[b], cfg.size, pass);
		if ((ret = op(x, NVS_AIO_WRITE, (unsigned)b, l, &x->wr[l])) < 0)
			return ret;
		x->owner[b] = -1;
		x->writing[b] = (int)l;
	}
	for (unsigned i = 0; i < cfg.buffers; i++)
		if (x->writing[i] >= 0) {
			ret = nvs_aio_wait_op(x->h, x->wr[x->writing[i]]);
			x->writing[i] = -1;
			if (ret < 0)
				return ret;
		}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: nvswap-bench-swap [--dir D] [--layers N] "
			"[--tensor-size N] [--buffers N] [--reps N] "
			"[--queue-depth N] [--block-size N] "
			"[--checksum-cost]\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dir", required_argument, NULL, 'd'},
		{"layers", required_argument, NULL, 'l'},
		{"tensor-size", required_argument, NULL, 's'},
		{"buffers", required_argument, NULL, 'b'},
		{"reps", required_argument, NULL, 'r'},
		{"queue-depth", required_argument, NULL, 'q'},
		{"block-size", required_argument, NULL, 'k'},
		{"checksum-cost", no_argument, NULL, 'c'},
		{NULL, 0, NULL, 0},
	};
	double t_swap[MAX_REPS], t_hand[MAX_REPS], ratio[MAX_REPS];
	struct nvs_swapper *s, *s2;
	struct hand *x;
	const char *other;
	size_t v;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			cfg.dir = optarg;
			break;
		case 'l':
			cfg.layers = (unsigned)atoi(optarg);
			break;
		case 's':
		case 'k':
			if (bench_parse_size(optarg, &v) < 0) {
				usage();
				return 2;
			}
			if (c == 's')
				cfg.size = v;
			else
				cfg.bs = (unsigned)v;
			break;
		case 'b':
			cfg.buffers = (unsigned)atoi(optarg);
			break;
		case 'r':
			cfg.reps = (unsigned)atoi(optarg);
			break;
		case 'q':
			cfg.qd = (unsigned)atoi(optarg);
			break;
		case 'c':
			cfg.crc = true;
			break;
		default:
			usage();
			return 2;
		}
	}
	if (cfg.layers < 2 || cfg.layers > MAX_LAYERS || cfg.buffers < 2 ||
	    cfg.buffers > 64 || !cfg.reps || cfg.reps > MAX_REPS ||
	    cfg.size % 4096) {
		usage();
		return 2;
	}
	mkdir(cfg.dir, 0700);
	s = swapper_make("bench", false);
	if (!s) {
		fprintf(stderr, "swapper: %s\n", nvs_last_error());
		return 1;
	}
	if (cfg.crc) {
		x = NULL;
		s2 = swapper_make("bench-crc", true);
	} else {
		s2 = NULL;
		x = hand_make();
	}
	if (!x && !s2) {
		fprintf(stderr, "%s: %s\n",
			cfg.crc ? "checksum" : "hand-written",
			nvs_last_error());
		return 1;
	}
	/* One untimed pass each: files allocated, caches warm. */
	if (swapper_pass(s, 0) < 0 ||
	    (x ? hand_pass(x, 0) : swapper_pass(s2, 0)) < 0) {
		fprintf(stderr, "warm-up: %s\n", nvs_last_error());
		return 1;
	}
	other = cfg.crc ? "checksum on" : "hand-written";
	double bytes = 2.0 * (double)cfg.size * cfg.layers;
	for (unsigned r = 0; r < cfg.reps; r++) {
		double t0 = bench_now();
		if (swapper_pass(s, r + 1) < 0) {
			fprintf(stderr, "swapper: %s\n", nvs_last_error());
			return 1;
		}
		double t1 = bench_now();
		if ((x ? hand_pass(x, r + 1) : swapper_pass(s2, r + 1)) < 0) {
			fprintf(stderr, "%s: %s\n", other, nvs_last_error());
			return 1;
		}
		double t2 = bench_now();
		t_swap[r] = bytes / (t1 - t0) / 1e9;
		t_hand[r] = bytes / (t2 - t1) / 1e9;
		ratio[r] = t_swap[r] / t_hand[r];
		if (getenv("BENCH_VERBOSE"))
			fprintf(stderr, "rep %u: swapper %.2f %s %.2f\n", r,
				t_swap[r], other, t_hand[r]);
	}
	struct nvs_swap_stats st;
	nvs_swapper_stats(s, &st);
	printf("layer walk: %u layers x %zu KiB, %u buffers, qd %u, block "
	       "%u KiB, backend %s, %u reps\n",
	       cfg.layers, cfg.size >> 10, cfg.buffers, cfg.qd, cfg.bs >> 10,
	       nvs_backend_name(st.backend), cfg.reps);
	double ms = bench_median(t_swap, (int)cfg.reps);
	double mh = bench_median(t_hand, (int)cfg.reps);
	double mr = bench_median(ratio, (int)cfg.reps);
	printf("  swapper       %6.2f GB/s (%.2f-%.2f)\n", ms, t_swap[0],
	       t_swap[cfg.reps - 1]);
	printf("  %-13s %6.2f GB/s (%.2f-%.2f)\n", other, mh, t_hand[0],
	       t_hand[cfg.reps - 1]);
	printf("  ratio swapper/%s: median %.3f (%.3f-%.3f)\n", other, mr,
	       ratio[0], ratio[cfg.reps - 1]);
	printf("  swapper blocked in acquire %.0f ms over all passes, pool "
	       "high water %u\n",
	       (double)st.acquire_wait_ns / 1e6, st.pool_high_water);
	if (nvs_swapper_destroy(s) < 0) {
		fprintf(stderr, "destroy: %s\n", nvs_last_error());
		return 1;
	}
	if (s2 && nvs_swapper_destroy(s2) < 0) {
		fprintf(stderr, "destroy: %s\n", nvs_last_error());
		return 1;
	}
	if (!x)
		return 0;
	for (unsigned i = 0; i < cfg.buffers; i++)
		nvs_pinned_free(x->buf[i]);
	nvs_aio_destroy(x->h);
	close(x->fd);
	free(x);
	return 0;
}
