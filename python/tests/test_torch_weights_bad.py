# SPDX-License-Identifier: MIT
"""offload(weights=) refuses bad input before anything is written: every
way a safetensors file, an index or a torch.save'd file can be malformed
(nvswap.Error EBADMSG, or ENOENT, naming the file and the tensor), and
every way the weights can disagree with the model (ValueError naming the
keys). After each refusal the model is as it was given (on the meta
device) and the swap directory holds no file."""
import errno
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from torchhelp import GPT  # noqa: E402
from weighthelp import (all_meta, files_under, meta_gpt, raw_st,  # noqa: E402
                        read_st, tensor_bytes, write_st)


@pytest.fixture
def env(diskdir):
    """(weights folder, swap folder, a good state dict, a good file)"""
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    os.makedirs(w)
    os.makedirs(s)
    torch.manual_seed(0)
    sd = GPT().state_dict()
    good = os.path.join(w, "good.safetensors")
    write_st(good, sd)
    return w, s, sd, good


def refused(env, path, exc=nvswap.Error, code=errno.EBADMSG, model=None):
    """Offload a meta GPT from path: the exception (checked to be exc,
    with errno code for nvswap.Error); the model untouched, no swap
    file."""
    _, s, _, _ = env
    model = model if model is not None else meta_gpt()
    given = dict(model.named_parameters())
    with pytest.raises(exc) as ei:
        nvt.offload(model, nvme_path=s, buffer_size="64K", weights=path)
    if exc is nvswap.Error:
        assert ei.value.errno == code, ei.value
    assert all_meta(model) and not hasattr(model, "_nvswap_engine")
    assert all(p is given[n] for n, p in model.named_parameters())
    assert files_under(s) == []
    return str(ei.value)


def edit(env, fn, name="bad.safetensors"):
    """The good file's header and data through fn(header, data) ->
    (header, data[, hlen]), written as a new file."""
    w, _, _, good = env
    head, data = read_st(good)
    out = fn(head, data)
    return raw_st(os.path.join(w, name), *out)


def first(head):
    """The name of the tensor at data offset 0, and of the next one."""
    order = sorted((v["data_offsets"][0], k) for k, v in head.items()
                   if k != "__metadata__")
    return order[0][1], order[1][1]


def test_the_good_file_loads(env):
    # the baseline of every case below: the same steps, no refusal
    w, s, sd, good = env
    model = meta_gpt()
    nvt.offload(model, nvme_path=s, buffer_size="64K", weights=good)
    assert torch.equal(model.state_dict()["emb.weight"], sd["emb.weight"])
    nvt.restore(model)


def test_a_truncated_file_names_the_tensor_cut(env):
    w, _, sd, good = env
    last = list(sd)[-1]
    with open(good, "rb") as f:
        data = f.read()
    cut = os.path.join(w, "cut.safetensors")
    with open(cut, "wb") as f:
        f.write(data[:-10])
    msg = refused(env, cut)
    assert f"{cut}: tensor '{last}'" in msg and "truncated" in msg
    with open(cut, "wb") as f:
        f.write(data[:5])
    assert f"{cut}: truncated: 5 bytes, shorter than the 8-byte header" \
        in refused(env, cut)


def test_a_header_that_is_not_json(env):
    path = edit(env, lambda h, d: (b'{"emb.weight": {', d))
    assert "the header is not valid JSON" in refused(env, path)
    path = edit(env, lambda h, d: (b'{"a": "\xff"}', d))
    assert "the header is not valid JSON" in refused(env, path)


def test_a_header_length_past_the_end_or_absurd(env):
    path = edit(env, lambda h, d: (h, d, 1 << 20))
    assert "header length 1048576 runs past the end of the file" in \
        refused(env, path)
    path = edit(env, lambda h, d: (h, d, 1 << 40))
    assert f"header length {1 << 40} is absurd" in refused(env, path)


def test_a_header_that_is_not_an_object(env):
    path = edit(env, lambda h, d: (b"[1, 2]", d))
    assert "the header is a JSON list, not an object" in refused(env, path)


def test_a_header_naming_a_tensor_twice(env):
    def twice(h, d):
        text = json.dumps(h)
        k = next(k for k in h if k != "__metadata__")
        entry = json.dumps({k: h[k]})[1:-1]
        return text[:-1].encode() + b", " + entry.encode() + b"}", d
    assert "the header names 'mask' twice" in refused(env, edit(env, twice))


@pytest.mark.parametrize("field,value,text", [
    ("dtype", "F17", "dtype 'F17' is not one safetensors defines"),
    ("dtype", 3, "no dtype string in its header entry"),
    ("shape", [-1, 3], "shape [-1, 3] is not a list of non-negative"),
    ("shape", "3", "shape '3' is not a list of non-negative"),
    ("data_offsets", [8, 4], "data_offsets [8, 4] is not [begin, end)"),
    ("data_offsets", [0], "data_offsets [0] is not [begin, end)"),
])
def test_a_malformed_entry(env, field, value, text):
    def bad(h, d):
        h["mask"][field] = value
        return h, d
    msg = refused(env, edit(env, bad))
    assert "tensor 'mask': " + text in msg, msg


def test_offsets_that_disagree_with_shape_and_dtype(env):
    def shrink(h, d):
        h["mask"]["shape"] = [8, 7]
        return h, d
    msg = refused(env, edit(env, shrink))
    assert "tensor 'mask': data_offsets" in msg and \
        "but shape [8, 7] of F32 is 224 bytes (numel x itemsize)" in msg


def test_a_tensor_whose_bytes_run_past_the_end(env):
    def grow(h, d):
        k = max((k for k in h if k != "__metadata__"),
                key=lambda k: h[k]["data_offsets"][1])
        b, e = h[k]["data_offsets"]
        h[k]["shape"] = [2 * (e - b) // 4]
        h[k]["data_offsets"] = [b, b + 2 * (e - b)]
        return h, d
    path = edit(env, grow)
    msg = refused(env, path)
    assert f"{path}: tensor '" in msg and "run past the end of the data " \
        "area" in msg


def test_overlapping_offsets(env):
    def overlap(h, d):
        a, b = first(h)
        h[b]["data_offsets"] = [o - 4 for o in h[b]["data_offsets"]]
        return h, d
    path = edit(env, overlap)
    a, b = first(read_st(os.path.join(env[0], "good.safetensors"))[0])
    msg = refused(env, path)
    assert f"tensor '{b}': its bytes" in msg and f"overlap those of '{a}'" \
        in msg


def test_a_hole_between_tensors(env):
    def hole(h, d):
        a, b = first(h)
        end = h[a]["data_offsets"][1]
        for k, v in h.items():
            if k != "__metadata__" and v["data_offsets"][0] >= end:
                v["data_offsets"] = [o + 8 for o in v["data_offsets"]]
        return h, d[:end] + bytes(8) + d[end:]
    path = edit(env, hole)
    _, b = first(read_st(path)[0])
    assert f"tensor '{b}': bytes [" in refused(env, path)


def test_bytes_after_the_last_tensor(env):
    path = edit(env, lambda h, d: (h, d + bytes(12)))
    assert "12 bytes after the last tensor" in refused(env, path)


def test_metadata_that_is_not_strings(env):
    def meta(h, d):
        h["__metadata__"] = {"format": 1}
        return h, d
    assert "__metadata__ is not an object of strings" in refused(
        env, edit(env, meta))


def test_a_shard_the_index_names_is_missing(env):
    w, _, sd, _ = env
    d = os.path.join(w, "sharded")
    nvt.save_pretrained(GPT(), d, max_shard_size=20000)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    gone = os.path.join(d, sorted(set(wm.values()))[1])
    os.unlink(gone)
    key = next(k for k, v in wm.items() if v == os.path.basename(gone))
    msg = refused(env, d, code=errno.ENOENT)
    assert f"{gone}: missing:" in msg and f"for tensor '{key}'" in msg


def test_a_bad_index(env):
    w, _, _, _ = env
    d = os.path.join(w, "sharded")
    nvt.save_pretrained(GPT(), d, max_shard_size=20000)
    index = os.path.join(d, "model.safetensors.index.json")
    with open(index) as f:
        doc = json.load(f)
    for text, want in (
            ("{", "the index is not valid JSON"),
            (json.dumps({"metadata": {}}), "the index has no weight_map"),
            (json.dumps({"weight_map": {"emb.weight": "/etc/passwd"}}),
             "tensor 'emb.weight': shard name '/etc/passwd' is not a file")):
        with open(index, "w") as f:
            f.write(text)
        msg = refused(env, d)
        assert f"{index}: " in msg and want in msg, msg
    wm = doc["weight_map"]
    k = next(iter(wm))
    right = wm[k]
    wm[k] = next(v for v in wm.values() if v != right)
    with open(index, "w") as f:
        json.dump(doc, f)
    msg = refused(env, d)
    assert f"tensor '{k}': the index puts it in {wm[k]}, which does not " \
        f"hold it (it is in {os.path.join(d, right)})" in msg


def test_a_tensor_in_two_shards(env):
    w, _, sd, _ = env
    d = os.path.join(w, "two")
    os.makedirs(d)
    keys = list(sd)
    write_st(os.path.join(d, "a.safetensors"), {k: sd[k] for k in keys[:3]})
    write_st(os.path.join(d, "b.safetensors"),
             {k: sd[k] for k in keys[2:]})
    wm = {k: "a.safetensors" for k in keys[:3]}
    wm.update({k: "b.safetensors" for k in keys[3:]})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": wm}, f)
    msg = refused(env, d)
    assert f"b.safetensors: tensor '{keys[2]}': also in " in msg


def test_bad_torch_files(env):
    w, _, sd, _ = env
    good = os.path.join(w, "sd.pt")
    torch.save(sd, good)
    with open(good, "rb") as f:
        data = f.read()
    cut = os.path.join(w, "cut.pt")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    assert f"{cut}: torch.load cannot read it" in refused(env, cut)
    lst = os.path.join(w, "list.pt")
    torch.save([sd["mask"]], lst)
    assert f"{lst}: holds a list, not a state dict" in refused(env, lst)
    odd = os.path.join(w, "odd.pt")
    torch.save({"mask": sd["mask"], "step": 3}, odd)
    assert f"{odd}: tensor 'step': a int under 'step', not a tensor" in \
        refused(env, odd)


def test_no_such_file_or_weights(env):
    w, _, _, _ = env
    assert "no such file" in refused(env, os.path.join(w, "nope"),
                                     code=errno.ENOENT)
    empty = os.path.join(w, "empty")
    os.makedirs(empty)
    msg = refused(env, empty, code=errno.ENOENT)
    assert f"{empty}: no model.safetensors.index.json, model.safetensors " \
        "or pytorch_model.bin" in msg


def test_names_shapes_and_dtypes_that_do_not_match_the_model(env):
    w, _, sd, _ = env
    sd = dict(sd)
    del sd["head.weight"]
    sd["blocks.0.extra"] = torch.zeros(2)
    sd["emb.weight"] = torch.zeros(3, 5)
    sd["mask"] = sd["mask"].half()
    path = os.path.join(w, "other.safetensors")
    write_st(path, sd)
    msg = refused(env, path, exc=ValueError)
    assert msg == (
        f"nvswap.torch.offload: error(s) loading {path} into GPT:\n\t"
        'Missing key(s): "head.weight".\n\t'
        'Unexpected key(s): "blocks.0.extra".\n\t'
        'Shape mismatch: "emb.weight: [3, 5] in the file, [64, 32] in the '
        'model".\n\t'
        "Dtype mismatch (no cast: the file's dtype must be the "
        "parameter's, or floating with offload(dtype=)): \"mask: F16 in "
        'the file, torch.float32 in the model".'), msg


def test_a_tied_parameter_held_twice_with_other_bytes(env):
    w, _, _, _ = env
    torch.manual_seed(0)
    sd = dict(GPT(tie=True).state_dict())
    sd["head.weight"] = sd["head.weight"].clone()
    sd["head.weight"][3, 4] += 1
    path = os.path.join(w, "tied.safetensors")
    write_st(path, sd)
    msg = refused(env, path, exc=ValueError, model=meta_gpt(tie=True))
    assert "holds the tied parameter both as 'emb.weight' and as " \
        "'head.weight', with different values" in msg
    missing = {k: v for k, v in sd.items() if k not in ("emb.weight",
                                                        "head.weight")}
    write_st(path, missing)
    msg = refused(env, path, exc=ValueError, model=meta_gpt(tie=True))
    assert 'Missing key(s): "emb.weight (tied: head.weight)"' in msg


def test_tensor_bytes_helper_round_trips():
    # the files above are written by weighthelp: its bytes are torch's
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    assert tensor_bytes(t) == bytes(
        b for i in range(6) for b in i.to_bytes(4, "little"))
