#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A model served from the persistent set it was saved in against the
same model served from its safetensors: make demo-infer's 1.08 GB Llama,
nvt.offload(inference=True, memory=--memory, page_cache=False) with
weights= (the safetensors) or persist='resume' (a set holding the same
weights as a checkpoint), generate() greedy, each run its own process,
the page cache dropped before each (as root), interleaved; decoding
tokens/s medians and spread, and what each run read and kept.

    PYTHONPATH=build/python build/venv-pypi/bin/python bench/serve_set.py \\
        [--dir /var/tmp/serve_set] [--memory 384M] [--repeats 3]
        [--kinds weights,weights-crc,set]

--dir keeps the weights and the set for the next run; remove it by hand."""
import argparse
import json
import os
import statistics
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
sys.path.insert(0, HERE)
import generate_offloaded as demo  # noqa: E402
from benchutil import loadavg, parse_size  # noqa: E402


def meta_model(a):
    import transformers
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(demo.config(a)).eval()


def prepare(a):
    import transformers

    import nvswap.torch as nvt
    weights, sdir = os.path.join(a.dir, "weights"), os.path.join(a.dir, "set")
    if not os.path.exists(weights):
        torch.manual_seed(0)
        # nvswap's writer: tensors 64-byte aligned, served in place
        nvt.save_pretrained(transformers.LlamaForCausalLM(demo.config(a)),
                            weights)
    if not os.path.exists(sdir):
        os.makedirs(sdir)
        m = nvt.offload(meta_model(a), weights=weights, nvme_path=sdir,
                        persist="persistent")
        nvt.checkpoint(m).wait()
        nvt.restore(m)


def child(a):
    import nvswap.torch as nvt
    kw = (dict(weights=os.path.join(a.dir, "weights"), nvme_path=a.dir)
          if a.child.startswith("weights") else
          dict(nvme_path=os.path.join(a.dir, "set"), persist="resume"))
    if a.child.startswith("weights"):  # weights-crc: the copy checked
        kw["checksum"] = a.child == "weights-crc"
    if a.child == "weights-copy":  # the copy into the swap file
        from nvswap.torch import _load
        _load.IN_PLACE = False
    m = meta_model(a)
    nvt.offload(m, inference=True, memory=a.memory, page_cache=False, **kw)
    out, _, clock = demo.generate(m, demo.prompt(a), a.new_tokens)
    s = nvt.stats(m)
    print(json.dumps({
        "decode": clock.decode_tps(a.batch),
        "step_gb": s["last_forward_bytes_read"] / 1e9,
        "resident": s["resident_layers"], "pool": s["pool_bytes"],
        "read_ahead": (s["read_ahead"] or {}).get("state"),
        "tokens": out.tolist()}))
    return 0  # the process ends: a scratch offload's files go with it


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/serve_set")
    ap.add_argument("--memory", type=parse_size, default=parse_size("384M"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", default="weights,set",
                    help="what to serve from, in turn: weights (the "
                    "safetensors, their streamed layers read in place), "
                    "weights-copy (copied into a scratch swap file first, "
                    "as before weights in place), weights-crc (the copy, "
                    "checksum=True), set (default: weights,set)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    demo.model_args(ap)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    if a.child:
        return child(a)
    os.makedirs(a.dir, exist_ok=True)
    prepare(a)
    print(f"load {loadavg()}; memory={a.memory >> 20} MiB, O_DIRECT")
    got, tokens = {k: [] for k in a.kinds.split(",")}, set()
    for _ in range(a.repeats):
        for kind in got:
            if os.geteuid() == 0:
                subprocess.run(["sync"])
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3")
            r = subprocess.run([sys.executable, __file__, "--child", kind,
                                "--dir", a.dir, "--memory", str(a.memory)],
                               capture_output=True, text=True)
            if r.returncode:
                print(r.stdout + r.stderr)
                return 1
            j = json.loads(r.stdout.strip().splitlines()[-1])
            tokens.add(json.dumps(j.pop("tokens")))
            got[kind].append(j)
    print("| served from | decoding tokens/s median [min-max] | step reads | "
          "layers resident | pool | read-ahead |")
    print("|---|---|---|---|---|---|")
    for kind, runs in got.items():
        d = [r["decode"] for r in runs]
        print(f"| {kind} | {statistics.median(d):.2f} [{min(d):.2f}-"
              f"{max(d):.2f}] | {runs[0]['step_gb']:.3f} GB | "
              f"{runs[0]['resident']} | {runs[0]['pool'] >> 20} MiB | "
              + ", ".join(r["read_ahead"] or "-" for r in runs) + " |")
    print("tokens: " + ("the same in every run" if len(tokens) == 1 else
                        f"{len(tokens)} different sequences"))
    return 0 if len(tokens) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
