# SPDX-License-Identifier: MIT
"""How pretrained weights are read: Weights (tensors by state_dict key,
the checks of a destination) and FileWeights, whose tensors lie at known
offsets of files held open (_wfile.WFile; a safetensors file or shards, a
torch.save zip): each read goes through the file's descriptor, as one
O_DIRECT aio op straight into a destination of the file's dtype, else
through two pinned staging buffers and cast; the file is checked for
changes before each tensor is read and after its bytes are in.
"""
import errno
import os

import torch

import nvswap

from ._common import itemsize

STAGE = 16 << 20  # bytes per staging buffer of a cast or compare
MIB = 1 << 20


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

    def read_span(self, key, start, dest):
        """Elements start .. start + dest.numel() of key, flattened, into
        dest, a contiguous 1-D CPU tensor (any dtype, cast as copy_
        does). Blocks until done: a layer's fp32 masters in parts are
        filled a part at a time this way."""
        self._check_span(key, start, dest)
        dest.copy_(self._entries[key].reshape(-1)[
            start:start + dest.numel()])

    def _check_span(self, key, start, dest):
        self._check_key(key)
        n = torch.Size(self.shape(key)).numel()
        if dest.dim() != 1 or not dest.is_contiguous() or start < 0 or \
                start + dest.numel() > n:
            raise ValueError(f"nvswap.torch: elements {start}.."
                             f"{start + dest.numel()} of '{key}', "
                             f"{n} in {self.file(key)}, into "
                             f"{list(dest.shape)}")
        self._check_dtype(key)

    def _check_rows(self, key, start, dest):
        self._check_key(key)
        shape = self.shape(key)
        if not shape or dest.dim() == 0 or \
                tuple(dest.shape[1:]) != tuple(shape[1:]) or \
                start < 0 or start + dest.shape[0] > shape[0]:
            raise ValueError(f"nvswap.torch: rows {start}.."
                             f"{start + (dest.shape[0] if dest.dim() else 0)}"
                             f" of '{key}', {list(shape)} in "
                             f"{self.file(key)}, into {list(dest.shape)}")
        self._check_dtype(key)

    def close(self):
        pass


def same_bytes(x, y):
    """Tensors x and y hold the same bytes (same dtype and shape)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if (x.data_ptr() == y.data_ptr() and x.stride() == y.stride()):
        return True
    bx = x.contiguous().reshape(-1).view(torch.uint8)
    by = y.contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(bx, by)


class _Read:
    """An aio op reading bytes [begin, end) of a file for a tensor:
    wait() waits for it, then checks that the file did not change
    meanwhile (else EINVAL naming it), and names the file, the tensor
    and the range in a failed read's error."""

    __slots__ = ("op", "wf", "key", "begin", "end")

    def __init__(self, op, wf, key, begin, end):
        self.op, self.wf, self.key = op, wf, key
        self.begin, self.end = begin, end

    def wait(self):
        try:
            n = self.op.wait()
        except nvswap.Error as err:
            raise self.wf.failed(err, self.key, self.begin,
                                 self.end) from None
        self.wf.check(self.key, self.begin, self.end)
        return n

    def done(self):
        return self.op.done()


def _span(shape, stride):
    """Elements from a strided view's first to its last, both in."""
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(shape, stride))


def _part(e, start, n, item):
    """Rows start .. start + n of Entry e (n >= 1, shape[0] > 0), as an
    Entry; item: its element size."""
    shape = (n,) + tuple(e.shape[1:])
    if e.stride is None:
        row = e.nbytes // e.shape[0]
        return type(e)(e.path, e.dtype, shape, e.offset + start * row,
                       n * row)
    return type(e)(e.path, e.dtype, shape,
                   e.offset + start * e.stride[0] * item,
                   _span(shape, e.stride) * item, e.stride)


class FileWeights(Weights):
    """Weights whose tensors are Entries (_stformat.Entry) of files held
    open: _files {path: WFile}, _entries {key: Entry}. A subclass gives
    dtype(key), dtype_name(key) and _ft(entry), the entry's torch
    dtype."""

    def __init__(self, path):
        self.path = path
        self._handle = None
        self._bufs = None  # two pinned staging buffers, made on first use
        self._files = {}
        self._entries = {}

    def shape(self, key):
        return self._entries[key].shape

    def file(self, key):
        return self._entries[key].path

    def nbytes(self, key):
        e = self._entries[key]
        if e.stride is None:
            return e.nbytes
        return e.numel() * itemsize(self._ft(e))

    def in_place(self, key):
        """(path, offset, nbytes, dtype) of key when its bytes lie whole
        in its file in row-major order (so they can be read there as they
        are, weights in place), else None."""
        e = self._entries[key]
        if e.stride is not None or e.nbytes == 0:
            return None
        return e.path, e.offset, e.nbytes, self._ft(e)

    def same_file(self, path):
        """nvswap.Error(EINVAL) unless path still names the file opened
        and checked (unchanged): what another open of the path reads."""
        wf = self._files[path]
        st, now = os.fstat(wf.fd), os.stat(path)
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
            raise nvswap.Error(errno.EINVAL, f"nvswap.torch: {path}: "
                               "replaced by another file since it was "
                               "opened and checked (load it again)")
        wf.check()

    def handle(self):
        """The aio handle reads go through (made on first use)."""
        if self._handle is None:
            self._handle = nvswap.aio_handle(MIB, 32, False, True, 1)
        return self._handle

    def _submit(self, key, e, buf, offset):
        """Start reading len(buf) bytes at offset of e's file into buf:
        a _Read, after a check that the file is still as it was."""
        wf = self._files[e.path]
        begin, end = e.offset, e.offset + e.nbytes
        wf.check(key, begin, end)
        try:
            op = self.handle().submit_read(buf, wf.target, offset)
        except nvswap.Error as err:
            raise wf.failed(err, key, begin, end) from None
        return _Read(op, wf, key, begin, end)

    def submit_into(self, key, dest):
        """Start reading key into dest and return the ops to wait for
        (each has wait()). A contiguous CPU dest of the file's dtype is
        read into directly (O_DIRECT where the file system has it; the
        handle takes care of unaligned offsets and buffers); any other is
        filled through pinned staging buffers, cast by copy_, before this
        returns (no op left). Each op's wait() checks that the file did
        not change under the read: nvswap.Error(EINVAL) naming the file
        and key if it did, or the read's own error naming them."""
        self._check_dest(key, dest)
        e = self._entries[key]
        if e.nbytes == 0:
            return []
        if (e.stride is None and dest.device.type == "cpu" and
                dest.is_contiguous() and dest.dtype == self._ft(e)):
            return [self._submit(key, e, dest, e.offset)]
        self._fill(key, e, dest)
        return []

    def read_rows(self, key, start, dest):
        self._check_rows(key, start, dest)
        if dest.shape[0] == 0:
            return
        e = self._entries[key]
        part = _part(e, start, dest.shape[0], itemsize(self._ft(e)))
        if part.nbytes == 0:
            return
        if part.stride is None and dest.is_contiguous() and \
                dest.dtype == self._ft(part):
            self._submit(key, part, dest, part.offset).wait()
        else:
            self._fill(key, part, dest)

    def read_span(self, key, start, dest):
        self._check_span(key, start, dest)
        e, n = self._entries[key], dest.numel()
        if n == 0:
            return
        if e.stride is not None:  # a strided view: read whole
            dest.copy_(self._whole(key, e).reshape(-1)[start:start + n])
            return
        item = itemsize(self._ft(e))
        span = type(e)(e.path, e.dtype, (n,), e.offset + start * item,
                       n * item)
        if dest.dtype == self._ft(span):
            self._submit(key, span, dest, span.offset).wait()
        else:
            self._staged(key, span, dest)

    def _fill(self, key, e, dest):
        """e into dest by copy_: staged in pieces, or whole when e is a
        strided view or dest is not contiguous."""
        if e.stride is None and dest.is_contiguous():
            self._staged(key, e, dest)
            return
        dest.copy_(self._whole(key, e))

    def _whole(self, key, e):
        """A new CPU tensor holding e."""
        ft = self._ft(e)
        if e.stride is None:
            t = torch.empty(e.shape, dtype=ft)
            self._submit(key, e, t, e.offset).wait()
            return t
        span = torch.empty(e.nbytes, dtype=torch.uint8)
        self._submit(key, e, span, e.offset).wait()
        return span.view(ft).as_strided(e.shape, e.stride)

    def _chunks(self, e, step):
        """(file offset, nbytes, element offset) of e in pieces of at most
        step bytes, cut at whole elements."""
        item = max(1, e.nbytes // max(1, e.numel()))
        step = max(item, step // item * item)
        for off in range(0, e.nbytes, step):
            n = min(step, e.nbytes - off)
            yield e.offset + off, n, off // item

    def _staged(self, key, e, dest):
        """Read e into contiguous dest through two pinned staging buffers
        (the read of the next piece runs while this one is cast)."""
        ft = self._ft(e)
        flat = dest.view(-1)
        bufs = self._staging()
        pieces = list(self._chunks(e, bufs[0].numel()))
        ops = [self._submit(key, e, bufs[0][:pieces[0][1]], pieces[0][0])]
        try:
            for i, (off, n, first) in enumerate(pieces):
                ops[i].wait()
                if i + 1 < len(pieces):
                    o2, n2, _ = pieces[i + 1]
                    ops.append(self._submit(key, e, bufs[(i + 1) % 2][:n2],
                                            o2))
                src = bufs[i % 2][:n].view(ft)
                flat[first:first + src.numel()].copy_(src)
        finally:
            for op in ops:
                try:
                    op.op.wait()
                except nvswap.Error:
                    pass

    def equal(self, a, b):
        """key a and key b hold the same bytes (read and compared in
        pieces, in bounded memory; a strided view whole)."""
        ea, eb = self._entries[a], self._entries[b]
        if self._ft(ea) != self._ft(eb) or ea.shape != eb.shape:
            return False
        if (ea.path, ea.offset, ea.stride) == (eb.path, eb.offset, eb.stride):
            return True
        if ea.stride is not None or eb.stride is not None:
            return same_bytes(self._whole(a, ea), self._whole(b, eb))
        bufs = self._staging()
        step = bufs[0].numel()
        for off in range(0, ea.nbytes, step):
            n = min(step, ea.nbytes - off)
            x = self._submit(a, ea, bufs[0][:n], ea.offset + off)
            y = self._submit(b, eb, bufs[1][:n], eb.offset + off)
            try:
                x.wait()
            finally:
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
        """Let go of the handle (its reads drained), then the files."""
        self._bufs = None
        h, self._handle = self._handle, None
        if h is not None:
            h.close()
        files, self._files = self._files, {}
        for wf in files.values():
            wf.close()
