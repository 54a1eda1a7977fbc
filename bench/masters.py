# SPDX-License-Identifier: MIT
"""The in-memory reference of offload(dtype=torch.bfloat16) + nvt.AdamW
for the benchmarks: torch's AdamW over fp32 master copies of a bf16
model's parameters (the recipe of docs/torch.md, "bf16 weights with fp32
master weights"; python/tests/torchhelp.py MasterAdamW is the test
suite's copy). Clip the model's bf16 gradients before step(), as on the
offloaded model; step() takes each to fp32, steps the masters and copies
them, rounded, back into the model."""
import torch


class MasterAdamW(torch.optim.AdamW):
    """model_params: the bf16 model's parameters; source_params: the same
    parameters in fp32 (the model before .to(torch.bfloat16)), the
    masters' starting values, as offload() widens what it is given."""

    def __init__(self, model_params, source_params, **kw):
        self.model_params = list(model_params)
        self.masters = [torch.nn.Parameter(p.detach().clone().float())
                        for p in source_params]
        if len(self.masters) != len(self.model_params):
            raise ValueError(f"MasterAdamW: {len(self.model_params)} model "
                             f"parameters but {len(self.masters)} sources")
        super().__init__(self.masters, **kw)

    @torch.no_grad()
    def step(self, closure=None):
        for p, m in zip(self.model_params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        loss = super().step(closure)
        for p, m in zip(self.model_params, self.masters):
            p.copy_(m)
            m.grad = None  # the fp32 copies of the gradients, freed now
        return loss

    def zero_grad(self, set_to_none=True):
        for p in self.model_params:
            p.grad = None
        super().zero_grad(set_to_none)
