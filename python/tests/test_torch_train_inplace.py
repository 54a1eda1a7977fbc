# SPDX-License-Identifier: MIT
"""Training from weights in place (issue 49, item 1): offload(weights=)
of a model that trains registers each streamed layer where it lies in
the weights file, as a served model does: nothing is read or written at
load; a layer moves into the swap file at the first step that changes it
(its first dirty release), and a layer no step changes (frozen) is read
from the file for the whole run. Training is bit for bit the copy's and
the model's in memory, for torchhelp's GPT, Llama and GPT-2, in every
step mode; the weights removed before the first step are ESTALE naming
the file and the layer at the next forward, after it they are not
needed (unless a layer is frozen: then that layer's next read is
ESTALE), and nvswap's save_pretrained() into their directory goes
through once no layer reads from it (EBUSY naming the layers before)."""
import errno
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _load  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402
from torchhelp import GPT, STEP_MODES, batches, same, train  # noqa: E402
from weighthelp import child, hf_models, meta_gpt, on_meta  # noqa: E402

KW = dict(buffer_size="64K", buffer_count=3)


def saved(diskdir, ref):
    w = os.path.join(diskdir, "w")
    nvt.save_pretrained(ref, w)
    return w, os.path.join(w, "model.safetensors")


def layer_bytes(eng, layers):
    return sum(p.numel() * p.element_size() for i in layers
               for p in eng.layers[i])


def backed(eng):
    """The layers still read from the weights file (a layer l is the
    parameter swapper's tensor l << 20, nvswap/offload.h)."""
    return {i for i in eng.in_place if eng.pswap.info(i << 20)["backed"]}


@pytest.mark.parametrize("mode", list(STEP_MODES))
def test_a_gpt_trains_from_its_file_as_from_the_copy(diskdir, mode,
                                                     monkeypatch):
    torch.manual_seed(0)
    ref = GPT()
    w, _ = saved(diskdir, ref)
    data = batches(3)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    want = train(ref, ro, data)
    got = {}
    for in_place in (True, False):
        monkeypatch.setattr(_load, "IN_PLACE", in_place)
        s = os.path.join(diskdir, f"swap-{in_place}")
        m = nvt.offload(meta_gpt(), nvme_path=s, weights=w, **KW)
        eng = engine_of(m)
        try:
            nvt.wait(m)  # the copied layers' writes done
            st = eng.pswap.stats()
            assert bool(eng.in_place) == in_place
            # the layers in place: neither read nor written at load
            copied = set(range(len(eng.layers))) - eng.in_place
            assert layer_bytes(eng, copied) <= st["bytes_written"] <= \
                layer_bytes(eng, copied) + \
                64 * sum(len(eng.layers[i]) for i in copied)
            assert st["bytes_read"] == 0 and st["file_reads"] == 0
            assert backed(eng) == eng.in_place
            opt = nvt.AdamW(m.parameters(), lr=1e-2, **STEP_MODES[mode])
            got[in_place] = train(m, opt, data)
            nvt.wait(m)
            # every layer has changed: none is read from the file now
            assert backed(eng) == set()
            same(ref.state_dict(), m.state_dict())
        finally:
            nvt.restore(m)
    assert got[True] == got[False] == want


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_hugging_face_models_train_from_their_files(diskdir, name):
    cls, cfg = hf_models()[name]
    torch.manual_seed(0)
    ref = cls(cfg)
    ref.eval()  # GPT-2's dropout off: the two runs comparable
    w, path = saved(diskdir, ref)
    x = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(1))
    m = on_meta(cls, cfg)
    nvt.offload(m, nvme_path=os.path.join(diskdir, "swap"), weights=w, **KW)
    m.eval()
    eng = engine_of(m)
    try:
        assert eng.in_place, "no layer read in place"
        ro = torch.optim.AdamW(ref.parameters(), lr=1e-3)
        oo = nvt.AdamW(m.parameters(), lr=1e-3)
        for step in range(3):
            for model, opt in ((ref, ro), (m, oo)):
                model(input_ids=x, labels=x).loss.backward()
                opt.step()
                opt.zero_grad()
            if step == 0:
                nvt.wait(m)
                os.unlink(path)  # not needed after the first step
        same(ref.state_dict(), m.state_dict())
        # no layer reads from the directory: a save into it goes through
        nvt.save_pretrained(m, w)
        back = on_meta(cls, cfg)
        nvt.offload(back, nvme_path=os.path.join(diskdir, "swap2"),
                    weights=w, inference=True)
        same(ref.state_dict(), back.state_dict())
        nvt.restore(back)
    finally:
        nvt.restore(m)


def test_the_weights_removed_before_the_first_step_are_estale(diskdir):
    torch.manual_seed(0)
    w, path = saved(diskdir, GPT())
    m = nvt.offload(meta_gpt(), nvme_path=os.path.join(diskdir, "swap"),
                    weights=w, **KW)
    eng = engine_of(m)
    try:
        os.unlink(path)
        with pytest.raises(nvswap.Error) as ei:
            m(batches(1)[0][:, :-1])
        assert ei.value.errno == errno.ESTALE, ei.value
        assert "nvswap.torch: reading layer" in str(ei.value)
        assert f"{path} changed (deleted)" in str(ei.value), ei.value
    finally:
        eng.close()


def test_a_frozen_layer_is_read_from_its_file_for_the_whole_run(diskdir):
    torch.manual_seed(0)
    ref = GPT()
    w, path = saved(diskdir, ref)
    frozen = ref.blocks[0] if hasattr(ref, "blocks") else None
    assert frozen is not None, "torchhelp.GPT has blocks"
    frozen.requires_grad_(False)
    data = batches(3)
    want = train(ref, torch.optim.AdamW(
        [p for p in ref.parameters() if p.requires_grad], lr=1e-2), data)
    m = meta_gpt()
    m.blocks[0].requires_grad_(False)
    nvt.offload(m, nvme_path=os.path.join(diskdir, "swap"), weights=w, **KW)
    eng = engine_of(m)
    try:
        opt = nvt.AdamW([p for p in m.parameters() if p.requires_grad],
                        lr=1e-2)
        assert train(m, opt, data) == want
        nvt.wait(m)
        still = backed(eng)
        ids = {id(p) for p in m.blocks[0].parameters()}
        assert still and all(id(p) in ids for i in still
                             for p in eng.layers[i]), still
        same(ref.state_dict(), m.state_dict())
        with pytest.raises(nvswap.Error) as ei:  # it would replace them
            nvt.save_pretrained(m, w)
        assert ei.value.errno == errno.EBUSY, ei.value
        assert f"in place (layer {min(still)} (blocks.0." in str(ei.value)
        os.unlink(path)
        with pytest.raises(nvswap.Error) as ei:
            m(data[0][:, :-1])
        assert ei.value.errno == errno.ESTALE, ei.value
        assert f"{path} changed" in str(ei.value)
    finally:
        eng.close()


def test_a_trainer_lets_the_directory_go_once_its_layers_moved(diskdir):
    """Before the first step another process's save into the weights
    directory is refused (the files are read); at the forward after the
    step that moved every layer the hold goes, and it saves."""
    from test_torch_inplace import SAVE_INTO
    torch.manual_seed(0)
    w, _ = saved(diskdir, GPT())
    m = nvt.offload(meta_gpt(), nvme_path=os.path.join(diskdir, "swap"),
                    weights=w, **KW)
    eng = engine_of(m)
    try:
        r = child(SAVE_INTO, w)
        assert r.stdout.startswith(f"{errno.EBUSY} "), (r.stdout, r.stderr)
        opt = nvt.AdamW(m.parameters(), lr=1e-2, defer=False)
        data = batches(2)
        train(m, opt, data[:1])
        nvt.wait(m)
        assert backed(eng) == set() and eng.holds
        train(m, opt, data[1:])  # its forward lets the directory go
        assert not eng.holds
        assert child(SAVE_INTO, w).stdout.startswith("saved")
    finally:
        nvt.restore(m)
