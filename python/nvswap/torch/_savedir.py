# SPDX-License-Identifier: MIT
"""The directory side of save_pretrained(): one save at a time in it, the
leftovers of killed saves removed, and the switch from the save that
loads now to the new one made at one commit point, so that whatever
interrupts it (an exception, a kill, a crash) the directory loads as the
old save whole or the new one whole.

The commit point is where transformers 5 looks: model.safetensors when it
exists, else model.safetensors.index.json; a loader that reads the index
first sees one whole save at every step too.
  -> single:  the rename of the new model.safetensors over the old, or
              into place (it wins over an index); then the old index
              goes, then its shards.
  -> sharded: the new shards first, under names neither the file nor
              the index that load now use; then the rename of the new
              index, and the unlink of a model.safetensors there. A
              shard whose standard name the old save uses (the same
              count of shards) is written under a temporary name, which
              that index names; after it, each is hard-linked to its
              standard name (a temporary link renamed over the old
              shard; copied where the filesystem has no hard links), a
              second index names those, and the temporaries go.
Every file is created with O_EXCL (CkptWriter; O_EXCL|O_NOFOLLOW for
the index), so a link planted at a temporary name is never written
through; a rename replaces a link, never what it points to. Each file is
fsynced before its rename, the directory after each step."""
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import time

import nvswap

from ..checkpoint import _keep_mode_fd
from ._wfile import flock_holders, name_pids, readers_of

FN = "nvswap.torch.save_pretrained"
CONFIG_TMP = ".nvswap-config-"  # adopt()'s folders, then a tag
_CONFIG_TMP_RE = re.compile(re.escape(CONFIG_TMP) + r"[0-9a-f]{12}")
# how long a save waits for the directory's flock: a load (open_weights)
# holds it shared while it opens a save's files; another save for good
LOCK_WAIT_S = 5.0
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
SHARD = "model-{:05d}-of-{:05d}.safetensors"
SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
_BASE = r"(?:model-\d{5}-of-\d{5}|model\.safetensors(?:\.index\.json)?)"
# this module's temporaries: <base>.nvswap-<12 hex digits>, a shard's
# with .safetensors after it (loaders want the suffix), a link's .link
MINE = re.compile(_BASE + r"\.nvswap-[0-9a-f]{12}(?:\.safetensors|\.link)?")
# a writer's temporary beside one of those names: "<name>.tmp.<pid>.<n>"
# (CkptWriter) or "<name>.tmp.<pid>" (the index, before round 4)
_WRITER_TMP = re.compile(r"(.+)\.tmp\.\d+(?:\.\d+)?")
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS)


def _new_tag():
    return secrets.token_hex(6)


def _temp(name, tag, suffix=""):
    """The temporary name tag of name: a shard's keeps .safetensors
    (suffix) last."""
    if name.endswith(".safetensors"):
        name = name[:-len(".safetensors")]
    return f"{name}.nvswap-{tag}{suffix}"


def _error(code, text):
    return nvswap.Error(code, f"{FN}: {text}")


def _ours(name):
    """A name save_pretrained makes: its files and its temporaries."""
    m = _WRITER_TMP.fullmatch(name)
    base = m.group(1) if m else name
    return base in (SINGLE, INDEX) or bool(SHARD_RE.fullmatch(base) or
                                           MINE.fullmatch(base))


def prepare(directory):
    """Make directory (and the missing ones above it) as os.makedirs
    does; a symbolic link to a directory is followed. Anything else
    there is refused with nvswap.Error naming it."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        st = None
    except OSError as e:  # ENOTDIR: a file in the path; EACCES...
        raise _error(e.errno, f"cannot make or use the directory "
                     f"{directory}: {e.strerror}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        to = os.readlink(directory)
        try:
            st = os.stat(directory)
        except OSError as e:
            raise _error(e.errno, f"{directory} is a symbolic link to "
                         f"{to!r}, which is not there ({e.strerror}): a "
                         "link is followed to a directory, but its target "
                         "is not made; make it, or give a directory") \
                from None
        if not stat.S_ISDIR(st.st_mode):
            raise _error(errno.ENOTDIR, f"{directory} is a symbolic link "
                         f"to {to!r}, which is not a directory")
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise _error(errno.ENOTDIR, f"{directory} is not a directory")
        return
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise _error(e.errno, f"cannot make the directory {directory}: "
                     f"{e.strerror}") from None


def _lock(directory):
    """A descriptor of directory holding its exclusive flock. Refused
    (EBUSY) at once while a model of this process reads layers in place
    from its files (_wfile.Hold): replaced, they would fail its next
    read."""
    readers = readers_of(directory)
    if readers:
        raise _error(errno.EBUSY, f"{directory}: a model of this process "
                     "reads layers from its files in place ("
                     f"{'; '.join(readers[:4])}"
                     f"{'; ...' if len(readers) > 4 else ''}): a save here "
                     "would replace them under it; save into another "
                     "directory, or restore() or close the model first")
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _error(e.errno, f"cannot open the directory {directory}: "
                     f"{e.strerror}") from None
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as e:
            if e.errno == errno.EWOULDBLOCK and \
                    time.monotonic() < deadline:
                time.sleep(0.05)  # a load opening its files: a moment
                continue
            if e.errno != errno.EWOULDBLOCK:
                os.close(fd)
                raise _error(e.errno, "cannot lock the directory "
                             f"{directory}: {e.strerror}") from None
            parts = [f"{name_pids(pids)} {what}" for pids, what in (
                (flock_holders(fd, write=True), "saving"),
                (flock_holders(fd, write=False), "reading")) if pids]
            os.close(fd)
            held = f"; held now by {' and '.join(parts)}" if parts else ""
            raise _error(errno.EBUSY, f"{directory}: another "
                         "save_pretrained is writing this directory, or "
                         "another process serves a model from its files "
                         "in place (both hold the directory's flock; a "
                         "load holds it only while it opens the files"
                         f"{held}): wait for it to finish, or save "
                         "elsewhere") from None


def _regular(path):
    """lstat of path when it is a regular file (a link is not followed),
    else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


class Switch:
    """One save into directory, under its flock (a context manager):
    write(name, fn) each new file, then commit_single() or
    commit_index(doc); an exception is followed by abort(). The names a
    loader reads now (model.safetensors, the index and the shards it
    names) are never written over before the commit."""

    def __init__(self, directory):
        self.dir = directory
        self.fd = _lock(directory)
        self.made, self.actual = [], {}
        self.committed = self.indexed = False
        try:
            self._tidy(self._loadable(), shards=False)
        except BaseException:
            os.close(self.fd)
            raise
        self.tag = _new_tag()
        # the mode (and owner) new files take where no file of their
        # name is there: the save that loads now's
        self.like0 = _regular(self._p(SINGLE)) or _regular(self._p(INDEX))

    def _p(self, name):
        return os.path.join(self.dir, name)

    def _loadable(self):
        """self.refs: every name a loader may read now, whichever it
        reads first: model.safetensors, the index and the files it names
        (none where it cannot be read: then it loads nothing)."""
        refs = set()
        if os.path.lexists(self._p(SINGLE)):
            refs.add(SINGLE)
        if os.path.lexists(self._p(INDEX)):
            refs.add(INDEX)
            try:  # a regular file (a FIFO would block), links followed
                if stat.S_ISREG(os.stat(self._p(INDEX)).st_mode):
                    fd = os.open(self._p(INDEX), os.O_RDONLY |
                                 os.O_NONBLOCK | os.O_CLOEXEC)
                    with open(fd, "rb") as f:
                        wm = json.loads(f.read())["weight_map"]
                    refs.update(v for v in wm.values()
                                if isinstance(v, str))
            except (OSError, ValueError, LookupError, TypeError,
                    AttributeError, RecursionError):
                pass
        self.refs = refs
        return refs

    def adopt(self, make):
        """The files make(folder) writes into a new private folder in the
        directory (the model's config.json, generation_config.json: what
        transformers' save_pretrained writes with a plain open()), each
        renamed in, replacing what is there (a link planted at the name
        is replaced, never written through), with the mode of the file it
        replaces, synced: before the weights' commit, so a kill between
        the two leaves the new config beside the old weights of the same
        model, never a config half written."""
        tmp = os.path.join(self.dir, f"{CONFIG_TMP}{_new_tag()}")
        self._call("make", os.mkdir, tmp, 0o700)
        try:
            make(tmp)
            for n in sorted(os.listdir(tmp)):
                src, dst = os.path.join(tmp, n), self._p(n)
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW |
                             os.O_CLOEXEC)
                try:
                    like = _regular(dst)
                    if like is not None:
                        _keep_mode_fd(fd, like)
                    else:  # as a plain open() would have made it
                        mask = os.umask(0)
                        os.umask(mask)
                        os.fchmod(fd, 0o666 & ~mask)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._call("rename", os.replace, src, dst)
            self._sync()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _tidy(self, keep, shards):
        """Remove this module's temporaries and writers' temporaries of
        its names, and with shards an index and shards, that keep does
        not name (never a directory but adopt()'s folders). The index
        first: a loader that reads it then never finds shards missing."""
        names = sorted(os.listdir(self.dir), key=lambda n: n != INDEX)
        for n in names:
            if _CONFIG_TMP_RE.fullmatch(n):  # a killed save's config
                shutil.rmtree(self._p(n), ignore_errors=True)
                continue
            if n in keep or not _ours(n) or not shards and not (
                    _WRITER_TMP.fullmatch(n) or MINE.fullmatch(n)):
                continue
            try:
                if stat.S_ISDIR(os.lstat(self._p(n)).st_mode):
                    continue
            except FileNotFoundError:
                continue
            self._call("remove", os.unlink, self._p(n))
        self._sync()

    def _call(self, what, fn, *paths):
        try:
            fn(*paths)
        except OSError as e:
            raise _error(e.errno, f"cannot {what} "
                         f"{' to '.join(paths)}: {e.strerror}") from e

    def _sync(self):
        try:
            os.fsync(self.fd)
        except OSError as e:
            raise _error(e.errno, f"fsync of the directory {self.dir}: "
                         f"{e.strerror}") from e

    def write(self, name, fn):
        """fn(path, like): write the new file name at path (a name no
        loader reads now), its mode and owner those of like (a stat
        result) or the default where like is None."""
        actual = name
        if name != SINGLE and name in self.refs:
            actual = _temp(name, self.tag, ".safetensors")
        like = _regular(self._p(name)) or self.like0
        if name != SINGLE:
            self.made.append(actual)
        fn(self._p(actual), like)
        self.actual[name] = actual
        if name == SINGLE:
            self.committed = True

    def _new_file(self, name, write, like):
        """A file of a fresh temporary name beside name, O_EXCL|
        O_NOFOLLOW, filled by write(fd) and fsynced; its name."""
        for _ in range(100):
            tmp = _temp(name, _new_tag(),
                        ".link" if name.endswith(".safetensors") else "")
            try:
                fd = os.open(self._p(tmp), os.O_WRONLY | os.O_CREAT |
                             os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             stat.S_IMODE(like.st_mode) if like else 0o666)
            except FileExistsError:
                continue  # a name taken (a link planted there): another
            except OSError as e:
                raise _error(e.errno, f"cannot create {self._p(tmp)}: "
                             f"{e.strerror}") from e
            break
        else:
            raise _error(errno.EEXIST, f"no free temporary name beside "
                         f"{self._p(name)} in 100 tries")
        try:
            try:
                if like is not None:
                    _keep_mode_fd(fd, like)
                write(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            self._drop(tmp)
            raise _error(e.errno, f"writing {self._p(tmp)}: {e.strerror}") \
                from e
        except BaseException:
            self._drop(tmp)
            raise
        return tmp

    def _drop(self, name):
        try:
            os.unlink(self._p(name))
        except OSError:
            pass

    def _index(self, doc, names, commits=False):
        """Rename doc in as the index, its weight_map's files named by
        names (standard name -> the name written); commits: that is the
        commit (no model.safetensors there)."""
        doc = dict(doc, weight_map={k: names[v] for k, v in
                                    doc["weight_map"].items()})
        text = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

        def write(fd):
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]

        tmp = self._new_file(INDEX, write, _regular(self._p(INDEX)) or
                             self.like0)
        try:
            self._call("rename", os.replace, self._p(tmp), self._p(INDEX))
        except BaseException:
            self._drop(tmp)
            raise
        self.indexed = True
        self.committed |= commits
        self._sync()

    def commit_single(self):
        """After write(SINGLE): its rename was the commit; the old index
        and shards go."""
        self._finish({SINGLE})

    def commit_index(self, doc):
        """Commit the shards written, doc their index (its weight_map
        naming the standard names): the index, then the unlink of a
        model.safetensors there, commits."""
        single = os.path.lexists(self._p(SINGLE))
        self._index(doc, self.actual, commits=not single)
        if single:
            self._call("remove", os.unlink, self._p(SINGLE))
            self.committed = True
            self._sync()
        moved = {n: a for n, a in self.actual.items() if n != a}
        for name, actual in moved.items():
            self._link(actual, name)
        if moved:
            self._sync()
            self._index(doc, {n: n for n in self.actual})
        self._finish(set(self.actual) | {INDEX})

    def _link(self, actual, name):
        """name made a second name of actual (a temporary link renamed
        over it); a copy where the filesystem has no hard links."""
        src = self._p(actual)
        for _ in range(100):
            tmp = _temp(name, _new_tag(), ".link")
            try:
                os.link(src, self._p(tmp), follow_symlinks=False)
                break
            except FileExistsError:
                continue
            except OSError as e:
                if e.errno not in _NO_LINKS:
                    raise _error(e.errno, f"cannot link {src} to "
                                 f"{self._p(tmp)}: {e.strerror}") from e
                tmp = self._copy(src, name)
                break
        else:
            raise _error(errno.EEXIST, f"no free temporary name beside "
                         f"{self._p(name)} in 100 tries")
        try:
            self._call("rename", os.replace, self._p(tmp), self._p(name))
        except BaseException:
            self._drop(tmp)
            raise

    def _copy(self, src, name):
        """A copy of src under a fresh temporary name beside name."""
        def write(fd):
            with open(src, "rb") as f:
                while True:
                    b = f.read(16 << 20)
                    if not b:
                        return
                    view = memoryview(b)
                    while view:
                        view = view[os.write(fd, view):]

        return self._new_file(name, write, _regular(src))

    def _finish(self, keep):
        self.committed = True
        self._tidy(keep, shards=True)

    def abort(self):
        """After an exception: before the commit the new files go (the
        old save is untouched); after it, what the new save does not
        use, as far as that works."""
        try:
            if not self.committed:
                if self.indexed:  # before a model.safetensors' unlink
                    self._drop(INDEX)
                for n in self.made:
                    self._drop(n)
                return
            self._tidy(self._loadable(), shards=True)
        except Exception:
            pass  # the first error is the one to report

    def close(self):
        os.close(self.fd)  # the flock goes with it

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        try:
            if kind is not None:
                self.abort()
        finally:
            self.close()
        return False
