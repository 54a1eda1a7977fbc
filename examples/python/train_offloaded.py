#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Train a small GPT-style decoder with its parameters, gradients and Adam
state on NVMe (nvswap.torch), next to the same model trained in memory.

Both runs start from the same weights and see the same batches. Each step
prints both losses, both step times and the offloaded run's I/O; the last
line says whether the final weights and optimizer state are equal bit for
bit (they must be: nvswap.torch runs torch's own AdamW on the swapped
buffers).

    python3 examples/python/train_offloaded.py [--dir DIR] [--steps N]
        [--step-in-backward] [--checkpoint-every N] [--stop-after N]
        [--resume] [--keep]

with the package and its torch extra installed (pip install '.[torch]'
in a venv; README, "Quick start from Python"; Debian's python3-torch
will do); make demo-python runs it.

DIR is a directory on the NVMe disk (default ./nvme_swap; not /tmp).
--checkpoint-every N saves the training state where it lies
(nvswap.torch.checkpoint over persistent swap sets) before the first step
and after every N-th, as training does; --stop-after N saves it after
step N and stops. --resume picks up the last checkpoint (the in-memory
run replays the saved steps for its reference, drawing the same batches
from the same generator) and the verdict is still bit for bit: a run
killed at any moment, even mid-checkpoint, goes on from there. A run that
completes its last step removes its persistent sets unless --keep is
given; a run without them leaves DIR as it found it.
"""
import argparse
import copy
import errno
import glob
import os
import sys
import time

import torch

import nvswap
import nvswap.torch as nvt


class Decoder(torch.nn.Module):
    """Token embedding, causal TransformerEncoderLayer blocks, a head."""

    def __init__(self, vocab, width, heads, layers, context, device=None):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width, device=device)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(width, heads, 4 * width,
                                             dropout=0.0, batch_first=True,
                                             device=device)
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width, device=device)
        self.head = torch.nn.Linear(width, vocab, bias=False, device=device)
        mask = torch.triu(torch.full((context, context), float("-inf")), 1)
        self.register_buffer("mask", mask)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h, src_mask=self.mask)
        return self.head(self.norm(h))


def config(folder, buffer_size):
    """A DeepSpeed-style config: both offloads on NVMe."""
    return {
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "nvme", "nvme_path": folder,
                              "buffer_count": 6, "buffer_size": buffer_size},
            "offload_optimizer": {"device": "nvme", "nvme_path": folder,
                                  "buffer_count": 4,
                                  "buffer_size": 3 * buffer_size,
                                  "pipeline_read": True,
                                  "pipeline_write": True},
        },
        "aio": {"block_size": 1048576, "queue_depth": 32},
        "nvswap": {"lookahead": 2},
    }


def step(model, opt, tokens):
    t0 = time.perf_counter()
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item(), time.perf_counter() - t0


def equal_state(a, b):
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            if not isinstance(y, dict) or not equal_state(x, y):
                return False
        elif torch.is_tensor(x):
            if not torch.is_tensor(y) or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def set_dirs(folder):
    """The rank directories of the model's two persistent sets."""
    return [os.path.join(folder, "nvswap", kind, "rank0")
            for kind in ("param", "optimizer")]


def remove_sets(folder):
    """Remove the two sets' manifests: the parameters' newer ones, the
    optimizer's, then the parameters' oldest (a kill part-way leaves a
    pair that still resumes, a parameter generation without an
    optimizer one, which --resume refuses and a fresh run starts over,
    or none; never an optimizer generation without its parameters),
    then their files, directories and the nvswap/ levels above them
    when empty."""
    dirs = set_dirs(folder)
    ms = [sorted(glob.glob(os.path.join(d, "manifest.*"))) for d in dirs]
    for f in ms[0][:0:-1] + ms[1][::-1] + ms[0][:1]:
        os.unlink(f)
    for d in dirs:
        for f in os.listdir(d) if os.path.isdir(d) else ():
            os.unlink(os.path.join(d, f))
        for level in (d, os.path.dirname(d), os.path.dirname(
                os.path.dirname(d))):
            try:
                os.rmdir(level)
            except OSError:
                break  # not empty: another set's, or the user's


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--step-in-backward", action="store_true",
                    help="step each layer in backward (no gradient I/O)")
    ap.add_argument("--checkpoint-every", type=int, metavar="N",
                    help="save the state before the first step and every "
                    "N steps")
    ap.add_argument("--stop-after", type=int, metavar="N",
                    help="save the state after step N and stop")
    ap.add_argument("--resume", action="store_true",
                    help="train on from the last checkpoint")
    ap.add_argument("--keep", action="store_true",
                    help="keep the persistent sets when the last step is "
                    "done (a complete run removes them)")
    args = ap.parse_args()
    if args.stop_after is not None and not 0 < args.stop_after < args.steps:
        ap.error("--stop-after takes a step before the last (--steps)")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        ap.error("--checkpoint-every takes a number of steps, 1 or more")
    persist = ("resume" if args.resume else "persistent"
               if args.stop_after or args.checkpoint_every else None)
    made = not os.path.exists(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    try:
        return train(args, persist)
    finally:
        if made:
            try:
                os.rmdir(args.dir)  # only when empty: as it was found
            except OSError:
                pass


def train(args, persist):
    vocab, heads = 2048, 4
    torch.manual_seed(0)
    ref = Decoder(vocab, args.width, heads, args.layers, args.context)
    model = copy.deepcopy(ref)
    biggest = max(p.numel() * p.element_size() for p in model.parameters())
    buffer_size = max(1 << 20, 4 * args.width * args.width * 4 + 65536,
                      biggest + 65536)
    try:
        nvt.offload(model, config=config(args.dir, buffer_size),
                    persist=persist)
    except nvswap.Error as e:
        print(f"train_offloaded: {e}")
        if e.errno == errno.EEXIST and persist is None:
            print(f"train_offloaded: {args.dir} holds the persistent swap "
                  "sets of an interrupted run: finish it with --resume "
                  "(and the options it ran with), or remove them: rm -r "
                  + " ".join(d for d in set_dirs(args.dir)
                             if os.path.isdir(d)))
        return 1
    st = nvt.stats(model)
    done = st["resumed"]["steps"] if st["resumed"] else 0
    if args.stop_after and done and not args.resume:
        print(f"train_offloaded: {args.dir} holds a saved run (step {done})"
              ": --resume it, or remove its nvswap/ to start again")
        return 1
    if args.stop_after and done >= args.stop_after:
        print(f"train_offloaded: resumed after step {done}: --stop-after "
              f"{args.stop_after} is behind it")
        return 2
    if done > args.steps:
        print(f"train_offloaded: saved at step {done}, beyond --steps "
              f"{args.steps}")
        return 1
    print(f"{st['parameters']} parameters ({st['parameter_bytes'] >> 20} "
          f"MiB) in {st['layers']} layers on NVMe under {args.dir}; pools "
          f"{st['pool_bytes'] >> 20} MiB")
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    opt = nvt.AdamW(model.parameters(), lr=1e-3,
                    step_in_backward=args.step_in_backward)
    gen = torch.Generator().manual_seed(1)
    for i in range(done):  # the reference replays the saved steps
        step(ref, ref_opt, torch.randint(0, vocab, (args.batch,
                                                    args.context + 1),
                                         generator=gen))
    if st["resumed"]:
        print(f"resumed after step {done} ({st['resumed']['tag']!r}, "
              f"generations {st['resumed']['generations']}); the "
              + (f"in-memory run replayed steps 0-{done - 1}" if done
                 else "in-memory run starts from the initial state"))
    last = args.stop_after or args.steps
    every = args.checkpoint_every

    def save(what):
        print(f"checkpointing {what} ...", flush=True)
        ck = nvt.checkpoint(model)  # "step <n>": the optimizer's steps
        ck.wait()
        print(f"saved {ck.tag!r} as generations {ck.generations} under "
              f"{args.dir}/nvswap", flush=True)

    if every and not st["resumed"]:
        save("the initial state")
    print("step  loss(memory)  loss(nvme)  time(memory)  time(nvme)  "
          "read MiB  written MiB  I/O exposed")
    prev = nvt.stats(model)
    for i in range(done, last):
        tokens = torch.randint(0, vocab, (args.batch, args.context + 1),
                               generator=gen)
        l_ref, t_ref = step(ref, ref_opt, tokens)
        l_off, t_off = step(model, opt, tokens)
        cur = nvt.stats(model)
        print(f"{i:4d}  {l_ref:12.6f}  {l_off:10.6f}  {t_ref:11.3f}s  "
              f"{t_off:9.3f}s  {(cur['bytes_read'] - prev['bytes_read']) / 2**20:8.1f}"
              f"  {(cur['bytes_written'] - prev['bytes_written']) / 2**20:11.1f}"
              f"  {cur['io_exposed_s'] - prev['io_exposed_s']:10.3f}s",
              flush=True)
        prev = cur
        if every and (i + 1) % every == 0 and i + 1 < last:
            save(f"step {i + 1}")
    same_w = equal_state(ref.state_dict(), model.state_dict())
    same_o = equal_state(ref_opt.state_dict(), opt.state_dict())
    if persist and done < last:
        save(f"step {last}")
    verdict = "equal" if same_w and same_o else "DIFFERENT"
    print(f"verdict: after {last} steps the offloaded model's weights "
          f"are {'equal' if same_w else 'DIFFERENT'} and its AdamW state "
          f"{'equal' if same_o else 'DIFFERENT'} to the in-memory run, bit "
          f"for bit: {verdict}")
    nvt.restore(model)
    # A failing run keeps its sets (its evidence); main() removes
    # args.dir only if this run made it.
    if persist and verdict != "equal":
        print("kept the persistent swap sets for a look: "
              + " ".join(set_dirs(args.dir)))
    elif persist and not args.stop_after and not args.keep:
        remove_sets(args.dir)
        print(f"removed the persistent swap sets under {args.dir}/nvswap: "
              "the run is complete (--keep keeps them)")
    if args.stop_after:
        print(f"stopped after step {last} of {args.steps}: run again with "
              "--resume to finish")
    return 0 if same_w and same_o else 1


if __name__ == "__main__":
    # each line as it is printed, into a pipe (| tee log) too
    sys.stdout.reconfigure(line_buffering=True)
    raise SystemExit(main())
