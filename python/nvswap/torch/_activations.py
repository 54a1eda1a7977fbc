# SPDX-License-Identifier: MIT
"""Activations to NVMe: the tensors autograd saves for backward written
to a swap file behind the forward and read back ahead of the backward
(issue 50, first part: the context manager, like
torch.autograd.graph.save_on_cpu).

    act = nvt.save_on_nvme("/nvme/act", memory="512M")
    for batch in data:
        with act:
            loss = model(batch)
        loss.backward()

Each saved tensor on the CPU of at least `threshold` bytes is copied into
a buffer of a scratch Swapper of its own (`memory` / `buffer_size`
buffers; a tensor larger than a buffer goes in buffer-sized pieces, one
id each), released dirty and evicted at once: the write runs behind the
forward. Its unpack in backward copies it back into a new tensor of the
same shape and dtype (contiguous, as save_on_cpu's: the bytes are the
same, strides are not kept), and asks the pieces saved just before it
(the next the backward walk unpacks) to be read ahead into the free
buffers (try_prefetch: never waits for one). A tensor's space is freed
when autograd lets it go (after the backward that used it, or when a
graph is dropped without one); the swap file's space is reused by the
next step's tensors, and the file goes with close() or the process.

Kept in memory, as given: tensors below the threshold, tensors not on
the CPU, layouts other than strided, nested tensors, and a parameter
(trained or frozen), a leaf that requires grad, or a view of one
(autograd saves the weights of a Linear: they are in memory anyway, or
in nvswap's pools for an offloaded model, whose own hooks keep them by
reference before these see them). A module's buffers are not told apart
from activations: one above the threshold is copied.

Autograd drops a saved tensor on any thread, inside the cycle collector
too: _Packed.__del__ takes no lock and calls nothing; it queues its
pieces, and the store frees them at its next pack, unpack, stats() or
close().
"""
import atexit
import collections
import errno
import itertools
import threading
import time
import weakref

import torch

import nvswap

from . import _sizes

THRESHOLD = 1 << 20  # bytes below which a saved tensor stays in memory
MEMORY = 256 << 20  # offload(activations="nvme")'s pool: these bytes
BUFFER = 32 << 20  # in buffers of these

# The stores not closed yet: closed at exit, so that their swap files go
# with the process also when autograd still holds tensors saved to them.
_OPEN = weakref.WeakSet()


@atexit.register
def _close_at_exit():
    for store in list(_OPEN):
        try:
            store.close()
        except Exception:  # nothing to report to at exit
            pass


def _kept(t, threshold):
    """True when t is saved as it is (module docstring)."""
    if t.layout is not torch.strided or t.device.type != "cpu" or \
            getattr(t, "is_nested", False):
        return True
    if t.numel() * t.element_size() < threshold:
        return True
    base = t._base if t._base is not None else t
    return isinstance(base, torch.nn.Parameter) or \
        (base.is_leaf and base.requires_grad)


class _Packed:
    """What autograd holds for a saved tensor: its pieces' ids in the
    store, its shape and dtype. Its pieces are queued to be freed when
    autograd drops it (no lock taken here: see the module docstring)."""

    __slots__ = ("store", "ids", "shape", "dtype", "nbytes")

    def __init__(self, store, ids, shape, dtype, nbytes):
        self.store, self.ids = store, ids
        self.shape, self.dtype, self.nbytes = shape, dtype, nbytes

    def __del__(self):
        self.store._dead.append(self.ids)  # atomic; freed by _reap()


def _nonneg(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"nvswap.torch.save_on_nvme: {name}={value!r}: "
                         "a whole number >= 0")
    return value


class ActivationStore:
    """The Swapper saved tensors go to, and the hooks that put them
    there. Made by save_on_nvme(); enter it (with) around the forwards
    whose saved tensors should go to NVMe, as often as wanted."""

    def __init__(self, nvme_path, memory="256M", buffer_size="32M",
                 threshold=THRESHOLD, lookahead=None, backend=None,
                 rank=None):
        self.buffer_size = _sizes.keyword("save_on_nvme", "buffer_size",
                                          buffer_size)
        self.memory = _sizes.keyword("save_on_nvme", "memory", memory)
        count = self.memory // self.buffer_size
        if count < 2:
            raise ValueError(
                f"nvswap.torch.save_on_nvme: memory={self.memory} "
                f"bytes holds {count} buffer(s) of buffer_size="
                f"{self.buffer_size}: two at least (one written while "
                "the next is filled)")
        self.threshold = _nonneg("threshold", threshold)
        self.count = count
        self.lookahead = count - 1 if lookahead is None else \
            _nonneg("lookahead", lookahead)
        self.swapper = nvswap.Swapper(
            nvme_path=nvme_path, name="activations", rank=rank,
            buffer_size=self.buffer_size, buffer_count=count,
            auto_evict=True, backend=backend)
        self.path = self.swapper.dirs[0]
        _OPEN.add(self)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # first id of each tensor on NVMe -> its ids, in the order saved
        self._groups = {}
        self._dead = []  # ids lists autograd dropped, to free (_reap)
        self._writing = collections.deque()  # ids evicted, write not seen
        self._ctx = []
        self._failed = None  # the error a pack raised in this with
        self.st = {"saved": 0, "saved_bytes": 0, "kept": 0,
                   "kept_bytes": 0, "restored": 0, "restored_bytes": 0,
                   "write_wait_s": 0.0, "read_wait_s": 0.0}

    def _count(self, **add):
        with self._lock:
            for k, v in add.items():
                self.st[k] += v

    def _open(self, what):
        if self.swapper.closed:
            raise nvswap.Error(errno.EBADF, f"nvswap.torch.save_on_nvme: "
                               f"{what}: the store in {self.path} is "
                               "closed")

    # ------------------------------------------------------- the hooks
    def pack(self, t):
        if _kept(t, self.threshold):
            self._count(kept=1, kept_bytes=t.numel() * t.element_size())
            return t
        try:
            return self._save(t)
        except nvswap.Error as e:
            self._failed = e  # for __exit__ (torch < 2 wraps it)
            raise

    def _save(self, t):
        self._open("saving a tensor")
        self._reap()
        src = t.detach()
        if src.is_conj() or src.is_neg():  # lazy bits: the values
            src = src.resolve_conj().resolve_neg()
        if not src.is_contiguous():
            src = src.contiguous()
        flat = src.reshape(-1).view(torch.uint8)
        nbytes = flat.numel()
        ids = []
        try:
            for at in range(0, nbytes, self.buffer_size):
                n = min(self.buffer_size, nbytes - at)
                i = next(self._ids)
                ids.append(i)
                self.swapper.register(i, n)
                buf = self.swapper.acquire(i, torch.uint8, (n,))
                try:
                    buf.copy_(flat[at:at + n])
                finally:
                    self.swapper.release(i, True)
                self._writing.append(i)
                self.swapper.evict(i)  # written behind the forward
                self._written(self.count - 1)
        except BaseException:
            self._free(ids)  # what this tensor registered, quietly
            raise
        with self._lock:
            self._groups[ids[0]] = ids
            self.st["saved"] += 1
            self.st["saved_bytes"] += nbytes
        return _Packed(self, ids, t.shape, t.dtype, nbytes)

    def unpack(self, packed):
        if not isinstance(packed, _Packed):
            return packed
        self._open("reading a saved tensor back")
        self._reap()
        out = torch.empty(packed.shape, dtype=packed.dtype)
        flat = out.reshape(-1).view(torch.uint8)
        self._read_ahead(packed.ids[0])
        t0 = time.perf_counter_ns()
        at = 0
        for i in packed.ids:
            n = min(self.buffer_size, packed.nbytes - at)
            self.swapper.read(i, flat[at:at + n])
            try:
                # not needed again before the graph goes: its buffer to
                # the read-ahead (only that: a failure here loses nothing)
                self.swapper.evict(i)
            except nvswap.Error:
                pass
            at += n
        self._count(read_wait_s=(time.perf_counter_ns() - t0) / 1e9,
                    restored=1, restored_bytes=packed.nbytes)
        return out

    # ------------------------------------------------------- the store
    def _written(self, keep):
        """Wait for the oldest writes until at most keep are in flight:
        the forward runs ahead of the disk by the pool, no more, and a
        write that failed (ENOSPC: the disk is full) raises here, in the
        forward, as nvswap.Error naming the swap file."""
        while True:
            with self._lock:
                if len(self._writing) <= keep:
                    return
                i = self._writing.popleft()
            t0 = time.perf_counter_ns()
            try:
                self.swapper.wait(i)
            except nvswap.Error as e:
                if e.errno != errno.ENOENT:  # not freed meanwhile
                    raise
            finally:
                self._count(write_wait_s=(time.perf_counter_ns() - t0)
                            / 1e9)

    def _read_ahead(self, first):
        """Start reading the tensors saved before the one starting at
        first (the next ones the backward unpacks: the nearest first,
        each one's pieces in order), up to lookahead pieces, into free
        buffers; stops at the first that finds none."""
        if not self.lookahead:
            return
        with self._lock:
            firsts = list(self._groups)
            try:
                k = firsts.index(first)
            except ValueError:
                return
            todo = []
            for g in reversed(firsts[:k]):
                todo += self._groups[g]
                if len(todo) >= self.lookahead:
                    break
        for i in todo[:self.lookahead]:
            try:
                if not self.swapper.try_prefetch(i):
                    return
            except nvswap.Error:
                return  # freed meanwhile: the next unpack looks again

    def _reap(self):
        """Free the pieces of the tensors autograd dropped."""
        while self._dead:
            try:
                ids = self._dead.pop()
            except IndexError:  # another thread took the last
                return
            with self._lock:
                self._groups.pop(ids[0], None)
            self._free(ids)

    def _free(self, ids):
        for i in ids:
            try:
                self.swapper.unregister(i)
            except (nvswap.Error, ValueError):
                pass  # never registered (a failed pack), or closed

    def stats(self):
        """Counts of this store: tensors and bytes saved to NVMe
        (saved, saved_bytes), kept in memory (kept, kept_bytes), read back
        (restored, restored_bytes); the exposed waits: write_wait_s (the
        forward waiting for writes, the pool full of them), read_wait_s
        (the backward waiting in unpack for reads and copies); live (the
        tensors on NVMe now); the Swapper's bytes_written and bytes_read,
        and pool_wait_s (its acquires waiting for a buffer or a read:
        the forward waiting for a buffer a write still holds, the read
        in unpack of a piece not read ahead); closed. Totals since the
        store was made."""
        closed = self.swapper.closed
        if not closed:
            self._reap()
        with self._lock:
            out = dict(self.st)
            out["live"] = len(self._groups)
        out["closed"] = closed
        s = self.swapper.stats() if not closed else {}
        out["bytes_written"] = s.get("bytes_written")
        out["bytes_read"] = s.get("bytes_read")
        out["pool_wait_s"] = ((s["acquire_wait_ns"] + s["buffer_wait_ns"])
                              / 1e9 if s else None)
        return out

    def close(self):
        """Close the Swapper (its swap file removed). A tensor saved and
        not yet read back can no longer be: its unpack raises
        nvswap.Error(EBADF) naming the store."""
        with self._lock:
            self._groups.clear()
            self._writing.clear()
        self._dead.clear()
        _OPEN.discard(self)
        self.swapper.close()

    def __enter__(self):
        ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        ctx.__enter__()
        self._ctx.append(ctx)
        self._failed = None
        return self

    def __exit__(self, kind, exc, tb):
        self._ctx.pop().__exit__(kind, exc, tb)
        failed, self._failed = self._failed, None
        if failed is not None and isinstance(exc, RuntimeError) and \
                str(failed) in str(exc):
            # torch before 2.0 turns an exception in a pack hook into a
            # RuntimeError carrying its text: the nvswap.Error again
            raise failed from exc
        return False


def save_on_nvme(nvme_path, memory="256M", buffer_size="32M",
                 threshold=THRESHOLD, lookahead=None, backend=None,
                 rank=None):
    """An ActivationStore: `with` it around forwards, and the tensors
    autograd saves for backward (on the CPU, threshold bytes and up)
    go to a swap file in nvme_path, written behind the forward and read
    back ahead of the backward, through memory bytes of pinned buffers
    of buffer_size each (see nvswap/torch/_activations.py); the swap
    directory is <nvme_path>/nvswap/activations/rank<rank> (rank: the
    launcher's by default, as nvswap.Swapper's)."""
    return ActivationStore(nvme_path, memory=memory, buffer_size=buffer_size,
                           threshold=threshold, lookahead=lookahead,
                           backend=backend, rank=rank)
