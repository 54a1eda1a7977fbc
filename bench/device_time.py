#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a queue-depth-1 gap between nvswap and fio comes from: the device
or nvswap. Needs root (perf tracepoints) and fio. Three modes:

  compare    perf traces `nvswap-io --compare-fio` at queue depth 1 and
             prints per run, for nvswap's and fio's threads, the median
             time from a request's block issue to its io_uring CQE (the
             device) and from the CQE to the next issue (the host
             software: completion, wake-up, next submission).
  footprint  the same two medians for nvswap reading the file as one op
             (a 512 MiB buffer, new memory every request), nvswap reading
             it as ops of one block into one reused buffer (fio's
             footprint), and fio; --repeats rounds.
  aa         fio against itself in --compare-fio's order: a read of the
             file, fio "A" in nvswap's slot, fio "B" in fio's slot; A/B
             per round is the noise floor and the cost of the slot.

    sudo bench/device_time.py compare --bs 1M --op read [--repeats 4]
    sudo bench/device_time.py footprint --bs 1M --op read [--repeats 3]
    sudo bench/device_time.py aa --bs 1M --qd 1 --op write [--repeats 7]

Requests are told apart by thread (nvswap's workers, fio's job thread),
so other I/O on the machine stays out of the figures. footprint and aa
add the huge pages fio's buffers need and take them back.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import parse_size  # noqa: E402

EVENTS = ["-e", "block:block_rq_issue", "-e", "io_uring:io_uring_complete"]
LINE = re.compile(r"^\s*(\S+)\s+(\d+)\s+([\d.]+):\s+(\S+):\s+(.*)")


def per_thread(trace, op):
    """{(side, tid): [(issue, cqe)]} for requests of @op, >= 64 KiB."""
    ev = collections.defaultdict(list)
    for line in trace.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        side = "fio" if m[1] == "fio" else "nvswap"
        t, e, rest = float(m[3]), m[4], m[5]
        if e == "block:block_rq_issue":
            r = re.search(r" (\w+) (\d+) \(", rest)
            if r and int(r[2]) >= 65536 and ("W" in r[1]) == (op == "write"):
                ev[(side, m[2])].append(("i", t))
        elif e == "io_uring:io_uring_complete":
            r = re.search(r"result (\d+)", rest)
            if r and int(r[1]) >= 65536:
                ev[(side, m[2])].append(("c", t))
    out = {}
    for key, seq in ev.items():
        pairs, issued = [], None
        for kind, t in seq:  # queue depth 1: issue, CQE, issue, CQE...
            if kind == "i":
                issued = t
            elif issued is not None:
                pairs.append((issued, t))
                issued = None
        if len(pairs) >= 50:
            out[key] = pairs
    return out


def medians(pairs):
    dev = [(c - i) * 1e6 for i, c in pairs]
    host = [(pairs[k + 1][0] - pairs[k][1]) * 1e6
            for k in range(len(pairs) - 1)]
    host = [h for h in host if h < 5000]  # not the gaps between ops
    return statistics.median(dev), statistics.median(host)


def traced(cmd):
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        subprocess.run(["perf", "record", "-q", "-o", data] + EVENTS +
                       ["-a", "--"] + cmd, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return subprocess.run(
            ["perf", "script", "-i", data, "-F",
             "comm,tid,time,event,trace"], check=True, capture_output=True,
            text=True).stdout


def fio_cmd(path, op, bs, qd, size):
    return ["fio", "--name=x", f"--filename={path}", f"--size={size}",
            f"--rw={op}", f"--bs={bs}", f"--iodepth={qd}",
            "--ioengine=io_uring", "--direct=1", "--thread",
            "--iomem=shmhuge", "--fixedbufs=1", "--registerfiles=1",
            "--output-format=json"]


def report(label, pairs):
    dev, host = medians(pairs)
    print(f"{label}: {len(pairs)} requests, issue->CQE median {dev:.0f} us,"
          f" CQE->next issue median {host:.1f} us", flush=True)


def compare(a):
    cmd = [a.tool, "--folder", a.dir, "--io-size", a.size, "--block-size",
           a.bs, "--queue-depth", "1", "--compare-fio", "--no-fio-default",
           "--repeats", str(a.repeats)] + (["--read"] if a.op == "read"
                                           else [])
    for (side, tid), pairs in sorted(per_thread(traced(cmd), a.op).items()):
        report(f"{side:6s} thread {tid}", pairs)


def footprint(a, path):
    n = parse_size(a.size) // parse_size(a.bs)
    rd = ["--read"] if a.op == "read" else []
    nv = [a.tool, "--folder", a.dir, "--block-size", a.bs, "--queue-depth",
          "1", "--warmup-loops", "1", "--json"] + rd
    runs = [("nvswap, one op", nv + ["--io-size", a.size]),
            ("nvswap, ops of one block", nv + ["--io-size", a.bs, "--loops",
                                              str(n)]),
            ("fio", fio_cmd(path, a.op, a.bs, 1, a.size))]
    for r in range(a.repeats):
        for label, cmd in runs:
            got = per_thread(traced(cmd), a.op)
            key = max(got, key=lambda k: len(got[k]))
            report(f"round {r + 1}, {label}", got[key][-n:])


def fio_gbs(cmd, op):
    out = subprocess.run(cmd, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0][op]["bw_bytes"] / \
        (1 << 30)


def aa(a, path):
    ratios = []
    for r in range(a.repeats):
        fio_gbs(fio_cmd(path, "read", "1M", 16, a.size), "read")
        x = fio_gbs(fio_cmd(path, a.op, a.bs, a.qd, a.size), a.op)
        y = fio_gbs(fio_cmd(path, a.op, a.bs, a.qd, a.size), a.op)
        ratios.append(x / y)
        print(f"round {r + 1}: A {x:.3f} GB/s, B {y:.3f}, A/B {x / y:.3f}",
              flush=True)
    print(f"A/B median {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}-{max(ratios):.3f}]")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["compare", "footprint", "aa"])
    p.add_argument("--bs", default="1M")
    p.add_argument("--qd", type=int, default=1, help="aa only")
    p.add_argument("--op", choices=["read", "write"], default="read")
    p.add_argument("--size", default="512M")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--dir", default="nvme_swap")
    p.add_argument("--tool", default="build/tools/nvswap-io")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    if a.mode == "compare":
        return compare(a)
    path = os.path.join(os.path.abspath(a.dir), "device_time.dat")
    pages = "/proc/sys/vm/nr_hugepages"
    ring = max(a.qd * parse_size(a.bs), 16 << 20)  # aa's read: 1M x 16
    added = 2 * (ring >> 21) + 2  # as nvswap-io reckons fio's need
    with open(pages) as f:
        cur = int(f.read())
    with open(pages, "w") as f:
        f.write(str(cur + added))
    subprocess.run(["fio", "--name=prep", f"--filename={path}",
                    f"--size={a.size}", "--rw=write", "--bs=1M",
                    "--direct=1", "--output-format=json"], check=True,
                   capture_output=True)
    try:
        footprint(a, path) if a.mode == "footprint" else aa(a, path)
    finally:
        os.unlink(path)
        with open(pages) as f:  # take back ours only
            cur = int(f.read())
        with open(pages, "w") as f:
            f.write(str(max(cur - added, 0)))


if __name__ == "__main__":
    main()
