# SPDX-License-Identifier: MIT
"""The Hugging Face recipe on an offloaded model: the Trainer with its
defaults (gradient clipping at max_grad_norm=1.0), gradient accumulation,
activation checkpointing and an LR scheduler, and accelerate's
clip_grad_norm_, all bit for bit as the same recipe in memory, the logged
grad_norm included."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed for this "
    "interpreter (Debian packages no transformers)")
import nvswap.torch as nvt  # noqa: E402
from torchhelp import MasterAdamW, same  # noqa: E402

V = 96


def llama(tie=False):
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=32, tie_word_embeddings=tie))


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=16, t=12):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, V, (n, t), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def trainer_run(model, opt_cls, outdir, **args):
    kw = dict(output_dir=outdir, per_device_train_batch_size=4,
              max_steps=4, learning_rate=1e-2, logging_steps=1,
              save_strategy="no", report_to=[], use_cpu=True, seed=0,
              dataloader_num_workers=0, disable_tqdm=True)
    kw.update(args)
    targs = transformers.TrainingArguments(**kw)
    opt = opt_cls(model.parameters(), lr=1e-2)
    sched = transformers.get_linear_schedule_with_warmup(opt, 1, 4)
    tr = transformers.Trainer(model=model, args=targs,
                              train_dataset=Tokens(), optimizers=(opt, sched))
    tr.train()
    return [(h["loss"], h["grad_norm"]) for h in tr.state.log_history
            if "loss" in h]


@pytest.mark.parametrize("build,checkpointing,accumulate", [
    (llama, False, 1), (llama, True, 1), (llama, True, 2),
    (lambda: llama(tie=True), False, 2), (gpt2, True, 1)],
    ids=["llama", "llama-ckpt", "llama-ckpt-accum", "llama-tied-accum",
         "gpt2-ckpt"])
def test_trainer_with_its_defaults_is_bit_for_bit(swapdir, diskdir, build,
                                                  checkpointing, accumulate):
    torch.manual_seed(0)
    ref = build()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    kw = {"gradient_checkpointing": checkpointing,
          "gradient_accumulation_steps": accumulate}
    want = trainer_run(ref, torch.optim.AdamW, diskdir + "/ref", **kw)
    got = trainer_run(off, nvt.AdamW, diskdir + "/off", **kw)
    assert got == want  # losses and the logged grad_norm
    assert all(n > 0 for _, n in got)  # never a silent 0
    same(ref.state_dict(), off.state_dict())
    if checkpointing:
        assert nvt.stats(off)["recomputes"] > 0


def test_accelerate_clip_grad_norm_takes_nvswaps_path(swapdir):
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    ref = llama()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    acc = accelerate.Accelerator(cpu=True)
    x = Tokens().x[:4]
    norms = []
    for m in (ref, off):
        m(input_ids=x, labels=x).loss.backward()
        norms.append(acc.clip_grad_norm_(m.parameters(), 0.5))
    assert torch.equal(norms[0], norms[1]) and norms[1].item() > 0.5


def test_trainer_bf16_with_fp32_masters_is_bit_for_bit(swapdir, diskdir):
    """offload(dtype=bf16) against a bf16 model whose fp32 master copies
    torch's AdamW steps (torchhelp.MasterAdamW), both in the Trainer with
    clipping and checkpointing."""
    torch.manual_seed(0)
    src = llama()
    ref = copy.deepcopy(src).to(torch.bfloat16)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=torch.bfloat16)

    def reference(params, lr):
        return MasterAdamW(params, src.parameters(), lr=lr)

    kw = {"gradient_checkpointing": True}
    want = trainer_run(ref, reference, diskdir + "/ref", **kw)
    got = trainer_run(off, nvt.AdamW, diskdir + "/off", **kw)
    assert got == want
    same(ref.state_dict(), off.state_dict())


@pytest.mark.parametrize("checkpointing,accumulate,bf16", [
    (False, 1, False), (True, 2, False), (True, 1, True)],
    ids=["llama", "llama-ckpt-accum", "llama-ckpt-bf16"])
def test_trainer_with_activations_on_nvme_is_bit_for_bit(
        swapdir, diskdir, checkpointing, accumulate, bf16):
    """offload(activations=) a store taking every saved tensor (threshold
    0: the test model's are small), in the Trainer: losses, grad_norm
    and weights as the same recipe in memory, with checkpointing and
    accumulation, and with bf16 weights and fp32 masters; every tensor
    the store held is freed by the end."""
    torch.manual_seed(0)
    src = llama()
    ref = copy.deepcopy(src)
    if bf16:
        ref = ref.to(torch.bfloat16)

    def opt_ref(params, lr):
        if bf16:
            return MasterAdamW(params, src.parameters(), lr=lr)
        return torch.optim.AdamW(params, lr=lr)
    off = copy.deepcopy(src)
    act = nvt.save_on_nvme(diskdir + "/act", memory="256K",
                           buffer_size="16K", threshold=0)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=torch.bfloat16 if bf16 else None, activations=act)
    kw = {"gradient_checkpointing": checkpointing,
          "gradient_accumulation_steps": accumulate}
    want = trainer_run(ref, opt_ref, diskdir + "/ref", **kw)
    got = trainer_run(off, nvt.AdamW, diskdir + "/off", **kw)
    assert got == want
    same(ref.state_dict(), off.state_dict())
    st = act.stats()
    assert st["saved"] > 0 and st["live"] == 0, st
    assert st["restored"] == st["saved"] + st["shared"], st
    nvt.restore(off)
    act.close()
