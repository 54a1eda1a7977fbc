#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checkpoint writes: nvswap.save against fio and torch.save, interleaved.

Each repeat runs, back to back on the same directory and in this order:
fio sequential write (direct=1, bs=1M, libaio, iodepth 32, end_fsync=1),
nvswap-bench-ckpt (the C writer alone, malloc()ed source), nvswap.save
(deferred copies, the default), nvswap.save(defer=False) (every copy on
the saving thread: the writer before deferred copies), nvswap.save(
crc32=False) (torch >= 2.5: torch skips its CRC32), torch.save followed
by os.fsync (durable, as nvswap.save is), and torch.save alone (page
cache only). Each writes --size bytes: the same
number of raw bytes for fio and the C writer, a torch state dict whose
storages total --size for the three saves (float32 tensors of 64 MiB plus
a few small ones; the file is slightly larger: pickle and zip headers).
Every run starts from a deleted file after a sync, so no run inherits
another's dirty pages. GB/s are bytes of tensor data (or raw bytes) over
wall time: open to durable close. fio's own bandwidth figure is used for
fio. Prints a Markdown table of medians, min-max spread and ratios.

    flock /work/bench.lock build/venv-pypi/bin/python bench/ckpt_write.py \\
        [--reps 5] [--size 2G] [--dir nvme_swap/ckpt]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.upper())
    if not m:
        raise SystemExit(f"bad size {s}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def fresh(path):
    if os.path.exists(path):
        os.unlink(path)
    os.sync()


def run_fio(args, path):
    fresh(path)
    out = subprocess.run(
        ["fio", "--name=ckpt", f"--filename={path}", f"--size={args.size}",
         "--direct=1", "--bs=1M", f"--iodepth={args.qd}",
         "--ioengine=libaio", "--rw=write", "--end_fsync=1",
         "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    return json.loads(out)["jobs"][0]["write"]["bw_bytes"] / 1e9


def run_c(args, d):
    out = subprocess.run(
        [args.bench, "--dir", d, "--size", args.size, "--reps", "1"],
        check=True, capture_output=True, text=True).stdout
    return float(re.search(r"ckpt: ([0-9.]+) GB/s", out).group(1))


def timed(path, nbytes, fn):
    fresh(path)
    t0 = time.monotonic()
    fn()
    t = time.monotonic() - t0
    os.unlink(path)
    return nbytes / t / 1e9


def state_dict(nbytes, torch):
    g = torch.Generator().manual_seed(0)
    n = max(1, nbytes // (64 << 20))
    sd = {}
    for i in range(n):
        sd[f"layers.{i}.weight"] = torch.empty(16 << 20).uniform_(
            generator=g)
        sd[f"layers.{i}.bias"] = torch.zeros(1024)
    sd["step"] = 1000
    return sd


def row(name, v, ref=None):
    med = statistics.median(v)
    s = f"| {name} | {med:.3f} | {min(v):.3f}-{max(v):.3f} |"
    return s


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--size", default="2G")
    p.add_argument("--qd", type=int, default=32)
    p.add_argument("--dir", default="nvme_swap/ckpt")
    p.add_argument("--bench", default="build/bench/nvswap-bench-ckpt")
    args = p.parse_args()
    import torch

    import nvswap

    os.makedirs(args.dir, exist_ok=True)
    nbytes = parse_size(args.size)
    sd = state_dict(nbytes, torch)
    data = sum(t.numel() * t.element_size() for t in sd.values()
               if isinstance(t, torch.Tensor))
    path = os.path.join(args.dir, "ckpt.pt")
    keys = ["fio", "c", "nvswap", "nvswap_sync", "nvswap_nocrc",
            "torch_fsync", "torch"]
    if not hasattr(torch.serialization, "set_crc32_options"):
        keys.remove("nvswap_nocrc")
    res = {k: [] for k in keys}

    def torch_fsync():
        with open(path, "wb") as f:
            torch.save(sd, f)
            f.flush()
            os.fsync(f.fileno())

    for r in range(args.reps):
        res["fio"].append(run_fio(args, os.path.join(args.dir, "fio.bin")))
        res["c"].append(run_c(args, args.dir))
        res["nvswap"].append(timed(path, data,
                                   lambda: nvswap.save(sd, path).wait()))
        res["nvswap_sync"].append(timed(
            path, data, lambda: nvswap.save(sd, path, defer=False).wait()))
        if "nvswap_nocrc" in res:
            res["nvswap_nocrc"].append(timed(
                path, data,
                lambda: nvswap.save(sd, path, crc32=False).wait()))
        res["torch_fsync"].append(timed(path, data, torch_fsync))
        res["torch"].append(timed(path, data, lambda: torch.save(sd, path)))
        print(f"rep {r + 1}: " + ", ".join(
            f"{k} {v[-1]:.3f}" for k, v in res.items()), file=sys.stderr)

    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"{args.reps} repeats, {args.size} ({data} bytes of tensors), "
          f"dir {args.dir}, torch {torch.__version__}, python "
          f"{platform.python_version()}\n")
    print("| writer | GB/s median | min-max |")
    print("|---|---|---|")
    names = {"fio": "fio seq write, direct, bs 1M, end_fsync",
             "c": "nvswap-bench-ckpt (C writer)",
             "nvswap": "nvswap.save(...).wait()",
             "nvswap_sync": "nvswap.save(..., defer=False).wait()",
             "nvswap_nocrc": "nvswap.save(..., crc32=False).wait()",
             "torch_fsync": "torch.save + fsync",
             "torch": "torch.save (no fsync)"}
    for k, v in res.items():
        print(row(names[k], v))
    print()
    print(f"nvswap.save / fio: {med['nvswap'] / med['fio']:.2f} "
          f"(target >= 0.9)")
    print(f"nvswap.save(defer=False) / fio: "
          f"{med['nvswap_sync'] / med['fio']:.2f} (before deferred copies)")
    if "nvswap_nocrc" in med:
        print(f"nvswap.save(crc32=False) / fio: "
              f"{med['nvswap_nocrc'] / med['fio']:.2f}")
    print(f"C writer / fio: {med['c'] / med['fio']:.2f}")
    print(f"nvswap.save / torch.save+fsync: "
          f"{med['nvswap'] / med['torch_fsync']:.2f} (target >= 3)")
    print(f"nvswap.save / torch.save (no fsync): "
          f"{med['nvswap'] / med['torch']:.2f}")


if __name__ == "__main__":
    main()
