#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nvswap.torch on the LLM recipe (issue 32, "Speed"): a Hugging Face
Llama of ~270M parameters from a config (random weights), activation
checkpointing on, trained a few steps by variants run side by side.

--compare memory: offloaded (nvt.AdamW, clipping at 1.0) against the
  same recipe in memory (torch.optim.AdamW, torch's clipping); the
  losses and total norms must be equal at every step. --sync adds the
  offloaded step taken in step() (defer=False) beside the deferred one
  (the default, applied by the next forward: its cost shows in fwd;
  or, when the last step did not clip, speculated in backward: its cost
  shows in bwd); --deferred adds the step never speculated
  (speculate=False); --max-norm sets the clip (100: it never fires);
  use --warmup 2 with it (the deferred variant makes its AdamW state in
  the second step's forward). --dtype bf16: the same with bf16 weights
  and fp32 masters: in memory the model .to(torch.bfloat16) with
  masters.MasterAdamW (torch's AdamW over fp32 master copies, clipping
  on the bf16 gradients), offloaded with offload(dtype=torch.bfloat16);
  a step whose losses or norms differ is reported, not fatal.
--compare clip: offloaded with clipping against offloaded without (the
  cost of the norms taken in backward and the clip applied in step()).
--compare dtype: offloaded fp32 against offloaded dtype=bf16 with fp32
  masters (the bytes read in forward + backward, and the step time).

Steps are interleaved: variant order rotates every step, so a drift of
the machine's load hits every variant alike; --warmup untimed steps
first. Each step is timed whole and by phase (forward + loss, backward,
clip + optimizer step + zero_grad); nvswap.torch.stats deltas give the
bytes read and written per phase and the I/O exposed (the time acquires
waited, from the C library). A ratio is the median of the per-step
ratios (the same step's batch for both), with min-max.

    PYTHONPATH=build/python python3 bench/hf_llama.py --compare memory
        [--dir /var/tmp/nvswap-bench] [--hidden 1024] [--layers 16]
        [--inter 2816] [--vocab 32000] [--seq 256] [--batch 1]
        [--steps 5] [--warmup 1] [--buffer-size 64M] [--json FILE]
        [--sync] [--dtype {fp32,bf16}] [--optimizer-pool SIZExCOUNT]

--dir must be on the disk to test (not /tmp, which may be tmpfs).
"""
import argparse
import copy
import json
import os
import platform
import sys
import time

import torch
import transformers

import nvswap.torch as nvt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import fs_type, loadavg, med, parse_size  # noqa: E402
from masters import MasterAdamW  # noqa: E402

MIB = 1 << 20
MAX_NORM = [1.0]  # --max-norm


def build(a):
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
        num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64,
        num_key_value_heads=a.hidden // 64, max_position_embeddings=a.seq,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


class Variant:
    def __init__(self, name, model, opt, clip, offloaded):
        self.name, self.model, self.opt = name, model, opt
        self.clip, self.offloaded = clip, offloaded
        self.steps = []
        self.differ = []  # --compare memory: steps whose loss/norm differ


def precision(a):
    """The weights' dtype, in words, for the report's header."""
    if a.compare == "dtype":
        return "fp32 weights against bf16 weights with fp32 masters"
    if a.dtype == "bf16":
        return "bf16 weights with fp32 masters"
    return "fp32 weights"


def offloaded(a, src, rank, **kw):
    model = copy.deepcopy(src)
    folder = os.path.join(a.dir, "swap")
    os.makedirs(folder, exist_ok=True)
    nvt.offload(model, nvme_path=folder, buffer_size=a.buffer_size,
                buffer_count=a.buffer_count, lookahead=a.lookahead,
                rank=rank, **kw)
    return model


def variants(a, src):
    mk = []
    if a.compare == "memory":
        bf16 = a.dtype == "bf16"
        ref = copy.deepcopy(src)
        if bf16:  # the masters start from src's fp32 values, as offload's
            ref = ref.to(torch.bfloat16)
            opt = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-4)
        else:
            opt = torch.optim.AdamW(ref.parameters(), lr=1e-4)
        mk.append(Variant("in memory", ref, opt, True, False))
        kw = {"dtype": torch.bfloat16} if bf16 else {}
        off = offloaded(a, src, 0, **kw)
        mk.append(Variant("offloaded", off, nvt.AdamW(
            off.parameters(), lr=1e-4), True, True))
        if a.sync:  # the step taken in step(), as before issue 47
            off = offloaded(a, src, 1, **kw)
            mk.append(Variant("offloaded, defer=False", off, nvt.AdamW(
                off.parameters(), lr=1e-4, defer=False), True, True))
        if a.deferred:  # never speculated in backward (issue 47 part 1)
            off = offloaded(a, src, 2, **kw)
            mk.append(Variant("offloaded, speculate=False", off, nvt.AdamW(
                off.parameters(), lr=1e-4, speculate=False), True, True))
        if a.optimizer_pool:  # another optimizer pool, side by side
            size, _, count = a.optimizer_pool.partition("x")
            off = offloaded(a, src, 3, optimizer_buffer_size=size,
                            optimizer_buffer_count=int(count), **kw)
            mk.append(Variant(f"offloaded, optimizer pool {count} x "
                              f"{size}", off, nvt.AdamW(
                                  off.parameters(), lr=1e-4), True, True))
    elif a.compare == "clip":
        for rank, clip in enumerate((True, False)):
            off = offloaded(a, src, rank)
            mk.append(Variant("clipping" if clip else "no clipping", off,
                              nvt.AdamW(off.parameters(), lr=1e-4), clip,
                              True))
    else:
        for rank, dtype in enumerate((None, torch.bfloat16)):
            off = offloaded(a, src, rank, dtype=dtype)
            mk.append(Variant("bf16 + fp32 masters" if dtype else "fp32",
                              off, nvt.AdamW(off.parameters(), lr=1e-4),
                              True, True))
    return mk


def step(v, tokens):
    marks = []

    def mark():
        marks.append((time.perf_counter(),
                       nvt.stats(v.model) if v.offloaded else None))

    mark()
    loss = v.model(input_ids=tokens, labels=tokens).loss
    mark()
    loss.backward()
    mark()
    norm = None
    if v.clip:
        norm = torch.nn.utils.clip_grad_norm_(v.model.parameters(),
                                              MAX_NORM[0])
    v.opt.step()
    v.opt.zero_grad()
    mark()
    out = {"total": marks[3][0] - marks[0][0], "loss": loss.item(),
           "norm": None if norm is None else norm.item()}
    for name, (x, y) in zip(("fwd", "bwd", "opt"), zip(marks, marks[1:])):
        out[name] = y[0] - x[0]
        if v.offloaded:
            out[name + "_read"] = y[1]["bytes_read"] - x[1]["bytes_read"]
            out[name + "_written"] = (y[1]["bytes_written"] -
                                      x[1]["bytes_written"])
            out[name + "_exposed"] = (y[1]["io_exposed_s"] -
                                      x[1]["io_exposed_s"])
    if v.offloaded:
        s0, s1 = marks[0][1], marks[3][1]
        out["read"] = s1["bytes_read"] - s0["bytes_read"]
        out["written"] = s1["bytes_written"] - s0["bytes_written"]
        out["exposed"] = s1["io_exposed_s"] - s0["io_exposed_s"]
        out["recomputes"] = s1["recomputes"] - s0["recomputes"]
    return out


def run(a):
    src = build(a)
    nparams = sum(p.numel() for p in src.parameters())
    print(f"Llama {nparams / 1e6:.0f}M parameters; {a.compare}; "
          f"{precision(a)}", file=sys.stderr)
    vs = variants(a, src)
    del src
    gen = torch.Generator().manual_seed(1)
    for i in range(a.warmup + a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        order = vs[i % len(vs):] + vs[:i % len(vs)]
        got = {v.name: step(v, tokens) for v in order}
        if a.compare == "memory":
            x = got[vs[0].name]
            for v in vs[1:]:
                y = got[v.name]
                if (x["loss"], x["norm"]) != (y["loss"], y["norm"]):
                    msg = (f"step {i}: in memory {x['loss']} / "
                           f"{x['norm']}, {v.name} {y['loss']} / "
                           f"{y['norm']}: differ")
                    if a.dtype == "fp32":
                        sys.exit(msg)
                    print("  NOT EQUAL: " + msg, file=sys.stderr)
                    v.differ.append(i)
        if i >= a.warmup:
            for v in vs:
                v.steps.append(got[v.name])
        print(f"  step {i}{' (warm-up)' if i < a.warmup else ''}: " +
              ", ".join(f"{v.name} {got[v.name]['total']:.2f}s"
                        for v in vs) + f" load {loadavg()}",
              file=sys.stderr)
    return nparams, vs


def report(a, nparams, vs):
    base = vs[0]
    print(f"\nLlama {nparams / 1e6:.0f}M parameters (hidden {a.hidden}, "
          f"{a.layers} layers, intermediate {a.inter}, vocab {a.vocab}), "
          f"batch {a.batch} x {a.seq} tokens, {precision(a)}, activation "
          f"checkpointing (non-reentrant), AdamW; pool {a.buffer_count} x "
          f"{a.buffer_size // MIB} MiB, lookahead {a.lookahead}; "
          f"{len(base.steps)} timed steps after {a.warmup}; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, "
          f"Python {platform.python_version()}\n")
    print("| variant | step s (median, min-max) | / " + base.name +
          " (median of per-step ratios, min-max) | forward s | backward s "
          "| clip+step s | read GiB (fwd / bwd / step) | written GiB | "
          "I/O exposed s | recomputes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for v in vs:
        tot = [s["total"] for s in v.steps]
        ratios = [s["total"] / b["total"] for s, b in zip(v.steps,
                                                           base.steps)]
        cells = [v.name, f"{med(tot):.2f} ({min(tot):.2f}-{max(tot):.2f})",
                 f"**{med(ratios):.3f}** ({min(ratios):.3f}-"
                 f"{max(ratios):.3f})"]
        cells += [f"{med([s[p] for s in v.steps]):.2f}"
                  for p in ("fwd", "bwd", "opt")]
        if v.offloaded:
            gib = 1 << 30
            cells.append(" / ".join(
                f"{med([s[p + '_read'] for s in v.steps]) / gib:.2f}"
                for p in ("fwd", "bwd", "opt")))
            cells.append(f"{med([s['written'] for s in v.steps]) / gib:.2f}")
            cells.append(f"{med([s['exposed'] for s in v.steps]):.2f}")
            cells.append(str(v.steps[-1]["recomputes"]))
        else:
            cells += ["-", "-", "-", "-"]
        print("| " + " | ".join(cells) + " |")
    if a.compare == "memory":
        print()
        for v in vs[1:]:
            if v.differ:
                print(f"{v.name}: losses / total norms NOT EQUAL to in "
                      f"memory's at steps {v.differ} of "
                      f"{a.warmup + a.steps} (warm-up included)")
            else:
                print(f"{v.name}: losses and total norms equal to in "
                      f"memory's at all {a.warmup + a.steps} steps "
                      "(warm-up included)")
    for v in vs:
        if v.offloaded:
            st = nvt.stats(v.model)
            fired = sum(1 for s in v.steps
                        if s["norm"] is not None and s["norm"] > MAX_NORM[0])
            print(f"{v.name}: {st['speculated_steps']} steps speculated in "
                  f"backward, {st['redone_steps']} of them redone "
                  f"({st['redo_s']:.2f} s); the clip at {MAX_NORM[0]:g} "
                  f"fired in {fired} of {len(v.steps)} timed steps")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", choices=("memory", "clip", "dtype"),
                    default="memory")
    ap.add_argument("--dir", default="/var/tmp/nvswap-bench")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--inter", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--buffer-size", type=parse_size, default=parse_size("160M"))
    ap.add_argument("--buffer-count", type=int, default=6)
    ap.add_argument("--lookahead", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sync", action="store_true",
                    help="--compare memory: also the offloaded step taken "
                    "in step() (defer=False)")
    ap.add_argument("--deferred", action="store_true",
                    help="--compare memory: also the offloaded step never "
                    "speculated in backward (speculate=False)")
    ap.add_argument("--optimizer-pool", default=None, metavar="SIZExCOUNT",
                    help="--compare memory: also the offloaded run with "
                    "this optimizer pool (e.g. 161Mx4: buffers of the "
                    "largest gradient region, the state stepped in parts)"
                    "; the others have the library's default (4 buffers "
                    "of twice the parameter buffer)")
    ap.add_argument("--max-norm", type=float, default=1.0,
                    help="clip_grad_norm_'s max_norm (the model's norms are "
                    "5-11: 100 never clips, and the step is speculated)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="--compare memory: the weights' dtype; bf16: bf16 "
                    "weights with fp32 masters, in memory (torch's AdamW "
                    "over fp32 master copies) and offloaded "
                    "(offload(dtype=torch.bfloat16))")
    a = ap.parse_args()
    MAX_NORM[0] = a.max_norm
    if a.dtype != "fp32" and a.compare != "memory":
        ap.error(f"--dtype {a.dtype} goes with --compare memory only "
                 f"(--compare {a.compare} runs fp32"
                 + (" and bf16 itself)" if a.compare == "dtype" else ")"))
    os.makedirs(a.dir, exist_ok=True)
    fs = fs_type(a.dir)
    if fs in ("tmpfs", "ramfs"):
        sys.exit(f"{a.dir} is on {fs}: give --dir on the disk")
    t0 = time.time()
    nparams, vs = run(a)
    report(a, nparams, vs)
    print(f"\nload average {loadavg()} at the end; {time.time() - t0:.0f} s "
          "in all")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "params": nparams,
                       "torch": torch.__version__,
                       "precision": precision(a),
                       "variants": {v.name: v.steps for v in vs},
                       "differ": {v.name: v.differ for v in vs[1:]}
                       if a.compare == "memory" else None}, f,
                      indent=1)
    for v in vs:
        if v.offloaded:
            nvt.restore(v.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
