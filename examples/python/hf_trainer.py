#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The LLM fine-tuning recipe on nvswap.torch, end to end, checked bit for
bit against the same recipe in memory.

1. "Pretrained" weights: a Llama from a config with random weights (no
   hub here), saved with save_pretrained (safetensors shards and index).
2. The model built on the meta device (no memory for its weights) and
   offloaded with weights=: each layer read from the safetensors shards
   straight into its swap layer, one at a time.
3. Trained by the Hugging Face Trainer with its defaults (gradient
   clipping at max_grad_norm=1.0) plus activation checkpointing and a
   linear schedule, the optimizer nvswap.torch.AdamW (with --bf16: bf16
   weights with fp32 masters).
4. The same in memory: from_pretrained, the same Trainer, torch's AdamW
   (with --bf16: the bf16 model with fp32 master copies stepped by
   torch's AdamW, the bf16 copies refreshed after each step).
5. The verdict: every logged loss and grad_norm, then the final weights
   (written back out with nvswap.torch.save_pretrained, layer by layer,
   and loaded with from_pretrained) equal the in-memory run's.

    python3 examples/python/hf_trainer.py --dir nvme_swap [--steps 6] \\
        [--layers 4] [--hidden 256] [--bf16]

with the package and its hf extra (torch, transformers, accelerate,
safetensors) installed: pip install '.[hf]' in a venv (README, "Quick
start from Python"). make demo-hf makes such a venv and runs it.
--dir must be on the disk (not /tmp, which may be a tmpfs); the run's
files, and the levels of --dir it made, are removed at the end.
"""
import argparse
import copy
import os
import shutil
import sys
import tempfile
import time

import torch
import transformers

import nvswap.torch as nvt


class Tokens(torch.utils.data.Dataset):
    """Random token sequences: the training set."""

    def __init__(self, vocab, n, t):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, vocab, (n, t), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class MasterAdamW(torch.optim.AdamW):
    """The in-memory reference of --bf16: AdamW over fp32 master copies
    of a bf16 model, the model refreshed from them after each step."""

    def __init__(self, params, masters_from, **kw):
        self.model_params = list(params)
        self.masters = [torch.nn.Parameter(p.detach().clone().float())
                        for p in masters_from]
        super().__init__(self.masters, **kw)

    @torch.no_grad()
    def step(self, closure=None):
        for p, m in zip(self.model_params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        super().step(closure)
        for p, m in zip(self.model_params, self.masters):
            p.copy_(m)

    def zero_grad(self, set_to_none=True):
        for p in self.model_params:
            p.grad = None
        super().zero_grad(set_to_none)


def train(model, opt, ds, a, out):
    args = transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=a.batch,
        max_steps=a.steps, learning_rate=a.lr, logging_steps=1,
        gradient_checkpointing=True, save_strategy="no", report_to=[],
        use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True,
        log_level="error")
    sched = transformers.get_linear_schedule_with_warmup(opt, 1, a.steps)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds,
                                   optimizers=(opt, sched))
    trainer.remove_callback(transformers.PrinterCallback)  # we print
    t0 = time.perf_counter()
    trainer.train()
    took = time.perf_counter() - t0
    return [(h["loss"], h["grad_norm"]) for h in trainer.state.log_history
            if "loss" in h], took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="nvme_swap")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 weights with fp32 master weights")
    a = ap.parse_args()
    made, p = [], os.path.abspath(a.dir)
    while not os.path.exists(p):  # the levels of --dir this run makes
        made.append(p)
        p = os.path.dirname(p)
    os.makedirs(a.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hf_trainer.", dir=a.dir)
    try:
        return run(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for d in made:  # innermost first, each only when empty
            try:
                os.rmdir(d)
            except OSError:
                break


def run(a, work):
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden,
        intermediate_size=a.hidden * 11 // 4, num_hidden_layers=a.layers,
        num_attention_heads=max(1, a.hidden // 64),
        num_key_value_heads=max(1, a.hidden // 128),
        max_position_embeddings=a.context, tie_word_embeddings=False)
    pretrained = os.path.join(work, "pretrained")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(
        pretrained, max_shard_size="8MB")
    shards = sorted(f for f in os.listdir(pretrained)
                    if f.endswith(".safetensors"))
    print(f"pretrained: Llama {a.layers} x {a.hidden}, {len(shards)} "
          f"safetensors shards in {pretrained}")
    ds = Tokens(a.vocab, a.batch * a.steps, a.context)

    # Offloaded: built on the meta device, weights straight to NVMe.
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    dtype = torch.bfloat16 if a.bf16 else None
    nvt.offload(model, nvme_path=work, weights=pretrained, dtype=dtype,
                buffer_size="8M", buffer_count=4, lookahead=2)
    st = nvt.stats(model)
    print(f"offloaded: {st['parameters']} parameters in {st['layers']} "
          f"layers, {st['parameter_bytes'] / (1 << 20):.1f} MiB on NVMe "
          f"({'bf16 + fp32 masters' if a.bf16 else 'fp32'}), pools "
          f"{st['pool_bytes'] / (1 << 20):.0f} MiB")
    opt = nvt.AdamW(model.parameters(), lr=a.lr)
    got, t_off = train(model, opt, ds, a, os.path.join(work, "off"))
    st = nvt.stats(model)
    print(f"offloaded Trainer: {t_off:.1f} s, read "
          f"{st['bytes_read'] / (1 << 20):.0f} MiB, written "
          f"{st['bytes_written'] / (1 << 20):.0f} MiB, {st['recomputes']} "
          "checkpointed regions recomputed")

    # The same in memory.
    ref = transformers.LlamaForCausalLM.from_pretrained(pretrained)
    if a.bf16:
        src = copy.deepcopy(ref)
        ref = ref.to(torch.bfloat16)
        ref_opt = MasterAdamW(ref.parameters(), src.parameters(), lr=a.lr)
        del src
    else:
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=a.lr)
    want, t_mem = train(ref, ref_opt, ds, a, os.path.join(work, "ref"))
    print(f"in-memory Trainer: {t_mem:.1f} s")
    for step, (w, g) in enumerate(zip(want, got), 1):
        print(f"step {step}: loss {g[0]:.6f} grad_norm {g[1]:.6f}  "
              f"(in memory {w[0]:.6f} / {w[1]:.6f})")

    # The weights, written out layer by layer and read back by HF.
    out = os.path.join(work, "trained")
    nvt.save_pretrained(model, out)
    back = transformers.LlamaForCausalLM.from_pretrained(
        out, dtype=ref.dtype).state_dict()
    mine = ref.state_dict()
    equal = (got == want and back.keys() == mine.keys() and
             all(torch.equal(back[k], mine[k]) for k in mine))
    nvt.restore(model)
    if not equal:
        print("verdict: FAILED: the offloaded run differs from the "
              "in-memory one", file=sys.stderr)
        return 1
    print(f"verdict: the offloaded Trainer's losses, grad_norms and final "
          f"weights ({len(mine)} tensors, saved with "
          "nvswap.torch.save_pretrained) equal the in-memory run's bit for "
          "bit")
    return 0


if __name__ == "__main__":
    # each line as it is printed, into a pipe (| tee log) too
    sys.stdout.reconfigure(line_buffering=True)
    raise SystemExit(main())
