#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nvswap's demo against fio on the same file, interleaved run by run.

Each repeat runs, back to back and in this order: nvswap batch-and-drain,
nvswap overlapped events, fio with its default buffers, fio with huge-page
buffers (--iomem=shmhuge). Every run starts from a deleted file, writes it
with O_DIRECT, then reads it back. Prints a Markdown table of medians,
min-max spread, and nvswap/fio ratios. As root it reserves the huge pages
fio needs and restores the previous setting afterwards.

    bench/fio_compare.py [--reps 5] [--size 1G] [--dir nvme_swap]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def demo(args, path, extra):
    out = run([args.demo, "--dir", args.dir, "--file", os.path.basename(path),
               "--size", args.size, "--block-size", "1M", "--queue-depth",
               str(args.qd)] + extra)
    w = float(re.search(r"write: ([0-9.]+) GB/s", out).group(1))
    r = float(re.search(r"read:  ([0-9.]+) GB/s", out).group(1))
    return w, r


def fio(args, path, extra):
    res = []
    for rw in ("write", "read"):
        if rw == "write" and os.path.exists(path):
            os.unlink(path)
        out = run(["fio", "--name=cmp", f"--filename={path}",
                   f"--size={args.size}", "--direct=1", "--bs=1M",
                   f"--iodepth={args.qd}", "--ioengine=libaio", f"--rw={rw}",
                   "--output-format=json"] + extra)
        job = json.loads(out)["jobs"][0][rw]
        res.append(job["bw_bytes"] / 1e9)
    return tuple(res)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--size", default="1G")
    p.add_argument("--qd", type=int, default=128)
    p.add_argument("--dir", default="nvme_swap")
    p.add_argument("--demo", default="build/examples/nvswap-demo")
    args = p.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio is missing: apt-get install fio")
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "fio_compare.swp")

    old_huge = None
    if os.geteuid() == 0:
        with open(HUGEPAGES) as f:
            old_huge = int(f.read())
        need = args.qd // 2 + 16  # qd x 1 MiB of 2 MiB pages, and slack
        with open(HUGEPAGES, "w") as f:
            f.write(str(max(old_huge, need)))
    configs = [
        ("nvswap libaio, batch-and-drain", lambda: demo(args, path, [])),
        ("nvswap libaio, overlap_events", lambda: demo(args, path,
                                                        ["--overlap"])),
        ("fio libaio, default buffers", lambda: fio(args, path, [])),
        ("fio libaio, --iomem=shmhuge", lambda: fio(args, path,
                                                     ["--iomem=shmhuge"])),
    ]
    results = {name: ([], []) for name, _ in configs}
    try:
        for rep in range(args.reps):
            for name, fn in configs:
                if os.path.exists(path):
                    os.unlink(path)
                w, r = fn()
                results[name][0].append(w)
                results[name][1].append(r)
            print(f"repeat {rep + 1}/{args.reps} done", file=sys.stderr)
    finally:
        if old_huge is not None:
            with open(HUGEPAGES, "w") as f:
                f.write(str(old_huge))
        if os.path.exists(path):
            os.unlink(path)

    ref = results["fio libaio, --iomem=shmhuge"]
    refw, refr = statistics.median(ref[0]), statistics.median(ref[1])
    print(f"{args.size} file, 1 MiB blocks, O_DIRECT, queue depth "
          f"{args.qd}, 1 job, {args.reps} interleaved repeats; GB/s "
          "median (min-max); ratio = median / fio shmhuge median\n")
    print("| run | write GB/s | read GB/s | write ratio | read ratio |")
    print("|---|---|---|---|---|")
    for name, _ in configs:
        w, r = results[name]
        mw, mr = statistics.median(w), statistics.median(r)
        print(f"| {name} | {mw:.2f} ({min(w):.2f}-{max(w):.2f}) | "
              f"{mr:.2f} ({min(r):.2f}-{max(r):.2f}) | {mw / refw:.2f} | "
              f"{mr / refr:.2f} |")


if __name__ == "__main__":
    main()
