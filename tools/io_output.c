// SPDX-License-Identifier: MIT
/*
 * nvswap-io's output: ds_io's lines and the latency percentiles of one
 * run, the same as JSON, and the median/min/max of the fio comparison's
 * repeats.
 */
#include "io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double pct(const double *sorted, unsigned n, double p)
{
	double idx = p / 100.0 * (n - 1);
	unsigned lo = (unsigned)idx;

	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (idx - lo) * (sorted[lo + 1] - sorted[lo]);
}

void io_print_run(const struct args *a, const struct run *r)
{
	const char *io = a->read ? "Read" : "Write";
	double e2e = r->e2e_s;
	double *lat = r->lat;

	qsort(lat, a->loops, sizeof(*lat), tool_cmp_double);
	printf("Task %s Latency = %.6f sec\n", io, r->task_s);
	printf("Task %s Speed = %.6f GB/sec\n", io, r->bytes / r->task_s / GIB);
	printf("E2E %s Latency = %.6f sec\n", io, e2e);
	printf("E2E %s Speed = %.6f GB/sec\n", io, r->bytes / e2e / GIB);
	printf("Op %s Latency: min %.3f ms, median %.3f ms, p99 %.3f ms "
	       "(%u ops of %zu bytes)\n",
	       io, lat[0] * 1e3, pct(lat, a->loops, 50) * 1e3,
	       pct(lat, a->loops, 99) * 1e3, a->loops, a->io_size);
	printf("CPU time: %.3f s per GiB (user + system)\n",
	       r->cpu_s / (r->bytes / GIB));
	printf("Backend: %s; fixed-buffer requests %llu of %llu; %s\n",
	       nvs_backend_name(r->st.backend),
	       (unsigned long long)r->st.fixed_buffer_requests,
	       (unsigned long long)r->st.requests, r->st.backend_notes);
	if (r->validated)
		printf("Validation: %s\n",
		       r->validated > 0 ? "ok, every byte" : "FAILED");
}

json_t *io_run_json(const struct args *a, const struct run *r)
{
	double *lat = r->lat;

	qsort(lat, a->loops, sizeof(*lat), tool_cmp_double);
	return json_pack(
		"{s:f, s:f, s:f, s:f, s:{s:f, s:f, s:f}, s:f, s:s, s:I, s:I, "
		"s:I, s:s, s:o, s:f, s:f}",
		"task_latency_sec", r->task_s, "task_gbs",
		r->bytes / r->task_s / GIB, "e2e_latency_sec", r->e2e_s,
		"e2e_gbs", r->bytes / r->e2e_s / GIB, "op_latency_ms", "min",
		lat[0] * 1e3, "median", pct(lat, a->loops, 50) * 1e3, "p99",
		pct(lat, a->loops, 99) * 1e3, "cpu_sec_per_gib",
		r->cpu_s / (r->bytes / GIB), "backend",
		nvs_backend_name(r->st.backend), "requests",
		(json_int_t)r->st.requests, "fixed_buffer_requests",
		(json_int_t)r->st.fixed_buffer_requests, "retries",
		(json_int_t)r->st.retries, "backend_notes", r->st.backend_notes,
		"validated",
		r->validated == 0 ? json_null()
				  : json_boolean(r->validated > 0),
		"timed_start", r->win_start, "timed_end", r->win_end);
}

json_t *io_config_json(const struct args *a)
{
	return json_pack("{s:s, s:I, s:s, s:I, s:i, s:b, s:b, s:i, s:i, s:i, "
			 "s:b, s:I}",
			 "folder", a->folder, "io_size", (json_int_t)a->io_size,
			 "op", a->read ? "read" : "write", "block_size",
			 (json_int_t)a->block_size, "queue_depth",
			 (int)a->queue_depth, "single_submit", a->single_submit,
			 "overlap_events", !a->sequential, "io_parallel",
			 (int)a->parallel, "loops", (int)a->loops,
			 "warmup_loops", (int)a->warmup, "pinned", a->pinned,
			 "misalign", (json_int_t)a->misalign);
}

void io_summarize(const char *label, double *v, unsigned n, json_t *j,
		  const char *key)
{
	double s[256];

	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), tool_cmp_double);
	if (!io_quiet)
		printf("  %-26s median %.3f  min %.3f  max %.3f\n", label,
		       pct(s, n, 50), s[0], s[n - 1]);
	if (j)
		json_object_set_new(j, key,
				    json_pack("{s:f, s:f, s:f}", "median",
					      pct(s, n, 50), "min", s[0], "max",
					      s[n - 1]));
}
