#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Training from weights in place (issue 49, item 1): a model trained
after offload(weights=), its streamed layers read from the safetensors
shards where they lie until the first optimizer step moves them into the
swap file, against the copy into the swap file that offload() made
before (the same call with nvswap.torch._load.IN_PLACE off), and fio's
read of the same files. bench/weights_load.py's model and shards (blocks
of four --width x --width fp32 Linear weights and a LayerNorm, a block's
forward x + o(q(y) + k(y) + v(y)) with y = norm(x)), their data area at
a multiple of 4096 as nvswap.torch.save_pretrained writes it (a tensor
not 64-byte aligned in its file is copied, not read in place). Each
repeat drops the page cache before each run, the runs in a rotating
order, each training run its own process:

  in-place   offload(model on meta, weights=) (nothing read or written),
             nvt.AdamW(lr=1e-4), then 3 steps on a fixed random batch of
             --batch rows: forward, loss = out.pow(2).mean(), backward,
             step(), zero_grad(), nvt.wait(model) (so that each step's
             time holds its I/O: the first step's write-back moves every
             layer into the swap file)
  copy       the same, offload() reading every layer and writing it to
             the swap file first (IN_PLACE = False)
  fio read   fio --rw=read --direct=1 --bs=1M over the shards (the
             reference rate)

Timed from the call to offload(): its return, load + the first step
(until its nvt.wait returns), steps 2 and 3 each; with the bytes read
and written (nvt.stats) by the end of step 1 and the 3 losses, which
must be the same in every run (else the exit status is 1). A run whose
layers in place (engine_of(model).in_place) are not as its kind says
fails the bench.

Target (issue 49): in place, load + first step <= the copy's; steps 2
and 3 unchanged. Prints Markdown tables: each kind's medians [min-max],
and the per-repeat ratios in place / copy.

    sudo PYTHONPATH=build/python python3 bench/train_inplace.py
        [--dir nvme_swap] [--size 1G] [--width 2048] [--shard 1G]
        [--repeats 3] [--buffer-count 8] [--batch 8]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import torch

import nvswap.torch as nvt
from nvswap.torch import _load
from nvswap.torch._engine import engine_of

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import fs_type, loadavg, med  # noqa: E402
import weights_load as wl  # noqa: E402

STEPS = 3
KINDS = ("in-place", "copy")


def block_forward(self, x):
    y = self.norm(x)
    return x + self.o(self.q(y) + self.k(y) + self.v(y))


wl.Block.forward = block_forward  # weights_load's blocks are never called


def paths(a):
    root = os.path.join(a.dir, "train_inplace")
    return root, os.path.join(root, "weights"), os.path.join(root, "swap")


def child(a):
    """One training run in this process: a JSON line on stdout."""
    _, wdir, swap = paths(a)
    _load.IN_PLACE = a.child == "in-place"
    model = wl.make(a.blocks, a.width)
    x = torch.randn(a.batch, a.width,
                    generator=torch.Generator().manual_seed(1))
    t0 = time.perf_counter()
    nvt.offload(model, nvme_path=swap, buffer_size=a.buffer_size,
                buffer_count=a.buffer_count, weights=wdir)
    t_load = time.perf_counter() - t0
    eng = engine_of(model)
    placed = len(eng.in_place)
    if bool(placed) != _load.IN_PLACE:
        print(f"{a.child}: {placed} of {len(eng.layers)} layers in place",
              file=sys.stderr)
        return 2
    opt = nvt.AdamW(model.parameters(), lr=1e-4)
    ends, losses, st = [], [], None
    for _ in range(STEPS):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        nvt.wait(model)
        ends.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if st is None:
            st = nvt.stats(model)
            # layers still read from the weights file after the step
            backed = sum(1 for i in eng.in_place
                         if eng.pswap.info(i << 20)["backed"])
    print(json.dumps({
        "load": t_load, "first": ends[0], "step2": ends[1] - ends[0],
        "step3": ends[2] - ends[1], "read": st["bytes_read"],
        "written": st["bytes_written"], "layers": len(eng.layers),
        "placed": placed, "backed": backed, "losses": losses}))
    eng.close()  # scratch: the swap files go
    return 0


def train(a, kind):
    """One run in a fresh process (the page cache dropped first)."""
    root, _, swap = paths(a)
    shutil.rmtree(swap, ignore_errors=True)
    os.makedirs(swap)
    wl.drop_caches()
    r = subprocess.run([sys.executable, os.path.abspath(__file__),
                        "--child", kind] + sys.argv[1:],
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{kind} run failed ({r.returncode}):\n"
                         f"{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cell(v, f="{:.2f}"):
    return f"{f.format(med(v))} [{f.format(min(v))}-{f.format(max(v))}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    wl.model_args(ap, 3)
    ap.add_argument("--batch", type=int, default=8,
                    help="rows of the fixed input (default 8)")
    ap.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.blocks = max(1, a.size // (4 * a.width * a.width * 4))
    a.buffer_size = a.width * a.width * 4 + (64 << 10)
    if a.child:
        return child(a)
    if os.geteuid() != 0:
        sys.exit("run as root: the page cache is dropped before each run")
    if not shutil.which("fio"):
        sys.exit("fio is missing: apt-get install fio")
    made = not os.path.exists(a.dir)
    if fs_type(a.dir if not made else os.path.dirname(
            os.path.abspath(a.dir))) in ("tmpfs", "ramfs"):
        sys.exit(f"{a.dir} is in memory: give --dir on the disk")
    root, wdir, _ = paths(a)
    shutil.rmtree(root, ignore_errors=True)
    print(f"{time.strftime('%H:%M:%S')} {root}; load average {loadavg()}; "
          f"writing {a.blocks} blocks of width {a.width}", file=sys.stderr)
    try:
        files = wl.write_weights(wdir, a.blocks, a.width, a.shard,
                                 align=4096)
        nbytes = sum(os.path.getsize(f) for f in files)
        got = {k: [] for k in KINDS}
        fio = []

        def read():
            wl.drop_caches()
            b, s = wl.fio_read(a, files)
            fio.append(b / s)

        runs = [lambda: got["in-place"].append(train(a, "in-place")),
                lambda: got["copy"].append(train(a, "copy")), read]
        for rep in range(a.repeats):
            for i in range(len(runs)):
                runs[(rep + i) % len(runs)]()
            print(f"{time.strftime('%H:%M:%S')} repeat {rep + 1}/"
                  f"{a.repeats}: " + ", ".join(
                      f"{k} load+step1 {v[-1]['first']:.2f} s, steps 2-3 "
                      f"{v[-1]['step2']:.2f} {v[-1]['step3']:.2f} s"
                      for k, v in got.items())
                  + f", fio {fio[-1] / 1e9:.2f} GB/s", file=sys.stderr)
    finally:
        shutil.rmtree(root if not made else a.dir, ignore_errors=True)
    losses = {json.dumps(r["losses"]) for v in got.values() for r in v}
    one = got["copy"][0]
    print(f"\n{len(files)} shard(s), {nbytes / 1e9:.2f} GB ({a.blocks} "
          f"blocks of 4 x {a.width}^2 fp32 + LayerNorm, {one['layers']} "
          f"layers), pool {a.buffer_count} x {a.buffer_size >> 10} KiB, "
          f"AdamW, batch {a.batch}, {a.repeats} interleaved repeats, each "
          f"run its own process, page cache dropped before each run; "
          f"seconds from the call to offload(), median [min-max]; fio "
          f"read {cell([f / 1e9 for f in fio])} GB/s (bytes / fio = "
          f"{nbytes / med(fio):.2f} s)\n")
    print("| kind | offload() returns | load + first step | step 2 | "
          "step 3 | read by step 1 | written by step 1 | layers in place "
          "at load / after step 1 |")
    print("|---|---|---|---|---|---|---|---|")
    for k, v in got.items():
        print(f"| {k} | {cell([r['load'] for r in v], '{:.3f}')} | "
              f"{cell([r['first'] for r in v])} | "
              f"{cell([r['step2'] for r in v])} | "
              f"{cell([r['step3'] for r in v])} | "
              f"{cell([r['read'] / 1e9 for r in v])} GB | "
              f"{cell([r['written'] / 1e9 for r in v])} GB | "
              f"{v[0]['placed']} / {max(r['backed'] for r in v)} |")
    ratios = {}
    for name, f in (("load + first step", lambda r: r["first"]),
                    ("step 2", lambda r: r["step2"]),
                    ("step 3", lambda r: r["step3"]),
                    ("steps 2-3", lambda r: r["step2"] + r["step3"])):
        ratios[name] = [f(p) / f(c) for p, c in zip(got["in-place"],
                                                    got["copy"])]
    print("\n| in place / copy, per repeat | " + " | ".join(ratios) + " |")
    print("|---|" + "---|" * len(ratios))
    print("| median [min-max] | " + " | ".join(
        cell(v, "{:.3f}") for v in ratios.values()) + " |")
    first, later = ratios["load + first step"], ratios["steps 2-3"]
    print(f"\nload + first step in place <= the copy's (median ratio "
          f"{med(first):.3f}): {'met' if med(first) <= 1 else 'MISSED'}; "
          f"steps 2-3 in place / copy {med(later):.3f} "
          f"[{min(later):.3f}-{max(later):.3f}]; losses "
          + ("the same in every run: " + next(iter(losses))
             if len(losses) == 1 else f"DIFFER: {sorted(losses)}")
          + f"; load average {loadavg()} at {time.strftime('%H:%M:%S')}")
    return 0 if len(losses) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
