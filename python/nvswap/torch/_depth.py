# SPDX-License-Identifier: MIT
"""The read-ahead depth of an inference model, chosen from measured disk
and compute times.

A forward of a model served walks the same layers every time (decoding).
offload(inference=True) gives the parameter pool B buffers and, unless
lookahead= says otherwise, reads ahead into all of them. Whether that
depth pays is a matter of times the library cannot know beforehand: how
long each streamed layer takes to read, and how long the model computes
between one streamed layer and the next (the layer itself, the resident
layers around it, the sampling between steps). A buffer that read-ahead
does not need can instead hold a streamed layer for good: it is then
never read again, and memory stays what it was.

So the Tuner times forwards WARMUP + 1 to WARMUP + MEASURE (the first of
generate() is the prompt's, longer than a decoding step's): for each
streamed layer of the walk, the compute before its acquire, the wait in
the acquire and its own forward; and the disk's rate, the bytes the pool
read over the time its aio handle had reads in flight
(nvs_swap_stats.io_busy_ns). simulate() replays a forward's pipeline
from those times for any number of read-ahead buffers and any choice of
layers kept: reads one after another on the disk, each into a buffer
freed by a layer the walk is done with, each layer's compute waiting for
its read. Checked first against the forward time measured (a model more
than TOLERANCE off changes nothing); then, one buffer at a time, the
streamed layer whose keeping the model finds fastest is kept, down to
two buffers of read-ahead; the count with the fastest prediction wins
(within 1 %, the one keeping more: fewer bytes read). The model takes
the disk's rate as the same at any depth, which a disk that needs a
deep queue breaks; so the MEASURE forwards after a choice that keeps
layers are timed too, and a median forward SLOWER than before undoes
it (the layers released, streamed again as before). Decided once. CPU
only (on a device, layers are staged from the pool buffers)."""
import time

import nvswap

from . import _infer

# forwards not timed (the prompt's), then the forwards timed
WARMUP, MEASURE = 1, 4
# how far the model's forward time may be from the measured one
TOLERANCE = 0.25
# a prediction this close to the fastest counts as as fast
TIE = 0.01
# the choice is undone when the forwards timed after it are this much
# slower than before (the model takes the disk's rate as the same at
# any depth: a disk that needs a deeper queue breaks that)
SLOWER = 0.05


def simulate(entries, buffers, lookahead, cycles=6):
    """A forward's time in seconds, in the steady state of back-to-back
    forwards, as the pipeline runs it.

    entries: the walk's streamed layers in order, each (gap, own, read):
    gap the compute before its acquire, own its own compute, read the
    seconds its read takes, or None for a layer kept (no read, no
    buffer: gap + own is then compute like any other). buffers: the pool
    buffers reads may use. lookahead: the ParamSwapper's. As the C
    read-ahead does, the acquire of a layer starts the reads of the
    layers after it up to min(lookahead, buffers - 1) ahead (into the
    buffers the layers before it gave back when released); a layer not
    yet being read is read first, alone. The disk serves reads one after
    another in the walk's order."""
    if buffers < 1:
        raise ValueError("simulate: buffers must be at least 1")
    reads = [r for _, _, r in entries if r is not None]
    nb = len(reads)
    if nb == 0:
        return sum(g + o for g, o, _ in entries)
    ahead = min(lookahead, buffers - 1)
    read_end, released = {}, {}
    state = {"disk": 0.0, "issued": -1}

    def issue(j, at):
        # reads start in order: j and every one before it not yet started
        while state["issued"] < j:
            k = state["issued"] + 1
            start = max(at, state["disk"], released.get(k - buffers, 0.0))
            state["disk"] = start + reads[k % nb]
            read_end[k] = state["disk"]
            state["issued"] = k

    t, j, ends = 0.0, 0, []
    for _ in range(cycles):
        for gap, own, r in entries:
            t += gap
            if r is None:
                t += own
                continue
            if j <= state["issued"]:
                # already on its way: the read-ahead goes in first
                issue(j + ahead, t)
            else:
                issue(j, t)  # a read of its own, then the read-ahead
                issue(j + ahead, read_end[j])
            t = max(t, read_end[j]) + own
            released[j] = t
            j += 1
        ends.append(t)
    last = ends[-1] - ends[-3]
    return last / 2


def plan(entries, layer_of, buffers, lookahead):
    """(predictions, kept): predictions[k] the forward time with k more
    layers kept (k from 0 to buffers - 2), kept the layers in the order
    chosen. entries as simulate()'s, with read set; layer_of[i] the
    layer of entries[i] (a layer may come more than once)."""
    kept, preds = [], [simulate(entries, buffers, lookahead)]
    cur = list(entries)
    for k in range(1, buffers - 1):
        best = None
        for layer in dict.fromkeys(l for i, l in enumerate(layer_of)
                                   if cur[i][2] is not None):
            trial = [(g, o, None) if layer_of[i] == layer else (g, o, r)
                     for i, (g, o, r) in enumerate(cur)]
            t = simulate(trial, buffers - k, lookahead)
            if best is None or t < best[0]:
                best = (t, layer, trial)
        if best is None:
            break
        preds.append(best[0])
        kept.append(best[1])
        cur = best[2]
    return preds, kept


def choose(preds):
    """The number of layers to keep: the fastest prediction, or within
    TIE of it the most kept."""
    fastest = min(preds)
    return max(k for k, t in enumerate(preds) if t <= fastest * (1 + TIE))


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


class Tuner:
    """The timing of an inference engine's forwards and, once measured,
    the choice (see the module's text). eng: the Engine; buffers: its
    parameter pool's; lookahead: its ParamSwapper's."""

    def __init__(self, eng, buffers, lookahead):
        self.eng = eng
        self.buffers, self.lookahead = buffers, lookahead
        self.state = "waiting"
        self.forwards = []  # per forward timed: [(layer, gap, wait, own)]
        self.took = []  # each timed forward's own time (first hook to last)
        self.cur = None
        self.last_release = None
        self.io0 = None
        self.report = {"state": "waiting", "buffers": buffers}

    # ------------------------------------------------------ timing
    def forward_begins(self):
        if self.state == "waiting" and self.eng.forwards >= WARMUP:
            self.state = "measuring"
            self.report["state"] = "measuring"
            ps = self.eng.pswap.stats()
            self.io0 = (ps["bytes_read"] + ps["file_bytes_read"],
                        ps["io_busy_ns"])
        if self.state in ("measuring", "checking"):
            self.cur = []
            self.began = time.perf_counter_ns()

    def acquired(self, layer, t0, t1):
        """A streamed layer of a top-level forward acquired: the call
        began at t0 and returned at t1 (perf_counter_ns)."""
        if self.cur is not None:
            prev = t0 if self.last_release is None else self.last_release
            # layer, compute before, wait, acquired at, own compute
            self.cur.append([layer, t0 - prev, t1 - t0, t1, None])

    def released(self, layer):
        if self.state == "done":
            return
        now = time.perf_counter_ns()
        self.last_release = now
        for e in reversed(self.cur or ()):
            if e[0] == layer and e[4] is None:
                e[4] = now - e[3]
                break

    def forward_ends(self):
        """After a top-level forward: the choice, once MEASURE forwards
        are timed."""
        if self.cur is None:
            return
        fwd, self.cur = self.cur, None
        took = (time.perf_counter_ns() - self.began) / 1e9
        if any(e[4] is None for e in fwd):
            return self._off("a layer of the walk was not released "
                             "within its forward")
        if self.state == "checking":
            self.after.append(took)
            if len(self.after) == MEASURE:
                self._check()
            return
        self.took.append(took)
        self.forwards.append([(e[0], e[1], e[2], e[4]) for e in fwd])
        if len(self.forwards) == MEASURE:
            self._decide()

    # ------------------------------------------------------ choice
    def _off(self, why):
        self.state = "done"
        self.cur = None
        self.report.update(state="kept", reason=why)

    def _decide(self):
        eng = self.eng
        walks = {tuple(e[0] for e in f) for f in self.forwards}
        if len(walks) != 1 or not self.forwards[0]:
            return self._off("the forwards timed walked different layers"
                             if len(walks) != 1 else
                             "no layer streamed")
        ps = eng.pswap.stats()
        # (a layer read in place from its weights file counts too)
        nbytes = ps["bytes_read"] + ps["file_bytes_read"] - self.io0[0]
        busy = ps["io_busy_ns"] - self.io0[1]
        if nbytes <= 0 or busy <= 0:
            return self._off("nothing was read in the forwards timed")
        rate = nbytes / (busy / 1e9)
        layer_of = [e[0] for e in self.forwards[0]]
        n = len(layer_of)
        gap = [_median([f[i][1] for f in self.forwards]) / 1e9
               for i in range(n)]
        wait = [_median([f[i][2] for f in self.forwards]) / 1e9
                for i in range(n)]
        own = [_median([f[i][3] for f in self.forwards]) / 1e9
               for i in range(n)]
        measured = _median([sum(e[1] + e[2] + e[3] for e in f) / 1e9
                            for f in self.forwards])
        # an acquire's own cost, I/O aside: the least any took (one
        # whose layer was read already); the model counts it as compute
        call = min(e[2] for f in self.forwards for e in f) / 1e9
        entries = [(gap[i] + call, own[i],
                    eng.layer_bytes[layer_of[i]] / rate) for i in range(n)]
        preds, kept = plan(entries, layer_of, self.buffers, self.lookahead)
        self.report.update(
            forwards_timed=len(self.forwards), disk_bytes_per_s=rate,
            read_s=sum(e[2] for e in entries),
            compute_s=sum(gap) + sum(own) + n * call,
            wait_s=sum(wait) - n * call,
            measured_s=measured, predicted_s=preds,
            forward_s=_median(self.took))
        if abs(preds[0] - measured) > TOLERANCE * measured:
            return self._off(f"the model predicted {preds[0]:.4f} s for a "
                             f"forward measured at {measured:.4f} s")
        k = choose(preds)
        self.state = "done"
        self.report.update(state="tuned", kept=kept[:k],
                           buffers=self.buffers - k)
        if k:
            self.walk, self.before = list(eng.walk), eng.lookahead
            try:
                _infer.keep_streamed(eng, kept[:k])
            except nvswap.Error as e:
                # The forward that ended is not failed for an
                # optimization: the layer streams as before, and its
                # next read says what is wrong, if anything still is.
                return self.report.update(
                    state="kept", buffers=self.buffers, kept=[],
                    reason=f"keeping {k} layers failed: {e}")
            eng.lookahead = min(eng.lookahead, self.buffers - k - 1)
            # then the forwards after the choice are timed against it
            self.state, self.after = "checking", []
            self.report["state"] = "checking"

    def _check(self):
        """MEASURE forwards after the choice: kept, or undone when the
        median forward is SLOWER than the one measured before (each
        forward's own time: what the caller does between forwards, here
        a test's checks, is not the choice's)."""
        eng = self.eng
        after = _median(self.after)
        before = self.report["forward_s"]
        self.state = "done"
        self.report["after_s"] = after
        if after <= before * (1 + SLOWER):
            self.report["state"] = "tuned"
            return
        kept = self.report["kept"]
        _infer.unkeep_streamed(eng, kept, self.walk)
        eng.lookahead = self.before
        self.report.update(
            state="undone", buffers=self.buffers, kept=[],
            reason=f"a forward took {after:.4f} s with {len(kept)} "
            f"layers kept, {before:.4f} s before")
