# SPDX-License-Identifier: MIT
"""Pretrained weights read by state_dict key: a safetensors file, a
directory of shards with model.safetensors.index.json (what Hugging
Face's save_pretrained writes), or a torch.save'd state dict.

open_weights(path) checks every header (and the index) before anything
is read; read_into(key, dest) reads a tensor into memory it is given (an
O_DIRECT read straight into it when the dtypes agree, else staged through
pinned memory and cast), tensor(key) into a new CPU tensor. _load.py
binds the keys to a model and loads it layer by layer.
"""
import errno
import inspect
import json
import os

import torch

import nvswap

from . import _stformat
from ._stformat import bad

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TORCH_SINGLE = "pytorch_model.bin"
STAGE = 16 << 20  # bytes per staging buffer of a cast or compare
MIB = 1 << 20

_MMAP = "mmap" in inspect.signature(torch.load).parameters  # torch >= 2.1


def open_weights(path):
    """The weights at path, headers checked, nothing read yet: a
    .safetensors file, a directory holding model.safetensors.index.json
    and its shards, model.safetensors or pytorch_model.bin, or a
    torch.save'd state dict (.bin, .pt, .pth; torch.load(mmap=True,
    weights_only=True) where torch >= 2.1 has mmap, else the whole file
    is loaded into memory). Raises nvswap.Error: ENOENT for a path, or a
    shard the index names, that does not exist; EBADMSG naming the file
    (and the tensor) for a truncated or malformed one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for name, kind in ((INDEX, "index"), (SINGLE, "safetensors"),
                           (TORCH_SINGLE, "torch")):
            p = os.path.join(path, name)
            if os.path.exists(p):
                return _KINDS[kind](p)
        raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {path}: no {INDEX}"
                           f", {SINGLE} or {TORCH_SINGLE} in this directory")
    if not os.path.exists(path):
        raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {path}: no such "
                           "file or directory")
    if path.endswith(".index.json"):
        return Safetensors(path, index=True)
    if path.endswith(".safetensors"):
        return Safetensors(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if path.endswith((".bin", ".pt", ".pth", ".ckpt")) or head == b"PK\3\4":
        return TorchFile(path)
    return Safetensors(path)


class Weights:
    """Tensors by state_dict key. keys(), `key in w`, len(w); dtype(key)
    (a torch dtype, None where this torch has none for the file's),
    dtype_name(key), shape(key), file(key); read_into(key, dest),
    tensor(key), equal(a, b); close(). A context manager."""

    path = None

    def keys(self):
        return self._entries.keys()

    def __contains__(self, key):
        return key in self._entries

    def __len__(self):
        return len(self._entries)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _check_dest(self, key, dest):
        self._check_key(key)
        shape = self.shape(key)
        if tuple(dest.shape) != shape:
            raise ValueError(f"nvswap.torch: '{key}' is {list(shape)} in "
                             f"{self.file(key)}, the destination "
                             f"{list(dest.shape)}")
        self._check_dtype(key)

    def _check_key(self, key):
        if key not in self._entries:
            raise KeyError(f"nvswap.torch: {self.path} holds no tensor "
                           f"'{key}'")

    def _check_dtype(self, key):
        if self.dtype(key) is None:
            raise ValueError(f"nvswap.torch: '{key}' is "
                             f"{self.dtype_name(key)} in {self.file(key)}, "
                             f"which torch {torch.__version__} has no dtype "
                             "for")

    def tensor(self, key):
        """A new CPU tensor holding key."""
        self._check_key(key)
        t = torch.empty(self.shape(key), dtype=self.dtype(key) or
                        torch.uint8)
        self.read_into(key, t)
        return t

    def read_into(self, key, dest):
        """Read key into dest (same shape; any dtype, cast as copy_ does;
        any device). Blocks until done."""
        for op in self.submit_into(key, dest):
            op.wait()

    def read_rows(self, key, start, dest):
        """Rows start .. start + len(dest) of key (along its first
        dimension) into dest, a contiguous CPU tensor of those rows' shape
        (any dtype, cast as copy_ does). Blocks until done: a table is
        loaded a piece at a time this way, never whole."""
        self._check_rows(key, start, dest)
        dest.copy_(self._entries[key][start:start + dest.shape[0]])

    def _check_rows(self, key, start, dest):
        self._check_key(key)
        shape = self.shape(key)
        if not shape or tuple(dest.shape[1:]) != tuple(shape[1:]) or \
                start < 0 or start + dest.shape[0] > shape[0]:
            raise ValueError(f"nvswap.torch: rows {start}.."
                             f"{start + (dest.shape[0] if dest.dim() else 0)}"
                             f" of '{key}', {list(shape)} in "
                             f"{self.file(key)}, into {list(dest.shape)}")
        self._check_dtype(key)

    def close(self):
        pass


class TorchFile(Weights):
    """A torch.save'd state dict, loaded with mmap where torch can."""

    def __init__(self, path):
        self.path = path
        self.files = [path]
        kw = {"map_location": "cpu"}
        if "weights_only" in inspect.signature(torch.load).parameters:
            kw["weights_only"] = True
        self.mmap = False
        try:
            if _MMAP:
                try:
                    sd = torch.load(path, mmap=True, **kw)
                    self.mmap = True
                except RuntimeError as e:
                    if "mmap" not in str(e):
                        raise  # the old (not zip) format cannot be mapped
                    sd = torch.load(path, **kw)
            else:
                sd = torch.load(path, **kw)
        except FileNotFoundError as e:
            raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {path}: "
                               f"{e.strerror}") from None
        except Exception as e:  # torch raises many kinds for a bad file
            raise bad(path, "torch.load cannot read it "
                      f"({type(e).__name__}: {e})") from None
        if not isinstance(sd, dict):
            raise bad(path, f"holds a {type(sd).__name__}, not a state dict"
                      " (a dict of name -> tensor)")
        for k, v in sd.items():
            if not isinstance(k, str) or not torch.is_tensor(v):
                raise bad(path, f"a {type(v).__name__} under {k!r}, not a "
                          "tensor: not a state dict", str(k))
            if v.layout != torch.strided or v.is_quantized:
                raise bad(path, f"a {v.layout} tensor, which cannot be "
                          "loaded into a parameter", k)
        self._entries = sd

    def dtype(self, key):
        return self._entries[key].dtype

    def dtype_name(self, key):
        return str(self._entries[key].dtype)

    def shape(self, key):
        return tuple(self._entries[key].shape)

    def file(self, key):
        return self.path

    def submit_into(self, key, dest):
        self._check_dest(key, dest)
        dest.copy_(self._entries[key])
        return []

    def equal(self, a, b):
        """key a and key b hold the same bytes."""
        return _same_bytes(self._entries[a], self._entries[b])

    def close(self):
        self._entries = {}


def _same_bytes(x, y):
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if (x.data_ptr() == y.data_ptr() and x.stride() == y.stride()):
        return True
    bx = x.contiguous().reshape(-1).view(torch.uint8)
    by = y.contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(bx, by)


class Safetensors(Weights):
    """One safetensors file, or the shards an index names."""

    def __init__(self, path, index=False):
        self.path = path
        self._handle = None
        self._bufs = None  # two pinned staging buffers, made on first use
        if not index:
            h = _stformat.read_header(path)
            self.files = [path]
            self.metadata = h.metadata
            self._entries = h.tensors
            return
        shards = _read_index(path)
        self.files, self.metadata, self._entries = [], None, {}
        where = {}
        for name, first_key in shards.items():
            shard = os.path.join(os.path.dirname(path), name)
            if not os.path.exists(shard):
                raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {shard}: "
                                   f"missing: {path} names it for tensor "
                                   f"'{first_key}'")
            h = _stformat.read_header(shard)
            self.files.append(shard)
            for k, e in h.tensors.items():
                if k in self._entries:
                    raise bad(shard, f"also in {where[k]}: a tensor may be "
                              "in one shard only", k)
                self._entries[k] = e
                where[k] = shard
        for k, name in _read_index(path, keys=True).items():
            shard = os.path.join(os.path.dirname(path), name)
            if where.get(k) != shard:
                raise bad(path, f"the index puts it in {name}, which does "
                          "not hold it" + (f" (it is in {where[k]})"
                                           if k in where else ""), k)

    def dtype(self, key):
        return _stformat.torch_dtype(self._entries[key].dtype)

    def dtype_name(self, key):
        return self._entries[key].dtype

    def shape(self, key):
        return self._entries[key].shape

    def file(self, key):
        return self._entries[key].path

    def nbytes(self, key):
        return self._entries[key].nbytes

    def handle(self):
        """The aio handle reads go through (made on first use)."""
        if self._handle is None:
            self._handle = nvswap.aio_handle(MIB, 32, False, True, 1)
        return self._handle

    def submit_into(self, key, dest):
        """Start reading key into dest and return the ops to wait for
        (nvswap.Op). A contiguous CPU dest of the file's dtype is read
        into directly (O_DIRECT; the handle takes care of unaligned
        offsets and buffers); any other is filled through pinned staging
        buffers, cast by copy_, before this returns (no op left)."""
        self._check_dest(key, dest)
        e = self._entries[key]
        if e.nbytes == 0:
            return []
        if (dest.device.type == "cpu" and dest.is_contiguous() and
                dest.dtype == self.dtype(key)):
            return [self.handle().submit_read(dest, e.path, e.offset)]
        self._staged(e, dest)
        return []

    def read_rows(self, key, start, dest):
        self._check_rows(key, start, dest)
        e = self._entries[key]
        n = dest.shape[0]
        row = e.nbytes // max(1, e.shape[0])
        part = _stformat.Entry(e.path, e.dtype, (n,) + tuple(e.shape[1:]),
                               e.offset + start * row, n * row)
        if part.nbytes == 0:
            return
        if dest.is_contiguous() and dest.dtype == self.dtype(key):
            self._read_whole(part, dest)
        else:
            self._staged(part, dest)

    def _chunks(self, e, step):
        """(file offset, nbytes, element offset) of e in pieces of at most
        step bytes, cut at whole elements."""
        item = max(1, e.nbytes // max(1, e.numel()))
        step = max(item, step // item * item)
        for off in range(0, e.nbytes, step):
            n = min(step, e.nbytes - off)
            yield e.offset + off, n, off // item

    def _staged(self, e, dest):
        """Read e through two pinned staging buffers (the read of the next
        piece runs while this one is cast into dest)."""
        h = self.handle()
        ft = _stformat.torch_dtype(e.dtype)
        flat = dest.view(-1) if dest.is_contiguous() else None
        if flat is None:  # a strided destination: whole, then copied
            tmp = torch.empty(e.shape, dtype=ft)
            self._read_whole(e, tmp)
            dest.copy_(tmp)
            return
        bufs = self._staging()
        pieces = list(self._chunks(e, bufs[0].numel()))
        ops = [h.submit_read(bufs[0][:pieces[0][1]], e.path, pieces[0][0])]
        try:
            for i, (off, n, first) in enumerate(pieces):
                ops[i].wait()
                if i + 1 < len(pieces):
                    o2, n2, _ = pieces[i + 1]
                    ops.append(h.submit_read(bufs[(i + 1) % 2][:n2], e.path,
                                             o2))
                src = bufs[i % 2][:n].view(ft)
                flat[first:first + src.numel()].copy_(src)
        finally:
            for op in ops:
                try:
                    op.wait()
                except nvswap.Error:
                    pass

    def _read_whole(self, e, dest):
        self.handle().submit_read(dest, e.path, e.offset).wait()

    def equal(self, a, b):
        """key a and key b hold the same bytes (read and compared in
        pieces, in bounded memory)."""
        ea, eb = self._entries[a], self._entries[b]
        if ea.dtype != eb.dtype or ea.shape != eb.shape:
            return False
        if ea.path == eb.path and ea.offset == eb.offset:
            return True
        h = self.handle()
        bufs = self._staging()
        step = bufs[0].numel()
        for off in range(0, ea.nbytes, step):
            n = min(step, ea.nbytes - off)
            x = h.submit_read(bufs[0][:n], ea.path, ea.offset + off)
            y = h.submit_read(bufs[1][:n], eb.path, eb.offset + off)
            x.wait()
            y.wait()
            if not torch.equal(bufs[0][:n], bufs[1][:n]):
                return False
        return True

    def _staging(self):
        if self._bufs is None:
            self._bufs = [nvswap.pinned_empty(STAGE, torch.uint8)
                          for _ in range(2)]
        return self._bufs

    def close(self):
        self._bufs = None
        h, self._handle = self._handle, None
        if h is not None:
            h.close()


def _read_index(path, keys=False):
    """The shards an index names ({file name: the first key it is named
    for}), or with keys=True its weight_map. EBADMSG naming the index for
    one that is not JSON with a weight_map of name -> file name."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        raise nvswap.Error(e.errno, f"nvswap.torch: cannot read {path}: "
                           f"{e.strerror}") from None
    except ValueError as e:
        raise bad(path, f"the index is not valid JSON ({e})") from None
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(v, str)
                                           for v in wm.values()):
        raise bad(path, "the index has no weight_map object of tensor name "
                  "-> shard file name")
    for k, v in wm.items():
        if not v or os.path.isabs(v) or ".." in v.replace("\\", "/").split(
                "/"):
            raise bad(path, f"shard name {v!r} is not a file name inside "
                      "the index's directory", k)
    if keys:
        return wm
    out = {}
    for k, v in wm.items():
        out.setdefault(v, k)
    return out


_KINDS = {"index": lambda p: Safetensors(p, index=True),
          "safetensors": Safetensors, "torch": TorchFile}
