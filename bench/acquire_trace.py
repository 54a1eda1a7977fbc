#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where an offloaded backward waits: every parameter-layer acquire of
one step's backward, with its wait, the module, and who asked (the
recomputation's forward, backward unpacking a saved weight, the step
speculated in backward), on bench/hf_llama.py's Llama.

A diagnostic for developers, not a benchmark: it wraps the engine's
ParamSwapper (nvswap.torch internals) to time each acquire_layer call,
and prints the C pools' wait counters per phase. Issue 47's part 3 came
from it: backward re-read every layer a recomputation had just released.

    PYTHONPATH=build/python python3 bench/acquire_trace.py [--batch 4]
        [--steps 4] [--min-ms 5] [--speculate 0|1] [--max-norm 100]
        [--buffer-size 160M] [--buffer-count 6] [--lookahead 2]
        [--dir /var/tmp/nvswap-bench] [--hidden 1024] [--layers 16]
        [--inter 2816] [--vocab 32000] [--seq 256]

The last step's acquires that waited --min-ms or more are listed, with
the time from the start of backward.
"""
import argparse
import os
import sys
import time
import traceback

import torch

import nvswap.torch as nvt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import parse_size  # noqa: E402
from hf_llama import build  # noqa: E402


class Timed:
    """The engine's ParamSwapper, its acquire_layer timed."""

    def __init__(self, eng, log):
        self.inner, self.eng, self.log = eng.params, eng, log

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def acquire_layer(self, layer):
        t0 = time.perf_counter_ns()
        got = self.inner.acquire_layer(layer)
        t1 = time.perf_counter_ns()
        who = "/".join(f.name for f in traceback.extract_stack(limit=5)[:-1])
        self.log.append((t0, layer, (t1 - t0) / 1e6,
                         self.eng.recomputing, who))
        return got


def waits(eng):
    return [sw.stats()[k] for sw in (eng.pswap, eng.gswap)
            for k in ("acquire_wait_ns", "buffer_wait_ns")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/var/tmp/nvswap-bench")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--min-ms", type=float, default=5.0)
    ap.add_argument("--speculate", type=int, choices=(0, 1), default=1)
    ap.add_argument("--max-norm", type=float, default=100.0)
    ap.add_argument("--buffer-size", type=parse_size,
                    default=parse_size("160M"))
    ap.add_argument("--buffer-count", type=int, default=6)
    ap.add_argument("--lookahead", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--inter", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=256)
    a = ap.parse_args()
    model = build(a)
    folder = os.path.join(a.dir, "swap")
    os.makedirs(folder, exist_ok=True)
    nvt.offload(model, nvme_path=folder, buffer_size=a.buffer_size,
                buffer_count=a.buffer_count, lookahead=a.lookahead)
    opt = nvt.AdamW(model.parameters(), lr=1e-4,
                    speculate=bool(a.speculate))
    eng = nvt.engine_of(model)
    names = {layer: name for name, m in model.named_modules()
             for layer in eng.mod_layers.get(m, ())}
    log = []
    eng.params = Timed(eng, log)
    gen = torch.Generator().manual_seed(1)
    for i in range(a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        t1 = time.perf_counter()
        w0 = waits(eng)
        log.clear()
        tb = time.perf_counter_ns()
        loss.backward()
        t2 = time.perf_counter()
        w1 = waits(eng)
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
        opt.step()
        opt.zero_grad()
        t3 = time.perf_counter()
        d = [(y - x) / 1e9 for x, y in zip(w0, w1)]
        print(f"step {i}: forward {t1 - t0:.2f} s, backward {t2 - t1:.2f} "
              f"s, step {t3 - t2:.2f} s; backward: {len(log)} acquires "
              f"waited {sum(x[2] for x in log) / 1e3:.2f} s; pool waits "
              f"(acquire / buffer): parameters {d[0]:.2f} / {d[1]:.2f} s, "
              f"optimizer {d[2]:.2f} / {d[3]:.2f} s")
    print(f"the last backward's acquires of {a.min_ms} ms or more:")
    for t, layer, ms, rec, who in log:
        if ms >= a.min_ms:
            print(f"  {(t - tb) / 1e9:6.2f} s  {ms:6.1f} ms  layer {layer:3d}"
                  f" {names.get(layer, '?'):40s} "
                  f"{'recomputation' if rec else who}")
    nvt.restore(model)


if __name__ == "__main__":
    main()
