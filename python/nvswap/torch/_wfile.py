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


def flock_holders(fd, write=None):
    """The pids holding a flock on fd's file, from /proc/locks (exclusive
    ones only with write=True, shared only with write=False); entries on
    its device first matched, then by inode alone (a device /proc/locks
    numbers differently: overlayfs, btrfs), as the C library's
    flocks.c. A pid of 0: one /proc/locks could not translate (another
    PID namespace's, on older kernels; newer ones leave those out). []
    where /proc/locks cannot be read."""
    st = os.fstat(fd)
    exact, loose = [], []
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 123 08:01:4567 0 EOF"; a waiter's
        # line reads "1: -> FLOCK ..." and is skipped
        w = line.split()
        if len(w) < 6 or w[1] != "FLOCK" or \
                (write is not None and (w[3] == "WRITE") != write):
            continue
        try:
            pid = int(w[4])
            maj, mnr, ino = w[5].split(":")
            dev = os.makedev(int(maj, 16), int(mnr, 16))
            if int(ino) != st.st_ino:
                continue
        except ValueError:
            continue
        got = exact if dev == st.st_dev else loose
        if pid == 0 or pid not in got:  # a process holding it twice: once
            got.append(pid)
    return exact or loose


def name_pids(pids):
    """ "process 12", "processes 12, 14 and 15" (0: of another PID
    namespace)."""
    names = [str(p) if p > 0 else "of another PID namespace" for p in pids]
    if len(names) > 1:
        names = [", ".join(names[:-1]) + " and " + names[-1]]
    return ("processes " if len(pids) > 1 else "process ") + names[0]


def _lock_shared(fd, directory):
    """A shared flock on fd (directory's): waits up to LOCK_WAIT_S for a
    save_pretrained into it to end, then nvswap.Error(EBUSY) naming it
    and its process; False where the filesystem has no locks (ENOLCK,
    EINVAL)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            if time.monotonic() >= deadline:
                who = flock_holders(fd, write=True)
                by = f" ({name_pids(who)})" if who else ""
                raise nvswap.Error(
                    errno.EBUSY, f"nvswap.torch: {directory}: a "
                    f"save_pretrained(){by} into it still holds it after "
                    f"{LOCK_WAIT_S:g} s (a load waits for a save to "
                    "end, so as not to read half of each)") from None
            time.sleep(0.05)


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
        _lock_shared(fd, directory)
        yield
    finally:
        _unlock_close(fd)


# This process's holds on directories its models read layers from in
# place: (st_dev, st_ino) of the directory -> [Hold] (a bind mount or a
# link names the same one). save_pretrained() into one asks them first
# (readers_of), as its exclusive flock would wait on them forever.
_HOLDS = {}


def _unlock_close(fd):
    """The flock let go, then fd closed: a forked child (a DataLoader
    worker) shares the open file description, and with it the lock,
    which a close alone would leave held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        pass
    os.close(fd)


def _dir_key(directory):
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Hold:
    """A shared flock on directory for as long as a model reads layers
    from its files in place (Loader._sources): nvswap's save_pretrained()
    into it, which holds it exclusively while it replaces the files,
    then waits and refuses (EBUSY) instead of replacing them under the
    model, in this process (readers_of: also where the filesystem takes
    no locks) or another. reading() names the layers that still read
    from it: none, and the hold can go (a trained layer has moved into
    the swap file). A writer that takes no flock (another program) is
    the ESTALE of the next read."""

    def __init__(self, directory, reading):
        self.dir = os.path.realpath(directory)
        self.reading = reading
        self.fd = -1
        self.key = _dir_key(self.dir)
        try:
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY |
                         os.O_CLOEXEC)
        except OSError:
            fd = -1  # not a directory we can open: unlocked
        if fd >= 0:
            try:
                if _lock_shared(fd, self.dir):
                    self.fd = fd
                else:
                    os.close(fd)  # no locks on this filesystem
            except BaseException:
                os.close(fd)
                raise
        if self.key is not None:
            _HOLDS.setdefault(self.key, []).append(self)

    def close(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            _unlock_close(fd)
        held = _HOLDS.get(self.key, [])
        if self in held:
            held.remove(self)
        if not held:
            _HOLDS.pop(self.key, None)


def readers_of(directory):
    """The layers this process's models still read in place from files
    in directory ("layer L (names)", ...); the holds of those that read
    none there are released."""
    out = []
    for h in list(_HOLDS.get(_dir_key(directory), ())):
        names = h.reading()
        if names:
            out += names
        else:
            h.close()
    return out
