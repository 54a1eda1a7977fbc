#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""N processes serving one model in place (issue 49): aggregate decoding
tokens/s against one process, and memory per process.

make demo-infer's 1.08 GB Llama (random weights, seeded) is saved once
with nvt.save_pretrained (tensors 64-byte aligned), and its reference
tokens are made in memory, in one process of their own. Then, for each
N in --procs, in turn within each repeat (repeat 1 runs N=1, 2, 4, then
repeat 2 again, ...): the page cache is dropped (as root), N processes
start at once, each offloads the model with nvt.offload(weights=,
inference=True, memory=--memory, page_cache=False: O_DIRECT, unless
--page-cache auto) into its own nvme_path (its streamed layers read from
the safetensors at each use, nothing copied), says it is ready and
waits; when all are ready the parent says go, and each runs generate()
greedy for --tokens new tokens with torch.set_num_threads(max(1, cores
// N)). Each reports its decoding tokens/s (after the first token), the
time of its first token, its peak RSS (VmHWM), the parameter bytes it
read (nvt.stats), and its CPU time beside its wall time from go to its
last token (getrusage: all its threads, nvswap's I/O workers included),
and the queue depth its swapper kept to. N > 1 runs once for each of
--share: "on", the default, where the processes holding the weights'
directory split the queue depth among them (issue 49, item 4:
Swapper.share_disk), and "off", each at the whole depth (nvswap.torch.
_engine.SHARE_DISK = False); fairness is a run's fastest process's
tokens/s over its slowest's.

    cd /var/tmp && PYTHONPATH=/work/main/build/python \\
        /work/main/build/venv-pypi/bin/python /work/main/bench/serve_procs.py \\
        [--dir /var/tmp/serve_procs] [--repeats 3] [--tokens 16]
        [--procs 1,2,4] [--memory 384M] [--page-cache off] [--share on,off]

Prints a Markdown table of medians [min-max]; exit 1 when any process's
tokens differ from the reference. --dir keeps the weights for the next
run; remove it by hand."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
sys.path.insert(0, HERE)
import generate_offloaded as demo  # noqa: E402
from benchutil import loadavg, parse_size  # noqa: E402
from serve_set import meta_model  # noqa: E402

CORES = os.cpu_count() or 1


def save_weights(a):
    """The demo's model, seeded, saved once by nvswap's writer."""
    import transformers

    import nvswap.torch as nvt
    weights = os.path.join(a.dir, "weights")
    if not os.path.exists(weights):
        torch.manual_seed(0)
        nvt.save_pretrained(transformers.LlamaForCausalLM(demo.config(a)),
                            weights)
    return weights


def vm(key):
    """A size from /proc/self/status (VmHWM: the peak resident set,
    VmRSS: the resident set now), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_s():
    """CPU seconds this process has used, user and system, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_ref(a):
    """The reference: the model in memory, greedy; its tokens."""
    import transformers
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    weights = os.path.join(a.dir, "weights")
    m = transformers.LlamaForCausalLM.from_pretrained(
        weights, config=demo.config(a)).eval()
    out, _, clock = demo.generate(m, demo.prompt(a), a.new_tokens)
    print(json.dumps({"tokens": out.tolist(),
                      "decode": clock.decode_tps(a.batch)}), flush=True)
    return 0


def child_serve(a):
    """One serving process: offload in place, "ready", wait for "go" on
    stdin, generate, one JSON line."""
    import nvswap.torch as nvt
    from nvswap.torch import _engine
    _engine.SHARE_DISK = a.share == "on"
    torch.set_num_threads(a.threads)
    m = meta_model(a)
    before = vm("VmRSS")  # Python, torch and transformers, before nvswap
    nvt.offload(m, weights=os.path.join(a.dir, "weights"),
                nvme_path=a.nvme, inference=True, memory=a.memory,
                page_cache="auto" if a.page_cache == "auto" else False)
    ids = demo.prompt(a)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1  # the parent gave up
    c0, t0 = cpu_s(), time.perf_counter()
    out, _, clock = demo.generate(m, ids, a.new_tokens)
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    s = nvt.stats(m)
    ps = nvt.engine_of(m).pswap.stats()
    print(json.dumps({
        "depth": ps["queue_depth"], "sharers": ps["disk_sharers"],
        "decode": clock.decode_tps(a.batch), "first_s": clock.first_s(),
        "wall_s": wall, "cpu_s": cpu, "hwm": vm("VmHWM"),
        "rss_before": before,
        "read": s["bytes_read"], "written": s["bytes_written"],
        "in_place": len(nvt.engine_of(m).in_place), "layers": s["layers"],
        "threads": torch.get_num_threads(), "cached": s["page_cache"],
        "tokens": out.tolist()}),
        flush=True)
    return 0


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def spawn(a, args, stderr):
    """A child of this script: the common options, then args."""
    cmd = [sys.executable, os.path.abspath(__file__), "--dir", a.dir,
           "--memory", str(a.memory), "--tokens", str(a.new_tokens),
           "--page-cache", a.page_cache, "--share", a.share] + args
    return subprocess.Popen(cmd, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def one_run(a, n, rep, share):
    """N serving processes at once, past a barrier: their JSON results."""
    a = argparse.Namespace(**{**vars(a), "share": share})
    threads = max(1, CORES // n)
    procs, logs = [], []
    for i in range(n):
        nvme = os.path.join(a.dir, "scratch", f"n{n}{share}-r{rep}-p{i}")
        os.makedirs(nvme, exist_ok=True)
        # stderr to a file: a pipe nobody reads could fill and block
        log = open(nvme + ".err", "w+")
        logs.append(log)
        procs.append(spawn(a, ["--child", "serve", "--nvme", nvme,
                               "--threads", str(threads)], log))
    try:
        # the barrier: every process loaded and waiting before any decodes
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a serving process died before ready")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        res = []
        for p in procs:
            out = p.communicate()[0]
            if p.returncode:
                raise RuntimeError(f"a serving process exited {p.returncode}")
            res.append(json.loads(out.strip().splitlines()[-1]))
        return res
    except Exception:
        for p, log in zip(procs, logs):
            p.kill()
            p.wait()
            log.seek(0)
            sys.stderr.write(log.read()[-3000:])
        raise
    finally:
        for log in logs:
            log.close()


def cell(v, fmt="{:.2f}"):
    """median [min-max]"""
    return (fmt.format(statistics.median(v)) + " [" + fmt.format(min(v))
            + "-" + fmt.format(max(v)) + "]")


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="command: cd /var/tmp && PYTHONPATH=/work/main/build/python "
        "/work/main/build/venv-pypi/bin/python /work/main/bench/serve_procs.py "
        "--dir /var/tmp/serve_procs --repeats 3 (as root: the page cache "
        "is dropped before each run)")
    ap.add_argument("--dir", default="/var/tmp/serve_procs",
                    help="where the weights (kept for the next run) and "
                    "each process's nvme_path go; on the disk, not tmpfs")
    ap.add_argument("--repeats", type=int, default=3,
                    help="times each N runs, interleaved (default 3)")
    ap.add_argument("--tokens", type=int, default=16, dest="new_tokens",
                    help="new tokens each process generates, greedy; "
                    "decoding tokens/s counts those after the first "
                    "(default 16)")
    ap.add_argument("--procs", default="1,2,4",
                    help="the numbers of processes served at once, run in "
                    "this order in each repeat (default 1,2,4)")
    ap.add_argument("--memory", type=parse_size, default=parse_size("384M"),
                    help="each process's offload(memory=): its pool and "
                    "resident layers (default 384M, as bench/serve_set.py)")
    ap.add_argument("--page-cache", choices=("off", "auto"), default="off",
                    help="offload(page_cache=): off (default, as "
                    "serve_set.py) reads O_DIRECT, each process from the "
                    "disk; auto, offload()'s own default, may read through "
                    "the page cache the processes share")
    ap.add_argument("--share", default="on,off",
                    help="for N > 1: on (the queue depth split among the "
                    "processes serving the weights, the default), off "
                    "(each at the whole depth), or both in turn (default "
                    "on,off)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--nvme", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=CORES,
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    # the demo's model shape and prompt: generate_offloaded's defaults
    shape = argparse.ArgumentParser()
    demo.model_args(shape)
    for k, v in vars(shape.parse_args([])).items():
        if k != "new_tokens":
            setattr(a, k, v)
    a.batch = 1
    if a.child == "ref":
        return child_ref(a)
    if a.child == "serve":
        return child_serve(a)
    if os.geteuid() != 0:
        sys.exit("run as root: the page cache is dropped before each run")
    ns = [int(x) for x in a.procs.split(",")]
    os.makedirs(os.path.join(a.dir, "scratch"), exist_ok=True)
    weights = save_weights(a)
    nbytes = sum(os.path.getsize(os.path.join(weights, f))
                 for f in os.listdir(weights) if f.endswith(".safetensors"))
    r = spawn(a, ["--child", "ref"], None)
    out = r.communicate()[0]
    if r.returncode:
        sys.exit(f"the reference run exited {r.returncode}")
    ref = json.loads(out.strip().splitlines()[-1])
    print(f"{time.strftime('%H:%M:%S')} model {nbytes / 1e9:.2f} GB saved in "
          f"{weights}; reference in memory ({CORES} threads): decoding "
          f"{ref['decode']:.2f} tokens/s; {CORES} cores, threads per "
          f"process max(1, {CORES} // N); memory={a.memory >> 20} MiB each, "
          f"page_cache={a.page_cache}; OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}; load {loadavg()}",
          flush=True)
    shares = a.share.split(",")
    kinds = [(n, sh) for n in ns for sh in (shares[:1] if n == 1 else shares)]
    runs = {k: [] for k in kinds}  # (n, share) -> [per-process results]
    for rep in range(a.repeats):
        for n, sh in kinds:
            drop_caches()
            res = one_run(a, n, rep, sh)
            runs[n, sh].append(res)
            agg = sum(x["decode"] for x in res)
            print(f"{time.strftime('%H:%M:%S')} repeat {rep + 1} N={n} "
                  f"share {sh} (queue depth {res[0]['depth']}, "
                  f"{res[0]['threads']} threads each): aggregate "
                  f"{agg:.2f} tokens/s, CPU/wall "
                  + ", ".join(f"{x['cpu_s']:.1f}/{x['wall_s']:.1f} s"
                              for x in res)
                  + f"; page cache used: {res[0]['cached']}; load "
                  f"{loadavg()}", flush=True)
    same = all(x["tokens"] == ref["tokens"]
               for rs in runs.values() for res in rs for x in res)
    in_place = all(x["in_place"] > 0 and x["written"] == 0
                   for rs in runs.values() for res in rs for x in res)
    print(f"\nN processes at once, {a.repeats} interleaved repeats, the page "
          f"cache dropped before each; {a.new_tokens} new tokens each; "
          "medians [min-max] over repeats (per process: over every process "
          "of every repeat)\n")
    print("| N | share | queue depth | threads each | decoding tokens/s per "
          "process | fairness (max/min in a run) | aggregate "
          "tokens/s | aggregate / N=1's, same repeat | first token s | "
          "CPU s / wall s per process | cores busy | peak RSS per process "
          "MiB (before offload) | GB read per run | read GB/s per run | "
          "tokens = reference |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = runs.get((1, shares[0]))
    for n, sh in kinds:
        rs = runs[n, sh]
        fair = [max(x["decode"] for x in res) / min(x["decode"] for x in res)
                for res in rs]
        each = [x for res in rs for x in res]
        agg = [sum(x["decode"] for x in res) for res in rs]
        ratio = ([g / sum(x["decode"] for x in b)
                  for g, b in zip(agg, base)] if base else None)
        # the share of the machine's cores the run's processes kept busy,
        # from go to the last one's last token
        busy = [sum(x["cpu_s"] for x in res) /
                (max(x["wall_s"] for x in res) * CORES) for res in rs]
        gb = [sum(x["read"] for x in res) / 1e9 for res in rs]
        gbps = [g / max(x["wall_s"] for x in res) for g, res in zip(gb, rs)]
        ok = all(x["tokens"] == ref["tokens"] for x in each)
        print(f"| {n} | {sh} | {each[0]['depth']} | {each[0]['threads']} | "
              f"{cell([x['decode'] for x in each])} | {cell(fair)} | "
              f"{cell(agg)} | "
              + (cell(ratio) if ratio else "-") + " | "
              f"{cell([x['first_s'] for x in each])} | "
              f"{cell([x['cpu_s'] for x in each], '{:.1f}')} / "
              f"{cell([x['wall_s'] for x in each], '{:.1f}')} | "
              f"{cell(busy)} | "
              f"{cell([x['hwm'] / 2**20 for x in each], '{:.0f}')} ("
              f"{statistics.median(x['rss_before'] for x in each) / 2**20:.0f}"
              f") | "
              f"{cell(gb)} | {cell(gbps)} | {'yes' if ok else 'NO'} |")
    print("\nCPU s: getrusage over go to the last token, every thread "
          "(an OpenMP worker's spin-wait counts: OMP_WAIT_POLICY=passive "
          "leaves it out); cores busy: the run's CPU s over its longest "
          f"wall s x {CORES} cores; read GB/s: the run's parameter bytes "
          "read over that wall time")
    print(f"\nserved in place (layers read from the safetensors, nothing "
          f"written) in every process: {in_place}; tokens equal to the "
          f"reference in every process: {same}; load {loadavg()} at the end")
    return 0 if same and in_place else 1


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    raise SystemExit(main())
