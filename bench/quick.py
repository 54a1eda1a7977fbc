#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make bench: the regression guard. A fixed set of nvswap's benchmarks,
each against its reference in the same run, in about a minute, printed as
ONE table of ratios with the target each should meet:

- sequential read and write, 1 MiB blocks, queue depth 128: nvswap-io
  --compare-fio (nvswap and fio with huge-page buffers, interleaved),
  GB/s and CPU seconds per GiB;
- 4 KiB random O_DIRECT reads at queue depth 1 through the synchronous
  call (nvswap-bench-small's default path, on the caller's thread)
  against fio --ioengine=psync --iodepth=1 on the same file, interleaved
  run by run (bench/small_ops.py's two runs);
- the overlap balance point (nvswap-bench-overlap at I/O:compute 1, in
  the steady state of --steps 4): the step's time against its own
  max(I/O time, compute time);
- the swap walk (nvswap-bench-swap): the swap manager against the same
  walk by hand on one aio handle, interleaved.

A ratio outside its target is marked MISS; the exit status is 0 unless a
benchmark failed to run (or, with --strict, a target was missed). Timing
is not a test: this is not part of make test. The full set, slower, is
make bench-full; the matrix over every shape is bench/fio_matrix.py.

    bench/quick.py [--dir nvme_swap] [--build build] [--reps 5] [--strict]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import small_ops  # noqa: E402
from benchutil import fs_type, loadavg, run  # noqa: E402

ROWS = []  # (name, value, reference, ratio, low, high, target, ok)


def add(name, value, ref, ratios, target):
    """@ratios: the per-repeat ratios, or (median, min, max)."""
    if isinstance(ratios, dict):
        med, lo, hi = ratios["median"], ratios["min"], ratios["max"]
    else:
        med, lo, hi = statistics.median(ratios), min(ratios), max(ratios)
    op, bound = target
    ok = med >= bound if op == ">=" else med <= bound
    ROWS.append((name, value, ref, med, lo, hi, f"{op} {bound}", ok))


def sequential(a):
    for op in ("read", "write"):
        j = json.loads(run(
            [f"{a.build}/tools/nvswap-io", "--folder", a.dir, "--io-size",
             "256M", "--block-size", "1M", "--queue-depth", "128",
             "--compare-fio", "--no-fio-default", "--repeats", str(a.reps),
             "--json"] + (["--read"] if op == "read" else [])))
        eng = j["backend"]
        add(f"sequential {op} 256 MiB, 1 MiB x qd 128, {eng}: GB/s",
            f"{j['nvswap_gbs']['median']:.2f}",
            f"fio {j['fio_gbs']['median']:.2f}", j["ratio"], (">=", 0.95))
        add(f"sequential {op}: CPU s/GiB (whole process)",
            f"{j['nvswap_cpu_sec_per_gib']['median']:.4f}",
            f"fio {j['fio_cpu_sec_per_gib']['median']:.4f}",
            j["cpu_ratio"], ("<=", 1.1))


def small(a):
    """bench/small_ops.py's default path against its fio psync, on the
    same 64 MiB file, alternating after a warm-up round of each."""
    o = argparse.Namespace(tool=f"{a.build}/bench/nvswap-bench-small",
                           dir=a.dir, size=4096, ops=5000, write=False,
                           buffered=False,
                           file=os.path.join(a.dir, "small_ops.swp"))
    nv, ref = [], []
    try:
        small_ops.run(o, "inline")
        small_ops.run(o, "fio")
        for _ in range(a.reps):
            nv.append(small_ops.run(o, "inline"))
            ref.append(small_ops.run(o, "fio"))
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"{' '.join(e.cmd)} failed ({e.returncode}):\n"
                           f"{e.stdout}{e.stderr}") from e
    finally:
        if os.path.exists(o.file):
            os.unlink(o.file)
    add("4 KiB random read, O_DIRECT, qd 1, sync call: ops/s",
        f"{statistics.median(nv):.0f}",
        f"fio psync {statistics.median(ref):.0f}",
        [x / y for x, y in zip(nv, ref)], (">=", 0.95))


def overlap(a):
    """The issue's setting: --steps 4, the steady state of a training
    loop (one step untimed, four timed); 3 repeats keep it to ~15 s."""
    out = run([f"{a.build}/bench/nvswap-bench-overlap", "--dir", a.dir,
               "--config", "examples/ds_config.json", "--layers", "16",
               "--tensor-size", "16M", "--buffers", "4", "--steps", "4",
               "--reps", str(min(a.reps, 3)), "--ratios", "1"])
    m = re.search(r"^\s+1\.00\s+([\d.]+)\s+([\d.]+)\s+([\d.]+) \(([\d.]+)-"
                  r"([\d.]+)\)", out, re.M)
    tio, tstep, eff, lo, hi = (float(x) for x in m.groups())
    add("overlap balance point (I/O:compute 1, 16 x 16 MiB, --steps 4): "
        "step s", f"{tstep:.3f}", f"max(io, compute) {tio:.3f}",
        {"median": eff, "min": lo, "max": hi}, ("<=", 1.05))


def swap_walk(a):
    out = run([f"{a.build}/bench/nvswap-bench-swap", "--dir", a.dir,
               "--layers", "16", "--tensor-size", "32M", "--buffers", "4",
               "--reps", str(a.reps)])
    sw = re.search(r"swapper\s+([\d.]+) GB/s", out)[1]
    hand = re.search(r"hand-written\s+([\d.]+) GB/s", out)[1]
    m = re.search(r"median ([\d.]+) \(([\d.]+)-([\d.]+)\)", out)
    add("swap walk (16 x 32 MiB, 4 buffers): GB/s", sw,
        f"hand-written aio {hand}",
        {"median": float(m[1]), "min": float(m[2]), "max": float(m[3])},
        (">=", 0.95))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="nvme_swap")
    p.add_argument("--build", default="build")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a target is missed")
    a = p.parse_args()
    made = not os.path.exists(a.dir)
    os.makedirs(a.dir, exist_ok=True)
    try:
        return run_all(a)
    finally:
        if made:  # a directory this run made goes again, once empty
            try:
                os.rmdir(a.dir)
            except OSError:
                pass


def run_all(a):
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    t0, failed = time.time(), []
    head = (f"{time.strftime('%Y-%m-%d %H:%M')}, commit {rev or '?'}, "
            f"{fs_type(a.dir)} under {a.dir}, {a.reps} repeats, "
            f"load {loadavg()}")
    for bench in (sequential, small, overlap, swap_walk):
        print(f"running {bench.__name__}...", file=sys.stderr, flush=True)
        try:
            bench(a)
        except (RuntimeError, TypeError, ValueError, KeyError) as e:
            failed.append(f"{bench.__name__}: {e}")
    print(head + "\n")
    print("| benchmark | nvswap | reference | ratio median [min-max] "
          "| target | |")
    print("|---|---|---|---|---|---|")
    for name, val, ref, med, lo, hi, target, ok in ROWS:
        print(f"| {name} | {val} | {ref} | {med:.3f} [{lo:.3f}-{hi:.3f}] "
              f"| {target} | {'ok' if ok else '**MISS**'} |")
    print(f"\n{time.time() - t0:.0f} s, load {loadavg()}")
    for f in failed:
        print(f"FAILED {f}", file=sys.stderr)
    if failed:
        return 1
    return 1 if a.strict and not all(r[-1] for r in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
