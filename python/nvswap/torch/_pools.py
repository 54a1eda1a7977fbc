# SPDX-License-Identifier: MIT
"""The two swap pools of an offloaded model: the parameter Swapper and the
Swapper for gradients and optimizer state, made from a DeepSpeed-style
config or keywords, and opened at the newest checkpoint both hold when
they are persistent sets."""
import errno
import json
import os
import re
import warnings

import nvswap

from . import _durable, _engine


def load_config(config):
    """(nvswap.Config or None, the raw dict or None)"""
    if config is None:
        return None, None
    if isinstance(config, nvswap.Config):
        raw = None
        if config.source and os.path.exists(config.source):
            with open(config.source) as f:
                raw = json.load(f)
        return config, raw
    if isinstance(config, dict):
        return nvswap.Config.from_str(json.dumps(config)), config
    if isinstance(config, (str, bytes, os.PathLike)):
        cfg = nvswap.Config.load(config)
        with open(config) as f:
            return cfg, json.load(f)
    raise TypeError("nvswap.torch.offload: config must be a path, a dict or "
                    f"an nvswap.Config, not {type(config).__name__}")


def raw_key(raw, *path):
    for k in path:
        if not isinstance(raw, dict) or k not in raw:
            return None
        raw = raw[k]
    return raw


def persist_mode(cfg, kw):
    """(persist, keep_generations) from the keywords, else the config.
    'readonly' serves a set (inference=True) and nothing else."""
    nv = cfg.nvswap_options() if cfg is not None else {}
    persist = kw.get("persist") or nv.get("persist", "scratch")
    if persist not in ("scratch", "persistent", "resume", "readonly"):
        raise ValueError("nvswap.torch.offload: persist must be 'scratch', "
                         "'persistent', 'resume' or 'readonly', not "
                         f"{persist!r}")
    if persist == "readonly" and not kw.get("inference"):
        raise ValueError("nvswap.torch.offload: persist='readonly' serves "
                         "a set (inference=True); training writes its "
                         "sets: give persist='persistent' or 'resume'")
    return persist, nv.get("keep_generations", 2)


def swappers(cfg, raw, rank, kw, generations=(None, None)):
    """The parameter Swapper and the gradient/optimizer-state Swapper
    (each opened at the given generation of a persistent set)."""
    common = {k: kw[k] for k in ("backend", "page_cache", "checksum")
              if kw.get(k) is not None}
    persist, keep = persist_mode(cfg, kw)
    if persist != "scratch":
        common.update(persist=persist, keep_generations=keep)
    pkw = dict(common)
    if generations[0] is not None:
        pkw["generation"] = generations[0]
    for k in ("nvme_path", "buffer_size", "buffer_count"):
        if kw.get(k) is not None:
            pkw[k] = kw[k]
    if cfg is None:
        pkw.setdefault("buffer_count", 4)
        if "nvme_path" not in pkw:
            raise ValueError("nvswap.torch.offload: give config= or "
                             "nvme_path=")
        pswap = nvswap.Swapper(name="param", rank=rank, **pkw)
    else:
        pswap = nvswap.Swapper(cfg, kind="param", rank=rank, **pkw)
    if kw.get("inference"):
        return pswap, None  # no gradient or optimizer pool (_infer.py)
    try:
        ps = pswap.stats()
        okw = dict(common)
        if generations[1] is not None:
            okw["generation"] = generations[1]
        if kw.get("optimizer_buffer_size") is not None:
            okw["buffer_size"] = kw["optimizer_buffer_size"]
        if kw.get("optimizer_buffer_count") is not None:
            okw["buffer_count"] = kw["optimizer_buffer_count"]
        # A layer's Adam state: two fp32 tensors per parameter (twice a
        # fp32 layer; four times a bf16 one, whose fp32 masters fit too).
        factor = 4 if kw.get("dtype") is not None else 2
        state = (factor * ps["buffer_size"] +
                 2 * _engine.ALIGN * _engine.MAX_TENSORS)
        on_nvme = cfg is not None and cfg.offload("optimizer").get(
            "device") == "nvme"
        if on_nvme:
            if raw_key(raw, "zero_optimization", "offload_optimizer",
                        "buffer_size") is None:
                okw.setdefault("buffer_size", state)
            gswap = nvswap.Swapper(cfg, kind="optimizer", rank=rank, **okw)
        else:
            okw.setdefault("buffer_size", state)
            okw.setdefault("buffer_count", 4)
            path = kw.get("nvme_path") or os.path.dirname(os.path.dirname(
                os.path.dirname(pswap.dirs[0])))
            gswap = nvswap.Swapper(nvme_path=path, name="optimizer",
                                   rank=rank, **okw)
    except BaseException:
        pswap.close()
        raise
    return pswap, gswap


def served_record(cfg, raw, rank, kw):
    """A model served from a persistent training set (inference=True and
    persist=): (generation, record) of the newest nvswap.torch checkpoint
    the parameter set holds, read through one buffer of a record chunk;
    the set is closed again, nothing written. The optimizer set is not
    opened: its pool would be sized for its own tensors, and serving
    reads no optimizer state. Opened read-only: any number of processes
    serve one set at once, and a writer is refused while they do."""
    pkw = dict(kw, buffer_size=_durable.RECORD_CHUNK, buffer_count=1,
               persist="readonly", inference=True)
    pswap = swappers(cfg, raw, rank, pkw)[0]
    try:
        ours = _durable.ours(pswap)
        if not ours:
            raise nvswap.Error(errno.ENOENT, "nvswap.torch.offload: "
                               f"nothing to serve in {pswap.dirs[0]}: no "
                               "nvswap.torch checkpoint was saved there")
        seq = max(ours)
        if pswap.generations()[0]["generation"] != ours[seq]:
            # newer than it: a generation of another writer's
            pswap.close()
            pswap = None
            pswap = swappers(cfg, raw, rank, pkw, (ours[seq], None))[0]
        if not _durable.has_record(pswap):
            raise nvswap.Error(errno.ENOTSUP, "nvswap.torch.offload: "
                               f"checkpoint {seq} in {pswap.dirs[0]} has "
                               "no record in the parameter set (saved by "
                               "an older nvswap): resume training and "
                               "checkpoint once, or serve the weights "
                               "saved by nvt.save_pretrained()")
        rec = _durable.read_record(pswap, "parameter")
        rec["generations"] = (ours[seq], None)
        return ours[seq], rec
    finally:
        if pswap is not None:
            pswap.close()


def memory_fs(path):
    """'tmpfs' or 'ramfs' where path's files live in memory, else None:
    the type of the mount that holds path's real location, from
    /proc/self/mountinfo (the longest mount point, the last of a stack)."""
    real, best, kind = os.path.realpath(path), "", None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5 or not right:
                    continue
                mnt = re.sub(r"\\([0-7]{3})",
                             lambda m: chr(int(m.group(1), 8)), fields[4])
                inside = real == mnt or real.startswith(
                    mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):
                    best, kind = mnt, right.split()[0]
    except OSError:
        return None
    return kind if kind in ("tmpfs", "ramfs") else None


def warn_memory_fs(pswap):
    """A RuntimeWarning where the swap files would live in memory: it
    works, and defeats the purpose of offloading."""
    where = pswap.dirs[0]
    kind = memory_fs(where)
    if kind is not None:
        warnings.warn(f"nvswap.torch.offload: the swap files go to {where}"
                      f", on {kind}: they live in memory, which "
                      "offloading is meant to spare; give nvme_path a "
                      "directory on the NVMe disk", RuntimeWarning,
                      stacklevel=3)


def warn_buffered_weights(pswap, paths):
    """A RuntimeWarning, once, where weights files served in place are
    read through the page cache though page_cache=False asked for
    O_DIRECT: their filesystem refuses it (ramfs, older kernels' tmpfs;
    Swapper.stats()['files_buffered']). Nothing else changes."""
    n = pswap.stats()["files_buffered"]
    if not n:
        return
    where = sorted({os.path.dirname(p) for p in paths})
    kinds = sorted({memory_fs(d) or "its filesystem" for d in where})
    warnings.warn(f"nvswap.torch.offload: {n} weights file(s) served in "
                  f"place (in {', '.join(where)}) are read through the page "
                  f"cache: {' and '.join(kinds)} refuses O_DIRECT",
                  RuntimeWarning, stacklevel=3)


def open_pools(cfg, raw, rank, kw, served=None):
    """The two Swappers; for a persistent set that holds checkpoints,
    both at the newest one they share, and its record. served: a served
    model's (generation, record) from served_record(): the parameter
    set alone, at that generation."""
    if served is not None:
        return (swappers(cfg, raw, rank, dict(kw, persist="readonly"),
                         (served[0], None))[0], None, served[1])
    pswap, gswap = swappers(cfg, raw, rank, kw)
    persist = persist_mode(cfg, kw)[0]
    if persist == "scratch":
        return pswap, gswap, None
    try:
        common = _durable.common_generation(pswap, gswap)
        if common is None and persist == "resume":
            where = pswap.dirs[0]
            # A set that holds nothing was made just now by the open:
            # it goes (with its lock and directories), as if never made.
            for s in (gswap, pswap):
                if not s.generations():
                    s.discard()
            raise nvswap.Error(errno.ENOENT, "nvswap.torch.offload: "
                               f"nothing to resume in {where}: no "
                               "nvswap.torch checkpoint was saved there")
        if common is not None:
            seq, gp, go = common
            ahead = (pswap.generations()[0]["generation"] != gp,
                     gswap.generations()[0]["generation"] != go)
            if any(ahead):
                # One set is ahead (a crash between the two commits).
                tag = next(g["tag"] for g in pswap.generations()
                           if g["generation"] == gp)
                gswap.close()
                pswap.close()
                pswap = gswap = None
                pswap, gswap = swappers(cfg, raw, rank, kw, (gp, go))
                # The set ahead commits the shared checkpoint again: its
                # next checkpoint then drops the generation ahead, not
                # this one (a second crash between the commits would
                # leave none in common).
                gens = [gp, go]
                for k, s in enumerate((pswap, gswap)):
                    if ahead[k]:
                        s.checkpoint(tag)
                        gens[k] = s.checkpoint_wait()
                gp, go = gens
            rec = _durable.read_record(gswap)
            rec["generations"] = (gp, go)
            return pswap, gswap, rec
        # No checkpoint of ours: what a run that never saved left is not
        # a training state; start from the model given.
        for s in (pswap, gswap):
            for i in s.ids():
                s.unregister(i)
        return pswap, gswap, None
    except BaseException:
        for s in (gswap, pswap):
            if s is not None:
                s.close()
        raise
