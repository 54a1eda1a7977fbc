# SPDX-License-Identifier: MIT
"""What an op reads into or writes from: CPU torch tensors of every dtype,
numpy arrays, objects with the buffer protocol, at any address; and what
is refused before anything is submitted."""
import array
import mmap
import os

import pytest

import nvswap

MiB = 1 << 20


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def snapshot(h):
    st = h.stats()
    return (h.pending, st["ops_completed"], st["requests"], st["bytes_read"],
            st["bytes_written"])


# ---- torch ------------------------------------------------------------------


def torch_dtypes(torch):
    return [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
            torch.float16, torch.bfloat16, torch.float32, torch.float64,
            torch.bool, torch.complex64]


def random_tensor(torch, dtype, shape):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, dtype=torch.uint8).bool()
    nbytes = torch.empty(0, dtype=dtype).element_size()
    for d in shape:
        nbytes *= d
    raw = torch.frombuffer(bytearray(os.urandom(nbytes)), dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)  # every bit pattern, NaNs too


def as_bytes(torch, t):
    return bytes(t.contiguous().view(torch.uint8).flatten().tolist())


def test_every_torch_dtype_round_trips_bit_exact(diskdir):
    torch = pytest.importorskip("torch")
    p = os.path.join(diskdir, "f")
    with nvswap.aio_handle() as h:
        for dtype in torch_dtypes(torch):
            src = random_tensor(torch, dtype, (37, 129))
            assert h.sync_pwrite(src, p) == 1
            assert slurp(p)[:src.numel() * src.element_size()] == as_bytes(
                torch, src), dtype
            dst = torch.empty_like(src)
            assert h.async_pread(dst, p) == 0
            assert h.wait() == 1
            assert torch.equal(dst.view(torch.uint8), src.view(torch.uint8)), dtype
            os.unlink(p)


def test_tensor_views_and_parameters(diskdir):
    torch = pytest.importorskip("torch")
    p = os.path.join(diskdir, "f")
    base = random_tensor(torch, torch.float32, (64, 64))
    with nvswap.aio_handle() as h:
        # a contiguous view at a storage offset: its own bytes only
        assert h.sync_pwrite(base[3:5], p) == 1
        assert slurp(p) == as_bytes(torch, base[3:5])
        w = torch.nn.Parameter(torch.zeros(2, 64))
        assert h.sync_pread(w, p) == 1
        assert torch.equal(w.detach().view(torch.uint8),  # NaNs: bits
                           base[3:5].view(torch.uint8))
        # a resolved conjugate is an ordinary tensor
        c = random_tensor(torch, torch.complex64, (10,))
        assert h.sync_pwrite(c.conj().resolve_conj(), p) == 1
        r = torch.empty(10, dtype=torch.complex64)
        assert h.sync_pread(r, p) == 1
        assert torch.equal(r.view(torch.uint8),
                           c.conj().resolve_conj().view(torch.uint8))


# ---- numpy and the buffer protocol -------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "float64",
                                   "complex128", "bool", "<i8", ">u4"])
def test_numpy_arrays_round_trip(diskdir, dtype):
    np = pytest.importorskip("numpy")
    p = os.path.join(diskdir, "f")
    dt = np.dtype(dtype)
    raw = np.frombuffer(os.urandom(33 * 77 * dt.itemsize), np.uint8)
    src = (raw % 2).astype(bool) if dt == bool else raw.view(dt)
    src = src.reshape(33, 77)
    with nvswap.aio_handle() as h:
        assert h.sync_pwrite(src, p, 100) == 1
        assert slurp(p)[100:] == src.tobytes()
        dst = np.zeros_like(src)
        assert h.sync_pread(dst, p, 100) == 1
        assert dst.tobytes() == src.tobytes()
        # Fortran order is contiguous too
        f = np.asfortranarray(src)
        assert h.sync_pwrite(f, p) == 1
        assert slurp(p)[:f.nbytes] == f.tobytes(order="A")


def test_bytearray_memoryview_mmap_array(diskdir):
    p = os.path.join(diskdir, "f")
    data = os.urandom(3 * 4096 + 17)
    n = len(data)
    with nvswap.aio_handle() as h:
        assert h.sync_pwrite(data, p) == 1  # bytes: fine for a write
        ba = bytearray(n)
        assert h.sync_pread(ba, p) == 1 and ba == data
        mv = memoryview(bytearray(n))
        assert h.sync_pread(mv, p) == 1 and mv == data
        half = memoryview(bytearray(n))[n // 2:]  # a slice of a memoryview
        assert h.sync_pread(half, p, n // 2) == 1
        assert half == data[n // 2:]
        with mmap.mmap(-1, n) as m:
            assert h.sync_pread(m, p) == 1 and m[:] == data
        q = os.path.join(diskdir, "mapped")
        with open(q, "w+b") as f:
            f.truncate(n)
            with mmap.mmap(f.fileno(), n) as m:  # a file-backed map
                assert h.sync_pread(m, p) == 1
                m.flush()
        assert slurp(q) == data
        arr = array.array("d", range(1000))
        assert h.sync_pwrite(arr, p) == 1
        back = array.array("d", bytes(8000))
        assert h.sync_pread(back, p) == 1 and back == arr
        assert h.sync_pwrite(memoryview(arr).cast("B")[8:16], p) == 1
        assert slurp(p)[:8] == arr[1:2].tobytes()


def test_unaligned_addresses_go_through_bounce_memory(diskdir):
    np = pytest.importorskip("numpy")
    p = os.path.join(diskdir, "f")
    n = 2 * MiB + 5
    data = os.urandom(n)
    with nvswap.aio_handle() as h:
        store = np.zeros(n + 1, np.uint8)
        src = store[1:]
        assert src.ctypes.data % 2 == 1
        src[:] = np.frombuffer(data, np.uint8)
        assert h.sync_pwrite(src, p) == 1
        assert slurp(p) == data
        big = np.zeros(n + 4097, np.uint8)
        dst = big[4097:]
        assert h.sync_pread(dst, p) == 1
        assert dst.tobytes() == data and not big[:4097].any()
        assert h.async_pread(memoryview(bytearray(n + 3))[3:], p) == 0
        assert h.wait() == 1
        st = h.stats()
        if st["direct_fallbacks"] == 0:  # O_DIRECT: staged, not refused
            assert st["bounced_requests"] > 0
        torch = pytest.importorskip("torch")
        t = torch.zeros(n + 1, dtype=torch.uint8)[1:]
        assert t.data_ptr() % 2 == 1
        assert h.sync_pread(t, p) == 1
        assert bytes(t.numpy()) == data


# ---- refused before anything is submitted ------------------------------------


def all_reads(h, buf, p):
    return [lambda: h.sync_pread(buf, p), lambda: h.async_pread(buf, p),
            lambda: h.pread(buf, p, False, True), lambda: h.read(buf, p, False),
            lambda: h.submit_read(buf, p)]


def all_writes(h, buf, p):
    return [lambda: h.sync_pwrite(buf, p), lambda: h.async_pwrite(buf, p),
            lambda: h.pwrite(buf, p, False, False),
            lambda: h.write(buf, p, False), lambda: h.submit_write(buf, p)]


def refused(h, calls, exc, match, p, before):
    """Each call raises exc, nothing is submitted, the file is unchanged."""
    state = snapshot(h)
    for call in calls:
        with pytest.raises(exc, match=match):
            call()
    assert snapshot(h) == state
    assert slurp(p) == before


@pytest.fixture
def target(diskdir):
    p = os.path.join(diskdir, "f")
    data = os.urandom(64 * 1024)
    with open(p, "wb") as f:
        f.write(data)
    return p, data


def test_non_contiguous_tensors_and_arrays_are_value_errors(target):
    p, before = target
    with nvswap.aio_handle() as h:
        torch = pytest.importorskip("torch")
        for t in (torch.zeros(64, 64).t(), torch.zeros(64, 64)[:, ::2],
                  torch.zeros(10, 10).expand(3, 10, 10)):
            refused(h, all_reads(h, t, p) + all_writes(h, t, p), ValueError,
                    "not contiguous", p, before)
        np = pytest.importorskip("numpy")
        a = np.zeros((64, 64))[:, ::2]
        refused(h, all_reads(h, a, p) + all_writes(h, a, p), ValueError,
                "not contiguous", p, before)
        mv = memoryview(bytearray(100))[::2]
        refused(h, all_reads(h, mv, p), ValueError, "not contiguous", p,
                before)


def test_read_only_buffers_are_refused_for_reads(target):
    p, before = target
    with nvswap.aio_handle() as h:
        ro = [b"x" * 100, memoryview(b"y" * 100),
              memoryview(bytearray(100)).toreadonly()]
        np = pytest.importorskip("numpy")
        a = np.zeros(100, np.uint8)
        a.flags.writeable = False
        ro.append(a)
        for buf in ro:
            refused(h, all_reads(h, buf, p), ValueError, "read-only", p,
                    before)
        # the same buffers may be written from
        q = os.path.join(os.path.dirname(p), "w")
        for buf in ro:
            assert h.sync_pwrite(buf, q) == 1


def test_lazily_conjugated_or_negated_views_are_value_errors(target):
    # Their memory holds the values before the conj()/neg: writing one
    # would silently store the other value.
    torch = pytest.importorskip("torch")
    p, before = target
    with nvswap.aio_handle() as h:
        c = (torch.arange(8, dtype=torch.float32) * (1 + 2j)).conj()
        assert c.is_conj() and c.is_contiguous()
        refused(h, all_reads(h, c, p) + all_writes(h, c, p), ValueError,
                "lazily conjugated view.*resolve_conj", p, before)
        if hasattr(torch, "_neg_view"):
            n = torch._neg_view(torch.ones(8))
            refused(h, all_reads(h, n, p) + all_writes(h, n, p), ValueError,
                    "lazily negated view.*resolve_neg", p, before)


def test_meta_and_sparse_tensors_are_type_errors(target):
    torch = pytest.importorskip("torch")
    p, before = target
    with nvswap.aio_handle() as h:
        m = torch.empty(100, device="meta")
        refused(h, all_reads(h, m, p) + all_writes(h, m, p), TypeError,
                "device 'meta'", p, before)
        s = torch.zeros(100).to_sparse()
        refused(h, all_reads(h, s, p) + all_writes(h, s, p), TypeError,
                "layout is torch.sparse_coo", p, before)


def test_non_buffers_are_type_errors(target):
    p, before = target
    with nvswap.aio_handle() as h:
        for obj in (42, "text", None, [1, 2], 1.5):
            refused(h, all_reads(h, obj, p) + all_writes(h, obj, p), TypeError,
                    "buffer must be a CPU torch.Tensor", p, before)
