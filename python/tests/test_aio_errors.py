# SPDX-License-Identifier: MIT
"""nvswap.aio_handle's failures: nvswap.Error (an OSError with the errno
and the C library's sentence) where DeepNVMe returns -1, asserts or drops
the error; ValueError/TypeError for arguments that never reach C."""
import errno
import os

import pytest

import nvswap
from filehelp import put, rand, slurp

MiB = 1 << 20


def test_missing_file_is_file_not_found(diskdir):
    missing = os.path.join(diskdir, "no-such-file")
    with nvswap.aio_handle() as h:
        calls = [lambda: h.sync_pread(bytearray(10), missing),
                 lambda: h.async_pread(bytearray(10), missing),
                 lambda: h.pread(bytearray(10), missing, False, True),
                 lambda: h.read(bytearray(10), missing, False),
                 lambda: h.submit_read(bytearray(10), missing),
                 lambda: h.sync_pwrite(b"x", os.path.join(missing, "f"))]
        for call in calls:
            with pytest.raises(nvswap.FileNotFoundError) as ei:
                call()
            e = ei.value
            assert isinstance(e, FileNotFoundError)
            assert isinstance(e, nvswap.Error)
            assert e.errno == errno.ENOENT
            assert missing in str(e) and missing in e.strerror
            assert h.pending == 0
        assert h.stats()["ops_completed"] == 0


def test_paths_may_be_str_bytes_or_pathlike_and_a_directory_is_refused(diskdir):
    import pathlib
    p = os.path.join(diskdir, "f")
    with nvswap.aio_handle() as h:
        assert h.sync_pwrite(b"abc", pathlib.Path(p)) == 1
        buf = bytearray(3)
        assert h.sync_pread(buf, os.fsencode(p)) == 1 and buf == b"abc"
        for call in (lambda: h.sync_pread(buf, diskdir),
                     lambda: h.sync_pwrite(b"x", diskdir)):
            with pytest.raises(nvswap.IsADirectoryError) as ei:
                call()
            assert isinstance(ei.value, IsADirectoryError)
            assert ei.value.errno == errno.EISDIR and diskdir in str(ei.value)


def test_read_past_the_end_is_einval_and_leaves_the_buffer(diskdir):
    p = os.path.join(diskdir, "f")
    put(p, rand(10000))
    with nvswap.aio_handle() as h:
        for off, n in ((0, 10001), (9999, 2), (20000, 1)):
            buf = bytearray(b"\xaa" * n)
            with pytest.raises(nvswap.Error) as ei:
                h.sync_pread(buf, p, off)
            assert type(ei.value) is nvswap.Error
            assert ei.value.errno == errno.EINVAL
            assert "end of the file" in str(ei.value)
            assert buf == b"\xaa" * n


def test_negative_offset_is_a_value_error(diskdir):
    p = os.path.join(diskdir, "f")
    put(p, bytes(4096))
    with nvswap.aio_handle() as h:
        for call in (lambda: h.sync_pread(bytearray(1), p, -1),
                     lambda: h.async_pwrite(b"x", p, -4096),
                     lambda: h.read(bytearray(1), p, False, -1),
                     lambda: h.pwrite(b"x", p, False, True, -2),
                     lambda: h.submit_read(bytearray(1), p, -1)):
            with pytest.raises(ValueError, match="negative"):
                call()
        assert h.pending == 0 and h.stats()["ops_completed"] == 0
        with pytest.raises(TypeError, match="integer"):
            h.sync_pread(bytearray(1), p, 1.5)
    assert slurp(p) == bytes(4096)


def test_a_failed_async_op_raises_at_wait_after_all_are_collected(diskdir,
                                                                  full_disk):
    p, q = os.path.join(diskdir, "p"), os.path.join(diskdir, "q")
    d1, d2 = rand(MiB), rand(MiB)
    with nvswap.aio_handle(backend="psync", direct=False) as h:
        assert h.async_pwrite(d1, p) == 0
        assert h.async_pwrite(b"z" * 8192, full_disk) == 0
        assert h.async_pwrite(d2, q) == 0
        assert h.pending == 3
        with pytest.raises(nvswap.Error) as ei:
            h.wait()
        assert ei.value.errno == errno.ENOSPC
        assert full_disk in str(ei.value)
        assert h.pending == 0
        assert (slurp(p), slurp(q)) == (d1, d2)
        st = h.stats()
        assert (st["ops_completed"], st["ops_failed"]) == (3, 1)
        assert h.wait() == 0
        # a sync call collects the earlier failure too, and raises it
        assert h.async_pwrite(b"z", full_disk) == 0
        with pytest.raises(nvswap.Error) as ei:
            h.sync_pwrite(d1[:100], q)
        assert ei.value.errno == errno.ENOSPC
        assert h.pending == 0 and slurp(q) == d1[:100] + d2[100:]

