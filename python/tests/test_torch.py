# SPDX-License-Identifier: MIT
"""nvswap.torch: a model's parameters, gradients and Adam state on NVMe,
trained bit for bit as in memory; its state dicts; its bad inputs."""
import copy
import errno
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _pools  # noqa: E402

from torchhelp import GPT, batches, same, train  # noqa: E402


def pair(swapdir, opt_cls="AdamW", seed=0, opt_kw=None, **model_kw):
    torch.manual_seed(seed)
    ref = GPT(**model_kw)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ref_opt = getattr(torch.optim, opt_cls)(ref.parameters(), lr=1e-2)
    off_opt = getattr(nvt, opt_cls)(off.parameters(), lr=1e-2,
                                    **(opt_kw or {}))
    return ref, off, ref_opt, off_opt


@pytest.mark.parametrize("opt_cls", ["Adam", "AdamW"])
@pytest.mark.parametrize("tie", [False, True])
def test_training_is_bit_identical_to_memory(swapdir, opt_cls, tie):
    ref, off, ro, oo = pair(swapdir, opt_cls, tie=tie)
    data = batches(3)
    assert train(ref, ro, data) == train(off, oo, data)
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    st = nvt.stats(off)
    assert st["bytes_written"] > 0 and st["bytes_read"] > 0
    # a tied weight is one parameter, swapped once
    assert st["parameters"] == len(list(ref.parameters()))
    assert (off.head.weight is off.emb.weight) == tie


def test_a_module_called_twice_in_one_forward(swapdir):
    ref, off, ro, oo = pair(swapdir, twice=True)
    data = batches(2)
    assert train(ref, ro, data) == train(off, oo, data)
    same(ref.state_dict(), off.state_dict())


@pytest.mark.parametrize("tie,twice", [(False, False), (True, True)])
def test_step_in_backward_is_bit_identical_with_less_io(swapdir, tie,
                                                        twice):
    data = batches(3)
    # against a step after backward (defer=False: a deferred step reads
    # the parameters once too, with the next forward's read)
    ref, off, ro, oo = pair(swapdir, tie=tie, twice=twice,
                            opt_kw={"defer": False})
    torch.manual_seed(0)
    fused = GPT(tie=tie, twice=twice)
    nvt.offload(fused, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                rank=1)
    fo = nvt.AdamW(fused.parameters(), lr=1e-2, step_in_backward=True)
    losses = train(ref, ro, data)
    assert train(off, oo, data) == losses == train(fused, fo, data)
    same(ref.state_dict(), fused.state_dict())
    same(ro.state_dict(), fo.state_dict())
    # no gradient I/O, no second read of the parameters for the step
    a, b = nvt.stats(off), nvt.stats(fused)
    assert b["bytes_read"] < a["bytes_read"]
    assert b["bytes_written"] < a["bytes_written"]
    assert b["optimizer"]["bytes_written"] < a["optimizer"]["bytes_written"]


def test_step_in_backward_refuses_a_second_backward_before_step(swapdir):
    torch.manual_seed(0)
    model = GPT()
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    opt = nvt.Adam(model.parameters(), lr=1e-2, step_in_backward=True)
    x = batches(1)[0][:, :-1]
    model(x).sum().backward()         # this backward stepped every layer
    stepped = model.state_dict()
    with pytest.raises(nvswap.Error) as ei:
        model(x).sum().backward()
    assert ei.value.errno == errno.EINVAL
    assert "second backward before step()" in str(ei.value)
    same(stepped, model.state_dict())  # nothing more was applied
    opt.step()
    opt.zero_grad()
    model(x).sum().backward()         # fine after step()
    assert nvt.stats(model)["layers_held"] == 0


def test_a_step_inside_gathered_keeps_its_update(swapdir):
    """A layer acquired twice is written back if either acquire changed
    it, whichever releases last."""
    small = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    twin = copy.deepcopy(small)
    nvt.offload(twin, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    so = torch.optim.Adam(small.parameters(), lr=0.1)
    to = nvt.Adam(twin.parameters(), lr=0.1)
    x = torch.randn(3, 4)
    small(x).sum().backward()
    twin(x).sum().backward()
    so.step()
    with nvt.gathered(twin):          # held while the step changes it
        to.step()
    nvt.wait(twin)                    # out of the pool: read from NVMe
    same(small.state_dict(), twin.state_dict())


def test_parameters_live_on_nvme_between_uses(swapdir):
    ref, off, ro, oo = pair(swapdir)
    w = off.head.weight
    # shape, dtype and device as before; one element of memory, NaN
    assert w.shape == ref.head.weight.shape and w.dtype == torch.float32
    assert w.stride() == (0, 0) and torch.isnan(w).all()
    with pytest.raises(RuntimeError):
        with torch.no_grad():
            w.add_(1)  # in place on the placeholder: refused
    with nvt.gathered(off.head):  # in memory for the block
        assert torch.equal(off.head.weight, ref.head.weight)
    assert off.head.weight.stride() == (0, 0)
    with nvt.gathered(off.head, modify=True):
        with torch.no_grad():
            off.head.weight.mul_(2)
    with torch.no_grad():
        ref.head.weight.mul_(2)
    same(ref.state_dict(), off.state_dict())
    # a forward releases everything it acquired; gradients go to NVMe
    x = batches(1)[0][:, :-1]
    off(x).sum().backward()
    assert all(p.grad is None for p in off.parameters())
    assert nvt.stats(off)["layers_held"] == 0


def test_zero_grad_needs_no_io(swapdir):
    ref, off, ro, oo = pair(swapdir)
    off(batches(1)[0][:, :-1]).sum().backward()
    nvt.wait(off)
    before = nvt.stats(off)
    oo.zero_grad()
    off.zero_grad()
    after = nvt.stats(off)
    assert (after["bytes_read"], after["bytes_written"]) == (
        before["bytes_read"], before["bytes_written"])


def test_gradients_accumulate_as_torchs_until_zeroed(swapdir):
    ref, off, ro, oo = pair(swapdir)
    for tok in batches(2):  # two backward passes, one step
        for m in (ref, off):
            m(tok[:, :-1]).square().mean().backward()
    ro.step()
    oo.step()
    same(ref.state_dict(), off.state_dict())


@pytest.mark.parametrize("how", ["return", "in_place", "in_backward"])
def test_grad_hook_sees_each_gradient_before_it_is_written(swapdir, how):
    """grad_hook(name, grad) gets every gradient of a backward, as autograd
    made it, and what it returns (or changes in place) is what the step
    uses: here halved, against torch halving p.grad before its step."""
    torch.manual_seed(0)
    ref = GPT()
    off = copy.deepcopy(ref)
    seen = []

    def hook(name, grad):
        seen.append((name, grad.clone()))
        if how == "in_place":
            grad.mul_(0.5)
            return None
        return grad * 0.5

    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                grad_hook=hook)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2,
                   step_in_backward=how == "in_backward")
    names = [n for n, _ in ref.named_parameters()]
    for tok in batches(2):
        seen.clear()
        for m, opt in ((ref, ro), (off, oo)):
            m(tok[:, :-1]).square().mean().backward()
            if m is ref:
                grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
                for p in ref.parameters():
                    p.grad.mul_(0.5)
            opt.step()
            opt.zero_grad()
        assert sorted(n for n, _ in seen) == sorted(names)
        for n, g in seen:
            assert torch.equal(g, grads[n]), n
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())


def test_grad_hook_bad_input(swapdir):
    model = GPT()
    with pytest.raises(TypeError, match="grad_hook must be callable, not "
                       "int"):
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                    grad_hook=3)
    assert not any(hasattr(p, "_nvswap") for p in model.parameters())
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                grad_hook=lambda name, g: g[:1])
    nvt.AdamW(model.parameters())
    with pytest.raises(TypeError, match=r"grad_hook returned torch.float32 "
                       r"\(1, 32\) for 'head.weight', whose gradient is "
                       r"torch.float32 \(64, 32\) \(return a tensor"):
        model(batches(1)[0][:, :-1]).sum().backward()


@pytest.mark.parametrize("then", ["zero_grad", "forward"])
def test_training_goes_on_after_a_backward_that_raised(swapdir, then):
    """A backward that raises drops autograd's end-of-backward callback:
    the layers it held and the gradient regions it left open are let go
    by the next zero_grad() (or, on torch >= 2, the next forward), and
    training goes on as in memory (it raised EBUSY in zero_grad
    before)."""
    torch.manual_seed(0)
    ref = GPT()
    off = copy.deepcopy(ref)
    calls = []

    def once(name, g):
        calls.append(name)
        if len(calls) == 3:
            raise RuntimeError("hook failed once")

    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                grad_hook=once)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    x = batches(1)[0][:, :-1]
    with pytest.raises(RuntimeError, match="hook failed once"):
        off(x).sum().backward()
    if then == "zero_grad":
        oo.zero_grad()
        assert train(ref, ro, batches(2)) == train(off, oo, batches(2))
        same(ref.state_dict(), off.state_dict())
    else:
        if not hasattr(torch._C, "_current_graph_task_id"):
            pytest.skip("torch < 2 cannot say that no backward runs: the "
                        "next zero_grad() finishes it")
        # the gradients it wrote stay, as torch leaves them in p.grad
        train(off, oo, batches(2))
    assert nvt.stats(off)["layers_held"] == 0
    assert not nvt.engine_of(off).bw_active


def test_state_dict_round_trips_and_load_writes_through(swapdir, diskdir):
    ref, off, ro, oo = pair(swapdir)
    same(ref.state_dict(), off.state_dict())
    torch.manual_seed(5)
    other = GPT().state_dict()
    written = nvt.stats(off)["bytes_written"]
    off.load_state_dict(other)
    ref.load_state_dict(other)
    same(ref.state_dict(), off.state_dict())
    x = batches(1)[0][:, :-1]
    assert torch.equal(ref(x), off(x))
    assert nvt.stats(off)["layers_held"] == 0
    off2 = copy.deepcopy(GPT())
    with pytest.raises(RuntimeError, match="size mismatch"):
        bad = dict(other)
        bad["head.weight"] = torch.zeros(3, 3)
        off.load_state_dict(bad)
    assert nvt.stats(off)["layers_held"] == 0
    del off2, written


def test_optimizer_state_dict_round_trips(swapdir, diskdir):
    ref, off, ro, oo = pair(swapdir, "Adam")
    data = batches(4)
    train(ref, ro, data[:2])
    train(off, oo, data[:2])
    saved_w, saved_o = off.state_dict(), oo.state_dict()
    same(ro.state_dict(), saved_o)
    # a second offloaded model resumes from the checkpoint
    torch.manual_seed(9)
    fresh = GPT()
    nvt.offload(fresh, nvme_path=diskdir, buffer_size="64K", buffer_count=4,
                rank=1)
    fresh.load_state_dict(saved_w)
    fo = nvt.Adam(fresh.parameters(), lr=1e-2)
    fo.load_state_dict(saved_o)
    same(saved_o, fo.state_dict())
    assert train(ref, ro, data[2:]) == train(fresh, fo, data[2:])
    same(ref.state_dict(), fresh.state_dict())
    same(ro.state_dict(), fo.state_dict())


def test_restore_brings_the_parameters_back(swapdir):
    ref, off, ro, oo = pair(swapdir)
    train(ref, ro, batches(1))
    train(off, oo, batches(1))
    dirs = nvt.engine_of(off).pswap.dirs + nvt.engine_of(off).gswap.dirs
    nvt.restore(off)
    assert not hasattr(off, "_nvswap_engine")
    # the swap files are gone
    assert [f for d in dirs for _, _, fs in os.walk(d) for f in fs] == []
    same(ref.state_dict(), off.state_dict())
    assert all(p.is_contiguous() and p.stride() != (0, 0)
               for p in off.parameters())
    with pytest.raises(ValueError, match="closed"):
        oo.step()
    with pytest.raises(ValueError, match="not an offloaded"):
        nvt.stats(off)
    # an ordinary model again: its gradients land in p.grad
    off(batches(1)[0][:, :-1]).sum().backward()
    assert all(p.grad is not None for p in off.parameters())


# ---- bad input -------------------------------------------------------------


def test_offloading_twice_is_refused(swapdir):
    ref, off, ro, oo = pair(swapdir)
    with pytest.raises(ValueError, match="already offloaded"):
        nvt.offload(off, nvme_path=swapdir, buffer_size="64K")
    train(off, oo, batches(1))  # the first offload still works


def test_a_parameter_larger_than_a_pool_buffer_is_refused(swapdir):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4),
                                torch.nn.Linear(256, 128))
    keep = copy.deepcopy(model.state_dict())
    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K")
    assert ei.value.errno == errno.EFBIG
    assert "'1.weight' is 131072 bytes" in str(ei.value)
    assert "(65536 bytes)" in str(ei.value)
    # nothing was changed: the model is still in memory
    assert not any(hasattr(p, "_nvswap") for p in model.parameters())
    same(keep, model.state_dict())
    nvt.offload(model, nvme_path=swapdir, buffer_size="256K")


def test_optimizer_bad_input(swapdir):
    lin = torch.nn.Linear(3, 3)
    with pytest.raises(ValueError, match="not offloaded"):
        nvt.Adam(lin.parameters())
    ref, off, ro, oo = pair(swapdir)
    with pytest.raises(ValueError, match="already has"):
        nvt.Adam(off.parameters())
    with pytest.raises(ValueError, match="Invalid learning rate"):
        nvt.AdamW(off.parameters(), lr=-1)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        nvt.offload(lin.weight, nvme_path=swapdir)
    with pytest.raises(ValueError, match="nvme_path"):
        nvt.offload(torch.nn.Linear(2, 2))


def test_a_forward_that_raises_releases_what_it_held(swapdir):
    class Boom(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x, fail=False):
            x = self.a(x)
            if fail:
                raise KeyError("boom")
            return self.b(x)

    torch.manual_seed(0)
    ref = Boom()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=2)
    x = torch.randn(2, 4)
    with pytest.raises(KeyError):
        off(x, fail=True)
    assert nvt.stats(off)["layers_held"] == 0
    assert torch.equal(off(x), ref(x))


def _run(code):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


COMMON = """
    import copy, errno, glob, os, resource, signal, sys
    import torch
    import nvswap, nvswap.torch as nvt
    sys.path.insert(0, {here!r})
    from test_torch import GPT, batches, train, same
    """


def test_a_failed_read_raises_in_step_and_step_resumes(swapdir):
    here = os.path.dirname(__file__)
    out = _run(COMMON.format(here=here) + f"""
    torch.manual_seed(0)
    ref = GPT(); off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path={swapdir!r}, buffer_size="64K",
                buffer_count=4, backend="psync")
    ro = torch.optim.Adam(ref.parameters(), lr=1e-2)
    oo = nvt.Adam(off.parameters(), lr=1e-2, defer=False)  # steps in step()
    data = batches(2)
    train(ref, ro, data[:1]); train(off, oo, data[:1])
    tok = data[1]
    for m in (ref, off):
        loss = torch.nn.functional.cross_entropy(
            m(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())
        loss.backward()
    nvt.wait(off)                 # every layer written back, evicted
    (f,) = glob.glob({swapdir!r} + "/nvswap/param/rank0/swap.*")
    keep = open(f, "rb").read()
    os.truncate(f, 0)             # the parameters' swap file is lost
    try:
        oo.step()
    except nvswap.Error as e:
        print("step", errno.errorcode[e.errno], "truncated" in str(e))
    with open(f, "r+b") as fh:    # the disk is repaired
        fh.write(keep)
    oo.step()                     # continues with the layers not stepped
    ro.step()
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    print("equal")
    """)
    assert out == "step EIO True\nequal\n"


def test_a_failed_gradient_write_raises_in_step_and_training_resumes(swapdir):
    # RLIMIT_FSIZE makes writes past 4 KiB fail with EFBIG (SIGXFSZ
    # ignored): the gradients' write-behind fails during backward.
    here = os.path.dirname(__file__)
    out = _run(COMMON.format(here=here) + f"""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    torch.manual_seed(0)
    ref = GPT(); off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path={swapdir!r}, buffer_size="64K",
                buffer_count=4, optimizer_buffer_count=8, backend="psync")
    ro = torch.optim.Adam(ref.parameters(), lr=1e-2)
    oo = nvt.Adam(off.parameters(), lr=1e-2)
    data = batches(3)
    train(ref, ro, data[:1]); train(off, oo, data[:1])
    before = off.state_dict()
    nvt.wait(off)                 # no parameter write-back pending
    tok = data[1]
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    for m in (ref, off):
        loss = torch.nn.functional.cross_entropy(
            m(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())
        loss.backward()
    try:
        oo.step()
    except nvswap.Error as e:
        print("step", errno.errorcode[e.errno])
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    same(before, off.state_dict())   # no weight changed
    oo.step(); oo.zero_grad()        # the gradients were kept: resume
    ro.step(); ro.zero_grad()
    train(ref, ro, data[2:]); train(off, oo, data[2:])
    same(ref.state_dict(), off.state_dict())
    print("equal")
    """)
    assert out == "step EFBIG\nequal\n"


def test_a_full_disk_during_write_behind_raises_in_step_and_resumes(
        small_tmpfs):
    """The real thing: a 2 MiB tmpfs filled up after offload(); the
    gradients' write-behind meets ENOSPC."""
    mnt = small_tmpfs
    torch.manual_seed(0)
    ref = GPT()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=str(mnt), buffer_size="64K",
                buffer_count=4)
    ro = torch.optim.Adam(ref.parameters(), lr=1e-2)
    oo = nvt.Adam(off.parameters(), lr=1e-2)
    st = os.statvfs(mnt)
    filler = mnt / "filler"
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (100 << 10)))
    tok = batches(1)[0]
    for m in (ref, off):
        torch.nn.functional.cross_entropy(
            m(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten()).backward()
    before = off.state_dict()
    with pytest.raises(nvswap.Error) as ei:
        oo.step()
    assert ei.value.errno == errno.ENOSPC
    assert "No space left on device" in str(ei.value)
    same(before, off.state_dict())   # no weight changed
    filler.unlink()                  # space freed: training resumes
    oo.step()
    ro.step()
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    nvt.restore(off)


def _peak(swapdir, layers):
    out = _run(f"""
    import torch, nvswap.torch as nvt
    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    base = hwm()                     # python + torch
    W = 1024                         # layers of 4 MiB, built on meta
    model = torch.nn.Sequential(*[torch.nn.Linear(W, W, bias=False,
                                                  device="meta")
                                  for _ in range({layers})])
    nvt.offload(model, nvme_path={swapdir!r}, buffer_size="4M",
                buffer_count=3, optimizer_buffer_size="8M",
                optimizer_buffer_count=3)
    opt = nvt.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(8, W)).square().mean().backward()
        opt.step(); opt.zero_grad()
    st = nvt.stats(model)
    print(4 * st["parameter_bytes"], st["pool_bytes"], hwm() - base)
    """)
    return [int(x) for x in out.split()]


def test_peak_memory_is_bounded_by_the_pools(swapdir, diskdir):
    """Parameters + gradients + Adam state at 4x and 16x the pools: the
    peak above python + torch stays under pools + 256 MiB + the largest
    layer, and grows by less than one layer from the smaller model to the
    4x larger one."""
    small = _peak(swapdir, 12)
    large = _peak(diskdir, 48)
    layer = 4 << 20
    assert small[0] >= 4 * small[1] and large[0] >= 16 * large[1]
    for state, pools, peak in (small, large):
        assert peak < pools + (256 << 20) + layer, (state, pools, peak)
    assert large[2] - small[2] < layer, (small, large)


def test_swap_files_in_memory_draw_a_warning(swapdir):
    """nvme_path on tmpfs works, and says that it defeats the purpose (a
    RuntimeWarning naming where and the filesystem); on the disk, no
    warning."""
    shm = "/dev/shm"
    if _pools.memory_fs(shm) is None:
        pytest.skip(f"{shm} is not a tmpfs here: nothing in memory to test")
    assert _pools.memory_fs(swapdir) is None  # the disk (conftest)
    where = os.path.join(shm, f"nvswap-test-{os.getpid()}")
    torch.manual_seed(0)
    model = GPT()
    try:
        with pytest.warns(RuntimeWarning, match=f"go to {where}/.*, on "
                          "tmpfs: they live in memory, which offloading "
                          "is meant to spare"):
            nvt.offload(model, nvme_path=where, buffer_size="64K")
        nvt.restore(model)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    model = GPT()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K")
    nvt.restore(model)
