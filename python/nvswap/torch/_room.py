# SPDX-License-Identifier: MIT
"""How much memory this process may still fill: what the kernel says is
available (MemAvailable) and what every memory cgroup holding the process
still allows (cgroup v2 memory.max - memory.current, v1
memory.limit_in_bytes - memory.usage_in_bytes; the least over the
process's cgroup and its ancestors). offload(page_cache='auto') asks it
whether the page cache could hold what a forward streams."""
import os

_V2 = "/sys/fs/cgroup"
_V1 = "/sys/fs/cgroup/memory"
_NO_LIMIT = 1 << 62  # v1 writes "no limit" as a page-rounded 2^63 - 1


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, ValueError):  # ValueError: a NUL in the path text
        return None


def _ancestors(path):
    """The cgroup @path (as /proc/self/cgroup writes it) and each of its
    ancestors up to the root, as paths relative to the mount, deepest
    first. Any text gives a finite list: empty and '.' parts are
    dropped, '..' is taken lexically and never climbs above the root
    (so '//x', '/../', 'x/' all end there, and nothing outside the mount
    is read)."""
    parts = []
    for c in path.split("/"):
        if c == "..":
            if parts:
                parts.pop()
        elif c and c != ".":
            parts.append(c)
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _count(text):
    """A byte count the kernel wrote (ASCII digits), else None."""
    return int(text) if text and text.isascii() and text.isdigit() \
        else None


def mem_available():
    """MemAvailable in bytes (None where /proc/meminfo lacks it)."""
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) << 10
    return None


def cgroup_room(proc_cgroup="/proc/self/cgroup", v2=_V2, v1=_V1):
    """Bytes the memory cgroups of this process still allow, the least
    over its cgroup and every ancestor with a limit; None when none
    limits it (or none can be read)."""
    room = None
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            root, keys = v2, ("memory.max", "memory.current")
        elif "memory" in parts[1].split(","):
            root, keys = v1, ("memory.limit_in_bytes",
                              "memory.usage_in_bytes")
        else:
            continue
        for rel in _ancestors(parts[2]):
            d = os.path.join(root, rel)
            limit, used = (_count(_read(os.path.join(d, k))) for k in keys)
            if limit is not None and used is not None \
                    and limit < _NO_LIMIT:  # v2's "max": no limit
                left = max(0, limit - used)
                room = left if room is None else min(room, left)
    return room


def available():
    """The bytes this process may still fill: the least of MemAvailable
    and its cgroups' room (None where neither can be read)."""
    got = [x for x in (mem_available(), cgroup_room()) if x is not None]
    return min(got) if got else None
