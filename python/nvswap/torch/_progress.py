# SPDX-License-Identifier: MIT
"""What a person reads: summary(model), stats() on one screen, and
progress(model), an opt-in line per optimizer step (per forward for a
model offloaded with inference=True)."""
import operator
import sys
import time

from ._engine import engine_of


def _size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _rate(n, seconds):
    return f"{_size(int(n / seconds))}/s" if seconds > 0 else "-"


def summary(model):
    """stats(model) for a person: a few lines saying where the model
    lives, its pools, what it has run and what the disk cost it (the
    time waited for I/O that compute did not hide). A str: print it."""
    eng = engine_of(model)
    s = eng.stats()
    ps, gs = s["param"], s["optimizer"]
    dtype = str(s["dtype"]).replace("torch.", "") if s["dtype"] else None
    where = eng.pswap.dirs[0] if eng.pswap.dirs else "?"
    out = [f"nvswap.torch: {s['layers']} layers, {s['parameters']} "
           f"parameters ({_size(s['parameter_bytes'])}"
           f"{', ' + dtype if dtype else ''}) on NVMe in {where} "
           f"({ps['backend']}{', page cache' if s['page_cache'] else ''})"]
    pools = (f"  pools: parameters {ps['buffer_count']} x "
             f"{_size(ps['buffer_size'])} (at most "
             f"{ps['pool_high_water']} in use)")
    if gs is not None:
        pools += (f", gradients and optimizer state "
                  f"{gs['buffer_count']} x {_size(gs['buffer_size'])} "
                  f"(at most {gs['pool_high_water']})")
    if s["resident_layers"]:
        pools += (f"; {s['resident_layers']} layers "
                  f"({_size(s['resident_bytes'])}) kept in memory")
    out.append(pools)
    if s["inference"]:
        out.append(f"  served: {s['forwards']} forwards, the last read "
                   f"{_size(s['last_forward_bytes_read'])}; read-ahead "
                   f"{s['lookahead']} layer"
                   f"{'' if s['lookahead'] == 1 else 's'}")
    else:
        ran = f"  trained: {s['steps']} optimizer steps"
        said = [f"{s['speculated_steps']} stepped in backward"]
        if s["redone_steps"]:
            said.append(f"{s['redone_steps']} redone")
        if s["step_pending"]:
            said.append("the last one pending (deferred)")
        if s["resumed"]:
            said.append(f"resumed from {s['resumed']['tag']!r}")
        if s["checkpoints"]:
            said.append(f"{s['checkpoints']} checkpoints")
        out.append(f"{ran} ({', '.join(said)})")
    out.append(f"  I/O: read {_size(s['bytes_read'])}, written "
               f"{_size(s['bytes_written'])}; waited "
               f"{s['io_exposed_s']:.3f} s for it")
    return "\n".join(out)


class _Progress:
    """One model's progress reporting: the figures at the last report,
    to give each line what happened since."""

    def __init__(self, eng, out, every):
        self.eng, self.out, self.every = eng, out, every
        self.count = 0
        self.last = self._now()

    def _now(self):
        s = self.eng.stats()
        return (time.monotonic(), s["bytes_read"], s["bytes_written"],
                s["io_exposed_s"])

    def tick(self, what):
        self.count += 1
        if self.count % self.every:
            return
        now = self._now()
        t, rd, wr, wait = (a - b for a, b in zip(now, self.last))
        self.last = now
        fig = {what: self.count, "seconds": t, "bytes_read": rd,
               "bytes_written": wr, "io_exposed_s": wait,
               "bytes_per_s": (rd + wr) / t if t > 0 else 0.0,
               "bytes_read_total": now[1], "bytes_written_total": now[2]}
        if callable(self.out):
            self.out(fig)
            return
        share = f" ({100 * wait / t:.0f}%)" if t > 0 else ""
        print(f"nvswap {what} {self.count}: {t:.2f} s, read {_size(rd)}, "
              f"written {_size(wr)} ({_rate(rd + wr, t)}), waited "
              f"{wait:.3f} s for I/O{share}", file=self.out, flush=True)


_STDERR = object()  # sys.stderr as it is when progress() is called


def progress(model, out=_STDERR, every=1):
    """Report after every `every`-th optimizer step (forward, for a model
    offloaded with inference=True) what it moved since the last report:
    a line to out (a file; default sys.stderr, flushed), or out(dict)
    when out is callable: step (or forward), seconds, bytes_read,
    bytes_written, io_exposed_s (time waited for I/O), bytes_per_s, and
    bytes_read_total, bytes_written_total (stats()'s counters then).
    out=None turns it off. Off by default."""
    eng = engine_of(model)
    if out is None:
        eng.progress = None
        return
    if out is _STDERR:
        out = sys.stderr
    try:
        n = None if isinstance(every, bool) else operator.index(every)
    except TypeError:
        n = None
    if n is None or n < 1:
        raise ValueError(f"nvswap.torch.progress: every={every!r}: a "
                         "count of steps, 1 or more")
    every = n
    if not callable(out) and not hasattr(out, "write"):
        raise TypeError(f"nvswap.torch.progress: out={out!r}: a file, a "
                        "callable taking a dict, or None")
    eng.progress = _Progress(eng, out, every)
