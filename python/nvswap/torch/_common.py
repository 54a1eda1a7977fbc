# SPDX-License-Identifier: MIT
"""Constants and small helpers shared by the offload engine's modules."""
import torch

import nvswap

ALIGN = 64  # nvswap/offload.h packs a group's tensors at 64-byte offsets
MAX_TENSORS = 64  # NVS_OFFLOAD_MAX_TENSORS
GRAD_BASE = 1 << 40  # id_base of the gradient regions in the optimizer swapper
STATE_BASE = 2 << 40  # id_base of the optimizer state groups


# torch >= 2 says whether a backward runs on this thread (-1: none)
GRAPH_TASK = getattr(torch._C, "_current_graph_task_id", None)


def nbytes(t):
    return t.numel() * t.element_size()


def itemsize(dtype):
    """Bytes per element of dtype (torch 1.13 has no dtype.itemsize)."""
    return torch.empty((), dtype=dtype).element_size()


def storage_ptr(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def error(code, text):
    """An nvswap.Error (the errno subclass where Python has one)."""
    return nvswap.Error(code, text)


def packed(sizes):
    """(offsets, end) of tensors of sizes bytes packed as one group of a
    role swapper: each at the next ALIGN-byte boundary (nvswap/offload.h)."""
    offs, off = [], 0
    for n in sizes:
        offs.append(off)
        off += (n + ALIGN - 1) // ALIGN * ALIGN
    return offs, off


def read_packed(swapper, gid, specs):
    """Copies of the tensors of group gid ([(dtype, shape)], in order),
    read from swapper into memory of their own (Swapper.read: no pool
    buffer, nothing written, whatever the disk's free space)."""
    buf = torch.empty(swapper.info(gid)["nbytes"], dtype=torch.uint8)
    swapper.read(gid, buf)
    sizes = [itemsize(d) * torch.Size(s).numel() for d, s in specs]
    return [buf[o:o + n].view(d).view(s)
            for (d, s), o, n in zip(specs, packed(sizes)[0], sizes)]
