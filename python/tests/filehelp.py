# SPDX-License-Identifier: MIT
"""Small helpers the tests share (importable: this directory is on
sys.path under pytest's default import mode)."""
import hashlib
import os
import random
import signal
import threading
import time

import pytest

import nvswap


def rand(n):
    return os.urandom(n)


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def pattern(n, seed=1):
    """n bytes that differ from any shifted copy of themselves."""
    return bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(n))


def raises_errno(err, fn, *args, **kw):
    """fn(*args, **kw) raises nvswap.Error with errno err; the error."""
    with pytest.raises(nvswap.Error) as ei:
        fn(*args, **kw)
    assert ei.value.errno == err, ei.value
    return ei.value


def child_env():
    """os.environ with this nvswap package first on PYTHONPATH, for a
    child interpreter that must import the same build."""
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(nvswap.__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def swap_write(s, i, data, evict=False):
    """Swapper s's tensor i := data (written back at once with evict)."""
    mv = s.acquire(i, memoryview=True)
    mv[:] = data
    s.release(i, True)
    if evict:
        s.evict(i)


def swap_read(s, i):
    """Swapper s's tensor i, read from NVMe (evicted afterwards)."""
    mv = s.acquire(i, memoryview=True)
    data = bytes(mv)
    s.release(i, False)
    s.evict(i)
    return data


def crash_rng(round_=0):
    """random.Random for a kill test: NVSWAP_CRASH_SEED (else the clock)
    plus round_, printed so that a failure can be run again."""
    seed = int(os.environ.get("NVSWAP_CRASH_SEED", time.time_ns())) + round_
    print(f"NVSWAP_CRASH_SEED={seed}")
    return seed, random.Random(seed)


def run_threads(worker, n, timeout=None):
    """worker(0) .. worker(n - 1), each in its own thread, all joined."""
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def fd_direct(fd):
    """Whether descriptor fd of this process has O_DIRECT (its flags in
    /proc/self/fdinfo)."""
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return bool([int(x.split()[1], 8) for x in f
                     if x.startswith("flags:")][0] & os.O_DIRECT)


def held_direct(path):
    """Whether this process holds path open with O_DIRECT; None when it
    does not hold it open."""
    path, found = os.path.realpath(path), None
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                found = fd_direct(fd)
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
    return found


def sigint_default():
    """A child's preexec_fn: SIGINT at its default, as a terminal's
    Ctrl-C finds it, whatever this process inherited (a shell starting
    a job in the background without job control ignores it, and Python
    then installs no KeyboardInterrupt handler in the child)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tree_state(root):
    """Every entry under root: (size, mtime_ns, ctime_ns, a file's
    SHA-256) by path: what a reader must leave as it was."""
    out = {}
    for d, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(d, n)
            st = os.lstat(p)
            digest = None
            if n in names:
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[p] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest)
    return out
