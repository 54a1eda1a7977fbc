# SPDX-License-Identifier: MIT
"""Blocking calls release the GIL: another Python thread runs during a
1 GiB read (NVSWAP_TEST_GIL_BYTES sets a different size).

A second thread spins on a counter. The reading thread reads the counter
right before and right after the blocking call: with the GIL held
throughout, the counter could move by at most one switch interval's worth
(5 ms); released, it moves for most of the call.
"""
import os
import shutil
import tempfile
import threading
import time

import pytest

import nvswap

SIZE = int(os.environ.get("NVSWAP_TEST_GIL_BYTES", 1 << 30))
CHUNK = 64 << 20


class Spinner(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.count = 0
        self.stop = False

    def run(self):
        while not self.stop:
            self.count += 1


@pytest.fixture(scope="module")
def bigfile():
    base = os.environ.get("NVSWAP_TEST_DIR", "/var/tmp")
    d = tempfile.mkdtemp(prefix="nvswap-py-gil-", dir=base)
    p = os.path.join(d, "big")
    chunk = bytearray(os.urandom(min(CHUNK, SIZE)))
    try:
        with nvswap.aio_handle() as h:
            for off in range(0, SIZE, len(chunk)):
                n = min(len(chunk), SIZE - off)
                h.async_pwrite(memoryview(chunk)[:n], p, off)
            h.wait()
        yield p, bytes(chunk[:64])
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def bigbuf():
    return bytearray(SIZE)


@pytest.fixture
def spinner():
    s = Spinner()
    s.start()
    time.sleep(0.05)
    c0, t0 = s.count, time.monotonic()
    time.sleep(0.2)  # the GIL is free: the spinner's own rate
    s.rate = (s.count - c0) / (time.monotonic() - t0)
    yield s
    s.stop = True
    s.join()


def uncache(path):
    """Drop the file from the page cache, so the read goes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measured(spinner, call):
    c0, t0 = spinner.count, time.monotonic()
    result = call()
    c1, t1 = spinner.count, time.monotonic()
    return result, c1 - c0, t1 - t0


def check(spinner, progress, elapsed, what):
    expect = spinner.rate * elapsed
    print(f"{what}: {elapsed:.3f} s, spinner +{progress} "
          f"({progress / max(expect, 1):.0%} of its free-running rate)")
    # Held throughout, at most one switch interval (5 ms) of progress:
    # a tenth of the call is far above that for any call over 50 ms.
    assert progress >= 0.1 * expect, (
        f"{what}: the spinner moved {progress} in {elapsed:.3f} s, "
        f"{expect:.0f} expected with the GIL released")
    assert progress > 1000


def test_sync_pread_releases_the_gil(bigfile, bigbuf, spinner):
    p, head = bigfile
    uncache(p)
    with nvswap.aio_handle() as h:
        n, progress, elapsed = measured(spinner, lambda: h.sync_pread(bigbuf, p))
    assert n == 1 and bigbuf[:64] == head
    check(spinner, progress, elapsed, "sync_pread")


def test_wait_releases_the_gil(bigfile, bigbuf, spinner):
    p, head = bigfile
    uncache(p)
    bigbuf[:64] = bytes(64)
    with nvswap.aio_handle() as h:
        assert h.async_pread(bigbuf, p) == 0
        n, progress, elapsed = measured(spinner, h.wait)
    assert n == 1 and bigbuf[:64] == head
    check(spinner, progress, elapsed, "wait")


def test_op_wait_releases_the_gil(bigfile, bigbuf, spinner):
    p, head = bigfile
    uncache(p)
    bigbuf[:64] = bytes(64)
    with nvswap.aio_handle() as h:
        op = h.submit_read(bigbuf, p)
        n, progress, elapsed = measured(spinner, op.wait)
    assert n == SIZE and bigbuf[:64] == head
    check(spinner, progress, elapsed, "Op.wait")


def test_ckpt_writer_write_and_close_release_the_gil(bigfile, bigbuf, spinner):
    p, _ = bigfile
    out = p + ".ckpt"
    w = nvswap.CkptWriter(out)
    n, progress, elapsed = measured(spinner, lambda: w.write(bigbuf))
    assert n == SIZE
    check(spinner, progress, elapsed, "CkptWriter.write")
    w.close()
    assert os.path.getsize(out) == SIZE
    os.unlink(out)
