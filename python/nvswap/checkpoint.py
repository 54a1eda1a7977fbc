# SPDX-License-Identifier: MIT
"""nvswap.save: torch.save through the checkpoint writer, in the background.

The file is what torch.save writes (its zip format; torch.load reads it
back unchanged), but the bytes go through nvswap.CkptWriter: O_DIRECT
from pinned staging buffers, copy and disk write overlapped, fsync, and
the file under its final name only once complete. torch.save hands each
CPU storage to the writer as one memoryview of the tensor's own memory,
so the only copy is the one into the staging buffers. With defer=True
(the default) that copy runs on the writer's own thread for the storages
of the CPU tensors found in dicts, lists and tuples of the object, so
torch.save computes the next record's CRC32 meanwhile.
"""

import errno
import os
import stat
import threading

from . import _nvswap
from ._nvswap import CkptWriter

__all__ = ["SaveHandle", "save"]


class SaveHandle:
    """A checkpoint being written by nvswap.save().

    wait() blocks until the file is complete, durable and under its final
    name, and re-raises whatever failed (nvswap.Error with .errno for an
    I/O error, the pickling error for an object torch.save refuses). The
    tensors saved must not be modified until wait() returns: forward and
    backward may run meanwhile, optimizer.step() may not.
    """

    def __init__(self, path):
        self.path = path
        self._error = None
        self._done = threading.Event()
        self._thread = None

    def done(self):
        """True once the save has finished, successfully or not."""
        return self._done.is_set()

    def wait(self, timeout=None):
        """Block until the save finished; re-raise its error.

        With a timeout (seconds), return False if it is still running.
        Returns True when it finished successfully.
        """
        if not self._done.wait(timeout):
            return False
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return True

    def _run(self, fn):
        try:
            fn()
        except BaseException as e:  # re-raised by wait()
            self._error = e
        finally:
            self._done.set()

    def __repr__(self):
        state = "running"
        if self.done():
            state = "failed" if self._error is not None else "done"
        return f"<nvswap.SaveHandle {self.path!r} {state}>"


def _storages(obj, seen, out, depth=0):
    """Walk dicts, lists and tuples of ``obj`` for tensors; append
    (tensor, data_ptr, nbytes, is_cpu) once per distinct storage to
    ``out``. The sum of nbytes is a lower bound of the file's size (for
    preallocation); the CPU ones are what torch.save will pass to write()
    as raw memory (data_ptr, nbytes), kept alive by the tensor."""
    if depth > 32:
        return
    import torch

    if isinstance(obj, torch.Tensor):
        try:
            st = obj.untyped_storage() if hasattr(obj, "untyped_storage") \
                else obj.storage()
            key = (st.data_ptr(), obj.device.type)
            if key in seen:
                return
            seen.add(key)
            n = st.nbytes() if hasattr(st, "nbytes") else st.size() * \
                obj.element_size()
            out.append((obj, st.data_ptr(), n, obj.device.type == "cpu"))
        except Exception:
            return
    elif isinstance(obj, dict):
        for v in obj.values():
            _storages(v, seen, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _storages(v, seen, out, depth + 1)


_ERRORS = {errno.EISDIR: "IsADirectoryError",
           errno.ENOTDIR: "NotADirectoryError",
           errno.ENOENT: "FileNotFoundError",
           errno.EEXIST: "FileExistsError",
           errno.EACCES: "PermissionError", errno.EPERM: "PermissionError"}


def _error(code, text):
    """An nvswap.Error, the errno's subclass where nvswap has one."""
    return getattr(_nvswap, _ERRORS.get(code, "Error"))(code, text)


def _make_parents(path):
    """The missing directories above path, made 0700 (as the swapper
    makes its own), in the order made; or nvswap.Error naming the level
    that is not a directory or cannot be made (the ones made for this
    call removed again)."""
    made = []
    parent = os.path.dirname(path)
    levels = []
    while parent and not os.path.isdir(parent):
        levels.append(parent)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    try:
        for d in reversed(levels):
            if os.path.lexists(d) and not os.path.isdir(d):
                raise _error(errno.ENOTDIR, f"nvswap.save: {path}: {d} is "
                             "not a directory")
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:  # made meanwhile
                if not os.path.isdir(d):
                    raise _error(errno.ENOTDIR, f"nvswap.save: {path}: {d} "
                                 "is not a directory") from None
                continue
            except OSError as e:
                raise _error(e.errno, f"nvswap.save: {path}: cannot "
                             f"create directory {d}: {e.strerror}") from None
            made.append(d)
    except BaseException:
        _unmake(made)
        raise
    return made


def _unmake(made):
    """Remove the directories _make_parents made, while empty."""
    for d in reversed(made):
        try:
            os.rmdir(d)
        except OSError:
            return


def _check_target(path):
    """The file at path, whose mode (and owner) a new one keeps; None
    when there is none. A directory there is refused before anything is
    written: the rename at the end would fail only after the whole
    file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _error(e.errno, f"nvswap.save: {path}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise _error(errno.EISDIR, f"nvswap.save: {path} is a directory: "
                     "give a file name in it")
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)  # the file it names
        except OSError:
            return None
    return st if stat.S_ISREG(st.st_mode) else None


def _keep_mode(w, old):
    """The new file (still under its temp name) takes the mode of the
    one it replaces, umask or not, and its owner and group where this
    process may give them. Through a descriptor opened without following
    a link: a link swapped in at the temp name (a shared directory) is
    refused, its target's mode and owner never changed."""
    try:
        fd = os.open(w.temp_path, os.O_RDONLY | os.O_NOFOLLOW |
                     os.O_CLOEXEC | os.O_NONBLOCK)
    except PermissionError:  # a umask without the owner's read bit
        fd = os.open(w.temp_path, os.O_WRONLY | os.O_NOFOLLOW |
                     os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        _keep_mode_fd(fd, old)
    finally:
        os.close(fd)


def _keep_mode_fd(fd, old):
    """_keep_mode() on an open file."""
    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:
            try:  # at least the group, where this user is in it
                os.fchown(fd, -1, old.st_gid)
            except OSError:
                pass
    os.fchmod(fd, stat.S_IMODE(old.st_mode))


class _Sink:
    """What torch.save writes into: the writer, until a write fails. The
    error is then kept and every later write swallowed, so torch.save runs
    to its end and its zip writer stays consistent: torch 1.13 raises
    (and, from its C++ destructor, terminates the process) when a write
    fails inside it. save() raises the kept error afterwards; the file is
    aborted."""

    def __init__(self, w):
        self._w, self.error = w, None

    def write(self, b):
        if self.error is None:
            try:
                return self._w.write(b)
            except Exception as e:
                self.error = e
        return memoryview(b).nbytes

    def __getattr__(self, name):
        return getattr(self._w, name)


def save(obj, path, *, buffer_size=None, buffer_count=None, fsync=True,
         size_hint=None, pickle_protocol=2, background=True, defer=True,
         crc32=True):
    """Write ``obj`` as torch.save(obj, path) would, through CkptWriter.

    Returns a SaveHandle at once; the work runs on a background thread
    (``background=False``: on this one, and the handle is done when this
    returns). The C writes release the GIL, so the caller's next training
    step runs while the checkpoint drains; call handle.wait() before
    modifying the saved tensors (optimizer.step()) and before relying on
    the file. The file appears under ``path`` only when complete and
    fsynced (``fsync=False`` skips the fsyncs); on failure it never
    appears, a file already at ``path`` is untouched, and wait() raises.

    What can be checked is checked before save() returns, and raised
    from it (nvswap.Error with .errno, naming the path): the missing
    directories above ``path`` are made (0700, as ``mkdir -p``; a file
    in the way is ENOTDIR, naming it), ``path`` must not be a directory
    (EISDIR), and the file is opened (under a temp name beside it:
    EACCES, EROFS, ENOSPC for size_hint...). A file replaced keeps its
    mode (and owner and group where permitted); a new one has mode 0666
    less the umask, as open() gives.

    buffer_size, buffer_count: the writer's staging (default 16 MiB x 4).
    size_hint: bytes to preallocate; None = the sum of the tensors'
    storages found in dicts, lists and tuples of ``obj``.
    defer: copy the storages of the CPU tensors found there (1 MiB and
    up) on the writer's own thread, overlapped with torch.save's CRC32 of
    the next record; the writer holds a reference to each such tensor
    until the file is closed. Other memory torch.save passes (headers,
    the pickle, CPU copies of GPU tensors) is copied before write()
    returns. False: every write is copied before it returns.
    crc32=False (torch >= 2.5; ValueError before): torch.save skips the
    CRC32 of each record, its slowest step. torch.load reads the file,
    but the zip's CRC fields are 0, so ``unzip -t`` and zipfile report
    it corrupt. It sets torch's process-wide option for the duration of
    the save: a torch.save on another thread meanwhile skips it too.
    """
    import torch

    ser = torch.serialization
    if not crc32 and not hasattr(ser, "set_crc32_options"):
        raise ValueError("nvswap.save: crc32=False needs torch >= 2.5 "
                         f"(torch.serialization.set_crc32_options); this "
                         f"is torch {torch.__version__}")
    found = []
    _storages(obj, set(), found)
    if size_hint is None:
        size_hint = sum(f[2] for f in found)
    handle = SaveHandle(path)
    name = os.fsdecode(os.fspath(path))
    if not os.path.basename(name):
        raise _error(errno.EISDIR, f"nvswap.save: {name}: a file name is "
                     "needed, not a directory")
    made = _make_parents(name)
    try:
        old = _check_target(name)
        w = CkptWriter(path, buffer_size=buffer_size,
                       buffer_count=buffer_count, fsync=fsync,
                       size_hint=size_hint, defer=defer,
                       mode=stat.S_IMODE(old.st_mode) if old else 0o666)
    except BaseException:
        _unmake(made)
        raise
    if old is not None:
        try:
            _keep_mode(w, old)
        except BaseException:
            w.abort()
            _unmake(made)
            raise

    def work():
        crc_was = None
        sink = _Sink(w)
        try:
            if defer:
                for t, ptr, n, cpu in found:
                    if cpu and ptr and n:
                        w._hold(t, ptr, n)
            if not crc32:
                crc_was = ser.get_crc32_options()
                ser.set_crc32_options(False)
            torch.save(obj, sink, pickle_protocol=pickle_protocol)
            if sink.error is not None:
                raise sink.error
        except BaseException:
            w.abort()
            _unmake(made)
            raise
        finally:
            if crc_was is not None:
                ser.set_crc32_options(crc_was)
        try:
            w.close()
        except BaseException:
            _unmake(made)
            raise

    if not background:
        handle._run(work)
        return handle
    t = threading.Thread(target=handle._run, args=(work,),
                         name="nvswap.save", daemon=False)
    handle._thread = t
    t.start()
    return handle
