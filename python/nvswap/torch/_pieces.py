# SPDX-License-Identifier: MIT
"""What one layer's optimizer step lends torch's Adam or AdamW: each
parameter as it is, or, above CHUNK elements, in pieces.

torch's Adam and AdamW are elementwise, so a parameter stepped as views
of CHUNK elements of its value, gradient and state (each piece a
parameter of its own to torch, with a copy of the step count) ends bit
for bit where the whole would. What that buys is memory: torch's
temporaries (exp_avg_sq.sqrt() and its quotient) and the gradient with
the deferred clips applied (a new tensor) are a piece's size, not the
parameter's: the pieces are stepped in rounds (round k: every parameter's
k-th piece; round 0 also every parameter lent whole), each piece's
clipped gradient made just before its round and dropped after it. For a
Llama's 262 MB embedding that is ~48 MiB above the pools instead of
~800 MB.

A layer's first step registers its state before the step, as torch
would make it (first_state()), so that it runs as any other step: in
pieces, from the pool buffer."""
import torch

# A multiple of every vector width: a piece's elements fall in the same
# lanes as the whole parameter's.
CHUNK = 1 << 22


def first_state(inner, shape, dtype, group):
    """The state torch's first step of a parameter of shape and dtype
    makes, as it is before that step: {key: a meta tensor of that shape
    and dtype (zeros, to be registered without memory or I/O), or the
    step count of 0}, in torch's order, learned from torch's own first
    step of a two-element tensor of dtype under group's options; {} for a
    state of another form."""
    d = torch.zeros(2, dtype=dtype)
    d.grad = torch.zeros_like(d)
    probe = type(inner)([d])
    # every option of the group (and what a scheduler added to it)
    probe.param_groups[0].update(
        {k: v for k, v in group.items() if k != "params"})
    probe.step()
    out = {}
    for k, v in probe.state[d].items():
        if (torch.is_tensor(v) and v.shape == d.shape and
                v.dtype == dtype):
            out[k] = torch.empty(shape, dtype=dtype, device="meta")
        elif k == "step":
            out[k] = torch.zeros_like(v) if torch.is_tensor(v) else 0
        else:
            return {}
    return out


class Lent:
    """One layer's step as lent to inner (a torch Adam or AdamW): add()
    each stand-in, step(), then state_of() what torch left."""

    def __init__(self, inner, groups):
        self.inner, self.groups = inner, groups
        self.rounds = [[]]  # [(group index, tensor, its gradient or None)]
        self.whole = {}  # stand-in -> (its first piece, its whole state)

    def add(self, gi, t, src, grad_of):
        """Stand-in t of group gi (its state, if any, in inner.state[t]),
        its gradient grad_of(src) (src: the gradient as stored; grad_of
        applies the step's clips, and the cast to fp32 for a master).
        Returns what torch is lent: [t], or t's pieces."""
        inner = self.inner
        st, n = inner.state.get(t), t.numel()
        tensors = [t.data, src] + [v for v in (st or {}).values()
                                   if torch.is_tensor(v) and v.numel() == n]
        if not st or n <= CHUNK or not all(v.is_contiguous()
                                           for v in tensors):
            t.grad = grad_of(src)
            self.rounds[0].append((gi, t, None))
            return [t]
        flat = {k: (v.view(-1) if torch.is_tensor(v) and v.numel() == n
                    else None) for k, v in st.items()}
        val, grad = t.data.view(-1), src.view(-1)
        out = []
        for k, a in enumerate(range(0, n, CHUNK)):
            c = val[a:a + CHUNK]
            inner.state[c] = {
                key: (f[a:a + CHUNK] if f is not None else
                      st[key].clone() if torch.is_tensor(st[key])
                      else st[key])
                for key, f in flat.items()}
            if k == len(self.rounds):
                self.rounds.append([])
            piece = grad[a:a + CHUNK]
            self.rounds[k].append((gi, c, lambda s=piece: grad_of(s)))
            out.append(c)
        del inner.state[t]
        self.whole[t] = (out[0], st)
        return out

    def step(self):
        """torch's step of every piece, round by round (a round's
        gradients made before it and dropped after)."""
        inner = self.inner
        for rnd in self.rounds:
            by_group = {}
            for gi, c, grad in rnd:
                if grad is not None:
                    c.grad = grad()
                by_group.setdefault(gi, []).append(c)
            inner.param_groups = [dict(self.groups[gi], params=ps)
                                  for gi, ps in by_group.items()]
            try:
                self._torch_step()
            finally:
                for _, c, grad in rnd:
                    if grad is not None:
                        c.grad = None

    def _torch_step(self):
        self.inner.step()

    def state_of(self, t):
        """t's state as torch left it: for a stand-in lent in pieces, its
        whole tensors and its first piece's scalars."""
        first, whole = self.whole.get(t, (t, None))
        st = self.inner.state.get(first)
        if whole is None or not st:
            return st
        n = t.numel()
        return {k: (st[k] if k in st and not (torch.is_tensor(v) and
                                              v.numel() == n)
                    else v) for k, v in whole.items()}
