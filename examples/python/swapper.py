#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Keep more tensors than fit in memory on NVMe with nvswap.Swapper.

Eight "layers" of weights live in swap files; a pool of three pinned
buffers holds the ones in use. Each step prefetches the next layer while
the current one is updated in place, then releases it dirty so the
swapper writes it back behind the next step's work. At the end every
layer equals the same updates done in memory, bit for bit.

    python3 examples/python/swapper.py [DIR]

with the package and torch installed (pip install '.[torch]').

DIR is a directory on the NVMe disk (default ./nvme_swap; not /tmp). The
Swapper makes it when missing and, closing, removes its files and what it
made.
"""
import sys

import torch

import nvswap

LAYERS, ROWS, COLS, STEPS = 8, 512, 512, 3


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "nvme_swap"
    gen = torch.Generator().manual_seed(0)
    reference = [torch.randn(ROWS, COLS, generator=gen) for _ in range(LAYERS)]
    nbytes = ROWS * COLS * 4

    with nvswap.Swapper(nvme_path=folder, name="example",
                        buffer_size=nbytes, buffer_count=3) as s:
        for i, w in enumerate(reference):
            s.register(i, w)               # written to NVMe now
        for step in range(STEPS):
            s.prefetch(0)
            for i in range(LAYERS):
                if i + 1 < LAYERS:
                    s.prefetch(i + 1)      # read ahead, behind this layer
                w = s.acquire(i, torch.float32, (ROWS, COLS))
                w.mul_(0.5).add_(step)     # the "training" update
                s.release(i, True)         # dirty: written back behind us
                reference[i].mul_(0.5).add_(step)
        s.wait_all()
        st = s.stats()
        for i, ref in enumerate(reference):
            w = s.acquire(i, torch.float32, (ROWS, COLS))
            assert torch.equal(w, ref), f"layer {i} differs"
            s.release(i, False)
        print(f"{LAYERS} layers x {nbytes >> 20} MiB through {st['buffer_count']} "
              f"pinned buffers, {STEPS} steps: read {st['bytes_read'] >> 20} MiB, "
              f"wrote {st['bytes_written'] >> 20} MiB on {st['backend']}; "
              f"equal to the in-memory run bit for bit")


if __name__ == "__main__":
    # each line as it is printed, into a pipe (| tee log) too
    sys.stdout.reconfigure(line_buffering=True)
    main()
