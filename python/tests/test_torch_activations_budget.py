# SPDX-License-Identifier: MIT
"""Activations to NVMe against a budget (issue 50): a layer whose saved
tensors outgrow the store's pool is refused naming both sizes; and a
model whose saved activations alone are more than a memory cgroup's
limit trains inside that cgroup bit for bit as in memory."""
import copy
import errno
import gc
import json
import os
import re
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _weights  # noqa: E402

from torchhelp import (GPT, batches, memcgroup_or_skip, same,  # noqa: E402
                       train)

MIB = 1 << 20


def loss_of(model, tok):
    out = model(tok[:, :-1])
    return torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                             tok[:, 1:].flatten())


def test_a_layer_saving_more_than_the_pool_is_refused_naming_both(
        diskdir):
    """offload(activations=) a store whose pool (2 buffers of 1 KiB) is
    smaller than what one layer of the walk saves: the first forward
    raises nvswap.Error(ENOBUFS) naming the layer, its bytes and the
    pool's; nothing of the failed forward stays on NVMe, the parameters
    are untouched, and the same model offloaded again with a store that
    holds a layer trains bit for bit as in memory."""
    torch.manual_seed(0)
    ref = GPT()
    small = nvt.save_on_nvme(os.path.join(diskdir, "small"),
                             memory=2048, buffer_size=1024, threshold=0)
    off = nvt.offload(copy.deepcopy(ref), nvme_path=diskdir,
                      buffer_size=1 << 20, buffer_count=4,
                      activations=small)
    data = batches(3)
    with pytest.raises(nvswap.Error) as e:
        loss_of(off, data[0])
    assert e.value.errno == errno.ENOBUFS
    m = re.search(r"nvswap\.torch: layer (\d+) \(([^)]*)\), with what "
                  r"runs after it until the next layer, saves (\d+) "
                  r"bytes for backward, more than the activation pool "
                  r"holds \(2048 bytes: memory=2048, 2 buffers of 1024\)",
                  str(e.value))
    assert m, str(e.value)
    assert int(m.group(3)) > 2048
    names = m.group(2).split(", ")
    assert names[0] in dict(ref.named_parameters()), names
    del e
    gc.collect()
    assert small.stats()["live"] == 0, small.stats()
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    small.close()
    big = nvt.save_on_nvme(os.path.join(diskdir, "big"), memory="256K",
                           buffer_size="16K", threshold=0)
    nvt.offload(off, nvme_path=diskdir, buffer_size=1 << 20,
                buffer_count=4, activations=big)
    want = train(ref, torch.optim.AdamW(ref.parameters(), lr=1e-2), data)
    assert train(off, nvt.AdamW(off.parameters(), lr=1e-2), data) == want
    assert big.stats()["saved"] > 0
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    big.close()


def test_a_standalone_store_has_no_layers_and_refuses_nothing(diskdir):
    """save_on_nvme() alone knows no layers: a forward saving more than
    its pool goes through it in turn (the pool is the write-behind's
    and read-ahead's window) and trains as in memory."""
    torch.manual_seed(0)
    ref = GPT()
    model = copy.deepcopy(ref)
    act = nvt.save_on_nvme(diskdir, memory=2048, buffer_size=1024,
                           threshold=0)
    data = batches(2)
    want = train(ref, torch.optim.AdamW(ref.parameters(), lr=1e-2), data)
    assert train(model, torch.optim.AdamW(model.parameters(), lr=1e-2),
                 data, act) == want
    assert act.stats()["saved_bytes"] > 2 * 2048
    act.close()


# A stack whose saved activations are more than LIMIT a step, and whose
# parameters are small: run in memory by this process, and offloaded
# with activations on NVMe by the child, in a cgroup of LIMIT.
LIMIT = 512 * MIB
RECIPE = textwrap.dedent("""
    import torch

    V, D, HEADS, FF, BLOCKS, T, B, STEPS = 512, 16, 2, 2048, 10, 512, 8, 2

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, D)
            self.blocks = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(
                    D, HEADS, FF, dropout=0.0, batch_first=True,
                    activation="gelu")
                for _ in range(BLOCKS))
            self.head = torch.nn.Linear(D, V, bias=False)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    def train(model, opt):
        g = torch.Generator().manual_seed(7)
        losses = []
        for _ in range(STEPS):
            tok = torch.randint(0, V, (B, T + 1), generator=g)
            out = model(tok[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                out.flatten(0, 1), tok[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses
    """)

CHILD = textwrap.dedent("""
    import json, sys
    import torch
    import nvswap.torch as nvt
    RECIPE
    torch.manual_seed(0)
    model = Net()
    act = nvt.save_on_nvme(sys.argv[1], memory="64M", buffer_size="4M")
    nvt.offload(model, nvme_path=sys.argv[1], activations=act)
    losses = train(model, nvt.AdamW(model.parameters(), lr=1e-3))
    st = act.stats()
    nvt.save_pretrained(model, sys.argv[2])
    print(json.dumps({"losses": losses, "saved_bytes": st["saved_bytes"],
                      "live": st["live"]}))
    """).replace("RECIPE", RECIPE)


def test_activations_larger_than_memory_train_bit_equal_in_a_cgroup(
        diskdir):
    """The saved activations of one step are more than the cgroup's
    limit (512 MiB): offloaded with activations on NVMe (a 64 MiB
    store), the model trains inside the cgroup, its losses and trained
    weights equal the run in memory's bit for bit, and the cgroup's peak
    stays under its limit."""
    memcgroup = memcgroup_or_skip()
    ns = {}
    exec(RECIPE, ns)
    torch.manual_seed(0)
    ref = ns["Net"]()
    want = ns["train"](ref, torch.optim.AdamW(ref.parameters(), lr=1e-3))
    script = os.path.join(diskdir, "child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    os.makedirs(os.path.join(diskdir, "swap"))
    r, peak = memcgroup.run_in(
        LIMIT, [sys.executable, script, os.path.join(diskdir, "swap"),
                os.path.join(diskdir, "trained")],
        capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:],
                               r.stderr[-4000:])
    got = json.loads(r.stdout.splitlines()[-1])
    per_step = got["saved_bytes"] // ns["STEPS"]
    print(f"activations {per_step / MIB:.0f} MiB a step to NVMe, in a "
          f"cgroup of {LIMIT / MIB:.0f} MiB, peak "
          f"{'?' if peak is None else peak // MIB} MiB")
    assert per_step > LIMIT
    if peak is not None:
        assert peak <= LIMIT
    assert got["live"] == 0
    assert got["losses"] == want
    w = _weights.open_weights(os.path.join(diskdir, "trained"))
    try:
        sd = ref.state_dict()
        assert sorted(w.keys()) == sorted(sd)
        for k, v in sd.items():
            assert torch.equal(w.tensor(k), v), k
    finally:
        w.close()
