# SPDX-License-Identifier: MIT
"""nvswap.save: torch.save through the checkpoint writer, in the background.

The file is what torch.save writes (its zip format; torch.load reads it
back unchanged), but the bytes go through nvswap.CkptWriter: O_DIRECT
from pinned staging buffers, copy and disk write overlapped, fsync, and
the file under its final name only once complete. torch.save hands each
CPU storage to the writer as one memoryview of the tensor's own memory,
so the only copy is the one into the staging buffers.
"""

import threading

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


def _storage_bytes(obj, seen, depth=0):
    """Bytes of the distinct tensor storages in a state dict (a lower
    bound of the file's size, for preallocation)."""
    if depth > 32:
        return 0
    import torch

    if isinstance(obj, torch.Tensor):
        try:
            st = obj.untyped_storage() if hasattr(obj, "untyped_storage") \
                else obj.storage()
            key = (st.data_ptr(), obj.device.type)
            if key in seen:
                return 0
            seen.add(key)
            return st.nbytes() if hasattr(st, "nbytes") else st.size() * \
                obj.element_size()
        except Exception:
            return 0
    if isinstance(obj, dict):
        return sum(_storage_bytes(v, seen, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_storage_bytes(v, seen, depth + 1) for v in obj)
    return 0


def save(obj, path, *, buffer_size=None, buffer_count=None, fsync=True,
         size_hint=None, pickle_protocol=2, background=True):
    """Write ``obj`` as torch.save(obj, path) would, through CkptWriter.

    Returns a SaveHandle at once; the work runs on a background thread
    (``background=False``: on this one, and the handle is done when this
    returns). The C writes release the GIL, so the caller's next training
    step runs while the checkpoint drains; call handle.wait() before
    modifying the saved tensors (optimizer.step()) and before relying on
    the file. The file appears under ``path`` only when complete and
    fsynced (``fsync=False`` skips the fsyncs); on failure it never
    appears, a file already at ``path`` is untouched, and wait() raises.

    buffer_size, buffer_count: the writer's staging (default 16 MiB x 4).
    size_hint: bytes to preallocate; None = the sum of the tensors'
    storages found in dicts, lists and tuples of ``obj``.
    """
    import torch

    if size_hint is None:
        size_hint = _storage_bytes(obj, set())
    handle = SaveHandle(path)

    def work():
        w = CkptWriter(path, buffer_size=buffer_size,
                       buffer_count=buffer_count, fsync=fsync,
                       size_hint=size_hint)
        try:
            torch.save(obj, w, pickle_protocol=pickle_protocol)
        except BaseException:
            w.abort()
            raise
        w.close()

    if not background:
        handle._run(work)
        return handle
    t = threading.Thread(target=handle._run, args=(work,),
                         name="nvswap.save", daemon=False)
    handle._thread = t
    t.start()
    return handle
