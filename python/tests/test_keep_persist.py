# SPDX-License-Identifier: MIT
"""Persistent swap sets from Python against damage, kills, other
processes and users and a full disk (issue 34, "keep what works"). The
C side has its own tests (tests/integration/test_persist.c,
tests/tools/test_nvswap_fsck.c, tests/tools/test_crash.c); these keep
what nvswap.Swapper and python -m nvswap fsck show a Python user."""
import errno
import functools
import glob
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import nvswap
from filehelp import (child_env, crash_rng, raises_errno, swap_read,
                      swap_write)

MiB = 1 << 20
SIZES = {1: 5000, 2: 70000, 3: 4096}


def open_set(path, persist="persistent", **kw):
    return nvswap.Swapper(nvme_path=path, name="set", buffer_size=MiB,
                          buffer_count=2, persist=persist, **kw)


def value(i, k):
    """Tensor i's bytes after step k (0: its initial bytes)."""
    n = SIZES[i]
    return bytes(((j * 7 + i * 13 + k * 101) ^ (j >> 9)) & 0xFF
                 for j in range(n))


write = functools.partial(swap_write, evict=True)  # LOOP imports it
read = swap_read


def rank_dir(path):
    return os.path.join(path, "nvswap", "set", "rank0")


def manifests(path):
    return sorted(glob.glob(os.path.join(rank_dir(path), "manifest.*")))


@pytest.fixture
def two_gens(diskdir):
    """A set with generations 1 and 2 (steps 1 and 2) in diskdir/base."""
    base = os.path.join(diskdir, "base")
    os.mkdir(base)
    with open_set(base, keep_generations=3) as s:
        for i in SIZES:
            s.register(i, bytearray(value(i, 0)))
        for k in (1, 2):
            for i in SIZES:
                write(s, i, value(i, k))
            assert s.checkpoint(f"step {k}") == k
            assert s.checkpoint_wait() == k
    return base


def damaged(base, name, how):
    """A cp -a copy of the set at base with how(rank directory) done."""
    copy = os.path.join(os.path.dirname(base), name)
    subprocess.run(["cp", "-a", base, copy], check=True)
    how(rank_dir(copy))
    return copy


def flip_in(path, needle):
    """Flip one bit in the middle of the bytes equal to needle."""
    with open(path, "r+b") as f:
        blob = f.read()
        at = blob.find(needle)
        assert at >= 0, "the bytes are not in the file"
        f.seek(at + len(needle) // 2)
        f.write(bytes([blob[at + len(needle) // 2] ^ 0x10]))
    return at


# ---- damage -----------------------------------------------------------------


def test_a_flipped_data_byte_is_refused_at_read_naming_the_tensor(two_gens):
    data = os.path.join(rank_dir(two_gens), "set.data")
    copy = damaged(two_gens, "flip", lambda r: flip_in(
        os.path.join(r, "set.data"), value(2, 2)))
    with open_set(copy, persist="resume") as s:
        assert [g["generation"] for g in s.generations()] == [2, 1]
        assert read(s, 1) == value(1, 2)  # the others are sound
        e = raises_errno(errno.EBADMSG, s.acquire, 2, memoryview=True)
        assert str(e).startswith("[Errno 74] nvswap: tensor 2: checksum "
                                 "mismatch reading " + rank_dir(copy))
        assert str(e).endswith("the data was not handed out"), e
    with open_set(copy, persist="resume", generation=1) as s:
        assert [read(s, i) for i in SIZES] == [value(i, 1) for i in SIZES]
    with open(data, "rb") as f:  # the original was not touched
        assert value(2, 2) in f.read()


@pytest.mark.parametrize("how, says", [
    ("flip", "manifest.00000000000000000002: checksum mismatch (crc32c "),
    ("empty", "manifest.00000000000000000002: not an nvswap manifest "
     "(bad magic or too short)"),
    ("swap", "manifest.00000000000000000001: names generation 2 inside"),
])
def test_a_damaged_manifest_is_refused_naming_it(two_gens, how, says):
    def damage(r):
        m1, m2 = sorted(glob.glob(os.path.join(r, "manifest.*")))
        if how == "flip":
            with open(m2, "r+b") as f:
                f.seek(40)
                b = f.read(1)
                f.seek(40)
                f.write(bytes([b[0] ^ 1]))
        elif how == "empty":
            open(m2, "wb").close()
        else:
            os.rename(m1, m1 + ".t")
            os.rename(m2, m1)
            os.rename(m1 + ".t", m2)

    copy = damaged(two_gens, how, damage)
    before = {p: os.path.getsize(p) for p in glob.glob(rank_dir(copy) + "/*")}
    for gen in (None, 1, 2):
        kw = {} if gen is None else {"generation": gen}
        e = raises_errno(errno.EBADMSG, open_set, copy, persist="resume",
                         **kw)
        assert f"nvswap: manifest {rank_dir(copy)}/{says}" in str(e), e
    after = {p: os.path.getsize(p) for p in glob.glob(rank_dir(copy) + "/*")}
    assert after == before  # refused, nothing changed or removed


def test_a_truncated_or_missing_data_file_is_refused(two_gens):
    copy = damaged(two_gens, "trunc", lambda r: os.truncate(
        os.path.join(r, "set.data"), 4096))
    e = raises_errno(errno.EBADMSG, open_set, copy, persist="resume")
    data = os.path.join(rank_dir(copy), "set.data")
    assert f"of {data}, which has 4096 bytes: the data file was " \
        "truncated" in str(e), e
    assert os.path.getsize(data) == 4096
    copy = damaged(two_gens, "gone", lambda r: os.unlink(
        os.path.join(r, "set.data")))
    e = raises_errno(errno.EBADMSG, open_set, copy, persist="resume")
    assert str(e) == (
        f"[Errno 74] nvs_swapper_create: {rank_dir(copy)}/set.data is "
        "missing: the data of path 0 of the set, which its 2 "
        "generation(s) use (a copy of a set must take every file along)")


def test_fsck_repair_removes_only_the_bad_generation(two_gens):
    copy = damaged(two_gens, "fsck", lambda r: flip_in(
        os.path.join(r, "set.data"), value(3, 2)))
    fsck = [sys.executable, "-m", "nvswap", "fsck", "--path", copy,
            "--name", "set"]
    r = subprocess.run(fsck, capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.returncode == 4, r.stdout + r.stderr  # bad generations left
    assert len(manifests(copy)) == 2
    r = subprocess.run(fsck + ["--repair"], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # repaired
    assert [os.path.basename(m) for m in manifests(copy)] == [
        "manifest.00000000000000000001"]
    r = subprocess.run(fsck, capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr  # sound
    with open_set(copy, persist="resume") as s:
        assert [g["generation"] for g in s.generations()] == [1]
        assert [read(s, i) for i in SIZES] == [value(i, 1) for i in SIZES]


# ---- other processes and users ----------------------------------------------


HOLDER = """
    import os, sys
    import nvswap
    s = nvswap.Swapper(nvme_path=sys.argv[1], name="set",
                       buffer_size=1 << 20, buffer_count=2, persist="resume")
    print(os.getpid(), flush=True)
    sys.stdin.read()
    s.close()
"""


def test_a_second_process_gets_ebusy_naming_the_holders_pid(two_gens):
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER),
                          two_gens], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        pid = int(p.stdout.readline())
        for persist in ("resume", "persistent"):
            e = raises_errno(errno.EBUSY, open_set, two_gens, persist=persist)
            assert str(e) == (
                f"[Errno 16] nvswap: {rank_dir(two_gens)} is in use by "
                f"process {pid} (one swap directory per rank and process)")
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0
        p.stdout.close()
    with open_set(two_gens, persist="resume") as s:  # released
        assert read(s, 2) == value(2, 2)


def test_another_users_set_is_refused(two_gens):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a set to another user")
    theirs = damaged(two_gens, "theirs", lambda r: None)
    subprocess.run(["chown", "-R", "nobody:nogroup", theirs], check=True)
    e = raises_errno(errno.EPERM, open_set, theirs, persist="resume")
    assert str(e) == (
        f"[Errno 1] nvswap: {theirs}/nvswap is owned by uid 65534 (mode "
        "0700), not by this user (uid 0): its owner could plant or replace "
        "files there; remove it or use a path of your own")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed: root's set as nobody untried")
    # and root's set, opened by nobody
    os.chmod(os.path.dirname(two_gens), 0o755)
    os.chmod(two_gens, 0o755)
    code = ("import sys, nvswap\n"
            "try:\n"
            "    nvswap.Swapper(nvme_path=sys.argv[1], name='set',\n"
            "                   buffer_size=1 << 20, buffer_count=2,\n"
            "                   persist='resume')\n"
            "except PermissionError as e:\n"
            "    print(e.errno, e)\n")
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                        "--clear-groups", sys.executable, "-c", code,
                        two_gens], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    if r.returncode in (126, 127) or "ImportError" in r.stderr or \
            "ModuleNotFoundError" in r.stderr:
        pytest.skip("nobody cannot run this interpreter or import nvswap "
                    "from here: " + r.stderr.strip()[-300:])
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"13 [Errno 13] nvswap: {two_gens}/nvswap: "
                        "Permission denied\n")
    with open_set(two_gens, persist="resume") as s:
        assert [g["generation"] for g in s.generations()] == [2, 1]


# ---- a full disk ------------------------------------------------------------


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(small_tmpfs):
    n = 600 * 1024  # three copies fit the 2 MiB tmpfs, a fourth does not
    path = str(small_tmpfs)
    s = open_set(path, keep_generations=4)
    try:
        s.register(1, bytearray(bytes([1]) * n))
        done = 0
        for k in range(1, 8):
            try:
                write(s, 1, bytes([k]) * n)
                assert s.checkpoint(f"step {k}") == k
                assert s.checkpoint_wait() == k
                done = k
            except nvswap.Error as e:
                assert e.errno == errno.ENOSPC, e
                assert "No space left on device" in str(e), e
                break
        else:
            pytest.fail("the 2 MiB tmpfs never filled")
        assert done >= 1
        assert [g["generation"] for g in s.generations()] == \
            list(range(done, 0, -1))
    finally:
        try:
            s.close()
        except nvswap.Error as e:  # the write-back that did not fit
            assert e.errno == errno.ENOSPC, e
    with open_set(path, persist="resume") as s:
        assert s.generations()[0]["tag"] == f"step {done}"
        assert read(s, 1) == bytes([done]) * n


# ---- kill -9 ----------------------------------------------------------------


LOOP = """
    import sys
    import nvswap
    sys.path.insert(0, sys.argv[2])
    from test_keep_persist import SIZES, value, write
    s = nvswap.Swapper(nvme_path=sys.argv[1], name="set",
                       buffer_size=1 << 20, buffer_count=2,
                       persist="persistent", keep_generations=2)
    for i in SIZES:
        s.register(i, bytearray(value(i, 0)))
    for k in range(1, 100000):
        for i in SIZES:
            write(s, i, value(i, k))
        assert s.checkpoint(f"step {k}") == k
        assert s.checkpoint_wait() == k
        print("done", k, flush=True)
"""


@pytest.mark.parametrize("round_", range(3))
def test_kill_9_in_a_checkpoint_loop_resumes_bit_exact(diskdir, round_):
    seed, rng = crash_rng(round_)
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LOOP),
                          diskdir, here], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=child_env())
    last = 0
    try:
        want = rng.randint(0, 6)
        while last < want:
            line = p.stdout.readline()
            assert line.startswith("done "), (seed, line, p.stderr.read())
            last = int(line.split()[1])
        time.sleep(rng.uniform(0, 0.05))
        p.kill()
    finally:
        rc = p.wait(timeout=60)
        rest = p.stdout.read()
        p.stdout.close()
        p.stderr.close()
    assert rc == -signal.SIGKILL, (seed, rc)
    for line in rest.splitlines():  # printed before the kill landed
        last = int(line.split()[1])
    try:
        s = open_set(diskdir, persist="resume")
    except nvswap.Error as e:  # only before the first commit
        assert last == 0 and e.errno == errno.ENOENT, (seed, last, e)
        return
    with s:
        gen = s.generations()[0]
        k = gen["generation"]
        print(f"killed after step {last} done; resumed at {k}")
        assert k >= last and gen["tag"] == f"step {k}", (seed, last, gen)
        assert [read(s, i) for i in SIZES] == [value(i, k) for i in SIZES]
