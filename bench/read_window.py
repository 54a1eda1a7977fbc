#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What a served model's parameter pool reads at, against the figures its
disk-bound limit is taken from: O_DIRECT reads of one file through
nvswap's aio handle, one op of --big bytes at a time (make demo-infer's
reference: 64 MiB), against a sliding window of K ops of --op bytes in
flight (the pool's read-ahead of K layers with no compute between: a
layer's read submitted as the oldest one completes), and fio's
sequential read (1 MiB, libaio, depth 32) of the same file. Interleaved
round by round; medians and every round.

    bench/read_window.py [--dir /var/tmp/rw] [--size 1G] [--op 11M]
        [--big 64M] [--windows 1,2,3,4,6] [--rounds 5]

The file (--size bytes of random data, written O_DIRECT) stays in --dir
for the next run; remove it by hand."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import fs_type, loadavg, med, parse_size  # noqa: E402

import nvswap  # noqa: E402

GB = 1e9


def make_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=16M",
                    f"count={size >> 24}", "oflag=direct", "status=none"],
                   check=True)


def one_at_a_time(h, buf, path, size, big):
    t0 = time.perf_counter()
    for off in range(0, size - big + 1, big):
        h.sync_pread(buf[:big], path, off)
    return size // big * big / (time.perf_counter() - t0) / GB


def window(h, bufs, path, size, op, k):
    offs = list(range(0, size - op + 1, op))
    views = [b[:op] for b in bufs]
    q, i = [], 0
    t0 = time.perf_counter()
    while i < len(offs) or q:
        while i < len(offs) and len(q) < k:
            q.append(h.submit_read(views[i % len(views)], path, offs[i]))
            i += 1
        q.pop(0).wait()
    return len(offs) * op / (time.perf_counter() - t0) / GB


def fio(path, size):
    r = subprocess.run(
        ["fio", "--name=read", f"--filename={path}", "--rw=read",
         "--bs=1M", "--iodepth=32", "--direct=1", "--ioengine=libaio",
         f"--size={size}", "--output-format=json"],
        capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)["jobs"][0]["read"]["bw_bytes"] / GB


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/rw")
    ap.add_argument("--size", type=parse_size, default=parse_size("1G"))
    ap.add_argument("--op", type=parse_size, default=parse_size("11M"))
    ap.add_argument("--big", type=parse_size, default=parse_size("64M"))
    ap.add_argument("--windows", default="1,2,3,4,6")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "read_window.dat")
    size = a.size >> 24 << 24
    op, big = a.op // 4096 * 4096, a.big // 4096 * 4096
    ks = [int(k) for k in a.windows.split(",")]
    make_file(path, size)
    h = nvswap.aio_handle()
    n = max(ks + [1]) + 2
    bufs = [h.new_cpu_locked_tensor(max(op, big),
                                    torch.empty(0, dtype=torch.uint8))
            for _ in range(n)]
    print(f"{size / GB:.2f} GB file on {fs_type(a.dir)} ({a.dir}), "
          f"{h.stats()['backend']}, load {loadavg()}")
    kinds = [(f"one {big >> 20} MiB op at a time",
              lambda: one_at_a_time(h, bufs[0], path, size, big))]
    kinds += [(f"{k} x {op / 2**20:.0f} MiB ops in flight",
               lambda k=k: window(h, bufs, path, size, op, k)) for k in ks]
    kinds += [("fio 1 MiB libaio depth 32", lambda: fio(path, size))]
    got = {name: [] for name, _ in kinds}
    for _ in range(a.rounds):
        for name, f in kinds:
            g = f()
            if g is not None:
                got[name].append(g)
    ref = med(got[kinds[0][0]])
    print("| reads | GB/s median | vs one op at a time | rounds |")
    print("|---|---|---|---|")
    for name, _ in kinds:
        v = got[name]
        if v:
            print(f"| {name} | {med(v):.2f} | {med(v) / ref:.2f} | "
                  + " ".join(f"{x:.2f}" for x in v) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
