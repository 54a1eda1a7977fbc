# SPDX-License-Identifier: MIT
"""Issue 34, finding 3: any aio_handle call on a FIFO with no writer
blocked for ever in open() (async_pread too, in its caller), and Ctrl-C
then raised nvswap.InterruptedError, which a user's `except Exception:`
swallowed. Now what is not a regular file or a block device is refused
at once, naming what it is, and a signal's exception (KeyboardInterrupt,
or what a handler raises) is what a blocking call gives.

Each case runs in a child with a timeout, so a hang fails the test."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from filehelp import sigint_default

import nvswap

MiB = 1 << 20


def child(code, *args, timeout=60):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code),
                           *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("call", ["async_pread", "sync_pread",
                                  "submit_read", "async_pwrite",
                                  "sync_pwrite", "aio_read"])
def test_a_fifo_without_a_writer_is_refused_at_once(diskdir, call):
    fifo = os.path.join(diskdir, "fifo")
    os.mkfifo(fifo)
    r = child(f"""
        import errno, sys, nvswap
        h = nvswap.aio_handle()
        buf = bytearray(4096)
        try:
            if "{call}" == "aio_read":
                nvswap.aio_read(buf, sys.argv[1], 1 << 20, 32, False, False,
                                False)
            else:
                getattr(h, "{call}")(buf, sys.argv[1])
                h.wait()
            print("no error")
        except nvswap.Error as e:
            print(errno.errorcode[e.errno], e.strerror)
    """, fifo)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("EINVAL "), r.stdout
    assert f"{fifo} offset 0 length 4096: is a FIFO, not a regular file " \
        "or a block device" in r.stdout, r.stdout


def test_a_socket_a_character_device_and_a_fifo_descriptor(diskdir):
    h = nvswap.aio_handle()
    buf = bytearray(4096)
    path = os.path.join(diskdir, "sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    try:
        for p, what in ((path, "a socket"), ("/dev/null",
                                             "a character device")):
            for call in (h.sync_pread, h.sync_pwrite):
                with pytest.raises(nvswap.Error) as e:
                    call(buf, p)
                assert e.value.errno == 22
                assert f"is {what}, not a regular file or a block device" \
                    in e.value.strerror
    finally:
        s.close()
    fifo = os.path.join(diskdir, "fifo")
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # a FIFO's descriptor: never blocks
    try:
        with pytest.raises(nvswap.Error) as e:
            h.sync_pread(buf, fd)
        assert e.value.errno == 22 and "is a FIFO" in e.value.strerror
    finally:
        os.close(fd)


LOOP = """
    import signal, sys, nvswap
    {setup}
    h = nvswap.aio_handle()
    buf = bytearray({n})
    try:
        print("ready", flush=True)
        while True:
            h.async_pread(buf, sys.argv[1])
            h.wait()
    except Exception as e:
        print("caught by except Exception:", type(e).__name__, e)
"""


def big_file(diskdir):
    p = os.path.join(diskdir, "big")
    with open(p, "wb") as f:
        f.write(os.urandom(64 * MiB))
    return p


def interrupt(code, path, sig):
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code),
                          path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    try:
        assert p.stdout.readline() == "ready\n"
        time.sleep(0.3)  # inside a wait, most likely, or between
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    return p.returncode, out, err


def test_ctrl_c_in_a_blocking_wait_is_keyboardinterrupt(diskdir):
    rc, out, err = interrupt(LOOP.format(setup="", n=64 * MiB),
                             big_file(diskdir), signal.SIGINT)
    assert "caught by except Exception" not in out, out
    assert err.rstrip().endswith("KeyboardInterrupt"), err
    assert rc in (-signal.SIGINT, 1), (rc, err)


def test_what_a_signal_handler_raises_propagates(diskdir):
    setup = ("def boom(*_):\n        raise LookupError('from the "
             "handler')\n    signal.signal(signal.SIGUSR1, boom)")
    rc, out, err = interrupt(LOOP.format(setup=setup, n=64 * MiB),
                             big_file(diskdir), signal.SIGUSR1)
    # LookupError is an Exception: the user's handler sees it as raised
    assert "caught by except Exception: LookupError from the handler" \
        in out, (out, err)
    assert rc == 0, err
