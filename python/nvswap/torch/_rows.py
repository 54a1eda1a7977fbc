# SPDX-License-Identifier: MIT
"""An inference model's input embeddings read by rows (offload(inference=
True) on the CPU).

A forward of an nn.Embedding uses one row of its table per token: a
Llama's 32000 x 2048 table is 131 MB in bf16 (a tenth of a 1.2 GB model,
and its largest layer), of which a decoding step at batch 1 uses 4 KiB.
Streamed as a layer it costs a pool buffer of its size and its whole
bytes every forward; kept resident, its bytes of the budget. Read by
rows it costs neither: the table lives in its own unnamed file in the
swap directory (O_TMPFILE, O_DIRECT: gone with the process, even after a
SIGKILL), and each forward reads the rows of the distinct ids it is given
(runs of consecutive ids in one read) with an nvswap.aio_handle straight
into the rows it returns, which are weight[ids] bit for bit.

Only a plain nn.Embedding qualifies (its forward is nn.Embedding's, not
one of its class or instance, and no max_norm, which rewrites the table
in forward) whose weight is used by no other module: a table tied to
the output head (GPT-2) is read whole by the head every step anyway.
A load of weights= writes the table from the file, and save_pretrained
the file from the table, a piece of rows at a time (Table.fill,
Table.pieces: a table of gigabytes never passes through memory whole).
Every other use of the weight (state_dict(), restore(), gathered())
reads or writes the whole table through the engine's acquire and
release, in a tensor of its own for as long as it is held; a failed
write keeps its values (Table.pending)."""
import errno
import math
import os
import types

import torch

import nvswap

from ._common import error, nbytes

# The budget that reading by rows takes: the aio handle's pinned bounce
# buffers (512 KiB for a block size of 64 KiB) and the rows of a forward.
MEMORY = 1 << 20
_BLOCK = 64 << 10
# The piece of Table.fill and Table.pieces: the memory a load or a save
# of a table takes, whatever its size (a 256k-token vocabulary's table
# is gigabytes)
PIECE = 8 << 20


def candidates(model, inference, device):
    """The modules of model whose weight an inference model on the CPU
    reads by rows (see the file's comment)."""
    if not inference or device is not None:
        return set()
    uses = {}
    for m in model.modules():
        for p in m._parameters.values():
            if p is not None:
                uses[id(p)] = uses.get(id(p), 0) + 1
    out = set()
    for m in model.modules():
        if not isinstance(m, torch.nn.Embedding) or \
                type(m).forward is not torch.nn.Embedding.forward or \
                "forward" in m.__dict__ or m.max_norm is not None:
            continue  # a forward of its own, or one rewriting the table
        own = [p for p in m._parameters.values() if p is not None]
        if len(own) == 1 and own[0] is m.weight and \
                uses[id(m.weight)] == 1 and m.weight.numel() > 0:
            out.add(m)
    return out


def _open(directory, direct=True):
    """An unnamed file in directory, O_DIRECT where the filesystem allows
    (unless not direct): O_TMPFILE, else a named one unlinked at once."""
    flags = os.O_RDWR | os.O_CLOEXEC
    for odirect in ((os.O_DIRECT,) if direct else ()) + (0,):
        try:
            return os.open(directory, flags | odirect | os.O_TMPFILE,
                           0o600)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP,
                               errno.EISDIR):
                raise error(e.errno, "nvswap.torch.offload: cannot make the "
                            f"row table of an embedding in {directory}: "
                            f"{e.strerror}") from e
    for i in range(100):
        path = os.path.join(directory, f".rows.{os.getpid()}.{i}")
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        os.unlink(path)
        return fd
    raise error(errno.EEXIST, "nvswap.torch.offload: cannot make the row "
                f"table of an embedding in {directory}")


class Table:
    """One embedding's weight on NVMe, read by rows or whole."""

    def __init__(self, handle, directory, name, data, direct=True):
        """data: the weight in the compute dtype (on the meta device: the
        table starts as zeros, without I/O); direct False: through the
        page cache (offload(page_cache=True))."""
        self.h, self.name = handle, name
        self.shape, self.dtype = tuple(data.shape), data.dtype
        self.nbytes = nbytes(data)
        self.row_bytes = self.nbytes // max(1, self.shape[0])
        self.where = directory
        self.fd = _open(directory, direct)
        self.fresh = True  # all zeros, never written
        self.rows_read = 0  # distinct rows the forwards read
        # a failed write's data: the table's bytes are unknown, and these
        # are its values until a write of them succeeds
        self.pending = None
        try:
            os.ftruncate(self.fd, self.nbytes)
            if not data.is_meta:
                self.write_all(data)
        except BaseException:
            self.close()
            raise

    def _fail(self, e, what):
        code, text = getattr(e, "errno", None) or errno.EIO, e.strerror
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            size = self.nbytes
        if size < self.nbytes:
            code = errno.EIO
            text = (f"its file is {size} bytes, not {self.nbytes}: "
                    f"truncated behind nvswap's back ({text})")
        return error(code, f"nvswap.torch: {what} the row table of "
                     f"'{self.name}' (an unnamed file in {self.where}): "
                     f"{text}")

    def _check(self):
        if self.fd < 0:
            raise ValueError("nvswap.torch: the model's offload was closed "
                             f"(restore() was called): '{self.name}' has "
                             "no table to read")

    def read_all(self):
        """The whole table in a tensor of its own (after a failed write,
        a copy of the values that write was given)."""
        self._check()
        if self.pending is not None:
            return self.pending.clone()
        if self.fresh:
            return torch.zeros(self.shape, dtype=self.dtype)
        out = torch.empty(self.shape, dtype=self.dtype)
        try:
            self.h.sync_pread(out, self.fd, 0)
        except nvswap.Error as e:
            raise self._fail(e, "reading") from e
        return out

    def write_all(self, data):
        """The whole table written. When the write fails, data is kept
        (pending) and serves every read until a write succeeds: nothing
        is lost, and restore() or a state dict has the values given."""
        self._check()
        data = data.detach().to("cpu", self.dtype).contiguous()
        try:
            self.h.sync_pwrite(data, self.fd, 0)
        except nvswap.Error as e:
            self.pending = data
            raise self._fail(e, "writing") from e
        self.fresh, self.pending = False, None

    def fill(self, read):
        """The table written from read(start, dest), which fills dest
        with rows start .. start + len(dest) in the table's dtype: a piece
        of PIECE bytes at a time (_pieces()), never the whole table in
        memory. A failed read or write raises (the load fails, and
        offload() is undone)."""
        self._check()
        for start, part in self._pieces():
            read(start, part)
            try:
                self.h.sync_pwrite(part, self.fd, start * self.row_bytes)
            except nvswap.Error as e:
                raise self._fail(e, "writing") from e
        self.fresh, self.pending = False, None

    def pieces(self):
        """The whole table in row order, a piece of PIECE bytes at a time
        (save_pretrained writes it so, never whole): views of one tensor,
        each valid until the next is asked for. After a failed write,
        the values that write was given."""
        self._check()
        for start, part in self._pieces():
            if self.pending is not None:
                part.copy_(self.pending[start:start + part.shape[0]])
            elif self.fresh:
                part.zero_()
            else:
                try:
                    self.h.sync_pread(part, self.fd, start * self.row_bytes)
                except nvswap.Error as e:
                    raise self._fail(e, "reading") from e
            yield part

    def _pieces(self):
        """(first row, a view of one reused tensor holding the rows from
        there): whole rows, PIECE bytes at most (at least one row), cut at
        4 KiB boundaries of the file where a few rows make it so."""
        rows, row = self.shape[0], self.row_bytes
        step = max(1, PIECE // max(1, row))
        align = 4096 // math.gcd(row, 4096) if row else 1
        if step >= align:
            step = step // align * align
        piece = torch.empty((min(step, rows),) + self.shape[1:],
                            dtype=self.dtype)
        for start in range(0, rows, step):
            yield start, piece[:min(step, rows - start)]

    def lookup(self, ids):
        """weight[ids]: the rows of the distinct ids read from the table.
        An id outside the table raises IndexError, as F.embedding does.
        After a failed write the write is tried again first, and raises
        again while it fails (the values stay pending)."""
        self._check()
        if self.pending is not None:
            self.write_all(self.pending)
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"nvswap.torch: embedding '{self.name}' takes "
                            "integer ids (torch.long or torch.int), not "
                            f"{ids.dtype}")
        flat = ids.reshape(-1).to("cpu", torch.int64)
        width = self.shape[1:]
        if flat.numel() == 0:
            return torch.empty(tuple(ids.shape) + width, dtype=self.dtype)
        lo, hi = int(flat.min()), int(flat.max())
        if lo < 0 or hi >= self.shape[0]:
            raise IndexError(f"nvswap.torch: id {lo if lo < 0 else hi} is "
                             f"out of range for embedding '{self.name}' of "
                             f"{self.shape[0]} rows")
        uniq, inverse = torch.unique(flat, sorted=True, return_inverse=True)
        rows = torch.empty((uniq.numel(),) + width, dtype=self.dtype)
        if not self.fresh:
            ids_ = uniq.tolist()
            try:
                try:
                    start = 0
                    for i in range(1, len(ids_) + 1):  # runs of ids
                        if i == len(ids_) or ids_[i] != ids_[i - 1] + 1:
                            self.h.submit_read(rows[start:i], self.fd,
                                               ids_[start] * self.row_bytes)
                            start = i
                finally:
                    self.h.wait()  # what was submitted, before raising
            except nvswap.Error as e:
                raise self._fail(e, "reading rows of") from e
        else:
            rows.zero_()
        self.rows_read += uniq.numel()
        return rows[inverse].reshape(tuple(ids.shape) + width)

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def forward_by_rows(module, table):
    """module.forward replaced by the table's lookup (restore() removes
    it): the module's weight is never acquired in forward."""

    def forward(self, input):
        return table.lookup(input)

    module.forward = types.MethodType(forward, module)


def unbind(eng):
    """The forwards forward_by_rows() replaced put back (restore())."""
    for m, layers in eng.mod_layers.items():
        if any(x in eng.rows for x in layers):
            m.__dict__.pop("forward", None)


def handle(backend):
    """The aio handle the tables of an engine share."""
    kw = {"backend": backend} if backend is not None else {}
    return nvswap.aio_handle(block_size=_BLOCK, queue_depth=32, **kw)
