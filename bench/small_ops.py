#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Small synchronous ops against fio's psync engine (issue 19): N random
SIZE-byte reads (or writes) at queue depth 1 on one 64 MiB file, through
nvswap-bench-small with the caller-thread fast path (inline, the default),
the same naming the file by a descriptor as fio does (inline-fd: no
stat of the path per op), with every op handed to a worker (workers),
and through
`fio --ioengine=psync --iodepth=1` on the same file, the three interleaved
repeat by repeat (the order rotates) after one warm-up round. Prints one
Markdown table: ops/s median [min-max] and the ratio to fio, whose spread
is that of the per-repeat ratios.

    bench/small_ops.py [--dir nvme_swap] [--size 4096] [--ops 20000]
                       [--repeats 7] [--write] [--buffered]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MODES = ("inline", "inline-fd", "workers", "fio")


def nvswap(a, mode):
    cmd = [a.tool, "-d", a.dir, "-s", str(a.size), "-n", str(a.ops),
           "-r", "1", "-m", mode]
    if a.write:
        cmd.append("-w")
    if a.buffered:
        cmd.append("-b")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[1])


def fio(a):
    rw = "randwrite" if a.write else "randread"
    cmd = ["fio", "--name=qd1", "--filename=" + a.file, "--rw=" + rw,
           "--bs=%d" % a.size, "--ioengine=psync", "--iodepth=1",
           "--direct=%d" % (0 if a.buffered else 1), "--invalidate=0",
           "--size=64M", "--number_ios=%d" % a.ops, "--norandommap",
           "--randrepeat=0", "--output-format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    job = json.loads(out.stdout)["jobs"][0]
    return job["write" if a.write else "read"]["iops"]


def run(a, mode):
    return fio(a) if mode == "fio" else nvswap(a, mode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--buffered", action="store_true")
    ap.add_argument("--tool", default="build/bench/nvswap-bench-small")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    a.file = os.path.join(a.dir, "small_ops.swp")
    for m in MODES:  # warm-up: creates the file, fills the page cache
        run(a, m)
    res = {m: [] for m in MODES}
    for r in range(a.repeats):
        for i in range(len(MODES)):
            m = MODES[(r + i) % len(MODES)]
            res[m].append(run(a, m))
    os.unlink(a.file)
    print("%d-byte random %s %ss, queue depth 1, %d ops x %d repeats "
          "(interleaved)" % (a.size, "buffered" if a.buffered else "O_DIRECT",
                             "write" if a.write else "read", a.ops,
                             a.repeats))
    print("| path | ops/s median [min-max] | ratio to fio psync, median "
          "[min-max] |")
    print("|---|---|---|")
    for m in MODES:
        v = res[m]
        ratios = [x / f for x, f in zip(v, res["fio"])]
        print("| %s | %.0f [%.0f-%.0f] | %.3f [%.3f-%.3f] |" % (
            {"inline": "nvswap, caller's thread (default)",
             "inline-fd": "nvswap, caller's thread, by descriptor",
             "workers": "nvswap, worker hand-off (inline off)",
             "fio": "fio psync"}[m],
            statistics.median(v), min(v), max(v),
            statistics.median(ratios), min(ratios), max(ratios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
