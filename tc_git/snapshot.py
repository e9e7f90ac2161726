"""Workspace -> tree, through the private index used as a stat cache.

libgit2's `git_index_add_all` walks the workspace, compares each file's stat data with the
index entry and only reads and hashes what changed (the callback below sees just those paths),
so a save costs what changed, not what exists. `write_tree()` runs before `index.write()` so the
index keeps its TREE cache extension (the other order makes the next save 4-5x slower).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import pygit2
from pygit2 import ffi
from pygit2.errors import check_error
from pygit2.ffi import C
from pygit2.utils import StrArray

from . import mempack
from .policy import Left, Policy

# libgit2 messages when a file is rewritten (truncated, resized) while it is being read
_RETRYABLE = ("file changed before we could read it", "failed to read file into stream", "index is locked")


def decode_path(raw) -> str:
    return ffi.string(raw).decode("utf-8", "surrogateescape")


@dataclass
class Snapshot:
    tree: pygit2.Oid
    left: list[Left] = field(default_factory=list)  # metadata-only paths
    nested: dict[str, str | None] = field(default_factory=dict)  # nested repo path -> its HEAD
    changed: int = 0  # paths whose index entry the walk added, updated or removed
    seconds: float = 0.0
    partial: bool = False  # only the given paths were refreshed (`left`/`nested` cover just those)

    def note(self, cap: int = 500) -> dict:
        """What the commit's note records about paths that are not file content."""
        left = [x.as_dict() for x in self.left[:cap]]
        out = {"left": left, "nested": [{"path": p, "head": h} for p, h in sorted(self.nested.items())][:cap]}
        if len(self.left) > cap:
            out["left_omitted"] = len(self.left) - cap
        return out


def take(repo: pygit2.Repository, policy: Policy, progress=None, paths=None) -> Snapshot:
    """Bring the private index up to date with the workspace and write its tree.

    The first snapshot (empty private index: every file is new) writes its objects into memory
    and then as one pack (tc_git/mempack.py), on a private handle of the store so the in-memory
    backend goes away with it; later snapshots write the few objects they need as loose files.
    `paths` (workspace paths) refreshes only those entries: after a restore only the paths it
    wrote or deleted can differ from the snapshot taken just before.
    """
    idx = repo.index
    idx.read(False)
    if len(idx) == 0 and mempack.available() and _fits_in_memory(repo.workdir):
        with mempack.bulk_writes(repo) as (work, pack):
            return _take(work, policy, progress, pack)
    if paths:
        try:
            return _update(repo, policy, paths)
        except (pygit2.GitError, OSError, ValueError, TypeError, KeyError):
            pass  # an odd entry (a name pygit2 cannot encode, a file turned directory): walk it all
    return _take(repo, policy, progress, None)


def _fits_in_memory(root: str) -> bool:
    """Whether a first snapshot may hold its objects in memory: the workspace's regular files
    add up to at most TC_MEMPACK_MAX_BYTES (64 MiB). Larger trees write loose objects, so memory
    stays bounded whatever the workspace holds; the walk stops as soon as the budget is spent
    (ignored directories are counted too, except the usual heavy ones)."""
    budget = int(os.environ.get("TC_MEMPACK_MAX_BYTES", 64 << 20))
    skip = {".git", ".checkpoints", "node_modules", ".venv", "venv", "__pycache__"}
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


def _update(repo: pygit2.Repository, policy: Policy, paths) -> Snapshot:
    """Refresh just `paths` in the private index (git_index_add_all walks the whole workspace
    even when given a path list), then write the tree."""
    t0 = time.perf_counter()
    root = repo.workdir
    idx = repo.index
    idx.read(False)
    left: list[Left] = []
    for rel in paths:
        full = os.path.join(root, rel)
        if not os.path.lexists(full):
            if rel in idx:
                idx.remove(rel)
            continue
        verdict = policy.classify(root, rel)
        if verdict is not None:
            left.append(verdict)
            if rel in idx:
                idx.remove(rel)
            continue
        idx.add(rel)  # stats, hashes and writes the blob (links stay links)
    tree = idx.write_tree()
    idx.write()
    return Snapshot(tree, left, {}, len(paths), time.perf_counter() - t0, partial=True)


def _take(repo: pygit2.Repository, policy: Policy, progress, pack) -> Snapshot:
    t0 = time.perf_counter()
    root = repo.workdir
    idx = repo.index
    for attempt in range(4):
        left: list[Left] = []
        nested: dict[str, str | None] = {}
        seen = [0]

        @ffi.callback("git_index_matched_path_cb")
        def on_path(path, _spec, _payload):
            try:
                rel = decode_path(path)
                seen[0] += 1
                if progress and seen[0] % 256 == 0:
                    progress(seen[0], None, f"scanned {seen[0]} changed paths")
                if rel.endswith("/"):  # a directory libgit2 will not descend: nested repo / submodule
                    nested[rel.rstrip("/")] = _nested_head(os.path.join(root, rel))
                    return 1
                if not os.path.lexists(os.path.join(root, rel)):
                    return 0  # deleted: let libgit2 drop the entry
                verdict = policy.classify(root, rel)
                if verdict is not None:
                    left.append(verdict)
                    return 1
                return 0
            except Exception as e:  # never let an exception cross the C boundary
                left.append(Left(decode_path(path), "unreadable", f"check failed: {e}"))
                return 1

        try:
            idx.read(False)
            with StrArray([]) as arr:
                check_error(C.git_index_add_all(idx._index, arr.ptr, 0, on_path, ffi.NULL), io=True)
            break
        except (pygit2.GitError, OSError) as e:
            if attempt == 3 or not any(s in str(e) for s in _RETRYABLE):
                raise
            time.sleep(0.05 * (attempt + 1))
    # A file that was stored before and now holds a credential (or grew past the cap) must
    # leave the tree, not keep its old version silently.
    for item in left:
        if item.path in idx:
            idx.remove(item.path)
    tree = idx.write_tree()
    if pack is not None:
        pack.flush()  # objects on disk before the index that names them
    idx.write()
    return Snapshot(tree, sorted(left, key=lambda x: x.path), nested, seen[0], time.perf_counter() - t0)


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
