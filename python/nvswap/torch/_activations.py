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

Each saved tensor on the CPU or a CUDA device of at least `threshold`
bytes is copied into a buffer of a scratch Swapper of its own (`memory`
/ `buffer_size` buffers, pinned; a tensor larger than a buffer goes in
buffer-sized pieces, one id each, each buffer taken blank: neither read
nor zero-filled; from a device, copy_ waits for the DMA) and released
dirty. The newest `hold` pieces ((buffers - 1) // 2) stay in the pool
unwritten; each new one evicts the oldest held: the write runs behind
the forward, and the pieces the backward needs first are in memory (a
short forward's never reach the disk). The Swapper keeps its blocks
(keep_blocks): a freed piece's space is overwritten in place by the
next step's. Its unpack in backward copies it back into a new tensor
of the same shape, dtype, device and strides (from a buffer acquired
for the piece, for a device; the strides kept where the view covers
its span of memory densely, padded or broadcast, else contiguous:
_as_lies), and asks its own pieces and those saved just before it (the
next the backward walk unpacks) to be read ahead into the free buffers
(try_prefetch: never waits for one). A tensor saved again (the
same view of the same base tensor, that base alive, on the same memory
and unchanged: a Linear's input, saved by q, k and v projections each)
is written once and read back for each unpack (_again). A tensor's
space is freed when autograd lets it go (after the backward that used
it, or when a graph is dropped without one); the swap file's space is
reused by the next step's tensors, and the file goes with close() or
the process.

Kept in memory, as given: tensors below the threshold, tensors on
other devices (meta, mps...), layouts other than strided, nested
tensors, and a parameter
(trained or frozen), a leaf that requires grad, or a view of one
(autograd saves the weights of a Linear: they are in memory anyway, or
in nvswap's pools for an offloaded model, whose own hooks keep them by
reference before these see them). A module's buffers are not told apart
from activations: one above the threshold is copied.

Under offload(activations=) the engine marks where each layer of its
walk begins (_mark): the tensors saved from there to the next layer's
start are that layer's, and a forward whose layer saves more than the
pool raises nvswap.Error(ENOBUFS) naming the layer and both sizes.

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
SCAN = 1024  # places in the save order the read-ahead looks through
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
    if t.layout is not torch.strided or \
            t.device.type not in ("cpu", "cuda") or \
            getattr(t, "is_nested", False):
        return True
    if t.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return True  # a CUDA graph being captured: no copy may wait
    if t.numel() * t.element_size() < threshold:
        return True
    base = t._base if t._base is not None else t
    return isinstance(base, torch.nn.Parameter) or \
        (base.is_leaf and base.requires_grad)


class _Packed:
    """What autograd holds for a saved tensor: its pieces' ids in the
    store, its place in the save order (seq), its shape and dtype; uses:
    the saves it stands for (a tensor saved again while alive and
    unchanged is not written again), unpacks: the reads so far. Its
    pieces are queued to be freed when autograd drops it (no lock taken
    here: see the module docstring)."""

    __slots__ = ("store", "ids", "seq", "shape", "dtype", "device",
                 "strides", "nbytes", "uses", "unpacks", "__weakref__")

    def __init__(self, store, ids, seq, t, strides, nbytes):
        self.store, self.ids, self.seq = store, ids, seq
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device
        self.strides, self.nbytes = strides, nbytes
        self.uses, self.unpacks = 1, 0

    def __del__(self):
        self.store._dead.append((self.seq, self.ids))  # atomic: _reap()


def _as_lies(t):
    """(a 1-D view of what t's elements cover in its storage, its strides)
    when that span is at most twice t's elements (dense in any order,
    padded, or broadcast: a transpose, an expanded mask, a padded
    attention bias come back with their strides, zero strides too);
    else (t made contiguous, flattened; None): a few columns of a larger
    matrix come back contiguous."""
    if t.is_contiguous() or t.numel() == 0:
        return t.reshape(-1), None
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    if span > 2 * t.numel():
        return t.contiguous().reshape(-1), None
    return t.as_strided((span,), (1,), t.storage_offset()), t.stride()


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
        # pieces the newest saves keep in the pool unwritten: the first
        # the backward reads back, and maybe never written (_held)
        self.hold = (count - 1) // 2
        # keep_blocks: the space each step frees is the next one's, its
        # blocks overwritten in place (no hole punched, none allocated)
        self.swapper = nvswap.Swapper(
            nvme_path=nvme_path, name="activations", rank=rank,
            buffer_size=self.buffer_size, buffer_count=count,
            auto_evict=True, backend=backend, keep_blocks=True)
        self.path = self.swapper.dirs[0]
        _OPEN.add(self)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._seqs = itertools.count()
        # each tensor on NVMe, by its place in the save order: its ids
        self._groups = {}
        # the first seq saved since the store last held nothing: the
        # read-ahead looks no lower
        self._low = 0
        # a tensor saved, by what it views: (its base, weakly; the base's
        # version and data pointer; its _Packed, weakly): _again
        self._recent = {}
        self._prune = 256  # entries at which _recent is pruned
        self._span = None  # [the layer saving now: describe(), bytes]
        self._dead = []  # (seq, ids) autograd dropped, to free (_reap)
        self._writing = collections.deque()  # ids evicted, write not seen
        self._held = {}  # ids released dirty, not evicted: oldest first
        self._ctx = []
        self._failed = None  # the error a pack raised in this with
        self.st = {"saved": 0, "saved_bytes": 0, "shared": 0,
                   "shared_bytes": 0, "kept": 0, "kept_bytes": 0,
                   "restored": 0, "restored_bytes": 0,
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
            # for __exit__ or the offloaded forward: torch < 2 wraps it
            # (let go by them, or by the forward's end: it holds frames)
            self._failed = e
            raise

    def _save(self, t):
        self._open("saving a tensor")
        self._reap()
        key, packed = self._again(t)
        if packed is not None:
            return packed
        src = t.detach()
        if src.is_conj() or src.is_neg():  # lazy bits: the values
            src = src.resolve_conj().resolve_neg()
        elems, strides = _as_lies(src)
        flat = elems.view(torch.uint8)
        nbytes = flat.numel()
        self._fits(nbytes)
        ids = []
        seq = next(self._seqs)
        try:
            for at in range(0, nbytes, self.buffer_size):
                n = min(self.buffer_size, nbytes - at)
                i = next(self._ids)
                ids.append(i)
                self.swapper.register(i, n)
                buf = self.swapper.acquire(i, torch.uint8, (n,),
                                           blank=True)
                filled = False
                try:
                    buf.copy_(flat[at:at + n])
                    filled = True
                finally:  # not filled: the buffer goes back unwritten
                    self.swapper.release(i, filled)
                self._behind(i, seq)
        except BaseException:
            self._free(ids)  # what this tensor registered, quietly
            raise
        with self._lock:
            if not self._groups:
                self._low = seq
            self._groups[seq] = ids
            self.st["saved"] += 1
            self.st["saved_bytes"] += nbytes
        packed = _Packed(self, ids, seq, t, strides, nbytes)
        if key is not None:
            base = t._base if t._base is not None else t
            with self._lock:
                if len(self._recent) >= self._prune:  # the dead ones
                    self._recent = {k: e for k, e in self._recent.items()
                                    if e[0]() is not None and
                                    e[3]() is not None}
                    self._prune = max(256, 2 * len(self._recent))
                self._recent[key] = (weakref.ref(base), base._version,
                                     base.data_ptr(), weakref.ref(packed))
        return packed

    def _again(self, t):
        """(t's key, the _Packed of t when t was saved before, counted as
        shared, else None): the same view (data pointer, shape, strides,
        dtype, conj and neg bits) of the same base tensor (t itself when
        not a view), that base still alive, on the same memory (its data
        pointer) and unchanged (its version counter, which its views
        share). The input of q, k and v projections (or the view of it
        each matmul saves) is written once, read back for each. A change
        autograd does not count (through .data, or another tensor on the
        same memory) is not seen: as autograd's own saved tensors do not
        see it. Key None: a tensor without a data pointer (a subclass)."""
        try:
            key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()),
                   t.dtype, t.is_conj(), t.is_neg())
        except RuntimeError:
            return None, None
        base = t._base if t._base is not None else t
        with self._lock:
            e = self._recent.get(key)
            if e is None:
                return key, None
            packed = e[3]()
            if packed is None or e[0]() is not base or \
                    base._version != e[1] or base.data_ptr() != e[2]:
                self._recent.pop(key, None)
                return key, None
            packed.uses += 1
            self.st["shared"] += 1
            self.st["shared_bytes"] += packed.nbytes
        return key, packed

    def _mark(self, describe):
        """The engine's walk entering a layer (offload(activations=)), or
        leaving its forward (None): the bytes saved until the next mark
        are that layer's (_fits)."""
        self._span = None if describe is None else [describe, 0]
        if describe is None:
            self._failed = None

    def _fits(self, nbytes):
        """Refuse (ENOBUFS, naming both sizes) the layer whose saved
        tensors outgrow the pool: the backward's read-ahead holds one
        layer's at least, as the parameter pool holds one layer."""
        span = self._span
        if span is None:
            return
        span[1] += nbytes
        pool = self.count * self.buffer_size
        if span[1] > pool:
            self._span = None
            raise nvswap.Error(
                errno.ENOBUFS,
                f"nvswap.torch: {span[0]()}, with what runs after it "
                f"until the next layer, saves {span[1]} bytes for "
                f"backward, more than the activation pool holds ({pool} "
                f"bytes: memory={self.memory}, {self.count} buffers of "
                f"{self.buffer_size}); one layer's saved tensors must fit "
                "it: a larger memory= (nvswap.torch.save_on_nvme), or "
                "activation checkpointing")

    def unpack(self, packed):
        if not isinstance(packed, _Packed):
            return packed
        self._open("reading a saved tensor back")
        self._reap()
        if packed.strides is None:
            out = torch.empty(packed.shape, dtype=packed.dtype,
                              device=packed.device)
            flat = out.reshape(-1).view(torch.uint8)
        else:  # the span saved, the view rebuilt on it
            span = torch.empty(packed.nbytes, dtype=torch.uint8,
                               device=packed.device).view(packed.dtype)
            out = span.as_strided(packed.shape, packed.strides)
            flat = span.view(torch.uint8)
        cuda = out.device.type == "cuda"
        with self._lock:
            packed.unpacks += 1
            # read again soon (a tensor saved by several) or not before
            # the graph goes: its buffers to the read-ahead
            done = packed.unpacks % packed.uses == 0
        self._read_ahead(packed.seq, packed.ids)
        t0 = time.perf_counter_ns()
        at, starved = 0, False
        for i in packed.ids:
            n = min(self.buffer_size, packed.nbytes - at)
            # from its buffer (read ahead, held): torch's copy_, on the
            # device one DMA, on the CPU on all of torch's threads; not
            # there: read() straight into the tensor, no buffer taken
            if cuda or self.swapper.info(i)["state"] != "on_nvme":
                try:
                    buf = self.swapper.acquire(i, torch.uint8, (n,))
                except nvswap.Error:  # a read ahead failed: again
                    buf = self.swapper.acquire(i, torch.uint8, (n,))
                try:
                    flat[at:at + n].copy_(buf)
                finally:
                    self.swapper.release(i, False)
            else:
                self.swapper.read(i, flat[at:at + n])
                starved = True
            if done and i not in self._held:  # (held: freed unwritten)
                try:
                    self.swapper.evict(i)
                except nvswap.Error:
                    pass  # only a hint: a failure here loses nothing
            at += n
        self._count(read_wait_s=(time.perf_counter_ns() - t0) / 1e9,
                    restored=1, restored_bytes=packed.nbytes)
        if starved and self._held:
            self._starved(packed.seq)
        return out

    # ------------------------------------------------------- the store
    def _behind(self, i, seq):
        """Piece i of the tensor saved at seq was filled: hold it
        unwritten, and start the write of the oldest held beyond
        self.hold (behind the forward, the pool's rest in flight at
        most). The newest pieces stay in the pool: the backward reads
        them first, from memory, and when it frees them they were never
        written."""
        with self._lock:
            self._held[i] = seq
            out = []
            while len(self._held) > self.hold:
                j = next(iter(self._held))
                del self._held[j]
                out.append(j)
        self._write(out, quiet=False)
        self._written(self.count - 1 - self.hold)

    def _write(self, ids, quiet):
        """Start the writes of held pieces (taken out of _held). A piece
        freed meanwhile (ENOENT) or being read back on another thread
        (EBUSY: that unpack evicts it) is passed over; another error
        raises unless quiet (the piece stays in its buffer, dirty: a
        later eviction writes it)."""
        for j in ids:
            with self._lock:
                self._writing.append(j)
            try:
                self.swapper.evict(j)
            except nvswap.Error as e:
                if not quiet and e.errno not in (errno.ENOENT, errno.EBUSY):
                    raise

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

    def _read_ahead(self, seq, own):
        """Start reading the pieces own (of the tensor being unpacked,
        read one after another next) and those of the tensors saved
        before seq (the next ones the backward unpacks: the nearest
        first, each one's pieces in order), up to lookahead pieces, into
        free buffers; stops at the first that finds none. Looks at no
        more than SCAN places below seq."""
        if not self.lookahead:
            return
        todo = list(own)
        with self._lock:
            for s in range(seq - 1, max(self._low, seq - SCAN) - 1, -1):
                ids = self._groups.get(s)
                if ids is not None:
                    todo += ids
                    if len(todo) >= self.lookahead:
                        break
        for i in todo[:self.lookahead]:
            try:
                if not self.swapper.try_prefetch(i):
                    return
            except nvswap.Error:
                return  # freed meanwhile: the next unpack looks again

    def _starved(self, seq):
        """An unpack of the tensor saved at seq read a piece the
        read-ahead had no buffer for: pieces held unwritten that the
        backward has passed (saved after seq and not freed: a later
        forward's whose backward comes after, or kept for a second
        backward by retain_graph) go to the disk, and their buffers to
        the read-ahead."""
        with self._lock:
            late = [j for j, s in self._held.items() if s > seq]
            for j in late:
                del self._held[j]
        self._write(late, quiet=True)

    def _reap(self):
        """Free the pieces of the tensors autograd dropped."""
        while self._dead:
            try:
                seq, ids = self._dead.pop()
            except IndexError:  # another thread took the last
                return
            with self._lock:
                self._groups.pop(seq, None)
            self._free(ids)

    def _free(self, ids):
        with self._lock:
            for i in ids:
                self._held.pop(i, None)
        for i in ids:
            try:
                self.swapper.unregister(i)
            except (nvswap.Error, ValueError):
                pass  # never registered (a failed pack), or closed

    def stats(self):
        """Counts of this store: tensors and bytes saved to NVMe
        (saved, saved_bytes), saves of a tensor already there, alive and
        unchanged (shared, shared_bytes: not written again), kept in
        memory (kept, kept_bytes), read back (restored, restored_bytes:
        once per unpack, a shared tensor's too); the exposed waits:
        write_wait_s (the forward waiting for writes, the pool full of
        them), read_wait_s (the backward waiting in unpack for reads and
        copies); live (the tensors on NVMe now); the Swapper's
        bytes_written and bytes_read, and pool_wait_s (its acquires
        waiting for a buffer or a read: the forward waiting for a buffer
        a write still holds, the read in unpack of a piece not read
        ahead); closed. Totals since the store was made."""
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
            self._held.clear()
        self._dead.clear()
        self._recent.clear()
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
        failed = self._unwrapped(exc)
        if failed is not None:
            raise failed from exc
        return False

    def _unwrapped(self, exc):
        """The nvswap.Error a pack raised, where exc is torch < 2's
        RuntimeError carrying its text (torch before 2.0 turns an
        exception in a pack hook into one); else None. Forgets it."""
        failed, self._failed = self._failed, None
        if failed is not None and isinstance(exc, RuntimeError) and \
                str(failed) in str(exc):
            return failed
        return None


def save_on_nvme(nvme_path, memory="256M", buffer_size="32M",
                 threshold=THRESHOLD, lookahead=None, backend=None,
                 rank=None):
    """An ActivationStore: `with` it around forwards, and the tensors
    autograd saves for backward (on the CPU or a CUDA device, threshold
    bytes and up)
    go to a swap file in nvme_path, written behind the forward and read
    back ahead of the backward, through memory bytes of pinned buffers
    of buffer_size each (see nvswap/torch/_activations.py); the swap
    directory is <nvme_path>/nvswap/activations/rank<rank> (rank: the
    launcher's by default, as nvswap.Swapper's). lookahead: the pieces
    an unpack asks to be read ahead, its tensor's own first, then those
    of the tensors saved before it (default: the buffers less one; 0:
    none, every piece not in the pool read when its unpack comes)."""
    return ActivationStore(nvme_path, memory=memory, buffer_size=buffer_size,
                           threshold=threshold, lookahead=lookahead,
                           backend=backend, rank=rank)
