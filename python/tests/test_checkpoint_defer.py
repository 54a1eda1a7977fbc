# SPDX-License-Identifier: MIT
"""Deferred copies in the checkpoint writer (CkptWriter(defer=True), the
default of nvswap.save): the bytes are torch.save's exactly, large writes
of objects the caller drops at once are still copied right, memory that
nothing owns is copied at once, and a failure in the writer's copy thread
raises at the next call or wait() with nothing published."""
import errno
import io
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

import nvswap

torch = pytest.importorskip("torch")
MiB = 1 << 20


class Box:
    """Tensors out of nvswap.save's sight (not in a dict, list or tuple):
    their storages are not held, so they are copied before write()
    returns."""

    def __init__(self, t):
        self.t = t


def big_state():
    g = torch.Generator().manual_seed(3)
    sd = {f"layer{i}.w": torch.randn((1 + i % 3) * MiB // 4 + i,
                                     generator=g)
          for i in range(12)}
    base = torch.randn(3 * MiB // 4, generator=g)
    sd.update({
        "small": torch.arange(100),
        "view": base[1000:2000],  # a view: its whole storage is written
        "base": base,
        "boxed": Box(torch.randn(2 * MiB // 4, generator=g)),
        "list": [torch.ones(MiB // 2), 7, "x"],
    })
    return sd


def reference(obj):
    f = io.BytesIO()
    torch.save(obj, f)
    return f.getvalue()


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("defer", [True, False])
def test_save_bytes_equal_torch_save_many_large_records(diskdir, defer):
    sd = big_state()
    path = os.path.join(diskdir, "big.pt")
    h = nvswap.save(sd, path, buffer_size="64K", buffer_count=2,
                    defer=defer)
    assert h.wait() is True
    data = read(path)
    assert data == reference(sd)
    with zipfile.ZipFile(path) as z:  # the CRCs are right (unzip -t)
        assert z.testzip() is None
    assert os.listdir(diskdir) == ["big.pt"]


def test_deferred_write_of_a_dropped_object_is_copied_right(diskdir):
    path = os.path.join(diskdir, "drop.bin")
    want = []
    with nvswap.CkptWriter(path, buffer_size="64K", buffer_count=2,
                           defer=True) as w:
        for i in range(24):
            n = MiB + 4096 * i + i
            if i % 3 == 0:
                b = bytes([i]) * n
            elif i % 3 == 1:
                b = bytearray(os.urandom(n))
            else:
                b = torch.full((n // 4,), float(i))
            want.append(bytes(b) if not isinstance(b, torch.Tensor)
                        else b.numpy().tobytes())
            assert w.write(b) == len(want[-1])
            del b  # the writer holds it until the copy is done
            junk = bytearray(b"\xee") * n  # reuse freed memory, if any
            del junk
            if i % 5 == 4:
                assert w.write(b"hdr" * i) == 3 * i  # small: queued too
                want.append(b"hdr" * i)
        assert w.tell() == sum(len(x) for x in want)
    assert read(path) == b"".join(want)


def test_writes_of_memory_nothing_owns_are_copied_at_once(diskdir):
    # A memoryview over raw memory (what torch.save passes) owns nothing:
    # without a _hold() range it is copied before write() returns, so the
    # memory may change right after.
    import ctypes

    path = os.path.join(diskdir, "raw.bin")
    n = 2 * MiB
    buf = ctypes.create_string_buffer(b"\x01" * n, n)
    raw = ctypes.pythonapi.PyMemoryView_FromMemory
    raw.restype = ctypes.py_object
    raw.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
    with nvswap.CkptWriter(path, buffer_size="64K", buffer_count=2,
                           defer=True) as w:
        for i in range(8):
            ctypes.memset(buf, i, n)
            w.write(raw(ctypes.addressof(buf), n, 0x100))  # PyBUF_READ
    assert read(path) == b"".join(bytes([i]) * n for i in range(8))


def test_hold_range_rejects_a_bad_range(diskdir):
    w = nvswap.CkptWriter(os.path.join(diskdir, "h.bin"), defer=True)
    with pytest.raises(ValueError, match="bad range"):
        w._hold(None, 0, 10)
    w.abort()
    with pytest.raises(ValueError, match="closed"):
        w._hold(None, 4096, 10)


def test_full_disk_in_the_copy_thread_raises_at_wait(small_tmpfs):
    path = os.path.join(small_tmpfs, "ckpt.pt")
    with open(path, "wb") as f:
        f.write(b"previous")
    sd = {f"t{i}": torch.full((MiB // 4,), float(i)) for i in range(8)}
    h = nvswap.save(sd, path, buffer_size="64K", buffer_count=2,
                    size_hint=0)
    with pytest.raises(nvswap.Error) as ei:
        h.wait()
    assert ei.value.errno == errno.ENOSPC
    assert "ckpt.pt.tmp." in ei.value.strerror
    assert read(path) == b"previous"
    assert os.listdir(small_tmpfs) == ["ckpt.pt"]


def test_ckpt_writer_full_disk_is_sticky_for_deferred_writes(small_tmpfs):
    path = os.path.join(small_tmpfs, "raw.bin")
    w = nvswap.CkptWriter(path, buffer_size="64K", buffer_count=2,
                          defer=True)
    with pytest.raises(nvswap.Error) as ei:
        for i in range(8):  # 8 MiB into 2 MiB; raised by a later write
            w.write(bytes([i]) * MiB)
        w.close()  # if every write was queued before the failure
    assert ei.value.errno == errno.ENOSPC
    with pytest.raises((nvswap.Error, ValueError)):
        w.write(b"x" * MiB)
    w.abort()
    assert os.listdir(small_tmpfs) == []


def test_save_without_crc32_loads_but_fails_the_zip_check(diskdir):
    sd = {"a": torch.arange(MiB), "b": torch.ones(7)}
    path = os.path.join(diskdir, "nocrc.pt")
    ser = torch.serialization
    if not hasattr(ser, "set_crc32_options"):
        with pytest.raises(ValueError, match="crc32=False needs torch"):
            nvswap.save(sd, path, crc32=False)
        return
    assert ser.get_crc32_options() is True
    nvswap.save(sd, path, crc32=False).wait()
    assert ser.get_crc32_options() is True  # restored
    back = torch.load(path)
    assert torch.equal(back["a"], sd["a"]) and torch.equal(back["b"], sd["b"])
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is not None  # the CRC fields are 0


@pytest.mark.parametrize("defer", [False, True])
def test_a_full_disk_mid_save_is_raised_once_and_torch_stays_sane(
        small_tmpfs, defer):
    """torch 1.13's zip writer checks its position when it writes the
    archive's end, and writes it again from its C++ destructor: a write
    that raised inside torch.save made that fail, terminating the process
    when the writer was freed. The error now surfaces after torch.save."""
    code = textwrap.dedent(f"""
        import gc, torch, nvswap
        sd = {{f"t{{i}}": torch.ones(1 << 18) for i in range(8)}}
        h = nvswap.save(sd, {str(small_tmpfs / "x.pt")!r},
                        buffer_size="64K", buffer_count=2, size_hint=0,
                        defer={defer})
        try:
            h.wait()
        except nvswap.Error as e:
            print("raised", e.errno, "x.pt.tmp." in str(e))
        del h
        gc.collect()
        print("freed")
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"raised {errno.ENOSPC} True\nfreed\n", (
        r.stdout + r.stderr)
    assert os.listdir(small_tmpfs) == []
