# SPDX-License-Identifier: MIT
"""Models and checks shared by the nvswap.torch tests: a small GPT-style
decoder of torch.nn layers, token batches, a training loop, and state
dicts compared bit for bit."""
import torch

V, D, HEADS, T, B = 64, 32, 4, 8, 2


class GPT(torch.nn.Module):
    def __init__(self, layers=2, tie=False, twice=False):
        super().__init__()
        self.twice = twice
        self.emb = torch.nn.Embedding(V, D)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0,
                                             batch_first=True)
            for _ in range(layers))
        self.head = torch.nn.Linear(D, V, bias=False)
        if tie:
            self.head.weight = self.emb.weight
        self.register_buffer("mask",
                             torch.triu(torch.full((T, T), -1e9), 1))

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = b(h, src_mask=self.mask)
            if self.twice:  # the same module called twice in one forward
                h = b(h, src_mask=self.mask)
        return self.head(h)


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (B, T + 1), generator=g) for _ in range(n)]


def train(model, opt, data):
    losses = []
    for tok in data:
        out = model(tok[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 tok[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def same(a, b):
    """state dicts equal bit for bit (tensors by torch.equal)"""
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            same(a[k], b[k])
        elif torch.is_tensor(a[k]):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k
