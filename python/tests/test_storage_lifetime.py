# SPDX-License-Identifier: MIT
"""A tensor's memory replaced while an op uses it (issue 34, finding 1).

An op holds the tensor's storage, not only the tensor: t.set_(other)
leaves the memory the op was given alive, and the op fails at its
completion with EFAULT naming it, other's memory untouched. A storage
that can be resized (any torch.empty tensor's) is staged: a read lands in
nvswap's memory and is copied into the tensor at completion, once the
tensor is seen to be where it was; a write writes the bytes the tensor
held when it was submitted. So t.resize_() or
t.untyped_storage().resize_() mid-read can neither crash the process nor
put file bytes into memory torch handed on (before: SIGSEGV, or wait()
returned 1 after writing into freed memory). Storages that cannot be
resized (nvswap's pinned tensors, torch.from_numpy) are read into
directly: resizing them raises torch's own error.

Each case runs in a child process, so a crash fails the test rather
than the suite."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import nvswap  # noqa: E402

MiB = 1 << 20
BIG = 256 * MiB  # a read still running when Python acts, microseconds on


def run_child(body, diskdir):
    """Run @body with h, path (a BIG file of 0xA5), N, errno, torch,
    nvswap bound; returns its stdout; the child must exit 0."""
    path = os.path.join(diskdir, "big")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            chunk = b"\xa5" * (16 * MiB)
            for _ in range(BIG // len(chunk)):
                f.write(chunk)
    code = textwrap.dedent("""
        import errno, sys, torch, nvswap
        path, N = sys.argv[1], int(sys.argv[2])
        h = nvswap.aio_handle()
        def storage(t):
            return (t.untyped_storage() if hasattr(t, "untyped_storage")
                    else t._storage())
    """) + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code, path, str(BIG)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout


def expect_efault(out, what):
    assert "EFAULT" in out, out
    assert what in out, out
    assert "was resized or replaced while the op ran" in out, out


def test_resize_bigger_mid_read_is_efault_and_no_crash(diskdir):
    out = run_child("""
        t = torch.full((N,), 0x11, dtype=torch.uint8)
        assert h.async_pread(t, path) == 0
        t.resize_(2 * N)
        try:
            h.wait()
            print("returned")
        except nvswap.Error as e:
            print(errno.errorcode[e.errno], e.strerror)
        # the new memory holds what resize_ copied: never file bytes
        assert bool((t[:N] == 0x11).all()), "file bytes in the tensor"
        print("ok")
    """, diskdir)
    expect_efault(out, f"read of {BIG} bytes from")
    assert out.rstrip().endswith("ok"), out


@pytest.mark.parametrize("factor", [2, 0.5])
def test_storage_resize_mid_read_is_efault_and_no_crash(diskdir, factor):
    out = run_child(f"""
        t = torch.full((N,), 0x11, dtype=torch.uint8)
        op = h.submit_read(t, path)
        storage(t).resize_(int(N * {factor}))
        try:
            op.wait()
            print("returned")
        except nvswap.Error as e:
            print(errno.errorcode[e.errno], e.strerror)
        s = storage(t)
        n = min(N, s.nbytes())
        back = torch.empty(0, dtype=torch.uint8).set_(s, 0, (n,), (1,))
        assert bool((back == 0x11).all()), "file bytes in the storage"
        # the outcome is kept: a second wait says the same
        try:
            op.wait()
        except nvswap.Error as e:
            print("again", errno.errorcode[e.errno])
        print("ok")
    """, diskdir)
    expect_efault(out, f"read of {BIG} bytes from")
    assert "again EFAULT" in out, out
    assert out.rstrip().endswith("ok"), out


def test_set_to_another_tensor_mid_read_leaves_it_untouched(diskdir):
    """The silent corruption: set_ moved t onto fresh memory and the read
    wrote into it, wait() returning 1."""
    out = run_child("""
        t = torch.full((N,), 0x11, dtype=torch.uint8)
        other = torch.full((N,), 0x22, dtype=torch.uint8)
        assert h.async_pread(t, path) == 0
        t.set_(other)
        fresh = [torch.full((N // 4,), 0x33, dtype=torch.uint8)
                 for _ in range(4)]
        try:
            print("returned", h.wait())
        except nvswap.Error as e:
            print(errno.errorcode[e.errno], e.strerror)
        assert bool((other == 0x22).all()), "file bytes in other"
        assert all(bool((f == 0x33).all()) for f in fresh), "in fresh"
        print("ok")
    """, diskdir)
    expect_efault(out, f"read of {BIG} bytes from")
    assert out.rstrip().endswith("ok"), out


def test_set_on_a_pinned_tensor_mid_read_is_efault(diskdir):
    """A storage that cannot be resized is read into directly; set_ still
    moves the tensor, and the memory the op was given stays alive."""
    out = run_child("""
        t = h.new_cpu_locked_tensor(N, torch.empty(0, dtype=torch.uint8))
        if hasattr(storage(t), "resizable"):
            assert not storage(t).resizable()
        keep = storage(t)
        op = h.submit_read(t, path)
        t.set_(torch.zeros(4, dtype=torch.uint8))
        try:
            op.wait()
            print("returned")
        except nvswap.Error as e:
            print(errno.errorcode[e.errno], e.strerror)
        assert bool((t == 0).all())
        print("ok")
    """, diskdir)
    expect_efault(out, f"read of {BIG} bytes from")
    assert out.rstrip().endswith("ok"), out


def test_a_pinned_tensor_refuses_resize_mid_read(diskdir):
    out = run_child("""
        t = h.new_cpu_locked_tensor(N, torch.empty(0, dtype=torch.uint8))
        v = t.view(-1)  # torch sets t's sizes before it refuses
        op = h.submit_read(t, path)
        try:
            t.resize_(2 * N)
            print("resized")
        except RuntimeError as e:
            print("refused:", e)
        assert op.wait() == N
        assert bool((v == 0xA5).all())
        print("ok")
    """, diskdir)
    assert "refused:" in out and "not resizable" in out, out
    assert out.rstrip().endswith("ok"), out


def test_a_write_writes_what_the_tensor_held_at_submit(diskdir):
    """A resizable tensor's write is a snapshot: resize_ or set_ after the
    submit changes nothing of what reaches the file."""
    out = run_child("""
        import os
        dst = path + ".w"
        for how in ("resize", "storage", "set"):
            t = torch.full((N,), 0x5A, dtype=torch.uint8)
            op = h.submit_write(t, dst)
            if how == "resize":
                t.resize_(2 * N)
            elif how == "storage":
                storage(t).resize_(N // 2)
            else:
                t.set_(torch.zeros(4, dtype=torch.uint8))
            if how != "storage":  # t is larger than its storage there
                t.fill_(0)
            assert op.wait() == N, how
            with open(dst, "rb") as f:
                assert f.read() == b"\\x5a" * N, how
            os.unlink(dst)
        print("ok")
    """, diskdir)
    assert out.rstrip().endswith("ok"), out


def test_sync_read_from_another_thread_resizing(diskdir):
    """sync_pread releases the GIL: a thread resizing the tensor meanwhile
    gets the same answer as an async op."""
    out = run_child("""
        import threading
        t = torch.full((N,), 0x11, dtype=torch.uint8)
        go = threading.Event()
        def resize():
            go.wait()
            t.resize_(2 * N)
        th = threading.Thread(target=resize)
        th.start()
        import time
        def later():
            time.sleep(0.005)
            go.set()
        threading.Thread(target=later).start()
        try:
            print("returned", h.sync_pread(t, path))
        except nvswap.Error as e:
            print(errno.errorcode[e.errno], e.strerror)
        th.join()
        assert bool((t[:N] == 0x11).all()) or bool((t[:N] == 0xA5).all())
        print("ok")
    """, diskdir)
    # the resize lands during the read (EFAULT) or, on a fast disk, after
    # it (1, the bytes all there): never a crash or a mix
    assert "EFAULT" in out or "returned 1" in out, out
    assert out.rstrip().endswith("ok"), out


@pytest.mark.parametrize("kind", ["empty", "view", "pinned", "numpy"])
def test_unchanged_tensors_read_and_write_bit_exact(diskdir, kind):
    import numpy as np
    h = nvswap.aio_handle()
    n = 3 * MiB + 123
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    if kind == "empty":
        make = lambda: torch.empty(n, dtype=torch.uint8)  # noqa: E731
    elif kind == "view":
        make = lambda: torch.empty(n + 3, dtype=torch.uint8)[3:]  # noqa
    elif kind == "pinned":
        make = lambda: h.new_cpu_locked_tensor(  # noqa: E731
            n, torch.empty(0, dtype=torch.uint8))
    else:
        make = lambda: torch.from_numpy(np.empty(n, np.uint8))  # noqa
    src = make()
    src.copy_(torch.from_numpy(data))
    p = os.path.join(diskdir, "f")
    assert h.async_pwrite(src, p, file_offset=4096 + 17) == 0
    assert h.wait() == 1
    back = make()
    op = h.submit_read(back, p, 4096 + 17)
    assert op.wait() == n
    assert bytes(back.numpy()) == bytes(data)
    back2 = make()
    assert h.sync_pread(back2, p, 4096 + 17) == 1
    assert bytes(back2.numpy()) == bytes(data)
