// SPDX-License-Identifier: MIT
/*
 * nvswap-io --compare-fio: fio run on the same file with the same
 * settings, interleaved with nvswap runs, with huge-page buffers reserved
 * (and given back) when root, and the ratios summarized.
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fio_res {
	double gbs;
	double cpu_s;
	bool ok;
};

static long read_long(const char *path)
{
	char buf[32] = "";
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fgets(buf, sizeof(buf), f))
			v = strtol(buf, NULL, 10);
		fclose(f);
	}
	return v;
}

static long meminfo(const char *key)
{
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = strlen(key);
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static long saved_huge = -1;

/* Also called from the signal handler: only async-signal-safe calls. */
void io_restore_huge(void)
{
	char buf[32];
	int fd, n;

	if (saved_huge < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%ld\n", saved_huge);
	fd = open(HUGEPAGES, O_WRONLY);
	if (fd >= 0) {
		if (write(fd, buf, (size_t)n) != n)
			saved_huge = -1; /* nothing more we can do */
		close(fd);
	}
	saved_huge = -1;
}

/* Huge pages for fio's buffers: true when there are enough. */
static bool reserve_huge(const struct args *a, char *why, size_t n)
{
	/* fio's shm segment for iodepth x bs was measured to need about
	 * twice that in huge pages (fio-3.33): reserve 2x plus 2 per job. */
	long need = (long)(2 * (((size_t)a->queue_depth * a->block_size +
				 HUGE_SIZE - 1) /
				HUGE_SIZE) +
			   2) *
		    (long)a->parallel;
	long have = meminfo("HugePages_Free");
	long total = read_long(HUGEPAGES);
	FILE *f;

	if (have >= need)
		return true;
	if (geteuid() != 0) {
		snprintf(why, n,
			 "fio needs %ld free huge pages for --iomem=shmhuge "
			 "and has %ld; as root run: echo %ld > " HUGEPAGES,
			 need, have < 0 ? 0 : have,
			 (total < 0 ? 0 : total) + need -
				 (have < 0 ? 0 : have));
		return false;
	}
	f = fopen(HUGEPAGES, "w");
	if (!f) {
		snprintf(why, n, "cannot write " HUGEPAGES ": %s",
			 strerror(errno));
		return false;
	}
	saved_huge = total;
	atexit(io_restore_huge);
	fprintf(f, "%ld\n", total + need - have);
	fclose(f);
	if (meminfo("HugePages_Free") < need) {
		snprintf(why, n,
			 "the kernel found only %ld of %ld huge pages (memory "
			 "too fragmented)",
			 meminfo("HugePages_Free"), need);
		return false;
	}
	return true;
}

/* Run fio with @huge or default buffers; parse its JSON with jansson. */
static struct fio_res run_fio(const struct args *a, enum nvs_backend eng,
			      const char *path, bool huge)
{
	struct fio_res res = {0};
	char cmd[4096], *out = NULL;
	size_t len = 0, cap = 0;
	const char *rw = a->read ? "read" : "write";
	json_error_t jerr;
	json_t *root, *jobs;
	double max_rt = 0, bytes = 0;
	char batch[128] = "";
	FILE *p;
	int n;

	if (a->sequential) /* batch-and-drain, as --sequential_requests */
		snprintf(batch, sizeof(batch),
			 "--iodepth_batch_submit=%u "
			 "--iodepth_batch_complete_min=%u ",
			 a->queue_depth, a->queue_depth);
	n = snprintf(
		cmd, sizeof(cmd),
		"fio --name=nvswap-io --filename=%s --rw=%s --bs=%zu "
		"--iodepth=%u --ioengine=%s --direct=1 --thread "
		"--numjobs=%u --size=%zu --offset_increment=%zu "
		"--loops=%u --iomem=%s --scramble_buffers=0 %s%s"
		"--output-format=json 2>&1",
		path, rw, a->block_size, a->queue_depth, nvs_backend_name(eng),
		a->parallel, a->io_size / a->parallel, a->io_size / a->parallel,
		a->loops, huge ? "shmhuge" : "malloc",
		eng == NVS_BACKEND_IO_URING ? "--fixedbufs=1 --registerfiles=1 "
					    : "",
		batch);
	if (n < 0 || (size_t)n >= sizeof(cmd))
		tool_die(2, "--folder path too long for the fio command line");
	p = popen(cmd, "r");
	if (!p)
		tool_die(1, "running fio: %s", strerror(errno));
	for (;;) {
		if (len + 4096 > cap) {
			cap = cap ? cap * 2 : 65536;
			out = realloc(out, cap);
			if (!out)
				tool_die(1,
					 "out of memory reading fio's output");
		}
		size_t got = fread(out + len, 1, cap - len - 1, p);
		if (got == 0)
			break;
		len += got;
	}
	out[len] = 0;
	if (pclose(p) != 0) {
		fprintf(stderr, "nvswap-io: fio failed:\n  %s\n%s\n", cmd, out);
		free(out);
		return res;
	}
	/* fio may print notes before the JSON object. */
	root = json_loads(strchr(out, '{') ? strchr(out, '{') : out,
			  JSON_DISABLE_EOF_CHECK, &jerr);
	free(out);
	if (!root) {
		fprintf(stderr, "nvswap-io: fio's JSON: %s (line %d)\n",
			jerr.text, jerr.line);
		return res;
	}
	jobs = json_object_get(root, "jobs");
	for (size_t i = 0; i < json_array_size(jobs); i++) {
		json_t *j = json_array_get(jobs, i);
		json_t *d = json_object_get(j, rw);
		double rt =
			json_number_value(json_object_get(j, "job_runtime"));
		double usr = json_number_value(json_object_get(j, "usr_cpu"));
		double sys = json_number_value(json_object_get(j, "sys_cpu"));

		bytes += json_number_value(json_object_get(d, "io_bytes"));
		res.cpu_s += (usr + sys) / 100.0 * rt / 1000.0;
		if (rt > max_rt)
			max_rt = rt;
	}
	json_decref(root);
	if (max_rt > 0 && bytes > 0) {
		res.gbs = bytes / (max_rt / 1000.0) / GIB;
		res.ok = true;
	}
	return res;
}

static bool have_fio(void)
{
	return system("fio --version >/dev/null 2>&1") == 0;
}
int io_compare_fio(const struct args *a)
{
	double nv[256], fh[256], fd[256], ratio[256], nvc[256], fhc[256],
		cpur[256];
	unsigned reps = a->repeats > 256 ? 256 : a->repeats;
	char why[512] = "";
	bool huge;
	json_t *j = NULL; /* made after the runs: a fatal one holds none */
	const char *path = io_file_for(a, 0);
	enum nvs_backend eng;
	struct run r;
	int rc = 0;

	if (!have_fio())
		tool_die(2, "--compare-fio needs fio: apt-get install fio");
	huge = reserve_huge(a, why, sizeof(why));
	if (!huge && !io_quiet)
		printf("note: %s; comparing against fio's default buffers "
		       "only\n",
		       why);
	/* Both read (or overwrite) the same file, written and synced once
	 * here, untimed. */
	io_one_run(&(struct args){.folder = a->folder,
				  .read = true,
				  .backend = a->backend,
				  .io_size = a->io_size,
				  .block_size = a->block_size,
				  .queue_depth = a->queue_depth,
				  .parallel = 1,
				  .loops = 1,
				  .pinned = true},
		   &r);
	free(r.lat);
	eng = r.st.backend; /* fio runs the engine nvswap runs */
	if (!io_quiet)
		printf("nvswap vs fio: %s, %zu bytes, bs %zu, qd %u, "
		       "parallelism %u, %s, %u interleaved repeats\n",
		       a->read ? "read" : "write", a->io_size, a->block_size,
		       a->queue_depth, a->parallel, nvs_backend_name(eng),
		       reps);
	/* One untimed op first, as fio's set-up: buffers are registered
	 * with the ring on first use, fio registers its before timing. It
	 * reads, also before a timed write: the host throttles sustained
	 * writes, and an extra 1 GiB write right before the timed one would
	 * put nvswap deeper into that than fio. */
	struct args warm = *a;
	if (warm.warmup == 0)
		warm.warmup = 1;
	warm.prepared = true;
	warm.warmup_read = true;
	for (unsigned i = 0; i < reps; i++) {
		struct fio_res f1 = {0}, f2;

		io_one_run(&warm, &r);
		nv[i] = r.bytes / r.task_s / GIB;
		nvc[i] = r.cpu_s / (r.bytes / GIB);
		if (r.validated < 0)
			rc = 1;
		free(r.lat);
		if (huge) {
			f1 = run_fio(a, eng, path, true);
			if (!f1.ok)
				tool_die(1,
					 "fio with huge-page buffers failed");
			fh[i] = f1.gbs;
			fhc[i] = f1.cpu_s /
				 ((double)a->io_size * a->loops / GIB);
		}
		f2 = run_fio(a, eng, path, false);
		if (!f2.ok)
			tool_die(1, "fio with default buffers failed");
		fd[i] = f2.gbs;
		if (!huge) {
			fh[i] = fd[i];
			fhc[i] = f2.cpu_s /
				 ((double)a->io_size * a->loops / GIB);
		}
		ratio[i] = fh[i] > 0 ? nv[i] / fh[i] : 0;
		/* getrusage counts in ticks: a tiny run may show 0. */
		cpur[i] = fhc[i] > 0 ? nvc[i] / fhc[i] : 0;
		if (!io_quiet)
			printf("  repeat %u: nvswap %.3f GB/s, fio%s %.3f GB/s "
			       "(ratio %.3f), fio default buffers %.3f GB/s\n",
			       i + 1, nv[i], huge ? " huge-page" : "", fh[i],
			       ratio[i], fd[i]);
	}
	if (!io_quiet)
		printf("summary over %u repeats (GB/s; GB = 2^30 bytes):\n",
		       reps);
	if (a->json)
		j = json_object();
	io_summarize("nvswap", nv, reps, j, "nvswap_gbs");
	io_summarize(huge ? "fio huge-page buffers" : "fio default buffers", fh,
		     reps, j, "fio_gbs");
	io_summarize("fio default buffers", fd, reps, j, "fio_default_gbs");
	io_summarize("ratio nvswap/fio", ratio, reps, j, "ratio");
	io_summarize("CPU s/GiB nvswap", nvc, reps, j,
		     "nvswap_cpu_sec_per_gib");
	io_summarize("CPU s/GiB fio", fhc, reps, j, "fio_cpu_sec_per_gib");
	io_summarize("CPU ratio nvswap/fio", cpur, reps, j, "cpu_ratio");
	if (j) {
		json_object_set_new(j, "config", io_config_json(a));
		json_object_set_new(j, "fio_huge_pages", json_boolean(huge));
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
	}
	io_restore_huge();
	return rc;
}
