# SPDX-License-Identifier: MIT
"""The page cache warmed behind the first forward of a model served in
place through it.

When page_cache="auto" finds room in the page cache for every byte a
forward streams, the layers read in place come from the safetensors
files through the cache. Read cold by the forward itself they arrive in
the readahead window's pieces, one layer's reads in flight at a time;
warm_cache() reads them in ahead, on a thread, in the order the forward
asks for them.

How the bytes enter the cache matters as much as when. A file's pages
read by read() or by a fault on a mapping come in as large folios where
the filesystem takes them (ext4 since Linux 6.16, XFS since 5.18), while
posix_fadvise(WILLNEED) (and readahead(2)) reads into 4 KiB pages: every
later read of those bytes from the cache then runs at about 11-12 GB/s
here against 18-20 GB/s from large folios, and a warmed model decoded at
0.6-0.75 x the copy in its swap file (bench/RESULTS.md, "Weights in
place"). So each span is mapped and populated (madvise
MADV_POPULATE_READ: the fault path's readahead, large folios, the device
queue kept full), WARM_CHUNK bytes at a time, through ctypes so that the
GIL is let go while the kernel reads; on a kernel without it (before
5.14) WILLNEED is asked instead, and for a chunk whose mapping is
refused otherwise (a filesystem that cannot map). Only a hint: a file
gone or truncated (the populate fails with EFAULT, never a SIGBUS) is
skipped. (ctypes passes the offset as int64: 64-bit Linux only, as the
wheel is built.)
"""
import ctypes
import errno
import mmap
import os
import threading

WARM_CHUNK = 64 << 20  # bytes populated before stop is looked at again
GAP = 1 << 20  # extents of a file this close are read as one span
MADV_POPULATE_READ = 22  # Linux 5.14

_libc = None


def _calls():
    """libc's mmap, madvise and munmap (ctypes lets the GIL go while they
    run), or None where there is no such libc."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.mmap.restype = ctypes.c_void_p
            lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int64]
            lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_int]
            lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


def spans(extents):
    """extents, [(path, offset, bytes)] in the order a forward reads
    them, as [(path, start, end)]: an extent within GAP of the span
    before it in the same file joins it (a layer's tensors in any order,
    the small tensors kept in memory between layers), the order of the
    first extent of each span kept."""
    out = []
    for path, off, n in extents:
        if out:
            p, lo, hi = out[-1]
            if p == path and off <= hi + GAP and off + n >= lo - GAP:
                out[-1] = (p, min(lo, off), max(hi, off + n))
                continue
        out.append((path, off, off + n))
    return out


def populate(fd, start, end):
    """Bytes [start, end) of fd into the page cache by faulting them in
    through a mapping: 0; -EINVAL where the kernel has no
    MADV_POPULATE_READ; another -errno where the mapping or the read
    failed (EFAULT: the file ends before end)."""
    libc = _calls()
    if libc is None:
        return -errno.ENOSYS
    lo = start - start % mmap.PAGESIZE
    n = end - lo
    at = libc.mmap(None, n, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo)
    if at is None or at == ctypes.c_void_p(-1).value:
        return -ctypes.get_errno()
    try:
        if libc.madvise(at, n, MADV_POPULATE_READ) != 0:
            return -ctypes.get_errno()
        return 0
    finally:
        libc.munmap(at, n)


def warm_cache(extents):
    """A daemon thread reading extents, [(path, offset, bytes)] in the
    forward's order, into the page cache (module docstring), one
    WARM_CHUNK at a time so that stop (the returned thread's .stop, a
    threading.Event: Engine.close() sets it) ends it within one chunk.
    Returns the thread."""
    todo = spans(extents)
    stop = threading.Event()

    def run():
        fds = {}
        willneed = False
        try:
            for path, start, end in todo:
                if path not in fds:
                    try:
                        fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    except OSError:
                        fds[path] = None
                fd = fds[path]
                for at in range(start, end, WARM_CHUNK):
                    if stop.is_set():
                        return
                    if fd is None:
                        break
                    n = min(WARM_CHUNK, end - at)
                    if not willneed:
                        err = populate(fd, at, at + n)
                        if err == 0:
                            continue
                        if err == -errno.EFAULT:
                            break  # shorter now: the forward will say
                        # no MADV_POPULATE_READ (before 5.14): WILLNEED
                        # from here on; another refusal (a filesystem
                        # that cannot map, EINTR): this chunk
                        willneed = err in (-errno.EINVAL, -errno.ENOSYS)
                    try:
                        os.posix_fadvise(fd, at, n, os.POSIX_FADV_WILLNEED)
                    except OSError:
                        break
        finally:
            for fd in fds.values():
                if fd is not None:
                    os.close(fd)

    t = threading.Thread(target=run, name="nvswap-warm-cache", daemon=True)
    t.stop = stop
    t.start()
    return t
