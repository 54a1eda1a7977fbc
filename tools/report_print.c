// SPDX-License-Identifier: MIT
/*
 * nvswap-report's human-readable form: the report (the JSON object
 * nvswap_report.c builds, --json's) as lines, then the verdict and each
 * problem with its fix.
 */
#include "report.h"
#include "tool.h"

#include <jansson.h>
#include <stdio.h>

void report_print(json_t *r)
{
	json_t *b, *p = json_object_get(r, "nvme_path"), *v;
	size_t i;

	printf("nvswap %s\n", json_string_value(json_object_get(r, "version")));
	printf("  built with  %s\n",
	       json_string_value(json_object_get(r, "build_features")));
	printf("\nbackends:\n");
	json_array_foreach(json_object_get(r, "backends"), i, b)
	{
		printf("  %-9s %s%s%s\n",
		       json_string_value(json_object_get(b, "name")),
		       json_is_true(json_object_get(b, "available"))
			       ? "available"
			       : "NOT available: ",
		       json_object_get(b, "why")
			       ? json_string_value(json_object_get(b, "why"))
			       : "",
		       "");
	}
	b = json_object_get(r, "default_backend");
	if (json_object_get(b, "error"))
		printf("  default   none: %s\n",
		       json_string_value(json_object_get(b, "error")));
	else
		printf("  default   %s, chosen by %s (%s)\n",
		       json_string_value(json_object_get(b, "name")),
		       json_string_value(json_object_get(b, "reason")),
		       json_string_value(json_object_get(b, "notes")));
	printf("\nnvme_path %s:\n",
	       json_string_value(json_object_get(p, "path")));
	if (json_is_false(json_object_get(p, "exists")))
		printf("  (does not exist yet: nvswap makes it, and removes "
		       "it when done; checked %s)\n",
		       json_string_value(json_object_get(p, "checked")));
	if ((v = json_object_get(p, "error"))) {
		printf("  %s\n", json_string_value(v));
	} else {
		json_t *d = json_object_get(p, "device"),
		       *io = json_object_get(p, "direct_io");
		printf("  filesystem  %s%s, %.1f GiB free\n",
		       json_string_value(json_object_get(p, "filesystem")),
		       json_is_true(json_object_get(p, "read_only"))
			       ? " (read-only)"
			       : "",
		       (double)json_integer_value(
			       json_object_get(p, "free_bytes")) /
			       (1u << 30));
		if (json_is_string(json_object_get(d, "name")))
			printf("  device      %s (disk %s, model %s), %s, "
			       "%s, blocks %lld/%lld bytes\n",
			       json_string_value(json_object_get(d, "name")),
			       json_string_value(json_object_get(d, "disk")),
			       json_string_value(json_object_get(d, "model")),
			       json_is_true(json_object_get(d, "nvme"))
				       ? "NVMe"
				       : "not NVMe",
			       json_is_true(json_object_get(d, "rotational"))
				       ? "rotational"
				       : "solid state",
			       json_integer_value(json_object_get(
				       d, "logical_block_size")),
			       json_integer_value(json_object_get(
				       d, "physical_block_size")));
		else
			printf("  device      none (not a block device)\n");
		if (json_is_true(json_object_get(io, "o_direct")))
			printf("  O_DIRECT    yes, memory alignment %lld, "
			       "offset alignment %lld (from %s)\n",
			       json_integer_value(
				       json_object_get(io, "memory_alignment")),
			       json_integer_value(
				       json_object_get(io, "offset_alignment")),
			       json_string_value(
				       json_object_get(io, "alignment_from")));
		else if (json_is_true(json_object_get(io, "writable")))
			printf("  O_DIRECT    no (buffered I/O)\n");
		else
			printf("  %s\n",
			       json_string_value(json_object_get(io, "error")));
	}
	json_t *m = json_object_get(r, "memory"),
	       *hp = json_object_get(m, "huge_pages");
	v = json_object_get(m, "memlock_limit");
	printf("\nmemory:\n");
	if (json_is_string(v))
		printf("  memlock     %s\n", json_string_value(v));
	else
		printf("  memlock     %.1f MiB\n",
		       (double)json_integer_value(v) / 1048576);
	json_t *pr = json_object_get(m, "pinned_probe");
	char h1[32], h2[32], h3[32];
	printf("  pinnable    up to %s (the smaller of memlock and %s "
	       "available); a %s probe %s\n",
	       tool_human((uint64_t)json_integer_value(
				  json_object_get(m, "pinnable_bytes")),
			  h1, sizeof(h1)),
	       tool_human((uint64_t)json_integer_value(
				  json_object_get(m, "available_bytes")),
			  h2, sizeof(h2)),
	       tool_human((uint64_t)json_integer_value(
				  json_object_get(pr, "bytes")),
			  h3, sizeof(h3)),
	       json_is_true(json_object_get(pr, "ok")) ? "locked fine"
						       : "failed:");
	if (!json_is_true(json_object_get(pr, "ok")))
		printf("              %s\n",
		       json_string_value(json_object_get(pr, "error")));
	printf("  huge pages  %lld of %lld free (%lld KiB); transparent: %s\n",
	       json_integer_value(json_object_get(hp, "free")),
	       json_integer_value(json_object_get(hp, "total")),
	       json_integer_value(json_object_get(hp, "size")) / 1024,
	       json_string_value(json_object_get(hp, "transparent")));
	printf("\ncpu copy loop %s\n",
	       json_string_value(json_object_get(r, "copy_impl")));
	printf("cuda          %s\n",
	       json_string_value(json_object_get(r, "cuda")));
	json_t *g = json_object_get(r, "gds"), *gp = json_object_get(r, "gpu"),
	       *link = json_object_get(gp, "pcie");
	if (json_integer_value(json_object_get(gp, "device_count")) > 0) {
		char hb[32];
		printf("gpu           %lld device%s: %s, %s; driver %lld (%s)\n",
		       json_integer_value(json_object_get(gp, "device_count")),
		       json_integer_value(
			       json_object_get(gp, "device_count")) == 1
			       ? ""
			       : "s",
		       json_string_value(json_object_get(gp, "device0")),
		       tool_human((uint64_t)json_integer_value(
					  json_object_get(gp, "device0_bytes")),
				  hb, sizeof(hb)),
		       json_integer_value(
			       json_object_get(gp, "driver_version")),
		       json_string_value(json_object_get(gp, "driver_lib")));
		printf("  pcie        gen%lld x%lld now, gen%lld x%lld at most "
		       "(0: unknown; an idle GPU trains its link down)\n",
		       json_integer_value(json_object_get(link, "gen")),
		       json_integer_value(json_object_get(link, "width")),
		       json_integer_value(json_object_get(link, "max_gen")),
		       json_integer_value(json_object_get(link, "max_width")));
		printf("  staging     %s\n",
		       json_string_value(json_object_get(gp, "status")));
	} else {
		printf("gpu           none: %s\n",
		       json_string_value(json_object_get(gp, "status")));
	}
	printf("gds           cuFile %s; mode %s; nvidia-fs module %s\n"
	       "  cufile      %s\n",
	       json_is_string(json_object_get(g, "cufile"))
		       ? json_string_value(json_object_get(g, "cufile"))
		       : "not loaded",
	       json_is_string(json_object_get(g, "mode"))
		       ? json_string_value(json_object_get(g, "mode"))
		       : "none",
	       json_is_true(json_object_get(g, "nvidia_fs")) ? "loaded"
							     : "not loaded",
	       json_string_value(json_object_get(g, "status")));
	printf("\n%s\n", json_is_true(json_object_get(r, "usable"))
				 ? "verdict: nvswap can run here"
				 : "verdict: NOT usable here");
	json_array_foreach(json_object_get(r, "problems"), i, b)
	{
		printf("problem: %s\n  fix: %s\n",
		       json_string_value(json_object_get(b, "problem")),
		       json_string_value(json_object_get(b, "fix")));
	}
}
