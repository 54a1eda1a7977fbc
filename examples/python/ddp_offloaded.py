#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Data-parallel training with torch.distributed, every rank's parameters,
gradients and AdamW state on NVMe (nvswap.torch), checked bit for bit
against a single-process reference.

    python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
        examples/python/ddp_offloaded.py [--dir DIR] [--steps N]
        [--step-in-backward] [--activations BYTES] [--no-average]

It needs the package with its torch extra (torch and numpy, which
torch.distributed's object collectives use): pip install '.[torch]' in
a venv (README, "Quick start from Python"); make demo-python's
interpreter has both.

Each rank builds the same decoder as examples/python/train_offloaded.py
(rank 0's weights broadcast to all), offloads it with
nvswap.torch.offload(model, rank=<rank>) (its own swap directory,
DIR/nvswap/{param,optimizer}/rank<rank>; DIR defaults to ./nvme_swap, on
the NVMe disk, not /tmp; what the run makes of it is removed at the end)
and trains it with nvswap.torch.AdamW on its
shard of each global batch. The gloo backend, CPU. (Debian 12's
python3-torch 1.13 on Python 3.11: add --redirects 0:1 --tee 0:1 to the
launcher, whose defaults fail there; docs/torch.md.)

Why not DistributedDataParallel: an offloaded parameter holds a
placeholder between uses and its gradient goes to the NVMe gradient pool
as soon as autograd has it (p.grad is set back to None), so DDP's
bucketed all-reduce never sees the gradients. Instead the gradients are
averaged in offload(grad_hook=): nvswap.torch calls it with each
parameter's gradient before writing it, in autograd's order, which is the
same on every rank, so every rank issues the same collectives in the same
order.

Why all_gather and not all_reduce: all_reduce sums in an order it does
not specify (gloo's ring, for one, starts each chunk's sum at another
rank), so the averaged gradient can differ in its last bits from any
reference, and a reference cannot reproduce it. The hook all-gathers the
ranks' gradients and adds them in rank order, (g0 + g1) + g2 + ..., then
divides by the number of ranks: the same bits on every rank, and
computable in one process. Rank 0 trains the reference that way: the
in-memory model, torch.optim.AdamW, each rank's shard through forward
and backward in turn, the gradients added in rank order and divided, one
step. It broadcasts the reference's weights and AdamW state at the end;
every rank compares its own, and rank 0 prints the verdict. Any
difference exits 1 (on every rank, so torch.distributed.run fails).
--no-average skips the averaging (each rank steps on its own shard's
gradients) to show the check catch it: the reference then trains on rank
0's shards alone, and rank 0 matches it, the others do not.

The cost: all-gathering holds world_size copies of a gradient at once and
moves world_size - 1 gradients per rank, where a ring all_reduce moves
about 2; all_reduce is the choice where bit-exactness against a reference
is not needed.
"""
import argparse
import copy
import os
import sys
import time

import torch
import torch.distributed as dist

import nvswap
import nvswap.torch as nvt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_offloaded import Decoder, config, equal_state  # noqa: E402


def rank_order_mean(parts):
    """(parts[0] + parts[1]) + ... + parts[-1], then divided by their
    number: the same bits wherever it runs."""
    total = parts[0].clone()
    for t in parts[1:]:
        total.add_(t)
    return total.div_(len(parts))


def averaging_hook(world):
    """offload(grad_hook=): every rank's gradient of this parameter,
    gathered and averaged in rank order."""
    def hook(name, grad):
        grad = grad.contiguous()
        parts = [torch.empty_like(grad) for _ in range(world)]
        dist.all_gather(parts, grad)
        return rank_order_mean(parts)
    return hook


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                             tokens[:, 1:].flatten())


def reference_step(ref, opt, tokens, world, average):
    """What the ranks do together, in one process: each shard's gradients
    in turn, added in rank order and divided, then one AdamW step."""
    shards = tokens.chunk(world)
    per_rank, losses = [], []
    for shard in shards[:world if average else 1]:
        for p in ref.parameters():
            p.grad = None
        loss = loss_of(ref, shard)
        loss.backward()
        losses.append(loss.item())
        per_rank.append([p.grad for p in ref.parameters()])
    for p, parts in zip(ref.parameters(), zip(*per_rank)):
        p.grad = rank_order_mean(list(parts))
    opt.step()
    for p in ref.parameters():
        p.grad = None
    return losses


def to_make(path):
    """The outermost directory a run makes for nvme_path path: its
    highest missing level, else its nvswap/ level when missing; None."""
    p = os.path.abspath(path)
    if os.path.exists(p):
        p = os.path.join(p, "nvswap")
        return None if os.path.exists(p) else p
    while not os.path.exists(os.path.dirname(p)):
        p = os.path.dirname(p)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4,
                    help="sequences per rank and step")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--step-in-backward", action="store_true",
                    help="step each layer in backward (no gradient I/O)")
    ap.add_argument("--activations", type=int, metavar="BYTES",
                    help="send the tensors autograd saves, of BYTES and "
                    "up, to NVMe too (each rank its own store, "
                    "DIR/nvswap/activations/rank<r>)")
    ap.add_argument("--no-average", action="store_true",
                    help="leave the gradients unaveraged (the ranks drift "
                    "apart: the verdict says DIFFERENT)")
    args = ap.parse_args()
    if "RANK" not in os.environ:
        ap.error("run it under torch.distributed.run (torchrun), e.g. "
                 "python3 -m torch.distributed.run --standalone "
                 "--nproc_per_node 4 " + sys.argv[0])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    # The swappers make --dir when missing and remove what their own
    # process made; the nvswap/ level the ranks share (and a missing
    # --dir) is made by one rank and left by another: rank 0 notes what
    # the run will make, before any rank makes it, and removes it at the
    # end where empty.
    made = to_make(args.dir) if rank == 0 else None
    dist.barrier()

    vocab, heads = 2048, 4
    torch.manual_seed(0)
    model = Decoder(vocab, args.width, heads, args.layers, args.context)
    for t in model.state_dict().values():  # as DDP does: rank 0's weights
        dist.broadcast(t, 0)
    ref = copy.deepcopy(model) if rank == 0 else None
    biggest = max(p.numel() * p.element_size() for p in model.parameters())
    buffer_size = max(1 << 20, 4 * args.width * args.width * 4 + 65536,
                      biggest + 65536)
    hook = None if args.no_average else averaging_hook(world)
    act = None
    try:
        if args.activations is not None:
            act = nvt.save_on_nvme(args.dir, memory="8M", buffer_size="1M",
                                   threshold=args.activations, rank=rank)
        nvt.offload(model, config=config(args.dir, buffer_size), rank=rank,
                    grad_hook=hook, activations=act)
    except nvswap.Error as e:
        print(f"ddp_offloaded: rank {rank}: {e}")
        return 1
    st = nvt.stats(model)
    say(f"{world} ranks, each {st['parameters']} parameters "
        f"({st['parameter_bytes'] >> 20} MiB) in {st['layers']} layers on "
        f"NVMe under {args.dir}/nvswap/*/rank<r>; gradients "
        f"{'NOT averaged' if args.no_average else 'averaged in rank order'}")
    opt = nvt.AdamW(model.parameters(), lr=1e-3,
                    step_in_backward=args.step_in_backward)
    ref_opt = (torch.optim.AdamW(ref.parameters(), lr=1e-3)
               if ref is not None else None)
    gen = torch.Generator().manual_seed(1)
    say("step  loss(reference)  loss(ranks)  time(reference)  time(ranks)")
    for i in range(args.steps):
        tokens = torch.randint(0, vocab, (world * args.batch,
                                          args.context + 1), generator=gen)
        t0 = time.perf_counter()
        loss = loss_of(model, tokens.chunk(world)[rank])
        loss.backward()
        opt.step()
        opt.zero_grad()
        t_off = time.perf_counter() - t0
        losses = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(losses, loss.detach().reshape(1))
        if ref is not None:
            t0 = time.perf_counter()
            ref_losses = reference_step(ref, ref_opt, tokens, world,
                                        not args.no_average)
            t_ref = time.perf_counter() - t0
            say(f"{i:4d}  {sum(ref_losses) / len(ref_losses):15.6f}  "
                f"{sum(x.item() for x in losses) / world:11.6f}  "
                f"{t_ref:14.3f}s  {t_off:10.3f}s")

    # Rank 0's reference to every rank; each compares its own weights and
    # AdamW state (both read back from NVMe), and rank 0 gathers the outcome.
    box = [(ref.state_dict(), ref_opt.state_dict())
           if ref is not None else None]
    dist.broadcast_object_list(box, 0)
    ref_w, ref_o = box[0]
    mine = torch.tensor([equal_state(ref_w, model.state_dict()),
                         equal_state(ref_o, opt.state_dict())],
                        dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    if act is not None:
        a = act.stats()
        say(f"activations: {a['saved']} tensors, {a['saved_bytes']} bytes "
            f"to NVMe on rank 0, {a['live']} left; {a['restored']} read "
            "back")
        act.close()
    nvt.restore(model)
    dist.barrier()  # every rank's swap files gone
    if made is not None:
        for d, _, _ in os.walk(made, topdown=False):
            try:
                os.rmdir(d)  # only when empty: files are never touched
            except OSError:
                pass
    dist.destroy_process_group()
    bad_w = [r for r, m in enumerate(every) if not m[0]]
    bad_o = [r for r, m in enumerate(every) if not m[1]]
    if not bad_w and not bad_o:
        say(f"verdict: after {args.steps} steps on {world} ranks every "
            "rank's weights and AdamW state are equal to the single-process "
            "reference, bit for bit: equal")
        return 0
    say(f"verdict: after {args.steps} steps on {world} ranks the weights "
        f"of ranks {bad_w} and the AdamW state of ranks {bad_o} differ "
        "from the single-process reference: DIFFERENT")
    return 1


if __name__ == "__main__":
    # each line as it is printed, into a pipe (| tee log) too
    sys.stdout.reconfigure(line_buffering=True)
    raise SystemExit(main())
