# SPDX-License-Identifier: MIT
"""Run a command in a memory cgroup of a given size (the examples' and
benchmarks' way to show a model that does not fit): cgroup v2 where the
memory controller is enabled (memory.max, swap off with memory.swap.max),
else v1 (/sys/fs/cgroup/memory, memory.limit_in_bytes and
memory.memsw.limit_in_bytes where the kernel accounts swap). Needs root
(or a delegated subtree); why it cannot be made is said, never hidden."""
import os
import subprocess
import time

V2 = "/sys/fs/cgroup"
V1 = "/sys/fs/cgroup/memory"


def _v2_ok():
    try:
        with open(os.path.join(V2, "cgroup.controllers")) as f:
            return "memory" in f.read().split()
    except OSError:
        return False


def why_not():
    """None when a memory cgroup can be made here, else the reason."""
    if os.geteuid() != 0:
        return "making a memory cgroup needs root"
    if _v2_ok() or os.path.isdir(V1):
        return None
    return ("no cgroup memory controller is mounted (neither "
            f"{V2}/cgroup.controllers with memory nor {V1})")


class MemCgroup:
    """with MemCgroup(limit) as cg: subprocess.run(cg.wrap(cmd))"""

    def __init__(self, limit):
        self.limit = int(limit)
        self.path = None

    def __enter__(self):
        reason = why_not()
        if reason:
            raise OSError(f"no memory cgroup: {reason}")
        name = f"nvswap-{os.getpid()}-{time.monotonic_ns()}"
        if _v2_ok():
            self.path = os.path.join(V2, name)
            os.mkdir(self.path)
            self._write("memory.max", self.limit)
            try:
                self._write("memory.swap.max", 0)
            except OSError:
                pass  # no swap accounting: no swap to go to either
        else:
            self.path = os.path.join(V1, name)
            os.mkdir(self.path)
            self._write("memory.limit_in_bytes", self.limit)
            try:
                self._write("memory.memsw.limit_in_bytes", self.limit)
            except OSError:
                pass
        return self

    def _write(self, key, value):
        with open(os.path.join(self.path, key), "w") as f:
            f.write(str(value))

    def wrap(self, cmd):
        """cmd run as the cgroup's first process (a shell moves itself
        in, then execs cmd)."""
        procs = os.path.join(self.path, "cgroup.procs")
        return ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh",
                *cmd]

    def peak(self):
        """The cgroup's peak memory in bytes (None where not kept)."""
        for key in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                with open(os.path.join(self.path, key)) as f:
                    return int(f.read())
            except OSError:
                continue
        return None

    def __exit__(self, *exc):
        if self.path is None:
            return
        for _ in range(50):  # the last process may take a moment to go
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def run_in(limit, cmd, **kw):
    """subprocess.run(cmd) inside a memory cgroup of limit bytes;
    returns (CompletedProcess, peak bytes or None)."""
    with MemCgroup(limit) as cg:
        r = subprocess.run(cg.wrap(cmd), **kw)
        return r, cg.peak()
