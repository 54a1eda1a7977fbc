/* SPDX-License-Identifier: MIT */
/* O_DIRECT alignment of a file: statx STATX_DIOALIGN, else the device. */
#ifndef NVS_AIO_ALIGN_H
#define NVS_AIO_ALIGN_H

#include "nvswap/aio.h"

/* Fallback when nothing better is known: safe for 512 and 4K devices. */
#define NVS_DEFAULT_DIO_ALIGN 4096u

/*
 * Most memory segments one request to the disk under @fd may have
 * (queue/max_segments of its block device), or 0 when unknown. A request
 * on scattered 4 KiB pages needs one segment per page: past this limit the
 * kernel splits it.
 */
unsigned nvs__dio_max_segments(int fd);

#endif
