# SPDX-License-Identifier: MIT
"""The safetensors format, in pure Python (json and struct only, so that
an interpreter without the safetensors package reads and writes it too):
a header parser that checks everything the format promises before a byte
of data is trusted (from a file _wfile.WFile holds open), and a header
writer.

A file is an 8-byte little-endian header length N, N bytes of JSON (an
object: name -> {"dtype", "shape", "data_offsets": [begin, end)}, plus an
optional "__metadata__" object of str -> str), then the data area, where
the tensors lie back to back: no gap, no overlap, nothing after the last.
"""
import errno
import json
import struct
import sys

import nvswap

# The largest header accepted, as the safetensors package's own limit.
MAX_HEADER = 100_000_000

# safetensors dtype -> (bits per element, torch dtype name). A dtype this
# torch lacks (float8 before 2.1, uint16 before 2.3) maps to None there.
DTYPES = {
    "BOOL": (8, "bool"), "U8": (8, "uint8"), "I8": (8, "int8"),
    "F8_E5M2": (8, "float8_e5m2"), "F8_E4M3": (8, "float8_e4m3fn"),
    "F8_E5M2FNUZ": (8, "float8_e5m2fnuz"),
    "F8_E4M3FNUZ": (8, "float8_e4m3fnuz"),
    "F8_E8M0": (8, "float8_e8m0fnu"),
    "I16": (16, "int16"), "U16": (16, "uint16"), "F16": (16, "float16"),
    "BF16": (16, "bfloat16"), "I32": (32, "int32"), "U32": (32, "uint32"),
    "F32": (32, "float32"), "F64": (64, "float64"), "I64": (64, "int64"),
    "U64": (64, "uint64"), "C64": (64, "complex64"),
    # sub-byte types (packed; torch's float4_e2m1fn_x2 has another shape)
    "F4": (4, None), "F6_E2M3": (6, None), "F6_E3M2": (6, None),
}


def torch_dtype(name):
    """The torch dtype of a safetensors dtype name, or None."""
    import torch

    tname = DTYPES[name][1]
    return getattr(torch, tname, None) if tname else None


def st_dtype(dtype):
    """The safetensors name of a torch dtype; ValueError for one the
    format does not define."""
    for name, (_, tname) in DTYPES.items():
        if tname is not None and tname == str(dtype).rpartition(".")[2]:
            return name
    raise ValueError(f"nvswap.torch: safetensors has no dtype for {dtype}")


def bad(path, text, key=None):
    """nvswap.Error(EBADMSG) naming the file (and the tensor)."""
    where = f"{path}: tensor '{key}': " if key is not None else f"{path}: "
    return nvswap.Error(errno.EBADMSG, f"nvswap.torch: {where}{text}")


class Entry:
    """One tensor of a file: its dtype (a safetensors name; a torch dtype
    in a torch.save'd file), shape, and the absolute file offset and
    length of its bytes; stride: None when they are the tensor in
    row-major order, else the element strides of a view whose first
    element is at offset (torch.save keeps views: nbytes then spans the
    elements it reaches)."""

    __slots__ = ("path", "dtype", "shape", "offset", "nbytes", "stride")

    def __init__(self, path, dtype, shape, offset, nbytes, stride=None):
        self.path, self.dtype, self.shape = path, dtype, shape
        self.offset, self.nbytes, self.stride = offset, nbytes, stride

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class Header:
    """A parsed header: tensors (name -> Entry, in the header's order),
    metadata (dict or None), the file's size and where its data begins."""

    def __init__(self, path, tensors, metadata, size, data_start):
        self.path, self.tensors, self.metadata = path, tensors, metadata
        self.size, self.data_start = size, data_start


def _no_duplicates(path, what):
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise bad(path, f"{what} names '{k}' twice")
            out[k] = v
        return out
    return hook


def _ints(v, n=None):
    return (isinstance(v, list) and (n is None or len(v) == n) and
            all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                for x in v))


def _entry(path, key, v, data_start):
    if not isinstance(v, dict):
        raise bad(path, f"its header entry is a {type(v).__name__}, not "
                  "an object", key)
    dt, shape, offs = v.get("dtype"), v.get("shape"), v.get("data_offsets")
    if not isinstance(dt, str):
        raise bad(path, "no dtype string in its header entry", key)
    if dt not in DTYPES:
        raise bad(path, f"dtype '{dt}' is not one safetensors defines", key)
    if not _ints(shape):
        raise bad(path, f"shape {shape!r} is not a list of non-negative "
                  "integers", key)
    if not _ints(offs, 2) or offs[0] > offs[1]:
        raise bad(path, f"data_offsets {offs!r} is not [begin, end) with "
                  "0 <= begin <= end", key)
    numel = 1
    for d in shape:
        numel *= d
    bits = numel * DTYPES[dt][0]
    if bits % 8:
        raise bad(path, f"{numel} elements of {dt} are not a whole number "
                  "of bytes", key)
    if offs[1] - offs[0] != bits // 8:
        raise bad(path, f"data_offsets [{offs[0]}, {offs[1]}) hold "
                  f"{offs[1] - offs[0]} bytes, but shape {shape} of {dt} "
                  f"is {bits // 8} bytes (numel x itemsize)", key)
    return Entry(path, dt, tuple(shape), data_start + offs[0],
                 offs[1] - offs[0])


def load_json(path, raw, what):
    """raw (bytes) as JSON, or EBADMSG naming path (what: "the header",
    "the index"): not UTF-8, not JSON, a name twice in one object, or
    arrays and objects nested deeper than Python's json module parses
    (its recursion limit: a header is 3 levels deep, an index 2 or 3)."""
    try:
        return json.loads(raw.decode("utf-8"),
                          object_pairs_hook=_no_duplicates(path, what))
    except ValueError as e:  # UnicodeDecodeError is one too
        raise bad(path, f"{what} is not valid JSON ({e})") from None
    except RecursionError:
        raise bad(path, f"{what} nests JSON arrays or objects deeper than "
                  "Python's json module parses (the recursion limit, "
                  f"{sys.getrecursionlimit()}): not a weights file's "
                  "JSON") from None


def read_header(wf):
    """Parse and check the header of a safetensors file open as wf (a
    _wfile.WFile): a Header, or nvswap.Error(EBADMSG) naming the file
    (and the tensor) for a truncated file, a header length past the end
    or above MAX_HEADER, JSON that is not an object of well-formed
    entries (or nests too deep), a dtype the format does not define,
    offsets that disagree with shape x itemsize, overlap, leave a hole or
    run past the end."""
    path, size = wf.path, wf.size
    if size < 8:
        raise bad(path, f"truncated: {size} bytes, shorter than the "
                  "8-byte header length")
    (n,) = struct.unpack("<Q", wf.pread(8, 0, "the header length"))
    if n > MAX_HEADER:
        raise bad(path, f"header length {n} is absurd (the format's "
                  f"limit is {MAX_HEADER}): not a safetensors file")
    if 8 + n > size:
        raise bad(path, f"header length {n} runs past the end of the "
                  f"file ({size} bytes): truncated, or not a "
                  "safetensors file")
    doc = load_json(path, wf.pread(n, 8, "the header"), "the header")
    if not isinstance(doc, dict):
        raise bad(path, f"the header is a JSON {type(doc).__name__}, not "
                  "an object")
    meta = doc.pop("__metadata__", None)
    if meta is not None and not (
            isinstance(meta, dict) and
            all(isinstance(v, str) for v in meta.values())):
        raise bad(path, "__metadata__ is not an object of strings")
    start = 8 + n
    tensors = {k: _entry(path, k, v, start) for k, v in doc.items()}
    data = size - start
    for k, e in tensors.items():
        if e.offset + e.nbytes > size:
            raise bad(path, f"its bytes [{e.offset - start}, "
                      f"{e.offset - start + e.nbytes}) run past the end of "
                      f"the data area ({data} bytes): truncated", k)
    expect, prev = 0, None
    for k, e in sorted(tensors.items(),
                       key=lambda kv: (kv[1].offset, kv[1].nbytes)):
        begin = e.offset - start
        if begin < expect:
            raise bad(path, f"its bytes [{begin}, {begin + e.nbytes}) "
                      f"overlap those of '{prev}' (which end at {expect})",
                      k)
        if begin > expect:
            raise bad(path, f"bytes [{expect}, {begin}) before it belong to "
                      "no tensor (a hole in the data area)", k)
        expect, prev = begin + e.nbytes, k
    if expect != data:
        last = f" ('{prev}')" if prev else ""
        raise bad(path, f"{data - expect} bytes after the last tensor"
                  f"{last} belong to no tensor")
    return Header(path, tensors, meta, size, start)


def build_header(entries, metadata=None, align=4096):
    """The header bytes (length included, padded with spaces so that the
    data area starts at a multiple of align: the format asks for 8;
    nvswap writes 4096, so that a served model reads the tensors, whose
    sizes keep them 64-byte aligned in practice, straight from the file:
    _load.Loader._sources) of a file holding entries, [(name, dtype
    name, shape)] laid out back to back in that order; and the data
    area's size."""
    doc, off = {}, 0
    if metadata is not None:
        doc["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dt, shape in entries:
        numel = 1
        for d in shape:
            numel *= d
        n = numel * DTYPES[dt][0] // 8
        doc[name] = {"dtype": dt, "shape": [int(d) for d in shape],
                     "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % align)
    return struct.pack("<Q", len(text)) + text, off
