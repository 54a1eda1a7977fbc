#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Striping over several devices (issue 22): the swap manager over N paths
against fio on the same N paths, interleaved repeat by repeat.

This machine has one (virtual) disk, so N devices are simulated: N image
files on that disk, each a loop device with direct I/O to its file
(losetup --direct-io=on: no host page cache in between), ext4 on each,
mounted under --root. For N = 1, 2, 4 each repeat runs, in this order:

- nvswap: nvswap-bench-stripe over the N mounts (one swapper striped
  over them, --stripe-size units): register K tensors, write them all
  (acquire, touch, release dirty, evict), then read them all back
  (prefetch ahead, acquire, check, release, evict): GB/s of each phase;
- fio alone: fio on each path by itself, one after the other (same
  engine, block size and per-path queue depth, O_DIRECT, each path the
  share of the bytes nvswap puts there), write then read; their sum is
  what N independent devices would give. Like nvswap's io_uring engine,
  fio registers its buffers and files (--fixedbufs --registerfiles;
  --fio-plain drops them): on this 2-vCPU VM that alone moves fio's
  1 MiB reads from 1.3 to 1.9 GB/s;
- fio together: one fio with a job per path, all at once: what the N
  paths give at the same time on this machine.

Prints a Markdown table: medians, min-max spread, and nvswap / sum(fio
alone) and nvswap / fio together (medians of the per-repeat ratios).
Needs root (losetup, mount), fio, mkfs.ext4. Loop devices, mounts and
images are removed however the run ends (also on SIGINT/SIGTERM).

    bench/stripe.py [--reps 5] [--paths 1,2,4] [--total 2G]
                    [--tensor-size 64M] [--qd 32] [--root nvme_swap/stripe]
                    [--fio-plain]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import fs_type, loadavg, parse_size, run  # noqa: E402


class Loops:
    """N loop devices with ext4, mounted under root; undone by close()."""

    def __init__(self, root):
        self.root, self.devs, self.mnts, self.imgs = root, [], [], []

    def open(self, n, img_bytes):
        """Make them; what was made before a failure is in the lists."""
        os.makedirs(self.root, exist_ok=True)
        for i in range(n):
            img = os.path.join(self.root, f"dev{i}.img")
            mnt = os.path.join(self.root, f"mnt{i}")
            if os.path.ismount(mnt):
                raise RuntimeError(f"{mnt} is mounted already (a run "
                                   "left it?): umount it first")
            with open(img, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, img_bytes)
            self.imgs.append(img)
            dev = run(["losetup", "--find", "--show", "--direct-io=on",
                       img]).strip()
            self.devs.append(dev)
            # Initialise inode tables and journal now, not in a kernel
            # thread writing during the measurements.
            run(["mkfs.ext4", "-q", "-F", "-E",
                 "lazy_itable_init=0,lazy_journal_init=0", dev])
            os.makedirs(mnt, exist_ok=True)
            self.mnts.append(mnt)
            run(["mount", "-o", "noatime", dev, mnt])

    def close(self):
        for mnt in self.mnts:
            if not os.path.ismount(mnt):  # its mount failed
                os.rmdir(mnt)
                continue
            # io_uring drops a ring's registered files in a kernel worker
            # after its process exits: the mount is busy for a moment.
            for _ in range(50):
                if subprocess.run(["umount", mnt],
                                  capture_output=True).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                print(f"{mnt} still busy: detached lazily", file=sys.stderr)
                subprocess.run(["umount", "-l", mnt])
            if not os.path.ismount(mnt) and os.path.isdir(mnt):
                os.rmdir(mnt)
        for dev in self.devs:
            subprocess.run(["losetup", "-d", dev])
        for img in self.imgs:
            if os.path.exists(img):
                os.unlink(img)
        self.mnts, self.devs, self.imgs = [], [], []


def nvswap(args, paths, rep):
    cmd = [args.bench, "--tensors", str(args.tensors), "--tensor-size",
           str(args.tsize), "--buffers", str(args.buffers), "--stripe-size",
           args.stripe, "--queue-depth", str(args.qd * len(paths)),
           "--block-size", args.bs, "--seed", str(rep)]
    for p in paths:
        cmd += ["--path", p]
    out = run(cmd)
    w = float(re.search(r"write: ([0-9.]+) GB/s", out).group(1))
    r = float(re.search(r"read:  ([0-9.]+) GB/s", out).group(1))
    written = [int(x) for x in re.findall(r"written (\d+)", out)]
    return w, r, written, out.splitlines()[0]


def fio(args, paths, share):
    """fio on @paths at once (one job each); aggregate write, read GB/s."""
    res = []
    for rw in ("write", "read"):
        cmd = ["fio", "--output-format=json", "--group_reporting",
               "--ioengine=io_uring", "--direct=1", f"--bs={args.bs}",
               f"--iodepth={args.qd}", f"--size={share}", f"--rw={rw}"]
        if not args.fio_plain:
            cmd += ["--fixedbufs", "--registerfiles"]
        for i, p in enumerate(paths):
            f = os.path.join(p, "fio.dat")
            if rw == "write" and os.path.exists(f):
                os.unlink(f)
            cmd += [f"--name=p{i}", f"--filename={f}"]
        job = json.loads(run(cmd))["jobs"][0][rw]
        res.append(job["bw_bytes"] / 1e9)
    for p in paths:
        os.unlink(os.path.join(p, "fio.dat"))
    return tuple(res)


def spread(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--paths", default="1,2,4")
    p.add_argument("--total", default="2G", help="bytes swapped per cycle")
    p.add_argument("--tensor-size", default="64M")
    p.add_argument("--buffers", type=int, default=8)
    p.add_argument("--stripe", default="1M")
    p.add_argument("--bs", default="1M")
    p.add_argument("--qd", type=int, default=32, help="per path")
    p.add_argument("--root", default="nvme_swap/stripe")
    p.add_argument("--fio-plain", action="store_true",
                   help="fio without --fixedbufs --registerfiles")
    p.add_argument("--bench", default="build/bench/nvswap-bench-stripe")
    args = p.parse_args()
    for tool in ("fio", "losetup", "mkfs.ext4"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing")
    if os.geteuid() != 0:
        sys.exit("needs root: losetup and mount")
    ns = [int(x) for x in args.paths.split(",")]
    args.tsize = parse_size(args.tensor_size)
    total = parse_size(args.total)
    args.tensors = total // args.tsize
    total = args.tensors * args.tsize
    fstype = fs_type(args.root if os.path.exists(args.root) else ".")
    if fstype == "tmpfs":
        sys.exit(f"{args.root} is on tmpfs: give --root on the disk")

    loops = Loops(args.root)

    def bye(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, bye)
    signal.signal(signal.SIGHUP, bye)
    res = {n: {k: [] for k in ("nw", "nr", "aw", "ar", "tw", "tr", "rw_a",
                                "rr_a", "rw_t", "rr_t")} for n in ns}
    alone = {n: [] for n in ns}
    split = {}
    try:
        # Room for nvswap's swap files or fio's file on the first path
        # at N = 1, and metadata.
        loops.open(max(ns), total + (512 << 20))
        for rep in range(args.reps):
            for n in ns:
                paths = loops.mnts[:n]
                share = total // n
                w, r, written, head = nvswap(args, paths, rep)
                split[n] = (head, written)
                one = [fio(args, [q], share) for q in paths]
                alone[n].append(one)
                aw, ar = sum(x[0] for x in one), sum(x[1] for x in one)
                tw, tr = fio(args, paths, share)
                d = res[n]
                for k, v in (("nw", w), ("nr", r), ("aw", aw), ("ar", ar),
                             ("tw", tw), ("tr", tr), ("rw_a", w / aw),
                             ("rr_a", r / ar), ("rw_t", w / tw),
                             ("rr_t", r / tr)):
                    d[k].append(v)
            print(f"repeat {rep + 1}/{args.reps} done (load {loadavg()})",
                  file=sys.stderr)
    finally:
        loops.close()

    print(f"{args.tensors} tensors x {args.tensor_size} = "
          f"{total / 2**30:.2f} GiB per cycle, stripe {args.stripe}, "
          f"{args.buffers} pool buffers; fio io_uring, O_DIRECT, "
          f"{args.bs} blocks, iodepth {args.qd} per path, "
          f"{'plain' if args.fio_plain else '--fixedbufs --registerfiles'} "
          f"(nvswap's handle "
          f"{args.qd} x N); loop devices (--direct-io=on) on ext4 images "
          f"on {fs_type('.')}; {args.reps} interleaved repeats; GB/s "
          "median (min-max); ratios: median of per-repeat ratios\n")
    print("| N | phase | nvswap striped | sum fio alone | fio together | "
          "nvswap / sum | nvswap / together |")
    print("|---|---|---|---|---|---|---|")
    for n in ns:
        d = res[n]
        for ph, a, b, c, x, y in (("write", "nw", "aw", "tw", "rw_a", "rw_t"),
                                  ("read", "nr", "ar", "tr", "rr_a", "rr_t")):
            print(f"| {n} | {ph} | {spread(d[a])} | {spread(d[b])} | "
                  f"{spread(d[c])} | {spread(d[x])} | {spread(d[y])} |")
    print("\nfio alone, per path, median write / read GB/s:")
    for n in ns:
        per = []
        for i in range(n):
            w = statistics.median(r[i][0] for r in alone[n])
            r_ = statistics.median(r[i][1] for r in alone[n])
            per.append(f"{w:.2f} / {r_:.2f}")
        print(f"  N={n}: " + ", ".join(per))
    print("\nnvswap bytes written per path (last repeat):")
    for n in ns:
        print(f"  N={n}: {split[n][1]}  ({split[n][0]})")


if __name__ == "__main__":
    main()
