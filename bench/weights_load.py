#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nvswap.torch.offload(weights=) (issue 32, "pretrained weights straight
to NVMe"): load GB/s against fio's sequential read of the same files.

The weights: --size bytes of a decoder-like model (blocks of four
--width x --width fp32 Linear weights and a LayerNorm), written as
safetensors shards of at most --shard bytes with a Hugging Face index
(tensor offsets unaligned, as in HF's files), under --dir (on the disk
to test, never /tmp). Each repeat drops the page cache (echo 3 >
/proc/sys/vm/drop_caches, root) before each of these runs, each repeat
starting one run later in this list than the one before (so that no run
always follows the same one):

  load          offload(model on meta, weights=dir): wall time until it
                returns (every layer read and released: its write to the
                swap file issued), and until nvt.wait() (the writes
                done); GB/s = file bytes / time
  read alone    the same reader (open_weights: an aio_handle, O_DIRECT,
                the handle bouncing unaligned ranges) reading every
                tensor into pinned buffers, 3 in flight, nothing written:
                the read phase alone
  fio read      fio --rw=read --direct=1 --bs=1M (io_uring with
                --fixedbufs --registerfiles), the queue depth of
                nvswap's reader, each shard file in turn; GB/s = bytes /
                the sum of fio's own runtimes
  fio read+write  the same reads while a second fio process writes as
                many bytes to a new file (O_DIRECT, 1 MiB, started
                together): what the disk gives a load that must also
                write the swap file; GB/s = read bytes / the wall time
                until both are done

Target: load >= 0.8 x fio read (medians). Prints a Markdown table:
median (min-max) of each, the ratio of the medians and the median
(min-max) of the per-repeat ratios.

    sudo PYTHONPATH=build/python python3 bench/weights_load.py
        [--dir nvme_swap] [--size 2G] [--width 2048] [--shard 1G]
        [--repeats 5] [--buffer-count 8] [--qd 32] [--json FILE]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import torch

import nvswap
import nvswap.torch as nvt
from nvswap.torch import _weights
from nvswap.torch._stformat import build_header

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import fs_type, loadavg, med, parse_size, run  # noqa: E402

MIB = 1 << 20
TARGET = 0.8


class Block(torch.nn.Module):
    def __init__(self, w, device=None):
        super().__init__()
        self.q, self.k, self.v, self.o = (
            torch.nn.Linear(w, w, bias=False, device=device)
            for _ in range(4))
        self.norm = torch.nn.LayerNorm(w, device=device)


def make(blocks, w, device="meta"):
    return torch.nn.Sequential(*[Block(w, device) for _ in range(blocks)])


def write_weights(folder, blocks, w, shard, align=8):
    """Shards of the model's state_dict (random bytes, HF's split and
    names, an index, its data area starting at a multiple of align);
    returns their paths."""
    meta = make(blocks, w)
    items = [(k, v) for k, v in meta.state_dict().items()]
    parts, cur, size = [], [], 0
    for k, v in items:
        n = v.numel() * v.element_size()
        if cur and size + n > shard:
            parts.append(cur)
            cur, size = [], 0
        cur.append((k, v))
        size += n
    parts.append(cur)
    os.makedirs(folder, exist_ok=True)
    names = [f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
             for i in range(len(parts))]
    g = torch.Generator().manual_seed(0)
    for name, part in zip(names, parts):
        # 8-aligned as Hugging Face's writer leaves it (nvswap's own
        # pads to 4096)
        head, _ = build_header([(k, "F32", tuple(v.shape))
                                for k, v in part], {"format": "pt"},
                               align=align)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(head)
            for _, v in part:
                f.write(torch.randn(v.shape, generator=g).numpy().tobytes())
            f.flush()
            os.fsync(f.fileno())
    with open(os.path.join(folder, "model.safetensors.index.json"),
              "w") as f:
        json.dump({"metadata": {"total_size": sum(
            v.numel() * 4 for _, v in items)},
            "weight_map": {k: n for n, p in zip(names, parts)
                           for k, _ in p}}, f)
    return [os.path.join(folder, n) for n in names]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def load(a, wdir, swap):
    """(seconds until offload returns, until nvt.wait returns)"""
    model = make(a.blocks, a.width)
    t0 = time.perf_counter()
    nvt.offload(model, nvme_path=swap, buffer_size=a.buffer_size,
                buffer_count=a.buffer_count, weights=wdir)
    t1 = time.perf_counter()
    nvt.wait(model)
    t2 = time.perf_counter()
    st = nvt.stats(model)
    assert st["bytes_read"] == 0, st["bytes_read"]
    nvt.engine_of(model).close()  # scratch: the swap files go
    return t1 - t0, t2 - t0


def read_alone(wdir):
    """Seconds to read every tensor through the reader into pinned
    buffers (3 in flight, as many layers as the loader keeps reading)."""
    src = _weights.open_weights(wdir)
    keys = list(src.keys())
    big = max(src.nbytes(k) for k in keys)
    bufs = [nvswap.pinned_empty(big, torch.uint8) for _ in range(3)]
    ops = [[] for _ in bufs]
    t0 = time.perf_counter()
    for i, k in enumerate(keys):
        slot = i % len(bufs)
        for op in ops[slot]:
            op.wait()
        dest = bufs[slot][:src.nbytes(k)].view(torch.float32).view(
            src.shape(k))
        ops[slot] = src.submit_into(k, dest)
    for o in ops:
        for op in o:
            op.wait()
    t = time.perf_counter() - t0
    src.close()
    return t


def fio_engine(a):
    """fio's engine options: io_uring with registered buffers and files,
    as nvswap's io_uring engine registers its bounce slots and files
    (plain buffers cost fio a third of its reads here: RESULTS.md,
    striping)."""
    if a.fio_engine == "io_uring":
        return ["--ioengine=io_uring", "--fixedbufs", "--registerfiles"]
    return [f"--ioengine={a.fio_engine}"]


def fio_read(a, files):
    total, secs = 0, 0.0
    for f in files:
        out = run(["fio", "--name=rd", f"--filename={f}", "--rw=read",
                   "--direct=1", "--bs=1M", f"--iodepth={a.qd}",
                   "--readonly", "--output-format=json"] + fio_engine(a))
        job = json.loads(out)["jobs"][0]["read"]
        total += job["io_bytes"]
        secs += job["io_bytes"] / job["bw_bytes"]
    return total, secs


def fio_read_write(a, files, scratch):
    """Wall seconds of fio_read(files) while a second fio process writes
    as many bytes to scratch (both started together, both finished)."""
    total = sum(os.path.getsize(f) for f in files)
    t0 = time.perf_counter()
    wr = subprocess.Popen(
        ["fio", "--name=wr", f"--filename={scratch}", "--rw=write",
         "--direct=1", "--bs=1M", f"--iodepth={a.qd}", f"--size={total}",
         "--output-format=json"] + fio_engine(a), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        fio_read(a, files)
    finally:
        _, err = wr.communicate()
    if wr.returncode != 0:
        raise RuntimeError(f"fio write failed: {err[-2000:]}")
    return time.perf_counter() - t0


def model_args(ap, repeats):
    """The weights' shape, the pool and fio's options, shared with
    bench/serve_inplace.py."""
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--size", type=parse_size, default=2 << 30)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--shard", type=parse_size, default=1 << 30)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--buffer-count", type=int, default=8)
    ap.add_argument("--qd", type=int, default=32,
                    help="fio's queue depth: nvswap's reader uses 32")
    ap.add_argument("--fio-engine", default="io_uring")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    model_args(ap, 5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the page cache is dropped before each run")
    if not shutil.which("fio"):
        sys.exit("fio is missing: apt-get install fio")
    block = 4 * a.width * a.width * 4
    a.blocks = max(1, a.size // block)
    a.buffer_size = a.width * a.width * 4 + (64 << 10)
    root = os.path.join(a.dir, "weights_load")
    os.makedirs(root, exist_ok=True)
    fs = fs_type(root)
    if fs in ("tmpfs", "ramfs"):
        sys.exit(f"{root} is on {fs}: give --dir on the disk")
    wdir, swap = os.path.join(root, "weights"), os.path.join(root, "swap")
    scratch = os.path.join(root, "fio-write.tmp")
    shutil.rmtree(root)
    os.makedirs(swap)
    print(f"{root} ({fs}); load average {loadavg()} at start; writing "
          f"{a.blocks} blocks of width {a.width}", file=sys.stderr)
    files = write_weights(wdir, a.blocks, a.width, a.shard)
    nbytes = sum(os.path.getsize(f) for f in files)
    res = {k: [] for k in ("load", "load_drained", "read_alone", "fio_read",
                           "fio_rw")}
    try:
        def do_load():
            t, t_all = load(a, wdir, swap)
            res["load"].append(nbytes / t)
            res["load_drained"].append(nbytes / t_all)

        def do_fio_rw():
            res["fio_rw"].append(nbytes / fio_read_write(a, files, scratch))
            os.unlink(scratch)

        runs = [do_load,
                lambda: res["read_alone"].append(nbytes / read_alone(wdir)),
                lambda: res["fio_read"].append(
                    (lambda b, s: b / s)(*fio_read(a, files))),
                do_fio_rw]
        for rep in range(a.repeats):
            for i in range(len(runs)):  # each repeat starts one later
                drop_caches()
                runs[(rep + i) % len(runs)]()
            print(f"repeat {rep + 1}/{a.repeats}: " + ", ".join(
                f"{k} {v[-1] / 1e9:.2f}" for k, v in res.items()),
                file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ref = med(res["fio_read"])
    print(f"\n{len(files)} shard(s), {nbytes / 1e9:.2f} GB ({a.blocks} "
          f"blocks of 4 x {a.width}^2 fp32 + LayerNorm), pool "
          f"{a.buffer_count} x {a.buffer_size >> 10} KiB, fio "
          f"{a.fio_engine} queue depth {a.qd}, {a.repeats} interleaved "
          f"repeats, page cache dropped before each run; GB/s median "
          f"(min-max); ratio = median / fio read median\n")
    print("| run | GB/s | ratio | per-repeat ratio |")
    print("|---|---|---|---|")
    labels = {"load": "offload(weights=) returns",
              "load_drained": "offload(weights=) + nvt.wait (writes done)",
              "read_alone": "reader alone (no swap writes)",
              "fio_read": "fio sequential read",
              "fio_rw": "fio read + concurrent write of as many bytes"}
    for k, v in res.items():
        r = [x / y for x, y in zip(v, res["fio_read"])]
        print(f"| {labels[k]} | {med(v) / 1e9:.2f} ({min(v) / 1e9:.2f}-"
              f"{max(v) / 1e9:.2f}) | {med(v) / ref:.2f} | {med(r):.2f} "
              f"({min(r):.2f}-{max(r):.2f}) |")
    met = med(res["load"]) >= TARGET * ref
    print(f"\nload average {loadavg()} at the end; target load >= "
          f"{TARGET} x fio read: {'met' if met else 'MISSED'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "bytes": nbytes, "results": res},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
