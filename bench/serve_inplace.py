#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Weights in place (issue 49, item 1): a model served with
offload(weights=, inference=True) straight from its safetensors shards,
against the copy into the swap file that call made before (the same
call with nvswap.torch._load.IN_PLACE off), and fio's read of the same
files. bench/weights_load.py's model and shards (blocks of four --width
x --width fp32 Linear weights and a LayerNorm), their data area at a
multiple of 4096 as nvswap.torch.save_pretrained writes it (a tensor
not 64-byte aligned in its file is copied, not served in place), a
forward that uses every layer once. Each repeat drops the
page cache before each run, the runs in a rotating order:

  copy       offload() until it returns (every layer read and written
             to the swap file), then the first forward (every layer read
             back from the swap file)
  in place   offload() until it returns (headers checked, nothing
             read), then the first forward (every layer read from the
             shards)
  fio read   fio --rw=read --direct=1 --bs=1M over the shards (the
             reference rate)

Both serve with page_cache=False (--page-cache on: True): O_DIRECT, the
first forward's reads comparable with fio's (through the page cache, a
cold first forward read the shards 1.8-2.2 x slower here, and the
copy's first forward reads the swap file it has just written from the
cache: not a disk figure). Targets: in place's offload() <= 0.05 x the
copy's; its first forward <= 1.2 x (bytes / fio's read rate) + the
forward in memory. Prints a Markdown table of medians (min-max).

    sudo PYTHONPATH=build/python python3 bench/serve_inplace.py
        [--dir nvme_swap] [--size 2G] [--width 2048] [--shard 1G]
        [--repeats 3] [--buffer-count 8] [--page-cache off|on]
"""
import argparse
import os
import shutil
import sys
import time

import torch

import nvswap.torch as nvt
from nvswap.torch import _load, _weights

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import fs_type, loadavg, med  # noqa: E402
import weights_load as wl  # noqa: E402


def forward(model, x):
    """Every block: its LayerNorm, then its four Linears."""
    with torch.no_grad():
        for b in model:
            y = b.norm(x)
            x = x + b.o(b.q(y) + b.k(y) + b.v(y))
    return x


def serve(a, wdir, swap, x, in_place):
    """(seconds until offload returns, seconds of the first forward,
    bytes written to the swap file, the output)."""
    _load.IN_PLACE = in_place
    model = wl.make(a.blocks, a.width)
    t0 = time.perf_counter()
    nvt.offload(model, nvme_path=swap, buffer_size=a.buffer_size,
                buffer_count=a.buffer_count, weights=wdir, inference=True,
                memory=None, page_cache=a.page_cache == "on")
    nvt.wait(model)
    t1 = time.perf_counter()
    out = forward(model, x)
    t2 = time.perf_counter()
    written = nvt.stats(model)["bytes_written"]
    nvt.engine_of(model).close()
    _load.IN_PLACE = True
    return t1 - t0, t2 - t1, written, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    wl.model_args(ap, 3)
    ap.add_argument("--page-cache", choices=("off", "on"), default="off",
                    help="offload(page_cache=): off (O_DIRECT, the "
                    "default) or on")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the page cache is dropped before each run")
    if not shutil.which("fio"):
        sys.exit("fio is missing: apt-get install fio")
    a.blocks = max(1, a.size // (4 * a.width * a.width * 4))
    a.buffer_size = a.width * a.width * 4 + (64 << 10)
    made = not os.path.exists(a.dir)
    root = os.path.join(a.dir, "serve_inplace")
    if fs_type(a.dir if not made else os.path.dirname(
            os.path.abspath(a.dir))) in ("tmpfs", "ramfs"):
        sys.exit(f"{a.dir} is in memory: give --dir on the disk")
    shutil.rmtree(root, ignore_errors=True)
    wdir, swap = os.path.join(root, "weights"), os.path.join(root, "swap")
    os.makedirs(swap)
    try:
        files = wl.write_weights(wdir, a.blocks, a.width, a.shard,
                                 align=4096)
        nbytes = sum(os.path.getsize(f) for f in files)
        x = torch.randn(1, a.width, generator=torch.Generator().manual_seed(1))
        # the forward in memory: the same weights, read once (not timed)
        ref = wl.make(a.blocks, a.width, device="cpu")
        src = _weights.open_weights(wdir)
        ref.load_state_dict({k: src.tensor(k) for k in src.keys()})
        src.close()
        res = {k: [] for k in ("copy_load", "copy_first", "place_load",
                               "place_first", "fio", "memory")}
        outs = []

        def copy():
            t, f, w, out = serve(a, wdir, swap, x, False)
            assert w > 0, "the copy wrote nothing"
            res["copy_load"].append(t)
            res["copy_first"].append(f)
            outs.append(out)

        def place():
            t, f, w, out = serve(a, wdir, swap, x, True)
            assert w == 0, f"in place wrote {w} bytes"
            res["place_load"].append(t)
            res["place_first"].append(f)
            outs.append(out)

        def fio():
            b, s = wl.fio_read(a, files)
            res["fio"].append(b / s)

        def memory():
            t0 = time.perf_counter()
            outs.append(forward(ref, x))
            res["memory"].append(time.perf_counter() - t0)

        runs = [copy, place, fio, memory]
        for rep in range(a.repeats):
            for i in range(len(runs)):
                wl.drop_caches()
                runs[(rep + i) % len(runs)]()
            print(f"repeat {rep + 1}/{a.repeats}: " + ", ".join(
                f"{k} {v[-1]:.3g}" for k, v in res.items() if v),
                file=sys.stderr)
        same = all(torch.equal(o, outs[0]) for o in outs)
    finally:
        shutil.rmtree(root if not made else a.dir, ignore_errors=True)
    fio_rate = med(res["fio"])
    bound = nbytes / fio_rate
    print(f"\n{len(files)} shard(s), {nbytes / 1e9:.2f} GB ({a.blocks} "
          f"blocks of 4 x {a.width}^2 fp32 + LayerNorm), pool "
          f"{a.buffer_count} x {a.buffer_size >> 10} KiB, page_cache "
          f"{a.page_cache}, {a.repeats} "
          f"interleaved repeats, page cache dropped before each run; "
          f"seconds, median (min-max); fio read {fio_rate / 1e9:.2f} GB/s "
          f"(bytes / fio = {bound:.2f} s)\n")
    print("| run | offload() returns | first forward |")
    print("|---|---|---|")

    def cell(v):
        return f"{med(v):.3f} ({min(v):.3f}-{max(v):.3f})"
    print(f"| copy into the swap file | {cell(res['copy_load'])} | "
          f"{cell(res['copy_first'])} |")
    print(f"| in place | {cell(res['place_load'])} | "
          f"{cell(res['place_first'])} |")
    print(f"| in memory | | {cell(res['memory'])} |")
    r = med(res["place_load"]) / med(res["copy_load"])
    f = (med(res["place_first"]) - med(res["memory"])) / bound
    print(f"\nin place / copy, offload(): {r:.3f} (target <= 0.05); in "
          f"place's first forward less the one in memory, / (bytes / fio "
          f"read): {f:.2f} (target <= 1.2); outputs equal in every "
          f"run: {same}; load average {loadavg()} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
