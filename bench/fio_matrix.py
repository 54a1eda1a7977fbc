#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The issue-4 matrix: nvswap-io --compare-fio over op x engine x queue
depth x parallelism, each point its own interleaved run (nvswap, fio with
huge-page buffers, fio with default buffers; --repeats times). Prints a
Markdown table of medians with the ratio's min-max spread.

    bench/fio_matrix.py [--size 1G] [--repeats 5] [--dir nvme_swap]
                        [--ops read,write] [--engines io_uring,libaio]
                        [--qd 32,128] [--par 1,2] [--extra "--unpinned"]
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeats", default="5")
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--ops", default="read,write")
    ap.add_argument("--engines", default="io_uring,libaio")
    ap.add_argument("--qd", default="32,128")
    ap.add_argument("--par", default="1,2")
    ap.add_argument("--extra", default="")
    ap.add_argument("--tool", default="build/tools/nvswap-io")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    print("| op | engine | qd | par | nvswap GB/s | fio huge-page GB/s "
          "| ratio median [min-max] | fio default GB/s "
          "| CPU s/GiB nvswap / fio (ratio) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in a.ops.split(","):
        for eng in a.engines.split(","):
            for qd in a.qd.split(","):
                for par in a.par.split(","):
                    cmd = [a.tool, "--folder", a.dir, "--io_size", a.size,
                           "--block_size", "1M", "--queue_depth", qd,
                           "--io_parallel", par, "--backend", eng,
                           "--compare-fio", "--repeats", a.repeats,
                           "--json"] + (["--read"] if op == "read" else []) \
                        + a.extra.split()
                    out = subprocess.run(cmd, capture_output=True, text=True)
                    if out.returncode != 0:
                        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
                    j = json.loads(out.stdout)
                    r = j["ratio"]
                    print(f"| {op} | {eng} | {qd} | {par} "
                          f"| {j['nvswap_gbs']['median']:.2f} "
                          f"| {j['fio_gbs']['median']:.2f} "
                          f"| **{r['median']:.3f}** [{r['min']:.3f}-"
                          f"{r['max']:.3f}] "
                          f"| {j['fio_default_gbs']['median']:.2f} "
                          f"| {j['nvswap_cpu_sec_per_gib']['median']:.3f} / "
                          f"{j['fio_cpu_sec_per_gib']['median']:.3f} "
                          f"({j['cpu_ratio']['median']:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
