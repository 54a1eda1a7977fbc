# SPDX-License-Identifier: MIT
"""nvswap.torch.save_pretrained over an earlier save (issue 46, findings
2, 5, 6, 10 and the target directory): interrupted at every step of its
commit sequence, by an exception or by SIGKILL, the directory loads in
offload(weights=)'s reader and in transformers as the old save whole or
the new one whole, never a mix; the next save removes what a killed one
left; a link planted at any temporary name is never written through; a
file saved 0600 stays 0600; one save at a time per directory."""
import errno
import fcntl
import importlib.util
import os
import signal
import stat
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _savedir  # noqa: E402

HAVE_HF = importlib.util.find_spec("transformers") is not None
HERE = os.path.dirname(os.path.abspath(__file__))
READERS = ["weights="] + (["transformers"] if HAVE_HF else [])
# (max_shard_size of the old save, of the new one): None = one file;
# 40000 bytes are 3 shards of either model, 60000 2
MOVES = {"single-single": (None, None), "single-sharded": (None, 40000),
         "sharded-single": (40000, None), "sharded-same": (40000, 40000),
         "sharded-fewer": (40000, 60000)}


def plain():
    """100 KB in six layers: 3 shards of 40000 bytes, 2 of 60000."""
    return torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])


def make(seed):
    """A tiny Llama (where transformers is missing, plain()), its values
    drawn from seed."""
    torch.manual_seed(seed)
    if HAVE_HF:
        from weighthelp import hf_models
        cls, cfg = hf_models()["llama"]
        return cls(cfg)
    return plain()


def tree(sd):
    """A module holding sd's tensors under its names and nothing else:
    what a child process saves without importing transformers."""
    root = torch.nn.Module()
    for k, v in sd.items():
        *path, leaf = k.split(".")
        m = root
        for p in path:
            if p not in m._modules:
                m.add_module(p, torch.nn.Module())
            m = m._modules[p]
        m.register_parameter(leaf, torch.nn.Parameter(v.clone(),
                                                      requires_grad=False))
    return root


def save(model, d, shard):
    kw = {} if shard is None else {"max_shard_size": shard}
    return nvt.save_pretrained(model, d, **kw)


def loaded(d, cls):
    """{reader: state dict loaded from d, or the exception that refused
    it}: nvswap's reader, and transformers' from_pretrained."""
    out = {}
    try:
        with nvt.open_weights(d) as w:
            out["weights="] = {k: w.tensor(k) for k in w.keys()}
    except nvswap.Error as e:
        out["weights="] = e
    if cls is not None:
        try:
            out["transformers"] = cls.from_pretrained(d).state_dict()
        except (OSError, ValueError) as e:
            out["transformers"] = e
    return out


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def check_whole(d, old, new, where):
    """What each reader loads from d is old's state dict, new's, or a
    refusal; returns the readers' outcomes, by name."""
    seen = {}
    for reader, got in loaded(d, type(new) if HAVE_HF else None).items():
        if isinstance(got, Exception):
            seen[reader] = "refused"
            continue
        if same(got, old.state_dict()):
            seen[reader] = "old"
        elif same(got, new.state_dict()):
            seen[reader] = "new"
        else:
            pytest.fail(f"{where}: {reader} loads a mix of the two saves "
                        f"from {sorted(os.listdir(d))}")
    return seen


class Faults:
    """The k-th call of the file operations of a save (os.replace,
    os.unlink, os.link, os.fsync, a CkptWriter's close) fails with EIO
    (or, with kill, SIGKILLs this process); .calls counts them."""

    def __init__(self, k, kill=False):
        self.k, self.kill, self.calls, self.saved = k, kill, 0, []

    def step(self, what):
        self.calls += 1
        if self.calls == self.k:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(errno.EIO, f"injected at {what}")

    def __enter__(self):
        for name in ("replace", "unlink", "link", "fsync"):
            real = getattr(os, name)
            self.saved.append((os, name, real))
            setattr(os, name, self._wrap(name, real))
        real_writer = nvswap.CkptWriter
        faults = self

        class Writer:
            def __init__(self, *a, **kw):
                self._w = real_writer(*a, **kw)

            def __getattr__(self, name):
                return getattr(self._w, name)

            def close(self):
                try:
                    faults.step("close")
                except OSError:
                    self._w.abort()
                    raise
                return self._w.close()

        self.saved.append((nvswap, "CkptWriter", real_writer))
        nvswap.CkptWriter = Writer
        return self

    def _wrap(self, name, real):
        def f(*a, **kw):
            self.step(name)
            return real(*a, **kw)
        return f

    def __exit__(self, *exc):
        for mod, name, real in reversed(self.saved):
            setattr(mod, name, real)
        return False


def expected_files(diskdir, model, shard):
    """The files of a save of model into a fresh directory."""
    d = os.path.join(diskdir, "fresh")
    save(model, d, shard)
    names = sorted(os.listdir(d))
    for n in names:
        os.unlink(os.path.join(d, n))
    os.rmdir(d)
    return names


@pytest.mark.parametrize("move", MOVES)
def test_an_exception_at_any_step_leaves_the_old_save_or_the_new(
        diskdir, move):
    old_shard, new_shard = MOVES[move]
    old, new = make(1), make(2)
    want = expected_files(diskdir, new, new_shard)
    d = os.path.join(diskdir, "out")
    outcomes, k = set(), 0
    while True:
        k += 1
        save(old, d, old_shard)
        assert check_whole(d, old, new, "before") == dict.fromkeys(
            READERS, "old")
        with Faults(k) as f:
            try:
                save(new, d, new_shard)
            except OSError as e:
                assert "injected" in str(e), e
            else:
                assert f.calls < k
        if f.calls < k:
            break  # every step failed once
        seen = check_whole(d, old, new, f"{move}, step {k} failed")
        outcomes.update(seen.values())
        # the next save completes, and leaves only its own files
        save(new, d, new_shard)
        assert sorted(os.listdir(d)) == want, (move, k)
        assert check_whole(d, old, new, "again")["weights="] == "new"
    assert k > 3, "too few steps to be a sequence"
    assert {"old", "new"} <= outcomes, outcomes  # both sides were seen


CHILD = r"""
import sys
sys.path[:0] = [{here!r}]
import torch
import test_torch_export_atomic as T
model = T.tree(torch.load({sd!r}))
with T.Faults({k}, kill=True):
    T.save(model, {d!r}, {shard!r})
print("finished")
"""


def test_sigkill_at_any_step_leaves_a_whole_save_and_no_leftovers(diskdir):
    old_shard, new_shard = MOVES["sharded-same"]
    old, new = make(1), make(2)
    want = expected_files(diskdir, new, new_shard)
    sd = os.path.join(diskdir, "new.pt")
    torch.save(new.state_dict(), sd)
    d = os.path.join(diskdir, "out")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(nvswap.__file__)), HERE]))
    leftovers, outcomes, k = [], set(), 0
    while True:
        k += 1
        save(old, d, old_shard)
        r = subprocess.run([sys.executable, "-c", CHILD.format(
            here=HERE, sd=sd, k=k, d=d, shard=new_shard)], env=env,
            capture_output=True, text=True, cwd=diskdir)
        if r.returncode == 0:
            assert "finished" in r.stdout
            break
        assert r.returncode == -signal.SIGKILL, r.stderr
        outcomes.update(check_whole(d, old, new,
                                    f"killed at step {k}").values())
        leftovers += [n for n in os.listdir(d) if ".tmp." in n]
        save(new, d, new_shard)
        assert sorted(os.listdir(d)) == want, k
    assert k > 4
    assert {"old", "new"} <= outcomes, outcomes
    # a kill while a shard was complete under its writer's temporary
    # name left it there (finding 10): the next save removed it
    assert leftovers, "no kill left a writer's temporary file"


def test_leftovers_of_killed_saves_are_removed_and_nothing_else(diskdir):
    model = make(3)
    d = os.path.join(diskdir, "out")
    save(model, d, 40000)
    pid = 4194303
    ours = ["model.safetensors.tmp.%d.0" % pid,
            "model.safetensors.index.json.tmp.%d" % pid,  # before round 4
            "model-00002-of-00003.safetensors.tmp.%d.7" % pid,
            "model-00001-of-00003.nvswap-0123456789ab.safetensors",
            "model-00001-of-00003.nvswap-0123456789ab.safetensors.tmp.9.1",
            "model-00003-of-00003.nvswap-0123456789ab.link",
            "model.safetensors.index.json.nvswap-0123456789ab"]
    theirs = ["notes.txt", "optimizer.pt.tmp.%d.0" % pid,
              "model.safetensors.tmp.backup", "model.nvswap-xyz"]
    for n in ours + theirs:
        with open(os.path.join(d, n), "wb") as f:
            f.write(os.urandom(40000))
    save(model, d, 40000)
    left = set(os.listdir(d))
    assert not left & set(ours), left & set(ours)
    assert set(theirs) <= left


def test_a_link_planted_at_every_temporary_name_is_not_written_through(
        diskdir, monkeypatch):
    old, new = make(1), make(2)
    want = expected_files(diskdir, new, 40000)
    d = os.path.join(diskdir, "out")
    save(old, d, 40000)  # the same count of shards: every kind of name
    victim_dir = os.path.join(diskdir, "victims")
    os.mkdir(victim_dir)
    victims = {}

    def plant(name):
        target = os.path.join(victim_dir, f"v{len(victims)}")
        with open(target, "wb") as f:
            f.write(b"precious")
        victims[target] = os.path.join(d, name)
        os.symlink(target, os.path.join(d, name))

    probe = nvswap.CkptWriter(os.path.join(diskdir, "probe"))
    n0 = int(probe.temp_path.rsplit(".", 1)[1])
    probe.abort()
    pid = os.getpid()
    plant(f"model.safetensors.index.json.tmp.{pid}")  # finding 5's name
    tags = iter(["a0a0a0a0a0a0", "b1b1b1b1b1b1", "c2c2c2c2c2c2"])
    real = _savedir._new_tag

    def new_tag():
        # the first tags come with links at every name they make: the
        # shards' and links' temporaries, the index's, and a writer's
        # temporaries of each for its next 8 numbers
        tag = next(tags, None)
        if tag is None:
            return real()
        for i in range(1, 4):
            shard = f"model-{i:05d}-of-00003"
            for n in (f"{shard}.nvswap-{tag}.safetensors",
                      f"{shard}.nvswap-{tag}.link"):
                plant(n)
                for j in range(n0 + 1, n0 + 9):
                    plant(f"{n}.tmp.{pid}.{j}")
        plant(f"model.safetensors.index.json.nvswap-{tag}")
        return tag

    monkeypatch.setattr(_savedir, "_new_tag", new_tag)
    save(new, d, 40000)
    for target, link in victims.items():
        with open(target, "rb") as f:
            assert f.read() == b"precious", (target, link)
    assert next(tags, None) is None  # all three were used
    assert check_whole(d, old, new, "planted")["weights="] == "new"
    assert sorted(os.listdir(d)) == want  # the planted links removed
    assert not any(os.path.islink(os.path.join(d, n)) for n in want)


@pytest.mark.parametrize("move", ["single-single", "single-sharded",
                                  "sharded-same", "sharded-fewer"])
def test_a_model_saved_0600_stays_0600(diskdir, move):
    old_shard, new_shard = MOVES[move]
    model = plain()
    d = os.path.join(diskdir, "out")
    mask = os.umask(0o022)
    try:
        save(model, d, old_shard)
        for n in os.listdir(d):
            os.chmod(os.path.join(d, n), 0o600)
        paths = save(model, d, new_shard)
    finally:
        os.umask(mask)
    assert len(paths) == (1 if new_shard is None else
                          4 if new_shard == 40000 else 3)
    assert {p: oct(stat.S_IMODE(os.stat(p).st_mode)) for p in paths} == \
        dict.fromkeys(paths, oct(0o600))


def test_a_new_model_takes_the_default_mode(diskdir):
    model = torch.nn.Linear(4, 4)
    d = os.path.join(diskdir, "out")
    mask = os.umask(0o027)
    try:
        (p,) = save(model, d, None)
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640


def test_a_second_save_into_the_same_directory_is_refused(diskdir,
                                                          monkeypatch):
    monkeypatch.setattr(_savedir, "LOCK_WAIT_S", 0.2)
    model = make(3)
    d = os.path.join(diskdir, "out")
    save(model, d, 40000)
    before = {n: open(os.path.join(d, n), "rb").read()
              for n in os.listdir(d)}
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another save holds it
        with pytest.raises(nvswap.Error) as ei:
            save(make(4), d, None)
    finally:
        os.close(fd)
    assert ei.value.errno == errno.EBUSY
    assert str(ei.value).startswith(
        f"[Errno {errno.EBUSY}] nvswap.torch.save_pretrained: {d}: another "
        "save_pretrained is writing this directory"), str(ei.value)
    assert f"held now by process {os.getpid()} saving)" in str(ei.value)
    assert {n: open(os.path.join(d, n), "rb").read()
            for n in os.listdir(d)} == before
    save(make(4), d, None)  # the lock went with the holder


def test_a_link_to_a_directory_is_followed_and_others_are_refused(diskdir):
    model = torch.nn.Linear(4, 4)
    real = os.path.join(diskdir, "real")
    os.mkdir(real)
    os.symlink(real, os.path.join(diskdir, "link"))
    save(model, os.path.join(diskdir, "link"), None)
    assert os.listdir(real) == ["model.safetensors"]
    assert os.path.islink(os.path.join(diskdir, "link"))
    os.symlink("nowhere", os.path.join(diskdir, "dangling"))
    with open(os.path.join(diskdir, "file"), "w") as f:
        f.write("x")
    os.symlink("file", os.path.join(diskdir, "to-file"))
    cases = {"dangling": (errno.ENOENT, "is a symbolic link to 'nowhere', "
                          "which is not there"),
             "to-file": (errno.ENOTDIR, "is a symbolic link to 'file', "
                         "which is not a directory"),
             "file": (errno.ENOTDIR, "is not a directory"),
             "file/sub": (errno.ENOTDIR, "cannot make or use the "
                          "directory"),
             "file/sub/sub": (errno.ENOTDIR, "cannot make or use the "
                              "directory")}
    for name, (code, text) in cases.items():
        p = os.path.join(diskdir, name)
        with pytest.raises(nvswap.Error) as ei:
            save(model, p, None)
        assert ei.value.errno == code, (name, ei.value)
        assert "nvswap.torch.save_pretrained: " in str(ei.value)
        assert text in str(ei.value) and p in str(ei.value), ei.value
    assert not os.path.exists(os.path.join(diskdir, "nowhere"))


def test_without_hard_links_the_shards_are_copied(diskdir, monkeypatch):
    old, new = make(1), make(2)
    want = expected_files(diskdir, new, 40000)
    d = os.path.join(diskdir, "out")
    save(old, d, 40000)
    calls = []

    def no_link(*a, **kw):
        calls.append(a)
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    save(new, d, 40000)
    assert len(calls) == 3 == len(want) - len(  # each tried, then copied
        [n for n in want if not n.startswith("model-")])
    assert sorted(os.listdir(d)) == want
    assert all(os.stat(os.path.join(d, n)).st_nlink == 1 for n in want)
    assert check_whole(d, old, new, "copied") == dict.fromkeys(READERS,
                                                              "new")


def test_a_load_waits_for_a_save_and_a_save_for_a_load(diskdir,
                                                       monkeypatch):
    """Readers share, writers exclude: open_weights of a directory holds
    its flock shared while it opens the index and the shards, so a load
    never opens half of one save and half of the next (the same count of
    shards renames new ones over the names the old index lists); a load
    that finds a save running waits for it (EBUSY after LOCK_WAIT_S), a
    save that finds a load opening files waits a moment."""
    from nvswap.torch import _wfile
    model = make(3)
    d = os.path.join(diskdir, "out")
    save(model, d, 40000)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a save switching its files
        monkeypatch.setattr(_wfile, "LOCK_WAIT_S", 0.3)
        with pytest.raises(nvswap.Error) as ei:
            nvt.open_weights(d)
        assert ei.value.errno == errno.EBUSY
        assert f"{d}: a save_pretrained() (process {os.getpid()}) into " \
            "it still holds it" in str(ei.value), ei.value
        fcntl.flock(fd, fcntl.LOCK_UN)
        fcntl.flock(fd, fcntl.LOCK_SH)  # a load opening the files
        done = []
        t = threading.Thread(target=lambda: done.append(
            save(make(4), d, 40000)))
        t.start()
        t.join(0.5)
        assert t.is_alive() and not done  # the save waits for the load
        fcntl.flock(fd, fcntl.LOCK_UN)
        t.join(60)
        assert done
    finally:
        os.close(fd)
    want = make(4).state_dict()
    with nvt.open_weights(d) as w:
        assert w.keys() and all(torch.equal(w.tensor(k), want[k])
                                for k in w.keys())


@pytest.mark.skipif(not HAVE_HF, reason="transformers is not installed "
                    "here: the model config it writes is what is tested")
def test_the_config_files_are_renamed_in_not_written_through_a_link(
        diskdir):
    """config.json and generation_config.json were written by
    transformers' plain open() after the commit, through a link planted
    at the name. Now they go to a private folder and are renamed in,
    the link replaced, its target untouched, the old mode kept."""
    d = os.path.join(diskdir, "out")
    model = make(3)
    save(model, d, None)
    os.chmod(os.path.join(d, "config.json"), 0o600)
    victim = os.path.join(diskdir, "victim")
    with open(victim, "w") as f:
        f.write("mine")
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.unlink(gen)
        os.symlink(victim, gen)
    save(make(4), d, None)
    assert open(victim).read() == "mine"
    cfg = os.path.join(d, "config.json")
    assert not os.path.islink(cfg) and stat.S_ISREG(os.stat(cfg).st_mode)
    assert stat.S_IMODE(os.stat(cfg).st_mode) == 0o600
    if os.path.lexists(gen):
        assert not os.path.islink(gen)
    assert not [n for n in os.listdir(d) if n.startswith(".nvswap")]
    type(model).from_pretrained(d)  # loads
