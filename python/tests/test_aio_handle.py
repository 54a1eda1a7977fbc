# SPDX-License-Identifier: MIT
"""nvswap.aio_handle: DeepNVMe's aio_handle, from its documented behavior.

Names, argument order, defaults and return values are DeepSpeed's
(csrc/aio/py_lib/py_ds_aio.cpp); failures raise nvswap.Error where
DeepNVMe returns -1, asserts or drops them.
"""
import errno
import os
import time

import pytest

import nvswap
from filehelp import put, rand, slurp

KiB = 1 << 10
MiB = 1 << 20


def eventually(cond, what, timeout=30.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


def counters(h):
    st = h.stats()
    return (st["ops_completed"], st["ops_failed"], st["bytes_read"],
            st["bytes_written"], st["requests"])


# ---- construction and getters ----------------------------------------------


def test_defaults_are_deepnvme_defaults():
    with nvswap.aio_handle() as h:
        assert h.get_block_size() == 1048576
        assert h.get_queue_depth() == 128
        assert h.get_single_submit() is False
        assert h.get_overlap_events() is False
        assert h.get_intra_op_parallelism() == 1
        assert h.get_alignment() == max(4096, os.sysconf("SC_PAGE_SIZE"))
        assert h.pending == 0
        assert h.closed is False
        assert h.backend in ("io_uring", "libaio", "psync")


def test_positional_order_and_keywords_are_deepnvme_ones():
    with nvswap.aio_handle(65536, 32, True, True, 3) as h:
        assert (h.get_block_size(), h.get_queue_depth()) == (65536, 32)
        assert (h.get_single_submit(), h.get_overlap_events()) == (True, True)
        assert h.get_intra_op_parallelism() == 3
    with nvswap.aio_handle(block_size=8192, queue_depth=4, single_submit=True,
                           overlap_events=False, intra_op_parallelism=2) as h:
        assert (h.get_block_size(), h.get_queue_depth()) == (8192, 4)
        assert (h.get_single_submit(), h.get_overlap_events()) == (True, False)
        assert h.get_intra_op_parallelism() == 2


def test_bad_settings_are_refused():
    for kw in ({"block_size": 0}, {"block_size": 1000}, {"queue_depth": 0},
               {"intra_op_parallelism": 0}):
        with pytest.raises(nvswap.Error) as ei:
            nvswap.aio_handle(**kw)
        assert ei.value.errno == errno.EINVAL, kw
    with pytest.raises(ValueError, match="out of range"):
        nvswap.aio_handle(block_size=-4096)
    with pytest.raises(ValueError, match="backend"):
        nvswap.aio_handle(backend="spdk")
    with pytest.raises(TypeError):
        nvswap.aio_handle(1, 2, 3, 4, 5, "psync")  # backend is keyword-only


def test_argument_errors_name_the_argument():
    with nvswap.aio_handle() as h:
        with pytest.raises(TypeError,
                           match=r"sync_pread\(\) missing required argument "
                                 r"'filename' \(pos 2\)"):
            h.sync_pread(bytearray(1))
        with pytest.raises(TypeError, match="missing required argument 'tensor'"):
            h.free_cpu_locked_tensor()
        with pytest.raises(TypeError, match="unexpected keyword argument 'x'"):
            h.async_pread(bytearray(1), "f", x=1)
        with pytest.raises(TypeError, match="at most 3 positional"):
            h.sync_pread(bytearray(1), "f", 0, 0)


# ---- read/write/pread/pwrite and their return values -----------------------


def test_write_and_read_return_zero_and_validate_passes(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(3 * MiB + 123)
    with nvswap.aio_handle() as h:
        assert h.write(data, p, True) == 0
        assert slurp(p) == data
        buf = bytearray(len(data))
        assert h.read(buf, p, True) == 0
        assert buf == data
        small = bytearray(1000)
        assert h.read(small, p, False, file_offset=4097) == 0
        assert small == data[4097:5097]
        assert h.write(buffer=b"xyz", filename=p, validate=True,
                       file_offset=10) == 0
        assert slurp(p) == data[:10] + b"xyz" + data[13:]


def test_validate_finds_a_corrupted_file_after_a_write(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(MiB)
    with nvswap.aio_handle() as h:
        # async, so the file can be changed between the write and the
        # check done when wait() collects it
        assert h.pwrite(data, p, True, True) == 0
        eventually(lambda: slurp(p) == data, "the write")
        with open(p, "r+b") as f:
            f.seek(300001)
            f.write(bytes([data[300001] ^ 0xFF]))
        with pytest.raises(nvswap.Error) as ei:
            h.wait()
        assert type(ei.value) is nvswap.Error
        assert ei.value.errno == errno.EBADMSG
        assert "300001" in str(ei.value) and p in str(ei.value)
        assert h.pending == 0


def test_validate_finds_a_corrupted_file_after_a_read(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(MiB)
    put(p, data)
    with nvswap.aio_handle() as h:
        buf = bytearray(MiB)
        op = h.submit_read(buf, p, validate=True)
        eventually(lambda: buf == data, "the read")
        with open(p, "r+b") as f:
            f.write(b"\0" * 7 if data[:7] != b"\0" * 7 else b"\1" * 7)
        with pytest.raises(nvswap.Error) as ei:
            op.wait()
        assert ei.value.errno == errno.EBADMSG
        assert "differs" in str(ei.value)


def test_pread_pwrite_return_values(diskdir):
    a, b, c = rand(MiB), rand(5000), rand(4096)
    pa, pb, pc = (os.path.join(diskdir, n) for n in "abc")
    with nvswap.aio_handle() as h:
        assert h.wait() == 0  # nothing pending: 0 (DeepNVMe asserts)
        assert h.pwrite(a, pa, False, True) == 0
        assert h.pwrite(b, pb, False, True) == 0
        assert h.pending == 2
        # sync: this op and the two pending before it
        assert h.pwrite(c, pc, False, False) == 3
        assert h.pending == 0
        assert h.wait() == 0
        assert (slurp(pa), slurp(pb), slurp(pc)) == (a, b, c)
        ra, rb = bytearray(len(a)), bytearray(len(b))
        assert h.pread(ra, pa, False, True) == 0
        assert h.wait() == 1
        assert ra == a
        assert h.pread(rb, pb, False, False) == 1
        assert rb == b


def test_sync_and_async_variants(diskdir):
    # Ops in flight together may complete in any order (nvs_aio_submit),
    # so none of them reads a file another one writes.
    p, q, w = (os.path.join(diskdir, n) for n in ("p", "q", "w"))
    d1, d2 = rand(2 * MiB), rand(12345)
    with nvswap.aio_handle() as h:
        assert h.sync_pwrite(d1, p) == 1
        assert h.sync_pwrite(d2, q) == 1
        assert h.async_pwrite(d2, w) == 0
        r1 = bytearray(len(d1))
        assert h.async_pread(r1, p) == 0
        assert h.pending == 2
        r2 = bytearray(len(d2))
        assert h.sync_pread(r2, q) == 3
        same = (r1 == d1, r2 == d2, slurp(w) == d2)  # no 2 MiB diffs
        assert same == (True, True, True)
        assert h.wait() == 0
        # keyword forms with DeepSpeed's names
        assert h.sync_pwrite(buffer=d2, filename=q, file_offset=1) == 1
        assert h.async_pread(buffer=r2, filename=q, file_offset=1) == 0
        assert h.wait() == 1
        assert r2 == d2


def test_async_keyword(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(70000)
    with nvswap.aio_handle() as h:
        assert h.pwrite(data, p, False, **{"async": True}) == 0
        assert h.wait() == 1
        buf = bytearray(len(data))
        assert h.pread(buffer=buf, filename=p, validate=False,
                       **{"async": False}, file_offset=0) == 1
        assert buf == data


# ---- offsets and file sizes -------------------------------------------------


def test_write_at_an_offset_extends_a_new_file_with_zeros(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(5000)
    with nvswap.aio_handle() as h:
        assert h.sync_pwrite(data, p, 3 * 4096 + 7) == 1
    assert slurp(p) == bytes(3 * 4096 + 7) + data


def test_unaligned_writes_keep_the_rest_of_the_file(diskdir):
    p = os.path.join(diskdir, "f")
    base = rand(64 * KiB)
    put(p, base)
    with nvswap.aio_handle() as h:
        # inside: size unchanged, only the range changed
        new = rand(1000)
        assert h.sync_pwrite(new, p, 12345) == 1
        expect = base[:12345] + new + base[13345:]
        assert slurp(p) == expect
        # a small write at 0 never truncates
        assert h.sync_pwrite(b"ab", p, 0) == 1
        expect = b"ab" + expect[2:]
        assert slurp(p) == expect
        # across the end: extended to exactly offset + size
        tail = rand(5000)
        assert h.sync_pwrite(tail, p, 63000) == 1
        expect = expect[:63000] + tail
        assert slurp(p) == expect and os.path.getsize(p) == 68000
        # unaligned reads anywhere
        for off, n in ((1, 4095), (4097, 777), (60000, 8000), (0, 68000)):
            buf = bytearray(n)
            assert h.sync_pread(buf, p, off) == 1
            assert buf == expect[off:off + n], (off, n)


# ---- file descriptors --------------------------------------------------------


def test_async_pwrite_to_an_fd_positional_and_keyword(diskdir):
    p = os.path.join(diskdir, "f")
    d1, d2 = rand(MiB), rand(3333)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with nvswap.aio_handle() as h:
            assert h.async_pwrite(d1, fd) == 0
            assert h.async_pwrite(d2, fd=fd, file_offset=MiB) == 0
            assert h.wait() == 2
            assert slurp(p) == d1 + d2
            buf = bytearray(len(d2))
            assert h.sync_pread(buf, fd, MiB) == 1
            assert buf == d2
            assert h.submit_read(buf, fd, 5).wait() == len(d2)
            assert buf == d1[5:5 + len(d2)]
    finally:
        os.close(fd)


def test_an_o_direct_fd_takes_unaligned_ops(diskdir):
    p = os.path.join(diskdir, "f")
    put(p, bytes(8192))
    try:
        fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    except OSError as e:
        pytest.skip(f"O_DIRECT refused on {diskdir}: {e}")
    try:
        data = rand(1000)
        with nvswap.aio_handle() as h:
            assert h.sync_pwrite(data, fd, 5) == 1
            buf = bytearray(1000)
            assert h.sync_pread(buf, fd, 5) == 1
            assert buf == data
        assert slurp(p) == bytes(5) + data + bytes(8192 - 1005)
    finally:
        os.close(fd)


def test_bad_fds():
    with nvswap.aio_handle() as h:
        with pytest.raises(ValueError, match="file descriptor"):
            h.sync_pread(bytearray(10), -1)
        for flag in (True, False):  # ints, but never fds 1 and 0
            with pytest.raises(TypeError, match="not a bool"):
                h.sync_pwrite(b"oops", flag)
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        with pytest.raises(nvswap.Error) as ei:
            h.sync_pwrite(b"x" * 10, w)
        assert ei.value.errno == errno.EBADF
        assert h.pending == 0


# ---- module functions ---------------------------------------------------------


def test_aio_read_aio_write_deepspeed_memcpy(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(MiB + 99)
    assert nvswap.aio_write(data, p, 1048576, 128, False, False, True) == 0
    assert slurp(p) == data
    buf = bytearray(len(data))
    assert nvswap.aio_read(buf, p, 65536, 8, True, True, True) == 0
    assert buf == data
    head = bytearray(100)  # the file may be longer than the buffer
    assert nvswap.aio_read(head, p, 1048576, 128, False, False, False) == 0
    assert head == data[:100]
    with pytest.raises(nvswap.FileNotFoundError):
        nvswap.aio_read(buf, p + ".missing", 1048576, 128, False, False, False)
    with pytest.raises(ValueError, match="positive"):
        nvswap.aio_read(buf, p, 0, 128, False, False, False)
    dest = bytearray(len(data))
    assert nvswap.deepspeed_memcpy(dest, data) == 0
    assert dest == data
    with pytest.raises(ValueError, match="dest has"):
        nvswap.deepspeed_memcpy(bytearray(5), data)
    with pytest.raises(ValueError, match="read-only"):
        nvswap.deepspeed_memcpy(b"12345", b"abcde")


# ---- stats, close, context manager -------------------------------------------


def test_stats_count_a_known_sequence(diskdir, full_disk):
    p, q = os.path.join(diskdir, "p"), os.path.join(diskdir, "q")
    with nvswap.aio_handle(backend="psync", direct=False) as h:
        assert counters(h) == (0, 0, 0, 0, 0)
        h.sync_pwrite(rand(2 * MiB), p)
        assert counters(h) == (1, 0, 0, 2 * MiB, 2)
        h.async_pwrite(rand(4096), q)
        h.async_pwrite(rand(4096), q, 4096)
        h.wait()
        assert counters(h) == (3, 0, 0, 2 * MiB + 8192, 4)
        h.sync_pread(bytearray(2 * MiB), p)
        assert counters(h) == (4, 0, 2 * MiB, 2 * MiB + 8192, 6)
        # refused at submit: never an op
        with pytest.raises(nvswap.FileNotFoundError):
            h.sync_pread(bytearray(10), p + ".missing")
        assert counters(h) == (4, 0, 2 * MiB, 2 * MiB + 8192, 6)
        # failed in flight: completed and failed
        with pytest.raises(nvswap.Error):
            h.sync_pwrite(b"x" * 10, full_disk)
        st = h.stats()
        assert (st["ops_completed"], st["ops_failed"]) == (5, 1)
        assert st["bytes_written"] == 2 * MiB + 8192
        assert st["backend"] == "psync" and st["backend_reason"] == "explicit"
        assert isinstance(st["backend_notes"], str)


def test_small_sync_ops_run_on_the_calling_thread(diskdir, full_disk):
    # No worker hand-off for a small sync op on an idle handle
    # (nvs_aio_submit_wait); buffered, so any bytearray qualifies.
    p = os.path.join(diskdir, "small")
    data = rand(4096)
    with nvswap.aio_handle(direct=False) as h:
        assert h.sync_pwrite(data, p) == 1
        buf = bytearray(4096)
        assert h.sync_pread(buf, p) == 1
        assert buf == data
        st = h.stats()
        assert (st["inline_ops"], st["requests"]) == (2, 0)
        assert counters(h)[:4] == (2, 0, 4096, 4096)
        # Another op pending: the sync one goes through the workers too.
        h.async_pread(bytearray(4096), p)
        assert h.sync_pread(buf, p) == 2
        assert h.stats()["inline_ops"] == 2
        # Larger than inline_max (64 KiB by default): a worker.
        big = rand(1 * MiB)
        assert h.sync_pwrite(big, p) == 1
        assert h.stats()["inline_ops"] == 2
        with pytest.raises(nvswap.Error) as e:
            h.sync_pwrite(b"x" * 10, full_disk)
        assert e.value.errno == errno.ENOSPC
        assert "caller's thread" in str(e.value)
        assert h.stats()["inline_ops"] == 3


def test_close_is_idempotent_and_io_after_close_raises(diskdir):
    p = os.path.join(diskdir, "f")
    h = nvswap.aio_handle()
    h.async_pwrite(rand(MiB), p)
    h.close()  # waits for it
    assert os.path.getsize(p) == MiB
    h.close()
    assert h.closed is True and h.pending == 0
    calls = [lambda: h.sync_pread(bytearray(1), p),
             lambda: h.async_pwrite(b"x", p), lambda: h.read(bytearray(1), p, False),
             lambda: h.pwrite(b"x", p, False, True), lambda: h.wait(),
             lambda: h.submit_read(bytearray(1), p), lambda: h.get_block_size(),
             lambda: h.get_alignment(), lambda: h.stats(), lambda: h.backend,
             lambda: h.is_pinned(bytearray(1)), h.__enter__]
    for call in calls:
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(RuntimeError, match="twice"):
        nvswap.aio_handle.__init__(nvswap.aio_handle())


def test_context_manager_drains_on_exit(diskdir):
    p = os.path.join(diskdir, "f")
    data = rand(4 * MiB)
    with nvswap.aio_handle() as h:
        h.async_pwrite(data, p)
    assert h.closed and slurp(p) == data
    with pytest.raises(KeyError):
        with nvswap.aio_handle() as h2:
            h2.async_pwrite(data[:MiB], p, 4 * MiB)
            raise KeyError("x")
    assert h2.closed and slurp(p) == data + data[:MiB]


def test_close_raises_a_failure_nobody_waited_for(diskdir, full_disk):
    h = nvswap.aio_handle(backend="psync", direct=False)
    assert h.async_pwrite(b"y" * 4096, full_disk) == 0
    with pytest.raises(nvswap.Error) as ei:
        h.close()
    assert ei.value.errno == errno.ENOSPC and full_disk in str(ei.value)
    assert h.closed
    h.close()


# ---- parallelism, many ops, backends ------------------------------------------


@pytest.mark.parametrize("par", [2, 3, 4])
def test_intra_op_parallelism_with_sizes_not_divisible(diskdir, par):
    p = os.path.join(diskdir, "f")
    n = MiB + 12345
    data = rand(n)
    with nvswap.aio_handle(block_size=8192, intra_op_parallelism=par) as h:
        assert h.get_intra_op_parallelism() == par
        assert h.sync_pwrite(data, p, 333) == 1
        assert slurp(p) == bytes(333) + data
        buf = bytearray(n)
        assert h.async_pread(buf, p, 333) == 0
        assert h.wait() == 1
        assert buf == data
        odd = bytearray(7)
        assert h.sync_pread(odd, p, 335) == 1
        assert odd == data[2:9]


@pytest.mark.parametrize("max_ops", [0, 8])
def test_more_async_ops_than_op_slots_before_one_wait(diskdir, max_ops):
    p = os.path.join(diskdir, "f")
    n, sz = (1500, 4096) if max_ops == 0 else (100, 1000)
    slots = max_ops or 1024
    data = rand(n * sz)
    src = memoryview(data)
    with nvswap.aio_handle(max_ops=max_ops) as h:
        for i in range(n):
            assert h.async_pwrite(src[i * sz:(i + 1) * sz], p, i * sz) == 0
        assert h.pending == n
        assert h.wait() == n
        assert h.pending == 0
        assert slurp(p) == data
        buf = bytearray(n * sz)
        dst = memoryview(buf)
        ops = [h.submit_read(dst[i * sz:(i + 1) * sz], p, i * sz)
               for i in range(n)]
        # submits past the slots found them all holding finished tickets:
        # those ops were collected early (done, still counted by wait)
        early = sum(repr(o).endswith(": done>") for o in ops)
        print(f"{early} of {n} ops collected early ({slots} slots)")
        assert early >= n - slots
        assert h.pending == n
        assert h.wait() == n
        assert all(o.wait() == sz for o in ops)
        del dst, ops
        assert buf == data


@pytest.mark.parametrize("backend", ["io_uring", "libaio", "psync"])
def test_each_backend_round_trips(diskdir, backend, monkeypatch):
    monkeypatch.setenv("NVSWAP_BACKEND", "psync" if backend != "psync"
                       else "libaio")  # an explicit backend wins
    try:
        h = nvswap.aio_handle(backend=backend)
    except nvswap.Error as e:
        if e.errno != errno.EOPNOTSUPP:
            raise
        print(f"{backend} refused here: {e}")
        pytest.skip(f"{backend} is not available here: {e.strerror}")
    p = os.path.join(diskdir, "f")
    data = rand(2 * MiB + 5)
    with h:
        assert h.backend == backend
        st = h.stats()
        assert (st["backend"], st["backend_reason"]) == (backend, "explicit")
        assert h.async_pwrite(data, p, 3) == 0
        assert h.wait() == 1
        buf = bytearray(len(data))
        assert h.sync_pread(buf, p, 3) == 1
        assert buf == data
