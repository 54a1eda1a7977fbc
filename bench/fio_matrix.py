#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nvswap against fio at every shape: block size x queue depth x read/write
(and, if asked, engine and parallelism). Each point is one interleaved run
of `nvswap-io --compare-fio` (nvswap, then fio with huge-page buffers,
--repeats times) on one file in --dir. Prints one Markdown table: GB/s and
CPU seconds per GiB of both, each ratio as median [min-max], and whether
the point meets the targets (throughput >= 0.95 x fio, CPU/GiB <= 1.1 x
fio's). CPU is the whole process's, every thread, over the I/O only, on
both sides (see nvswap-io -h); fio's own usr+sys, which counts its job
thread alone, is shown beside it.

    bench/fio_matrix.py [--size 512M] [--repeats 5] [--dir nvme_swap]
                        [--ops read,write] [--bs 64K,256K,1M,8M]
                        [--qd 1,4,16,128] [--engines auto] [--par 1]
                        [--fio-default] [--extra "--unpinned"]
                        [--raw results.jsonl]

As root, nvswap-io adds the huge pages fio needs at each point and takes
them back after it.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import fs_type, loadavg, parse_size  # noqa: E402

TPUT, CPU = 0.95, 1.1  # the targets of issue 19


def check_fio(cmd, bs, qd, size, par, engine, op):
    """fio ran the job nvswap ran: same engine, O_DIRECT, bs, qd, file."""
    want = [f"--bs={bs}", f"--iodepth={qd}", "--direct=1",
            f"--size={size // par}", f"--io_size={size // par}",
            f"--rw={op}", f"--numjobs={par}", f"--ioengine={engine}"]
    missing = [w for w in want if w not in cmd.split()]
    if missing:
        sys.exit(f"fio did not run the same job (missing {missing}):\n"
                 f"{cmd}")


def point(a, op, eng, bs, qd, par):
    cmd = [a.tool, "--folder", a.dir, "--io-size", str(a.size_bytes),
           "--block-size", str(bs), "--queue-depth", str(qd),
           "--io-parallel", str(par), "--backend", eng, "--compare-fio",
           "--repeats", str(a.repeats), "--json"]
    cmd += ["--read"] if op == "read" else []
    cmd += [] if a.fio_default else ["--no-fio-default"]
    cmd += a.extra.split()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    j = json.loads(out.stdout)
    check_fio(j["fio_command"], bs, qd, a.size_bytes, par, j["backend"], op)
    want = j["nvswap_ops"] * -(-a.size_bytes // bs)
    if par == 1 and j["nvswap_requests"] != want:
        sys.exit(f"nvswap issued {j['nvswap_requests']} requests for "
                 f"{j['nvswap_ops']} ops of {a.size_bytes} bytes in "
                 f"{bs}-byte blocks, not {want}")
    return j, j["backend"]


def size_str(n):
    """64K, 1M, 1G: @n in the largest unit that divides it."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def fmt(d, digits):
    return (f"{d['median']:.{digits}f} [{d['min']:.{digits}f}-"
            f"{d['max']:.{digits}f}]")


def row(op, eng, bs, qd, par, j, show_eng, show_par):
    r, c = j["ratio"], j["cpu_ratio"]
    ok_t = r["median"] >= TPUT
    ok_c = c["median"] <= CPU
    cells = [op, size_str(bs), str(qd)]
    cells += [eng] if show_eng else []
    cells += [str(par)] if show_par else []
    cells += [f"{j['nvswap_gbs']['median']:.2f}",
              f"{j['fio_gbs']['median']:.2f}",
              ("**" if not ok_t else "") + fmt(r, 3) +
              ("**" if not ok_t else ""),
              f"{j['nvswap_cpu_sec_per_gib']['median']:.4f}",
              f"{j['fio_cpu_sec_per_gib']['median']:.4f}",
              ("**" if not ok_c else "") + fmt(c, 2) +
              ("**" if not ok_c else ""),
              f"{j['fio_own_cpu_sec_per_gib']['median']:.4f}",
              ("yes" if ok_t else "no") + " / " + ("yes" if ok_c else "no")]
    if "fio_default_gbs" in j:
        cells.append(f"{j['fio_default_gbs']['median']:.2f}")
    return "| " + " | ".join(cells) + " |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="512M")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--ops", default="read,write")
    ap.add_argument("--bs", default="64K,256K,1M,8M")
    ap.add_argument("--qd", default="1,4,16,128")
    ap.add_argument("--engines", default="auto")
    ap.add_argument("--par", default="1")
    ap.add_argument("--fio-default", action="store_true",
                    help="also run fio with its default buffers")
    ap.add_argument("--extra", default="")
    ap.add_argument("--raw", help="append each point's JSON to this file")
    ap.add_argument("--tool", default="build/tools/nvswap-io")
    a = ap.parse_args()
    a.size_bytes = parse_size(a.size)
    bss = [parse_size(b) for b in a.bs.split(",")]
    qds = [int(q) for q in a.qd.split(",")]
    engines, pars = a.engines.split(","), [int(p) for p in a.par.split(",")]
    os.makedirs(a.dir, exist_ok=True)

    show_eng, show_par = len(engines) > 1, len(pars) > 1
    head = ["op", "bs", "qd"] + (["engine"] if show_eng else []) + \
        (["par"] if show_par else []) + \
        ["nvswap GB/s", "fio GB/s", "ratio median [min-max]",
         "CPU s/GiB nvswap", "CPU s/GiB fio", "CPU ratio median [min-max]",
         "fio job-thread CPU s/GiB", "meets >= 0.95 / <= 1.1"] + \
        (["fio default-buffer GB/s"] if a.fio_default else [])
    t0 = time.time()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {size_str(a.size_bytes)} "
          f"file per point, {a.repeats} interleaved repeats, "
          f"{fs_type(a.dir)} under {a.dir}, load {loadavg()}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    raw = open(a.raw, "a") if a.raw else None
    try:
        for op in a.ops.split(","):
            for eng in engines:
                for bs in bss:
                    for qd in qds:
                        for par in pars:
                            j, used = point(a, op, eng, bs, qd, par)
                            print(row(op, used, bs, qd, par, j, show_eng,
                                      show_par), flush=True)
                            if raw:
                                j.update(op=op, bs=bs, qd=qd, par=par)
                                raw.write(json.dumps(j) + "\n")
    finally:
        if raw:
            raw.close()
    print(f"\n{time.time() - t0:.0f} s in all, load {loadavg()}")


if __name__ == "__main__":
    main()
