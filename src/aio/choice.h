/* SPDX-License-Identifier: MIT */
/*
 * Which backend a handle asks its probe for, and why: the caller's
 * explicit opts.backend wins; NVSWAP_BACKEND steers only
 * NVS_BACKEND_AUTO.
 */
#ifndef NVS_AIO_CHOICE_H
#define NVS_AIO_CHOICE_H

#include "nvswap/aio.h"

/* Resolve *@b (the caller's opts.backend) against NVSWAP_BACKEND; *@why
 * says who decided. 0, or -EINVAL (with a sentence) for a value of
 * NVSWAP_BACKEND that names no backend, when it would apply. */
int nvs__backend_choose(enum nvs_backend *b, enum nvs_backend_reason *why);

#endif
