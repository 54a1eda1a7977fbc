#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""N ranks of one node sharing one disk (issue 22): N nvswap-io processes
started together, each reading (or writing) its own file through its own
aio handle, as N training ranks swapping at once. For N = 1, 2, 4 and for
two queue-depth settings (every rank the full depth, as DeepSpeed's
aio.queue_depth does; and the node's depth split evenly, nvswap's
nvswap.node_queue_depth), repeated and interleaved:

  aggregate   the bytes of all ranks over the wall time of the slowest
  vs 1 rank   aggregate / the one-rank figure of the same repeat (target
              >= 0.9: N ranks together lose nothing to contention)
  fairness    max / min per-rank throughput (target <= 1.2: no rank
              starves)
  step spread max / min over ranks of each rank's median op latency (one
              op = one rank's swap of --size bytes, a training step's)
  vs fio      aggregate / fio's with N jobs in the same repeat (each job
              its own file of --size, --loops times over, O_DIRECT,
              io_uring, 1 MiB blocks, iodepth --qd, registered buffers
              and batches as nvswap-io --compare-fio: what N processes
              reading or writing at once get from the disk), target
              >= 0.9 for the split, nvswap's default for a node's ranks
              (issue 49)

Usage: bench/ranks.py [--dir nvme_swap/ranks] [--size 512M] [--loops 4]
           [--repeats 3] [--ranks 1,2,4] [--qd 128] [--op read|write|both]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import fs_type, loadavg, parse_size  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "build", "tools", "nvswap-io")


def run_ranks(args, n, op, qd):
    """One run of n ranks; per-rank dicts and the wall time."""
    procs = []
    # Every rank's timed ops start at the same wall-clock second, after
    # its set-up (pinned buffer, the file a read needs, written untimed).
    start = time.time() + 2.0 + 1.5 * n * parse_size(args.size) / (1 << 30)
    for r in range(n):
        d = os.path.join(args.dir, f"rank{r}")
        os.makedirs(d, exist_ok=True)
        cmd = [TOOL, "--folder", d, "--io-size", args.size, "--loops",
               str(args.loops), "--queue-depth", str(qd), "--json",
               "--start-at", f"{start:.3f}"]
        if op == "read":
            cmd.append("--read")
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    t0 = time.perf_counter()
    out = []
    for p in procs:
        so, se = p.communicate()
        if p.returncode != 0:
            sys.exit(f"nvswap-io failed ({p.returncode}): {se.strip()}")
        out.append(json.loads(so))
    return out, time.perf_counter() - t0


def run_fio(args, n, op):
    """fio with n jobs at once, each as a rank above: aggregate GB/s (all
    bytes over the longest job's run) and max/min per-job throughput."""
    d = os.path.join(args.dir, "fio")
    os.makedirs(d, exist_ok=True)
    cmd = ["fio", "--name=ranks", f"--directory={d}",
           "--filename_format=f.$jobnum", f"--numjobs={n}",
           "--ioengine=io_uring", "--direct=1", "--bs=1M",
           f"--iodepth={args.qd}", f"--size={args.size}",
           f"--loops={args.loops}", "--rw=" + op, "--output-format=json",
           # as nvswap-io --compare-fio runs it (tools/io_fio.c): buffers
           # and files registered, batches of the queue depth, no
           # per-write buffer scrambling
           "--fixedbufs=1", "--registerfiles=1",
           f"--iodepth_batch_submit={args.qd}",
           f"--iodepth_batch_complete_min={args.qd}",
           "--scramble_buffers=0", "--thread"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if r.returncode != 0:
        clean(args)
        sys.exit(f"fio failed ({r.returncode}): {r.stderr.strip()}")
    jobs = json.loads(r.stdout[r.stdout.index("{"):])["jobs"]
    done = [(j[op]["io_bytes"], j[op]["runtime"] / 1e3) for j in jobs]
    rates = [b / t for b, t in done]
    return {"agg": sum(b for b, _ in done) / max(t for _, t in done) / 1e9,
            "fair": max(rates) / min(rates)}


def clean(args):
    """Remove what the run made: the ranks' and fio's directories under
    --dir, then the levels of --dir it made (each only when empty)."""
    for name in os.listdir(args.dir):
        if name == "fio" or name.startswith("rank"):
            shutil.rmtree(os.path.join(args.dir, name), ignore_errors=True)
    for level in reversed(args.made):
        try:
            os.rmdir(level)
        except OSError:
            pass


def figures(res, size, loops):
    gbs = [r["task_gbs"] * (1 << 30) / 1e9 for r in res]  # GB/s (1e9)
    lat = [r["op_latency_ms"]["median"] for r in res]
    # Aggregate: all bytes over the window from the first rank's timed
    # start to the last one's end (the ranks start together, --start-at).
    t0 = min(r["timed_start"] for r in res)
    t1 = max(r["timed_end"] for r in res)
    late = max(r["timed_start"] for r in res) - t0
    if late > 0.05:
        print(f"  (a rank started {late:.2f} s late: set-up outlasted "
              "the start time)", flush=True)
    agg = len(res) * size * loops / (t1 - t0) / 1e9
    return {"agg": agg, "per_rank": gbs, "fair": max(gbs) / min(gbs),
            "spread": max(lat) / min(lat)}


def spread(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="nvme_swap/ranks")
    ap.add_argument("--size", default="512M")
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--qd", type=int, default=128)
    ap.add_argument("--op", default="both", choices=["read", "write", "both"])
    ap.add_argument("--no-fio", dest="fio", action="store_false",
                    help="leave out fio's N jobs (the reference)")
    args = ap.parse_args()
    size = parse_size(args.size)
    ns = [int(x) for x in args.ranks.split(",")]
    ops = ["read", "write"] if args.op == "both" else [args.op]
    # the levels of --dir this run makes, outermost first: removed at the
    # end (the default, nvme_swap/ranks, would leave nvme_swap/ behind)
    args.made, level = [], os.path.abspath(args.dir)
    while not os.path.exists(level):
        args.made.insert(0, level)
        level = os.path.dirname(level)
    os.makedirs(args.dir, exist_ok=True)
    print(f"ranks.py: {args.size} per rank x {args.loops} ops, queue depth "
          f"{args.qd}, {args.repeats} interleaved repeats; {args.dir} on "
          f"{fs_type(args.dir)}; load {loadavg()}", flush=True)
    rows = {}  # (op, n, mode) -> [figures]
    for rep in range(args.repeats):
        for op in ops:
            for n in ns:
                modes = [("full", args.qd)]
                if n > 1:
                    modes.append(("split", max(1, args.qd // n)))
                for mode, qd in modes:
                    res, _ = run_ranks(args, n, op, qd)
                    rows.setdefault((op, n, mode), []).append(
                        figures(res, size, args.loops))
                if args.fio:
                    rows.setdefault((op, n, "fio"), []).append(
                        run_fio(args, n, op))
    clean(args)
    print("\n| op | ranks | queue depth each | aggregate GB/s | vs 1 rank "
          "| vs fio | fairness max/min | step spread max/min |")
    print("|---|---|---|---|---|---|---|---|")
    for op in ops:
        one = [f["agg"] for f in rows[(op, 1, "full")]]
        for n in ns:
            fio = rows.get((op, n, "fio"))
            for mode in ("full", "split", "fio"):
                fs = rows.get((op, n, mode))
                if not fs:
                    continue
                qd = max(1, args.qd // n) if mode == "split" else args.qd
                ratio = [f["agg"] / o for f, o in zip(fs, one)]
                vs = (spread([f["agg"] / g["agg"] for f, g in zip(fs, fio)])
                      if fio and mode != "fio" else "-")
                label = (f"{qd} x {n} fio jobs" if mode == "fio" else
                         f"{qd} ({mode})")
                print(f"| {op} | {n} | {label} | "
                      f"{spread([f['agg'] for f in fs])} | {spread(ratio)} "
                      f"| {vs} | {spread([f['fair'] for f in fs])} | "
                      + (f"{spread([f['spread'] for f in fs])} |"
                         if mode != "fio" else "- |"))
    print(f"\nload after: {loadavg()}")


if __name__ == "__main__":
    main()
