#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nvswap.torch (issue 18, "Speed"): the GPT-style decoder of
examples/python/train_offloaded.py trained offloaded (parameters,
gradients and AdamW state on NVMe) against the same model in memory, at
several widths.

For each width: two copies of one model (same weights, same batches), the
in-memory one with torch.optim.AdamW, the offloaded one with
nvswap.torch.AdamW and the example's config (its pools, lookahead 2).
--warmup untimed steps of each, then --steps timed steps, interleaved:
in-memory first on even steps, offloaded first on odd ones, so that a
drift of the machine's load hits both sides alike. The losses of the two
are checked equal at every step. Each step is timed as
a whole and by phase (forward + loss, backward, optimizer step +
zero_grad), with the process's user and system CPU time.
nvswap.torch.stats(model) deltas give the offloaded step's bytes read and
written and the I/O exposed (the time acquires waited for I/O or a pool
buffer, from the C library), per phase too. The ratio is the median of
the per-step ratios (offloaded / in-memory step of the same batch), with
min-max and IQR; "min / min" (fastest offloaded step over fastest
in-memory step) is the figure least moved by other load on the machine.

The disk is measured in the same run, before each width: a sequential
write then read of --disk-size through nvswap.aio_handle into a pinned
tensor (1 MiB blocks, queue depth 32, as the example's config). The
step's I/O time if nothing overlapped is estimated as
T_io = bytes read / read bandwidth + bytes written / write bandwidth and
compared with the in-memory step (the compute): "compute" when that is
the larger, "I/O" otherwise. Target (issue 18): where compute >= I/O,
offloaded step <= 1.10 x in-memory step (the median of the per-step
ratios).

--profile runs --profile-steps more offloaded steps under cProfile after
the timed ones and prints where their time went (cProfile slows Python
code, so those steps are not in the table).

    PYTHONPATH=build/python python3 bench/torch_offload.py
        [--dir /var/tmp/nvswap-bench] [--widths 256,512,1024]
        [--layers 8,6,4] [--batch 8] [--context 64] [--steps 7]
        [--warmup 2] [--disk-size 256M] [--profile] [--json FILE]

--dir must be on the disk to test (not /tmp, which may be tmpfs).
"""
import argparse
import copy
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time

import torch

import nvswap
import nvswap.torch as nvt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
from train_offloaded import Decoder, config  # noqa: E402
from train_offloaded import step as train_step  # noqa: E402
from benchutil import fs_type, loadavg, med, parse_size  # noqa: E402

MIB = 1 << 20
VOCAB, HEADS = 2048, 4
TARGET = 1.10


def ints(s):
    return [int(x) for x in s.split(",") if x]


def iqr(v):
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


# ---- the disk --------------------------------------------------------------

def disk_bandwidth(folder, nbytes, loops=3):
    """(write B/s, read B/s): median of @loops sequential passes of
    @nbytes through nvswap.aio_handle, O_DIRECT, into a pinned tensor."""
    h = nvswap.aio_handle(MIB, 32, False, False, 1)
    buf = h.new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
    buf.fill_(0x5A)
    path = os.path.join(folder, f"torch_offload.{os.getpid()}.disk")
    try:
        w, r = [], []
        h.sync_pwrite(buf, path, 0)  # the file laid out, untimed
        for _ in range(loops):
            t0 = time.perf_counter()
            h.sync_pwrite(buf, path, 0)
            w.append(nbytes / (time.perf_counter() - t0))
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        for _ in range(loops):
            t0 = time.perf_counter()
            h.sync_pread(buf, path, 0)
            r.append(nbytes / (time.perf_counter() - t0))
        direct = h.stats()["direct_fallbacks"] == 0
    finally:
        os.unlink(path)
        h.free_cpu_locked_tensor(buf)
        del buf
        h.close()
    return med(w), med(r), direct


# ---- one training step, by phase -------------------------------------------

def step(model, opt, tokens, eng=None):
    """{'total','fwd','bwd','opt','user','sys'} seconds and the loss;
    for an offloaded model (eng given) also the nvswap.torch.stats
    deltas, whole step and per phase."""
    marks = []

    def mark():
        t = os.times()
        marks.append((time.perf_counter(), (t.user, t.system),
                      nvt.stats(model) if eng else None))

    mark()
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), tokens[:, 1:].flatten())
    mark()
    loss.backward()
    mark()
    opt.step()
    opt.zero_grad()
    mark()
    out = {"total": marks[3][0] - marks[0][0],
           "user": marks[3][1][0] - marks[0][1][0],
           "sys": marks[3][1][1] - marks[0][1][1], "loss": loss.item()}
    for name, (a, b) in zip(("fwd", "bwd", "opt"),
                            zip(marks, marks[1:])):
        out[name] = b[0] - a[0]
        if eng:
            for k, key in (("_exposed", "io_exposed_s"),
                           ("_read", "bytes_read"),
                           ("_written", "bytes_written")):
                out[name + k] = b[2][key] - a[2][key]
    if eng:
        s0, s1 = marks[0][2], marks[3][2]
        out["read"] = s1["bytes_read"] - s0["bytes_read"]
        out["written"] = s1["bytes_written"] - s0["bytes_written"]
        out["exposed"] = s1["io_exposed_s"] - s0["io_exposed_s"]
        out["acquire_py"] = s1["acquire_s"] - s0["acquire_s"]
        for pool in ("param", "optimizer"):
            for k in ("acquire_wait_ns", "buffer_wait_ns"):
                out[f"{pool}_{k}"] = (s1[pool][k] - s0[pool][k]) / 1e9
    return out


def run_width(a, width, layers, bw):
    torch.manual_seed(0)
    ref = Decoder(VOCAB, width, HEADS, layers, a.context)
    model = copy.deepcopy(ref)
    nparams = sum(p.numel() for p in ref.parameters())
    biggest = max(p.numel() * p.element_size() for p in model.parameters())
    buffer_size = max(MIB, 4 * width * width * 4 + 65536, biggest + 65536)
    folder = os.path.join(a.dir, f"w{width}")
    os.makedirs(folder, exist_ok=True)
    nvt.offload(model, config=config(folder, buffer_size), lookahead=2)
    eng = nvt.engine_of(model)
    st = nvt.stats(model)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    opt = nvt.AdamW(model.parameters(), lr=1e-3,
                    step_in_backward=a.step_in_backward)
    gen = torch.Generator().manual_seed(1)
    mem, off, loads = [], [], []
    try:
        for i in range(a.warmup + a.steps):
            tokens = torch.randint(0, VOCAB, (a.batch, a.context + 1),
                                   generator=gen)
            if i % 2 == 0:
                m = step(ref, ref_opt, tokens)
                o = step(model, opt, tokens, eng)
            else:
                o = step(model, opt, tokens, eng)
                m = step(ref, ref_opt, tokens)
            if m["loss"] != o["loss"]:
                sys.exit(f"width {width} step {i}: losses differ "
                         f"({m['loss']} in memory, {o['loss']} offloaded)")
            if i >= a.warmup:
                mem.append(m)
                off.append(o)
                loads.append(os.getloadavg()[0])
            warm = " (warm-up)" if i < a.warmup else ""
            print(f"  width {width} step {i}{warm}: memory "
                  f"{m['total']:.3f}s offloaded {o['total']:.3f}s exposed "
                  f"{o['exposed']:.3f}s load {os.getloadavg()[0]:.2f}",
                  file=sys.stderr)
        prof = None
        if a.profile:
            prof = profile_steps(a, model, opt, gen)
    finally:
        nvt.restore(model)
    return {"width": width, "layers": layers, "params": nparams,
            "param_bytes": st["parameter_bytes"],
            "nvswap_layers": st["layers"], "pool_bytes": st["pool_bytes"],
            "buffer_size": buffer_size, "disk": bw, "load1": loads,
            "memory": mem, "offloaded": off, "profile": prof}


def profile_steps(a, model, opt, gen):
    prof = cProfile.Profile()
    for _ in range(a.profile_steps):
        tokens = torch.randint(0, VOCAB, (a.batch, a.context + 1),
                               generator=gen)
        prof.enable()
        train_step(model, opt, tokens)
        prof.disable()
    s = io.StringIO()
    ps = pstats.Stats(prof, stream=s)
    ps.sort_stats("tottime").print_stats(a.profile_top)
    return s.getvalue()


# ---- the report ------------------------------------------------------------

def summarize(r):
    mem = [s["total"] for s in r["memory"]]
    off = [s["total"] for s in r["offloaded"]]
    ratios = [o / m for o, m in zip(off, mem)]
    o = r["offloaded"]
    read = med([s["read"] for s in o])
    written = med([s["written"] for s in o])
    wbw, rbw, _ = r["disk"]
    t_io = read / rbw + written / wbw
    t_comp = med(mem)
    side = "compute" if t_comp >= t_io else "I/O"
    q1, q3 = iqr(ratios)
    out = {
        "mem_s": t_comp, "off_s": med(off), "ratio": med(ratios),
        "ratio_min": min(ratios), "ratio_max": max(ratios),
        "ratio_q1": q1, "ratio_q3": q3, "ratios": ratios,
        "ratio_of_min": min(off) / min(mem),
        "exposed_s": med([s["exposed"] for s in o]),
        "read_mib": read / MIB, "written_mib": written / MIB,
        "t_io_s": t_io, "larger": side,
        "compute_over_io": t_comp / t_io if t_io else float("inf"),
        "target_applies": side == "compute",
        "met": med(ratios) <= TARGET,
    }
    for ph in ("fwd", "bwd", "opt"):
        out[f"mem_{ph}_s"] = med([s[ph] for s in r["memory"]])
        out[f"off_{ph}_s"] = med([s[ph] for s in o])
        out[f"off_{ph}_exposed_s"] = med([s[ph + "_exposed"] for s in o])
        out[f"{ph}_t_io_s"] = (med([s[ph + "_read"] for s in o]) / rbw +
                               med([s[ph + "_written"] for s in o]) / wbw)
    for k in ("user", "sys"):
        out[f"mem_{k}_s"] = med([s[k] for s in r["memory"]])
        out[f"off_{k}_s"] = med([s[k] for s in o])
    out["acquire_py_s"] = med([s["acquire_py"] for s in o])
    for k in ("param_acquire_wait_ns", "param_buffer_wait_ns",
              "optimizer_acquire_wait_ns", "optimizer_buffer_wait_ns"):
        out[k.replace("_ns", "_s")] = med([s[k] for s in o])
    return out


def report(a, results):
    print(f"\n{len(results[0]['memory'])} timed steps per width after "
          f"{a.warmup} warm-up; batch {a.batch} x context {a.context}, "
          f"vocab {VOCAB}, {HEADS} heads; optimizer step "
          f"{'in backward' if a.step_in_backward else 'after backward'}; "
          f"torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {platform.python_version()}")
    print("\n| width | layers | params (MiB) | in memory s | offloaded s | "
          "offloaded / in memory | min / min | I/O exposed s | read MiB | "
          "written MiB | "
          "disk write / read GiB/s | T_io s | larger | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["summary"]
        wbw, rbw, _ = r["disk"]
        if s["target_applies"]:
            verdict = "met" if s["met"] else "MISSED"
        else:
            verdict = "n/a (I/O-bound)"
        print(f"| {r['width']} | {r['layers']} | "
              f"{r['param_bytes'] / MIB:.0f} | {s['mem_s']:.3f} | "
              f"{s['off_s']:.3f} | **{s['ratio']:.3f}** "
              f"[{s['ratio_min']:.3f}-{s['ratio_max']:.3f}, IQR "
              f"{s['ratio_q1']:.3f}-{s['ratio_q3']:.3f}] | "
              f"{s['ratio_of_min']:.3f} | "
              f"{s['exposed_s']:.3f} | {s['read_mib']:.0f} | "
              f"{s['written_mib']:.0f} | {wbw / (1 << 30):.2f} / "
              f"{rbw / (1 << 30):.2f} | {s['t_io_s']:.3f} | "
              f"{s['larger']} ({s['compute_over_io']:.1f}x) | {verdict} |")
    print("\nBy phase, medians in seconds: in memory / offloaded "
          "[offloaded I/O exposed; T_io of the phase's bytes], process "
          "CPU seconds per step, and the C library's waits per pool:")
    print("\n| width | forward | backward | optimizer step | "
          "CPU s user + sys | "
          "param pool waits (acquire + buffer) | optimizer pool waits | "
          "acquire_layer calls (Python-timed) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["summary"]
        cells = []
        for ph in ("fwd", "bwd", "opt"):
            cells.append(f"{s[f'mem_{ph}_s']:.3f} / {s[f'off_{ph}_s']:.3f} "
                         f"[{s[f'off_{ph}_exposed_s']:.3f}; "
                         f"{s[f'{ph}_t_io_s']:.3f}]")
        print(f"| {r['width']} | {' | '.join(cells)} | "
              f"{s['mem_user_s']:.2f} + {s['mem_sys_s']:.2f} / "
              f"{s['off_user_s']:.2f} + {s['off_sys_s']:.2f} | "
              f"{s['param_acquire_wait_s']:.3f} + "
              f"{s['param_buffer_wait_s']:.3f} | "
              f"{s['optimizer_acquire_wait_s']:.3f} + "
              f"{s['optimizer_buffer_wait_s']:.3f} | "
              f"{s['acquire_py_s']:.3f} |")
    for r in results:
        if r["profile"]:
            print(f"\ncProfile of {a.profile_steps} offloaded steps, "
                  f"width {r['width']} (top {a.profile_top} by own time):")
            print(r["profile"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/nvswap-bench")
    ap.add_argument("--widths", type=ints, default=[256, 512, 1024])
    ap.add_argument("--layers", type=ints, default=[8, 6, 4],
                    help="blocks per width (one value: all widths)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--disk-size", type=parse_size, default=256 * MIB)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("--json", default=None)
    ap.add_argument("--step-in-backward", action="store_true",
                    help="nvt.AdamW(step_in_backward=True): each layer "
                    "stepped in backward")
    a = ap.parse_args()
    if len(a.layers) == 1:
        a.layers = a.layers * len(a.widths)
    if len(a.layers) != len(a.widths):
        ap.error("--layers: one value or one per width")
    if a.steps < 5:
        ap.error("--steps: at least 5 (the spread needs them)")
    os.makedirs(a.dir, exist_ok=True)
    fs = fs_type(a.dir)
    if fs in ("tmpfs", "ramfs"):
        sys.exit(f"{a.dir} is on {fs}: give --dir on the disk")
    print(f"swap dir {a.dir} ({fs}); load average {loadavg()} at start",
          file=sys.stderr)
    t_start = time.time()
    results = []
    for width, layers in zip(a.widths, a.layers):
        bw = disk_bandwidth(a.dir, a.disk_size)
        print(f"width {width}: disk write {bw[0] / (1 << 30):.2f} GiB/s, "
              f"read {bw[1] / (1 << 30):.2f} GiB/s", file=sys.stderr)
        r = run_width(a, width, layers, bw)
        r["summary"] = summarize(r)
        results.append(r)
    load_end = loadavg()
    report(a, results)
    print(f"\nload average {load_end} at the end; "
          f"{time.time() - t_start:.0f} s in all")
    missed = [r["width"] for r in results
              if r["summary"]["target_applies"] and not r["summary"]["met"]]
    if missed:
        print(f"target (offloaded <= {TARGET:.2f} x in memory where compute "
              f">= I/O) MISSED at width {', '.join(map(str, missed))}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items()},
                       "torch": torch.__version__,
                       "python": platform.python_version(),
                       "threads": torch.get_num_threads(),
                       "fs": fs, "load_end": load_end,
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
