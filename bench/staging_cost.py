#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What staging an unpinned buffer costs the C library, without Python:
nvswap-io at DeepSpeed's settings (1 MiB blocks, queue depth 128, one
worker) on a pinned buffer and on an unpinned one 64 bytes off a page (a
torch.empty tensor's alignment: every request goes through the handle's
bounce slots), with batch-and-drain (--sequential-requests, DeepSpeed's
overlap_events=False) and without, with more bounce memory and with two
workers. The variants alternate within each repeat, their order rotating;
prints task GB/s median [min-max], the ratio to pinned batch-and-drain per
repeat, and the CPU seconds per GiB.

    bench/staging_cost.py [--dir nvme_swap] [--size 1G] [--repeats 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SEQ = ["--sequential-requests"]
UNP = ["--unpinned", "--misalign", "64"]
VARIANTS = {
    "pinned, batch-and-drain": SEQ,
    "unpinned+64, batch-and-drain": SEQ + UNP,
    "unpinned+64, batch-and-drain, --bounce-bytes 128M":
        SEQ + UNP + ["--bounce-bytes", "128M"],
    "unpinned+64, batch-and-drain, --io-parallel 2":
        SEQ + UNP + ["--io-parallel", "2"],
    "pinned, overlapped": [],
    "unpinned+64, overlapped": UNP,
}


def spread(v, fmt="{:.2f}"):
    return (f"{fmt.format(statistics.median(v))} "
            f"[{fmt.format(min(v))}-{fmt.format(max(v))}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tool", default="build/tools/nvswap-io")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    base = [a.tool, "--folder", a.dir, "--io-size", a.size,
            "--warmup-loops", "1", "--loops", "3", "--json"]
    names = list(VARIANTS)
    print("| op | buffer, events | GB/s | / pinned batch-and-drain | "
          "CPU s/GiB |")
    print("|---|---|---|---|---|")
    for op in ("write", "read"):
        gbs = {k: [] for k in names}
        cpu = {k: [] for k in names}
        for rep in range(a.repeats):
            k0 = rep % len(names)
            for k in names[k0:] + names[:k0]:
                cmd = base + VARIANTS[k] + (["--read"] if op == "read"
                                            else [])
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
                j = json.loads(out.stdout)
                gbs[k].append(j["task_gbs"])
                cpu[k].append(j["cpu_sec_per_gib"])
        ref = gbs[names[0]]
        for k in names:
            ratio = [x / r for x, r in zip(gbs[k], ref)]
            print(f"| {op} | {k} | {spread(gbs[k])} | "
                  f"{spread(ratio, '{:.3f}')} | "
                  f"{statistics.median(cpu[k]):.3f} |", flush=True)


if __name__ == "__main__":
    main()
