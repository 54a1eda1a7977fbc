# SPDX-License-Identifier: MIT
"""Bad optimizer state dicts and checkpoint tags (issue 46, finding 9
and the unclear items): each is refused with a ValueError naming the key,
the parameter and the rule, and a refused load changes nothing; the
state is read back without writing, so a full disk does not stop it."""
import copy
import errno
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402

from torchhelp import same  # noqa: E402

W = 64


def _stepped(swapdir, dtype=None, **kw):
    """Two Linear(W) layers offloaded (bf16 with fp32 masters when dtype
    is given), one AdamW step taken."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.Linear(W, W))
    nvt.offload(m, nvme_path=swapdir, buffer_size="64K", dtype=dtype, **kw)
    opt = nvt.AdamW(m.parameters(), lr=1e-2)
    x = torch.randn(2, W, dtype=dtype or torch.float32)
    m(x).float().square().mean().backward()
    opt.step()
    opt.zero_grad()
    return m, opt


def _rekey(sd, where, key):
    bad = copy.deepcopy(sd)
    bad[where][key] = bad[where].pop(0)
    return bad


@pytest.mark.parametrize("where", ["state", "master"])
@pytest.mark.parametrize("key", ["abc", 0.5, (1,), 99, -1])
def test_a_key_no_group_lists_is_refused_naming_it(swapdir, where, key):
    """int(key) used to map them: 'abc' and a tuple raised bare Python
    errors, 0.5 loaded as entry 0, 99 an IndexError, -1 the last
    parameter. Keys now go through the saved groups' 'params', as torch's
    id_map."""
    m, opt = _stepped(swapdir, torch.bfloat16)
    before = opt.state_dict()
    with pytest.raises(ValueError) as ei:
        opt.load_state_dict(_rekey(before, where, key))
    assert str(ei.value) == (
        f"nvswap.torch.AdamW.load_state_dict: '{where}' has an entry "
        f"{key!r} that no saved parameter group lists (their 'params': "
        "[0, 1, 2, 3]): each key must be one of those")
    same(before, opt.state_dict())


def test_a_master_that_fails_late_leaves_every_master_unchanged(swapdir):
    """Finding 9: masters 0-2 changed and master 3 on the meta device:
    the copy of 3 failed after 0-2 were written. Every value is now
    checked and converted before the first write."""
    m, opt = _stepped(swapdir, torch.bfloat16)
    before = opt.state_dict()
    bad = copy.deepcopy(before)
    for i in range(3):
        bad["master"][i] = bad["master"][i] + 1
    bad["master"][3] = torch.empty(W, device="meta")
    with pytest.raises(ValueError, match=r"^loaded master 3 of '1.bias' is "
                       r"on the meta device: it has no values to load$"):
        opt.load_state_dict(bad)
    same(before, opt.state_dict())
    bad["master"][3] = torch.zeros(W, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"^loaded master 3 of '1.bias' is "
                       r"a torch.int64 tensor: optimizer state and masters "
                       r"are floating point$"):
        opt.load_state_dict(bad)
    same(before, opt.state_dict())


@pytest.mark.parametrize("value,rule", [
    (torch.zeros(3, 3), "has shape (3, 3)"),
    ("x", "is a str"),
    (None, "is a NoneType"),
])
def test_a_fresh_optimizer_refuses_state_of_the_wrong_shape(
        swapdir, value, rule):
    """A fresh optimizer took a (3, 3) exp_avg for a scalar and failed
    later with a C message about groups."""
    _, opt = _stepped(swapdir)
    sd = opt.state_dict()
    sd["state"][0]["exp_avg"] = value
    torch.manual_seed(0)
    m2 = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.Linear(W, W))
    nvt.offload(m2, nvme_path=swapdir, buffer_size="64K", rank=1)
    o2 = nvt.AdamW(m2.parameters(), lr=1e-2)
    with pytest.raises(ValueError) as ei:
        o2.load_state_dict(sd)
    assert str(ei.value) == (
        f"loaded state 0 ('0.weight') 'exp_avg' {rule}: it must be a "
        f"tensor of the parameter's shape ({W}, {W})")
    assert o2.state_dict()["state"] == {}
    del sd["state"][0]["exp_avg"]
    with pytest.raises(ValueError, match=r"^loaded state 0 \('0.weight'\) "
                       r"lacks \['exp_avg'\]: AdamW keeps \['step', "
                       r"'exp_avg', 'exp_avg_sq'\]$"):
        o2.load_state_dict(sd)
    sd["state"][0] = [1, 2]
    with pytest.raises(ValueError, match=r"^loaded state 0 \('0.weight'\) "
                       r"is a list, not a dict$"):
        o2.load_state_dict(sd)


def test_a_state_dict_of_another_layout_is_refused(swapdir):
    _, opt = _stepped(swapdir)
    for bad in ({}, {"state": {}, "param_groups": "x"}, [1],
                {"state": [], "param_groups": []}):
        with pytest.raises(ValueError, match="a state dict is a dict with "
                           "'state'"):
            opt.load_state_dict(bad)
    sd = opt.state_dict()
    sd["param_groups"][0]["params"] = [0, 0, 1, 2]
    with pytest.raises(ValueError, match="list a key twice"):
        opt.load_state_dict(sd)


def test_state_dict_reads_without_writing_on_a_full_disk(small_tmpfs):
    """state_dict() swapped each state group in and out, and the swap out
    wrote it back: on a full disk it raised ENOSPC. It now reads copies
    (Swapper.read) and writes nothing."""
    m, opt = _stepped(str(small_tmpfs), torch.bfloat16,
                      optimizer_buffer_size="128K")
    before = opt.state_dict()
    nvt.wait(m)
    written = nvt.stats(m)["bytes_written"]
    fd = os.open(small_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, bytes(1 << 16)):
            pass
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    same(before, opt.state_dict())
    same(before, opt.state_dict())
    assert nvt.stats(m)["bytes_written"] == written
    os.unlink(small_tmpfs / "filler")
    nvt.restore(m)


def test_a_tag_with_nul_is_refused_not_cut(swapdir):
    m, opt = _stepped(swapdir, persist="persistent")
    with pytest.raises(ValueError, match=r"^nvswap.torch.checkpoint: the "
                       r"tag holds a NUL character at 3: a tag is text "
                       r"without NUL"):
        nvt.checkpoint(m, "abc\0def")
    s = nvt.engine_of(m).pswap
    with pytest.raises(ValueError, match=r"^checkpoint: tag holds a NUL "
                       r"character at byte 1: the C library would cut it "
                       r"there"):
        s.checkpoint("a\0b")
    with pytest.raises(ValueError, match=r"^step_begin: name holds a NUL"):
        s.step_begin("a\0")
    assert nvt.checkpoint(m, "abc").wait()
    assert [g["tag"] for g in s.generations()][0].endswith(":abc")
    nvt.restore(m)


def test_a_step_count_given_as_a_number_becomes_a_tensor(swapdir, diskdir):
    """An older torch's (or a converted checkpoint's) "step": 3 was
    taken as is, and every later step() raised in torch's adam() (its
    steps must be tensors). It becomes a tensor, as torch's Adam makes
    it, and training goes on equal to torch's."""
    m, opt = _stepped(swapdir)
    sd = opt.state_dict()
    for st in sd["state"].values():
        st["step"] = int(st["step"])
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.Linear(W, W))
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    ref(torch.randn(2, W)).square().mean().backward()
    ro.step()
    ro.zero_grad()
    ro.load_state_dict(sd)
    opt.load_state_dict(sd)
    x = torch.randn(2, W)
    for mm, o in ((ref, ro), (m, opt)):
        mm(x).square().mean().backward()
        o.step()
    same(ref.state_dict(), m.state_dict())
    same(ro.state_dict(), opt.state_dict())


def test_amsgrad_loaded_into_a_pool_too_small_changes_nothing(swapdir):
    """The loaded groups turn amsgrad on for a fresh optimizer: a third
    state tensor per parameter: the pool buffer cannot hold even 4096
    elements of the three (nvswap.torch._parts.GRAIN; the state of a
    layer larger than a buffer is cut in parts of at least that many).
    Refused (EFBIG) before anything is written: the hyper-parameters and
    the state as they were (none)."""
    _, opt = _stepped(swapdir)
    sd = opt.state_dict()
    sd["param_groups"][0]["amsgrad"] = True
    sd["param_groups"][0]["lr"] = 5.0
    for st in sd["state"].values():
        st["max_exp_avg_sq"] = st["exp_avg_sq"].clone()
    torch.manual_seed(0)
    m2 = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.Linear(W, W))
    nvt.offload(m2, nvme_path=swapdir, buffer_size="64K", rank=1,
                optimizer_buffer_size="40K")
    o2 = nvt.AdamW(m2.parameters(), lr=1e-2)
    with pytest.raises(nvswap.Error) as ei:
        o2.load_state_dict(sd)
    assert ei.value.errno == errno.EFBIG, ei.value
    assert "buffer (40960 bytes) cannot hold 4096 elements of the state " \
        "of layer 0 (0.weight, 0.bias)" in str(ei.value)
    assert o2.state_dict()["state"] == {}
    assert o2.param_groups[0]["lr"] == 1e-2
    assert not o2.param_groups[0]["amsgrad"]


def test_a_load_failing_while_it_writes_is_retried_not_committed(swapdir):
    """A write failing part way through load_state_dict() (an injected
    EIO on the second layer) leaves part of the state loaded: everything
    but another load_state_dict() refuses (EBUSY), no checkpoint can be
    taken, and the retry loads it whole."""
    m, opt = _stepped(swapdir, persist="persistent")
    sd = opt.state_dict()
    want = copy.deepcopy(sd)
    for st in want["state"].values():
        st["exp_avg"] = st["exp_avg"] + 1
    real = opt._swap

    class FailSecond:
        def __init__(self):
            self.n = 0

        def __getattr__(self, name):
            return getattr(real, name)

        def swap_in(self, layer):
            self.n += 1
            if self.n == 2:
                raise nvswap.Error(errno.EIO, "injected")
            return real.swap_in(layer)

    opt._swap = FailSecond()
    with pytest.raises(nvswap.Error, match="injected"):
        opt.load_state_dict(want)
    opt._swap = real
    for fn in (opt.state_dict, opt.step, lambda: nvt.checkpoint(m)):
        with pytest.raises(nvswap.Error) as ei:
            fn()
        assert ei.value.errno == errno.EBUSY
        assert "after a load_state_dict() that failed while writing" in \
            str(ei.value)
    opt.load_state_dict(want)
    same(want, opt.state_dict())
    assert nvt.checkpoint(m).wait()
    nvt.restore(m)
