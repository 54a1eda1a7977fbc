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
        [--step-in-backward] [--stop-after N | --resume]

DIR is a directory on the NVMe disk (default ./nvme_swap; not /tmp).
--stop-after N stops after step N with the training state saved where it
lies (nvswap.torch.checkpoint over persistent swap sets); --resume picks
it up (the in-memory run replays the saved steps for its reference) and
the verdict is still bit for bit. Remove DIR/nvswap to start again.
"""
import argparse
import copy
import os
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
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--stop-after", type=int, metavar="N",
                     help="save the state after step N and stop")
    how.add_argument("--resume", action="store_true",
                     help="train on from the saved state")
    args = ap.parse_args()
    if args.stop_after is not None and not 0 < args.stop_after < args.steps:
        ap.error("--stop-after takes a step before the last (--steps)")
    persist = ("resume" if args.resume else
               "persistent" if args.stop_after else None)
    os.makedirs(args.dir, exist_ok=True)
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
        return 1
    st = nvt.stats(model)
    done = st["resumed"]["steps"] if st["resumed"] else 0
    if args.stop_after and done:
        print(f"train_offloaded: {args.dir} holds a saved run (step {done})"
              ": --resume it, or remove its nvswap/ to start again")
        return 1
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
    if done:
        print(f"resumed after step {done} ({st['resumed']['tag']!r}, "
              f"generations {st['resumed']['generations']}); the "
              f"in-memory run replayed steps 0-{done - 1}")
    last = args.stop_after or args.steps
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
              f"  {cur['io_exposed_s'] - prev['io_exposed_s']:10.3f}s")
        prev = cur
    same_w = equal_state(ref.state_dict(), model.state_dict())
    same_o = equal_state(ref_opt.state_dict(), opt.state_dict())
    if persist and done < last:
        ck = nvt.checkpoint(model)  # "step <last>": the optimizer's steps
        ck.wait()
        print(f"saved {ck.tag!r} as generations {ck.generations} under "
              f"{args.dir}/nvswap")
    verdict = "equal" if same_w and same_o else "DIFFERENT"
    print(f"verdict: after {last} steps the offloaded model's weights "
          f"are {'equal' if same_w else 'DIFFERENT'} and its AdamW state "
          f"{'equal' if same_o else 'DIFFERENT'} to the in-memory run, bit "
          f"for bit: {verdict}")
    nvt.restore(model)
    if args.stop_after:
        print(f"stopped after step {last} of {args.steps}: run again with "
              "--resume to finish")
    return 0 if same_w and same_o else 1


if __name__ == "__main__":
    raise SystemExit(main())
