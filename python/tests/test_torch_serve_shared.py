# SPDX-License-Identifier: MIT
"""Many processes serve one set at once (issue 49, item 3): each opens
the trained model's parameter set read-only (offload(inference=True,
persist='readonly')), all of them hold it together, each one's outputs
(a Llama's and a GPT-2's generate() tokens) are the trained model's,
a training run that would resume the set meanwhile is refused with EBUSY
naming every server's pid, and no file of the sets changes (size, mtime,
ctime, bytes)."""
import errno
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from filehelp import child_env, tree_state  # noqa: E402

# The model each server builds (on the meta device: nothing of it is
# read, the checkpoint's parameters are) and what it prints: the bytes
# of its outputs, as hex. Between offload and the forward it says it is
# ready and waits for the go, so that all hold the set at once.
SERVER = r"""
import os, sys, time
import torch
import nvswap.torch as nvt

kind, swapdir, ready, go = sys.argv[1:5]


def model():
    if kind == "seq":
        return torch.nn.Sequential(
            torch.nn.Linear(16, 32, device="meta"), torch.nn.ReLU(),
            torch.nn.Linear(32, 32, device="meta"), torch.nn.ReLU(),
            torch.nn.Linear(32, 8, device="meta"))
    import transformers as t
    with torch.device("meta"):
        return (t.LlamaForCausalLM(t.LlamaConfig(**CFG["llama"]))
                if kind == "llama"
                else t.GPT2LMHeadModel(t.GPT2Config(**CFG["gpt2"])))


m = nvt.offload(model().eval(), nvme_path=swapdir, inference=True,
                persist="readonly", memory="1M")
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
deadline = time.monotonic() + 300
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go")
    time.sleep(0.01)
with torch.no_grad():
    if kind == "seq":
        out = m(torch.arange(64, dtype=torch.float32).reshape(4, 16) / 64)
    else:
        ids = torch.arange(14).reshape(2, 7) * 37 % 512
        out = m.generate(ids, attention_mask=torch.ones_like(ids),
                         max_new_tokens=6, do_sample=False, pad_token_id=0)
print(out.numpy().tobytes().hex())
nvt.restore(m)
"""

CFG = {
    "llama": dict(vocab_size=512, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64),
    "gpt2": dict(vocab_size=512, n_embd=64, n_layer=3, n_head=4,
                 n_positions=64),
}


def build(kind):
    torch.manual_seed(0)
    if kind == "seq":
        return torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(),
            torch.nn.Linear(32, 32), torch.nn.ReLU(),
            torch.nn.Linear(32, 8))
    import transformers as t
    if kind == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(**CFG["llama"]))
    return t.GPT2LMHeadModel(t.GPT2Config(**CFG["gpt2"]))


def outputs(kind, m):
    with torch.no_grad():
        if kind == "seq":
            return m(torch.arange(64, dtype=torch.float32).reshape(4, 16)
                     / 64)
        ids = torch.arange(14).reshape(2, 7) * 37 % 512
        return m.generate(ids, attention_mask=torch.ones_like(ids),
                          max_new_tokens=6, do_sample=False, pad_token_id=0)


def trained(kind, swapdir):
    """Two steps offloaded into persistent sets, checkpointed: the
    restored model's outputs."""
    model = nvt.offload(build(kind), nvme_path=swapdir, persist="persistent")
    opt = nvt.AdamW(model.parameters(), lr=1e-2)
    for step in range(2):
        if kind == "seq":
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(
                step))
            model(x).square().mean().backward()
        else:
            ids = torch.randint(0, 512, (2, 7),
                                generator=torch.Generator().manual_seed(step))
            model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    nvt.checkpoint(model).wait()
    return outputs(kind, nvt.restore(model).eval())


@pytest.mark.parametrize("kind,n", [("seq", 2), ("seq", 8), ("llama", 4),
                                    ("gpt2", 2)])
def test_processes_serve_one_set_at_once(kind, n, swapdir, tmp_path):
    if kind != "seq":
        pytest.importorskip(
            "transformers", reason="transformers is not installed for "
            "this interpreter (Debian packages no transformers)")
    want = trained(kind, swapdir)
    before = tree_state(swapdir)
    script = SERVER.replace("CFG[", f"{CFG!r}[")
    go = str(tmp_path / "go")
    ready = [str(tmp_path / f"ready.{i}") for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", script, kind, swapdir,
                               r, go], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in ready]
    try:
        deadline = time.monotonic() + 300
        while not all(map(os.path.exists, ready)):
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()
            assert time.monotonic() < deadline, "servers not ready"
            time.sleep(0.02)
        pids = []
        for r in ready:
            with open(r) as f:
                pids.append(f.read())
        # every server holds the set: training cannot resume it
        with pytest.raises(nvswap.Error) as ei:
            nvt.offload(build(kind), nvme_path=swapdir, persist="resume")
        assert ei.value.errno == errno.EBUSY
        assert "is open read-only by process" in str(ei.value)
        for pid in pids:
            assert pid in str(ei.value), (pid, str(ei.value))
    finally:
        open(go, "w").close()
        results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        got = out.split()[-1]
        assert got == want.numpy().tobytes().hex(), err
    assert tree_state(swapdir) == before
    # and, the servers gone, training resumes it
    m = nvt.offload(build(kind), nvme_path=swapdir, persist="resume")
    assert nvt.stats(m)["resumed"]["steps"] == 2
    nvt.restore(m)


def test_a_set_on_a_read_only_bind_mount_serves(swapdir, tmp_path):
    """The trained set bound read-only elsewhere (a private mount
    namespace: unshare -m, as root): a server there gives the trained
    model's outputs, and a training run there is refused by the
    filesystem (EROFS), naming the path."""
    want = trained("seq", swapdir)
    ro = tmp_path / "ro"
    ro.mkdir()
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mount --bind {swapdir} {ro} && mount -o remount,ro,bind {ro}"],
        capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("cannot bind-mount read-only here (needs root and "
                    f"unshare -m): {probe.stderr.strip()}")
    script = SERVER.replace("CFG[", f"{CFG!r}[")
    go = tmp_path / "go"
    go.touch()
    train = ("import sys, errno, torch, nvswap, nvswap.torch as nvt\n"
             "m = torch.nn.Sequential(torch.nn.Linear(16, 32), "
             "torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(), "
             "torch.nn.Linear(32, 8))\n"
             "try:\n"
             "    nvt.offload(m, nvme_path=sys.argv[1], persist='resume')\n"
             "except nvswap.Error as e:\n"
             "    print('refused', e.errno == errno.EROFS, e)\n")
    cmd = (f"mount --bind {swapdir} {ro} && mount -o remount,ro,bind {ro} "
           f"&& \"$PY\" -c \"$SERVE\" seq {ro} {tmp_path / 'ready'} {go} "
           f"&& \"$PY\" -c \"$TRAIN\" {ro}")
    env = dict(child_env(), PY=sys.executable, SERVE=script, TRAIN=train)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh",
                        "-c", cmd], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    served, refused = r.stdout.split("\n")[:2]
    assert served == want.numpy().tobytes().hex(), r.stderr
    assert refused.startswith("refused True"), refused
    assert str(ro) in refused
