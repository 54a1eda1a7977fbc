# SPDX-License-Identifier: MIT
"""Helpers of the pretrained-weights tests (test_torch_weights*.py,
test_torch_export.py): safetensors files written byte by byte (well or
badly formed), models on the meta device on any torch, small Hugging Face
models, and where things lie after an offload."""
import json
import os
import struct
import subprocess
import sys

import pytest
import torch

from filehelp import child_env
from torchhelp import GPT

_ST = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
       torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
       torch.uint8: "U8", torch.bool: "BOOL"}


def dirs(diskdir):
    """(weights folder, swap folder), made under diskdir."""
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    os.makedirs(w)
    os.makedirs(s)
    return w, s


def raw_st(path, header, data=b"", hlen=None):
    """A safetensors file of header (a dict, or bytes as they are) and
    data; hlen: the length field (default: the header's length)."""
    text = header if isinstance(header, bytes) else json.dumps(
        header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text) if hlen is None else hlen))
        f.write(text)
        f.write(data)
    return path


def tensor_bytes(t):
    t = t.detach().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() \
        else b""


def write_st(path, tensors, metadata=None):
    """A well-formed safetensors file of {name: tensor}, in that order;
    returns {name: [begin, end)}."""
    header, data, where = {}, b"", {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for k, t in tensors.items():
        b = tensor_bytes(t)
        where[k] = [len(data), len(data) + len(b)]
        header[k] = {"dtype": _ST[t.dtype], "shape": list(t.shape),
                     "data_offsets": where[k]}
        data += b
    raw_st(path, header, data)
    return where


def read_st(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), f.read()


def meta_gpt(tie=False, **kw):
    """torchhelp's GPT with every parameter and buffer on the meta device
    (torch 1.13 has no torch.device context: built, then moved, the tie
    made again)."""
    m = GPT(tie=tie, **kw).to("meta")
    if tie:
        m.head.weight = m.emb.weight
    return m


def all_meta(model):
    return all(t.is_meta for t in list(model.parameters()) +
               list(model.buffers()))


def files_under(d):
    """Every file below d (none when d does not exist)."""
    return sorted(os.path.relpath(os.path.join(r, f), d)
                  for r, _, fs in os.walk(d) for f in fs)


transformers = None


def hf():
    global transformers
    if transformers is None:
        transformers = pytest.importorskip(
            "transformers", reason="transformers is not installed for "
            "this interpreter (Debian packages no transformers)")
    return transformers


def safetensors_torch():
    return pytest.importorskip(
        "safetensors.torch", reason="the safetensors package is not "
        "installed for this interpreter (Debian packages none): the "
        "cross-check needs it")


def hf_models():
    """{name: (class, config)}: Llama tied and untied, GPT-2."""
    tr = hf()
    llama = dict(vocab_size=96, hidden_size=32, intermediate_size=64,
                 num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=32)
    return {
        "llama-tied": (tr.LlamaForCausalLM,
                       tr.LlamaConfig(tie_word_embeddings=True, **llama)),
        "llama": (tr.LlamaForCausalLM,
                  tr.LlamaConfig(tie_word_embeddings=False, **llama)),
        "gpt2": (tr.GPT2LMHeadModel,
                 tr.GPT2Config(vocab_size=96, n_embd=32, n_layer=2,
                               n_head=4, n_positions=32, bos_token_id=0,
                               eos_token_id=0)),
    }


def on_meta(cls, cfg):
    with torch.device("meta"):
        return cls(cfg)


def loss(model, x):
    model.eval()
    with torch.no_grad():
        return model(input_ids=x, labels=x).loss


def child(code, *args, timeout=300):
    """Run code in a fresh interpreter (this nvswap, and this directory
    on its path) with args as sys.argv[1:]: the CompletedProcess; a child
    still running after timeout seconds fails the test as hung."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__),
                                         env["PYTHONPATH"]])
    try:
        return subprocess.run([sys.executable, "-c", code, *args], env=env,
                              capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child hung: still running after {timeout} s "
                    f"({(e.stderr or b'')[-2000:]!r})")
