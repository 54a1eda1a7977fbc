# SPDX-License-Identifier: MIT
"""Helpers shared by the Python benchmarks (python_aio.py,
torch_offload.py): sizes, the machine's load, the filesystem under a
folder, medians, a command's output (run)."""
import os
import statistics
import subprocess


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fs_type(folder):
    """The filesystem type of the mount holding @folder."""
    path, best, kind = os.path.realpath(folder), "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            mnt, typ = line.split()[1:3]
            inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, kind = mnt, typ
    return kind


def med(v):
    return statistics.median(v)


def spread(xs, fmt="{:.2f}"):
    """'median [min-max]' of xs, each by fmt; '-' where there are none
    (or a run had none: a None among them)."""
    if not xs or None in xs:
        return "-"
    return (f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}"
            f"-{fmt.format(max(xs))}]")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n"
                           f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout
