"""The full scan without a change journal, on every core: which paths may differ from the index.

libgit2's index-to-workdir diff compares each file's stat data with its index entry: one
`lstat` a file, on one thread. At 50k files ~75 % of its time is in the kernel (the lstat's
path walk, the directory reads; `perf`), so it is bound by one core where `git add -A` uses all
of them (preload-index). This module runs the same diff on each core, each limited to its own
share of the workspace (`_native.diff_paths`: libgit2 skips what is outside a share before it
stats it; the call releases the GIL), and joins the deltas. What libgit2 decides per path (stat
comparison, ignore rules, untracked directories, nested repositories, type changes) is its own,
unchanged: only who walks which directories changes.

Shares: the index's sorted entries give the size of each subtree by bisection (no entry is
materialized). From the root, the walk descends into a child holding most of the entries, and
at the first level without one splits that level's children into two halves of about the same
size; the siblings left behind on the way down (workspace names and index names at those
levels, so a new or a deleted path is in some share) go to the lighter half.

UPDATE_INDEX (the diff refreshes the stat data of a file it finds touched but unchanged, and
writes the index) cannot run on two threads over one index. The shares run without it, and
libgit2's counters tell whether a share computed an id it did not report (a file hashed and
found unchanged): that share is diffed again with UPDATE_INDEX after the threads are done, so
such a file costs one hash once, as before.

Serial (the plain diff) when: one core, fewer than MIN_ENTRIES entries (5000), no native path
(TC_NATIVE=off), or no split worth having.
"""
from __future__ import annotations

import os
import threading
import weakref

import pygit2
from pygit2.enums import DeltaStatus, DiffOption

from ..storage import _native

MIN_ENTRIES = 5000
_ZERO = pygit2.Oid(raw=bytes(20))


def parallel_ok(n_entries: int) -> bool:
    return (os.cpu_count() or 1) >= 2 and n_entries >= MIN_ENTRIES and _native.has(_native.DIFF_SCAN)


def changed_paths(repo: pygit2.Repository, idx: pygit2.Index, flags: DiffOption, unwritten: bool = False) -> list[str]:
    """The paths of every delta of the index-to-workdir diff (old and new path), as
    `idx.diff_to_workdir(flags)` lists them; raises what it raises. `unwritten`: the index in
    memory changed since it was last written (handles.py defers that write)."""
    shares = None
    if parallel_ok(len(idx)):
        shares = split(repo.workdir, _native.index_path_reader(idx), len(idx))
    if shares is None:
        return _paths(idx.diff_to_workdir(flags))
    update = bool(flags & DiffOption.UPDATE_INDEX)
    flags &= ~DiffOption.UPDATE_INDEX
    results: list = [None, None]

    def run(i: int, handle: pygit2.Repository) -> None:
        try:
            results[i] = _native.diff_paths(handle, idx, flags, shares[i])
        except BaseException as e:  # raised again on the calling thread
            results[i] = e

    t = threading.Thread(target=run, args=(1, _peer(repo)), daemon=True)
    t.start()
    run(0, repo)
    t.join()
    out: list[str] = []
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            raise r
        diff, _stats, ids = r
        if update and not unwritten and ids > sum(1 for d in diff.deltas if d.new_file.id != _ZERO):
            # a file hashed and found unchanged: refresh its stat data as the serial diff would.
            # Not while the index is unwritten: libgit2 then judges every entry newer than the
            # index file's last write racy (the last saves' files) and hashes it whatever its
            # stat data says, so the second pass over the share refreshed nothing (it doubled a
            # 100-file save's scan at 10k files in the MCP server; save's path, issue 14); files
            # touched meanwhile are refreshed by the first scan after the write
            diff, _stats, _ids = _native.diff_paths(repo, idx, flags | DiffOption.UPDATE_INDEX, shares[i])
        out += _paths(diff)
    return out


def _paths(diff) -> list[str]:
    out = []
    for d in diff.deltas:
        if d.status == DeltaStatus.UNMODIFIED:
            continue
        out.append(d.old_file.path)
        if d.new_file.path != d.old_file.path:
            out.append(d.new_file.path)
    return out


# A second handle on the same store for the other thread: libgit2 objects are not to be used by
# two threads at once (the index is only read by both). It lives as long as the caller's handle
# and no longer: a new handle (the store reopened it, e.g. for new ignore rules) gets a new peer.
_PEERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PEERS_LOCK = threading.Lock()


def _peer(repo: pygit2.Repository) -> pygit2.Repository:
    with _PEERS_LOCK:
        peer = _PEERS.get(repo)
        if peer is None or peer.workdir != repo.workdir:
            peer = pygit2.Repository(repo.path, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            peer.workdir = repo.workdir
            _PEERS[repo] = peer
        return peer


def split(root: str, path_at, n: int, max_depth: int = 6) -> tuple[list[bytes], list[bytes]] | None:
    """Two lists of workspace paths (raw) that together hold every path of the index and of the
    workspace, each about half of the index's entries; None when there is no such split."""
    if n == 0:
        return None

    def lower_bound(key: bytes, lo: int = 0, hi: int = n) -> int:
        while lo < hi:
            mid = (lo + hi) // 2
            if path_at(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # Shares are names: a file's name, or a directory's with a trailing "/" (libgit2 walks its
    # list of names in its own order, where "a/" sorts after "a-x" and "a.b": a bare "a" before
    # them loses the entries under a/ on the index side).
    rest: list[tuple[list[bytes], int]] = []  # siblings left on the way down: (names, entries)
    prefix, lo, hi = b"", 0, n
    for _depth in range(max_depth):
        # bare name -> entries under it, and the forms it has here (a file that became a
        # directory has both: they stay in one share, as the one diff sees them together)
        weight: dict[bytes, int] = {}
        forms: dict[bytes, set[bytes]] = {}
        i = lo
        while i < hi:  # the index's names at this level, each subtree skipped by bisection
            name = path_at(i)[len(prefix):]
            slash = name.find(b"/")
            if slash < 0:
                bare, k = name, 1
                i += 1
            else:
                bare = name[:slash]
                j = lower_bound(prefix + bare + b"0", i, hi)  # b"0" follows b"/": past bare/...
                k, i = j - i, j
            weight[bare] = weight.get(bare, 0) + k
            forms.setdefault(bare, set()).add(bare + b"/" if slash >= 0 else bare)
            if len(weight) > 4096:
                return None  # a huge flat level: not worth listing here
        try:  # the workspace's names at this level: a new file or directory belongs to a share
            with os.scandir(os.fsencode(os.path.join(root, os.fsdecode(prefix)))) as it:
                for e in it:
                    weight.setdefault(e.name, 1)
                    forms.setdefault(e.name, set()).add(e.name + b"/" if e.is_dir(follow_symlinks=False) else e.name)
        except OSError:
            return None
        total = hi - lo
        big = max(weight, key=weight.__getitem__) if weight else None
        if big is not None and forms[big] == {big + b"/"} and weight[big] * 3 > total * 2 and weight[big] > 1:
            # most of it is under one directory: go down, the others stay behind
            rest += [([prefix + f for f in forms[c]], k) for c, k in weight.items() if c != big]
            prefix = prefix + big + b"/"
            lo = lower_bound(prefix, lo, hi)
            hi = lower_bound(prefix[:-1] + b"0", lo, hi)
            continue
        groups: tuple[list[bytes], list[bytes]] = ([], [])
        load = [0, sum(k for _p, k in rest)]
        for names, _k in rest:
            groups[1].extend(names)
        for c, k in sorted(weight.items(), key=lambda x: -x[1]):
            g = 0 if load[0] <= load[1] else 1
            groups[g].extend(prefix + f for f in forms[c])
            load[g] += k
        if not groups[0] or not groups[1] or min(load) * 5 < n:
            return None  # one side would do (nearly) everything
        return groups
    return None
