#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The moonshot of issue 47: a Llama whose training state is at least 10 x
the memory cgroup it trains in, against the same recipe in memory.

The recipe is the Hugging Face one: non-reentrant activation
checkpointing, clipping at 1.0, AdamW (lr 1e-4), 2 x 512 tokens a step.
The model is a Llama from a config (TinyLlama's shape by default: hidden
2048, 22 layers, intermediate 5632, 32 heads, 4 key/value heads, 1.10B
parameters, 16.4 GiB of fp32 weights, gradients and Adam state), random
weights saved once with save_pretrained into DIR/model. With --dtype
bf16 both runs compute in bf16 with fp32 master weights (the mixed
precision a 1B Llama trains in): in memory the model .to(torch.bfloat16)
with bench/masters.py's MasterAdamW (torch's AdamW over fp32 master
copies), offloaded offload(dtype=torch.bfloat16); the training state is
16 bytes a parameter either way (bf16 weights and gradients, fp32
masters and two moments).

Two worker processes hold the two runs, one after the other (side by
side they do not fit in this machine's memory):
- in memory: from_pretrained, torch.optim.AdamW, torch's clipping;
- offloaded, inside a memory cgroup (examples/python/memcgroup.py) of
  --cgroup bytes (default: a tenth of the training state): the model
  built on the meta device, offload(weights=DIR/model) (nothing of it is
  ever whole in memory), nvswap.torch.AdamW.
The parent sends each the same steps (the same batches) and compares:
every step's loss and total norm must be equal,
and at the end every weight (a SHA-1 of each parameter's bytes, the
offloaded ones read a module at a time with nvt.gathered). A difference
stops the run with exit 1. The ratio is the median of the per-step
ratios (the same step's batch for both), with min-max; each offloaded
step's bytes read and written, and the I/O exposed (time acquires
waited), come from nvt.stats; its peak resident set in each phase
(forward, backward, clip + step: VmHWM, reset before each) from /proc. Two warm-up steps by default: the first
makes no optimizer step of its own (the offloaded one is deferred into
the second step's forward, where it makes the Adam state).

    PYTHONPATH=build/python python3 bench/moonshot.py \\
        [--dir /var/tmp/nvswap-moon] [--cgroup 1536M] [--steps 3]
        [--warmup 2] [--hidden 2048] [--layers 22] [--inter 5632]
        [--heads 32] [--kv-heads 4] [--vocab 32000] [--seq 512]
        [--batch 2] [--buffer-count 2] [--optimizer-buffer-count 2]
        [--optimizer-buffer-size BYTES] [--dtype fp32|bf16]
        [--lookahead 1] [--json FILE] [--clean]

Needs root (the cgroup) and about 20 GiB of memory for the in-memory
run at the default shape. --dir must be on the disk to test (not /tmp,
which may be tmpfs). DIR/swap is removed at the end; DIR/model is kept
for the next run of the same shape (it takes a minute to make) unless
--clean is given.
"""
import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "python"))
from benchutil import fs_type, loadavg, med, parse_size  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20


def _size(n):
    return "the default size" if n is None else f"{n / MIB:.0f} MiB"


def config(a):
    import transformers
    return transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
        num_hidden_layers=a.layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
        tie_word_embeddings=False)


def shape_key(a):
    return {k: getattr(a, k) for k in ("hidden", "layers", "inter", "heads",
                                       "kv_heads", "vocab", "seq")}


def model_dir(a):
    return os.path.join(a.dir, "model")


def make_model(a):
    """Random weights (seed 0) saved with transformers' save_pretrained."""
    import torch
    import transformers
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config(a))
    out = model_dir(a)
    model.save_pretrained(out)
    with open(os.path.join(out, "moonshot.json"), "w") as f:
        json.dump(shape_key(a), f)


def have_model(a):
    try:
        with open(os.path.join(model_dir(a), "moonshot.json")) as f:
            return json.load(f) == shape_key(a)
    except (OSError, ValueError):
        return False


class Worker:
    """One run (in memory or offloaded) in this process: built at start,
    then a step or the digest per command read from stdin; answers are
    JSON lines on the original stdout (everything else goes to stderr)."""

    def __init__(self, a, kind):
        import torch
        import transformers
        self.torch, self.kind, self.a = torch, kind, a
        t0 = time.perf_counter()
        if kind == "memory":
            self.model = transformers.LlamaForCausalLM.from_pretrained(
                model_dir(a), torch_dtype=torch.float32)
            if a.dtype == "bf16":  # the masters from the fp32 values
                from masters import MasterAdamW
                ps = list(self.model.parameters())
                self.opt = MasterAdamW(ps, ps, lr=1e-4)
                self.model.to(torch.bfloat16)
            else:
                self.opt = torch.optim.AdamW(self.model.parameters(),
                                             lr=1e-4)
            self.nvt = None
        else:
            import nvswap.torch as nvt
            self.nvt = nvt
            with torch.device("meta"):
                self.model = transformers.LlamaForCausalLM(config(a))
            nvt.offload(self.model, nvme_path=os.path.join(a.dir, "swap"),
                        weights=model_dir(a), buffer_count=a.buffer_count,
                        optimizer_buffer_count=a.optimizer_buffer_count,
                        optimizer_buffer_size=a.optimizer_buffer_size,
                        lookahead=a.lookahead,
                        dtype=(torch.bfloat16 if a.dtype == "bf16"
                               else None))
            self.opt = nvt.AdamW(self.model.parameters(), lr=1e-4)
        self.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.train()
        self.load_s = time.perf_counter() - t0

    def stats(self):
        return self.nvt.stats(self.model) if self.nvt else None

    def step(self, i):
        torch = self.torch
        gen = torch.Generator().manual_seed(1000 + i)
        tokens = torch.randint(0, self.a.vocab, (self.a.batch, self.a.seq),
                               generator=gen)
        peaks = []
        marks = [(time.perf_counter(), self.stats())]
        _hwm_reset()
        loss = self.model(input_ids=tokens, labels=tokens).loss
        peaks.append(_hwm())
        marks.append((time.perf_counter(), self.stats()))
        _hwm_reset()
        loss.backward()
        peaks.append(_hwm())
        marks.append((time.perf_counter(), self.stats()))
        _hwm_reset()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad()
        peaks.append(_hwm())
        marks.append((time.perf_counter(), self.stats()))
        out = {"loss": loss.item(), "norm": norm.item(), "peaks": peaks,
               "total": marks[3][0] - marks[0][0],
               "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
               * 1024}
        for name, (x, y) in zip(("fwd", "bwd", "opt"), zip(marks, marks[1:])):
            out[name] = y[0] - x[0]
            if self.nvt:
                out[name + "_exposed"] = (y[1]["io_exposed_s"] -
                                          x[1]["io_exposed_s"])
        if self.nvt:
            s0, s1 = marks[0][1], marks[3][1]
            for k in ("bytes_read", "bytes_written", "io_exposed_s"):
                out[k] = s1[k] - s0[k]
            for k in ("speculated_steps", "redone_steps"):
                out[k] = s1.get(k, 0)
        return out

    def digest(self):
        """SHA-1 of every parameter's bytes, by name; offloaded modules are
        gathered one at a time (the pool holds one module)."""
        got = {}
        for mname, mod in self.model.named_modules():
            own = list(mod.named_parameters(recurse=False))
            if not own:
                continue
            if self.nvt:
                ctx = self.nvt.gathered(mod)
            else:
                ctx = _Nothing()
            with ctx:
                for pname, p in own:
                    # (as bytes: numpy has no bf16)
                    h = hashlib.sha1(p.detach().contiguous().view(-1).view(
                        self.torch.uint8).numpy())
                    got[f"{mname}.{pname}"] = h.hexdigest()
        return got

    def serve(self, out):
        print(json.dumps({"ready": True, "load_s": self.load_s,
                          "stats": self.stats()}, default=str), file=out,
              flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            if cmd[0] == "step":
                res = self.step(int(cmd[1]))
            else:
                res = {"digest": self.digest()}
            print(json.dumps(res), file=out, flush=True)


def _hwm_reset():
    """The process's peak resident set (VmHWM) starts again from now."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _hwm():
    """VmHWM in bytes (None where /proc does not say)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _mib(peaks):
    return "/".join("?" if p is None else str(p // MIB) for p in peaks)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def worker_main(a):
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # every other print (transformers, torch) to stderr
    sys.stdout = sys.stderr
    Worker(a, a.worker).serve(out)


class Child:
    def __init__(self, name, cmd):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, line):
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            rc = self.proc.wait()
            sys.exit(f"moonshot: the {self.name} worker ended (exit {rc}) "
                     "without answering; its stderr is above")
        return json.loads(reply)

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait()


def training_state_bytes(a):
    """fp32 weights, gradients and AdamW's two moments (or bf16 weights
    and gradients, fp32 masters and moments): 16 bytes a parameter."""
    import torch
    import transformers
    with torch.device("meta"):
        m = transformers.LlamaForCausalLM(config(a))
    n = sum(p.numel() for p in m.parameters())
    return n, 16 * n


def parent(a):
    import memcgroup
    reason = memcgroup.why_not()
    if reason:
        sys.exit(f"moonshot: no memory cgroup: {reason}")
    os.makedirs(a.dir, exist_ok=True)
    nparams, state = training_state_bytes(a)
    limit = a.cgroup or (state // 10) // MIB * MIB
    if not have_model(a):
        t0 = time.perf_counter()
        print(f"making the model in {model_dir(a)}...", file=sys.stderr)
        shutil.rmtree(model_dir(a), ignore_errors=True)
        subprocess.run([sys.executable, __file__, "--make-model"] +
                       sys.argv[1:], check=True)
        print(f"  {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    shutil.rmtree(os.path.join(a.dir, "swap"), ignore_errors=True)
    me = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    steps = range(a.warmup + a.steps)
    # One run after the other: both at once do not fit in memory (the
    # in-memory run alone holds 20 GB of this machine's 24 at the default
    # shape; side by side the offloaded run waited on a host short of
    # memory). A step of a minute is long beside the machine's drift.
    mem = Child("in-memory", me + ["--worker", "memory"])
    r_mem = mem.ask(None)
    got_mem = []
    for i in steps:
        got_mem.append(mem.ask(f"step {i}"))
        m = got_mem[-1]
        print(f"  in memory, step {i}: {m['total']:.1f} s, loss "
              f"{m['loss']:.6f}, norm {m['norm']:.4f}; load {loadavg()}",
              file=sys.stderr)
    d_mem = mem.ask("digest")["digest"]
    mem.close()
    cg = memcgroup.MemCgroup(limit).__enter__()
    try:
        off = Child("offloaded", cg.wrap(me + ["--worker", "offloaded"]))
        r_off = off.ask(None)
        st = r_off["stats"]
        print(f"Llama {nparams / 1e9:.2f}B parameters, training state "
              f"{state / GIB:.1f} GiB = {state / limit:.1f} x the cgroup "
              f"({limit // MIB} MiB); loaded in {r_mem['load_s']:.0f} s "
              f"(memory) and {r_off['load_s']:.0f} s (offloaded, pools "
              f"{st['pool_bytes'] / MIB:.0f} MiB)", file=sys.stderr)
        rows = []
        for i in steps:
            o, m = off.ask(f"step {i}"), got_mem[i]
            same = (m["loss"], m["norm"]) == (o["loss"], o["norm"])
            print(f"  offloaded, step {i}"
                  f"{' (warm-up)' if i < a.warmup else ''}: "
                  f"{o['total']:.1f} s ({o['total'] / m['total']:.3f} x; "
                  f"forward {o['fwd']:.1f} s, backward {o['bwd']:.1f} s, "
                  f"exposed {o['io_exposed_s']:.1f} s), loss "
                  f"{o['loss']:.6f}, norm {o['norm']:.4f}"
                  f"{'' if same else ' DIFFER'}; peak resident forward/"
                  f"backward/step {_mib(o['peaks'])} MiB, cgroup peak "
                  f"{(cg.peak() or 0) / MIB:.0f} MiB; load {loadavg()}",
                  file=sys.stderr)
            if not same:
                sys.exit(f"moonshot: step {i}: losses or norms differ")
            if i >= a.warmup:
                rows.append({"memory": m, "offloaded": o})
        d_off = off.ask("digest")["digest"]
        differ = sorted(k for k in d_mem if d_off.get(k) != d_mem[k])
        peak = cg.peak()
        off.close()
    finally:
        cg.__exit__(None, None, None)
    shutil.rmtree(os.path.join(a.dir, "swap"), ignore_errors=True)
    if a.clean:
        shutil.rmtree(model_dir(a), ignore_errors=True)
    report(a, nparams, state, limit, peak, rows, differ, len(d_mem))
    if differ:
        sys.exit(f"moonshot: {len(differ)} parameters differ after the "
                 f"last step, the first {differ[0]}")


def report(a, nparams, state, limit, peak, rows, differ, nweights):
    def col(kind, key):
        return [r[kind][key] for r in rows]

    ratios = [r["offloaded"]["total"] / r["memory"]["total"] for r in rows]
    print(f"\nLlama {nparams / 1e9:.2f}B (hidden {a.hidden}, {a.layers} "
          f"layers, intermediate {a.inter}, {a.heads} heads, {a.kv_heads} "
          f"key/value heads, vocab {a.vocab}), {a.batch} x {a.seq} tokens a "
          f"step, non-reentrant checkpointing, clipping at 1.0, AdamW"
          f"{' (bf16 weights, fp32 masters)' if a.dtype == 'bf16' else ''}; "
          f"training state {state / GIB:.1f} GiB, the offloaded run in a "
          f"{limit // MIB} MiB memory cgroup ({state / limit:.1f} x; peak "
          f"{(peak or 0) / MIB:.0f} MiB), pools {a.buffer_count} + "
          f"{a.optimizer_buffer_count} buffers (optimizer buffers of "
          f"{_size(a.optimizer_buffer_size)}), lookahead {a.lookahead}; "
          f"{len(rows)} timed steps after {a.warmup}; torch "
          f"{_torch_version()}, Python {platform.python_version()}; "
          f"{fs_type(a.dir)} under {a.dir}\n")
    print("| run | step s (median, min-max) | / in memory (median of "
          "per-step ratios, min-max) | forward s | backward s | clip+step s "
          "| read GiB | written GiB | I/O exposed s | peak resident MiB "
          "(forward / backward / clip+step, max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in ("memory", "offloaded"):
        tot = col(kind, "total")
        cells = ["in memory" if kind == "memory" else "offloaded",
                 f"{med(tot):.1f} ({min(tot):.1f}-{max(tot):.1f})"]
        if kind == "memory":
            cells.append("1")
        else:
            cells.append(f"**{med(ratios):.3f}** ({min(ratios):.3f}-"
                         f"{max(ratios):.3f})")
        cells += [f"{med(col(kind, p)):.1f}" for p in ("fwd", "bwd", "opt")]
        if kind == "memory":
            cells += ["-", "-", "-"]
        else:
            cells += [f"{med(col(kind, 'bytes_read')) / GIB:.1f}",
                      f"{med(col(kind, 'bytes_written')) / GIB:.1f}",
                      f"{med(col(kind, 'io_exposed_s')):.1f}"]
        peaks = col(kind, "peaks")
        cells.append(_mib([None if any(p[k] is None for p in peaks) else
                           max(p[k] for p in peaks) for k in range(3)]))
        print("| " + " | ".join(cells) + " |")
    print(f"\nlosses and total norms equal at all {a.warmup + len(rows)} "
          f"steps; {nweights - len(differ)} of {nweights} parameters equal "
          "bit for bit after the last")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rows": rows, "limit": limit,
                       "peak": peak, "differ": differ}, f, indent=1)


def _torch_version():
    import torch
    return torch.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/nvswap-moon")
    ap.add_argument("--cgroup", type=parse_size, default=None)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--buffer-count", type=int, default=2)
    ap.add_argument("--optimizer-buffer-count", type=int, default=None,
                    help="default 2, 3 with --dtype bf16 (a step holds "
                    "a gradient region, masters and Adam state)")
    ap.add_argument("--optimizer-buffer-size", type=parse_size, default=None,
                    help="bytes (default: the library's, twice the "
                    "parameter buffer, four times with --dtype bf16); "
                    "smaller cuts a layer's Adam state (and masters) in "
                    "parts")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: bf16 weights with fp32 masters")
    ap.add_argument("--lookahead", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--clean", action="store_true",
                    help="remove DIR/model at the end")
    ap.add_argument("--make-model", action="store_true",
                    help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=("memory", "offloaded"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.optimizer_buffer_count is None:
        a.optimizer_buffer_count = 3 if a.dtype == "bf16" else 2
    if a.make_model:
        make_model(a)
    elif a.worker:
        worker_main(a)
    else:
        parent(a)


if __name__ == "__main__":
    main()
