# SPDX-License-Identifier: MIT
"""Shared fixtures for nvswap's Python tests.

Files go on a real disk: /var/tmp (or $NVSWAP_TEST_DIR), never /tmp,
which may be a tmpfs where O_DIRECT is refused.
"""
import os
import shutil
import subprocess
import tempfile

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
    skipped, saying why, where mounting is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs",
                        str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root and "
                    f"CAP_SYS_ADMIN): {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA device (test_gpu.py); select them "
        "with pytest -m gpu, leave them out with -m 'not gpu'")
