# SPDX-License-Identifier: MIT
"""Pretrained weights read by state_dict key: a safetensors file, a
directory of shards with model.safetensors.index.json (what Hugging
Face's save_pretrained writes), or a torch.save'd state dict.

open_weights(path) opens every file it will read (_wfile: never blocking
on a FIFO, refusing what is not a regular file) and checks every header
(and the index) before anything is read; the files stay open until
close(), and every tensor is read from the file that was checked
(_wread: read_into(key, dest) into memory it is given, tensor(key) into a
new CPU tensor), a file changed since refused. _load.py binds the keys
to a model and loads it layer by layer.
"""
import errno
import inspect
import os

import torch

import nvswap

from . import _ptformat, _stformat
from ._stformat import bad
from ._wfile import WFile, shared_dir
from ._wread import FileWeights, Weights, same_bytes

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TORCH_SINGLE = "pytorch_model.bin"
ZIP = b"PK\3\4"  # a torch.save file of torch >= 1.6 is a zip

# In a directory, the first of these that exists is read: transformers'
# order (modeling_utils: model.safetensors, else the index, else
# pytorch_model.bin), so that both load the same file.
ORDER = ((SINGLE, "safetensors"), (INDEX, "index"), (TORCH_SINGLE, "torch"))


def open_weights(path):
    """The weights at path, headers checked, nothing read yet: a
    .safetensors file, a directory holding model.safetensors, else
    model.safetensors.index.json and its shards, else pytorch_model.bin
    (transformers' order), or a torch.save'd state dict (.bin, .pt, .pth;
    its zip read in place, tensor by tensor; the format before torch 1.6
    is loaded whole into memory). Raises nvswap.Error: ENOENT for a path,
    or a shard the index names, that does not exist; EISDIR / EINVAL
    naming a weights file that is a directory / a FIFO, device or socket;
    EBADMSG naming the file (and the tensor) for a truncated or malformed
    one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        with shared_dir(path):  # not while a save_pretrained switches
            for name, kind in ORDER:
                p = os.path.join(path, name)
                if os.path.exists(p):  # a FIFO is refused, not skipped
                    return _KINDS[kind](p)
        raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {path}: no {INDEX}"
                           f", {SINGLE} or {TORCH_SINGLE} in this directory")
    if not os.path.exists(path):
        raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {path}: no such "
                           "file or directory")
    if path.endswith(".index.json"):
        with shared_dir(os.path.dirname(path) or "."):
            return Safetensors(path, index=True)
    if path.endswith(".safetensors"):
        return Safetensors(path)
    wf = WFile(path, "weights file")
    try:
        head = os.pread(wf.fd, 4, 0)
    except BaseException:
        wf.close()
        raise
    if path.endswith((".bin", ".pt", ".pth", ".ckpt")) or head == ZIP:
        return torch_file(path, wf, head)
    return Safetensors(path, wf=wf)


def torch_file(path, wf=None, head=None):
    """A torch.save'd state dict at path (open as wf): a TorchFile for the
    zip format, else the older one loaded whole (Loaded)."""
    if wf is None:
        wf = WFile(path, "torch.save file")
    try:
        if head is None:
            head = os.pread(wf.fd, 4, 0)
        if head == ZIP:
            return TorchFile(path, wf)
        return Loaded(path, wf)
    except BaseException:
        wf.close()
        raise


class TorchFile(FileWeights):
    """A torch.save'd state dict in the zip format: its tensors read from
    the file in place, as a safetensors file's are (_ptformat)."""

    lazy = True  # read from the file, tensor by tensor

    def __init__(self, path, wf):
        super().__init__(path)
        self.files = [path]
        self._files[path] = wf
        try:
            self._entries = _ptformat.read_state_dict(wf)
            wf.check()  # not changed while it was parsed
        except BaseException:
            self.close()
            raise

    def dtype(self, key):
        return self._entries[key].dtype

    def dtype_name(self, key):
        return str(self._entries[key].dtype)

    def _ft(self, e):
        return e.dtype


class Loaded(Weights):
    """A torch.save'd state dict of the format before torch 1.6, which
    cannot be read in place: loaded whole into memory by torch.load
    (weights_only where this torch has it) from the open file."""

    lazy = False

    def __init__(self, path, wf):
        self.path = path
        self.files = [path]
        kw = {"map_location": "cpu"}
        if "weights_only" in inspect.signature(torch.load).parameters:
            kw["weights_only"] = True
        try:
            with os.fdopen(os.dup(wf.fd), "rb") as f:
                sd = torch.load(f, **kw)
        except Exception as e:  # torch raises many kinds for a bad file
            raise bad(path, "torch.load cannot read it "
                      f"({type(e).__name__}: {e})") from None
        finally:
            wf.close()
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
        return same_bytes(self._entries[a], self._entries[b])

    def close(self):
        self._entries = {}


class Safetensors(FileWeights):
    """One safetensors file, or the shards an index names."""

    def __init__(self, path, index=False, wf=None):
        super().__init__(path)
        self.metadata = None
        self.heads = {}  # path -> the bytes before its data (8 + header)
        try:
            if index:
                self._shards(path)
            else:
                wf = wf or WFile(path, "safetensors file")
                self._files[path] = wf
                h = _stformat.read_header(wf)
                self.files = [path]
                self.metadata = h.metadata
                self._entries = h.tensors
                self.heads[path] = h.data_start
            for f in self._files.values():
                f.check()  # not changed while its header was read
        except BaseException:
            if wf is not None:
                wf.close()
            self.close()
            raise

    def _shards(self, path):
        wm = _read_index(path)
        self.files, where = [], {}
        for k, name in wm.items():
            shard = os.path.join(os.path.dirname(path), name)
            if shard in self._files:
                continue
            try:
                self._files[shard] = wf = WFile(shard, "shard")
            except nvswap.Error as e:
                if e.errno != errno.ENOENT:
                    raise
                raise nvswap.Error(errno.ENOENT, f"nvswap.torch: {shard}: "
                                   f"missing: {path} names it for tensor "
                                   f"'{k}'") from None
            h = _stformat.read_header(wf)
            self.heads[shard] = h.data_start
            self.files.append(shard)
            for t, e in h.tensors.items():
                if t in self._entries:
                    raise bad(shard, f"also in {where[t]}: a tensor may be "
                              "in one shard only", t)
                self._entries[t] = e
                where[t] = shard
        for k, name in wm.items():
            shard = os.path.join(os.path.dirname(path), name)
            if where.get(k) != shard:
                raise bad(path, f"the index puts it in {name}, which does "
                          "not hold it" + (f" (it is in {where[k]})"
                                           if k in where else ""), k)

    def dtype(self, key):
        return _stformat.torch_dtype(self._entries[key].dtype)

    def dtype_name(self, key):
        return self._entries[key].dtype

    def _ft(self, e):
        return _stformat.torch_dtype(e.dtype)


def _read_index(path):
    """The weight_map of an index (tensor name -> shard file name).
    EBADMSG naming the index for one that is not JSON with a weight_map
    of name -> file name inside its directory (or is larger than
    _stformat.MAX_HEADER); the open's errors as open_weights'."""
    wf = WFile(path, "index")
    try:
        if wf.size > _stformat.MAX_HEADER:
            raise bad(path, f"the index is {wf.size} bytes, above the "
                      f"limit of {_stformat.MAX_HEADER}: not an index")
        raw = wf.pread(wf.size, 0, "the index")
    finally:
        wf.close()
    doc = _stformat.load_json(path, raw, "the index")
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
    return wm


_KINDS = {"index": lambda p: Safetensors(p, index=True),
          "safetensors": Safetensors, "torch": torch_file}
