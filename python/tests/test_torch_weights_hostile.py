# SPDX-License-Identifier: MIT
"""Weights files that change under a load, or are not files at all
(issue 46, round 4). A torch.save'd file truncated, rewritten, renamed
over or removed after open_weights() is nvswap.Error(EINVAL) naming the
file and the tensor (before: SIGBUS from torch.load(mmap=True), or the
new bytes loaded silently); a safetensors file so changed likewise
(before: read at the old offsets, values of neither file); a FIFO, a
directory or a device in any role is refused by its kind, never waited on
(before: the open hung); JSON nested too deep is refused naming the file;
model.safetensors is read before an index, as transformers reads it. A
torch.save'd file is read in place, bit for bit what torch.load gives, in
memory bounded by the pools."""
import errno
import json
import os
import pickle
import zipfile

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _load  # noqa: E402
from torchhelp import GPT, same  # noqa: E402
from weighthelp import (all_meta, child, dirs, files_under,  # noqa: E402
                        hf_models, meta_gpt, on_meta, raw_st, write_st)

KW = dict(buffer_size="64K", buffer_count=3)


def gpt_sd(seed):
    torch.manual_seed(seed)
    return GPT().state_dict()


def age(path):
    """Date path's times an hour back, so that a rewrite right after
    moves its mtime even where the kernel keeps coarse timestamps (before
    6.13: a write in the same tick as the last one can keep the mtime)."""
    t = os.stat(path).st_mtime - 3600
    os.utime(path, (t, t))


def change(path, how, other):
    """Change the file at path after it was opened: truncate it to half,
    rewrite 4 KiB in place, rename other over it, or remove it."""
    size = os.path.getsize(path)
    if how == "truncate":
        os.truncate(path, size // 2)
    elif how == "rewrite":
        with open(path, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\x5a" * 4096)
    elif how == "replace":
        os.rename(other, path)
    else:
        os.unlink(path)


WHAT = {"truncate": "truncated from {size} to {half} bytes",
        "rewrite": "rewritten in place (its modification time moved)",
        "replace": "removed, or replaced by a rename over its name",
        "remove": "removed, or replaced by a rename over its name"}


def changed_error(code, msg, path, key, how, size):
    """code and msg are the EINVAL of a file changed under a read of
    key."""
    assert code == errno.EINVAL, msg
    assert f"nvswap.torch: {path}: tensor '{key}': the file changed since " \
        "it was opened and checked: " + WHAT[how].format(
            size=size, half=size // 2) in msg, msg


BIN_CHANGED = r"""
import json, os, sys, torch
import nvswap, nvswap.torch as nvt
from test_torch_weights_hostile import age, change
from nvswap.torch import _load
d, swap = sys.argv[1], sys.argv[2]
sd = {f"{i}.weight": torch.randn(256, 256,
                                 generator=torch.Generator().manual_seed(i))
      for i in range(4)}
out = {}
for how in ("truncate", "rewrite", "replace", "remove", "offload"):
    path = os.path.join(d, how + ".bin")
    torch.save(sd, path)
    torch.save({k: -v for k, v in sd.items()}, path + ".new")
    size = os.path.getsize(path)
    age(path)
    try:
        if how == "offload":  # cut short before the third layer is read
            _load.IN_PLACE = False  # copied at load, not read in place
            model = torch.nn.Sequential(*[torch.nn.Linear(
                256, 256, bias=False, device="meta") for _ in range(4)])
            real, calls = _load.Loader.add, []
            def add(self, *a):
                calls.append(1)
                if len(calls) == 3:
                    change(path, "truncate", None)
                return real(self, *a)
            _load.Loader.add = add
            try:
                nvt.offload(model, nvme_path=swap, buffer_size="256K",
                            buffer_count=2, weights=path)
            finally:
                _load.Loader.add = real
        else:
            w = nvt.open_weights(path)
            assert torch.equal(w.tensor("0.weight"), sd["0.weight"])
            change(path, how, path + ".new")
            w.tensor("3.weight")
        out[how] = ["loaded", size]
    except nvswap.Error as e:
        out[how] = [e.errno, str(e), size]
    if how == "offload":
        out["meta"] = all(p.is_meta for p in model.parameters())
print(json.dumps(out))
"""


def test_a_torch_file_changed_after_open_is_einval_not_sigbus(diskdir):
    """In a child (before, torch.load(mmap=True) died of SIGBUS reading a
    page the truncation took, and loaded a rewrite's bytes silently):
    each change is the EINVAL naming the file, the tensor and the change,
    and the process lives; an offload whose file is cut short midway
    leaves the model as given."""
    swap = os.path.join(diskdir, "swap")
    os.makedirs(swap)
    r = child(BIN_CHANGED, diskdir, swap)
    assert r.returncode == 0, f"the child died (signal " \
        f"{-r.returncode if r.returncode < 0 else 'none'}): {r.stderr[-3000:]}"
    got = json.loads(r.stdout.splitlines()[-1])
    for how in ("truncate", "rewrite", "replace", "remove"):
        path = os.path.join(diskdir, how + ".bin")
        assert got[how][0] != "loaded", (how, got[how])
        changed_error(*got[how][:2], path, "3.weight", how, got[how][2])
    path = os.path.join(diskdir, "offload.bin")
    assert got["offload"][0] == errno.EINVAL, got["offload"]
    msg = got["offload"][1]
    assert f"{path}: tensor '2.weight': the file changed since it was " \
        "opened and checked: truncated from" in msg and "now lie beyond " \
        "the end of the file" in msg, msg
    assert got["meta"] and files_under(swap) == []


@pytest.mark.parametrize("how", ["truncate", "rewrite", "replace", "remove"])
def test_a_safetensors_file_changed_after_open_is_einval(diskdir, how):
    """Before: a truncation named the offset but not the tensor, a
    rewrite or a rename over the file gave the new bytes at the old
    offsets (values of neither file), a removal ENOENT. Now every read
    goes through the descriptor that was checked, which says the file
    changed: EINVAL naming the file, the tensor, the change (and for a
    truncation, the tensor's bytes and both sizes)."""
    w, _ = dirs(diskdir)
    sd = gpt_sd(0)
    path = os.path.join(w, "model.safetensors")
    write_st(path, sd)
    other = os.path.join(w, "other.safetensors")
    write_st(other, {k: sd[k] for k in reversed(list(sd))})  # moved about
    size, last = os.path.getsize(path), list(sd)[-1]  # at the end
    age(path)
    with nvt.open_weights(w) as src:
        assert torch.equal(src.tensor("mask"), sd["mask"])
        change(path, how, other)
        with pytest.raises(nvswap.Error) as ei:
            src.tensor(last)
        changed_error(ei.value.errno, str(ei.value), path, last, how, size)
        if how == "truncate":
            assert "(the tensor's bytes [" in str(ei.value) and \
                "now lie beyond the end of the file)" in str(ei.value)


def test_offload_from_a_safetensors_file_replaced_midway_loads_nothing(
        diskdir, monkeypatch):
    """offload(weights=) while another file is renamed over the one it
    checked, before the third layer is read (before: the rest was read
    from the new file at the old offsets, silently): EINVAL naming the
    file, the model as given, no swap file."""
    w, s = dirs(diskdir)
    path = os.path.join(w, "model.safetensors")
    sd = gpt_sd(0)
    write_st(path, sd)
    other = os.path.join(diskdir, "other.safetensors")
    write_st(other, {k: -v for k, v in reversed(list(sd.items()))})
    model = meta_gpt()
    given = dict(model.named_parameters())
    calls, real = [], _load.Loader.add

    def add(self, *a):
        calls.append(1)
        if len(calls) == 3:
            os.rename(other, path)
        return real(self, *a)

    monkeypatch.setattr(_load.Loader, "add", add)
    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(model, nvme_path=s, weights=w, **KW)
    assert ei.value.errno == errno.EINVAL, ei.value
    assert f"{path}: tensor '" in str(ei.value) and "removed, or replaced " \
        "by a rename over its name" in str(ei.value), ei.value
    assert all_meta(model) and not hasattr(model, "_nvswap_engine")
    assert all(p is given[n] for n, p in model.named_parameters())
    assert files_under(s) == []


FIFOS = r"""
import json, os, sys
import nvswap, nvswap.torch as nvt
from nvswap.torch import _weights
d = sys.argv[1]
out = {}
for name, path in json.loads(sys.argv[2]).items():
    try:
        nvt.open_weights(path).close()
        out[name] = "opened"
    except nvswap.Error as e:
        out[name] = [e.errno, str(e)]
print(json.dumps(out))
"""


def test_a_fifo_in_any_role_is_refused_not_waited_on(diskdir):
    """A FIFO as model.safetensors, as the index, as a shard, as
    pytorch_model.bin, or named itself (.safetensors, .bin, no suffix):
    before, the open waited for a writer forever (run in a child with a
    timeout, so that a hang fails instead of hanging the run); now
    EINVAL naming it and what it is."""
    roles = {}
    for role in ("single", "index", "shard", "bin"):
        d = os.path.join(diskdir, role)
        if role in ("index", "shard"):
            nvt.save_pretrained(GPT(), d, max_shard_size=20000)
        else:
            os.makedirs(d)
        name = {"single": "model.safetensors", "bin": "pytorch_model.bin",
                "index": "model.safetensors.index.json"}.get(role) or \
            sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))[1]
        if os.path.exists(os.path.join(d, name)):
            os.unlink(os.path.join(d, name))
        os.mkfifo(os.path.join(d, name))
        roles[role] = (d, os.path.join(d, name))
    for name in ("x.safetensors", "x.bin", "x"):
        os.mkfifo(os.path.join(diskdir, name))
        roles[name] = (os.path.join(diskdir, name),) * 2
    r = child(FIFOS, diskdir, json.dumps({k: v[0] for k, v in
                                          roles.items()}), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    for role, (_, fifo) in roles.items():
        assert got[role] == [errno.EINVAL, f"[Errno {errno.EINVAL}] "
                             f"nvswap.torch: {fifo}: is a FIFO, not a "
                             f"regular file (a {what(role)} must be one)"
                             ], (role, got[role])


def what(role):
    return {"single": "safetensors file", "index": "index",
            "shard": "shard", "bin": "torch.save file",
            "x.safetensors": "safetensors file", "x.bin": "weights file",
            "x": "weights file"}[role]


def test_a_directory_or_a_device_where_a_file_is_expected(diskdir):
    """A directory as a shard (before: a bare IsADirectoryError) is
    nvswap.Error(EISDIR) naming it; a link to /dev/null as a shard
    (before: "truncated: 0 bytes") EINVAL naming it a character device;
    shards that are links to regular files, as in the Hugging Face
    cache, load bit for bit."""
    w, s = dirs(diskdir)
    ref = GPT()
    nvt.save_pretrained(ref, w, max_shard_size=20000)
    blobs = os.path.join(diskdir, "blobs")
    os.makedirs(blobs)
    shards = sorted(f for f in os.listdir(w) if f.endswith(".safetensors"))
    for i, f in enumerate(shards):  # the cache's layout: links to blobs
        os.rename(os.path.join(w, f), os.path.join(blobs, str(i)))
        os.symlink(os.path.join("..", "blobs", str(i)), os.path.join(w, f))
    model = meta_gpt()
    nvt.offload(model, nvme_path=s, weights=w, **KW)
    same(ref.state_dict(), model.state_dict())
    nvt.restore(model)
    second = os.path.join(w, shards[1])
    os.unlink(second)
    os.mkdir(second)
    with pytest.raises(nvswap.Error) as ei:
        nvt.open_weights(w)
    assert ei.value.errno == errno.EISDIR and str(ei.value) == (
        f"[Errno {errno.EISDIR}] nvswap.torch: {second}: is a directory, "
        "not a regular file (a shard must be one)"), ei.value
    os.rmdir(second)
    os.symlink("/dev/null", second)
    with pytest.raises(nvswap.Error) as ei:
        nvt.open_weights(w)
    assert ei.value.errno == errno.EINVAL and f"{second}: is a character " \
        "device, not a regular file (a shard must be one)" in str(ei.value)


def test_json_nested_too_deep_is_refused_naming_the_file(diskdir):
    """A header or an index nested 100000 deep: before, a RecursionError
    naming nothing; now EBADMSG naming the file and the rule."""
    w, _ = dirs(diskdir)
    deep = b"[" * 100000 + b"]" * 100000
    path = raw_st(os.path.join(w, "deep.safetensors"),
                  b'{"a": ' + deep + b"}")
    with pytest.raises(nvswap.Error) as ei:
        nvt.open_weights(path)
    assert ei.value.errno == errno.EBADMSG and f"{path}: the header nests " \
        "JSON arrays or objects deeper than Python's json module parses" \
        in str(ei.value), ei.value
    d = os.path.join(w, "sharded")
    nvt.save_pretrained(GPT(), d, max_shard_size=20000)
    index = os.path.join(d, "model.safetensors.index.json")
    with open(index, "wb") as f:
        f.write(b'{"weight_map": ' + deep + b"}")
    with pytest.raises(nvswap.Error) as ei:
        nvt.open_weights(d)
    assert ei.value.errno == errno.EBADMSG and f"{index}: the index nests " \
        "JSON arrays or objects deeper" in str(ei.value), ei.value


def test_model_safetensors_wins_over_an_index_as_in_transformers(diskdir):
    """A directory with both model.safetensors and an index with its
    shards (before: nvswap read the index, transformers the single
    file): the single file is read, as transformers 5 reads it."""
    w, s = dirs(diskdir)
    torch.manual_seed(0)
    nvt.save_pretrained(GPT(), w, max_shard_size=20000)
    ref = GPT()  # other values
    write_st(os.path.join(w, "model.safetensors"), ref.state_dict())
    model = meta_gpt()
    nvt.offload(model, nvme_path=s, weights=w, **KW)
    same(ref.state_dict(), model.state_dict())
    nvt.restore(model)


def test_transformers_reads_the_same_file_of_the_two(diskdir):
    cls, cfg = hf_models()["llama"]
    w, s = dirs(diskdir)
    torch.manual_seed(0)
    cls(cfg).save_pretrained(w, max_shard_size="20KB")
    single = os.path.join(diskdir, "single")
    torch.manual_seed(1)
    cls(cfg).save_pretrained(single)
    os.rename(os.path.join(single, "model.safetensors"),
              os.path.join(w, "model.safetensors"))
    hf = cls.from_pretrained(w)
    model = on_meta(cls, cfg)
    nvt.offload(model, nvme_path=s, weights=w, **KW)
    same(hf.state_dict(), model.state_dict())
    nvt.restore(model)


def views_sd():
    """A state dict of views torch.save keeps as they are: a transpose,
    a slice at a storage offset, a tie, an expanded row, several dtypes,
    empty and 0-d tensors."""
    g = torch.Generator().manual_seed(7)
    base = torch.randn(48, 40, generator=g)
    sd = {"base": base, "t": base.t(), "slice": base[5:17, 3:30],
          "tied": base, "row": base[3].expand(6, 40),
          "bf16": torch.randn(33, generator=g).to(torch.bfloat16),
          "i64": torch.arange(-5, 20), "bool": torch.arange(9) % 3 == 0,
          "half": torch.randn(4, 5, generator=g).half()[:, 1:],
          "empty": torch.zeros(0, 7), "scalar": torch.tensor(2.5)}
    return sd


def test_a_torch_file_is_read_in_place_bit_for_bit(diskdir):
    """The zip a torch.save writes, read without torch.load (a guard of
    the new reader): every tensor, view or not, is torch.load's bit for
    bit, by tensor(), read_into() a strided destination, read_rows() and
    equal(); a tie is one storage."""
    w, _ = dirs(diskdir)
    sd = views_sd()
    path = os.path.join(w, "views.pt")
    torch.save(sd, path)
    want = torch.load(path)
    with nvt.open_weights(path) as src:
        assert src.lazy and sorted(src.keys()) == sorted(sd)
        for k, v in want.items():
            got = src.tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape, k
            assert torch.equal(got.reshape(-1).view(torch.uint8),
                               v.contiguous().reshape(-1).view(torch.uint8)), k
        dest = torch.empty(40, 48).t()  # strided
        src.read_into("base", dest)
        assert torch.equal(dest, want["base"])
        rows = torch.empty(4, 48, dtype=torch.float64)
        src.read_rows("t", 10, rows)  # a transpose's rows, cast
        assert torch.equal(rows, want["t"][10:14].double())
        assert src.equal("base", "tied") and not src.equal("base", "t")
        assert src.nbytes("t") == 48 * 40 * 4


def test_a_torch_file_s_pickle_runs_nothing(diskdir):
    """A .bin whose pickle calls os.system: refused naming the global,
    and nothing runs (a guard of the new reader's unpickler)."""
    w, _ = dirs(diskdir)
    marker = os.path.join(w, "ran")

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    path = os.path.join(w, "evil.bin")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"a": Evil()}, protocol=2))
    with pytest.raises(nvswap.Error) as ei:
        nvt.open_weights(path)
    assert ei.value.errno == errno.EBADMSG
    assert f"{path}: its pickle (evil/data.pkl) is not a state dict " \
        "torch.save writes (UnpicklingError: the pickle names posix.system" \
        in str(ei.value), ei.value
    assert not os.path.exists(marker)


@pytest.mark.parametrize("how", ["short", "deflated"])
def test_a_torch_file_whose_storage_record_is_bad_names_the_tensor(
        diskdir, how):
    """A storage record cut short or compressed (torch.save stores each
    whole): EBADMSG naming the file, the tensor and the record, before
    anything is read (a guard of the new reader's checks)."""
    w, _ = dirs(diskdir)
    good, path = os.path.join(w, "good.pt"), os.path.join(w, "bad.pt")
    torch.save({"a": torch.arange(64.0)}, good)
    with zipfile.ZipFile(good) as z, zipfile.ZipFile(path, "w") as out:
        rec = next(n for n in z.namelist() if n.endswith("/data/0"))
        for i in z.infolist():
            data = z.read(i)
            if i.filename == rec and how == "short":
                data = data[:100]
            out.writestr(i, data, compress_type=zipfile.ZIP_DEFLATED if
                         how == "deflated" and i.filename == rec else
                         zipfile.ZIP_STORED)
    with pytest.raises(nvswap.Error) as ei:
        nvt.open_weights(path)
    size = 100 if how == "short" else 256
    assert ei.value.errno == errno.EBADMSG and f"{path}: tensor 'a': its " \
        f"storage record {rec} is compressed or holds {size} bytes, not " \
        "256" in str(ei.value), ei.value


BOUNDED = r"""
import sys, torch, nvswap.torch as nvt
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
L = int(sys.argv[3])
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False,
                                              device="meta")
                              for _ in range(L)])
base = hwm()
nvt.offload(model, nvme_path=sys.argv[2], buffer_size="4M", buffer_count=3,
            optimizer_buffer_size="4M", optimizer_buffer_count=2,
            weights=sys.argv[1])
load = hwm() - base
with nvt.gathered(model[L - 2]):
    want = torch.randn(1024, 1024,
                       generator=torch.Generator().manual_seed(L - 2))
    assert torch.equal(model[L - 2].weight, want)
print(nvt.stats(model)["pool_bytes"], load)
"""


def test_a_torch_file_larger_than_the_pools_loads_in_bounded_memory(
        diskdir):
    """A 128 MiB .bin loaded into 32 layers through 4 MiB pools: the
    peak above python + torch stays under the pools + 48 MiB, far below
    the file (before: torch.load(mmap=True) had every page of it resident
    by the end, torch 1.13 loaded it whole)."""
    layers = 32
    path = os.path.join(diskdir, "big.bin")
    torch.save({f"{i}.weight": torch.randn(
        1024, 1024, generator=torch.Generator().manual_seed(i))
        for i in range(layers)}, path)
    swap = os.path.join(diskdir, "swap")
    os.makedirs(swap)
    r = child(BOUNDED, path, swap, str(layers), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    pools, load = (int(x) for x in r.stdout.split())
    size = os.path.getsize(path)
    assert load < pools + (48 << 20) < size, (pools, load, size)
