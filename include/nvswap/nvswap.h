/* SPDX-License-Identifier: MIT */
/* nvswap umbrella header: includes every public header of the library. */
#ifndef NVSWAP_NVSWAP_H
#define NVSWAP_NVSWAP_H

#include "nvswap/common.h"
#include "nvswap/version.h"
#include "nvswap/aio.h"
#include "nvswap/buffers.h"
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "nvswap/offload.h"
#include "nvswap/ckpt.h"
#include "nvswap/gpu.h"

#endif /* NVSWAP_NVSWAP_H */
