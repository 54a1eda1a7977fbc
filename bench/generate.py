#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Serving from NVMe (issues 35, 49): generate() tokens/s of a Llama from
a config (random weights, saved once as safetensors by
nvswap.torch.save_pretrained: the data area 4096-aligned, so nvswap reads
the streamed layers in place), variants run as separate processes,
interleaved, page cache dropped before each:

  memory      from_pretrained, all in memory (the compute-bound limit)
  accelerate  from_pretrained(device_map="auto", max_memory={"cpu": B},
              offload_folder=...): accelerate's disk offload
  nvswap      a meta-device model, offload(weights=, inference=True,
              memory=B): page_cache="auto", the default (page cache
              where the memory left holds what a forward streams); the
              streamed layers served in place, read from the
              safetensors at each use (checked: the run fails when a
              layer is streamed and none is read in place)
  nvswap+copy the nvswap default with nvswap.torch._load.IN_PLACE =
              False: the streamed layers copied into nvswap's swap file
              at offload and read from there (the path before issue 49;
              checked: none read in place)
  nvswap+pc   the same with page_cache=True (--page-cache): swap files
              through the page cache (in the cgroup, the cache is
              charged to it and reclaimed under its limit)
  nvswap+direct the same with page_cache=False (--direct): O_DIRECT
  nvswap+fixed the nvswap default with its read-ahead depth fixed as it
              was before it was chosen from measured times
              (--fixed-depth): buffer_count=4, lookahead=3, the pool
              memory= makes, all of it reading ahead

B, the host-memory budget, is given as fractions of the model (--budgets;
accelerate takes the same B for its max_memory). Each runs unconstrained
and, with --cgroup, inside a memory cgroup of that many bytes
(examples/python/memcgroup.py). Every run's tokens must equal the
in-memory run's. fio's O_DIRECT sequential read of the weights file in the
same run gives the disk bound: tokens/s <= batch x read GB/s / bytes read
per token (nvswap reports its bytes per forward; accelerate's come from
/proc/self/io read_bytes over the generate() call). Beside the
generate() call's tokens/s: the decoding tokens/s (after the first new
token, the serving rate), the first token's seconds (the prompt's
forward, from generate()'s start) and load + generate(): the
from_pretrained() or offload() call and generate() (the copy variant
reads every layer in its offload(), in place the first forward does;
the imports and the meta model before offload() are left out: their
time, cold after the dropped cache, varies by a second from run to
run).

    PYTHONPATH=build/python python3 bench/generate.py [--dir /var/tmp/gen]
        [--hidden 1024] [--layers 16] [--inter 2816] [--vocab 32000]
        [--prompt 32] [--new-tokens 16] [--batches 1,8]
        [--budgets 0.25,0.5,2] [--cgroup 1G] [--page-cache] [--direct]
        [--fixed-depth] [--only nvswap,nvswap+copy]
        [--repeats 3] [--json FILE]

--dir must be on the disk to test (not /tmp, which may be tmpfs). Root is
needed for the cgroup and for dropping the page cache.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "python"))
import memcgroup  # noqa: E402
from generate_offloaded import Clock, config, model_args  # noqa: E402
from benchutil import fs_type, loadavg, parse_size, spread  # noqa: E402

GB = 1e9


def read_bytes():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def data_offsets(weights):
    """Each safetensors file of weights: where its data area starts (8 +
    the header's length)."""
    out = {}
    for f in sorted(os.listdir(weights)):
        if f.endswith(".safetensors"):
            with open(os.path.join(weights, f), "rb") as fh:
                out[f] = 8 + int.from_bytes(fh.read(8), "little")
    return out


def save_aligned(model, weights):
    """model's weights into weights by nvswap.torch.save_pretrained: data
    areas 4096-aligned. A folder left by an older run whose files are not
    (Hugging Face's save_pretrained aligns to 8) is removed first, so
    that nothing of it remains; the result is checked."""
    import nvswap.torch as nvt
    if os.path.isdir(weights) and any(
            off % 4096 for off in data_offsets(weights).values()):
        shutil.rmtree(weights)
    nvt.save_pretrained(model, weights)
    offs = data_offsets(weights)
    bad = {f: off for f, off in offs.items() if off % 4096}
    if not offs or bad:
        raise SystemExit(f"{weights}: data areas not 4096-aligned: "
                         f"{bad or 'no safetensors'}")


def child(a, v):
    """One variant's run: a JSON line."""
    import transformers
    weights = os.path.join(a.dir, "weights")
    t0 = time.perf_counter()
    extra = {}
    if v["kind"] == "memory":
        model = transformers.AutoModelForCausalLM.from_pretrained(weights)
    elif v["kind"] == "accelerate":
        off = os.path.join(a.dir, f"offload-{os.getpid()}")
        model = transformers.AutoModelForCausalLM.from_pretrained(
            weights, device_map="auto", max_memory={"cpu": v["budget"]},
            offload_folder=off)
    else:
        import nvswap.torch as nvt
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(config(a))
        pc = {"nvswap+pc": {"page_cache": True},
              "nvswap+direct": {"page_cache": False},
              "nvswap+fixed": {"buffer_count": 4, "lookahead": 3},
              }.get(v["kind"], {})
        if v["kind"] == "nvswap+copy":
            from nvswap.torch import _load
            _load.IN_PLACE = False  # today's path: copied at offload
        t1 = time.perf_counter()
        nvt.offload(model, weights=weights, nvme_path=a.dir,
                    inference=True, memory=v["budget"], **pc)
        call_s = time.perf_counter() - t1
        from nvswap.torch._engine import engine_of
        eng = engine_of(model)
        # the layers a forward streams (neither resident nor read by rows)
        streamed = [i for i in range(len(eng.layers))
                    if i not in eng.rows and eng.in_cpu is not None
                    and i not in eng.in_cpu]
        extra["in_place"] = len(eng.in_place)
        extra["streamed"] = len(streamed)
        if v["kind"] == "nvswap+copy" and eng.in_place:
            raise SystemExit(f"nvswap+copy: {len(eng.in_place)} layers "
                             "read in place with _load.IN_PLACE = False")
        if v["kind"] == "nvswap" and streamed and not eng.in_place:
            raise SystemExit(f"nvswap: {len(streamed)} layers streamed, "
                             "none read in place (weights not aligned?)")
    model.eval()
    load_s = time.perf_counter() - t0
    if v["kind"] in ("memory", "accelerate"):
        call_s = load_s  # from_pretrained's
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, a.vocab, (v["batch"], a.prompt), generator=g)
    r0 = read_bytes()
    clock = Clock()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=a.new_tokens,
                             min_new_tokens=a.new_tokens, do_sample=False,
                             pad_token_id=0, streamer=clock)
    secs = time.perf_counter() - clock.t0
    step = (read_bytes() - r0) / a.new_tokens
    if v["kind"].startswith("nvswap"):
        import nvswap.torch as nvt
        s = nvt.stats(model)
        step = s["last_forward_bytes_read"]
        extra.update({"resident_layers": s["resident_layers"],
                      "layers": s["layers"], "pool_bytes": s["pool_bytes"],
                      "page_cache": s["page_cache"],
                      "read_ahead": s["read_ahead"]})
    print(json.dumps({"tps": v["batch"] * a.new_tokens / secs,
                      "first_s": clock.first_s(),
                      "decode_tps": clock.decode_tps(v["batch"]),
                      "total_s": call_s + secs, "call_s": call_s,
                      "load_s": load_s, "step_bytes": step,
                      "tokens": out[:, a.prompt:].tolist(), **extra}),
          flush=True)
    if v["kind"] == "accelerate":
        shutil.rmtree(off, ignore_errors=True)
    return 0


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def run_variant(a, v):
    cmd = [sys.executable, os.path.abspath(__file__), "--child",
           json.dumps(v)] + [x for x in sys.argv[1:]]
    drop_caches()
    if v["cgroup"]:
        r, peak = memcgroup.run_in(a.cgroup, cmd, capture_output=True,
                                   text=True)
    else:
        r, peak = subprocess.run(cmd, capture_output=True, text=True), None
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {r.stderr[-400:]}"}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["peak"] = peak
    return res


def fio_read_gbps(path):
    out = subprocess.run(
        ["fio", "--name=read", f"--filename={path}", "--rw=read",
         "--bs=1M", "--direct=1", "--ioengine=libaio", "--iodepth=32",
         "--output-format=json"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    job = json.loads(out.stdout)["jobs"][0]["read"]
    return job["bw_bytes"] / GB


def variants(a, nbytes):
    vs = []
    for b in a.batches:
        vs.append({"kind": "memory", "batch": b, "budget": None,
                   "cgroup": False})
        for frac in a.budgets:
            budget = int(frac * nbytes)
            for cg in ([False, True] if a.cgroup else [False]):
                if cg and budget >= a.cgroup:
                    continue  # the budget must fit the cgroup
                kinds = ["accelerate", "nvswap", "nvswap+copy"]
                if a.page_cache:
                    kinds.append("nvswap+pc")
                if a.direct:
                    kinds.append("nvswap+direct")
                if a.fixed_depth:
                    kinds.append("nvswap+fixed")
                if a.only:
                    kinds = [k for k in kinds if k in a.only]
                for kind in kinds:
                    vs.append({"kind": kind, "batch": b, "budget": budget,
                               "frac": frac, "cgroup": cg})
    return vs


def depth(ra):
    """What the read-ahead's tuner did, in a few words."""
    if ra["state"] == "tuned":
        return (f"{ra['buffers']} buffers, {len(ra['kept'])} kept, "
                f"modelled {ra['predicted_s'][0]:.3f} s for "
                f"{ra['measured_s']:.3f} s"
                + (f", forward {ra['forward_s']:.3f} -> {ra['after_s']:.3f} s"
                   if "after_s" in ra else ""))
    return ra["state"] + (f": {ra['reason']}" if ra.get("reason") else "")


def name(v):
    if v["kind"] == "memory":
        return f"memory, batch {v['batch']}"
    where = " in the cgroup" if v["cgroup"] else ""
    return (f"{v['kind']}, budget {v['frac']:g} x model{where}, batch "
            f"{v['batch']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/nvswap-gen")
    model_args(ap)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--budgets", default="0.25,0.5,2")
    ap.add_argument("--cgroup", type=parse_size, default=None)
    ap.add_argument("--page-cache", action="store_true")
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--fixed-depth", action="store_true")
    ap.add_argument("--only", help="these variants alone (comma-separated "
                    "kinds; the in-memory run always runs: its tokens are "
                    "the reference)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--child")
    a = ap.parse_args()
    a.batches = [int(x) for x in a.batches.split(",")]
    a.budgets = [float(x) for x in a.budgets.split(",")]
    a.only = a.only.split(",") if a.only else None
    if a.child:
        return child(a, json.loads(a.child))
    import transformers
    os.makedirs(a.dir, exist_ok=True)
    weights = os.path.join(a.dir, "weights")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config(a))
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    save_aligned(model, weights)
    del model
    if a.cgroup and memcgroup.why_not():
        print(f"no cgroup runs: {memcgroup.why_not()}")
        a.cgroup = None
    vs = variants(a, nbytes)
    runs = {name(v): [] for v in vs}
    fio = []
    st = [os.path.join(weights, f) for f in os.listdir(weights)
          if f.endswith(".safetensors")][0]
    print(f"model {nbytes / GB:.2f} GB; {len(vs)} variants x "
          f"{a.repeats}; {platform.node()}, {fs_type(a.dir)}, load "
          f"{loadavg()}; page cache dropped: {drop_caches()}", flush=True)
    for rep in range(a.repeats):
        order = vs[rep % len(vs):] + vs[:rep % len(vs)]
        for v in order:
            res = run_variant(a, v)
            runs[name(v)].append(res)
            print(f"  {rep} {name(v)}: "
                  + (res["error"] if "error" in res else
                     f"{res['tps']:.2f} tok/s (decoding "
                     f"{res['decode_tps']:.2f}, first token "
                     f"{res['first_s']:.2f} s, load {res['call_s']:.2f} s)")
                  + (f" (page cache: {res['page_cache']})"
                     if v["kind"] in ("nvswap", "nvswap+copy")
                     and "page_cache" in res
                     else "")
                  + (f" (in place: {res['in_place']} of "
                     f"{res['streamed']} streamed)"
                     if "in_place" in res else "")
                  + (f" (read-ahead: {depth(res['read_ahead'])})"
                     if res.get("read_ahead") else ""), flush=True)
        drop_caches()
        fio.append(fio_read_gbps(st))
    want = {}
    for v in vs:
        if v["kind"] == "memory":
            ok = [r for r in runs[name(v)] if "error" not in r]
            want[v["batch"]] = ok[0]["tokens"] if ok else None
    got = [x for x in fio if x]
    fio_gbps = statistics.median(got) if got else None
    print("\nfio O_DIRECT read of the weights: "
          + (f"{fio_gbps:.2f} GB/s (median of {len(got)}: "
             f"{', '.join(f'{x:.2f}' for x in got)})" if got else
             "no figure (fio failed or the file is too small)"))
    print("| variant | tokens/s median [min-max] | vs accelerate, same "
          "budget | x disk bound | decoding tokens/s | first token s | "
          "load + generate s | bytes read per step | tokens equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    table = []
    for v in vs:
        ok = [r for r in runs[name(v)] if "error" not in r]
        if not ok:
            print(f"| {name(v)} | failed: {runs[name(v)][0]['error'][:80]}"
                  " | | | | |")
            continue
        tps = [r["tps"] for r in ok]
        step = statistics.median([r["step_bytes"] for r in ok])
        bound = (v["batch"] * fio_gbps * GB / step) if step and fio_gbps \
            else None
        rel = ""
        if v["kind"].startswith("nvswap"):
            peer = dict(v, kind="accelerate")
            pk = [r["tps"] for r in runs.get(name(peer), [])
                  if "error" not in r]
            if pk:
                rel = f"{statistics.median(tps) / statistics.median(pk):.2f}"
        same = all(r["tokens"] == want.get(v["batch"]) for r in ok)
        row = {"variant": name(v), "tps": tps, "vs_accelerate": rel,
               "bound": bound, "step_bytes": step, "equal": same,
               "peak": [r.get("peak") for r in ok],
               "in_place": [r.get("in_place") for r in ok],
               "load_s": [r["load_s"] for r in ok],
               "decode_tps": [r["decode_tps"] for r in ok],
               "first_s": [r["first_s"] for r in ok],
               "total_s": [r["total_s"] for r in ok],
               "call_s": [r["call_s"] for r in ok],
               "page_cache": [r.get("page_cache") for r in ok]}
        table.append(row)
        print(f"| {name(v)} | {spread(tps)} | {rel} | "
              + (f"{statistics.median(tps) / bound:.2f}" if bound else "-")
              + f" | {spread([r['decode_tps'] for r in ok])}"
              f" | {spread([r['first_s'] for r in ok])}"
              f" | {spread([r['total_s'] for r in ok])}"
              f" | {step / GB:.3f} GB | {'yes' if same else 'NO'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"fio_gbps": fio, "rows": table,
                       "args": vars(a)}, f, indent=1)
    shutil.rmtree(weights, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
