#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How a file's bytes enter the page cache decides how fast every later
read of them is (issue 49: the warm gap of a model served in place).

A file (--size, written once, fsynced) is read into the cache, the cache
dropped before each, by one of:

  read      pread() 8 MiB at a time from the start (the reference: what
            the copy in nvswap's swap file and a plain read bring in)
  willneed  posix_fadvise(WILLNEED) 64 MiB at a time, then the same reads
            (what nvswap.torch's warm-up asked before)
  populate  mmap + madvise(MADV_POPULATE_READ) 64 MiB at a time
            (nvswap.torch._warm.populate, what the warm-up asks now)

then read whole from the cache --passes times (pread, 8 MiB). Prints,
per method and repeat (interleaved), the cold fill's GB/s and the cached
passes' GB/s, and medians with min-max over repeats; cached rate over
read's in the same run. On a kernel whose filesystem caches large folios
(ext4 since Linux 6.16, XFS since 5.18), read and populate bring them in
and willneed 4 KiB pages; elsewhere all three match.

    sudo PYTHONPATH=build/python python3 bench/cache_folios.py
        [--dir /var/tmp/cache-folios] [--size 1G] [--repeats 3]
        [--passes 3]

--dir must be on the disk to test (not /tmp, which may be tmpfs). Root is
needed to drop the page cache.
"""
import argparse
import mmap
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import fs_type, loadavg, parse_size, spread  # noqa: E402
from nvswap.torch import _warm  # noqa: E402

CHUNK = 64 << 20
GB = 1e9


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def read_all(fd, size, mv):
    off = 0
    while off < size:
        n = os.preadv(fd, [mv], off)
        if n <= 0:
            raise SystemExit(f"short read at {off}")
        off += n


def fill(method, fd, size, mv):
    if method == "read":
        read_all(fd, size, mv)
        return
    for at in range(0, size, CHUNK):
        n = min(CHUNK, size - at)
        if method == "willneed":
            os.posix_fadvise(fd, at, n, os.POSIX_FADV_WILLNEED)
        else:
            err = _warm.populate(fd, at, at + n)
            if err:
                raise SystemExit(f"populate: {os.strerror(-err)}")
    read_all(fd, size, mv)  # what is not in yet, as a forward would


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/cache-folios")
    ap.add_argument("--size", type=parse_size, default=1 << 30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "file")
    with open(path, "wb") as f:
        block = os.urandom(8 << 20)
        for _ in range(0, a.size, len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    size = os.path.getsize(path)
    buf = mmap.mmap(-1, 8 << 20)
    mv = memoryview(buf)
    methods = ("read", "willneed", "populate")
    cold = {m: [] for m in methods}
    warm = {m: [] for m in methods}
    print(f"{size / GB:.2f} GB file; {platform.node()}, {fs_type(a.dir)}, "
          f"Linux {platform.release()}, load {loadavg()}", flush=True)
    for rep in range(a.repeats):
        for m in methods[rep % 3:] + methods[:rep % 3]:
            drop_caches()
            fd = os.open(path, os.O_RDONLY)
            try:
                t = time.perf_counter()
                fill(m, fd, size, mv)
                cold[m].append(size / (time.perf_counter() - t) / GB)
                rates = []
                for _ in range(a.passes):
                    t = time.perf_counter()
                    read_all(fd, size, mv)
                    rates.append(size / (time.perf_counter() - t) / GB)
            finally:
                os.close(fd)
            warm[m].append(statistics.median(rates))
            print(f"  {rep} {m}: fill {cold[m][-1]:.2f} GB/s, cached "
                  + ", ".join(f"{r:.2f}" for r in rates) + " GB/s",
                  flush=True)
    ref = statistics.median(warm["read"])
    print("\n| filled by | fill GB/s | cached reads GB/s | cached / read's |")
    print("|---|---|---|---|")
    for m in methods:
        print(f"| {m} | {spread(cold[m])} | {spread(warm[m])} | "
              f"{statistics.median(warm[m]) / ref:.2f} |")
    os.unlink(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
