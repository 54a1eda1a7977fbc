/* SPDX-License-Identifier: MIT */
/*
 * Making and unmaking a swapper: the options' defaults, create (rank
 * directories and swap files, the alignment, the pool, the aio handle)
 * and the teardown that destroy ends with.
 */
#ifndef NVS_SWAPPER_CREATE_H
#define NVS_SWAPPER_CREATE_H

struct nvs_swapper;

/* Free what create made, after the aio handle is destroyed: the tensors,
 * the pool, the swap files and (scratch mode) the rank directories, the
 * lock and the condition, and @s itself. */
void nvs__swapper_free(struct nvs_swapper *s);

#endif
