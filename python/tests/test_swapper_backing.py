# SPDX-License-Identifier: MIT
"""nvswap.Swapper's file-backed tensors (nvswap/backing.h): add_file()
and register_file() read pieces of a file as it holds them (unaligned
offsets, gaps as zeros) with nothing written, a changed file raises
ESTALE naming it, and bad pieces are refused naming them."""
import errno
import os

import pytest

import nvswap
from filehelp import pattern, raises_errno
from filehelp import swap_read as read

MiB = 1 << 20


@pytest.fixture
def weights(swapdir):
    """A 3 MiB + 5 byte file of a pattern: (path, its bytes)."""
    data = pattern(3 * MiB + 5, 4)
    path = os.path.join(swapdir, "w.bin")
    with open(path, "wb") as f:
        f.write(data)
    return path, data


def swapper(swapdir, **kw):
    return nvswap.Swapper(nvme_path=os.path.join(swapdir, "swap"),
                          buffer_size=2 * MiB, buffer_count=2, **kw)


def test_pieces_read_back_from_the_file_and_nothing_is_written(swapdir,
                                                               weights):
    path, data = weights
    with swapper(swapdir) as s:
        f = s.add_file(path, head=8)
        assert f == 0
        pieces = [(f, 12345, 70000, 4096), (f, 0, 100, 0),
                  (f, len(data) - 9, 9, 80000)]
        s.register_file(7, 90000, pieces)
        want = bytearray(90000)
        for _, off, n, at in pieces:
            want[at:at + n] = data[off:off + n]
        assert s.info(7)["backed"] is True
        assert read(s, 7) == bytes(want)
        out = bytearray(90000)
        s.read(7, out)
        assert out == want
        st = s.stats()
        assert st["file_reads"] == 2
        assert st["file_bytes_read"] == 2 * (70000 + 100 + 9)
        assert st["bytes_written"] == 0 and st["bytes_read"] == 0
        assert st["files_buffered"] == 0


def test_a_changed_file_raises_estale_naming_it(swapdir, weights):
    path, data = weights
    with swapper(swapdir) as s:
        s.register_file(1, 5000, [(s.add_file(path), 0, 5000, 0)])
        os.truncate(path, 100)
        e = raises_errno(errno.ESTALE, read, s, 1)
        assert f"tensor 1: {path} changed" in str(e)
        assert "not handed out" in str(e)


def test_bad_pieces_and_files_are_refused(swapdir, weights):
    path, _ = weights
    with swapper(swapdir) as s:
        raises_errno(errno.ENOENT, s.add_file, path + ".none")
        e = raises_errno(errno.EINVAL, s.add_file, swapdir)
        assert "not a regular file" in str(e)
        f = s.add_file(path)
        e = raises_errno(errno.EINVAL, s.register_file, 1, 100,
                         [(f, 0, 50, 0), (f, 0, 50, 20)])
        assert "the pieces at 0 and 20 overlap" in str(e)
        e = raises_errno(errno.EINVAL, s.register_file, 1, 100,
                         [(f + 1, 0, 1, 0)])
        assert "names no added file" in str(e)
        raises_errno(errno.EINVAL, s.register_file, 1, 100, [])
        with pytest.raises(TypeError, match="piece 0 must be a"):
            s.register_file(1, 100, [(f, 0, 50)])
        with pytest.raises(ValueError):
            s.register_file(1, 100, [(f, -1, 50, 0)])
    with nvswap.Swapper(nvme_path=swapdir, name="set", buffer_size=MiB,
                        buffer_count=1, persist="persistent") as s:
        raises_errno(errno.EOPNOTSUPP, s.add_file, path)
        s.discard()


def test_a_parameter_layer_streams_from_its_file(swapdir, weights):
    torch = pytest.importorskip("torch", reason="typed layers need torch")
    path, data = weights
    with swapper(swapdir) as s:
        f = s.add_file(path)
        with nvswap.ParamSwapper(s, max_in_cpu=1 << 30) as p:
            like = [torch.empty(10, 4, dtype=torch.float32, device="meta"),
                    torch.empty(3, dtype=torch.int64, device="meta")]
            p.add_layer(0, like, sources=[(f, 1000), None])
            w, z = p.acquire_layer(0)
            assert w.dtype == torch.float32 and w.shape == (10, 4)
            want = torch.frombuffer(bytearray(data[1000:1160]),
                                    dtype=torch.float32).reshape(10, 4)
            assert torch.equal(w, want)
            assert torch.equal(z, torch.zeros(3, dtype=torch.int64))
            del w, z
            p.release_layer(0, False)
            assert s.stats()["bytes_written"] == 0
            with pytest.raises(ValueError, match="1 sources for 2"):
                p.add_layer(1, like, sources=[(f, 0)])
            with pytest.raises(TypeError, match="source 0 must be"):
                p.add_layer(1, like, sources=[f, None])
