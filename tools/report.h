/* SPDX-License-Identifier: MIT */
/*
 * nvswap-report's two halves: nvswap_report.c builds the report, a JSON
 * object (what --json prints); report_print.c prints it for people.
 */
#ifndef NVSWAP_REPORT_H
#define NVSWAP_REPORT_H

#include <jansson.h>

/* The report @r as text on stdout: backends, the path, memory, CPU,
 * CUDA, GPUs and cuFile, then the verdict and each problem's fix. */
void report_print(json_t *r);

#endif
