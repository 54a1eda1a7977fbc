# SPDX-License-Identifier: MIT
"""A process killed with SIGKILL in the middle of nvswap I/O leaves
nothing behind but the files it named, and they work for the next one."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import nvswap
from filehelp import child_env

MiB = 1 << 20
N = 64 * MiB


def run_and_kill(code, *args):
    """Start code in a fresh interpreter, read the line it prints once its
    I/O is under way, SIGKILL it, reap it; return that line, parsed."""
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)] +
                         list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=child_env(), text=True)
    try:
        line = p.stdout.readline()
        p.kill()
    finally:
        rc = p.wait(timeout=60)
        err = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
    assert line, f"the child printed nothing (rc {rc}): {err}"
    print("the child, when killed:", line.strip())
    assert rc == -signal.SIGKILL, (rc, err)
    # reaped: no such process any more (not even a zombie)
    with pytest.raises(ProcessLookupError):
        os.kill(p.pid, 0)
    assert not os.path.exists(f"/proc/{p.pid}")
    return json.loads(line)


AIO_CHILD = """
    import json, os, sys, time
    import nvswap
    d, n = sys.argv[1], int(sys.argv[2])
    h = nvswap.aio_handle(intra_op_parallelism=2)
    data = bytearray(os.urandom(1 << 20)) * (n >> 20)
    keep = []
    for i in range(4):
        h.async_pwrite(data, os.path.join(d, "out%d.bin" % i))
        buf = bytearray(n)
        keep.append(buf)
        h.async_pread(buf, os.path.join(d, "src.bin"))
    st = h.stats()
    print(json.dumps({"pending": h.pending, "done": st["ops_completed"],
                      "fallbacks": st["direct_fallbacks"]}), flush=True)
    time.sleep(120)
"""


def test_killed_mid_io_leaves_only_its_files(diskdir):
    src = os.urandom(N)
    with open(os.path.join(diskdir, "src.bin"), "wb") as f:
        f.write(src)
    rep = run_and_kill(AIO_CHILD, diskdir, str(N))
    assert rep["pending"] == 8
    if rep["done"] == 8:
        print("every op had finished before the kill: nothing was in flight")
    named = {"src.bin"} | {f"out{i}.bin" for i in range(4)}
    assert set(os.listdir(diskdir)) == named
    with open(os.path.join(diskdir, "src.bin"), "rb") as f:
        assert f.read() == src  # reads changed nothing
    for i in range(4):
        size = os.path.getsize(os.path.join(diskdir, f"out{i}.bin"))
        # O_DIRECT writes preallocate at submit: the final size at once
        assert size == N if rep["fallbacks"] == 0 else size <= N
    # a fresh handle reads and writes the same files
    with nvswap.aio_handle() as h:
        buf = bytearray(N)
        assert h.sync_pread(buf, os.path.join(diskdir, "src.bin")) == 1
        assert buf == src
        new = os.urandom(N)
        for i in range(4):
            p = os.path.join(diskdir, f"out{i}.bin")
            assert h.async_pwrite(new, p) == 0
        assert h.wait() == 4
        for i in range(4):
            buf[:] = bytes(N)
            assert h.sync_pread(buf, os.path.join(diskdir, f"out{i}.bin")) == 1
            assert buf == new
    assert set(os.listdir(diskdir)) == named


SWAP_CHILD = """
    import json, os, sys, time
    import nvswap
    d = sys.argv[1]
    s = nvswap.Swapper(nvme_path=d, buffer_size=16 << 20, buffer_count=2)
    data = bytearray(os.urandom(16 << 20))
    for i in range(6):
        s.register(i, data)       # written now
    for i in range(2):
        mv = s.acquire(i, memoryview=True)
        mv[:8] = b"dirtydat"
        s.release(i, True)
    s.evict(0)                    # write-backs start
    s.evict(1)
    s.prefetch(2)                 # a read starts
    st = s.stats()
    print(json.dumps({"dir": s.dirs[0], "files": sorted(os.listdir(s.dirs[0])),
                      "in_use": st["buffers_in_use"]}), flush=True)
    time.sleep(120)
"""


def test_killed_mid_swap_the_next_swapper_starts_and_cleans_up(swapdir):
    if not hasattr(nvswap, "Swapper"):
        why = "nvswap.Swapper is not in this build"
        print(why)
        pytest.skip(why)
    rep = run_and_kill(SWAP_CHILD, swapdir)
    rank = os.path.join(swapdir, "nvswap", "rank0")
    assert rep["dir"] == rank
    # what the dead process left: its rank directory, with its lock and
    # swap file and nothing else
    assert os.listdir(swapdir) == ["nvswap"]
    assert os.listdir(os.path.join(swapdir, "nvswap")) == ["rank0"]
    assert sorted(os.listdir(rank)) == rep["files"] == ["lock", "swap.0"]
    # the lock's holder is dead: a new swapper takes the directory (no
    # EBUSY), removing the stale swap files first
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB,
                        buffer_count=2) as s:
        assert s.dirs == [rank]
        assert sorted(os.listdir(rank)) == ["lock", "swap.0"]
        assert s.stats()["tensors"] == 0
        data = os.urandom(MiB)
        s.register(1, data)
        s.register(2, 100)
        assert bytes(s.acquire(1, memoryview=True)) == data
        s.release(1, False)
        assert bytes(s.acquire(2, memoryview=True)) == bytes(100)
        s.release(2, False)
    # close removed the rank directory and <path>/nvswap: a lock taken
    # over from a dead owner adopts its nvswap/ level (swapper.h,
    # docs/internals/swapper.md)
    assert os.listdir(swapdir) == []


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples", "python", "train_offloaded.py")


def example(d, *more):
    return [sys.executable, EXAMPLE, "--dir", d, "--steps", "4", "--width",
            "64", "--layers", "2", "--context", "16", "--checkpoint-every",
            "1", *more]


@pytest.mark.parametrize("moment", ["random", "mid-checkpoint"])
def test_train_offloaded_killed_anywhere_resumes_bit_identical(diskdir,
                                                               moment):
    """examples/python/train_offloaded.py --checkpoint-every 1, killed with
    SIGKILL at a random moment of its training or just as a checkpoint
    starts, goes on with --resume from its last checkpoint to the
    in-memory run's weights and AdamW state, bit for bit, and the run
    that completes removes its sets."""
    import random
    import time
    pytest.importorskip("torch")
    seed = int(os.environ.get("NVSWAP_CRASH_SEED", time.time()))
    rng = random.Random(seed)
    print(f"NVSWAP_CRASH_SEED={seed}")
    p = subprocess.Popen(example(diskdir), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=child_env(), text=True)
    seen = []
    try:
        if moment == "random":  # within the steps (after the imports)
            while not (seen and seen[-1].startswith("step ")):
                seen.append(p.stdout.readline())
                assert seen[-1], "".join(seen)
            time.sleep(rng.uniform(0, 1.0))
        else:  # the k-th checkpoint of 5 (the initial state, steps 1-4)
            k = rng.randint(1, 5)
            while sum(ln.startswith("checkpointing") for ln in seen) < k:
                seen.append(p.stdout.readline())
                assert seen[-1], "".join(seen)
            time.sleep(rng.uniform(0, 0.02))
        p.kill()
    finally:
        rc = p.wait(timeout=120)
        out = "".join(seen) + p.stdout.read()
        err = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
    print(f"killed (rc {rc}) after:\n{out}")
    if rc == 0:  # it finished first: then it ended as it must
        assert "bit for bit: equal" in out, (seed, out)
    else:
        assert rc == -signal.SIGKILL, (seed, rc, err)
        killed = out
        r = subprocess.run(example(diskdir, "--resume"), capture_output=True,
                           text=True, env=child_env(), timeout=300)
        out = r.stdout
        if r.returncode == 1 and "no persistent swap set to resume" in out:
            # only before the first commit, or while removing the sets
            # of a complete run (its last checkpoint saved, then a kill
            # part-way through remove_sets: the optimizer's manifests
            # gone, a parameter generation left, which resumes nothing)
            assert "saved 'nvswap.torch:" not in killed or \
                "saved 'nvswap.torch:5:step 4'" in killed, (seed, killed)
            r = subprocess.run(example(diskdir), capture_output=True,
                               text=True, env=child_env(), timeout=300)
            out = r.stdout
            # a fresh run: its checkpoints continue the numbering of
            # what the kill left, so only its start is checked
            assert "checkpointing the initial state" in out, (seed, out)
        assert r.returncode == 0, (seed, r.stdout + r.stderr)
        assert "resumed after step" in out or \
            "checkpointing the initial state" in out, (seed, out)
    last = [ln for ln in out.splitlines() if ln.startswith("verdict")]
    assert last == ["verdict: after 4 steps the offloaded model's weights "
                    "are equal and its AdamW state equal to the in-memory "
                    "run, bit for bit: equal"], (seed, out)
    assert "removed the persistent swap sets" in out, (seed, out)
    assert [str(q) for q in __import__("pathlib").Path(diskdir).rglob("*")
            if q.is_file()] == [], seed


def test_train_offloaded_after_a_kill_mid_removal_starts_over(diskdir):
    """A kill inside remove_sets() after the optimizer's manifests went
    leaves one parameter generation (the random kill above found it):
    --resume refuses it, naming the optimizer set, and a fresh run starts
    from the initial state, ends equal and removes everything."""
    import glob
    pytest.importorskip("torch")
    r = subprocess.run(example(diskdir, "--keep"), capture_output=True,
                       text=True, env=child_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    param = os.path.join(diskdir, "nvswap", "param", "rank0")
    opt = os.path.join(diskdir, "nvswap", "optimizer", "rank0")
    pm = sorted(glob.glob(os.path.join(param, "manifest.*")))
    om = sorted(glob.glob(os.path.join(opt, "manifest.*")))
    assert len(pm) == 2 and len(om) == 2, (pm, om)  # keep_generations 2
    for f in pm[:0:-1] + om[::-1]:  # remove_sets' order, cut before pm[0]
        os.unlink(f)
    r = subprocess.run(example(diskdir, "--resume"), capture_output=True,
                       text=True, env=child_env(), timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"no persistent swap set to resume in {opt}" in r.stdout, \
        r.stdout
    r = subprocess.run(example(diskdir), capture_output=True, text=True,
                       env=child_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checkpointing the initial state" in r.stdout, r.stdout
    assert "resumed after step" not in r.stdout, r.stdout
    assert "bit for bit: equal" in r.stdout, r.stdout
    assert "removed the persistent swap sets" in r.stdout, r.stdout
    assert [str(q) for q in __import__("pathlib").Path(diskdir).rglob("*")
            if q.is_file()] == []
