# SPDX-License-Identifier: MIT
"""Shared fixtures for nvswap's Python tests.

Files go on a real disk: /var/tmp (or $NVSWAP_TEST_DIR), never /tmp,
which may be a tmpfs where O_DIRECT is refused.
"""
import errno
import os
import shutil
import subprocess
import tempfile
import warnings

import pytest


def _base():
    base = os.environ.get("NVSWAP_TEST_DIR", "/var/tmp")
    os.makedirs(base, exist_ok=True)
    return base


@pytest.fixture
def diskdir():
    """A fresh directory on the disk, removed afterwards."""
    d = tempfile.mkdtemp(prefix="nvswap-py-", dir=_base())
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def swapdir(diskdir):
    """A directory for a Swapper's nvme_path."""
    return diskdir


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 2 MiB tmpfs (a disk that fills up), unmounted afterwards;
    skipped, saying why, where mounting is not allowed. nvswap.torch's
    warning that swap files on tmpfs live in memory is silenced here: a
    small disk is what is meant."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs",
                        str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root and "
                    f"CAP_SYS_ADMIN): {r.stderr.strip()}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "nvswap.torch.offload: the swap "
                                "files go to", RuntimeWarning)
        yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def full_disk(small_tmpfs):
    """A path on a filesystem with no space left: a buffered write there
    (a handle with direct=False: nothing is preallocated at submit) fails
    with ENOSPC when it runs. Tests of failures in flight used /dev/full,
    which the handle now refuses as a character device (issue 34,
    finding 3)."""
    fd = os.open(small_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, bytes(4096)) == 4096:
            pass
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return str(small_tmpfs / "f")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA device (test_gpu.py); select them "
        "with pytest -m gpu, leave them out with -m 'not gpu'")
