# SPDX-License-Identifier: MIT
"""Page-locked memory from Python: DeepNVMe's new_cpu_locked_tensor and
free_cpu_locked_tensor, nvswap.pinned_empty, nvswap.pinned_buffer; all
from nvswap's one pinned pool (nvswap.pinned_stats() counts it)."""
import gc
import os

import pytest

import nvswap

MiB = 1 << 20


def live():
    gc.collect()
    return nvswap.pinned_stats()["live_allocations"]



def test_new_cpu_locked_tensor():
    torch = pytest.importorskip("torch")
    with nvswap.aio_handle() as h:
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64,
                   torch.uint8, torch.bool):
            t = h.new_cpu_locked_tensor(1000, torch.empty(0, dtype=dt))
            assert t.dtype == dt and t.shape == (1000,), dt
            assert t.data_ptr() % h.get_alignment() == 0
            assert not t.view(torch.uint8).any(), "not zero-filled"
            assert h.is_pinned(t) is True
            assert h.is_pinned(buffer=t[10:20]) is True
        # DeepSpeed's spelling and the correct one
        t = h.new_cpu_locked_tensor(num_elem=7, example_tenosr=torch.ones(2))
        assert (t.dtype, t.numel()) == (torch.float32, 7)
        t = h.new_cpu_locked_tensor(num_elem=3,
                                    example_tensor=torch.ones(2).double())
        assert (t.dtype, t.numel()) == (torch.float64, 3)
        assert h.is_pinned(torch.ones(4)) is False
        with pytest.raises(TypeError, match="example_tenosr"):
            h.new_cpu_locked_tensor(3, bytearray(4))
        with pytest.raises(ValueError, match="negative"):
            h.new_cpu_locked_tensor(-1, torch.ones(1))


def test_free_cpu_locked_tensor_returns_memory_to_the_pool():
    torch = pytest.importorskip("torch")
    with nvswap.aio_handle() as h:  # its bounce memory is pinned too
        n = live()
        t = h.new_cpu_locked_tensor(MiB, torch.empty(0))
        assert live() == n + 1
        assert h.free_cpu_locked_tensor(t) is True
        assert t.numel() == 0
        assert live() == n
        # a view keeps the memory until it goes
        t = h.new_cpu_locked_tensor(1000, torch.empty(0, dtype=torch.int16))
        v = t[10:]
        assert h.free_cpu_locked_tensor(tensor=t) is True
        assert (t.numel(), v.numel()) == (0, 990)
        assert live() == n + 1
        del v
        assert live() == n
        # a tensor outside the pool: False, unchanged
        plain = torch.ones(10)
        assert h.free_cpu_locked_tensor(tensor=plain) is False
        assert plain.numel() == 10 and bool((plain == 1).all())
        with pytest.raises(TypeError, match="torch.Tensor"):
            h.free_cpu_locked_tensor(bytearray(10))
        # dropping the tensor returns it too
        t = h.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.uint8))
        assert live() == n + 1
        del t
        assert live() == n


def test_io_on_a_locked_tensor_does_not_bounce(diskdir):
    torch = pytest.importorskip("torch")
    p = os.path.join(diskdir, "f")
    with nvswap.aio_handle() as h:
        t = h.new_cpu_locked_tensor(MiB, torch.empty(0, dtype=torch.uint8))
        t.copy_(torch.frombuffer(bytearray(os.urandom(MiB)), dtype=torch.uint8))
        assert h.sync_pwrite(t, p) == 1
        r = h.new_cpu_locked_tensor(MiB, torch.empty(0, dtype=torch.uint8))
        assert h.sync_pread(r, p) == 1
        assert torch.equal(r, t)
        assert h.stats()["bounced_requests"] == 0




def test_pinned_empty():
    torch = pytest.importorskip("torch")
    with nvswap.aio_handle() as h:
        n = live()
        t = nvswap.pinned_empty((3, 5), torch.float16)
        assert (t.shape, t.dtype) == ((3, 5), torch.float16)
        assert h.is_pinned(t) and t.data_ptr() % 4096 == 0
        assert live() == n + 1
        u = nvswap.pinned_empty(7)
        assert (u.shape, u.dtype) == ((7,), torch.get_default_dtype())
        assert nvswap.pinned_empty((0, 4), torch.int32).shape == (0, 4)
        assert live() == n + 2
        del t, u
        assert live() == n
        with pytest.raises(ValueError, match="negative"):
            nvswap.pinned_empty((2, -1))


def test_pinned_buffer(diskdir):
    n = live()
    b = nvswap.pinned_buffer(10000)
    assert len(b) == 10000 and repr(b).startswith("<nvswap.PinnedBuffer 10000")
    mv = memoryview(b)
    assert not mv.readonly and mv.nbytes == 10000
    data = os.urandom(10000)
    mv[:] = data
    p = os.path.join(diskdir, "f")
    with nvswap.aio_handle() as h:
        assert h.is_pinned(b) is True
        assert h.sync_pwrite(b, p) == 1
        mv[:] = bytes(10000)
        assert h.sync_pread(b, p) == 1
        assert bytes(mv) == data
    assert live() == n + 1
    del b  # the memoryview holds it
    assert live() == n + 1
    mv.release()
    del mv
    assert live() == n
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive"):
            nvswap.pinned_buffer(bad)
