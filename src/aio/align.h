/* SPDX-License-Identifier: MIT */
/* O_DIRECT alignment of a file: statx STATX_DIOALIGN, else the device. */
#ifndef NVS_AIO_ALIGN_H
#define NVS_AIO_ALIGN_H

#include "nvswap/aio.h"

/* Fallback when nothing better is known: safe for 512 and 4K devices. */
#define NVS_DEFAULT_DIO_ALIGN 4096u

#endif
