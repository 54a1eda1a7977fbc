# SPDX-License-Identifier: MIT
"""Shared fixtures for nvswap's Python tests.

Files go on a real disk: /var/tmp (or $NVSWAP_TEST_DIR), never /tmp,
which may be a tmpfs where O_DIRECT is refused.
"""
import os
import shutil
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
