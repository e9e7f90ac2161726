"""Workspace -> tree, through the private index used as a stat cache.

A snapshot runs while builds, tests and package managers keep creating and deleting files, so
it is split in two (issue 17):

1. *Find* what may have changed. libgit2's index-to-workdir diff compares each file's stat data
   with its index entry (a no-change save costs one lstat per file). A file that vanishes while
   libgit2 looks at it makes the diff fail; it is retried, and if the workspace will not hold
   still (or a directory is unreadable) a Python walk with the same stat comparison finds the
   candidates instead, tolerating every error on its own.
2. *Read* each candidate ONCE, in Python, into a buffer: lstat before and after (a change in
   between means read again, a few times; a file that never holds still keeps its previous
   entry and is listed as `unstable`). That same buffer goes through the policy's content
   check and becomes the blob, and the index entry carries the stat data taken *before* the
   read, so a later change shows as dirty on the next save. What is scanned is what is stored.

`write_tree()` runs before `index.write()` so the index keeps its TREE cache extension (the
other order makes the next save 4-5x slower).
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import stat as stat_mod
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pygit2
from pygit2.enums import DiffOption, FileMode

from ..base import fsutil
from ..base.fsutil import atomic_write
from ..base.refs import STORE_DIRNAME
from ..base.settings import current
from ..storage import _native, handles, indexfile, mempack, packwriter, savepack
from ..storage.trees import INEXACT, patch_tree
from . import pathsafe, scan
from .journal import index_marker
from .policy import Left, Policy, exclude_file

MISSES = 8  # odb_has misses in a row before a snapshot stops looking (see _Run.odb_has)
READ_ATTEMPTS = 4  # reads of a file whose stat data moves while it is read, before it is `unstable`
DIFF_ATTEMPTS = 3  # libgit2 diffs that fail on a vanishing file, before the Python walk takes over
_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
_NONE = object()


@dataclass
class Snapshot:
    tree: pygit2.Oid
    left: list[Left] = field(default_factory=list)  # metadata-only paths
    nested: dict[str, str | None] = field(default_factory=dict)  # nested repo path -> its HEAD
    changed: int = 0  # paths whose index entry was added, updated or removed
    seconds: float = 0.0
    partial: bool = False  # only the given paths were refreshed (`left`/`nested` cover just those)
    unstable: list[str] = field(default_factory=list)  # kept at their previous version: never held still
    # entries this snapshot indexed "racily clean" (zero mtime: read again next time): path -> the
    # file's newest timestamp (ns); the change journal refreshes them once that is RACY_NS old
    smudged: dict[str, int] = field(default_factory=dict)
    scan: str = "diff"  # how candidates were found: diff | walk | paths
    base: pygit2.Oid | None = None  # the tree `tree` was built from by patch_tree, with `edits`
    edits: dict | None = None  # path -> (blob id, mode) or None, as patch_tree applied them
    # path of each edit -> the raw record (mode, raw id) `base` held there, or None: set only when
    # patch_tree rebuilt `tree` from `base` keeping every other record byte for byte (no mode to
    # canonicalise), so `tree` is exactly `base` with `edits` (trees.tree_deltas relies on it)
    base_entries: dict | None = None

    def note(self, cap: int = 500) -> dict:
        """What the commit's note records about paths that are not file content."""
        left = [x.as_dict() for x in self.left[:cap]]
        out: dict[str, Any] = {"left": left,
                               "nested": [{"path": p, "head": h} for p, h in sorted(self.nested.items())][:cap]}
        if len(self.left) > cap:
            out["left_omitted"] = len(self.left) - cap
        if self.unstable:
            out["unstable"] = sorted(self.unstable)[:cap]
            if len(self.unstable) > cap:
                out["unstable_omitted"] = len(self.unstable) - cap
        return out


def take(repo: pygit2.Repository, policy: Policy, progress=None, paths=None, recheck=None) -> Snapshot:
    """Bring the private index up to date with the workspace and write its tree.

    The first snapshot (empty private index: every file is new) writes its objects into memory
    and then as one pack (tc_git/storage/mempack.py), on a private handle of the store so the in-memory
    backend goes away with it; later snapshots write their new blobs and trees as one small pack
    (savepack.py; a handful of objects loose).
    `paths` (workspace paths, files or directories) refreshes only those entries: after a
    restore only the paths it wrote or deleted can differ from the snapshot taken just before.
    `recheck` (some of `paths`): entries indexed racily clean by an earlier snapshot; one whose
    content is unchanged only gets its stat data back (no edit, not counted as changed).
    """
    trusted = handles.trusted(repo)
    if not trusted:
        # a deferred index write that never happened (a crash, handles.py): the index on disk
        # may be older than the trees committed since. Nothing of it is trusted: full scan.
        _BASE.pop(repo.path, None)
        repo.index.read(True)
        paths = None
    try:
        snap = _take_any(repo, policy, progress, paths, force_write=not trusted, recheck=recheck)
    except BaseException:
        # the repository handle outlives this call (store.py keeps it open across saves): entries
        # changed in memory by a snapshot that failed must not leak into the next one
        _BASE.pop(repo.path, None)
        handles.forget(repo)  # (an unwritten index of earlier saves too: its marker stays, see above)
        try:
            repo.index.read(True)
        except (pygit2.GitError, OSError):
            pass
        raise
    marker = index_marker(repo.path)
    if marker is not None:
        _BASE[repo.path] = (marker, snap.tree)
    return snap


# The tree each store's index stood for when this process last snapshotted it, by the index
# file's identity (journal.index_marker; any writer replaces the file). The next snapshot then
# builds its tree from that one, rewriting only the directories on the changed paths:
# write_tree() re-reads every tree of the result to rebuild the index's tree cache (~25 ms at
# 50k files, ~80 ms under load) even when one file changed.
_BASE: dict[str, tuple[tuple, pygit2.Oid]] = {}


def _base_tree(repo: pygit2.Repository) -> pygit2.Oid | None:
    known = _BASE.get(repo.path)
    if known is None or handles.canon(known[0]) != index_marker(repo.path):
        return None
    return known[1]


def _take_any(repo: pygit2.Repository, policy: Policy, progress, paths, force_write: bool = False,
              recheck=None) -> Snapshot:
    idx = repo.index
    idx.read(False)
    if len(idx) == 0 and packwriter.available():
        # first snapshot: zlib'd blobs into one pack file, no delta search, bounded memory
        before = handles.pack_stamp(repo.path)  # (its temporary file changes the directory too)
        writer = packwriter.PackWriter(repo)
        try:
            fence = getattr(_FENCE, "ns", None)
            if fence is not None:  # (a restore's after-snapshot took its own)
                snap = _take(repo, policy, progress, None, writer=writer)
            else:
                # A fresh workspace's files were mostly written just now: against the clock's racy
                # window (RACY_NS) every one was smudged and read again by every later full diff (a
                # journal save never refreshes them: resume with the journal cost 644 ms at 10k
                # files instead of 34). Against a fence only the files changed since it began are.
                with fenced(fsutil.fs_fence(os.path.join(repo.path, "tc"), repo.workdir, "snapshot-fence")):
                    snap = _take(repo, policy, progress, None, writer=writer)
            after = handles.pack_stamp(repo.path)
            if writer.finished and before is not None and after is not None:
                # a pack added, none removed: the store's handle stays open for the next call
                # (it reopened and parsed the new index again after every first snapshot: the
                # first save, an import's restore into an empty workspace)
                handles.own_pack_change(repo.path, before, after)
            return snap
        finally:
            writer.close()
    if len(idx) == 0 and mempack.available() and _fits_in_memory(repo.workdir):
        with mempack.bulk_writes(repo) as (work, pack):
            return _take(work, policy, progress, pack)
    # judged before the diff: one that refreshes stat data writes the index itself (same content)
    base = _base_tree(repo)
    # a later save's new blobs and trees: one small pack, not a loose file each (savepack.py)
    objects = savepack.SavePack(repo) if savepack.available() else None
    try:
        if paths is not None:  # [] too: nothing changed (the change journal says so)
            return _take(repo, policy, progress, None, paths=list(paths), base=base, force_write=force_write,
                         objects=objects, recheck=recheck)
        # (no fence here, unlike a first snapshot: writing it changes the store even when the
        # save is then refused, test_bad_input; the entries it smudges are refreshed by the next
        # scan, or carried by the journal)
        return _take(repo, policy, progress, None, base=base, force_write=force_write, objects=objects)
    finally:
        if objects is not None:
            objects.close()


def _fits_in_memory(root: str) -> bool:
    """Whether a first snapshot may hold its objects in memory: the workspace's regular files
    add up to at most the `mempack_max_bytes` setting (64 MiB). Larger trees write loose objects, so memory
    stays bounded whatever the workspace holds; the walk stops as soon as the budget is spent
    (ignored directories are counted too, except the usual heavy ones)."""
    budget = current().mempack_max_bytes
    skip = {".git", STORE_DIRNAME, "node_modules", ".venv", "venv", "__pycache__"}
    stack = [root]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in skip:
                            stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        budget -= entry.stat(follow_symlinks=False).st_size
                        if budget < 0:
                            return False
                except OSError:
                    continue
    return True


# --------------------------------------------------------------------------- the snapshot
class _Run:
    """One snapshot: the candidates found, what became of each."""

    def __init__(self, repo: pygit2.Repository, policy: Policy, progress):
        self.repo, self.policy, self.progress = repo, policy, progress
        self.root = repo.workdir
        self.idx = repo.index
        self.left: dict[str, Left] = {}
        self.nested: dict[str, str | None] = {}
        self.unstable: list[str] = []
        self.real_dirs: dict[str, bool] = {}  # parent path -> a real directory (no link) all the way
        self.changed = 0
        self.done = 0
        self.writer = None  # packwriter.PackWriter during a first snapshot
        self.objects: savepack.SavePack | None = None  # a later snapshot's new objects (savepack.py)
        # blobs stored in `objects`, indexed once it is in place (libgit2 checks that an entry's blob
        # exists): path -> (blob id, stat)
        self.later: dict[str, tuple[pygit2.Oid, Any]] = {}
        self.smudged: dict[str, int] = {}  # see Snapshot.smudged
        self.recheck: set[str] = set()  # see take()
        self.restat = 0  # entries whose stat data alone was refreshed
        # paths waiting for the writer's pack, and for each a record of its raw id and packed stat
        # (84 bytes in one buffer: tuples of objects cost ~300 bytes a file, 15 MiB at 50k)
        self.pending: list[str] = []
        self.pending_recs = bytearray()
        self._stats: dict[str, tuple] | None = None
        self._dirs: set[str] | None = None
        self._dir_memo: dict[str, bool] = {}  # is_tracked_dir answers (as the index was when asked)
        self.edits: dict[str, tuple | None] = {}  # path -> (blob id, mode) added, or None removed
        self.force_write = False  # write the index even if nothing changed (it replaces an untrusted one)
        self.idx_current = False  # the index file on disk is the one in memory (a first snapshot's)
        self._path_at = _native.index_path_reader(self.idx)  # i -> raw path of the i-th entry
        self._odb: pygit2.Odb | None = None
        self._misses = 0  # odb_has misses in a row
        self.written: Written | None = getattr(_TRUST, "written", None)  # see `trusting`
        self.trusted = 0  # files taken from `written`, unread

    # ------------------------------------------------------------------ finding candidates
    def diff_candidates(self) -> list[str] | None:
        """Paths the stat cache says may differ, or None when libgit2 cannot get through the
        workspace (a file or directory vanishing under it, an unreadable directory)."""
        flags = (DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
                 | DiffOption.INCLUDE_TYPECHANGE | DiffOption.INCLUDE_UNREADABLE | DiffOption.UPDATE_INDEX)
        for attempt in range(DIFF_ATTEMPTS):
            try:
                self.idx.read(False)
                # on every core (scan.py)
                return scan.changed_paths(self.repo, self.idx, flags, unwritten=handles.is_dirty(self.repo))
            except (pygit2.GitError, OSError) as e:
                if "ermission denied" in str(e):
                    return None  # an unreadable directory stays unreadable: walk and report it
                time.sleep(0.005 * (attempt + 1))
        return None

    def index_stats(self) -> dict[str, tuple]:
        """path -> (mode, size, mtime s, mtime ns, ctime s, ctime ns, ino) of every index entry.
        Only the whole-workspace walk needs them all; a walk of given paths looks entries up one
        by one (`entry_stat`, `tracked_under`): materializing 50k entries costs ~0.15 s."""
        if self._stats is None:
            self._stats = _native.index_stats(self.idx)
        return self._stats

    def entry_stat(self, rel: str) -> tuple | None:
        if self._stats is not None:
            return self._stats.get(rel)
        return _native.index_entry_stat(self.idx, rel)

    def _lower_bound(self, key: bytes) -> int:
        """The first entry whose path is not below `key`: libgit2 keeps the entries sorted by
        their bytes (core.ignorecase is false in every store), so a bisection finds it."""
        lo, hi = 0, len(self.idx)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._path_at(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def tracked_under(self, prefix: str) -> list[str]:
        """Index paths that start with `prefix` (a contiguous run of the sorted entries)."""
        key = prefix.encode("utf-8", "surrogateescape")
        i, n = self._lower_bound(key), len(self.idx)
        out = []
        while i < n:
            p = self._path_at(i)
            if not p.startswith(key):
                break
            out.append(p.decode("utf-8", "surrogateescape"))
            i += 1
        return out

    def is_tracked_dir(self, rel: str) -> bool:
        """Whether the index holds anything under directory `rel`."""
        if self._dirs is not None or self._stats is not None:
            return rel in self.tracked_dirs()
        known = self._dir_memo.get(rel)
        if known is None:
            key = (rel + "/").encode("utf-8", "surrogateescape")
            i = self._lower_bound(key)
            known = i < len(self.idx) and self._path_at(i).startswith(key)
            self._dir_memo[rel] = known
        return known

    def tracked_dirs(self) -> set[str]:
        if self._dirs is None:
            self._dirs = dirs_of(self.index_stats())
        return self._dirs

    def walk_candidates(self, starts=("",)) -> list[str]:
        """The same stat comparison as the diff, in Python, under each of `starts` (workspace
        paths; "" is the whole workspace). Never fails: a path that vanishes is a candidate
        (its entry goes), an unreadable directory is left out and reported."""
        out: list[str] = []
        seen: set[str] = set()
        for start in starts:
            start = start.strip("/")
            if start and (start in seen or start.split("/")[0] == STORE_DIRNAME or ".git" in start.split("/")):
                continue
            if start:
                cached = self.entry_stat(start)
                tracked = cached is not None
                # a path the index holds as a file: every directory above it is tracked, so none is
                # a nested repository here (_nested_parent: None), without a bisection of the index
                # for each (~30 us a path, through ctypes)
                outer = None if tracked else self._nested_parent(start)
                if outer is not None:  # inside a nested repository: only its HEAD is recorded
                    out.append(outer + "/")
                    continue
                full = os.path.join(self.root, start)
                try:
                    st = os.lstat(full)
                except OSError:
                    st = None
                if st is not None and stat_mod.S_ISDIR(st.st_mode):
                    if tracked:  # a file that became a directory
                        out.append(start)
                    prefix = start + "/"
                    inside = self.is_tracked_dir(start)
                    if inside or not _ignored(self.repo, prefix):
                        if not inside and os.path.lexists(os.path.join(full, ".git")):
                            out.append(prefix)
                        else:
                            self._walk_dir(start, out, seen)
                elif cached is not None and st is not None and _same_stat(cached, st):
                    pass  # as stored (a notification of a write that changed nothing, or of the restore's own)
                elif tracked or (st is not None and not _ignored(self.repo, start)):
                    out.append(start)
                seen.add(start)
                # whatever it is now, what the index holds under it is a candidate (a directory
                # that was moved away or deleted leaves only its own event). Nothing is under a
                # file the index holds (libgit2 never keeps a file and entries below it: adding
                # one removes the other), unless it is a directory now
                under = [] if tracked and not (st is not None and stat_mod.S_ISDIR(st.st_mode)) \
                    else self.tracked_under(start + "/")
                out += [p for p in under if p not in seen]
                seen.update(under)
            else:
                stats = self.index_stats()  # the whole workspace: every entry is looked at
                self._walk_dir("", out, seen)
                out += [p for p in stats if p not in seen]
        return out

    def _nested_parent(self, rel: str) -> str | None:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if not self.is_tracked_dir(d) and os.path.lexists(os.path.join(self.root, d, ".git")):
                return d
        return None

    def _walk_dir(self, top: str, out: list, seen: set) -> None:
        stack = [top]
        while stack:
            rel_dir = stack.pop()
            full = os.path.join(self.root, rel_dir) if rel_dir else self.root
            try:
                it = os.scandir(full)
            except OSError as e:
                if e.errno in _GONE:
                    continue  # vanished: its entries are candidates through `stats`
                self.left[rel_dir] = Left(rel_dir, "unreadable", f"directory not readable: {e.strerror}")
                for p in self.tracked_under(rel_dir + "/" if rel_dir else ""):
                    # cannot tell what it holds now: out of the tree, reported
                    seen.add(p)
                    self.left.setdefault(p, Left(p, "unreadable", "in an unreadable directory"))
                continue
            with it:
                entries = list(it)
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if rel == ".git" or (not rel_dir and entry.name == STORE_DIRNAME):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # vanished between the listing and the stat: as if never listed
                if stat_mod.S_ISDIR(st.st_mode):
                    if self.entry_stat(rel) is not None:  # a file that became a directory
                        out.append(rel)
                        seen.add(rel)
                    tracked = self.is_tracked_dir(rel)
                    if not tracked and _ignored(self.repo, rel + "/"):
                        continue
                    if not tracked and os.path.lexists(os.path.join(entry.path, ".git")):
                        out.append(rel + "/")  # nested repository, as the diff names it
                        continue
                    stack.append(rel)
                    continue
                seen.add(rel)
                cached = self.entry_stat(rel)
                if cached is None:
                    if not _ignored(self.repo, rel):
                        out.append(rel)
                elif not _same_stat(cached, st):
                    out.append(rel)

    # ------------------------------------------------------------------ one path
    def refresh(self, rel: str) -> None:
        """Bring `rel`'s index entry in line with the file as it is: read once, scanned and
        stored from the same buffer."""
        self.done += 1
        if self.progress and self.done % 256 == 0:
            self.progress(self.done, None, f"stored {self.done} changed paths")
        if rel.endswith("/"):  # a directory libgit2 will not descend: nested repo / submodule
            self.nested[rel.rstrip("/")] = _nested_head(os.path.join(self.root, rel))
            return
        full = os.path.join(self.root, rel)
        for attempt in range(READ_ATTEMPTS):
            if attempt:
                time.sleep(0.002 * attempt)
            try:
                st = os.lstat(full)
            except OSError as e:
                if e.errno in _GONE:
                    return self._drop(rel)
                return self._leave(rel, Left(rel, "unreadable", f"stat failed: {e.strerror}"))
            if self.writer is None and "/" in rel and not self._real_parent(rel.rpartition("/")[0]):
                # under a directory that became a link: the path is not in the workspace any more
                # (lstat follows links before the last name: it would read the link's target, even
                # outside the workspace, and keep it under this name)
                return self._drop(rel)
            if stat_mod.S_ISDIR(st.st_mode):
                # turned into a directory (or was one the walk named): its entry goes, its files
                # are candidates of their own
                self._drop(rel)
                for p in self.walk_candidates((rel,)):
                    if p != rel:
                        self.refresh(p)
                return
            verdict = self.policy_path(rel, st)
            if verdict is not None:
                return self._leave(rel, verdict)
            if self.written is not None:
                known = self.written.lookup(rel, st)
                if known is not None:
                    return self._known(rel, st, known[0])
            try:
                data = _read_link(full, st) if stat_mod.S_ISLNK(st.st_mode) else _read_once(full, st)
            except OSError as e:
                if e.errno in _GONE:
                    continue  # vanished or replaced while opened: look again
                if e.errno in (errno.EACCES, errno.EPERM):
                    return self._leave(rel, Left(rel, "unreadable", f"read failed: {e.strerror}",
                                                 st.st_size, st.st_mtime))
                continue
            if data is None:
                continue  # changed while read
            verdict = self.policy_content(rel, data)
            if verdict is not None:
                return self._leave(rel, verdict)
            return self._store(rel, st, data)
        # never held still: the previous version (if any) stays, and the save says so
        self.unstable.append(rel)

    def _real_parent(self, d: str) -> bool:
        """Is `d` a directory of the workspace itself, no link on the way (lstat each name once
        per snapshot)? A first snapshot's candidates need no check: libgit2's walk never
        enters a link."""
        ok = self.real_dirs.get(d)
        if ok is None:
            parent, _, _name = d.rpartition("/")
            try:
                ok = (not parent or self._real_parent(parent)) and \
                    stat_mod.S_ISDIR(os.lstat(os.path.join(self.root, d)).st_mode)
            except OSError:
                ok = False
            self.real_dirs[d] = ok
        return ok

    def policy_path(self, rel: str, st) -> Left | None:
        return self.policy.classify_path(self.root, rel, st)  # links: None (stored as links)

    def policy_content(self, rel: str, data: bytes) -> Left | None:
        return self.policy.classify_content(rel, data)

    def _store(self, rel: str, st, data: bytes) -> None:
        try:
            if rel in self.recheck and self._restat(rel, st, data):
                return
            if self.writer is not None:  # indexed once the pack is in place (libgit2 checks the blob exists)
                # packed: a stat_result costs ~600 B, 30 MiB at 50k files (issue 14's memory bound)
                self.pending_recs += self.writer.add_blob(data).raw + _LiteStat.pack(st)
                self.pending.append(rel)
            elif self.objects is not None:
                oid = pygit2.hash(data)
                if self.odb_has(oid):  # (as below) indexed now: its blob exists
                    self._index_add(rel, oid, st)
                else:
                    self.objects.add_blob(data, raw=oid.raw)
                    self.later[rel] = (oid, st)
                self.edits[rel] = (oid, _git_mode(st))
            else:
                # content the store already holds (every file a restore just wrote, a file changed
                # back) is not written again: create_blob would only freshen it (~0.2-0.6 ms a file)
                oid = pygit2.hash(data)
                if not self.odb_has(oid):
                    oid = self.repo.create_blob(data)
                self._index_add(rel, oid, st)
                self.edits[rel] = (oid, _git_mode(st))
            self.changed += 1
        except (pygit2.GitError, ValueError, OverflowError) as e:  # e.g. a name git cannot store
            self._leave(rel, Left(rel, "special", f"cannot be stored: {e}", st.st_size, st.st_mtime))

    def _known(self, rel: str, st, oid: pygit2.Oid) -> None:
        """`rel` holds blob `oid` of the store (trusting): indexed as _store would, unread."""
        self.trusted += 1
        try:
            if self.writer is not None:
                self.pending_recs += oid.raw + _LiteStat.pack(st)  # (the blob is in the store's packs)
                self.pending.append(rel)
            else:
                self._index_add(rel, oid, st)
                self.edits[rel] = (oid, _git_mode(st))
            self.changed += 1
        except (pygit2.GitError, ValueError, OverflowError) as e:  # e.g. a name git cannot store
            self._leave(rel, Left(rel, "special", f"cannot be stored: {e}", st.st_size, st.st_mtime))

    def _restat(self, rel: str, st, data: bytes) -> bool:
        """An entry indexed racily clean whose file still holds what it names: its stat data back."""
        try:
            e = self.idx[rel]
        except (KeyError, ValueError):
            return False
        if e.mode != _git_mode(st) or e.id != pygit2.hash(data):
            return False
        self._index_add(rel, e.id, st)
        self.restat += 1
        return True

    def _index_add(self, rel: str, oid: pygit2.Oid, st) -> None:
        if _index_add(self.idx, rel, oid, st):
            self.smudged[rel] = max(st.st_mtime_ns, st.st_ctime_ns)

    def odb_has(self, oid: pygit2.Oid) -> bool:
        # a miss makes libgit2 rescan objects/pack (getdents, ~30 us of CPU, ~0.3 ms under load):
        # after MISSES misses in a row this run's content is taken as new (a duplicate in the
        # save's pack is harmless; compress drops it)
        if self._misses >= MISSES:
            return False
        if self._odb is None:
            self._odb = self.repo.odb
        if self._odb.exists(oid):
            self._misses = 0
            return True
        self._misses += 1
        return False

    def _drop(self, rel: str) -> None:
        stored = self.later.pop(rel, None) is not None  # stored earlier in this run, not indexed yet
        if rel in self.idx:
            self.idx.remove(rel)
            stored = True
        if stored:
            self.edits[rel] = None
            self.changed += 1

    def _leave(self, rel: str, verdict: Left) -> None:
        # a file stored before that now holds a credential (or grew past the cap, or cannot be
        # read) leaves the tree: its old version is not kept silently
        self.left[rel] = verdict
        self._drop(rel)

    def finish(self, pack, t0: float, scan: str, partial: bool, base: pygit2.Oid | None = None) -> Snapshot:
        for rel in [p for p in self.left if p in self.idx]:
            self.idx.remove(rel)
            self.edits[rel] = None
        if self.writer is not None:
            return self._finish_first(t0, scan, partial)
        tree = None
        base_entries = None
        if base is not None and pack is None:
            known = getattr(_EXPECT, "known", None)
            if known is not None and known[0] == base and known[1] == self.edits:
                tree = known[2]  # the caller's (restore.apply: its target's), see `expecting`
            else:
                # None: a case it leaves to write_tree
                olds: dict | None = {}
                tree = patch_tree(self.repo, base, self.edits, objects=self.objects, olds=olds)
                base_entries = olds
        if self.objects is not None:
            self.objects.finish()  # blobs and trees in place before the index entries name them
            later, self.later = self.later, {}
            for rel, (oid, st) in later.items():
                try:
                    self._index_add(rel, oid, st)
                except (pygit2.GitError, ValueError, OverflowError) as e:  # a name git cannot store
                    self._leave(rel, Left(rel, "special", f"cannot be stored: {e}", st.st_size, st.st_mtime))
                    tree = None  # the patched tree named it: the index's tree instead
        patched = tree is not None
        if not patched or base_entries is None or base_entries.get(INEXACT):
            base_entries = None
        if tree is None:
            tree = self.idx.write_tree()
        if pack is not None:
            pack.flush()  # objects on disk before the index that names them
        if self.changed or self.left or pack is not None or self.force_write or self.restat:
            # Nothing changed: the index is as it was read (a refresh of given paths), or as the
            # diff left it, which writes the index itself when it refreshed stat data
            # (DiffOption.UPDATE_INDEX). Writing 50k entries back costs ~30-45 ms, and the
            # journal's marker stays valid.
            if pack is None and handles.may_defer(self.repo):
                handles.mark_dirty(self.repo)  # written after the answer, under the same lock (handles.py)
            else:
                self.idx.write()
                if self.force_write:
                    handles.clear_marker(self.repo)
        return Snapshot(tree, sorted(self.left.values(), key=lambda x: x.path), self.nested, self.changed,
                        time.perf_counter() - t0, partial=partial, unstable=sorted(self.unstable), scan=scan,
                        base=base if patched else None, edits=self.edits if patched else None,
                        smudged=self.smudged, base_entries=base_entries)

    def _finish_first(self, t0: float, scan: str, partial: bool) -> Snapshot:
        """A first snapshot's index and tree: every entry names a blob of the writer's pack.
        Its trees go into that pack too (`_index_file_first`), written before the pack is put
        in place; a name git might refuse leaves the trees to libgit2 (`write_tree`, after the
        pack is in place: libgit2 checks that every entry names an object)."""
        tree = self._index_file_first(trees=True)
        writer = self.writer
        assert writer is not None
        if tree is None:
            if not writer.finished:
                writer.finish()  # blobs in the object database before libgit2 is given their ids
            tree = self._index_file_first(trees=False)
        if tree is None:
            recs = memoryview(self.pending_recs)
            for i, rel in enumerate(self.pending):
                rec = recs[i * _PENDING:(i + 1) * _PENDING]
                oid, st = pygit2.Oid(raw=bytes(rec[:20])), _LiteStat.unpack(rec[20:])
                if rel not in self.left:
                    try:
                        _index_add(self.idx, rel, oid, st)
                    except (pygit2.GitError, ValueError, OverflowError) as e:  # a name git cannot store
                        self.left[rel] = Left(rel, "special", f"cannot be stored: {e}", st.st_size, st.st_mtime)
            tree = self.idx.write_tree()
        if not self.idx_current:
            self.idx.write()
        handles.clear_marker(self.repo)
        return Snapshot(tree, sorted(self.left.values(), key=lambda x: x.path), self.nested, self.changed,
                        time.perf_counter() - t0, partial=partial, unstable=sorted(self.unstable), scan=scan)

    def _index_file_first(self, trees: bool) -> pygit2.Oid | None:
        """The first snapshot's index written as one file (indexfile.py: ~2 us an entry where
        adding them one by one cost ~20-50 us) and its tree; None (an empty index again) when
        it leaves the tree to libgit2 or libgit2 will not write a tree of it (a name it would
        not have added): the caller then adds the entries one by one, leaving out those it
        refuses.

        `trees`: the trees are built here and written into the writer's pack, and the index gets
        their cache (TREE extension); libgit2's `write_tree` wrote each of them as a loose
        object (~550 at 50k files: ~2 ms each, 0.2 s of a 10k-file first save under cProfile)
        and read every entry's object header (git_object__is_valid) to confirm ids the writer
        had just produced, paging the whole new pack into the process. Only for names no git
        would refuse (`_plain`): anything else takes libgit2's route, whose verdict stands. No
        object check is switched off (it is a process-wide libgit2 option: another workspace's
        save on another thread of the server would run without it)."""
        if not _native.has(_native.INDEX_STAT):
            return None  # entries without stat data: the one-by-one route says so
        recs = memoryview(self.pending_recs)
        order = []
        plain = trees and os.name == "posix"  # (Windows: libgit2 refuses more names there)
        for i, rel in enumerate(self.pending):
            if rel in self.left:
                continue
            path = rel.encode("utf-8", "surrogateescape")
            if plain and _RISKY_PATH.search(path) and not _plain(path):
                plain = False
            order.append((path, i))
        if trees and not plain:
            return None
        order.sort()

        def entries():  # one at a time, in path order: only the (path, position) list is held
            for path, i in order:
                rec = recs[i * _PENDING:(i + 1) * _PENDING]
                st = _LiteStat.unpack(rec[20:])
                yield path, bytes(rec[:20]), _git_mode(st), st

        writer = self.writer
        assert writer is not None
        try:
            root = indexfile.write(os.path.join(self.repo.path, "index"), len(order), entries(), RACY_NS,
                                   fence_ns=getattr(_FENCE, "ns", None), tree_sink=writer.add_tree if trees else None,
                                   before_replace=writer.finish if trees else None)
            order.clear()
            self.idx.read(True)
            if root is not None:
                self.idx_current = True  # the file on disk is this index: no second write
                return pygit2.Oid(raw=root)
            return self.idx.write_tree()
        except (pygit2.GitError, ValueError, OSError):
            if writer.failed:
                raise  # the pack did not go in place: nothing of this snapshot is stored
            self.idx.clear()
            return None


# A path whose every component may need a closer look (a dot file, `~`, `\`, `:`, non-ASCII, an
# empty component): the others hold only names no git refuses.
_RISKY_PATH = re.compile(rb"(?:^|/)(?:\.|/|$)|[~\\:\x00\x80-\xff]")


def _plain(path: bytes) -> bool:
    """Whether every component of `path` is a name that git and libgit2 accept in a tree on
    any platform (pathsafe.check_tree_name, git's verify_path with NTFS and HFS+ rules, is a
    superset of what libgit2 refuses; a `\\` is left to libgit2 too)."""
    parts = path.split(b"/")
    return all(not pathsafe.check_tree_name(p, at_root=not k) and b"\\" not in p for k, p in enumerate(parts))


def _take(repo: pygit2.Repository, policy: Policy, progress, pack, paths=None, writer=None,
          base: pygit2.Oid | None = None, force_write: bool = False,
          objects: savepack.SavePack | None = None, recheck=None) -> Snapshot:
    t0 = time.perf_counter()
    run = _Run(repo, policy, progress)
    run.writer = writer
    run.objects = objects
    run.recheck = set(recheck or ())
    run.force_write = force_write
    cands: list[str] | None
    if paths is not None:
        run.idx.read(False)
        cands, scan = run.walk_candidates(paths), "paths"
    else:
        cands, scan = run.diff_candidates(), "diff"
        if cands is None:
            if handles.is_dirty(repo):  # the one on disk is older: the walk below covers it all
                handles.forget(repo)
                run.force_write = True
            run.idx.read(True)  # start from the index on disk, not a half-refreshed one
            cands, scan = run.walk_candidates(), "walk"
    with policy.one_allowlist():
        for rel in dict.fromkeys(cands):
            run.refresh(rel)
    cands = None  # (a first snapshot's 50k names: not held through finish's peak)
    return run.finish(pack, t0, scan, partial=paths is not None, base=base)


# --------------------------------------------------------------------------- helpers
# Windows has neither O_NOFOLLOW nor O_NONBLOCK: there the inode check after the open and the
# lstat after the read catch a file swapped for a link meanwhile (links are never read as files)
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0))


def _read_once(full: str, st) -> bytes | None:
    """The file's bytes, if it held still while read (same inode, size, mtime and ctime as
    `st` before and after); None if it moved. Never follows a link, never blocks on a FIFO
    swapped in since the lstat."""
    fd = os.open(full, _READ_FLAGS)
    try:
        fst = os.fstat(fd)
        if fst.st_ino != st.st_ino or not stat_mod.S_ISREG(fst.st_mode):
            return None
        chunks, size = [], 0
        while True:
            want = max(1 << 16, min(st.st_size - size + 1, 1 << 26))
            b = os.read(fd, want)
            if not b:
                break
            chunks.append(b)
            size += len(b)
            if len(b) < want and size == st.st_size:
                break  # a short read of a regular file is its end: no second read to see EOF
                # (a file that grew meanwhile shows in the lstat below)
    finally:
        os.close(fd)
    after = os.lstat(full)
    if size != st.st_size or not _unmoved(st, after):
        return None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_link(full: str, st) -> bytes | None:
    target = os.readlink(os.fsencode(full))
    return target if _unmoved(st, os.lstat(full)) else None


def _unmoved(a, b) -> bool:
    return (a.st_ino == b.st_ino and a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns
            and a.st_ctime_ns == b.st_ctime_ns and a.st_mode == b.st_mode)


def _git_mode(st) -> int:
    if stat_mod.S_ISLNK(st.st_mode):
        return FileMode.LINK
    return FileMode.BLOB_EXECUTABLE if st.st_mode & 0o100 else FileMode.BLOB


def _same_stat(cached: tuple, st) -> bool:
    """git's stat-cache comparison (what libgit2's diff does before it would hash)."""
    mode, size, ms, mns, cs, cns, ino = cached
    return (mode == _git_mode(st) and size == st.st_size & 0xFFFFFFFF
            and ms == _native.entry_seconds(st.st_mtime_ns) and mns == st.st_mtime_ns % 1_000_000_000
            and cs == _native.entry_seconds(st.st_ctime_ns) and cns == st.st_ctime_ns % 1_000_000_000
            and ino == st.st_ino & 0xFFFFFFFF)


# A file changed within this long before it was read may change again with the very same
# timestamps (file times come from a coarse clock: a tick of several ms on Linux, 2 s on FAT) and
# size, and the stat cache would then keep the old content forever: git's "racy clean" problem.
# Such entries get a smudged mtime so the next snapshot reads them again (libgit2's diff then
# refreshes the stat data of the ones that did not change: DiffOption.UPDATE_INDEX).
RACY_NS = 3_000_000_000


class _LiteStat(NamedTuple):
    """The lstat fields an index entry keeps, packed into 64 bytes while the first snapshot's
    entries wait for its pack."""
    st_mode: int
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int
    st_dev: int
    st_ino: int
    st_uid: int
    st_gid: int

    @staticmethod
    def pack(st) -> bytes:
        m = 0xFFFFFFFFFFFFFFFF  # the index keeps 32 bits of these anyway (Windows inodes can be 128-bit)
        return _LITE.pack(st.st_mode, st.st_size & m, st.st_mtime_ns, st.st_ctime_ns, st.st_dev & m, st.st_ino & m,
                          st.st_uid & m, st.st_gid & m)

    @staticmethod
    def unpack(b) -> _LiteStat:
        return _LiteStat(*_LITE.unpack(b))

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9


_LITE = struct.Struct("<QQqqQQQQ")
_PENDING = 20 + _LITE.size  # a pending record: raw blob id, packed stat


def _index_add(idx: pygit2.Index, rel: str, oid: pygit2.Oid, st) -> bool:
    """Add an entry with the stat data of `st` (pygit2's IndexEntry carries none, and zeros
    would make every later save read the file again). True when it was added racily clean
    (smudged: _native.index_add's rule)."""
    fence = getattr(_FENCE, "ns", None)
    _native.index_add(idx, rel, oid, _git_mode(st), st, RACY_NS, fence)
    if not _native.has(_native.INDEX_STAT):
        return False  # (no stat data at all: every diff reads it; nothing to carry)
    newest = max(st.st_mtime_ns, st.st_ctime_ns)
    return newest >= fence if fence is not None else time.time_ns() - newest < RACY_NS


_FENCE = threading.local()


@contextlib.contextmanager
def fenced(fence_ns: int | None):
    """Snapshots taken in this block (on this thread) judge "racily clean" entries against
    `fence_ns`, a file-system timestamp taken before they read anything (restore.fs_fence):
    only a file whose mtime or ctime is not older than it is smudged. A later change of any
    file gets a timestamp >= the fence (the file system's clock does not go back), so an entry
    older than the fence cannot hide one. Without it RACY_NS applies: a restore's snapshot
    smudged every file it had just written, and the next save hashed them all again and
    rewrote the whole index (~35 ms at 50k files)."""
    _FENCE.ns = fence_ns
    try:
        yield
    finally:
        _FENCE.ns = None


_EXPECT = threading.local()


@contextlib.contextmanager
def expecting(base: pygit2.Oid, edits: dict, tree: pygit2.Oid):
    """Snapshots taken in this block (on this thread) that patch `base` with exactly `edits`
    (path -> (blob id, mode), or None: removed) take `tree` as their tree instead of rebuilding
    it with patch_tree: a restore that applied its whole plan knows the result is its target's
    tree (~110 trees read and written again for 100 files in 100 directories). Any other edit
    (a file that did not read back as written, one left out, a path the journal adds) and the
    tree is built as usual."""
    _EXPECT.known = (base, edits, tree)
    try:
        yield
    finally:
        _EXPECT.known = None


class Written:
    """What a restore wrote (restore.apply_plan), for its snapshot after: for each regular file
    the blob id and mode the plan put there and its lstat right after it was put in place
    (wsfs.Writer.write: the inode written, with the write's size and mtime). 32 bytes a file
    in one buffer plus one dict entry (an import writes 50k files: issue 14's memory bound)."""

    _REC = struct.Struct("<QQqq")

    def __init__(self, rows: list):
        self.rows = rows  # (path, blob id, mode), as apply_plan writes them
        self.at: dict[str, int] = {}  # path -> row
        self.stats = bytearray(self._REC.size * len(rows))

    def add(self, i: int, st) -> None:
        self._REC.pack_into(self.stats, i * self._REC.size, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        self.at[self.rows[i][0]] = i

    def __len__(self) -> int:
        return len(self.at)

    def lookup(self, rel: str, st) -> tuple[pygit2.Oid, int] | None:
        """(blob id, mode) when the file at `rel`, as lstat'ed now (`st`), provably still holds
        what the restore wrote: the very stat data it had once in place (inode, size, mtime of
        the write, ctime), the mode planned, and that ctime later than the mtime. The rename
        (or swap) that put the file in place set its ctime after the write, so any write since
        (another process's, even in the same clock tick as the rename) set the mtime to at
        least that ctime, and any change at all moves the ctime (a write whose mtime was put
        back too). Where the file system's clock did not tick between the write and the rename
        (coarse timestamps) nothing is proven: None, and the file is read as any other. The
        temporary before the rename is wsfs's to check (its stat data, as before)."""
        i = self.at.get(rel)
        if i is None:
            return None
        ino, size, mtime, ctime = self._REC.unpack_from(self.stats, i * self._REC.size)
        _rel, oid, mode = self.rows[i]
        if (st.st_ino != ino or st.st_size != size or st.st_mtime_ns != mtime or st.st_ctime_ns != ctime
                or ctime <= mtime or not stat_mod.S_ISREG(st.st_mode) or _git_mode(st) != int(mode)):
            return None
        return oid, int(mode)


_TRUST = threading.local()


@contextlib.contextmanager
def trusting(written: Written | None):
    """Snapshots taken in this block (on this thread) take each file `written` names, if it
    provably still holds what was written (Written.lookup), with the id written, without
    reading it again: the path and mode policy still judge it, its content is the store's blob
    already (a restore's target, an import's tree). Stat data are the lstat's of the snapshot
    itself, smudged against its fence as any entry's."""
    _TRUST.written = written
    try:
        yield
    finally:
        _TRUST.written = None


def _ignored(repo: pygit2.Repository, rel: str) -> bool:
    return _native.path_is_ignored(repo, rel)


def dirs_of(paths) -> set[str]:
    """Every directory above the given paths ('a/b/c' -> 'a', 'a/b')."""
    out: set[str] = set()
    for p in paths:
        i = p.rfind("/")
        while i > 0:
            d = p[:i]
            if d in out:
                break
            out.add(d)
            i = p.rfind("/", 0, i)
    return out


def _nested_head(path: str) -> str | None:
    try:
        sub = pygit2.Repository(path, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        return None if sub.head_is_unborn else str(sub.head.target)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def unsaved_paths(repo: pygit2.Repository, tree: pygit2.Tree | None, skip: set[str], limit: int = 50):
    """Paths that differ between `tree` and the workspace, without writing any object.

    Index-vs-workspace uses the stat cache; tree-vs-index is in memory. Paths in `skip` (kept
    out of snapshots: sensitive, credentials, too large) and sensitive names are left out, since
    no save would ever capture them. Returns (paths[:limit], total).
    """
    from pygit2.enums import DiffOption

    from .secrets import sensitive_path

    idx = repo.index
    idx.read(False)
    paths: set[str] = set()
    flags = DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
    for d in idx.diff_to_workdir(flags).deltas:
        p = d.new_file.path or d.old_file.path
        if not p.endswith("/"):  # a trailing slash is a nested repository
            paths.add(p)
    if tree is not None:
        for d in tree.diff_to_index(idx).deltas:
            paths.add(d.new_file.path or d.old_file.path)
    keep = sorted(p for p in paths if p not in skip and sensitive_path(p) is None)
    return keep[:limit], len(keep)


# ---------------------------------------------------------------------------- the store's side
# What every snapshot the engine takes needs around `take`: the task's exclude patterns in the
# store's info/exclude, the large-file hash cache, the change journal, and the left-out lists of
# a partial refresh carried forward.
def of_workspace(store, policy: Policy, exclude, progress=None, journal=None, paths=None,
                 pending: bool = False) -> Snapshot:
    """Snapshot the store's workspace under a task's `exclude` patterns (only `paths`, if given;
    with `pending`, `paths` plus what a trusted change journal names: a complete snapshot)."""
    _sync_excludes(store, exclude, journal)
    policy.large_cache = store.read_json("large-files.json", {})
    snap = _take_journaled(store, policy, progress, journal, paths, pending)
    if any(x.why == "large" for x in snap.left):
        keep = {k: v for k, v in policy.large_cache.items()
                if any(k.startswith(x.path + "\0") for x in snap.left)}
        store.write_json("large-files.json", keep)
    return snap


def _sync_excludes(store, exclude, journal) -> None:
    root = store.workspace
    store_rel = None
    if store.inside_workspace() and store.path.resolve() != root / STORE_DIRNAME:
        store_rel = store.path.resolve().relative_to(root).as_posix()
    text = exclude_file(exclude, store_rel)
    path = store.path / "info" / "exclude"
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = None
    if current == text:
        return
    # no fsync (one a first snapshot paid): a file lost to a crash is found different and
    # rewritten by the next snapshot, before it scans
    atomic_write(path, text.encode(), 0o600, sync=False)
    if journal is not None:  # what is ignored changed: every path may mean something else
        journal.untrust("exclude patterns changed")
    repo = store.reopen()  # libgit2 caches ignore rules per repository handle
    # add_all never drops entries that became ignored (git add -A keeps tracked files),
    # so a task whose patterns exclude more must forget them here.
    idx = repo.index
    idx.read(False)
    gone = [e.path for e in idx if repo.path_is_ignored(e.path)]
    for p in gone:
        idx.remove(p)
    if gone:
        idx.write()


def _take_journaled(store, policy: Policy, progress, journal, paths, pending: bool = False) -> Snapshot:
    """A snapshot of `paths`, or of what the change journal says changed, or of everything.

    `pending` (a restore's snapshot after its writes): `paths` and what the journal names, when
    it is trusted. The journal then hands over the notifications of the restore's own writes
    too, instead of keeping them for the next save, which read every restored file again."""
    if journal is None:
        return take(store.repo, policy, progress, paths)
    complete = paths is None
    recheck = None
    if paths is None:
        refresh = journal.begin(store.path)
    elif pending and journal.trusted:
        named = journal.begin(store.path)  # None: it stopped being trusted; begin() dropped its paths
        refresh = None if named is None else sorted(set(named) | set(paths))
        complete = True
    else:
        refresh = list(paths)
    if complete and refresh is not None:
        # entries earlier journal saves indexed racily clean, now old enough to keep their stat
        # data: a journal save never rescans an unchanged file, so without this every resume's
        # index-to-workdir diff (and any full scan) would hash them again
        recheck = set(journal.due(time.time_ns(), RACY_NS)) - set(refresh)
        refresh = sorted(set(refresh) | recheck) if recheck else refresh
    try:
        snap = take(store.repo, policy, progress, refresh, recheck=recheck)
    except BaseException:
        journal.untrust("a snapshot failed")
        raise
    if refresh is not None and snap.partial:
        left, nested = journal.end(snap, store.path, refresh)
        if complete:  # complete again: what the journal knew plus what was refreshed
            snap.left, snap.nested, snap.partial, snap.scan = left, nested, False, "journal"
    else:
        journal.end(snap, store.path, None)
    return snap


def carry_forward(snap: Snapshot, files: dict, fresh) -> None:
    """After a refresh of `fresh` paths only: the left-out and nested paths it did not look at are
    as the last note (`files`, a commit's `files` record) found them."""
    fresh = set(fresh)

    def stale(p):
        return p in fresh or any(p.startswith(f + "/") for f in fresh)

    snap.left = sorted([Left(**x) for x in files.get("left", []) if not stale(x["path"])] + snap.left,
                       key=lambda x: x.path)
    snap.nested = {**{x["path"]: x.get("head") for x in files.get("nested", []) if not stale(x["path"])},
                   **snap.nested}
