# SPDX-License-Identifier: MIT
"""The torch.save zip format (torch >= 1.6) read without torch.load: the
file's state dict as {key: Entry}, each tensor where its bytes lie in the
file, nothing read but the zip's directory and its pickle.

Why not torch.load(mmap=True): its tensors are pages of a shared mapping
of the file, and a page of a file truncated or rewritten after the map is
a SIGBUS, which kills the process before any Python code can turn it into
an error; a private copy of each mapping would cost the file's size in
memory, which is what a load one layer at a time exists to avoid. Read
this way, a .bin is loaded as a safetensors file is: each tensor read by
offset, through the aio handle, from the descriptor _wfile.WFile holds
open and checks for changes, a short read an error naming the file and
the tensor. It works the same on every torch (1.13 had no mmap and loaded
the whole file into memory).

The pickle runs nothing from the file. find_class hands out only inert
record builders (a storage type, a tensor as its storage, offset, shape
and stride, OrderedDict), not torch's functions, and refuses every other
global, naming it; persistent_load records a storage's key, dtype and
size and reads nothing. What it accepts is what torch's weights_only
unpickler accepts for a state dict of dense tensors (_rebuild_tensor_v2,
_rebuild_tensor_v3 with an untyped storage and a dtype, parameters, a
plain tensor with attributes). torch's own unpickler is not used because
it builds real tensors on real storages, and the storage a tensor came
from is then known only through version-dependent internals.
"""
import collections
import io
import os
import pickle
import struct
import zipfile

import torch

from ._stformat import Entry, bad

# torch's legacy storage types: name -> dtype name
STORAGES = {
    "DoubleStorage": "float64", "FloatStorage": "float32",
    "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
}
QUANTIZED = {"QUInt8Storage", "QInt8Storage", "QInt32Storage",
             "QUInt4x2Storage", "QUInt2x4Storage"}
UNTYPED = "UntypedStorage"

# Records the pickle builds (tuples: a BUILD on one fails).
StorageType = collections.namedtuple("StorageType", "name")
Storage = collections.namedtuple("Storage", "key type numel")
Tensor = collections.namedtuple("Tensor", "storage offset size stride dtype")
Other = collections.namedtuple("Other", "what")  # a kind no parameter takes
Marker = collections.namedtuple("Marker", "name")  # torch.Tensor, Parameter


def _v2(storage, offset, size, stride, *rest):
    return Tensor(storage, offset, size, stride, None)


def _v3(storage, offset, size, stride, requires_grad, hooks, dtype, *rest):
    return Tensor(storage, offset, size, stride, dtype)


def _data(data, *rest):  # _rebuild_parameter(_with_state)
    return data


def _from_type(func, new_type, args, state):
    if not (isinstance(new_type, Marker) and callable(func) and
            isinstance(args, tuple)):
        raise pickle.UnpicklingError("_rebuild_from_type_v2 of "
                                     f"{type(new_type).__name__}")
    return func(*args)


def _other(what):
    return lambda *a: Other(what)


_UTILS = {
    "_rebuild_tensor_v2": _v2, "_rebuild_tensor_v3": _v3,
    "_rebuild_parameter": _data, "_rebuild_parameter_with_state": _data,
    "_rebuild_qtensor": _other("a quantized tensor"),
    "_rebuild_sparse_tensor": _other("a sparse tensor"),
    "_rebuild_sparse_csr_tensor": _other("a sparse tensor"),
    "_rebuild_nested_tensor": _other("a nested tensor"),
    "_rebuild_meta_tensor_no_storage": _other("a meta tensor (no data)"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch._utils" and name in _UTILS:
            return _UTILS[name]
        if (module, name) == ("torch._tensor", "_rebuild_from_type_v2"):
            return _from_type
        if (module, name) in (("torch", "Tensor"),
                              ("torch.nn.parameter", "Parameter")):
            return Marker(name)
        if (module, name) == ("torch.serialization", "_get_layout"):
            return _other("a tensor of another layout")
        if module in ("torch", "torch.storage") and (
                name in STORAGES or name in QUANTIZED or name == UNTYPED):
            return StorageType(name)
        if module == "torch":  # a dtype, layout...: never a lazy import
            v = vars(torch).get(name)
            if isinstance(v, (torch.dtype, torch.layout, torch.qscheme,
                              torch.memory_format)):
                return v
        raise pickle.UnpicklingError(
            f"the pickle names {module}.{name}, which a state dict of "
            "tensors does not hold (refused: nothing in the file is run)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and
                pid[0] == "storage" and isinstance(pid[1], StorageType) and
                isinstance(pid[2], str) and _count(pid[4])):
            raise pickle.UnpicklingError("a persistent id that is not a "
                                         "storage record")
        return Storage(pid[2], pid[1].name, pid[4])


def _count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


class _Bad(Exception):
    """The archive is not one torch.save writes (the reason)."""


def _zip(wf):
    """(records by name, the prefix of the archive's records, data.pkl's
    bytes, byteorder's bytes) of the zip open as wf."""
    with os.fdopen(os.dup(wf.fd), "rb") as f:
        z = zipfile.ZipFile(f)
        records = {i.filename: i for i in z.infolist()}
        tops = [n[:-len("data.pkl")] for n in records
                if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(tops) != 1:
            raise _Bad(f"{len(tops)} <name>/data.pkl records, not one")
        prefix = tops[0]
        for name in ("data.pkl", "byteorder"):
            i = records.get(prefix + name)
            if i is not None and i.compress_type != zipfile.ZIP_STORED:
                raise _Bad(f"its record {i.filename} is compressed; "
                           "torch.save stores each as it is")
        order = z.read(prefix + "byteorder") if prefix + "byteorder" in \
            records else b"little"
        return records, prefix, z.read(prefix + "data.pkl"), order


def read_state_dict(wf):
    """{key: Entry} of the state dict torch.save wrote to the file open
    as wf (a _wfile.WFile), nothing read but its zip directory and its
    pickle: each tensor checked to lie inside its storage record, and
    each record inside the file. nvswap.Error(EBADMSG) naming the file
    (and the tensor) for anything else: "torch.load cannot read it" for
    an archive torch.save does not write."""
    path = wf.path
    try:
        records, prefix, pkl, order = _zip(wf)
    except _Bad as e:
        raise bad(path, f"torch.load cannot read it ({e})") from None
    except Exception as e:  # zipfile raises many kinds for a bad archive
        raise bad(path, "torch.load cannot read it (not the zip archive "
                  f"torch.save writes: {type(e).__name__}: {e})") from None
    if order != b"little":
        raise bad(path, f"saved with byte order {order[:16]!r}: only "
                  "little-endian files are read")
    try:
        sd = _Unpickler(io.BytesIO(pkl), encoding="utf-8").load()
    except Exception as e:  # a hostile pickle raises many kinds
        raise bad(path, f"its pickle ({prefix}data.pkl) is not a state "
                  f"dict torch.save writes ({type(e).__name__}: {e})"
                  ) from None
    if not isinstance(sd, dict):
        raise bad(path, f"holds a {type(sd).__name__}, not a state dict"
                  " (a dict of name -> tensor)")
    starts, out = {}, {}
    for k, v in sd.items():
        if isinstance(v, Other):
            raise bad(path, f"{v.what}, which cannot be loaded into a "
                      "parameter", str(k))
        if not isinstance(k, str) or not isinstance(v, Tensor):
            raise bad(path, f"a {type(v).__name__} under {k!r}, not a "
                      "tensor: not a state dict", str(k))
        out[k] = _entry(wf, records, prefix, starts, k, v)
    return out


def _dtype(path, key, t):
    """The torch dtype of a Tensor record, and its storage's bytes."""
    s = t.storage
    if not isinstance(s, Storage):
        raise bad(path, "its storage is not a storage record", key)
    if s.type in QUANTIZED:
        raise bad(path, "a quantized tensor, which cannot be loaded into a "
                  "parameter", key)
    if s.type == UNTYPED:
        if not isinstance(t.dtype, torch.dtype):
            raise bad(path, "an untyped storage without a dtype", key)
        return t.dtype, s.numel
    dtype = getattr(torch, STORAGES[s.type])
    if t.dtype is not None and t.dtype != dtype:
        raise bad(path, f"a {t.dtype} tensor on a {s.type}", key)
    return dtype, s.numel * torch.empty((), dtype=dtype).element_size()


def _entry(wf, records, prefix, starts, key, t):
    path = wf.path
    dtype, have = _dtype(path, key, t)
    shape, stride, offset = t.size, t.stride, t.offset
    if not (isinstance(shape, tuple) and isinstance(stride, tuple) and
            len(shape) == len(stride) and all(map(_count, shape)) and
            all(map(_count, stride)) and _count(offset)):
        raise bad(path, f"shape {shape!r}, stride {stride!r} and storage "
                  f"offset {offset!r} are not those of a tensor", key)
    name = f"{prefix}data/{t.storage.key}"
    rec = records.get(name)
    if rec is None:
        raise bad(path, f"its storage record {name} is not in the file", key)
    if rec.compress_type != zipfile.ZIP_STORED or rec.file_size < have:
        raise bad(path, f"its storage record {name} is compressed or holds "
                  f"{rec.file_size} bytes, not {have}", key)
    if name not in starts:
        starts[name] = _data_start(wf, rec)
    item = torch.empty((), dtype=dtype).element_size()
    numel, last = 1, offset
    for n, st in zip(shape, stride):
        numel *= n
        last += (n - 1) * st
    if numel and (last + 1) * item > have:
        raise bad(path, f"its elements reach byte {(last + 1) * item} of "
                  f"its storage {name}, which holds {have}", key)
    begin = starts[name] + offset * item
    want, step = [], 1
    for n in reversed(shape):
        want.append(step)
        step *= n
    if not numel or all(n == 1 or st == w for n, st, w in
                        zip(shape, stride, reversed(want))):
        return Entry(path, dtype, shape, begin, numel * item)
    return Entry(path, dtype, shape, begin, (last - offset + 1) * item,
                 stride)


def _data_start(wf, rec):
    """Where a stored zip record's bytes begin in the file."""
    head = wf.pread(30, rec.header_offset, f"the zip header of "
                    f"{rec.filename}")
    if head[:4] != b"PK\3\4":
        raise bad(wf.path, f"no zip header where the directory puts "
                  f"{rec.filename} (offset {rec.header_offset})")
    n, m = struct.unpack("<HH", head[26:30])
    start = rec.header_offset + 30 + n + m
    if start + rec.file_size > wf.size:
        raise bad(wf.path, f"its record {rec.filename} [{start}, "
                  f"{start + rec.file_size}) runs past the end of the file "
                  f"({wf.size} bytes): truncated")
    return start
