#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Activations to NVMe (issue 50): a training step of a Hugging Face Llama
from a config (random weights) with the tensors autograd saves in memory
against the same step with them sent to NVMe by nvswap.torch.save_on_nvme,
by tokens per step, with and without activation checkpointing.

Each (variant, tokens, checkpointing) runs in its own process, in a
rotating order, --repeats times: --warmup steps, then --steps timed
steps (forward in the store's `with`, backward, AdamW step). Reported:
the step's median seconds [min-max] over every timed step of every
repeat, nvme over memory (the ratio of medians), the process's peak RSS
(VmHWM) above its RSS before the first step (median over repeats), and
for nvme the bytes each step saved to NVMe (saved again and not
written apart), the bytes that reached the disk and came back from it
(the pieces the pool held unwritten never do), and the exposed waits
(the forward waiting for writes, the backward for reads). Every run's losses
must equal the in-memory run's (checked; the run fails otherwise).

    PYTHONPATH=build/python python3 bench/activations.py
        [--dir /var/tmp/nvswap-act] [--tokens 1024,4096]
        [--checkpointing off,on] [--hidden 256] [--layers 8]
        [--inter 688] [--vocab 4096] [--memory 128M] [--buffer-size 8M]
        [--steps 3] [--warmup 1] [--repeats 3] [--json FILE]
        [--plot FILE.svg]

--plot writes the peak RSS against tokens per step, a line for each
kind (in memory, NVMe) and checkpointing, as an SVG.

--dir must be on the disk to test (not /tmp, which may be tmpfs).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import (fs_type, loadavg, parse_size, spread,  # noqa: E402
                       svg_lines)


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM back to the current RSS
    except OSError:
        pass


def child(a, v):
    import transformers
    import nvswap.torch as nvt
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
        num_hidden_layers=a.layers, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=v["tokens"])
    model = transformers.LlamaForCausalLM(cfg)
    if v["checkpointing"]:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, a.vocab, (1, v["tokens"]), generator=g)
            for _ in range(a.warmup + a.steps)]
    act = None
    if v["kind"] == "nvme":
        act = nvt.save_on_nvme(a.dir, memory=a.memory,
                               buffer_size=a.buffer_size)
    times, losses, per_step = [], [], []
    base = rss_kib("VmRSS")
    reset_peak()
    for i, tok in enumerate(data):
        s0 = act.stats() if act else None
        t = time.perf_counter()
        if act is not None:
            with act:
                loss = model(input_ids=tok, labels=tok).loss
        else:
            loss = model(input_ids=tok, labels=tok).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(dt)
            if act is not None:
                s1 = act.stats()
                per_step.append({k: s1[k] - s0[k] for k in (
                    "saved_bytes", "shared_bytes", "kept_bytes",
                    "write_wait_s",
                    "read_wait_s", "pool_wait_s", "bytes_written",
                    "bytes_read")})
    out = {"times": times, "losses": losses,
           "peak_mib": (rss_kib("VmHWM") - base) / 1024,
           "per_step": per_step}
    if act is not None:
        act.close()
    print(json.dumps(out), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/nvswap-act")
    ap.add_argument("--tokens", default="1024,4096")
    ap.add_argument("--checkpointing", default="off,on")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--inter", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--memory", type=parse_size, default=128 << 20)
    ap.add_argument("--buffer-size", type=parse_size, default=8 << 20)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        return child(a, json.loads(a.child))
    os.makedirs(a.dir, exist_ok=True)
    tokens = [int(x) for x in a.tokens.split(",")]
    ckpt = [x == "on" for x in a.checkpointing.split(",")]
    vs = [{"kind": k, "tokens": t, "checkpointing": c}
          for t in tokens for c in ckpt for k in ("memory", "nvme")]
    print(f"Llama hidden {a.hidden}, {a.layers} layers, vocab {a.vocab}; "
          f"store {a.memory >> 20} MiB of {a.buffer_size >> 20} MiB "
          f"buffers; {platform.node()}, {fs_type(a.dir)}, load "
          f"{loadavg()}", flush=True)
    runs = {json.dumps(v, sort_keys=True): [] for v in vs}
    for rep in range(a.repeats):
        order = vs[rep % len(vs):] + vs[:rep % len(vs)]
        for v in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--child",
                   json.dumps(v)] + sys.argv[1:]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{v}: exit {r.returncode}: "
                                 f"{r.stderr[-2000:]}")
            res = json.loads(r.stdout.strip().splitlines()[-1])
            runs[json.dumps(v, sort_keys=True)].append(res)
            print(f"  {rep} {v['kind']}, {v['tokens']} tokens, "
                  f"checkpointing {'on' if v['checkpointing'] else 'off'}: "
                  f"step {spread(res['times'])} s, peak +"
                  f"{res['peak_mib']:.0f} MiB", flush=True)
    print("\n| tokens | checkpointing | in memory: step s | nvme: step s | "
          "nvme / memory | peak MiB, memory | peak MiB, nvme | saved to "
          "NVMe per step MB | saved again, not written MB | written to "
          "the disk MB | read from the disk MB | write wait s | read wait "
          "s | pool wait s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    table = []
    for t in tokens:
        for c in ckpt:
            mem = runs[json.dumps({"kind": "memory", "tokens": t,
                                   "checkpointing": c}, sort_keys=True)]
            nv = runs[json.dumps({"kind": "nvme", "tokens": t,
                                  "checkpointing": c}, sort_keys=True)]
            for r in nv:
                if r["losses"] != mem[0]["losses"]:
                    raise SystemExit(f"{t} tokens: losses differ: "
                                     f"{r['losses']} {mem[0]['losses']}")
            mt = [x for r in mem for x in r["times"]]
            nt = [x for r in nv for x in r["times"]]
            steps = [s for r in nv for s in r["per_step"]]
            row = {"tokens": t, "checkpointing": c, "memory_s": mt,
                   "nvme_s": nt,
                   "ratio": statistics.median(nt) / statistics.median(mt),
                   "peak_memory_mib": [r["peak_mib"] for r in mem],
                   "peak_nvme_mib": [r["peak_mib"] for r in nv],
                   "per_step": steps}
            table.append(row)
            mb = spread([s['saved_bytes'] / 1e6 for s in steps], "{:.0f}")
            sh = spread([s['shared_bytes'] / 1e6 for s in steps], "{:.0f}")
            wr = spread([s['bytes_written'] / 1e6 for s in steps], "{:.0f}")
            rd = spread([s['bytes_read'] / 1e6 for s in steps], "{:.0f}")
            print(f"| {t} | {'on' if c else 'off'} | {spread(mt)} | "
                  f"{spread(nt)} | {row['ratio']:.2f} | "
                  f"{statistics.median(row['peak_memory_mib']):.0f} | "
                  f"{statistics.median(row['peak_nvme_mib']):.0f} | {mb}"
                  f" | {sh} | {wr} | {rd} | "
                  f"{spread([s['write_wait_s'] for s in steps])} | "
                  f"{spread([s['read_wait_s'] for s in steps])} | "
                  f"{spread([s['pool_wait_s'] for s in steps])} |")
    print("\nlosses equal to the in-memory run's in every run: yes")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": table, "args": vars(a)}, f, indent=1)
    if a.plot:
        series = {}
        for row in table:
            for kind in ("memory", "nvme"):
                name = (f"{'in memory' if kind == 'memory' else 'NVMe'}"
                        f"{', ckpt' if row['checkpointing'] else ''}")
                series.setdefault(name, []).append((row["tokens"], (
                    statistics.median(row[f"peak_{kind}_mib"]))))
        svg_lines(a.plot, f"Peak host memory of a step: Llama hidden "
                  f"{a.hidden}, {a.layers} layers", "tokens per step",
                  "peak RSS above start, MiB", series, logx=True)
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
