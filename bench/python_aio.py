#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nvswap.aio_handle (the Python package, issue 17) against the C library,
in one interleaved run:

1. Sequential transfer: --size bytes written and read through
   aio_handle.sync_pwrite/sync_pread, against the same transfer through
   build/tools/nvswap-io with the same settings (DeepSpeed's defaults:
   1 MiB blocks, queue depth 128, one worker, overlap_events False =
   nvswap-io --sequential-requests; backend auto). Python runs it into a
   new_cpu_locked_tensor ("pinned") and into a plain torch.empty tensor
   ("unpinned"). Each sample does what nvswap-io does: a fresh file, one
   untimed warm-up op (a read's file is written and fsynced first), then
   --loops timed ops, the timing around the I/O call only (nvswap-io's
   "Task" latency); GB/s are GiB/s, as nvswap-io prints them. The three
   sides alternate within each repeat, their order rotating per repeat.

2. Per-call overhead: a 4 KiB sync_pread of a page-cached file (handle
   option direct=False) in a Python loop, against the same
   nvs_aio_sync_pread() loop in C (build/bench/nvswap-bench-call, kept
   running and fed one batch at a time, NVS_DIRECT_NEVER, the same
   handle options), in alternating batches, both processes pinned to one
   CPU (--calls-cpu; see calls()). sync_pread and the C call run a 4 KiB
   op on the calling thread (nvs_aio_submit_wait's fast path). Also
   aio_handle.pread(.., validate=False, async=False), which always takes
   the Op path (an Op object, then a worker), and with
   --ctypes the same C call made from this process through ctypes on
   build/libnvswap.so. Reported per batch: wall and calling-thread CPU
   microseconds per call; the overhead is Python minus C, per round of
   adjacent batches.

Prints Markdown tables and writes everything to --json. Targets (issue
17): Python/C >= 0.98, unpinned/pinned >= 0.9, overhead <= 2 us; a
missed target is printed as such.

    PYTHONPATH=build/python python3 bench/python_aio.py [--dir nvme_swap]
        [--size 1G] [--repeats 5] [--loops 3] [--calls 20000]
        [--batch 100] [--calls-cpu N] [--ctypes]
        [--only transfer|calls] [--json bench/out/python_aio.json]
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

import nvswap
from benchutil import fs_type, loadavg, med, parse_size

GIB = 1 << 30
TARGET_C = 0.98
TARGET_UNPINNED = 0.90
TARGET_OVERHEAD_US = 2.0


def spread(v, fmt="{:.2f}"):
    return (f"{fmt.format(med(v))} "
            f"[{fmt.format(min(v))}-{fmt.format(max(v))}]")


def quartiles(v):
    q = statistics.quantiles(v, n=4)
    return q[0], q[2]


# ---- 1. sequential transfer ---------------------------------------------

class Files:
    """Fresh test files in --dir, made exclusively, removed at the end."""

    def __init__(self, folder):
        self.folder = folder
        self.n = 0
        self.made = []

    def new(self, tag):
        while True:
            path = os.path.join(self.folder,
                                f"python_aio.{os.getpid()}.{tag}.{self.n}")
            self.n += 1
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                             os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            os.close(fd)
            self.made.append(path)
            return path

    def remove(self, path):
        os.unlink(path)
        self.made.remove(path)

    def remove_all(self):
        for p in list(self.made):
            self.remove(p)


def c_sample(a, op):
    cmd = [a.tool, "--folder", a.dir, "--io-size", str(a.nbytes),
           "--block-size", str(a.block_size),
           "--queue-depth", str(a.queue_depth), "--io-parallel", "1",
           "--sequential-requests", "--backend", "auto", "--pinned",
           "--warmup-loops", "1", "--loops", str(a.loops), "--json"]
    if op == "read":
        cmd.append("--read")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    j = json.loads(out.stdout)
    return {"gbs": j["task_gbs"], "backend": j["backend"],
            "requests": j["requests"]}


STAT_KEYS = ("requests", "bounced_requests", "direct_fallbacks",
             "edge_bytes", "fixed_buffer_requests")


def py_sample(a, files, pattern, op, kind):
    h = nvswap.aio_handle(a.block_size, a.queue_depth, False, False, 1)
    if kind == "pinned":
        buf = h.new_cpu_locked_tensor(a.nbytes,
                                      torch.empty(0, dtype=torch.uint8))
    else:
        buf = torch.empty(a.nbytes, dtype=torch.uint8)
    align = buf.data_ptr() % 4096
    path = files.new(kind)
    try:
        buf.copy_(pattern)  # every page touched, as nvswap-io's memset
        if op == "read":
            h.sync_pwrite(buf, path, 0)
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            buf.zero_()
            io = h.sync_pread
        else:
            io = h.sync_pwrite
        io(buf, path, 0)  # warm-up, untimed
        before = h.stats()
        total = 0.0
        for _ in range(a.loops):
            t0 = time.perf_counter()
            io(buf, path, 0)
            total += time.perf_counter() - t0
        after = h.stats()
        if op == "read" and not torch.equal(buf[:4096], pattern[:4096]):
            sys.exit(f"{kind} read returned wrong data")
    finally:
        files.remove(path)
    res = {"gbs": a.nbytes * a.loops / total / GIB,
           "backend": after["backend"], "data_ptr_mod_4096": align}
    for k in STAT_KEYS:
        res[k] = after[k] - before[k]
    if kind == "pinned":
        h.free_cpu_locked_tensor(buf)
    del buf
    h.close()
    return res


def transfer(a, files):
    pattern = torch.empty(a.nbytes, dtype=torch.uint8)
    torch.manual_seed(17)
    pattern.random_(0, 256)
    sides = ["c", "pinned", "unpinned"]
    raw = {op: {s: [] for s in sides} for op in ("write", "read")}
    for rep in range(a.repeats):
        order = sides[rep % 3:] + sides[:rep % 3]
        for op in ("write", "read"):
            for s in order:
                r = (c_sample(a, op) if s == "c"
                     else py_sample(a, files, pattern, op, s))
                raw[op][s].append(r)
            print(f"  repeat {rep + 1}/{a.repeats} {op}: " +
                  ", ".join(f"{s} {raw[op][s][-1]['gbs']:.2f}"
                            for s in order), file=sys.stderr, flush=True)
    return raw


def transfer_report(a, raw, missed):
    out = {}
    print(f"\n### Sequential {a.size}: GB/s (GiB/s, as nvswap-io), "
          f"median [min-max] over {a.repeats} repeats of {a.loops} ops\n")
    print("| op | C nvswap-io | Python pinned | Python unpinned "
          "| pinned/C | unpinned/pinned |")
    print("|---|---|---|---|---|---|")
    for op in ("write", "read"):
        g = {s: [r["gbs"] for r in raw[op][s]] for s in raw[op]}
        r_c = [p / c for p, c in zip(g["pinned"], g["c"])]
        r_u = [u / p for u, p in zip(g["unpinned"], g["pinned"])]
        print(f"| {op} | {spread(g['c'])} | {spread(g['pinned'])} | "
              f"{spread(g['unpinned'])} | **{spread(r_c, '{:.3f}')}** | "
              f"**{spread(r_u, '{:.3f}')}** |")
        out[op] = {"gbs": g, "pinned_over_c": r_c,
                   "unpinned_over_pinned": r_u}
        if med(r_c) < TARGET_C:
            missed.append(f"{op}: Python pinned / C = {med(r_c):.3f} "
                          f"< {TARGET_C}")
        if med(r_u) < TARGET_UNPINNED:
            missed.append(f"{op}: unpinned / pinned = {med(r_u):.3f} "
                          f"< {TARGET_UNPINNED}")
    print()
    for s in ("pinned", "unpinned"):
        r = raw["read"][s] + raw["write"][s]
        aligns = sorted({x["data_ptr_mod_4096"] for x in r})
        print(f"- Python {s}: data_ptr() % 4096 = {aligns}; per timed "
              f"1-op: requests {r[0]['requests'] // a.loops}, bounced "
              f"{r[0]['bounced_requests'] // a.loops}, fixed-buffer "
              f"{r[0]['fixed_buffer_requests'] // a.loops}; direct_fallbacks "
              f"{sum(x['direct_fallbacks'] for x in r)}; backend "
              f"{r[0]['backend']}")
        if any(x["direct_fallbacks"] for x in r):
            missed.append(f"{s}: O_DIRECT fell back to buffered I/O: the "
                          "figures are not the disk's")
    c = raw["read"]["c"][0]
    print(f"- C nvswap-io: backend {c['backend']}, requests per op "
          f"{c['requests'] // (a.loops + 1)} (warm-up included in its count)")
    return out


# ---- 2. per-call overhead -----------------------------------------------

class AioOpts(ctypes.Structure):
    """struct nvs_aio_opts (include/nvswap/aio.h), for the ctypes check;
    nvs_aio_opts_init() writes its sizeof into .size, checked below."""
    _fields_ = [("size", ctypes.c_size_t), ("block_size", ctypes.c_uint32),
                ("queue_depth", ctypes.c_uint32),
                ("single_submit", ctypes.c_bool),
                ("overlap_events", ctypes.c_bool),
                ("intra_op_parallelism", ctypes.c_uint32),
                ("backend", ctypes.c_int), ("direct", ctypes.c_int),
                ("bounce_bytes", ctypes.c_uint32),
                ("max_ops", ctypes.c_uint32), ("open_files", ctypes.c_uint32),
                ("staging", ctypes.c_int), ("uring_flags", ctypes.c_uint32),
                ("reserved32", ctypes.c_uint32),
                ("reserved", ctypes.c_uint64 * 6)]


NVS_DIRECT_NEVER = 2


def ctypes_reader(lib_path, path):
    """nvs_aio_sync_pread() called through ctypes from this process, on a
    handle of libnvswap.so's own (the options of nvswap-bench-call)."""
    lib = ctypes.CDLL(lib_path)
    o = AioOpts()
    lib.nvs_aio_opts_init(ctypes.byref(o))
    if o.size != ctypes.sizeof(o) or o.block_size != 1 << 20 or \
            o.queue_depth != 128 or o.intra_op_parallelism != 1:
        sys.exit("--ctypes: struct nvs_aio_opts changed; update AioOpts")
    o.direct = NVS_DIRECT_NEVER
    h = ctypes.c_void_p()
    if lib.nvs_aio_create(ctypes.byref(o), ctypes.byref(h)) != 0:
        sys.exit("--ctypes: nvs_aio_create failed")
    lib.nvs_aio_new_cpu_locked_buffer.restype = ctypes.c_void_p
    lib.nvs_aio_new_cpu_locked_buffer.argtypes = [ctypes.c_void_p,
                                                  ctypes.c_size_t]
    buf = ctypes.c_void_p(lib.nvs_aio_new_cpu_locked_buffer(h, 4096))
    rd = lib.nvs_aio_sync_pread
    rd.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                   ctypes.c_char_p, ctypes.c_int64]
    bpath = os.fsencode(path)
    if not buf.value or rd(h, buf, 4096, bpath, 0) != 1:
        sys.exit("--ctypes: nvs_aio_sync_pread failed")

    def close():
        lib.nvs_aio_free_cpu_locked_buffer(h, buf)
        lib.nvs_aio_destroy(h)
    return (lambda: rd(h, buf, 4096, bpath, 0)), close


def calls(a, files):
    """The call loops, this process and nvswap-bench-call pinned to one
    CPU (--calls-cpu): where a call goes to a worker (the Op path; every
    path before the caller-thread fast path) the caller and the handle's
    worker then hand over on that CPU. Unpinned, where the two threads land decides the figure:
    on this VM (cpuidle haltpoll, guest_halt_poll_ns 0) a wake-up sent to
    an idle vCPU costs tens of microseconds, so a process whose threads sit
    on two idle vCPUs runs ~100 us per call while one on a single vCPU,
    or on a busy machine, runs ~15-20; that placement, not the code,
    decided which side was slower."""
    saved = os.sched_getaffinity(0)
    if a.calls_cpu >= 0:
        os.sched_setaffinity(0, {a.calls_cpu})
    try:
        return calls_pinned(a, files)
    finally:
        os.sched_setaffinity(0, saved)


def calls_pinned(a, files):
    path = files.new("calls")
    with open(path, "wb") as f:
        f.write(os.urandom(2 * 4096))
    with open(path, "rb") as f:
        f.read()  # in the page cache
    c = subprocess.Popen([a.call_tool, "-f", path, "-s", "4096", "-w",
                          "1000", "-i"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    h = nvswap.aio_handle(direct=False)
    t4k = h.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.uint8))
    n = a.batch

    def c_batch():
        c.stdin.write(f"{n}\n")
        c.stdin.flush()
        line = c.stdout.readline()
        if not line:
            sys.exit("nvswap-bench-call stopped")
        j = json.loads(line)
        return j["wall_us"], j["cpu_us"]

    def fast_batch():
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            h.sync_pread(t4k, path, 0)
        return ((time.perf_counter() - t0) * 1e6 / n,
                (time.thread_time() - c0) * 1e6 / n)

    def op_batch():
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            h.pread(t4k, path, False, False, 0)
        return ((time.perf_counter() - t0) * 1e6 / n,
                (time.thread_time() - c0) * 1e6 / n)

    runs = {"c": c_batch, "fast": fast_batch, "op": op_batch}
    close_ctypes = None
    if a.ctypes:
        call, close_ctypes = ctypes_reader(a.lib, path)

        def ctypes_batch():
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(n):
                call()
            return ((time.perf_counter() - t0) * 1e6 / n,
                    (time.thread_time() - c0) * 1e6 / n)
        runs["ctypes"] = ctypes_batch
    for _ in range(1000):
        h.sync_pread(t4k, path, 0)
        h.pread(t4k, path, False, False, 0)
        if close_ctypes:
            call()
    sides = list(runs)
    raw = {s: {"wall": [], "cpu": []} for s in sides}
    raw["sides"] = sides
    rounds = max(1, a.calls // n)
    for rnd in range(rounds):
        k = rnd % len(sides)
        for s in sides[k:] + sides[:k]:
            w, cpu = runs[s]()
            raw[s]["wall"].append(w)
            raw[s]["cpu"].append(cpu)
    c.stdin.close()
    rc = c.wait()
    if close_ctypes:
        close_ctypes()
    stats = h.stats()
    h.free_cpu_locked_tensor(t4k)
    h.close()
    files.remove(path)
    if rc:
        sys.exit(f"nvswap-bench-call exited with {rc}")
    raw["rounds"] = rounds
    raw["calls_per_batch"] = n
    raw["backend"] = stats["backend"]
    raw["cpu"] = a.calls_cpu
    raw["direct_fallbacks"] = stats["direct_fallbacks"]
    return raw


def calls_report(a, raw, missed):
    out = {}
    where = (f"pinned to CPU {raw['cpu']}" if raw["cpu"] >= 0
             else "not pinned")
    print(f"\n### 4 KiB sync_pread, page cache: microseconds per call, "
          f"{raw['rounds']} rounds x {raw['calls_per_batch']} calls per "
          f"side, {where}, median [min-max] (interquartile)\n")
    print("| path | clock | C nvs_aio_sync_pread | Python | "
          "Python - C per round |")
    print("|---|---|---|---|---|")
    paths = [("fast", "sync_pread (fast path)"),
             ("op", "pread(.., False, False) (Op path)")]
    if "ctypes" in raw:
        paths.append(("ctypes", "nvs_aio_sync_pread via ctypes"))
    for s, name in paths:
        for clock in ("wall", "cpu"):
            cv, pv = raw["c"][clock], raw[s][clock]
            d = [p - c for p, c in zip(pv, cv)]
            q1, q3 = quartiles(d)
            print(f"| {name} | {clock} | {spread(cv)} | {spread(pv)} | "
                  f"**{spread(d)}** ({q1:.2f} to {q3:.2f}) |")
            out[f"{s}_{clock}_overhead_us"] = d
            if s == "fast" and clock == "wall" and \
                    med(d) > TARGET_OVERHEAD_US:
                missed.append(f"sync_pread overhead {med(d):.2f} us "
                              f"> {TARGET_OVERHEAD_US} us")
    slow = {s: sum(w > 2 * med(raw["c"]["wall"]) for w in raw[s]["wall"])
            for s in raw["sides"]}
    print(f"\n- backend {raw['backend']}; cpu = the calling thread's CPU "
          "time (CLOCK_THREAD_CPUTIME_ID), blind to wake-up latency")
    print("- batches slower than twice C's median (delayed wake-ups): " + ", ".join(f"{s} {n}/{raw['rounds']}"
                                      for s, n in slow.items()))
    out["slow_batches"] = slow
    return out


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="nvme_swap",
                    help="folder on the disk under test (not a tmpfs)")
    ap.add_argument("--size", default="1G", help="bytes per op (1G)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--loops", type=int, default=3,
                    help="timed ops per sample (3)")
    ap.add_argument("--block-size", default="1M")
    ap.add_argument("--queue-depth", type=int, default=128)
    ap.add_argument("--calls", type=int, default=20000,
                    help="4 KiB calls per side (20000)")
    ap.add_argument("--batch", type=int, default=100,
                    help="calls per timed batch (100)")
    ap.add_argument("--calls-cpu", type=int,
                    default=max(os.sched_getaffinity(0)),
                    help="the CPU the call loops run on, both sides "
                    "(default: the highest; -1: not pinned)")
    ap.add_argument("--ctypes", action="store_true",
                    help="also time nvs_aio_sync_pread called from this "
                    "process through ctypes (--lib)")
    ap.add_argument("--lib", default="build/libnvswap.so")
    ap.add_argument("--only", choices=("transfer", "calls"))
    ap.add_argument("--tool", default="build/tools/nvswap-io")
    ap.add_argument("--call-tool", default="build/bench/nvswap-bench-call")
    ap.add_argument("--json", default="bench/out/python_aio.json",
                    help="where the raw samples and the summary go")
    a = ap.parse_args()
    a.nbytes = parse_size(a.size)
    a.block_size = parse_size(a.block_size)
    if a.repeats < 1 or a.loops < 1 or a.batch < 1:
        ap.error("--repeats, --loops and --batch must be positive")
    os.makedirs(a.dir, exist_ok=True)
    fstype = fs_type(a.dir)
    if fstype in ("tmpfs", "ramfs"):
        ap.error(f"--dir {a.dir} is on {fstype}: give a folder on the disk")
    machine = {
        "python": sys.version.split()[0], "executable": sys.executable,
        "torch": torch.__version__, "nvswap": nvswap.__version__,
        "cpus": os.cpu_count(), "platform": platform.platform(),
        "fs": fstype,
        "load_before": loadavg(),
    }
    print(f"python {machine['python']} ({sys.executable}), torch "
          f"{machine['torch']}, nvswap {machine['nvswap']}, "
          f"{machine['cpus']} CPUs, load {machine['load_before']}")
    files = Files(a.dir)
    missed, result = [], {"machine": machine, "args": {
        k: v for k, v in vars(a).items()}}
    try:
        if a.only != "calls":
            raw = transfer(a, files)
            result["transfer_raw"] = raw
            result["transfer"] = transfer_report(a, raw, missed)
        if a.only != "transfer":
            raw = calls(a, files)
            result["calls_raw"] = raw
            result["calls"] = calls_report(a, raw, missed)
    finally:
        files.remove_all()
    machine["load_after"] = loadavg()
    print(f"\nload before {machine['load_before']}, after "
          f"{machine['load_after']}")
    result["missed"] = missed
    for m in missed:
        print(f"TARGET MISSED: {m}")
    if not missed:
        print("all targets met")
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"raw samples: {a.json}")


if __name__ == "__main__":
    main()
