# SPDX-License-Identifier: MIT
"""nvswap.torch.checkpoint and persist='resume': a run killed after a
checkpoint resumes from it, and its final weights and optimizer state
equal an uninterrupted in-memory run's bit for bit; a crash between the
two sets' commits, another model, scratch space and nothing to resume."""
import errno
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402

STEPS, STOP = 6, 3

MODEL = """
import torch

def make(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 8))

def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(4, 16, generator=g), torch.randn(4, 8, generator=g)

def train(model, opt, steps):
    for step in steps:
        x, y = batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
"""
ns = {}
exec(MODEL, ns)
make, train = ns["make"], ns["train"]

KW = "buffer_size='64K', buffer_count=3"


def offload(model, swapdir, persist):
    return nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                       buffer_count=3, persist=persist)


def first_run(swapdir, tail=""):
    """Steps 1-STOP offloaded, checkpointed, then step STOP+1 and a
    SIGKILL: that step was never saved."""
    script = MODEL + textwrap.dedent(f"""
        import os, signal
        import nvswap.torch as nvt
        model = nvt.offload(make(0), nvme_path={swapdir!r}, {KW},
                            persist="persistent")
        opt = nvt.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        train(model, opt, range(1, {STOP} + 1))
        ck = nvt.checkpoint(model)
        assert ck.wait() == ck.generations, ck
        print(ck.tag, ck.generations, flush=True)
        {tail}
        train(model, opt, [{STOP} + 1])
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr
    return r.stdout


def reference():
    model = make(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    train(model, opt, range(1, STEPS + 1))
    return model, opt


def test_a_killed_run_resumes_bit_exact(swapdir):
    out = first_run(swapdir)
    assert out == f"nvswap.torch:1:step {STOP} (1, 1)\n", out

    ref, ref_opt = reference()
    # Another initialization: the saved weights win over it.
    model = offload(make(7), swapdir, "resume")
    st = nvt.stats(model)
    assert st["resumed"] == {"tag": f"step {STOP}", "steps": STOP,
                             "generations": (1, 1)}
    opt = nvt.AdamW(model.parameters(), lr=0.5)  # saved lr wins
    assert opt.param_groups[0]["lr"] == 1e-2
    train(model, opt, range(STOP + 1, STEPS + 1))
    assert nvt.stats(model)["steps"] == STEPS

    for (name, a), b in zip(model.state_dict().items(), ref.state_dict()
                            .values()):
        assert torch.equal(a, b), name
    got, want = opt.state_dict(), ref_opt.state_dict()
    assert got["param_groups"] == want["param_groups"]
    assert got["state"].keys() == want["state"].keys()
    for i in want["state"]:
        for k, v in want["state"][i].items():
            assert torch.equal(got["state"][i][k], v), (i, k)
    ck = nvt.checkpoint(model, "done")
    ck2 = nvt.checkpoint(model, "again")  # before the first is waited for
    assert ck.wait() == (2, 2) and ck2.wait() == (3, 3)
    assert ck.done() and repr(ck) == ("<nvswap.torch.Checkpoint "
                                      "'nvswap.torch:2:done' generations "
                                      "(2, 2)>")
    nvt.restore(model)


def test_a_crash_between_the_two_commits_resumes_the_common_one(swapdir):
    # The parameter set commits a newer checkpoint, the optimizer set not.
    first_run(swapdir, tail=(
        "e = nvt.engine_of(model); "
        "e.pswap.checkpoint('nvswap.torch:2:step 4'); "
        "e.pswap.checkpoint_wait()"))
    model = offload(make(7), swapdir, "resume")
    # the parameter set, which was ahead, commits checkpoint 1 again
    assert nvt.stats(model)["resumed"]["generations"] == (3, 1)
    opt = nvt.AdamW(model.parameters(), lr=1e-2)
    train(model, opt, range(STOP + 1, STEPS + 1))
    ref, _ = reference()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict()
                            .values()):
        assert torch.equal(a, b), name
    # A clean close saves what changed since (above the number the
    # parameter set had reached alone) and the next run resumes there.
    nvt.restore(model)
    model = offload(make(7), swapdir, "resume")
    assert nvt.stats(model)["resumed"]["tag"] == "close"
    assert nvt.stats(model)["resumed"]["steps"] == STEPS
    gens = nvt.engine_of(model).pswap.generations()
    # the generation that was ahead is the one dropped
    assert [g["tag"][:15] for g in gens] == ["nvswap.torch:3:",
                                             "nvswap.torch:1:"]
    assert gens[0]["tag"] == "nvswap.torch:3:close"
    assert all(torch.equal(a, b) for a, b in zip(
        model.state_dict().values(), ref.state_dict().values()))
    nvt.restore(model)


def test_a_lost_set_is_refused_not_overwritten(swapdir):
    # Two checkpoints saved, then the optimizer set is gone (its
    # nvme_path moved, its directory wiped): that is no first checkpoint
    # cut short, and the parameter set's checkpoints must survive.
    first_run(swapdir, tail="nvt.checkpoint(model).wait()")
    import pathlib
    import shutil
    shutil.rmtree(pathlib.Path(swapdir) / "nvswap" / "optimizer")
    with pytest.raises(nvswap.Error) as ei:  # the library refuses
        offload(make(7), swapdir, "resume")
    assert ei.value.errno == errno.ENOENT, ei.value
    assert "optimizer" in str(ei.value)
    # persist='persistent' makes a new optimizer set: it must not make
    # the run start over from the model given
    with pytest.raises(nvswap.Error) as ei:
        offload(make(7), swapdir, "persistent")
    assert ei.value.errno == errno.EBADMSG, ei.value
    assert "the optimizer set []" in str(ei.value)
    with pytest.raises(nvswap.Error) as ei:  # still, the next time
        offload(make(7), swapdir, "resume")
    assert ei.value.errno == errno.EBADMSG, ei.value
    s = nvswap.Swapper(nvme_path=swapdir, name="param", buffer_size="64K",
                       buffer_count=3, persist="persistent")
    assert [g["tag"][:15] for g in s.generations()] == ["nvswap.torch:2:",
                                                        "nvswap.torch:1:"]
    s.close()


def test_refusals(swapdir):
    model = offload(make(0), swapdir, None)  # scratch
    with pytest.raises(nvswap.Error) as ei:
        nvt.checkpoint(model)
    assert ei.value.errno == errno.EINVAL
    assert "scratch space" in str(ei.value)
    nvt.restore(model)

    with pytest.raises(nvswap.Error) as ei:
        offload(make(0), swapdir, "resume")
    assert ei.value.errno == errno.ENOENT, ei.value
    # nothing of the set that was not there stays (its lock, set.data)
    assert os.listdir(swapdir) == []

    with pytest.raises(ValueError, match="persist must be"):
        offload(make(0), swapdir, "durable")

    first_run(swapdir)
    # Another model: a layer of another size is refused by the library,
    # the same sizes under other names by the record.
    other = torch.nn.Sequential(torch.nn.Linear(16, 33))
    with pytest.raises(nvswap.Error) as ei:
        offload(other, swapdir, "resume")
    assert "saved with another layout" in str(ei.value)
    seq = torch.nn.Sequential()
    for i, m in enumerate(make(0)):
        seq.add_module(f"m{i}", m)
    with pytest.raises(ValueError, match="layer 0 holds"):
        offload(seq, swapdir, "resume")

    # A resumed model's optimizer must be the saved one's class.
    model = offload(make(0), swapdir, "resume")
    with pytest.raises(ValueError, match="saved with nvswap.torch.AdamW"):
        nvt.Adam(model.parameters())
    opt = nvt.AdamW(model.parameters())  # the state still waits for it
    assert opt.param_groups[0]["weight_decay"] == 0.1
    with pytest.raises(RuntimeError, match="between steps"):
        with nvt.gathered(model[0]):
            nvt.checkpoint(model)
    nvt.restore(model)
