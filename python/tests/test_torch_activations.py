# SPDX-License-Identifier: MIT
"""nvswap.torch.save_on_nvme (issue 50, first slice): the tensors
autograd saves, to a swap file and back, bit for bit against the same
training in memory."""
import copy
import errno
import gc
import os
import signal
import subprocess
import sys
import threading

import pytest
import torch
import torch.utils.checkpoint

import nvswap
import nvswap.torch as nvt

import torchhelp
from torchhelp import GPT, CheckpointedGPT, batches, same

SMALL = dict(memory=4 * 16384, buffer_size=16384, threshold=0)


def loss_of(model, tok):
    out = model(tok[:, :-1])
    return torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                             tok[:, 1:].flatten())


def train(model, data, act=None, accumulate=1, checkpoint=False):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(0, len(data), accumulate):
        for tok in data[step:step + accumulate]:
            if act is not None:
                with act:
                    loss = loss_of(model, tok)
            else:
                loss = loss_of(model, tok)
            losses.append(loss.item())
            loss.backward()
            if act is not None:
                assert act.stats()["live"] == 0, act.stats()
        opt.step()
        opt.zero_grad()
    return losses, opt


@pytest.mark.parametrize("accumulate", [1, 4])
def test_a_gpt_trains_bit_equal_with_its_saved_tensors_on_nvme(
        diskdir, accumulate):
    """Every saved tensor of the test GPT on NVMe (threshold 0, 16 KiB
    buffers: the larger ones in pieces): losses, weights and the
    optimizer's state equal the run in memory bit for bit; every piece
    is freed by the backward that used it; the bytes went to the disk
    and came back."""
    torch.manual_seed(0)
    ref = GPT()
    off = copy.deepcopy(ref)
    data = batches(8)
    act = nvt.save_on_nvme(diskdir, **SMALL)
    want, ro = train(ref, data, accumulate=accumulate)
    got, oo = train(off, data, act, accumulate=accumulate)
    assert got == want
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    st = act.stats()
    assert st["saved"] > 0, st
    assert st["restored"] == st["saved"] + st["shared"], st
    assert st["live"] == 0
    # the newest piece of a forward may stay in the pool unwritten
    # (act.hold; exactly: test_torch_activations_pool.py)
    assert 0 < st["bytes_written"] <= st["saved_bytes"], st
    assert st["bytes_read"] > 0, st  # not all from resident buffers
    assert st["kept"] > 0  # the parameters autograd saved: not copied
    # the backward read ahead: pieces asked before their unpack
    assert act.swapper.stats()["prefetches"] > 0
    act.close()


def test_the_forwards_of_one_backward_stay_until_it(diskdir):
    """Several forwards before one backward (accumulation): their pieces
    stay on NVMe until the backward, then all are freed."""
    torch.manual_seed(0)
    model = GPT()
    act = nvt.save_on_nvme(diskdir, **SMALL)
    data = batches(3)
    losses = []
    for tok in data:
        with act:
            losses.append(loss_of(model, tok))
    live = act.stats()["live"]
    assert live > 0
    sum(losses).backward()
    assert act.stats()["live"] == 0
    act.close()


class Twice(torch.autograd.Function):
    """y = x @ w; saves x twice (two slots) and w."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, x2, w = ctx.saved_tensors
        assert torch.equal(x, x2)
        return g @ w.t(), x2.t() @ g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16,
                                   torch.float64])
def test_a_tensor_saved_twice_a_view_and_pieces_come_back_equal(
        diskdir, dtype):
    """A non-contiguous view (a transpose of a computed tensor) saved
    twice, four buffers long: written once, the backward gets the same
    values (each slot its own copy, the transpose's strides kept) and
    the gradients equal the run in memory's; the leaf w stays as it
    is."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(128, 64, generator=g).to(dtype).requires_grad_()
    w = torch.randn(128, 64, generator=g).to(dtype).requires_grad_()

    def run():
        h = (x * 1).t()  # 64 x 128, a view, not contiguous
        assert not h.is_contiguous()
        return Twice.apply(h, w).square().sum()

    run().backward()
    want = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    act = nvt.save_on_nvme(diskdir, memory=4 * 8192, buffer_size=8192,
                           threshold=0)
    with act:
        y = run()
    st = act.stats()
    # written once, the second save the same tensor alive and unchanged
    nbytes = 64 * 128 * x.element_size()
    assert st["shared"] == 1 and st["shared_bytes"] == nbytes, st
    assert st["saved"] >= 1 and st["saved_bytes"] >= nbytes, st
    y.backward()
    assert torch.equal(x.grad, want[0]) and torch.equal(w.grad, want[1])
    assert act.stats()["live"] == 0
    act.close()


def test_a_graph_dropped_without_backward_frees_its_space(diskdir):
    """A forward whose backward never runs: its pieces are freed when
    the graph goes, and the next step reuses the space (the swap file
    does not grow)."""
    torch.manual_seed(0)
    model = GPT()
    act = nvt.save_on_nvme(diskdir, **SMALL)
    tok = batches(1)[0]
    sizes = []
    for _ in range(3):
        with act:
            loss = loss_of(model, tok)
        assert act.stats()["live"] > 0
        del loss
        assert act.stats()["live"] == 0
        act.swapper.wait_all()
        sizes.append(sum(os.path.getsize(os.path.join(d, f))
                         for d in act.swapper.dirs
                         for f in os.listdir(d)))
    assert sizes[0] == sizes[1] == sizes[2], sizes
    act.close()


def test_retain_graph_reads_a_tensor_back_twice(diskdir):
    """backward(retain_graph=True) then backward again: the saved
    tensors are read back twice, the gradients are twice the single
    backward's (as in memory)."""
    torch.manual_seed(0)
    ref = GPT()
    off = copy.deepcopy(ref)
    tok = batches(1)[0]
    loss = loss_of(ref, tok)
    loss.backward(retain_graph=True)
    loss.backward()
    act = nvt.save_on_nvme(diskdir, **SMALL)
    with act:
        loss = loss_of(off, tok)
    loss.backward(retain_graph=True)
    assert act.stats()["live"] > 0  # still held by the graph
    loss.backward()
    for (n, a), (_, b) in zip(ref.named_parameters(),
                              off.named_parameters()):
        assert torch.equal(a.grad, b.grad), n
    del loss
    assert act.stats()["live"] == 0
    act.close()


def test_an_offloaded_model_hands_its_saved_activations_down(diskdir):
    """A model offloaded by nvt.offload(): its own hooks keep the pool
    tensors by reference and hand the rest down to save_on_nvme's,
    which take them to NVMe; training equals the run in memory."""
    torch.manual_seed(0)
    ref = GPT()
    off = nvt.offload(copy.deepcopy(ref), nvme_path=diskdir,
                      buffer_size=1 << 20, buffer_count=4)
    data = batches(4)
    act = nvt.save_on_nvme(os.path.join(diskdir, "act"), **SMALL)
    want, _ = train(ref, data)
    got = torchhelp.train(off, nvt.AdamW(off.parameters(), lr=1e-2), data,
                          act)
    assert got == want
    assert act.stats()["saved"] > 0 and act.stats()["live"] == 0
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    act.close()


def test_what_stays_in_memory(diskdir):
    """Below the threshold, a parameter, a frozen one, a view of one, a
    leaf that requires grad: kept as given (the same tensor object
    back); a computed tensor of the same size goes."""
    act = nvt.save_on_nvme(diskdir, memory="64K", buffer_size="16K")
    small = torch.ones(4)
    w = torch.nn.Parameter(torch.ones(1 << 19))
    frozen = torch.nn.Parameter(torch.ones(1 << 19), requires_grad=False)
    leaf = torch.ones(1 << 19, requires_grad=True)
    for t in (small, w, frozen, w[1:], frozen.view(512, 1024).t(), leaf):
        assert act.pack(t) is t
    assert act.stats()["saved"] == 0 and act.stats()["kept"] == 6
    assert act.pack(w * 2) is not None and act.stats()["saved"] == 1
    act.close()


class Flaky:
    """The store's Swapper, its evict() failing once at call number
    fail (a fault injected: the disk refusing a write's submission)."""

    def __init__(self, real, fail):
        self.real, self.fail, self.calls = real, fail, 0

    def evict(self, i):
        self.calls += 1
        if self.calls == self.fail:
            raise nvswap.Error(errno.EIO, "injected: evict refused")
        return self.real.evict(i)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_save_failing_midway_frees_its_pieces(diskdir):
    """A tensor of four pieces whose third write cannot be submitted (4
    buffers: each piece but the newest is written as the next is
    filled, so the fourth's fill starts the third's write): pack raises
    that nvswap.Error, and every piece it had registered is freed
    (nothing live, nothing registered)."""
    act = nvt.save_on_nvme(diskdir, memory=4 * 4096, buffer_size=4096,
                           threshold=0)
    assert act.hold == 1
    real = act.swapper
    act.swapper = Flaky(real, 3)
    with pytest.raises(nvswap.Error, match="injected") as e:
        act.pack(torch.ones(4 * 1024) * 2)
    assert e.value.errno == errno.EIO
    act.swapper = real
    assert act.stats()["live"] == 0 and real.ids() == []
    act.close()


def test_a_drop_inside_the_stores_lock_does_not_hang(diskdir):
    """Autograd may drop a saved tensor anywhere: in the cycle
    collector while this very thread holds the store's lock. The drop
    only queues its pieces; the next call frees them."""
    act = nvt.save_on_nvme(diskdir, **SMALL)
    box = [act.pack(torch.ones(4096) * 2)]
    box.append(box)  # a cycle: only the collector frees it

    def drop_while_locked():
        with act._lock:
            del box[:]  # the cycle broken and the _Packed dropped here
            gc.collect()

    t = threading.Thread(target=drop_while_locked)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the drop waited on the store's lock"
    assert act.stats()["live"] == 0 and act.swapper.ids() == []
    act.close()


def test_a_budget_of_fewer_than_two_buffers_is_refused(diskdir):
    with pytest.raises(ValueError, match=r"save_on_nvme: memory=16384 "
                       r"bytes holds 1 buffer\(s\) of buffer_size=16384"):
        nvt.save_on_nvme(diskdir, memory="16K", buffer_size="16K")
    with pytest.raises(ValueError, match="save_on_nvme: buffer_size="):
        nvt.save_on_nvme(diskdir, buffer_size="16Kb")


def test_a_closed_store_refuses_to_save_and_to_read_back(diskdir):
    """After close(): a save, and the unpack of a tensor saved before,
    raise nvswap.Error(EBADF) naming the store's directory."""
    act = nvt.save_on_nvme(diskdir, **SMALL)
    held = act.pack(torch.ones(1024) * 3)
    act.close()
    for call, arg in ((act.pack, torch.ones(1024) * 2),
                      (act.unpack, held)):
        with pytest.raises(nvswap.Error) as e:
            call(arg)
        assert e.value.errno == errno.EBADF
        assert f"the store in {act.path} is closed" in str(e.value)
    assert act.stats()["closed"]


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_blocks_send_their_inputs_and_train_bit_equal(
        diskdir, reentrant):
    """Activation checkpointing: what the checkpoints keep (each
    block's input: the only tensors shaped as the hidden states that are
    saved, the head saving its input flattened) goes through these hooks
    to NVMe, 3 a forward. A non-reentrant checkpoint keeps its inputs
    itself before torch 2.1 (they stay in memory: none). The
    recomputation runs in backward outside the hooks, and two steps
    equal the run in memory bit for bit."""
    torch.manual_seed(0)
    ref = CheckpointedGPT(reentrant, layers=3)
    off = copy.deepcopy(ref)
    data = batches(2)
    act = nvt.save_on_nvme(diskdir, **SMALL)
    hidden = []
    real = act.pack

    def pack(t):
        out = real(t)
        if out is not t and tuple(t.shape) == (2, 8, 32):
            hidden.append(t.shape)
        return out

    act.pack = pack  # __enter__ hands torch self.pack
    want, ro = train(ref, data)
    got, oo = train(off, data, act)
    assert got == want
    same(ref.state_dict(), off.state_dict())
    new = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 1)
    assert len(hidden) == len(data) * (3 if reentrant or new else 0)
    act.close()


def test_a_full_disk_fails_the_forward_naming_the_file_then_works(
        small_tmpfs):
    """The disk fills: the forward raises nvswap.Error(ENOSPC) naming the
    swap file (the write's error, seen once the pool's worth of writes
    is behind it), the model is as it was; once space is freed the next
    step's gradients are the ones computed in memory."""
    act = nvt.save_on_nvme(str(small_tmpfs), memory=4 * 65536,
                           buffer_size=65536, threshold=0)
    filler = os.path.join(small_tmpfs, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, bytes(4096)) == 4096:
            pass
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    x = torch.randn(64, 1024, requires_grad=True)
    with pytest.raises(nvswap.Error) as e:
        for _ in range(8):  # past the pool's writes in flight
            with act:
                y = (x * 2).sin().sum()
            y.backward()
    assert e.value.errno == errno.ENOSPC
    assert os.path.join(str(small_tmpfs), "nvswap", "activations") in \
        str(e.value), str(e.value)
    del e  # its traceback holds the failed forward's graph (torch < 2)
    gc.collect()
    assert act.stats()["live"] == 0
    x.grad = None
    os.unlink(filler)
    with act:
        y = (x * 2).sin().sum()
    assert act.stats()["saved"] >= 1
    y.backward()
    assert torch.equal(x.grad, 2 * (x * 2).cos())
    assert act.stats()["live"] == 0
    act.close()


CHILD = """
import os, sys, torch
import nvswap.torch as nvt
act = nvt.save_on_nvme(sys.argv[1], memory="256K", buffer_size="64K",
                       threshold=0)
with act:
    x = torch.randn(64, 1024, requires_grad=True)
    y = (x * 2).sin().sum()
act.swapper.wait_all()
print("saved", flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), 9)
# else: exit with y (and its saved tensors) alive, no close()
"""


def files_in(d):
    return sorted(os.path.relpath(os.path.join(r, f), d)
                  for r, _, fs in os.walk(d) for f in fs)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_nothing_is_left_behind_by_an_exit_or_a_kill(diskdir, how):
    """A process that exits holding saved tensors leaves no file; one
    killed -9 mid-step leaves its swap file, which the next store in the
    directory takes over (its own, empty) and removes at close."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", CHILD, diskdir, how],
                       env=env, capture_output=True, text=True)
    assert r.stdout.strip() == "saved", r.stderr
    if how == "exit":
        assert r.returncode == 0, r.stderr
        assert files_in(diskdir) == []
        return
    assert r.returncode == -signal.SIGKILL
    left = files_in(diskdir)
    assert "nvswap/activations/rank0/swap.0" in left, left
    act = nvt.save_on_nvme(diskdir, memory="256K", buffer_size="64K",
                           threshold=0)
    assert os.path.getsize(os.path.join(
        act.swapper.dirs[0], "swap.0")) == 0
    act.close()
    assert files_in(diskdir) == []


def offloaded_steps(model, data, after_forward=None):
    opt = nvt.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for tok in data:
        loss = loss_of(model, tok)
        losses.append(loss.item())
        if after_forward is not None:
            after_forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return losses


@pytest.mark.parametrize("reentrant", [None, True, False])
def test_offload_activations_nvme_trains_bit_equal(diskdir, monkeypatch,
                                                   reentrant):
    """offload(activations="nvme"): the store is made beside the
    parameter pool (<nvme_path>/nvswap/activations/rank0), the saved
    tensors of the model's forward go to it with and without
    checkpointing, training equals memory's bit for bit, stats() shows
    them, and restore() closes it (its files gone)."""
    from nvswap.torch import _activations
    monkeypatch.setattr(_activations, "THRESHOLD", 0)
    monkeypatch.setattr(_activations, "MEMORY", 4 * 16384)
    monkeypatch.setattr(_activations, "BUFFER", 16384)
    torch.manual_seed(0)
    ref = (GPT() if reentrant is None else
           CheckpointedGPT(reentrant, layers=3))
    off = nvt.offload(copy.deepcopy(ref), nvme_path=diskdir,
                      buffer_size=1 << 20, buffer_count=4,
                      activations="nvme")
    data = batches(3)
    want, _ = train(ref, data)
    saved = []  # the saves counted after each forward, before backward
    got = offloaded_steps(off, data, lambda: saved.append(
        nvt.stats(off)["activations"]["saved"]))
    assert got == want
    st = nvt.stats(off)["activations"]
    # no save in backward: a reentrant recomputation runs outside them
    assert saved[1:] == [saved[0] * k for k in range(2, len(data) + 1)]
    assert st["saved"] == saved[0] * len(data), (saved, st)
    assert st["saved"] > 0 and st["live"] == 0, st
    assert st["bytes_written"] > 0, st
    assert st["restored"] == st["saved"] + st["shared"], st
    act = nvt.engine_of(off).act
    where = os.path.join(diskdir, "nvswap", "activations", "rank0")
    assert act.swapper.dirs == [where]
    assert os.path.exists(os.path.join(where, "swap.0"))
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    assert act.swapper.closed
    assert not os.path.exists(os.path.join(where, "swap.0"))


def test_a_store_that_cannot_be_made_undoes_the_offload(diskdir,
                                                        monkeypatch):
    """offload(activations="nvme") whose store is refused (here a pool
    of one buffer): the ValueError, and the model is back in memory with
    its values, trainable as before."""
    from nvswap.torch import _activations
    monkeypatch.setattr(_activations, "MEMORY", 16384)
    monkeypatch.setattr(_activations, "BUFFER", 16384)
    torch.manual_seed(0)
    ref = GPT()
    model = copy.deepcopy(ref)
    with pytest.raises(ValueError, match="holds 1 buffer"):
        nvt.offload(model, nvme_path=diskdir, buffer_size=1 << 20,
                    buffer_count=4, activations="nvme")
    same(ref.state_dict(), model.state_dict())
    with pytest.raises(ValueError):
        nvt.engine_of(model)
    data = batches(2)
    assert train(model, data)[0] == train(ref, data)[0]


def test_offload_takes_a_store_and_leaves_it_open(diskdir):
    """activations= a store of the caller's: used, and still open after
    restore() (the caller closes it)."""
    torch.manual_seed(0)
    ref = GPT()
    act = nvt.save_on_nvme(os.path.join(diskdir, "act"), **SMALL)
    off = nvt.offload(copy.deepcopy(ref), nvme_path=diskdir,
                      buffer_size=1 << 20, buffer_count=4, activations=act)
    data = batches(2)
    assert offloaded_steps(off, data) == train(ref, data)[0]
    assert act.stats()["saved"] > 0
    nvt.restore(off)
    assert not act.swapper.closed
    act.close()


def test_offload_refuses_other_activations(diskdir):
    with pytest.raises(ValueError, match="activations= is for training: "
                       "inference=True saves nothing for a backward"):
        nvt.offload(GPT(), nvme_path=diskdir, inference=True,
                    activations="nvme")
    with pytest.raises(ValueError, match=r"activations='cpu': 'nvme' or "
                       "None"):
        nvt.offload(GPT(), nvme_path=diskdir, activations="cpu")
    with pytest.raises(TypeError, match="activations must be 'nvme', None "
                       "or a store made by nvswap.torch.save_on_nvme"):
        nvt.offload(GPT(), nvme_path=diskdir, activations=True)


@pytest.mark.parametrize("reentrant", [False, True],
                         ids=["non-reentrant", "reentrant"])
def test_a_checkpointed_hugging_face_llama_sends_its_checkpoints(
        diskdir, reentrant):
    """A Hugging Face Llama with gradient_checkpointing_enable(),
    offloaded with activations= a store: each decoder layer's input (what
    the checkpoints keep) goes to NVMe, and three steps equal the same
    recipe in memory bit for bit."""
    from torchhelp import hf
    tr = hf()
    cfg = tr.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    ref = tr.LlamaForCausalLM(cfg)
    off = copy.deepcopy(ref)
    kw = {"gradient_checkpointing_kwargs": {"use_reentrant": reentrant}}
    for m in (ref, off):
        m.gradient_checkpointing_enable(**kw)
        m.train()
    act = nvt.save_on_nvme(os.path.join(diskdir, "act"), **SMALL)
    nvt.offload(off, nvme_path=diskdir, buffer_size="64K", buffer_count=4,
                activations=act)
    data = [torch.randint(0, 96, (2, 12),
                          generator=torch.Generator().manual_seed(i))
            for i in range(3)]
    losses = {}
    for m, opt in ((ref, torch.optim.AdamW(ref.parameters(), lr=1e-2)),
                   (off, nvt.AdamW(off.parameters(), lr=1e-2))):
        losses[m is off] = []
        for tok in data:
            loss = m(input_ids=tok, labels=tok).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[m is off].append(loss.item())
    assert losses[True] == losses[False]
    st = act.stats()
    # each step: at least the three checkpointed layers' inputs
    assert st["saved"] >= 3 * 3 and st["live"] == 0, st
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    act.close()


def test_pack_and_unpack_keep_values_of_every_kind(diskdir):
    """pack() then unpack() by hand: complex with its lazy conjugate
    bit, bool, int8 of an odd size (4099 bytes), a transposed view and
    a padded one (strides kept), an expanded row (zero strides kept: its
    64 elements saved, not 512 x 64), a few columns of a wide matrix
    (contiguous: saving its span would cost 100 x): the same values,
    shape and dtype back."""
    act = nvt.save_on_nvme(diskdir, memory=4 * 4096, buffer_size=4096,
                           threshold=0)
    g = torch.Generator().manual_seed(5)
    z = torch.randn(700, dtype=torch.cfloat, generator=g) * 1
    cases = [z.conj(), torch.randn(33, 17, generator=g) > 0,
             torch.randint(-128, 127, (4099,), dtype=torch.int8,
                           generator=g),
             torch.randn(9, 513, generator=g).t(),
             torch.randn(2, 3, 8, 16, generator=g)[..., :13],
             torch.randn(1, 64, generator=g).expand(512, 64),
             torch.randn(40, 300, generator=g)[:, :3]]
    kept = [True, True, True, True, True, True, False]  # the strides
    assert cases[0].is_conj()
    packed = [act.pack(t) for t in cases]
    st = act.stats()
    assert st["saved"] == len(cases), st
    assert packed[5].nbytes == 64 * 4  # the row, once
    for t, p, strided in zip(cases, packed, kept):
        out = act.unpack(p)
        assert out.dtype == t.dtype and out.shape == t.shape
        assert not out.is_conj()
        assert out.stride() == (t.stride() if strided
                                else torch.empty(t.shape).stride())
        assert torch.equal(out, t)
    del packed, p
    assert act.stats()["live"] == 0
    act.close()


class SaveInput(torch.autograd.Function):
    """y = x * w (w a scalar leaf); saves x as given, and its backward
    hands the bytes it got back out through `seen`."""

    seen = []

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x)
        return x * w

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        SaveInput.seen.append(x.clone())
        return None, (g * x).sum()


def saves_seen(act, run):
    """The bytes each SaveInput's backward got, run() under the store
    act, in the order saved."""
    SaveInput.seen = []
    with act:
        y = run()
    y.backward()
    return list(reversed(SaveInput.seen))


def test_a_tensor_changed_in_place_between_saves_is_written_again(
        diskdir):
    """x saved, changed in place (its version moves on), saved again:
    not taken for the first save; each backward gets the bytes of its
    save (in memory autograd refuses that backward; torch's save_on_cpu
    keeps a CPU tensor as it is, and gives the changed bytes to both)."""
    w = torch.tensor(2.0, requires_grad=True)

    def run():
        x = torch.arange(4096.0)
        y = SaveInput.apply(x, w)
        x.mul_(3)
        return (y + SaveInput.apply(x, w)).sum()

    act = nvt.save_on_nvme(diskdir, **SMALL)
    got = saves_seen(act, run)
    assert len(got) == 2
    assert torch.equal(got[0], torch.arange(4096.0))
    assert torch.equal(got[1], torch.arange(4096.0) * 3)
    st = act.stats()
    assert (st["saved"], st["shared"]) == (2, 0), st
    act.close()


def test_memory_freed_and_taken_again_is_not_taken_for_a_save(diskdir):
    """Two tensors on the same memory one after the other (the first
    gone before the second is made: same address, shape and dtype, a
    version counter each), different bytes: both written, each backward
    gets its own. And a tensor saved twice while alive: written once."""
    w = torch.tensor(2.0, requires_grad=True)
    mem = bytearray(4096 * 4)

    def run():
        x = torch.frombuffer(mem, dtype=torch.float32)
        x.copy_(torch.arange(4096.0))
        y = SaveInput.apply(x, w)
        del x
        x2 = torch.frombuffer(mem, dtype=torch.float32)
        x2.fill_(7)  # a new tensor's counter: at 1 as x's was
        y = y + SaveInput.apply(x2, w) + SaveInput.apply(x2, w)
        return y.sum()

    act = nvt.save_on_nvme(diskdir, **SMALL)
    got = saves_seen(act, run)
    assert [t[5].item() for t in got] == [5.0, 7.0, 7.0]
    st = act.stats()
    assert (st["saved"], st["shared"]) == (2, 1), st
    assert st["restored"] == 3 and st["live"] == 0, st
    act.close()


def test_a_tensor_whose_memory_was_replaced_is_written_again(diskdir):
    """x saved, then x.data replaced (its memory let go, its version
    where it was) and a new tensor of the same size made (glibc hands
    large blocks back by mmap: often the same address): the new one is
    written, and each backward gets its own bytes."""
    w = torch.tensor(2.0, requires_grad=True)
    n = 10 << 20  # 40 MiB of fp32

    def run():
        x = torch.full((n,), 5.0)
        y = SaveInput.apply(x, w)
        x.data = torch.empty(0)
        x2 = torch.full((n,), 7.0)
        return (y + SaveInput.apply(x2, w)).sum()

    act = nvt.save_on_nvme(diskdir, memory="16M", buffer_size="4M")
    got = saves_seen(act, run)
    assert [t[n // 2].item() for t in got] == [5.0, 7.0]
    st = act.stats()
    assert (st["saved"], st["shared"]) == (2, 0), st
    act.close()


def test_one_input_of_three_projections_is_written_once(diskdir):
    """A (batch, tokens, width) input to three Linears (q, k and v): each
    matmul saves a view of it made for the call (gone before the next
    save); the view of the same live input, unchanged, is written once,
    and the gradients equal memory's."""
    torch.manual_seed(0)
    q, k, v = (torch.nn.Linear(256, 256) for _ in range(3))
    x0 = torch.randn(4, 512, 256)

    def run():
        x = x0.clone().requires_grad_()
        h = x * 1  # not a leaf: saved to NVMe
        (q(h) * k(h) + v(h)).sum().backward()
        return x.grad, [p.grad.clone() for m in (q, k, v)
                        for p in m.parameters()]

    want = run()
    for m in (q, k, v):
        m.zero_grad()
    act = nvt.save_on_nvme(diskdir, memory="16M", buffer_size="4M")
    with act:
        got = run()
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1]))
    st = act.stats()
    nbytes = 4 * 512 * 256 * 4
    assert st["shared"] == 2 and st["shared_bytes"] == 2 * nbytes, st
    assert st["live"] == 0, st
    act.close()
