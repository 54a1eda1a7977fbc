# SPDX-License-Identifier: MIT
"""Larger than memory, for real: a model whose parameters, gradients and
Adam state are more than 3x a memory cgroup's limit is built on the meta
device, loaded from a safetensors file, and trained for several steps
(activation checkpointing, clipping) inside that cgroup; its losses and
final weights equal the same recipe's in memory (outside the cgroup) bit
for bit."""
import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _weights  # noqa: E402

MIB = 1 << 20
LIMIT = 640 * MIB  # the cgroup's limit
STEPS = 3

# The model and the recipe, run by this process (in memory) and by the
# child (offloaded, in the cgroup). No transformers: both interpreters.
RECIPE = textwrap.dedent("""
    import torch
    import torch.utils.checkpoint

    V, D, HEADS, FF, BLOCKS, T, B = 4096, 1024, 16, 4096, 10, 16, 2

    class Net(torch.nn.Module):
        def __init__(self, device=None):
            super().__init__()
            self.emb = torch.nn.Embedding(V, D, device=device)
            self.blocks = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(
                    D, HEADS, FF, dropout=0.0, batch_first=True,
                    device=device) for _ in range(BLOCKS))
            self.head = torch.nn.Linear(D, V, bias=False, device=device)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = torch.utils.checkpoint.checkpoint(
                    b, h, use_reentrant=False)
            return self.head(h)

    def train(model, opt):
        g = torch.Generator().manual_seed(7)
        losses, norms = [], []
        for _ in range(STEPS):
            tok = torch.randint(0, V, (B, T + 1), generator=g)
            out = model(tok[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                out.flatten(0, 1), tok[:, 1:].flatten())
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(
                model.parameters(), 1.0).item())
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, norms
    """).replace("STEPS", str(STEPS))

CHILD = textwrap.dedent("""
    import json, os, sys
    with open(sys.argv[1], "w") as f:  # into the cgroup, before torch
        f.write(str(os.getpid()))
    import torch
    import nvswap.torch as nvt
    RECIPE
    model = Net(device="meta")
    nvt.offload(model, nvme_path=sys.argv[2], weights=sys.argv[3],
                buffer_size="17M", buffer_count=4, lookahead=2)
    opt = nvt.AdamW(model.parameters(), lr=1e-3)
    losses, norms = train(model, opt)
    st = nvt.stats(model)
    nvt.save_pretrained(model, sys.argv[4])
    print(json.dumps({"losses": losses, "norms": norms,
                      "state_bytes": 4 * st["parameter_bytes"],
                      "recomputes": st["recomputes"]}))
    """).replace("RECIPE", RECIPE)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def memory_cgroup():
    """A memory cgroup limited to LIMIT: (its procs file, a function
    giving its peak usage). cgroup v2 (memory.max, memory.peak) or v1
    (memory.limit_in_bytes, memory.max_usage_in_bytes); skipped, saying
    why, where neither can be made."""
    name = f"nvswap-test-{os.getpid()}"
    tried = []
    for root, limit, peak in (
            ("/sys/fs/cgroup", "memory.max", "memory.peak"),
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes",
             "memory.max_usage_in_bytes")):
        ctl = os.path.join(root, "cgroup.controllers")
        if limit == "memory.max" and not (
                os.path.exists(ctl) and "memory" in open(ctl).read()):
            tried.append(f"{root}: no cgroup v2 memory controller")
            continue
        if not os.path.isdir(root):
            tried.append(f"{root}: absent")
            continue
        path = os.path.join(root, name)
        try:
            os.mkdir(path)
            _write(os.path.join(path, limit), str(LIMIT))
        except OSError as e:
            tried.append(f"{path}: {e.strerror}")
            if os.path.isdir(path):
                os.rmdir(path)
            continue
        if not os.path.exists(os.path.join(path, peak)):
            peak = None  # v2 before Linux 5.19: no peak to read
        yield (os.path.join(path, "cgroup.procs"),
               lambda: int(open(os.path.join(path, peak)).read())
               if peak else None)
        for _ in range(50):  # the child may take a moment to leave it
            try:
                os.rmdir(path)
                break
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)
        return
    pytest.skip("cannot make a memory cgroup here: " + "; ".join(tried))


def test_a_model_3x_larger_than_memory_trains_bit_for_bit(memory_cgroup,
                                                           diskdir):
    procs, peak = memory_cgroup
    ns = {}
    exec(RECIPE, ns)
    torch.manual_seed(0)
    ref = ns["Net"]()
    nvt.save_pretrained(ref, diskdir + "/init")
    weights = os.path.join(diskdir, "init", "model.safetensors")
    assert os.path.exists(weights)
    want = ns["train"](ref, torch.optim.AdamW(ref.parameters(), lr=1e-3))
    os.makedirs(os.path.join(diskdir, "swap"))
    script = os.path.join(diskdir, "child.py")
    _write(script, CHILD)
    r = subprocess.run([sys.executable, script, procs,
                        os.path.join(diskdir, "swap"), weights,
                        os.path.join(diskdir, "trained")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:],
                               r.stderr[-4000:])
    got = json.loads(r.stdout.splitlines()[-1])
    used = peak()
    print(f"state {got['state_bytes'] / MIB:.0f} MiB in a cgroup of "
          f"{LIMIT / MIB:.0f} MiB, peak "
          f"{'?' if used is None else used // MIB} MiB")
    assert got["state_bytes"] >= 3 * LIMIT  # params, grads, Adam x 2
    if used is not None:
        assert used <= LIMIT
    assert got["recomputes"] == STEPS * 10  # every block, every step
    assert (got["losses"], got["norms"]) == want
    trained = _weights.open_weights(os.path.join(diskdir, "trained"))
    sd = ref.state_dict()
    try:
        assert sorted(trained.keys()) == sorted(sd)
        for k, v in sd.items():
            assert torch.equal(trained.tensor(k), v), k
    finally:
        trained.close()
