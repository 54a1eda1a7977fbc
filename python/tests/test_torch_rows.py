# SPDX-License-Identifier: MIT
"""An inference model's input embedding read by rows (issue 35): each
forward reads the rows of the ids it is given from the embedding's own
unnamed file, so the table takes neither a pool buffer nor the budget.
The outputs are the in-memory model's, bit for bit; every other use of
the weight (state_dict, restore, weights=) sees the whole table."""
import errno
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from filehelp import fd_direct, held_direct  # noqa: E402
from nvswap.torch import _rows  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402

ROWS, WIDTH = 8192, 64  # 2 MiB: more than what reading by rows takes
LAYER = 64 * 64 * 4 + 64 * 4  # a Linear(64, 64) in fp32
BUF = (LAYER + 4095) // 4096 * 4096  # its pool buffer, O_DIRECT-aligned


def model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Embedding(ROWS, WIDTH),
                               *[torch.nn.Linear(64, 64) for _ in range(4)])


def twin(ref):
    m = model()
    m.load_state_dict(ref.state_dict())
    return m


def ids(*shape, seed=6):
    return torch.randint(0, ROWS, shape,
                         generator=torch.Generator().manual_seed(seed))


def listing(top):
    return sorted(os.path.relpath(os.path.join(d, f), top)
                  for d, _, fs in os.walk(top) for f in fs)


def test_a_forward_reads_only_the_rows_of_its_ids(swapdir):
    """A 2 MiB table before four small layers, with memory= for the four
    layers, two buffers and what reading by rows takes: the table is
    read by rows (its own file, nothing in the swap directory's
    listing), the four layers stay resident, and a forward reads exactly
    its distinct ids' rows; the outputs are the in-memory model's."""
    ref = model()
    m = twin(ref)
    nvt.offload(m, nvme_path=swapdir, inference=True,
                memory=_rows.MEMORY + 4 * LAYER + 2 * BUF)
    try:
        s = nvt.stats(m)
        assert s["row_layers"] == 1 and s["row_bytes"] == ROWS * WIDTH * 4
        assert s["resident_layers"] == 4, s
        assert s["param"]["buffer_size"] == BUF  # not the table's size
        assert listing(swapdir) == ["nvswap/param/rank0/lock",
                                    "nvswap/param/rank0/swap.0"]
        read = 0
        for seed, shape in ((1, (2, 5)), (2, (1, 1)), (3, (3, 40))):
            x = ids(*shape, seed=seed)
            x[0, 0] = x[-1, -1]  # a repeated id is read once
            with torch.no_grad():
                assert torch.equal(m(x), ref(x))
            s = nvt.stats(m)
            distinct = len(set(x.flatten().tolist()))
            read += distinct
            assert s["last_forward_bytes_read"] == distinct * WIDTH * 4, s
            assert s["rows_read"] == read
        # consecutive ids (read as one run) and int32 ids
        x = torch.arange(100, 300, dtype=torch.int32).view(4, 50)
        with torch.no_grad():
            assert torch.equal(m(x), ref(x))
        assert nvt.stats(m)["last_forward_bytes_read"] == 200 * WIDTH * 4
        assert nvt.stats(m)["rows_read"] == read + 200
    finally:
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)
    assert type(m[0]).forward is torch.nn.Embedding.forward
    assert "forward" not in m[0].__dict__
    assert listing(swapdir) == []


def test_every_other_use_sees_the_whole_table(swapdir):
    """state_dict() and load_state_dict() read and write the whole table;
    a module reading the weight by attribute inside its forward (a head
    tied by hand) gets it whole; bad ids are refused as F.embedding
    refuses them, before any read."""

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(ROWS, WIDTH)

        def forward(self, x):
            return self.emb(x) @ self.emb.weight.t()

    torch.manual_seed(7)
    ref = Tied()
    m = Tied()
    m.load_state_dict(ref.state_dict())
    nvt.offload(m, nvme_path=swapdir, inference=True)
    try:
        assert nvt.stats(m)["row_layers"] == 1
        x = ids(2, 3)
        with torch.no_grad():
            assert torch.equal(m(x), ref(x))
        sd = m.state_dict()
        assert torch.equal(sd["emb.weight"], ref.emb.weight)
        new = torch.randn(ROWS, WIDTH)
        m.load_state_dict({"emb.weight": new})
        with torch.no_grad():
            assert torch.equal(m.emb(x), new[x])
        for bad in (torch.tensor([[0, ROWS]]), torch.tensor([-1])):
            with pytest.raises(IndexError, match="out of range for "
                               f"embedding 'emb.weight' of {ROWS} rows"):
                m.emb(bad)
        with pytest.raises(TypeError, match="takes integer ids"):
            m.emb(torch.zeros(2))
        assert m.emb(torch.zeros(0, 3, dtype=torch.long)).shape == \
            (0, 3, WIDTH)
    finally:
        nvt.restore(m)
    assert torch.equal(m.emb.weight, new)


def test_without_memory_the_default_buffer_is_a_small_layer(swapdir):
    """offload(inference=True) with no sizes: buffer_size is the largest
    module's parameters but the embedding's (read by rows)."""
    m = model()
    nvt.offload(m, nvme_path=swapdir, inference=True)
    try:
        s = nvt.stats(m)
        assert s["row_layers"] == 1
        assert s["param"]["buffer_size"] == BUF
        x = ids(3, 4)
        with torch.no_grad():
            assert torch.equal(m(x), twin(model())(x))
    finally:
        nvt.restore(m)


def test_what_is_not_read_by_rows(swapdir):
    """A training offload, a budget holding the whole model, max_in_cpu=
    (layers kept by hand), an embedding with a forward set on it, and
    one tied to another module."""
    for kw in (dict(), dict(inference=True, memory=64 << 20),
               dict(inference=True, max_in_cpu=1 << 30)):
        m = model()
        nvt.offload(m, nvme_path=swapdir, **kw)
        try:
            assert nvt.stats(m)["row_layers"] == 0, kw
            assert engine_of(m).rows == {}
        finally:
            nvt.restore(m)
    m = model()  # a forward set on the instance is the caller's: kept
    m[0].forward = lambda x: torch.nn.functional.embedding(x, m[0].weight)
    nvt.offload(m, nvme_path=swapdir, inference=True)
    try:
        assert nvt.stats(m)["row_layers"] == 0
        assert torch.equal(m(ids(2, 2)), twin(model())(ids(2, 2)))
    finally:
        nvt.restore(m)
    m = torch.nn.Sequential(torch.nn.Embedding(ROWS, WIDTH),
                            torch.nn.Linear(WIDTH, ROWS, bias=False))
    m[1].weight = m[0].weight
    nvt.offload(m, nvme_path=swapdir, inference=True)
    try:
        assert nvt.stats(m)["row_layers"] == 0
    finally:
        nvt.restore(m)


def test_a_budget_too_small_to_read_by_rows_streams_it_or_refuses(swapdir):
    """Below what reading by rows takes, the embedding is an ordinary
    layer again: with buffer_size= smaller than it, refused (EFBIG naming
    it) before anything is written, as any layer larger than a buffer."""
    m = model()
    with pytest.raises(nvswap.Error) as e:
        nvt.offload(m, nvme_path=swapdir, inference=True, buffer_size=32768,
                    memory=4 * 32768 + 2 * LAYER)
    assert e.value.errno == errno.EFBIG
    assert e.value.strerror.startswith(
        f"nvswap.torch.offload: parameter '0.weight' is {ROWS * WIDTH * 4} "
        "bytes, larger than a pool buffer (32768 bytes)"), e.value
    assert not any(hasattr(p, "_nvswap") for p in m.parameters())
    assert listing(swapdir) == []


def test_a_failed_row_read_raises_naming_the_embedding(swapdir):
    """The table's file made to end early (its descriptor pointed at an
    empty file, as a truncation would): nvswap.Error naming the
    embedding, not rows of zeros."""
    m = model()
    nvt.offload(m, nvme_path=swapdir, inference=True)
    try:
        table = next(iter(engine_of(m).rows.values()))
        empty = os.open(swapdir, os.O_TMPFILE | os.O_RDWR, 0o600)
        os.dup2(empty, table.fd)
        os.close(empty)
        with pytest.raises(nvswap.Error) as e, torch.no_grad():
            m(ids(2, 2))
        assert e.value.errno == errno.EIO, e.value
        assert e.value.strerror.startswith(
            "nvswap.torch: reading rows of the row table of '0.weight' "
            f"(an unnamed file in {swapdir}/nvswap/param/rank0): its file "
            f"is 0 bytes, not {ROWS * WIDTH * 4}: truncated behind "
            "nvswap's back ("), e.value
    finally:
        try:
            nvt.restore(m)
        except nvswap.Error:
            pass  # restore reads the whole table back: it is gone


def test_a_failed_table_write_loses_nothing(swapdir):
    """A write to the table that fails (its descriptor pointed at the
    same file open read-only, so reads work and writes fail with EBADF)
    raises naming the embedding and keeps the values it was given: the
    state dict has them, a forward tries the write again and raises
    while it fails, then reads them by rows once it succeeds; restore()
    after a failed write gives them back."""
    ref = model()
    m = twin(ref)
    torch.manual_seed(7)
    new = torch.nn.Embedding(ROWS, WIDTH)
    nvt.offload(m, nvme_path=swapdir, inference=True)
    table = next(iter(engine_of(m).rows.values()))
    good = os.dup(table.fd)

    def read_only():
        ro = os.open(f"/proc/self/fd/{good}", os.O_RDONLY)
        os.dup2(ro, table.fd)
        os.close(ro)

    want = ("nvswap.torch: writing the row table of '0.weight' (an unnamed "
            f"file in {swapdir}/nvswap/param/rank0): ")
    x = ids(3, 5)
    try:
        read_only()
        with pytest.raises(nvswap.Error) as e:
            m[0].load_state_dict(new.state_dict())
        assert e.value.errno == errno.EBADF, e.value
        assert e.value.strerror.startswith(want), e.value
        assert torch.equal(m.state_dict()["0.weight"], new.weight)
        with pytest.raises(nvswap.Error) as e, torch.no_grad():
            m(x)
        assert e.value.errno == errno.EBADF, e.value
        assert e.value.strerror.startswith(want), e.value
        os.dup2(good, table.fd)
        with torch.no_grad():
            out = m(x)
        assert table.pending is None
        with torch.no_grad():
            assert torch.equal(out, m[1:](new(x)))
        read_only()
        with pytest.raises(nvswap.Error):
            m[0].load_state_dict(ref[0].state_dict())
    finally:
        os.close(good)
    nvt.restore(m)
    assert torch.equal(m[0].weight, ref[0].weight)
    with torch.no_grad():
        assert torch.equal(m(x), ref(x))


def test_a_forward_after_the_offload_was_closed_is_refused(swapdir):
    """A forward after the offload was closed (without restore()) raises
    ValueError, not a read of a closed descriptor."""
    m = model()
    nvt.offload(m, nvme_path=swapdir, inference=True)
    engine_of(m).close(save=False)
    with pytest.raises(ValueError, match="the model's offload was closed "
                       r"\(restore\(\) was called\): '0.weight' has no "
                       "table to read"):
        m(ids(1, 1))


def test_a_meta_model_from_safetensors_reads_its_embedding_by_rows(
        swapdir, tmp_path):
    """A Llama built on the meta device, weights= from save_pretrained:
    the embedding goes from the file to its own table, and generate()
    gives the in-memory tokens."""
    t = pytest.importorskip("transformers", reason="transformers is not "
                            "installed for this interpreter")
    torch.manual_seed(0)
    cfg = t.LlamaConfig(vocab_size=8192, hidden_size=64,
                        intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=64)
    ref = t.LlamaForCausalLM(cfg).eval()
    ref.save_pretrained(str(tmp_path / "w"))
    with torch.device("meta"):
        m = t.LlamaForCausalLM(cfg).eval()
    nvt.offload(m, weights=str(tmp_path / "w"), nvme_path=swapdir,
                inference=True, memory=_rows.MEMORY + (3 << 20))
    try:
        s = nvt.stats(m)
        assert s["row_layers"] == 1 and s["row_bytes"] == 8192 * 64 * 4
        x = torch.randint(0, 8192, (2, 7),
                          generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            kw = dict(attention_mask=torch.ones_like(x), max_new_tokens=5,
                      do_sample=False, pad_token_id=0)
            assert torch.equal(m.generate(x, **kw), ref.generate(x, **kw))
    finally:
        nvt.restore(m)
    for (k, a), b in zip(ref.state_dict().items(),
                         m.state_dict().values()):
        assert torch.equal(a, b), k


def test_page_cache_opens_the_swap_file_and_the_table_without_o_direct(
        swapdir):
    """offload(page_cache=True): the swap file and the embedding's table
    are held without O_DIRECT (with page_cache=False, with), and the
    outputs stay the in-memory model's."""
    ref = model()
    for page_cache in (False, True):
        m = twin(ref)
        nvt.offload(m, nvme_path=swapdir, inference=True,
                    page_cache=page_cache)
        try:
            eng = engine_of(m)
            swap = os.path.join(eng.pswap.dirs[0], "swap.0")
            assert held_direct(swap) is (not page_cache)
            table = next(iter(eng.rows.values()))
            assert fd_direct(table.fd) is (not page_cache)
            x = ids(2, 6)
            with torch.no_grad():
                assert torch.equal(m(x), ref(x))
        finally:
            nvt.restore(m)
    with pytest.raises(TypeError,
                       match="page_cache must be True, False or 'auto'"):
        nvt.offload(model(), nvme_path=swapdir, page_cache=1)


# A load of weights= whose embedding table is large: the child measures
# its peak resident memory (VmHWM, reset through /proc/self/clear_refs)
# across offload(), then checks every byte of the table.
BIG = 65536  # rows of 1024 fp32: a 256 MiB table
LOAD_CHILD = """
import json, sys, torch
import nvswap.torch as nvt
from nvswap.torch import _rows, _weights

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) << 10

m = torch.nn.Sequential(torch.nn.Embedding(BIG, 1024, device="meta"),
                        torch.nn.Linear(1024, 16, device="meta")).eval()
dtype = getattr(torch, sys.argv[3]) if sys.argv[3] != "None" else None
def peak_of(call):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = status("VmRSS")
    call()
    return status("VmHWM") - before

peak = peak_of(lambda: nvt.offload(
    m, weights=sys.argv[1], nvme_path=sys.argv[2], inference=True,
    memory=_rows.MEMORY + (4 << 20), dtype=dtype))
s = nvt.stats(m)
out = sys.argv[2] + "/saved"
save_peak = peak_of(lambda: nvt.save_pretrained(m, out))
w = _weights.open_weights(sys.argv[1])
want = w.tensor("0.weight").to(dtype or torch.float32)
x = torch.randint(0, BIG, (3, 50), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    rows_equal = torch.equal(m[0](x), want[x])
    whole_equal = torch.equal(m.state_dict()["0.weight"], want)
saved = _weights.open_weights(out)
saved_equal = torch.equal(saved.tensor("0.weight"), want)
nvt.restore(m)
print(json.dumps({"peak": peak, "save_peak": save_peak,
                  "row_layers": s["row_layers"], "rows_equal": rows_equal,
                  "whole_equal": whole_equal, "saved_equal": saved_equal}))
""".replace("BIG", str(BIG))


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_peak_memory_of_a_large_table_load_is_one_piece(diskdir, dtype):
    """weights= with a 256 MiB embedding read by rows: offload() writes
    its table from the file in pieces (_rows.PIECE), and save_pretrained
    writes the file from the table so, so the process's peak memory
    grows by far less than the table in both (before: the whole table,
    and a cast copy of it, at once); every row comes back equal, in the
    file's dtype and cast to bfloat16 (read through staging), and in the
    file saved."""
    torch.manual_seed(3)
    ref = torch.nn.Sequential(torch.nn.Embedding(BIG, 1024),
                              torch.nn.Linear(1024, 16))
    nvt.save_pretrained(ref, os.path.join(diskdir, "w"))
    del ref
    script = os.path.join(diskdir, "child.py")
    with open(script, "w") as f:
        f.write(LOAD_CHILD)
    os.mkdir(os.path.join(diskdir, "swap"))
    r = subprocess.run([sys.executable, script,
                        os.path.join(diskdir, "w", "model.safetensors"),
                        os.path.join(diskdir, "swap"), str(dtype)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    table = BIG * 1024 * (2 if dtype else 4)
    print(f"table {table >> 20} MiB: peak grew {got['peak'] >> 20} MiB "
          f"loading, {got['save_peak'] >> 20} MiB saving")
    assert got["row_layers"] == 1
    assert got["rows_equal"] and got["whole_equal"] and got["saved_equal"]
    # the writer's staging buffers (4 x 16 MiB, pinned) and one piece
    assert got["save_peak"] < 96 << 20 < table
    # what any load takes whatever the table: the reader's aio handle
    # (its bounce memory, up to 8 MiB) and, to cast, its two 16 MiB
    # staging buffers; the small pool; one 8 MiB piece (_rows.PIECE)
    assert got["peak"] < 80 << 20 < table


@pytest.mark.parametrize("fmt", ["safetensors", "torch"])
@pytest.mark.parametrize("width", [3, 32])  # rows of 12 or 128 fp32 bytes
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_table_fills_in_pieces_of_whole_rows(diskdir, monkeypatch, fmt,
                                               width, dtype):
    """Table.fill from Weights.read_rows, in pieces of a few KiB: rows of
    12 bytes (pieces unaligned in the file) and of 128 (pieces cut at
    4 KiB boundaries), a short last piece, from a safetensors file (read
    straight in, or staged and cast) and from a torch.save'd one: the
    table holds the file's rows exactly, cast as copy_ casts, and gives
    them back in pieces (Table.pieces: zeros before the fill, a failed
    write's values after one). A range past the tensor's rows is
    refused."""
    from nvswap.torch import _weights
    monkeypatch.setattr(_rows, "PIECE", 10000)
    torch.manual_seed(4)
    ref = torch.nn.Embedding(1001, width)
    if fmt == "torch":
        path = os.path.join(diskdir, "w.bin")
        torch.save(ref.state_dict(), path)
    else:
        nvt.save_pretrained(ref, os.path.join(diskdir, "w"))
        path = os.path.join(diskdir, "w", "model.safetensors")
    w = _weights.open_weights(path)
    h = _rows.handle(None)
    table = _rows.Table(h, diskdir, "weight",
                        torch.empty((1001, width), dtype=dtype,
                                    device="meta"))
    want = ref.weight.detach().to(dtype)

    def pieces():  # each piece a view of one reused tensor: copied
        return torch.cat([p.clone() for p in table.pieces()])

    try:
        assert torch.equal(pieces(), torch.zeros_like(want))  # fresh
        table.fill(lambda start, dest: w.read_rows("weight", start, dest))
        assert torch.equal(table.read_all(), want)
        assert torch.equal(pieces(), want)
        table.pending = -want  # a failed write's values: they are served
        assert torch.equal(pieces(), -want)
        with pytest.raises(ValueError, match=r"rows 1000\.\.1002 of "
                           r"'weight', \[1001, " + str(width)):
            w.read_rows("weight", 1000, torch.empty(2, width))
    finally:
        table.close()
        w.close()
        h.close()


def test_a_failed_fill_raises_naming_the_table(swapdir):
    """Table.fill whose write fails (the descriptor pointed at the same
    file open read-only: EBADF) raises nvswap.Error naming the embedding
    and its directory, after the first piece (the load fails then)."""
    h = _rows.handle(None)
    table = _rows.Table(h, swapdir, "emb.weight",
                        torch.empty((ROWS, WIDTH), device="meta"))
    pieces = []
    try:
        ro = os.open(f"/proc/self/fd/{table.fd}", os.O_RDONLY)
        os.dup2(ro, table.fd)
        os.close(ro)
        with pytest.raises(nvswap.Error) as e:
            table.fill(lambda start, dest: pieces.append(start) or
                       dest.fill_(1.0))
        assert e.value.errno == errno.EBADF, e.value
        assert e.value.strerror.startswith(
            "nvswap.torch: writing the row table of 'emb.weight' (an "
            f"unnamed file in {swapdir}): "), e.value
        assert pieces == [0]
        assert table.fresh
    finally:
        table.close()
        h.close()
