#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tuned against default aio settings, at the size a swap moves: runs
nvswap-io with the settings a config without an "aio" section gets and
with the ones nvswap-tune wrote (--config, from --write-config), the two
alternating repeat by repeat (the order flips each repeat), writes and
reads. Prints a Markdown table of task GB/s medians [min-max] and the
tuned/default ratio per repeat.

    bench/tuned_vs_default.py --config tuned.json [--dir nvme_swap]
                              [--size 1G] [--repeats 7]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# What nvs_config_aio_opts() gives for a config without "aio"
# (DeepSpeed's defaults); the backend is auto.
DEFAULT = {"block_size": 1048576, "queue_depth": 8,
           "intra_op_parallelism": 1, "single_submit": False,
           "overlap_events": True, "backend": "auto"}


def settings_of(path):
    with open(path) as f:
        cfg = json.load(f)
    s = dict(DEFAULT)
    s.update(cfg.get("aio", {}))
    s["backend"] = cfg.get("nvswap", {}).get("backend", "auto")
    return s


def run(tool, folder, size, s, op):
    cmd = [tool, "--folder", folder, "--io-size", size,
           "--block-size", str(s["block_size"]),
           "--queue-depth", str(s["queue_depth"]),
           "--io-parallel", str(s["intra_op_parallelism"]),
           "--backend", s["backend"], "--warmup-loops", "1", "--json"]
    if s["single_submit"]:
        cmd.append("--single-submit")
    if not s["overlap_events"]:
        cmd.append("--sequential-requests")
    if op == "read":
        cmd.append("--read")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)["task_gbs"]


def spread(v):
    return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tool", default="build/tools/nvswap-io")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    tuned = settings_of(a.config)
    print(f"tuned: {json.dumps(tuned)}")
    print(f"default: {json.dumps(DEFAULT)}\n")
    print("| op | default GB/s | tuned GB/s | tuned/default median "
          "[min-max] |")
    print("|---|---|---|---|")
    for op in ("write", "read"):
        d, t, ratio = [], [], []
        for rep in range(a.repeats):
            pair = [("d", DEFAULT), ("t", tuned)]
            if rep % 2:
                pair.reverse()
            got = {k: run(a.tool, a.dir, a.size, s, op) for k, s in pair}
            d.append(got["d"])
            t.append(got["t"])
            ratio.append(got["t"] / got["d"])
        print(f"| {op} | {spread(d)} | {spread(t)} | **{spread(ratio)}** |",
              flush=True)


if __name__ == "__main__":
    main()
