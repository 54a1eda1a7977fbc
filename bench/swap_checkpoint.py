#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checkpointing offloaded state where it lies, against writing it all.

Each repeat runs back to back on one directory: fio writing the whole
state once (--tensors x --size bytes: sequential, direct, bs 1M, libaio,
iodepth 32, end_fsync=1: the least a checkpoint that copies the state
out costs), then nvswap-bench-swapckpt on a persistent swap set of that
state with K tensors dirty, for each K of --dirty (the call the training
loop waits for, and the commit until durable). Prints medians, min-max
and the commit time as a fraction of fio's.

    flock /work/bench.lock python3 bench/swap_checkpoint.py \\
        [--reps 5] [--tensors 64] [--size 16M] [--dirty 0,6,16] \\
        [--dir nvme_swap/swapckpt]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

from benchutil import loadavg, parse_size


def fio_seconds(path, nbytes):
    out = subprocess.run(
        ["fio", "--name=full", f"--filename={path}", f"--size={nbytes}",
         "--direct=1", "--bs=1M", "--iodepth=32", "--ioengine=libaio",
         "--rw=write", "--end_fsync=1", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    return nbytes / json.loads(out)["jobs"][0]["write"]["bw_bytes"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--size", default="16M")
    p.add_argument("--dirty", default="0,6,16")
    p.add_argument("--dir", default="nvme_swap/swapckpt")
    p.add_argument("--bench", default="build/bench/nvswap-bench-swapckpt")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    total = a.tensors * parse_size(a.size)
    levels = [int(k) for k in a.dirty.split(",")]
    fio, call, commit = [], {k: [] for k in levels}, {k: [] for k in levels}
    for r in range(a.reps):
        os.sync()
        fio.append(fio_seconds(os.path.join(a.dir, "fio.bin"), total))
        shutil.rmtree(os.path.join(a.dir, "nvswap"), ignore_errors=True)
        os.sync()
        out = subprocess.run(
            [a.bench, "--dir", a.dir, "--tensors", str(a.tensors), "--size",
             a.size, "--dirty", a.dirty, "--reps", "1"],
            check=True, capture_output=True, text=True).stdout
        shutil.rmtree(os.path.join(a.dir, "nvswap"), ignore_errors=True)
        for m in re.finditer(r"dirty (\d+) of \d+: call ([0-9.]+) ms .*?"
                             r"commit ([0-9.]+) s", out):
            call[int(m.group(1))].append(float(m.group(2)))
            commit[int(m.group(1))].append(float(m.group(3)))
        print(f"rep {r + 1}: fio {fio[-1]:.3f} s, " + ", ".join(
            f"K={k} {commit[k][-1]:.3f} s" for k in levels),
            file=sys.stderr)
    f = statistics.median(fio)
    print(f"{a.reps} repeats; state {a.tensors} x {a.size} = "
          f"{total / 2**30:.2f} GiB; dir {a.dir}; load {loadavg()}\n")
    print("| what | call (ms) median [min-max] | durable (s) median "
          "[min-max] | / fio whole state |")
    print("|---|---|---|---|")
    print(f"| fio writes the whole state | | {f:.3f} [{min(fio):.3f}-"
          f"{max(fio):.3f}] | 1 |")
    for k in levels:
        c, m = call[k], commit[k]
        print(f"| checkpoint, {k} of {a.tensors} tensors dirty "
              f"({k / a.tensors:.0%}) | {statistics.median(c):.2f} "
              f"[{min(c):.2f}-{max(c):.2f}] | {statistics.median(m):.3f} "
              f"[{min(m):.3f}-{max(m):.3f}] | "
              f"{statistics.median(m) / f:.3f} |")


if __name__ == "__main__":
    main()
