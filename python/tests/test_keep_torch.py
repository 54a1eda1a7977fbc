# SPDX-License-Identifier: MIT
"""nvswap.torch as the red-team round drove it (issue 34, "keep what
works"): AdamW bit for bit with torch's on a model with tied weights,
BatchNorm buffers, a frozen parameter, two parameter groups and an LR
scheduler; its optimizer state_dict equal to torch's and resumable into
a fresh offloaded copy; RSS flat over 50 steps."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402

from torchhelp import same  # noqa: E402

V, D = 48, 24


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.proj = torch.nn.Linear(D, D)
        self.bn = torch.nn.BatchNorm1d(D)
        self.frozen = torch.nn.Linear(D, D)
        self.frozen.weight.requires_grad_(False)  # its bias still trains
        self.head = torch.nn.Linear(D, V, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, x):
        h = self.emb(x).mean(1)
        h = torch.relu(self.bn(self.proj(h)))
        return self.head(self.frozen(h))


def data(n, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, V, (8, 5), generator=g),
             torch.randint(0, V, (8,), generator=g)) for _ in range(n)]


def groups(model):
    decay = [model.proj.weight, model.frozen.weight, model.emb.weight]
    rest = [model.proj.bias, model.bn.weight, model.bn.bias,
            model.frozen.bias]
    return [{"params": decay, "lr": 3e-2, "weight_decay": 0.1},
            {"params": rest, "lr": 1e-2, "weight_decay": 0.0}]


def make(opt_cls, model):
    opt = opt_cls(groups(model), betas=(0.8, 0.95))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return opt, sched


def train(model, opt, sched, batches):
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def pair_init():
    torch.manual_seed(0)
    return Net()


@pytest.fixture
def pair(swapdir):
    torch.manual_seed(0)
    ref = Net()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    return ref, off


def test_adamw_bit_exact_over_6_steps_with_groups_and_a_scheduler(pair):
    ref, off = pair
    ro, rs = make(torch.optim.AdamW, ref)
    oo, os_ = make(nvt.AdamW, off)
    batches = data(6)
    assert train(ref, ro, rs, batches) == train(off, oo, os_, batches)
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    assert [g["lr"] for g in oo.param_groups] == [3e-2 / 8, 1e-2 / 8]
    assert off.head.weight is off.emb.weight
    assert off.frozen.weight.requires_grad is False
    with nvt.gathered(off.frozen):  # unchanged by the steps
        assert torch.equal(off.frozen.weight, ref.frozen.weight)
    assert torch.equal(off.state_dict()["frozen.weight"],
                       pair_init().frozen.weight)
    assert int(off.bn.num_batches_tracked) == 6
    st = nvt.stats(off)
    assert st["bytes_written"] > 0 and st["bytes_read"] > 0


def test_optimizer_state_resumes_into_a_fresh_offloaded_copy(pair, diskdir):
    ref, off = pair
    ro, rs = make(torch.optim.AdamW, ref)
    oo, os_ = make(nvt.AdamW, off)
    batches = data(6)
    assert train(ref, ro, rs, batches[:3]) == \
        train(off, oo, os_, batches[:3])
    saved_w, saved_o, saved_s = off.state_dict(), oo.state_dict(), \
        os_.state_dict()
    same(ro.state_dict(), saved_o)
    torch.manual_seed(9)
    fresh = Net()
    nvt.offload(fresh, nvme_path=diskdir, buffer_size="64K",
                buffer_count=4, rank=1)
    fresh.load_state_dict(saved_w)
    fo, fs = make(nvt.AdamW, fresh)
    fo.load_state_dict(saved_o)
    fs.load_state_dict(saved_s)
    same(saved_o, fo.state_dict())
    assert train(ref, ro, rs, batches[3:]) == \
        train(fresh, fo, fs, batches[3:])
    same(ref.state_dict(), fresh.state_dict())
    same(ro.state_dict(), fo.state_dict())


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_rss_is_flat_over_50_steps(pair):
    _, off = pair
    oo, os_ = make(nvt.AdamW, off)
    batches = data(5)
    train(off, oo, os_, batches * 2)  # warm: pools, allocator, state
    before = rss()
    for _ in range(10):
        train(off, oo, os_, batches)
    grew = rss() - before
    print(f"RSS grew {grew} bytes over 50 steps")
    assert grew < 1 << 20, grew  # a leaked 64 KiB pool buffer a step: 3 MiB
