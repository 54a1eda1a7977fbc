# SPDX-License-Identifier: MIT
"""A model served from the persistent set it was trained in (issue 35):
offload(inference=True, persist='resume') reads the newest checkpoint's
parameters from the parameter set alone, read-only. Its outputs (and a
Llama's generate() tokens) are the trained model's, a budget keeps
layers resident as copies, every file of both sets stays byte for byte
as it was, and training resumes from the set afterwards bit-exact, as
if it had never been served."""
import errno
import hashlib
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _durable  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402
from test_torch_resume import ns, train  # noqa: E402  the same steps

batch = ns["batch"]

STEPS, STOP = 5, 3
V = 8192  # the Llama's vocabulary: its embedding and head 2 MiB each
KW = dict(buffer_size="64K", buffer_count=3)


def make(seed, device=None):
    """4 layers: 2176, 4224, 4224 and 1088 bytes in the pool."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32, device=device), torch.nn.ReLU(),
        torch.nn.Linear(32, 32, device=device), torch.nn.ReLU(),
        torch.nn.Linear(32, 32, device=device), torch.nn.ReLU(),
        torch.nn.Linear(32, 8, device=device))


def trained(swapdir):
    """STOP steps offloaded into persistent sets and checkpointed: the
    model restored."""
    model = nvt.offload(make(0), nvme_path=swapdir, persist="persistent",
                        **KW)
    opt = nvt.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    train(model, opt, range(1, STOP + 1))
    ck = nvt.checkpoint(model)
    assert ck.wait() == (1, 1)
    return nvt.restore(model)


def files(swapdir):
    """Every file under swapdir: its bytes' digest."""
    out = {}
    for root, _, names in os.walk(swapdir):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.join(root, n)] = hashlib.sha256(
                    f.read()).hexdigest()
    return out


def forward(model, x):
    with torch.no_grad():
        return model(x)


def test_a_checkpoint_is_served_read_only_and_training_resumes(swapdir,
                                                               monkeypatch):
    want_model = trained(swapdir)
    x = batch(99)[0]
    want = forward(want_model, x)
    before = files(swapdir)
    m = make(5, "meta")  # nothing of it is read: the checkpoint's are
    opened = []  # the Swappers made: the optimizer set is never opened
    real = nvswap.Swapper

    def spy(*args, **kw):
        opened.append((kw.get("name", kw.get("kind")), kw["buffer_size"],
                       kw["buffer_count"]))
        return real(*args, **kw)
    monkeypatch.setattr(nvswap, "Swapper", spy)
    nvt.offload(m, nvme_path=swapdir, inference=True, persist="resume",
                memory="12K")
    monkeypatch.undo()
    eng = engine_of(m)
    try:
        for _ in range(3):
            assert torch.equal(forward(m, x), want)
        s = nvt.stats(m)
        assert s["resumed"] == {"tag": f"step {STOP}", "steps": STOP,
                                "generations": (1, None)}
        assert eng.gswap is None and s["optimizer"] is None
        assert opened == [("param", 4096, 1), ("param", 4224, 2)]
        assert eng.layer_bytes == [2176, 4224, 4224, 1088]
        # the budget's choice (2 buffers of 8 KiB, the small layers
        # resident): copies, nothing of them read again
        assert eng.copied == {0, 3} and s["resident_layers"] == 2
        assert s["resident_bytes"] == 2176 + 1088
        assert s["last_forward_bytes_read"] == 2 * 4224
        # never read into a pool buffer either (read ahead by number, it
        # would hold one for good: the walk is known from the start)
        for i in eng.copied:
            assert eng.pswap.info(i << 20)["state"] == "on_nvme", i
        for (k, a), b in zip(m.state_dict().items(),
                             want_model.state_dict().values()):
            assert torch.equal(a, b), k
        # nothing it is asked to do writes to the set
        for what, call in (
                ("load_state_dict()",
                 lambda: m.load_state_dict(want_model.state_dict())),
                ("gathered(modify=True)",
                 lambda: nvt.gathered(m[2], modify=True).__enter__())):
            with pytest.raises(nvswap.Error) as ei:
                call()
            assert ei.value.errno == errno.EROFS
            assert ei.value.strerror.startswith(
                f"nvswap.torch: {what} on a model served from a "
                "persistent training set (inference=True)")
        with pytest.raises(nvswap.Error) as ei:
            nvt.checkpoint(m)
        assert ei.value.errno == errno.EROFS
        with pytest.raises(ValueError, match="inference=True"):
            nvt.AdamW(m.parameters())
        assert torch.equal(forward(m, x), want)
    finally:
        nvt.restore(m)
    for a, b in zip(m.parameters(), want_model.parameters()):
        assert torch.equal(a, b)
    assert files(swapdir) == before

    # training resumes from the set as if it had never been served
    model = nvt.offload(make(7), nvme_path=swapdir, persist="resume", **KW)
    assert nvt.stats(model)["resumed"]["generations"] == (1, 1)
    opt = nvt.AdamW(model.parameters(), lr=0.5)  # the saved lr wins
    train(model, opt, range(STOP + 1, STEPS + 1))
    ref = make(0)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    train(ref, ref_opt, range(1, STEPS + 1))
    for (k, a), b in zip(model.state_dict().items(),
                         ref.state_dict().values()):
        assert torch.equal(a, b), k
    nvt.restore(model)


def test_weights_given_are_checked_but_the_checkpoint_is_served(
        swapdir, tmp_path):
    """weights= beside a checkpoint, as in resuming: its keys and shapes
    are checked, its parameters not read (they are another model's
    here), and one that does not fit the model is refused."""
    want_model = trained(swapdir)
    other = str(tmp_path / "other.pt")
    torch.save(make(9).state_dict(), other)
    x = batch(99)[0]
    m = nvt.offload(make(5, "meta"), nvme_path=swapdir, inference=True,
                    persist="resume", weights=other)
    try:
        assert torch.equal(forward(m, x), forward(want_model, x))
    finally:
        nvt.restore(m)
    sd = make(9).state_dict()
    del sd["6.bias"]
    torch.save(sd, other)
    with pytest.raises(ValueError, match="6.bias"):
        nvt.offload(make(5, "meta"), nvme_path=swapdir, inference=True,
                    persist="resume", weights=other)


def test_on_a_device_every_layer_of_the_set_streams(swapdir):
    """device='cpu' (the staging a GPU uses, on any machine): nothing is
    kept resident there, so at the budget that keeps two layers on the
    CPU all four stream, each one checked against the buffers: the
    outputs the trained model's; a buffer below a layer refused."""
    want_model = trained(swapdir)
    x = batch(99)[0]
    m = nvt.offload(make(5), nvme_path=swapdir, inference=True,
                    persist="resume", memory="12K", device="cpu")
    try:
        assert torch.equal(forward(m, x), forward(want_model, x))
        assert not engine_of(m).copied
        # (the last layer's bias unpadded on disk: 1056 of its 1088)
        assert nvt.stats(m)["last_forward_bytes_read"] == \
            2176 + 4224 + 4224 + 1056
    finally:
        nvt.restore(m)
    with pytest.raises(ValueError, match=r"layer 1 \(2.weight, 2.bias\) "
                       r"takes 4224 bytes, more than the 4096-byte pool "
                       r"buffers"):
        nvt.offload(make(5), nvme_path=swapdir, inference=True,
                    persist="resume", buffer_size=4096, device="cpu")


def test_the_newest_checkpoint_is_served_not_what_followed_it(swapdir):
    """A step after the checkpoint, then the engine closed without
    saving: the C library commits what changed as a generation of its
    own ("destroy"), newer than the checkpoint. Serving (as resuming)
    takes the checkpoint: the weights of step STOP."""
    model = nvt.offload(make(0), nvme_path=swapdir, persist="persistent",
                        **KW)
    opt = nvt.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    train(model, opt, range(1, STOP + 1))
    nvt.checkpoint(model).wait()
    train(model, opt, [STOP + 1])
    nvt.wait(model)  # the step applied (a pending one is not committed)
    engine_of(model).close(save=False)
    ref = make(0)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    train(ref, ref_opt, range(1, STOP + 1))
    x = batch(99)[0]
    m = nvt.offload(make(5), nvme_path=swapdir, inference=True,
                    persist="resume")
    try:
        tags = [g["tag"] for g in engine_of(m).pswap.generations()]
        assert tags == ["destroy", f"{_durable.TAG_PREFIX}1:step {STOP}"]
        assert nvt.stats(m)["resumed"]["generations"] == (1, None)
        assert torch.equal(forward(m, x), forward(ref, x))
    finally:
        nvt.restore(m)


def test_a_trained_llama_generates_from_its_set(swapdir, tmp_path):
    """A Llama whose embedding and head (2 MiB each) are its largest
    layers, served at two budgets: its embedding read by rows (copied out
    of the set into its table), the head kept resident (read out whole),
    the pool's buffers no larger than the largest streamed layer: the
    trained model's tokens."""
    t = pytest.importorskip(
        "transformers", reason="transformers is not installed for this "
        "interpreter (Debian packages no transformers)")
    cfg = t.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=3, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = nvt.offload(t.LlamaForCausalLM(cfg), nvme_path=swapdir,
                        persist="persistent")
    opt = nvt.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, V, (2, 7),
                        generator=torch.Generator().manual_seed(2))
    for _ in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    nvt.checkpoint(model).wait()
    nvt.restore(model).eval()

    def generate(m):
        with torch.no_grad():
            return m.generate(ids, attention_mask=torch.ones_like(ids),
                              max_new_tokens=6, do_sample=False,
                              pad_token_id=0)
    want = generate(model)
    before = files(swapdir)
    # about the least budget (1 MiB reading rows, the head, two buffers of
    # the largest streamed layer), then 200 KB more: decoders resident
    for budget in (3309568, 3509568):
        with torch.device("meta"):
            m = t.LlamaForCausalLM(cfg).eval()
        nvt.offload(m, nvme_path=swapdir, inference=True,
                    persist="resume", memory=budget)
        try:
            assert torch.equal(generate(m), want)
            s, eng = nvt.stats(m), engine_of(m)
            assert s["row_layers"] == 1 and s["rows_read"] > 0
            head = eng.names.index(["lm_head.weight"])
            assert head in eng.copied
            assert s["param"]["buffer_size"] < eng.layer_bytes[head]
            streamed = [b for i, b in enumerate(eng.layer_bytes)
                        if i not in eng.copied and i not in eng.rows]
            assert streamed and max(streamed) <= s["param"]["buffer_size"]
            assert s["last_forward_bytes_read"] > 0
            for i in eng.copied:  # read out once, never into the pool
                assert eng.pswap.info(i << 20)["state"] == "on_nvme", i
            # the checkpoint exported for from_pretrained, from the set
            nvt.save_pretrained(m, str(tmp_path / "hf"))
        finally:
            nvt.restore(m)
        assert files(swapdir) == before
    assert torch.equal(generate(t.LlamaForCausalLM.from_pretrained(
        str(tmp_path / "hf")).eval()), want)


def test_what_serving_a_set_refuses(swapdir, monkeypatch):
    with pytest.raises(nvswap.Error) as ei:  # no set: nothing made
        nvt.offload(make(0), nvme_path=swapdir, inference=True,
                    persist="resume")
    assert ei.value.errno == errno.ENOENT
    assert "no persistent swap set to open read-only" in str(ei.value)
    assert os.listdir(swapdir) == []
    trained(swapdir)
    before = files(swapdir)
    seq = torch.nn.Sequential()
    for i, mod in enumerate(make(0)):
        seq.add_module(f"m{i}", mod)
    with pytest.raises(ValueError, match=r"serving a model whose layer 0 "
                       r"holds \['m0.weight', 'm0.bias'\], saved as "
                       r"\['0.weight', '0.bias'\]"):
        nvt.offload(seq, nvme_path=swapdir, inference=True,
                    persist="resume")
    with pytest.raises(ValueError, match=r"serving a model whose layer 4 "
                       r"holds \['7.weight', '7.bias'\]: the checkpoint "
                       r"has 4 layers"):
        nvt.offload(torch.nn.Sequential(*make(0), torch.nn.Linear(8, 8)),
                    nvme_path=swapdir, inference=True, persist="resume")
    with pytest.raises(ValueError, match="serving a model of 3 layers, "
                       "saved with 4"):
        nvt.offload(make(0)[:5], nvme_path=swapdir, inference=True,
                    persist="resume")
    with pytest.raises(ValueError, match="offloaded with dtype=torch."
                       "bfloat16, saved with dtype=None"):
        nvt.offload(make(0), nvme_path=swapdir, inference=True,
                    persist="resume", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"the checkpoint's layer 1 "
                       r"\(2.weight, 2.bias\) takes 4224 bytes, more than "
                       r"the 4096-byte pool buffers it would stream "
                       r"through"):
        nvt.offload(make(0), nvme_path=swapdir, inference=True,
                    persist="resume", buffer_size=4096)
    m = nvt.offload(make(0), nvme_path=swapdir, persist="resume", **KW)
    try:  # a set in training is not served beside it
        with pytest.raises(nvswap.Error) as ei:
            nvt.offload(make(0), nvme_path=swapdir, inference=True,
                        persist="resume")
        assert ei.value.errno == errno.EBUSY
    finally:
        nvt.restore(m)
    assert files(swapdir) == before


def test_a_checkpoint_without_the_parameter_sets_record_is_refused(
        swapdir, monkeypatch):
    """Checkpoints saved before the record went into the parameter set
    too (an older nvswap: here its _write_record skipped the copy)."""
    write = _durable._write_record

    def optimizer_set_only(swapper, blob, size=None):
        if size is None:
            write(swapper, blob)
    monkeypatch.setattr(_durable, "_write_record", optimizer_set_only)
    trained(swapdir)
    monkeypatch.undo()
    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(make(0), nvme_path=swapdir, inference=True,
                    persist="resume")
    assert ei.value.errno == errno.ENOTSUP
    assert "has no record in the parameter set (saved by an older " \
        "nvswap)" in str(ei.value)


def flip(path, needle):
    """One bit flipped in every copy of needle in the file (a generation
    the checkpoint shares with the placement after it holds one copy):
    how many."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        at, n = data.find(needle), 0
        while at >= 0:
            data[at + 100] ^= 0x10
            at, n = data.find(needle, at + 1), n + 1
        f.seek(0)
        f.write(data)
    return n


def test_a_corrupted_set_is_refused_naming_the_layer_and_file(swapdir):
    """A bit flipped in the set behind nvswap's back: the layer read out
    at offload (kept resident) and a streamed one read in a forward each
    raise nvswap.Error(EBADMSG) naming the layer, its parameters and the
    set's file (the CRC32C every read of a set checks), never outputs
    made from wrong weights; restore() then restores the rest, closes the
    set and raises the same; the set is not changed by any of it, and
    served again once repaired."""
    want = trained(swapdir)
    data = os.path.join(swapdir, "nvswap", "param", "rank0", "set.data")
    layer0 = want[0].weight.detach().numpy().tobytes()
    layer1 = want[2].weight.detach().numpy().tobytes()
    assert flip(data, layer0) >= 1
    before = files(swapdir)
    m = make(5, "meta")
    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(m, nvme_path=swapdir, inference=True, persist="resume",
                    memory="12K")
    assert ei.value.errno == errno.EBADMSG
    assert ei.value.strerror.startswith(
        "nvswap.torch: reading layer 0 (0.weight, 0.bias): "), ei.value
    assert "checksum mismatch reading " + data in ei.value.strerror
    assert not any(hasattr(p, "_nvswap") for p in m.parameters())
    assert files(swapdir) == before
    flip(data, layer0[:100] + bytes([layer0[100] ^ 0x10]) + layer0[101:])
    assert flip(data, layer1) >= 1  # a layer the budget streams
    before = files(swapdir)
    x = batch(99)[0]
    nvt.offload(m, nvme_path=swapdir, inference=True, persist="resume",
                memory="12K")
    assert engine_of(m).copied == {0, 3}
    for call in (lambda: forward(m, x), lambda: nvt.restore(m)):
        with pytest.raises(nvswap.Error) as ei:
            call()
        assert ei.value.errno == errno.EBADMSG
        assert ei.value.strerror.startswith(
            "nvswap.torch: reading layer 1 (2.weight, 2.bias): "), ei.value
        assert "checksum mismatch reading " + data in ei.value.strerror
    # restored but for layer 1, whose parameters hold no data
    assert not any(hasattr(p, "_nvswap") for p in m.parameters())
    assert torch.isnan(m[2].weight).all() and torch.isnan(m[2].bias).all()
    for i in (0, 4, 6):
        assert torch.equal(m[i].weight, want[i].weight), i
    assert files(swapdir) == before
    # the set was closed: repaired, it is served again
    flip(data, layer1[:100] + bytes([layer1[100] ^ 0x10]) + layer1[101:])
    nvt.offload(m, nvme_path=swapdir, inference=True, persist="resume",
                memory="12K")
    try:
        assert torch.equal(forward(m, x), forward(want, x))
    finally:
        nvt.restore(m)
