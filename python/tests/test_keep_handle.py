# SPDX-License-Identifier: MIT
"""nvswap.aio_handle against hostile input (issue 34, "keep what
works"): what the red-team round found holding, where no other test had
it. The rest of that list is kept by test_buffers.py, test_aio_errors.py,
test_aio_handle.py and test_lifetime.py (see docs/reliability.md)."""
import errno
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import nvswap
from filehelp import child_env, put, rand, run_threads, slurp

KiB = 1 << 10
MiB = 1 << 20


def mount_tmpfs(where, *opts):
    os.mkdir(where)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(opts),
                        "tmpfs", where], capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(where)
        pytest.skip("cannot mount a tmpfs here (needs root and "
                    f"CAP_SYS_ADMIN): {r.stderr.strip()}")


def umount(where):
    subprocess.run(["umount", "-l", where], check=False)


@pytest.fixture
def ro_mount(diskdir):
    """A read-only tmpfs holding one file, f = b"kept\\n"."""
    mnt = os.path.join(diskdir, "ro")
    mount_tmpfs(mnt, "size=1m")
    try:
        put(os.path.join(mnt, "f"), b"kept\n")
        r = subprocess.run(["mount", "-o", "remount,ro", mnt],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot remount read-only: {r.stderr.strip()}")
        yield mnt
    finally:
        umount(mnt)


# ---- buffers ----------------------------------------------------------------


def test_zero_size_tensors_arrays_and_buffers_move_nothing(diskdir):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    p, q = os.path.join(diskdir, "f"), os.path.join(diskdir, "new")
    data = rand(8192)
    put(p, data)
    with nvswap.aio_handle() as h:
        for buf in (torch.empty(0), torch.empty(0, 5, dtype=torch.int64),
                    np.empty(0), bytearray(), memoryview(bytearray(4))[:0]):
            assert h.sync_pread(buf, p, 100) == 1
            assert h.async_pread(buf, p) == 0
            assert h.wait() == 1
            assert h.sync_pwrite(buf, p, 4096) == 1
        assert h.sync_pwrite(torch.empty(0), q) == 1
        assert h.pending == 0
    assert slurp(p) == data  # no byte changed, not even the size
    assert slurp(q) == b""  # a write of nothing makes the file, empty


OBJECT_ARRAY_READ = """
    import ctypes, sys
    import nvswap
    p = sys.argv[1]
    arrays = [(ctypes.py_object * 4)()]
    try:
        import numpy
        arrays.append(numpy.empty(4, dtype=object))
    except ImportError:
        pass
    with nvswap.aio_handle() as h:
        for a in arrays:
            for call in (h.sync_pread, h.sync_pwrite):
                try:
                    call(a, p)
                    print("took", type(a).__name__, flush=True)
                except TypeError as e:
                    print("TypeError", e, flush=True)
            del a
    arrays.clear()  # frees what the read overwrote
    print("alive", flush=True)
"""


def test_a_buffer_of_object_pointers_is_refused(diskdir):
    """Was taken: a read overwrote the pointers and freeing the array
    crashed the process (SIGSEGV); now TypeError, for reads and
    writes."""
    p = os.path.join(diskdir, "f")
    put(p, b"\xa5" * 4096)
    r = subprocess.run([sys.executable, "-c",
                        textwrap.dedent(OBJECT_ARRAY_READ), p],
                       capture_output=True, text=True, env=child_env(),
                       timeout=120)
    lines = r.stdout.splitlines()
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert lines[-1] == "alive"
    assert len(lines) >= 3, lines  # ctypes, read and write
    assert all(ln.startswith("TypeError nvswap: the ") and
               "buffer holds Python object pointers (format 'O'), not "
               "data to read or write" in ln for ln in lines[:-1]), lines


# ---- offsets, descriptors, paths --------------------------------------------


def test_offsets_too_large_or_not_integers_are_refused(diskdir):
    p = os.path.join(diskdir, "f")
    put(p, bytes(4096))
    with nvswap.aio_handle() as h:
        for off in (2**63, 2**64, 2**100):
            with pytest.raises(OverflowError, match="int too big"):
                h.sync_pread(bytearray(10), p, off)
            with pytest.raises(OverflowError, match="int too big"):
                h.async_pwrite(b"x", p, off)
        with pytest.raises(nvswap.Error) as ei:
            h.sync_pread(bytearray(10), p, 2**63 - 1)
        assert ei.value.errno == errno.EINVAL
        assert str(ei.value) == (
            f"[Errno 22] nvs_aio read {p} offset {2**63 - 1} length 10: "
            "offset + length overflows")
        for off in ("3", None, 2.0):
            with pytest.raises(TypeError, match="file_offset must be an "
                               "integer, not " + type(off).__name__):
                h.sync_pread(bytearray(10), p, off)
        assert h.pending == 0 and h.stats()["ops_completed"] == 0
    assert slurp(p) == bytes(4096)


def test_descriptors_that_are_not_open_or_not_fds(diskdir):
    with nvswap.aio_handle() as h:
        with pytest.raises(nvswap.Error) as ei:
            h.sync_pread(bytearray(10), 99999)
        assert ei.value.errno == errno.EBADF
        assert "fd 99999 offset 0 length 10: not an open descriptor" in \
            str(ei.value)
        with pytest.raises(ValueError, match="1099511627776 is not a file "
                           "descriptor"):
            h.sync_pread(bytearray(10), 2**40)
        with pytest.raises(TypeError, match="not float"):
            h.sync_pread(bytearray(10), 1.5)
        p = os.path.join(diskdir, "f")
        for bad in (p + "\0x", os.fsencode(p) + b"\0x"):
            with pytest.raises(ValueError, match="embedded null byte"):
                h.sync_pwrite(b"x", bad)
        assert not os.path.exists(p)


def test_a_dangling_symlink_read_is_file_not_found(diskdir):
    link = os.path.join(diskdir, "link")
    os.symlink(os.path.join(diskdir, "absent"), link)
    buf = bytearray(b"\x5a" * 10)
    with nvswap.aio_handle() as h:
        for call in (lambda: h.sync_pread(buf, link),
                     lambda: h.async_pread(buf, link),
                     lambda: h.read(buf, link, False)):
            with pytest.raises(nvswap.FileNotFoundError) as ei:
                call()
            assert ei.value.errno == errno.ENOENT
            assert str(ei.value) == (
                f"[Errno 2] nvs_aio read {link} offset 0 length 10: open: "
                "No such file or directory")
        assert h.pending == 0
    assert buf == b"\x5a" * 10
    assert os.listdir(diskdir) == ["link"]


def test_bad_constructor_arguments_are_named():
    for kw, exc, text in (
            ({"block_size": "1M"}, TypeError,
             "block_size must be an integer, not str"),
            ({"block_size": None}, TypeError,
             "block_size must be an integer, not NoneType"),
            ({"block_size": 4096.0}, TypeError,
             "block_size must be an integer, not float"),
            ({"block_size": 2**70}, OverflowError, "int too big"),
            ({"queue_depth": 2**40}, ValueError,
             "queue_depth 1099511627776 is out of range")):
        with pytest.raises(exc, match=text):
            nvswap.aio_handle(**kw)
    with pytest.raises(nvswap.Error) as ei:
        nvswap.aio_handle(intra_op_parallelism=10**6)
    assert ei.value.errno == errno.EINVAL
    assert "intra_op_parallelism 1000000 must be 1..256" in str(ei.value)


def test_wait_on_a_fresh_handle_and_after_sync_ops_is_zero(diskdir):
    p = os.path.join(diskdir, "f")
    with nvswap.aio_handle() as h:
        assert h.wait() == 0
        assert h.wait() == 0
        assert h.sync_pwrite(b"abc", p) == 1
        assert h.wait() == 0
        assert h.pending == 0


# ---- threads ----------------------------------------------------------------


def test_eight_threads_on_one_handle_read_and_write_their_own_bytes(
        diskdir):
    p = os.path.join(diskdir, "f")
    nthreads, rounds, sz = 8, 12, 64 * KiB + 512  # unaligned slices too
    data = rand(nthreads * rounds * sz)
    put(p, bytes(len(data)))
    got = [None] * nthreads
    errors = []
    with nvswap.aio_handle(block_size=64 * KiB, intra_op_parallelism=3) as h:
        start = threading.Barrier(nthreads)

        def worker(t):
            try:
                start.wait()
                mine = []
                for r in range(rounds):
                    off = (r * nthreads + t) * sz
                    chunk = data[off:off + sz]
                    if r % 3 == 0:
                        assert h.sync_pwrite(chunk, p, off) == 1
                    elif r % 3 == 1:
                        assert h.async_pwrite(chunk, p, off) == 0
                        h.wait()
                    else:
                        op = h.submit_write(chunk, p, off)
                        op.wait()
                    back = bytearray(sz)
                    assert h.sync_pread(back, p, off) == 1
                    mine.append(bytes(back) == chunk)
                got[t] = mine
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)

        run_threads(worker, nthreads, 120)
        assert errors == []
        assert got == [[True] * rounds] * nthreads
        h.wait()
        assert h.pending == 0 and h.stats()["ops_failed"] == 0
    assert slurp(p) == data


# ---- file systems that refuse -----------------------------------------------


def test_a_full_tmpfs_is_enospc_and_leaves_no_partial_file(small_tmpfs):
    f, g = str(small_tmpfs / "f"), str(small_tmpfs / "g")
    with nvswap.aio_handle() as h:
        with pytest.raises(nvswap.Error) as ei:
            h.sync_pwrite(rand(4 * MiB), f)
        assert ei.value.errno == errno.ENOSPC
        assert str(ei.value) == (
            f"[Errno 28] nvs_aio write {f} offset 0 length {4 * MiB}: "
            "preallocating: No space left on device")
        with pytest.raises(nvswap.Error) as ei:
            h.async_pwrite(rand(4 * MiB), g)
        assert ei.value.errno == errno.ENOSPC
        assert h.pending == 0 and h.wait() == 0
        # what fits still goes
        data = rand(MiB)
        assert h.sync_pwrite(data, g) == 1
    assert os.path.getsize(f) == 0
    assert slurp(g) == data


def test_a_read_only_mount_is_erofs_and_reads_still_work(ro_mount):
    f, new = os.path.join(ro_mount, "f"), os.path.join(ro_mount, "new")
    with nvswap.aio_handle() as h:
        for path in (f, new):
            for call in (lambda: h.sync_pwrite(b"abc", path),
                         lambda: h.async_pwrite(b"abc", path),
                         lambda: h.write(b"abc", path, False)):
                with pytest.raises(nvswap.Error) as ei:
                    call()
                assert ei.value.errno == errno.EROFS
                assert str(ei.value) == (
                    f"[Errno 30] nvs_aio write {path} offset 0 length 3: "
                    "open: Read-only file system")
        assert h.pending == 0
        buf = bytearray(5)
        assert h.sync_pread(buf, f) == 1 and buf == b"kept\n"
    assert sorted(os.listdir(ro_mount)) == ["f"]
