# SPDX-License-Identifier: MIT
"""nvswap.save before it returns: the missing parents of the path made
(0700), a file in the way, a directory as the target, an unwritable or
full disk refused by save() itself with errno and the path, never only
at wait(); and a file saved over keeps its mode and owner."""
import errno
import os
import stat
import subprocess
import threading

import pytest

import nvswap

torch = pytest.importorskip("torch")


@pytest.fixture
def umask():
    """Set the umask for one test; the old one back afterwards."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_missing_parents_are_made_0700(diskdir, umask):
    os.chmod(diskdir, 0o755)
    path = os.path.join(diskdir, "ckpt", "run", "step-1000.pt")
    h = nvswap.save({"x": torch.arange(10)}, path)
    assert h.wait() is True
    assert mode(os.path.join(diskdir, "ckpt")) == 0o700
    assert mode(os.path.join(diskdir, "ckpt", "run")) == 0o700
    assert mode(diskdir) == 0o755  # an existing level is left as it is
    assert torch.equal(torch.load(path)["x"], torch.arange(10))
    assert mode(path) == 0o644  # a new file: 0666 less the umask


def test_a_file_in_the_way_is_refused_by_save_itself(diskdir):
    f = os.path.join(diskdir, "f")
    with open(f, "wb") as fh:
        fh.write(b"x")
    path = os.path.join(f, "ckpt", "step.pt")
    with pytest.raises(nvswap.Error) as ei:
        nvswap.save({"x": torch.ones(3)}, path)  # raises, no handle
    assert ei.value.errno == errno.ENOTDIR
    assert isinstance(ei.value, NotADirectoryError)
    assert ei.value.strerror == f"nvswap.save: {path}: {f} is not a directory"
    assert os.listdir(diskdir) == ["f"]


@pytest.mark.parametrize("slash", ["", "/"])
def test_a_directory_as_the_target_is_refused_before_any_write(diskdir,
                                                               slash):
    target = os.path.join(diskdir, "ckpt")
    os.mkdir(target)
    with pytest.raises(nvswap.Error) as ei:
        nvswap.save({"x": torch.ones(1 << 20)}, target + slash)
    assert ei.value.errno == errno.EISDIR
    assert isinstance(ei.value, IsADirectoryError)
    assert target in ei.value.strerror
    # nothing written: no temp file beside it, nothing in it
    assert os.listdir(diskdir) == ["ckpt"]
    assert os.listdir(target) == []


def test_saving_over_a_file_keeps_its_mode_and_owner(diskdir, umask):
    path = os.path.join(diskdir, "ckpt.pt")
    with open(path, "wb") as fh:
        fh.write(b"old")
    os.chmod(path, 0o600)
    nvswap.save({"x": torch.ones(3)}, path).wait()
    assert mode(path) == 0o600  # not 0644
    # the umask does not cut the mode kept
    os.chmod(path, 0o664)
    umask(0o077)
    nvswap.save({"x": torch.ones(4)}, path).wait()
    assert mode(path) == 0o664
    assert torch.equal(torch.load(path)["x"], torch.ones(4))
    # a new file follows the umask, as open() would
    umask(0o027)
    fresh = os.path.join(diskdir, "fresh.pt")
    nvswap.save({"x": torch.ones(1)}, fresh).wait()
    assert mode(fresh) == 0o640
    if os.geteuid() != 0:
        pytest.skip("giving a file to another owner needs root (the "
                    "owner is kept where permitted)")
    os.chown(path, 65534, 65534)
    nvswap.save({"x": torch.ones(5)}, path).wait()
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    assert mode(path) == 0o664


def test_a_failed_save_takes_back_the_directories_it_made(diskdir):
    path = os.path.join(diskdir, "new", "deeper", "x.pt")
    h = nvswap.save({"t": torch.ones(10), "bad": threading.Lock()}, path)
    with pytest.raises(TypeError):
        h.wait()
    assert os.listdir(diskdir) == []


def test_a_read_only_or_full_disk_is_refused_by_save_itself(small_tmpfs):
    mnt = str(small_tmpfs)
    # full: the size hint cannot be preallocated on a 2 MiB disk
    with pytest.raises(nvswap.Error) as ei:
        nvswap.save({"x": torch.ones(1 << 20)}, os.path.join(mnt, "a.pt"))
    assert ei.value.errno == errno.ENOSPC
    assert "a.pt" in ei.value.strerror
    assert os.listdir(mnt) == []
    r = subprocess.run(["mount", "-o", "remount,ro", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only: {r.stderr}")
    path = os.path.join(mnt, "x.pt")
    with pytest.raises(nvswap.Error) as ei:
        nvswap.save({"x": torch.ones(3)}, path)
    assert ei.value.errno == errno.EROFS
    assert path in ei.value.strerror
    deep = os.path.join(mnt, "new", "x.pt")
    with pytest.raises(nvswap.Error) as ei:
        nvswap.save({"x": torch.ones(3)}, deep)
    assert ei.value.errno == errno.EROFS
    assert ei.value.strerror == (
        f"nvswap.save: {deep}: cannot create directory "
        f"{os.path.join(mnt, 'new')}: Read-only file system")
