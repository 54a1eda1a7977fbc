#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a tensor to NVMe and read it back, DeepNVMe style.

The same calls DeepSpeed's DeepNVMe makes (aio_handle, new_cpu_locked_tensor,
async_pwrite/async_pread + wait), on nvswap: no op build, and failures
raise nvswap.Error instead of returning -1.

    python3 examples/python/deepnvme_rw.py [DIR] [MiB]

with the package and torch installed (pip install '.[torch]').

DIR is a directory on the NVMe disk (default ./nvme_swap; not /tmp, which
may be a tmpfs without O_DIRECT); what the run makes of it is removed at
the end.
"""
import os
import sys
import time

import torch

import nvswap


def make_dirs(path):
    """os.makedirs(path); the levels it made, outermost first."""
    made, p = [], os.path.abspath(path)
    while not os.path.exists(p):
        made.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    return made[::-1]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "nvme_swap"
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    made = make_dirs(folder)
    path = os.path.join(folder, "deepnvme_rw.bin")
    numel = mib * 2**20 // 4

    h = nvswap.aio_handle(block_size=1 << 20, queue_depth=32,
                          intra_op_parallelism=2)
    src = h.new_cpu_locked_tensor(numel, torch.empty(0, dtype=torch.float32))
    src.copy_(torch.randn(numel, generator=torch.Generator().manual_seed(0)))
    dst = h.new_cpu_locked_tensor(numel, src)

    t0 = time.perf_counter()
    assert h.async_pwrite(src, path) == 0      # queued
    assert h.wait() == 1                       # one op completed
    t1 = time.perf_counter()
    assert h.sync_pread(dst, path) == 1        # read back, synchronously
    t2 = time.perf_counter()

    assert torch.equal(src, dst), "read-back differs"
    gib = mib / 1024
    print(f"wrote {mib} MiB in {t1 - t0:.3f} s ({gib / (t1 - t0):.2f} GiB/s), "
          f"read in {t2 - t1:.3f} s ({gib / (t2 - t1):.2f} GiB/s) "
          f"on {h.backend}; bit-exact")

    # Per-op futures (beyond DeepNVMe): several reads in flight at once.
    half = numel // 2
    parts = [dst[:half], dst[half:]]
    ops = [h.submit_read(p, path, offset=i * half * 4)
           for i, p in enumerate(parts)]
    assert sum(op.wait() for op in ops) == numel * 4

    h.free_cpu_locked_tensor(src)
    h.free_cpu_locked_tensor(dst)
    h.close()
    os.remove(path)
    for d in reversed(made):  # the directory as it was found
        os.rmdir(d)


if __name__ == "__main__":
    # each line as it is printed, into a pipe (| tee log) too
    sys.stdout.reconfigure(line_buffering=True)
    main()
