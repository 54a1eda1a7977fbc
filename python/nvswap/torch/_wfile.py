# SPDX-License-Identifier: MIT
"""A weights file held open from its check to its last read.

WFile(path) never blocks and never hands the descriptor to a child: it
opens with O_NONBLOCK (a FIFO planted as a shard, an index or
model.safetensors would otherwise hang the open until a writer came),
refuses what fstat() says is not a regular file (a FIFO, a directory, a
device), naming the file and what it is, then clears O_NONBLOCK. Links
are followed: the Hugging Face cache's snapshot files are links to its
blobs.

Every read of the file goes through that descriptor (os.pread here; the
aio handle reads the tensors through /proc/self/fd/N, the same open
file), so a rename over the path or a new file under its name cannot
send a read to bytes the headers did not describe. check() compares
fstat() with what it said at the open, before and after each tensor's
read: a file changed at all since (truncated, rewritten, grown, renamed
over or removed: each moves its size, mtime or ctime) is refused with
nvswap.Error(EINVAL) naming the file, the tensor and what changed, never
read as if it were the file that was checked.
A rewrite of the same size within the timestamp tick of the write before
the open keeps both times on kernels without multigrain timestamps
(before 6.13; since, a stat makes the next change's times fine): that
one can pass unseen.
"""
import contextlib
import errno
import fcntl
import os
import stat
import time

import nvswap

# how long a load waits for a save_pretrained into its directory to end
LOCK_WAIT_S = 120.0

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind(mode):
    """'a FIFO', 'a directory'...: what a st_mode is, for sentences."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "of an unknown type"


def _stamp(st):
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink)


def _where(path, key):
    return f"{path}: tensor '{key}': " if key is not None else f"{path}: "


def _regular(path, st, role):
    if not stat.S_ISREG(st.st_mode):
        raise nvswap.Error(
            errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
            f"nvswap.torch: {path}: is {kind(st.st_mode)}, not a regular "
            f"file (a {role} must be one)")


class WFile:
    """An open weights file: path, fd, size (at the open)."""

    __slots__ = ("path", "fd", "size", "target", "_stamp")

    def __init__(self, path, role):
        """Open path (a role such as "safetensors file" for the refusal's
        sentence); nvswap.Error with the OS's errno for one that cannot be
        opened, EISDIR for a directory, EINVAL for another kind that is
        not a regular file."""
        self.fd = -1
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC |
                         os.O_NOCTTY)
        except OSError as e:
            if e.errno == errno.ENXIO:  # a socket: named as a FIFO is
                try:
                    st = os.stat(path)
                except OSError:
                    st = None
                if st is not None:
                    _regular(path, st, role)
            raise nvswap.Error(e.errno, f"nvswap.torch: cannot open {path}: "
                               f"{e.strerror}") from None
        try:
            st = os.fstat(fd)
            _regular(path, st, role)
            fcntl.fcntl(fd, fcntl.F_SETFL,
                        fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        self.path, self.fd, self.size = path, fd, st.st_size
        self._stamp = _stamp(st)
        # What the aio handle reads: /proc/self/fd/N names this open file
        # whatever is renamed over its path, and as a path the handle
        # opens it O_DIRECT where the file system can and keeps that in
        # its cache (the edges too); without /proc, the descriptor (read
        # through the page cache).
        proc = f"/proc/self/fd/{fd}"
        self.target = proc if os.path.exists(proc) else fd

    def pread(self, n, offset, what):
        """Exactly n bytes at offset (what: the part, for the sentence);
        EBADMSG naming the file when it ends first."""
        out = b""
        while len(out) < n:
            part = os.pread(self.fd, n - len(out), offset + len(out))
            if not part:
                self.check()
                raise nvswap.Error(
                    errno.EBADMSG, f"nvswap.torch: {self.path}: {what} "
                    f"[{offset}, {offset + n}) runs past the end of the "
                    f"file ({offset + len(out)} bytes): truncated")
            out += part
        return out

    def check(self, key=None, begin=None, end=None):
        """nvswap.Error(EINVAL) naming the file (the tensor, and its bytes
        [begin, end)) if it changed since it was opened."""
        st = os.fstat(self.fd)
        now = _stamp(st)
        if now == self._stamp:
            return
        what = self._what(now, begin, end)
        raise nvswap.Error(errno.EINVAL, f"nvswap.torch: "
                           f"{_where(self.path, key)}the file changed since "
                           f"it was opened and checked: {what}; its bytes "
                           "are not loaded (load it again)")

    def _what(self, now, begin, end):
        size, was = now[0], self.size
        if size < was:
            what = f"truncated from {was} to {size} bytes"
            if end is not None and end > size:
                what += (f" (the tensor's bytes [{begin}, {end}) now lie "
                         "beyond the end of the file)")
            return what
        if size > was:
            return f"grown from {was} to {size} bytes"
        if now[3] == 0:
            return "removed, or replaced by a rename over its name"
        if now[1] != self._stamp[1]:
            return "rewritten in place (its modification time moved)"
        return ("its status changed (its ctime moved: a write, a chmod, a "
                "new link or a rename)")

    def failed(self, err, key, begin, end):
        """A failed read of a tensor's bytes [begin, end): the change
        that explains it (check()), else err with the file, the tensor
        and the range named."""
        self.check(key, begin, end)
        return nvswap.Error(err.errno, f"nvswap.torch: "
                            f"{_where(self.path, key)}reading its bytes "
                            f"[{begin}, {end}) of the file ({self.size} "
                            f"bytes): {err}")

    def close(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        self.close()


@contextlib.contextmanager
def shared_dir(directory):
    """A shared flock on directory while a load looks up and opens a
    save's files (the index, then its shards): save_pretrained holds it
    exclusively for its whole switch (_savedir), so a load never opens
    half of one save and half of the next. Waits up to LOCK_WAIT_S, then
    nvswap.Error(EBUSY) naming it; where the directory cannot be opened
    or locked (a filesystem without flock), the load goes on unlocked."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    break  # ENOLCK, EINVAL: no locks here
                if time.monotonic() >= deadline:
                    raise nvswap.Error(
                        errno.EBUSY, f"nvswap.torch: {directory}: a "
                        "save_pretrained() into it still holds it after "
                        f"{LOCK_WAIT_S:g} s (a load waits for a save to "
                        "end, so as not to read half of each)") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
