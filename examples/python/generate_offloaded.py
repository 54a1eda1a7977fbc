#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Serve a Llama larger than the memory it is given: generate() on a model
whose weights stream from NVMe (nvswap.torch.offload(inference=True,
memory=)).

1. A Llama from a config (random weights, seeded) is saved as safetensors
   (nvswap.torch.save_pretrained) under --dir.
2. In memory: greedy generate(), its tokens and tokens/s (the
   compute-bound limit).
3. In a child process inside a memory cgroup of --cgroup bytes, smaller
   than the model (where none can be made, the child runs without one and
   says why): the model is built on the meta device, the layers it
   streams read from the safetensors in place at each use (nothing
   copied: the disk nvswap's files take is printed), with --memory bytes
   for the parameter pool and the layers kept resident; generate()
   again. Its tokens must equal the in-memory run's; its tokens/s are
   printed beside the disk-bound limit (the disk's O_DIRECT read speed,
   measured on the largest safetensors file, or the swap file when the
   layers were copied there, before generate() and twice after, the
   median, over the
   bytes each step reads), for the whole run and for the decoding steps
   after the first token (the prompt's forward computes every prompt
   token: serving figures give the two apart); and the share of the
   decoding steps' time the disk had reads in flight, with the rate it
   read at then: the same bound at the rate of the run itself, which a
   virtual disk's drift between the figure and the run does not move.
4. Everything made under --dir is removed.

    python3 examples/python/generate_offloaded.py [--dir nvme_swap]
        [--hidden 1024] [--layers 16] [--inter 2816] [--vocab 32000]
        [--prompt 32] [--new-tokens 16] [--batch 1] [--memory 384M]
        [--cgroup 896M]

with the package and its hf extra installed (pip install '.[hf]' in a
venv; README, "Quick start from Python"); make demo-infer makes such a
venv and runs it.

The defaults make a 1.08 GB model (271M parameters, fp32) served in an
896 MiB cgroup (0.87 of the model). Exit 0 when the tokens are equal, 1 when they differ.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import memcgroup  # noqa: E402

GB = 1e9


def size(text):
    """A size as every nvswap keyword reads it (nvswap.parse_size)."""
    import nvswap
    try:
        return nvswap.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def config(a):
    import transformers
    heads = max(1, a.hidden // 64)
    return transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
        num_hidden_layers=a.layers, num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=a.prompt + a.new_tokens,
        tie_word_embeddings=False)


def prompt(a):
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, a.vocab, (a.batch, a.prompt), generator=g)


class Clock:
    """A generate() streamer noting when each step's tokens came: its
    first put() is the prompt, each later one a step's new tokens; and,
    with probe (a callable), what it returns at each of those."""

    def __init__(self, probe=None):
        self.t0, self.at, self.prompt = time.perf_counter(), [], True
        self.probe, self.seen = probe, []

    def put(self, value):
        if self.prompt:
            self.prompt = False
        else:
            self.at.append(time.perf_counter())
            if self.probe is not None:
                self.seen.append(self.probe())

    def end(self):
        pass

    def first_s(self):
        """Seconds to the first new token (the prompt's forward)."""
        return self.at[0] - self.t0 if self.at else None

    def decode_tps(self, batch):
        """Tokens/s after the first: the decoding steps alone."""
        if len(self.at) < 2:
            return None
        return batch * (len(self.at) - 1) / (self.at[-1] - self.at[0])

    def decode_busy(self):
        """(share of the decoding steps' time the disk had reads in
        flight, GB/s it read at then), from probe()'s (bytes read, busy
        ns) of the parameter pool; None without reads."""
        if len(self.seen) < 2 or self.seen[-1][1] == self.seen[0][1]:
            return None
        nbytes = self.seen[-1][0] - self.seen[0][0]
        busy = (self.seen[-1][1] - self.seen[0][1]) / 1e9
        return busy / (self.at[-1] - self.at[0]), nbytes / busy / GB


def generate(model, ids, new_tokens, probe=None):
    """(new tokens, seconds, Clock)."""
    clock = Clock(probe)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=0, streamer=clock)
    return out[:, ids.shape[1]:], time.perf_counter() - clock.t0, clock


def disk_read_gbps(path, limit=1 << 30):
    """O_DIRECT read speed of path through nvswap's aio handle (up to
    limit bytes, 64 MiB at a time into a pinned buffer)."""
    import nvswap
    n = min(os.path.getsize(path), limit) // 4096 * 4096
    if n == 0:
        return None
    h = nvswap.aio_handle()
    chunk = min(n, 64 << 20)
    buf = h.new_cpu_locked_tensor(chunk, torch.empty(0, dtype=torch.uint8))
    t0 = time.perf_counter()
    for off in range(0, n - chunk + 1, chunk):
        h.sync_pread(buf, path, off)
    return (n // chunk * chunk) / (time.perf_counter() - t0) / GB


def child(a):
    """The offloaded run (inside the cgroup): one JSON line."""
    import transformers

    import nvswap.torch as nvt
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config(a)).eval()
    t0 = time.perf_counter()
    nvt.offload(model, weights=os.path.join(a.dir, "weights"),
                nvme_path=a.dir, inference=True, memory=a.memory)
    load_s = time.perf_counter() - t0
    # the disk read before generate() and twice after: its median (a
    # virtual disk's speed drifts within a minute), of the file the
    # layers stream from: the swap file, or (weights in place) the
    # largest weights file
    swap = os.path.join(a.dir, "nvswap", "param", "rank0", "swap.0")
    if not os.path.exists(swap) or os.stat(swap).st_blocks == 0:
        wdir = os.path.join(a.dir, "weights")
        swap = max((os.path.join(wdir, f) for f in os.listdir(wdir)
                    if f.endswith(".safetensors")), key=os.path.getsize)
    there = os.path.exists(swap)
    gbps = [disk_read_gbps(swap)] if there else []
    def io():
        ps = nvt.stats(model)["param"]
        return ps["bytes_read"] + ps["file_bytes_read"], ps["io_busy_ns"]
    out, secs, clock = generate(model, prompt(a), a.new_tokens, io)
    s = nvt.stats(model)
    gbps += [disk_read_gbps(swap) for _ in range(2 if there else 0)]
    gbps = sorted(g for g in gbps if g)
    # what nvswap's files take on the disk (blocks, not sizes: a swap
    # file's place for a layer read in place stays a hole)
    used = sum(os.lstat(os.path.join(d, f)).st_blocks * 512
               for d, _, fs in os.walk(os.path.join(a.dir, "nvswap"))
               for f in fs)
    # No restore(): it would read the whole model into memory, which the
    # cgroup does not have. The offload is closed at exit, its swap
    # files and directories removed.
    print(json.dumps({
        "tokens": out.tolist(), "seconds": secs, "load_s": load_s,
        "first_s": clock.first_s(),
        "decode_tps": clock.decode_tps(a.batch),
        "decode_busy": clock.decode_busy(),
        "layers": s["layers"], "resident_layers": s["resident_layers"],
        "resident_bytes": s["resident_bytes"],
        "step_bytes": s["last_forward_bytes_read"],
        "pool_bytes": s["pool_bytes"], "page_cache": s["page_cache"],
        "read_ahead": s["read_ahead"],
        "disk_gbps": gbps[len(gbps) // 2] if gbps else None,
        "disk_file": os.path.basename(swap), "nvswap_disk_bytes": used,
        "in_place_layers": len(nvt.engine_of(model).in_place),
        "disk_all": gbps}), flush=True)
    return 0


def model_args(ap):
    """The model's shape and the generation's length (config(), prompt()),
    shared with bench/generate.py."""
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--inter", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="nvme_swap")
    model_args(ap)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--memory", type=size, default=size("384M"),
                    help="nvswap's budget: pool + resident layers")
    ap.add_argument("--cgroup", type=size, default=size("896M"),
                    help="the child's memory cgroup (0: none)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    import transformers
    made = not os.path.exists(a.dir)
    os.makedirs(a.dir, exist_ok=True)
    weights = os.path.join(a.dir, "weights")
    try:
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config(a)).eval()
        nparams = sum(p.numel() for p in model.parameters())
        nbytes = sum(p.numel() * p.element_size()
                     for p in model.parameters())
        # nvswap's writer: from_pretrained reads it as it reads
        # transformers' own, and its tensors start 64-byte aligned (its
        # header padded to 4096), so the layers serve in place
        import nvswap.torch as nvt
        nvt.save_pretrained(model, weights)
        print(f"model: {nparams / 1e6:.0f}M parameters, "
              f"{nbytes / GB:.2f} GB, saved as safetensors in {weights}")
        ids = prompt(a)
        want, secs, clock = generate(model, ids, a.new_tokens)
        del model
        mem_tps = a.batch * a.new_tokens / secs
        mem_dec = clock.decode_tps(a.batch)
        print(f"in memory: {a.batch} x {a.new_tokens} tokens in "
              f"{secs:.2f} s: {mem_tps:.2f} tokens/s (the compute-bound "
              "limit)" + (f"; decoding {mem_dec:.2f} tokens/s after the "
                          f"first token at {clock.first_s():.2f} s"
                          if mem_dec else ""), flush=True)
        return offloaded(a, want, mem_tps, nbytes)
    finally:
        shutil.rmtree(weights, ignore_errors=True)
        if made:
            shutil.rmtree(a.dir, ignore_errors=True)


def offloaded(a, want, mem_tps, nbytes):
    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + \
        sys.argv[1:]
    why = memcgroup.why_not() if a.cgroup else "--cgroup 0"
    peak = None
    if why is None:
        r, peak = memcgroup.run_in(a.cgroup, cmd, capture_output=True,
                                   text=True)
        where = (f"in a {a.cgroup / 2**30:.2f} GiB memory cgroup "
                 f"({a.cgroup / nbytes:.2f} of the model)")
    else:
        r = subprocess.run(cmd, capture_output=True, text=True)
        where = f"without a memory cgroup ({why})"
    if r.returncode != 0:
        hint = (": killed, by the cgroup's OOM killer? raise --cgroup"
                if r.returncode == -9 else "")
        print(f"offloaded run {where} failed (exit {r.returncode}{hint}):"
              f"\n{r.stdout}{r.stderr}")
        return 1
    res = json.loads(r.stdout.strip().splitlines()[-1])
    tps = a.batch * a.new_tokens / res["seconds"]
    print(f"offloaded {where}, memory={a.memory / 2**20:.0f} MiB"
          + (f", cgroup peak {peak / 2**30:.2f} GiB" if peak else "")
          + f": loaded in {res['load_s']:.1f} s; {a.batch} x "
          f"{a.new_tokens} tokens in {res['seconds']:.2f} s: {tps:.2f} "
          f"tokens/s ({tps / mem_tps:.2f} of in memory)")
    dec = res["decode_tps"]
    if dec:
        print(f"  first token at {res['first_s']:.2f} s (the prompt's "
              f"forward), then decoding at {dec:.2f} tokens/s")
    print(f"  {res['resident_layers']} of {res['layers']} layers resident "
          f"({res['resident_bytes'] / GB:.2f} GB), pool "
          f"{res['pool_bytes'] / 2**20:.0f} MiB; each step reads "
          f"{res['step_bytes'] / GB:.3f} GB from NVMe"
          + (" through the page cache (page_cache='auto': the memory "
             "left beside the budget holds the stream; no disk bound)"
             if res.get("page_cache") else ""))
    print(f"  weights in place: {res['in_place_layers']} streamed layers "
          f"read from the safetensors as they lie, nothing copied; "
          f"nvswap's files take {res['nvswap_disk_bytes'] / 2**20:.1f} MiB "
          f"of disk")
    ra = res.get("read_ahead")
    if ra and ra.get("predicted_s"):
        print(f"  read-ahead from forwards 2-{1 + ra['forwards_timed']}: "
              f"reads {ra['read_s']:.3f} s (at "
              f"{ra['disk_bytes_per_s'] / GB:.2f} GB/s while the disk was "
              f"busy), compute {ra['compute_s']:.3f} s a step, measured "
              f"{ra['measured_s']:.3f} s, modelled "
              f"{ra['predicted_s'][0]:.3f} s: "
              + (f"{ra['buffers']} buffers read ahead, the other "
                 f"{len(ra['kept'])} keep a layer for good"
                 + (f" (a forward {ra['forward_s']:.3f} s before, "
                    f"{ra['after_s']:.3f} s after)" if "after_s" in ra
                    else "")
                 if ra["state"] == "tuned" else
                 f"the choice undone ({ra.get('reason')})"
                 if ra["state"] == "undone" else
                 f"the depth kept ({ra.get('reason')})"))
    if res["disk_gbps"] and res["step_bytes"] and not res.get("page_cache"):
        bound = a.batch * res["disk_gbps"] * GB / res["step_bytes"]
        spread = "-".join(f"{g:.2f}" for g in res["disk_all"])
        print(f"  disk: {res['disk_gbps']:.2f} GB/s O_DIRECT read of "
              f"{res['disk_file']} (median of {spread}, before and after): "
              f"disk-bound limit {bound:.2f} tokens/s; "
              + (f"decoding at {dec / bound:.2f} of it, " if dec else "")
              + f"the whole run at {tps / bound:.2f}")
        busy = res.get("decode_busy")
        if busy and dec:
            # the same bound at the rate the disk read while decoding
            # (no drift between the figure and the run): the share of
            # each step the disk had reads in flight
            print(f"  while decoding the disk had reads in flight "
                  f"{busy[0]:.2f} of the time, reading at {busy[1]:.2f} "
                  f"GB/s: decoding at {busy[0]:.2f} of the disk-bound "
                  "limit at that rate")
    same = res["tokens"] == want.tolist()
    n = sum(x == y for r1, r2 in zip(res["tokens"], want.tolist())
            for x, y in zip(r1, r2))
    print(f"tokens: {'equal to' if same else 'DIFFERENT from'} the "
          f"in-memory run ({n} of {want.numel()})")
    return 0 if same else 1


if __name__ == "__main__":
    # each line as it is printed, into a pipe (| tee log) too
    sys.stdout.reconfigure(line_buffering=True)
    raise SystemExit(main())
