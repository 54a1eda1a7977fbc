# SPDX-License-Identifier: MIT
"""Weights in place (issue 49, item 1): offload(weights=, inference=True)
streams each layer from the weights file as it lies, nothing copied:
Llama, GPT-2 and an MLP generate (forward) what the model in memory
does, no byte of the swap file is written or even allocated, the
weights tree keeps every size, mtime and ctime; a file truncated,
rewritten or removed under the served model raises nvswap.Error(ESTALE)
naming the layer and the file at its next read; nvswap's own
save_pretrained() into the directory is refused (EBUSY) while a model
reads from it; what is not served in place (dtype=, checksum=True) is
copied as before. Training from weights in place:
test_torch_train_inplace.py."""
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _savedir  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402
from filehelp import child_env, tree_state  # noqa: E402
from torchhelp import GPT  # noqa: E402
from weighthelp import (child, hf_models, meta_gpt, on_meta,  # noqa: E402
                        write_st)


def swap_blocks(swapdir):
    """Disk blocks the files under swapdir use, but for the locks (which
    hold the pid)."""
    return sum(os.lstat(os.path.join(d, n)).st_blocks
               for d, _, names in os.walk(swapdir) for n in names
               if n != "lock")


def served(model, w, swapdir, **kw):
    m = nvt.offload(model, nvme_path=swapdir, weights=w, inference=True,
                    **kw)
    return m, engine_of(m)


def test_an_mlp_is_served_from_its_file_in_place(diskdir):
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    ref = GPT()  # train mode (dropout 0): no fast path in either
    nvt.save_pretrained(ref, w, max_shard_size=20000)
    before = tree_state(w)
    x = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref(x)
    m, eng = served(meta_gpt(), w, s)
    try:
        assert eng.in_place, "no layer read in place"
        with torch.no_grad():
            assert torch.equal(m(x), want)
            assert torch.equal(m(x), want)  # read again: the same
        st = eng.pswap.stats()
        assert st["bytes_written"] == 0 and st["bytes_read"] == 0
        assert st["file_reads"] >= len(eng.in_place)
        assert swap_blocks(s) == 0
    finally:
        nvt.restore(m)
    assert tree_state(w) == before


@pytest.mark.parametrize("name,kw", [("llama", {}), ("gpt2", {}),
                                     ("llama", {"memory": "40K"})])
def test_hugging_face_models_generate_from_their_files(diskdir, name, kw):
    """memory=: the layers it keeps resident are read into memory once,
    the others stream in place."""
    cls, cfg = hf_models()[name]
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    ref = cls(cfg).eval()
    nvt.save_pretrained(ref, w, max_shard_size=40000)
    before = tree_state(w)
    ids = torch.arange(14).reshape(2, 7) * 7 % 96

    def gen(model):
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=6, do_sample=False,
                                  pad_token_id=0)
    want = gen(ref)
    m, eng = served(on_meta(cls, cfg).eval(), w, s, **kw)
    try:
        streamed = set(range(len(eng.layers))) - set(eng.in_cpu or ()) - \
            set(eng.rows)
        assert eng.in_place == streamed and streamed
        assert torch.equal(gen(m), want)
        assert eng.pswap.stats()["bytes_written"] == 0
        assert swap_blocks(s) == 0
    finally:
        nvt.restore(m)
    assert tree_state(w) == before


@pytest.mark.parametrize("change", ["truncate", "rewrite", "remove"])
def test_a_file_changed_under_a_served_model_is_estale(diskdir, change):
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    ref = GPT()
    want_sd = dict(ref.named_parameters())
    nvt.save_pretrained(ref, w)
    path = os.path.join(w, "model.safetensors")
    m, eng = served(meta_gpt(), w, s)
    x = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        m(x)
    if change == "truncate":
        os.truncate(path, 1000)
    elif change == "rewrite":
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 4)
            f.write(b"\0\0\0\0")
    else:
        os.unlink(path)
    with pytest.raises(nvswap.Error) as ei, torch.no_grad():
        m(x)
    assert ei.value.errno == errno.ESTALE, ei.value
    assert "nvswap.torch: reading layer" in str(ei.value)
    assert f"{path} changed" in str(ei.value)
    lost = {id(p) for i in eng.in_place for p in eng.layers[i]}
    kept = {n: p for n, p in m.named_parameters() if id(p) not in lost}
    assert lost and kept, "a layer read in place and one copied (rows)"
    with pytest.raises(nvswap.Error) as ei:
        nvt.restore(m)  # its file held the only copy of those layers
    assert ei.value.errno == errno.ESTALE, ei.value
    # the rest restored: the model is an ordinary one again, the layers
    # lost as placeholders (NaN), the others the file's values
    assert not hasattr(m, "_nvswap_engine")
    for n, p in m.named_parameters():
        assert p.device.type == "cpu", n
        if id(p) in lost:
            assert torch.isnan(p).all(), n
        else:
            assert torch.equal(p, want_sd[n]), n
    m.load_state_dict(ref.state_dict())  # the placeholders take it
    with torch.no_grad():
        assert torch.equal(m(x), ref(x))


def test_what_cannot_be_read_in_place_is_copied(diskdir):
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    ref = GPT()  # train mode (dropout 0): no fast path in either
    nvt.save_pretrained(ref, w)
    x = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        want = ref(x)
    for kw in ({"inference": True, "checksum": True},
               {"inference": True, "dtype": torch.bfloat16}):
        m = nvt.offload(meta_gpt(), nvme_path=s, weights=w, **kw)
        eng = engine_of(m)
        try:
            assert not eng.in_place, kw
            assert eng.pswap.stats()["bytes_written"] > 0, kw
            if "dtype" not in kw:
                with torch.no_grad():
                    assert torch.equal(m(x), want)
        finally:
            nvt.restore(m)



def test_tensors_not_64_byte_aligned_in_their_file_are_copied(diskdir):
    """A file whose data area is not 64-byte aligned (Hugging Face's
    writer aligns it to 8): read in place, each use would stage the layer
    (the pool keeps tensors 64-byte aligned: torch rounds differently off
    a cache line), so it is copied into the swap file once, as before;
    the outputs are the model's either way."""
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    os.makedirs(w)
    torch.manual_seed(0)
    ref = GPT()
    sd = ref.state_dict()
    for pad in range(64):  # a header whose length leaves data unaligned
        where = write_st(os.path.join(w, "model.safetensors"), sd,
                         {"format": "pt", "pad": "x" * pad})
        with open(os.path.join(w, "model.safetensors"), "rb") as f:
            start = 8 + int.from_bytes(f.read(8), "little")
        if start % 64 and all((start + b) % 64 for b, _ in where.values()):
            break
    x = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        want = ref(x)
    m, eng = served(meta_gpt(), w, s)
    try:
        assert not eng.in_place
        assert eng.pswap.stats()["bytes_written"] > 0
        with torch.no_grad():
            assert torch.equal(m(x), want)
    finally:
        nvt.restore(m)


SAVE_INTO = """
import sys, torch, nvswap, nvswap.torch as nvt
from nvswap.torch import _savedir
_savedir.LOCK_WAIT_S = 0.3
try:
    nvt.save_pretrained(torch.nn.Linear(4, 4), sys.argv[1])
    print("saved")
except nvswap.Error as e:
    print(e.errno, e)
"""


def test_a_save_into_the_directory_a_model_reads_is_refused(diskdir,
                                                            monkeypatch):
    """nvswap's save_pretrained() into the directory whose files a model
    reads in place would replace them under it: refused with EBUSY at
    once in this process (naming the layers), after LOCK_WAIT_S in
    another (the directory's shared flock), nothing changed; once the
    model is restored the save goes through."""
    monkeypatch.setattr(_savedir, "LOCK_WAIT_S", 0.3)
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    ref = GPT()
    nvt.save_pretrained(ref, w, max_shard_size=20000)
    before = tree_state(w)
    x = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        want = ref(x)
    m, eng = served(meta_gpt(), w, s)
    try:
        assert eng.in_place
        with pytest.raises(nvswap.Error) as ei:
            nvt.save_pretrained(GPT(), w)
        assert ei.value.errno == errno.EBUSY, ei.value
        assert f"{w}: a model of this process reads layers from its " \
            f"files in place (layer {min(eng.in_place)} (" in str(ei.value)
        r = child(SAVE_INTO, w)
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.startswith(f"{errno.EBUSY} "), r.stdout
        assert "another process serves a model from its files in place" \
            in r.stdout, r.stdout
        assert f"held now by process {os.getpid()} reading)" in r.stdout
        assert tree_state(w) == before
        with torch.no_grad():
            assert torch.equal(m(x), want)
    finally:
        nvt.restore(m)
    assert child(SAVE_INTO, w).stdout.startswith("saved")


HOLD_DIR = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_SH)  # another server of the same weights
print("held", flush=True)
sys.stdin.read()
"""


def test_processes_serving_one_model_share_the_disk(diskdir):
    """Issue 49, item 4: the processes serving a model in place hold
    its directory shared; each keeps to its share of the queue depth
    (128 / N, never below 8), counted again a second after one comes or
    goes, at a read."""
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    nvt.save_pretrained(GPT(), w)
    other = subprocess.Popen([sys.executable, "-c", HOLD_DIR, w],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline() == "held\n"
        m, eng = served(meta_gpt(), w, s)
        st = eng.pswap.stats()
        assert (st["disk_sharers"], st["queue_depth"]) == (2, 64), st
        other.stdin.close()
        other.wait(30)
        time.sleep(1.1)
        with torch.no_grad():
            m(torch.randint(0, 64, (2, 8)))
        st = eng.pswap.stats()
        assert (st["disk_sharers"], st["queue_depth"]) == (1, 128), st
        nvt.restore(m)
    finally:
        other.kill()
        other.wait()


def test_a_hold_goes_with_the_model_though_a_forked_child_shares_it(
        diskdir):
    """A forked child (a DataLoader worker) shares the directory's open
    file description, and with it the flock: restore() lets go of the
    lock itself, so a save goes through while the child lives. Two
    models of this process serving one directory count as one process
    sharing the disk."""
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    nvt.save_pretrained(GPT(), w)
    m, eng = served(meta_gpt(), w, s)
    m2, eng2 = served(meta_gpt(), w, os.path.join(diskdir, "swap2"))
    st = eng2.pswap.stats()
    assert (st["disk_sharers"], st["queue_depth"]) == (1, 128), st
    pid = os.fork()
    if pid == 0:  # the worker: holds whatever it inherited, then goes
        time.sleep(60)
        os._exit(0)
    try:
        nvt.restore(m)
        nvt.restore(m2)
        r = child(SAVE_INTO, w)
        assert r.stdout.startswith("saved"), (r.stdout, r.stderr)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def read_bytes():
    """This process's bytes read from storage (/proc/self/io)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def mlp(device=None):
    return torch.nn.Sequential(*[torch.nn.Linear(512, 512, bias=False,
                                                 device=device)
                                 for _ in range(8)])


def test_files_served_through_the_page_cache_are_read_into_it(diskdir):
    """page_cache="auto" that takes the cache (everything a forward
    streams fits) reads the files served in place into it behind the
    first forward (posix_fadvise WILLNEED on a thread: the readahead
    window's small reads made the cold first forward 2-3 x slower than
    O_DIRECT); page_cache=False leaves them alone: offload() reads the
    headers only (with the kernel's readahead: 128 KiB or so of the
    8 MiB file)."""
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    torch.manual_seed(0)
    ref = mlp()
    nvt.save_pretrained(ref, w)
    path = os.path.join(w, "model.safetensors")
    size = os.path.getsize(path)
    x = torch.randn(2, 512, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref(x)
    for pc in ("auto", False):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold
        os.close(fd)
        before = read_bytes()
        m, eng = served(mlp("meta"), w, s, page_cache=pc)
        try:
            assert eng.in_place and eng.page_cache == (pc == "auto")
            if pc == "auto":
                eng.warming.join(60)
                assert not eng.warming.is_alive()
                assert read_bytes() - before >= size - (1 << 20), \
                    (read_bytes() - before, size)
            else:
                assert eng.warming is None
                assert read_bytes() - before < 1 << 20, \
                    (read_bytes() - before, size)
            with torch.no_grad():
                assert torch.equal(m(x), want)
        finally:
            nvt.restore(m)


ON_RAMFS = """
import json, os, shutil, sys, warnings, torch
import nvswap.torch as nvt
from nvswap.torch._engine import engine_of
from test_torch_inplace import mlp
src, ram, swap = sys.argv[1], sys.argv[2], sys.argv[3]
x = torch.randn(2, 512, generator=torch.Generator().manual_seed(3))
out = {}
for name, w in (("disk", src), ("ramfs", os.path.join(ram, "w"))):
    if w != src:
        shutil.copytree(src, w)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        m = nvt.offload(mlp("meta"), nvme_path=swap, weights=w,
                        inference=True, page_cache=False)
    eng = engine_of(m)
    with torch.no_grad():
        y = m(x)
    out[name] = {"said": [str(g.message) for g in got
                          if "weights file" in str(g.message)],
                 "buffered": eng.pswap.stats()["files_buffered"],
                 "in_place": len(eng.in_place), "y": y.sum().item()}
    nvt.restore(m)
print(json.dumps(out))
"""


def can_unshare(*args):
    """Why unshare(1) with args cannot run here (not root, no unshare,
    a container without CAP_SYS_ADMIN), or None."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1)"
    r = subprocess.run(["unshare", *args, "true"], capture_output=True,
                       text=True, timeout=60)
    return None if r.returncode == 0 else \
        f"unshare {' '.join(args)}: {r.stderr.strip()}"


def test_weights_on_a_filesystem_without_o_direct_are_served_and_said(
        diskdir):
    """Weights served in place from ramfs, which refuses O_DIRECT: read
    through the page cache, the same outputs as from the disk, and one
    RuntimeWarning saying so (none for the disk)."""
    why = can_unshare("-m", "--propagation", "private")
    if why:
        pytest.skip(f"mounting a ramfs: {why}")
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    ram = os.path.join(diskdir, "ram")
    os.makedirs(ram)
    torch.manual_seed(0)
    nvt.save_pretrained(mlp(), w)
    here = os.path.dirname(os.path.abspath(__file__))
    env = child_env()
    env["PYTHONPATH"] = here + os.pathsep + env["PYTHONPATH"]
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'mount -t ramfs none "{ram}" && exec "$0" -c "$1" "$2" "$3" "$4"',
         sys.executable, ON_RAMFS, w, ram, s],
        env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["disk"]["said"] == [] and got["disk"]["buffered"] == 0
    assert got["ramfs"]["buffered"] == 1 and got["ramfs"]["in_place"] == 8
    assert got["ramfs"]["y"] == got["disk"]["y"]
    (said,) = got["ramfs"]["said"]
    assert said.startswith("nvswap.torch.offload: 1 weights file(s) served "
                           f"in place (in {os.path.join(ram, 'w')}) are "
                           "read through the page cache: ramfs refuses "
                           "O_DIRECT"), said


def test_the_warm_up_reads_spans_in_the_forwards_order():
    """warm_cache's spans: extents of one file within GAP of the span
    before them join it whatever their order inside it (a layer's
    tensors), another file or a farther extent starts a new one, and the
    order of the forward is kept (not the files' offsets)."""
    from nvswap.torch import _warm
    gap = _warm.GAP
    assert _warm.spans([("a", 4096, 4096), ("a", 0, 4096),
                        ("a", 8192, 4096), ("a", 8192 + 4096 + gap, 10),
                        ("a", 3 * gap, 4096), ("b", 0, 4096),
                        ("a", 0, 4096)]) == [
        ("a", 0, 8192 + 4096 + gap + 10), ("a", 3 * gap, 3 * gap + 4096),
        ("b", 0, 4096), ("a", 0, 4096)]
    assert _warm.spans([("a", 5 * gap, 10), ("a", 2 * gap, 10)]) == [
        ("a", 5 * gap, 5 * gap + 10), ("a", 2 * gap, 2 * gap + 10)]


def test_populate_reads_a_span_into_the_cache_and_says_a_short_file(
        diskdir):
    """populate() faults a span's pages in through a mapping (the real
    madvise(MADV_POPULATE_READ)), from an offset that is not
    page-aligned: it reads the span from the disk, and a read of the
    span afterwards reads nothing more (/proc/self/io). A span past the
    file's end is -EFAULT (no SIGBUS)."""
    from nvswap.torch import _warm
    path = os.path.join(diskdir, "f")
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = read_bytes()
        assert _warm.populate(fd, 100, 1 << 20) == 0
        assert read_bytes() - before >= 1 << 20, read_bytes() - before
        before = read_bytes()
        buf = bytearray(1 << 20)
        assert os.preadv(fd, [buf], 0) == 1 << 20
        assert read_bytes() - before < 64 << 10, read_bytes() - before
        assert _warm.populate(fd, 0, (1 << 20) + 8192) == -errno.EFAULT
    finally:
        os.close(fd)


def test_the_warm_up_asks_a_chunk_at_a_time_stops_and_falls_back(
        diskdir, monkeypatch):
    """warm_cache populates WARM_CHUNK bytes at a time (the real call,
    counted), ends at the chunk after its stop is set (Engine.close()),
    asks WILLNEED instead where the kernel has no MADV_POPULATE_READ
    (-EINVAL, before Linux 5.14), and skips a file it cannot open."""
    from nvswap.torch import _warm
    path = os.path.realpath(os.path.join(diskdir, "f"))
    with open(path, "wb") as f:
        f.write(b"\1" * (64 << 10))
    asked, go, inside = [], threading.Event(), threading.Event()
    real = _warm.populate

    def counted(fd, start, end):
        if os.readlink(f"/proc/self/fd/{fd}") == path:  # not an engine's
            asked.append((start, end))
            inside.set()
            go.wait(30)
        return real(fd, start, end)

    monkeypatch.setattr(_warm, "populate", counted)
    monkeypatch.setattr(_warm, "WARM_CHUNK", 8192)
    go.set()
    t = _warm.warm_cache([(path, 4096, 4096), (path, 0, 4096),
                          (path, 8192, 4096), (diskdir + "/gone", 0, 4096),
                          (path, 32768, 4096)])
    t.join(30)
    assert asked == [(0, 8192), (8192, 12288), (32768, 36864)]
    asked.clear()
    go.clear()
    inside.clear()
    t = _warm.warm_cache([(path, 0, 64 << 10)])
    assert inside.wait(30)
    t.stop.set()  # while the first chunk is read
    go.set()
    t.join(30)
    assert not t.is_alive() and asked == [(0, 8192)]

    advised = []
    real_advise = os.posix_fadvise

    def advise(fd, off, n, advice):
        if os.readlink(f"/proc/self/fd/{fd}") == path:
            advised.append((off, n, advice))
        return real_advise(fd, off, n, advice)

    monkeypatch.setattr(_warm, "populate", lambda fd, a, b: -errno.EINVAL)
    monkeypatch.setattr(os, "posix_fadvise", advise)
    t = _warm.warm_cache([(path, 0, 20480)])
    t.join(30)
    assert advised == [(0, 8192, os.POSIX_FADV_WILLNEED),
                       (8192, 8192, os.POSIX_FADV_WILLNEED),
                       (16384, 4096, os.POSIX_FADV_WILLNEED)]
