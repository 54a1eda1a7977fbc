# SPDX-License-Identifier: MIT
"""nvswap.Swapper: the swap manager from Python, call by call."""
import errno
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

import nvswap
from filehelp import held_direct, pattern, raises_errno, swap_read, swap_write

MiB = 1 << 20


@pytest.fixture
def swapper(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=2)
    yield s
    s.close()


# ---- creation ---------------------------------------------------------------


def test_keywords_make_a_swapper_in_the_rank_directory(swapdir):
    with nvswap.Swapper(
        nvme_path=swapdir,
        buffer_size="64K",
        buffer_count=3,
        rank=1,
        name="job",
        stripe_size=4096,
        checksum=True,
        pin_memory=False,
        backend="psync",
    ) as s:
        d = os.path.join(swapdir, "nvswap", "job", "rank1")
        assert s.dirs == [d]
        assert os.path.isdir(d)
        assert repr(s) == f"<nvswap.Swapper {d}>"
        st = s.stats()
        assert (st["buffer_size"], st["buffer_count"]) == (65536, 3)
        assert st["backend"] == "psync"
        assert (st["tensors"], st["npaths"]) == (0, 1)
    assert not os.path.exists(d)


def test_several_paths_are_listed_per_path(swapdir):
    paths = [os.path.join(swapdir, p) for p in ("a", "b")]
    for p in paths:
        os.mkdir(p)
    with nvswap.Swapper(nvme_path=paths, buffer_size=MiB, buffer_count=2) as s:
        assert s.dirs == [os.path.join(p, "nvswap", "rank0") for p in paths]
        # striped over both paths at 4 KiB units
        s.register(1, bytes(pattern(64 * 1024)))
        st = s.stats()
        assert st["npaths"] == 2
        assert len(st["path_bytes_written"]) == 2
        assert sum(st["path_bytes_written"]) == 64 * 1024


def test_creation_errors(swapdir):
    with open(os.path.join(swapdir, "f"), "wb"):
        pass
    e = raises_errno(errno.ENOTDIR, nvswap.Swapper,
                     nvme_path=os.path.join(swapdir, "f", "x"),
                     buffer_size=MiB, buffer_count=1)
    assert os.path.join(swapdir, "f") + " is not a directory" in str(e)
    raises_errno(errno.EINVAL, nvswap.Swapper, buffer_size=MiB, buffer_count=1)
    raises_errno(errno.EINVAL, nvswap.Swapper, nvme_path=swapdir, buffer_size=0,
                 buffer_count=1)
    raises_errno(errno.EINVAL, nvswap.Swapper, nvme_path=swapdir, buffer_size=MiB,
                 buffer_count=1, stripe_size=1000)
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=1):
        e = raises_errno(errno.EBUSY, nvswap.Swapper, nvme_path=swapdir,
                         buffer_size=MiB, buffer_count=1)
        assert str(os.getpid()) in e.strerror
    with pytest.raises(ValueError, match="backend"):
        nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=1,
                       backend="spdk")
    with pytest.raises(ValueError, match="byte count"):
        nvswap.Swapper(nvme_path=swapdir, buffer_size="lots", buffer_count=1)
    with pytest.raises(ValueError, match="1 to 16 paths"):
        nvswap.Swapper(nvme_path=[], buffer_size=MiB, buffer_count=1)
    with pytest.raises(ValueError, match="rank"):
        nvswap.Swapper(rank=-1, nvme_path=swapdir, buffer_size=MiB,
                       buffer_count=1)


# ---- bytes round-trip -------------------------------------------------------


def test_page_cache_opens_the_swap_file_without_o_direct(swapdir):
    """page_cache=True: the swap file is held without O_DIRECT (the
    default holds it with), and bytes round-trip through it."""
    for page_cache in (None, False, True):
        with nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB,
                            buffer_count=2, page_cache=page_cache) as s:
            swap = os.path.join(s.dirs[0], "swap.0")
            assert held_direct(swap) is (not page_cache), page_cache
            s.register(1, MiB)
            data = pattern(MiB, seed=3)
            swap_write(s, 1, data, evict=True)
            s.wait_all()  # written: the read below is from the file
            assert swap_read(s, 1) == data
            assert s.stats()["bytes_read"] == MiB


def test_bytes_round_trip_through_evict_and_acquire_as_memoryview(swapper):
    data = pattern(300001)
    swapper.register(7, bytearray(data))
    assert swapper.info(7) == {
        "state": "on_nvme",
        "nbytes": 300001,
        "acquired": 0,
        "dirty": False,
        "on_disk": True,
        "backed": False,
        "extents": 1,
    }
    mv = swapper.acquire(7, memoryview=True)
    assert isinstance(mv, memoryview)
    assert (mv.nbytes, mv.readonly, mv.format) == (300001, False, "B")
    assert bytes(mv) == data
    # change every byte, keep it, evict, read back
    new = pattern(300001, seed=5)
    mv[:] = new
    swapper.release(7, True)
    assert swapper.info(7)["dirty"] is True
    swapper.evict(7)
    swapper.wait(7)
    assert swapper.info(7)["state"] == "on_nvme"
    swapper.prefetch(7)
    mv = swapper.acquire(7, memoryview=True)
    assert bytes(mv) == new
    swapper.release(7, False)


def test_a_clean_release_drops_changes_at_eviction(swapper):
    data = pattern(5000)
    swapper.register(1, data)
    mv = swapper.acquire(1, memoryview=True)
    mv[0:4] = b"XXXX"
    swapper.release(1, False)
    swapper.evict(1)
    mv = swapper.acquire(1, memoryview=True)
    assert bytes(mv) == data
    swapper.release(1, False)


def test_a_blank_acquire_reads_nothing_and_a_failed_one_changes_nothing(
        swapper):
    """acquire(blank=True) of a written tensor on NVMe: its buffer as it
    is, no read; filled and released dirty, the new bytes are the
    tensor's. One whose view cannot be made (a shape that does not fit
    its bytes) raises and leaves the tensor as it was, on NVMe."""
    data = pattern(4096, seed=7)
    swapper.register(1, data)
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        swapper.acquire(1, "B", (3,), memoryview=True, blank=True)
    assert swapper.info(1)["state"] == "on_nvme"
    assert swapper.info(1)["acquired"] == 0
    swapper.evict(1)  # nothing to write
    assert swap_read(swapper, 1) == data
    before = swapper.stats()["bytes_read"]
    swapper.evict(1)
    mv = swapper.acquire(1, memoryview=True, blank=True)
    assert swapper.stats()["bytes_read"] == before  # no read
    new = pattern(4096, seed=8)
    mv[:] = new
    swapper.release(1, True)
    swapper.evict(1)
    swapper.wait_all()
    assert swap_read(swapper, 1) == new


def test_keep_blocks_is_for_scratch_swappers(swapdir):
    """keep_blocks=True with a persistent set: EINVAL naming it."""
    with pytest.raises(nvswap.Error) as e:
        nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=2,
                       persist="persistent", keep_blocks=True)
    assert e.value.errno == errno.EINVAL
    assert "keep_blocks is for scratch" in str(e.value)
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=2,
                        keep_blocks=True) as s:
        s.register(1, pattern(5000))
        assert swap_read(s, 1) == pattern(5000)


def test_register_an_int_reads_as_zeros_without_io(swapper):
    swapper.register(3, 10000)
    assert swapper.info(3)["on_disk"] is False
    mv = swapper.acquire(3, memoryview=True)
    assert bytes(mv) == bytes(10000)
    swapper.release(3, False)
    st = swapper.stats()
    assert (st["zero_fills"], st["reads"], st["bytes_written"]) == (1, 0, 0)


def test_memoryview_dtype_and_shape_cast(swapper):
    import struct

    values = [float(i) / 4 for i in range(12)]
    swapper.register(2, struct.pack("12f", *values))
    mv = swapper.acquire(2, "f", [3, 4], memoryview=True)
    assert (mv.format, mv.shape) == ("f", (3, 4))
    assert mv.tolist() == [values[0:4], values[4:8], values[8:12]]
    swapper.release(2, False)
    with pytest.raises(TypeError, match="struct format"):
        swapper.acquire(2, 4, memoryview=True)
    # nothing stays acquired after a refused dtype
    assert swapper.info(2)["acquired"] == 0


def test_numpy_round_trip(swapper):
    np = pytest.importorskip("numpy")
    a = np.arange(1000, dtype=np.float64) * 1.5
    swapper.register(4, a)
    mv = swapper.acquire(4, memoryview=True)
    back = np.frombuffer(mv, dtype=np.float64).copy()
    swapper.release(4, False)
    assert np.array_equal(back, a)


def test_torch_round_trip_with_dtype_and_shape(swapper):
    torch = pytest.importorskip("torch")
    t = torch.randn(64, 33, dtype=torch.float32)
    swapper.register(9, t)
    u8 = swapper.acquire(9)
    assert isinstance(u8, torch.Tensor)
    assert (u8.dtype, tuple(u8.shape)) == (torch.uint8, (64 * 33 * 4,))
    assert bytes(u8.numpy()) == bytes(t.numpy())
    swapper.release(9, False)
    x = swapper.acquire(9, torch.float32, (64, 33))
    assert torch.equal(x, t)
    x.mul_(2)
    swapper.release(9, True)
    swapper.evict(9)
    swapper.wait(9)
    y = swapper.acquire(9, torch.float32, (64, 33))
    assert torch.equal(y, t * 2)
    swapper.release(9, False)
    with pytest.raises(RuntimeError):
        swapper.acquire(9, torch.float32, (5, 5))
    assert swapper.info(9)["acquired"] == 0


def test_without_torch_acquire_returns_a_memoryview(swapdir):
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import nvswap
        with nvswap.Swapper(nvme_path={swapdir!r}, buffer_size=4096,
                            buffer_count=1) as s:
            s.register(1, b"abc" * 10)
            mv = s.acquire(1)
            assert isinstance(mv, memoryview), type(mv)
            assert bytes(mv) == b"abc" * 10
            s.release(1, False)
            assert mv.__repr__().startswith("<released memory")
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"


# ---- release revokes --------------------------------------------------------


def test_release_empties_the_acquired_tensor(swapper):
    torch = pytest.importorskip("torch")
    swapper.register(1, torch.ones(256))
    t = swapper.acquire(1, torch.float32)
    assert t.sum().item() == 256
    swapper.release(1, False)
    assert t.numel() == 0
    assert tuple(t.shape) == (0,)


def test_release_releases_the_memoryview(swapper):
    swapper.register(1, 4096)
    mv = swapper.acquire(1, memoryview=True)
    swapper.release(1, False)
    with pytest.raises(ValueError, match="released"):
        mv[0]


def test_nested_acquires_are_revoked_by_the_last_release(swapper):
    swapper.register(1, b"x" * 100)
    a = swapper.acquire(1, memoryview=True)
    b = swapper.acquire(1, memoryview=True)
    assert swapper.info(1)["acquired"] == 2
    swapper.release(1, False)
    # the buffer cannot be reused while an acquire is out: both valid
    assert bytes(a[:1]) == bytes(b[:1]) == b"x"
    swapper.release(1, False)
    for mv in (a, b):
        with pytest.raises(ValueError):
            mv[0]
    raises_errno(errno.EBUSY, swapper.release, 1, False)


def test_close_revokes_what_is_still_acquired(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1)
    s.register(1, 100)
    mv = s.acquire(1, memoryview=True)
    s.close()
    with pytest.raises(ValueError):
        mv[0]


def test_an_acquired_tensor_keeps_the_swapper_alive(swapdir):
    torch = pytest.importorskip("torch")
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1)
    d = s.dirs[0]
    s.register(1, torch.full((8,), 3.0))
    t = s.acquire(1, torch.float32)
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is not None  # the tensor's memory is the swapper's
    assert t.tolist() == [3.0] * 8
    del t
    gc.collect()
    assert ref() is None  # destroyed with the last user of its memory
    assert not os.path.exists(d)


# ---- errors, call by call ---------------------------------------------------


def test_every_call_on_an_unknown_id_is_enoent(swapper):
    for fn in (swapper.unregister, swapper.prefetch, swapper.try_prefetch,
               swapper.acquire, swapper.evict, swapper.wait, swapper.info):
        e = raises_errno(errno.ENOENT, fn, 42)
        assert isinstance(e, nvswap.FileNotFoundError)
        assert isinstance(e, FileNotFoundError)
    raises_errno(errno.ENOENT, swapper.release, 42, False)


def test_register_errors(swapper):
    swapper.register(1, 10)
    e = raises_errno(errno.EEXIST, swapper.register, 1, 10)
    assert isinstance(e, FileExistsError)
    raises_errno(errno.EINVAL, swapper.register, 2, 0)
    raises_errno(errno.EINVAL, swapper.register, 2, b"")
    e = raises_errno(errno.EFBIG, swapper.register, 2, MiB + 1)
    assert str(MiB + 1) in e.strerror
    assert swapper.stats()["tensors"] == 1
    with pytest.raises(ValueError, match="id"):
        swapper.register(-1, 10)
    with pytest.raises(ValueError, match="id"):
        swapper.register(1 << 64, 10)
    with pytest.raises(TypeError, match="id"):
        swapper.register("a", 10)
    with pytest.raises(TypeError):
        swapper.register(3, "ten bytes")
    with pytest.raises(ValueError, match="nbytes"):
        swapper.register(3, -5)
    # the largest id is fine
    swapper.register((1 << 64) - 1, 10)
    assert swapper.info((1 << 64) - 1)["nbytes"] == 10


def test_busy_errors_while_acquired(swapper):
    swapper.register(1, 4096)
    raises_errno(errno.EBUSY, swapper.release, 1, False)
    swapper.acquire(1, memoryview=True)
    raises_errno(errno.EBUSY, swapper.unregister, 1)
    raises_errno(errno.EBUSY, swapper.evict, 1)
    swapper.release(1, False)
    swapper.evict(1)
    swapper.unregister(1)
    assert swapper.stats()["tensors"] == 0


def test_acquiring_every_buffer_on_one_thread_is_edeadlk(swapper):
    for i in range(3):
        swapper.register(i, 4096)
    swapper.acquire(0, memoryview=True)
    swapper.acquire(1, memoryview=True)
    t0 = time.monotonic()
    e = raises_errno(errno.EDEADLK, swapper.acquire, 2)
    assert time.monotonic() - t0 < 5  # at once, not after wait_ms
    assert "this thread" in e.strerror
    raises_errno(errno.EDEADLK, swapper.prefetch, 2)
    assert swapper.try_prefetch(2) is False
    swapper.release(0, False)
    assert swapper.try_prefetch(2) is False  # it never evicts
    swapper.evict(0)
    assert swapper.try_prefetch(2) is True
    assert swapper.info(2)["state"] in ("reading", "resident")


def test_a_buffer_held_by_another_thread_times_out_after_wait_ms(swapdir):
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1,
                        wait_ms=200) as s:
        s.register(1, 10)
        s.register(2, 10)
        held, done = threading.Event(), threading.Event()

        def hold():
            s.acquire(1, memoryview=True)
            held.set()
            done.wait(10)
            s.release(1, False)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(10)
        t0 = time.monotonic()
        e = raises_errno(errno.ETIMEDOUT, s.acquire, 2)
        assert isinstance(e, nvswap.TimeoutError)
        assert 0.15 < time.monotonic() - t0 < 5
        done.set()
        t.join()


# ---- stats ------------------------------------------------------------------


def test_stats_count_a_known_sequence(swapdir):
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=64 * 1024,
                        buffer_count=2) as s:
        s.register(1, pattern(10000))       # write 1
        s.register(2, 20000)                # zeros: no I/O
        s.acquire(1, memoryview=True)       # read 1, a miss
        s.release(1, False)
        s.acquire(1, memoryview=True)       # hit 1
        s.release(1, True)
        s.evict(1)                          # write 2 (dirty)
        s.wait(1)
        s.prefetch(1)                       # read 2
        s.wait(1)
        s.acquire(1, memoryview=True)       # hit 2
        s.release(1, False)
        s.evict(1)                          # clean eviction 1
        s.acquire(2, memoryview=True)       # zero fill, a miss
        s.release(2, False)
        s.evict(2)                          # clean eviction 2
        st = s.stats()
        assert st["tensors"] == 2
        assert st["tensor_bytes"] == 30000
        assert (st["writes"], st["bytes_written"]) == (2, 20000)
        assert (st["reads"], st["bytes_read"]) == (2, 20000)
        assert (st["acquires"], st["acquire_hits"]) == (4, 2)
        assert st["prefetches"] == 1
        assert st["zero_fills"] == 1
        assert st["clean_evictions"] == 2
        assert st["auto_evictions"] == 0
        assert st["buffer_waits"] == 0
        assert (st["io_errors"], st["checksum_errors"]) == (0, 0)
        assert st["buffers_in_use"] == 0
        assert st["pool_high_water"] == 1
        assert st["path_bytes_written"] == [20000]
        assert st["path_bytes_read"] == [20000]
        assert len(st["path_space_used"]) == len(st["path_file_size"]) == 1
        assert st["pinned"] in (True, False)


# ---- life -------------------------------------------------------------------


def test_close_twice_and_use_after_close(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1)
    d = s.dirs[0]
    assert s.closed is False
    s.close()
    s.close()
    assert s.closed is True
    assert not os.path.exists(d)
    for call in (lambda: s.register(1, 10), lambda: s.acquire(1),
                 lambda: s.release(1, False), lambda: s.stats(),
                 lambda: s.info(1), lambda: s.wait_all(), lambda: s.dirs,
                 lambda: s.prefetch(1), s.__enter__):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert repr(s) == "<nvswap.Swapper closed>"
    with pytest.raises(RuntimeError, match="twice"):
        s.__init__(nvme_path=swapdir, buffer_size=4096, buffer_count=1)


def test_the_context_manager_destroys_on_exit(swapdir):
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1) as s:
        d = s.dirs[0]
        s.register(1, b"abc")
        assert os.listdir(d)
    assert s.closed
    assert not os.path.exists(d)
    # also when the block raises
    with pytest.raises(KeyError):
        with nvswap.Swapper(nvme_path=swapdir, buffer_size=4096,
                            buffer_count=1) as s2:
            d = s2.dirs[0]
            raise KeyError("x")
    assert s2.closed and not os.path.exists(d)


def test_dealloc_destroys(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1)
    d = s.dirs[0]
    del s
    gc.collect()
    assert not os.path.exists(d)
    # the directory is free again
    nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1).close()


def test_a_failed_write_behind_is_raised_by_close(swapdir):
    # RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG (SIGXFSZ
    # ignored), in a child so that the limit stays there; set after
    # register, which grows the swap file.
    code = textwrap.dedent(
        f"""
        import errno, resource, signal
        import nvswap
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        s = nvswap.Swapper(nvme_path={swapdir!r}, buffer_size=1 << 20,
                           buffer_count=1, backend="psync")
        s.register(1, 1 << 20)        # zeros: no I/O yet
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, hard))
        mv = s.acquire(1, memoryview=True)
        mv[:] = b"\\x01" * (1 << 20)
        s.release(1, True)
        s.evict(1)                    # the write-behind starts, and fails
        try:
            s.close()
        except nvswap.Error as e:
            print("close", errno.errorcode[e.errno])
        else:
            print("close ok")
        s.close()                     # closed now: nothing more
        print("again ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "close EFBIG\nagain ok\n"


def test_a_failed_write_behind_at_dealloc_is_reported_unraisable(swapdir):
    code = textwrap.dedent(
        f"""
        import gc, resource, signal, sys
        import nvswap
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        seen = []
        sys.unraisablehook = lambda u: seen.append(
            (type(u.exc_value).__name__, u.exc_value.errno, repr(u.object)))
        s = nvswap.Swapper(nvme_path={swapdir!r}, buffer_size=1 << 20,
                           buffer_count=1, backend="psync")
        s.register(1, 1 << 20)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, hard))
        mv = s.acquire(1, memoryview=True)
        mv[:] = b"\\x03" * (1 << 20)
        s.release(1, True)
        s.evict(1)
        del s, mv
        gc.collect()
        print(seen)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[('Error', 27, '<nvswap.Swapper closed>')]\n"


def test_wait_reports_a_failed_write_once_and_evict_retries(swapdir):
    code = textwrap.dedent(
        f"""
        import errno, resource, signal
        import nvswap
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        s = nvswap.Swapper(nvme_path={swapdir!r}, buffer_size=1 << 20,
                           buffer_count=1, backend="psync")
        s.register(1, 1 << 20)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, hard))
        mv = s.acquire(1, memoryview=True)
        mv[:] = b"\\x02" * (1 << 20)
        s.release(1, True)
        s.evict(1)
        try:
            s.wait(1)
        except nvswap.Error as e:
            print("wait", errno.errorcode[e.errno])
        s.wait(1)                     # reported once
        i = s.info(1)
        print(i["state"], i["dirty"], s.stats()["io_errors"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        s.evict(1)                    # retry: nothing was lost
        s.wait(1)
        mv = s.acquire(1, memoryview=True)
        print(bytes(mv) == b"\\x02" * (1 << 20))
        s.release(1, False)
        s.close()
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "wait EFBIG\nresident True 1\nTrue\n"


# ---- threads ----------------------------------------------------------------


def test_a_second_thread_runs_while_acquire_waits(swapdir):
    """acquire() releases the GIL while it waits for a buffer: another
    Python thread runs meanwhile, and its release ends the wait."""
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1,
                        wait_ms=20000) as s:
        s.register(1, b"one" * 10)
        s.register(2, b"two" * 10)
        held = threading.Event()
        progress = []

        def other():
            s.acquire(1, memoryview=True)
            held.set()
            # wait until the main thread is blocked on the pool
            while s.stats()["buffer_waits"] == 0:
                time.sleep(0.001)
            for i in range(1000):  # Python work: needs the GIL
                progress.append(i)
            s.release(1, False)

        t = threading.Thread(target=other)
        t.start()
        held.wait(10)
        mv = s.acquire(2, memoryview=True)  # blocks until other() releases
        assert len(progress) == 1000
        assert bytes(mv) == b"two" * 10
        s.release(2, False)
        t.join()
        st = s.stats()
        assert (st["buffer_waits"], st["auto_evictions"]) == (1, 1)
        assert s.info(1)["state"] == "on_nvme"


def test_close_waits_for_a_call_in_another_thread(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=1,
                       wait_ms=1500)
    d = s.dirs[0]
    s.register(1, 10)
    s.register(2, 10)
    s.acquire(1, memoryview=True)  # this thread holds the only buffer
    result = []

    def other():
        try:
            s.acquire(2, memoryview=True)
        except Exception as e:  # noqa: BLE001
            result.append(e)

    t = threading.Thread(target=other)
    t.start()
    while s.stats()["buffer_waits"] == 0:
        time.sleep(0.001)
    closer = threading.Thread(target=s.close)
    closer.start()
    time.sleep(0.1)
    # close() refuses new calls at once, and waits for other()'s
    assert closer.is_alive()
    assert s.closed
    with pytest.raises(ValueError, match="closed"):
        s.release(1, False)
    t.join()
    closer.join()
    assert len(result) == 1 and result[0].errno == errno.ETIMEDOUT
    assert not os.path.exists(d)


def test_threads_share_a_swapper(swapdir):
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=4096, buffer_count=4) as s:
        n = 8
        for i in range(n):
            s.register(i, bytes([i]) * 1000)
        errors = []

        def work(k):
            try:
                for rep in range(50):
                    i = (k + rep) % n
                    mv = s.acquire(i, memoryview=True)
                    assert bytes(mv[:1000]) == bytes([i]) * 1000
                    s.release(i, False)
                    try:
                        s.evict(i)
                    except nvswap.Error as e:  # another thread holds it
                        assert e.errno == errno.EBUSY
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert errors == []
        assert s.stats()["acquires"] == 200
