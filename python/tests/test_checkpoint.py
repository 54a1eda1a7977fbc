# SPDX-License-Identifier: MIT
"""nvswap.save and nvswap.CkptWriter: torch.load reads back what was
saved, unchanged; the file appears under its name only when complete;
errors carry errno and the library's sentence."""
import errno
import io
import os
import threading

import pytest

import nvswap

torch = pytest.importorskip("torch")


def state_dict():
    g = torch.Generator().manual_seed(7)
    big = torch.randn(1 << 20, generator=g)  # 4 MiB: several buffers
    return {
        "w": torch.randn(257, 129, generator=g),
        "half": torch.randn(33, 7, generator=g).half(),
        "bf16": torch.randn(5, 3, generator=g).to(torch.bfloat16),
        "i64": torch.arange(1001),
        "u8": torch.randint(0, 255, (4097,), dtype=torch.uint8, generator=g),
        "bool": torch.tensor([True, False, True]),
        "f64": torch.randn(3, 3, generator=g, dtype=torch.float64),
        "transposed": torch.randn(64, 48, generator=g).t(),
        "strided": torch.arange(300.0)[::7],
        "empty": torch.zeros(0, 5),
        "scalar": torch.tensor(3.5),
        "big": big,
        "view_of_big": big[10:20],
        "nested": {"step": 12, "lr": [1e-3, torch.ones(2)], "name": "adam"},
    }


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.stride() == b.stride()
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def load(path):
    return torch.load(path)


def test_save_reads_back_unchanged_with_torch_load(diskdir):
    sd = state_dict()
    path = os.path.join(diskdir, "ckpt.pt")
    h = nvswap.save(sd, path)
    assert h.wait() is True
    assert h.done()
    back = load(path)
    assert_same(sd, back)
    # views share storage after the load, as with torch.save
    assert back["view_of_big"].data_ptr() == back["big"].data_ptr() + 40
    assert [n for n in os.listdir(diskdir) if ".tmp." in n] == []


def test_save_writes_the_bytes_torch_save_writes_to_a_file_object(diskdir):
    # (torch.save to a path names the archive after the file; to a file
    # object, as here and in nvswap.save, "archive")
    sd = state_dict()
    path = os.path.join(diskdir, "b.pt")
    ref = io.BytesIO()
    torch.save(sd, ref)
    nvswap.save(sd, path, buffer_size=4096, buffer_count=2).wait()
    with open(path, "rb") as f:
        assert f.read() == ref.getvalue()


def test_save_of_a_plain_object_and_options(diskdir):
    path = os.path.join(diskdir, "obj.pt")
    obj = [1, "two", {"three": (3.0, None)}, torch.tensor([4])]
    h = nvswap.save(obj, path, fsync=False, size_hint=0, background=False)
    assert h.done()
    assert h.wait()
    assert_same(obj, load(path))


def test_failed_pickling_leaves_the_previous_file_and_no_temp(diskdir):
    path = os.path.join(diskdir, "prev.pt")
    with open(path, "wb") as f:
        f.write(b"previous")
    h = nvswap.save({"t": torch.ones(1000), "bad": threading.Lock()}, path)
    with pytest.raises(TypeError):
        h.wait()
    with open(path, "rb") as f:
        assert f.read() == b"previous"
    assert [n for n in os.listdir(diskdir) if ".tmp." in n] == []


def test_file_is_absent_under_its_name_until_complete(diskdir, monkeypatch):
    path = os.path.join(diskdir, "late.pt")
    started, release = threading.Event(), threading.Event()
    real = nvswap.checkpoint.CkptWriter

    class Slow:
        def __init__(self, *a, **k):
            self.w = real(*a, **k)

        def write(self, b):
            started.set()
            release.wait(30)
            return self.w.write(b)

        def __getattr__(self, name):
            return getattr(self.w, name)

    monkeypatch.setattr(nvswap.checkpoint, "CkptWriter", Slow)
    h = nvswap.save({"x": torch.arange(100000)}, path)
    assert started.wait(30)
    assert not h.done()
    assert not os.path.exists(path)
    temps = [n for n in os.listdir(diskdir) if n.startswith("late.pt.tmp.")]
    assert len(temps) == 1
    release.set()
    h.wait()
    assert os.listdir(diskdir) == ["late.pt"]
    assert torch.equal(load(path)["x"], torch.arange(100000))


def test_ckpt_writer_bytes_buffers_and_tensors(diskdir):
    path = os.path.join(diskdir, "raw.bin")
    parts = [b"", b"a", bytes(range(256)) * 17, bytearray(b"xyz" * 5000),
             memoryview(b"0123456789")[3:7],
             torch.arange(1000, dtype=torch.int16)]
    want = b"".join(bytes(p) if not isinstance(p, torch.Tensor)
                    else p.numpy().tobytes() for p in parts)
    with nvswap.CkptWriter(path, buffer_size="4K", buffer_count=3) as w:
        tmp = w.temp_path
        assert tmp.startswith(path + ".tmp.")
        n = sum(w.write(p) for p in parts)
        assert n == len(want) == w.tell()
        assert not os.path.exists(path)
        assert w.writable() and not w.seekable() and not w.readable()
    assert w.closed and w.temp_path is None and w.tell() == len(want)
    w.close()  # a no-op
    with open(path, "rb") as f:
        assert f.read() == want
    assert not os.path.exists(tmp)
    with pytest.raises(ValueError, match="closed"):
        w.write(b"more")
    with pytest.raises(ValueError, match="contiguous"):
        nvswap.CkptWriter(path + "2").write(torch.ones(4, 4).t())


def test_ckpt_writer_abort_and_exception_keep_the_previous_file(diskdir):
    path = os.path.join(diskdir, "keep.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    w = nvswap.CkptWriter(path)
    w.write(b"new" * 100000)
    w.abort()
    with pytest.raises(RuntimeError):
        with nvswap.CkptWriter(path) as w:
            w.write(b"new")
            raise RuntimeError("step failed")
    w = nvswap.CkptWriter(path)
    w.write(b"new")
    del w  # dropped unclosed: aborted, never published
    with open(path, "rb") as f:
        assert f.read() == b"old"
    assert os.listdir(diskdir) == ["keep.bin"]


def test_ckpt_writer_bad_options(diskdir):
    path = os.path.join(diskdir, "x.bin")
    with pytest.raises(nvswap.Error) as ei:
        nvswap.CkptWriter(path, buffer_size=1000)
    assert ei.value.errno == errno.EINVAL
    assert "buffer_size 1000" in ei.value.strerror
    with pytest.raises(nvswap.Error):
        nvswap.CkptWriter(path, buffer_count=1)
    with pytest.raises(ValueError, match="direct"):
        nvswap.CkptWriter(path, direct="sometimes")
    with pytest.raises(TypeError):
        nvswap.CkptWriter(path, 4096)  # options are keywords
    assert os.listdir(diskdir) == []
