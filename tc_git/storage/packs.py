"""One pack builder and one indexer: what a receiver lacks, as one git pack (a bundle's, or the
objects mirrored into the user's repository), and a pack read into a repository.

`build(repo, tips, hides, have)` selects everything reachable from `tips` that the hidden
commits do not reach (their trees included, like `git pack-objects --revs` with `^hide`) and
that `have(oid)` says the receiver does not hold already. The pack comes out as bytes (`data`,
a bundle's) or as a .pack/.idx pair in a directory (`write_dir`, the mirror's). Native
(`_native` PACK: libgit2's revwalk, insert_walk and write_buf, in C) when only hidden commits
limit the pack; a `have` filter needs a callback libgit2's walk lacks, so it, and TC_NATIVE=off,
take the Python walk below and pygit2's PackBuilder. The mirror into the user's repository
hides the tips it mirrored last time when the user still holds them all, and asks `have`
otherwise (`write_into` picks the native writer when it can). `index_pack` reads pack data into a
repository's objects: libgit2's indexer (`_native` INDEXER), else `git index-pack`.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ..base import validate
from ..base.errors import BadInput, Unavailable
from ..base.settings import child_env
from . import _native
from .trees import TREE_ENTRY

CHUNK = 4 << 20


@dataclass
class Pack:
    """The objects `build` selected, packed on demand."""

    repo: pygit2.Repository
    tips: list
    hides: list
    have: object = None  # callable(oid) -> bool, or None

    @property
    def native(self) -> bool:
        return self.have is None and _native.has(_native.PACK)

    def objects(self) -> list:
        return reachable(self.repo, self.tips, self.hides, self.have)

    def data(self) -> tuple[int, bytes]:
        """(object count, the pack's bytes)."""
        if self.native:
            return _native.pack_walk(self.repo, self.tips, self.hides)
        objs = self.objects()
        with tempfile.TemporaryDirectory() as td, _native.whole_windows():  # (libgit2's indexer writes the .idx)
            self._builder(objs).write(td)
            return len(objs), Path(glob.glob(os.path.join(td, "pack-*.pack"))[0]).read_bytes()

    def write_to(self, write) -> tuple[int, int]:
        """The pack's bytes to `write(bytes)`, streamed where native (a bundle's file);
        returns (object count, bytes written)."""
        if self.native:
            return _native.pack_walk_to(self.repo, self.tips, self.hides, write)
        count, data = self.data()
        write(data)
        return count, len(data)

    def write_dir(self, pack_dir: str | os.PathLike) -> int:
        """Write the pack and its index into `pack_dir` (a repository's objects/pack); returns the
        object count (0: nothing written). libgit2 cannot push into a non-bare repository."""
        objs = self.objects()
        if objs:
            with _native.whole_windows():  # (libgit2's indexer writes the .idx)
                self._builder(objs).write(str(pack_dir))
        return len(objs)

    def write_into(self, target: pygit2.Repository, pack_dir: str | os.PathLike) -> int:
        """Write the pack into `target`'s objects (`pack_dir`: its objects/pack): natively
        (revision walk and pack in C, then libgit2's indexer) when only hidden commits limit the
        pack, else as `write_dir`. Returns the object count (0: nothing written)."""
        if not self.native:
            return self.write_dir(pack_dir)
        try:
            # streamed from the pack builder into the target's indexer: the pack is never whole
            # in memory (it was twice: libgit2's buffer and its Python copy)
            with _native.PackSink(target) as sink:
                count, _size = _native.pack_walk_to(self.repo, self.tips, self.hides, sink.append, skip_empty=True)
                if count:
                    sink.commit()
        except _native.GitCallError as e:
            raise pygit2.GitError(str(e)) from None
        return count

    def _builder(self, objs) -> pygit2.PackBuilder:
        pb = pygit2.PackBuilder(self.repo)
        for o in objs:
            pb.add(o)
        return pb


def native_walk() -> bool:
    """Whether `build` with hides only walks and packs in C now (not under TC_NATIVE=off)."""
    return _native.has(_native.PACK)


# --------------------------------------------------------------------------- the store's own packs
def builder(src: pygit2.Repository, tips=(), trees=(), named=()) -> pygit2.PackBuilder:
    """libgit2's pack builder for the store's own packs (a roll-up, the loose objects packed,
    compress's one pack), every object given with its path, so that the versions of one file or
    one tree are tried as deltas of each other (git's name hash). Added by id alone, objects pair
    by size only: 8.7 MB at 2,000 steps of 200 files against 1.7 MB walked by path (= `git repack
    -adf`). `tips`: every commit they reach and all it holds, walked by libgit2 (`_native` PACK:
    revwalk and insert_walk, each tree read once), else commit by commit (insert_recur); `trees`:
    each tree and all below it (insert_recur: the paths, nothing added twice); `named`: (id, its
    path or None) pairs, as `paths` gives them (by id alone under TC_NATIVE=off: pygit2's public
    API takes no path). Objects are read from `src`; the delta search
    runs on every core (the pause of a roll-up inside a save, halved on 2 idle cores)."""
    pb = pygit2.PackBuilder(src)
    pb.set_threads(0)
    tips = [pygit2.Oid(hex=str(t)) for t in tips]
    native = _native.has(_native.PACK)
    if tips and native:
        try:
            _native.insert_walk(pb, src, tips)
        except _native.GitCallError as e:
            raise pygit2.GitError(str(e)) from None
    elif tips:
        seen: set = set()
        stack = list(tips)
        while stack:
            oid = stack.pop()
            if oid not in seen:
                seen.add(oid)
                pb.add_recur(oid)  # (a commit: itself, its tree and what is below it, named)
                stack.extend(src[oid].peel(pygit2.Commit).parent_ids)
    for t in trees:
        pb.add_recur(pygit2.Oid(hex=str(t)))
    if native:
        _native.insert_named(pb, named)
    else:  # (TC_NATIVE=off: pygit2's public API has no path to give)
        for oid, _path in named:
            pb.add(oid)
    return pb


GAP = 64  # packed commits holding nothing asked for, past which `paths` leaves a line


def paths(repo: pygit2.Repository, ids) -> list[tuple[pygit2.Oid, str | None]]:
    """`ids` (a roll-up's, the loose objects'), each with a path it has in the store's history
    (None: reached from nothing walked, such as what only the private index names). Walked from
    every ref through the commits: through the loose ones (newer than any pack), then down to GAP
    packed commits in a row that hold nothing asked for (neither themselves nor their tree: an
    older task's line costs GAP reads); in their trees, only into subtrees asked for (a tree not
    asked for was written before, and so was all below it). Raw objects and ids, not pygit2's (a
    pygit2 entry per file costs ~10x more). The time a roll-up spends here grows with what it
    packs, not with the history."""

    want = {oid.raw for oid in ids}
    out: dict[bytes, str | None] = {}
    read = repo.odb.read
    objects = os.path.join(repo.path, "objects")
    stack: list = []
    for name in repo.references:
        try:
            stack.append((pygit2.Oid(hex=str(repo.references[name].resolve().target)).raw, 0))
        except (pygit2.GitError, KeyError, ValueError):
            continue
    seen: set = set()
    while stack:
        raw, miss = stack.pop()
        if raw in seen:
            continue
        seen.add(raw)
        try:
            kind, data = read(pygit2.Oid(raw=raw))
        except (KeyError, ValueError, pygit2.GitError):
            continue
        if kind != pygit2.enums.ObjectType.COMMIT:
            continue
        head = data.split(b"\n\n", 1)[0].split(b"\n")
        tree = bytes.fromhex(head[0][5:45].decode()) if head[0].startswith(b"tree ") else None
        if raw in want or tree in want:
            miss = 0
            out.setdefault(raw, None)
            if tree is not None and tree in want and tree not in out:
                _tree_paths(read, tree, want, out, TREE_ENTRY)
        elif not os.path.exists(os.path.join(objects, raw[:1].hex(), raw[1:].hex())):  # (packed)
            miss += 1
            if miss > GAP:
                continue
        stack.extend((bytes.fromhex(ln[7:47].decode()), miss) for ln in head[1:] if ln.startswith(b"parent "))
    return [(oid, out.get(oid.raw)) for oid in ids]


def _tree_paths(read, root: bytes, want: set, out: dict, entry) -> None:
    trees = [(root, "")]
    while trees:
        tid, path = trees.pop()
        if tid in out:
            continue
        out[tid] = path or None
        try:
            data = read(pygit2.Oid(raw=tid))[1]
        except (KeyError, ValueError, pygit2.GitError):
            continue  # (what cannot be read here is the pack builder's to refuse)
        for mode, name, raw in entry.findall(data):
            if raw not in want or raw in out or mode == b"160000":  # (a gitlink: another repository's)
                continue
            sub = (path + "/" if path else "") + name.decode("utf-8", "surrogateescape")
            if mode == b"40000":
                trees.append((raw, sub))
            else:
                out[raw] = sub


def build(repo: pygit2.Repository, tips, hides=(), have=None) -> Pack:
    """The pack of what is reachable from `tips`, down to `hides` and to what `have` holds."""
    return Pack(repo, list(dict.fromkeys(str(t) for t in tips)), [str(h) for h in hides], have)


def check_connected(repo: pygit2.Repository, tips, hides=()) -> int:
    """Every object reachable from `tips` (down to the hidden commits) exists; returns the count.

    The pack builder reads each object's header while collecting, so a missing object fails
    here; nothing is written.
    """
    if not _native.has(_native.PACK):
        # the fallback walk reads commits and trees but only lists blobs: look each one up
        objs = reachable(repo, tips, hides)
        odb = repo.odb
        missing = next((o for o in objs if o not in odb), None)
        if missing is not None:
            raise pygit2.GitError(f"object not found - no match for id ({missing})")
        return len(objs)
    try:
        return _native.count_walk(repo, tips, hides)
    except _native.GitCallError as e:  # the same error type as the fallback's
        raise pygit2.GitError(str(e)) from None


def reachable(repo: pygit2.Repository, tips, hides=(), have=None) -> list:
    """Pure-pygit2 object walk (fallback): objects from tips, stopping at hidden commits' content
    and at objects `have(oid)` says the receiver already holds."""
    seen: set = set()
    stop: set = set()
    for h in hides:
        stop.add(h)
        hidden = repo.get(h)
        if hidden is not None and hidden.type == pygit2.enums.ObjectType.COMMIT:
            stop.add(hidden.peel(pygit2.Commit).tree_id)
    out = []

    def tree(tid):
        stack = [tid]
        while stack:
            t = stack.pop()
            if t in seen or t in stop or (have and have(t)):
                continue
            seen.add(t)
            out.append(t)
            for e in repo[t]:
                if e.type_str == "tree":
                    stack.append(e.id)
                elif e.type_str == "blob" and e.id not in seen and e.id not in stop and not (have and have(e.id)):
                    seen.add(e.id)
                    out.append(e.id)

    stack = [pygit2.Oid(hex=str(t)) for t in tips]
    while stack:
        c = stack.pop()
        if c in seen or c in stop or (have and have(c)):
            continue
        seen.add(c)
        obj = repo[c]
        out.append(c)
        if obj.type == pygit2.enums.ObjectType.COMMIT:
            commit = obj.peel(pygit2.Commit)
            tree(commit.tree_id)
            stack.extend(commit.parent_ids)
    return out



def chunks(path: str | os.PathLike, offset: int = 0):
    """The bytes of a file from `offset`, in CHUNK pieces."""
    with open(path, "rb") as f:
        f.seek(offset)
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            yield b


def index_pack(qrepo: pygit2.Repository, path: Path, offset: int) -> int:
    """Index the pack at `path[offset:]` into `qrepo`'s objects/pack (thin bases are looked up
    through its odb, alternates included). Returns the object count. Raises BadInput when the
    pack is corrupt or truncated."""
    if not _native.has(_native.INDEXER):
        return _index_pack_cli(qrepo, path, offset)
    try:
        return _native.write_pack(qrepo, chunks(path, offset))
    except _native.GitCallError as e:
        _no_space(e, qrepo)
        raise BadInput(f"{path}: the pack is corrupt or truncated ({e})") from None


def _no_space(e, qrepo) -> None:
    """A full disk (or quota) while indexing is that, not a corrupt pack: raise its SystemFault."""
    fault = validate.as_tc_error(e) or validate.space_fault(qrepo.path)
    if isinstance(fault, validate.SystemFault) and fault.code == "no_space":
        raise fault from e


def _index_pack_cli(qrepo, path: Path, offset: int) -> int:
    git = shutil.which("git")
    if not git:
        raise Unavailable("reading a bundle needs libgit2's indexer (pygit2 1.21 wheel) or the git CLI; neither found")
    env = child_env()
    with open(path, "rb") as f:
        f.seek(offset)
        r = subprocess.run([git, f"--git-dir={qrepo.path}", "index-pack", "--stdin", "--fix-thin"],
                           stdin=f, capture_output=True, env=env)
    if r.returncode:
        why = r.stderr.decode(errors="replace").strip()
        _no_space(OSError(why), qrepo)
        raise BadInput(f"{path}: the pack is corrupt or truncated ({why})")
    with open(path, "rb") as f:
        f.seek(offset + 8)
        return int.from_bytes(f.read(4), "big")
