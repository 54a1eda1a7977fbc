// SPDX-License-Identifier: MIT
/*
 * Device memory to and from disk against its two limits, in one run on
 * one file: (a) the disk, read and written from pinned host memory
 * through an aio handle; (b) the PCIe link, pinned host <-> device copies
 * (nvs_gpu_memcpy); (c) device memory read and written through the same
 * handle (staged through its pinned bounce slots); (d) the same through a
 * use_gds handle (cuFile; its mode from nvs_gpu_info()). Each kind N
 * repeats, interleaved repeat by repeat; the page cache is dropped
 * (posix_fadvise) before each read. Every device read is copied back and
 * compared with what was written, every device write is read back on its
 * last repeat: a fast wrong path cannot score. Prints medians with
 * min-max and the ratios device / min(disk, copy) (the target is 0.9);
 * --json FILE writes the same figures. Public API only.
 *
 *   nvswap-bench-gpu-stage [--dir D] [--size N[K|M|G]] [--reps N]
 *                          [--block-size N] [--queue-depth N]
 *                          [--parallelism N] [--device N] [--no-gds]
 *                          [--json FILE]
 *
 * Exit status 77 (skipped, with a sentence) where there is no GPU.
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

enum kind {
	DISK_READ,
	DISK_WRITE,
	H2D,
	D2H,
	STAGED_READ,
	STAGED_WRITE,
	GDS_READ,
	GDS_WRITE,
	NKINDS
};

static const char *const kind_key[NKINDS] = {
	[DISK_READ] = "disk_read",
	[DISK_WRITE] = "disk_write",
	[H2D] = "copy_h2d",
	[D2H] = "copy_d2h",
	[STAGED_READ] = "staged_read",
	[STAGED_WRITE] = "staged_write",
	[GDS_READ] = "gds_read",
	[GDS_WRITE] = "gds_write",
};

static const char *const kind_name[NKINDS] = {
	[DISK_READ] = "disk -> pinned host (aio)",
	[DISK_WRITE] = "pinned host -> disk (aio)",
	[H2D] = "pinned host -> device (copy)",
	[D2H] = "device -> pinned host (copy)",
	[STAGED_READ] = "disk -> device (aio, staged)",
	[STAGED_WRITE] = "device -> disk (aio, staged)",
	[GDS_READ] = "disk -> device (aio, use_gds)",
	[GDS_WRITE] = "device -> disk (aio, use_gds)",
};

static struct {
	const char *dir, *json;
	size_t size;
	int reps, device;
	bool gds;
} cfg = {"nvme_swap", NULL, 2ull << 30, 5, 0, true};

static double gbs[NKINDS][MAX_REPS];
static int nrun[NKINDS];

static void fill(unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = (i * 0x9E3779B97F4A7C15ull) ^ 0x5157A6Eull;
		memcpy(b + i, &v, n - i < 8 ? n - i : 8);
	}
}

/* Write back and drop @path's cached pages, so the next read is the
 * disk's (O_DIRECT bypasses the cache anyway, unless it fell back). */
static void drop_cache(const char *path)
{
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return;
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

static void record(int k, double t0)
{
	gbs[k][nrun[k]++] = (double)cfg.size / (bench_now() - t0) / 1e9;
}

struct fig {
	double med, min, max;
	bool have;
};

static struct fig figure(int k)
{
	struct fig f = {0, 0, 0, nrun[k] > 0};

	if (f.have) {
		f.med = bench_median(gbs[k], nrun[k]);
		f.min = gbs[k][0];
		f.max = gbs[k][nrun[k] - 1];
	}
	return f;
}

static double min2(double a, double b)
{
	return a < b ? a : b;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [--dir D] [--size N[K|M|G]] [--reps N] "
		"[--block-size N] [--queue-depth N] [--parallelism N] "
		"[--device N] [--no-gds] [--json FILE]\n",
		argv0);
}

static int parse(int argc, char **argv, struct nvs_aio_opts *o)
{
	static const struct option lo[] = {
		{"dir", required_argument, NULL, 'd'},
		{"size", required_argument, NULL, 's'},
		{"reps", required_argument, NULL, 'r'},
		{"block-size", required_argument, NULL, 'b'},
		{"queue-depth", required_argument, NULL, 'q'},
		{"parallelism", required_argument, NULL, 'p'},
		{"device", required_argument, NULL, 'D'},
		{"no-gds", no_argument, NULL, 'G'},
		{"json", required_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	size_t v;
	int c;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			cfg.dir = optarg;
			break;
		case 's':
			if (bench_parse_size(optarg, &cfg.size) < 0)
				return -1;
			break;
		case 'r':
			cfg.reps = atoi(optarg);
			if (cfg.reps < 1 || cfg.reps > MAX_REPS)
				return -1;
			break;
		case 'b':
			if (bench_parse_size(optarg, &v) < 0 || v > UINT32_MAX)
				return -1;
			o->block_size = (uint32_t)v;
			break;
		case 'q':
			o->queue_depth = (uint32_t)atoi(optarg);
			break;
		case 'p':
			o->intra_op_parallelism = (uint32_t)atoi(optarg);
			break;
		case 'D':
			cfg.device = atoi(optarg);
			break;
		case 'G':
			cfg.gds = false;
			break;
		case 'j':
			cfg.json = optarg;
			break;
		default:
			return c == 'h' ? 1 : -1;
		}
	}
	return optind == argc ? 0 : -1;
}

/* @s as a JSON string. */
static void jstr(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void print_json(FILE *f, const struct nvs_gpu_info *gi,
		       const char *backend, const struct nvs_aio *h,
		       const char *gds_note, const char *cuda)
{
	const char *keys[] = {"version",     "backend",	      "gpu",
			      "cufile_mode", "cufile_status", "gds_note",
			      "pinned_cuda"};
	const char *vals[] = {
		nvs_version(),	   backend,  gi->device0, gi->cufile_mode,
		gi->cufile_status, gds_note, cuda};

	fprintf(f, "{\n  \"bench\": \"gpu_stage\"");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		fprintf(f, ",\n  \"%s\": ", keys[i]);
		jstr(f, vals[i]);
	}
	fprintf(f,
		",\n  \"size\": %zu,\n  \"reps\": %d,\n"
		"  \"block_size\": %u,\n  \"queue_depth\": %u,\n"
		"  \"intra_op_parallelism\": %u,\n  \"pcie_gen\": %d,\n"
		"  \"pcie_width\": %d,\n  \"nvidia_fs\": %s,\n  \"gbps\": {",
		cfg.size, cfg.reps, nvs_aio_get_block_size(h),
		nvs_aio_get_queue_depth(h), nvs_aio_get_intra_op_parallelism(h),
		gi->device0_pcie_gen, gi->device0_pcie_width,
		gi->nvfs ? "true" : "false");
	for (int k = 0; k < NKINDS; k++) {
		struct fig x = figure(k);
		fprintf(f, "%s\n    \"%s\": ", k ? "," : "", kind_key[k]);
		if (!x.have) {
			fprintf(f, "null");
			continue;
		}
		fprintf(f,
			"{\"median\": %.3f, \"min\": %.3f, \"max\": %.3f, "
			"\"samples\": [",
			x.med, x.min, x.max);
		for (int r = 0; r < nrun[k]; r++)
			fprintf(f, "%s%.3f", r ? ", " : "", gbs[k][r]);
		fprintf(f, "]}");
	}
	fprintf(f, "\n  },\n  \"ratios\": {");
	static const int dev[4] = {STAGED_READ, STAGED_WRITE, GDS_READ,
				   GDS_WRITE};
	for (int i = 0; i < 4; i++) {
		int k = dev[i];
		bool rd = k == STAGED_READ || k == GDS_READ;
		struct fig d = figure(k),
			   disk = figure(rd ? DISK_READ : DISK_WRITE),
			   cp = figure(rd ? H2D : D2H);
		fprintf(f, "%s\n    \"%s\": ", i ? "," : "", kind_key[k]);
		if (d.have && disk.have && cp.have)
			fprintf(f, "%.3f", d.med / min2(disk.med, cp.med));
		else
			fprintf(f, "null");
	}
	fprintf(f, "\n  },\n  \"target\": 0.9\n}\n");
}

/* Time one aio op of the whole size; -1 (message printed) on failure. */
static int timed_io(struct nvs_aio *h, int k, void *buf, const char *path,
		    bool write)
{
	double t0;
	int ret;

	if (write)
		unlink(path);
	else
		drop_cache(path);
	t0 = bench_now();
	ret = write ? nvs_aio_sync_pwrite(h, buf, cfg.size, path, 0)
		    : nvs_aio_sync_pread(h, buf, cfg.size, path, 0);
	if (ret < 0) {
		fprintf(stderr, "%s: %s\n", kind_name[k], nvs_last_error());
		return -1;
	}
	record(k, t0);
	if (write)
		drop_cache(path); /* untimed: the next op starts drained */
	return 0;
}

/* Device memory @d against @ref, through @tmp (host). */
static int check_device(const void *d, unsigned char *tmp,
			const unsigned char *ref, const char *what)
{
	memset(tmp, 0, cfg.size);
	if (nvs_gpu_memcpy(tmp, d, cfg.size) < 0) {
		fprintf(stderr, "copy back after %s: %s\n", what,
			nvs_last_error());
		return -1;
	}
	if (memcmp(tmp, ref, cfg.size)) {
		fprintf(stderr, "VERIFY FAILED: %s: device memory differs\n",
			what);
		return -1;
	}
	return 0;
}

static int check_file(const char *path, unsigned char *tmp,
		      const unsigned char *ref, const char *what)
{
	memset(tmp, 0, cfg.size);
	if (bench_read_file(path, tmp, cfg.size) < 0 ||
	    memcmp(tmp, ref, cfg.size)) {
		fprintf(stderr, "VERIFY FAILED: %s: %s reads back wrong\n",
			what, path);
		return -1;
	}
	return 0;
}

/* Why the use_gds handle failed, if it did: the rest runs without it. */
static char gds_failed[512];

/* One repeat of every kind, reads first (of the file written once),
 * then writes, each to a new file. */
static int one_rep(struct nvs_aio *h, struct nvs_aio *hg, unsigned char *hb,
		   void *db, const unsigned char *ref, const char *path,
		   const char *wpath, bool last)
{
	double t0;

	/* (a) disk -> host, checked */
	memset(hb, 0, cfg.size);
	if (timed_io(h, DISK_READ, hb, path, false) < 0)
		return -1;
	if (memcmp(hb, ref, cfg.size)) {
		fprintf(stderr, "VERIFY FAILED: %s\n", kind_name[DISK_READ]);
		return -1;
	}
	/* (b) the link both ways (hb holds the pattern) */
	t0 = bench_now();
	if (nvs_gpu_memcpy(db, hb, cfg.size) < 0)
		goto copy_fail;
	record(H2D, t0);
	memset(hb, 0, cfg.size);
	t0 = bench_now();
	if (nvs_gpu_memcpy(hb, db, cfg.size) < 0)
		goto copy_fail;
	record(D2H, t0);
	if (memcmp(hb, ref, cfg.size)) {
		fprintf(stderr, "VERIFY FAILED: host -> device -> host\n");
		return -1;
	}
	/* (c), (d) disk -> device, each checked */
	struct nvs_aio *hk[2] = {h, hg};
	for (int i = 0; i < 2; i++) {
		int k = i ? GDS_READ : STAGED_READ;
		if (!hk[i])
			continue;
		if (nvs_gpu_memset(db, 0, cfg.size) < 0)
			goto copy_fail;
		if (i == 1 && timed_io(hk[i], k, db, path, false) < 0) {
			/* cuFile refused: say why, run the rest without it */
			snprintf(gds_failed, sizeof(gds_failed), "%s",
				 nvs_last_error());
			fprintf(stderr, "use_gds read failed: %s\n",
				gds_failed);
			hk[1] = NULL;
			continue;
		}
		if ((i == 0 && timed_io(hk[i], k, db, path, false) < 0) ||
		    check_device(db, hb, ref, kind_name[k]) < 0)
			return -1;
	}
	/* Writes: db holds the pattern now. */
	memcpy(hb, ref, cfg.size);
	if (timed_io(h, DISK_WRITE, hb, wpath, true) < 0 ||
	    (last && check_file(wpath, hb, ref, kind_name[DISK_WRITE]) < 0))
		return -1;
	for (int i = 0; i < 2; i++) {
		int k = i ? GDS_WRITE : STAGED_WRITE;
		if (!hk[i])
			continue;
		if (timed_io(hk[i], k, db, wpath, true) < 0 ||
		    (last && check_file(wpath, hb, ref, kind_name[k]) < 0))
			return -1;
	}
	memcpy(hb, ref, cfg.size);
	return 0;
copy_fail:
	fprintf(stderr, "device copy: %s\n", nvs_last_error());
	return -1;
}

static void print_table(const struct nvs_gpu_info *gi)
{
	printf("\n| path | GB/s median (min-max) |\n|---|---|\n");
	for (int k = 0; k < NKINDS; k++) {
		struct fig x = figure(k);
		if (x.have)
			printf("| %s | %.2f (%.2f-%.2f) |\n", kind_name[k],
			       x.med, x.min, x.max);
		else
			printf("| %s | not run |\n", kind_name[k]);
	}
	printf("\n| device path | vs min(disk, copy) | target |\n"
	       "|---|---|---|\n");
	static const int dev[4] = {STAGED_READ, STAGED_WRITE, GDS_READ,
				   GDS_WRITE};
	for (int i = 0; i < 4; i++) {
		int k = dev[i];
		bool rd = k == STAGED_READ || k == GDS_READ;
		struct fig d = figure(k),
			   disk = figure(rd ? DISK_READ : DISK_WRITE),
			   cp = figure(rd ? H2D : D2H);
		if (!d.have)
			continue;
		double r = d.med / min2(disk.med, cp.med);
		printf("| %s%s | %.2f | 0.90 %s |\n", kind_name[k],
		       k >= GDS_READ ? (gi->nvfs ? " GDS" : " compat") : "", r,
		       r >= 0.9 ? "met" : "MISSED");
	}
}

int main(int argc, char **argv)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = NULL, *hg = NULL;
	struct nvs_aio_stats st, sg;
	struct nvs_gpu_info gi;
	unsigned char *hb, *ref;
	void *db = NULL;
	char path[4096], wpath[4096], gds_note[256] = "";
	int n, err, rc = 0;

	nvs_aio_opts_init(&o);
	n = parse(argc, argv, &o);
	if (n != 0) {
		usage(argv[0]);
		return n > 0 ? 0 : 2;
	}
	n = nvs_gpu_open();
	if (n < 0) {
		printf("skipped: no GPU here: %s\n", nvs_last_error());
		return 77;
	}
	if (cfg.device >= n) {
		fprintf(stderr, "--device %d: only %d device%s\n", cfg.device,
			n, n == 1 ? "" : "s");
		return 2;
	}
	nvs_gpu_info(&gi);
	if (mkdir(cfg.dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "mkdir %s: %s\n", cfg.dir, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/bench-gpu-stage.swp", cfg.dir);
	snprintf(wpath, sizeof(wpath), "%s/bench-gpu-stage-w.swp", cfg.dir);

	hb = nvs_pinned_alloc(cfg.size, &err);
	ref = malloc(cfg.size);
	if (!hb || !ref) {
		fprintf(stderr, "host memory for 2 x %zu bytes: %s\n", cfg.size,
			hb ? "malloc failed" : nvs_last_error());
		return 1;
	}
	if (nvs_gpu_malloc(cfg.device, cfg.size, &db) < 0) {
		fprintf(stderr, "device memory: %s\n", nvs_last_error());
		return 1;
	}
	fill(ref, cfg.size);
	memcpy(hb, ref, cfg.size);
	if (nvs_aio_create(&o, &h) < 0) {
		fprintf(stderr, "nvs_aio_create: %s\n", nvs_last_error());
		return 1;
	}
	if (cfg.gds) {
		o.use_gds = true;
		if (nvs_aio_create(&o, &hg) < 0) {
			snprintf(gds_note, sizeof(gds_note),
				 "no use_gds handle: %s", nvs_last_error());
			hg = NULL;
		}
	} else {
		snprintf(gds_note, sizeof(gds_note), "not run (--no-gds)");
	}
	printf("nvswap %s: %zu MiB on %s, backend %s, block %u KiB, queue "
	       "depth %u, parallelism %u; %d interleaved repeats\n"
	       "GPU %d of %d: %s, %.0f GiB, PCIe gen%d x%d (current link), "
	       "driver %d (%s)\ncuFile: %s %s%s%s\npinned host memory: %s\n",
	       nvs_version(), cfg.size >> 20, path, nvs_aio_backend_name(h),
	       nvs_aio_get_block_size(h) >> 10, nvs_aio_get_queue_depth(h),
	       nvs_aio_get_intra_op_parallelism(h), cfg.reps, cfg.device, n,
	       gi.device0, (double)gi.device0_bytes / (1u << 30),
	       gi.device0_pcie_gen, gi.device0_pcie_width, gi.driver_version,
	       gi.driver_lib, gi.cufile_mode[0] ? gi.cufile_mode : "none",
	       gi.cufile_status, gds_note[0] ? "; " : "", gds_note,
	       nvs_pinned_cuda_status());
	fflush(stdout);

	/* The file read by every repeat, written and synced once. */
	unlink(path);
	if (nvs_aio_sync_pwrite(h, hb, cfg.size, path, 0) < 0) {
		fprintf(stderr, "writing %s: %s\n", path, nvs_last_error());
		return 1;
	}
	drop_cache(path);
	for (int r = 0; r < cfg.reps && rc == 0; r++)
		if (one_rep(h, gds_failed[0] ? NULL : hg, hb, db, ref, path,
			    wpath, r == cfg.reps - 1) < 0)
			rc = 1;
	if (gds_failed[0])
		printf("cuFile: the use_gds handle failed, not measured: %s\n",
		       gds_failed);
	nvs_aio_get_stats(h, &st);
	memset(&sg, 0, sizeof(sg));
	if (hg)
		nvs_aio_get_stats(hg, &sg);
	/* The device ops must have taken the path they are named after. */
	uint64_t dev_ops = 2ull * (uint64_t)nrun[STAGED_READ] * cfg.size;
	uint64_t gds_ops = 2ull * (uint64_t)nrun[GDS_READ] * cfg.size;
	if (rc == 0 && (st.device_bytes != dev_ops || st.gds_bytes != 0 ||
			(hg && sg.gds_bytes != gds_ops))) {
		fprintf(stderr,
			"PATH CHECK FAILED: staged handle device_bytes %llu "
			"(expected %llu), gds_bytes %llu (expected 0); use_gds "
			"handle gds_bytes %llu (expected %llu)\n",
			(unsigned long long)st.device_bytes,
			(unsigned long long)dev_ops,
			(unsigned long long)st.gds_bytes,
			(unsigned long long)sg.gds_bytes,
			(unsigned long long)gds_ops);
		rc = 1;
	}
	printf("\nstaged handle: %llu device bytes, %llu requests (%llu "
	       "bounced); use_gds handle: %llu bytes by cuFile, %llu device "
	       "bytes staged\n",
	       (unsigned long long)st.device_bytes,
	       (unsigned long long)st.requests,
	       (unsigned long long)st.bounced_requests,
	       (unsigned long long)sg.gds_bytes,
	       (unsigned long long)sg.device_bytes);
	print_table(&gi);
	if (cfg.json) {
		FILE *f = fopen(cfg.json, "w");
		if (!f) {
			fprintf(stderr, "%s: %s\n", cfg.json, strerror(errno));
			rc = 1;
		} else {
			print_json(f, &gi, nvs_aio_backend_name(h), h, gds_note,
				   nvs_pinned_cuda_status());
			fclose(f);
		}
	}
	unlink(path);
	unlink(wpath);
	if (nvs_aio_destroy(hg) < 0 || nvs_aio_destroy(h) < 0) {
		fprintf(stderr, "destroy: %s\n", nvs_last_error());
		rc = 1;
	}
	nvs_gpu_free(db);
	nvs_pinned_free(hb);
	free(ref);
	return rc;
}
